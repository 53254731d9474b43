/* tests/test_progress.c: gpt eval in chunks, and the progress lines of
 * long work. gpt eval's loss over a test split (eval_split) is the mean
 * of its windows scored one at a time, and has the same bits whatever its
 * chunk; by default a chunk is the checkpoint's training batch, so an
 * eval fits wherever a training step fits (the simulated core's --hbm
 * says so); a compile tells a person at a terminal which stage it is in,
 * clears its line when done, and leaves a line saying how long it took;
 * and the live line's ms/step and tok/s, and the run log's rates, are
 * what the run log's step times say, in a resumed run too. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmd/ckpt.h"
#include "cmd/evaluate.h"
#include "compiler/compiler.h"
#include "data/text.h"
#include "graph.h"
#include "util/rng.h"
#include "xla_sim.h"
#include "test.h"

#define TMP "tests/tmp/prog"
/* A shape whose activations outweigh its weights and logits, so that the
 * HBM an eval needs grows with the windows of a forward pass. */
#define SHAPE "--embed 64 --mlp 256 --heads 2 --layers 2 --context 32 --seq 32 --batch 4 " \
              "--eval-every 5 --final-bytes 16 --steps 2 --data " TMP "/d.txt"
/* A training step of SHAPE fits in it; a forward pass of 64 windows does not. */
#define HBM "--hbm 3M"

/* ---- capturing stderr in this process ---- */

static int saved_fd = -1;

static void capture_stderr(const char *path)
{
    fflush(stderr);
    saved_fd = dup(STDERR_FILENO);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    close(fd);
}

static char *release_stderr(const char *path)
{
    fflush(stderr);
    dup2(saved_fd, STDERR_FILENO);
    close(saved_fd);
    return (char *)t_slurp(path, NULL);
}

/* ---- eval_split: the bits do not depend on the chunk ---- */

/* The test split's mean loss from its definition: every whole window of
 * T bytes from n_train on, each scored alone (batch_loss of one window,
 * the mean of its T-1 targets), averaged in float64. No batches, no
 * padding: what eval_split must give within float rounding. */
static double split_loss_by_window(Model *m, Graph *g, const Data *d, int T, long *windows)
{
    Batch one;
    batch_alloc(&one, 1, T);
    double sum = 0;
    long n = 0;
    for (size_t at = d->n_train; at + (size_t)T <= d->n; at += (size_t)T, n++) {
        for (int t = 0; t < T; t++)
            one.tok[t] = d->bytes[at + (size_t)t];
        batch_finish(&one);
        sum += batch_loss(m, g, &one);
    }
    batch_free(&one);
    *windows = n;
    return sum / (double)n;
}

/* A test split of 10 windows of 13 bytes (and 5 left over), in batches of
 * 7: a full batch and a padded one. Chunks of 7 are today's one forward
 * pass a batch (batch_loss); 3 and 1 leave padded last chunks, 0 and 40
 * mean the whole batch. Every one, on both devices, gives the cpu
 * device's bits of the whole batch. */
static void check_split_bits(void)
{
    Config c = {.vocab = VOCAB, .context = 13, .embed = 24, .mlp = 40, .heads = 3, .layers = 2};
    Model m;
    model_init(&m, &c, 7);
    Data d = {.n = 200 + 10 * 13 + 5, .n_train = 200};
    d.bytes = malloc(d.n);
    Rng r;
    rng_seed(&r, 9, 1);
    for (size_t i = 0; i < d.n; i++)
        d.bytes[i] = (unsigned char)rng_below(&r, VOCAB);
    Graph *cpu = g_new(), *xla = g_new();
    g_set_lazy(xla, 1);
    long windows = 0, w;
    double whole = eval_split(&m, cpu, &d, 7, 7, &windows, NULL);
    CHECK(windows == 10, "eval_split counted %ld windows of 13 in 135 bytes, want 10", windows);
    /* the padded batch's 4 rows of zeros count for nothing, and its 3
     * windows weigh 3 of 10: the mean of the 10 windows scored one by one */
    long alone_n;
    double alone = split_loss_by_window(&m, cpu, &d, c.context, &alone_n);
    CHECK(alone_n == 10 && fabs(whole - alone) <= 1e-6 * alone, "eval_split's loss %.9f over "
          "10 windows in batches of 7; the windows one at a time give %.9f (%ld windows)", whole,
          alone, alone_n);
    static const int chunks[] = {3, 1, 0, 40, 7};
    for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) {
        double eager = eval_split(&m, cpu, &d, 7, chunks[k], &w, NULL);
        double lazy = eval_split(&m, xla, &d, 7, chunks[k], &w, NULL);
        CHECK(!memcmp(&eager, &whole, sizeof whole) && !memcmp(&lazy, &whole, sizeof whole),
              "eval_split in chunks of %d: cpu %a, xla %a; one pass a batch %a", chunks[k],
              eager, lazy, whole);
    }
    /* the progress line counts the windows of the whole split: batch 2's
     * ticks start where batch 1's ended, and the line is cleared */
    struct eval_progress p = {.on = 1, .t0 = now_seconds() - 10};
    capture_stderr(TMP "/tick.txt");
    eval_split(&m, cpu, &d, 7, 3, &w, &p);
    eval_progress_clear(&p);
    char *said = release_stderr(TMP "/tick.txt");
    size_t n = said ? strlen(said) : 0;
    CHECK(said && strstr(said, "\r\033[Keval 3/10 windows") && strstr(said, "eval 7/10 windows")
              && strstr(said, "eval 10/10 windows") && n >= 4 && !strcmp(said + n - 4, "\r\033[K"),
          "eval progress of 10 windows in batches of 7, chunks of 3: '%s'", said ? said : "");
    free(said);
    g_free(cpu);
    g_free(xla);
    free(d.bytes);
    model_free(&m);
}

/* ---- gpt eval: chunks of the training batch by default ---- */

static const char *loss_line(const char *out)
{
    const char *at = strstr(out, "loss ");
    return at ? at : "";
}

/* gpt eval's loss line against the test split of `data` scored window by
 * window (split_loss_by_window) with the checkpoint's weights loaded here:
 * 0 when they agree within float rounding and count the same windows. */
static int eval_line_matches(const char *line, const char *ckpt, const char *data, char *why,
                             size_t n)
{
    StFile f;
    Config c;
    Model m;
    Data d;
    double said;
    long windows, said_windows;
    char err[256];
    if (sscanf(line, "loss %lf bpb %*f (%ld windows", &said, &said_windows) != 2 ||
        st_load(&f, ckpt, err, sizeof err)) {
        snprintf(why, n, "no loss line, or %s does not load", ckpt);
        return -1;
    }
    if (ckpt_config(&f, &c, 0)) {
        st_free(&f);
        snprintf(why, n, "%s describes no model", ckpt);
        return -1;
    }
    model_init(&m, &c, 0);
    ckpt_load_weights(&m, &f, 0, err, sizeof err);
    st_free(&f);
    load_data(&d, data, c.context, c.vocab, 1);
    Graph *g = g_new();
    double want = split_loss_by_window(&m, g, &d, c.context, &windows);
    g_free(g);
    free(d.bytes);
    model_free(&m);
    snprintf(why, n, "the windows one at a time: loss %.6f over %ld windows", want, windows);
    return !(fabs(said - want) <= 1e-5 * want + 1e-6 && said_windows == windows);
}

/* A checkpoint trained at --batch 4 under HBM: its eval of 64 windows a
 * batch fits there too, in chunks of 4; in one chunk of 64 it does not
 * (the core's check refuses the program). The loss line is the same
 * whatever the chunk. */
static void check_eval_fits(void)
{
    char out[8192], ref[8192];
    t_write_words(TMP "/d.txt", 39000);
    int rc = t_run("./gpt train " SHAPE " " HBM " --eval-batch 64 --live off --out " TMP "/run",
                   out, sizeof out);
    CHECK(rc == 0, "a training run at " HBM " failed (%d): %s", rc, out);
    rc = t_run("./gpt eval --ckpt " TMP "/run --data " TMP "/d.txt --batch 64 --chunk 64",
               ref, sizeof ref);
    CHECK(rc == 0 && strstr(ref, "loss "), "gpt eval in one chunk of 64 failed (%d): %s", rc,
          ref);
    char why[256];
    CHECK(!eval_line_matches(loss_line(ref), TMP "/run/ckpt-00000002.safetensors", TMP "/d.txt",
                             why, sizeof why), "gpt eval says '%s'; %s", ref, why);
    const char *runs[] = {"", "--chunk 3", "--chunk 1000"};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "./gpt eval --ckpt " TMP "/run --data " TMP "/d.txt --batch 64 "
                 "%s", runs[i]);
        rc = t_run(cmd, out, sizeof out);
        CHECK(rc == 0 && !strcmp(loss_line(out), loss_line(ref)), "%s: '%s', in one chunk "
              "'%s'", cmd, out, ref);
    }
    rc = t_run("./gpt eval --ckpt " TMP "/run --data " TMP "/d.txt --batch 64 " HBM, out,
               sizeof out);
    CHECK(rc == 0 && !strcmp(loss_line(out), loss_line(ref)), "gpt eval at the training's "
          HBM ", in chunks of its batch: rc %d: %s", rc, out);
    rc = t_run("./gpt eval --ckpt " TMP "/run --data " TMP "/d.txt --batch 64 --chunk 64 " HBM,
               out, sizeof out);
    CHECK(rc == 1 && strstr(out, "RESOURCE_EXHAUSTED"), "gpt eval in one chunk of 64 at "
          HBM " should not fit: rc %d: %s", rc, out);
    t_expect_one_line("./gpt eval --ckpt " TMP "/run --chunk -1", 2,
                      "--chunk must be 0..65536, got -1");
}

/* ---- a compile's progress ---- */

static const char *const stages[] = {"cse", "dce", "fuse_matmul", "fuse_adds",
                                     "fuse_layernorm_bwd", "fuse_xent", "memory plan",
                                     "lowering"};
#define NSTAGES (int)(sizeof stages / sizeof *stages)

/* The line after a transient one: it must begin by clearing it. */
static int cleared_after(const char *line)
{
    const char *end = strchr(line, '\r'), *nl = strchr(line, '\n');
    return end && !strncmp(end, "\r\033[K", 4) && !(nl && nl < end);
}

/* Every stage's line, in order, each rewriting the line before; the last
 * stage's line cleared; and the last progress line of all cleared too. 0
 * if so; else -1, with what went wrong in why. */
static int stages_then_clear(const char *s, char *why, size_t n)
{
    const char *at = s, *last = NULL;
    for (int i = 0; i < NSTAGES; i++) {
        char want[96];
        snprintf(want, sizeof want, "\r\033[Kcompiling: %s (stage %d of %d), ", stages[i], i + 1,
                 NSTAGES);
        const char *hit = strstr(at, want);
        if (!hit) {
            snprintf(why, n, "no '%s' after the stages before it", want + 4);
            return -1;
        }
        at = hit + strlen(want);
    }
    if (!cleared_after(at)) {
        snprintf(why, n, "the last stage's line is not cleared before anything else");
        return -1;
    }
    for (const char *p = s; (p = strstr(p, "\033[Kcompiling: ")); p++)
        last = p + 4;
    if (!cleared_after(last)) {
        snprintf(why, n, "the last progress line is left standing");
        return -1;
    }
    return 0;
}

/* In this process: a forward pass on the xla device compiles; the hook
 * shows every stage, clears, and logs the compile; the node count of a
 * compile's first stage is the compiler's own count of the traced nodes. */
static void check_compile_hook(void)
{
    Config c = {.vocab = VOCAB, .context = 8, .embed = 16, .mlp = 32, .heads = 2, .layers = 1};
    Model m;
    model_init(&m, &c, 3);
    Batch b;
    batch_alloc(&b, 2, 8);
    for (int i = 0; i < 16; i++)
        b.tok[i] = 'a' + i;
    batch_finish(&b);
    Graph *g = g_new();
    g_set_lazy(g, 1);
    char why[256];
    watch_compiles(1, 0.0);
    capture_stderr(TMP "/compile.txt");
    batch_loss(&m, g, &b);
    char *said = release_stderr(TMP "/compile.txt");
    struct compile_stats st;
    g_compile_stats(g, &st);
    CHECK(said && !stages_then_clear(said, why, sizeof why), "compile progress: %s: '%s'", why,
          said ? said : "");
    const char *first = NULL, *log = NULL;
    for (const char *p = said; p && (p = strstr(p, "(stage 1 of ")); p++)
        first = p;
    for (const char *p = said; p && (p = strstr(p, "\r\033[Kgpt: compiled a program of ")); p++)
        log = p;
    int nodes = -1;
    CHECK(first && sscanf(first, "(stage 1 of %*d), %d nodes", &nodes) == 1 &&
              nodes == st.nodes, "the last compile's first stage says %d nodes; the compiler "
          "traced %d", nodes, st.nodes);
    CHECK(log && strstr(log, " s\n"), "no line saying how long the compile took: '%s'",
          said ? said : "");
    free(said);
    /* no transient line, a log only past 1000 s: a new compile says nothing */
    watch_compiles(0, 1000.0);
    capture_stderr(TMP "/quiet.txt");
    g_reset(g);
    Batch b3;
    batch_alloc(&b3, 3, 8);
    memset(b3.tok, 0, sizeof(int32_t) * 24);
    batch_finish(&b3);
    long before = xs_counter(C_UNCACHED);
    batch_loss(&m, g, &b3);
    said = release_stderr(TMP "/quiet.txt");
    CHECK(xs_counter(C_UNCACHED) > before && said && !*said, "a quiet compile said '%s'",
          said ? said : "(unreadable)");
    free(said);
    compile_progress_hook = NULL; /* the other suites run in this process */
    batch_free(&b);
    batch_free(&b3);
    g_free(g);
    model_free(&m);
}

/* The program: gpt train --live on shows the stages on stderr even into a
 * file (as it shows its live line on stdout), --live off and a file by
 * default do not; on a terminal (script's) gpt eval shows them, not with
 * TERM=dumb. */
static void check_compile_lines(void)
{
    char out[65536], why[256];
    static const struct {
        const char *cmd;
        int shows;
    } runs[] = {
        {"{ ./gpt train " SHAPE " --eval-batch 8 --live on --out " TMP "/l1 "
         "2>&1 >/dev/null; }", 1},
        {"{ ./gpt train " SHAPE " --eval-batch 8 --live off --out " TMP "/l2 "
         "2>&1 >/dev/null; }", 0},
        {"{ ./gpt train " SHAPE " --eval-batch 8 --out " TMP "/l3 2>&1 >/dev/null; }", 0},
        {"TERM=xterm script -qec './gpt eval --ckpt " TMP "/run --data " TMP "/d.txt' /dev/null",
         1},
        {"TERM=dumb script -qec './gpt eval --ckpt " TMP "/run --data " TMP "/d.txt' /dev/null",
         0},
    };
    int script = t_have("command -v script");
    t_run("rm -rf " TMP "/l?", out, sizeof out);
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        if (strstr(runs[i].cmd, "script") && !script) {
            SKIP_MISSING("bsdutils", "compile progress on a terminal not checked: no script(1)");
            continue;
        }
        int rc = t_run(runs[i].cmd, out, sizeof out);
        if (runs[i].shows)
            CHECK(rc == 0 && !stages_then_clear(out, why, sizeof why), "%s: rc %d, %s: '%s'",
                  runs[i].cmd, rc, why, out);
        else
            CHECK(rc == 0 && !strstr(out, "compiling") && !strstr(out, "\033"),
                  "%s: rc %d, progress shown: '%s'", runs[i].cmd, rc, out);
    }
}

/* ---- the live line's figures ---- */

#define LIVE "--embed 16 --mlp 32 --heads 2 --layers 1 --context 32 --seq 32 --batch 2 " \
             "--grad-accum 2 --eval-batch 4 --eval-every 3 --eval-bytes 0 --final-bytes 0 --live on " \
             "--data " TMP "/d.txt"
#define LIVE_WINDOWS (2 * 2) /* a step: --batch x --grad-accum windows */
#define LIVE_TOKENS (LIVE_WINDOWS * 32) /* of --seq bytes */
#define LIVE_STEPS 64

/* Each step's milliseconds as dir's run log records them (ms[step]). */
static void logged_ms(const char *dir, double *ms)
{
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *log = (char *)t_slurp(path, NULL);
    const char *key = "\"kind\":\"step\",\"step\":";
    for (char *line = log ? strtok(log, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char *step = strstr(line, key), *at = strstr(line, "\"ms\":");
        int n = step ? atoi(step + strlen(key)) : -1;
        if (at && n >= 0 && n < LIVE_STEPS)
            ms[n] = atof(at + strlen("\"ms\":"));
    }
    free(log);
}

/* Every live line of out against the run log of dir, whose run started
 * at step start: "step D/S | P ms/step | R tok/s" says P = the mean of
 * steps start..D-1's logged times (the steps this process ran), and R P
 * = a step's tokens. Returns the lines checked. */
static int check_live_lines(const char *out, const char *dir, int start)
{
    double ms[LIVE_STEPS] = {0};
    logged_ms(dir, ms);
    int lines = 0;
    for (const char *at = out; (at = strstr(at, "\r\033[Kstep ")); at++) {
        int done, steps;
        double per, tps, sum = 0;
        if (sscanf(at + 4, "step %d/%d | %lf ms/step | %lf tok/s", &done, &steps, &per, &tps) != 4
            || done <= start || done > LIVE_STEPS)
            continue;
        for (int k = start; k < done; k++)
            sum += ms[k];
        double mean = sum / (done - start);
        lines++;
        CHECK(mean > 0 && fabs(per - mean) <= 0.0051 + 1e-3 * mean &&
                  fabs(tps * mean * 1e-3 - LIVE_TOKENS) <= 0.01 * LIVE_TOKENS,
              "%s: the live line 'step %d/%d | %.2f ms/step | %.0f tok/s'; the run log's steps "
              "%d..%d took %.4f ms on average, and a step is %d tokens", dir, done, steps, per,
              tps, start, done - 1, mean, LIVE_TOKENS);
    }
    return lines;
}

/* The "rate" notes of dir's run log (one an eval line, on one core): Rate
 * is the windows a second of the steps since the note before (or since
 * the run's start), GlobalRate of every step this process ran, from the
 * logged step times. Returns the notes checked. */
static int check_rate_notes(const char *dir, int start)
{
    double ms[LIVE_STEPS] = {0};
    logged_ms(dir, ms);
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *log = (char *)t_slurp(path, NULL);
    const char *key = "{\"kind\":\"rate\",\"step\":";
    int notes = 0, since = start;
    for (const char *at = log; at && (at = strstr(at, key)); at++) {
        int step;
        double rate, global, window = 0, all = 0;
        if (sscanf(at + strlen(key), "%d,\"time\":{\"rate\":%lf,\"global_rate\":%lf", &step,
                   &rate, &global) != 3 || step < since || step >= LIVE_STEPS)
            break;
        for (int k = start; k <= step; k++) {
            all += ms[k] * 1e-3;
            window += k >= since ? ms[k] * 1e-3 : 0;
        }
        double want = LIVE_WINDOWS * (step + 1 - since) / window;
        double want_global = LIVE_WINDOWS * (step + 1 - start) / all;
        CHECK(fabs(rate - want) <= 1e-3 * want + 0.01 &&
                  fabs(global - want_global) <= 1e-3 * want_global + 0.01,
              "%s: at step %d the run log says rate %.2f, global_rate %.2f windows a second; "
              "its step times give %.2f (steps %d..%d) and %.2f (steps %d..%d)", dir, step, rate,
              global, want, since, step, want_global, start, step);
        notes++;
        since = step + 1;
    }
    free(log);
    return notes;
}

/* The live line's ms/step and tok/s, and the run log's rates, of a run
 * and of its resume from the middle, against the run log's own step
 * times (--live on writes the line into a file too). */
static void check_live_figures(void)
{
    char out[65536];
    t_write_words(TMP "/d.txt", 39000);
    int rc = t_run("rm -rf " TMP "/live " TMP "/live-r && ./gpt train " LIVE " --steps 8 "
                   "--ckpt-every 4 --out " TMP "/live", out, sizeof out);
    int lines = check_live_lines(out, TMP "/live", 0);
    CHECK(rc == 0 && lines > 0, "a run with --live on: rc %d, %d live lines: %.2000s", rc, lines,
          out);
    int notes = check_rate_notes(TMP "/live", 0);
    CHECK(notes == 3, "the run log of 8 steps, an eval every 3, has %d rate notes, want 3",
          notes);
    rc = t_run("mkdir -p " TMP "/live-r && cp " TMP "/live/ckpt-00000004.safetensors " TMP
               "/live-r/ && ./gpt train --resume --steps 8 --live on --data " TMP "/d.txt --out "
               TMP "/live-r", out, sizeof out);
    lines = check_live_lines(out, TMP "/live-r", 4);
    CHECK(rc == 0 && lines > 0, "its resume from step 4 with --live on: rc %d, %d live lines: "
          "%.2000s", rc, lines, out);
    notes = check_rate_notes(TMP "/live-r", 4);
    CHECK(notes == 1, "the run log resumed at step 4 has %d rate notes, want 1 (step 6)", notes);
}

void test_progress(void)
{
    char out[256];
    t_run("rm -rf " TMP " && mkdir -p " TMP, out, sizeof out);
    check_split_bits();
    check_compile_hook();
    check_eval_fits();
    check_compile_lines();
    check_live_figures();
}
