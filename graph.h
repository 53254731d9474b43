/* graph.h: the graph layer. Model code calls g_* builders; each one
 * records a node. In eager mode (the cpu device) the node runs at once.
 * Reverse-mode autodiff walks the record backwards, one rule per op, and
 * records the backward pass as more nodes of the same graph. In lazy mode
 * (the xla device) nodes are only recorded; a cut (g_mark_step, or g_read
 * of a pending value) traces them, finds or compiles a program for the
 * trace's structure, and runs it on the simulated cores. graph.c's head
 * comment draws the pipeline. What this file declares is graph.c's; the
 * recorded values and leaves (compiler/node.h) and the builders read
 * second (compiler/graph_side.h) are declared beside the files below
 * graph.c that define them, and included here for the model. */
#ifndef GRAPH_H
#define GRAPH_H
#include <stdint.h>
#include "compiler/node.h"
#include "compiler/graph_side.h"

Graph *g_new(void);
void g_free(Graph *g);
/* Forgets every node and temporary; caller-owned buffers are untouched. */
void g_reset(Graph *g);

Tensor *g_embed(Graph *g, Tensor *idx, Tensor *table);
Tensor *g_add(Graph *g, Tensor *a, Tensor *b);
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
/* Mean cross-entropy [1] over rows whose target is >= 0. */
Tensor *g_xent(Graph *g, Tensor *logits, Tensor *targets);
Tensor *g_fill(Graph *g, float value, int rows, int cols);

/* Records the backward pass of y. dy is the upstream gradient (same shape
 * as y), or NULL when y is a scalar loss (seed 1). */
void g_backward(Graph *g, Tensor *y, Tensor *dy);
/* Rematerialization (--remat): the nodes recorded between g_remat_begin
 * and g_remat_end are a region (the model marks each block). With
 * g_set_remat on, g_backward does not read the region's values: on
 * reaching the region it records the region's forward again, from the
 * region's inputs, and derives the gradients from that recompute, so the
 * forward's values die after their forward use. Regions do not nest. */
void g_remat_begin(Graph *g);
void g_remat_end(Graph *g);
void g_set_remat(Graph *g, int on);
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
/* Core `core`'s values of t, a value the cores each computed on a board of
 * several simulated cores (g_read's are core 0's); core < g_cores(g). */
const void *g_read_core(Graph *g, Tensor *t, int core);
/* The first n floats of an f32 value the cores each computed, core 0's
 * first, then core 1's, ...: a batch split over the cores by rows
 * (batch_slice_leaf) read back whole, in its own row order. */
void g_read_cores(Graph *g, Tensor *t, float *out, size_t n);

/* ---- the lazy (xla) device ---- */

/* Lazy mode records nodes without running them; g_read and g_mark_step
 * run them as compiled programs. Eager (the default) runs each at once. */
void g_set_lazy(Graph *g, int lazy);
int g_is_lazy(const Graph *g);
/* Ends a step: compiles and runs everything pending, keeping the values of
 * keep[0..n) for the host. In eager mode it does nothing. */
void g_mark_step(Graph *g, Tensor *const *keep, int n);

#endif
