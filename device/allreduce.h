/* device/allreduce.h: the all-reduce: a board's cores summed in a fixed
 * tree, the sum across the processes of a pod (pod/comm.c) and the mean.
 * xla_sim.c's run_all_reduces resolves each one's operands and calls
 * all_reduce_stretch (or, for --shard-optimizer's all-gathers,
 * all_gather_stretch). */
#ifndef DEVICE_ALLREDUCE_H
#define DEVICE_ALLREDUCE_H
#include "device/ops.h"
#include "device/board.h"

/* The all-reduce's mean: 1/(values summed), a power of two in training,
 * so exact: every core, every host and every micro-batch summed into x. */
float all_reduce_scale(const struct all_reduce_attr *ar);
/* --shard-optimizer's split (allreduce.c says why this one): of a flat
 * layout of total floats over n ordinals, where ordinal o's shard starts;
 * and the part [*lo, *hi) of the layout's [at, at + n) that ordinal o of
 * shards owns, as offsets into it (empty: *lo == *hi). */
size_t shard_lo(size_t total, int o, int n);
void shard_piece(size_t at, size_t n, size_t total, int o, int shards, size_t *lo,
                 size_t *hi);
/* Each sums[i] (len[i] floats), this process's board's sum, becomes the
 * pod's: the m buffers travel as one message. */
void cross_host_sum(float *const *sums, const long *len, int m);

/* One all-reduce on this board: each core's input and output buffer
 * (len floats each) and the mean's factor (all_reduce_scale). */
struct board_reduce {
    const float *in[XS_MAX_CORES];
    float *out[XS_MAX_CORES];
    long len;
    float scale;
    int shard;        /* a reduce-scatter: each core gets its own shard only */
    size_t at, total; /* where the buffer lies in the flat layout (shard_lo) */
};
/* The ops where the cores meet (all-reduces and all-gathers), and whether
 * b joins a's collective (the same op, and for all-reduces the same kind:
 * whole, or a reduce-scatter). */
int is_collective(int op);
int same_collective(const union kattr *a, int op_a, const union kattr *b, int op_b);
/* An all-reduce's or all-gather's (op) board_reduce, its buffers not yet
 * filled in. */
struct board_reduce board_reduce_of(int op, const struct all_reduce_attr *ar);
/* The m all-reduces of a stretch over `cores` cores (and the pod's
 * processes), all at once: each core's out then holds the mean. */
void all_reduce_stretch(struct board_reduce *r, int m, int cores);
/* The m all-gathers of a stretch: each core's out (in place) gets every
 * ordinal's shard of it from its owner, on this board and across hosts. */
void all_gather_stretch(struct board_reduce *r, int m, int cores);

#endif
