/* device/allreduce.c: the all-reduce of the simulated cores and of a
 * pod's processes: each board's cores summed in a fixed tree, the boards'
 * sums across processes, then the mean on every core. xla_sim.c hands it
 * a stretch of consecutive all-reduces with their operands resolved. */
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

/* The boards' sums of every process, summed across processes (comm.c adds
 * them in the tree's order over ranks: a board's cores are a subtree of
 * the pod's, so the pod's sum has the bits of one board with all its
 * cores). The stretch's buffers travel as one message, as XLA's all-reduce
 * combiner would send them. */
void cross_host_sum(float *const *sums, const long *len, int m)
{
    size_t total = 0;
    for (int i = 0; i < m; i++)
        total += (size_t)len[i];
    float *packed = malloc(sizeof(float) * total + 1), *at = packed;
    if (!packed) {
        fprintf(stderr, "gpt: out of memory (all-reduce of %zu floats)\n", total);
        exit(1);
    }
    for (int i = 0; i < m; at += len[i], i++)
        memcpy(at, sums[i], sizeof(float) * (size_t)len[i]);
    struct comm_traffic moved = {0, 0};
    double t0 = now_seconds();
    comm_all_reduce(packed, total, &moved);
    xs_metric_add(M_HOST_ALL_REDUCE, now_seconds() - t0);
    xs_counter_add(C_HOST_ALL_REDUCE_BYTES, (long)(total * sizeof(float)));
    xs_counter_add(C_HOST_SENT_BYTES, (long)moved.sent);
    xs_counter_add(C_HOST_RECEIVED_BYTES, (long)moved.received);
    at = packed;
    for (int i = 0; i < m; at += len[i], i++)
        memcpy(sums[i], at, sizeof(float) * (size_t)len[i]);
    free(packed);
}

/* The stretch's every all-reduce: each one's tree over the board's cores'
 * inputs in core order into core 0's output, then across processes, then
 * the mean (1/replicas, a power of two: exact) copied to every core, so
 * replicas hold the same bits. */
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
    if (xs_hosts() > 1)
        cross_host_sum(sums, len, m);
    for (int i = 0; i < m; i++) {
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
