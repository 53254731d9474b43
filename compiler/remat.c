/* compiler/remat.c: rematerialization (train --remat), a second-read
 * room of the graph layer. The model marks each block's forward as a
 * region (g_remat_begin, g_remat_end); with --remat, graph.c's g_backward
 * on reaching a region calls remat_backward, which records the region's
 * forward again from the region's inputs, just before the region's
 * derivatives, and derives those from the recompute. No derivative then
 * reads a value of the first forward, so the memory plan lets each die
 * after its forward use: the arena keeps the blocks' inputs, and one
 * block's values at a time. The recomputed nodes are marked
 * (PHASE_RECOMPUTE): fuse.c's CSE never merges them into the forward's,
 * and the cache key tells the programs apart. Also here: the estimate of
 * what --remat would save, for the --hbm refusal (explain.c). Calls
 * record.c only. */
#include "compiler/record.h"
#include <assert.h>
#include <stdlib.h>

void g_set_remat(Graph *g, int on) { g->remat = on; }

void g_remat_begin(Graph *g)
{
    assert(!g->region); /* regions do not nest */
    if (g->n_regions == g->cap_regions) {
        g->cap_regions = g->cap_regions ? 2 * g->cap_regions : 16;
        g->regions = xrealloc(g->regions, sizeof *g->regions * (size_t)g->cap_regions);
    }
    g->regions[g->n_regions++] = (struct remat_region){.begin = g->n_nodes, .end = -1};
    g->region = g->n_regions;
}

void g_remat_end(Graph *g)
{
    assert(g->region == g->n_regions);
    g->regions[g->n_regions - 1].end = g->n_nodes;
    g->region = 0;
}

const struct remat_region *remat_region_ending(const Graph *g, int i, int *r)
{
    while (*r >= 0 && g->regions[*r].end - 1 > i) /* after y, or y inside: as usual */
        (*r)--;
    if (!g->remat || *r < 0 || g->regions[*r].end - 1 != i)
        return NULL;
    return &g->regions[(*r)--];
}

/* Records node i again, its inputs made inside the region replaced by
 * their recomputed twins (clone[], by tensor id); its outputs' twins go
 * into clone[]. The same op, attributes and input values give the same
 * bits; dropout's mask too, drawn from the step's key, the row and the
 * site, all of them inputs or attributes. */
static void recompute_node(Graph *g, int i, Tensor **clone)
{
    Node o = g->nodes[i]; /* a copy: new_node may move the array */
    Tensor *in[KMAX_IN] = {0};
    for (int k = 0; k < o.nin; k++)
        in[k] = o.in[k] && clone[o.in[k]->id] ? clone[o.in[k]->id] : o.in[k];
    Node *n = new_node(g, o.op, in);
    n->attr = o.attr;
    for (int k = 0; k < o.nout; k++) {
        const Tensor *t = o.out[k];
        Tensor *c = add_out(g, n, t->dtype, t->rows, t->cols, 0);
        c->requires_grad = t->requires_grad;
        clone[t->id] = c;
    }
    run_if_eager(g, n);
}

/* The recompute, then its derivatives: the gradients later nodes gave
 * the region's values (its output's, from the next block) move to their
 * twins, and rule runs on each twin, last first, so the gradients reach
 * the region's inputs (the block's input, the weights) through the twins.
 * The twins' sums come in the order the originals' would: the same bits. */
int remat_backward(Graph *g, const struct remat_region *r, void (*rule)(Graph *, int))
{
    int first = g->n_nodes;
    Tensor **clone = xcalloc((size_t)g->n_tensors, sizeof *clone);
    int phase = g->phase;
    g->phase = PHASE_RECOMPUTE;
    for (int i = r->begin; i < r->end; i++)
        recompute_node(g, i, clone);
    g->phase = phase;
    int last = g->n_nodes;
    for (int i = r->begin; i < r->end; i++)
        for (int k = 0; k < g->nodes[i].nout; k++) {
            const Tensor *t = g->nodes[i].out[k];
            Tensor *d = *grad_slot(g, t);
            if (d)
                *grad_slot(g, clone[t->id]) = d;
        }
    free(clone);
    for (int i = last - 1; i >= first; i--)
        rule(g, i);
    return r->begin;
}

/* ---- what --remat would save, for the --hbm refusal ---- */

/* The values each block's forward keeps for the backward pass, by region
 * (kept[1..]): made by a forward node in the region, alive when the
 * backward pass starts (instruction kb), and read by no forward node
 * outside the region (the block's output, which the next block reads,
 * stays alive with --remat too). */
static void kept_by_region(const struct plan *e, int kb, long *kept)
{
    const struct trace *tr = e->tr;
    char *exported = xcalloc((size_t)e->nval, 1);
    for (int k = 0; k < e->nk; k++) {
        const struct tnode *t = &tr->nodes[e->order[k]];
        for (int i = 0; i < KMAX_IN && t->phase == PHASE_FORWARD; i++)
            if (is_out(t->in[i]) && tr->nodes[t->in[i].at].region != t->region)
                exported[e->where[out_index(t->in[i])]] = 1;
    }
    for (int i = 0; i < e->nval; i++) {
        const struct value *v = &e->val[i];
        const struct tnode *p = is_out(v->ref) ? &tr->nodes[v->ref.at] : NULL;
        if (p && p->phase == PHASE_FORWARD && p->region && !exported[i] && v->first < kb &&
            v->last >= kb)
            kept[p->region] += v->bytes;
    }
    free(exported);
}

static int is_update(int op)
{
    return op == KOP_ALL_REDUCE || op == KOP_ADAM || op == KOP_ADAM_SHARD;
}

/* The most bytes alive at once in the update, from its first all-reduce
 * or Adam on: the gradients waiting for it. Remat does not change
 * them; on several cores the all-reduces run as one collective
 * (plan.c's widen_collectives), so every gradient and its reduced twin
 * are alive together there: twice the weights' bytes, a floor no
 * recompute lowers. */
static long alive_in_update(const struct plan *e)
{
    long most = 0;
    int k0 = 0;
    while (k0 < e->nk && !is_update(e->tr->nodes[e->order[k0]].op))
        k0++;
    for (int k = k0; k < e->nk; k++) {
        long sum = 0;
        for (int i = 0; i < e->nval; i++)
            if (e->val[i].first <= k && k <= e->val[i].last)
                sum += e->val[i].bytes;
        most = sum > most ? sum : most;
    }
    return most;
}

/* An estimate from plan e, not a second plan (the trace holds no
 * recompute to plan): the values the blocks keep for the backward pass
 * die in the forward instead, and the backward holds one block's
 * recompute at a time, the biggest block's; but never below what is
 * alive after the backward pass (alive_in_update). 0 when there is nothing to
 * estimate: no blocks marked, no backward pass, or a recompute already. */
size_t remat_estimate(const struct plan *e)
{
    const struct trace *tr = e->tr;
    int kb = -1, nreg = 0;
    for (int k = e->nk - 1; k >= 0; k--) {
        const struct tnode *t = &tr->nodes[e->order[k]];
        if (t->phase == PHASE_RECOMPUTE)
            return 0;
        if (t->phase == PHASE_BACKWARD)
            kb = k;
        nreg = t->region > nreg ? t->region : nreg;
    }
    if (kb < 0 || !nreg)
        return 0;
    long *kept = xcalloc((size_t)nreg + 1, sizeof *kept), all = 0, most = 0;
    kept_by_region(e, kb, kept);
    for (int r = 1; r <= nreg; r++) {
        all += kept[r];
        most = kept[r] > most ? kept[r] : most;
    }
    free(kept);
    long est = (long)e->arena - all + most, floor = alive_in_update(e);
    return (size_t)(est > floor ? est : floor);
}
