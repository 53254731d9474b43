/* util.c: allocation, the clock and a hash (util.h). */
#include "util/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "gpt: out of memory (%zu x %zu bytes)\n", n, size);
        exit(1);
    }
    return p;
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
