/* tensor_impl.h: what the two halves of the kernel layer share, and no one
 * else includes.
 *
 *   tensor_ref.c  the contract: the plain-C twins (*_ref) of every kernel,
 *                 the bf16 scalar model, ISA dispatch and the k_* entry
 *                 points of tensor.h. Compiled once.
 *   tensor.c      the kernels, written once over the vector layer (vec.h)
 *                 and compiled once per backend; each compilation fills
 *                 one `struct kernels` table (kernels_avx512, kernels_avx2,
 *                 kernels_neon, kernels_scalar).
 *
 * A k_* entry point calls the table of the current path (isa_get()); the
 * tables of all backends compute the same bits. */
#ifndef TENSOR_IMPL_H
#define TENSOR_IMPL_H
#include "tensor.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Below this much work (multiply-adds or elements), waking a second thread
 * costs more than it saves; single-token decoding lives down there. */
#define PAR_WORK 16384L

/* Rows per partial sum in reductions over rows. A constant, never derived
 * from the thread count, so the summation tree is always the same. */
#define ROW_BLOCK 64

/* log2(e) and ln(2) as floats: the attention softmaxes work in base 2. */
#define LOG2E 1.44269504f
#define LN2 0.693147182f

/* LayerNorm's epsilon (PyTorch's default). */
#define LN_EPS 1e-5f

/* Cache-line aligned, so threads writing neighbouring slices of one
 * scratch buffer never share a line. */
static inline void *kmalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64 * !bytes);
    if (!p) {
        fprintf(stderr, "gpt: out of memory (%zu bytes of kernel scratch)\n", bytes);
        exit(1);
    }
    return p;
}

static inline int min_int(int a, int b) { return a < b ? a : b; }
static inline int round16(int x) { return (x + 15) / 16 * 16; }

/* This thread's contiguous share [*i0, *i1) of n items. Which thread
 * computes an item never changes how it is computed. */
static inline void my_share(int n, int *i0, int *i1)
{
    int nth = omp_get_num_threads(), me = omp_get_thread_num();
    *i0 = (int)((long)n * me / nth);
    *i1 = (int)((long)n * (me + 1) / nth);
}

/* ---- leaves and the tree (the rule is stated in tensor.h) ---- */

/* Number of leaves of seg rows over n rows; seg < 1 means one leaf. */
static inline int leaf_count(int n, int seg)
{
    if (n <= 0)
        return 0;
    return seg < 1 ? 1 : (int)(((long)n + seg - 1) / seg);
}

/* Leaf l's rows are [leaf_lo, leaf_hi). */
static inline int leaf_lo(int l, int n, int seg)
{
    (void)n;
    return seg < 1 ? 0 : (int)((long)l * seg);
}

static inline int leaf_hi(int l, int n, int seg)
{
    long hi = seg < 1 ? n : ((long)l + 1) * seg;
    return hi < n ? (int)hi : n;
}

/* Levels of a tree over m leaves: ceil(log2 m), 0 for m <= 1. A subtree
 * evaluated with one scratch array per level for its right children
 * needs this many scratch arrays. */
static inline int tree_depth(int m)
{
    int d = 0;
    while (d < 31 && (1L << d) < m)
        d++;
    return d;
}

/* Whether nth threads can each take a whole subtree of the L leaves: the
 * subtrees at depth log2(nth) are then [t*L/nth, (t+1)*L/nth), and the
 * tree over their results is the tree's top (the sharding rule, tensor.h). */
static inline int leaf_split(int nth, int L)
{
    return nth > 1 && !(nth & (nth - 1)) && L % nth == 0;
}

/* dst = dst + src, element-wise: the tree's one operation (plain in the
 * twins, vectors in the kernels: one rounding per element either way). */
typedef void add_fn(float *restrict dst, const float *restrict src, size_t n);
add_fn add_plain; /* the twins' (tensor_ref.c) */

/* The tree over the arrays part[lo..hi-1] (each len floats, contiguous),
 * in place: the result lands in part[lo]. */
static inline void tree_inplace(add_fn *add, float *part /* [hi,len] */, int lo, int hi,
                                size_t len)
{
    if (hi - lo < 2)
        return;
    int mid = lo + (hi - lo) / 2;
    tree_inplace(add, part, lo, mid, len);
    tree_inplace(add, part, mid, hi, len);
    add(part + (size_t)lo * len, part + (size_t)mid * len, len);
}

/* out = the tree over m leaf partials part[m,len] (destroyed); 0 if m = 0. */
static inline void tree_finish(add_fn *add, float *out /* [len] */, float *part /* [m,len] */,
                               int m, size_t len)
{
    if (m < 1) {
        memset(out, 0, sizeof(float) * len);
        return;
    }
    tree_inplace(add, part, 0, m, len);
    memcpy(out, part, sizeof(float) * len);
}

/* ---- the bf16 scalar model (tensor_ref.c) ---- */

/* bf16(x) as a float: what vcvtneps2bf16 gives. */
float bf16_round(float x);
/* One element of the bf16 matmul: acc after the vdpbf16ps steps over ar
 * (a row of A, stride sak) and bc (a column of B, stride ldb), p long. */
float bf16_dot(float acc, const float *ar, size_t sak, const float *bc, size_t ldb, int p);
/* The epilogue: relu, then 0 where gate[at] <= 0, then + r1[at], then + r2[at]. */
float bf16_epilogue(float y, const float *r1, const float *r2, const float *gate, int relu,
                    size_t at);

/* ---- the kernel table ---- */

/* Which arithmetic a weight-gradient matmul runs: fp32, or bf16 operands
 * emulated or on vdpbf16ps. */
enum tn_kind { TN_FP32, TN_BF16_EMU, TN_BF16_NATIVE };

/* One backend's kernels. The arguments are those of the k_* entry points
 * in tensor.h; `bf16` selects the variant that rounds operands to bf16 on
 * load; seg < 0 asks a reduction over rows for ROW_BLOCK blocks summed in
 * order instead of leaves and the tree; matmul_bf16_native is NULL where vdpbf16ps cannot run. */
struct kernels {
    const char *name;
    void (*matmul_ex)(float *c, const float *a, const float *b, const float *bias,
                      const float *r1, const float *r2, const float *gate, int relu, int n,
                      int p, int q);
    void (*matmul_tn_seg)(float *c, const float *a, const float *b, int n, int p, int q, int seg,
                          int kind);
    void (*tree_sum)(float *out, const float *const *parts, int m, size_t len);
    void (*attention)(float *out, float *lse, const float *qkv, int B, int T, int C, int H,
                      int bf16);
    void (*attention_bwd)(float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int C, int H, int bf16);
    void (*attention_step)(float *out, float *kc, float *vc, const float *qkv, int nb, int pos,
                           int tmax, int C, int H);
    void (*attention_last)(float *out, const float *qkv, int B, int T, int C, int H);
    void (*layernorm)(float *y, float *mean, float *rstd, const float *x, const float *w,
                      const float *b, int n, int c);
    void (*layernorm_bwd_seg)(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const float *mean, const float *rstd,
                              const float *r1, const float *r2, int n, int c, int seg);
    void (*xent)(float *loss, const float *logits, const int32_t *targets, int n, int v);
    void (*xent_bwd)(float *dlogits, float *loss, const float *logits, const int32_t *targets,
                     const float *dloss, int n, int v);
    void (*add)(float *y, const float *a, const float *b, size_t n);
    void (*add_n)(float *y, const float *const *x, int m, size_t n);
    void (*relu)(float *y, const float *x, size_t n);
    void (*relu_bwd)(float *dx, const float *dy, const float *y, size_t n);
    void (*gelu)(float *y, const float *x, size_t n);
    void (*gelu_bwd)(float *dx, const float *dy, const float *x, size_t n);
    void (*sum_rows_seg)(float *out, const float *x, int n, int q, int seg);
    void (*embed)(float *y, const int32_t *idx, const float *table, int n, int c, int v);
    void (*embed_bwd_seg)(float *dtable, const int32_t *idx, const float *dy, int n, int c, int v,
                          int seg);
    void (*adam)(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1,
                 float b2, float eps, int t);
    void (*round_bf16)(float *y, const float *x, size_t n);
    void (*matmul_bf16_emu)(float *c, const float *a, const float *b, const float *bias,
                            const float *r1, const float *r2, const float *gate, int relu, int n,
                            int p, int q);
    void (*matmul_bf16_native)(float *c, const float *a, const float *b, const float *bias,
                               const float *r1, const float *r2, const float *gate, int relu,
                               int n, int p, int q);
};

extern const struct kernels kernels_scalar;
#if defined(__x86_64__)
extern const struct kernels kernels_avx2, kernels_avx512;
#elif defined(__aarch64__)
extern const struct kernels kernels_neon;
#endif

/* The table of the current path. */
const struct kernels *kernels_now(void);

/* Adam's bias corrections, reduced to the floats the update needs
 * (tensor_ref.c computes them; both halves run the same update). */
struct adam_k {
    float omb1, b2, omb2, eps, step, bc2s;
};
struct adam_k adam_consts(float lr, float b1, float b2, float eps, int t);

#endif
