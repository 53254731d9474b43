/* xla_sim.c: runs kernel instructions and keeps the per-kernel profile.
 * This is where a "device" lives; graph.c decides what to run, this file
 * decides how a single instruction becomes a tensor.c call. */
#include "xla_sim.h"
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

static const char *const kop_names[KOP_COUNT] = {
    "embed", "embed_bwd", "add", "matmul", "matmul_tn", "transpose",
    "sum_rows", "relu", "relu_bwd", "layernorm", "layernorm_bwd",
    "attention", "attention_bwd", "attention_step", "xent", "xent_bwd",
    "fill", "adam", "matmul_ex", "add_n",
};

const char *kop_name(int op)
{
    return op >= 0 && op < KOP_COUNT ? kop_names[op] : "?";
}

/* Causal attention does about half of the T*T work: the masked half is
 * skipped, so it is not counted either. */
static double attention_flops(const long *a, int bwd)
{
    double B = a[0], T = a[1], C = a[2];
    double pairs = B * T * (T + 1) / 2;
    return (bwd ? 8.0 : 4.0) * pairs * C;
}

double kop_flops(const struct kinstr *k)
{
    const long *a = k->a;
    switch (k->op) {
    case KOP_MATMUL:
    case KOP_MATMUL_EX:
    case KOP_MATMUL_TN: return 2.0 * a[0] * a[1] * a[2];
    case KOP_ATTENTION: return attention_flops(a, 0);
    case KOP_ATTENTION_BWD: return attention_flops(a, 1);
    case KOP_ATTENTION_STEP: return 4.0 * a[0] * (*(const int32_t *)k->in[3] + 1) * a[2];
    case KOP_LAYERNORM: return 8.0 * a[0] * a[1];
    case KOP_LAYERNORM_BWD: return 14.0 * a[0] * a[1];
    case KOP_XENT:
    case KOP_XENT_BWD: return 4.0 * a[0] * a[1];
    case KOP_ADAM: return 12.0 * a[0];
    case KOP_ADD_N:
    case KOP_ADD:
    case KOP_RELU:
    case KOP_RELU_BWD: return (double)a[0];
    default: return 0;
    }
}

static void exec_attention_family(const struct kinstr *k)
{
    const long *a = k->a;
    switch (k->op) {
    case KOP_ATTENTION:
        k_attention(k->out[0], k->out[1], k->in[0], a[0], a[1], a[2], a[3]);
        break;
    case KOP_ATTENTION_BWD:
        k_attention_bwd(k->out[0], k->in[0], k->in[1], k->in[2], k->in[3],
                        a[0], a[1], a[2], a[3]);
        break;
    default: /* KOP_ATTENTION_STEP */
        k_attention_step(k->out[0], k->in[1], k->in[2], k->in[0], a[0],
                         *(const int32_t *)k->in[3], a[1], a[2], a[3]);
    }
}

static void fill(float *y /* [n] */, long n, float v)
{
    for (long i = 0; i < n; i++)
        y[i] = v;
}

static void exec_add_n(const struct kinstr *k)
{
    const float *xs[KMAX_IN];
    int m = 0;
    while (m < KMAX_IN && k->in[m]) {
        xs[m] = k->in[m];
        m++;
    }
    k_add_n(k->out[0], xs, m, k->a[0]);
}

static void dispatch(const struct kinstr *k)
{
    const long *a = k->a;
    void *const *in = k->in;
    void *const *out = k->out;
    switch (k->op) {
    case KOP_EMBED: k_embed(out[0], in[0], in[1], a[0], a[1], a[2]); break;
    case KOP_EMBED_BWD: k_embed_bwd(out[0], in[0], in[1], a[0], a[1], a[2]); break;
    case KOP_ADD: k_add(out[0], in[0], in[1], a[0]); break;
    case KOP_MATMUL: k_matmul(out[0], in[0], in[1], in[2], a[0], a[1], a[2]); break;
    case KOP_MATMUL_TN: k_matmul_tn(out[0], in[0], in[1], a[0], a[1], a[2]); break;
    case KOP_TRANSPOSE: k_transpose(out[0], in[0], a[0], a[1]); break;
    case KOP_SUM_ROWS: k_sum_rows(out[0], in[0], a[0], a[1]); break;
    case KOP_RELU: k_relu(out[0], in[0], a[0]); break;
    case KOP_RELU_BWD: k_relu_bwd(out[0], in[0], in[1], a[0]); break;
    case KOP_LAYERNORM:
        k_layernorm(out[0], out[1], out[2], in[0], in[1], in[2], a[0], a[1]);
        break;
    case KOP_LAYERNORM_BWD:
        k_layernorm_bwd(out[0], out[1], out[2], in[0], in[1], in[2], in[3],
                        in[4], a[0], a[1]);
        break;
    case KOP_ATTENTION:
    case KOP_ATTENTION_BWD:
    case KOP_ATTENTION_STEP: exec_attention_family(k); break;
    case KOP_XENT: k_xent(out[0], in[0], in[1], a[0], a[1]); break;
    case KOP_XENT_BWD: k_xent_bwd(out[0], in[0], in[1], in[2], a[0], a[1]); break;
    case KOP_FILL: fill(out[0], a[0], k->f[0]); break;
    case KOP_ADAM:
        k_adam(in[0], in[2], in[3], in[1], a[0], k->f[0], k->f[1], k->f[2],
               k->f[3], *(const int32_t *)in[4]);
        break;
    case KOP_MATMUL_EX:
        k_matmul_ex(out[0], in[0], in[1], in[2], in[3], in[4], k->f[0] != 0, a[0], a[1], a[2]);
        break;
    case KOP_ADD_N: exec_add_n(k); break;
    default: break;
    }
}

/* ---- per-kernel profile ---- */

struct kstat {
    long calls;
    double seconds, flops;
};
static struct kstat prof[KOP_COUNT];
static int prof_on;

void xs_profile_enable(int on) { prof_on = on; }
void xs_profile_reset(void) { memset(prof, 0, sizeof prof); }

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

void xs_exec(const struct kinstr *k)
{
    if (!prof_on) {
        dispatch(k);
        return;
    }
    double t0 = now_seconds();
    dispatch(k);
    struct kstat *s = &prof[k->op];
    s->seconds += now_seconds() - t0;
    s->calls++;
    s->flops += kop_flops(k);
}

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

/* ---- compiled programs ---- */

/* The device's memory: one arena, grown to the largest plan seen. A replay
 * of a cached program allocates nothing. */
static unsigned char *dev_arena;
static size_t dev_arena_cap;

static unsigned char *device_arena(size_t bytes)
{
    if (bytes > dev_arena_cap) {
        free(dev_arena);
        dev_arena = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!dev_arena) {
            fprintf(stderr, "gpt: out of memory (device arena of %zu bytes)\n", bytes);
            exit(1);
        }
        dev_arena_cap = bytes;
    }
    return dev_arena;
}

void program_free(Program *p)
{
    if (!p)
        return;
    free(p->ins);
    free(p->tin);
    free(p->tout);
    free(p);
}

static void *resolve(const struct place *pl, unsigned char *arena, void *const *slots)
{
    switch (pl->kind) {
    case PL_ARENA: return arena + pl->at;
    case PL_SLOT: return slots[pl->at];
    default: return NULL;
    }
}

static void run_instrs(const Program *p, unsigned char *arena, void *const *slots)
{
    for (int i = 0; i < p->n; i++) {
        const struct pinstr *pi = &p->ins[i];
        struct kinstr k = {.op = pi->op};
        for (int j = 0; j < KMAX_IN; j++)
            k.in[j] = resolve(&pi->in[j], arena, slots);
        for (int j = 0; j < KMAX_OUT; j++)
            k.out[j] = resolve(&pi->out[j], arena, slots);
        memcpy(k.a, pi->a, sizeof k.a);
        memcpy(k.f, pi->f, sizeof k.f);
        xs_exec(&k);
    }
}

static void transfer(const struct transfer *t, int n, unsigned char *arena,
                     void *const *slots, int to_device)
{
    double t0 = now_seconds();
    for (int i = 0; i < n; i++) {
        if (to_device)
            memcpy(arena + t[i].at, slots[t[i].slot], (size_t)t[i].bytes);
        else
            memcpy(slots[t[i].slot], arena + t[i].at, (size_t)t[i].bytes);
    }
    xs_metric_add(to_device ? M_TO_DEVICE : M_FROM_DEVICE, now_seconds() - t0);
}

void xs_run(const Program *p, void *const *slots)
{
    unsigned char *arena = device_arena(p->arena_bytes);
    transfer(p->tin, p->nin, arena, slots, 1);
    double t0 = now_seconds();
    run_instrs(p, arena, slots);
    xs_metric_add(M_EXECUTE, now_seconds() - t0);
    transfer(p->tout, p->nout, arena, slots, 0);
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
    "CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime"};
static const char *const counter_names[C_COUNTERS] = {
    "CachedCompile", "UncachedCompile", "MarkStep", "HostReadCut"};

void xs_metric_add(int m, double seconds)
{
    struct metric *s = &metrics[m];
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->v = realloc(s->v, sizeof *s->v * (size_t)s->cap);
        if (!s->v) {
            fprintf(stderr, "gpt: out of memory (metrics)\n");
            exit(1);
        }
    }
    s->last = now_seconds();
    if (!s->n)
        s->first = s->last;
    s->v[s->n++] = seconds;
    s->sum += seconds;
}

void xs_counter_add(int c, long n) { counters[c] += n; }
long xs_counter(int c) { return counters[c]; }
long xs_metric_samples(int m) { return metrics[m].n; }

void xs_metrics_reset(void)
{
    for (int i = 0; i < M_COUNT; i++) {
        free(metrics[i].v);
        memset(&metrics[i], 0, sizeof metrics[i]);
    }
    memset(counters, 0, sizeof counters);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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
    qsort(sorted, (size_t)s->n, sizeof *sorted, cmp_double);
    for (int i = 0; i < 9; i++) {
        fprintf(f, "%s%d%%=", i ? "; " : "", pct[i]);
        print_duration(f, s->n ? sorted[(s->n - 1) * pct[i] / 100] : 0);
    }
    fputc('\n', f);
    free(sorted);
}

void xs_metrics_report(FILE *f)
{
    for (int m = 0; m < M_COUNT; m++)
        if (metrics[m].n)
            report_metric(f, m);
    for (int c = 0; c < C_COUNTERS; c++)
        fprintf(f, "Counter: %s\n  Value: %ld\n", counter_names[c], counters[c]);
}
