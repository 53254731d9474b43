/* kernels/entry_gen.c: the entry points of kernels.def's KERNEL rows, each a
 * call of the current backend's kernel with its arguments as they came (the
 * KERNEL_FIXED rows' are in kernels/entry.c). Generated from
 * kernels/kernels.def by gen/gen.c (`make gen`): edit that, not this file,
 * then run make gen; make test's gen suite fails while this file is stale. */
#include "kernels/tensor_impl.h"

void k_tree_sum(float *out /* [len] */, const float *const *parts /* m x [len] */, int m,
                size_t len)
{
    kernels_now()->tree_sum(out, parts, m, len);
}

void k_attention_step(float *out /* [nb,C] */, float *kc /* [nb,tmax,C] */,
                      float *vc /* [nb,tmax,C] */, const float *qkv /* [nb,3C] */, int nb, int pos,
                      int tmax, int C, int H)
{
    kernels_now()->attention_step(out, kc, vc, qkv, nb, pos, tmax, C, H);
}

void k_attention_last(float *out /* [B,C] */, const float *qkv /* [B,T,3C] */, int B, int T, int C,
                      int H)
{
    kernels_now()->attention_last(out, qkv, B, T, C, H);
}

void k_layernorm(float *y /* [n,c] */, float *mean /* [n] */, float *rstd /* [n] */,
                 const float *x /* [n,c] */, const float *w /* [c] */, const float *b /* [c] */,
                 int n, int c)
{
    kernels_now()->layernorm(y, mean, rstd, x, w, b, n, c);
}

void k_xent(float *loss /* [1] */, const float *logits /* [n,v] */,
            const int32_t *targets /* [n] */, int n, int v, int seg)
{
    kernels_now()->xent(loss, logits, targets, n, v, seg);
}

void k_add(float *y /* [n] */, const float *a /* [n] */, const float *b /* [n] */, size_t n)
{
    kernels_now()->add(y, a, b, n);
}

void k_add_n(float *y /* [n] */, const float *const *x /* m x [n] */, int m, size_t n)
{
    kernels_now()->add_n(y, x, m, n);
}

void k_relu(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    kernels_now()->relu(y, x, n);
}

void k_relu_bwd(float *dx /* [n] */, const float *dy /* [n] */, const float *y /* [n] */, size_t n)
{
    kernels_now()->relu_bwd(dx, dy, y, n);
}

void k_gelu(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    kernels_now()->gelu(y, x, n);
}

void k_gelu_bwd(float *dx /* [n] */, const float *dy /* [n] */, const float *x /* [n] */, size_t n)
{
    kernels_now()->gelu_bwd(dx, dy, x, n);
}

void k_transpose(float *out /* [s,r] */, const float *in /* [r,s] */, int r, int s)
{
    kernels_now()->transpose(out, in, r, s);
}

void k_embed(float *y /* [n,c] */, const int32_t *idx /* [n] */, const float *table /* [c,v] */,
             int n, int c, int v)
{
    kernels_now()->embed(y, idx, table, n, c, v);
}

void k_adam(float *p /* [n] */, float *m /* [n] */, float *v /* [n] */, const float *g /* [n] */,
            size_t n, float lr, float b1, float b2, float eps, int t)
{
    kernels_now()->adam(p, m, v, g, n, lr, b1, b2, eps, t);
}

void k_round_bf16(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    kernels_now()->round_bf16(y, x, n);
}
