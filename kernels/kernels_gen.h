/* kernels/kernels_gen.h: the entry points of kernels.def's KERNEL rows and
 * their twins (kernels/kernels.h includes it). Generated from
 * kernels/kernels.def by gen/gen.c (`make gen`): edit that, not this file,
 * then run make gen; make test's gen suite fails while this file is stale. */
#ifndef KERNELS_KERNELS_GEN_H
#define KERNELS_KERNELS_GEN_H
#include <stddef.h>
#include <stdint.h>

/* Each KERNEL row's entry point k_name (kernels/entry_gen.c) and its
 * plain-C twin k_name_ref, both with the row's parameters. */
void k_tree_sum(float *out /* [len] */, const float *const *parts /* m x [len] */, int m,
                size_t len);
void k_tree_sum_ref(float *out /* [len] */, const float *const *parts /* m x [len] */, int m,
                    size_t len);
void k_attention_step(float *out /* [nb,C] */, float *kc /* [nb,tmax,C] */,
                      float *vc /* [nb,tmax,C] */, const float *qkv /* [nb,3C] */, int nb, int pos,
                      int tmax, int C, int H);
void k_attention_step_ref(float *out /* [nb,C] */, float *kc /* [nb,tmax,C] */,
                          float *vc /* [nb,tmax,C] */, const float *qkv /* [nb,3C] */, int nb,
                          int pos, int tmax, int C, int H);
void k_attention_last(float *out /* [B,C] */, const float *qkv /* [B,T,3C] */, int B, int T, int C,
                      int H);
void k_attention_last_ref(float *out /* [B,C] */, const float *qkv /* [B,T,3C] */, int B, int T,
                          int C, int H);
void k_layernorm(float *y /* [n,c] */, float *mean /* [n] */, float *rstd /* [n] */,
                 const float *x /* [n,c] */, const float *w /* [c] */, const float *b /* [c] */,
                 int n, int c);
void k_layernorm_ref(float *y /* [n,c] */, float *mean /* [n] */, float *rstd /* [n] */,
                     const float *x /* [n,c] */, const float *w /* [c] */, const float *b /* [c] */,
                     int n, int c);
void k_xent(float *loss /* [1] */, const float *logits /* [n,v] */,
            const int32_t *targets /* [n] */, int n, int v, int seg);
void k_xent_ref(float *loss /* [1] */, const float *logits /* [n,v] */,
                const int32_t *targets /* [n] */, int n, int v, int seg);
void k_add(float *y /* [n] */, const float *a /* [n] */, const float *b /* [n] */, size_t n);
void k_add_ref(float *y /* [n] */, const float *a /* [n] */, const float *b /* [n] */, size_t n);
void k_add_n(float *y /* [n] */, const float *const *x /* m x [n] */, int m, size_t n);
void k_add_n_ref(float *y /* [n] */, const float *const *x /* m x [n] */, int m, size_t n);
void k_relu(float *y /* [n] */, const float *x /* [n] */, size_t n);
void k_relu_ref(float *y /* [n] */, const float *x /* [n] */, size_t n);
void k_relu_bwd(float *dx /* [n] */, const float *dy /* [n] */, const float *y /* [n] */, size_t n);
void k_relu_bwd_ref(float *dx /* [n] */, const float *dy /* [n] */, const float *y /* [n] */,
                    size_t n);
void k_gelu(float *y /* [n] */, const float *x /* [n] */, size_t n);
void k_gelu_ref(float *y /* [n] */, const float *x /* [n] */, size_t n);
void k_gelu_bwd(float *dx /* [n] */, const float *dy /* [n] */, const float *x /* [n] */, size_t n);
void k_gelu_bwd_ref(float *dx /* [n] */, const float *dy /* [n] */, const float *x /* [n] */,
                    size_t n);
void k_transpose(float *out /* [s,r] */, const float *in /* [r,s] */, int r, int s);
void k_transpose_ref(float *out /* [s,r] */, const float *in /* [r,s] */, int r, int s);
void k_embed(float *y /* [n,c] */, const int32_t *idx /* [n] */, const float *table /* [c,v] */,
             int n, int c, int v);
void k_embed_ref(float *y /* [n,c] */, const int32_t *idx /* [n] */, const float *table /* [c,v] */,
                 int n, int c, int v);
void k_adam(float *p /* [n] */, float *m /* [n] */, float *v /* [n] */, const float *g /* [n] */,
            size_t n, float lr, float b1, float b2, float eps, int t);
void k_adam_ref(float *p /* [n] */, float *m /* [n] */, float *v /* [n] */,
                const float *g /* [n] */, size_t n, float lr, float b1, float b2, float eps, int t);
void k_round_bf16(float *y /* [n] */, const float *x /* [n] */, size_t n);
void k_round_bf16_ref(float *y /* [n] */, const float *x /* [n] */, size_t n);

#endif
