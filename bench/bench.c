/* bench/bench.c: `make bench`. One table of where gpt stands on this
 * machine against the targets of the speed issue: the FMA peak measured at
 * start-up, each kernel at the default model's shapes (and OpenBLAS on the
 * same matmul shapes when it is installed), training-step time on every
 * device and layout in fp32 and bf16 at 1 and all threads, MFU, the eval
 * block, sampling, the projected full run, the PyTorch reference when
 * Debian's python3-torch is importable, and scaling with the width.
 *
 * Timed contenders always run alternately, round after round, and report
 * medians: on a shared machine the noise then falls on all of them alike.
 *
 *   bench/bench [--quick] [--data FILE]
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpt.h"
#include "tensor.h"
#include "xla_sim.h"
#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif

static int quick;                  /* --quick: a smoke run, seconds not minutes */
static const char *data_path = "data/sherlock-ascii.txt";
static double peak1, peakn, peak_bf; /* measured GFLOP/s: 1 thread, all, bf16 all */
static int nthreads;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static const char *mark(int met) { return met ? "met" : "MISSED"; }

/* ---- peak: independent FMA chains, enough of them to hide the latency ---- */

#define CHAINS 12

__attribute__((target("avx512f"))) static double fma_gflops_avx512(long iters)
{
    __m512 a[CHAINS], x = _mm512_set1_ps(0.9999f), y = _mm512_set1_ps(1e-4f);
    for (int i = 0; i < CHAINS; i++)
        a[i] = _mm512_set1_ps((float)i);
    double t0 = now();
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            a[i] = _mm512_fmadd_ps(a[i], x, y);
    }
    double t = now() - t0;
    volatile float sink = 0;
    for (int i = 0; i < CHAINS; i++)
        sink += _mm512_reduce_add_ps(a[i]);
    return 2.0 * 16 * CHAINS * iters / t * 1e-9;
}

__attribute__((target("avx2,fma"))) static double fma_gflops_avx2(long iters)
{
    __m256 a[CHAINS], x = _mm256_set1_ps(0.9999f), y = _mm256_set1_ps(1e-4f);
    for (int i = 0; i < CHAINS; i++)
        a[i] = _mm256_set1_ps((float)i);
    double t0 = now();
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            a[i] = _mm256_fmadd_ps(a[i], x, y);
    }
    double t = now() - t0;
    float out[8], sum = 0;
    for (int i = 0; i < CHAINS; i++) {
        _mm256_storeu_ps(out, a[i]);
        sum += out[0];
    }
    volatile float sink = sum;
    (void)sink;
    return 2.0 * 8 * CHAINS * iters / t * 1e-9;
}

/* vdpbf16ps: 16 lanes, each two products and two adds. */
__attribute__((target("avx512f,avx512bf16"))) static double bf16_gflops(long iters)
{
    __m512 a[CHAINS];
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80); /* (1, 1) */
    for (int i = 0; i < CHAINS; i++)
        a[i] = _mm512_setzero_ps();
    double t0 = now();
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            a[i] = _mm512_dpbf16_ps(a[i], x, x);
    }
    double t = now() - t0;
    volatile float sink = 0;
    for (int i = 0; i < CHAINS; i++)
        sink += _mm512_reduce_add_ps(a[i]);
    return 4.0 * 16 * CHAINS * iters / t * 1e-9;
}

static double fp32_gflops(long iters)
{
    return isa_get() == ISA_AVX512 ? fma_gflops_avx512(iters)
           : isa_get() == ISA_AVX2 ? fma_gflops_avx2(iters)
                                   : 0.0;
}

/* Best of a few tries per thread, summed over the threads. */
static double peak_of(double (*f)(long), int threads)
{
    double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        double best = 0;
        for (int r = 0; r < 5; r++) {
            double g = f(quick ? 2000000 : 10000000);
            best = g > best ? g : best;
        }
        total += best;
    }
    return total;
}

static void measure_peaks(void)
{
    peak1 = peak_of(fp32_gflops, 1);
    peakn = peak_of(fp32_gflops, nthreads);
    if (bf16_native())
        peak_bf = peak_of(bf16_gflops, nthreads);
    printf("peak fp32 FMA (%s): %.0f GFLOP/s on 1 thread, %.0f on %d", isa_name(isa_get()), peak1,
           peakn, nthreads);
    if (peak_bf > 0)
        printf("; bf16 vdpbf16ps: %.0f on %d", peak_bf, nthreads);
    printf("\n\n");
}

/* ---- kernels at the default model's shapes ---- */

enum { K_MM, K_MM_BF16, K_TN, K_TN_BF16, K_ATT, K_ATT_BWD, K_ATT_BF16, K_ATT_BWD_BF16, K_BLAS,
       K_BLAS_TN };

struct kcall {
    int kind, n, p, q; /* matmul: c[n,q] = a[n,p] b[p,q]; tn: c[n,q] = a[p,n]^T b[p,q] */
    float *a, *b, *c, *d; /* scratch, big enough for every shape */
};

enum { KB = 32, KT = 128, KC = 32, KH = 4 }; /* the default model's batch and widths */
/* attention: a is qkv [B,T,3C], b dout [B,T,C]; d holds the forward's out
 * [B,T,C] then its lse [B,H,T] at LSE_AT (c the same, for the outputs) */
#define LSE_AT ((size_t)KB * KT * KC)

static void kernel_once(const struct kcall *k)
{
    switch (k->kind) {
    case K_MM: k_matmul(k->c, k->a, k->b, NULL, k->n, k->p, k->q); break;
    case K_MM_BF16: k_matmul_bf16(k->c, k->a, k->b, NULL, NULL, NULL, 0, k->n, k->p, k->q); break;
    case K_TN: k_matmul_tn_seg(k->c, k->a, k->b, k->n, k->p, k->q, KT); break;
    case K_TN_BF16: k_matmul_tn_seg_bf16(k->c, k->a, k->b, k->n, k->p, k->q, KT); break;
    case K_ATT: k_attention(k->c, k->c + LSE_AT, k->a, KB, KT, KC, KH); break;
    case K_ATT_BF16: k_attention_bf16(k->c, k->c + LSE_AT, k->a, KB, KT, KC, KH); break;
    case K_ATT_BWD: k_attention_bwd(k->c, k->b, k->a, k->d, k->d + LSE_AT, KB, KT, KC, KH); break;
    case K_ATT_BWD_BF16:
        k_attention_bwd_bf16(k->c, k->b, k->a, k->d, k->d + LSE_AT, KB, KT, KC, KH);
        break;
#ifdef HAVE_OPENBLAS
    case K_BLAS:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k->n, k->q, k->p, 1.0f, k->a, k->p,
                    k->b, k->q, 0.0f, k->c, k->q);
        break;
    case K_BLAS_TN:
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k->n, k->q, k->p, 1.0f, k->a, k->n,
                    k->b, k->q, 0.0f, k->c, k->q);
        break;
#endif
    }
}

static double kernel_seconds(const struct kcall *k)
{
    double t0 = now();
    kernel_once(k);
    return now() - t0;
}

/* Calls per block of one kernel, then the other (a block each in turn,
 * round after round). Not call by call: OpenBLAS's and OpenMP's idle
 * threads spin for a while after a call and would slow the other side,
 * so each block starts after a pause and a few untimed calls. */
static void time_block(const struct kcall *k, double *v, int n)
{
    usleep(300000); /* OpenBLAS's threads spin for ~2^28 cycles */
    for (int r = 0; r < 3; r++)
        kernel_once(k);
    for (int r = 0; r < n; r++)
        v[r] = kernel_seconds(k);
}

/* Medians of x and y (y may be NULL) timed in alternating blocks. */
static void time_pair(const struct kcall *x, const struct kcall *y, double *tx, double *ty)
{
    enum { ROUNDS = 5, BLOCK = 30 };
    double vx[ROUNDS * BLOCK], vy[ROUNDS * BLOCK];
    int rounds = quick ? 1 : ROUNDS, block = quick ? 10 : BLOCK;
    for (int r = 0; r < rounds; r++) {
        time_block(x, vx + r * block, block);
        if (y)
            time_block(y, vy + r * block, block);
    }
    *tx = median(vx, rounds * block);
    *ty = y ? median(vy, rounds * block) : 0;
}

/* The attention flops gpt's profile counts: the causal half, 4 (forward)
 * or 8 (backward) per query-key pair and channel. */
static double attention_flops(int bwd)
{
    return (bwd ? 8.0 : 4.0) * KB * KT * (KT + 1) / 2.0 * KC;
}

static void kernel_row(const char *name, const struct kcall *k, const struct kcall *blas,
                       double flops, double peak)
{
    double t, tb = 0;
    time_pair(k, blas, &t, &tb);
    double gf = flops / t * 1e-9;
    printf("  %-28s %9.1f %8.0f %6.0f%%", name, t * 1e6, gf, 100 * gf / peak);
    if (blas)
        printf(" %8.0f %7.2fx  %s", flops / tb * 1e-9, tb / t, mark(tb >= t));
    printf("\n");
}

static float *rand_floats(size_t n, unsigned seed)
{
    float *x = malloc(n * sizeof *x); /* [n] */
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((seed >> 8) / 16777216.0f - 0.5f) * 2.0f;
    }
    return x;
}

static void matmul_rows(struct kcall base, int bf16)
{
    /* forward projections of the default model: qkv, attention output,
     * MLP up and down, logits; tn: their weight gradients */
    static const int shape[][3] = {{4096, 32, 96}, {4096, 32, 32}, {4096, 32, 64},
                                   {4096, 64, 32}, {4096, 32, 128}};
    for (int s = 0; s < 5; s++) {
        int n = shape[s][0], p = shape[s][1], q = shape[s][2];
        struct kcall k = base, tn = base, b = base, btn = base, *pb = NULL, *pbtn = NULL;
        k.kind = bf16 ? K_MM_BF16 : K_MM, k.n = n, k.p = p, k.q = q;
        tn.kind = bf16 ? K_TN_BF16 : K_TN, tn.n = p, tn.p = n, tn.q = q;
#ifdef HAVE_OPENBLAS
        b.kind = K_BLAS, b.n = n, b.p = p, b.q = q, pb = &b;
        btn.kind = K_BLAS_TN, btn.n = p, btn.p = n, btn.q = q, pbtn = &btn;
#endif
        char name[64];
        double fl = 2.0 * n * p * q, peak = bf16 && peak_bf > 0 ? peak_bf : peakn;
        snprintf(name, sizeof name, "%s %dx%d @ %dx%d", bf16 ? "matmul_bf16" : "matmul", n, p, p,
                 q);
        kernel_row(name, &k, bf16 ? NULL : pb, fl, peak);
        snprintf(name, sizeof name, "%s %dx%d^T @ %dx%d", bf16 ? "matmul_tn_bf16" : "matmul_tn", n,
                 p, n, q);
        kernel_row(name, &tn, bf16 ? NULL : pbtn, fl, peak);
    }
}

static void attention_rows(struct kcall base)
{
    static const struct { const char *name; int kind, bwd; } row[] = {
        {"attention 32x128, 4 heads", K_ATT, 0},
        {"attention_bwd", K_ATT_BWD, 1},
        {"attention_bf16", K_ATT_BF16, 0},
        {"attention_bwd_bf16", K_ATT_BWD_BF16, 1},
    };
    for (int r = 0; r < 4; r++) {
        struct kcall k = base;
        k.kind = row[r].kind;
        kernel_row(row[r].name, &k, NULL, attention_flops(row[r].bwd), peakn);
    }
}

static void kernel_table(void)
{
    size_t big = (size_t)4096 * 384; /* the largest operand: [B*T, 3C] fits, [4096,128] too */
    struct kcall base = {0, 0, 0, 0, rand_floats(big, 1), rand_floats(big, 2),
                         rand_floats(big, 3), rand_floats(big, 4)};
    k_attention(base.d, base.d + LSE_AT, base.a, KB, KT, KC, KH); /* what the backward reads */
    printf("kernels at the default shapes, %d threads (medians)\n", nthreads);
    printf("  %-28s %9s %8s %7s %8s %8s\n", "kernel", "us", "GFLOP/s", "%peak", "OpenBLAS",
           "vs BLAS");
    matmul_rows(base, 0);
    if (bf16_native())
        matmul_rows(base, 1);
    attention_rows(base);
#ifndef HAVE_OPENBLAS
    printf("  (OpenBLAS not installed: apt-get install libopenblas-dev, then make bench)\n");
#endif
    printf("\n");
    free(base.a), free(base.b), free(base.c), free(base.d);
}

/* ---- training steps ---- */

static unsigned char *text;
static size_t text_len;

static void load_text(void)
{
    FILE *f = fopen(data_path, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        text = malloc((size_t)n + 1);
        text_len = fread(text, 1, (size_t)n, f);
        fclose(f);
    }
    if (text_len < 100000) { /* no corpus: any English-like bytes time the same */
        static const char s[] = "It is a capital mistake to theorize before one has data. "
                                "Insensibly one begins to twist facts to suit theories. ";
        free(text);
        text_len = 1 << 20;
        text = malloc(text_len);
        for (size_t i = 0; i < text_len; i++)
            text[i] = (unsigned char)s[i % (sizeof s - 1)];
        printf("(%s not found: timing on synthetic text)\n", data_path);
    }
}

/* Random windows from the first 80% (train) or the rest (test). */
static void fill_batch(Batch *b, Rng *r, int test)
{
    size_t lo = test ? text_len * 8 / 10 : 0, len = test ? text_len - lo : text_len * 8 / 10;
    for (int i = 0; i < b->B; i++) {
        size_t s = lo + rng_next(r) % (len - (size_t)b->T);
        for (int t = 0; t < b->T; t++)
            b->tok[(size_t)i * b->T + t] = text[s + t];
    }
    batch_finish(b);
}

struct variant {
    const char *name;
    int lazy, cores, precision, threads, embed;
    Model m;
    Graph *g;
    Batch b;
    Rng r;
    double ms[64];
    int nms;
};

static Config config_of(int embed)
{
    Config c = {VOCAB, 128, embed, 2 * embed, 4, 4};
    return c;
}

/* The speed issue's PaLM-style count per training step: 6 flops per
 * weight of the blocks' matmuls (32,768 by default; the logits layer is
 * left out, as the issue counts) and 12 L T C for attention, per token. */
static double step_flops(const Config *c)
{
    double w = (double)c->layers * (4.0 * c->embed * c->embed + 2.0 * c->embed * c->mlp);
    return (6.0 * w + 12.0 * c->layers * c->context * c->embed) * 32 * c->context;
}

static void variant_setup(struct variant *v)
{
    Config c = config_of(v->embed);
    model_init(&v->m, &c, 1337);
    model_set_cores(&v->m, v->cores);
    v->g = g_new();
    g_set_lazy(v->g, v->lazy);
    g_set_precision(v->g, v->precision);
    batch_alloc(&v->b, 32, 128);
    rng_seed(&v->r, 1337, 1);
}

static void variant_free(struct variant *v)
{
    model_free(&v->m);
    g_free(v->g);
    batch_free(&v->b);
}

static void variant_enter(const struct variant *v)
{
    omp_set_num_threads(v->threads);
    xs_set_device(v->cores > 1 ? "bench" : "", v->cores, 0);
}

/* ms per step over `steps` steps. */
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

/* Every variant warmed up (compiles included), then rounds of `steps`
 * steps, the variants in turn within each round. */
static void run_alternating(struct variant *v, int n, int rounds, int steps)
{
    for (int i = 0; i < n; i++) {
        variant_setup(&v[i]);
        variant_run(&v[i], 3);
    }
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++)
            v[i].ms[v[i].nms++] = variant_run(&v[i], steps);
}

static double variant_median(struct variant *v)
{
    double tmp[64];
    memcpy(tmp, v->ms, sizeof(double) * v->nms);
    return median(tmp, v->nms);
}

enum { V_CPU, V_XLA, V_XLA8, V_BF, V_BF8, NV };

static void step_table(double *best_fp32, double *best_bf16)
{
    static const struct { const char *name; int lazy, cores, precision; } kind[NV] = {
        {"cpu (eager) fp32", 0, 1, PREC_FP32},     {"xla 1 core fp32", 1, 1, PREC_FP32},
        {"xla 8 cores (v3-8) fp32", 1, 8, PREC_FP32}, {"xla 1 core bf16", 1, 1, PREC_BF16},
        {"xla 8 cores (v3-8) bf16", 1, 8, PREC_BF16},
    };
    struct variant v[2 * NV];
    memset(v, 0, sizeof v);
    for (int i = 0; i < 2 * NV; i++) {
        v[i].name = kind[i % NV].name, v[i].lazy = kind[i % NV].lazy;
        v[i].cores = kind[i % NV].cores, v[i].precision = kind[i % NV].precision;
        v[i].threads = i < NV ? nthreads : 1, v[i].embed = 32;
    }
    run_alternating(v, 2 * NV, quick ? 3 : 7, quick ? 5 : 30);
    double fl = step_flops(&(Config){VOCAB, 128, 32, 64, 4, 4});
    printf("training step, default config (%.3f GFLOP/step), medians of alternating rounds\n",
           fl * 1e-9);
    printf("  %-26s %9s %9s %6s %9s %9s\n", "device, layout, precision", "ms/step", "1 thread",
           "MFU", "threads x", "target");
    *best_fp32 = *best_bf16 = 1e9;
    for (int i = 0; i < NV; i++) {
        double ms = variant_median(&v[i]), ms1 = variant_median(&v[i + NV]);
        int bf = v[i].precision == PREC_BF16;
        double peak = bf && peak_bf > 0 ? peak_bf : peakn;
        double *best = bf ? best_bf16 : best_fp32;
        *best = ms < *best ? ms : *best;
        printf("  %-26s %9.2f %9.2f %5.0f%% %8.2fx  <= %2d ms %s, 2 threads >= 1.8x %s\n",
               v[i].name, ms, ms1, 100 * fl / (ms * 1e-3) * 1e-9 / peak, ms1 / ms, bf ? 7 : 12,
               mark(ms <= (bf ? 7 : 12)), mark(ms1 / ms >= 1.8));
    }
    printf("  (MFU: of the measured fp32 peak, bf16 rows of the vdpbf16ps peak)\n\n");
    for (int i = 0; i < 2 * NV; i++)
        variant_free(&v[i]);
}

/* ---- eval block and sampling ---- */

static double eval_block_ms(Model *m, Graph *g, Batch *test, Rng *r)
{
    static const char prompt[] = "\"Elementary, my dear";
    char out[64];
    int n = (int)strlen(prompt);
    double t0 = now();
    fill_batch(test, r, 1);
    Tensor *leaf[MAX_PARAMS], *logits;
    g_reset(g);
    volatile float loss = *(const float *)g_read(g, model_loss(m, g, test, leaf, &logits, 0));
    (void)loss;
    memcpy(out, prompt, (size_t)n);
    SampleOpts so = {.temperature = 1.0f};
    model_generate(m, g, out, n, 32, &so, r);
    return 1e3 * (now() - t0);
}

static double sample_ms(Model *m, Graph *g, Rng *r)
{
    char out[257] = "\"Elementary, my dear";
    SampleOpts so = {.temperature = 1.0f};
    double t0 = now();
    model_generate(m, g, out, (int)strlen(out), 256, &so, r);
    return 1e3 * (now() - t0);
}

static void eval_table(double *eval_ms, double *gen_ms)
{
    struct variant v = {.name = "eval", .lazy = 1, .cores = 1, .threads = nthreads, .embed = 32};
    variant_setup(&v);
    variant_enter(&v);
    Batch test;
    batch_alloc(&test, 256, 128);
    int reps = quick ? 5 : 31;
    double e[64], s[64];
    eval_block_ms(&v.m, v.g, &test, &v.r); /* the compiles */
    sample_ms(&v.m, v.g, &v.r);
    for (int i = 0; i < reps; i++) {
        e[i] = eval_block_ms(&v.m, v.g, &test, &v.r);
        s[i] = sample_ms(&v.m, v.g, &v.r);
    }
    *eval_ms = median(e, reps), *gen_ms = median(s, reps);
    printf("eval and sampling (xla, fp32, %d threads, medians)\n", nthreads);
    printf("  %-44s %8.2f ms   <= 40 ms %s\n", "eval block: 256x128 test loss + 32 bytes",
           *eval_ms, mark(*eval_ms <= 40));
    printf("  %-44s %8.2f ms   <= 5 ms %s  (%.0f bytes/s)\n", "sample 256 bytes", *gen_ms,
           mark(*gen_ms <= 5), 256 / (*gen_ms * 1e-3));
    printf("\n");
    batch_free(&test);
    variant_free(&v);
}

static void projection(double fp32_ms, double bf16_ms, double eval_ms, double gen_ms)
{
    double rest = 500 * eval_ms + gen_ms;
    double f = (50000 * fp32_ms + rest) / 60e3, b = (50000 * bf16_ms + rest) / 60e3;
    printf("projected full run (50,000 steps + 500 eval blocks + the final passage), best layout\n");
    printf("  %-44s %8.2f min  < 11 min %s\n", "fp32", f, mark(f < 11));
    printf("  %-44s %8.2f min  < 7 min %s\n", "bf16", b, mark(b < 7));
    printf("  (the seed's TPU run: about 14 minutes)\n\n");
}

/* ---- the PyTorch reference, alternating with gpt's default ---- */

static double torch_ms(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 bench/torch_ref.py --steps %d --data '%s' 2>/dev/null",
             quick ? 30 : 120, data_path);
    FILE *p = popen(cmd, "r");
    double ms = -1;
    char line[256];
    while (p && fgets(line, sizeof line, p))
        if (strstr(line, "ms/step"))
            ms = atof(line);
    if (p)
        pclose(p);
    return ms;
}

static void torch_table(void)
{
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("PyTorch reference: skipped (python3-torch is not importable)\n\n");
        return;
    }
    struct variant v = {.name = "gpt", .lazy = 1, .cores = 1, .threads = nthreads, .embed = 32};
    variant_setup(&v);
    variant_run(&v, 3);
    int rounds = quick ? 1 : 3;
    double t[8], g[8];
    for (int r = 0; r < rounds; r++) {
        t[r] = torch_ms();
        g[r] = variant_run(&v, quick ? 10 : 60);
    }
    double tm = median(t, rounds), gm = median(g, rounds);
    printf("PyTorch reference (bench/torch_ref.py, %d threads) vs gpt xla 1 core fp32\n",
           nthreads);
    printf("  %-44s %8.2f ms/step\n", "PyTorch", tm);
    printf("  %-44s %8.2f ms/step  (%.1fx faster)\n\n", "gpt", gm, tm / gm);
    variant_free(&v);
}

/* ---- scaling with the width ---- */

static void scaling_table(void)
{
    enum { NW = 3 };
    struct variant v[NW];
    memset(v, 0, sizeof v);
    for (int i = 0; i < NW; i++)
        v[i] = (struct variant){.name = "scale", .lazy = 1, .cores = 1, .threads = nthreads,
                                .embed = 64 << i};
    run_alternating(v, NW, quick ? 1 : 3, quick ? 3 : 10);
    printf("scaling (xla, 1 core, fp32, %d threads; mlp = 2 x embed, 4 heads, 4 layers)\n",
           nthreads);
    printf("  %-10s %10s %10s %6s\n", "embed", "GFLOP/step", "ms/step", "MFU");
    for (int i = 0; i < NW; i++) {
        Config c = config_of(v[i].embed);
        double ms = variant_median(&v[i]), fl = step_flops(&c);
        printf("  %-10d %10.3f %10.2f %5.0f%%\n", v[i].embed, fl * 1e-9, ms,
               100 * fl / (ms * 1e-3) * 1e-9 / peakn);
        variant_free(&v[i]);
    }
    printf("\n");
}

static void header(void)
{
    char model[256] = "unknown CPU", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            snprintf(model, sizeof model, "%s", c ? c + 2 : line);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f)
        fclose(f);
    printf("gpt bench%s: %s, %d threads, kernels %s, bf16 %s\n", quick ? " --quick" : "", model,
           nthreads, isa_name(isa_get()), bf16_native() ? "vdpbf16ps" : "emulated");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data_path = argv[++i];
        else {
            fprintf(stderr, "usage: bench/bench [--quick] [--data FILE]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows when piped to a file */
    nthreads = omp_get_max_threads();
    header();
    measure_peaks();
    kernel_table();
    load_text();
    double fp32_ms, bf16_ms, eval_ms, gen_ms;
    step_table(&fp32_ms, &bf16_ms);
    eval_table(&eval_ms, &gen_ms);
    projection(fp32_ms, bf16_ms, eval_ms, gen_ms);
    torch_table();
    scaling_table();
    omp_set_num_threads(nthreads);
    free(text);
    return 0;
}
