/* tests/test_fmath.c: fmath.h against libm, and against a committed hash.
 *
 * libm is the yardstick for accuracy here, never the answer: glibc's
 * double exp, log, cos and pow are within about 0.5 ulp of the truth and
 * fmath's within 0.8, so the two stay within 2 ulp of each other. The
 * answer is the hash of fmath's own bits over fixed inputs, which every
 * machine must reproduce (section 4). */
#include "util/fmath.h"
#include "test.h"
#include <limits.h>
#include <math.h>
#include <stdint.h>

static uint64_t lcg;

static uint64_t next(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return lcg;
}

/* Uniform in [lo, hi) as (u + lo/w) * w: no multiply feeds an add, so no
 * compiler can fuse one into an FMA, and the inputs are the same
 * everywhere. */
static double uniform(double lo, double hi)
{
    double u = (double)(next() >> 11) * 0x1p-53, w = hi - lo;
    return (u + lo / w) * w;
}

/* A positive finite double or float with random bits: every binade,
 * subnormals included. */
static double any_double(void) { return fm_from_bits((next() >> 1) % 0x7ff0000000000000ull); }

static float any_float(void)
{
    uint32_t u = (uint32_t)(next() >> 33) % 0x7f800000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* |got - want| in units of want's last place (subnormal ulps below 2^-1022). */
static double ulps(double got, double want)
{
    if (got == want || (got != got && want != want))
        return 0;
    if (isinf(got) || isinf(want) || got != got || want != want)
        return INFINITY;
    double a = fabs(want);
    return fabs(got - want) / (a < DBL_MAX ? nextafter(a, INFINITY) - a : a - nextafter(a, 0));
}

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* 1. The double functions, a million arguments each across their domains. */
static void test_doubles(void)
{
    const long n = 1000000;
    double w_exp = 0, w_log = 0, w_log1 = 0, w_cos = 0, w_cospi = 0;
    lcg = 1;
    for (long i = 0; i < n; i++) {
        double x = uniform(-750, 715); /* past both ends: inf and 0 */
        w_exp = fmax(w_exp, ulps(fm_exp(x), exp(x)));
        double y = any_double(), y1 = uniform(0.75, 1.5); /* all of it, and near 1 */
        w_log = fmax(w_log, ulps(fm_log(y), log(y)));
        w_log1 = fmax(w_log1, ulps(fm_log(y1), log(y1)));
        double c = uniform(-100, 100), c0 = uniform(0, M_PI);
        w_cos = fmax(w_cos, ulps(fm_cos(c), cos(c)));
        w_cospi = fmax(w_cospi, ulps(fm_cos(c0), cos(c0)));
    }
    CHECK(w_exp <= 2, "fm_exp: %.2f ulp from exp (want <= 2)", w_exp);
    CHECK(w_log <= 2 && w_log1 <= 2, "fm_log: %.2f ulp from log, %.2f near 1 (want <= 2)", w_log,
          w_log1);
    CHECK(w_cos <= 2 && w_cospi <= 2, "fm_cos: %.2f ulp from cos on [-100, 100], %.2f on [0, pi]",
          w_cos, w_cospi);
    /* Zeros of cos: the argument's reduction must not cancel away the digits. */
    double w_zero = 0;
    for (int k = 1; k < 200; k += 2) {
        double x = nextafter(k * M_PI_2, 0);
        for (int j = 0; j < 5; j++, x = nextafter(x, INFINITY))
            w_zero = fmax(w_zero, ulps(fm_cos(x), cos(x)));
    }
    CHECK(w_zero <= 2, "fm_cos near its zeros: %.2f ulp from cos", w_zero);
}

/* 2. The float functions: libm's double function rounded to float is the
 * correctly rounded answer but in astronomically rare cases, and fmath's
 * must be it. glibc's own expf and logf are not correctly rounded (up to
 * 0.502 and 0.75 ulp off), so against those: never more than 1 ulp. */
static void test_floats(void)
{
    const long n = 1000000;
    long miss_exp = 0, miss_log = 0, far_exp = 0, far_log = 0;
    lcg = 2;
    for (long i = 0; i < n; i++) {
        float x = (float)uniform(-104, 89); /* subnormal results to overflow */
        float e = fm_expf(x);
        miss_exp += e != (float)exp((double)x);
        far_exp += fabs((double)e - expf(x)) > (nextafterf(fabsf(e), INFINITY) - fabsf(e));
        float y = any_float();
        float l = fm_logf(y);
        miss_log += l != (float)log((double)y);
        far_log += fabs((double)l - logf(y)) > (nextafterf(fabsf(l), INFINITY) - fabsf(l));
    }
    CHECK(miss_exp <= n / 10000 && miss_log <= n / 10000,
          "fm_expf, fm_logf: %ld and %ld of %ld not correctly rounded", miss_exp, miss_log, n);
    CHECK(!far_exp && !far_log, "fm_expf, fm_logf: %ld and %ld more than 1 ulp from expf, logf",
          far_exp, far_log);
}

/* 3. fm_powi: exact where the answer is, and within 2 ulp of pow where
 * repeated squaring in plain doubles would be thousands of ulp off. */
static void test_powi(void)
{
    int bad = 0;
    for (int b = -10; b <= 10; b++) { /* small integers: every product exact */
        double r = 1;
        for (int k = 0; k <= 60 && fabs(r) < 0x1p53; k++, r *= b)
            bad += fm_powi(b, k) != r;
    }
    CHECK(!bad, "fm_powi: %d integer powers differ from repeated multiplication", bad);
    CHECK(fm_powi(2, 1023) == 0x1p1023 && fm_powi(2, 1024) == INFINITY &&
              fm_powi(0.5, 1074) == 0x1p-1074 && fm_powi(0.5, 1076) == 0 &&
              fm_powi(-0.5, 3) == -0.125 && fm_powi(1.5, 2) == 2.25,
          "fm_powi: powers of two and friends");
    CHECK(fm_powi(0, 0) == 1 && fm_powi(NAN, 0) == 1 && fm_powi(0, 3) == 0 &&
              signbit(fm_powi(-0.0, 3)) && fm_powi(INFINITY, 2) == INFINITY &&
              fm_powi(-INFINITY, 3) == -INFINITY && isnan(fm_powi(NAN, 2)) &&
              fm_powi(1e300, 2) == INFINITY && fm_powi(1e-300, 2) == 0 &&
              fm_powi(1e-310, 1) == 1e-310 && fm_powi(1e-310, 2) == 0,
          "fm_powi specials");
    double w_small = 0, w_big = 0, w_sq = 0;
    lcg = 3;
    for (long i = 0; i < 100000; i++) {
        double b = uniform(-4, 4), c = uniform(0.5, 1.5), d = uniform(0.999, 1.001);
        int k = (int)(next() >> 33) % 21, m = (int)(next() >> 33) % 100001;
        w_sq = fmax(w_sq, ulps(fm_powi(b, 2), b * b)); /* both are b^2 rounded once */
        w_small = fmax(w_small, ulps(fm_powi(b, k), pow(b, k)));
        w_big = fmax(w_big, ulps(fm_powi(i % 2 ? c : d, m), pow(i % 2 ? c : d, m)));
    }
    CHECK(w_sq == 0, "fm_powi(b, 2) is not b * b (%.2f ulp)", w_sq);
    CHECK(w_small <= 2 && w_big <= 2, "fm_powi: %.2f ulp from pow for n <= 20, %.2f for n <= 1e5",
          w_small, w_big);
    CHECK(ulps(fm_powi(1 + 0x1p-52, INT_MAX), pow(1 + 0x1p-52, INT_MAX)) <= 2 &&
              ulps(fm_powi(0.9, 7000), pow(0.9, 7000)) <= 2,
          "fm_powi: large n %.17g, into the subnormals %.17g", fm_powi(1 + 0x1p-52, INT_MAX),
          fm_powi(0.9, 7000));
}

/* 4. The bits every machine must give: FNV-1a over the results on fixed
 * inputs and the special values. */
static uint64_t fnv(uint64_t h, uint64_t bits)
{
    for (int i = 0; i < 8; i++) {
        h ^= (bits >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Made on x86-64 (gcc and clang, -O0 and -O2) and reproduced on arm64
 * under qemu. Every machine must give it; a change to fmath.h that
 * changes it must say why, and changes gpt's numbers (tests/test_golden.c). */
#define FMATH_GOLDEN 0x4d21c660e6f96b58ull

static void test_golden_bits(void)
{
    static const double special[] = {0.0,     -0.0,      1.0,      -1.0,    0x1p-1074, DBL_MAX,
                                     INFINITY, -INFINITY, NAN,      709.78,  -745.1,    M_PI,
                                     M_PI_2,  1e6,       -0x1p20,  0x1p20,  1e-300,    1e300};
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) {
        double x = special[i];
        h = fnv(h, fm_bits(fm_exp(x)));
        h = fnv(h, fm_bits(fm_log(x)));
        h = fnv(h, fm_bits(fm_cos(x)));
        h = fnv(h, fm_bits(fm_powi(x, 3)));
        h = fnv(h, fbits(fm_expf((float)x)));
        h = fnv(h, fbits(fm_logf((float)x)));
    }
    lcg = 12345;
    for (int i = 0; i < 10000; i++) {
        h = fnv(h, fm_bits(fm_exp(uniform(-750, 715))));
        h = fnv(h, fm_bits(fm_log(any_double())));
        h = fnv(h, fm_bits(fm_cos(uniform(-100, 100))));
        h = fnv(h, fm_bits(fm_powi(uniform(0.5, 1.5), i)));
        h = fnv(h, fbits(fm_expf((float)uniform(-104, 89))));
        h = fnv(h, fbits(fm_logf(any_float())));
    }
    CHECK(h == FMATH_GOLDEN, "fmath golden bits: hash %#018llx, want %#018llx",
          (unsigned long long)h, (unsigned long long)FMATH_GOLDEN);
}

void test_fmath(void)
{
    test_doubles();
    test_floats();
    test_powi();
    test_golden_bits();
}
