/* util.c: allocation, atomic saves, the clock and hashes (util.h). */
#include "util/util.h"
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The one message of a failed allocation. Kept out of line (noinline), so
 * the allocators stay one function each in the binary: the compiler would
 * otherwise split off their failure path as a ".part" copy that perf and
 * valgrind show under a second name. */
__attribute__((noinline)) static _Noreturn void alloc_failed(size_t n, size_t size)
{
    fprintf(stderr, "gpt: out of memory (%zu x %zu bytes)\n", n, size);
    exit(1);
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        alloc_failed(n, size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        alloc_failed(1, n);
    return p;
}

void *xmalloc(size_t n) { return xrealloc(NULL, n); }

/* Cache-line aligned (64 bytes), for the vector kernels' loads; the size
 * rounded up to whole lines, as aligned_alloc requires. */
void *xaligned_alloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64 + 64 * !n);
    if (!p)
        alloc_failed(1, n);
    return p;
}

char *tmp_path(const char *path)
{
    size_t n = strlen(path) + sizeof ".tmp";
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    return tmp;
}

int commit_tmp(const char *tmp, const char *path)
{
    if (rename(tmp, path))
        return -1;
    fsync_dir_of(path);
    return 0;
}

void fsync_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) + (slash == path) : 1; /* "/" for "/a" */
    char *dir = xmalloc(n + 1);
    memcpy(dir, slash ? path : ".", n);
    dir[n] = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t splitmix64(uint64_t *x) { return mix64(*x += SPLITMIX64_GAMMA); }

uint64_t fnv1a64_more(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * FNV1A64_PRIME;
    return h;
}

uint64_t fnv1a64(const unsigned char *p, size_t n) { return fnv1a64_more(FNV1A64_START, p, n); }

static int ascending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void sort_doubles(double *v, size_t n) { qsort(v, n, sizeof *v, ascending); }

double median_of(double *v, size_t n)
{
    if (!n)
        return 0.0;
    sort_doubles(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
