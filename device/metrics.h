/* device/metrics.h: what the device tells about a run (device/metrics.c):
 * PyTorch/XLA's metrics and counters, the per-kernel profile and the
 * timeline. xla_sim.c reports to it; it reads only the op table
 * (device/ops.h) and the board (device/board.h). */
#ifndef DEVICE_METRICS_H
#define DEVICE_METRICS_H
#include <stdio.h>
#include "device/ops.h"
#include "device/board.h"

/* Per-kernel profile: calls, time and flops per kernel kind. Off by default
 * so that an unprofiled run pays nothing for it. */
void xs_profile_enable(int on);
void xs_profile_report(FILE *f);

/* ---- metrics, in PyTorch/XLA's names ---- */
/* AllReduce* is the sum over a board's cores; CrossHostAllReduce* its
 * continuation across processes (hosts of a pod), whose payload this host
 * sent and received as CrossHost{Sent,Received}Bytes (comm.h). */
enum xs_metric { M_COMPILE, M_EXECUTE, M_EXECUTE_REPLICATED, M_ALL_REDUCE, M_HOST_ALL_REDUCE,
                 M_TO_DEVICE, M_FROM_DEVICE, M_COUNT };
enum xs_counter { C_CACHED, C_UNCACHED, C_MARK_STEP, C_HOST_READ, C_ALL_REDUCE,
                  C_ALL_REDUCE_BYTES, C_HOST_ALL_REDUCE_BYTES, C_HOST_SENT_BYTES,
                  C_HOST_RECEIVED_BYTES, C_STATE_CORE_BYTES, C_STATE_HOST_BYTES, C_COUNTERS };
/* C_STATE_*_BYTES: the optimizer's moments each core and each host holds
 * (model_set_cores sets them; --shard-optimizer divides them by the
 * pod's cores): gauges, set rather than added to. */
void xs_metric_add(int metric, double seconds);
void xs_counter_add(int counter, long n);
void xs_counter_set(int counter, long n);
long xs_counter(int counter);
long xs_metric_samples(int metric);
double xs_metric_sum(int metric); /* seconds in all */
void xs_metrics_report(FILE *f);

/* The timeline (--profile): from start, every kernel on its core's track
 * (name, attributes, FLOPs) and every metric above on the host's, written
 * by xs_timeline_write as Chrome trace-event JSON; 0, or -1 if it fails. */
void xs_timeline_start(void);
int xs_timeline_write(const char *path);

/* What the device (xla_sim.c) tells metrics.c as it runs. */
int xs_watching(void); /* a profile or a timeline is recording kernels */
/* One kernel's run, what the profile and the timeline keep of it. A redo
 * team's attempt (xla_sim.c) holds its runs until it wins: only the
 * winners' are reported, so the profile counts each kernel once however
 * many attempts ran it. */
struct kernel_run {
    int op; /* enum kop */
    union kattr attr;
    double t0, t1; /* seconds, monotonic */
    double flops;
};
/* k's run from t0 to t1, and its report for core `core` */
struct kernel_run xs_kernel_run_of(const struct kinstr *k, double t0, double t1);
void xs_kernel_ran(const struct kernel_run *r, int core);
void xs_core_ran(int core, double seconds); /* a stretch of kernels, one core */
void xs_arena_grew(int core, size_t bytes);

#endif
