/* tests/test_watch.c: what a run leaves to watch it by. The run log of a
 * run stopped past its last checkpoint and resumed equals a straight
 * run's (once the "time" fields are dropped); loss.svg and gpt plot render
 * (rsvg-convert) with both curves in the picture; the TensorBoard event
 * file passes an independent reader (python3-protobuf) that checks every
 * CRC and value against the log. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test.h"

#define WD "tests/tmp/wt"
#define RUN "./gpt train --embed 16 --heads 2 --layers 1 --mlp 16 --context 32 --seq 32 " \
            "--batch 8 --eval-batch 8 --eval-every 10 --ckpt-every 20 --keep 5 --threads 2 " \
            "--data " WD "/text.txt"

/* The log with every "time":{...} object cut out. */
static char *deterministic_log(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t cap = 1 << 20, n = 0;
    char *out = calloc(cap, 1), line[8192];
    while (f && out && fgets(line, sizeof line, f)) {
        char *t = strstr(line, ",\"time\":{");
        if (t)
            strcpy(t, "}\n");
        size_t k = strlen(line);
        if (n + k + 1 > cap)
            break;
        memcpy(out + n, line, k + 1);
        n += k;
    }
    if (f)
        fclose(f);
    return out;
}

static void check_resumed_log(void)
{
    char out[65536];
    int rc = t_run(RUN " --steps 60 --out " WD "/a > /dev/null && " RUN " --steps 50 --out " WD
                   "/b > /dev/null && rm " WD "/b/ckpt-00000050.safetensors && " RUN " --steps 60 "
                   "--resume --out " WD "/b > /dev/null", out, sizeof out);
    char *a = deterministic_log(WD "/a/metrics.jsonl"), *b = deterministic_log(WD "/b/metrics.jsonl");
    CHECK(rc == 0 && a && b && strstr(a, "{\"kind\":\"step\",\"step\":59,") && !strcmp(a, b),
          "the resumed run's log differs from the straight run's (rc %d):\n%s\n----\n%s", rc,
          a ? a : "", b ? b : "");
    CHECK(a && strstr(a, "{\"kind\":\"config\",\"parameters\":") &&
          strstr(a, "{\"kind\":\"eval\",\"step\":50,\"train_loss\":") &&
          strstr(a, "{\"kind\":\"rate\",\"step\":50}"), "the log's lines: %s", a ? a : "");
    free(a);
    free(b);
}

/* Each eval record says how long its loss took (time.eval_s): there,
 * at least 0 and under the whole run's time; and a chunked eval whose
 * stderr is no terminal prints no progress line there. */
static void check_eval_time(void)
{
    char out[4096];
    int rc = t_run("grep '\"kind\":\"eval\"' " WD "/a/metrics.jsonl | "
                   "sed -n 's/.*\"eval_s\":\\([0-9.]*\\)}}$/\\1/p'", out, sizeof out);
    int n = 0;
    double x;
    for (char *p = out; sscanf(p, "%lf", &x) == 1 && x >= 0 && x < 600; p = strchr(p, '\n') + 1)
        if (++n == 2 || !strchr(p, '\n'))
            break;
    CHECK(rc == 0 && n == 2, "the eval records' eval_s (want 2 of 0..600 s): %s", out);
    rc = t_run(RUN " --steps 1 --batch 4 --eval-batch 40 --out " WD "/e 2>&1 >/dev/null | "
               "tr '\\r' R", out, sizeof out);
    CHECK(rc == 0 && !strchr(out, 'R') && !strstr(out, "eval "),
          "a chunked eval, stderr no terminal, printed progress there: %s", out);
}

static int have(const char *what)
{
    char cmd[256], out[256];
    snprintf(cmd, sizeof cmd, "%s > /dev/null 2>&1", what);
    return t_run(cmd, out, sizeof out) == 0;
}

/* Renders svg and counts the curves' pixels: blue and red both drawn. */
static void check_render(const char *svg)
{
    char cmd[512], out[4096];
    if (!have("rsvg-convert --version")) {
        SKIP_MISSING("librsvg2-bin", "%s not rendered: no rsvg-convert", svg);
        return;
    }
    if (!have("/usr/bin/python3 -c 'import zlib'")) {
        SKIP_MISSING("python3", "%s's pixels not counted: no /usr/bin/python3", svg);
        return;
    }
    snprintf(cmd, sizeof cmd, "rsvg-convert %s -o %s.png && /usr/bin/python3 "
             "tests/watch_check.py png %s.png", svg, svg, svg);
    int rc = t_run(cmd, out, sizeof out), blue = 0, red = 0;
    sscanf(out, "blue %d red %d", &blue, &red);
    CHECK(rc == 0 && blue > 300 && red > 30, "%s rendered: rc %d, %s", svg, rc, out);
}

static void check_events(void)
{
    char out[4096];
    if (!have("/usr/bin/python3 -c 'import google.protobuf'")) {
        SKIP_MISSING("python3-protobuf", "the TensorBoard event file not read back");
        return;
    }
    int rc = t_run("/usr/bin/python3 tests/watch_check.py events " WD "/b/events.out.tfevents.*"
                   " " WD "/b/metrics.jsonl", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "ok: ") && strstr(out, " 60 train, 6 test"),
          "the event file, read by protobuf: rc %d: %s", rc, out);
}

static void check_plot_and_version(void)
{
    char out[4096];
    int rc = t_run(RUN " --steps 60 --seed 7 --lr 0.003 --out " WD "/c > /dev/null && ./gpt plot "
                   WD "/a " WD "/c -o " WD "/plot.svg", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "wrote " WD "/plot.svg (2 runs)"), "gpt plot: rc %d: %s", rc,
          out);
    check_render(WD "/plot.svg");
    rc = t_run("./gpt plot " WD "/nothing-here", out, sizeof out);
    CHECK(rc == 1 && strstr(out, WD "/nothing-here/metrics.jsonl: cannot read the run log"),
          "gpt plot of a missing run: rc %d: %s", rc, out);
    rc = t_run("./gpt --version", out, sizeof out);
    CHECK(rc == 0 && !strncmp(out, "gpt ", 4), "gpt --version: rc %d: %s", rc, out);
    rc = t_run("make -s install PREFIX=$PWD/" WD "/inst > /dev/null && " WD "/inst/bin/gpt "
               "--version && test -f " WD "/inst/share/man/man1/gpt.1", out, sizeof out);
    CHECK(rc == 0 && !strncmp(out, "gpt ", 4), "make install: rc %d: %s", rc, out);
    if (have("man --version")) {
        rc = t_run("man -l --warnings docs/gpt.1 2>&1 >/dev/null", out, sizeof out);
        CHECK(rc == 0 && !out[0], "the man page has warnings: rc %d: %s", rc, out);
    } else {
        SKIP_MISSING("man-db", "gpt.1 not checked for warnings: no man");
    }
}

/* --profile: valid JSON, a track per core with the same kernels on each,
 * the compiler and the transfers on the host's track. */
static void check_profile(void)
{
    char out[4096];
    if (!have("/usr/bin/python3 -c 'import json'")) {
        SKIP_MISSING("python3", "the --profile timeline not parsed: no /usr/bin/python3");
        return;
    }
    int rc = t_run(RUN " --cores 4 --steps 6 --profile " WD "/tl.json --profile-steps 3 --out "
                   WD "/p > /dev/null && /usr/bin/python3 -c \"import json, collections\n"
                   "e = json.load(open('" WD "/tl.json'))['traceEvents']\n"
                   "k = collections.defaultdict(collections.Counter)\n"
                   "for x in e:\n"
                   "    if x['ph'] in 'Xi': k[x['tid']][x['name']] += 1\n"
                   "names = {t: sorted(c.items()) for t, c in k.items()}\n"
                   "print(sorted(k), names[2] == names[3] == names[4],"
                   " set(k[2]) <= set(k[1]), sorted(k[0]))\"", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "[0, 1, 2, 3, 4] True True ") && strstr(out, "'CompileTime'") &&
          strstr(out, "'TransferToDeviceTime'") && strstr(out, "'AllReduceTime'"),
          "--profile: rc %d: %s", rc, out);
}

/* GPT_XLA_DEBUG: the naive sampler (a new shape every byte) is warned
 * about; training is not (with eval lines every 10 steps its continuations'
 * host reads would be too frequent, truly: hence every 100, as by default). */
static void check_debug_warnings(void)
{
    char out[65536];
    int rc = t_run(RUN " --context 96 --steps 2 --out " WD "/c96 > /dev/null && (GPT_XLA_DEBUG=1 "
                   "./gpt sample --ckpt " WD "/c96 --naive --bytes 100 >/dev/null)", out,
                   sizeof out);
    CHECK(rc == 0 && strstr(out, "xla: warning: CompileTime too frequent") &&
          strstr(out, "cause: a host read of t") && strstr(out, "graph hash "),
          "GPT_XLA_DEBUG on the naive sampler: rc %d: %.2000s", rc, out);
    rc = t_run("(GPT_XLA_DEBUG=1 " RUN " --eval-every 100 --steps 130 --out " WD "/dbg "
               ">/dev/null)", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "cause: mark_step") && !strstr(out, "too frequent"),
          "GPT_XLA_DEBUG on training: rc %d: %.3000s", rc, out);
}

/* A diverged run's log stays JSON (its loss is null) and still plots. */
static void check_diverged(void)
{
    char out[65536];
    int rc = t_run(RUN " --lr 100 --steps 30 --out " WD "/div", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "training diverged"), "a diverged run: rc %d: %.300s", rc, out);
    rc = t_run("grep -c '\"loss\":null' " WD "/div/metrics.jsonl && /usr/bin/python3 -c \"import "
               "json; [json.loads(l) for l in open('" WD "/div/metrics.jsonl')]\" && ./gpt plot "
               WD "/div -o " WD "/div.svg", out, sizeof out);
    CHECK(rc == 0 && atoi(out) >= 1, "the diverged run's log: rc %d: %s", rc, out);
}

void test_watch(void)
{
    char out[256];
    t_run("rm -rf " WD " && mkdir -p " WD, out, sizeof out);
    t_write_words(WD "/text.txt", 30000);
    check_resumed_log();
    check_eval_time();
    check_render(WD "/b/loss.svg");
    check_events();
    check_plot_and_version();
    check_profile();
    check_debug_warnings();
    check_diverged();
}
