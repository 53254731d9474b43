/* compiler/record.c: the graph's record, the bottom of the graph layer
 * (graph.c's builders and compiler/graph_side.c's call it, it calls
 * neither): tensors and leaves, a node with its inputs and outputs,
 * eager execution (run_if_eager). The bump arena holds a step's tensors.
 * (How a value is stored under each precision: compiler/precision.c.) */
#include "compiler/record.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the bump arena: a step's tensors, reused from one step to the next ---- */

void *arena_alloc(struct arena *a, size_t n)
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
    struct chunk *c = xcalloc(1, sizeof *c + cap);
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

void arena_rewind(struct arena *a)
{
    for (struct chunk *c = a->head; c; c = c->next)
        c->used = 0;
    a->cur = a->head;
}

void arena_free(struct arena *a)
{
    while (a->head) {
        struct chunk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
    a->cur = NULL;
}

/* ---- the record ---- */

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

Tensor *g_param(Graph *g, float *data, int rows, int cols)
{
    return g_leaf(g, TK_PARAM, DT_F32, data, rows, cols);
}

/* Eager execution: on the eager device (--device cpu) the node runs the
 * moment it is recorded; on the lazy one it is only recorded, and this
 * returns at once (the compiler runs it at the cut). */
void run_if_eager(Graph *g, Node *n)
{
    struct kinstr k = {.op = n->op, .attr = n->attr};
    if (g->lazy)
        return;
    for (int i = 0; i < n->nin; i++)
        k.in[i] = n->in[i] ? n->in[i]->data : NULL;
    for (int i = 0; i < n->nout; i++)
        k.out[i] = n->out[i]->data;
    xs_exec(&k);
}

/* A node for op with the op table's number of inputs, in[0..nin). */
Node *new_node(Graph *g, int op, Tensor *const *in)
{
    int nin = kop_info(op)->nin;
    if (g->n_nodes == g->cap_nodes) {
        g->cap_nodes = g->cap_nodes ? 2 * g->cap_nodes : 256;
        g->nodes = xrealloc(g->nodes, sizeof *g->nodes * (size_t)g->cap_nodes);
    }
    Node *n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->nin = nin;
    n->region = g->region;
    n->phase = g->phase;
    for (int i = 0; i < nin; i++)
        n->in[i] = in[i];
    return n;
}

/* Adds an output; it takes a gradient when any input does and diff says
 * the output is differentiable (aux outputs such as saved statistics are
 * not). */
Tensor *add_out(Graph *g, Node *n, int dtype, int rows, int cols, int diff)
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

/* Autodiff's table: the gradient of tensor t, by id (NULL: none yet). */
Tensor **grad_slot(Graph *g, const Tensor *t)
{
    if (t->id >= g->cap_grads) {
        int cap = 2 * t->id + 1024; /* room to grow */
        g->grads = xrealloc(g->grads, sizeof *g->grads * (size_t)cap);
        memset(g->grads + g->cap_grads, 0, sizeof *g->grads * (size_t)(cap - g->cap_grads));
        g->cap_grads = cap;
    }
    return &g->grads[t->id];
}

void shape_fail(const char *op, const Tensor *a, const Tensor *b)
{
    fprintf(stderr, "gpt: internal error: %s got shapes [%d,%d] and [%d,%d]\n",
            op, a->rows, a->cols, b->rows, b->cols);
    abort();
}

Tensor *build_add(Graph *g, Tensor *a, Tensor *b)
{
    if (a->numel != b->numel)
        shape_fail("add", a, b);
    Node *n = new_node(g, KOP_ADD, IN(a, b));
    n->attr.elementwise.n = a->numel;
    Tensor *y = add_out(g, n, DT_F32, a->rows, a->cols, 1);
    run_if_eager(g, n);
    return y;
}
