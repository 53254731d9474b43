/* kernels/tensor_ref.h: what the files of the plain-C twins share beyond
 * the kernel layer's floor (base.h): a block's sum over rows and the
 * layernorm's backward for any reduction, which the tree's twins
 * (tensor_seg.c) run on their leaves; and the attention twins with a
 * dropout mask (kernels/dropout.h), which k_attention_ref and fused_ref.c's
 * k_attention_drop both call. */
#ifndef KERNELS_TENSOR_REF_H
#define KERNELS_TENSOR_REF_H
#include "kernels/base.h"
#include "kernels/dropout.h"

/* Rows [i0, i1) of x summed in order from zero: a block of
 * k_sum_rows_ref, a leaf of k_sum_rows_seg_ref (tensor_seg.c). */
void sum_rows_leaf_ref(float *out /* [q] */, const float *x /* [n,q] */, int i0, int i1, int q);

/* The layernorm's backward with dw, db by ROW_BLOCK blocks summed in order
 * (seg < 0) or by leaves of seg rows and the tree (seg 0: one leaf), dx
 * plus the residuals r1 + r2 when present (k_layernorm_bwd_res). */
void layernorm_bwd_any_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, const float *mean, const float *rstd, const float *r1,
                           const float *r2, int n, int c, int seg);

/* k_attention_ref and k_attention_bwd_ref with the mask dm (or NULL). */
void attention_masked_ref(float *out, float *lse, const float *qkv, int B, int T, int C, int H,
                          const struct drop_mask *dm);
void attention_bwd_masked_ref(float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int T, int C, int H,
                              const struct drop_mask *dm);

#endif
