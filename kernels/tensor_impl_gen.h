/* kernels/tensor_impl_gen.h: the kernel types and struct kernels
 * (kernels/tensor_impl.h includes it). Generated from kernels/kernels.def by
 * gen/gen.c (`make gen`): edit that, not this file, then run make gen; make
 * test's gen suite fails while this file is stale. */
#ifndef KERNELS_TENSOR_IMPL_GEN_H
#define KERNELS_TENSOR_IMPL_GEN_H
#include <stddef.h>
#include <stdint.h>

/* Each row's kernel type, name_kernel: a function of the row's
 * parameters. */

/* c = epilogue(a @ b + bias): relu, then 0 where gate <= 0, then + r1, + r2 */
typedef void matmul_ex_kernel(float *c /* [n,q] */, const float *a /* [n,p] */,
                              const float *b /* [p,q] */, const float *bias /* [q] or NULL */,
                              const float *r1 /* [n,q] or NULL */,
                              const float *r2 /* [n,q] or NULL */,
                              const float *gate /* [n,q] or NULL */, int relu, int n, int p, int q);

typedef void tree_sum_kernel(float *out /* [len] */, const float *const *parts /* m x [len] */,
                             int m, size_t len);

/* c = a^T @ b by the tree over leaves of seg rows; kind: enum mm_kind */
typedef void matmul_tn_seg_kernel(float *c /* [n,q] */, const float *a /* [p,n] */,
                                  const float *b /* [p,q] */, int n, int p, int q, int seg,
                                  int kind);

/* kind: enum mm_kind; bf16 runs its products on the bf16 matmul's tiles */
typedef void attention_kernel(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                              const float *qkv /* [B,T,3C] */, int B, int T, int C, int H,
                              int kind);

typedef void attention_bwd_kernel(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                                  const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                                  const float *lse /* [B,H,T] */, int B, int T, int C, int H,
                                  int kind);

typedef void attention_step_kernel(float *out /* [nb,C] */, float *kc /* [nb,tmax,C] */,
                                   float *vc /* [nb,tmax,C] */, const float *qkv /* [nb,3C] */,
                                   int nb, int pos, int tmax, int C, int H);

typedef void attention_last_kernel(float *out /* [B,C] */, const float *qkv /* [B,T,3C] */, int B,
                                   int T, int C, int H);

typedef void layernorm_kernel(float *y /* [n,c] */, float *mean /* [n] */, float *rstd /* [n] */,
                              const float *x /* [n,c] */, const float *w /* [c] */,
                              const float *b /* [c] */, int n, int c);

/* dx = (r1 + r2) + the layernorm's dx (r2 or both NULL for fewer terms) */
typedef void layernorm_bwd_seg_kernel(float *dx /* [n,c] */, float *dw /* [c] */,
                                      float *db /* [c] */, const float *dy /* [n,c] */,
                                      const float *x /* [n,c] */, const float *w /* [c] */,
                                      const float *mean /* [n] */, const float *rstd /* [n] */,
                                      const float *r1 /* [n,c] or NULL */,
                                      const float *r2 /* [n,c] or NULL */, int n, int c, int seg);

typedef void xent_kernel(float *loss /* [1] */, const float *logits /* [n,v] */,
                         const int32_t *targets /* [n] */, int n, int v, int seg);

/* loss [1] or NULL: the forward's loss too, from the same pass */
typedef void xent_bwd_kernel(float *dlogits /* [n,v] */, float *loss /* [1] or NULL */,
                             const float *logits /* [n,v] */, const int32_t *targets /* [n] */,
                             const float *dloss /* [1] */, int n, int v, int seg);

typedef void add_kernel(float *y /* [n] */, const float *a /* [n] */, const float *b /* [n] */,
                        size_t n);

typedef void add_n_kernel(float *y /* [n] */, const float *const *x /* m x [n] */, int m, size_t n);

typedef void relu_kernel(float *y /* [n] */, const float *x /* [n] */, size_t n);

typedef void relu_bwd_kernel(float *dx /* [n] */, const float *dy /* [n] */,
                             const float *y /* [n] */, size_t n);

/* y = x sigmoid(2u) = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3):
 * GPT-2's GELU; dx = dy times its slope at x. Twins and kernels give the
 * same bits (kernels/gelu.h says how). */
typedef void gelu_kernel(float *y /* [n] */, const float *x /* [n] */, size_t n);

typedef void gelu_bwd_kernel(float *dx /* [n] */, const float *dy /* [n] */,
                             const float *x /* [n] */, size_t n);

typedef void sum_rows_seg_kernel(float *out /* [q] */, const float *x /* [n,q] */, int n, int q,
                                 int seg);

typedef void transpose_kernel(float *out /* [s,r] */, const float *in /* [r,s] */, int r, int s);

typedef void embed_kernel(float *y /* [n,c] */, const int32_t *idx /* [n] */,
                          const float *table /* [c,v] */, int n, int c, int v);

typedef void embed_bwd_seg_kernel(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                                  const float *dy /* [n,c] */, int n, int c, int v, int seg);

typedef void adam_kernel(float *p /* [n] */, float *m /* [n] */, float *v /* [n] */,
                         const float *g /* [n] */, size_t n, float lr, float b1, float b2,
                         float eps, int t);

typedef void round_bf16_kernel(float *y /* [n] */, const float *x /* [n] */, size_t n);

/* matmul_ex on bf16 operands, the matrix unit emulated (every backend) */
typedef void matmul_bf16_emu_kernel(float *c /* [n,q] */, const float *a /* [n,p] */,
                                    const float *b /* [p,q] */, const float *bias /* [q] or NULL */,
                                    const float *r1 /* [n,q] or NULL */,
                                    const float *r2 /* [n,q] or NULL */,
                                    const float *gate /* [n,q] or NULL */, int relu, int n, int p,
                                    int q);

/* One backend's kernels: its name ("avx512", ...: isa_name()), then a
 * pointer per row of kernels.def, in its order (tensor.c fills them). */
struct kernels {
    const char *name;
    matmul_ex_kernel *matmul_ex;
    tree_sum_kernel *tree_sum;
    matmul_tn_seg_kernel *matmul_tn_seg;
    attention_kernel *attention;
    attention_bwd_kernel *attention_bwd;
    attention_step_kernel *attention_step;
    attention_last_kernel *attention_last;
    layernorm_kernel *layernorm;
    layernorm_bwd_seg_kernel *layernorm_bwd_seg;
    xent_kernel *xent;
    xent_bwd_kernel *xent_bwd;
    add_kernel *add;
    add_n_kernel *add_n;
    relu_kernel *relu;
    relu_bwd_kernel *relu_bwd;
    gelu_kernel *gelu;
    gelu_bwd_kernel *gelu_bwd;
    sum_rows_seg_kernel *sum_rows_seg;
    transpose_kernel *transpose;
    embed_kernel *embed;
    embed_bwd_seg_kernel *embed_bwd_seg;
    adam_kernel *adam;
    round_bf16_kernel *round_bf16;
    matmul_bf16_emu_kernel *matmul_bf16_emu;
    matmul_bf16_emu_kernel *matmul_bf16_native; /* NULL where the backend has none */
};

#endif
