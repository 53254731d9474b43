/* rng.h: the random numbers: xoshiro256**, one generator per stream (a
 * leaf: any file may include it). */
#ifndef RNG_H
#define RNG_H
#include <stdint.h>

/* 64-bit xoshiro256** state; streams are split by seeding. */
typedef struct Rng {
    uint64_t s[4];
} Rng;

/* The program's streams of one --seed: each use draws from its own, so
 * adding draws to one never moves another. The numbers are in the
 * checkpoints' bits: never renumber. */
enum {
    RNG_INIT = 0,   /* initial weights (model_init) */
    RNG_DATA = 1,   /* training windows */
    RNG_EVAL = 2,   /* test windows of the eval lines */
    RNG_SAMPLE = 3, /* gpt sample (passage i: --seed + i) */
    RNG_FINAL = 4,  /* the passage printed at the end of training */
};

void rng_seed(Rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(Rng *r);
float rng_float(Rng *r);                /* [0,1) */
uint64_t rng_below(Rng *r, uint64_t n); /* [0,n) */

#endif
