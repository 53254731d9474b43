/* kernels/tensor_ref.h: what the files of the plain-C twins share beyond
 * the kernel layer's floor (base.h): one query's softmax, which the
 * attention twins (tensor_ref.c) and the decode step's (tensor_decode.c)
 * both run. */
#ifndef KERNELS_TENSOR_REF_H
#define KERNELS_TENSOR_REF_H
#include "kernels/base.h"

/* One query of one head against keys 0..nk-1: fills s [nk] with the
 * probabilities, returns the log-sum-exp of the scaled scores. */
float softmax_row_ref(float *s /* [nk] */, const float *q /* [hs] */,
                      const float *k0 /* key 0's [hs], rows ld apart */, size_t ld, int nk,
                      int hs);

#endif
