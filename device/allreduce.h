/* device/allreduce.h: the all-reduce: a board's cores summed in a fixed
 * tree, the sum across the processes of a pod (pod/comm.c) and the mean.
 * xla_sim.c's run_all_reduces resolves each one's operands and calls
 * all_reduce_stretch. */
#ifndef DEVICE_ALLREDUCE_H
#define DEVICE_ALLREDUCE_H
#include "device/ops.h"
#include "device/board.h"

/* The all-reduce's mean: 1/(values summed), a power of two in training,
 * so exact: every core, every host and every micro-batch summed into x. */
float all_reduce_scale(const struct all_reduce_attr *ar);
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
};
/* The m all-reduces of a stretch over `cores` cores (and the pod's
 * processes), all at once: each core's out then holds the mean. */
void all_reduce_stretch(struct board_reduce *r, int m, int cores);

#endif
