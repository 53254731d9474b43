/* watch/pace.c: a busy machine noticed from the steps' pace (pace.h). */
#include "watch/pace.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PF_KTHREAD 0x00200000 /* a kernel thread (the flags of /proc/PID/stat) */

static double clock_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whether the thread or process whose stat file is `path` is runnable
 * (state R: "pid (comm) R ...", the state after the last parenthesis);
 * its flags (the stat's ninth field) into *flags when not NULL. */
static int stat_running(const char *path, unsigned long *flags)
{
    char line[512], *paren;
    FILE *f = fopen(path, "r");
    int running = f && fgets(line, sizeof line, f) && (paren = strrchr(line, ')')) &&
                  paren[1] == ' ' && paren[2] == 'R' &&
                  (!flags || sscanf(paren + 3, " %*d %*d %*d %*d %*d %lu", flags) == 1);
    if (f)
        fclose(f);
    return running;
}

/* One walk over this process's threads: the seconds they have spent
 * runnable but not running, summed (the kernel's schedstat: "run time,
 * run delay, slices", in ns), and how many are runnable now (state R in
 * their stat: "tid (comm) S ...", the state after the last parenthesis).
 * 0 and 0 where /proc does not say. */
static double own_threads(int *running)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    double delay_s = 0;
    *running = 0;
    while (d && (e = readdir(d))) {
        char path[300];
        unsigned long long run, delay;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%.255s/schedstat", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fscanf(f, "%llu %llu", &run, &delay) == 2)
            delay_s += 1e-9 * (double)delay;
        if (f)
            fclose(f);
        snprintf(path, sizeof path, "/proc/self/task/%.255s/stat", e->d_name);
        *running += stat_running(path, NULL);
    }
    if (d)
        closedir(d);
    return delay_s;
}

/* Other programs' runnable threads at this moment: the kernel's count of
 * runnable threads, machine-wide (/proc/loadavg's "R/T"), less this
 * process's own; -1 where /proc does not say. */
static int others_running(int own)
{
    int all = -1, total;
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f || fscanf(f, "%*f %*f %*f %d/%d", &all, &total) != 2)
        all = -1;
    if (f)
        fclose(f);
    return all < 0 ? -1 : all > own ? all - own : 0;
}

/* Whether a line of /proc/PID/cgroup ("id:controllers:path") names the
 * cgroup that the cpu controller shares the cores by: v1's line whose
 * controllers list "cpu", or v2's one line ("0::path"). */
static int cpu_cgroup(const char *line)
{
    const char *c = strchr(line, ':'), *end = c ? strchr(c + 1, ':') : NULL;
    if (!end)
        return 0;
    if (end == c + 1)
        return 1;
    for (const char *t = c + 1; t < end;) {
        size_t len = strcspn(t, ",:");
        if (len == 3 && !strncmp(t, "cpu", 3))
            return 1;
        t += len + 1;
    }
    return 0;
}

/* A process's scheduling group, as the kernel shares the cores between
 * groups before their threads: its autogroup (a session's, where
 * /proc/sys/kernel/sched_autogroup_enabled) and its cgroup for the cpu
 * controller ("cpu:" under cgroup v1, "0::" under v2), one string; "" if
 * /proc does not say. */
static void sched_group(const char *pid, char *buf, size_t n)
{
    char path[300], line[512];
    size_t len = 0;
    buf[0] = 0;
    snprintf(path, sizeof path, "/proc/%.255s/autogroup", pid);
    FILE *f = fopen(path, "r");
    if (f && fgets(line, sizeof line, f))
        len += (size_t)snprintf(buf + len, n - len, "%.*s", (int)strcspn(line, " \n"), line);
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "/proc/%.255s/cgroup", pid);
    f = fopen(path, "r");
    while (f && len < n && fgets(line, sizeof line, f))
        if (cpu_cgroup(line))
            len += (size_t)snprintf(buf + len, n - len, "|%.*s", (int)strcspn(line, "\n"), line);
    if (f)
        fclose(f);
}

void pace_others(int *same, int *apart)
{
    char mine[600], theirs[600], self[32];
    snprintf(self, sizeof self, "%d", (int)getpid());
    sched_group(self, mine, sizeof mine);
    *same = *apart = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300];
        unsigned long flags;
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || !strcmp(e->d_name, self))
            continue;
        snprintf(path, sizeof path, "/proc/%.255s/stat", e->d_name);
        if (!stat_running(path, &flags) || (flags & PF_KTHREAD))
            continue;
        sched_group(e->d_name, theirs, sizeof theirs);
        if (theirs[0] && mine[0] && strcmp(theirs, mine))
            ++*apart;
        else
            ++*same;
    }
    if (d)
        closedir(d);
    else
        *same = *apart = -1;
}

/* The machine's runnable threads less this process's, read apart, miss a
 * busy program when this process's threads wake between the two reads (a
 * redo team's often do); a trial of every thread beside it would then
 * cost a window at the collapsed pace. The walk's running processes are
 * read one by one, not against this process's. */
void pace_ask_others(Pace *p)
{
    int same, apart;
    pace_others(&same, &apart);
    p->others_apart = same < 0 ? -1 : same > 0 ? 0 : apart;
    if (same >= 0 && p->others_running >= 0 && p->others_running < same + apart)
        p->others_running = same + apart;
}

void pace_others_now(int *same, int *apart)
{
    int own;
    own_threads(&own);
    *same = *apart = 0;
    if (others_running(own) != 0) /* a walk over /proc only when something else runs */
        pace_others(same, apart);
}

/* The machine's idle and total CPU ticks so far, over every CPU (the
 * first line of /proc/stat: user nice system idle iowait irq softirq
 * steal); 0 where /proc does not say. The number of CPUs counted. */
static int cpu_ticks(unsigned long long *idle, unsigned long long *total)
{
    unsigned long long v[8] = {0};
    int cpus = 0;
    char line[256];
    FILE *f = fopen("/proc/stat", "r");
    *idle = *total = 0;
    if (f && fgets(line, sizeof line, f) &&
        sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) == 8) {
        for (int i = 0; i < 8; i++)
            *total += v[i];
        *idle = v[3] + v[4];
        while (fgets(line, sizeof line, f) && !strncmp(line, "cpu", 3))
            cpus++;
    }
    if (f)
        fclose(f);
    return cpus;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* This process's CPU time, every thread's, in seconds. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pace_start(Pace *p)
{
    int own;
    memset(p, 0, sizeof *p);
    p->delay0 = own_threads(&own);
    p->t0 = clock_s();
    p->cpu0 = cpu_s();
    p->others_running = p->others_apart = -1;
    p->len = PACE_FIRST;
    pace_new_span(p);
}

void pace_new_span(Pace *p)
{
    p->idle_cores = PACE_IDLE_PENDING;
    p->idle_t0 = clock_s();
    cpu_ticks(&p->idle0, &p->total0);
}

/* At a window's end, now: the idle cores over the span, once it has
 * lasted PACE_IDLE_MS, and the next span starts. */
static void idle_span(Pace *p, double now)
{
    if (1e3 * (now - p->idle_t0) < PACE_IDLE_MS)
        return;
    unsigned long long idle, total;
    int cpus = cpu_ticks(&idle, &total);
    p->idle_cores = cpus > 0 && total > p->total0 ? (double)cpus * (double)(idle - p->idle0) /
                                                        (double)(total - p->total0)
                                                  : PACE_IDLE_NO_PROC;
    p->idle0 = idle, p->total0 = total;
    p->idle_t0 = now;
}

/* Steps in the window after one whose median step took median_ms. */
static int window_len(double median_ms)
{
    double fit = median_ms > 0 ? PACE_WINDOW_MS / median_ms : PACE_WINDOW;
    return fit >= PACE_WINDOW ? PACE_WINDOW : fit <= PACE_MIN_WINDOW ? PACE_MIN_WINDOW : (int)fit;
}

int pace_step(Pace *p, double ms, int threads, int trial)
{
    p->ms[p->n++] = ms;
    if (p->n < p->len)
        return 0;
    qsort(p->ms, (size_t)p->len, sizeof *p->ms, by_value);
    int own;
    double median = p->ms[p->len / 2], now = clock_s(), delay = own_threads(&own), cpu = cpu_s();
    p->waited = now > p->t0 ? (delay - p->delay0) / ((now - p->t0) * (threads > 0 ? threads : 1)) : 0;
    p->cores_used = now > p->t0 ? (cpu - p->cpu0) / (now - p->t0) : 0;
    p->cpu0 = cpu;
    p->n = 0;
    p->len = window_len(median);
    p->median = median;
    p->windows++;
    p->delay0 = delay;
    p->t0 = now;
    idle_span(p, now);
    p->others_running = others_running(own);
    p->others_apart = -1; /* pace_others' walk over /proc is for the trial to ask */
    if (trial)
        return 0;
    if (p->best == 0 || median < p->best)
        p->best = median;
    p->slowdown = median / p->best;
    int was = p->busy;
    if (!was && p->slowdown >= PACE_SLOW)
        p->busy = 1;
    else if (was && p->slowdown <= PACE_BACK)
        p->busy = 0;
    return p->busy == was ? 0 : p->busy ? 1 : -1;
}
