/* tests/main.c: runs every suite, each in a process of its own, and ends
 * with the one summary line. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "test.h"
#include "safetensors/safetensors.h"
#include "tensor.h"
#include "data/loader.h"
#include "data/text.h"

/* Where the checks are counted before main() maps the shared counts. */
static struct t_counts local_counts;
struct t_counts *t_counts = &local_counts;

int t_in_ci(void)
{
    const char *ci = getenv("CI");
    return ci && !strcmp(ci, "true");
}

void t_skip_at(const char *file, int line, const char *package, const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (package && t_in_ci()) { /* CI installs it: its absence is a broken CI */
        t_counts->fail++;
        fprintf(stderr, "FAIL %s:%d: skipped under CI=true, which installs %s: %s\n", file, line,
                package, why);
        return;
    }
    t_counts->skip++;
    fprintf(stderr, "SKIP %s:%d: %s%s%s%s\n", file, line, why, package ? " (install " : "",
            package ? package : "", package ? ")" : "");
}

const char *t_isa_skipped(int isa)
{
    static char why[128];
    if (isa <= isa_best())
        return NULL;
    if (isa > isa_cpu())
        snprintf(why, sizeof why, "the CPU lacks %s", isa_name(isa));
    else /* only the environment lowers isa_best() below the CPU's */
        snprintf(why, sizeof why, "GPT_ISA=%s lowered the choice", getenv("GPT_ISA"));
    return why;
}

const char *t_bf16_skipped(void)
{
#if defined(__x86_64__) /* the avx512 path has vdpbf16ps */
    if (!bf16_cpu())
        return "the CPU lacks AVX512_BF16";
    if (isa_best() < ISA_AVX512)
        return t_isa_skipped(ISA_AVX512);
    if (!strcmp(bf16_setting(), "emulate"))
        return "GPT_BF16=emulate turned it off";
    int isa = isa_get(); /* bf16_native() asks of the current path */
    isa_set(ISA_AVX512);
    int native = bf16_native();
    isa_set(isa);
    if (!native)
        return "GPT_BF16=auto left it for the faster emulation (GPT_BF16=native checks it)";
#endif
    return NULL;
}

int t_have(const char *cmd)
{
    char full[2048];
    snprintf(full, sizeof full, "(%s) >/dev/null 2>&1", cmd);
    int st = system(full);
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

double max_rel_err(const float *a, const float *b, size_t n, double floor)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double s = fabs((double)b[i]) > floor ? fabs((double)b[i]) : floor;
        if (!(d / s <= worst)) /* NaN counts as the worst */
            worst = isnan(d) ? INFINITY : d / s;
    }
    return worst;
}

int t_run(const char *cmd, char *out, size_t n)
{
    char full[2048];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    return t_run_stdout(full, out, n);
}

int t_run_stdout(const char *cmd, char *out, size_t n)
{
    FILE *p = popen(cmd, "r");
    size_t got = p ? fread(out, 1, n - 1, p) : 0;
    out[got] = 0;
    for (size_t i = 0; i < got; i++) /* a sampled passage may hold 0 bytes: keep strstr going */
        if (!out[i])
            out[i] = '?';
    char rest[4096]; /* read to the end, so that a long output is no SIGPIPE */
    while (p && fread(rest, 1, sizeof rest, p) > 0)
        ;
    int st = p ? pclose(p) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

pid_t t_spawn(const char *cmd)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

unsigned char *t_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)(len > 0 ? len : 0) + 1);
    size_t got = fread(p, 1, (size_t)(len > 0 ? len : 0), f);
    p[got] = 0;
    if (n)
        *n = got;
    fclose(f);
    return p;
}

void t_expect_one_line(const char *cmd, int code, const char *says)
{
    char out[65536];
    int rc = t_run(cmd, out, sizeof out), lines = 0;
    for (char *c = out; *c; c++)
        lines += *c == '\n';
    CHECK(rc == code && strstr(out, says) && lines == 1,
          "'%s' gave exit %d (want %d) and '%s' (want one line with '%s')", cmd, rc, code, out,
          says);
}

int t_same_file(const char *a, const char *b)
{
    char cmd[512], out[256];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    return t_run(cmd, out, sizeof out) == 0;
}

int t_same_tensors(const char *a, const char *b)
{
    StFile fa, fb;
    char err[256];
    int ok = st_load(&fa, a, err, sizeof err) == 0;
    if (!ok)
        return 0;
    ok = st_load(&fb, b, err, sizeof err) == 0;
    if (!ok) {
        st_free(&fa);
        return 0;
    }
    ok = fa.n == fb.n && fa.size - fa.data_off == fb.size - fb.data_off &&
         !memcmp(fa.buf + fa.data_off, fb.buf + fb.data_off, fa.size - fa.data_off);
    for (int i = 0; ok && i < fa.n; i++) {
        const StEntry *e = &fa.e[i], *f = st_find(&fb, e->name);
        ok = f && f->begin == e->begin && f->end == e->end && f->dtype == e->dtype;
    }
    st_free(&fa);
    st_free(&fb);
    return ok;
}

/* The step of dir's newest whole checkpoint; 0 when it has none. */
int t_newest_step(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int newest = 0, step;
    while (d && (e = readdir(d)))
        if (!strstr(e->d_name, ".tmp") && sscanf(e->d_name, "ckpt-%d", &step) == 1 &&
            step > newest)
            newest = step;
    if (d)
        closedir(d);
    return newest;
}

int t_log_count(const char *dir, const char *what)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *log = (char *)t_slurp(path, NULL), *at = log;
    int n = 0;
    while (at && (at = strstr(at, what)))
        n++, at++;
    free(log);
    return n;
}

/* How many steps dir's run log (metrics.jsonl, flushed each step) records. */
int t_steps_logged(const char *dir) { return t_log_count(dir, "\"kind\":\"step\""); }

/* Waits until progress(dir) reaches n (a checkpoint's step, steps logged):
 * training has begun and got that far. Gives up if the child pid exits
 * (left unreaped, for the caller's waitpid) or after a minute of a
 * crowded machine. */
void t_wait_for(int (*progress)(const char *), const char *dir, int n, pid_t pid)
{
    for (int ms = 0; ms < 60000 && progress(dir) < n; ms++) {
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
            return;
        usleep(1000);
    }
}

int t_running(long pid, long *ppid, long *pgrp)
{
    char path[64], stat[512], state;
    long parent, group;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r"); /* (its size says 0: no t_slurp) */
    size_t got = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
    if (f)
        fclose(f);
    stat[got] = 0;
    char *name_end = strrchr(stat, ')'); /* a command's name may hold anything */
    if (!name_end || sscanf(name_end + 1, " %c %ld %ld", &state, &parent, &group) != 3 ||
        state == 'Z' || state == 'X')
        return 0;
    if (ppid)
        *ppid = parent;
    if (pgrp)
        *pgrp = group;
    return 1;
}

/* Pseudo-English from a fixed word list: small, learnable, reproducible. */
void t_write_words(const char *path, size_t at_least)
{
    static const char *w[] = {"the", "cat", "sat", "on", "a", "mat", "and",
                              "Holmes", "said", "Watson,", "my", "dear", "it", "is",
                              "elementary.", "\n"};
    char *buf = malloc(at_least + 64);
    size_t n = 0;
    uint64_t x = 99;
    while (n < at_least) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        n += (size_t)sprintf(buf + n, "%s ", w[(x >> 33) % 16]);
    }
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    free(buf);
}

int t_have_mpi(const char *what)
{
    if (!t_have("command -v mpirun")) {
        SKIP_MISSING("openmpi-bin", "%s: no mpirun", what);
        return 0;
    }
    if (access("./gpt-mpi", X_OK)) {
        SKIP_MISSING("libopenmpi-dev", "%s: no ./gpt-mpi (make gpt-mpi builds it with mpicc)",
                     what);
        return 0;
    }
    return 1;
}

/* Every byte value, 0 and those >= 128 included: a 64-bit LCG's top
 * byte, so that no two windows of a few KB of it are alike. */
void t_write_bytes(const char *path, size_t n)
{
    unsigned char *buf = malloc(n);
    uint64_t x = 59;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (unsigned char)(x >> 56);
    }
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    free(buf);
}

void t_train_windows(const char *path, int seq, int vocab, uint64_t seed, int windows,
                     int steps, unsigned char *out)
{
    Data d;
    load_data(&d, path, seq, vocab, 1);
    Rng rng;
    rng_seed(&rng, seed, RNG_DATA);
    LoaderSpec spec = {.T = seq, .B = windows, .streams = 1, .count = 1, .vocab = vocab,
                       .seed = seed, .text = d.bytes, .text_len = d.n_train, .rng = rng};
    char err[1024];
    Loader *l = loader_start(&spec, NULL, NULL, err, sizeof err);
    CHECK(l, "%s: the loader does not start: %s", path, err);
    size_t step_bytes = (size_t)windows * (size_t)seq;
    for (int s = 0; l && s < steps; s++) {
        const unsigned char *rows = loader_next(l, NULL, err, sizeof err);
        CHECK(rows, "%s: the loader's step %d: %s", path, s, err);
        if (rows)
            memcpy(out + (size_t)s * step_bytes, rows, step_bytes);
    }
    loader_stop(l);
    free(d.bytes);
}

int t_cores(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

void t_threads_said(char *buf, size_t n, int ranks)
{
    int cores = t_cores(), each = cores / ranks > 1 ? cores / ranks : 1;
    int len = snprintf(buf, n, "%d thread%s: %d core%s", each, each > 1 ? "s" : "", cores,
                       cores > 1 ? "s" : "");
    if (ranks > 1 && len < (int)n)
        snprintf(buf + len, n - (size_t)len, ", %d ranks on this host -> %d", ranks, each);
}

static const struct {
    const char *name;
    void (*run)(void);
} suites[] = {
    {"kernels", test_kernels}, {"grads", test_grads}, {"model", test_model},
    {"ckpt", test_ckpt},       {"xla", test_xla},     {"tpu", test_tpu},
    {"cli", test_cli},         {"mpi", test_mpi},     {"tour", test_tour},
    {"data", test_data},
    {"loader", test_loader},
    {"watch", test_watch},
    {"homework", test_homework},
    {"fmath", test_fmath},
    {"golden", test_golden},
    {"numbers", test_numbers},
    {"optim", test_optim},
    {"house", test_house},
    {"lock", test_lock},
    {"config", test_config},
    {"progress", test_progress},
    {"remat", test_remat},
    {"shard", test_shard},
    {"accum", test_accum},
    {"bytes", test_bytes},
    {"harness", test_harness},
    {"plain", test_plain},
    {"gen", test_gen},
};

/* Whether the command line asks for this suite (no names: every one). */
static int wanted(int argc, char **argv, const char *name)
{
    for (int a = 1; a < argc; a++)
        if (!strcmp(argv[a], name))
            return 1;
    return argc == 1;
}

/* The suite called name, or -1. */
static int suite_named(const char *name)
{
    for (size_t i = 0; i < sizeof suites / sizeof *suites; i++)
        if (!strcmp(name, suites[i].name))
            return (int)i;
    return -1;
}

/* ---- each suite in a process of its own ----
 *
 * A suite runs in a child process, in a process group of its own, and
 * counts its checks in memory it shares with tests/run: a suite that
 * crashes (any signal), exits early or hangs past its time limit fails
 * by name, keeps what it had counted, and the suites after it still run.
 * tests/run is the subreaper of everything a suite starts (an orphan
 * comes back to it, not to init), and when a suite ends, whatever it left
 * running is stopped: its group, and the orphans in groups of their own
 * (as mpirun's ranks are); SIGTERM first, on which gpt and mpirun end
 * their runs and their children, SIGKILL STOP_GRACE_S later. */

/* A suite's time limit unless GPT_TEST_TIMEOUT (seconds) says otherwise:
 * generous, about 5 times the slowest suite's time here. */
#define SUITE_LIMIT_S 600.0
#define STOP_GRACE_S 2.0 /* from SIGTERM to SIGKILL for what a suite left */
#define STOP_ROUNDS 4    /* generations of orphans stopped, each given back by the last */
#define POLL_S 0.02      /* how often a stop looks again at what is left */

/* Test-only faults, for tests/test_harness.c: GPT_TEST_CRASH=SUITE makes
 * the suite die of SIGSEGV once its checks are done, GPT_TEST_HANG=SUITE
 * makes it hang then. Either first starts a sleeping child that tests/run
 * must stop (the hang's ignores SIGTERM) and says its pid. */
#define CRASH_VAR "GPT_TEST_CRASH"
#define HANG_VAR "GPT_TEST_HANG"
#define SLEEPER "exec sleep 600"
#define STUBBORN_SLEEPER "trap '' TERM; exec sleep 600"

static sigset_t start_mask; /* the signal mask tests/run started with: the suites' */
static sigset_t awaited;    /* blocked in tests/run and waited for: SIGCHLD, and its stops */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static struct timespec seconds(double s)
{
    return (struct timespec){(time_t)s, (long)((s - floor(s)) * 1e9)};
}

/* GPT_TEST_TIMEOUT, or SUITE_LIMIT_S; exits 2 when it is no number > 0. */
static double suite_limit(void)
{
    const char *s = getenv("GPT_TEST_TIMEOUT");
    if (!s || !*s)
        return SUITE_LIMIT_S;
    char *end;
    double v = strtod(s, &end);
    if (*end || !(v > 0 && v < 1e9)) {
        fprintf(stderr, "tests/run: GPT_TEST_TIMEOUT=%s: expected a suite's time limit in "
                "seconds, a number > 0\n", s);
        exit(2);
    }
    return v;
}

/* Exits 2 when the fault variable var is set to no suite's name. */
static void check_fault_var(const char *var)
{
    const char *v = getenv(var);
    if (v && *v && suite_named(v) < 0) {
        fprintf(stderr, "tests/run: %s=%s: no suite '%s'\n", var, v, v);
        exit(2);
    }
}

/* Whether environment variable var names this suite. */
static int names(const char *var, const char *suite)
{
    const char *v = getenv(var);
    return v && !strcmp(v, suite);
}

/* In the suite's process, once its checks are done: the fault asked for. */
static void injected_fault(const char *suite)
{
    int crash = names(CRASH_VAR, suite), hang = names(HANG_VAR, suite);
    if (!crash && !hang)
        return;
    pid_t sleeper = t_spawn(hang ? STUBBORN_SLEEPER : SLEEPER);
    fprintf(stderr, "tests/run: %s=%s: the suite %s on purpose (sleeper pid %d)\n",
            crash ? CRASH_VAR : HANG_VAR, suite, crash ? "crashes" : "hangs", (int)sleeper);
    if (hang)
        for (;;)
            pause();
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(SIGSEGV, SIG_DFL); /* past a sanitizer's handler: the plain crash */
    raise(SIGSEGV);
}

/* The suite's process: a group of its own, the signal mask tests/run
 * started with, the suite, then the end. */
static void run_child(int i, pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* tests/run killed outright takes it along */
    if (getppid() != parent)
        _exit(1);
    sigprocmask(SIG_SETMASK, &start_mask, NULL);
    suites[i].run();
    injected_fault(suites[i].name);
    exit(0);
}

/* Reaps what has ended among tests/run's children (orphans given back to
 * it) but the suite's own process, whose status is left to read. */
static void reap_orphans(pid_t suite)
{
    for (;;) {
        siginfo_t si = {0};
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) || si.si_pid == 0 ||
            si.si_pid == suite)
            return;
        waitpid(si.si_pid, NULL, 0);
    }
}

enum ending { ENDED, TIMED_OUT, STOPPED };

/* Waits until the suite's process ends (left unreaped), limit seconds
 * pass, or tests/run is told to stop (*signo: by which signal). */
static enum ending await_suite(pid_t suite, double limit, int *signo)
{
    double deadline = now_s() + limit;
    for (;;) {
        reap_orphans(suite);
        siginfo_t si = {0};
        if (!waitid(P_PID, (id_t)suite, &si, WEXITED | WNOHANG | WNOWAIT) && si.si_pid == suite)
            return ENDED;
        double left = deadline - now_s();
        if (left <= 0)
            return TIMED_OUT;
        struct timespec t = seconds(left);
        int got = sigtimedwait(&awaited, NULL, &t);
        if (got > 0 && got != SIGCHLD) {
            *signo = got;
            return STOPPED;
        }
    }
}

/* Sends sig (0: none) to every live process of the suite's group and to
 * every child of tests/run (orphans given back to it, and the suite's own
 * process while it runs); returns how many there are. */
static int signal_leftovers(pid_t group, int sig)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    long self = (long)getpid();
    int n = 0;
    while (d && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10), ppid, pgrp;
        if (*end || pid <= 0 || !t_running(pid, &ppid, &pgrp) ||
            (pgrp != (long)group && ppid != self))
            continue;
        n++;
        if (sig)
            kill((pid_t)pid, sig);
    }
    if (d)
        closedir(d);
    return n;
}

/* Waits up to s seconds for the leftovers to end; returns how many remain. */
static int await_leftovers(pid_t group, pid_t suite, double s)
{
    double until = now_s() + s;
    int n;
    while ((n = signal_leftovers(group, 0)) > 0 && now_s() < until) {
        reap_orphans(suite);
        struct timespec poll = seconds(POLL_S);
        nanosleep(&poll, NULL);
    }
    return n;
}

/* Stops what the suite left running (its own process too, if it runs);
 * returns how many processes there were. */
static int stop_leftovers(pid_t group, pid_t suite)
{
    int first = signal_leftovers(group, 0);
    for (int round = 0, left = first; left > 0 && round < STOP_ROUNDS; round++) {
        signal_leftovers(group, SIGTERM);
        if (await_leftovers(group, suite, STOP_GRACE_S) > 0) {
            signal_leftovers(group, SIGKILL);
            await_leftovers(group, suite, STOP_GRACE_S);
        }
        left = signal_leftovers(group, 0);
    }
    reap_orphans(suite);
    return first;
}

/* What went wrong with a suite that did not end by returning, in why;
 * "" when it did. */
static void say_ending(char *why, size_t n, enum ending how, int st, double limit, int signo)
{
    *why = 0;
    if (how == TIMED_OUT)
        snprintf(why, n, "still running after %g s (GPT_TEST_TIMEOUT): stopped", limit);
    else if (how == STOPPED)
        snprintf(why, n, "stopped: tests/run got signal %d (%s)", signo, strsignal(signo));
    else if (WIFSIGNALED(st))
        snprintf(why, n, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else if (WIFEXITED(st) && WEXITSTATUS(st))
        snprintf(why, n, "exited with status %d", WEXITSTATUS(st));
}

/* Runs suite i in a process of its own and says how it went: a suite
 * that did not end by returning counts one failure more. Returns the
 * signal that stopped tests/run meanwhile, or 0. */
static int run_suite(int i, double limit)
{
    const char *name = suites[i].name;
    struct t_counts was = *t_counts;
    pid_t parent = getpid();
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        CHECK(0, "suite %s: cannot start its process (%s)", name, strerror(errno));
        return 0;
    }
    if (pid == 0)
        run_child(i, parent);
    setpgid(pid, pid); /* as the child does: whichever comes first */
    int signo = 0, st = 0;
    enum ending how = await_suite(pid, limit, &signo);
    int left = stop_leftovers(pid, pid);
    waitpid(pid, &st, 0);
    char why[160];
    say_ending(why, sizeof why, how, st, limit, signo);
    if (*why) {
        t_counts->fail++;
        fprintf(stderr, "FAIL suite %s: %s\n", name, why);
    } else if (left) {
        fprintf(stderr, "tests/run: suite %s left %d processes running: stopped them\n", name,
                left);
    }
    /* A suite that ran nothing and gave no reason is a skip, never a
     * success; CI, which installs everything, fails it. */
    if (!memcmp(&was, t_counts, sizeof was)) {
        if (t_in_ci())
            CHECK(0, "suite %s ran no check and gave no reason", name);
        else
            SKIP_MACHINE("suite %s ran no check and gave no reason", name);
    }
    fprintf(stderr, "suite %-8s %d passed, %d failed, %d skipped\n", name,
            t_counts->pass - was.pass, t_counts->fail - was.fail, t_counts->skip - was.skip);
    return signo;
}

/* The counts where each suite's process writes them as it goes. */
static struct t_counts *shared_counts(void)
{
    void *p = mmap(NULL, sizeof(struct t_counts), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "tests/run: cannot map the counts (%s)\n", strerror(errno));
        exit(1);
    }
    return memset(p, 0, sizeof(struct t_counts));
}

/* tests/run [SUITE...]: the named suites, or all of them. */
int main(int argc, char **argv)
{
    /* The suites check vdpbf16ps's bits wherever the CPU has it, even
     * where GPT_BF16=auto would leave it for the faster emulation; this
     * process and the gpt runs it starts inherit the choice. */
    setenv("GPT_BF16", "native", 0);
    for (int a = 1; a < argc; a++)
        if (suite_named(argv[a]) < 0) {
            fprintf(stderr, "tests/run: no suite '%s'\n", argv[a]);
            return 2;
        }
    check_fault_var(CRASH_VAR);
    check_fault_var(HANG_VAR);
    double limit = suite_limit();
    t_counts = shared_counts();
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* without it (not Linux), orphans go to init */
    sigemptyset(&awaited);
    sigaddset(&awaited, SIGCHLD);
    sigaddset(&awaited, SIGINT);
    sigaddset(&awaited, SIGTERM);
    sigaddset(&awaited, SIGHUP);
    sigprocmask(SIG_BLOCK, &awaited, &start_mask);
    int signo = 0;
    for (int i = 0; i < (int)(sizeof suites / sizeof *suites) && !signo; i++)
        if (wanted(argc, argv, suites[i].name))
            signo = run_suite(i, limit);
    printf("%d passed, %d failed, %d skipped\n", t_counts->pass, t_counts->fail, t_counts->skip);
    if (signo) { /* stopped: end as the signal would have ended it */
        sigset_t one;
        fflush(NULL);
        sigemptyset(&one);
        sigaddset(&one, signo);
        signal(signo, SIG_DFL);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(signo);
    }
    return t_counts->fail ? 1 : 0;
}
