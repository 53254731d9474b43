/* trace.c: the compiler's first stage (compile.c runs them): a cut's
 * pending work becomes a trace (struct tnode, level 2). A cut (mark_step
 * or a host read) gathers the pending nodes the wanted values depend on,
 * plus every pending node with a side effect (Adam, KV cache writes):
 * that is the trace. Operands become refs: slot s (a buffer from outside)
 * or output k of traced node i. */
#include "compiler/compiler.h"
#include <stdlib.h>
#include <string.h>

/* ---- gathering the trace ---- */

static void mark_live(const Node *nodes, char *live, int i)
{
    if (live[i])
        return;
    live[i] = 1;
    const Node *n = &nodes[i];
    for (int k = 0; k < n->nin; k++)
        if (n->in[k] && !n->in[k]->data && n->in[k]->node >= 0)
            mark_live(nodes, live, n->in[k]->node);
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
                         const Node *nodes)
{
    if (!t)
        return no_ref();
    if (t->data)
        return slot_of(tr, t, slot_by_id);
    const Node *p = &nodes[t->node];
    int k = 0;
    while (p->out[k] != t)
        k++;
    return out_ref(local[t->node], k);
}

static void trace_node(struct trace *tr, const Node *n, const int *local, int *slot_by_id,
                       const Node *nodes)
{
    struct tnode *tn = &tr->nodes[tr->n++];
    memset(tn, 0, sizeof *tn);
    tn->op = n->op;
    tn->nin = n->nin;
    tn->nout = n->nout;
    tn->attr = n->attr;
    tn->region = n->region;
    tn->phase = n->phase;
    for (int k = 0; k < KMAX_IN; k++)
        tn->in[k] = k < n->nin ? ref_of(tr, n->in[k], local, slot_by_id, nodes) : no_ref();
    for (int k = 0; k < n->nout; k++) {
        tn->rows[k] = n->out[k]->rows;
        tn->cols[k] = n->out[k]->cols;
    }
}

static void add_roots(struct trace *tr, Tensor *const *roots, int nroots, const int *local,
                      int *slot_by_id, const Node *nodes)
{
    for (int r = 0; r < nroots; r++) {
        int dup = 0;
        for (int q = 0; q < tr->nroots; q++)
            dup |= tr->root_t[q] == roots[r];
        if (roots[r]->data || dup)
            continue;
        tr->root_t[tr->nroots] = roots[r];
        tr->roots[tr->nroots++] = ref_of(tr, roots[r], local, slot_by_id, nodes);
    }
}

/* The pending work the roots need, plus pending side effects. */
void trace_build(Node *nodes, int n_nodes, int n_tensors, Tensor *const *roots, int nroots,
                 struct trace *tr)
{
    char *live = xcalloc((size_t)n_nodes, 1);
    int *local = xcalloc((size_t)n_nodes, sizeof(int));
    int *slot_by_id = xcalloc((size_t)n_tensors, sizeof(int));
    memset(slot_by_id, -1, sizeof(int) * (size_t)n_tensors);
    for (int r = 0; r < nroots; r++)
        if (!roots[r]->data)
            mark_live(nodes, live, roots[r]->node);
    for (int i = 0; i < n_nodes; i++)
        if (!nodes[i].done && kop_writes(nodes[i].op))
            mark_live(nodes, live, i);
    memset(tr, 0, sizeof *tr);
    tr->nodes = xcalloc((size_t)n_nodes, sizeof *tr->nodes);
    tr->slot = xcalloc((size_t)n_tensors, sizeof *tr->slot);
    tr->roots = xcalloc((size_t)nroots, sizeof *tr->roots);
    tr->root_t = xcalloc((size_t)nroots, sizeof *tr->root_t);
    for (int i = 0; i < n_nodes; i++) {
        if (!live[i])
            continue;
        local[i] = tr->n;
        trace_node(tr, &nodes[i], local, slot_by_id, nodes);
        nodes[i].done = 1;
    }
    add_roots(tr, roots, nroots, local, slot_by_id, nodes);
    free(live);
    free(local);
    free(slot_by_id);
}

void trace_free(struct trace *tr)
{
    free(tr->nodes);
    free(tr->slot);
    free(tr->roots);
    free(tr->root_t);
}
