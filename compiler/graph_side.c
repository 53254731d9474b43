/* compiler/graph_side.c: graph.c's second-read builders, which a first
 * reader of one fp32 training step on one core can skip: data parallelism
 * (cores, replicated leaves, the all-reduce, gradient accumulation's
 * partial sums and stores), dropout, the sampler's inference-only
 * attention, a Linear weight's gradient in its own layout, and what the
 * last compile made (for tests). It calls
 * compiler/record.c, never graph.c. */
#include "compiler/record.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How many recorded nodes read t. */
static int readers(const Graph *g, const Tensor *t)
{
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].nin; j++)
            k += g->nodes[i].in[j] == t;
    return k;
}

/* w when b = w^T and that transpose is all w and b are read by: a Linear
 * weight, stored [out,in] as PyTorch stores it. Its gradient is then dy^T
 * a, not (a^T dy)^T: the same products (each one's factors swapped, which
 * no rounding sees) summed in the same order, so the same bits, without
 * transposing the gradient back (a large model's weights are megabytes).
 * Under --remat a block's transposes are recorded twice: NULL there. */
Tensor *transposed_weight(const Graph *g, Tensor *b)
{
    if (b->node < 0 || g->nodes[b->node].op != KOP_TRANSPOSE)
        return NULL;
    Tensor *w = g->nodes[b->node].in[TRANSPOSE_IN_X];
    return w->requires_grad && readers(g, b) == 1 && readers(g, w) == 1 ? w : NULL;
}

Tensor *g_leaf_rep(Graph *g, int kind, int dtype, void *const *data, int rows, int cols)
{
    Tensor *t = g_leaf(g, kind, dtype, data[0], rows, cols);
    if (g->cores > 1) {
        t->rep = arena_alloc(&g->meta, sizeof *t->rep * (size_t)g->cores);
        memcpy(t->rep, data, sizeof *t->rep * (size_t)g->cores);
    }
    return t;
}

void g_set_cores(Graph *g, int n)
{
    if (n > 1 && !g->lazy) {
        fprintf(stderr, "gpt: internal error: simulated cores need the lazy device\n");
        abort();
    }
    g->cores = n < 1 ? 1 : n;
}

int g_cores(const Graph *g) { return g->cores; }
void g_set_example_rows(Graph *g, int rows) { g->seg = rows; }
void g_set_precision(Graph *g, int precision) { g->prec = precision; }
int g_precision(const Graph *g) { return g->prec; }

Tensor *g_all_reduce(Graph *g, Tensor *x) { return g_all_reduce_micro(g, x, 1); }

Tensor *g_all_reduce_micro(Graph *g, Tensor *x, int micro)
{
    if (g->cores == 1 && xs_hosts() == 1 && micro == 1)
        return is_rounded(g, x) ? x : as_stored(g, x);
    Node *n = new_node(g, KOP_ALL_REDUCE, IN(x));
    n->attr.all_reduce =
        (struct all_reduce_attr){.n = x->numel, .cores = g->cores, .micro = micro};
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 0);
    run_if_eager(g, n);
    return as_stored(g, y);
}

Tensor *g_reduce_scatter(Graph *g, Tensor *x, int micro, long at, long total)
{
    Node *n = new_node(g, KOP_ALL_REDUCE, IN(x));
    n->attr.all_reduce = (struct all_reduce_attr){.n = x->numel, .cores = g->cores,
                                                  .micro = micro, .shard = 1, .at = at,
                                                  .total = total};
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 0);
    run_if_eager(g, n);
    return as_stored(g, y);
}

void g_adam_shard(Graph *g, Tensor *p, Tensor *grad, Tensor *m, Tensor *v, Tensor *t,
                  Tensor *lr, float b1, float b2, float eps, long at, long total)
{
    if (grad->numel != p->numel || m->numel != v->numel)
        shape_fail("adam (sharded)", p, grad);
    Node *n = new_node(g, KOP_ADAM_SHARD,
                       IN([ADAM_SHARD_IN_P] = p, [ADAM_SHARD_IN_GRAD] = grad,
                          [ADAM_SHARD_IN_M] = m, [ADAM_SHARD_IN_V] = v,
                          [ADAM_SHARD_IN_STEP] = t, [ADAM_SHARD_IN_LR] = lr));
    n->attr.adam = (struct adam_attr){.n = p->numel, .bf16_state = g->prec == PREC_BF16_PURE,
                                      .beta1 = b1, .beta2 = b2, .eps = eps,
                                      .shard_cores = g->cores, .at = at, .total = total};
    run_if_eager(g, n);
}

void g_all_gather(Graph *g, Tensor *x, long at, long total)
{
    Node *n = new_node(g, KOP_ALL_GATHER, IN(x));
    n->attr.all_reduce = (struct all_reduce_attr){.n = x->numel, .cores = g->cores,
                                                  .shard = 1, .at = at, .total = total};
    run_if_eager(g, n);
}

/* a + b for two partial sums of a batch reduction (gradient accumulation):
 * like the tree inside a kernel, kept in fp32 until the all-reduce. */
Tensor *g_add_partial(Graph *g, Tensor *a, Tensor *b)
{
    return as_stored_partial(g, build_add(g, a, b));
}

void g_store(Graph *g, Tensor *dst, Tensor *x)
{
    if (dst->numel != x->numel || dst->kind != TK_STATE)
        shape_fail("store", dst, x);
    Node *n = new_node(g, KOP_STORE, IN([STORE_IN_DST] = dst, [STORE_IN_X] = x));
    n->attr.elementwise.n = x->numel;
    run_if_eager(g, n);
}

Tensor *g_dropout(Graph *g, Tensor *x, Tensor *rows, Tensor *key, float p, int site)
{
    if (rows->numel != x->rows || key->numel != 2)
        shape_fail("dropout", x, rows);
    Node *n = new_node(g, KOP_DROPOUT,
                       IN([DROPOUT_IN_X] = x, [DROPOUT_IN_ROWS] = rows, [DROPOUT_IN_KEY] = key));
    n->attr.dropout = (struct dropout_attr){.n = x->rows, .c = x->cols, .site = site, .p = p};
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    run_if_eager(g, n);
    return as_stored(g, y);
}

Tensor *g_attention_drop(Graph *g, Tensor *qkv, Tensor *rows, Tensor *key, int B, int T, int H,
                         float p, int site)
{
    int C = qkv->cols / 3;
    if (qkv->rows != B * T || qkv->cols % 3 || C % H || rows->numel != B * T || key->numel != 2)
        shape_fail("attention_drop", qkv, rows);
    Node *n = new_node(g, KOP_ATTENTION_DROP,
                       IN([ATTENTION_DROP_IN_QKV] = qkv, [ATTENTION_DROP_IN_ROWS] = rows,
                          [ATTENTION_DROP_IN_KEY] = key));
    n->attr.attention_drop =
        (struct attention_drop_attr){.B = B, .T = T, .C = C, .H = H, .site = site, .p = p};
    Tensor *y = add_out(g, n, DT_F32, B * T, C, 1); /* o, then lse */
    add_out(g, n, DT_F32, B * H, T, 0);
    run_if_eager(g, n);
    return as_stored(g, y);
}

Tensor *build_attention_drop_bwd(Graph *g, const Node *att, Tensor *dy)
{
    Tensor *qkv = att->in[ATTENTION_DROP_IN_QKV];
    Node *n = new_node(g, KOP_ATTENTION_DROP_BWD,
                       IN([ATTENTION_DROP_BWD_IN_DO] = dy, [ATTENTION_DROP_BWD_IN_QKV] = qkv,
                          [ATTENTION_DROP_BWD_IN_O] = att->out[ATTENTION_DROP_OUT_O],
                          [ATTENTION_DROP_BWD_IN_LSE] = att->out[ATTENTION_DROP_OUT_LSE],
                          [ATTENTION_DROP_BWD_IN_ROWS] = att->in[ATTENTION_DROP_IN_ROWS],
                          [ATTENTION_DROP_BWD_IN_KEY] = att->in[ATTENTION_DROP_IN_KEY]));
    n->attr = att->attr;
    Tensor *d = add_out(g, n, DT_F32, qkv->rows, qkv->cols, 1);
    run_if_eager(g, n);
    return as_stored(g, d);
}

Tensor *g_attention_last(Graph *g, Tensor *qkv, int B, int T, int H)
{
    int C = qkv->cols / 3;
    if (qkv->rows != B * T || qkv->cols % 3 || C % H)
        shape_fail("attention_last", qkv, qkv);
    qkv = mxu_operand(g, qkv); /* bf16: q, k, v rounded, as g_attention's kernel does */
    Node *n = new_node(g, KOP_ATTENTION_LAST, IN(qkv));
    n->attr.attention = (struct attention_attr){.B = B, .T = T, .C = C, .H = H};
    Tensor *y = add_out(g, n, DT_F32, B, C, 0);
    run_if_eager(g, n);
    return as_stored(g, y);
}

Tensor *g_attention_step(Graph *g, Tensor *qkv, Tensor *kc, Tensor *vc,
                         Tensor *pos, int H)
{
    int C = qkv->cols / 3, nb = qkv->rows;
    if (kc->cols != C || kc->rows % nb || vc->numel != kc->numel)
        shape_fail("attention_step", qkv, kc);
    qkv = mxu_operand(g, qkv);
    Node *n = new_node(g, KOP_ATTENTION_STEP,
                       IN([ATTENTION_STEP_IN_QKV] = qkv, [ATTENTION_STEP_IN_KC] = kc,
                          [ATTENTION_STEP_IN_VC] = vc, [ATTENTION_STEP_IN_POS] = pos));
    n->attr.decode = (struct decode_attr){.nb = nb, .tmax = kc->rows / nb, .C = C, .H = H};
    Tensor *y = add_out(g, n, DT_F32, nb, C, 0);
    run_if_eager(g, n);
    return as_stored(g, y);
}

int g_compile_stats(const Graph *g, struct compile_stats *s)
{
    *s = g->compiler.last;
    return g->compiler.ncache;
}

int g_plan(const Graph *g, const struct plan_buf **bufs)
{
    *bufs = g->compiler.plan;
    return g->compiler.nplan;
}

int g_kernel_count(const Graph *g, int op) { return g->compiler.kernels[op]; }
