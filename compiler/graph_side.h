/* compiler/graph_side.h: the builders a first read skips (graph_side.c):
 * inference-only attention, dropout, data parallelism over simulated
 * cores, precision; and what the last compile made, for tests and the
 * debug line. graph.h includes this for the model. */
#ifndef COMPILER_GRAPH_SIDE_H
#define COMPILER_GRAPH_SIDE_H
#include "compiler/node.h"

/* w when b is w^T, a Linear weight whose gradient the backward pass makes
 * in w's own layout; else NULL */
Tensor *transposed_weight(const Graph *g, Tensor *b);
/* a + b for partial sums of gradients, kept in fp32 like a kernel's tree */
Tensor *g_add_partial(Graph *g, Tensor *a, Tensor *b);
/* qkv [B*T, 3C] -> [B, C]: g_attention's row T-1 of each window alone.
 * Inference only (the sampler past the context). */
Tensor *g_attention_last(Graph *g, Tensor *qkv, int B, int T, int H);
/* qkv [nb,3C] of one new token per sequence; kc, vc [nb*tmax, C] states;
 * pos i32 [1]. Returns [nb, C]. Inference only. */
Tensor *g_attention_step(Graph *g, Tensor *qkv, Tensor *kc, Tensor *vc,
                         Tensor *pos, int H);
/* Dropout (tensor.h): x [n,c] -> [n,c]; rows i32 [n] the rows' global
 * indices, key i32 [2] the step's key, site which dropout this is. Its
 * gradient is the same mask applied to dy. */
Tensor *g_dropout(Graph *g, Tensor *x, Tensor *rows, Tensor *key, float p, int site);
/* g_attention with dropout p on the probabilities; rows i32 [B*T]. */
Tensor *g_attention_drop(Graph *g, Tensor *qkv, Tensor *rows, Tensor *key, int B, int T, int H,
                         float p, int site);

/* ---- data parallelism and precision ----
 * With n cores (lazy mode only) a trace describes one core's shard of the
 * batch, and each cut runs it on simulated cores xla:0..n-1 at once. A
 * leaf made by g_leaf_rep has a buffer per core; a plain leaf is shared by
 * all cores and must not be written by the program. n is a power of two. */
void g_set_cores(Graph *g, int n);
int g_cores(const Graph *g);
/* A leaf with data[c] as core c's buffer (the array is copied). */
Tensor *g_leaf_rep(Graph *g, int kind, int dtype, void *const *data, int rows, int cols);
/* The mean over cores of x, on every core; x itself with one core. */
Tensor *g_all_reduce(Graph *g, Tensor *x);
/* The same for x the sum of micro micro-batches' values (gradient
 * accumulation): the mean is over the micro-batches too. */
Tensor *g_all_reduce_micro(Graph *g, Tensor *x, int micro);
/* --shard-optimizer (ZeRO-1). x is the floats [at, at + numel) of a flat
 * layout of `total` (the step's gradients, then its loss) that the pod's
 * ordinals split by device/allreduce.h's shard_lo. g_reduce_scatter: as
 * g_all_reduce_micro, but each core's result holds only its own shard's
 * part of the mean (the rest is undefined). g_adam_shard: g_adam on that
 * part alone, m and v being each core's shard of the moments (any
 * length, the largest shard's). g_all_gather: every core's x, in place,
 * gets each shard from the core that owns it. */
Tensor *g_reduce_scatter(Graph *g, Tensor *x, int micro, long at, long total);
void g_adam_shard(Graph *g, Tensor *p, Tensor *grad, Tensor *m, Tensor *v, Tensor *t,
                  Tensor *lr, float b1, float b2, float eps, long at, long total);
void g_all_gather(Graph *g, Tensor *x, long at, long total);
/* Writes x into dst, a TK_STATE leaf, in place (as Adam writes its state):
 * a value kept on the device from one step's graph to the next. */
void g_store(Graph *g, Tensor *dst, Tensor *x);
/* Rows per example (0: off): the backward reductions over rows then sum
 * per-example leaves in a fixed tree, so gradients do not depend on how
 * the batch is split over cores. */
void g_set_example_rows(Graph *g, int rows);
/* enum precision for the ops recorded from now on. */
void g_set_precision(Graph *g, int precision);
int g_precision(const Graph *g);

/* What the last new compile produced, for tests and the debug line. */
struct compile_stats {
    int nodes, kernels;       /* traced nodes in, kernels out */
    size_t arena, buffers;    /* planned arena bytes vs the sum of buffers */
    size_t remat_arena;       /* the arena --remat would need, estimated; 0: none */
    size_t peak_arena;        /* the biggest arena of any program compiled so far */
    size_t peak_remat_arena;  /* that program's remat_arena */
    double ms;
};
struct plan_buf {
    long off, bytes;
    int first, last; /* instruction indices where it is live */
};
int g_compile_stats(const Graph *g, struct compile_stats *s);
/* The last new program's buffers (valid until the next compile). */
int g_plan(const Graph *g, const struct plan_buf **bufs);
/* Kernels of each kind in the last new program. */
int g_kernel_count(const Graph *g, int op);
/* Test hook: the cache's key hashes (cache.c) are ANDed with this, so 0
 * makes every key collide. */
extern uint64_t g_hash_mask;

#endif
