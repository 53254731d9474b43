/* device/allreduce.h: the all-reduce's second half: the sum across the
 * processes of a pod (pod/comm.c) and the mean. xla_sim.c sums a board's
 * cores itself (run_all_reduces) and calls these for the rest. */
#ifndef DEVICE_ALLREDUCE_H
#define DEVICE_ALLREDUCE_H
#include "device/ops.h"

/* The all-reduce's mean: 1/(values summed), a power of two in training,
 * so exact: every core, every host and every micro-batch summed into x. */
float all_reduce_scale(const struct all_reduce_attr *ar);
/* Each sums[i] (len[i] floats), this process's board's sum, becomes the
 * pod's: the m buffers travel as one message. */
void cross_host_sum(float *const *sums, const long *len, int m);

#endif
