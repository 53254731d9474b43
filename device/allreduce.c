/* device/allreduce.c: the all-reduce of the simulated cores and of a
 * pod's processes: each board's cores summed in a fixed tree, the boards'
 * sums across processes, then the mean on every core. xla_sim.c hands it
 * a stretch of consecutive all-reduces with their operands resolved. With
 * --shard-optimizer the same sums become a reduce-scatter (each core gets
 * the mean of its own shard alone) and, after Adam, an all-gather of the
 * updated weights; how the shards are split is below. */
#include "device/allreduce.h"
#include "device/metrics.h"
#include "pod/comm.h"
#include "util/util.h"
#include "tensor.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The all-reduce's mean: 1/(values summed), a power of two in training,
 * so exact: every core, every host and every micro-batch summed into x. */
float all_reduce_scale(const struct all_reduce_attr *ar)
{
    return 1.0f / (float)(ar->cores * ar->micro * comm_size());
}

/* ---- --shard-optimizer's split ----
 * The step's gradients in the parameter table's order, then its loss, are
 * one flat layout of `total` floats: the order update() records their
 * all-reduces in, so the order this file packs them into one message.
 * Ordinal o of n (host h's core c is h * cores + c) owns [total o / n,
 * total (o + 1) / n). Why this split: it is comm.c's split of a message
 * over ranks (shard_at) applied to ordinals, so host h's cores' shards
 * together are exactly the part the reduce-scatter between hosts leaves on
 * host h (total h cores / (hosts cores) = total h / hosts, floor and all):
 * each core's Adam shard is its own chunk of the reduce-scatter, nothing
 * moves twice. A flat split, not rows of each tensor, keeps the shards
 * equal to within a float whatever the tensors' shapes, and a tensor may
 * straddle two shards: Adam is element-wise, so its two parts updated on
 * two cores are the bits of the whole updated on one. */
size_t shard_lo(size_t total, int o, int n) { return total * (size_t)o / (size_t)n; }

void shard_piece(size_t at, size_t n, size_t total, int o, int shards, size_t *lo,
                 size_t *hi)
{
    size_t a = shard_lo(total, o, shards), b = shard_lo(total, o + 1, shards);
    *lo = a <= at ? 0 : a - at < n ? a - at : n;
    *hi = b <= at ? 0 : b - at < n ? b - at : n;
    if (*hi < *lo)
        *hi = *lo;
}

int is_collective(int op) { return op == KOP_ALL_REDUCE || op == KOP_ALL_GATHER; }

int same_collective(const union kattr *a, int op_a, const union kattr *b, int op_b)
{
    return op_a == op_b && a->all_reduce.shard == b->all_reduce.shard;
}

struct board_reduce board_reduce_of(int op, const struct all_reduce_attr *ar)
{
    return (struct board_reduce){.len = ar->n, .shard = (int)ar->shard, .at = (size_t)ar->at,
                                 .total = (size_t)ar->total,
                                 .scale = op == KOP_ALL_GATHER ? 1 : all_reduce_scale(ar)};
}

/* The pod's ordinal of this host's core c, and how many there are. */
static int ordinal(int core, int cores) { return xs_host() * cores + core; }

/* The stretch's m buffers packed end to end, as one message. */
static float *pack(float *const *bufs, const long *len, int m, size_t *total)
{
    *total = 0;
    for (int i = 0; i < m; i++)
        *total += (size_t)len[i];
    float *packed = malloc(sizeof(float) * *total + 1), *at = packed;
    if (!packed) {
        fprintf(stderr, "gpt: out of memory (all-reduce of %zu floats)\n", *total);
        exit(1);
    }
    for (int i = 0; i < m; at += len[i], i++)
        memcpy(at, bufs[i], sizeof(float) * (size_t)len[i]);
    return packed;
}

static void unpack(float *packed, float *const *bufs, const long *len, int m)
{
    float *at = packed;
    for (int i = 0; i < m; at += len[i], i++)
        memcpy(bufs[i], at, sizeof(float) * (size_t)len[i]);
    free(packed);
}

static void count_traffic(const struct comm_traffic *moved, double t0)
{
    xs_metric_add(M_HOST_ALL_REDUCE, now_seconds() - t0);
    xs_counter_add(C_HOST_SENT_BYTES, (long)moved->sent);
    xs_counter_add(C_HOST_RECEIVED_BYTES, (long)moved->received);
}

/* The boards' sums of every process, summed across processes (comm.c adds
 * them in the tree's order over ranks: a board's cores are a subtree of
 * the pod's, so the pod's sum has the bits of one board with all its
 * cores). The stretch's buffers travel as one message, as XLA's all-reduce
 * combiner would send them. */
void cross_host_sum(float *const *sums, const long *len, int m)
{
    size_t total;
    float *packed = pack(sums, len, m, &total);
    struct comm_traffic moved = {0, 0};
    double t0 = now_seconds();
    comm_all_reduce(packed, total, &moved);
    count_traffic(&moved, t0);
    xs_counter_add(C_HOST_ALL_REDUCE_BYTES, (long)(total * sizeof(float)));
    unpack(packed, sums, len, m);
}

/* Each host's part of a sharded stretch's message: the stretch is the
 * flat layout's [r[0].at, its end) (update() records the all-reduces in
 * layout order), and host h's part of it is its cores' shards. */
static void host_bounds(const struct board_reduce *r, int m, int cores, size_t *bound)
{
    size_t a = r[0].at, b = a, hosts = (size_t)xs_hosts();
    for (int i = 0; i < m; b += (size_t)r[i].len, i++)
        if (r[i].at != b || r[i].total != r[0].total) {
            fprintf(stderr, "gpt: internal error: a sharded stretch out of layout order\n");
            abort();
        }
    for (size_t h = 0; h <= hosts; h++) {
        size_t x = shard_lo(r[0].total, (int)h * cores, (int)hosts * cores);
        bound[h] = (x < a ? a : x > b ? b : x) - a;
    }
}

/* The reduce-scatter between hosts: each host's part of the stretch
 * becomes the pod's sum, the rest stays this board's. */
static void cross_host_scatter(const struct board_reduce *r, float *const *sums,
                               const long *len, int m, int cores)
{
    size_t total, bound[COMM_MAX_RANKS + 1];
    host_bounds(r, m, cores, bound);
    float *packed = pack(sums, len, m, &total);
    struct comm_traffic moved = {0, 0};
    double t0 = now_seconds();
    comm_reduce_scatter(packed, bound, &moved);
    count_traffic(&moved, t0);
    xs_counter_add(C_HOST_ALL_REDUCE_BYTES, (long)(total * sizeof(float)));
    unpack(packed, sums, len, m);
}

/* A sharded all-reduce's end: each core gets the mean of its own shard
 * alone (scaled in core 0's buffer, which holds the sums, then copied). */
static void deal_shards(const struct board_reduce *r, float *sum, int cores)
{
    int shards = cores * xs_hosts();
    for (int c = 0; c < cores; c++) {
        size_t lo, hi;
        shard_piece(r->at, (size_t)r->len, r->total, ordinal(c, cores), shards, &lo, &hi);
        for (size_t j = lo; j < hi; j++)
            sum[j] *= r->scale;
        if (c > 0)
            memcpy(r->out[c] + lo, sum + lo, sizeof(float) * (hi - lo));
    }
}

/* The stretch's every all-reduce: each one's tree over the board's cores'
 * inputs in core order into core 0's output, then across processes, then
 * the mean (1/replicas, a power of two: exact) copied to every core, so
 * replicas hold the same bits; sharded (a reduce-scatter), each core gets
 * only its shard of the mean, the same bits there. */
void all_reduce_stretch(struct board_reduce *r, int m, int cores)
{
    float **sums = xcalloc((size_t)m, sizeof *sums);
    long *len = xcalloc((size_t)m, sizeof *len), bytes = 0;
    double t0 = now_seconds();
#pragma omp parallel for schedule(dynamic) if (cores > 1)
    for (int i = 0; i < m; i++)
        k_tree_sum(r[i].out[0], r[i].in, cores, (size_t)r[i].len);
    for (int i = 0; i < m; i++) {
        sums[i] = r[i].out[0];
        bytes += 4 * (len[i] = r[i].len);
    }
    xs_metric_add(M_ALL_REDUCE, now_seconds() - t0);
    if (xs_hosts() > 1 && r[0].shard)
        cross_host_scatter(r, sums, len, m, cores);
    else if (xs_hosts() > 1)
        cross_host_sum(sums, len, m);
    for (int i = 0; i < m && r[0].shard; i++)
        deal_shards(&r[i], sums[i], cores);
    for (int i = 0; i < m && !r[0].shard; i++) {
        for (long j = 0; j < len[i]; j++)
            sums[i][j] *= r[i].scale;
        for (int c = 1; c < cores; c++)
            memcpy(r[i].out[c], sums[i], sizeof(float) * (size_t)len[i]);
    }
    xs_counter_add(C_ALL_REDUCE, m);
    xs_counter_add(C_ALL_REDUCE_BYTES, bytes);
    free(sums);
    free(len);
}

/* The all-gather (--shard-optimizer's second half): every core's out, in
 * place, gets each core's shard from the core that owns it, on this board
 * first; then core 0's copy, which holds this host's part, travels to the
 * other hosts as one message, and comes back whole to every core. */
void all_gather_stretch(struct board_reduce *r, int m, int cores)
{
    int shards = cores * xs_hosts();
    for (int i = 0; i < m; i++)
        for (int c = 0; c < cores; c++) {
            size_t lo, hi;
            shard_piece(r[i].at, (size_t)r[i].len, r[i].total, ordinal(c, cores), shards, &lo,
                        &hi);
            for (int d = 0; d < cores; d++)
                if (d != c)
                    memcpy(r[i].out[d] + lo, r[i].out[c] + lo, sizeof(float) * (hi - lo));
        }
    if (xs_hosts() == 1)
        return;
    float **mine = xcalloc((size_t)m, sizeof *mine);
    long *len = xcalloc((size_t)m, sizeof *len);
    size_t total, bound[COMM_MAX_RANKS + 1];
    for (int i = 0; i < m; i++)
        mine[i] = r[i].out[0], len[i] = r[i].len;
    host_bounds(r, m, cores, bound);
    float *packed = pack(mine, len, m, &total);
    struct comm_traffic moved = {0, 0};
    double t0 = now_seconds();
    comm_gather_shards(packed, bound, &moved);
    count_traffic(&moved, t0);
    for (int c = 1; c < cores; c++)
        for (size_t i = 0, at = 0; i < (size_t)m; at += (size_t)len[i], i++)
            memcpy(r[i].out[c], packed + at, sizeof(float) * (size_t)len[i]);
    unpack(packed, mine, len, m);
    free(mine);
    free(len);
}
