/* metrics.c: what the device tells about a run. PyTorch/XLA's metrics
 * (CompileTime, ExecuteTime, ... with percentiles) and counters, the
 * per-kernel profile (--metrics), each core's busy time, and the timeline
 * (--profile: Chrome trace events). xla_sim.c runs the kernels and reports
 * each one here (xs_kernel_ran); nothing here changes what runs, and
 * nothing here calls xla_sim.c: it reads the op table (device/ops.c) and
 * the board (device/board.c). */
#include "device/metrics.h"
#include "tensor.h"
#include "util/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-kernel profile ---- */

struct kstat {
    long calls;
    double seconds, flops;
};
static struct kstat prof[KOP_COUNT];
static int prof_on;

void xs_profile_enable(int on) { prof_on = on; }
/* ---- the timeline (--profile): Chrome trace events ----
 * One track per simulated core and one for the host (compiles, transfers,
 * all-reduces, step marks, host reads), kept in memory while recording
 * and written as trace-event JSON at the end (Perfetto, chrome://tracing).
 * A core's track is written only by the thread running that core. */

struct tl_event {
    int op;           /* enum kop, or -1: a host event named by name */
    const char *name;
    double t0, t1;    /* seconds, monotonic */
    union kattr attr;
    double flops;
};
struct tl_track {
    struct tl_event *e;
    long n, cap;
};
static struct tl_track tl_track[XS_MAX_CORES + 1]; /* [cores], then the host */
static int tl_on;
static double tl_origin;
#define TL_HOST XS_MAX_CORES

static void tl_add(int track, const struct tl_event *ev)
{
    struct tl_track *t = &tl_track[track];
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 4096;
        t->e = xrealloc(t->e, sizeof *t->e * (size_t)t->cap);
    }
    t->e[t->n++] = *ev;
}

void xs_timeline_start(void)
{
    for (int i = 0; i <= TL_HOST; i++)
        tl_track[i].n = 0;
    tl_origin = now_seconds();
    tl_on = 1;
}

/* A host event of `seconds` that just ended (seconds 0: an instant), for
 * a timeline being recorded (tl_on: its callers ask first). */
static void tl_host(const char *name, double seconds)
{
    double t1 = now_seconds();
    tl_add(TL_HOST, &(struct tl_event){.op = -1, .name = name, .t0 = t1 - seconds, .t1 = t1});
}

static void tl_write_event(FILE *f, const struct tl_event *e, int pid, int tid, int *first)
{
    char attrs[512] = "";
    if (e->op >= 0)
        kop_format_attrs(attrs, sizeof attrs, e->op, &e->attr);
    fprintf(f, "%s\n{\"name\":\"%s\",\"ph\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
            "\"tid\":%d,\"args\":{\"attrs\":\"%s\",\"flops\":%.0f}}", *first ? "" : ",",
            e->op >= 0 ? kop_name(e->op) : e->name, e->t1 > e->t0 ? "X" : "i",
            (e->t0 - tl_origin) * 1e6, (e->t1 - e->t0) * 1e6, pid, tid, attrs, e->flops);
    *first = 0;
}

int xs_timeline_write(const char *path)
{
    tl_on = 0;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int pid = xs_host(), first = 1;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":"
            "\"host %d (%s)\"}},\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,"
            "\"tid\":0,\"args\":{\"name\":\"host\"}}", pid, pid, xs_device_name(), pid);
    /* the board's cores, and those of a board lent to the redo team
     * (model_lend_cores) that ran while recording */
    int tracks = xs_cores();
    for (int c = tracks; c < XS_MAX_CORES; c++)
        tracks = tl_track[c].n > 0 ? c + 1 : tracks;
    for (int c = 0; c < tracks; c++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                "\"args\":{\"name\":\"xla:%d\"}}", pid, c + 1, pid * xs_cores() + c);
    first = 0;
    for (long i = 0; i < tl_track[TL_HOST].n; i++)
        tl_write_event(f, &tl_track[TL_HOST].e[i], pid, 0, &first);
    for (int c = 0; c < tracks; c++)
        for (long i = 0; i < tl_track[c].n; i++)
            tl_write_event(f, &tl_track[c].e[i], pid, c + 1, &first);
    fputs("\n]}\n", f);
    for (int i = 0; i <= TL_HOST; i++) {
        free(tl_track[i].e);
        tl_track[i] = (struct tl_track){0};
    }
    return fclose(f) ? -1 : 0;
}

/* ---- what the device reports as it runs ---- */

static double core_busy[XS_MAX_CORES]; /* seconds each core spent in kernels */
static size_t core_arena[XS_MAX_CORES]; /* bytes of each core's arena */
static int cores_seen = 1;

int xs_watching(void) { return prof_on || tl_on; }

struct kernel_run xs_kernel_run_of(const struct kinstr *k, double t0, double t1)
{
    return (struct kernel_run){k->op, k->attr, t0, t1, kop_flops(k)};
}

void xs_kernel_ran(const struct kernel_run *r, int core)
{
    if (tl_on)
        tl_add(core, &(struct tl_event){r->op, NULL, r->t0, r->t1, r->attr, r->flops});
    if (!prof_on)
        return;
    struct kstat *s = &prof[r->op];
#pragma omp critical(xs_profile)
    {
        s->seconds += r->t1 - r->t0;
        s->calls++;
        s->flops += r->flops;
    }
}

void xs_core_ran(int core, double seconds)
{
    core_busy[core] += seconds;
    cores_seen = core + 1 > cores_seen ? core + 1 : cores_seen;
}

void xs_arena_grew(int core, size_t bytes) { core_arena[core] = bytes; }

void xs_profile_report(FILE *f)
{
    double total = 0;
    for (int i = 0; i < KOP_COUNT; i++)
        total += prof[i].seconds;
    fprintf(f, "Kernel profile (%s path)\n", isa_name(isa_get()));
    fprintf(f, "  %-16s %10s %11s %9s %7s\n", "kernel", "calls", "total ms",
            "GFLOP/s", "share");
    for (int i = 0; i < KOP_COUNT; i++) {
        const struct kstat *s = &prof[i];
        if (!s->calls)
            continue;
        double gf = s->seconds > 0 ? s->flops / s->seconds * 1e-9 : 0;
        fprintf(f, "  %-16s %10ld %11.2f %9.2f %6.1f%%\n", kop_name(i), s->calls,
                s->seconds * 1e3, gf, total > 0 ? 100 * s->seconds / total : 0);
    }
}

/* ---- metrics ---- */

struct metric {
    long n, cap;
    double sum;
    double *v; /* [n] samples in seconds, for percentiles */
    double first, last;
};
static struct metric metrics[M_COUNT];
static long counters[C_COUNTERS];
static const char *const metric_names[M_COUNT] = {
    "CompileTime", "ExecuteTime", "ExecuteReplicatedTime", "AllReduceTime",
    "CrossHostAllReduceTime", "TransferToDeviceTime", "TransferFromDeviceTime"};
static const char *const counter_names[C_COUNTERS] = {
    "CachedCompile", "UncachedCompile", "MarkStep", "HostReadCut", "AllReduce",
    "AllReduceBytes", "CrossHostAllReduceBytes", "CrossHostSentBytes", "CrossHostReceivedBytes",
    "OptimizerStateBytesPerCore", "OptimizerStateBytesPerHost"};

void xs_metric_add(int m, double seconds)
{
    struct metric *s = &metrics[m];
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->v = xrealloc(s->v, sizeof *s->v * (size_t)s->cap);
    }
    s->last = now_seconds();
    if (!s->n)
        s->first = s->last;
    s->v[s->n++] = seconds;
    s->sum += seconds;
    if (tl_on)
        tl_host(metric_names[m], seconds);
}

void xs_counter_add(int c, long n)
{
    counters[c] += n;
    if (tl_on && (c == C_MARK_STEP || c == C_HOST_READ))
        tl_host(counter_names[c], 0);
}
void xs_counter_set(int c, long n) { counters[c] = n; }
long xs_counter(int c) { return counters[c]; }
long xs_metric_samples(int m) { return metrics[m].n; }
double xs_metric_sum(int m) { return metrics[m].sum; }

/* PyTorch/XLA prints durations as 1s234ms567us; so do we. */
static void print_duration(FILE *f, double s)
{
    long us = (long)(s * 1e6 + 0.5);
    if (us >= 1000000)
        fprintf(f, "%lds%03ldms%03ldus", us / 1000000, us / 1000 % 1000, us % 1000);
    else if (us >= 1000)
        fprintf(f, "%ldms%03ldus", us / 1000, us % 1000);
    else
        fprintf(f, "%ldus", us);
}

static void report_metric(FILE *f, int m)
{
    struct metric *s = &metrics[m];
    static const int pct[] = {1, 5, 10, 20, 50, 80, 90, 95, 99};
    fprintf(f, "Metric: %s\n  TotalSamples: %ld\n  Accumulator: ", metric_names[m], s->n);
    print_duration(f, s->sum);
    double span = s->last - s->first;
    fprintf(f, "\n  Rate: %.4g / second\n  Percentiles: ", span > 0 ? (s->n - 1) / span : 0.0);
    double *sorted = malloc(sizeof *sorted * (size_t)(s->n ? s->n : 1));
    memcpy(sorted, s->v, sizeof *sorted * (size_t)s->n);
    sort_doubles(sorted, (size_t)s->n);
    for (int i = 0; i < 9; i++) {
        fprintf(f, "%s%d%%=", i ? "; " : "", pct[i]);
        print_duration(f, s->n ? sorted[(s->n - 1) * pct[i] / 100] : 0);
    }
    fputc('\n', f);
    free(sorted);
}

/* Per core: time in kernels, so that imbalance or an oversubscribed host
 * (more simulated cores than threads) shows. */
static void report_cores(FILE *f)
{
    if (cores_seen < 2)
        return;
    for (int c = 0; c < cores_seen; c++) {
        fprintf(f, "Device: xla:%d (%s)\n  BusyTime: ", c, xs_device_name());
        print_duration(f, core_busy[c]);
        fprintf(f, "\n  ArenaBytes: %zu\n", core_arena[c]);
    }
}

void xs_metrics_report(FILE *f)
{
    for (int m = 0; m < M_COUNT; m++)
        if (metrics[m].n)
            report_metric(f, m);
    for (int c = 0; c < C_COUNTERS; c++)
        if (counters[c] || c < C_ALL_REDUCE)
            fprintf(f, "Counter: %s\n  Value: %ld\n", counter_names[c], counters[c]);
    report_cores(f);
}
