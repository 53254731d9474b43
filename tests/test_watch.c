/* tests/test_watch.c: what a run leaves to watch it by. The run log of a
 * run stopped past its last checkpoint and resumed equals a straight
 * run's (once the "time" fields are dropped); loss.svg and gpt plot render
 * (rsvg-convert) with both curves in the picture; the TensorBoard event
 * file passes an independent reader (python3-protobuf) that checks every
 * CRC and value against the log. */
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "util/threads.h"
#include "util/util.h"
#include "watch/pace.h"
#include "watch/trial.h"
#include "test.h"

#define WD "tests/tmp/wt"
#define RUN "./gpt train --embed 16 --heads 2 --layers 1 --mlp 16 --context 32 --seq 32 " \
            "--batch 8 --eval-batch 8 --eval-every 10 --ckpt-every 20 --keep 5 --threads 2 " \
            "--data " WD "/text.txt"

/* The log with every "time":{...} object cut out. */
static char *deterministic_log(const char *path)
{
    enum { CAP = 1 << 20 };
    char cmd[512], *out = calloc(CAP, 1);
    snprintf(cmd, sizeof cmd, T_LOG_SED " %s", path);
    if (out && t_run(cmd, out, CAP))
        out[0] = 0;
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
    /* MAKEFLAGS cleared: under make -j2 test it names a jobserver this
     * make cannot reach (make warns, and runs one job anyway) */
    rc = t_run("MAKEFLAGS= make -s install PREFIX=$PWD/" WD "/inst > /dev/null && " WD "/inst/bin/gpt "
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

/* One window of steps (the first one short) of about ms each to pace_step (a spread of +-2%
 * around ms, its median ms); returns what the window's end said, and
 * counts anything said before the end. */
static int pace_window(Pace *p, double ms, double spread, int *early)
{
    int said = 0, len = p->len;
    for (int i = 0; i < len; i++) {
        said = pace_step(p, ms * (1 + spread * (i % 5 - 2) / 2), 1, 0);
        *early += i < len - 1 && said;
    }
    return said;
}

/* The machine's idle cores over a window (/proc/stat's ticks, which gpt
 * train reads before it tries more threads again), against the kernel's
 * other account of idle time, /proc/uptime's second figure (idle seconds
 * summed over the CPUs), over the same window of steps that sleep. */
static double uptime_idle_s(void)
{
    double up = 0, idle = -1;
    FILE *f = fopen("/proc/uptime", "r");
    if (!f || fscanf(f, "%lf %lf", &up, &idle) != 2)
        idle = -1;
    if (f)
        fclose(f);
    return idle;
}

static void check_pace_idle(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    Pace p;
    pace_start(&p);
    for (int i = 0, first = p.len; i < first; i++) /* the short first window, untimed here */
        pace_step(&p, 15, 1, 0);
    double idle0 = uptime_idle_s(), t0 = now_seconds();
    for (int i = 0; i < PACE_WINDOW; i++) {
        usleep(15000); /* a step that leaves its core */
        pace_step(&p, 15, 1, 0);
    }
    double idle = (uptime_idle_s() - idle0) / (now_seconds() - t0);
    if (idle0 < 0) {
        SKIP_MISSING("/proc/uptime", "the idle cores are not compared");
        return;
    }
    /* both count in ticks of 10 ms: a 150 ms window is exact to ~0.15 */
    CHECK(p.idle_cores >= 0 && p.idle_cores <= (double)cpus && fabs(p.idle_cores - idle) < 0.35,
          "a window of %ld cpus: %.2f idle cores; /proc/uptime says %.2f", cpus, p.idle_cores,
          idle);
}

/* Windows of short units (a sampled byte's) see too few of /proc/stat's
 * ticks to count the idle cores: they stay pending until a span of
 * PACE_IDLE_MS has ended with a window, and a new span (a schedule
 * changed) makes them pending again. */
static void check_pace_span(void)
{
    Pace p;
    pace_start(&p);
    double t0 = now_seconds();
    while (p.windows < 3 && 1e3 * (now_seconds() - t0) < PACE_IDLE_MS / 2)
        pace_step(&p, 0.2, 1, 0);
    int windows = p.windows, within = 1e3 * (now_seconds() - t0) < PACE_IDLE_MS / 2;
    CHECK(!within || p.idle_cores == PACE_IDLE_PENDING, "%d windows of 0.2 ms units: %.2f "
          "idle cores, want pending (%.0f)", windows, p.idle_cores, PACE_IDLE_PENDING);
    usleep((useconds_t)(1e3 * PACE_IDLE_MS));
    for (int w = p.windows; p.windows == w;)
        pace_step(&p, 0.2, 1, 0);
    CHECK(p.idle_cores >= 0 || p.idle_cores == PACE_IDLE_NO_PROC, "a window that ends a span "
          "of %.0f ms: %.2f idle cores, want a count", PACE_IDLE_MS, p.idle_cores);
    pace_new_span(&p);
    CHECK(p.idle_cores == PACE_IDLE_PENDING, "a new span: %.2f idle cores, want pending",
          p.idle_cores);
}

/* pace_step on synthetic step times: steady steps never flag, even
 * jittery ones; a stretch twice as slow says +1 at its first window, once,
 * and the first window back says -1; a slowdown between PACE_BACK and
 * PACE_SLOW neither starts nor ends one. */
static void check_pace_unit(void)
{
    const double base = 10, between = base * (PACE_SLOW + PACE_BACK) / 2;
    static const int steady = 40;
    const struct {
        double ms;
        int says;
    } script[] = {
        {base, 0},     {base * 1.05, 0}, {base, 0},      {2 * base, 1}, {2 * base, 0},
        {base, -1},    {base, 0},        {between, 0},   {2 * base, 1}, {between, 0},
        {base * PACE_BACK * 0.96, -1},
    };
    Pace p;
    int early = 0, flagged = 0;
    pace_start(&p);
    for (int w = 0; w < steady; w++) /* steps up to 40% apart, medians 10% apart */
        flagged += pace_window(&p, base * (1 + 0.1 * (w % 2)), 0.4, &early) != 0;
    CHECK(flagged == 0 && !p.busy, "steady steps flagged %d times", flagged);
    pace_start(&p);
    for (size_t w = 0; w < sizeof script / sizeof *script; w++) {
        int said = pace_window(&p, script[w].ms, 0.02, &early);
        CHECK(said == script[w].says, "window %zu of %.2f ms (best %.2f): pace_step said %d, "
              "want %d", w, script[w].ms, p.best, said, script[w].says);
        if (script[w].says > 0)
            CHECK(p.slowdown > 1.9 && p.slowdown < 2.1, "twice as slow said as %.3fx",
                  p.slowdown);
    }
    CHECK(early == 0, "pace_step said a change %d times before a window's end", early);
    /* long steps: windows of about PACE_WINDOW_MS, never under PACE_MIN_WINDOW */
    const struct {
        double ms;
        int len;
    } longer[] = {{PACE_WINDOW_MS / PACE_WINDOW, PACE_WINDOW}, {PACE_WINDOW_MS / 10, 10},
                  {PACE_WINDOW_MS / 2, PACE_MIN_WINDOW}, {PACE_WINDOW_MS * 4, PACE_MIN_WINDOW}};
    for (size_t i = 0; i < sizeof longer / sizeof *longer; i++) {
        pace_start(&p);
        pace_window(&p, longer[i].ms, 0, &early);
        CHECK(p.len == longer[i].len, "after a window of %.0f ms steps: the next has %d steps, "
              "want %d", longer[i].ms, p.len, longer[i].len);
    }
    check_pace_idle();
    check_pace_span();
}

/* The schedule a due trial tries (trial_next), from each schedule, on
 * windows that say what /proc would: the redo team first when a busy run
 * is offered one, one thread otherwise or once the team has failed; from
 * one thread, the full count once a core sat idle, else the team while
 * another program runs; from the team, the full count once no other
 * program runs, else one thread if the team had about one core's time
 * (more, and one thread cannot beat it). Before a span of the pace has
 * counted the idle cores, one thread waits; where /proc does not count
 * them, it tries the full count. */
static void check_trial_next(void)
{
    const struct {
        int from, redo, failed, busy, others;
        double idle, cores_used;
        int want;
    } script[] = {
        {RUN_FULL, 3, -1, 1, 1, 0.0, 1.3, RUN_REDO},
        {RUN_FULL, 0, -1, 1, 1, 0.0, 1.3, RUN_ONE},
        {RUN_FULL, 3, RUN_REDO, 1, 1, 0.0, 1.3, RUN_ONE},
        {RUN_FULL, 3, RUN_ONE, 1, 1, 0.0, 1.3, RUN_REDO},
        {RUN_FULL, 3, -1, 0, 1, 0.0, 1.3, -1},
        {RUN_FULL, 3, -1, 1, 0, 0.0, 1.3, -1},
        {RUN_ONE, 3, -1, 1, 1, 0.8, 1.0, RUN_FULL},
        {RUN_ONE, 3, -1, 1, 1, 0.0, 1.0, RUN_REDO},
        {RUN_ONE, 0, -1, 1, 1, 0.0, 1.0, -1},
        {RUN_ONE, 3, -1, 1, 0, 0.0, 1.0, -1},
        {RUN_ONE, 0, -1, 1, 1, PACE_IDLE_PENDING, 1.0, -1},
        {RUN_ONE, 0, -1, 1, 1, PACE_IDLE_NO_PROC, 1.0, RUN_FULL},
        {RUN_REDO, 3, -1, 1, 0, 0.0, 1.5, RUN_FULL},
        {RUN_REDO, 3, -1, 1, 1, 0.0, 1.0, RUN_ONE},
        {RUN_REDO, 3, -1, 1, 1, 0.0, 1.5, -1},
    };
    for (size_t i = 0; i < sizeof script / sizeof *script; i++) {
        ThreadTrial t = {.full = 2, .cores = 2, .redo = script[i].redo, .failed = script[i].failed};
        t.now = script[i].from == RUN_FULL ? 2 : 1;
        t.redoing = script[i].from == RUN_REDO;
        t.pace.busy = script[i].busy;
        t.pace.others_running = script[i].others;
        t.pace.idle_cores = script[i].idle;
        t.pace.cores_used = script[i].cores_used;
        int got = trial_next(&t);
        CHECK(got == script[i].want, "case %zu: from schedule %d (redo %d, busy %d, others %d, "
              "idle %.1f, cores used %.1f) the trial tries %d, want %d", i, script[i].from,
              script[i].redo, script[i].busy, script[i].others, script[i].idle,
              script[i].cores_used, got, script[i].want);
    }
    /* on one core (taskset -c 0) the team is never tried: its threads
     * would only take turns */
    ThreadTrial one = {.full = 2, .now = 2, .cores = 1, .redo = 3, .failed = -1};
    one.pace.busy = 1, one.pace.others_running = 1, one.pace.cores_used = 1.0;
    int got = trial_next(&one);
    CHECK(got == RUN_ONE, "2 threads on one core, busy: the trial tries %d, want %d (one "
          "thread, not the team)", got, RUN_ONE);
}

/* Beside programs of another scheduling group only (another session's,
 * pace_others), the team is never tried: the kernel gives the process its
 * group's share whatever its threads, and the team's redone work comes on
 * top. From the team, one thread is tried at once. */
static void check_trial_apart(void)
{
    const struct {
        int from, apart, want;
    } script[] = {
        {RUN_FULL, 1, RUN_ONE}, {RUN_FULL, 0, RUN_REDO}, {RUN_FULL, -1, RUN_REDO},
        {RUN_ONE, 1, -1},       {RUN_ONE, 0, RUN_REDO},  {RUN_REDO, 1, RUN_ONE},
        {RUN_REDO, 0, -1},
    };
    for (size_t i = 0; i < sizeof script / sizeof *script; i++) {
        ThreadTrial t = {.full = 2, .cores = 2, .redo = 3, .failed = -1};
        t.now = script[i].from == RUN_FULL ? 2 : 1;
        t.redoing = script[i].from == RUN_REDO;
        t.pace.busy = 1;
        t.pace.others_running = 1;
        t.pace.others_apart = script[i].apart;
        t.pace.cores_used = 1.5;
        int got = trial_next(&t);
        CHECK(got == script[i].want, "case %zu: from schedule %d, others apart %d: the trial "
              "tries %d, want %d", i, script[i].from, script[i].apart, got, script[i].want);
    }
}

/* pace_others on this machine: a busy loop of this session shares the
 * process's scheduling group, one under setsid (a session, so an
 * autogroup, of its own) does not, where the kernel groups by session. */
static void check_pace_others(void)
{
    char out[256];
    int same0, apart0, same, apart;
    pace_others(&same0, &apart0);
    CHECK(same0 >= 0 && apart0 >= 0, "pace_others could not read /proc: %d, %d", same0, apart0);
    t_run("sh -c 'while :; do :; done' > /dev/null 2>&1 & echo $! > " WD "/busy.pid", out,
          sizeof out);
    t_run("sleep 0.2", out, sizeof out);
    pace_others(&same, &apart);
    /* a window's count of none (/proc/loadavg read as the team's threads
     * woke) mended by the walk, which sees the busy loop */
    Pace mended = {.others_running = 0};
    pace_ask_others(&mended);
    /* and the trial starts on every thread: the loop shares this group */
    int keep = omp_get_max_threads();
    omp_set_num_threads(2);
    ThreadTrial near, one;
    trial_start(&near);
    trial_start(&one);
    trial_start_one(&one); /* a sample's or an eval's start (cmd/commands.c) */
    int one_omp = omp_get_max_threads();
    ThreadTrial kept; /* OMP_DYNAMIC=false: the count as chosen, no trial */
    setenv("OMP_DYNAMIC", "false", 1);
    omp_set_num_threads(2);
    trial_start(&kept);
    unsetenv("OMP_DYNAMIC");
    omp_set_num_threads(keep);
    t_run("kill $(cat " WD "/busy.pid)", out, sizeof out);
    CHECK(kept.fixed && kept.now == 2 && !kept.started_shared && !kept.started_one,
          "OMP_DYNAMIC=false beside a busy loop of this session: the trial said fixed %d, "
          "%d threads, started_shared %d, started_one %d; want 1, 2, 0, 0", kept.fixed,
          kept.now, kept.started_shared, kept.started_one);
    CHECK(!near.started_one && near.now == 2 && near.started_shared, "a busy loop of this "
          "session: the trial started on %d threads, want 2, and said %d for started_shared, "
          "want 1", near.now, near.started_shared);
    CHECK(one.now == 1 && one_omp == 1 && trial_schedule(&one) == RUN_ONE, "trial_start_one: "
          "%d threads (OpenMP's %d), want 1", one.now, one_omp);
    CHECK(same >= 1, "a busy loop of this session: pace_others said %d "
          "running in this group, %d apart (%d and %d before it)", same, apart, same0, apart0);
    CHECK(mended.others_running >= 1 && mended.others_apart == 0, "a busy loop of this "
          "session beside a window that counted no other program running: pace_ask_others "
          "left %d running, %d apart", mended.others_running, mended.others_apart);
    if (!t_have("setsid true")) {
        SKIP_MISSING("util-linux", "pace_others not checked against another session: no setsid");
        return;
    }
    if (t_run("grep -qx 1 /proc/sys/kernel/sched_autogroup_enabled", out, sizeof out) != 0) {
        SKIP_MACHINE("pace_others not checked against another session: the kernel does not "
                     "group threads by session (sched_autogroup_enabled)");
        return;
    }
    t_run("setsid sh -c 'while :; do :; done' > /dev/null 2>&1 & echo $! > " WD "/busy.pid; "
          "sleep 0.2", out, sizeof out);
    pace_others(&same, &apart);
    /* the trial starts on one thread beside it */
    omp_set_num_threads(2);
    ThreadTrial t;
    trial_start(&t);
    int started = t.now, omp_now = omp_get_max_threads();
    omp_set_num_threads(keep);
    t_run("kill $(cat " WD "/busy.pid)", out, sizeof out);
    CHECK(apart >= 1, "a busy loop of another session: pace_others said %d running in this "
          "group, %d apart", same, apart);
    CHECK(same > 0 || (started == 1 && omp_now == 1 && t.started_one),
          "a busy loop of another session alone: the trial started on %d threads (OpenMP's "
          "%d), want 1", started, omp_now);
}

/* The step lines of dir's log that say the machine busy (their "time"
 * carries busy_slowdown while it lasts). */
static int pace_notes(const char *dir) { return t_log_count(dir, "\"busy_slowdown\":"); }

/* Whether the newest step line of dir's log says busy (0 when none). */
static int pace_busy(const char *dir)
{
    char path[300];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *log = (char *)t_slurp(path, NULL), *line = NULL;
    for (char *at = log; at && (at = strstr(at, "{\"kind\":\"step\"")); at++)
        line = at;
    char *end = line ? strchr(line, '\n') : NULL;
    if (end)
        *end = 0;
    int said = line && strstr(line, "\"busy_slowdown\":");
    free(log);
    return said;
}

enum { BUSY_LOOPS = 2, CALM_WINDOWS = 20 };

/* A run on one core (taskset -c 0) that two busy loops pinned to the same
 * core join once it has timed two windows, its pace not said busy (other
 * work on the machine may make it so first: then it waits for the pace to
 * come back): it says so on stderr and its log's step lines past the
 * loops' start carry busy_slowdown. */
static void check_pace_note(void)
{
    char out[4096];
    if (!t_have("taskset -c 0 true")) {
        SKIP_MISSING("util-linux", "the pace note of a slowed run not checked: no taskset");
        return;
    }
    pid_t run = t_spawn("exec taskset -c 0 ./gpt train --data " WD "/text.txt --steps 100000 "
                        "--eval-every 100000 --ckpt-every 100000 --out " WD "/pace "
                        ">/dev/null 2>" WD "/pace.err"), busy[BUSY_LOOPS];
    int want = 2 * PACE_WINDOW + 1;
    t_wait_for(t_steps_logged, WD "/pace", want, run);
    for (int w = 0; w < CALM_WINDOWS && pace_busy(WD "/pace"); w++)
        t_wait_for(t_steps_logged, WD "/pace", want += PACE_WINDOW, run);
    int from = t_steps_logged(WD "/pace"), notes = pace_notes(WD "/pace");
    int calm = !pace_busy(WD "/pace");
    for (int i = 0; calm && i < BUSY_LOOPS; i++)
        busy[i] = t_spawn("exec taskset -c 0 sh -c 'while :; do :; done'");
    if (calm)
        t_wait_for(pace_notes, WD "/pace", notes + 1, run);
    for (int i = 0; calm && i < BUSY_LOOPS; i++)
        kill(busy[i], SIGKILL), waitpid(busy[i], NULL, 0);
    kill(run, SIGKILL);
    waitpid(run, NULL, 0);
    if (!calm) {
        SKIP_MACHINE("the pace note of a slowed run: the machine kept the run busy for %d "
                     "windows before the test's own busy loops", CALM_WINDOWS);
        return;
    }
    int rc = t_run("grep -a busy_slowdown " WD "/pace/metrics.jsonl | tail -1 && cat " WD
                   "/pace.err", out, sizeof out);
    const char *line = strstr(out, "{\"kind\":\"step\",\"step\":");
    int step = line ? atoi(line + strlen("{\"kind\":\"step\",\"step\":")) : -1;
    CHECK(rc == 0 && line && strstr(line, "\"busy_slowdown\":") && step >= from &&
              strstr(out, "other programs are busy on this machine"),
          "busy loops on the run's core from step %d: no step line past it says busy, or no "
          "line on stderr: %s", from, out);
}

/* Two threads on one core (taskset -c 0 --threads 2), each region's join
 * waiting for the thread the core is not running: the run tries one
 * thread after its short first window, keeps it (it is faster there), and
 * says so by the end of the trial's window; the weights are the same
 * bits as a run on one thread throughout. OpenMP's threads spin
 * (OMP_WAIT_POLICY=active): with gpt's brief spin before a sleep, two
 * threads on one core of an Intel Xeon VM took only about 1.1x one
 * thread's step, too near the trial's 5% to be kept every time; spinning,
 * 1.2-2.0x, and still, once in some CI runs there, not 5% slower over
 * the trial's window: the run gets TRIAL_ATTEMPTS tries to keep one
 * thread, and every try must give the bits of --threads 1. */
enum { TRIAL_ATTEMPTS = 3 };
static void check_thread_trial(void)
{
    char out[4096];
    if (!t_have("taskset -c 0 true")) {
        SKIP_MISSING("util-linux", "the thread trial not checked: no taskset");
        return;
    }
    const int steps = 1 + PACE_FIRST + 2 * PACE_WINDOW;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "OMP_WAIT_POLICY=active taskset -c 0 ./gpt train --data " WD
             "/text.txt --steps %d "
             "--eval-every 100000 --ckpt-every 100000 --final-bytes 0 --live off --threads 2 "
             "--out " WD "/trial2 2>&1 >/dev/null && ./gpt train --data " WD "/text.txt "
             "--steps %d --eval-every 100000 --ckpt-every 100000 --final-bytes 0 --threads 1 "
             "--out " WD "/trial1 >/dev/null 2>&1 && cmp " WD "/trial2/ckpt-%08d.safetensors "
             WD "/trial1/ckpt-%08d.safetensors && echo same", steps, steps, steps, steps);
    int rc, step;
    const char *said;
    for (int attempt = 0; attempt < TRIAL_ATTEMPTS; attempt++) {
        t_run("rm -rf " WD "/trial1 " WD "/trial2", out, sizeof out);
        rc = t_run(cmd, out, sizeof out);
        const char *at = NULL;
        said = strstr(out, "going on with 1");
        for (const char *l = strstr(out, "gpt: step "); l && said && l < said;
             l = strstr(l + 1, "gpt: step "))
            at = l; /* the line that says it */
        step = at ? atoi(at + strlen("gpt: step ")) : -1;
        if (rc != 0 || !strstr(out, "same") || (said && step <= steps - 1 - PACE_WINDOW))
            break; /* other bits (a failure whatever the timing), or kept in time */
    }
    CHECK(rc == 0 && said && step <= steps - 1 - PACE_WINDOW && strstr(out, "same"),
          "2 threads on one core over %d steps (%d tries): rc %d, want \"going on with 1\" by "
          "step %d and the same checkpoint as --threads 1: %.600s", steps, TRIAL_ATTEMPTS, rc,
          steps - 1 - PACE_WINDOW, out);
    /* gpt sample's bytes and gpt eval's passes run the same trial: the
     * same bytes and loss whichever count each part ran on */
    rc = t_run("for t in 1 2; do taskset -c 0 ./gpt sample --ckpt " WD "/trial1 --bytes 600 "
               "--threads $t > " WD "/trial-sample$t && taskset -c 0 ./gpt eval --ckpt " WD
               "/trial1 --data " WD "/text.txt --chunk 4 --threads $t > " WD "/trial-eval$t "
               "|| exit 1; done; cmp " WD "/trial-sample1 " WD "/trial-sample2 && cmp " WD
               "/trial-eval1 " WD "/trial-eval2 && echo same", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "same"), "sample and eval on 2 threads on one core against "
          "--threads 1: rc %d: %.400s", rc, out);
}

/* The redo team (--redo, device/redo.h) with every thread on one core,
 * so that the scheduler holds threads off it in the middle of a core's
 * program and the others redo it: the checkpoint, every step's loss and
 * the eval lines are the plain run's, bit for bit, and the run says what
 * the team did: 8 cores' programs a step for 30 steps, and a pass for each
 * of an eval's 16 chunks of 16 windows (its 256, --eval-batch's default)
 * at 3 evals (cmd/train.c, test_loss_chunked). layout: the board's flags;
 * on one core (no --cores) the run lends itself a board of 8 (cmd/train.c,
 * lend_board). */
enum { TEAM_PROGRAMS = 8 * (30 + 3 * 256 / 16) };
/* The eager device lends its board to the training steps alone: each
 * core's forward and backward pass a unit (model/eager_board.c). */
enum { EAGER_TEAM_PASSES = 8 * 30 };
static void check_redo_team(const char *what, const char *layout, int threads, int units)
{
    char out[4096], cmd[2048];
    if (!t_have("taskset -c 0 true")) {
        SKIP_MISSING("util-linux", "%s on one core not checked: no taskset", what);
        return;
    }
    snprintf(cmd, sizeof cmd,
             "run='./gpt train --data " WD "/text.txt --steps 30 --eval-every 10 --ckpt-every "
             "100000 --final-bytes 0 --live off --batch 16 %s'; lines() { grep -oE "
             "'\"kind\":\"(step|eval)\",\"step\":[0-9]*,\"[a-z_]*loss\":[^,]*"
             "(,\"test_loss\":[^,]*)?' $1/metrics.jsonl; }; "
             "rm -rf " WD "/team " WD "/plain && "
             "taskset -c 0 $run --redo %d --out " WD "/team > " WD "/team.out 2>&1 && "
             "$run --out " WD "/plain > /dev/null 2>&1 && cmp " WD "/team/ckpt-00000030"
             ".safetensors " WD "/plain/ckpt-00000030.safetensors && lines " WD "/team > "
             WD "/team.lines && lines " WD "/plain > " WD "/plain.lines && test $(grep -c "
             "test_loss " WD "/team.lines) = 3 && cmp " WD "/team.lines " WD "/plain.lines "
             "&& grep -h 'the redo team ran %d ' " WD "/team.out && echo same",
             layout, threads, units);
    int rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "same"), "%s (--redo %d) on one core against the plain run: "
          "rc %d, want the same checkpoint, step losses and eval lines, and the team's %d "
          "units said: %.600s", what, threads, rc, units, out);
}

/* gpt eval with the redo team given (--redo), every thread on one core:
 * each pass on a board of 8 lent cores (cmd/evaluate.c), the team redoes
 * what a held thread has not finished, and the loss is --threads 1's on
 * one core; it says what the team did (8 programs for each of the 6
 * passes of 8 windows). */
static void check_eval_redo(void)
{
    char out[4096];
    if (!t_have("taskset -c 0 true")) {
        SKIP_MISSING("util-linux", "gpt eval --redo on one core not checked: no taskset");
        return;
    }
    int rc = t_run("taskset -c 0 ./gpt eval --ckpt " WD "/trial1 --data " WD "/text.txt --chunk "
                   "8 --redo 3 > " WD "/redo-eval 2> " WD "/redo-eval.err && cmp " WD
                   "/redo-eval " WD "/trial-eval1 && grep -h 'the redo team ran 48 ' " WD
                   "/redo-eval.err && echo same", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "same"), "gpt eval --redo 3 on one core against --threads 1: "
          "rc %d, want the same loss and the team's 48 programs said: %.600s", rc, out);
}

/* gpt sample --redo with every thread on one core: its window steps past
 * the context, 16 passages' windows split over a lent board of 8 cores
 * (cmd/sample.c, window_step), give --threads 1's bytes, and the team ran
 * 8 cores' programs for each of the 71 steps (bytes 129 to 199). */
enum { SAMPLE_TEAM_PROGRAMS = 8 * (200 - 129) };
static void check_sample_redo(void)
{
    char out[4096], cmd[1024];
    if (!t_have("taskset -c 0 true")) {
        SKIP_MISSING("util-linux", "gpt sample --redo on one core not checked: no taskset");
        return;
    }
    snprintf(cmd, sizeof cmd, "run='./gpt sample --ckpt " WD "/trial1 --num-samples 16 --bytes "
             "200'; taskset -c 0 $run --redo 3 > " WD "/redo-sample 2> " WD "/redo-sample.err "
             "&& $run --threads 1 | cmp - " WD "/redo-sample && grep -h 'the redo team ran %d ' " WD
             "/redo-sample.err && echo same", SAMPLE_TEAM_PROGRAMS);
    int rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "same"), "gpt sample --num-samples 16 --redo 3 on one core "
          "against --threads 1: rc %d, want the same bytes and the team's %d programs said: "
          "%.600s", rc, SAMPLE_TEAM_PROGRAMS, out);
}

/* A run that starts beside a busy loop of its own session runs the redo
 * team on a lent board from its first step (cmd/train.c, start_team), and
 * says so: the same checkpoint, step losses and eval lines as the plain
 * run, and at least the steps up to the first window's end on the team.
 * The team is a thread more than 2 for each busy thread of the session
 * (trial_team): 3 beside the loop, more while other suites run too.
 * With OMP_DYNAMIC=false beside the same loop: no team, the same bits. */
static void check_team_from_start(void)
{
    char out[4096], cmd[2048];
    snprintf(cmd, sizeof cmd,
             "run='./gpt train --data " WD "/text.txt --steps 30 --eval-every 10 --ckpt-every "
             "100000 --final-bytes 0 --live off --batch 16 --threads 2'; lines() { grep -oE "
             "'\"kind\":\"(step|eval)\",\"step\":[0-9]*,\"[a-z_]*loss\":[^,]*"
             "(,\"test_loss\":[^,]*)?' $1/metrics.jsonl; }; "
             "rm -rf " WD "/start " WD "/alone " WD "/kept && "
             "sh -c 'while :; do :; done' & busy=$!; sleep 0.2; "
             "$run --out " WD "/start > " WD "/start.out 2>&1; rc=$?; "
             "OMP_DYNAMIC=false $run --out " WD "/kept > " WD "/kept.out 2>&1 || rc=1; "
             "kill $busy; "
             "! grep -E 'redo team|starting on' " WD "/kept.out && cmp " WD
             "/kept/ckpt-00000030.safetensors " WD "/start/ckpt-00000030.safetensors && "
             "test $rc = 0 && $run --out " WD "/alone > /dev/null 2>&1 && cmp " WD
             "/start/ckpt-00000030.safetensors " WD "/alone/ckpt-00000030.safetensors && lines "
             WD "/start > " WD "/start.lines && lines " WD "/alone > " WD "/alone.lines && cmp "
             WD "/start.lines " WD "/alone.lines && grep -hE 'starting on 8 lent cores redone by "
             "[3-8] threads' " WD "/start.out && ran=$(grep -o 'the redo team ran [0-9]*' " WD
             "/start.out | grep -o '[0-9]*$') && test \"$ran\" -ge %d && echo same",
             8 * (1 + PACE_FIRST));
    int rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "same"), "a run started beside a busy loop of its session: "
          "rc %d, want the team from the first step (said, and %d programs at least) and the "
          "plain run's checkpoint, step losses and eval lines; with OMP_DYNAMIC=false no team "
          "and the same checkpoint: %.600s", rc, 8 * (1 + PACE_FIRST), out);
}

/* Bytes in the file at path (0: none yet), a progress for t_wait_for. */
static int file_bytes(const char *path)
{
    FILE *f = fopen(path, "rb");
    long n = f && !fseek(f, 0, SEEK_END) ? ftell(f) : 0;
    if (f)
        fclose(f);
    return (int)n;
}

/* The threads of process pid (/proc/PID/status), or -1. */
static int process_threads(pid_t pid)
{
    char path[64], line[256];
    int n = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

/* gpt sample started beside a busy loop of its session (cmd/commands.c,
 * start_threads) runs one thread from the start, where its short run
 * would otherwise spend its first window at the full count: once it has
 * streamed past the context (the bigger steps), the process has one
 * thread; and the bytes of --threads 1. gpt eval starts on the redo team
 * and a lent board of 8 cores (its passes replicated programs, which
 * --metrics counts) and gives the loss of --threads 1 on one core; so
 * does a sample of 16 passages, for its window steps past the context. */
static void check_sample_from_start(void)
{
    char out[4096];
    if (affinity_cores() < 2) {
        SKIP_MACHINE("a sample beside a busy loop not checked: this process may run on one "
                     "core, where two threads would only take turns");
        return;
    }
    pid_t busy = t_spawn("exec sh -c 'while :; do :; done'");
    usleep(200000); /* the loop runnable as the sample starts */
    pid_t run = t_spawn("exec ./gpt sample --ckpt " WD "/trial1 --bytes 3000 --threads 2 > "
                        WD "/busy-sample");
    t_wait_for(file_bytes, WD "/busy-sample", 400, run);
    int threads = process_threads(run), status = 0;
    waitpid(run, &status, 0);
    int rc = t_run("./gpt eval --ckpt " WD "/trial1 --data " WD "/text.txt --chunk 8 "
                   "--threads 2 --metrics > " WD "/busy-eval && { ./gpt sample --ckpt " WD
                   "/trial1 --num-samples 16 --bytes 200 --threads 2 > " WD "/busy-sample16 2> "
                   WD "/busy-sample16.err; }", out, sizeof out);
    kill(busy, SIGKILL);
    waitpid(busy, NULL, 0);
    CHECK(threads == 1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "gpt sample beside a "
          "busy loop of its session: %d threads after 400 bytes, want 1 (exit status %d)",
          threads, status);
    if (rc == 0)
        rc = t_run("./gpt sample --ckpt " WD "/trial1 --bytes 3000 --threads 1 > " WD
                   "/quiet-sample && cmp " WD "/busy-sample " WD "/quiet-sample && head -1 "
                   WD "/busy-eval | cmp - " WD "/trial-eval1 && grep -A1 "
                   "'^Metric: ExecuteReplicatedTime' " WD "/busy-eval | grep -v ': 0$' | "
                   "grep -q TotalSamples && ./gpt sample --ckpt " WD "/trial1 --num-samples "
                   "16 --bytes 200 --threads 1 > " WD "/quiet-sample16 && cmp " WD
                   "/busy-sample16 " WD "/quiet-sample16 && grep -q 'the redo team ran' " WD
                   "/busy-sample16.err && echo same", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "same"), "sample and eval beside a busy loop against "
          "--threads 1 (16 passages' window steps on the redo team): rc %d: %.400s", rc, out);
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
    check_pace_unit();
    check_trial_next();
    check_trial_apart();
    check_pace_others();
    check_pace_note();
    check_thread_trial();
    check_sample_from_start();
    check_eval_redo();
    check_sample_redo();
    check_redo_team("--cores 8 and the redo team", "--cores 8", 4, TEAM_PROGRAMS);
    check_redo_team("a board lent to one core's redo team", "", 3, TEAM_PROGRAMS);
    /* a core's mean loss stays a partial sum in fp32 until the all-reduce,
     * as its gradients do: bf16-pure rounds the step's loss once */
    check_redo_team("a board lent to one core's redo team, bf16-pure with dropout",
                    "--precision bf16-pure --dropout 0.1", 3, TEAM_PROGRAMS);
    check_redo_team("the eager device's lent board", "--device cpu", 3, EAGER_TEAM_PASSES);
    check_redo_team("the eager device's lent board, bf16-pure with dropout",
                    "--device cpu --precision bf16-pure --dropout 0.1", 3, EAGER_TEAM_PASSES);
    check_team_from_start();
}
