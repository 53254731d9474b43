/* bench/bench.c: `make bench`. One table of where gpt stands on this
 * machine against the speed issues' targets:
 *
 *   - the fp32 (and bf16) FMA peak, measured at start-up, 1 and all threads;
 *   - each kernel at the default model's shapes: GFLOP/s, % of that peak,
 *     and OpenBLAS's cblas_sgemm on the same matmul shapes when installed;
 *     attention at head sizes 16 to 64, the matmuls of the larger models;
 *   - the training step on the cpu and xla devices, 1 and 8 simulated
 *     cores, fp32 and bf16, all threads and 1, with MFU;
 *   - the eval block, sampling, the projected full default run;
 *   - the PyTorch reference (bench/torch_ref.py) when Debian's
 *     python3-torch is importable; scaling with the embedding width; the
 *     larger shapes and GPT-2 small's; gcc's build against clang's;
 *   - the data loader: steps a second it makes from tar shards, from files
 *     and through pipe:cat, next to the steps a second training takes;
 *   - under load: the cores the kernel gives a process of two threads
 *     beside a busy process (in the same session and in another), and
 *     the bound they set; gpt train alone and beside busy processes, with
 *     gpt's own thread count and --threads 1; a pod of 2 ranks on this
 *     host against one process of --cores 2;
 *   - last, the summary: every target of the fourth speed issue (35) and
 *     of issue 60 (the load section's), the figure measured, met or
 *     MISSED, or why it was not measured.
 *
 * Contenders always run alternately, round after round, and the table
 * quotes medians: on a shared machine the noise then falls on all of them
 * alike instead of on whichever ran during a disturbance.
 *
 *   bench/bench [--quick] [--data FILE] [--only SECTION[,SECTION...]] [--json FILE]
 *               [--gpt FILE]
 *
 *   --json FILE also writes every figure (and its target, if it has one)
 *   with the machine it was measured on, so two runs can be compared.
 *   --gpt FILE is the binary the load section trains with (./gpt by
 *   default; ./gpt-llvm times clang's build under load).
 *
 * SECTION: kernels, steps, isa, eval, torch, scaling, shapes, gpt2,
 * flavours, loader, load (the projected full run needs steps and eval); the peak
 * is always measured (the other sections quote percentages of it).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd/sample.h"
#include "data/data.h"
#include "gpt.h"
#include "data/loader.h"
#include "tensor.h"
#include "xla_sim.h"
#include "util/util.h"
#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif
#ifdef HAVE_OPENBLAS
#include <cblas.h>
/* OpenBLAS's own (its cblas.h declares them too; netlib's does not) */
int openblas_get_num_threads(void);
char *openblas_get_config(void);
#endif

/* ---- settings and small helpers ---- */

static struct {
    int quick;            /* --quick: a smoke run of seconds */
    const char *only;     /* --only: comma-separated sections, NULL = all */
    int threads;          /* all threads: OpenMP's default at start-up */
    char data[PATH_MAX];  /* the corpus, or the synthetic text we wrote */
    char dir[PATH_MAX];   /* this binary's directory: bench/ */
    char torch[PATH_MAX]; /* torch_ref.py, next to this binary */
    char tmp[64];         /* synthetic text file to remove at exit, or "" */
    const char *json;     /* --json: the record's path, or NULL */
    char gpt[PATH_MAX];   /* --gpt: the binary the load section trains with */
} opt;

/* Measured peaks, GFLOP/s: [0] 1 thread, [1] all threads; 0 = none. */
static struct {
    double fp32[2], bf16[2];
    const char *fp32_isa;
} peak;

/* The default model: batch, sequence, width, MLP, heads, vocabulary. */
enum { DB = 32, DT = 128, DC = 32, DM = 64, DH = 4, DV = 128, DN = DB * DT };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* "/tmp/NAME-" and the six letters mkstemp and mkdtemp replace. */
static void temp_template(char *path, size_t n, const char *name)
{
    int len = snprintf(path, n - 6, "/tmp/%s-", name);
    memset(path + len, 'X', 6);
    path[len + 6] = 0;
}

static const char *mark(int met) { return met ? "met" : "MISSED"; }

/* ---- the --json record: every figure printed, in print order ---- */

struct figure {
    char section[16], name[112], unit[16], target[48];
    double value;
    int met; /* 1 met, 0 missed, -1 no target */
};
static struct figure *figures;
static int nfigures;

static void record(const char *section, const char *name, double value, const char *unit,
                   const char *target, int met)
{
    static int cap;
    if (nfigures == cap) {
        cap = cap ? 2 * cap : 64;
        figures = realloc(figures, sizeof *figures * (size_t)cap);
        if (!figures) {
            perror("bench");
            exit(1);
        }
    }
    struct figure *f = &figures[nfigures++];
    snprintf(f->section, sizeof f->section, "%s", section);
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->unit, sizeof f->unit, "%s", unit);
    snprintf(f->target, sizeof f->target, "%s", target ? target : "");
    f->value = value;
    f->met = target ? met : -1;
}

/* --only's names */
static const char sections[] = "kernels,steps,isa,eval,torch,scaling,shapes,gpt2,flavours,loader,load";

/* Whether the comma-separated list has the item name[0..len). */
static int list_has(const char *list, const char *name, size_t len)
{
    for (;;) {
        size_t n = strcspn(list, ",");
        if (n == len && !strncmp(list, name, len))
            return 1;
        if (!list[n])
            return 0;
        list += n + 1;
    }
}

/* Whether --only asks for this section (every one without --only). */
static int wanted(const char *section)
{
    return !opt.only || list_has(opt.only, section, strlen(section));
}

/* --only's list names only known sections. */
static int only_ok(const char *list)
{
    for (;;) {
        size_t n = strcspn(list, ",");
        if (!list_has(sections, list, n))
            return 0;
        if (!list[n])
            return 1;
        list += n + 1;
    }
}

/* ---- the fourth speed issue's (35) targets ----
 * One table: the sections judge their figures against these bounds and
 * fill in the worst figure of each row; the summary at the end prints
 * every row. A bound is a fraction of the peak measured here for the path
 * that runs, or a ratio of contenders run alternately in this process, so
 * it means the same on machines whose peaks differ twofold. */

enum target_id {
    T_STEP_1CORE, T_STEP_V38, T_STEP_AVX2, T_THREADS, T_BF16_NATIVE, T_BF16_EMULATED,
    T_SHAPE_256, T_SHAPE_384, T_SHAPE_768, T_GPT2, T_ATT_FWD, T_ATT_BWD, T_WIDE_MM, T_LLVM,
    T_MANY, T_FULL_RUN, T_LOAD_1, T_LOAD_2, T_LOAD_THREADS, T_POD_HOST, T_LOAD_COMMANDS,
    NTARGETS,
    T_NONE = -1 /* a figure with no target of issue 35 */
};

enum { NOT_RUN, MEASURED, UNMEASURABLE }; /* a target's state */

static struct target {
    const char *what;    /* the summary's row */
    const char *section; /* the --only section(s) that measure it */
    int at_most;         /* 0: met at >= want; 1: met at <= want */
    double want;
    const char *unit;    /* "%": a fraction of a peak; "x": a ratio; "min" */
    int state;
    double got;          /* the worst figure of the row so far */
    /* A row judged by rounds (judge_rounds): the best round of the figure
     * kept as got, which decides its verdict; 0 for the others. */
    double best_round;
    char note[112];      /* which figure that was, or why none was measured */
} targets[NTARGETS] = {
    [T_STEP_1CORE] = {"default fp32 step, xla 1 core, best path", "steps", 0, 0.70, "%"},
    [T_STEP_V38] = {"default fp32 step, xla v3-8, best path", "steps", 0, 0.70, "%"},
    [T_STEP_AVX2] = {"default fp32 step, xla 1 core, avx2 path", "isa", 0, 0.70, "%"},
    [T_THREADS] = {"all threads over 1, every layout (worst)", "steps", 0, 1.9, "x"},
    [T_BF16_NATIVE] = {"bf16 step over fp32, AVX512_BF16 (worst)", "steps", 0, 1.5, "x"},
    [T_BF16_EMULATED] = {"bf16 step over fp32, emulated on avx2 (worst)", "steps", 0, 1.0, "x"},
    [T_SHAPE_256] = {"embed 256 step (shapes)", "shapes", 0, 0.80, "%"},
    [T_SHAPE_384] = {"embed 384 step (shapes)", "shapes", 0, 0.80, "%"},
    [T_SHAPE_768] = {"embed 768 step (shapes)", "shapes", 0, 0.80, "%"},
    [T_GPT2] = {"GPT-2 small's shape, context 1024", "gpt2", 0, 0.80, "%"},
    [T_ATT_FWD] = {"attention forward, default shape", "kernels", 0, 0.50, "%"},
    [T_ATT_BWD] = {"attention backward, default shape", "kernels", 0, 0.65, "%"},
    [T_WIDE_MM] = {"matmuls and dW at embed 256-768 (worst)", "kernels", 0, 0.85, "%"},
    [T_LLVM] = {"clang build's step over gcc's", "flavours", 1, 1.05, "x"},
    [T_MANY] = {"sample --num-samples 16, bytes/s over one", "eval", 0, 4.0, "x"},
    [T_FULL_RUN] = {"full default run, projected", "steps or eval", 1, 7.0, "min"},
    /* issue 60's: a machine that runs other work */
    [T_LOAD_1] = {"step beside 1 busy process over alone (worst)", "load", 1, 1.5, "x"},
    [T_LOAD_2] = {"step beside 2 busy processes over alone (worst)", "load", 1, 2.2, "x"},
    [T_LOAD_THREADS] = {"beside busy ones, over --threads 1 (worst)", "load", 1, 1.0, "x"},
    [T_POD_HOST] = {"pod of 2 ranks on one host over --cores 2", "load", 1, 1.2, "x"},
    [T_LOAD_COMMANDS] = {"eval and sample beside 1 busy over alone (worst)", "load", 1, 1.5, "x"},
};

static int target_met(enum target_id id, double got)
{
    const struct target *t = &targets[id];
    return t->at_most ? got <= t->want : got >= t->want;
}

/* A kept figure's verdict: a row judged by rounds is met unless its every
 * round missed. */
static int kept_met(enum target_id id)
{
    const struct target *t = &targets[id];
    return target_met(id, t->got) || (t->best_round > 0 && target_met(id, t->best_round));
}

/* The bound as the tables print it: ">= 70%", "<= 1.05x", "<= 7 min". */
static const char *target_text(enum target_id id)
{
    static char text[NTARGETS][24];
    const struct target *t = &targets[id];
    const char *op = t->at_most ? "<=" : ">=";
    if (!strcmp(t->unit, "%"))
        snprintf(text[id], sizeof text[id], "%s %.0f%%", op, 100 * t->want);
    else if (!strcmp(t->unit, "x")) /* 1.05x, 1.9x, 4.0x */
        snprintf(text[id], sizeof text[id], "%s %.*fx", op,
                 t->want * 10 == (int)(t->want * 10) ? 1 : 2, t->want);
    else
        snprintf(text[id], sizeof text[id], "%s %g %s", op, t->want, t->unit);
    return text[id];
}

/* Keeps a figure (with its best round, 0 for a plain figure) as its row's
 * if it is the row's worst so far: a missed one before any met one. */
static void keep_figure(enum target_id id, double got, double best_round, int met,
                        const char *which)
{
    struct target *t = &targets[id];
    int worse = t->at_most ? got > t->got : got < t->got;
    int kept_missed = t->state == MEASURED && !kept_met(id);
    if (t->state != MEASURED || (!met && !kept_missed) || (met == !kept_missed && worse)) {
        t->state = MEASURED;
        t->got = got;
        t->best_round = best_round;
        snprintf(t->note, sizeof t->note, "%s", which ? which : "");
    }
}

/* A figure against target id; returns whether it is met. A row of several
 * figures (every layout, every matmul) keeps its worst, and `which`
 * names it. */
static int judge(enum target_id id, double got, const char *which)
{
    int met = target_met(id, got);
    keep_figure(id, got, 0, met, which);
    return met;
}

/* A ratio of two contenders that may run the very same program (gpt picks
 * one thread where the kernel gives its session one core whatever its
 * threads), whose median then lands on either side of the bound by the
 * machine's noise: "never slower" is missed only when every round was
 * slower, so the best round decides. Returns whether it is met. */
static int judge_rounds(enum target_id id, double median, double best_round, const char *which)
{
    int met = target_met(id, median) || target_met(id, best_round);
    keep_figure(id, median, best_round, met, which);
    return met;
}

/* A target this run cannot measure, and why (the CPU, a missing build). */
static void unmeasurable(enum target_id id, const char *why)
{
    struct target *t = &targets[id];
    if (t->state == MEASURED)
        return;
    t->state = UNMEASURABLE;
    snprintf(t->note, sizeof t->note, "%s", why);
}

/* A figure as the summary prints it, in its target's unit. */
static void format_figure(enum target_id id, double got, char *buf, size_t n)
{
    const char *unit = targets[id].unit;
    if (!strcmp(unit, "%"))
        snprintf(buf, n, "%.0f%%", 100 * got);
    else if (!strcmp(unit, "x"))
        snprintf(buf, n, "%.2fx", got);
    else
        snprintf(buf, n, "%.2f %s", got, unit);
}

/* The summary the closing note quotes: every target, its figure and
 * verdict, or "not measured" and why. */
static void summary(void)
{
    int met = 0, missed = 0, none = 0;
    printf("targets of the fourth speed issue (35) and of issue 60 (load)%s\n",
           opt.quick ? " (--quick: the figures mean nothing)" : "");
    printf("  %-46s %11s  %-9s %-7s %s\n", "target", "measured", "target", "verdict", "worst of / why");
    for (int id = 0; id < NTARGETS; id++) {
        const struct target *t = &targets[id];
        char fig[32];
        if (t->state != MEASURED) {
            none++;
            printf("  %-46s %11s  %-9s not measured: ", t->what, "-", target_text(id));
            if (t->state == NOT_RUN)
                printf("--only left out %s\n", t->section);
            else
                printf("%s\n", t->note);
            continue;
        }
        int ok = kept_met(id);
        met += ok, missed += !ok;
        format_figure(id, t->got, fig, sizeof fig);
        printf("  %-46s %11s  %-9s %s", t->what, fig, target_text(id), mark(ok));
        if (t->note[0]) /* no trailing blanks */
            printf("%*s%s", 8 - (int)strlen(mark(ok)), "", t->note);
        if (ok && !target_met(id, t->got)) /* judged by rounds: level */
            printf(" (level: one round at %.3f%s)", t->best_round, t->unit);
        putchar('\n');
        record("summary", t->what, !strcmp(t->unit, "%") ? 100 * t->got : t->got, t->unit,
               target_text(id), ok);
    }
    printf("  %d met, %d MISSED, %d not measured\n", met, missed, none);
}

/* ---- peak: independent FMA chains ----
 * 12 accumulators: more chains than FMA latency x FMA ports (4 x 2 on
 * current x86 cores), so the loop is bound by FMA throughput alone. arm64
 * takes 24: its cores have up to 4 FMA pipes of latency 4 (Neoverse V1/V2,
 * Apple), and 32 vector registers to hold them. */

enum { CHAINS = 12, NEON_CHAINS = 24 };
static volatile float sink; /* keeps the chains' results alive */

#if defined(__x86_64__)

__attribute__((target("avx512f"))) static void chains_avx512(long iters)
{
    __m512 acc[CHAINS], x = _mm512_set1_ps(0.9999f), y = _mm512_set1_ps(1e-4f);
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], x, y); /* converges to 1: no denormals */
    }
    for (int i = 1; i < CHAINS; i++)
        acc[0] = _mm512_add_ps(acc[0], acc[i]);
    sink = _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx2,fma"))) static void chains_avx2(long iters)
{
    __m256 acc[CHAINS], x = _mm256_set1_ps(0.9999f), y = _mm256_set1_ps(1e-4f);
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm256_set1_ps((float)i);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
    float lane[8];
    for (int i = 1; i < CHAINS; i++)
        acc[0] = _mm256_add_ps(acc[0], acc[i]);
    _mm256_storeu_ps(lane, acc[0]);
    sink = lane[0];
}

#endif /* __x86_64__ */

#if defined(__aarch64__)
/* fmla on q registers: 4 lanes, and NEON is in every arm64 core. */
static void chains_neon(long iters)
{
    float32x4_t acc[NEON_CHAINS], x = vdupq_n_f32(0.9999f), y = vdupq_n_f32(1e-4f);
    for (int i = 0; i < NEON_CHAINS; i++)
        acc[i] = vdupq_n_f32((float)i);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 24
        for (int i = 0; i < NEON_CHAINS; i++)
            acc[i] = vfmaq_f32(y, acc[i], x); /* converges to 1: no denormals */
    }
    for (int i = 1; i < NEON_CHAINS; i++)
        acc[0] = vaddq_f32(acc[0], acc[i]);
    sink = vaddvq_f32(acc[0]);
}
#endif

/* No vector FMA: what the compiler makes of a plain multiply-add. */
static void chains_plain(long iters)
{
    float acc[CHAINS * 4];
    for (int i = 0; i < CHAINS * 4; i++)
        acc[i] = (float)i;
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < CHAINS * 4; i++)
            acc[i] = acc[i] * 0.9999f + 1e-4f;
    sink = acc[0] + acc[CHAINS * 4 - 1];
}

#if defined(__x86_64__)
/* vdpbf16ps: per 32-bit lane two bf16 products added to the accumulator. */
__attribute__((target("avx512bf16,avx512f"))) static void chains_bf16(long iters)
{
    __m512 acc[CHAINS];
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80); /* the pair (1, 1) */
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_setzero_ps();
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], x, x);
    }
    for (int i = 1; i < CHAINS; i++)
        acc[0] = _mm512_add_ps(acc[0], acc[i]);
    sink = _mm512_reduce_add_ps(acc[0]);
}
#endif /* __x86_64__ */

/* GFLOP/s of `threads` threads running fn together (flops per iteration
 * given), the wall time of the whole team, best of repeats for at least
 * 5 repeats and a quarter second (a shared machine's disturbances last
 * tens of milliseconds). An untimed run first: a new thread may start on a
 * busy core and take a few milliseconds to be moved to an idle one. */
static double peak_run(void (*fn)(long), double flops_per_iter, int threads)
{
    long iters = 4000000; /* ~7 ms a repeat at full speed */
    double best = 0, start = now();
#pragma omp parallel num_threads(threads)
    fn(iters);
    for (int r = 0; r < 5 || now() - start < (opt.quick ? 0.1 : 0.25); r++) {
        double t0 = now();
#pragma omp parallel num_threads(threads)
        fn(iters);
        double g = flops_per_iter * iters * threads / (now() - t0) * 1e-9;
        best = g > best ? g : best;
    }
    return best;
}

/* The FMA loop of a kernel path: its function, flops per iteration,
 * chains and instruction's name. */
struct chains {
    void (*fn)(long);
    double per_iter;
    int chains;
    const char *name;
};

static struct chains chains_of(int isa)
{
    struct chains c = {chains_plain, 2.0 * CHAINS * 4, CHAINS, "plain C"}; /* an FMA: 2 flops */
#if defined(__x86_64__)
    if (isa == ISA_AVX512)
        c = (struct chains){chains_avx512, 2.0 * 16 * CHAINS, CHAINS, "avx512 vfmadd"};
    else if (isa == ISA_AVX2)
        c = (struct chains){chains_avx2, 2.0 * 8 * CHAINS, CHAINS, "avx2 vfmadd"};
#elif defined(__aarch64__)
    if (isa == ISA_NEON)
        c = (struct chains){chains_neon, 2.0 * 4 * NEON_CHAINS, NEON_CHAINS, "neon fmla"};
#endif
    return c;
}

/* Below this fraction of the thread count, the all-thread peak over the
 * one-thread peak says the machine is shared. */
#define PEAK_SCALE_MIN 0.85

static void measure_peaks(void)
{
    /* the peak of the path the kernels run (GPT_ISA lowers both) */
    struct chains c = chains_of(isa_best());
    int chains = c.chains;
    peak.fp32_isa = c.name;
    peak.fp32[0] = peak_run(c.fn, c.per_iter, 1);
    peak.fp32[1] = peak_run(c.fn, c.per_iter, opt.threads);
#if defined(__x86_64__)
    if (bf16_native()) {
        peak.bf16[0] = peak_run(chains_bf16, 4.0 * 16 * CHAINS, 1); /* 2 mul + 2 add */
        peak.bf16[1] = peak_run(chains_bf16, 4.0 * 16 * CHAINS, opt.threads);
    }
#endif
    printf("measured peak: %d independent FMA chains a thread, best of repeats\n", chains);
    printf("  %-63s %9s %9s\n", "GFLOP/s", "1 thread", "all");
    printf("  fp32 %-58s %9.0f %9.0f\n", peak.fp32_isa, peak.fp32[0], peak.fp32[1]);
    if (peak.bf16[1] > 0)
        printf("  bf16 %-58s %9.0f %9.0f\n", "avx512 vdpbf16ps", peak.bf16[0], peak.bf16[1]);
    /* Independent chains on cores of their own scale by the thread count;
     * much less means the cores are not all ours (a VM's host lending one
     * elsewhere, other jobs), and every figure below swings with it. */
    double scale = peak.fp32[1] / peak.fp32[0];
    if (opt.threads > 1 && scale < PEAK_SCALE_MIN * opt.threads)
        printf("  warning: %d threads reach %.2fx one thread's peak, not about %dx: the cores are "
               "shared now, so the timings below are not comparable with a quiet run's\n",
               opt.threads, scale, opt.threads);
    printf("\n");
    record("peak", "fp32, 1 thread", peak.fp32[0], "GFLOP/s", NULL, 0);
    record("peak", "fp32, all threads", peak.fp32[1], "GFLOP/s", NULL, 0);
    record("peak", "bf16, 1 thread", peak.bf16[0], "GFLOP/s", NULL, 0);
    record("peak", "bf16, all threads", peak.bf16[1], "GFLOP/s", NULL, 0);
}

/* ---- the larger models ----
 * Speed III's larger shapes (issue 26), each at 1 core, fp32: embed 256 as
 * in the scaling series, then 384 and 768 at GPT-2's proportions (MLP 4 x
 * embed, head size 64, context 256; 768 with 12 layers is GPT-2 small's
 * body over bytes). The kernels section times their matmuls too, at the
 * same tokens. */
struct big_shape {
    int embed, layers, heads, context, batch, mlp;
    enum target_id target;
};
static const struct big_shape big_shapes[] = {
    {256, 4, 4, 128, 32, 512, T_SHAPE_256},
    {384, 6, 6, 256, 16, 1536, T_SHAPE_384},
    {768, 12, 12, 256, 4, 3072, T_SHAPE_768},
};
enum { NBIG = sizeof big_shapes / sizeof *big_shapes };

/* GPT-2 small's shape over bytes (vocabulary 128) at its context of
 * 1,024: one window a step, about 600 GFLOP, a few seconds a step at
 * 100-200 GFLOP/s. */
static const struct big_shape gpt2_small = {768, 12, 12, 1024, 1, 3072, T_GPT2};

/* ---- kernels ----
 * Each kernel runs as the instruction the xla device executes (xs_exec of
 * a struct kinstr), so its dispatch (seg, bf16) is the program's, and its
 * flops are kop_flops(): the same count as gpt's --metrics profile. */

static float *floats(size_t n, unsigned seed) /* [n] uniform in (-1, 1) */
{
    float *x = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) / 8388608.0 - 1.0);
    }
    return x;
}

/* Operands of the kernels other than matmul and attention (those size
 * their own, per shape). */
struct operands {
    float *a, *c;              /* [N,128] each: an input and an output */
    float *datt;               /* [N,C]: an incoming gradient */
    float *lnw, *lnb, *mean, *rstd, *dw, *db; /* [C], [C], [N], [N], [C], [C] */
    float *emb, *demb;         /* [C,V] each */
    int32_t *idx;              /* [N] bytes: tokens and targets */
    float loss, dloss;         /* [1] each */
    float *p, *g, *m, *v;      /* [nw] Adam's */
    int32_t t;                 /* Adam step */
    float lr;                  /* Adam's rate */
    size_t nw;
};

static void operands_init(struct operands *o)
{
    Model m;
    Config c = {.vocab = VOCAB, .context = DT, .embed = DC, .mlp = DM, .heads = DH, .layers = 4};
    model_init(&m, &c, 1);
    o->lr = 1e-3f;
    o->nw = m.nw;
    model_free(&m);
    o->a = floats((size_t)DN * 128, 1), o->c = floats((size_t)DN * 128, 3);
    o->datt = floats((size_t)DN * DC, 7);
    o->lnw = floats(DC, 9), o->lnb = floats(DC, 10), o->dw = floats(DC, 11);
    o->db = floats(DC, 12), o->mean = floats(DN, 13), o->rstd = floats(DN, 14);
    o->emb = floats(DC * DV, 15), o->demb = floats(DC * DV, 16);
    o->p = floats(o->nw, 17), o->g = floats(o->nw, 18), o->m = floats(o->nw, 19);
    o->v = calloc(o->nw, sizeof(float)); /* Adam's second moment starts at 0 */
    o->idx = malloc(DN * sizeof(int32_t));
    for (int i = 0; i < DN; i++)
        o->idx[i] = (i * 37 + 11) % DV;
    o->dloss = 1.0f, o->t = 1;
}

static void operands_free(struct operands *o)
{
    float *f[] = {o->a,    o->c,    o->datt, o->lnw, o->lnb, o->mean, o->rstd, o->dw,
                  o->db,   o->emb,  o->demb, o->p,   o->g,   o->m,    o->v};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        free(f[i]);
    free(o->idx);
}

/* One timed contender: a kernel instruction, or OpenBLAS's sgemm on the
 * matmul shape of k (blas 1: a @ b; 2: a^T @ b, as KOP_MATMUL_TN). */
struct contender {
    struct kinstr k;
    int blas;
};

static void run_once(const struct contender *c)
{
#ifdef HAVE_OPENBLAS
    const struct kinstr *k = &c->k;
    int n = (int)k->attr.matmul.n, p = (int)k->attr.matmul.p, q = (int)k->attr.matmul.q;
    if (c->blas == 1) /* c[n,q] = a[n,p] b[p,q] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, q, p, 1.0f, k->in[0], p,
                    k->in[1], q, 0.0f, k->out[0], q);
    if (c->blas == 2) /* c[n,q] = a[p,n]^T b[p,q] */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, q, p, 1.0f, k->in[0], n,
                    k->in[1], q, 0.0f, k->out[0], q);
    if (c->blas)
        return;
#endif
    xs_exec(&c->k);
}

/* Pause before a block of calls: an idle thread pool spins for a while
 * after a call (OpenBLAS's for about 0.1 s, OpenMP's for well under a
 * millisecond) and would steal a core from whichever kernel ran next. */
static void settle(int blas)
{
    static int blas_spinning; /* the last block was OpenBLAS's */
    usleep(blas_spinning ? 300000 : blas ? 20000 : 0);
    blas_spinning = blas;
}

/* Calls a contender gets: rounds of a block, each after a few untimed
 * calls. --quick keeps it to a few: the larger models' matmuls take tens
 * of milliseconds a call. */
static int kernel_rounds(void) { return opt.quick ? 1 : 3; }
static int kernel_block(void) { return opt.quick ? 2 : 15; } /* 45 calls */
static int kernel_warm(void) { return opt.quick ? 1 : 3; }

/* Medians (seconds per call) of n contenders timed in alternating blocks
 * of calls, round after round. Blocks rather than single calls, so that
 * the pause and a few untimed calls come before each. */
static void time_group(const struct contender *c, int n, double *med)
{
    enum { MAXC = 3, MAXCALLS = 64 };
    int rounds = kernel_rounds(), block = kernel_block();
    double t[MAXC][MAXCALLS];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < n; i++) {
            settle(c[i].blas);
            for (int w = 0; w < kernel_warm(); w++)
                run_once(&c[i]);
            for (int k = 0; k < block; k++) {
                double t0 = now();
                run_once(&c[i]);
                t[i][r * block + k] = now() - t0;
            }
        }
    }
    for (int i = 0; i < n; i++)
        med[i] = median_of(t[i], rounds * block);
}

/* A line without its trailing blanks (columns left empty). */
static void print_trimmed(char *line)
{
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == ' ')
        line[--n] = 0;
    puts(line);
}

static void kernel_header(void)
{
    char line[256];
    printf("kernels, %d threads, median of %d calls\n", opt.threads,
           kernel_rounds() * kernel_block());
    snprintf(line, sizeof line, "  %-18s %-36s %8s %8s %6s  %-14s", "kernel", "shape", "us",
             "GFLOP/s", "%peak", "target");
#ifdef HAVE_OPENBLAS
    size_t n = strlen(line);
    snprintf(line + n, sizeof line - n, " %9s %8s  %s", "sgemm us", "vs BLAS", ">= sgemm");
#endif
    print_trimmed(line);
}

/* One row; blas_s 0 when there is no sgemm to compare with; target: the
 * bound on its % of the peak (the fourth speed issue's), or T_NONE. */
static void kernel_row(const char *kernel, const char *shape, const struct kinstr *k, double s,
                       double blas_s, int bf16, enum target_id target)
{
    double fl = kop_flops(k), pk = bf16 && peak.bf16[1] > 0 ? peak.bf16[1] : peak.fp32[1];
    double frac = fl / s * 1e-9 / pk;
    char name[112], line[256], verdict[24] = "";
    int n;
    snprintf(name, sizeof name, "%s %s", kernel, shape);
    record("kernels", name, s * 1e6, "us", blas_s > 0 ? ">= sgemm" : NULL, blas_s >= s);
    if (target != T_NONE && fl > 0) {
        int met = judge(target, frac, name);
        snprintf(verdict, sizeof verdict, "%s %s", target_text(target), mark(met));
        snprintf(name + strlen(name), sizeof name - strlen(name), ", %% of peak");
        record("kernels", name, 100 * frac, "%", target_text(target), met);
    }
    n = snprintf(line, sizeof line, "  %-18s %-36s %8.1f", kernel, shape, s * 1e6);
    if (fl > 0)
        n += snprintf(line + n, sizeof line - n, " %8.0f %5.0f%%", fl / s * 1e-9, 100 * frac);
    else
        n += snprintf(line + n, sizeof line - n, " %8s %6s", "-", "-");
    n += snprintf(line + n, sizeof line - n, "  %-14s", verdict);
    if (blas_s > 0)
        snprintf(line + n, sizeof line - n, " %9.1f %7.2fx  %s", blas_s * 1e6, blas_s / s,
                 mark(blas_s >= s));
    print_trimmed(line);
}

/* A matmul: [n,p] @ [p,q], or with tn [p,n]^T @ [p,q] (a weight gradient
 * x^T dy summed per window of seg rows, as the training program does). */
struct mm_shape {
    int tn, n, p, q, seg;
    const char *role;
};

/* Every matmul a training step of the default model runs (graph.c: linear
 * y = x W^T is a matmul by the transposed weight; its backward dx = dy W
 * and dW^T = x^T dy). */
static const struct mm_shape mm_default[] = {
    {0, DN, DC, 3 * DC, 0, "qkv"},        {0, DN, DC, DM, 0, "mlp up, down dx"},
    {0, DN, DM, DC, 0, "mlp down, up dx"}, {0, DN, DC, DV, 0, "head"},
    {0, DN, 3 * DC, DC, 0, "qkv dx"},     {0, DN, DV, DC, 0, "head dx"},
    {1, DC, DN, 3 * DC, DT, "qkv dW"},    {1, DC, DN, DM, DT, "mlp up dW"},
    {1, DM, DN, DC, DT, "mlp down dW"},   {1, DC, DN, DV, DT, "head dW"},
};
enum { NMM_DEFAULT = sizeof mm_default / sizeof *mm_default };

/* Buffers for a set of matmul shapes: a the first operand, b the second,
 * c the result, each as large as the set's largest. */
struct mm_buffers {
    float *a, *b, *c;
};

static struct mm_buffers mm_alloc(const struct mm_shape *s, int n)
{
    size_t na = 0, nb = 0, nc = 0;
    for (int i = 0; i < n; i++) {
        size_t a = (size_t)s[i].n * s[i].p, b = (size_t)s[i].p * s[i].q;
        size_t c = (size_t)s[i].n * s[i].q;
        na = a > na ? a : na, nb = b > nb ? b : nb, nc = c > nc ? c : nc;
    }
    return (struct mm_buffers){floats(na, 1), floats(nb, 2), floats(nc, 3)};
}

static void mm_free(struct mm_buffers *m)
{
    free(m->a), free(m->b), free(m->c);
}

/* fp32 kernel, bf16 kernel (when the CPU has vdpbf16ps) and sgemm on one
 * shape, timed together; target judges the fp32 row. */
static void matmul_rows(const struct mm_buffers *m, const struct mm_shape *s,
                        enum target_id target)
{
    struct contender c[3];
    int n = 0, bf = bf16_native();
    struct kinstr k = {.op = s->tn ? KOP_MATMUL_TN : KOP_MATMUL,
                       .in = {m->a, m->b},
                       .out = {m->c},
                       .attr.matmul = {.n = s->n, .p = s->p, .q = s->q, .seg = s->seg}};
    c[n++] = (struct contender){k, 0};
    if (bf) {
        c[n] = (struct contender){k, 0};
        c[n++].k.attr.matmul.bf16 = 1; /* bf16 inputs, fp32 sums */
    }
#ifdef HAVE_OPENBLAS
    c[n++] = (struct contender){k, s->tn ? 2 : 1};
#endif
    double med[3];
    time_group(c, n, med);
    double blas = c[n - 1].blas ? med[n - 1] : 0;
    char shape[64];
    if (s->tn)
        snprintf(shape, sizeof shape, "%dx%d^T @ %dx%d %s", s->p, s->n, s->p, s->q, s->role);
    else
        snprintf(shape, sizeof shape, "%dx%d @ %dx%d %s", s->n, s->p, s->p, s->q, s->role);
    const char *name = s->tn ? "matmul_tn_seg" : "matmul";
    kernel_row(name, shape, &c[0].k, med[0], blas, 0, target);
    if (bf) {
        char bname[32];
        snprintf(bname, sizeof bname, "%s_bf16", name);
        kernel_row(bname, shape, &c[1].k, med[1], blas, 1, T_NONE);
    }
}

static void matmul_set(const struct mm_shape *s, int n, enum target_id target)
{
    struct mm_buffers m = mm_alloc(s, n);
    for (int i = 0; i < n; i++)
        matmul_rows(&m, &s[i], target);
    mm_free(&m);
}

/* The matmuls of a larger model (the shapes section's, same tokens): qkv,
 * MLP up and down, and their weight gradients, each against the wide
 * matmuls' target. */
static void wide_matmuls(const struct big_shape *b)
{
    int N = b->context * b->batch, C = b->embed, M = b->mlp, T = b->context;
    const struct mm_shape s[] = {
        {0, N, C, 3 * C, 0, "qkv"},  {0, N, C, M, 0, "mlp up"},  {0, N, M, C, 0, "mlp down"},
        {1, C, N, 3 * C, T, "qkv dW"}, {1, C, N, M, T, "mlp up dW"}, {1, M, N, C, T, "mlp down dW"},
    };
    printf("  (embed %d model's matmuls: %d x %d tokens, MLP %d)\n", C, b->batch, T, M);
    matmul_set(s, sizeof s / sizeof *s, T_WIDE_MM);
}

/* Attention's shape: batch, context, width, heads. */
struct att_shape {
    int B, T, C, H;
};

/* The default model's, then head sizes 16, 32 and 64 at context 128 (4
 * heads of C 64, 128, 256), batch x width kept at twice the default's so
 * a forward call takes about a millisecond here. */
static const struct att_shape att_default = {DB, DT, DC, DH};
static const struct att_shape att_heads[] = {{32, DT, 64, 4}, {16, DT, 128, 4}, {8, DT, 256, 4}};

/* Attention's buffers for one shape, the forward's out and lse computed
 * once (the backward reads them). */
struct att_buffers {
    float *qkv, *out, *lse, *dout, *dqkv, *scratch;
};

static struct att_buffers att_alloc(const struct att_shape *s)
{
    size_t n = (size_t)s->B * s->T, nlse = (size_t)s->B * s->H * s->T;
    struct att_buffers a = {floats(n * 3 * s->C, 4), floats(n * s->C, 5), floats(nlse, 6),
                            floats(n * s->C, 7),     floats(n * 3 * s->C, 8),
                            floats(n * s->C + nlse, 9)};
    k_attention(a.out, a.lse, a.qkv, s->B, s->T, s->C, s->H);
    return a;
}

static void att_free(struct att_buffers *a)
{
    free(a->qkv), free(a->out), free(a->lse), free(a->dout), free(a->dqkv), free(a->scratch);
}

/* Attention's forward or backward, fp32 and bf16 together; target judges
 * the fp32 row. */
static void attention_rows(const struct att_shape *s, const struct att_buffers *a, int bwd,
                           enum target_id target)
{
    struct kinstr k = {.op = bwd ? KOP_ATTENTION_BWD : KOP_ATTENTION,
                       .attr.attention = {.B = s->B, .T = s->T, .C = s->C, .H = s->H}};
    if (bwd) { /* dout, qkv, the forward's out and lse -> dqkv */
        k.in[0] = a->dout, k.in[1] = a->qkv, k.in[2] = a->out, k.in[3] = a->lse;
        k.out[0] = a->dqkv;
    } else { /* qkv -> out, lse: into scratch, as the backward reads out and lse */
        k.in[0] = a->qkv;
        k.out[0] = a->scratch, k.out[1] = a->scratch + (size_t)s->B * s->T * s->C;
    }
    struct contender c[2] = {{k, 0}, {k, 0}};
    c[1].k.attr.attention.bf16 = 1;
    int n = bf16_native() ? 2 : 1;
    double med[2];
    time_group(c, n, med);
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%d, C %d, %d heads of %d, causal", s->B, s->T, s->C, s->H,
             s->C / s->H);
    kernel_row(bwd ? "attention_bwd" : "attention", shape, &c[0].k, med[0], 0, 0, target);
    if (n == 2)
        kernel_row(bwd ? "attention_bwd_bf16" : "attention_bf16", shape, &c[1].k, med[1], 0, 1,
                   T_NONE);
}

/* Forward and backward on one shape. */
static void attention_shape(const struct att_shape *s, enum target_id fwd, enum target_id bwd)
{
    struct att_buffers a = att_alloc(s);
    attention_rows(s, &a, 0, fwd);
    attention_rows(s, &a, 1, bwd);
    att_free(&a);
}

/* A kernel alone. */
static void single_row(const char *name, const char *shape, struct kinstr k)
{
    struct contender c = {k, 0};
    double med;
    time_group(&c, 1, &med);
    kernel_row(name, shape, &k, med, 0, 0, T_NONE);
}

/* The rest of a step's kernels with flops, with the operands the training
 * program gives them (seg = T: the per-window trees). A step runs Adam
 * once per parameter; here once over all of them. */
static void other_rows(struct operands *o)
{
    long n = DN;
    single_row("layernorm", "4096x32", (struct kinstr){.op = KOP_LAYERNORM,
               .in = {o->a, o->lnw, o->lnb}, .out = {o->c, o->mean, o->rstd}, .attr.layernorm = {.n = n, .c = DC}});
    single_row("layernorm_bwd_seg", "4096x32", (struct kinstr){.op = KOP_LAYERNORM_BWD,
               .in = {o->datt, o->a, o->lnw, o->mean, o->rstd}, .out = {o->c, o->dw, o->db},
               .attr.layernorm = {.n = n, .c = DC, .seg = DT}});
    single_row("xent", "4096x128 logits", (struct kinstr){.op = KOP_XENT,
               .in = {o->a, o->idx}, .out = {&o->loss}, .attr.xent = {.n = n, .v = DV}});
    single_row("xent_bwd", "4096x128 logits", (struct kinstr){.op = KOP_XENT_BWD,
               .in = {o->a, o->idx, &o->dloss}, .out = {o->c}, .attr.xent = {.n = n, .v = DV}});
    single_row("embed", "4096 of 32x128", (struct kinstr){.op = KOP_EMBED,
               .in = {o->idx, o->emb}, .out = {o->c},
               .attr.embed = {.n = n, .c = DC, .v = DV}});
    single_row("embed_bwd_seg", "4096 into 32x128", (struct kinstr){.op = KOP_EMBED_BWD,
               .in = {o->idx, o->datt}, .out = {o->demb},
               .attr.embed = {.n = n, .c = DC, .v = DV, .seg = DT}});
    char shape[32];
    snprintf(shape, sizeof shape, "%zu weights", o->nw);
    single_row("adam", shape, (struct kinstr){.op = KOP_ADAM,
               .in = {o->p, o->g, o->m, o->v, &o->t, &o->lr},
               .attr.adam = {.n = (long)o->nw, .beta1 = 0.9f, .beta2 = 0.999f,
                             .eps = 1e-8f}});
}

/* The default model's kernels, then attention at larger head sizes and
 * the larger models' matmuls. */
static void kernel_table(void)
{
    struct operands o;
    operands_init(&o);
    kernel_header();
    printf("  (the default model's: batch 32 x 128, embed 32, MLP 64, 4 heads)\n");
    matmul_set(mm_default, NMM_DEFAULT, T_NONE);
    attention_shape(&att_default, T_ATT_FWD, T_ATT_BWD);
    other_rows(&o);
    printf("  (attention at head sizes 16, 32 and 64)\n");
    for (size_t i = 0; i < sizeof att_heads / sizeof *att_heads; i++)
        attention_shape(&att_heads[i], T_NONE, T_NONE);
    for (int i = 0; i < NBIG; i++)
        wide_matmuls(&big_shapes[i]);
    printf("  (%%peak: of the all-thread fp32 peak, bf16 rows of the vdpbf16ps peak; "
           "bf16 rows vs fp32 sgemm)\n");
#ifndef HAVE_OPENBLAS
    printf("  (no OpenBLAS: apt-get install libopenblas-dev, then make bench)\n");
#endif
    printf("\n");
    operands_free(&o);
}

/* ---- the corpus ---- */

static struct {
    unsigned char *bytes;
    size_t n, n_train; /* first 80% train, the rest test, as gpt train splits */
} corpus;

/* No corpus: English-like text times the same, and torch_ref.py gets it as
 * a file too. */
static void synthesize(void)
{
    static const char s[] = "It is a capital mistake to theorize before one has data. "
                            "Insensibly one begins to twist facts to suit theories, "
                            "instead of theories to suit facts. \"Elementary, my dear Watson.\"\n";
    corpus.n = 1 << 20;
    corpus.bytes = malloc(corpus.n);
    for (size_t i = 0; i < corpus.n; i++)
        corpus.bytes[i] = (unsigned char)s[i % (sizeof s - 1)];
    temp_template(opt.tmp, sizeof opt.tmp, "gpt-bench");
    int fd = mkstemp(opt.tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (f) {
        fwrite(corpus.bytes, 1, corpus.n, f);
        fclose(f);
    }
    printf("(%s not found: timing on %zu bytes of synthetic text)\n\n", opt.data, corpus.n);
    snprintf(opt.data, sizeof opt.data, "%s", opt.tmp);
}

static void load_corpus(void)
{
    FILE *f = fopen(opt.data, "rb");
    size_t cap = 1 << 20, got;
    corpus.bytes = malloc(cap);
    corpus.n = 0;
    while (f && (got = fread(corpus.bytes + corpus.n, 1, cap - corpus.n, f)) > 0)
        if ((corpus.n += got) == cap)
            corpus.bytes = realloc(corpus.bytes, cap *= 2);
    if (f)
        fclose(f);
    if (corpus.n < 100000) {
        free(corpus.bytes);
        synthesize();
    }
    for (size_t i = 0; i < corpus.n; i++)
        corpus.bytes[i] &= 127; /* bytes index a 128-entry embedding */
    corpus.n_train = corpus.n * 8 / 10;
}

/* Random windows of the train or test split, as gpt train draws them. */
static void fill_batch(Batch *b, Rng *r, int test)
{
    size_t lo = test ? corpus.n_train : 0, len = test ? corpus.n - lo : corpus.n_train;
    for (int i = 0; i < b->B; i++) {
        size_t s = lo + rng_next(r) % (len - (size_t)b->T);
        for (int t = 0; t < b->T; t++)
            b->tok[(size_t)i * b->T + t] = corpus.bytes[s + t];
    }
    batch_finish(b);
}

/* ---- training steps ---- */

enum { MAX_ROUNDS = 16 };

/* A device, layout, precision and thread count with its own model and
 * graph, kept across rounds so it compiles once. */
struct variant {
    const char *device; /* "cpu" (eager) or "xla" (traced, compiled) */
    int cores, prec, threads, embed;
    int layers, heads, context, batch, mlp; /* 0: 4 layers, DH heads, DT, DB, 2 x embed */
    Model m;
    Graph *g;
    Batch b;
    Rng r;
    double ms[MAX_ROUNDS]; /* ms/step of each round */
    int rounds;
};

static void variant_enter(const struct variant *v)
{
    omp_set_num_threads(v->threads);
    const struct tpu_spec *t = xs_tpu("v3-8"); /* what --tpu v3-8 sets */
    if (v->cores > 1)
        xs_set_device(t->name, v->cores, (size_t)(t->hbm_gib * 1073741824.0));
    else
        xs_set_device("xla", 1, (size_t)16 << 30); /* gpt train's default */
}

/* As gpt train sets up: model, board, graph (lazy for xla), precision. */
static void variant_setup(struct variant *v)
{
    Config c = {.vocab = VOCAB,
                .context = v->context ? v->context : DT,
                .embed = v->embed,
                .mlp = v->mlp ? v->mlp : 2 * v->embed,
                .heads = v->heads ? v->heads : DH,
                .layers = v->layers ? v->layers : 4};
    variant_enter(v);
    model_init(&v->m, &c, 1337);
    model_set_cores(&v->m, v->cores);
    v->g = g_new();
    g_set_lazy(v->g, !strcmp(v->device, "xla"));
    g_set_precision(v->g, v->prec);
    if (v->prec == PREC_BF16_PURE) { /* as gpt train: weights and Adam state bf16 from the start */
        k_round_bf16(v->m.w, v->m.w, v->m.nw);
        k_round_bf16(v->m.m, v->m.m, v->m.nw);
        k_round_bf16(v->m.v, v->m.v, v->m.nw);
    }
    batch_alloc(&v->b, v->batch ? v->batch : DB, c.context);
    rng_seed(&v->r, 1337, 1);
}

static void variant_free(struct variant *v)
{
    model_free(&v->m);
    g_free(v->g);
    batch_free(&v->b);
}

/* ms per step over `steps` steps (the batch's filling not counted). */
static double variant_run(struct variant *v, int steps)
{
    variant_enter(v);
    double t = 0;
    for (int s = 0; s < steps; s++) {
        fill_batch(&v->b, &v->r, 0);
        double t0 = now();
        model_train_step(&v->m, v->g, &v->b, 1e-3f);
        t += now() - t0;
    }
    return 1e3 * t / steps;
}

static double variant_median(const struct variant *v)
{
    double tmp[MAX_ROUNDS];
    memcpy(tmp, v->ms, sizeof(double) * v->rounds);
    return median_of(tmp, v->rounds);
}

/* Every variant set up and warmed up (its compile included), then
 * `rounds` rounds of `steps` steps, the variants in turn in each round. */
static void run_alternating(struct variant *v, int n, int warm, int rounds, int steps)
{
    for (int i = 0; i < n; i++) {
        variant_setup(&v[i]);
        variant_run(&v[i], warm);
    }
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++)
            v[i].ms[v[i].rounds++] = variant_run(&v[i], steps);
}

/* PaLM-style model flops per training step: per token 6 per matmul weight
 * (2 forward, 4 backward) plus 12 L T C for attention's scores and
 * weighted sums; times B*T tokens. Matmul weights are the 2-D parameters
 * but the two embedding tables (lookups): qkv 3C^2 and MLP 2CM per layer
 * and the head C V, 32,768 at the default config (the issue's 4C^2 + 2CM
 * per layer without the head gives the same), so a step is 1.611 GFLOP. */
static double step_flops(const Model *m, int B)
{
    double w = 0, T = m->cfg.context;
    for (int i = 2; i < m->np; i++)
        if (m->p[i].ndim == 2)
            w += (double)m->p[i].rows * m->p[i].cols;
    return (6 * w + 12.0 * m->cfg.layers * T * m->cfg.embed) * B * T;
}

static double mfu(double flops, double ms, double pk) { return flops / (ms * 1e-3) * 1e-9 / pk; }

static const struct layout {
    const char *device;
    int cores, prec;
    const char *name;
} layouts[] = {
    {"cpu", 1, PREC_FP32, "cpu (eager), fp32"},
    {"xla", 1, PREC_FP32, "xla 1 core, fp32"},
    {"xla", 8, PREC_FP32, "xla 8 cores (v3-8), fp32"},
    {"xla", 1, PREC_BF16, "xla 1 core, bf16"},
    {"xla", 8, PREC_BF16, "xla 8 cores (v3-8), bf16"},
    {"xla", 1, PREC_BF16_PURE, "xla 1 core, bf16-pure"},
    {"xla", 8, PREC_BF16_PURE, "xla 8 cores, bf16-pure"},
};
enum { NL = sizeof layouts / sizeof *layouts };

/* The fastest fp32 and bf16 layouts at all threads, and the default one
 * (xla, 1 core, fp32): the projected full run's. */
enum { BEST_FP32, BEST_BF16, DEFAULT_LAYOUT, NBEST };
struct best { double ms; const char *name; };

/* Issue 16's targets that issue 35 did not restate (the eval section's),
 * as fractions of the measured peak. */
#define TARGET_SAMPLE_MS 10.0   /* 256 bytes ... */
#define TARGET_SAMPLE_PEAK 518  /* ... on a machine of this fp32 peak (GFLOP/s) */

/* The xla 1-core fp32 step's MFU at all threads: the eval block's bar. */
static double step_mfu_1core = 0;

static int is_default_layout(const struct layout *l)
{
    return !strcmp(l->device, "xla") && l->cores == 1 && l->prec == PREC_FP32;
}

/* The step's MFU against its target (xla fp32: 1 core or v3-8), the
 * verdict printed in a column of `width`. */
static void step_mfu_verdict(const struct layout *l, double u, int width)
{
    char v[32] = "-";
    if (l->prec == PREC_FP32 && !strcmp(l->device, "xla")) {
        enum target_id id = l->cores == 1 ? T_STEP_1CORE : T_STEP_V38;
        snprintf(v, sizeof v, "MFU %s %s", target_text(id), mark(judge(id, u, l->name)));
    }
    printf("%-*s ", width, v);
}

static void step_row(const struct layout *l, const struct variant *all, const struct variant *one,
                     double fl, struct best *best)
{
    double ms = variant_median(all), ms1 = variant_median(one), x = ms1 / ms;
    int bf = l->prec != PREC_FP32, pure = l->prec == PREC_BF16_PURE;
    const double *pk = bf && peak.bf16[1] > 0 ? peak.bf16 : peak.fp32;
    double u = mfu(fl, ms, pk[1]), u1 = mfu(fl, ms1, pk[0]);
    if (!pure && ms < best[bf].ms) /* the projection's fastest fp32 and bf16 */
        best[bf] = (struct best){ms, l->name};
    if (is_default_layout(l))
        best[DEFAULT_LAYOUT] = (struct best){ms, l->name}, step_mfu_1core = u;
    printf("  %-26s %9.2f %9.2f %6.0f%% %6.0f%% %7.2fx   ", l->name, ms, ms1, 100 * u, 100 * u1, x);
    step_mfu_verdict(l, u, 17);
    char name[112];
    snprintf(name, sizeof name, "step %s, %d threads", l->name, opt.threads);
    record("steps", name, ms, "ms", NULL, 0);
    snprintf(name, sizeof name, "step %s, 1 thread", l->name);
    record("steps", name, ms1, "ms", NULL, 0);
    snprintf(name, sizeof name, "step %s, MFU", l->name);
    record("steps", name, 100 * u, "%", NULL, 0);
    snprintf(name, sizeof name, "step %s, threads speed-up", l->name);
    if (opt.threads > 1) {
        int met = judge(T_THREADS, x, l->name);
        record("steps", name, x, "x", target_text(T_THREADS), met);
        printf("%s %s\n", target_text(T_THREADS), mark(met));
    } else {
        record("steps", name, x, "x", NULL, 0);
        printf("-\n");
    }
}

/* Median over rounds of fp32's time / bf16's in the same round: the two
 * ran in the same round, so a round's disturbance mostly cancels. */
static double paired_speedup(const struct variant *fp, const struct variant *bf)
{
    double r[MAX_ROUNDS];
    for (int i = 0; i < fp->rounds; i++)
        r[i] = fp->ms[i] / bf->ms[i];
    return median_of(r, fp->rounds);
}

/* Which bf16 target this run's step measures: the AVX512_BF16 CPU's on
 * the avx512 path (vdpbf16ps, or the emulation where GPT_BF16=auto found
 * the instruction slower), or the emulation's on the AVX2 path; the other
 * says why it is not measured. T_NONE: neither (the emulation on another
 * path). */
static enum target_id bf16_target(void)
{
    static char why[96];
    if (bf16_cpu() && isa_get() == ISA_AVX512 && strcmp(bf16_setting(), "emulate")) {
        unmeasurable(T_BF16_EMULATED, "the avx512 path ran (GPT_BF16=emulate GPT_ISA=avx2 to measure)");
        return T_BF16_NATIVE;
    }
    unmeasurable(T_BF16_NATIVE, bf16_cpu() ? "GPT_BF16 or GPT_ISA turned vdpbf16ps off"
                                           : "no AVX512_BF16 on this CPU");
    if (isa_get() == ISA_AVX2)
        return T_BF16_EMULATED;
    snprintf(why, sizeof why, "the emulation ran on the %s path (GPT_ISA=avx2 to measure)",
             isa_name(isa_get()));
    unmeasurable(T_BF16_EMULATED, why);
    return T_NONE;
}

/* bf16 against fp32 on the same layout and thread count. */
static void bf16_vs_fp32(const struct variant *v)
{
    enum target_id id = bf16_target();
    printf("  bf16 speed-up over fp32 (median of per-round ratios), %s, target %s:",
           bf16_native() ? "vdpbf16ps" : "emulated", id == T_NONE ? "none" : target_text(id));
    for (int t = 0; t < 2; t++)
        for (int f = 0; f < NL; f++) {
            const struct layout *l = &layouts[f];
            if (l->prec != PREC_FP32 || strcmp(l->device, "xla"))
                continue;
            for (int b = 0; b < NL; b++)
                if (layouts[b].prec == PREC_BF16 && layouts[b].cores == l->cores) {
                    double x = paired_speedup(&v[f + t * NL], &v[b + t * NL]);
                    char name[112];
                    snprintf(name, sizeof name, "bf16 over fp32, %d core%s, %s", l->cores,
                             l->cores > 1 ? "s" : "", t ? "1 thread" : "all threads");
                    int met = id != T_NONE && judge(id, x, name + strlen("bf16 over fp32, "));
                    record("steps", name, x, "x", id != T_NONE ? target_text(id) : NULL, met);
                    printf(" %d core%s %s %.2fx%s%s;", l->cores, l->cores > 1 ? "s" : "",
                           t ? "1 thread" : "all", x, id != T_NONE ? " " : "",
                           id != T_NONE ? mark(met) : "");
                }
        }
    printf("\n\n");
}

/* best: the fastest layouts and the default's, at all threads. */
static void step_table(struct best *best)
{
    struct variant v[2 * NL];
    memset(v, 0, sizeof v);
    for (int i = 0; i < 2 * NL; i++) {
        const struct layout *l = &layouts[i % NL];
        v[i] = (struct variant){.device = l->device, .cores = l->cores, .prec = l->prec,
                                .threads = i < NL ? opt.threads : 1, .embed = DC};
    }
    int rounds = opt.quick ? 2 : 5, steps = opt.quick ? 5 : 40;
    run_alternating(v, 2 * NL, opt.quick ? 2 : 5, rounds, steps);
    double fl = step_flops(&v[0].m, DB);
    printf("training step, default config (%.3f GFLOP/step), %d threads and 1; median of %d "
           "alternating rounds of %d steps\n", fl * 1e-9, opt.threads, rounds, steps);
    printf("  %-26s %9s %9s %7s %7s %8s   %-17s %s\n", "device, layout, precision",
           "ms/step", "1 thread", "MFU", "MFU 1t", "speedup", "step target", "threads target");
    for (int i = 0; i < NBEST; i++)
        best[i] = (struct best){1e30, "-"};
    if (opt.threads == 1)
        unmeasurable(T_THREADS, "one OpenMP thread");
    for (int i = 0; i < NL; i++)
        step_row(&layouts[i], &v[i], &v[i + NL], fl, best);
    double want = targets[T_STEP_1CORE].want;
    printf("  (ms/step and MFU at %d threads, then at 1; MFU of the measured peak at that thread "
           "count, bf16 rows of vdpbf16ps's;\n   %.0f%% MFU of the measured %.0f GFLOP/s is "
           "%.2f ms a step)\n", opt.threads, 100 * want, peak.fp32[1],
           fl / (want * peak.fp32[1] * 1e9) * 1e3);
    bf16_vs_fp32(v);
    for (int i = 0; i < 2 * NL; i++)
        variant_free(&v[i]);
}

/* ---- eval block and sampling ---- */

static const char prompt[] = "\"Elementary, my dear";

/* What gpt train's eval line does: the test loss of 256 random test
 * windows (the graph's forward only, as its batch_loss) and a 32-byte
 * continuation of the prompt at temperature 1. */
static double eval_block_ms(struct variant *v, Batch *test)
{
    Tensor *leaf[MAX_PARAMS], *logits;
    char text[33];
    SampleOpts so = {.temperature = 1.0f};
    double t0 = now();
    fill_batch(test, &v->r, 1);
    g_reset(v->g);
    sink = *(const float *)g_read(v->g, model_loss(&v->m, v->g, test, leaf, &logits, 0));
    memcpy(text, prompt, sizeof prompt - 1);
    model_generate(&v->m, v->g, text, (int)sizeof prompt - 1, 32, &so, &v->r);
    return 1e3 * (now() - t0);
}

/* ns passages of 256 bytes from the prompt at once (gpt sample
 * --num-samples ns), the model already loaded. */
static double sample_ms(struct variant *v, int ns)
{
    enum { MAXS = 64 };
    char buf[MAXS][257], *text[MAXS];
    Rng r[MAXS];
    SampleOpts so = {.temperature = 1.0f};
    for (int i = 0; i < ns; i++) {
        text[i] = buf[i];
        memcpy(text[i], prompt, sizeof prompt - 1);
        r[i] = v->r;
        rng_next(&v->r);
    }
    double t0 = now();
    model_generate_many(&v->m, v->g, text, ns, (int)sizeof prompt - 1, 256, &so, r);
    return 1e3 * (now() - t0);
}

/* A labelled measurement with its target. */
static void target_line(const char *label, double value, const char *unit, const char *target,
                        int met, const char *extra)
{
    printf("  %-56s %9.2f %-4s %-12s ", label, value, unit, target);
    if (*extra)
        printf("%-6s  %s\n", mark(met), extra);
    else
        printf("%s\n", mark(met)); /* no trailing blanks */
    record("eval", label, value, unit, target, met);
}

enum { MANY = 16 }; /* passages of the --num-samples line */

static void eval_table(double *eval_ms, double *gen_ms)
{
    struct variant v = {.device = "xla", .cores = 1, .prec = PREC_FP32, .threads = opt.threads,
                        .embed = DC};
    Batch test;
    int reps = opt.quick ? 5 : 31, mreps = opt.quick ? 2 : 7;
    double e[64], s[64], m[64];
    variant_setup(&v);
    batch_alloc(&test, 256, DT);
    eval_block_ms(&v, &test); /* the compiles */
    sample_ms(&v, 1);
    sample_ms(&v, MANY);
    for (int i = 0; i < reps; i++) { /* alternately */
        e[i] = eval_block_ms(&v, &test);
        s[i] = sample_ms(&v, 1);
        if (i < mreps)
            m[i] = sample_ms(&v, MANY);
    }
    *eval_ms = median_of(e, reps), *gen_ms = median_of(s, reps);
    double many_ms = median_of(m, mreps);
    int fresh = 256 - (int)(sizeof prompt - 1); /* bytes generated after the prompt */
    double rate1 = fresh / (*gen_ms * 1e-3), rate_many = MANY * fresh / (many_ms * 1e-3);
    /* the eval block's loss is 256 x 128 positions forward: 8 batches at a
     * third of a training step's flops each, 8/3 steps' worth */
    double efl = step_flops(&v.m, DB) * 8 / 3, emfu = mfu(efl, *eval_ms, peak.fp32[1]);
    double sample_target = TARGET_SAMPLE_MS * TARGET_SAMPLE_PEAK / peak.fp32[1];
    char rate[96], tgt[48], label[96];
    printf("eval and sampling (xla, 1 core, fp32, %d threads), median of %d (%d for %d passages)\n",
           opt.threads, reps, mreps, MANY);
    snprintf(rate, sizeof rate, "MFU %.0f%% (loss part's flops); the step's %.0f%%", 100 * emfu,
             100 * step_mfu_1core);
    target_line("eval block: 256x128 test loss + 32-byte continuation", *eval_ms, "ms",
                "MFU >= step's", step_mfu_1core > 0 && emfu >= step_mfu_1core, rate);
    snprintf(rate, sizeof rate, "%.0f bytes/s (%d new bytes)", rate1, fresh);
    snprintf(tgt, sizeof tgt, "<= %.1f ms", sample_target);
    target_line("sample 256 bytes (model loaded)", *gen_ms, "ms", tgt, *gen_ms <= sample_target,
                rate);
    snprintf(label, sizeof label, "sample --num-samples %d, 256 bytes each", MANY);
    snprintf(rate, sizeof rate, "%.0f bytes/s, %.2fx one passage's", rate_many,
             rate_many / rate1);
    snprintf(tgt, sizeof tgt, "%s bytes/s", target_text(T_MANY));
    target_line(label, many_ms, "ms", tgt, judge(T_MANY, rate_many / rate1, NULL), rate);
    printf("  (the sampling target: %.0f ms on a %d GFLOP/s machine, scaled to the measured "
           "%.0f)\n\n", TARGET_SAMPLE_MS, TARGET_SAMPLE_PEAK, peak.fp32[1]);
    batch_free(&test);
    variant_free(&v);
}

/* ---- the projected full run ---- */

enum { FULL_STEPS = 50000, FULL_EVALS = 500 }; /* gpt train's defaults */

/* Minutes of a full run at this step and the eval section's figures. */
static double full_run_min(const struct best *b, double eval_ms, double gen_ms)
{
    double min = (FULL_STEPS * b->ms + FULL_EVALS * eval_ms + gen_ms) / 60e3;
    char name[112];
    printf("  %-56s %9.2f min  = %d x %.2f + %d x %.2f + %.1f ms", b->name, min, FULL_STEPS, b->ms,
           FULL_EVALS, eval_ms, gen_ms);
    snprintf(name, sizeof name, "projected full run, %s", b->name);
    record("eval", name, min, "min", NULL, 0);
    return min;
}

/* The default layout against the target; the fastest fp32 layout (when
 * another) and bf16's for comparison. */
static void projection(const struct best *best, double eval_ms, double gen_ms)
{
    printf("projected full default run: %d steps + %d eval blocks + 256-byte sample; the "
           "default layout, then the fastest fp32 and bf16\n", FULL_STEPS, FULL_EVALS);
    double min = full_run_min(&best[DEFAULT_LAYOUT], eval_ms, gen_ms);
    printf("  %s %s\n", target_text(T_FULL_RUN),
           mark(judge(T_FULL_RUN, min, best[DEFAULT_LAYOUT].name)));
    if (best[BEST_FP32].name != best[DEFAULT_LAYOUT].name) {
        full_run_min(&best[BEST_FP32], eval_ms, gen_ms);
        putchar('\n');
    }
    full_run_min(&best[BEST_BF16], eval_ms, gen_ms);
    printf("\n\n");
}

/* ---- the PyTorch reference, alternating with gpt ---- */

/* Steps of each contender: torch_ref.py drops its first 10 as warm-up,
 * so --quick's 12 leave it 2 to time, seconds rather than a minute. */
static int torch_steps(void) { return opt.quick ? 12 : 60; }

/* torch_ref.py's median ms/step, or -1 if it failed; report gets its
 * parenthesized details, or its last line when it failed. */
static double torch_ms(char *report, size_t n)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' --steps %d --threads %d --data '%s' 2>&1",
             opt.torch, torch_steps(), opt.threads, opt.data);
    FILE *p = popen(cmd, "r");
    double ms = -1;
    char line[512];
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        char *paren = strchr(line, '('); /* "X ms/step (PyTorch V, ...)" */
        if (strstr(line, "ms/step") && paren)
            ms = atof(line);
        snprintf(report, n, "%s", ms >= 0 && paren ? paren : line);
    }
    if (p && pclose(p) != 0)
        ms = -1;
    return ms;
}

static void torch_table(void)
{
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("PyTorch reference: skipped (/usr/bin/python3 cannot import torch; "
               "apt-get install python3-torch)\n\n");
        return;
    }
    struct variant v = {.device = "xla", .cores = 1, .prec = PREC_FP32, .threads = opt.threads,
                        .embed = DC};
    int rounds = opt.quick ? 1 : 3;
    double t[8], g[8];
    char report[512] = "";
    variant_setup(&v);
    variant_run(&v, 5);
    for (int r = 0; r < rounds; r++) {
        omp_set_num_threads(opt.threads);
        t[r] = torch_ms(report, sizeof report);
        g[r] = variant_run(&v, torch_steps());
        if (t[r] < 0) {
            printf("PyTorch reference: bench/torch_ref.py failed (%s)\n\n", report);
            variant_free(&v);
            return;
        }
    }
    double tm = median_of(t, rounds), gm = median_of(g, rounds);
    printf("PyTorch reference vs gpt (xla, 1 core, fp32), same config, %d threads, "
           "median of %d alternations\n", opt.threads, rounds);
    char label[64];
    snprintf(label, sizeof label, "PyTorch: bench/torch_ref.py --steps %d", torch_steps());
    printf("  %-56s %9.2f ms/step  %s\n", label, tm, report);
    snprintf(label, sizeof label, "gpt: %d steps", torch_steps());
    printf("  %-56s %9.2f ms/step  gpt is %.1fx faster\n\n", label, gm, tm / gm);
    record("torch", "PyTorch step", tm, "ms", NULL, 0);
    record("torch", "gpt step (xla, 1 core, fp32)", gm, "ms", NULL, 0);
    record("torch", "gpt over PyTorch", tm / gm, "x", NULL, 0);
    variant_free(&v);
}

/* ---- every kernel path ---- */

/* The default step's target on a kernel path: the AVX2 path's own, the
 * best path's on AVX-512 (x86-64's SIMD paths); none on plain C. */
static enum target_id isa_target(int isa)
{
#if defined(__x86_64__)
    if (isa == ISA_AVX2)
        return T_STEP_AVX2;
    if (isa == ISA_AVX512)
        return T_STEP_1CORE;
#endif
    (void)isa;
    return T_NONE;
}

/* One path: its own FMA peak and the default step on it. */
static void isa_row(int isa, int rounds)
{
    isa_set(isa);
    struct chains c = chains_of(isa);
    double pk = peak_run(c.fn, c.per_iter, opt.threads);
    struct variant v = {.device = "xla", .cores = 1, .prec = PREC_FP32,
                        .threads = opt.threads, .embed = DC};
    int steps = isa == ISA_SCALAR ? 3 : opt.quick ? 5 : 20;
    run_alternating(&v, 1, 2, rounds, steps);
    double ms = variant_median(&v), u = mfu(step_flops(&v.m, DB), ms, pk);
    enum target_id id = isa_target(isa);
    char name[64];
    printf("  %-8s %-16s %12.0f %10.2f %5.0f%%", isa_name(isa), c.name, pk, ms, 100 * u);
    snprintf(name, sizeof name, "%s, default step MFU", isa_name(isa));
    if (id == T_STEP_AVX2) /* the summary's row; AVX-512's is the steps section's */
        judge(id, u, "xla 1 core on the avx2 path");
    if (id != T_NONE)
        printf("   %s %s", target_text(id), mark(target_met(id, u)));
    printf("\n");
    record("isa", name, 100 * u, "%", id != T_NONE ? target_text(id) : NULL,
           id != T_NONE && target_met(id, u));
    snprintf(name, sizeof name, "%s, peak", isa_name(isa));
    record("isa", name, pk, "GFLOP/s", NULL, 0);
    snprintf(name, sizeof name, "%s, default step", isa_name(isa));
    record("isa", name, ms, "ms", NULL, 0);
    variant_free(&v);
}

/* Each kernel path this CPU runs (GPT_ISA lowers the best), its own FMA
 * peak and the default step on it (xla, 1 core, fp32), so an AVX-512
 * machine also reports what an AVX2-only one would: the same hardware
 * behind a narrower ISA. The paths give the same bits. */
static void isa_table(void)
{
    int best = isa_best(), rounds = opt.quick ? 1 : 3;
    printf("each kernel path (xla, 1 core, fp32, default config, %d threads), median of %d "
           "rounds\n", opt.threads, rounds);
    printf("  %-8s %-16s %12s %10s %6s   %s\n", "path", "FMA loop", "peak GFLOP/s", "ms/step",
           "MFU", "target");
    for (int isa = best; isa >= ISA_SCALAR; isa--)
        isa_row(isa, rounds);
    isa_set(best);
    unmeasurable(T_STEP_AVX2, "no avx2 path here (the CPU, or GPT_ISA lowered it)");
    printf("\n");
}

/* ---- scaling with the width ---- */

static void scaling_table(void)
{
    enum { NW = 4 };
    struct variant v[NW];
    for (int i = 0; i < NW; i++) /* embed 32 (the default), 64, 128, 256 */
        v[i] = (struct variant){.device = "xla", .cores = 1, .prec = PREC_FP32,
                                .threads = opt.threads, .embed = DC << i};
    int rounds = opt.quick ? 1 : 3, steps = opt.quick ? 3 : 10;
    run_alternating(v, NW, 2, rounds, steps);
    printf("scaling (xla, 1 core, fp32, %d threads; mlp 2 x embed, 4 heads, 4 layers, "
           "32 x 128 tokens), median of %d rounds of %d steps\n", opt.threads, rounds, steps);
    printf("  %-8s %12s %10s %6s\n", "embed", "GFLOP/step", "ms/step", "MFU");
    for (int i = 0; i < NW; i++) {
        double ms = variant_median(&v[i]), fl = step_flops(&v[i].m, DB);
        double u = mfu(fl, ms, peak.fp32[1]);
        char name[64];
        printf("  %-8d %12.3f %10.2f %5.0f%%\n", v[i].embed, fl * 1e-9, ms, 100 * u);
        snprintf(name, sizeof name, "embed %d, MFU", v[i].embed);
        record("scaling", name, 100 * u, "%", NULL, 0);
        variant_free(&v[i]);
    }
    printf("\n");
}

/* ---- the larger shapes and GPT-2 small's ---- */

/* A larger model's variant: xla, 1 core, fp32, all threads. --quick keeps
 * one layer, so the smoke run stays seconds (its figures mean nothing). */
static struct variant big_variant(const struct big_shape *s)
{
    return (struct variant){.device = "xla", .cores = 1, .prec = PREC_FP32,
                            .threads = opt.threads, .embed = s->embed,
                            .layers = opt.quick ? 1 : s->layers, .heads = s->heads,
                            .context = s->context, .batch = s->batch, .mlp = s->mlp};
}

static void big_header(const char *what, int rounds, int steps)
{
    printf("%s (xla, 1 core, fp32, %d threads), median of %d rounds of %d step%s after the "
           "compile\n", what, opt.threads, rounds, steps, steps > 1 ? "s" : "");
    printf("  %-50s %12s %10s %6s   %s\n", "embed, layers, heads, context x batch, mlp",
           "GFLOP/step", "ms/step", "MFU", "target");
}

/* One model's row, its MFU judged against its target. */
static void big_row(const struct big_shape *s, const struct variant *v, const char *section)
{
    double ms = variant_median(v), fl = step_flops(&v->m, v->b.B);
    double u = mfu(fl, ms, peak.fp32[1]);
    char name[96], key[128];
    int layers = v->m.cfg.layers;
    snprintf(name, sizeof name, "embed %d, %d layer%s, %d heads, %d x %d, mlp %d", s->embed,
             layers, layers > 1 ? "s" : "", s->heads, s->context, s->batch, s->mlp);
    int met = judge(s->target, u, name);
    printf("  %-50s %12.3f %10.2f %5.0f%%   %s %s\n", name, fl * 1e-9, ms, 100 * u,
           target_text(s->target), mark(met));
    snprintf(key, sizeof key, "%s, MFU", name);
    record(section, key, 100 * u, "%", target_text(s->target), met);
}

/* Speed III's larger shapes, alternately. A few steps each: the largest
 * takes seconds a step. */
static void shapes_table(void)
{
    struct variant v[NBIG];
    for (int i = 0; i < NBIG; i++)
        v[i] = big_variant(&big_shapes[i]);
    int rounds = opt.quick ? 1 : 3, steps = opt.quick ? 1 : 2;
    run_alternating(v, NBIG, 1, rounds, steps);
    big_header("larger shapes", rounds, steps);
    for (int i = 0; i < NBIG; i++) {
        big_row(&big_shapes[i], &v[i], "shapes");
        variant_free(&v[i]);
    }
    printf("\n");
}

/* GPT-2 small's shape at context 1,024: the step's FLOPs count attention
 * over the whole context (step_flops). One step after the compile, then
 * the median of a few. */
static void gpt2_table(void)
{
    struct variant v = big_variant(&gpt2_small);
    int rounds = opt.quick ? 1 : 3;
    run_alternating(&v, 1, 1, rounds, 1);
    big_header("GPT-2 small's shape over bytes (vocabulary 128)", rounds, 1);
    big_row(&gpt2_small, &v, "gpt2");
    printf("\n");
    variant_free(&v);
}

/* ---- gcc's build against clang's (make LLVM=1) ---- */

/* ms/step of one `gpt train` run, "launch bin train --data D --steps N
 * [flags] --out dir/run" (launch: "" or an mpirun line), as gpt prints it
 * at the end ("12.34 ms/step over N steps"): the timed steps alone, no
 * eval line, checkpoint or final passage among them. -1 if it failed.
 * threads (n > 0) gets the banner's thread count and its reason. The run
 * directory is removed after. */
static double gpt_train_ms(const char *launch, const char *bin, const char *flags,
                           const char *dir, int steps, char *threads, size_t n)
{
    char cmd[4 * PATH_MAX], line[512];
    snprintf(cmd, sizeof cmd, "%s '%s' train --data '%s' --steps %d --eval-every 100000 "
             "--ckpt-every 100000 --final-bytes 0 %s --out '%s/run' 2>&1; rm -rf '%s/run'",
             launch, bin, opt.data, steps, flags, dir, dir);
    FILE *p = popen(cmd, "r");
    double ms = -1;
    while (p && fgets(line, sizeof line, p)) {
        const char *at = strstr(line, " kernels, "), *end = at ? strchr(at, ';') : NULL;
        if (strstr(line, "ms/step over")) /* "12.34 ms/step over N steps; ..." */
            ms = atof(line);
        if (n && !strncmp(line, "gpt: ", 5) && end) /* "..., avx512 kernels, 1 thread: 2 cores; " */
            snprintf(threads, n, "%.*s", (int)(end - at - 10), at + 10);
    }
    if (p)
        pclose(p); /* rm's status: the run's is its ms/step line */
    return ms;
}

/* The default model (xla, 1 core, fp32) by the binary bin, as
 * bench/flavours.sh runs it. */
static double train_ms(const char *bin, const char *dir, int steps)
{
    return gpt_train_ms("", bin, "", dir, steps, NULL, 0);
}

/* The two builds alternately, round after round; the median of each
 * round's clang/gcc ratio. 0 if a run failed. */
static double flavour_ratio(const char *gcc, const char *llvm, double *gms, double *lms)
{
    int rounds = opt.quick ? 1 : 5, steps = opt.quick ? 20 : 60;
    double g[MAX_ROUNDS], l[MAX_ROUNDS], r[MAX_ROUNDS];
    char dir[64];
    temp_template(dir, sizeof dir, "gpt-bench-flavours");
    if (!mkdtemp(dir))
        return 0;
    for (int i = 0; i < rounds; i++) {
        g[i] = train_ms(gcc, dir, steps), l[i] = train_ms(llvm, dir, steps);
        if (g[i] <= 0 || l[i] <= 0) {
            rmdir(dir);
            return 0;
        }
        r[i] = l[i] / g[i];
    }
    rmdir(dir);
    *gms = median_of(g, rounds), *lms = median_of(l, rounds);
    printf("  %d alternating rounds of %d steps\n", rounds, steps);
    return median_of(r, rounds);
}

static void flavours_table(void)
{
    char gcc[PATH_MAX + 16], llvm[PATH_MAX + 16];
    double gms = 0, lms = 0, x;
    snprintf(gcc, sizeof gcc, "%s/gpt-gcc", opt.dir);
    snprintf(llvm, sizeof llvm, "%s/../gpt-llvm", opt.dir);
    printf("the two builds: gpt train of the default model by bench/gpt-gcc (gcc, libgomp) and "
           "./gpt-llvm (make LLVM=1: clang, libomp, mimalloc)\n");
    if (access(gcc, X_OK) || access(llvm, X_OK)) {
        unmeasurable(T_LLVM, "make gpt-llvm bench/gpt-gcc");
        printf("  not measured: make gpt-llvm bench/gpt-gcc (make bench does, when clang, "
               "libomp and mimalloc are installed)\n\n");
        return;
    }
    if ((x = flavour_ratio(gcc, llvm, &gms, &lms)) <= 0) {
        unmeasurable(T_LLVM, "a gpt train run failed");
        printf("  not measured: a gpt train run failed\n\n");
        return;
    }
    printf("  %-56s %9.2f ms/step\n  %-56s %9.2f ms/step\n", "gcc (bench/gpt-gcc)", gms,
           "clang (./gpt-llvm)", lms);
    printf("  %-56s %9.2fx   %s %s\n\n", "clang over gcc (median of per-round ratios)", x,
           target_text(T_LLVM), mark(judge(T_LLVM, x, "xla 1 core, fp32")));
    record("flavours", "clang step over gcc's", x, "x", target_text(T_LLVM),
           target_met(T_LLVM, x));
}

/* ---- under load: gpt train beside other busy programs (issue 60) ----
 * A user's machine runs other work. The real binary trains beside plain
 * spinning processes the bench starts: its OpenMP runtime is told how to
 * wait before it starts (util/threads.c), which this dynamically linked
 * bench cannot do for its own steps, so the steps here are gpt's own. */

enum { MAX_BUSY = 2 };

struct busy {
    pid_t pid[MAX_BUSY];
    int n;
};

static void busy_stop(struct busy *b)
{
    for (int i = 0; i < b->n; i++) {
        kill(b->pid[i], SIGKILL);
        waitpid(b->pid[i], NULL, 0);
    }
    b->n = 0;
}

/* n processes that spin until killed; each dies with the bench too
 * (PR_SET_PDEATHSIG), should the bench die first. With own_session each
 * starts a session of its own (setsid), as a program started from
 * another terminal has: Linux's autogroup then shares the cores between
 * sessions before it shares them between threads. -1 if fork failed. */
static int busy_start(struct busy *b, int n, int own_session)
{
    pid_t bench = getpid();
    b->n = 0;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            busy_stop(b);
            return -1;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != bench) /* the bench died before prctl */
                _exit(0);
            if (own_session)
                setsid();
            for (;;)
                ;
        }
        b->pid[b->n++] = pid;
    }
    return 0;
}

/* Each shape's contenders: gpt's own thread count or --threads 1, how
 * many busy processes run beside it, and whether they run in a session
 * of their own (a program started from another terminal). */
enum { ALONE, BESIDE1, BESIDE2, T1_BESIDE1, T1_BESIDE2, T1_ALONE, BESIDE1_SESSION,
       T1_BESIDE1_SESSION, NLOAD };
static const struct {
    const char *label, *flags;
    int busy, own_session;
} load_runs[NLOAD] = {
    [ALONE] = {"alone", "", 0, 0},
    [BESIDE1] = {"beside 1 busy process", "", 1, 0},
    [BESIDE2] = {"beside 2 busy processes", "", 2, 0},
    [T1_BESIDE1] = {"--threads 1 beside 1 busy process", "--threads 1", 1, 0},
    [T1_BESIDE2] = {"--threads 1 beside 2 busy processes", "--threads 1", 2, 0},
    [T1_ALONE] = {"--threads 1 alone", "--threads 1", 0, 0},
    [BESIDE1_SESSION] = {"beside 1 busy process of another session", "", 1, 1},
    [T1_BESIDE1_SESSION] = {"--threads 1 beside it", "--threads 1", 1, 1},
};

/* ---- the cores the kernel gives ----
 * How much CPU the scheduler gives a process of two threads that never
 * wait for each other, beside busy processes: the most any thread count
 * and any design of the step can use there. The probe's threads spin on
 * the clock for SHARE_PROBE_S; the cores it got are its CPU time over its
 * wall time (the kernel's account, wait4's rusage). */
#define SHARE_PROBE_S 1.0
#define SHARE_PROBE_THREADS 2

static void *spin_on_clock(void *arg)
{
    double until = *(const double *)arg;
    while (now() < until)
        ;
    return NULL;
}

/* The probe itself, in a child of its own (the bench's OpenMP team does
 * not survive a fork: plain threads). */
static void share_probe_child(void)
{
    pthread_t t[SHARE_PROBE_THREADS];
    double until = now() + SHARE_PROBE_S;
    for (int i = 1; i < SHARE_PROBE_THREADS; i++)
        if (pthread_create(&t[i], NULL, spin_on_clock, &until))
            _exit(1);
    spin_on_clock(&until);
    for (int i = 1; i < SHARE_PROBE_THREADS; i++)
        pthread_join(t[i], NULL);
    _exit(0);
}

/* Cores a two-thread process gets beside `busy` spinning processes (in a
 * session of their own with own_session); -1 if it could not be run. */
static double cores_given(int busy, int own_session)
{
    struct busy b;
    struct rusage ru;
    int status;
    if (busy_start(&b, busy, own_session))
        return -1;
    usleep(100000); /* the busy ones on their cores first */
    double t0 = now();
    pid_t pid = fork();
    if (pid == 0)
        share_probe_child();
    int ok = pid > 0 && wait4(pid, &status, 0, &ru) == pid && WIFEXITED(status) &&
             WEXITSTATUS(status) == 0;
    double wall = now() - t0;
    busy_stop(&b);
    double cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                 (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    return ok && wall > 0 ? cpu / wall : -1;
}

/* The models timed: the default, a larger one (fewer steps), and the
 * default on a board and on the eager device (--quick gives each one
 * layer). */
static const struct load_shape {
    const char *name, *flags;
    int steps, quick_steps;
} load_shapes[] = {
    {"default config", "", 300, 20},
    {"embed 256, 8 heads, mlp 1024, 4 layers", "--embed 256 --heads 8 --mlp 1024 --layers 4", 12,
     2},
    {"--tpu v3-8 (8 simulated cores), default config", "--tpu v3-8", 300, 20},
    {"the eager device (--device cpu), default config", "--device cpu", 200, 20},
};

static int load_rounds(void) { return opt.quick ? 1 : 5; }

/* The i-th of n contenders to run in round r: in order in even rounds,
 * in reverse in odd ones. Each pair of contenders then runs as often
 * first as second (with an even count of rounds; with 5, nearly so), so
 * what a run leaves the next (a busy process just stopped, the page
 * cache, the VM's host) does not side with one of them. Two runs of the
 * same program (gpt's one thread, then --threads 1) had come out with
 * gpt's the slower in all 5 rounds of a table, by 1-6%. */
static int in_round_order(int i, int n, int r) { return r % 2 ? n - 1 - i : i; }

/* The number a /proc file starts with; -1 where it cannot be read. */
static double proc_number(const char *path)
{
    double v = -1;
    FILE *f = fopen(path, "r");
    if (f && fscanf(f, "%lf", &v) != 1)
        v = -1;
    if (f)
        fclose(f);
    return v;
}

/* The 1-minute load average as the section starts: what else the machine
 * runs (the busy processes come on top of it). */
static double load_average(void) { return proc_number("/proc/loadavg"); }

/* One run of a contender beside its busy processes; -1 if it failed. */
static double beside_busy_ms(const char *launch, const char *bin, const char *flags, int busy,
                             int own_session, const char *dir, int steps, char *threads, size_t n)
{
    struct busy b;
    if (busy_start(&b, busy, own_session))
        return -1;
    double ms = gpt_train_ms(launch, bin, flags, dir, steps, threads, n);
    busy_stop(&b);
    return ms;
}

/* A ratio's row against --threads 1: the median of the rounds' ratios and
 * their range. Where gpt runs one thread too (same_program), it is judged
 * by rounds (judge_rounds); elsewhere the median is. */
static void load_ratio_row(const char *shape, const char *label, double *r, int rounds,
                           enum target_id id, int same_program)
{
    char name[112];
    double lo = r[0], hi = r[0];
    for (int i = 1; i < rounds; i++)
        lo = fmin(lo, r[i]), hi = fmax(hi, r[i]);
    double x = median_of(r, rounds);
    snprintf(name, sizeof name, "%s, %s", shape, label);
    /* the rows' targets are bounds from above: the lowest round is the best */
    int met = same_program ? judge_rounds(id, x, lo, name) : judge(id, x, name);
    printf("    %-56s %9s %10.2fx   %s %s (rounds %.2f-%.2f)\n", label, "", x, target_text(id),
           mark(met), lo, hi);
    record("load", name, x, "x", target_text(id), met);
}

/* The cores a two-thread process gets beside one busy process, in the
 * same session and in another (the medians of the rounds). */
static struct {
    double same, other;
} share;

/* The fastest a step could be beside one busy process, over its time
 * alone: all of its one-thread work spread without loss over the cores
 * the kernel gives (t1_over_alone: --threads 1 alone over alone). */
static void load_bound_row(const char *shape, const char *where, double cores,
                           double t1_over_alone)
{
    char label[112], name[160];
    double x = cores > 0 ? t1_over_alone / cores : -1;
    snprintf(label, sizeof label, "bound %s: %.2f cores given", where, cores);
    printf("    %-56s %9s %10.2fx\n", label, "", x);
    snprintf(name, sizeof name, "%s, the bound beside 1 busy process %s", shape, where);
    record("load", name, x, "x", NULL, 0);
}

/* Whether the kernel groups each session's processes for its fair
 * share (/proc/sys/kernel/sched_autogroup_enabled). */
static const char *autogroup_text(void)
{
    double on = proc_number("/proc/sys/kernel/sched_autogroup_enabled");
    return on == 1 ? "on" : on == 0 ? "off" : "unknown";
}

/* The contenders of one shape alternately, round after round; 0 if a run
 * failed. */
static int load_shape_table(const struct load_shape *sh, const char *gpt, const char *dir)
{
    int rounds = load_rounds(), steps = opt.quick ? sh->quick_steps : sh->steps;
    double ms[NLOAD][MAX_ROUNDS], over[NLOAD][MAX_ROUNDS], vs_t1[3][MAX_ROUNDS];
    char flags[256], threads[160] = "?";
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < NLOAD; i++) {
            int c = in_round_order(i, NLOAD, r);
            snprintf(flags, sizeof flags, "%s%s %s", sh->flags, opt.quick ? " --layers 1" : "",
                     load_runs[c].flags);
            ms[c][r] = beside_busy_ms("", gpt, flags, load_runs[c].busy, load_runs[c].own_session,
                                      dir, steps,
                                c == ALONE ? threads : NULL, c == ALONE ? sizeof threads : 0);
            if (ms[c][r] <= 0)
                return 0;
        }
        for (int c = 0; c < NLOAD; c++)
            over[c][r] = ms[c][r] / ms[ALONE][r];
        vs_t1[0][r] = ms[BESIDE1][r] / ms[T1_BESIDE1][r];
        vs_t1[1][r] = ms[BESIDE2][r] / ms[T1_BESIDE2][r];
        vs_t1[2][r] = ms[BESIDE1_SESSION][r] / ms[T1_BESIDE1_SESSION][r];
    }
    printf("  %s, %d steps (gpt alone: %s)\n", sh->name, steps, threads);
    printf("    %-56s %9s %11s   %s\n", "run", "ms/step", "over alone", "target");
    for (int c = 0; c < NLOAD; c++) {
        char name[112];
        double m = median_of(ms[c], rounds), x = median_of(over[c], rounds);
        enum target_id id = c == BESIDE1 ? T_LOAD_1 : c == BESIDE2 ? T_LOAD_2 : T_NONE;
        printf("    %-56s %9.2f", load_runs[c].label, m);
        if (c != ALONE)
            printf(" %10.2fx", x);
        if (id != T_NONE)
            printf("   %s %s", target_text(id), mark(judge(id, x, sh->name)));
        putchar('\n');
        snprintf(name, sizeof name, "%s, %s", sh->name, load_runs[c].label);
        record("load", name, m, "ms", NULL, 0);
        if (id != T_NONE) {
            snprintf(name, sizeof name, "%s, %s, over alone", sh->name, load_runs[c].label);
            record("load", name, x, "x", target_text(id), target_met(id, x));
        }
    }
    load_ratio_row(sh->name, "beside 1 busy: gpt's threads over --threads 1", vs_t1[0], rounds,
                   T_LOAD_THREADS, 0);
    load_ratio_row(sh->name, "beside 2 busy: gpt's threads over --threads 1", vs_t1[1], rounds,
                   T_LOAD_THREADS, 0);
    load_ratio_row(sh->name, "another session's: gpt's threads over --threads 1", vs_t1[2],
                   rounds, T_LOAD_THREADS, 1);
    double t1 = median_of(over[T1_ALONE], rounds);
    load_bound_row(sh->name, "in this session", share.same, t1);
    load_bound_row(sh->name, "in another session", share.other, t1);
    return 1;
}

/* A pod of 2 ranks on this host against one process of --cores 2 (the
 * same global batch: each rank holds one replica), alternately. */
static void load_pod(const char *gpt, const char *dir)
{
    char mpi[PATH_MAX + 16], one[160] = "?", pod[160] = "?";
    snprintf(mpi, sizeof mpi, "%s/../gpt-mpi", opt.dir);
    printf("  a pod of 2 ranks on this host (mpirun -np 2 ./gpt-mpi) against one process of "
           "--cores 2, default config\n");
    if (access(mpi, X_OK) || system("command -v mpirun >/dev/null 2>&1")) {
        unmeasurable(T_POD_HOST, "no mpirun or ./gpt-mpi (make gpt-mpi)");
        printf("    skipped: no mpirun or ./gpt-mpi (make gpt-mpi builds it where mpicc is)\n\n");
        return;
    }
    int rounds = load_rounds(), steps = opt.quick ? 20 : 300;
    double ms[2][MAX_ROUNDS], over[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        ms[0][r] = gpt_train_ms("", gpt, "--cores 2", dir, steps, one, sizeof one);
        ms[1][r] = gpt_train_ms("mpirun --allow-run-as-root --oversubscribe --bind-to none "
                                "--mca btl_vader_single_copy_mechanism none -np 2", mpi, "",
                                dir, steps, pod, sizeof pod);
        if (ms[0][r] <= 0 || ms[1][r] <= 0) {
            unmeasurable(T_POD_HOST, "a gpt train run failed");
            printf("    not measured: a gpt train run failed\n\n");
            return;
        }
        over[r] = ms[1][r] / ms[0][r];
    }
    double x = median_of(over, rounds);
    char label[240];
    printf("    %-56s %9s %11s   %s\n", "run", "ms/step", "over one", "target");
    snprintf(label, sizeof label, "--cores 2 (%s)", one);
    printf("    %-56s %9.2f\n", label, median_of(ms[0], rounds));
    snprintf(label, sizeof label, "2 ranks (%s)", pod); /* rank 0's banner */
    int met = judge(T_POD_HOST, x, "default config");
    printf("    %-56s %9.2f %10.2fx   %s %s\n\n", label, median_of(ms[1], rounds), x,
           target_text(T_POD_HOST), mark(met));
    record("load", "pod of 2 ranks on one host over --cores 2", x, "x", target_text(T_POD_HOST),
           met);
}

/* gpt eval and gpt sample, each a whole process of a checkpoint the
 * section trains: alone, beside one busy process, and --threads 1 beside
 * it. Beside it one passage runs one thread (it has no redo team): the
 * very program of --threads 1, judged by rounds; 16 passages' window
 * steps past the context run on the team, as an eval's passes do. */
static const struct load_command {
    const char *name, *args; /* after the binary; the checkpoint's flag follows */
    int with_data;           /* the test split of the bench's corpus */
    int one_thread;          /* gpt runs one thread beside the busy process */
} load_commands[] = {
    {"gpt eval (the whole test split)", "eval", 1, 0},
    {"gpt sample --bytes 512", "sample --bytes 512", 0, 1},
    {"gpt sample --num-samples 16 --bytes 256", "sample --num-samples 16 --bytes 256", 0, 0},
};

/* A command's figure is the mean of runs back to back that take about
 * COMMAND_FIGURE_S alone: a single process of 70-200 ms moves by tens of
 * ms from one start to the next on a VM (sample --num-samples 16 alone:
 * 193-328 ms within minutes), which would decide a ratio's verdict. */
#define COMMAND_FIGURE_S 1.0
#define COMMAND_MAX_RUNS 16

/* Runs of cmd back to back beside `busy` busy processes: the mean ms a
 * run; -1 if one failed. */
static double command_ms(const char *cmd, int busy, int runs)
{
    struct busy b;
    if (busy_start(&b, busy, 0))
        return -1;
    int rc = 0;
    double t0 = now();
    for (int i = 0; i < runs && rc == 0; i++)
        rc = system(cmd);
    double ms = 1e3 * (now() - t0) / runs;
    busy_stop(&b);
    return rc == 0 ? ms : -1;
}

/* The runs of cmd a figure takes: about COMMAND_FIGURE_S of it alone,
 * timed on a run that also warms the page cache. 0 if it failed. */
static int command_runs(const char *cmd)
{
    double ms = command_ms(cmd, 0, 1);
    if (ms <= 0)
        return 0;
    int runs = (int)ceil(1e3 * COMMAND_FIGURE_S / ms);
    return runs < 1 ? 1 : runs > COMMAND_MAX_RUNS ? COMMAND_MAX_RUNS : runs;
}

/* The commands alternately, round after round; 0 if a run failed. */
static int load_command_table(const char *gpt, const char *dir)
{
    int rounds = load_rounds(), steps = opt.quick ? 5 : 20;
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "'%s' train --data '%s' --steps %d --final-bytes 0 --live off "
             "--out '%s/ck' > /dev/null 2>&1", gpt, opt.data, steps, dir);
    if (system(cmd))
        return 0;
    printf("  gpt eval and gpt sample of a checkpoint of %d default steps, whole processes (a "
           "figure: the mean of runs back to back, about %.0f s of them alone)\n", steps,
           COMMAND_FIGURE_S);
    printf("    %-56s %9s %11s   %s\n", "run", "ms", "over alone", "target");
    for (size_t i = 0; i < sizeof load_commands / sizeof *load_commands; i++) {
        const struct load_command *c = &load_commands[i];
        double ms[3][MAX_ROUNDS], over[MAX_ROUNDS], vs_t1[MAX_ROUNDS];
        int runs = 0;
        for (int r = 0; r < rounds; r++) {
            for (int j = 0; j < 3; j++) { /* alone, beside 1 busy, --threads 1 beside it */
                int k = in_round_order(j, 3, r);
                snprintf(cmd, sizeof cmd, "'%s' %s --ckpt '%s/ck'%s%s%s%s > /dev/null 2>&1", gpt,
                         c->args, dir, c->with_data ? " --data '" : "",
                         c->with_data ? opt.data : "", c->with_data ? "'" : "",
                         k == 2 ? " --threads 1" : "");
                if (!runs && !(runs = command_runs(cmd)))
                    return 0;
                if ((ms[k][r] = command_ms(cmd, k > 0, runs)) <= 0)
                    return 0;
            }
            over[r] = ms[1][r] / ms[0][r];
            vs_t1[r] = ms[1][r] / ms[2][r];
        }
        char label[160], name[200];
        double x = median_of(over, rounds);
        snprintf(label, sizeof label, "%s alone (%d runs)", c->name, runs);
        printf("    %-56s %9.0f\n", label, median_of(ms[0], rounds));
        int met = judge(T_LOAD_COMMANDS, x, c->name);
        printf("    %-56s %9.0f %10.2fx   %s %s\n", "beside 1 busy process",
               median_of(ms[1], rounds), x, target_text(T_LOAD_COMMANDS), mark(met));
        printf("    %-56s %9.0f\n", "--threads 1 beside 1 busy process", median_of(ms[2], rounds));
        snprintf(name, sizeof name, "%s, beside 1 busy process, over alone", c->name);
        record("load", name, x, "x", target_text(T_LOAD_COMMANDS), met);
        load_ratio_row(c->name, "beside 1 busy: gpt's threads over --threads 1", vs_t1, rounds,
                       T_LOAD_THREADS, c->one_thread);
    }
    putchar('\n');
    return 1;
}

static void load_table(void)
{
    char gpt[PATH_MAX + 16], dir[64];
    if (opt.gpt[0])
        snprintf(gpt, sizeof gpt, "%s", opt.gpt);
    else
        snprintf(gpt, sizeof gpt, "%s/../gpt", opt.dir);
    const char *isa = getenv("GPT_ISA");
    printf("under load: %s train alone and beside plain spinning processes, median of %d "
           "alternating rounds (load average %.2f as it starts%s%s)\n",
           opt.gpt[0] ? opt.gpt : "./gpt", load_rounds(), load_average(), isa ? ", GPT_ISA=" : "",
           isa ? isa : "");
    temp_template(dir, sizeof dir, "gpt-bench-load");
    const char *why = access(gpt, X_OK) ? "no gpt binary to run (make gpt)"
                      : !mkdtemp(dir)   ? "no temporary directory"
                                        : NULL;
    if (!why) {
        double same[MAX_ROUNDS], other[MAX_ROUNDS];
        for (int r = 0; r < load_rounds(); r++)
            same[r] = cores_given(1, 0), other[r] = cores_given(1, 1);
        share.same = median_of(same, load_rounds());
        share.other = median_of(other, load_rounds());
        printf("  the cores the kernel gives a process of %d threads that never wait, beside 1 "
               "busy process: %.2f in the same session, %.2f when it runs in another (its "
               "own terminal's; autogroup %s)\n", SHARE_PROBE_THREADS, share.same, share.other,
               autogroup_text());
        record("load", "cores given beside 1 busy process, same session", share.same, "cores",
               NULL, 0);
        record("load", "cores given beside 1 busy process, another session", share.other,
               "cores", NULL, 0);
    }
    for (size_t i = 0; !why && i < sizeof load_shapes / sizeof *load_shapes; i++)
        if (!load_shape_table(&load_shapes[i], gpt, dir))
            why = "a gpt train run failed";
    if (!why && !load_command_table(gpt, dir))
        why = "a gpt train, eval or sample run failed";
    if (!why)
        load_pod(gpt, dir);
    if (why) {
        enum target_id ids[] = {T_LOAD_1, T_LOAD_2, T_LOAD_THREADS, T_POD_HOST, T_LOAD_COMMANDS};
        for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
            unmeasurable(ids[i], why);
        printf("  not measured: %s\n\n", why);
    }
    char rm[PATH_MAX];
    snprintf(rm, sizeof rm, "rm -rf '%s/ck'", dir); /* load_command_table's checkpoint */
    if (dir[0] && system(rm))
        printf("  could not remove %s/ck\n", dir);
    rmdir(dir);
}

/* ---- start-up ---- */

/* The CPU's model name, as /proc/cpuinfo gives it; arm64 kernels give
 * none, only the implementer and part numbers (0x41 0xd40: Arm's
 * Neoverse V1), which stand in for it. */
static const char *cpu_name(void)
{
    static char cpu[256];
    char line[512], impl[32] = "", part[32] = "";
    if (cpu[0])
        return cpu;
    snprintf(cpu, sizeof cpu, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        if (!v)
            continue;
        v += 1 + (v[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        if (!strncmp(line, "model name", 10)) {
            snprintf(cpu, sizeof cpu, "%s", v);
            break;
        }
        if (!strncmp(line, "CPU implementer", 15) && !impl[0])
            snprintf(impl, sizeof impl, "%s", v);
        if (!strncmp(line, "CPU part", 8) && !part[0])
            snprintf(part, sizeof part, "%s", v);
    }
    if (!strcmp(cpu, "unknown CPU") && impl[0])
        snprintf(cpu, sizeof cpu, "arm64 CPU, implementer %s, part %s", impl, part);
    if (f)
        fclose(f);
    return cpu;
}

static void header(void)
{
    const char *cpu = cpu_name();
    printf("gpt bench%s: %s, %ld cores online, %d OpenMP threads\n", opt.quick ? " --quick" : "",
           cpu, sysconf(_SC_NPROCESSORS_ONLN), opt.threads);
    printf("kernel path %s, bf16 matmul %s", isa_name(isa_get()),
           bf16_native() ? "vdpbf16ps" : "emulated");
    if (bf16_cpu() && isa_get() == ISA_AVX512) /* why auto chose as it did */
        printf(" (vdpbf16ps: %.2fx the FMA's products a second here)", bf16_dot_speed());
#ifdef HAVE_OPENBLAS
    printf(", OpenBLAS %d threads (%s)", openblas_get_num_threads(), openblas_get_config());
#endif
    printf("\n\n");
}

/* The default corpus and torch_ref.py are found relative to this binary
 * (bench/bench), so it runs from any directory. */
static void find_files(const char *data)
{
    char exe[PATH_MAX] = ".";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 1] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0; /* the bench directory */
    snprintf(opt.dir, sizeof opt.dir, "%s", exe);
    snprintf(opt.torch, sizeof opt.torch, "%s/torch_ref.py", exe);
    if (data)
        snprintf(opt.data, sizeof opt.data, "%s", data);
    else
        snprintf(opt.data, sizeof opt.data, "%s/../data/sherlock-ascii.txt", exe);
}

/* ---- the data loader ---- */

/* The corpus as n WebDataset shards of one document each, in dir. */
static int write_shards(const char *dir, int n)
{
    char path[256];
    for (int i = 0; i < n; i++) {
        TarWriter w;
        size_t lo = corpus.n * (size_t)i / (size_t)n, hi = corpus.n * (size_t)(i + 1) / (size_t)n;
        snprintf(path, sizeof path, "%s/train-%06d.tar", dir, i);
        if (tar_write_open(&w, path) ||
            tar_write_member(&w, "000000.txt", corpus.bytes + lo, hi - lo) ||
            tar_write_close(&w)) {
            fprintf(stderr, "bench: %s\n", w.err);
            return -1;
        }
    }
    return 0;
}

/* Steps a second the loader makes for the default run (batch 32 x 128,
 * default streams and buffer) from the parts `spec` names. */
static double loader_steps_per_s(const char *spec, int steps)
{
    char err[1024];
    DataSource src;
    if (data_source_open(&src, spec, err, sizeof err))
        return fprintf(stderr, "bench: %s\n", err), -1;
    int S = loader_default_streams(src.parts.n, DB);
    LoaderSpec sp = {.T = DT, .B = DB, .streams = S, .count = S, .buffer = 1024, .vocab = 128,
                     .seed = 1337};
    double t0 = now();
    Loader *l = loader_start(&sp, &src.parts, NULL, err, sizeof err);
    for (int i = 0; l && i < steps; i++)
        if (!loader_next(l, NULL, err, sizeof err))
            break;
    double dt = now() - t0;
    loader_stop(l);
    data_source_free(&src);
    return l ? steps / dt : -1;
}

static void loader_table(double step_ms)
{
    char dir[64], spec[3][512];
    temp_template(dir, sizeof dir, "gpt-bench-shards");
    int rounds = opt.quick ? 3 : 7, steps = opt.quick ? 2000 : 20000;
    if (!mkdtemp(dir) || write_shards(dir, 8))
        return;
    snprintf(spec[0], sizeof spec[0], "%s/train-{000000..000007}.tar", dir);
    snprintf(spec[1], sizeof spec[1], "pipe:cat %s/train-{000000..000007}.tar", dir);
    snprintf(spec[2], sizeof spec[2], "%s/train-000000.tar", dir);
    const char *names[3] = {"8 shards, 8 streams", "8 shards through pipe:cat",
                            "1 shard, 1 stream"};
    double r[3][16];
    for (int k = 0; k < rounds; k++) /* alternately, as everywhere here */
        for (int i = 0; i < 3; i++)
            r[i][k] = loader_steps_per_s(spec[i], steps);
    printf("data loader: steps of 32 x 128 bytes it makes a second (its thread, the trainer's "
           "side only taking them), median of %d rounds of %d steps, the loader's start "
           "included\n", rounds, steps);
    for (int i = 0; i < 3; i++) {
        double m = median_of(r[i], rounds);
        printf("  %-28s %10.0f steps/s %8.1f MB/s of windows", names[i], m, m * DN / 1e6);
        record("loader", names[i], m, "steps/s", NULL, 0);
        if (step_ms > 0)
            printf("   %6.0fx what training takes (%.2f ms/step)", m * step_ms / 1e3, step_ms);
        putchar('\n');
    }
    putchar('\n');
    for (int i = 0; i < 8; i++) {
        char path[300];
        snprintf(path, sizeof path, "%s/train-%06d.tar", dir, i);
        unlink(path);
    }
    rmdir(dir);
}

/* ---- writing the --json record ---- */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    fputc('"', f);
}

/* Written whole under PATH.tmp, then renamed (util.h's atomic save): a
 * reader never sees half a record. */
static int json_write(const char *path)
{
    char *tmp = tmp_path(path), date[32];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "bench: --json %s: cannot write (%s)\n", path, strerror(errno));
        free(tmp);
        return 1;
    }
    fprintf(f, "{\n  \"date\": \"%s\",\n  \"quick\": %s,\n  \"machine\": {\"cpu\": ", date,
            opt.quick ? "true" : "false");
    json_string(f, cpu_name());
    fprintf(f, ", \"cores_online\": %ld, \"threads\": %d, \"kernel_path\": \"%s\", "
               "\"bf16_matmul\": \"%s\"},\n  \"figures\": [\n",
            sysconf(_SC_NPROCESSORS_ONLN), opt.threads, isa_name(isa_get()),
            bf16_native() ? "vdpbf16ps" : "emulated");
    for (int i = 0; i < nfigures; i++) {
        const struct figure *g = &figures[i];
        fprintf(f, "    {\"section\": \"%s\", \"name\": ", g->section);
        json_string(f, g->name);
        fprintf(f, ", \"value\": %.6g, \"unit\": \"%s\"", g->value, g->unit);
        if (g->met >= 0) {
            fprintf(f, ", \"target\": ");
            json_string(f, g->target);
            fprintf(f, ", \"met\": %s", g->met ? "true" : "false");
        }
        fprintf(f, "}%s\n", i + 1 < nfigures ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    int failed = fflush(f) || ferror(f) | fclose(f) || commit_tmp(tmp, path);
    if (failed) {
        fprintf(stderr, "bench: --json %s: cannot write (%s)\n", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return failed;
}

/* The sections in print order; the summary last. */
static void run_sections(void)
{
    struct best best[NBEST] = {{0, "-"}, {0, "-"}, {0, "-"}};
    double eval_ms, gen_ms;
    if (wanted("kernels"))
        kernel_table();
    load_corpus();
    if (wanted("steps"))
        step_table(best);
    if (wanted("isa"))
        isa_table();
    if (wanted("eval")) {
        eval_table(&eval_ms, &gen_ms);
        if (wanted("steps"))
            projection(best, eval_ms, gen_ms);
    }
    if (wanted("torch"))
        torch_table();
    if (wanted("scaling"))
        scaling_table();
    if (wanted("shapes"))
        shapes_table();
    if (wanted("gpt2"))
        gpt2_table();
    if (wanted("flavours"))
        flavours_table();
    if (wanted("load"))
        load_table();
    if (wanted("loader"))
        loader_table(best[BEST_FP32].ms);
    summary();
}

int main(int argc, char **argv)
{
    const char *data = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            opt.quick = 1;
        else if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc && only_ok(argv[i + 1]))
            opt.only = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            opt.json = argv[++i];
        else if (!strcmp(argv[i], "--gpt") && i + 1 < argc)
            snprintf(opt.gpt, sizeof opt.gpt, "%s", argv[++i]);
        else {
            fprintf(stderr, "usage: bench/bench [--quick] [--data FILE] [--only SECTION,...] "
                            "[--json FILE] [--gpt FILE] (sections: %s)\n", sections);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* sections show as they finish */
    opt.threads = omp_get_max_threads();
    find_files(data);
    header();
    measure_peaks();
    run_sections();
    if (opt.tmp[0])
        unlink(opt.tmp);
    free(corpus.bytes);
    int rc = opt.json ? json_write(opt.json) : 0;
    free(figures);
    return rc;
}
