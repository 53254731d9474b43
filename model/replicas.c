/* replicas.c: data parallelism. On n simulated cores each core holds a
 * replica of the weights and Adam state (Model.rep) and runs the step on
 * its own B/n windows of the batch. The model (gpt.c) asks for its leaves
 * here and never sees the cores. */
#include "model/model.h"
#include <stddef.h>

float *model_replica(const Model *m, int core, int which)
{
    if (core == 0)
        return which == REPLICA_W ? m->w : which == REPLICA_M ? m->m : m->v;
    return m->rep + ((size_t)(core - 1) * REPLICA_BLOCKS + (size_t)which) * m->nw;
}

/* A leaf of buffers the cores hold each their own of: core c's is base[c]
 * advanced by off elements (of 4 bytes). */
Tensor *per_core_leaf(Graph *g, int kind, int dtype, void *const *base, size_t off,
                      int rows, int cols)
{
    void *d[XS_MAX_CORES];
    for (int c = 0; c < g_cores(g); c++)
        d[c] = (char *)base[c] + 4 * off;
    return g_leaf_rep(g, kind, dtype, d, rows, cols);
}

/* Every core's block `which` (see model_replica). */
void replica_bases(const Model *m, const Graph *g, int which, void **base)
{
    for (int c = 0; c < g_cores(g); c++)
        base[c] = model_replica(m, c, which);
}



/* Parameter p's Adam moment (which 1: m, 2: v) on every core. */
Tensor *moment_leaf(const Model *m, Graph *g, int which, const Param *p)
{
    void *base[XS_MAX_CORES];
    replica_bases(m, g, which, base);
    return per_core_leaf(g, TK_STATE, DT_F32, base, p->off, p->rows, p->cols);
}

/* Core c's shard of a batch column (tok, pos or tgt): its B/cores windows. */
Tensor *shard_leaf(Graph *g, const Batch *b, int32_t *col)
{
    void *base[XS_MAX_CORES];
    int nc = g_cores(g), rows = b->B / nc * b->T;
    for (int c = 0; c < nc; c++)
        base[c] = col + (size_t)c * rows;
    return per_core_leaf(g, TK_INPUT, DT_I32, base, 0, 1, rows);
}
