/* tests/test_numbers.c: the numbers a user sees, each held to a source of
 * its own: the sampler (temperature and top-k) against softmax computed in
 * float64, the learning-rate schedules against their closed forms. The
 * expected values come from libm (exp, cos) in double here, never from
 * the project's fm_ functions, and every random draw has a fixed seed.
 * Through the binary: the eval lines' test losses and windows, and every
 * byte of their continuations, of the final passage and of gpt sample,
 * against PyTorch's reference and a float64 sampler (tests/eval_check.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmd/sample.h"
#include "test.h"
#include "cmd/flags.h"
#include "cmd/schedule.h"
#include "gpt.h"
#include "util/rng.h"

#define DIR "tests/tmp/numbers"

/* ---- the sampler at the C level ---- */

/* The greedy byte, by the definition gpt.h gives: the first of the largest. */
static int first_largest(const float *l, int V)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

/* Whether top-k keeps logit i: fewer than k logits are strictly larger,
 * i.e. l[i] is at least the k-th largest (so ties with it are kept, as
 * gpt.h says). k 0 or k >= V keeps all. */
static int kept(const float *l, int V, int k, int i)
{
    if (k <= 0 || k >= V)
        return 1;
    int larger = 0;
    for (int j = 0; j < V; j++)
        larger += l[j] > l[i];
    return larger < k;
}

/* softmax(l / T) over the kept logits, in double with libm's exp. */
static void softmax_ref(const float *l, int V, double T, int k, double *q)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
        mx = fmax(mx, (double)l[i]);
    for (int i = 0; i < V; i++) {
        q[i] = kept(l, V, k, i) ? exp(((double)l[i] - mx) / T) : 0;
        sum += q[i];
    }
    for (int i = 0; i < V; i++)
        q[i] /= sum;
}

/* Random logits in [-4, 4): inputs only, nothing expected comes from here. */
static void random_logits(float *l, int V, Rng *r)
{
    for (int i = 0; i < V; i++)
        l[i] = 8 * rng_float(r) - 4;
}

/* --top-k 1 is greedy: on random rows (no ties) it draws the argmax at any
 * temperature, and temperature 0 is the argmax too. */
static void check_top1_is_greedy(void)
{
    static const float temps[] = {0.25f, 0.5f, 1, 2, 10};
    Rng in, draw;
    rng_seed(&in, 11, 0);
    rng_seed(&draw, 12, 0);
    int wrong = 0, wrong0 = 0;
    for (int row = 0; row < 2000; row++) {
        float l[MAX_VOCAB];
        int V = row % 2 ? VOCAB : MAX_VOCAB;
        random_logits(l, V, &in);
        int want = first_largest(l, V);
        SampleOpts greedy = {.temperature = 0, .top_k = 0};
        wrong0 += sample_byte(l, V, &greedy, &draw) != want;
        for (int t = 0; t < 5; t++) {
            SampleOpts o = {.temperature = temps[t], .top_k = 1};
            wrong += sample_byte(l, V, &o, &draw) != want;
        }
    }
    CHECK(wrong0 == 0, "temperature 0 missed the argmax on %d of 2000 rows", wrong0);
    CHECK(wrong == 0, "top-k 1 missed the argmax on %d of 10000 draws", wrong);
}

/* Distinct logits in [-1, 1), a multiple of 1/8 each (exact in float, so
 * that l / T for T a power of two is exact too), in a scrambled order. */
static void distinct_logits(float *l, int V)
{
    for (int i = 0; i < V; i++)
        l[i] = (float)((i * 37) % V) * 2.0f / V - 1; /* 37 is prime to V */
}

/* No byte outside the top k is ever drawn, and every byte inside is: many
 * draws at a high temperature (nearly uniform, so a wrongly kept byte would
 * show) at k = 1, 2, 5, V-1 (V-1 drops the smallest alone). */
static void check_only_top_k(void)
{
    enum { V = VOCAB, DRAWS = 40000 };
    static const int ks[] = {1, 2, 5, V - 1};
    float l[V];
    distinct_logits(l, V);
    Rng r;
    rng_seed(&r, 21, 0);
    for (int c = 0; c < 4; c++) {
        int k = ks[c], seen[V] = {0}, outside = 0, missed = 0;
        SampleOpts o = {.temperature = 64, .top_k = k};
        for (int d = 0; d < DRAWS; d++)
            seen[sample_byte(l, V, &o, &r)]++;
        for (int i = 0; i < V; i++) {
            outside += !kept(l, V, k, i) && seen[i];
            missed += kept(l, V, k, i) && !seen[i];
        }
        CHECK(outside == 0, "top-k %d drew %d bytes outside the top %d", k, outside, k);
        CHECK(missed == 0, "top-k %d never drew %d of the top %d in %d draws", k, missed, k,
              DRAWS);
    }
}

/* Ties with the k-th largest are kept (gpt.h), as nanoGPT keeps them: so
 * with tied largest logits --top-k 1 draws among them, while temperature 0
 * takes the first. */
static void check_ties(void)
{
    const float l[8] = {1, 3, 2, 3, 0, 2, 2, -1}; /* 3rd largest: 2, three times */
    const float top[4] = {0, 5, 5, 1};
    double p[8];
    SampleOpts o3 = {.temperature = 1, .top_k = 3};
    sample_weights(l, 8, &o3, p);
    int bad = 0;
    for (int i = 0; i < 8; i++)
        bad += (p[i] > 0) != (l[i] >= 2);
    CHECK(bad == 0, "top-k 3 with ties at the 3rd largest: %d bytes kept or dropped wrongly",
          bad);
    Rng r;
    rng_seed(&r, 31, 0);
    SampleOpts o1 = {.temperature = 1, .top_k = 1}, g = {.temperature = 0};
    int seen[4] = {0};
    for (int d = 0; d < 4000; d++)
        seen[sample_byte(top, 4, &o1, &r)]++;
    CHECK(seen[0] == 0 && seen[3] == 0 && seen[1] > 1800 && seen[2] > 1800,
          "top-k 1 over two tied largest: drew %d %d %d %d of 4000 (want about 0 2000 2000 0)",
          seen[0], seen[1], seen[2], seen[3]);
    CHECK(sample_byte(top, 4, &g, &r) == 1, "temperature 0 over two tied largest: not the first");
}

/* The sampler's weights, normalised, equal softmax(l / T) over the top k,
 * in double: within a few ulps where l / T is exact in float (T a power of
 * two, l on a 1/8 grid), within float's rounding of l / T otherwise. */
static void check_weights(void)
{
    static const float temps[] = {0.5f, 1, 2, 0.7f};
    static const int ks[] = {0, 5, 100};
    float l[VOCAB];
    distinct_logits(l, VOCAB);
    Rng in;
    rng_seed(&in, 41, 0);
    for (int row = 0; row < 2; row++) {
        if (row == 1)
            random_logits(l, VOCAB, &in); /* the first row is the grid */
        for (int t = 0; t < 4; t++)
            for (int c = 0; c < 3; c++) {
                SampleOpts o = {.temperature = temps[t], .top_k = ks[c]};
                double p[VOCAB], q[VOCAB], worst = 0;
                double sum = sample_weights(l, VOCAB, &o, p);
                softmax_ref(l, VOCAB, temps[t], ks[c], q);
                for (int i = 0; i < VOCAB; i++)
                    worst = fmax(worst, q[i] ? fabs(p[i] / sum / q[i] - 1) : p[i] != 0);
                double tol = row == 0 && t < 3 ? 1e-13 : 1e-5; /* float's l / T: 2^-24 x |l/T| */
                CHECK(worst <= tol, "%s logits, T %g, top-k %d: weights off softmax by %.3g "
                      "(relative; allowed %.0e)", row ? "random" : "grid", temps[t], ks[c],
                      worst, tol);
            }
    }
}

/* The draws follow softmax(l / T) over the top k: 100000 draws a case,
 * each byte's count within 5 standard deviations of N q (a false alarm
 * about once in 1.7 million a byte; the seeds are fixed, so it never
 * flickers), and a byte of q = 0 never drawn. */
static void check_frequencies(void)
{
    enum { V = 16, N = 100000 };
    static const float temps[] = {0.5f, 1, 2};
    float l[V];
    distinct_logits(l, V);
    Rng r;
    rng_seed(&r, 51, 0);
    for (int t = 0; t < 3; t++)
        for (int k = 0; k <= 5; k += 5) {
            SampleOpts o = {.temperature = temps[t], .top_k = k};
            double q[V], worst = 0;
            int n[V] = {0}, worst_i = 0;
            softmax_ref(l, V, temps[t], k, q);
            for (int d = 0; d < N; d++)
                n[sample_byte(l, V, &o, &r)]++;
            for (int i = 0; i < V; i++) {
                double sd = sqrt(N * q[i] * (1 - q[i]));
                double z = q[i] ? fabs(n[i] - N * q[i]) / sd : n[i] ? INFINITY : 0;
                if (z > worst)
                    worst = z, worst_i = i;
            }
            CHECK(worst <= 5, "T %g, top-k %d: byte %d drawn %d times of %d, softmax says "
                  "%.1f (%.1f sigma)", temps[t], k, worst_i, n[worst_i], N, N * q[worst_i],
                  worst);
        }
}

/* ---- the learning-rate schedules ---- */

static struct settings schedule(double lr, double min_lr, int warmup, int steps,
                                const char *decay)
{
    struct settings s = defaults;
    s.lr = lr, s.min_lr = min_lr, s.warmup = warmup, s.steps = steps, s.decay = decay;
    return s;
}

/* The schedule from its definition (README, flags.c): lr (step+1)/W over
 * the first W updates, then from lr at update W to min_lr at the last,
 * along half a cosine or a line. */
static double closed_form(const struct settings *s, int step)
{
    if (step < s->warmup)
        return s->lr * (step + 1) / s->warmup;
    int span = s->steps - 1 - s->warmup; /* updates from the peak to the last */
    if (!strcmp(s->decay, "none") || span <= 0)
        return s->lr;
    double x = (double)(step - s->warmup) / span;
    double shape = !strcmp(s->decay, "cosine") ? (1 + cos(M_PI * x)) / 2 : 1 - x;
    return s->min_lr + (s->lr - s->min_lr) * shape;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b) + 1e-18; }

static void expect_rate(const struct settings *s, int step, double want, const char *what)
{
    double got = rate_at(s, step);
    CHECK(near(got, want), "%s decay, warm-up %d of %d steps: %s (step %d) rate %.17g, want "
          "%.17g", s->decay, s->warmup, s->steps, what, step, got, want);
}

/* Chosen steps worked by hand: warm-up's ends, the peak, the midpoint and
 * end of a cosine, a quarter of a line. 111 steps with 10 of warm-up
 * leave 100 intervals from the peak (step 10) to the last (step 110). */
static void check_schedule_points(void)
{
    const double lr = 3e-3, lo = 2e-4;
    struct settings c = schedule(lr, lo, 10, 111, "cosine");
    expect_rate(&c, 0, lr / 10, "first warm-up step");
    expect_rate(&c, 4, lr / 2, "middle warm-up step");
    expect_rate(&c, 9, lr, "last warm-up step");
    expect_rate(&c, 10, lr, "first step after warm-up");
    expect_rate(&c, 60, (lr + lo) / 2, "cosine midpoint");
    expect_rate(&c, 35, lo + (lr - lo) * (2 + sqrt(2)) / 4, "cosine quarter"); /* cos(pi/4) */
    expect_rate(&c, 110, lo, "last step");
    struct settings li = schedule(lr, lo, 10, 111, "linear");
    expect_rate(&li, 35, lr - (lr - lo) / 4, "linear quarter");
    expect_rate(&li, 60, (lr + lo) / 2, "linear midpoint");
    expect_rate(&li, 110, lo, "last step");
    struct settings n = schedule(lr, lo, 10, 111, "none");
    expect_rate(&n, 0, lr / 10, "first warm-up step");
    for (int step = 10; step < 111; step += 25)
        expect_rate(&n, step, lr, "constant after warm-up");
    struct settings c0 = schedule(lr, lo, 0, 101, "cosine");
    expect_rate(&c0, 0, lr, "first step, no warm-up");
    expect_rate(&c0, 50, (lr + lo) / 2, "cosine midpoint, no warm-up");
    expect_rate(&c0, 100, lo, "last step, no warm-up");
}

/* steps - warmup <= 1: no decay to do (and no division by zero). */
static void check_schedule_edges(void)
{
    const double lr = 1e-3, lo = 1e-4;
    struct settings all = schedule(lr, lo, 5, 5, "cosine"); /* warm-up alone */
    for (int step = 0; step < 5; step++)
        expect_rate(&all, step, lr * (step + 1) / 5, "warm-up to the end");
    struct settings one = schedule(lr, lo, 5, 6, "linear"); /* one step after */
    expect_rate(&one, 5, lr, "the one step after warm-up");
    struct settings single = schedule(lr, lo, 0, 1, "cosine");
    expect_rate(&single, 0, lr, "a run of one step");
    struct settings two = schedule(lr, lo, 0, 2, "cosine");
    expect_rate(&two, 0, lr, "first of two steps");
    expect_rate(&two, 1, lo, "last of two steps");
}

/* Every step of several schedules against the closed form. */
static void check_schedule_everywhere(void)
{
    static const char *decays[] = {"cosine", "linear", "none"};
    static const int shapes[][2] = {{0, 50}, {7, 50}, {1, 3}, {49, 50}, {20, 21}};
    int bad = 0, checked = 0;
    for (int d = 0; d < 3; d++)
        for (int h = 0; h < 5; h++) {
            struct settings s = schedule(6e-4, 6e-5, shapes[h][0], shapes[h][1], decays[d]);
            for (int step = 0; step < s.steps; step++, checked++)
                if (!near(rate_at(&s, step), closed_form(&s, step))) {
                    if (!bad++)
                        fprintf(stderr, "  %s, warm-up %d of %d, step %d: %.17g, want %.17g\n",
                                s.decay, s.warmup, s.steps, step, rate_at(&s, step),
                                closed_form(&s, step));
                }
        }
    CHECK(bad == 0, "%d of %d scheduled rates off their closed form", bad, checked);
}

/* ---- through the binary ---- */

#define TINY "--embed 8 --heads 1 --layers 1 --mlp 16 --context 16 --seq 16 --batch 2 " \
             "--eval-every 1000 --final-bytes 0 --live off --data " DIR "/d.txt"

/* The rates dir's metrics.jsonl records for steps first.. against the
 * closed form of s: how many steps it has in order, from first; *bad,
 * how many rates are off. */
static int recorded_rates(const char *dir, const struct settings *s, int first, int *bad)
{
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *log = (char *)t_slurp(path, NULL);
    int seen = first;
    const char *key = "\"kind\":\"step\",\"step\":";
    for (char *line = log ? strtok(log, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char *step = strstr(line, key), *lr = strstr(line, "\"lr\":");
        if (!step || !lr)
            continue; /* the config line, eval lines */
        int n = atoi(step + strlen(key));
        double got = strtod(lr + strlen("\"lr\":"), NULL), want = closed_form(s, n);
        seen += n == seen;
        if (!(fabs(got - want) <= 1e-8 * want) && (*bad)++ < 3) /* printed with 9 digits */
            fprintf(stderr, "  %s step %d: recorded rate %.9g, want %.9g\n", dir, n, got, want);
    }
    int read = log != NULL;
    free(log);
    return read ? seen - first : -1;
}

/* The rates a run's metrics.jsonl records, step by step, against the closed
 * form: the trainer follows the schedule it was given; and so does a run
 * resumed from its checkpoint at step `resume_at` (in a directory of its
 * own), from that step on: the schedule does not start again. */
static void check_recorded_rates(const char *decay, int steps, int warmup, int resume_at)
{
    char cmd[1024], out[65536], dir[128], again[128];
    snprintf(dir, sizeof dir, DIR "/%s", decay);
    snprintf(again, sizeof again, DIR "/%s-resumed", decay);
    snprintf(cmd, sizeof cmd, "./gpt train " TINY " --steps %d --warmup %d --decay %s "
             "--lr 2e-3 --min-lr 3e-4 --ckpt-every %d --keep 100 --out %s", steps, warmup, decay,
             resume_at, dir);
    int rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 0, "'%s' exited %d: %s", cmd, rc, out);
    struct settings s = schedule(2e-3, 3e-4, warmup, steps, decay);
    int bad = 0, seen = recorded_rates(dir, &s, 0, &bad);
    CHECK(seen == steps && bad == 0, "%s: %s/metrics.jsonl had %d of %d steps in order, %d "
          "rates off the closed form", decay, dir, seen, steps, bad);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/ckpt-%08d.safetensors %s/ && ./gpt train "
             "--resume --steps %d --data " DIR "/d.txt --out %s", again, dir, resume_at, again,
             steps, again);
    rc = t_run(cmd, out, sizeof out);
    bad = 0;
    seen = recorded_rates(again, &s, resume_at, &bad);
    CHECK(rc == 0 && seen == steps - resume_at && bad == 0, "%s resumed at step %d: rc %d, "
          "%s/metrics.jsonl had %d of %d steps in order, %d rates off the closed form: %s",
          decay, resume_at, rc, again, seen, steps - resume_at, bad, rc ? out : "");
}

/* --top-k 1 prints what temperature 0 prints, at any temperature and seed,
 * one passage or several at once. */
static void check_cli_top1(void)
{
    static const char *runs[] = {"--temperature 0.5 --seed 1", "--temperature 1 --seed 2",
                                 "--temperature 3 --seed 3"};
    const char *base = "./gpt sample --ckpt " DIR "/cosine --prompt 'the ' --bytes 80 ";
    char cmd[1024], greedy[8192], out[8192];
    snprintf(cmd, sizeof cmd, "%s--temperature 0", base);
    int rc = t_run(cmd, greedy, sizeof greedy);
    CHECK(rc == 0 && strlen(greedy) >= 80, "'%s' exited %d: %s", cmd, rc, greedy);
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s--top-k 1 %s", base, runs[i]);
        rc = t_run(cmd, out, sizeof out);
        CHECK(rc == 0 && !strcmp(out, greedy), "'%s' is not greedy:\n%s\nwant\n%s", cmd, out,
              greedy);
    }
    /* Several passages: each one is the greedy text. */
    snprintf(cmd, sizeof cmd, "%s--top-k 1 --temperature 2 --num-samples 3", base);
    rc = t_run(cmd, out, sizeof out);
    int copies = 0;
    for (char *at = out; (at = strstr(at, greedy)); at++)
        copies++;
    CHECK(rc == 0 && copies == 3, "'%s': %d passages of the 3 are greedy:\n%s", cmd, copies, out);
}

/* A short run whose every eval line tests/eval_check.py can redo: 7 eval
 * windows go through the model 3 at a time (--batch), so in chunks of 3,
 * 3 and 1 padded to 3; a checkpoint after every step holds the weights
 * the eval of the step before saw (the eval at step s follows update s);
 * the continuations (40 bytes), the final passage (80) and the passages of
 * gpt sample (100, 90) outrun the context of 32, so the window slides. */
#define PT DIR "/pt"
#define PT_CKPT PT "/ckpt-00000005.safetensors"
#define PT_TRAIN "./gpt train --embed 16 --heads 2 --layers 2 --mlp 32 --context 32 --seq 24 " \
                 "--batch 3 --eval-batch 7 --eval-every 2 --steps 5 --ckpt-every 1 --keep 5 " \
                 "--eval-bytes 40 --final-bytes 80 --live off --log-eval-windows --data " \
                 DIR "/d.txt --out " PT
#define PT_SAMPLE_1 "--ckpt " PT_CKPT " --seed 5 --temperature 0.8 --top-k 40 --bytes 100 " \
                    "--prompt 'Holmes '"
#define PT_SAMPLE_2 "--ckpt " PT_CKPT " --seed 7 --temperature 1.3 --top-k 0 --bytes 90 " \
                    "--num-samples 2 --prompt 'the cat '"
#define PT_CHECK "/usr/bin/python3 tests/eval_check.py --run " PT " --data " DIR "/d.txt " \
                 "--train-output " PT ".out --final-bytes 80 --sample " PT "-s1.out \"" \
                 PT_SAMPLE_1 "\" --sample " PT "-s2.out \"" PT_SAMPLE_2 "\""
enum { PT_OKS = 27 }; /* eval_check.py's checks: 1, 6 an eval, 2 + 2 + 4 for the passages */

/* The eval lines, the final passage and gpt sample against PyTorch: each
 * of eval_check.py's checks is one here, its FAIL line the message. */
static void check_against_pytorch(void)
{
    static char out[1 << 16];
    if (t_run("/usr/bin/python3 -c 'import torch'", out, sizeof out) != 0) {
        SKIP_MISSING("python3-torch", "the eval lines, the final passage and gpt sample not "
                     "held to PyTorch's reference: no torch for /usr/bin/python3");
        return;
    }
    char *plain = (char *)t_slurp(DIR "/cosine/metrics.jsonl", NULL); /* a run without the flag */
    CHECK(plain && strstr(plain, "\"kind\":\"eval\"") && !strstr(plain, "\"windows\""),
          DIR "/cosine/metrics.jsonl, of a run without --log-eval-windows: no eval logged, or "
          "one with windows");
    free(plain);
    static const char *const runs[] = {
        PT_TRAIN " > " PT ".out",
        "./gpt sample " PT_SAMPLE_1 " > " PT "-s1.out",
        "./gpt sample " PT_SAMPLE_2 " > " PT "-s2.out",
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int rc = t_run(runs[i], out, sizeof out);
        CHECK(rc == 0, "'%s' exited %d: %s", runs[i], rc, out);
        if (rc)
            return;
    }
    int rc = t_run(PT_CHECK, out, sizeof out), oks = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "ok: ", 4))
            CHECK(++oks, "%s", line);
        else if (!strncmp(line, "accepted: ", 10)) /* fp32 rounding's choice: said, not failed */
            fprintf(stderr, "numbers: eval_check.py: %s\n", line);
        else if (strncmp(line, "note: ", 6))
            CHECK(0, "eval_check.py: %s", line);
    }
    CHECK(rc == 0 && oks == PT_OKS, "'%s' exited %d after %d of %d checks", PT_CHECK, rc, oks,
          PT_OKS);
}

static void check_cli(void)
{
    char out[4096];
    t_run("rm -rf " DIR " && mkdir -p " DIR, out, sizeof out);
    t_write_words(DIR "/d.txt", 20000);
    check_recorded_rates("cosine", 14, 3, 2);
    check_recorded_rates("linear", 9, 0, 5);
    check_cli_top1();
    check_against_pytorch();
}

void test_numbers(void)
{
    check_top1_is_greedy();
    check_only_top_k();
    check_ties();
    check_weights();
    check_frequencies();
    check_schedule_points();
    check_schedule_edges();
    check_schedule_everywhere();
    check_cli();
}
