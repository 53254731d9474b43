/* sweep.c: gpt sweep, the reference workshop's last exercise. A grid of
 * training runs (every flag given a comma list is an axis) runs as
 * independent `gpt train` processes at once, as the workshop suggests using
 * a TPU board: one run per device. Each run has its own directory under
 * --out (named by its settings, e.g. sweep/lr=3e-4,embed=32) with its
 * checkpoints, metrics.jsonl and log.txt; the sweep reads their logs for
 * a live table, prints a final one and draws every curve on one chart.
 *
 * Killed, a sweep's runs checkpoint (they get SIGINT, as on ^C, also when
 * the sweep itself is killed outright); the same command again resumes
 * each unfinished run (once that run's old process has saved and ended:
 * rundir.c's lock says when) and skips the finished ones. A second sweep
 * into the same --out is refused while the first lives. Runs share the machine
 * evenly: each gets cores / (runs at once) OpenMP threads, at least one.
 *
 * It sits beside the other commands: it runs this binary, not the model. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "cmd/rundir.h"
#include "util/util.h"
#include "util/threads.h"
#include "watch/watch.h"

#define MAX_RUNS 256
#define MAX_ARGS 128
#define MAX_AXES 16 /* swept flags */

/* One run of the grid. */
struct run {
    char name[256];       /* "lr=3e-4,embed=32": its settings on the axes */
    char dir[4400];       /* --out/name */
    const char *arg[MAX_ARGS]; /* its gpt train argv after "train" */
    int narg, steps;
    pid_t pid;            /* running, or 0 */
    int state;            /* 0 waiting, 1 running, 2 done, 3 failed */
    int rc;
    double t0, wall;      /* seconds */
};

/* What a run's metrics.jsonl says so far. */
struct progress {
    int step;
    double test_loss; /* the last eval's, NAN before the first */
    double ms;        /* median ms per step past the first few */
};

static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) { stop_signal = sig; }

static int usage_error(const char *fmt, const char *what)
{
    fprintf(stderr, "gpt: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, " (see gpt sweep --help)\n");
    return 2;
}

/* Reads dir/metrics.jsonl: the newest step, the last test loss and the
 * median step time (steps 5 on: the first ones compile). */
static struct progress read_progress(const char *dir)
{
    struct progress p = {0, NAN, NAN};
    char path[4500], line[8192];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    static double ms[1 << 18];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *s;
        if (strstr(line, "\"kind\":\"step\"")) {
            if ((s = strstr(line, "\"step\":")))
                p.step = atoi(s + 7) + 1;
            if ((s = strstr(line, "\"ms\":")) && p.step > 5 && n < (1 << 18))
                ms[n++] = strtod(s + 5, NULL);
        } else if (strstr(line, "\"kind\":\"eval\"") && (s = strstr(line, "\"test_loss\":"))) {
            p.test_loss = strncmp(s + 12, "null", 4) ? strtod(s + 12, NULL) : NAN;
        }
    }
    if (f)
        fclose(f);
    if (n)
        p.ms = median_of(ms, (size_t)n);
    return p;
}

/* The step of dir's newest checkpoint, 0 if none. */
static int newest_ckpt(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int best = 0, s;
    while (d && (e = readdir(d)))
        if (sscanf(e->d_name, "ckpt-%d.safetensors", &s) == 1 && s > best)
            best = s;
    if (d)
        closedir(d);
    return best;
}

static const char *const state_name[] = {"waiting", "running", "done", "FAILED"};

static void print_table(const struct run *r, int n, int final)
{
    printf("%-34s %-8s %9s %10s %8s %9s %9s\n", "run", "state", "step", "test loss", "bpb",
           "ms/step", "wall s");
    for (int i = 0; i < n; i++) {
        struct progress p = read_progress(r[i].dir);
        double wall = r[i].state == 1 ? now_seconds() - r[i].t0 : r[i].wall;
        printf("%-34s %-8s %9d %10.4f %8.4f %9.2f %9.0f\n", r[i].name, state_name[r[i].state],
               p.step, p.test_loss, p.test_loss / log(2.0), p.ms, wall);
    }
    if (!final)
        printf("\n");
    fflush(stdout);
}

/* Starts run r: `gpt train ARGS --out DIR [--resume DIR] --threads T`,
 * its output appended to DIR/log.txt. */
static int launch_run(struct run *r, int threads, int user_threads)
{
    char log[4500], th[16];
    mkdir(r->dir, 0755);
    snprintf(log, sizeof log, "%s/log.txt", r->dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
        fprintf(stderr, "gpt: %s: cannot write the run's log (%s)\n", log, strerror(errno));
        return -1;
    }
    const char *argv[MAX_ARGS + 12];
    int k = 0;
    argv[k++] = "gpt";
    argv[k++] = "train";
    for (int i = 0; i < r->narg; i++)
        argv[k++] = r->arg[i];
    argv[k++] = "--out";
    argv[k++] = r->dir;
    if (newest_ckpt(r->dir) > 0) {
        argv[k++] = "--resume";
        argv[k++] = r->dir;
    }
    if (!user_threads) {
        snprintf(th, sizeof th, "%d", threads);
        argv[k++] = "--threads";
        argv[k++] = th;
    }
    argv[k] = NULL;
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        fprintf(stderr, "gpt: cannot start run %s (%s)\n", r->name, strerror(errno));
        close(fd);
        return -1;
    }
    if (pid == 0) {
        /* killed with the sweep, a run checkpoints as on ^C */
        prctl(PR_SET_PDEATHSIG, SIGINT);
        if (getppid() != parent)
            _exit(130);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        execv("/proc/self/exe", (char *const *)argv);
        fprintf(stderr, "gpt: cannot run /proc/self/exe (%s)\n", strerror(errno));
        _exit(127);
    }
    close(fd);
    r->pid = pid;
    r->state = 1;
    r->t0 = now_seconds();
    return 0;
}

/* gpt train's flags that take no value: swept as 0,1 (off, on). */
static int is_switch(const char *flag)
{
    return !strcmp(flag, "--no-mlp") || !strcmp(flag, "--metrics") || !strcmp(flag, "--verbose");
}

/* The board's devices: runs at once. */
static int board_devices(const char *tpu)
{
    static const char *const boards[] = {"v2-8", "v3-8", "v4-8", "v5e-8", "v5p-8", "v6e-8"};
    for (size_t i = 0; i < sizeof boards / sizeof *boards; i++)
        if (!strcmp(tpu, boards[i]))
            return 8;
    return -1;
}

static void help(void)
{
    printf("usage: gpt sweep [gpt train flags, any with a comma list] [--out DIR] [--tpu BOARD]\n"
           "Runs the grid of every comma list's values (e.g. --lr 3e-4,1e-3,3e-3 --embed "
           "32,64) as\nindependent training runs at once, each in DIR/<its settings> with "
           "its own log.txt,\ncheckpoints and metrics.jsonl; prints a live table and a final "
           "one, and draws every\nrun's losses on DIR/loss.svg. Killed, its runs checkpoint; "
           "the same command resumes them.\n\n"
           "  --out DIR     the sweep's directory ['sweep']\n"
           "  --tpu BOARD   run one training run per device of this board (v2-8 ... v6e-8: "
           "8 at once);\n                default: every run at once\n"
           "  --every S     seconds between live tables [30]\n"
           "A flag without a value (--no-mlp) is swept as 0,1: without it and with it.\n");
}

/* A sweep: its flags, its grid of runs and, while they run, the count. */
struct sweep {
    const char *out, *tpu;
    const char *fixed[MAX_ARGS];                 /* flags every run gets */
    const char *axis_flag[MAX_AXES], *axis_val[MAX_AXES]; /* swept: "--lr", "3e-4,1e-3" */
    int nfixed, naxes, every, user_threads;
    int n, parallel, threads;                    /* runs, at once, threads each */
    struct run runs[MAX_RUNS];
    char values[MAX_RUNS][MAX_AXES][64];         /* run i's value on axis a */
    int running, next, failed, forwarded;
};

/* Reads the sweep's own flags and sorts gpt train's into fixed and swept.
 * Returns -1 to go on, else the exit code (0 after --help). */
static int parse_sweep(struct sweep *sw, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return 0;
        }
        if (strncmp(a, "--", 2))
            return usage_error("unexpected argument '%s'", a);
        if (!strcmp(a, "--resume") || !strcmp(a, "--init") || !strcmp(a, "--profile"))
            return usage_error("%s is per run; a sweep resumes its runs itself", a);
        int has_value = v && strncmp(v, "--", 2);
        if (!strcmp(a, "--out") && has_value && strlen(v) > 3000)
            return usage_error("--out is longer than 3000 bytes: '%.40s...'", v);
        if (!strcmp(a, "--out") || !strcmp(a, "--tpu") || !strcmp(a, "--every")) {
            if (!has_value)
                return usage_error("%s needs a value", a);
            if (!strcmp(a, "--out"))
                sw->out = v;
            else if (!strcmp(a, "--tpu"))
                sw->tpu = v;
            else if ((sw->every = atoi(v)) < 1)
                return usage_error("--every must be a whole number of seconds >= 1, got '%s'", v);
            i++;
        } else if (has_value && strchr(v, ',')) {
            if (sw->naxes == MAX_AXES)
                return usage_error("more than 16 swept flags (at %s)", a);
            sw->axis_flag[sw->naxes] = a, sw->axis_val[sw->naxes++] = v;
            i++;
        } else {
            if (sw->nfixed + 2 > MAX_ARGS / 2)
                return usage_error("too many flags (at %s)", a);
            sw->user_threads |= !strcmp(a, "--threads");
            sw->fixed[sw->nfixed++] = a;
            if (has_value)
                sw->fixed[sw->nfixed++] = argv[++i];
        }
    }
    if (sw->tpu && (sw->parallel = board_devices(sw->tpu)) < 0)
        return usage_error("--tpu must be v2-8, v3-8, v4-8, v5e-8, v5p-8 or v6e-8, got '%s'",
                           sw->tpu);
    return -1;
}

/* Run i's value on each axis: i's digits in the mixed radix of the axes'
 * counts, the last axis fastest. Returns 0 or the exit code. */
static int pick_values(struct sweep *sw, int i, const int *count)
{
    int rest = i;
    for (int a = sw->naxes - 1; a >= 0; a--) {
        int pick = rest % count[a];
        rest /= count[a];
        const char *c = sw->axis_val[a];
        for (int k = 0; k < pick; k++)
            c = strchr(c, ',') + 1;
        size_t len = strcspn(c, ",");
        if (len == 0 || len >= sizeof sw->values[i][a])
            return usage_error("%s has an empty or overlong value in its list", sw->axis_flag[a]);
        memcpy(sw->values[i][a], c, len);
        sw->values[i][a][len] = 0;
    }
    return 0;
}

/* Run i's gpt train arguments, name, directory and steps. Returns 0 or
 * the exit code. */
static int make_run(struct sweep *sw, int i)
{
    struct run *r = &sw->runs[i];
    int used = 0;
    r->steps = 50000;
    for (int k = 0; k < sw->nfixed; k++) {
        r->arg[r->narg++] = sw->fixed[k];
        if (!strcmp(sw->fixed[k], "--steps") && k + 1 < sw->nfixed)
            r->steps = atoi(sw->fixed[k + 1]);
    }
    for (int a = 0; a < sw->naxes; a++) {
        const char *flag = sw->axis_flag[a], *value = sw->values[i][a];
        if (is_switch(flag)) { /* --no-mlp 0,1: without it, with it */
            if (strcmp(value, "0") && strcmp(value, "1"))
                return usage_error("%s takes the values 0 and 1 in a sweep", flag);
            if (!strcmp(value, "1"))
                r->arg[r->narg++] = flag;
        } else {
            r->arg[r->narg++] = flag;
            r->arg[r->narg++] = value;
        }
        char part[sizeof r->name]; /* formatted apart: flag and value may live in r */
        snprintf(part, sizeof part, "%s%s=%s", a ? "," : "", flag + 2, value);
        used += snprintf(r->name + used, sizeof r->name - (size_t)used, "%s", part);
        if (!strcmp(flag, "--steps"))
            r->steps = atoi(value);
    }
    if (!sw->naxes)
        snprintf(r->name, sizeof r->name, "run");
    char name[sizeof r->name]; /* a copy: snprintf may not read what it writes beside */
    memcpy(name, r->name, sizeof name);
    snprintf(r->dir, sizeof r->dir, "%.3000s/%s", sw->out, name);
    return 0;
}

/* The grid: the cartesian product of the axes, first axis slowest.
 * Returns 0 or the exit code. */
static int make_grid(struct sweep *sw)
{
    int count[MAX_AXES], rc;
    sw->n = 1;
    for (int a = 0; a < sw->naxes; a++) {
        count[a] = 1;
        for (const char *c = sw->axis_val[a]; *c; c++)
            count[a] += *c == ',';
        sw->n *= count[a];
        if (sw->n > MAX_RUNS)
            return usage_error("the grid has more than %s runs", "256");
    }
    for (int i = 0; i < sw->n; i++)
        if ((rc = pick_values(sw, i, count)) || (rc = make_run(sw, i)))
            return rc;
    return 0;
}

/* Starts runs while there is room; a run finished before is kept. */
static void launch_runs(struct sweep *sw)
{
    while (sw->running < sw->parallel && sw->next < sw->n && !stop_signal) {
        struct run *r = &sw->runs[sw->next++];
        if (wait_out_dir(r->dir)) /* a run of a killed sweep still saving */
            break;
        if (newest_ckpt(r->dir) >= r->steps) {
            r->state = 2; /* finished before: kept as it is */
            continue;
        }
        if (launch_run(r, sw->threads, sw->user_threads)) {
            r->state = 3, sw->failed++;
            continue;
        }
        sw->running++;
    }
}

/* Run pid ended with status. */
static void reap_run(struct sweep *sw, pid_t pid, int status)
{
    for (int i = 0; i < sw->n; i++)
        if (sw->runs[i].pid == pid && sw->runs[i].state == 1) {
            struct run *r = &sw->runs[i];
            r->pid = 0, r->wall = now_seconds() - r->t0, sw->running--;
            r->rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            r->state = r->rc == 0 ? 2 : 3;
            if (r->rc && !stop_signal) {
                sw->failed++;
                fprintf(stderr, "gpt: run %s failed (exit %d); see %s/log.txt\n", r->name,
                        r->rc, r->dir);
            }
        }
}

/* Runs the grid, sw->parallel at once, with a live table every sw->every
 * seconds; a signal is passed on to the runs, which checkpoint and exit. */
static void run_grid(struct sweep *sw)
{
    struct sigaction sa = {.sa_handler = on_stop};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    double last_table = now_seconds();
    while (sw->next < sw->n || sw->running) {
        launch_runs(sw);
        if (!sw->running)
            break;
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            reap_run(sw, pid, status);
            continue;
        }
        if (stop_signal && !sw->forwarded) { /* once: the runs checkpoint and exit */
            for (int i = 0; i < sw->n; i++)
                if (sw->runs[i].state == 1)
                    kill(sw->runs[i].pid, SIGINT);
            fprintf(stderr, "gpt: sweep stopped by signal %d: the runs save checkpoints; the same "
                    "command resumes them\n", (int)stop_signal);
            sw->forwarded = 1;
            continue;
        }
        if (now_seconds() - last_table >= sw->every) {
            print_table(sw->runs, sw->n, 0);
            last_table = now_seconds();
        }
        usleep(200 * 1000);
    }
}

/* The final table and every run's losses on one chart. */
static int finish_sweep(struct sweep *sw)
{
    printf("\nfinal (test loss: the last eval line's; bpb = bits per byte; ms/step: the median "
           "step; wall: this sweep's time for the run)\n");
    print_table(sw->runs, sw->n, 1);
    const char *dirs[MAX_RUNS];
    char svg[4400], err[1024];
    for (int i = 0; i < sw->n; i++)
        dirs[i] = sw->runs[i].dir;
    snprintf(svg, sizeof svg, "%.3000s/loss.svg", sw->out);
    if (plot_runs(dirs, sw->n, svg, err, sizeof err))
        fprintf(stderr, "gpt: %s\n", err);
    else
        printf("wrote %s\n", svg);
    return sw->failed ? 1 : 0;
}

int cmd_sweep(int argc, char **argv)
{
    static struct sweep sweep = {.out = "sweep", .every = 30};
    struct sweep *sw = &sweep;
    int rc = parse_sweep(sw, argc, argv);
    if (rc >= 0 || (rc = make_grid(sw)))
        return rc;
    if (!sw->parallel || sw->parallel > sw->n)
        sw->parallel = sw->n;
    struct thread_budget machine; /* the cores this sweep may use: affinity, quota */
    thread_budget(&machine, 0, 1);
    sw->threads = machine.threads / sw->parallel > 1 ? machine.threads / sw->parallel : 1;
    make_out_dir(sw->out); /* locked: a second sweep here is refused */
    printf("gpt sweep: %d run%s in %s, %d at once%s, %d thread%s each\n", sw->n,
           sw->n > 1 ? "s" : "", sw->out, sw->parallel,
           sw->tpu ? " (one per device of the board)" : "", sw->threads,
           sw->threads > 1 ? "s" : "");
    fflush(stdout);
    run_grid(sw);
    return stop_signal ? 130 : finish_sweep(sw);
}
