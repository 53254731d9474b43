/* fmath.h: exp, log, cos and integer powers that give the same bits on
 * every CPU.
 *
 * Why: gpt promises the same bits on every machine, and libm does not:
 * glibc picks an FMA or a non-FMA exp and log at run time, arm64's libm
 * differs again, and none promises correct rounding. These functions use
 * only +, -, *, / on doubles, integer and bit operations, each in an order
 * the code fixes. IEEE 754 rounds each of those the same way everywhere,
 * so the results are the same wherever C's double is IEEE double with
 * nothing in wider registers (FLT_EVAL_METHOD 0: x86-64 and arm64) and
 * the compiler fuses nothing (-ffp-contract=off, as the Makefile builds).
 *
 * How: each function carries its intermediate result in two doubles (a
 * "double-double", about 100 bits) where rounding would hurt, and rounds
 * once at the end. So:
 *   fm_exp, fm_log   within 0.65 ulp of the true value (nearly always the
 *                    correctly rounded one); exp gives inf above ~709.78,
 *                    0 below ~-745.13; log(0) = -inf, log(x < 0) = NaN,
 *                    log(inf) = inf; subnormal inputs and results work
 *                    (results below 2^-1022 may be 1 ulp off).
 *   fm_cos           within 0.8 ulp for |x| < 2^20, zeros of cos included;
 *                    NaN beyond (reducing larger arguments exactly needs
 *                    a long table of the digits of 2/pi; the learning-
 *                    rate schedule only needs [0, pi]).
 *   fm_powi          b^n for n >= 0 (n < 0 gives 1) within 0.6 ulp for
 *                    any n; inf and 0 where it leaves the range (plain
 *                    squaring would be 1e5 ulp off at n = 1e5).
 *   fm_expf, fm_logf the double function rounded to float: correctly
 *                    rounded unless the true value lies within 2^-52
 *                    (relative) of halfway between two floats.
 * A NaN argument comes back unchanged and an invalid one gives NAN: the
 * NaN that 0/0 makes has a different sign bit on x86 and arm64. */
#ifndef FMATH_H
#define FMATH_H
#include <float.h>
#include <math.h> /* INFINITY and NAN: constants, no libm calls */
#include <stdint.h>
#include <string.h>

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "fmath.h needs plain double arithmetic (FLT_EVAL_METHOD 0), e.g. SSE2 not x87"
#endif

static inline uint64_t fm_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double fm_from_bits(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The functions (fmath.c): */
double fm_exp(double x);
double fm_log(double x);
double fm_cos(double x);
double fm_powi(double b, int n);
float fm_expf(float x);
float fm_logf(float x);

#endif
