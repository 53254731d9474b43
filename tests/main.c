/* tests/main.c: runs every suite and ends with the one summary line. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <dirent.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test.h"
#include "safetensors/safetensors.h"
#include "tensor.h"

int t_pass, t_fail, t_skip;

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
        t_fail++;
        fprintf(stderr, "FAIL %s:%d: skipped under CI=true, which installs %s: %s\n", file, line,
                package, why);
        return;
    }
    t_skip++;
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
    FILE *p = popen(full, "r");
    size_t got = p ? fread(out, 1, n - 1, p) : 0;
    out[got] = 0;
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

/* How many steps dir's run log (metrics.jsonl, flushed each step) records. */
int t_steps_logged(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *log = (char *)t_slurp(path, NULL), *at = log;
    int n = 0;
    while (at && (at = strstr(at, "\"kind\":\"step\"")))
        n++, at++;
    free(log);
    return n;
}

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
};

/* Whether the command line asks for this suite (no names: every one). */
static int wanted(int argc, char **argv, const char *name)
{
    for (int a = 1; a < argc; a++)
        if (!strcmp(argv[a], name))
            return 1;
    return argc == 1;
}

/* tests/run [SUITE...]: the named suites, or all of them. */
int main(int argc, char **argv)
{
    /* The suites check vdpbf16ps's bits wherever the CPU has it, even
     * where GPT_BF16=auto would leave it for the faster emulation; this
     * process and the gpt runs it starts inherit the choice. */
    setenv("GPT_BF16", "native", 0);
    for (int a = 1; a < argc; a++) {
        int known = 0;
        for (size_t i = 0; i < sizeof suites / sizeof *suites; i++)
            known |= !strcmp(argv[a], suites[i].name);
        if (!known) {
            fprintf(stderr, "tests/run: no suite '%s'\n", argv[a]);
            return 2;
        }
    }
    for (size_t i = 0; i < sizeof suites / sizeof *suites; i++) {
        if (!wanted(argc, argv, suites[i].name))
            continue;
        int p = t_pass, f = t_fail, s = t_skip;
        suites[i].run();
        /* A suite that ran nothing and gave no reason is a skip, never a
         * success; CI, which installs everything, fails it. */
        if (t_pass == p && t_fail == f && t_skip == s) {
            if (t_in_ci())
                CHECK(0, "suite %s ran no check and gave no reason", suites[i].name);
            else
                SKIP_MACHINE("suite %s ran no check and gave no reason", suites[i].name);
        }
        fprintf(stderr, "suite %-8s %d passed, %d failed, %d skipped\n", suites[i].name,
                t_pass - p, t_fail - f, t_skip - s);
    }
    printf("%d passed, %d failed, %d skipped\n", t_pass, t_fail, t_skip);
    return t_fail ? 1 : 0;
}
