/* kernels/tensor_ref.h: what the files of the plain-C twins share beyond
 * the kernel layer's floor (base.h): one query's softmax, which the
 * attention twins (tensor_ref.c) and the decode step's (tensor_decode.c)
 * both run; the attention twins with a dropout mask, which
 * k_attention_ref and fused_ref.c's k_attention_drop both call; and the
 * mask itself (dropout.c). */
#ifndef KERNELS_TENSOR_REF_H
#define KERNELS_TENSOR_REF_H
#include "kernels/base.h"

/* One query of one head against keys 0..nk-1: fills s [nk] with the
 * probabilities, returns the log-sum-exp of the scaled scores. */
float softmax_row_ref(float *s /* [nk] */, const float *q /* [hs] */,
                      const float *k0 /* key 0's [hs], rows ld apart */, size_t ld, int nk,
                      int hs);

/* Dropout on the attention probabilities, or none when NULL. */
struct drop_mask {
    const int32_t *key, *rows; /* [2], [B*T] */
    long site;
    float p;
};

/* What survives of P_ij, head h, query row `row`: 1/(1-p) or 0; 1 without
 * dropout (so the products that use it keep their bits). */
float kept_scale(const struct drop_mask *dm, int32_t row, int h, int T, int j);

/* k_attention_ref and k_attention_bwd_ref with the mask dm (or NULL). */
void attention_masked_ref(float *out, float *lse, const float *qkv, int B, int T, int C, int H,
                          const struct drop_mask *dm);
void attention_bwd_masked_ref(float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int T, int C, int H,
                              const struct drop_mask *dm);

#endif
