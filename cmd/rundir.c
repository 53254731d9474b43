/* rundir.c: a run's directory (--out): its checkpoints,
 * ckpt-<step>.safetensors, found, pruned and named. */
#include "cmd/rundir.h"
#include "pod/error.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int cmp_int_desc(const void *a, const void *b)
{
    return *(const int *)b - *(const int *)a;
}

/* The steps of dir's ckpt-*.safetensors, newest first; returns the count. */
int list_ckpts(const char *dir, int *steps, int max)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < max) {
        int k, len = 0;
        if (sscanf(e->d_name, "ckpt-%d.safetensors%n", &k, &len) == 1 &&
            len == (int)strlen(e->d_name))
            steps[n++] = k;
    }
    if (d)
        closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_int_desc);
    return n;
}

/* The checkpoint of step `step` in dir. */
void ckpt_name(char *path, size_t n, const char *dir, int step)
{
    snprintf(path, n, "%s/ckpt-%08d.safetensors", dir, step);
}

/* Keeps the newest `keep` checkpoints up to step newest. */
void prune_ckpts(const char *dir, int keep, int newest)
{
    static int steps[MAX_CKPTS];
    char path[4096];
    int n = list_ckpts(dir, steps, MAX_CKPTS), kept = 0;
    for (int i = 0; i < n; i++) {
        if (steps[i] > newest || kept++ < keep)
            continue;
        ckpt_name(path, sizeof path, dir, steps[i]);
        unlink(path);
    }
}

void make_out_dir(const char *dir)
{
    if (mkdir(dir, 0755) && errno != EEXIST)
        die(1, "%s: cannot create output directory (%s)", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK))
        die(1, "%s: output directory is not a writable directory", dir);
}

/* A directory stands for its newest ckpt-*.safetensors. */
void resolve_ckpt(const char *arg, char *path, size_t n)
{
    struct stat st;
    static int steps[MAX_CKPTS];
    if (stat(arg, &st))
        die(1, "%s: cannot open checkpoint (%s)", arg, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        snprintf(path, n, "%s", arg);
    else if (list_ckpts(arg, steps, MAX_CKPTS) < 1)
        die(1, "%s: no ckpt-*.safetensors in this directory", arg);
    else
        ckpt_name(path, n, arg, steps[0]);
}
