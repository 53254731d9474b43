/* replicas.c: data parallelism. On n simulated cores each core holds a
 * replica of the weights and Adam state (Model.rep) and runs the step on
 * its own B/n windows of the batch; with --shard-optimizer each core of
 * the pod keeps only its shard of the Adam state (ZeRO-1, below). A board
 * lent to one core's run (model_lend_cores) holds no replicas: its cores
 * share core 0's, and the device updates them once. The model (gpt.c)
 * asks for its leaves here and never sees the cores. */
#include "model/model.h"
#include "device/allreduce.h"
#include "pod/comm.h"
#include "pod/error.h"
#include "util/util.h"
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A core's block in rep: its weights [nw], then m and v [mlen] each. */
float *model_replica(const Model *m, int core, int which)
{
    if (core == 0 || m->lent)
        return which == REPLICA_W ? m->w : which == REPLICA_M ? m->m : m->v;
    float *block = m->rep + (size_t)(core - 1) * (m->nw + 2 * m->mlen);
    return which == REPLICA_W ? block : block + m->nw + (size_t)(which - 1) * m->mlen;
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

/* ---- --shard-optimizer: ZeRO-1 ----
 * Adam's m and v are split over the pod's every core: host h's core c,
 * ordinal o = h * cores + c, keeps only [shard_lo(o), shard_lo(o + 1)) of
 * the flat layout (every parameter in table order, the offsets of
 * Param.off, then the loss: the order the step's all-reduces are packed
 * in), which is exactly the chunk of the gradients its reduce-scatter
 * delivers (device/allreduce.c says why that split). The weights stay
 * whole on every core: the forward pass needs them all. */
long shard_total(const Model *m) { return (long)m->nw + 1; }

/* Ordinal o's part of the moments: [*a, *b) of [0, nw) (the loss, the
 * layout's last float, has none). */
static void moment_range(const Model *m, int o, size_t *a, size_t *b)
{
    size_t total = (size_t)shard_total(m);
    *a = shard_lo(total, o, m->shards);
    *b = shard_lo(total, o + 1, m->shards);
    *b = *b > m->nw ? m->nw : *b;
    *a = *a > *b ? *b : *a;
}

void shard_moments(Model *m)
{
    float *mm = m->m, *vv = m->v; /* whole */
    m->m = xcalloc(m->mlen, sizeof(float));
    m->v = xcalloc(m->mlen, sizeof(float));
    for (int c = 0; c < m->ncores; c++) {
        size_t a, b;
        moment_range(m, comm_rank() * m->ncores + c, &a, &b);
        memcpy(model_replica(m, c, REPLICA_M), mm + a, sizeof(float) * (b - a));
        memcpy(model_replica(m, c, REPLICA_V), vv + a, sizeof(float) * (b - a));
    }
    free(mm);
    free(vv);
}

/* This host's cores' shards, then every host's, each host's part sent as
 * one block of the largest host part (m's, then v's). */
void model_full_moments(const Model *m, float *mm, float *vv)
{
    int hosts = comm_size(), nc = m->ncores;
    size_t block = (size_t)shard_total(m) / (size_t)hosts + 1, a, b;
    float *mine = xcalloc(2 * block, sizeof(float));
    float *all = xcalloc(2 * block * (size_t)hosts, sizeof(float));
    for (int c = 0; c < nc; c++) {
        moment_range(m, comm_rank() * nc + c, &a, &b);
        memcpy(mm + a, model_replica(m, c, REPLICA_M), sizeof(float) * (b - a));
        memcpy(vv + a, model_replica(m, c, REPLICA_V), sizeof(float) * (b - a));
    }
    size_t lo, hi;
    moment_range(m, comm_rank() * nc, &lo, &b);
    moment_range(m, comm_rank() * nc + nc - 1, &a, &hi);
    memcpy(mine, mm + lo, sizeof(float) * (hi - lo));
    memcpy(mine + block, vv + lo, sizeof(float) * (hi - lo));
    comm_allgather(mine, all, sizeof(float) * 2 * block);
    for (int h = 0; h < hosts; h++) {
        moment_range(m, h * nc, &lo, &b);
        moment_range(m, h * nc + nc - 1, &a, &hi);
        memcpy(mm + lo, all + 2 * block * (size_t)h, sizeof(float) * (hi - lo));
        memcpy(vv + lo, all + 2 * block * (size_t)h + block, sizeof(float) * (hi - lo));
    }
    free(mine);
    free(all);
}

void unshard_moments(Model *m)
{
    float *mm = xcalloc(m->nw, sizeof(float)), *vv = xcalloc(m->nw, sizeof(float));
    model_full_moments(m, mm, vv);
    free(m->m);
    free(m->v);
    m->m = mm;
    m->v = vv;
    m->shards = 1;
    m->mlen = m->nw;
}

void alloc_replicas(Model *m, int n, int lent)
{
    if (m->shards > 1)
        unshard_moments(m); /* whole again, then split anew */
    free(m->rep);
    n = n > 1 ? n : 1;
    m->ncores = n;
    m->lent = lent && n > 1;
    if (m->lent && m->shard_optimizer)
        die(1, "a lent board shares core 0's whole Adam state: it cannot be sharded");
    m->shards = m->shard_optimizer ? n * comm_size() : 1;
    size_t total = (size_t)shard_total(m), shards = (size_t)m->shards;
    m->mlen = m->shards > 1 ? (total + shards - 1) / shards : m->nw; /* the largest shard */
    int replicas = m->lent ? 0 : n - 1;
    m->rep = replicas ? xcalloc((size_t)replicas * (m->nw + 2 * m->mlen), sizeof(float)) : NULL;
    for (int c = 1; c <= replicas; c++)
        for (int k = REPLICA_W; k <= REPLICA_V && (k == REPLICA_W || m->shards == 1); k++)
            memcpy(model_replica(m, c, k), model_replica(m, 0, k), m->nw * sizeof(float));
    if (m->shards > 1)
        shard_moments(m);
    xs_counter_set(C_STATE_CORE_BYTES, (long)(2 * m->mlen * sizeof(float)));
    xs_counter_set(C_STATE_HOST_BYTES, (long)(2 * m->mlen * sizeof(float)) * (replicas + 1));
}

Tensor *mean_over_replicas(Model *m, Graph *g, Tensor *x, int i, int micro)
{
    if (m->shards == 1)
        return g_all_reduce_micro(g, x, micro);
    long at = i < m->np ? (long)m->p[i].off : (long)m->nw; /* the loss last */
    return g_reduce_scatter(g, x, micro, at, shard_total(m));
}

/* Moment `which` (REPLICA_M or REPLICA_V): each core's shard, [1, mlen],
 * one leaf for every parameter's Adam (one buffer a core). */
static Tensor *shard_moment_leaf(const Model *m, Graph *g, int which)
{
    void *base[XS_MAX_CORES];
    replica_bases(m, g, which, base);
    return per_core_leaf(g, TK_STATE, DT_F32, base, 0, 1, (int)m->mlen);
}

void adam_shards(Model *m, Graph *g, Tensor **leaf, Tensor **grad, Tensor *t, Tensor *rate)
{
    Tensor *ms = shard_moment_leaf(m, g, REPLICA_M), *vs = shard_moment_leaf(m, g, REPLICA_V);
    for (int i = 0; i < m->np; i++)
        g_adam_shard(g, leaf[i], grad[i], ms, vs, t, rate, 0.9f, 0.999f, 1e-8f,
                     (long)m->p[i].off, shard_total(m));
}

void gather_shards(Model *m, Graph *g, Tensor **leaf, Tensor *loss)
{
    for (int i = 0; i < m->np; i++)
        g_all_gather(g, leaf[i], (long)m->p[i].off, shard_total(m));
    g_all_gather(g, loss, (long)m->nw, shard_total(m));
}

/* Core c's slice of a batch column (tok, pos or tgt): its B/cores windows. */
Tensor *batch_slice_leaf(Graph *g, const Batch *b, int32_t *col)
{
    void *base[XS_MAX_CORES];
    int nc = g_cores(g), rows = b->B / nc * b->T;
    for (int c = 0; c < nc; c++)
        base[c] = col + (size_t)c * rows;
    return per_core_leaf(g, TK_INPUT, DT_I32, base, 0, 1, rows);
}
