/* fmath.h: exp, log, cos and integer powers from plain IEEE arithmetic.
 *
 * Why: gpt promises the same bits on every CPU. libm does not: glibc picks
 * an FMA or a non-FMA variant of exp and log at run time, arm64's build
 * differs again, and none of them promises correct rounding. These
 * functions use only +, -, *, / on doubles and bit manipulation, each in
 * an order the code fixes (the build has -ffp-contract=off), so they give
 * the same bits wherever IEEE double arithmetic is what C's double is
 * (FLT_EVAL_METHOD 0: x86-64 and arm64 alike).
 *
 * Accuracy: the double functions within about 1 ulp over their domains;
 * the float ones evaluate in double and round once, so they are correctly
 * rounded but for values within ~1e-16 relative of a rounding boundary.
 * fm_cos reduces its argument with pi/2 in three parts: good to ~1 ulp for
 * |x| up to about 1e5 (a cosine schedule needs [0, pi]). */
#ifndef FMATH_H
#define FMATH_H
#include <math.h> /* INFINITY, NAN: constants only, no libm calls */
#include <stdint.h>
#include <string.h>

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

/* x * 2^k for any integer k, rounded once unless the result is subnormal
 * (then twice, the same way everywhere). */
static inline double fm_scale2(double x, int k)
{
    while (k > 1023) {
        x *= 0x1p1023;
        k -= 1023;
    }
    while (k < -1022) {
        x *= 0x1p-1022;
        k += 1022;
        if (x == 0.0)
            return x;
    }
    return x * fm_from_bits((uint64_t)(k + 1023) << 52);
}

/* ln 2 in two parts: ln2_hi has 32 significant bits, so k * ln2_hi is
 * exact for |k| < 2^21. */
#define FM_LN2_HI 6.93147180369123816490e-01
#define FM_LN2_LO 1.90821492927058770002e-10

/* e^x: x = k ln2 + r, |r| <= ln2/2, e^r by its Taylor series to r^13
 * (the next term is below 2^-57 relative), times 2^k. */
static inline double fm_exp(double x)
{
    if (x != x)
        return x + x;
    if (x > 709.782712893384)
        return INFINITY;
    if (x < -745.1332191019412)
        return 0.0;
    double t = x * 1.44269504088896338700e+00; /* x / ln2 */
    int k = (int)(t < 0 ? t - 0.5 : t + 0.5);
    double r = (x - k * FM_LN2_HI) - k * FM_LN2_LO;
    double p = 1.0 / 6227020800.0; /* 1/13! */
    static const double inv_fact[13] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                        1.0 / 362880.0,    1.0 / 40320.0,    1.0 / 5040.0,
                                        1.0 / 720.0,       1.0 / 120.0,      1.0 / 24.0,
                                        1.0 / 6.0,         0.5,              1.0,
                                        1.0}; /* 1/12! .. 1/0! */
    for (int i = 0; i < 13; i++)
        p = p * r + inv_fact[i];
    return fm_scale2(p, k);
}

/* ln x: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s),
 * s = (m - 1)/(m + 1), |s| < 0.172, by its series to s^23. */
static inline double fm_log(double x)
{
    if (x != x || x == INFINITY)
        return x + x;
    if (x < 0.0)
        return NAN;
    if (x == 0.0)
        return -INFINITY;
    int e = 0;
    if (x < 0x1p-1022) { /* subnormal: scale into the normal range */
        x *= 0x1p54;
        e = -54;
    }
    uint64_t u = fm_bits(x);
    e += (int)(u >> 52) - 1023;
    double m = fm_from_bits((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull); /* [1, 2) */
    if (m > 1.41421356237309504880) {
        m *= 0.5;
        e += 1;
    }
    double f = m - 1.0, s = f / (2.0 + f), z = s * s, r = 1.0 / 23;
    for (int k = 21; k >= 1; k -= 2)
        r = r * z + 1.0 / k;
    double lnm = 2.0 * s * r;
    return e * FM_LN2_HI + (e * FM_LN2_LO + lnm);
}

/* cos and sin of |r| <= pi/4 by their Taylor series to r^22 and r^23. */
static inline double fm_cos_small(double r)
{
    double z = r * r, p = 0.0;
    for (int k = 22; k >= 2; k -= 2)
        p = (-1.0 - p) * z / (double)(k * (k - 1));
    return 1.0 + p;
}

static inline double fm_sin_small(double r)
{
    double z = r * r, p = 0.0;
    for (int k = 23; k >= 3; k -= 2)
        p = (-1.0 - p) * z / (double)(k * (k - 1));
    return r + r * p;
}

/* cos x: x = k pi/2 + r (pi/2 in three parts), then cos or sin of r by
 * the quadrant k mod 4. */
static inline double fm_cos(double x)
{
    if (x != x || x == INFINITY || x == -INFINITY)
        return x - x; /* NaN */
    double t = x * 6.36619772367581382433e-01; /* x / (pi/2) */
    double kd = t < 0 ? (double)(long long)(t - 0.5) : (double)(long long)(t + 0.5);
    /* pi/2 = 1.57079632673412561417e+00 + 6.07710050630396597660e-11 +
     * 2.02226624879595063154e-21 + ...: the first two parts have 33 bits,
     * so k times each is exact for |k| < 2^20 */
    double r = ((x - kd * 1.57079632673412561417e+00) - kd * 6.07710050630396597660e-11) -
               kd * 2.02226624879595063154e-21;
    long long k = (long long)kd;
    switch ((int)(k & 3)) {
    case 0: return fm_cos_small(r);
    case 1: return -fm_sin_small(r);
    case 2: return -fm_cos_small(r);
    default: return fm_sin_small(r);
    }
}

/* b^n for n >= 0 by repeated squaring: b^1 .. b^(2^j) multiplied in
 * ascending order of the bits of n. */
static inline double fm_powi(double b, int n)
{
    double r = 1.0;
    for (; n > 0; n >>= 1) {
        if (n & 1)
            r *= b;
        b *= b;
    }
    return r;
}

static inline float fm_expf(float x) { return (float)fm_exp((double)x); }
static inline float fm_logf(float x) { return (float)fm_log((double)x); }

#endif
