/* tests/test_remat.c: rematerialization (--remat). Recomputing each
 * block's forward in the backward pass gives the same bits as keeping its
 * values (one core, eight, dropout, gradient accumulation, bf16-pure, and
 * through the command line and its checkpoints), and the memory plan's
 * arena shrinks: by a hand-counted lower bound, and only while CSE's
 * barrier keeps the recompute apart from the forward. A program over
 * --hbm says whether --remat would fit. */
#include <stdlib.h>
#include <string.h>
#include "util/rng.h"
#include "gpt.h"
#include "test.h"

static void fill(Batch *b, uint64_t seed)
{
    Rng r;
    rng_seed(&r, seed, 13);
    for (int i = 0; i < b->B * b->T; i++)
        b->tok[i] = 32 + (int)(rng_next(&r) % 90);
    batch_finish(b);
}

/* One way to train: the model, cores, micro-batches and precision. */
struct way {
    Config c;
    int cores, accum, prec, B, T, steps;
};

/* Trains w's steps on the lazy device, remat on or off; m is the caller's,
 * g too (for its compile statistics), each fresh. */
static void train(Model *m, Graph *g, const struct way *w, int remat)
{
    model_init(m, &w->c, 31);
    g_set_lazy(g, 1);
    g_set_precision(g, w->prec);
    g_set_remat(g, remat);
    model_set_cores(m, w->cores);
    model_set_accum(m, w->accum);
    Batch b;
    batch_alloc(&b, w->B * w->accum, w->T);
    for (int s = 0; s < w->steps; s++) {
        fill(&b, (uint64_t)s);
        model_train_step(m, g, &b, 3e-3f);
    }
    batch_free(&b);
}

/* Weights and both Adam moments, on every core's replica. */
static int same_state(const Model *a, const Model *b)
{
    size_t n = a->nw * sizeof(float);
    int same = a->t == b->t;
    for (int c = 0; c < a->ncores; c++)
        for (int k = REPLICA_W; k <= REPLICA_V; k++)
            same &= !memcmp(model_replica(a, c, k), model_replica(b, c, k), n);
    return same;
}

static void check_same_bits(const char *name, const struct way *w)
{
    Model a, b;
    Graph *ga = g_new(), *gb = g_new();
    train(&a, ga, w, 0);
    train(&b, gb, w, 1);
    CHECK(same_state(&a, &b), "%s: --remat changed the weights or Adam state", name);
    g_free(ga);
    g_free(gb);
    model_free(&a);
    model_free(&b);
}

#define SMALL_CFG {.vocab = VOCAB, .context = 32, .embed = 32, .mlp = 64, .heads = 4, .layers = 3}

static void check_bits(void)
{
    struct way one = {.c = SMALL_CFG, .cores = 1, .accum = 1, .B = 4, .T = 32, .steps = 3};
    check_same_bits("1 core", &one);
    struct way eight = one;
    eight.cores = 8;
    eight.B = 8;
    check_same_bits("8 cores", &eight);
    struct way drop = one;
    drop.c.dropout = 0.2f;
    check_same_bits("dropout 0.2", &drop);
    struct way accum = one;
    accum.accum = 2;
    accum.cores = 2;
    accum.c.dropout = 0.2f;
    check_same_bits("2 cores, grad-accum 2, dropout 0.2", &accum);
    struct way pure = one;
    pure.prec = PREC_BF16_PURE;
    pure.c.activation = 1; /* GELU: its backward reads its input */
    check_same_bits("bf16-pure, gelu", &pure);
}


/* The default model's shape at --layers 4 --embed 64 --context 128: one
 * training step's program, remat off and on. Without remat each block
 * keeps for its backward pass at least qkv [n,3C] (attention's backward
 * reads it) and the MLP's hidden values [n,M] (the ReLU's backward and
 * the second matmul's weight gradient read them); with remat only the
 * block being recomputed has them, so the arena drops by at least
 * (L-1) n (3C+M) 4 bytes, n = B T rows. */
static void check_plan(void)
{
    struct way w = {.c = {.vocab = VOCAB, .context = 128, .embed = 64, .mlp = 256, .heads = 4,
                          .layers = 4},
                    .cores = 1, .accum = 1, .B = 2, .T = 128, .steps = 1};
    struct compile_stats plain, remat;
    Model a, b;
    Graph *ga = g_new(), *gb = g_new();
    train(&a, ga, &w, 0);
    g_compile_stats(ga, &plain);
    int att_plain = g_kernel_count(ga, KOP_ATTENTION);
    train(&b, gb, &w, 1);
    g_compile_stats(gb, &remat);
    int att_remat = g_kernel_count(gb, KOP_ATTENTION);
    long n = (long)w.B * w.T, L = w.c.layers, C = w.c.embed, M = w.c.mlp;
    long bound = (L - 1) * n * (3 * C + M) * 4;
    CHECK(remat.arena + (size_t)bound <= plain.arena, "--remat's arena %zu is not at least %ld "
          "bytes below the plain arena %zu", remat.arena, bound, plain.arena);
    /* the barrier: CSE would merge every recomputed attention back into
     * the forward's, leaving L kernels and the plain arena */
    CHECK(att_plain == L && att_remat == 2 * L, "attention kernels: %d plain, %d with --remat; "
          "want %ld and %ld (the recompute merged away?)", att_plain, att_remat, L, 2 * L);
    /* the estimate the --hbm error gives, against the plan it estimates */
    double err = ((double)plain.remat_arena - (double)remat.arena) / (double)remat.arena;
    CHECK(plain.remat_arena > 0 && err > -0.25 && err < 0.25, "the plain plan estimates %zu "
          "bytes with --remat; its plan has %zu", plain.remat_arena, remat.arena);
    CHECK(remat.remat_arena == 0, "a remat program estimated remat again: %zu",
          remat.remat_arena);
    g_free(ga);
    g_free(gb);
    model_free(&a);
    model_free(&b);
}

/* On 2 cores at one window a core the update keeps every gradient and
 * its all-reduced twin alive at once (the all-reduces are one
 * collective): a floor remat does not lower. The --hbm refusal's
 * estimate must see it: within 25% of the remat plan's arena. */
static void check_estimate_cores(void)
{
    struct way w = {.c = {.vocab = VOCAB, .context = 128, .embed = 64, .mlp = 256, .heads = 4,
                          .layers = 4},
                    .cores = 2, .accum = 1, .B = 2, .T = 128, .steps = 1};
    struct compile_stats plain, remat;
    Model a, b;
    Graph *ga = g_new(), *gb = g_new();
    train(&a, ga, &w, 0);
    g_compile_stats(ga, &plain);
    train(&b, gb, &w, 1);
    g_compile_stats(gb, &remat);
    double err = ((double)plain.remat_arena - (double)remat.arena) / (double)remat.arena;
    CHECK(plain.remat_arena > 0 && err > -0.25 && err < 0.25, "2 cores: the plain plan "
          "estimates %zu bytes with --remat; its plan has %zu", plain.remat_arena, remat.arena);
    g_free(ga);
    g_free(gb);
    model_free(&a);
    model_free(&b);
}

/* A remat program is another program: turning remat on compiles anew,
 * and the next step finds it in the cache. */
static void check_cache(void)
{
    struct way w = {.c = SMALL_CFG, .cores = 1, .accum = 1, .B = 4, .T = 32, .steps = 1};
    Model m;
    Graph *g = g_new();
    train(&m, g, &w, 0);
    Batch b;
    batch_alloc(&b, 4, 32);
    fill(&b, 7);
    long u0 = xs_counter(C_UNCACHED), c0 = xs_counter(C_CACHED);
    g_set_remat(g, 1);
    model_train_step(&m, g, &b, 3e-3f);
    model_train_step(&m, g, &b, 3e-3f);
    CHECK(xs_counter(C_UNCACHED) - u0 == 1 && xs_counter(C_CACHED) - c0 == 1, "plain, then two "
          "remat steps: %ld compiles and %ld hits after the first, want 1 and 1",
          xs_counter(C_UNCACHED) - u0, xs_counter(C_CACHED) - c0);
    batch_free(&b);
    g_free(g);
    model_free(&m);
}

#define RUN "./gpt train --data tests/tmp/remat.txt --embed 32 --heads 2 --layers 2 " \
            "--context 32 --seq 32 --eval-every 100 --eval-bytes 0 --final-bytes 0 --live off "
#define CK(dir, step) "tests/tmp/" dir "/ckpt-0000000" #step ".safetensors"

/* The command line: the same checkpoints with and without --remat, on
 * one core, at the default model's flags, and on a v3-8 with dropout and
 * gradient accumulation; a run
 * saved with --remat resumes without it, and one saved without resumes
 * with it; --remat in a --config file; the cpu device refuses it. */
static void check_cli(void)
{
    char out[65536];
    t_run("mkdir -p tests/tmp", out, sizeof out); /* a fresh tree has none */
    t_write_words("tests/tmp/remat.txt", 60000);
    int rc = t_run("rm -rf tests/tmp/rm-* && "
                   RUN "--batch 4 --steps 4 --out tests/tmp/rm-a && "
                   RUN "--batch 4 --steps 4 --out tests/tmp/rm-b --remat", out, sizeof out);
    CHECK(rc == 0 && t_same_tensors(CK("rm-a", 4), CK("rm-b", 4)),
          "one core: --remat changed the checkpoint (rc %d): %s", rc, out);
    rc = t_run("./gpt train --data tests/tmp/remat.txt --steps 2 --eval-batch 8 --live off "
               "--out tests/tmp/rm-def1 && ./gpt train --data tests/tmp/remat.txt --steps 2 "
               "--eval-batch 8 --live off --out tests/tmp/rm-def2 --remat", out, sizeof out);
    CHECK(rc == 0 && t_same_tensors(CK("rm-def1", 2), CK("rm-def2", 2)),
          "the default model: --remat changed the checkpoint (rc %d): %s", rc, out);
    rc = t_run(RUN "--batch 8 --steps 3 --tpu v3-8 --dropout 0.2 --grad-accum 2 "
               "--out tests/tmp/rm-c && "
               RUN "--batch 8 --steps 3 --tpu v3-8 --dropout 0.2 --grad-accum 2 "
               "--out tests/tmp/rm-d --remat", out, sizeof out);
    CHECK(rc == 0 && t_same_tensors(CK("rm-c", 3), CK("rm-d", 3)),
          "v3-8, dropout, grad-accum: --remat changed the checkpoint (rc %d): %s", rc, out);
    rc = t_run(RUN "--batch 4 --steps 2 --out tests/tmp/rm-e --remat && "
               "./gpt train --steps 4 --resume tests/tmp/rm-e --out tests/tmp/rm-e "
               "--data tests/tmp/remat.txt --live off && "
               "printf 'remat = true\\n' > tests/tmp/rm-remat.conf && "
               RUN "--batch 4 --steps 2 --out tests/tmp/rm-f && "
               "./gpt train --steps 4 --resume tests/tmp/rm-f --out tests/tmp/rm-f "
               "--data tests/tmp/remat.txt --live off --config tests/tmp/rm-remat.conf",
               out, sizeof out);
    CHECK(rc == 0 && t_same_tensors(CK("rm-a", 4), CK("rm-e", 4)) &&
              t_same_tensors(CK("rm-a", 4), CK("rm-f", 4)),
          "a resume across --remat (on, then off; off, then on from --config) changed the "
          "checkpoint (rc %d): %s", rc, out);
    t_expect_one_line(RUN "--steps 1 --out tests/tmp/rm-g --remat --device cpu", 2,
                      "--remat needs --device xla");
}

/* --hbm: a budget the plain program overflows and the remat one fits
 * says so, and --remat then runs; a budget neither fits says that too. */
static void check_hbm(void)
{
    char out[65536];
#define BIG RUN "--batch 8 --layers 8 --context 128 --seq 128 --embed 64 --steps 1 " \
            "--eval-batch 2 "
    int rc = t_run(BIG "--out tests/tmp/rm-h1 --hbm 12M", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "RESOURCE_EXHAUSTED") && strstr(out, "with --remat it would fit"),
          "--hbm 12M without --remat: want a refusal that says --remat fits (rc %d): %s", rc, out);
    rc = t_run(BIG "--out tests/tmp/rm-h2 --hbm 12M --remat", out, sizeof out);
    CHECK(rc == 0, "--hbm 12M with --remat: refused (rc %d): %s", rc, out);
    rc = t_run(BIG "--out tests/tmp/rm-h3 --hbm 3M", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "with --remat it would still not fit") &&
              strstr(out, "--grad-accum"),
          "--hbm 3M: want a refusal that says --remat does not fit either (rc %d): %s", rc, out);
    /* a lent core's program, an eighth of the batch, fits 12M: the board
     * the busy machine's trial would lend (lend_problem, as --redo asks
     * for it) is refused, so a busy machine refuses the run as an idle one */
    t_expect_one_line(BIG "--out tests/tmp/rm-h4 --hbm 12M --redo 3", 2,
                      "--hbm is a budget for one core's program, not a lent core's");
}

/* The arena --metrics reports for a run, in MiB (-1: no such line). */
static double reported_peak(const char *flags)
{
    char cmd[1024], out[65536];
    snprintf(cmd, sizeof cmd, RUN "--layers 4 --embed 64 --context 128 --seq 128 --batch 2 "
             "--steps 1 --eval-batch 2 --metrics %s", flags);
    const char *at = t_run(cmd, out, sizeof out) ? NULL : strstr(out, "memory plan: peak arena ");
    double mib = -1;
    if (at)
        sscanf(at, "memory plan: peak arena %lf", &mib);
    return mib;
}

/* --metrics shows the plan's peak: lower with --remat. */
static void check_metrics(void)
{
    double plain = reported_peak("--out tests/tmp/rm-m1"),
           remat = reported_peak("--out tests/tmp/rm-m2 --remat");
    CHECK(plain > 0 && remat > 0 && remat < plain, "--metrics' peak arena: %.2f MiB plain, "
          "%.2f MiB with --remat (-1: no line)", plain, remat);
    /* steps on a lent board (--redo, as a busy machine's trial lends it)
     * plan a lent core's eighth of the batch: no figure for the run's core */
    char out[65536];
    int rc = t_run(RUN "--batch 8 --steps 2 --metrics --redo 3 --out tests/tmp/rm-m3", out,
                   sizeof out);
    CHECK(rc == 0 && !strstr(out, "peak arena") &&
              strstr(out, "memory plan: every step ran on a board of 8 cores lent to the redo "
                          "team (1 of the batch's 8 windows a core)"),
          "--metrics on a lent board: want no peak arena, and why (rc %d): %s", rc, out);
}

void test_remat(void)
{
    check_bits();
    check_plan();
    check_estimate_cores();
    check_cache();
    check_cli();
    check_metrics();
    check_hbm();
}
