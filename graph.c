/* graph.c: the graph layer, in two parts.
 *
 * Part 1, recording and autodiff: model code calls g_* builders; each one
 * records a node (and on the eager cpu device runs it at once). g_backward
 * walks the record backwards, one rule per op, and records the backward
 * pass as more nodes of the same graph.
 *
 * Part 2, the lazy compiler (the xla device): nodes are only recorded until
 * the host needs values. The pipeline of a cut:
 *
 *   g_embed, g_matmul, ... g_backward, g_adam        record: Node
 *        |  g_mark_step, or g_read of a pending value: a cut
 *        v
 *   trace_build     the pending nodes the cut needs  trace: struct tnode
 *        v
 *   key_build       the trace's structure as words (no pointers, no data)
 *        v
 *   lookup          hash, then the full key  -- hit ------------------+
 *        | miss                                                       |
 *        v                                                            |
 *   compile         cse -> dce -> fuse_matmul -> fuse_adds            |
 *        v                                                            |
 *   lower           memory plan -> program of places: struct pinstr   |
 *        v                                                            v
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
 * the arenas are still growing in the first step. */
#include "graph.h"
#include "util.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- bump arena ---- */

struct chunk {
    struct chunk *next;
    size_t cap, used;
    _Alignas(64) unsigned char mem[];
};

struct arena {
    struct chunk *head, *cur;
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "gpt: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void *arena_alloc(struct arena *a, size_t n)
{
    n = (n + 63) & ~(size_t)63; /* keep every buffer cache-line aligned */
    for (; a->cur; a->cur = a->cur->next) {
        if (a->cur->cap - a->cur->used >= n) {
            void *p = a->cur->mem + a->cur->used;
            a->cur->used += n;
            return p;
        }
    }
    size_t cap = n > ((size_t)8 << 20) ? n : ((size_t)8 << 20);
    struct chunk *c = xmalloc(sizeof *c + cap);
    c->cap = cap;
    c->used = n;
    c->next = NULL;
    struct chunk **tail = &a->head;
    while (*tail)
        tail = &(*tail)->next;
    *tail = c;
    a->cur = c;
    return c->mem;
}

static void arena_rewind(struct arena *a)
{
    for (struct chunk *c = a->head; c; c = c->next)
        c->used = 0;
    a->cur = a->head;
}

static void arena_free(struct arena *a)
{
    while (a->head) {
        struct chunk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
    a->cur = NULL;
}

/* ======================================================================
 * Part 1: recording and autodiff
 * ====================================================================== */

/* ---- the graph ---- */

struct cache_entry;

/* What the lazy compiler keeps from one cut to the next (part 2). */
struct compiler {
    struct cache_entry *cache; /* [ncache] compiled programs, by structure */
    int ncache, capcache;
    struct compile_stats last; /* what the last new compile did */
    struct plan_buf *plan;     /* [nplan] the last new program's buffers */
    int nplan;
    int kernels[KOP_COUNT];    /* the last new program's kernels of each op */
    /* GPT_XLA_DEBUG's warnings: the counters after the warm-up steps */
    long warm_compiles, warm_reads;
    int warned_compiles, warned_reads;
};

struct Graph {
    /* the record */
    Node *nodes; /* [cap_nodes] */
    int n_nodes, cap_nodes;
    int n_tensors;
    Tensor **grads; /* [cap_grads] by tensor id */
    int cap_grads;
    struct arena meta, data;
    /* how ops are recorded */
    int seg;  /* rows per example for backward reductions, 0: off */
    int prec; /* enum precision */
    /* the device */
    int lazy;  /* record only; cuts compile and run (part 2) */
    int cores; /* simulated cores a cut runs on */
    struct compiler compiler;
};

struct Graph;
static void run_pending(struct Graph *g, Tensor *const *roots, int nroots, const char *why);
static void cache_free(struct compiler *cc);

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
    free(g);
}

void g_reset(Graph *g)
{
    g->n_nodes = 0;
    g->n_tensors = 0;
    if (g->grads)
        memset(g->grads, 0, sizeof *g->grads * g->cap_grads);
    arena_rewind(&g->meta);
    arena_rewind(&g->data);
}

int g_num_nodes(const Graph *g) { return g->n_nodes; }
const Node *g_node(const Graph *g, int i) { return &g->nodes[i]; }

static Tensor *new_tensor(Graph *g, int kind, int dtype, int rows, int cols)
{
    Tensor *t = arena_alloc(&g->meta, sizeof *t);
    memset(t, 0, sizeof *t);
    t->id = g->n_tensors++;
    t->kind = kind;
    t->dtype = dtype;
    t->rows = rows;
    t->cols = cols;
    t->numel = (long)rows * cols;
    t->node = -1;
    return t;
}

Tensor *g_leaf(Graph *g, int kind, int dtype, void *data, int rows, int cols)
{
    Tensor *t = new_tensor(g, kind, dtype, rows, cols);
    t->data = data;
    t->requires_grad = kind == TK_PARAM;
    return t;
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

Tensor *g_param(Graph *g, float *data, int rows, int cols)
{
    return g_leaf(g, TK_PARAM, DT_F32, data, rows, cols);
}

/* Eager execution: the node runs the moment it is recorded. Lazy mode
 * only records it. */
static void run_node(Graph *g, Node *n)
{
    if (g->lazy)
        return;
    struct kinstr k = {.op = n->op, .attr = n->attr};
    for (int i = 0; i < n->nin; i++)
        k.in[i] = n->in[i] ? n->in[i]->data : NULL;
    for (int i = 0; i < n->nout; i++)
        k.out[i] = n->out[i]->data;
    xs_exec(&k);
}

/* A node for op with the op table's number of inputs, in[0..nin). */
static Node *new_node(Graph *g, int op, Tensor *const *in)
{
    int nin = kop_info(op)->nin;
    if (g->n_nodes == g->cap_nodes) {
        g->cap_nodes = g->cap_nodes ? 2 * g->cap_nodes : 256;
        Node *nn = realloc(g->nodes, sizeof *nn * g->cap_nodes);
        if (!nn) {
            fprintf(stderr, "gpt: out of memory (graph nodes)\n");
            exit(1);
        }
        g->nodes = nn;
    }
    Node *n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->nin = nin;
    for (int i = 0; i < nin; i++)
        n->in[i] = in[i];
    return n;
}

/* Adds an output; it takes a gradient when any input does and diff says
 * the output is differentiable (aux outputs such as saved statistics are
 * not). */
static Tensor *add_out(Graph *g, Node *n, int dtype, int rows, int cols, int diff)
{
    Tensor *t = new_tensor(g, TK_TEMP, dtype, rows, cols);
    t->node = (int)(n - g->nodes);
    t->data = g->lazy ? NULL : arena_alloc(&g->data, (size_t)t->numel * 4);
    for (int i = 0; diff && i < n->nin; i++)
        if (n->in[i] && n->in[i]->requires_grad)
            t->requires_grad = 1;
    n->out[n->nout++] = t;
    return t;
}

static void shape_fail(const char *op, const Tensor *a, const Tensor *b)
{
    fprintf(stderr, "gpt: internal error: %s got shapes [%d,%d] and [%d,%d]\n",
            op, a->rows, a->cols, b->rows, b->cols);
    abort();
}

#define IN(...) ((Tensor *const[]){__VA_ARGS__})

static Tensor *round_bf16(Graph *g, Tensor *x)
{
    Node *n = new_node(g, KOP_ROUND_BF16, IN(x));
    n->attr.elementwise.n = x->numel;
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    run_node(g, n);
    return y;
}

/* y as the device stores it: bf16-pure stores every float tensor as bf16,
 * so each op's result is rounded as it is written. */
static Tensor *as_stored(Graph *g, Tensor *y)
{
    return g->prec == PREC_BF16_PURE ? round_bf16(g, y) : y;
}

/* A matrix-unit operand: rounded to bf16 under --precision bf16 (under
 * bf16-pure it already is). */
static Tensor *mxu_operand(Graph *g, Tensor *x)
{
    return g->prec == PREC_BF16 ? round_bf16(g, x) : x;
}

/* A batch reduction's result: in training (per-example rows set) it is a
 * core's partial sum, kept in fp32 until the all-reduce has summed the
 * cores' parts, so that bf16-pure gradients do not depend on the layout. */
static Tensor *as_stored_partial(Graph *g, Tensor *y)
{
    return g->seg > 0 ? y : as_stored(g, y);
}

static int is_rounded(const Graph *g, const Tensor *x)
{
    return x->node >= 0 && g->nodes[x->node].op == KOP_ROUND_BF16;
}

Tensor *g_all_reduce(Graph *g, Tensor *x)
{
    if (g->cores == 1 && xs_hosts() == 1)
        return is_rounded(g, x) ? x : as_stored(g, x);
    Node *n = new_node(g, KOP_ALL_REDUCE, IN(x));
    n->attr.all_reduce = (struct all_reduce_attr){.n = x->numel, .cores = g->cores};
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 0);
    run_node(g, n);
    return as_stored(g, y);
}

Tensor *g_embed(Graph *g, Tensor *idx, Tensor *table)
{
    Node *n = new_node(g, KOP_EMBED, IN(idx, table));
    n->attr.embed = (struct embed_attr){.n = idx->numel, .c = table->rows, .v = table->cols};
    Tensor *y = add_out(g, n, DT_F32, (int)idx->numel, table->rows, 1);
    run_node(g, n);
    return as_stored(g, y);
}

static Tensor *embed_bwd(Graph *g, Tensor *idx, Tensor *dy, Tensor *table)
{
    Node *n = new_node(g, KOP_EMBED_BWD, IN(idx, dy));
    n->attr.embed = (struct embed_attr){
        .n = idx->numel, .c = table->rows, .v = table->cols, .seg = g->seg};
    Tensor *d = add_out(g, n, DT_F32, table->rows, table->cols, 0);
    run_node(g, n);
    return as_stored_partial(g, d);
}

Tensor *g_add(Graph *g, Tensor *a, Tensor *b)
{
    if (a->numel != b->numel)
        shape_fail("add", a, b);
    Node *n = new_node(g, KOP_ADD, IN(a, b));
    n->attr.elementwise.n = a->numel;
    Tensor *y = add_out(g, n, DT_F32, a->rows, a->cols, 1);
    run_node(g, n);
    return as_stored(g, y);
}

Tensor *g_matmul(Graph *g, Tensor *a, Tensor *b, Tensor *bias)
{
    if (a->cols != b->rows || (bias && bias->numel != b->cols))
        shape_fail("matmul", a, b);
    Node *n = new_node(g, KOP_MATMUL, IN(a, b, bias));
    n->attr.matmul = (struct matmul_attr){
        .n = a->rows, .p = a->cols, .q = b->cols,
        .bf16 = g->prec != PREC_FP32}; /* the kernel rounds a and b to bf16 */
    Tensor *y = add_out(g, n, DT_F32, a->rows, b->cols, 1);
    run_node(g, n);
    return as_stored(g, y);
}

/* a^T @ b: a [p,n], b [p,q] -> [n,q]. Only backward passes record it. */
static Tensor *matmul_tn(Graph *g, Tensor *a, Tensor *b)
{
    if (a->rows != b->rows)
        shape_fail("matmul_tn", a, b);
    Node *n = new_node(g, KOP_MATMUL_TN, IN(a, b));
    n->attr.matmul = (struct matmul_attr){
        .n = a->cols, .p = a->rows, .q = b->cols, .seg = g->seg,
        .bf16 = g->prec != PREC_FP32}; /* the matrix unit: bf16 pairs, fp32 sums */
    Tensor *y = add_out(g, n, DT_F32, a->cols, b->cols, 1);
    run_node(g, n);
    return as_stored_partial(g, y);
}

Tensor *g_transpose(Graph *g, Tensor *x)
{
    /* (x^T)^T is x: backward passes through a linear layer ask for it. */
    if (x->node >= 0 && g->nodes[x->node].op == KOP_TRANSPOSE)
        return g->nodes[x->node].in[0];
    Node *n = new_node(g, KOP_TRANSPOSE, IN(x));
    n->attr.transpose = (struct transpose_attr){.rows = x->rows, .cols = x->cols};
    Tensor *y = add_out(g, n, DT_F32, x->cols, x->rows, 1);
    run_node(g, n);
    return y;
}

Tensor *g_linear(Graph *g, Tensor *x, Tensor *w, Tensor *b)
{
    return g_matmul(g, x, g_transpose(g, w), b);
}

static Tensor *sum_rows(Graph *g, Tensor *x)
{
    Node *n = new_node(g, KOP_SUM_ROWS, IN(x));
    n->attr.sum_rows = (struct sum_rows_attr){.n = x->rows, .q = x->cols, .seg = g->seg};
    Tensor *y = add_out(g, n, DT_F32, 1, x->cols, 1);
    run_node(g, n);
    return as_stored_partial(g, y);
}

Tensor *g_relu(Graph *g, Tensor *x)
{
    Node *n = new_node(g, KOP_RELU, IN(x));
    n->attr.elementwise.n = x->numel;
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    run_node(g, n);
    return y;
}

static Tensor *relu_bwd(Graph *g, Tensor *dy, Tensor *y)
{
    Node *n = new_node(g, KOP_RELU_BWD, IN(dy, y));
    n->attr.elementwise.n = y->numel;
    Tensor *d = add_out(g, n, DT_F32, y->rows, y->cols, 1);
    run_node(g, n);
    return as_stored(g, d);
}

Tensor *g_layernorm(Graph *g, Tensor *x, Tensor *w, Tensor *b)
{
    if (w->numel != x->cols || b->numel != x->cols)
        shape_fail("layernorm", x, w);
    Node *n = new_node(g, KOP_LAYERNORM, IN(x, w, b));
    n->attr.layernorm = (struct layernorm_attr){.n = x->rows, .c = x->cols};
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    add_out(g, n, DT_F32, x->rows, 1, 0); /* mean */
    add_out(g, n, DT_F32, x->rows, 1, 0); /* rstd */
    run_node(g, n);
    return as_stored(g, y);
}

/* Fills ln's gradient slots: d[0] for x, d[1] for w, d[2] for b. */
static void layernorm_bwd(Graph *g, const Node *ln, Tensor *dy, Tensor **d)
{
    Tensor *x = ln->in[0], *w = ln->in[1];
    Node *n = new_node(g, KOP_LAYERNORM_BWD, IN(dy, x, w, ln->out[1], ln->out[2]));
    n->attr.layernorm = (struct layernorm_attr){.n = x->rows, .c = x->cols, .seg = g->seg};
    d[0] = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    d[1] = add_out(g, n, DT_F32, 1, x->cols, 1);
    d[2] = add_out(g, n, DT_F32, 1, x->cols, 1);
    run_node(g, n);
    d[0] = as_stored(g, d[0]);
    d[1] = as_stored_partial(g, d[1]);
    d[2] = as_stored_partial(g, d[2]);
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
    Tensor *y = add_out(g, n, DT_F32, B * T, C, 1);
    add_out(g, n, DT_F32, B * H, T, 0); /* lse */
    run_node(g, n);
    return as_stored(g, y);
}

static Tensor *attention_bwd(Graph *g, const Node *att, Tensor *dy)
{
    Node *n = new_node(g, KOP_ATTENTION_BWD, IN(dy, att->in[0], att->out[0], att->out[1]));
    n->attr = att->attr; /* bf16: dy and q, k, v rounded on load */
    Tensor *d = add_out(g, n, DT_F32, att->in[0]->rows, att->in[0]->cols, 1);
    run_node(g, n);
    return as_stored(g, d);
}

Tensor *g_dropout(Graph *g, Tensor *x, Tensor *rows, Tensor *key, float p, int site)
{
    if (rows->numel != x->rows || key->numel != 2)
        shape_fail("dropout", x, rows);
    Node *n = new_node(g, KOP_DROPOUT, IN(x, rows, key));
    n->attr.dropout = (struct dropout_attr){.n = x->rows, .c = x->cols, .site = site, .p = p};
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    run_node(g, n);
    return as_stored(g, y);
}

Tensor *g_attention_drop(Graph *g, Tensor *qkv, Tensor *rows, Tensor *key, int B, int T, int H,
                         float p, int site)
{
    int C = qkv->cols / 3;
    if (qkv->rows != B * T || qkv->cols % 3 || C % H || rows->numel != B * T || key->numel != 2)
        shape_fail("attention_drop", qkv, rows);
    Node *n = new_node(g, KOP_ATTENTION_DROP, IN(qkv, rows, key));
    n->attr.attention_drop =
        (struct attention_drop_attr){.B = B, .T = T, .C = C, .H = H, .site = site, .p = p};
    Tensor *y = add_out(g, n, DT_F32, B * T, C, 1);
    add_out(g, n, DT_F32, B * H, T, 0); /* lse */
    run_node(g, n);
    return as_stored(g, y);
}

static Tensor *attention_drop_bwd(Graph *g, const Node *att, Tensor *dy)
{
    Node *n = new_node(g, KOP_ATTENTION_DROP_BWD,
                       IN(dy, att->in[0], att->out[0], att->out[1], att->in[1], att->in[2]));
    n->attr = att->attr;
    Tensor *d = add_out(g, n, DT_F32, att->in[0]->rows, att->in[0]->cols, 1);
    run_node(g, n);
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
    run_node(g, n);
    return as_stored(g, y);
}

Tensor *g_attention_step(Graph *g, Tensor *qkv, Tensor *kc, Tensor *vc,
                         Tensor *pos, int H)
{
    int C = qkv->cols / 3, nb = qkv->rows;
    if (kc->cols != C || kc->rows % nb || vc->numel != kc->numel)
        shape_fail("attention_step", qkv, kc);
    qkv = mxu_operand(g, qkv);
    Node *n = new_node(g, KOP_ATTENTION_STEP, IN(qkv, kc, vc, pos));
    n->attr.decode = (struct decode_attr){.nb = nb, .tmax = kc->rows / nb, .C = C, .H = H};
    Tensor *y = add_out(g, n, DT_F32, nb, C, 0);
    run_node(g, n);
    return as_stored(g, y);
}

Tensor *g_xent(Graph *g, Tensor *logits, Tensor *targets)
{
    if (targets->numel != logits->rows)
        shape_fail("xent", logits, targets);
    Node *n = new_node(g, KOP_XENT, IN(logits, targets));
    n->attr.xent = (struct xent_attr){.n = logits->rows, .v = logits->cols};
    Tensor *y = add_out(g, n, DT_F32, 1, 1, 1);
    run_node(g, n);
    return as_stored(g, y);
}

static Tensor *xent_bwd(Graph *g, const Node *xe, Tensor *dy)
{
    Node *n = new_node(g, KOP_XENT_BWD, IN(xe->in[0], xe->in[1], dy));
    n->attr = xe->attr;
    Tensor *d = add_out(g, n, DT_F32, xe->in[0]->rows, xe->in[0]->cols, 1);
    run_node(g, n);
    return as_stored(g, d);
}

Tensor *g_fill(Graph *g, float value, int rows, int cols)
{
    Node *n = new_node(g, KOP_FILL, NULL);
    n->attr.fill.n = (long)rows * cols; /* by field: the struct has padding, kept zero */
    n->attr.fill.value = value;
    Tensor *y = add_out(g, n, DT_F32, rows, cols, 0);
    run_node(g, n);
    return y;
}

void g_adam(Graph *g, Tensor *p, Tensor *grad, Tensor *m, Tensor *v,
            Tensor *t, Tensor *lr, float b1, float b2, float eps)
{
    if (grad->numel != p->numel || m->numel != p->numel || v->numel != p->numel)
        shape_fail("adam", p, grad);
    Node *n = new_node(g, KOP_ADAM, IN(p, grad, m, v, t, lr));
    n->attr.adam = (struct adam_attr){.n = p->numel, .bf16_state = g->prec == PREC_BF16_PURE,
                                      .beta1 = b1, .beta2 = b2, .eps = eps};
    run_node(g, n);
}

static int debug_on(void);
static void check_rates(struct compiler *cc);

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

static Tensor **grad_slot(Graph *g, const Tensor *t)
{
    if (t->id >= g->cap_grads) {
        int cap = g->cap_grads ? g->cap_grads : 1024;
        while (cap <= t->id)
            cap *= 2;
        Tensor **ng = realloc(g->grads, sizeof *ng * cap);
        if (!ng) {
            fprintf(stderr, "gpt: out of memory (gradients)\n");
            exit(1);
        }
        memset(ng + g->cap_grads, 0, sizeof *ng * (cap - g->cap_grads));
        g->grads = ng;
        g->cap_grads = cap;
    }
    return &g->grads[t->id];
}

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
    Tensor *a = n->in[0], *b = n->in[1], *bias = n->in[2];
    if (wants(a))
        accumulate(g, a, g_matmul(g, dy, g_transpose(g, b), NULL));
    if (wants(b))
        accumulate(g, b, matmul_tn(g, a, dy));
    if (wants(bias))
        accumulate(g, bias, sum_rows(g, dy));
}

/* The one place that knows each op's derivative. n is copied because the
 * rules record nodes, which may move the node array. */
static void backward_node(Graph *g, Node n, Tensor *dy)
{
    Tensor *d[3];
    switch (n.op) {
    case KOP_EMBED: accumulate(g, n.in[1], embed_bwd(g, n.in[0], dy, n.in[1])); break;
    case KOP_ADD:
        accumulate(g, n.in[0], dy);
        accumulate(g, n.in[1], dy);
        break;
    case KOP_MATMUL: backward_matmul(g, &n, dy); break;
    case KOP_TRANSPOSE: accumulate(g, n.in[0], g_transpose(g, dy)); break;
    case KOP_ROUND_BF16: accumulate(g, n.in[0], dy); break; /* straight through */
    case KOP_RELU: accumulate(g, n.in[0], relu_bwd(g, dy, n.out[0])); break;
    case KOP_LAYERNORM:
        layernorm_bwd(g, &n, dy, d);
        for (int i = 0; i < 3; i++)
            accumulate(g, n.in[i], d[i]);
        break;
    case KOP_ATTENTION: accumulate(g, n.in[0], attention_bwd(g, &n, dy)); break;
    case KOP_ATTENTION_DROP: accumulate(g, n.in[0], attention_drop_bwd(g, &n, dy)); break;
    case KOP_DROPOUT: /* linear in x: the same mask on dy */
        accumulate(g, n.in[0], g_dropout(g, dy, n.in[1], n.in[2], n.attr.dropout.p,
                                         (int)n.attr.dropout.site));
        break;
    case KOP_XENT: accumulate(g, n.in[0], xent_bwd(g, &n, dy)); break;
    default:
        fprintf(stderr, "gpt: internal error: no gradient rule for %s\n",
                kop_name(n.op));
        abort();
    }
}

void g_backward(Graph *g, Tensor *y, Tensor *dy)
{
    if (!dy) {
        assert(y->numel == 1);
        dy = g_fill(g, 1.0f, 1, 1);
    }
    *grad_slot(g, y) = dy;
    for (int i = y->node; i >= 0; i--) {
        Tensor *out = g->nodes[i].out[0];
        if (!g->nodes[i].nout || !out->requires_grad)
            continue;
        Tensor *d = *grad_slot(g, out);
        if (d)
            backward_node(g, g->nodes[i], d);
    }
}

Tensor *g_grad(Graph *g, Tensor *t)
{
    return t->id < g->cap_grads ? g->grads[t->id] : NULL;
}

/* ======================================================================
 * Part 2: the lazy compiler (the xla device)
 * ======================================================================
 *
 * A cut (mark_step or a host read) gathers the pending nodes the wanted
 * values depend on, plus every pending node with a side effect (Adam, KV
 * cache writes): that is the trace. Its structure (ops, shapes, attributes,
 * which operand comes from where) is serialised into a key. The key's hash
 * finds a cached program; the full key confirms it. A miss compiles: CSE,
 * dead-code elimination, fusion, a static memory plan. The program then
 * runs on the device with the external buffers bound to its slots. */

uint64_t g_hash_mask = ~(uint64_t)0;

/* ---- level 2: the traced node and its operand references ---- */

/* Where a traced operand comes from: nothing, slot s (an external buffer,
 * bound when the program runs), or output k of traced node i. */
enum ref_kind { REF_NONE, REF_SLOT, REF_OUT };
struct ref {
    int kind; /* enum ref_kind */
    int at;   /* REF_SLOT: the slot; REF_OUT: the traced node */
    int out;  /* REF_OUT: which of the node's outputs */
};

static struct ref no_ref(void) { return (struct ref){REF_NONE, 0, 0}; }
static struct ref slot_ref(int slot) { return (struct ref){REF_SLOT, slot, 0}; }
static struct ref out_ref(int node, int out) { return (struct ref){REF_OUT, node, out}; }
static int is_out(struct ref r) { return r.kind == REF_OUT; }

static int same_ref(struct ref a, struct ref b)
{
    return a.kind == b.kind && a.at == b.at && a.out == b.out;
}

/* A node output's index in the tables kept per output (uses, forwarding,
 * values): KMAX_OUT entries per traced node. */
static long out_index(struct ref r) { return (long)r.at * KMAX_OUT + r.out; }

struct tnode {
    int op, nin, nout, dead;
    union kattr attr;
    struct ref in[KMAX_IN];
    int rows[KMAX_OUT], cols[KMAX_OUT];
};

struct trace {
    int n, nslots, nroots;
    struct tnode *nodes; /* [n] in recording order, a topological order */
    Tensor **slot;       /* [nslots] external buffers */
    struct ref *roots;   /* [nroots] the values the host keeps */
    Tensor **root_t;     /* [nroots] their tensors */
};

struct cache_entry {
    uint64_t hash;
    int64_t *key;
    long keylen;
    Program *prog;
};

static int side_effect(int op) { return op == KOP_ADAM || op == KOP_ATTENTION_STEP; }

/* ---- gathering the trace ---- */

static void mark_live(const Graph *g, char *live, int i)
{
    if (live[i])
        return;
    live[i] = 1;
    const Node *n = &g->nodes[i];
    for (int k = 0; k < n->nin; k++)
        if (n->in[k] && !n->in[k]->data && n->in[k]->node >= 0)
            mark_live(g, live, n->in[k]->node);
}

static struct ref slot_of(struct trace *tr, Tensor *t, int *slot_by_id)
{
    if (slot_by_id[t->id] < 0) {
        slot_by_id[t->id] = tr->nslots;
        tr->slot[tr->nslots++] = t;
    }
    return slot_ref(slot_by_id[t->id]);
}

/* A tensor with data is an external buffer (a slot); one without is the
 * output of a pending node, traced as local[node]. */
static struct ref ref_of(struct trace *tr, Tensor *t, const int *local, int *slot_by_id,
                         const Graph *g)
{
    if (!t)
        return no_ref();
    if (t->data)
        return slot_of(tr, t, slot_by_id);
    const Node *p = &g->nodes[t->node];
    int k = 0;
    while (p->out[k] != t)
        k++;
    return out_ref(local[t->node], k);
}

static void trace_node(struct trace *tr, const Node *n, const int *local, int *slot_by_id,
                       const Graph *g)
{
    struct tnode *tn = &tr->nodes[tr->n++];
    memset(tn, 0, sizeof *tn);
    tn->op = n->op;
    tn->nin = n->nin;
    tn->nout = n->nout;
    tn->attr = n->attr;
    for (int k = 0; k < KMAX_IN; k++)
        tn->in[k] = k < n->nin ? ref_of(tr, n->in[k], local, slot_by_id, g) : no_ref();
    for (int k = 0; k < n->nout; k++) {
        tn->rows[k] = n->out[k]->rows;
        tn->cols[k] = n->out[k]->cols;
    }
}

static void add_roots(struct trace *tr, Tensor *const *roots, int nroots, const int *local,
                      int *slot_by_id, const Graph *g)
{
    for (int r = 0; r < nroots; r++) {
        int dup = 0;
        for (int q = 0; q < tr->nroots; q++)
            dup |= tr->root_t[q] == roots[r];
        if (roots[r]->data || dup)
            continue;
        tr->root_t[tr->nroots] = roots[r];
        tr->roots[tr->nroots++] = ref_of(tr, roots[r], local, slot_by_id, g);
    }
}

/* The pending work the roots need, plus pending side effects. */
static void trace_build(Graph *g, Tensor *const *roots, int nroots, struct trace *tr)
{
    char *live = xcalloc((size_t)g->n_nodes, 1);
    int *local = xcalloc((size_t)g->n_nodes, sizeof(int));
    int *slot_by_id = xcalloc((size_t)g->n_tensors, sizeof(int));
    memset(slot_by_id, -1, sizeof(int) * (size_t)g->n_tensors);
    for (int r = 0; r < nroots; r++)
        if (!roots[r]->data)
            mark_live(g, live, roots[r]->node);
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].done && side_effect(g->nodes[i].op))
            mark_live(g, live, i);
    memset(tr, 0, sizeof *tr);
    tr->nodes = xcalloc((size_t)g->n_nodes, sizeof *tr->nodes);
    tr->slot = xcalloc((size_t)g->n_tensors, sizeof *tr->slot);
    tr->roots = xcalloc((size_t)nroots, sizeof *tr->roots);
    tr->root_t = xcalloc((size_t)nroots, sizeof *tr->root_t);
    for (int i = 0; i < g->n_nodes; i++) {
        if (!live[i])
            continue;
        local[i] = tr->n;
        trace_node(tr, &g->nodes[i], local, slot_by_id, g);
        g->nodes[i].done = 1;
    }
    add_roots(tr, roots, nroots, local, slot_by_id, g);
    free(live);
    free(local);
    free(slot_by_id);
}

static void trace_free(struct trace *tr)
{
    free(tr->nodes);
    free(tr->slot);
    free(tr->roots);
    free(tr->root_t);
}

/* ---- the cache key: structure only, never pointers or data ----
 * Layout: node count, slot count, root count; 4 words per slot; then per
 * node its op, operand counts, attributes and operand references, and the
 * shapes of its outputs; last, the roots. */

struct key {
    int64_t *v;
    long n, cap;
};

static void key_put(struct key *k, int64_t x)
{
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 1024;
        k->v = realloc(k->v, sizeof *k->v * (size_t)k->cap);
        if (!k->v) {
            fprintf(stderr, "gpt: out of memory (cache key)\n");
            exit(1);
        }
    }
    k->v[k->n++] = x;
}

static void key_ref(struct key *k, struct ref r)
{
    key_put(k, r.kind);
    key_put(k, r.at);
    key_put(k, r.out);
}

_Static_assert(sizeof(union kattr) % sizeof(int64_t) == 0, "attributes hash as whole words");

static void key_node(struct key *k, const struct tnode *t)
{
    int64_t words[sizeof(union kattr) / sizeof(int64_t)];
    memcpy(words, &t->attr, sizeof words);
    key_put(k, t->op);
    key_put(k, t->nin);
    key_put(k, t->nout);
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        key_put(k, words[i]);
    for (int i = 0; i < KMAX_IN; i++)
        key_ref(k, t->in[i]);
    for (int i = 0; i < t->nout; i++) {
        key_put(k, t->rows[i]);
        key_put(k, t->cols[i]);
    }
}

static struct key key_build(const struct trace *tr)
{
    struct key k = {0};
    key_put(&k, tr->n);
    key_put(&k, tr->nslots);
    key_put(&k, tr->nroots);
    for (int s = 0; s < tr->nslots; s++) {
        const Tensor *t = tr->slot[s];
        key_put(&k, t->kind == TK_INPUT); /* transferred, or bound in place */
        key_put(&k, t->dtype);
        key_put(&k, t->rows);
        key_put(&k, t->cols);
    }
    for (int i = 0; i < tr->n; i++)
        key_node(&k, &tr->nodes[i]);
    for (int r = 0; r < tr->nroots; r++)
        key_ref(&k, tr->roots[r]);
    return k;
}

static uint64_t key_hash(const struct key *k)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (long i = 0; i < k->n; i++)
        h = (h ^ (uint64_t)k->v[i]) * 0x100000001b3ull;
    return h & g_hash_mask;
}

static void cache_free(struct compiler *cc)
{
    for (int i = 0; i < cc->ncache; i++) {
        free(cc->cache[i].key);
        program_free(cc->cache[i].prog);
    }
    free(cc->cache);
    free(cc->plan);
}

/* ---- passes: CSE, DCE, fusion ---- */

static int same_node(const struct tnode *a, const struct tnode *b)
{
    return a->op == b->op && a->nin == b->nin && a->nout == b->nout &&
           !memcmp(&a->attr, &b->attr, sizeof a->attr) && !memcmp(a->in, b->in, sizeof a->in);
}

/* r, or what CSE replaced it with. */
static struct ref follow(const struct ref *fwd, struct ref r)
{
    return is_out(r) ? fwd[out_index(r)] : r;
}

/* Common subexpressions: a node equal to an earlier one (same op,
 * attributes and operands) reuses the earlier one's outputs. */
static void cse(struct trace *tr)
{
    struct ref *fwd = xcalloc((size_t)tr->n * KMAX_OUT, sizeof *fwd);
    for (int i = 0; i < tr->n; i++) {
        struct tnode *t = &tr->nodes[i];
        for (int k = 0; k < KMAX_IN; k++)
            t->in[k] = follow(fwd, t->in[k]);
        for (int k = 0; k < KMAX_OUT; k++)
            fwd[out_index(out_ref(i, k))] = out_ref(i, k);
        for (int j = 0; j < i && !side_effect(t->op); j++) {
            if (!tr->nodes[j].dead && same_node(&tr->nodes[j], t)) {
                for (int k = 0; k < KMAX_OUT; k++)
                    fwd[out_index(out_ref(i, k))] = out_ref(j, k);
                t->dead = 1;
                break;
            }
        }
    }
    for (int r = 0; r < tr->nroots; r++)
        tr->roots[r] = follow(fwd, tr->roots[r]);
    free(fwd);
}

/* Consumers of every node output among live nodes and roots. */
static int *count_uses(const struct trace *tr)
{
    int *uses = xcalloc((size_t)tr->n * KMAX_OUT, sizeof(int));
    for (int i = 0; i < tr->n; i++)
        for (int k = 0; k < KMAX_IN && !tr->nodes[i].dead; k++)
            if (is_out(tr->nodes[i].in[k]))
                uses[out_index(tr->nodes[i].in[k])]++;
    for (int r = 0; r < tr->nroots; r++)
        if (is_out(tr->roots[r]))
            uses[out_index(tr->roots[r])] += 1000; /* a root is never fused away */
    return uses;
}

/* Dead code: nodes no root and no side effect depends on. */
static void dce(struct trace *tr)
{
    char *need = xcalloc((size_t)tr->n, 1);
    for (int r = 0; r < tr->nroots; r++)
        if (is_out(tr->roots[r]))
            need[tr->roots[r].at] = 1;
    for (int i = tr->n - 1; i >= 0; i--) {
        struct tnode *t = &tr->nodes[i];
        if (t->dead || !(need[i] || side_effect(t->op))) {
            t->dead = 1;
            continue;
        }
        for (int k = 0; k < KMAX_IN; k++)
            if (is_out(t->in[k]))
                need[t->in[k].at] = 1;
    }
    free(need);
}

/* The single consumer of node i's output 0 that may absorb it. */
static int only_consumer(const struct trace *tr, const int *uses, int i)
{
    if (uses[out_index(out_ref(i, 0))] != 1)
        return -1;
    for (int j = i + 1; j < tr->n; j++) {
        if (tr->nodes[j].dead)
            continue;
        if (side_effect(tr->nodes[j].op))
            return -1; /* never move a read past an in-place write */
        for (int k = 0; k < KMAX_IN; k++)
            if (same_ref(tr->nodes[j].in[k], out_ref(i, 0)))
                return j;
    }
    return -1;
}

/* The consumer j takes over node i: j becomes op with i's operands and
 * attributes, followed by j's other operands, and keeps j's outputs. */
static void absorb(struct trace *tr, int i, int j, int op)
{
    struct tnode *src = &tr->nodes[i], *dst = &tr->nodes[j];
    struct ref extra[KMAX_IN];
    int ne = 0;
    for (int k = 0; k < dst->nin; k++)
        if (!same_ref(dst->in[k], out_ref(i, 0)))
            extra[ne++] = dst->in[k];
    int nin = src->nin;
    struct ref in[KMAX_IN];
    memcpy(in, src->in, sizeof in);
    for (int k = 0; k < ne; k++)
        in[nin++] = extra[k];
    memcpy(dst->in, in, sizeof in);
    dst->nin = nin;
    dst->op = op;
    dst->attr = src->attr;
    src->dead = 1;
}

/* The next matmul fusion for node i, if any: 1 when it fused. */
static int fuse_matmul_once(struct trace *tr, int i)
{
    struct tnode *t = &tr->nodes[i];
    int *uses = count_uses(tr);
    int j = only_consumer(tr, uses, i);
    free(uses);
    if (j < 0)
        return 0;
    struct tnode *c = &tr->nodes[j];
    int relu = t->op == KOP_MATMUL_EX && t->attr.matmul.relu;
    int residuals = t->op == KOP_MATMUL_EX ? t->nin - 3 : 0; /* after a, b, bias */
    if (c->op == KOP_RELU && !residuals && !relu) {
        absorb(tr, i, j, KOP_MATMUL_EX);
        c->attr.matmul.relu = 1;
        c->nin = 3;
        return 1;
    }
    if (c->op == KOP_ADD && !relu && residuals < 2 && !same_ref(c->in[0], c->in[1])) {
        if (t->op == KOP_MATMUL)
            t->nin = 3; /* the bias operand stays in its place, even when absent */
        absorb(tr, i, j, KOP_MATMUL_EX);
        return 1;
    }
    return 0;
}

/* Epilogues folded into a matmul: ReLU, and residual adds. Both are exact:
 * the kernel computes the same matmul and then the same additions in the
 * same order (a + b == b + a in IEEE arithmetic). */
static void fuse_matmul(struct trace *tr)
{
    for (int i = 0; i < tr->n; i++) {
        struct tnode *t = &tr->nodes[i];
        if (t->dead || (t->op != KOP_MATMUL && t->op != KOP_MATMUL_EX))
            continue;
        if (fuse_matmul_once(tr, i))
            i = -1; /* the absorbed node may fuse again */
    }
}

/* Chains of adds become one pass over memory. Only a left-leaning chain
 * keeps the order of additions, and an add whose second operand is the
 * inner add is swapped first (exact, as addition commutes). */
static void fuse_adds(struct trace *tr)
{
    for (int i = 0; i < tr->n; i++) {
        struct tnode *t = &tr->nodes[i];
        if (t->dead || (t->op != KOP_ADD && t->op != KOP_ADD_N))
            continue;
        int *uses = count_uses(tr);
        int j = only_consumer(tr, uses, i);
        free(uses);
        if (j < 0 || tr->nodes[j].op != KOP_ADD || t->nin >= KMAX_IN)
            continue;
        struct tnode *c = &tr->nodes[j];
        if (same_ref(c->in[0], c->in[1]))
            continue;
        if (same_ref(c->in[1], out_ref(i, 0))) {
            c->in[1] = c->in[0];
            c->in[0] = out_ref(i, 0);
        }
        absorb(tr, i, j, KOP_ADD_N);
        i = -1;
    }
}

/* ---- the memory plan ---- */

/* A value the program keeps in its arena, and when it is alive. */
struct value {
    struct ref ref;  /* a node output, or the slot of a transferred input */
    long bytes, off;
    int first, last; /* instruction indices; inputs are born at -1 */
    int id;          /* its index before the plan sorted the values */
};

static int by_size_desc(const void *a, const void *b)
{
    const struct value *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return x->first - y->first;
}

/* Greedy best-known heuristic: biggest buffers first, each at the lowest
 * offset that overlaps no placed buffer alive at the same time. */
static size_t place_values(struct value *v, int n)
{
    size_t high = 0;
    qsort(v, (size_t)n, sizeof *v, by_size_desc);
    for (int i = 0; i < n; i++) {
        long off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int j = 0; j < i; j++) {
                int alive = v[j].first <= v[i].last && v[i].first <= v[j].last;
                int clash = off < v[j].off + v[j].bytes && v[j].off < off + v[i].bytes;
                if (alive && clash) {
                    off = v[j].off + v[j].bytes;
                    moved = 1;
                }
            }
        }
        v[i].off = off;
        if ((size_t)(off + v[i].bytes) > high)
            high = (size_t)(off + v[i].bytes);
    }
    return high;
}

/* ---- lowering: the program of places (level 3) ---- */

struct emit {
    const struct trace *tr;
    int *order;            /* [nk] live node indices in run order */
    int nk;
    struct value *val;     /* [nval] */
    int nval;
    long *where;           /* [n*KMAX_OUT] value index of each node output */
    long *slot_val;        /* [nslots] value index of a transferred input, or -1 */
};

static long value_bytes(long rows, long cols) { return (rows * cols * 4 + 63) & ~63L; }

static void add_value(struct emit *e, struct ref ref, long bytes, int first)
{
    struct value *v = &e->val[e->nval];
    *v = (struct value){.ref = ref, .bytes = bytes, .first = first, .last = first,
                        .id = e->nval};
    if (ref.kind == REF_SLOT)
        e->slot_val[ref.at] = e->nval;
    else
        e->where[out_index(ref)] = e->nval;
    e->nval++;
}

/* The value an operand reads, or -1 (none, or a slot bound in place). */
static long value_of(const struct emit *e, struct ref r)
{
    return r.kind == REF_NONE ? -1 : r.kind == REF_SLOT ? e->slot_val[r.at]
                                                        : e->where[out_index(r)];
}

/* The device runs a stretch of consecutive all-reduces as one collective,
 * all at once; so within it no buffer may be reused: every operand lives
 * from the stretch's first instruction to its last. */
static void widen_collectives(struct emit *e)
{
    for (int k0 = 0; k0 < e->nk;) {
        int k1 = k0;
        while (k1 < e->nk && e->tr->nodes[e->order[k1]].op == KOP_ALL_REDUCE)
            k1++;
        for (int i = 0; k1 > k0 && i < e->nval; i++) {
            struct value *v = &e->val[i];
            if (v->first >= k0 && v->first < k1)
                v->first = k0;
            if (v->last >= k0 && v->last < k1)
                v->last = k1 - 1;
        }
        k0 = k1 > k0 ? k1 : k0 + 1;
    }
}

static void collect_values(struct emit *e)
{
    const struct trace *tr = e->tr;
    for (int s = 0; s < tr->nslots; s++) {
        e->slot_val[s] = -1;
        if (tr->slot[s]->kind == TK_INPUT)
            add_value(e, slot_ref(s), value_bytes(tr->slot[s]->rows, tr->slot[s]->cols), -1);
    }
    for (int k = 0; k < e->nk; k++) {
        const struct tnode *t = &tr->nodes[e->order[k]];
        for (int o = 0; o < t->nout; o++)
            add_value(e, out_ref(e->order[k], o), value_bytes(t->rows[o], t->cols[o]), k);
        for (int i = 0; i < KMAX_IN; i++) {
            long vi = value_of(e, t->in[i]);
            if (vi >= 0)
                e->val[vi].last = k;
        }
    }
    for (int r = 0; r < tr->nroots; r++)
        if (is_out(tr->roots[r]))
            e->val[value_of(e, tr->roots[r])].last = e->nk; /* read after the run */
    widen_collectives(e);
}

static struct place place_of(const struct emit *e, const long *off_of, struct ref r)
{
    long vi = value_of(e, r);
    if (vi >= 0)
        return (struct place){PL_ARENA, off_of[vi]};
    if (r.kind == REF_SLOT)
        return (struct place){PL_SLOT, r.at};
    return (struct place){PL_NONE, 0};
}

static Program *emit_program(struct emit *e, const long *off_of, size_t arena)
{
    const struct trace *tr = e->tr;
    Program *p = xcalloc(1, sizeof *p);
    p->n = e->nk;
    p->ins = xcalloc((size_t)e->nk, sizeof *p->ins);
    for (int k = 0; k < e->nk; k++) {
        const struct tnode *t = &tr->nodes[e->order[k]];
        struct pinstr *pi = &p->ins[k];
        pi->op = t->op;
        pi->attr = t->attr;
        for (int i = 0; i < KMAX_IN; i++)
            pi->in[i] = place_of(e, off_of, t->in[i]);
        for (int o = 0; o < t->nout; o++)
            pi->out[o] = place_of(e, off_of, out_ref(e->order[k], o));
    }
    p->arena_bytes = arena;
    p->nslots = tr->nslots + tr->nroots;
    p->tin = xcalloc((size_t)tr->nslots, sizeof *p->tin);
    for (int s = 0; s < tr->nslots; s++)
        if (e->slot_val[s] >= 0)
            p->tin[p->nin++] = (struct transfer){s, off_of[e->slot_val[s]],
                                                 tr->slot[s]->numel * 4};
    p->tout = xcalloc((size_t)tr->nroots, sizeof *p->tout);
    for (int r = 0; r < tr->nroots; r++) {
        struct place pl = place_of(e, off_of, tr->roots[r]);
        p->tout[p->nout++] = (struct transfer){tr->nslots + r, pl.at, tr->root_t[r]->numel * 4};
    }
    return p;
}

/* ---- compile ---- */

static void record_plan(struct compiler *cc, const struct value *v, int n)
{
    free(cc->plan);
    cc->plan = xcalloc((size_t)n, sizeof *cc->plan);
    cc->nplan = n;
    cc->last.buffers = 0;
    for (int i = 0; i < n; i++) {
        cc->plan[i] = (struct plan_buf){v[i].off, v[i].bytes, v[i].first, v[i].last};
        cc->last.buffers += (size_t)v[i].bytes;
    }
}

static void fmt_bytes(char *buf, size_t n, double b)
{
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.1f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, n, "%.1f KiB", b / 1024.0);
}

/* "op f32[r,c] 1.5 MiB" for a value of the plan. */
static void value_name(char *buf, size_t n, const struct emit *e, const struct value *v)
{
    char sz[32];
    fmt_bytes(sz, sizeof sz, (double)v->bytes);
    if (v->ref.kind == REF_SLOT) {
        const Tensor *t = e->tr->slot[v->ref.at];
        snprintf(buf, n, "input %s[%d,%d] %s", t->dtype == DT_I32 ? "s32" : "f32", t->rows,
                 t->cols, sz);
        return;
    }
    const struct tnode *t = &e->tr->nodes[v->ref.at];
    snprintf(buf, n, "%s f32[%d,%d] %s", kop_name(t->op), t->rows[v->ref.out],
             t->cols[v->ref.out], sz);
}

/* XLA refuses at compile time a program whose buffers do not fit a core's
 * HBM; so do we, naming the biggest buffers as its RESOURCE_EXHAUSTED
 * error does. Resident buffers (weights, optimizer state) count too. */
static void check_hbm(const struct emit *e, const struct value *by_size, size_t arena)
{
    size_t resident = 0, hbm = xs_hbm();
    for (int s = 0; s < e->tr->nslots; s++)
        if (e->tr->slot[s]->kind != TK_INPUT)
            resident += (size_t)e->tr->slot[s]->numel * 4;
    if (!hbm || arena + resident <= hbm)
        return;
    char need[32], a[32], r[32], have[32], big[3][96] = {"", "", ""};
    fmt_bytes(need, sizeof need, (double)(arena + resident));
    fmt_bytes(a, sizeof a, (double)arena);
    fmt_bytes(r, sizeof r, (double)resident);
    fmt_bytes(have, sizeof have, (double)hbm);
    for (int i = 0; i < 3 && i < e->nval; i++)
        value_name(big[i], sizeof big[i], e, &by_size[i]);
    fprintf(stderr, "gpt: RESOURCE_EXHAUSTED: compiling a program of %d kernels: it needs "
            "%s of HBM per core (%s arena + %s weights and state), %s has %s per core "
            "(--hbm); largest buffers: %s; %s; %s\n", e->nk, need, a, r,
            xs_device_name(), have, big[0], big[1], big[2]);
    exit(1);
}

static void emit_free(struct emit *e)
{
    free(e->order);
    free(e->val);
    free(e->where);
    free(e->slot_val);
}

/* Plans memory for the surviving nodes and emits the program. */
static Program *lower(struct compiler *cc, const struct trace *tr)
{
    struct emit e = {.tr = tr};
    e.order = xcalloc((size_t)tr->n, sizeof(int));
    for (int i = 0; i < tr->n; i++)
        if (!tr->nodes[i].dead)
            e.order[e.nk++] = i;
    e.val = xcalloc((size_t)(tr->n * KMAX_OUT + tr->nslots), sizeof *e.val);
    e.where = xcalloc((size_t)tr->n * KMAX_OUT, sizeof *e.where);
    e.slot_val = xcalloc((size_t)tr->nslots, sizeof *e.slot_val);
    collect_values(&e);
    struct value *by_size = xcalloc((size_t)e.nval, sizeof *by_size);
    memcpy(by_size, e.val, sizeof *by_size * (size_t)e.nval);
    size_t arena = place_values(by_size, e.nval); /* sorts, then sets off */
    long *off_of = xcalloc((size_t)e.nval, sizeof *off_of);
    for (int i = 0; i < e.nval; i++)
        off_of[by_size[i].id] = by_size[i].off;
    check_hbm(&e, by_size, arena);
    record_plan(cc, by_size, e.nval);
    Program *p = emit_program(&e, off_of, arena);
    memset(cc->kernels, 0, sizeof cc->kernels);
    for (int k = 0; k < e.nk; k++)
        cc->kernels[tr->nodes[e.order[k]].op]++;
    cc->last.kernels = e.nk;
    cc->last.arena = arena;
    free(off_of);
    free(by_size);
    emit_free(&e);
    return p;
}

static void dump_trace(const struct trace *tr, FILE *f, int dot, const Program *p);

static void save_graph(const struct compiler *cc, const struct trace *tr, const char *stage,
                       const Program *p)
{
    const char *prefix = getenv("GPT_SAVE_GRAPHS"), *fmt = getenv("GPT_SAVE_GRAPHS_FMT");
    if (!prefix || !*prefix || xs_host() != 0) /* in a pod, host 0 alone writes them */
        return;
    int dot = fmt && !strcmp(fmt, "dot");
    char path[4096];
    snprintf(path, sizeof path, "%s-%03d-%s.%s", prefix, cc->ncache, stage, dot ? "dot" : "txt");
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gpt: GPT_SAVE_GRAPHS: cannot write %s\n", path);
        return;
    }
    dump_trace(tr, f, dot, p);
    fclose(f);
}

/* The passes, in order, then lowering. */
static Program *compile(struct compiler *cc, struct trace *tr)
{
    double t0 = now_seconds();
    cc->last.nodes = tr->n;
    save_graph(cc, tr, "before", NULL);
    cse(tr);
    dce(tr);
    fuse_matmul(tr);
    fuse_adds(tr);
    Program *p = lower(cc, tr);
    cc->last.ms = (now_seconds() - t0) * 1e3;
    save_graph(cc, tr, "after", p);
    return p;
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

/* ---- graph dumps (GPT_SAVE_GRAPHS) ---- */

static void ref_name(char *buf, size_t n, struct ref r)
{
    if (r.kind == REF_NONE)
        snprintf(buf, n, "-");
    else if (r.kind == REF_SLOT)
        snprintf(buf, n, "in%d", r.at);
    else
        snprintf(buf, n, "%%%d.%d", r.at, r.out);
}

/* Kernel index, output offset and last use of live node i. */
static void node_plan(const struct trace *tr, const Program *p, int i, int *k, long *off, int *last)
{
    *k = 0;
    for (int j = 0; j < i; j++)
        *k += !tr->nodes[j].dead;
    *off = p && *k < p->n ? p->ins[*k].out[0].at : -1;
    *last = *k;
    for (int j = i + 1, kj = *k + 1; j < tr->n; j++) {
        if (tr->nodes[j].dead)
            continue;
        for (int q = 0; q < KMAX_IN; q++)
            if (same_ref(tr->nodes[j].in[q], out_ref(i, 0)))
                *last = kj;
        kj++;
    }
}

static void dump_text_node(const struct trace *tr, FILE *f, int i, const Program *p)
{
    const struct tnode *t = &tr->nodes[i];
    char b[32], attrs[256];
    fprintf(f, "%%%d = %s(", i, kop_name(t->op));
    for (int k = 0; k < t->nin; k++) {
        ref_name(b, sizeof b, t->in[k]);
        fprintf(f, "%s%s", k ? ", " : "", b);
    }
    kop_format_attrs(attrs, sizeof attrs, t->op, &t->attr);
    fprintf(f, ") -> [%d,%d]  {%s}", t->rows[0], t->cols[0], attrs);
    if (p) {
        int k, last;
        long off;
        node_plan(tr, p, i, &k, &off, &last);
        fprintf(f, "  kernel %d, arena +%ld, %ld bytes, live %d..%d", k, off,
                (long)t->rows[0] * t->cols[0] * 4, k, last);
    }
    fputc('\n', f);
}

static int is_fused(int op) { return op == KOP_MATMUL_EX || op == KOP_ADD_N; }

static void dump_dot_node(const struct trace *tr, FILE *f, int i, const Program *p)
{
    const struct tnode *t = &tr->nodes[i];
    fprintf(f, "  n%d [label=\"%%%d %s\\n[%d,%d]", i, i, kop_name(t->op), t->rows[0], t->cols[0]);
    if (p) {
        int k, last;
        long off;
        node_plan(tr, p, i, &k, &off, &last);
        fprintf(f, "\\nbuf @%ld +%ld B\\nlive %d..%d", off, (long)t->rows[0] * t->cols[0] * 4, k, last);
    }
    fprintf(f, "\"%s];\n", is_fused(t->op) ? ", style=filled, fillcolor=lightblue" : "");
    for (int k = 0; k < t->nin; k++) {
        if (t->in[k].kind == REF_SLOT)
            fprintf(f, "  s%d -> n%d;\n", t->in[k].at, i);
        else if (is_out(t->in[k]))
            fprintf(f, "  n%d -> n%d;\n", t->in[k].at, i);
    }
}

static void dump_trace(const struct trace *tr, FILE *f, int dot, const Program *p)
{
    if (dot) {
        fprintf(f, "digraph xla {\n  node [shape=box, fontname=monospace];\n");
        for (int s = 0; s < tr->nslots; s++)
            fprintf(f, "  s%d [label=\"in%d [%d,%d]\", shape=ellipse];\n", s, s,
                    tr->slot[s]->rows, tr->slot[s]->cols);
    }
    for (int i = 0; i < tr->n; i++) {
        if (tr->nodes[i].dead)
            continue;
        if (dot)
            dump_dot_node(tr, f, i, p);
        else
            dump_text_node(tr, f, i, p);
    }
    if (dot)
        fprintf(f, "}\n");
}

/* ---- the cache and the cut ---- */

static Program *lookup(const struct compiler *cc, const struct key *k, uint64_t h)
{
    for (int i = 0; i < cc->ncache; i++) {
        const struct cache_entry *c = &cc->cache[i];
        /* the hash only narrows the search; the full key decides */
        if (c->hash == h && c->keylen == k->n && !memcmp(c->key, k->v, sizeof *k->v * (size_t)k->n))
            return c->prog;
    }
    return NULL;
}

static void insert(struct compiler *cc, struct key *k, uint64_t h, Program *p)
{
    if (cc->ncache == cc->capcache) {
        cc->capcache = cc->capcache ? 2 * cc->capcache : 16;
        cc->cache = realloc(cc->cache, sizeof *cc->cache * (size_t)cc->capcache);
        if (!cc->cache) {
            fprintf(stderr, "gpt: out of memory (compile cache)\n");
            exit(1);
        }
    }
    cc->cache[cc->ncache++] = (struct cache_entry){h, k->v, k->n, p};
    k->v = NULL;
}

/* Why a trace missed the cache: the cached key sharing the longest prefix
 * with it, and what the first difference is about (see the key's layout). */
static void explain_miss(const struct compiler *cc, const struct key *k, const char *why)
{
    int best = -1;
    long best_len = -1;
    for (int i = 0; i < cc->ncache; i++) {
        const struct cache_entry *c = &cc->cache[i];
        long j = 0;
        while (j < c->keylen && j < k->n && c->key[j] == k->v[j])
            j++;
        if (j > best_len) {
            best_len = j;
            best = i;
        }
    }
    const char *what = best_len < 3 ? "node or input count"
                       : best_len < 3 + 4 * k->v[1] ? "an input's shape or kind"
                       : "an op, shape or attribute";
    fprintf(stderr, "xla: new graph after %s; nearest cached graph #%d differs in %s "
            "(key word %ld: %lld vs %lld)\n", why, best, what, best_len,
            best_len < cc->cache[best].keylen ? (long long)cc->cache[best].key[best_len] : -1LL,
            best_len < k->n ? (long long)k->v[best_len] : -1LL);
}

static int debug_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("GPT_XLA_DEBUG");
        on = v && *v && strcmp(v, "0") && xs_host() == 0; /* in a pod, host 0 alone */
    }
    return on;
}

/* GPT_XLA_DEBUG's block for one compilation, as PyTorch/XLA's
 * PT_XLA_DEBUG gives it: the cause, the graph's hash, what goes in and
 * out, and what the compiler made of it. */
static void explain_compile(const struct compiler *cc, const Program *p, uint64_t hash,
                            const char *why)
{
    size_t in = 0, out = 0;
    for (int i = 0; i < p->nin; i++)
        in += (size_t)p->tin[i].bytes;
    for (int i = 0; i < p->nout; i++)
        out += (size_t)p->tout[i].bytes;
    fprintf(stderr, "xla: compile #%d, cause: %s\n"
            "xla:   graph hash %016llx; %d nodes -> %d kernels; %d inputs (%zu bytes), %d "
            "outputs (%zu bytes); arena %zu bytes vs %zu in all buffers; %.2f ms\n",
            cc->ncache, why, (unsigned long long)hash, cc->last.nodes, cc->last.kernels,
            p->nin, in, p->nout, out, cc->last.arena, cc->last.buffers, cc->last.ms);
}

/* PyTorch/XLA's automatic warnings: after 10 warm-up steps (mark_steps),
 * more than 0.5 compiles, or host reads that cut the graph, a step. Judged
 * once 10 steps have passed the warm-up, and said once each. */
static void check_rates(struct compiler *cc)
{
    long steps = xs_counter(C_MARK_STEP) - 10;
    long compiles = xs_counter(C_UNCACHED), reads = xs_counter(C_HOST_READ);
    if (steps == 0) {
        cc->warm_compiles = compiles;
        cc->warm_reads = reads;
    }
    if (steps < 10)
        return;
    if (!cc->warned_compiles && compiles - cc->warm_compiles > 0.5 * steps) {
        cc->warned_compiles = 1;
        fprintf(stderr, "xla: warning: CompileTime too frequent: %ld compiles in the %ld steps "
                "after 10 warm-up steps (more than 0.5 a step); the graph's shapes change from "
                "step to step (see each compile's cause)\n", compiles - cc->warm_compiles, steps);
    }
    if (!cc->warned_reads && reads - cc->warm_reads > 0.5 * steps) {
        cc->warned_reads = 1;
        fprintf(stderr, "xla: warning: TransferFromDeviceTime too frequent: %ld host reads cut "
                "the graph in the %ld steps after 10 warm-up steps (more than 0.5 a step); read "
                "values after mark_step, or less often\n", reads - cc->warm_reads, steps);
    }
}

/* The cached program for this trace's structure, compiled on a miss. */
static Program *get_program(struct compiler *cc, struct trace *tr, const char *why)
{
    struct key k = key_build(tr);
    uint64_t h = key_hash(&k);
    Program *p = lookup(cc, &k, h);
    if (p) {
        xs_counter_add(C_CACHED, 1);
        free(k.v);
        return p;
    }
    if (debug_on() && cc->ncache)
        explain_miss(cc, &k, why);
    p = compile(cc, tr);
    xs_metric_add(M_COMPILE, cc->last.ms * 1e-3);
    xs_counter_add(C_UNCACHED, 1);
    insert(cc, &k, h, p);
    if (debug_on())
        explain_compile(cc, p, h, why);
    return p;
}

/* Binds every core's slots: core c's buffer of each external tensor, then
 * the roots (the host reads core 0's; the other cores' go to scratch). */
static void **bind_slots(Graph *g, const struct trace *tr, const Program *p)
{
    int nc = g->cores;
    void **slots = xcalloc((size_t)nc * (size_t)p->nslots, sizeof *slots);
    for (int c = 0; c < nc; c++) {
        void **sc = slots + (size_t)c * p->nslots;
        for (int s = 0; s < tr->nslots; s++)
            sc[s] = tr->slot[s]->rep ? tr->slot[s]->rep[c] : tr->slot[s]->data;
        for (int r = 0; r < tr->nroots; r++) {
            Tensor *t = tr->root_t[r];
            sc[tr->nslots + r] = arena_alloc(&g->data, (size_t)t->numel * 4);
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
    trace_build(g, roots, nroots, &tr);
    if (tr.n > 0) {
        Program *p = get_program(&g->compiler, &tr, why);
        void **slots = bind_slots(g, &tr, p);
        void *const *per_core[XS_MAX_CORES];
        for (int c = 0; c < g->cores; c++)
            per_core[c] = slots + (size_t)c * p->nslots;
        xs_run_replicated(p, g->cores, per_core);
        free(slots);
    }
    trace_free(&tr);
}
