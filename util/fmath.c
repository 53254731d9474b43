/* fmath.c: the functions of fmath.h, compiled once (their promises and
 * why they exist are there). Each carries its intermediate result in two
 * doubles where rounding would hurt, and rounds once at the end. */
#include "util/fmath.h"
#include <math.h>

/* 2^k, for -1022 <= k <= 1023. */
static double fm_pow2(int k) { return fm_from_bits((uint64_t)(k + 1023) << 52); }

/* x 2^k for x in [0.5, 4): rounded once, or twice below 2^-1022. */
static double fm_scale(double x, long long k)
{
    if (k > 1023)
        return k > 1030 ? INFINITY : x * fm_pow2((int)k - 1023) * 0x1p1023;
    if (k < -1022)
        return k < -1130 ? 0.0 : x * fm_pow2((int)k + 1000) * 0x1p-1000;
    return x * fm_pow2((int)k);
}

/* a + b = s + *e exactly (Knuth). */
static double fm_two_sum(double a, double b, double *e)
{
    double s = a + b, bb = s - a;
    *e = (a - (s - bb)) + (b - bb);
    return s;
}

/* a * b = p + *e exactly, for |a|, |b| < 2^995 and no underflow (Dekker:
 * split each factor into two 26-bit halves, whose products are exact). */
static double fm_two_prod(double a, double b, double *e)
{
    double p = a * b;
    double ca = 134217729.0 * a, ah = ca - (ca - a), al = a - ah; /* 2^27 + 1 */
    double cb = 134217729.0 * b, bh = cb - (cb - b), bl = b - bh;
    *e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return p;
}

/* (h + l) *= (bh + bl), to about 2^-104 relative. */
static void fm_dd_mul(double *h, double *l, double bh, double bl)
{
    double e, p = fm_two_prod(*h, bh, &e);
    e += *h * bl + *l * bh;
    *h = p + e;
    *l = e - (*h - p);
}

/* ln 2 = FM_LN2_HI + FM_LN2_LO to 2^-86; FM_LN2_HI has 32 bits, so k times
 * it is exact for |k| < 2^21. */
#define FM_LN2_HI 0x1.62e42feep-1
#define FM_LN2_LO 0x1.a39ef35793c76p-33

/* e^x: x = k ln2 + r with |r| <= ln2/2 kept as r + rl, then
 * e^r = 1 + r + r^2 (1/2! + r/3! + ... + r^12/14!) (the next term is below
 * 2^-63), summed so that only the final 1 + ... rounds at full size. */
double fm_exp(double x)
{
    if (x != x)
        return x;
    if (x > 0x1.62e42fefa39efp+9) /* ln DBL_MAX, 709.78 */
        return INFINITY;
    if (x < -0x1.74910d52d3051p+9) /* ln 2^-1075, -745.13 */
        return 0.0;
    double t = x * 0x1.71547652b82fep+0; /* x / ln2 */
    int k = (int)(t < 0 ? t - 0.5 : t + 0.5);
    double hi = x - k * FM_LN2_HI, lo = k * FM_LN2_LO; /* hi is exact */
    double r = hi - lo, rl = (hi - r) - lo;
    static const double inv_fact[] = {1.0 / 87178291200, 1.0 / 6227020800, 1.0 / 479001600,
                                      1.0 / 39916800,    1.0 / 3628800,    1.0 / 362880,
                                      1.0 / 40320,       1.0 / 5040,       1.0 / 720,
                                      1.0 / 120,         1.0 / 24,         1.0 / 6,
                                      1.0 / 2}; /* 1/14! .. 1/2! */
    double p = 0.0;
    for (int i = 0; i < 13; i++)
        p = p * r + inv_fact[i];
    double tail = (rl + r * rl) + r * r * p; /* e^(r+rl) = e^r + rl (1 + r) */
    double s = 1.0 + r, se = (1.0 - s) + r;  /* 1 + r = s + se exactly */
    return fm_scale(s + (se + tail), k);
}

/* ln x: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s) for
 * s = (m - 1)/(m + 1), |s| < 0.172, kept as s + sl; atanh by its series
 * to s^23 (the next term is below 2^-60 of the sum). */
double fm_log(double x)
{
    if (x != x || x == INFINITY)
        return x;
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
    if (m > 0x1.6a09e667f3bcdp+0) { /* sqrt(2) */
        m *= 0.5;
        e += 1;
    }
    double f = m - 1.0;                     /* exact */
    double d = 2.0 + f, dl = (2.0 - d) + f; /* 2 + f = d + dl exactly */
    double s = f / d, pl, ph = fm_two_prod(s, d, &pl);
    double sl = (((f - ph) - pl) - s * dl) / d; /* f / (2 + f) - s */
    double z = s * s, q = 1.0 / 23;
    for (int k = 21; k >= 3; k -= 2)
        q = q * z + 1.0 / k;                                /* 1/3 + z/5 + ... */
    double tail = 2.0 * sl + 2.0 * s * z * q;               /* ln m - 2s */
    double ae, a = fm_two_sum(e * FM_LN2_HI, 2.0 * s, &ae); /* e*FM_LN2_HI is exact */
    return a + (ae + (e * FM_LN2_LO + tail));
}

/* pi/2 as the sum of four doubles (to 2^-160); the first three have 33
 * bits, so k times each is exact for k < 2^20. */
#define FM_PIO2_1 0x1.921fb544p+0
#define FM_PIO2_2 0x1.0b4611a6p-34
#define FM_PIO2_3 0x1.3198a2ep-69
#define FM_PIO2_4 0x1.b839a252049c1p-104

/* cos(r + rl) for |r| <= pi/4: 1 - r^2/2 + r^4 (1/4! - r^2/6! + ... + r^14/18!),
 * with r^2/2 exact so that 1 - r^2/2 rounds only at the end. */
static double fm_cos_kernel(double r, double rl)
{
    static const double c[] = {1.0 / 6402373705728000, -1.0 / 20922789888000,
                               1.0 / 87178291200,       -1.0 / 479001600,
                               1.0 / 3628800,           -1.0 / 40320,
                               1.0 / 720,               -1.0 / 24}; /* of r^18 .. r^4, negated */
    double zl, z = fm_two_prod(r, r, &zl);
    double p = 0.0;
    for (int i = 0; i < 8; i++)
        p = p * z + c[i];
    double hz = 0.5 * z, w = 1.0 - hz;
    double tail = ((1.0 - w) - hz) - (z * z * p + (0.5 * zl + r * rl));
    return w + tail;
}

/* sin(r + rl) for |r| <= pi/4: r - r^3 (1/3! - r^2/5! + ... - r^14/17!). */
static double fm_sin_kernel(double r, double rl)
{
    static const double c[] = {-1.0 / 355687428096000, 1.0 / 1307674368000,
                               -1.0 / 6227020800,      1.0 / 39916800,
                               -1.0 / 362880,          1.0 / 5040,
                               -1.0 / 120,             1.0 / 6}; /* of r^17 .. r^3, negated */
    double z = r * r, p = 0.0;
    for (int i = 0; i < 8; i++)
        p = p * z + c[i];
    return r + (rl * (1.0 - 0.5 * z) - r * z * p);
}

/* cos x: |x| = k pi/2 + r, r kept as r + rl, then cos or sin of r by the
 * quadrant k mod 4. */
double fm_cos(double x)
{
    if (x != x)
        return x;
    double a = x < 0 ? -x : x;
    if (!(a < 0x1p20))
        return NAN;
    double kd = (double)(int)(a * 0x1.45f306dc9c883p-1 + 0.5); /* a / (pi/2), rounded */
    double r1 = a - kd * FM_PIO2_1;                            /* exact */
    double e2, r2 = fm_two_sum(r1, -(kd * FM_PIO2_2), &e2);
    double e3, r3 = fm_two_sum(r2, -(kd * FM_PIO2_3), &e3);
    double lo = (e2 + e3) - kd * FM_PIO2_4;
    double r = r3 + lo, rl = lo - (r - r3);
    switch ((int)kd & 3) {
    case 0: return fm_cos_kernel(r, rl);
    case 1: return -fm_sin_kernel(r, rl);
    case 2: return -fm_cos_kernel(r, rl);
    default: return fm_sin_kernel(r, rl);
    }
}

/* b^n by repeated squaring on b's mantissa, in double-double, with the
 * powers of two counted apart so that nothing overflows on the way. */
double fm_powi(double b, int n)
{
    double a = b < 0 ? -b : b;
    if (n <= 0)
        return 1.0;
    if (!(a >= 0x1p-1022 && a <= DBL_MAX)) { /* 0, subnormal, inf, NaN */
        double r = 1.0;
        for (; n > 0; n >>= 1, b *= b)
            if (n & 1)
                r *= b;
        return r;
    }
    uint64_t u = fm_bits(a);
    long long eb = (long long)(u >> 52) - 1023, er = 0; /* exponents of base and result */
    double bh = fm_from_bits((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull), bl = 0.0;
    double rh = 1.0, rl = 0.0; /* both kept in [1, 2) */
    int neg = b < 0 && (n & 1);
    for (;;) {
        if (n & 1) {
            fm_dd_mul(&rh, &rl, bh, bl);
            er += eb;
            if (rh >= 2.0) {
                rh *= 0.5, rl *= 0.5;
                er += 1;
            }
        }
        if ((n >>= 1) == 0)
            break;
        fm_dd_mul(&bh, &bl, bh, bl);
        eb *= 2;
        if (bh >= 2.0) {
            bh *= 0.5, bl *= 0.5;
            eb += 1;
        }
    }
    double r = fm_scale(rh + rl, er);
    return neg ? -r : r;
}

float fm_expf(float x) { return (float)fm_exp((double)x); }
float fm_logf(float x) { return (float)fm_log((double)x); }
