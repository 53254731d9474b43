/* tensor_impl.h: the kernel table, which the backends of tensor.c fill
 * and register and the entry points (entry.c) call through; no one else
 * includes it.
 *
 *   tensor.c      the kernels, written once over the vector layer (vec.h)
 *                 and compiled once per backend; each compilation fills
 *                 one `struct kernels` table and hands it to
 *                 kernels_register() before main() runs.
 *   isa.c         keeps the registered tables, and says which runs:
 *                 kernels_now().
 *   entry.c       the k_* entry points of kernels.h, each a call through
 *                 kernels_now() (and entry_gen.c, those generated).
 *
 * The tables come up by registration, not by name, so that kernels/
 * names nothing of tensor.c, the layer above it.
 *
 * The tables of all backends compute the same bits. The kernels and what
 * each is called with are listed once, in kernels.def, from which make gen
 * writes the table's type, the entry points that pass their arguments
 * through (entry_gen.c) and each backend's rows. */
#ifndef TENSOR_IMPL_H
#define TENSOR_IMPL_H
#include "kernels/base.h"

/* Which arithmetic a weight-gradient matmul or attention runs: fp32, or
 * bf16 operands emulated or on vdpbf16ps (the same bits). */
enum mm_kind { MM_FP32, MM_BF16_EMU, MM_BF16_NATIVE };

/* Each row of kernels.def gives a type, e.g. matmul_ex_kernel: a function
 * taking the row's parameters; and `struct kernels`, one backend's table:
 * its name ("avx512", ...), a pointer per row, and vdpbf16ps's matmul
 * (matmul_bf16_emu's arguments and bits), NULL where the instruction
 * cannot run. gen/gen.c writes them from kernels.def (make gen). */
#include "kernels/tensor_impl_gen.h"

/* A backend's table, k->name its path ("avx2"; isa_name()). Called once
 * per backend, from a constructor of tensor.c, before main(); an unknown
 * name is a build error reported at start. */
void kernels_register(const struct kernels *k);

/* The table of the current path (isa.c). */
const struct kernels *kernels_now(void);

#endif
