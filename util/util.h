/* util.h: the small helpers every file may use (a leaf: it includes no
 * other header of gpt's). */
#ifndef UTIL_H
#define UTIL_H
#include <stddef.h>
#include <stdint.h>

/* calloc that never returns NULL: out of memory is not worth a recovery
 * path, so it is one line on stderr and exit 1. Zero sizes count as 1. */
void *xcalloc(size_t n, size_t size);

/* Seconds on the monotonic clock: for intervals, not dates. */
double now_seconds(void);

/* splitmix64's finalizer: 64 bits mixed so that nearby inputs (a seed and
 * a step number) give unrelated outputs. */
uint64_t mix64(uint64_t z);
#define SPLITMIX64_GAMMA 0x9E3779B97F4A7C15ull /* 2^64 / the golden ratio */
/* splitmix64: advances *x by the golden ratio and returns its mix; seeds
 * the generators of rng.h. */
uint64_t splitmix64(uint64_t *x);

#endif
