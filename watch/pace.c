/* watch/pace.c: a busy machine noticed from the steps' pace (pace.h). */
#include "watch/pace.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
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
        char path[300], line[512], *paren;
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
        f = fopen(path, "r");
        if (f && fgets(line, sizeof line, f) && (paren = strrchr(line, ')')) && paren[1] == ' ' &&
            paren[2] == 'R')
            ++*running;
        if (f)
            fclose(f);
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
    p->idle_cores = -1;
    p->others_running = -1;
    p->len = PACE_FIRST;
    cpu_ticks(&p->idle0, &p->total0);
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
    p->len = PACE_WINDOW;
    p->median = median;
    p->windows++;
    p->delay0 = delay;
    p->t0 = now;
    /* the machine's idle cores over the window (every program's) */
    unsigned long long idle, total;
    int cpus = cpu_ticks(&idle, &total);
    p->idle_cores = cpus > 0 && total > p->total0 ? (double)cpus * (double)(idle - p->idle0) /
                                                        (double)(total - p->total0)
                                                  : -1;
    p->idle0 = idle, p->total0 = total;
    p->others_running = others_running(own);
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
