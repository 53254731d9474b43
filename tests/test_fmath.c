/* tests/test_fmath.c: fmath.h against libm, and against a committed hash.
 *
 * libm is the yardstick for accuracy here (within 2 ulp of glibc's double
 * functions, which are within 1 ulp of the truth), never the answer: the
 * answer is the committed FNV-1a hash of fmath's own bits over a fixed
 * set of inputs, which every machine must reproduce. */
#include "fmath.h"
#include "test.h"
#include <math.h>
#include <stdint.h>

static uint64_t lcg = 1;

static double uniform(void) /* [0, 1) */
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * 0x1p-53;
}

/* |got - want| in units of want's last place. */
static double ulps(double got, double want)
{
    if (got == want || (got != got && want != want))
        return 0;
    double d = fabs(got - want), u = nextafter(fabs(want), INFINITY) - fabs(want);
    return d / u;
}

static double ulpsf(float got, float want)
{
    if (got == want || (got != got && want != want))
        return 0;
    return fabs((double)got - want) / (nextafterf(fabsf(want), INFINITY) - fabsf(want));
}

static uint64_t fnv(uint64_t h, uint64_t bits)
{
    for (int i = 0; i < 8; i++) {
        h ^= (bits >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static void test_accuracy(void)
{
    double worst_exp = 0, worst_log = 0, worst_cos = 0;
    long off_expf = 0, off_logf = 0, n = 200000;
    for (long i = 0; i < n; i++) {
        double u = uniform();
        double x = (2 * u - 1) * 708, y = exp((2 * u - 1) * 700), c = (2 * u - 1) * 100;
        worst_exp = fmax(worst_exp, ulps(fm_exp(x), exp(x)));
        worst_log = fmax(worst_log, ulps(fm_log(y), log(y)));
        if (fabs(cos(c)) > 1e-3) /* near a zero, ulps of a tiny value say little */
            worst_cos = fmax(worst_cos, ulps(fm_cos(c), cos(c)));
        float xf = (float)((2 * u - 1) * 87), yf = (float)(u * 1e4 + 1e-30);
        off_expf += ulpsf(fm_expf(xf), expf(xf)) > 1;
        off_logf += ulpsf(fm_logf(yf), logf(yf)) > 1;
    }
    CHECK(worst_exp <= 2 && worst_log <= 2 && worst_cos <= 2,
          "fmath: worst error exp %.2f, log %.2f, cos %.2f ulp (want <= 2)", worst_exp, worst_log,
          worst_cos);
    CHECK(!off_expf && !off_logf, "fmath: expf %ld, logf %ld values more than 1 ulp off", off_expf,
          off_logf);
}

static void test_specials(void)
{
    CHECK(fm_exp(0) == 1 && fm_exp(1000) == INFINITY && fm_exp(-1000) == 0 && isnan(fm_exp(NAN)),
          "fm_exp specials");
    CHECK(fm_log(1) == 0 && fm_log(0) == -INFINITY && isnan(fm_log(-1)) &&
              fm_log(INFINITY) == INFINITY && isnan(fm_log(NAN)),
          "fm_log specials");
    CHECK(ulps(fm_log(0x1p-1070), log(0x1p-1070)) <= 2, "fm_log of a subnormal: %.17g",
          fm_log(0x1p-1070));
    CHECK(fm_cos(0) == 1 && fm_cos(M_PI) == -1 && isnan(fm_cos(INFINITY)), "fm_cos specials");
    double r = 1;
    for (int i = 0; i < 20; i++)
        r *= 0.999;
    CHECK(fm_powi(0.999, 0) == 1 && fm_powi(2, 10) == 1024 && ulps(fm_powi(0.999, 20), r) <= 4,
          "fm_powi");
    CHECK(ulps(fm_powi(0.999, 1000), pow(0.999, 1000)) <= 64, "fm_powi(0.999, 1000) = %.17g",
          fm_powi(0.999, 1000));
}

/* The bits every machine must give. Made on x86-64 and reproduced on
 * arm64 (qemu); a change to fmath.h that changes them must say why. */
#define FMATH_GOLDEN 0xc271edfe4bc7847cull

static void test_golden_bits(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    lcg = 12345;
    for (int i = 0; i < 10000; i++) {
        double u = uniform();
        h = fnv(h, fm_bits(fm_exp((2 * u - 1) * 50)));
        h = fnv(h, fm_bits(fm_log(u * 1e6 + 1e-300)));
        h = fnv(h, fm_bits(fm_cos((2 * u - 1) * 10)));
        h = fnv(h, fm_bits(fm_powi(u, i % 100)));
        h = fnv(h, fbits(fm_expf((float)((2 * u - 1) * 80))));
        h = fnv(h, fbits(fm_logf((float)(u * 1e3 + 1e-3))));
    }
    CHECK(h == FMATH_GOLDEN, "fmath golden bits: hash %#018llx, want %#018llx",
          (unsigned long long)h, (unsigned long long)FMATH_GOLDEN);
}

void test_fmath(void)
{
    test_accuracy();
    test_specials();
    test_golden_bits();
}
