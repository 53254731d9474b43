/* model/accum.c: gradient accumulation, read second (gpt.c calls it from
 * model_train_step and update).
 *
 * With --grad-accum N a step is N micro-batches, each a forward and
 * backward pass; their gradients are summed on the device, where they stay
 * between micro-batches, and only the last micro-batch's graph all-reduces
 * the sum and applies Adam: one optimizer step and one exchange between
 * hosts for N passes, with the activations of one micro-batch in memory.
 *
 * The same bits as one batch of N times the windows: every reduction over
 * a batch is one fixed tree over its windows (tensor.h), so when micro-
 * batch k takes the k-th of N consecutive parts of every core's windows,
 * the trees of the parts, added in the tree's order, are the tree of the
 * whole. The sums are added as they come, by a binary counter: before
 * micro-batch k, level j holds the sum of 2^j micro-batches where bit j of
 * k is set. Micro-batch k adds the levels of its trailing set bits to its
 * own sum (the left operand the earlier) and stores the result one level
 * up; for N a power of two the last one's chain is the tree's top. The
 * loss (a mean over the core's rows) is summed alike, beside the
 * gradients; the all-reduce's mean then divides by N too (exact, for N a
 * power of two: a micro-batch's mean was over 1/N of the rows). */
#include "model/model.h"
#include "util/util.h"
#include <stdlib.h>
#include <string.h>

/* Micro-batches a step: 1 unless model_set_accum() said more. */
int micro_batches(const Model *m) { return m->accum > 1 ? m->accum : 1; }

/* Levels of partial sums N micro-batches need: the bits of N - 1. */
static int accum_levels(int n)
{
    int levels = 0;
    while (n > 1 && (1 << levels) < n)
        levels++;
    return levels;
}

void alloc_accum(Model *m)
{
    free(m->acc);
    size_t floats = (size_t)accum_levels(micro_batches(m)) * (size_t)m->ncores * (m->nw + 1);
    m->acc = floats ? xcalloc(floats, sizeof(float)) : NULL;
}

void model_set_accum(Model *m, int n)
{
    m->accum = n;
    alloc_accum(m);
}

/* Value i (parameter i's gradient, or i = np: the loss) at level j of the
 * partial sums, on every core. */
static Tensor *partial_leaf(const Model *m, Graph *g, int j, int i)
{
    void *base[XS_MAX_CORES];
    for (int c = 0; c < g_cores(g); c++)
        base[c] = m->acc + ((size_t)j * (size_t)m->ncores + (size_t)c) * (m->nw + 1);
    if (i == m->np)
        return per_core_leaf(g, TK_STATE, DT_F32, base, m->nw, 1, 1);
    const Param *p = &m->p[i];
    return per_core_leaf(g, TK_STATE, DT_F32, base, p->off, p->rows, p->cols);
}

/* Micro-batch k of N from b: core c's windows [c*N*per + k*per, +per) of
 * b, where per = b->B / (cores*N), become its windows [c*per, +per) of mb.
 * A window keeps its rows' places in the batch (dropout's masks). */
void micro_batch(Batch *mb, const Batch *b, int k, int n, int cores)
{
    size_t per = (size_t)(b->B / (cores * n)) * (size_t)b->T; /* positions */
    for (int c = 0; c < cores; c++) {
        size_t from = ((size_t)c * (size_t)n + (size_t)k) * per, to = (size_t)c * per;
        memcpy(mb->tok + to, b->tok + from, per * sizeof(int32_t));
        memcpy(mb->pos + to, b->pos + from, per * sizeof(int32_t));
        memcpy(mb->tgt + to, b->tgt + from, per * sizeof(int32_t));
        memcpy(mb->row + to, b->row + from, per * sizeof(int32_t));
    }
}

/* Adds the levels of the set bits of k from bit j up (while they are set,
 * or all of them with to_top) into sum[0..np]; returns the first level
 * left. */
int add_levels(Model *m, Graph *g, Tensor **sum, int k, int j, int to_top)
{
    for (; k >> j; j++) {
        if (!((k >> j) & 1)) {
            if (!to_top)
                break;
            continue;
        }
        for (int i = 0; i <= m->np; i++)
            sum[i] = g_add_partial(g, partial_leaf(m, g, j, i), sum[i]);
    }
    return j;
}

/* After micro-batch k (not the last): its sums, with the levels of k's
 * trailing set bits added, stored one level up, on the device. */
void store_partial_sums(Model *m, Graph *g, Tensor **sum, int k)
{
    int j = add_levels(m, g, sum, k, 0, 0);
    for (int i = 0; i <= m->np; i++)
        g_store(g, partial_leaf(m, g, j, i), sum[i]);
}
