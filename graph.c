/* graph.c: the graph layer: recording, autodiff, and the cut.
 *
 * Recording and autodiff: model code calls g_* builders; each one records
 * a node (and on the eager cpu device runs it at once). g_backward walks
 * the record backwards, one rule per op, and records the backward pass as
 * more nodes of the same graph.
 *
 * The cut (the xla device): nodes are only recorded until the host needs
 * values. Then the lazy compiler runs; compiler/compile.c is its driver,
 * and its head comment lists the stages and its table the passes:
 *
 *   g_embed, g_matmul, ... g_backward, g_adam      record: Node (graph.c)
 *        |  g_mark_step, or g_read of a pending value: a cut
 *        v
 *   compile_cut    trace -> key -> cache lookup: a hit is the program;
 *                  a miss runs the passes, the memory plan and lowering,
 *                  and caches the Program (compiler/compile.c)
 *        v
 *   bind_slots -> xs_run_replicated   each core runs struct kinstr (xla_sim.c)
 *
 * One instruction at four levels, all with the same op (enum kop) and
 * attributes (union kattr); what changes is what an operand is:
 *
 *   level  struct         an operand is                          lives
 *   1      Node           Tensor *: a recorded value             until g_reset
 *   2      struct tnode   struct ref: slot s, or output k of     one compile
 *                         traced node i
 *   3      struct pinstr  struct place: arena offset, or slot    in the cached Program
 *   4      struct kinstr  void *: this core's buffer             one kernel call
 *
 * A slot is a buffer that outlives the program (weights, optimizer state,
 * batch inputs, caches): the program names it by number and each run binds
 * this step's pointer to it, so one compiled program serves every step.
 *
 * Memory for one step (tensor headers and eager data) comes from bump
 * arenas that g_reset rewinds, so a training step calls malloc only while
 * the arenas are still growing in the first step.
 *
 * The layer's other rooms, below this file: compiler/record.c (tensors,
 * new_node, add_out, run_if_eager; the arenas), compiler/precision.c
 * (as_stored, the bf16 roundings),
 * compiler/graph_side.c (second-read builders: data parallelism,
 * dropout, inference-only attention) and compiler/remat.c (--remat). */
#include "compiler/record.h"
#include "util/util.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ======================================================================
 * Recording and autodiff
 * ====================================================================== */

/* ---- the graph ---- */

static void run_pending(Graph *g, Tensor *const *roots, int nroots, const char *why);

Graph *g_new(void)
{
    Graph *g = xmalloc(sizeof *g);
    memset(g, 0, sizeof *g);
    g->cores = 1;
    return g;
}

void g_free(Graph *g)
{
    if (!g)
        return;
    cache_free(&g->compiler);
    arena_free(&g->meta);
    arena_free(&g->data);
    free(g->nodes);
    free(g->grads);
    free(g->regions);
    free(g);
}

void g_reset(Graph *g)
{
    g->n_nodes = 0;
    g->n_tensors = 0;
    g->n_regions = 0;
    g->region = 0;
    g->phase = PHASE_FORWARD;
    if (g->grads)
        memset(g->grads, 0, sizeof *g->grads * g->cap_grads);
    arena_rewind(&g->meta);
    arena_rewind(&g->data);
}

Tensor *g_embed(Graph *g, Tensor *idx, Tensor *table)
{
    Node *n = new_node(g, KOP_EMBED, IN([EMBED_IN_IDX] = idx, [EMBED_IN_TABLE] = table));
    n->attr.embed = (struct embed_attr){.n = idx->numel, .c = table->rows, .v = table->cols};
    Tensor *y = add_out(g, n, DT_F32, (int)idx->numel, table->rows, 1);
    run_if_eager(g, n);
    return as_stored(g, y);
}

static Tensor *build_embed_bwd(Graph *g, Tensor *idx, Tensor *dy, Tensor *table)
{
    Node *n = new_node(g, KOP_EMBED_BWD, IN([EMBED_BWD_IN_IDX] = idx, [EMBED_BWD_IN_DY] = dy));
    n->attr.embed = (struct embed_attr){
        .n = idx->numel, .c = table->rows, .v = table->cols, .seg = g->seg};
    Tensor *d = add_out(g, n, DT_F32, table->rows, table->cols, 0);
    run_if_eager(g, n);
    return as_stored_partial(g, d);
}

Tensor *g_add(Graph *g, Tensor *a, Tensor *b) { return as_stored(g, build_add(g, a, b)); }

Tensor *g_matmul(Graph *g, Tensor *a, Tensor *b, Tensor *bias)
{
    if (a->cols != b->rows || (bias && bias->numel != b->cols))
        shape_fail("matmul", a, b);
    Node *n = new_node(g, KOP_MATMUL,
                       IN([MATMUL_IN_A] = a, [MATMUL_IN_B] = b, [MATMUL_IN_BIAS] = bias));
    n->attr.matmul = (struct matmul_attr){
        .n = a->rows, .p = a->cols, .q = b->cols,
        .bf16 = g->prec != PREC_FP32}; /* the kernel rounds a and b to bf16 */
    Tensor *y = add_out(g, n, DT_F32, a->rows, b->cols, 1);
    run_if_eager(g, n);
    return as_stored(g, y);
}

/* a^T @ b: a [p,n], b [p,q] -> [n,q]. Only backward passes record it. */
static Tensor *build_matmul_tn(Graph *g, Tensor *a, Tensor *b)
{
    if (a->rows != b->rows)
        shape_fail("matmul_tn", a, b);
    Node *n = new_node(g, KOP_MATMUL_TN, IN(a, b));
    n->attr.matmul = (struct matmul_attr){
        .n = a->cols, .p = a->rows, .q = b->cols, .seg = g->seg,
        .bf16 = g->prec != PREC_FP32}; /* the matrix unit: bf16 pairs, fp32 sums */
    Tensor *y = add_out(g, n, DT_F32, a->cols, b->cols, 1);
    run_if_eager(g, n);
    return as_stored_partial(g, y);
}

Tensor *g_transpose(Graph *g, Tensor *x)
{
    /* (x^T)^T is x: backward passes through a linear layer ask for it. */
    if (x->node >= 0 && g->nodes[x->node].op == KOP_TRANSPOSE)
        return g->nodes[x->node].in[TRANSPOSE_IN_X];
    Node *n = new_node(g, KOP_TRANSPOSE, IN(x));
    n->attr.transpose = (struct transpose_attr){.rows = x->rows, .cols = x->cols};
    Tensor *y = add_out(g, n, DT_F32, x->cols, x->rows, 1);
    run_if_eager(g, n);
    return y;
}

Tensor *g_linear(Graph *g, Tensor *x, Tensor *w, Tensor *b)
{
    return g_matmul(g, x, g_transpose(g, w), b);
}

static Tensor *build_sum_rows(Graph *g, Tensor *x)
{
    Node *n = new_node(g, KOP_SUM_ROWS, IN(x));
    n->attr.sum_rows = (struct sum_rows_attr){.n = x->rows, .q = x->cols, .seg = g->seg};
    Tensor *y = add_out(g, n, DT_F32, 1, x->cols, 1);
    run_if_eager(g, n);
    return as_stored_partial(g, y);
}

Tensor *g_unary(Graph *g, int op, Tensor *x)
{
    Node *n = new_node(g, op, IN(x));
    n->attr.elementwise.n = x->numel;
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    run_if_eager(g, n);
    /* a ReLU's values are x's or 0, already as stored; others round */
    return op == KOP_RELU ? y : as_stored(g, y);
}

Tensor *g_relu(Graph *g, Tensor *x) { return g_unary(g, KOP_RELU, x); }

static Tensor *build_relu_bwd(Graph *g, Tensor *dy, Tensor *y)
{
    Node *n = new_node(g, KOP_RELU_BWD, IN([RELU_BWD_IN_DY] = dy, [RELU_BWD_IN_Y] = y));
    n->attr.elementwise.n = y->numel;
    Tensor *d = add_out(g, n, DT_F32, y->rows, y->cols, 1);
    run_if_eager(g, n);
    return as_stored(g, d);
}

/* dx = dy times GELU's slope at x (the op keeps x, not y: the slope needs it) */
static Tensor *build_gelu_bwd(Graph *g, Tensor *dy, Tensor *x)
{
    Node *n = new_node(g, KOP_GELU_BWD, IN([GELU_BWD_IN_DY] = dy, [GELU_BWD_IN_X] = x));
    n->attr.elementwise.n = x->numel;
    Tensor *d = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    run_if_eager(g, n);
    return as_stored(g, d);
}

Tensor *g_layernorm(Graph *g, Tensor *x, Tensor *w, Tensor *b)
{
    if (w->numel != x->cols || b->numel != x->cols)
        shape_fail("layernorm", x, w);
    Node *n = new_node(g, KOP_LAYERNORM,
                       IN([LAYERNORM_IN_X] = x, [LAYERNORM_IN_W] = w, [LAYERNORM_IN_B] = b));
    n->attr.layernorm = (struct layernorm_attr){.n = x->rows, .c = x->cols};
    /* outputs in ops.def's order: y, mean, rstd */
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    add_out(g, n, DT_F32, x->rows, 1, 0);
    add_out(g, n, DT_F32, x->rows, 1, 0);
    run_if_eager(g, n);
    return as_stored(g, y);
}

/* Fills d, by ln's inputs: d[LAYERNORM_IN_X] is dx, and so on. */
static void build_layernorm_bwd(Graph *g, const Node *ln, Tensor *dy, Tensor **d)
{
    Tensor *x = ln->in[LAYERNORM_IN_X];
    Node *n = new_node(g, KOP_LAYERNORM_BWD,
                       IN([LAYERNORM_BWD_IN_DY] = dy, [LAYERNORM_BWD_IN_X] = x,
                          [LAYERNORM_BWD_IN_W] = ln->in[LAYERNORM_IN_W],
                          [LAYERNORM_BWD_IN_MEAN] = ln->out[LAYERNORM_OUT_MEAN],
                          [LAYERNORM_BWD_IN_RSTD] = ln->out[LAYERNORM_OUT_RSTD]));
    n->attr.layernorm = (struct layernorm_attr){.n = x->rows, .c = x->cols, .seg = g->seg};
    /* outputs in ops.def's order: dx, dw, db */
    Tensor *dx = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    Tensor *dw = add_out(g, n, DT_F32, 1, x->cols, 1);
    Tensor *db = add_out(g, n, DT_F32, 1, x->cols, 1);
    run_if_eager(g, n);
    d[LAYERNORM_IN_X] = as_stored(g, dx);
    d[LAYERNORM_IN_W] = as_stored_partial(g, dw);
    d[LAYERNORM_IN_B] = as_stored_partial(g, db);
}

Tensor *g_attention(Graph *g, Tensor *qkv, int B, int T, int H)
{
    int C = qkv->cols / 3;
    if (qkv->rows != B * T || qkv->cols % 3 || C % H)
        shape_fail("attention", qkv, qkv);
    Node *n = new_node(g, KOP_ATTENTION, IN(qkv));
    n->attr.attention = (struct attention_attr){
        .B = B, .T = T, .C = C, .H = H,
        .bf16 = g->prec == PREC_BF16}; /* the kernel rounds q, k, v as it loads them */
    Tensor *y = add_out(g, n, DT_F32, B * T, C, 1); /* o, then lse */
    add_out(g, n, DT_F32, B * H, T, 0);
    run_if_eager(g, n);
    return as_stored(g, y);
}

static Tensor *build_attention_bwd(Graph *g, const Node *att, Tensor *dy)
{
    Tensor *qkv = att->in[ATTENTION_IN_QKV];
    Node *n = new_node(g, KOP_ATTENTION_BWD,
                       IN([ATTENTION_BWD_IN_DO] = dy, [ATTENTION_BWD_IN_QKV] = qkv,
                          [ATTENTION_BWD_IN_O] = att->out[ATTENTION_OUT_O],
                          [ATTENTION_BWD_IN_LSE] = att->out[ATTENTION_OUT_LSE]));
    n->attr = att->attr; /* bf16: dy and q, k, v rounded on load */
    Tensor *d = add_out(g, n, DT_F32, qkv->rows, qkv->cols, 1);
    run_if_eager(g, n);
    return as_stored(g, d);
}

Tensor *g_xent(Graph *g, Tensor *logits, Tensor *targets)
{
    if (targets->numel != logits->rows)
        shape_fail("xent", logits, targets);
    Node *n = new_node(g, KOP_XENT, IN([XENT_IN_LOGITS] = logits, [XENT_IN_TARGETS] = targets));
    n->attr.xent = (struct xent_attr){.n = logits->rows, .v = logits->cols, .seg = g->seg};
    Tensor *y = add_out(g, n, DT_F32, 1, 1, 1);
    run_if_eager(g, n);
    return as_stored_partial(g, y); /* a mean over rows: a core's part, in training */
}

static Tensor *build_xent_bwd(Graph *g, const Node *xe, Tensor *dy)
{
    Tensor *logits = xe->in[XENT_IN_LOGITS];
    Node *n = new_node(g, KOP_XENT_BWD,
                       IN([XENT_BWD_IN_LOGITS] = logits,
                          [XENT_BWD_IN_TARGETS] = xe->in[XENT_IN_TARGETS],
                          [XENT_BWD_IN_DLOSS] = dy));
    n->attr = xe->attr;
    Tensor *d = add_out(g, n, DT_F32, logits->rows, logits->cols, 1);
    run_if_eager(g, n);
    return as_stored(g, d);
}

Tensor *g_fill(Graph *g, float value, int rows, int cols)
{
    Node *n = new_node(g, KOP_FILL, NULL);
    n->attr.fill.n = (long)rows * cols; /* by field: the struct has padding, kept zero */
    n->attr.fill.value = value;
    Tensor *y = add_out(g, n, DT_F32, rows, cols, 0);
    run_if_eager(g, n);
    return y;
}

void g_adam(Graph *g, Tensor *p, Tensor *grad, Tensor *m, Tensor *v,
            Tensor *t, Tensor *lr, float b1, float b2, float eps)
{
    if (grad->numel != p->numel || m->numel != p->numel || v->numel != p->numel)
        shape_fail("adam", p, grad);
    Node *n = new_node(g, KOP_ADAM,
                       IN([ADAM_IN_P] = p, [ADAM_IN_GRAD] = grad, [ADAM_IN_M] = m, [ADAM_IN_V] = v,
                          [ADAM_IN_STEP] = t, [ADAM_IN_LR] = lr));
    n->attr.adam = (struct adam_attr){.n = p->numel, .bf16_state = g->prec == PREC_BF16_PURE,
                                      .beta1 = b1, .beta2 = b2, .eps = eps};
    run_if_eager(g, n);
}

const void *g_read(Graph *g, Tensor *t)
{
    if (!t->data) {
        char why[160]; /* which value, made by which op, where in the record */
        snprintf(why, sizeof why, "a host read of t%d [%d x %d] made by %s (node %d of %d)",
                 t->id, t->rows, t->cols, t->node >= 0 ? kop_name(g->nodes[t->node].op) : "-",
                 t->node, g->n_nodes);
        xs_counter_add(C_HOST_READ, 1);
        run_pending(g, &t, 1, why);
    }
    return t->data;
}

const void *g_read_core(Graph *g, Tensor *t, int core)
{
    const void *core0 = g_read(g, t);
    return core > 0 ? t->rep[core] : core0;
}

void g_read_cores(Graph *g, Tensor *t, float *out, size_t n)
{
    size_t per_core = (size_t)t->numel;
    for (int c = 0; c < g->cores && n > 0; c++) {
        size_t k = n < per_core ? n : per_core;
        memcpy(out, g_read_core(g, t, c), sizeof(float) * k);
        out += k, n -= k;
    }
}

void g_mark_step(Graph *g, Tensor *const *keep, int n)
{
    if (!g->lazy)
        return;
    xs_counter_add(C_MARK_STEP, 1);
    run_pending(g, keep, n, "mark_step");
    if (debug_on())
        check_rates(&g->compiler);
}

void g_set_lazy(Graph *g, int lazy) { g->lazy = lazy; }
int g_is_lazy(const Graph *g) { return g->lazy; }

/* ---- reverse-mode autodiff ---- */

/* A tensor used by several nodes gets the sum of their gradients. */
static void accumulate(Graph *g, Tensor *t, Tensor *d)
{
    if (!t || !t->requires_grad)
        return;
    Tensor **s = grad_slot(g, t);
    *s = *s ? g_add(g, *s, d) : d;
}

static int wants(const Tensor *t) { return t && t->requires_grad; }

static void backward_matmul(Graph *g, const Node *n, Tensor *dy)
{
    Tensor *a = n->in[MATMUL_IN_A], *b = n->in[MATMUL_IN_B], *bias = n->in[MATMUL_IN_BIAS];
    Tensor *w = transposed_weight(g, b); /* b = w^T (graph_side.c), or NULL */
    if (wants(a))
        accumulate(g, a, g_matmul(g, dy, g_transpose(g, b), NULL));
    if (wants(b)) /* w gets dy^T a: the same bits as (a^T dy)^T, no transpose back */
        accumulate(g, w ? w : b, w ? build_matmul_tn(g, dy, a) : build_matmul_tn(g, a, dy));
    if (wants(bias))
        accumulate(g, bias, build_sum_rows(g, dy));
}

/* The one place that knows each op's derivative. n is copied because the
 * rules record nodes, which may move the node array. */
static void backward_node(Graph *g, Node n, Tensor *dy)
{
    Tensor *d[LAYERNORM_NIN];
    Tensor *const *in = n.in;
    switch (n.op) {
    case KOP_EMBED:
        accumulate(g, in[EMBED_IN_TABLE],
                   build_embed_bwd(g, in[EMBED_IN_IDX], dy, in[EMBED_IN_TABLE]));
        break;
    case KOP_ADD:
        accumulate(g, in[ADD_IN_A], dy);
        accumulate(g, in[ADD_IN_B], dy);
        break;
    case KOP_MATMUL: backward_matmul(g, &n, dy); break;
    case KOP_TRANSPOSE: accumulate(g, in[TRANSPOSE_IN_X], g_transpose(g, dy)); break;
    case KOP_ROUND_BF16: accumulate(g, in[ROUND_BF16_IN_X], dy); break; /* straight through */
    case KOP_RELU: accumulate(g, in[RELU_IN_X], build_relu_bwd(g, dy, n.out[RELU_OUT_Y])); break;
    case KOP_GELU: accumulate(g, in[GELU_IN_X], build_gelu_bwd(g, dy, in[GELU_IN_X])); break;
    case KOP_LAYERNORM:
        build_layernorm_bwd(g, &n, dy, d);
        accumulate(g, in[LAYERNORM_IN_X], d[LAYERNORM_IN_X]);
        accumulate(g, in[LAYERNORM_IN_W], d[LAYERNORM_IN_W]);
        accumulate(g, in[LAYERNORM_IN_B], d[LAYERNORM_IN_B]);
        break;
    case KOP_ATTENTION: accumulate(g, in[ATTENTION_IN_QKV], build_attention_bwd(g, &n, dy)); break;
    case KOP_ATTENTION_DROP:
        accumulate(g, in[ATTENTION_DROP_IN_QKV], build_attention_drop_bwd(g, &n, dy));
        break;
    case KOP_DROPOUT: /* linear in x: the same mask on dy */
        accumulate(g, in[DROPOUT_IN_X], g_dropout(g, dy, in[DROPOUT_IN_ROWS], in[DROPOUT_IN_KEY],
                                                  n.attr.dropout.p, (int)n.attr.dropout.site));
        break;
    case KOP_XENT: accumulate(g, in[XENT_IN_LOGITS], build_xent_bwd(g, &n, dy)); break;
    default:
        fprintf(stderr, "gpt: internal error: no gradient rule for %s\n",
                kop_name(n.op));
        abort();
    }
}

/* Node i's rule, with the gradient its first output has gathered. */
static void backward_one(Graph *g, int i)
{
    Tensor *out = g->nodes[i].out[KOUT_FIRST], *d;
    if (g->nodes[i].nout && out->requires_grad && (d = *grad_slot(g, out)))
        backward_node(g, g->nodes[i], d);
}

void g_backward(Graph *g, Tensor *y, Tensor *dy)
{
    if (!dy) {
        assert(y->numel == 1);
        dy = g_fill(g, 1.0f, 1, 1);
    }
    *grad_slot(g, y) = dy;
    g->phase = PHASE_BACKWARD; /* until g_reset */
    for (int i = y->node, r = g->n_regions - 1; i >= 0; i--) {
        /* with --remat, a region ending here is recomputed (compiler/remat.c) */
        const struct remat_region *reg = g->remat ? remat_region_ending(g, i, &r) : NULL;
        if (reg)
            i = remat_backward(g, reg, backward_one); /* the region's nodes are done */
        else
            backward_one(g, i);
    }
}

Tensor *g_grad(Graph *g, Tensor *t)
{
    return t->id < g->cap_grads ? g->grads[t->id] : NULL;
}

/* ======================================================================
 * The cut: trace, find or compile, bind, run (compiler.h names the stages)
 * ====================================================================== */

/* Binds every core's slots: core c's buffer of each external tensor, then
 * the roots (g_read reads core 0's, g_read_core any core's: each root's
 * rep holds them on a board of several cores). */
static void **bind_slots(Graph *g, const struct trace *tr, const Program *p)
{
    int nc = g->cores;
    void **slots = xcalloc((size_t)nc * (size_t)p->nslots, sizeof *slots);
    for (int r = 0; r < tr->nroots; r++)
        tr->root_t[r]->rep = nc > 1 ? arena_alloc(&g->meta, sizeof(void *) * (size_t)nc) : NULL;
    for (int c = 0; c < nc; c++) {
        void **sc = slots + (size_t)c * p->nslots;
        for (int s = 0; s < tr->nslots; s++)
            sc[s] = tr->slot[s]->rep ? tr->slot[s]->rep[c] : tr->slot[s]->data;
        for (int r = 0; r < tr->nroots; r++) {
            Tensor *t = tr->root_t[r];
            sc[tr->nslots + r] = arena_alloc(&g->data, (size_t)t->numel * 4);
            if (t->rep)
                t->rep[c] = sc[tr->nslots + r];
            if (!c)
                t->data = sc[tr->nslots + r];
        }
    }
    return slots;
}

/* A cut: trace what is pending, find or compile its program, run it on
 * every core. Afterwards the roots have data and the traced nodes are done. */
static void run_pending(Graph *g, Tensor *const *roots, int nroots, const char *why)
{
    struct trace tr;
    Program *p = compile_cut(&g->compiler, g->nodes, g->n_nodes, g->n_tensors, roots, nroots,
                             why, &tr);
    if (p) {
        void **slots = bind_slots(g, &tr, p);
        void *const *per_core[XS_MAX_CORES];
        for (int c = 0; c < g->cores; c++)
            per_core[c] = slots + (size_t)c * p->nslots;
        xs_run_replicated(p, g->cores, per_core);
        free(slots);
    }
    trace_free(&tr);
}
