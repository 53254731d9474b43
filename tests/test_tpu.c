/* tests/test_tpu.c: simulated TPU cores and bf16. Data parallel training
 * gives the same bits for 1, 2, 4 and 8 cores and 1 or 2 threads, with
 * identical replicas and the same loss every step, and a run that changes
 * its core count between steps (as the busy machine's trial lends a board)
 * does too; bf16 modes do what they say and keep the devices and layouts
 * in agreement. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "util/rng.h"
#include "safetensors/safetensors.h"
#include "gpt.h"
#include "test.h"

static const Config cfg = {.vocab = VOCAB, .context = 32, .embed = 32, .mlp = 64, .heads = 4, .layers = 2};

static void fill(Batch *b, uint64_t seed)
{
    Rng r;
    rng_seed(&r, seed, 11);
    for (int i = 0; i < b->B * b->T; i++)
        b->tok[i] = 32 + (int)(rng_next(&r) % 90);
    batch_finish(b);
}

enum { STEPS = 6 };

/* Trains STEPS steps of a fresh model, step s on cores[s] cores (0: the
 * eager cpu device, for every step), in the given precision; each step's
 * loss into loss[]. m is left for the caller to inspect. */
static float train_on(Model *m, const int cores[STEPS], int prec, float loss[STEPS])
{
    model_init(m, &cfg, 21);
    Graph *g = g_new();
    g_set_lazy(g, cores[0] > 0);
    g_set_precision(g, prec);
    Batch b;
    batch_alloc(&b, 8, 32);
    for (int s = 0; s < STEPS; s++) {
        if (s == 0 || cores[s] != cores[s - 1])
            model_set_cores(m, cores[s] > 0 ? cores[s] : 1);
        fill(&b, (uint64_t)s);
        loss[s] = model_train_step(m, g, &b, 3e-3f);
    }
    batch_free(&b);
    g_free(g);
    return loss[STEPS - 1];
}

/* The same on `cores` cores throughout. */
static float train(Model *m, int cores, int prec, float loss[STEPS])
{
    const int on[STEPS] = {cores, cores, cores, cores, cores, cores};
    return train_on(m, on, prec, loss);
}

/* The first step whose loss differs from want's, or -1. */
static int first_other(const float got[STEPS], const float want[STEPS])
{
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&got[s], &want[s], sizeof *got))
            return s;
    return -1;
}

static int same_state(const Model *a, const Model *b, int core)
{
    size_t n = a->nw * sizeof(float);
    return !memcmp(a->w, model_replica(b, core, REPLICA_W), n) &&
           !memcmp(a->m, model_replica(b, core, REPLICA_M), n) &&
           !memcmp(a->v, model_replica(b, core, REPLICA_V), n);
}

/* One precision: the eager device on one core is the reference; every
 * core count and thread count must reproduce it, on every replica. */
static void check_layouts(int prec, const char *name)
{
    Model ref;
    float want[STEPS], got[STEPS];
    train(&ref, 0, prec, want);
    int keep = omp_get_max_threads();
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (int cores = 1; cores <= 8; cores *= 2) {
            Model m;
            train(&m, cores, prec, got);
            int same = 1;
            for (int c = 0; c < cores; c++)
                same &= same_state(&ref, &m, c);
            CHECK(same, "%s: %d cores, %d threads: weights or replicas differ from one core",
                  name, cores, threads);
            int s = first_other(got, want);
            CHECK(s < 0, "%s: %d cores, %d threads: step %d's loss %.9g, one core's %.9g", name,
                  cores, threads, s, got[s < 0 ? 0 : s], want[s < 0 ? 0 : s]);
            model_free(&m);
        }
    }
    omp_set_num_threads(keep);
    model_free(&ref);
}

/* One core's run lent a board of 8 for two steps and given back (cmd/
 * train.c's lend_board): the losses and the weights of one core
 * throughout. */
static void check_lent_board(int prec, const char *name)
{
    static const int one[STEPS] = {1, 1, 1, 1, 1, 1}, lent[STEPS] = {1, 1, 8, 8, 1, 1};
    Model ref, m;
    float want[STEPS], got[STEPS];
    train_on(&ref, one, prec, want);
    train_on(&m, lent, prec, got);
    int s = first_other(got, want);
    CHECK(same_state(&ref, &m, 0) && s < 0, "%s: a board of 8 lent for steps 2-3: the weights "
          "differ from one core's, or step %d's loss", name, s);
    model_free(&ref);
    model_free(&m);
}

/* The replicated program: one all-reduce per gradient and the loss, one
 * compile for all steps, and the all-reduce metrics move. */
static void check_program(void)
{
    long u0 = xs_counter(C_UNCACHED), ar0 = xs_counter(C_ALL_REDUCE);
    long rep0 = xs_metric_samples(M_EXECUTE_REPLICATED);
    Model m;
    const int four[STEPS] = {4, 4, 4, 4, 4, 4};
    float loss[STEPS];
    train_on(&m, four, PREC_FP32, loss);
    long ar = xs_counter(C_ALL_REDUCE) - ar0;
    CHECK(xs_counter(C_UNCACHED) - u0 == 1, "%d steps on 4 cores: %ld compiles", STEPS,
          xs_counter(C_UNCACHED) - u0);
    CHECK(ar == (long)STEPS * (m.np + 1), "%d steps: %ld all-reduces, want %d", STEPS, ar,
          STEPS * (m.np + 1));
    CHECK(xs_metric_samples(M_EXECUTE_REPLICATED) - rep0 == STEPS, "ExecuteReplicatedTime has "
          "%ld samples for %d steps", xs_metric_samples(M_EXECUTE_REPLICATED) - rep0, STEPS);
    model_free(&m);
}

static int all_bf16(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if (u & 0xffff)
            return 0;
    }
    return 1;
}

/* bf16 keeps fp32 master weights and state; bf16-pure stores them as
 * bf16. Both stay near fp32 over a few steps, and neither equals it. */
static void check_precisions(void)
{
    Model f, h, p;
    float loss[STEPS];
    float lf = train(&f, 1, PREC_FP32, loss);
    float lh = train(&h, 1, PREC_BF16, loss);
    float lp = train(&p, 1, PREC_BF16_PURE, loss);
    CHECK(!all_bf16(h.w, h.nw) && all_bf16(p.w, p.nw) && all_bf16(p.m, p.nw) &&
              all_bf16(p.v, p.nw), "bf16 must keep fp32 weights, bf16-pure bf16 ones");
    CHECK(memcmp(f.w, h.w, f.nw * 4) && memcmp(f.w, p.w, f.nw * 4),
          "bf16 modes left the weights as fp32 computes them");
    CHECK(fabsf(lh - lf) < 0.05f && fabsf(lp - lf) < 0.1f,
          "losses after 6 steps: fp32 %g, bf16 %g, bf16-pure %g", lf, lh, lp);
    model_free(&f);
    model_free(&h);
    model_free(&p);
}

void test_tpu(void)
{
    check_layouts(PREC_FP32, "fp32");
    check_layouts(PREC_BF16, "bf16");
    check_layouts(PREC_BF16_PURE, "bf16-pure");
    check_lent_board(PREC_FP32, "fp32");
    check_lent_board(PREC_BF16, "bf16");
    check_program();
    check_precisions();
}
