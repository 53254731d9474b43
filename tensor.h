/* tensor.h: the compute kernels, as the layers above them see them.
 *
 * The device (xla_sim.c, device/) and everything above it include this
 * header for the kernels: the ISA choice, the k_* entry points and their
 * plain-C twins (k_*_ref). All of them are declared, with what each
 * computes, in kernels/kernels.h, the kernel layer's interface, which this
 * header includes; read that one.
 *
 * Two files sit behind those declarations, one layer above the other:
 *   tensor.c   the vector kernels, written once over kernels/vec.h and
 *              compiled once per backend (AVX-512, AVX2, NEON, plain C);
 *              each compilation registers its table of kernels with
 *              kernels/isa.c before main() runs, and defines nothing
 *              else that another file calls;
 *   kernels/   the entry points (entry.c; entry_gen.c, which make gen
 *              writes from kernels.def), which call the current
 *              backend's table (isa.c), the twins and the floor they
 *              share (base.c). Nothing in kernels/
 *              includes this header or calls into tensor.c: the tables
 *              come to it by registration, so the arrow points down.
 */
#ifndef TENSOR_H
#define TENSOR_H
#include "kernels/kernels.h"
#endif
