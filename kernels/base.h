/* kernels/base.h: the floor of the kernel layer. What the kernels of
 * tensor.c (every backend), the plain-C twins and the entry points all
 * use, and which itself calls nothing of theirs: the constants, kernel
 * scratch, a thread's share of a loop, the leaves and the tree of the
 * reductions over rows, Adam's constants, and the scalar model of the bf16
 * matrix unit. Its functions are in kernels/base.c and kernels/bf16_model.c.
 * Nothing outside kernels/ and tensor.c includes it. */
#ifndef KERNELS_BASE_H
#define KERNELS_BASE_H
#include "kernels/kernels.h"
#include <omp.h>
#include <stddef.h>

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
 * scratch buffer never share a line; exits when memory runs out. */
void *kmalloc(size_t bytes);

static inline int min_int(int a, int b) { return a < b ? a : b; }
static inline int round16(int x) { return (x + 15) / 16 * 16; }

/* This thread's contiguous share [*i0, *i1) of n items. Which thread
 * computes an item never changes how it is computed. */
static inline int share_bound(int n, int t, int nth) { return (int)((long)n * t / nth); }
static inline void my_share(int n, int *i0, int *i1)
{
    int nth = omp_get_num_threads(), me = omp_get_thread_num();
    *i0 = share_bound(n, me, nth);
    *i1 = share_bound(n, me + 1, nth);
}

/* A loop's items shared out as my_share does, each thread taking its own
 * share a chunk at a time from the front, and a thread done with its own
 * taking chunks from the back of another's. When the cores keep pace,
 * each computes its own share, the same rows from kernel to kernel, so
 * what one kernel writes the next reads from the same core's cache; when
 * one runs slower for a while (a virtual CPU sharing its core, another
 * program), the other takes over the rest of its share instead of waiting
 * for it at the loop's end. Which thread computes an item never changes
 * how it is computed.
 *
 * share_alloc(n, loops), before a parallel region: `loops` loops of n
 * items each, shared as if among omp_get_max_threads() threads (a team
 * with fewer takes the missing threads' shares too), each share taken in
 * SHARE_CHUNKS chunks, so that a thief takes over a slow thread's last
 * eighth or so. In the region, each thread runs loop l's items [i0, i1)
 * while share_next(s, l, &i0, &i1); free(s) after it. */
#define SHARE_CHUNKS 8
struct share;
struct share *share_alloc(int n, int loops);
int share_next(struct share *s, int loop, int *i0, int *i1);
/* for (int i = 0; i < n; i++), the n items of share_alloc(n, 1) claimed
 * with stealing, as the statement of an `omp parallel`: each thread runs
 * the items it claims, so a late thread delays the loop by a chunk at
 * most, not by its whole share. */
#define FOR_SHARED(s, i)                                                   \
    for (int i##_lo, i##_hi; share_next((s), 0, &i##_lo, &i##_hi);)        \
        for (int i = i##_lo; i < i##_hi; i++)

/* ---- leaves and the tree (the rule is stated in kernels.h) ---- */

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
 * tree over their results is the tree's top (the sharding rule, kernels.h). */
static inline int leaf_split(int nth, int L)
{
    return nth > 1 && !(nth & (nth - 1)) && L % nth == 0;
}

/* dst = dst + src, element-wise: the tree's one operation (plain in the
 * twins, vectors in the kernels: one rounding per element either way). */
typedef void add_fn(float *restrict dst, const float *restrict src, size_t n);
add_fn add_plain; /* the twins' */

/* out = the tree over m leaf partials part[m,len] (destroyed); 0 if m = 0. */
void tree_finish(add_fn *add_rows, float *out /* [len] */, float *part /* [m,len] */, int m,
                 size_t len);

/* ---- Adam's constants ---- */

/* Adam's bias corrections, reduced to the floats the update needs; the
 * twin and the kernels run the same update on them. */
struct adam_k {
    float omb1, b2, omb2, eps, step, bc2s;
};
struct adam_k adam_consts(float lr, float b1, float b2, float eps, int t);

/* ---- the bf16 scalar model (bf16_model.c) ---- */

/* bf16(x) as a float: what vcvtneps2bf16 gives. */
float bf16_round(float x);
/* One element of the bf16 matmul: acc after the vdpbf16ps steps over ar
 * (a row of A, stride sak) and bc (a column of B, stride ldb), p long. */
float bf16_dot(float acc, const float *ar, size_t sak, const float *bc, size_t ldb, int p);
/* The epilogue: relu, then 0 where gate[at] <= 0, then + r1[at], then + r2[at]. */
float bf16_epilogue(float y, const float *r1, const float *r2, const float *gate, int relu,
                    size_t at);

/* Cross-entropy's mean over the rows with a target (>= 0), the twin's and
 * every backend's: each leaf of seg rows (seg < 1: one leaf of all) summed
 * in row order in double, divided by the count and rounded to float once,
 * then the leaves added by the tree. */
float mean_loss(const double *row /* [n] */, const int32_t *targets /* [n] */, int n, int seg);

/* ---- the vector kernels' order, one lane at a time (base.c) ----
 * The kernels of tensor.c run on vec.h's vectors of LANES floats on every
 * backend. A sum along a row keeps LANES partial sums, lane l taking the
 * row's elements l, l + LANES, l + 2 LANES, ... in order, and ends in
 * vsum's fixed tree across the lanes; e^x, 2^x and ln x are polynomials
 * of their own, not libm's. The twins say the same in plain C with these,
 * so that they give the kernels' bits, not only agree to rounding. */
#define LANES 16

/* The sum of lane[LANES] in vsum's tree: lanes i and i + 8 added, then i
 * and i + 4, i and i + 2, and lane 0 + lane 1. */
float lanes_sum(const float lane[LANES]);
/* e^x, 2^x and ln x exactly as one lane of vec.h's vexp, vexp2, vlog. */
float exp_lane(float x);
float exp2_lane(float x);
float log_lane(float x);

#endif
