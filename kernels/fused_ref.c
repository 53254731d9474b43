/* kernels/fused_ref.c: the twins a first read skips: the fused ops the
 * compiler's passes make (compiler/fuse.c), each stated as the unfused
 * twins it stands for, and attention with dropout on its probabilities
 * (the attention twins of tensor_ref.c, given the mask). */
#include "kernels/tensor_ref.h"
#include <stddef.h>

/* The MLP's backward through ReLU in one matmul: c = (a b) where gate > 0. */
void k_matmul_gated_ref(float *c /* [n,q] */, const float *a /* [n,p] */,
                        const float *b /* [p,q] */, const float *gate /* [n,q] */, int n, int p,
                        int q)
{
    k_matmul_ref(c, a, b, NULL, n, p, q);
    for (size_t i = 0; i < (size_t)n * q; i++)
        c[i] = gate[i] > 0 ? c[i] : 0.0f;
}

/* The loss and its gradient from one read of the logits. */
void k_xent_grad_ref(float *loss /* [1] */, float *dlogits /* [n,v] */,
                     const float *logits /* [n,v] */, const int32_t *targets /* [n] */,
                     const float *dloss /* [1] */, int n, int v, int seg)
{
    k_xent_ref(loss, logits, targets, n, v, seg);
    k_xent_bwd_ref(dlogits, logits, targets, dloss, n, v);
}

/* The attention twins with the mask: dropout is plain C (kernels.h). */
void k_attention_drop(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                      const float *qkv /* [B,T,3C] */, const int32_t *rows /* [B*T] */,
                      const int32_t *key /* [2] */, int B, int T, int C, int H, long site,
                      float p)
{
    struct drop_mask dm = {key, rows, site, p};
    attention_masked_ref(out, lse, qkv, B, T, C, H, &dm);
}

void k_attention_drop_bwd(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                          const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                          const float *lse /* [B,H,T] */, const int32_t *rows /* [B*T] */,
                          const int32_t *key /* [2] */, int B, int T, int C, int H, long site,
                          float p)
{
    struct drop_mask dm = {key, rows, site, p};
    attention_bwd_masked_ref(dqkv, dout, qkv, out, lse, B, T, C, H, &dm);
}
