/* graph.h: the graph layer. Model code calls g_* builders; each one
 * records a node. In eager mode (the cpu device) the node runs at once.
 * Reverse-mode autodiff walks the record backwards, one rule per op, and
 * records the backward pass as more nodes of the same graph. In lazy mode
 * (the xla device) nodes are only recorded; a cut (g_mark_step, or g_read
 * of a pending value) traces them, finds or compiles a program for the
 * trace's structure, and runs it on the simulated cores. graph.c's head
 * comment draws the pipeline. */
#ifndef GRAPH_H
#define GRAPH_H
#include <stdint.h>
#include "xla_sim.h"

enum dtype { DT_F32, DT_I32 };
enum tkind {
    TK_TEMP,  /* produced by a node, lives until g_reset */
    TK_PARAM, /* caller-owned weights: leaves that take gradients */
    TK_INPUT, /* caller-owned data: tokens, positions, targets */
    TK_STATE, /* caller-owned buffers a node updates in place */
};

typedef struct Tensor {
    int id;
    int dtype, kind;
    int rows, cols; /* every tensor is a matrix; a vector has rows = 1 */
    long numel;
    void *data;        /* [rows,cols] of dtype; core 0's when replicated */
    void **rep;        /* [cores] each core's buffer, or NULL: one for all */
    int node;          /* index of the producing node, -1 for a leaf */
    int requires_grad; /* a gradient must flow back into it */
} Tensor;

/* A recorded op (level 1 of an instruction's four, see graph.c). */
typedef struct Node {
    int op; /* enum kop */
    union kattr attr; /* its named attributes (xla_sim.h) */
    int nin, nout;
    Tensor *in[KMAX_IN];
    Tensor *out[KMAX_OUT];
    int done; /* lazy mode: already executed by an earlier cut */
} Node;

typedef struct Graph Graph;

Graph *g_new(void);
void g_free(Graph *g);
/* Forgets every node and temporary; caller-owned buffers are untouched. */
void g_reset(Graph *g);

Tensor *g_leaf(Graph *g, int kind, int dtype, void *data, int rows, int cols);
Tensor *g_param(Graph *g, float *data, int rows, int cols);

Tensor *g_embed(Graph *g, Tensor *idx, Tensor *table);
Tensor *g_add(Graph *g, Tensor *a, Tensor *b);
/* a + b for partial sums of gradients, kept in fp32 like a kernel's tree */
Tensor *g_add_partial(Graph *g, Tensor *a, Tensor *b);
Tensor *g_matmul(Graph *g, Tensor *a, Tensor *b, Tensor *bias);
Tensor *g_transpose(Graph *g, Tensor *x);
/* x @ w^T + b, with w in PyTorch's [out,in] layout; b may be NULL. */
Tensor *g_linear(Graph *g, Tensor *x, Tensor *w, Tensor *b);
Tensor *g_relu(Graph *g, Tensor *x);
/* y = op(x) for an element-wise op of one input in device/ops.def (an
 * activation: KOP_RELU, ...), y of x's shape; its derivative is graph.c's. */
Tensor *g_unary(Graph *g, int op, Tensor *x);
Tensor *g_layernorm(Graph *g, Tensor *x, Tensor *w, Tensor *b);
/* qkv [B*T, 3C] -> [B*T, C], causal, H heads. */
Tensor *g_attention(Graph *g, Tensor *qkv, int B, int T, int H);
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
/* Mean cross-entropy [1] over rows whose target is >= 0. */
Tensor *g_xent(Graph *g, Tensor *logits, Tensor *targets);
Tensor *g_fill(Graph *g, float value, int rows, int cols);

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
/* Writes x into dst, a TK_STATE leaf, in place (as Adam writes its state):
 * a value kept on the device from one step's graph to the next. */
void g_store(Graph *g, Tensor *dst, Tensor *x);
/* Rows per example (0: off): the backward reductions over rows then sum
 * per-example leaves in a fixed tree, so gradients do not depend on how
 * the batch is split over cores. */
void g_set_example_rows(Graph *g, int rows);
/* enum precision for the ops recorded from now on. */
void g_set_precision(Graph *g, int precision);

/* Records the backward pass of y. dy is the upstream gradient (same shape
 * as y), or NULL when y is a scalar loss (seed 1). */
void g_backward(Graph *g, Tensor *y, Tensor *dy);
/* The gradient recorded for t by g_backward, or NULL. */
Tensor *g_grad(Graph *g, Tensor *t);
/* Adam step on p with gradient grad; p, m, v are updated in place; t is an
 * i32 [1] state holding the step number (>= 1), lr an f32 [1] input: the
 * rate is data, not an attribute, so a schedule that changes it every
 * step keeps one compiled program. */
void g_adam(Graph *g, Tensor *p, Tensor *grad, Tensor *m, Tensor *v,
            Tensor *t, Tensor *lr, float b1, float b2, float eps);

/* The host reads a tensor's values. On the lazy (xla) device this cuts the
 * graph: what is pending is compiled (or found in the cache) and run. */
const void *g_read(Graph *g, Tensor *t);

/* ---- the lazy (xla) device ---- */

/* Lazy mode records nodes without running them; g_read and g_mark_step
 * run them as compiled programs. Eager (the default) runs each at once. */
void g_set_lazy(Graph *g, int lazy);
/* Ends a step: compiles and runs everything pending, keeping the values of
 * keep[0..n) for the host. In eager mode it does nothing. */
void g_mark_step(Graph *g, Tensor *const *keep, int n);

/* What the last new compile produced, for tests and the debug line. */
struct compile_stats {
    int nodes, kernels;       /* traced nodes in, kernels out */
    size_t arena, buffers;    /* planned arena bytes vs the sum of buffers */
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
/* Test hook: hashes are ANDed with this, so 0 makes every key collide. */
extern uint64_t g_hash_mask;

#endif
