/* util.h: the small helpers every file may use (a leaf: it includes no
 * other header of gpt's). */
#ifndef UTIL_H
#define UTIL_H
#include <stddef.h>
#include <stdint.h>

/* calloc, malloc and realloc that never return NULL: out of memory is not
 * worth a recovery path, so it is one line on stderr and exit 1. Zero
 * sizes count as 1. */
void *xcalloc(size_t n, size_t size);
void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
void *xaligned_alloc(size_t n); /* 64-byte aligned */

/* Atomic saves: a file is written whole under its temporary name
 * (tmp_path: PATH.tmp, beside it), then commit_tmp renames it over PATH
 * and syncs the directory, so that a reader, or a crash, finds the old
 * file or the new one, never half of one. */
char *tmp_path(const char *path); /* "PATH.tmp", malloc'd */
/* The rename and the directory's sync; -1 (errno set) if the rename
 * fails, the temporary file then left for the caller to remove. */
int commit_tmp(const char *tmp, const char *path);
/* A rename is durable only once its directory is synced. */
void fsync_dir_of(const char *path);

/* v[0..n) sorted ascending. */
void sort_doubles(double *v, size_t n);
/* The median of v[0..n), which it sorts: the middle value, or the mean of
 * the two middle ones; 0 when n is 0. */
double median_of(double *v, size_t n);

/* FNV-1a, 64 bits: checkpoints' checksums and the training data's
 * fingerprint. fnv1a64_more(FNV1A64_START, p, n) is fnv1a64(p, n), and
 * hashing in pieces gives the same value. */
#define FNV1A64_START 0xcbf29ce484222325ull
#define FNV1A64_PRIME 0x100000001b3ull
uint64_t fnv1a64(const unsigned char *p, size_t n);
uint64_t fnv1a64_more(uint64_t h, const unsigned char *p, size_t n);

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
