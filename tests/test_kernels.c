/* tests/test_kernels.c: the kernels, three ways.
 *
 * 1. The plain-C twins (*_ref) against values worked out by hand, a naive
 *    double-precision attention, and central finite differences of double
 *    forward passes, float64 sums for the reductions (within the fp32
 *    error bound): this is what makes the twins trustworthy oracles.
 * 2. Every kernel path the CPU has against the twins, on random inputs at
 *    awkward shapes (rows not a multiple of the tile, widths not a multiple
 *    of the vector, T = 1, head sizes 8, 12, 16, ignored targets).
 * 3. The determinism contract: the same bits at 1, 2, 3 and 4 threads.
 * 4. Sharding: the *_seg reductions over N = 2, 4, 8 shards of the rows,
 *    combined by k_tree_sum, give the bits of one call over all rows.
 * 5. bf16: rounding against the instruction, the matmul's paths against
 *    each other bit for bit and against exact arithmetic.
 * 6. Backends: every backend this machine can run (plain C, AVX2, AVX-512;
 *    plain C, NEON) gives every kernel the same bits, at awkward shapes;
 *    tests/test_golden.c then ties the bits to other machines.
 *
 * The twins are the contract: each kernel gives its twin's bits (the
 * reading mode, GPT_ISA=ref, runs the twins as the kernels), checked with
 * same_bits on every path. Against float64 (and where leaves of rows are
 * summed apart from the one-leaf twin), tolerances are relative per
 * element, with elements smaller than the tensor's RMS compared against
 * the RMS instead (a sum of signed terms may cancel to almost nothing, and
 * its rounding error is set by the terms, not by the result): a few float
 * ulps times the length of the sums, TOL_SUM for sums of up to ~100 terms,
 * the others below with their reasons. Backends agree with each other to
 * the bit.
 * A constant whose effect on random inputs is below the tolerance (an
 * epsilon, GELU's cubic term, a mask) gets a case of its own where it
 * dominates, on every path (section 2b). */
#include "tensor.h"
#include "test.h"
#include "tests/gelu_reference.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs ---- */

static uint64_t seed = 0x9e3779b97f4a7c15u;

static uint64_t splitmix(void)
{
    uint64_t z = (seed += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static float urand(void) /* uniform in [-1, 1) */
{
    return (float)((splitmix() >> 40) * 0x1.0p-24 * 2 - 1);
}

static float *fvec(size_t n) /* n floats, never NULL */
{
    float *p = malloc(sizeof(float) * (n ? n : 1));
    if (!p)
        abort();
    return p;
}

static float *rvec(size_t n, float scale) /* uniform in [-scale, scale) */
{
    float *p = fvec(n);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * urand();
    return p;
}

/* Targets in [0, v), every `skip`-th one (when skip > 0) ignored as -1. */
static int32_t *rtargets(int n, int v, int skip)
{
    int32_t *t = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++)
        t[i] = skip > 0 && i % skip == skip - 1 ? -1 : (int32_t)(splitmix() % (uint64_t)v);
    return t;
}

/* ---- comparisons ---- */

static double rms(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return n ? sqrt(s / n) : 0;
}

/* The tolerances of close_to (relative per element, the RMS as the
 * floor), each with its reason. A float rounding is 2^-24 = 6e-8 of its
 * result, and a sum in another order (or with FMAs where the twin rounds
 * twice) is off by a few of those per term at worst, far fewer in
 * practice since the errors cancel: */
/* sums of up to ~100 terms (a row of 96, matmuls of p <= 128, leaves of
 * up to 128 rows, exp and log of another implementation on top) */
#define TOL_SUM 1e-5
/* sums of ~1000 to 4096 terms (a blocked weight gradient's leaves against
 * the one-leaf twin) */
#define TOL_LONG_SUM 1e-4
/* a float gradient against central differences of a double forward
 * (h = 1e-4: truncation ~h^2, cancellation ~1e-16/h, both far below):
 * what is left is the float gradient's own rounding over its sums */
#define TOL_FD 1e-4
/* nn.LayerNorm's default epsilon, the contract's: written here apart from
 * kernels/base.h's LN_EPS, so that a change there shows */
#define TORCH_LN_EPS 1e-5

static void close_to(const char *what, const float *got, const float *want, size_t n, double tol)
{
    double floor = rms(want, n) > 1e-30 ? rms(want, n) : 1e-30;
    double e = max_rel_err(got, want, n, floor);
    CHECK(e <= tol, "%s [%s]: relative error %.3g > %.3g", what, isa_name(isa_get()), e, tol);
}

static void same_bits(const char *what, const void *got, const void *want, size_t bytes)
{
    CHECK(!memcmp(got, want, bytes), "%s [%s]: bits differ", what, isa_name(isa_get()));
}

/* As same_bits for n floats, but where a kernel adds residuals (adds) and
 * both outputs are NaN, any NaN will do: adding two NaNs gives one of
 * them, and which is the compiler's choice (IEEE 754 leaves it open, and
 * an add's operands may be swapped), in the kernel and its twin alike. */
static void same_floats(const char *what, const float *got, const float *want, size_t n,
                        int adds)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(got + i, want + i, sizeof(float)) &&
               !(adds && isnan(got[i]) && isnan(want[i]));
    CHECK(bad == 0, "%s [%s]: bits differ at %zu outputs", what, isa_name(isa_get()), bad);
}

static int isa_count(void) { return isa_best() + 1; }

/* ---- float64 oracles for the twins' sums ---- */

/* fp32 sums against their float64 values: |got - sum| <= terms u mag per
 * element, u = 2^-24, mag the sum of the terms' magnitudes, terms the
 * roundings any one term goes through (the adds of its leaf and of the
 * tree above, and its product's). This is the textbook bound for any
 * summation order; a dropped or doubled term, a wrong sign or a wrong
 * partial is off by a whole term, far above it. An element whose terms
 * are all zero must be exactly 0. */
static void within_sum_bound(const char *what, const float *got, const double *sum,
                             const double *mag, size_t n, int terms)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - sum[i]), bound = terms * 0x1p-24 * mag[i];
        double r = err == 0 ? 0 : bound > 0 ? err / bound : INFINITY;
        if (!(r <= worst)) /* NaN counts as the worst */
            worst = isnan(r) ? INFINITY : r;
    }
    CHECK(worst <= 1, "%s vs float64 sums: %.3g of the fp32 bound", what, worst);
}

/* Roundings a term of a seg reduction over n rows goes through: the adds
 * of its leaf (at most seg rows, all n when seg < 1) and the tree's depth
 * ceil(log2(leaves)) above it. */
static int seg_terms(int n, int seg)
{
    int rows = seg < 1 || seg > n ? n : seg, depth = 0;
    int leaves = n <= 0 ? 0 : seg < 1 ? 1 : (n + seg - 1) / seg;
    while ((1 << depth) < leaves)
        depth++;
    return rows + depth;
}

static double as_double(float x) { return x; }

/* sum[i,j] and mag[i,j] of the products in(a[i,k]) in(b[k,j]) over k,
 * in float64; a's element (i,k) at a[i*si + k*sk] (so a [n,p] or a [p,n]
 * read as its transpose), b [p,q]; in maps each input (as is, or rounded
 * to bf16). */
static void matmul64(double *sum /* [n,q] */, double *mag /* [n,q] */, const float *a, size_t si,
                     size_t sk, const float *b, int n, int p, int q, double (*in)(float))
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < q; j++) {
            double s = 0, m = 0;
            for (int k = 0; k < p; k++) {
                double t = in(a[i * si + k * sk]) * in(b[(size_t)k * q + j]);
                s += t, m += fabs(t);
            }
            sum[(size_t)i * q + j] = s, mag[(size_t)i * q + j] = m;
        }
}

/* calloc'd doubles, never NULL */
static double *dvec(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p)
        abort();
    return p;
}

/* f[0..n) = d[0..n) rounded to float: a float64 answer in a kernel's type */
static void to_float(float *f, const double *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        f[i] = (float)d[i];
}

/* ======================================================================
 * 1. The twins against known answers
 * ====================================================================== */

static void test_hand_matmul(void)
{
    /* [[1,2],[3,4]] @ [[5,6],[7,8]] + [1,-1]: small integers, exact on every path */
    const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, bias[2] = {1, -1};
    const float mm[4] = {20, 21, 44, 49}, tn[4] = {26, 30, 38, 44}; /* a^T @ b */
    const float tr[6] = {1, 4, 2, 5, 3, 6}, in23[6] = {1, 2, 3, 4, 5, 6};
    float c[6];
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        k_matmul(c, a, b, bias, 2, 2, 2);
        same_bits("2x2 matmul", c, mm, sizeof mm);
        k_matmul_tn(c, a, b, 2, 2, 2);
        same_bits("2x2 matmul_tn", c, tn, sizeof tn);
        k_transpose(c, in23, 2, 3);
        same_bits("2x3 transpose", c, tr, sizeof tr);
    }
    k_matmul_ref(c, a, b, bias, 2, 2, 2);
    same_bits("2x2 matmul_ref", c, mm, sizeof mm);
    k_matmul_tn_ref(c, a, b, 2, 2, 2);
    same_bits("2x2 matmul_tn_ref", c, tn, sizeof tn);
}

/* The ReLU's backward gate on a hand product: [[1,2],[3,4]] @
 * [[5,-6,1],[7,-8,1]] = [[19,-22,3],[43,-50,7]], kept only where the gate
 * (the ReLU's output) is > 0: +0 and -0 close it (a `>=` would not), the
 * smallest denormal opens it, NaN closes it; and it is the gate that
 * decides, not the sign of the product (-22 and -50 pass, 19 does not). */
static void test_hand_gated(void)
{
    const float a[4] = {1, 2, 3, 4}, b[6] = {5, -6, 1, 7, -8, 1};
    const float gate[6] = {0.0f, 1, -0.0f, -1, 0x1p-149f, NAN};
    const float want[6] = {0, -22, 0, 0, -50, 0};
    float c[6];
    k_matmul_gated_ref(c, a, b, gate, 2, 2, 3);
    same_bits("hand matmul_gated_ref", c, want, sizeof want);
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        k_matmul_gated(c, a, b, gate, 2, 2, 3);
        same_bits("hand matmul_gated", c, want, sizeof want);
    }
}

static void test_hand_layernorm(void)
{
    /* LayerNorm of [1,2,3,4] with w = 2, b = 1: mean 2.5, variance 1.25 */
    const float x[4] = {1, 2, 3, 4}, w[4] = {2, 2, 2, 2}, b1[4] = {1, 1, 1, 1};
    float y[4], mean, rstd, want[4];
    double rs = 1 / sqrt(1.25 + TORCH_LN_EPS);
    for (int j = 0; j < 4; j++)
        want[j] = (float)((x[j] - 2.5) * rs * 2 + 1);
    k_layernorm_ref(y, &mean, &rstd, x, w, b1, 1, 4);
    close_to("layernorm_ref of [1,2,3,4]", y, want, 4, 1e-6); /* sums of 4: a few roundings */
    CHECK(mean == 2.5f && fabs(rstd - rs) < 1e-6 * rs, "layernorm_ref: mean %g rstd %g", mean,
          rstd);
}

static void test_hand_xent(void)
{
    /* Uniform logits: the loss is log(v) and the gradient (1/v - onehot) / count */
    enum { N = 5, V = 7 };
    float logits[N * V], dl[N * V], loss, one = 1;
    int32_t t[N] = {3, -1, 0, 6, -1};
    for (int i = 0; i < N * V; i++)
        logits[i] = 0.25f;
    k_xent_ref(&loss, logits, t, N, V, 0);
    CHECK(fabs(loss - log(V)) < 1e-6, "xent_ref of uniform logits: %g, want log(7)", loss);
    k_xent_bwd_ref(dl, logits, t, &one, N, V);
    double worst = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++) {
            double g = t[i] < 0 ? 0 : (1.0 / V - (j == t[i])) / 3;
            worst = fmax(worst, fabs(dl[i * V + j] - g));
        }
    CHECK(worst < 1e-7, "xent_bwd_ref of uniform logits: off by %g", worst);
    int32_t none[2] = {-1, -1};
    k_xent_ref(&loss, logits, none, 2, V, 2);
    CHECK(loss == 0, "xent_ref with every row ignored: %g, want 0", loss);

    /* Three rows of v = 3, the middle one ignored, dloss = 3:
     *  row 0, logits (0, ln 2, ln 5), target 2: exp gives 1, 2, 5 of 8,
     *         loss -ln(5/8) = ln 1.6, softmax (1/8, 2/8, 5/8);
     *  row 2, logits (ln 3, 0, 0), target 0: exp gives 3, 1, 1 of 5,
     *         loss -ln(3/5) = ln(5/3), softmax (3/5, 1/5, 1/5).
     * The mean over the 2 counted rows: (ln 1.6 + ln(5/3)) / 2 = ln(8/3) / 2.
     * The gradient is (softmax - onehot) * dloss / count = ( ... ) * 3/2:
     *  row 0: (1/8, 2/8, 5/8 - 1) * 3/2 = (3/16, 3/8, -9/16);
     *  row 1: 0 (ignored);
     *  row 2: (3/5 - 1, 1/5, 1/5) * 3/2 = (-3/5, 3/10, 3/10). */
    const float hx[9] = {0, (float)log(2), (float)log(5), 9, -4, 1, (float)log(3), 0, 0};
    const int32_t ht[3] = {2, -1, 0};
    const double hg[9] = {3. / 16, 3. / 8, -9. / 16, 0, 0, 0, -3. / 5, 3. / 10, 3. / 10};
    float hd[9], hl, three = 3;
    k_xent_grad_ref(&hl, hd, hx, ht, &three, 3, 3, 0);
    double off = 0;
    for (int j = 0; j < 9; j++)
        off = fmax(off, fabs(hd[j] - hg[j]));
    CHECK(fabs(hl - log(8. / 3) / 2) < 1e-6 && off < 1e-6,
          "xent_grad_ref by hand: loss %.9g, want ln(8/3)/2 = %.9g; gradient off by %g", hl,
          log(8. / 3) / 2, off);
}

static void test_hand_adam(void)
{
    /* One Adam step from zero moments moves p by lr * g/|g| (up to eps) */
    float p = 1, m = 0, v = 0, g = 0.5f;
    k_adam_ref(&p, &m, &v, &g, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 1);
    CHECK(fabs(p - 0.9) < 1e-6 && fabs(m - 0.05) < 1e-7 && fabs(v - (1 - 0.999f) * 0.25) < 1e-10,
          "adam_ref first step: p %g m %g v %g", p, m, v);
}

static void test_hand_embed(void)
{
    /* Embedding of column idx, and its gradient summed over repeats */
    const float table[6] = {1, 2, 3, 4, 5, 6}; /* [c=2, v=3] */
    const int32_t idx[3] = {2, 0, 2};
    const float emb[6] = {3, 6, 1, 4, 3, 6}, dy[6] = {1, 2, 3, 4, 5, 6};
    const float dtab[6] = {3, 0, 6, 4, 0, 8};
    float e[6];
    k_embed_ref(e, idx, table, 3, 2, 3);
    same_bits("embed_ref", e, emb, sizeof emb);
    k_embed_bwd_ref(e, idx, dy, 3, 2, 3);
    same_bits("embed_bwd_ref", e, dtab, sizeof dtab);
}

static void test_hand_attention(void)
{
    /* One token attends only to itself: out = v, lse = q.k / sqrt(hs) */
    const float qkv1[6] = {1, 2, 3, 4, 5, 6}; /* C = 2, H = 1: q = (1,2), k = (3,4), v = (5,6) */
    float o[2], lse;
    k_attention_ref(o, &lse, qkv1, 1, 1, 2, 1);
    CHECK(o[0] == 5 && o[1] == 6 && fabs(lse - 11 / sqrt(2)) < 1e-5,
          "attention_ref of one token: out (%g, %g) lse %g", o[0], o[1], lse);
}

/* GELU's error against PyTorch's float64 values, in units of the bound
 *   u mag (1 + |2u| (1 - s)) + min(2^-50 |x| (1 + x^2), 2^-40) + 2^-147,
 * u = 2^-24, s = sigmoid(2u), mag the size of what the result sums: |y|
 * for y = x s; |s| + |x s (1 - s) 2u'| for the slope (the two cancel where
 * GELU has its minimum, x = -0.75). A float computation rounds 2u
 * (relative error a few u), which e^-2u turns into an error of about that
 * times |2u| until s saturates at 1 (the factor 1 - s). PyTorch's 1 + tanh
 * and 1 - tanh^2 cancel in float64 below x = -6 (off by up to 2^-53 |x|
 * times the slope's size; exactly 0 beyond x = -7.3, where the true
 * values are below 2^-40). The last term allows a few subnormal spacings.
 * A NaN or infinity that torch does not have is an infinite error. */
static double gelu_err(float got, double ref, float xf, int slope)
{
    double x = xf, u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    double s = 1 / (1 + exp(-2 * u)), du = 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
    double mag = slope ? fabs(s) + fabs(x * s * (1 - s) * 2 * du) : fabs(ref);
    double torch = fmin(0x1p-50 * fabs(x) * (1 + x * x), 0x1p-40);
    double bound = 0x1p-24 * mag * (1 + fabs(2 * u) * (1 - s)) + torch + 0x1p-147;
    if (!isfinite(got) || !isfinite(bound))
        return got == ref ? 0 : INFINITY;
    return fabs(got - ref) / bound;
}

/* k_gelu and k_gelu_bwd (dy = 1), twin and kernel of every path, against
 * PyTorch's nn.GELU(approximate="tanh") in float64 (tests/gelu_reference.h,
 * from -20 to 20, zero, subnormals, up to 3e38), within GELU_ULPS of
 * gelu_err's bound; twin and kernel to the bit. */
#define GELU_ULPS 4 /* the worst today is 1.9 */
static void test_gelu_torch(void)
{
    float y[GELU_N], yr[GELU_N], d[GELU_N], dr[GELU_N], ones[GELU_N];
    for (int i = 0; i < GELU_N; i++)
        ones[i] = 1.0f;
    k_gelu_ref(yr, gelu_x, GELU_N);
    k_gelu_bwd_ref(dr, ones, gelu_x, GELU_N);
    double ey = 0, ed = 0;
    int wy = 0, wd = 0;
    for (int i = 0; i < GELU_N; i++) {
        double a = gelu_err(yr[i], gelu_y[i], gelu_x[i], 0);
        double b = gelu_err(dr[i], gelu_dydx[i], gelu_x[i], 1);
        if (a > ey)
            ey = a, wy = i;
        if (b > ed)
            ed = b, wd = i;
    }
    CHECK(ey <= GELU_ULPS, "gelu_ref(%a) = %a, torch %a: %.3g of the bound", gelu_x[wy], yr[wy],
          gelu_y[wy], ey);
    CHECK(ed <= GELU_ULPS, "gelu_bwd_ref(%a) = %a, torch %a: %.3g of the bound", gelu_x[wd],
          dr[wd], gelu_dydx[wd], ed);
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        k_gelu(y, gelu_x, GELU_N);
        k_gelu_bwd(d, ones, gelu_x, GELU_N);
        same_bits("gelu at torch's inputs", y, yr, sizeof y);
        same_bits("gelu_bwd at torch's inputs", d, dr, sizeof d);
    }
}

static void test_hand_values(void)
{
    test_hand_matmul();
    test_hand_gated();
    test_hand_layernorm();
    test_hand_xent();
    test_hand_adam();
    test_hand_embed();
    test_hand_attention();
    test_gelu_torch();
}

/* Causal attention, the whole score matrix at once, in double. */
static void attention_naive(double *out /* [B,T,C] */, double *lse /* [B,H,T] */,
                            const double *qkv /* [B,T,3C] */, int B, int T, int C, int H)
{
    int hs = C / H;
    double *s = malloc(sizeof(double) * (size_t)T * T); /* [T,T] */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const double *base = qkv + (size_t)b * T * 3 * C + 3 * hs * h;
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    double dot = 0;
                    for (int d = 0; d < hs; d++)
                        dot += base[i * 3 * C + d] * base[j * 3 * C + hs + d];
                    s[i * T + j] = j <= i ? dot / sqrt(hs) : -INFINITY;
                }
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, l = 0;
                for (int j = 0; j < T; j++)
                    mx = fmax(mx, s[i * T + j]);
                for (int j = 0; j < T; j++)
                    l += exp(s[i * T + j] - mx);
                lse[((size_t)b * H + h) * T + i] = mx + log(l);
                for (int d = 0; d < hs; d++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++)
                        acc += exp(s[i * T + j] - mx) / l * base[j * 3 * C + 2 * hs + d];
                    out[((size_t)b * T + i) * C + hs * h + d] = acc;
                }
            }
        }
    free(s);
}

static double attention_objective(const double *qkv, const float *r /* [B,T,C] */, int B, int T,
                                  int C, int H)
{
    size_t no = (size_t)B * T * C;
    double *out = malloc(sizeof(double) * no), *lse = malloc(sizeof(double) * B * H * T), L = 0;
    attention_naive(out, lse, qkv, B, T, C, H);
    for (size_t i = 0; i < no; i++)
        L += out[i] * r[i];
    free(out);
    free(lse);
    return L;
}

/* attention_ref against the double matrix version; attention_bwd_ref
 * against central differences of the objective sum(out * r). */
static void test_attention_twin(int B, int T, int C, int H)
{
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = rvec(nq, 1.5f), *out = fvec(no), *lse = fvec(nl), *r = rvec(no, 1);
    float *dqkv = fvec(nq), *fo = fvec(no), *fl = fvec(nl), *fd = fvec(nq);
    double *dq = calloc(nq, sizeof(double)), *dout = calloc(no, sizeof(double));
    double *dlse = calloc(nl, sizeof(double));
    char what[96];
    for (size_t i = 0; i < nq; i++)
        dq[i] = qkv[i];
    attention_naive(dout, dlse, dq, B, T, C, H);
    to_float(fo, dout, no);
    to_float(fl, dlse, nl);
    k_attention_ref(out, lse, qkv, B, T, C, H);
    snprintf(what, sizeof what, "attention_ref vs double B=%d T=%d C=%d H=%d", B, T, C, H);
    close_to(what, out, fo, no, TOL_SUM);
    close_to(what, lse, fl, nl, TOL_SUM);

    const double h = 1e-4; /* truncation ~h^2, cancellation ~1e-16/h: both far below 1e-4 */
    for (size_t i = 0; i < nq; i++) {
        double keep = dq[i];
        dq[i] = keep + h;
        double lp = attention_objective(dq, r, B, T, C, H);
        dq[i] = keep - h;
        double lm = attention_objective(dq, r, B, T, C, H);
        dq[i] = keep;
        fd[i] = (float)((lp - lm) / (2 * h));
    }
    k_attention_bwd_ref(dqkv, r, qkv, out, lse, B, T, C, H);
    snprintf(what, sizeof what, "attention_bwd_ref vs finite differences B=%d T=%d C=%d H=%d", B, T,
             C, H);
    close_to(what, dqkv, fd, nq, TOL_FD); /* float gradient against a double derivative */
    free(qkv), free(out), free(lse), free(r), free(dqkv), free(fo), free(fl), free(fd);
    free(dq), free(dout), free(dlse);
}

/* layernorm_bwd_ref against central differences of sum(y * r), in double. */
static double layernorm_objective(const double *x, const double *w, const double *b, const float *r,
                                  int n, int c)
{
    double L = 0;
    for (int i = 0; i < n; i++) {
        double mu = 0, var = 0;
        for (int j = 0; j < c; j++)
            mu += x[i * c + j] / c;
        for (int j = 0; j < c; j++)
            var += (x[i * c + j] - mu) * (x[i * c + j] - mu) / c;
        for (int j = 0; j < c; j++)
            L += ((x[i * c + j] - mu) / sqrt(var + TORCH_LN_EPS) * w[j] + b[j]) * r[i * c + j];
    }
    return L;
}

static void test_layernorm_twin(int n, int c)
{
    size_t nx = (size_t)n * c, np = nx + 2 * (size_t)c;
    float *x = rvec(nx, 2), *w = rvec(c, 1), *b = rvec(c, 1), *r = rvec(nx, 1);
    float *y = fvec(nx), *mean = fvec(n), *rstd = fvec(n), *an = fvec(np), *fd = fvec(np);
    double *all = calloc(np, sizeof(double)); /* x, then w, then b */
    for (size_t i = 0; i < nx; i++)
        all[i] = x[i];
    for (int j = 0; j < c; j++) {
        all[nx + j] = w[j];
        all[nx + c + j] = b[j];
    }
    const double h = 1e-4;
    for (size_t i = 0; i < np; i++) {
        double keep = all[i];
        all[i] = keep + h;
        double lp = layernorm_objective(all, all + nx, all + nx + c, r, n, c);
        all[i] = keep - h;
        double lm = layernorm_objective(all, all + nx, all + nx + c, r, n, c);
        all[i] = keep;
        fd[i] = (float)((lp - lm) / (2 * h));
    }
    k_layernorm_ref(y, mean, rstd, x, w, b, n, c);
    k_layernorm_bwd_ref(an, an + nx, an + nx + c, r, x, w, mean, rstd, n, c);
    close_to("layernorm_bwd_ref dx vs finite differences", an, fd, nx, TOL_FD);
    close_to("layernorm_bwd_ref dw, db vs finite differences", an + nx, fd + nx, 2 * (size_t)c,
             TOL_FD);
    free(x), free(w), free(b), free(r), free(y), free(mean), free(rstd), free(an), free(fd),
        free(all);
}

/* ======================================================================
 * 2. Every path against the twins
 * ====================================================================== */

/* The ReLU's backward gate folded in: k_matmul then k_relu_bwd, bit for
 * bit (gate: some entries set to +0 and -0, which close it), and close
 * to the twin. */
static void check_gated(const float *a, const float *b, float *gate, int n, int p, int q)
{
    size_t nc = (size_t)n * q;
    float *got = fvec(nc), *want = fvec(nc), *twin = fvec(nc);
    char what[80];
    snprintf(what, sizeof what, "matmul_gated n=%d p=%d q=%d", n, p, q);
    for (size_t i = 0; i < nc; i += 7)
        gate[i] = i % 2 ? -0.0f : 0.0f;
    k_matmul(want, a, b, NULL, n, p, q);
    k_relu_bwd(want, want, gate, nc);
    k_matmul_gated(got, a, b, gate, n, p, q);
    same_bits(what, got, want, sizeof(float) * nc);
    k_matmul_gated_ref(twin, a, b, gate, n, p, q);
    same_bits(what, got, twin, sizeof(float) * nc); /* the twin: the contract's bits */
    /* The twin itself against float64 (it is built on k_matmul_ref, so
     * agreeing with that proves nothing about the gate): the product where
     * gate > 0, else exactly +0 (relu_bwd's zero) */
    double *sum = dvec(nc), *mag = dvec(nc);
    size_t minus0 = 0;
    matmul64(sum, mag, a, (size_t)p, 1, b, n, p, q, as_double);
    for (size_t i = 0; i < nc; i++)
        if (!(gate[i] > 0)) {
            sum[i] = mag[i] = 0;
            minus0 += twin[i] == 0 && signbit(twin[i]);
        }
    snprintf(what, sizeof what, "matmul_gated_ref n=%d p=%d q=%d", n, p, q);
    within_sum_bound(what, twin, sum, mag, nc, p + 1);
    CHECK(minus0 == 0, "%s: %zu closed entries are -0, want +0", what, minus0);
    free(got), free(want), free(twin), free(sum), free(mag);
}

static void test_matmul(int n, int p, int q)
{
    size_t nc = (size_t)n * q;
    float *a = rvec((size_t)n * p, 1), *b = rvec((size_t)p * q, 1), *bias = rvec(q, 1);
    float *r1 = rvec(nc, 1), *r2 = rvec(nc, 1), *got = fvec(nc), *want = fvec(nc),
          *fused = fvec(nc);
    char what[80];
    snprintf(what, sizeof what, "matmul n=%d p=%d q=%d", n, p, q);
    k_matmul_ref(want, a, b, bias, n, p, q);
    k_matmul(got, a, b, bias, n, p, q);
    same_bits(what, got, want, sizeof(float) * nc);
    k_matmul_ref(want, a, b, NULL, n, p, q);
    k_matmul(got, a, b, NULL, n, p, q);
    same_bits(what, got, want, sizeof(float) * nc);

    snprintf(what, sizeof what, "matmul_ex n=%d p=%d q=%d", n, p, q);
    k_matmul_ex_ref(want, a, b, bias, r1, r2, 1, n, p, q);
    k_matmul_ex(fused, a, b, bias, r1, r2, 1, n, p, q);
    same_bits(what, fused, want, sizeof(float) * nc);
    /* Fusing must not change a bit: the epilogue done by hand on k_matmul */
    k_matmul(got, a, b, bias, n, p, q);
    for (size_t i = 0; i < nc; i++)
        got[i] = (got[i] > 0 ? got[i] : 0.0f) + r1[i] + r2[i];
    same_bits(what, fused, got, sizeof(float) * nc);
    k_matmul(got, a, b, bias, n, p, q);
    k_matmul_ex(fused, a, b, bias, NULL, NULL, 0, n, p, q);
    same_bits(what, fused, got, sizeof(float) * nc);
    k_matmul_ex_ref(want, a, b, NULL, r1, NULL, 0, n, p, q);
    k_matmul_ex(fused, a, b, NULL, r1, NULL, 0, n, p, q);
    same_bits(what, fused, want, sizeof(float) * nc);
    check_gated(a, b, r2, n, p, q);
    /* A row's bits must not depend on where it falls in a register tile:
     * the same rows, shifted by one, through the tile or the remainder */
    if (n > 1) {
        k_matmul_ex(want, a, b, bias, r1, r2, 1, n, p, q);
        k_matmul_ex(got, a + p, b, bias, r1 + q, r2 + q, 1, n - 1, p, q);
        same_bits("matmul rows shifted by one", got, want + q, sizeof(float) * (nc - q));
    }
    free(a), free(b), free(bias), free(r1), free(r2), free(got), free(want), free(fused);
}

/* A b too large for one cache block (tensor.c's MM_KC x MM_NC) is
 * multiplied in blocks of columns and of k, the sums waiting in c between
 * k blocks; that must change no bit: the first q0 columns of the blocked
 * product equal the product with those q0 columns of b alone, which fits
 * one block. */
static void test_matmul_blocked(int n, int p, int q, int q0)
{
    float *a = rvec((size_t)n * p, 1), *b = rvec((size_t)p * q, 1), *bias = rvec(q, 1);
    float *r1 = rvec((size_t)n * q, 1), *b0 = fvec((size_t)p * q0), *r0 = fvec((size_t)n * q0);
    float *c = fvec((size_t)n * q), *c0 = fvec((size_t)n * q0), *want = fvec((size_t)n * q);
    for (int k = 0; k < p; k++)
        memcpy(b0 + (size_t)k * q0, b + (size_t)k * q, sizeof(float) * (size_t)q0);
    for (int i = 0; i < n; i++)
        memcpy(r0 + (size_t)i * q0, r1 + (size_t)i * q, sizeof(float) * (size_t)q0);
    k_matmul_ex(c, a, b, bias, r1, NULL, 1, n, p, q);
    k_matmul_ex(c0, a, b0, bias, r0, NULL, 1, n, p, q0);
    k_matmul_ex_ref(want, a, b, bias, r1, NULL, 1, n, p, q);
    char what[80];
    snprintf(what, sizeof what, "matmul_ex blocked n=%d p=%d q=%d", n, p, q);
    same_bits(what, c, want, sizeof(float) * (size_t)n * q);
    for (int i = 0; i < n; i++)
        same_bits(what, c + (size_t)i * q, c0 + (size_t)i * q0, sizeof(float) * (size_t)q0);
    check_gated(a, b, r1, n, p, q); /* the gate after the last k block only */
    free(a), free(b), free(bias), free(r1), free(b0), free(r0), free(c), free(c0), free(want);
}

/* The same for the weight gradient: a leaf's b wider than one block goes
 * in packed blocks, with the same bits as the first q0 columns alone. */
static void test_matmul_tn_blocked(int n, int p, int q, int q0, int seg)
{
    float *a = rvec((size_t)p * n, 1), *b = rvec((size_t)p * q, 1), *b0 = fvec((size_t)p * q0);
    float *c = fvec((size_t)n * q), *c0 = fvec((size_t)n * q0), *want = fvec((size_t)n * q);
    for (int k = 0; k < p; k++)
        memcpy(b0 + (size_t)k * q0, b + (size_t)k * q, sizeof(float) * (size_t)q0);
    k_matmul_tn_seg(c, a, b, n, p, q, seg);
    k_matmul_tn_seg(c0, a, b0, n, p, q0, seg);
    k_matmul_tn_ref(want, a, b, n, p, q);
    char what[80];
    snprintf(what, sizeof what, "matmul_tn_seg blocked n=%d p=%d q=%d seg=%d", n, p, q, seg);
    if (seg < 1 || seg >= p) /* one leaf: the plain twin's one chain */
        same_bits(what, c, want, sizeof(float) * (size_t)n * q);
    else
        close_to(what, c, want, (size_t)n * q, TOL_LONG_SUM);
    for (int i = 0; i < n; i++)
        same_bits(what, c + (size_t)i * q, c0 + (size_t)i * q0, sizeof(float) * (size_t)q0);
    free(a), free(b), free(b0), free(c), free(c0), free(want);
}

static void test_matmul_tn(int n, int p, int q)
{
    size_t nc = (size_t)n * q;
    float *a = rvec((size_t)p * n, 1), *b = rvec((size_t)p * q, 1), *got = fvec(nc),
          *want = fvec(nc);
    char what[80];
    snprintf(what, sizeof what, "matmul_tn n=%d p=%d q=%d", n, p, q);
    k_matmul_tn_ref(want, a, b, n, p, q);
    k_matmul_tn(got, a, b, n, p, q);
    same_bits(what, got, want, sizeof(float) * nc);
    if (n > 1) { /* rows of c shifted by one tile position give the same bits */
        float *a1 = fvec((size_t)p * (n - 1)), *c1 = fvec(nc);
        for (int k = 0; k < p; k++)
            memcpy(a1 + (size_t)k * (n - 1), a + (size_t)k * n + 1, sizeof(float) * (n - 1));
        k_matmul_tn(c1, a1, b, n - 1, p, q);
        same_bits("matmul_tn rows shifted by one", c1, got + q, sizeof(float) * (nc - q));
        free(a1), free(c1);
    }
    free(a), free(b), free(got), free(want);
}

static void test_transpose_sum_rows(int n, int q)
{
    size_t nx = (size_t)n * q;
    float *x = rvec(nx, 1), *got = fvec(nx), *want = fvec(nx);
    char what[80];
    snprintf(what, sizeof what, "transpose %dx%d", n, q);
    k_transpose_ref(want, x, n, q);
    k_transpose(got, x, n, q);
    same_bits(what, got, want, sizeof(float) * nx);
    snprintf(what, sizeof what, "sum_rows n=%d q=%d", n, q);
    k_sum_rows_ref(want, x, n, q);
    k_sum_rows(got, x, n, q);
    same_bits(what, got, want, sizeof(float) * q);
    free(x), free(got), free(want);
}

/* Element-wise kernels do the same operations in the same order on every
 * path, so they must agree to the bit. */
static void test_elementwise(size_t n)
{
    float *a = rvec(n, 1), *b = rvec(n, 1), *c = rvec(n, 1), *got = fvec(n), *want = fvec(n);
    const float *xs[3] = {a, b, c};
    char what[80];
    for (size_t i = 0; i < n; i += 7)
        a[i] = -0.0f; /* relu must treat -0 like the twin */
    snprintf(what, sizeof what, "add n=%zu", n);
    k_add_ref(want, a, b, n);
    k_add(got, a, b, n);
    same_bits(what, got, want, sizeof(float) * n);
    snprintf(what, sizeof what, "add_n n=%zu", n);
    for (int m = 1; m <= 3; m++) {
        k_add_n_ref(want, xs, m, n);
        k_add_n(got, xs, m, n);
        same_bits(what, got, want, sizeof(float) * n);
    }
    snprintf(what, sizeof what, "relu n=%zu", n);
    k_relu_ref(want, a, n);
    k_relu(got, a, n);
    same_bits(what, got, want, sizeof(float) * n);
    snprintf(what, sizeof what, "relu_bwd n=%zu", n);
    k_relu_bwd_ref(want, b, a, n);
    k_relu_bwd(got, b, a, n);
    same_bits(what, got, want, sizeof(float) * n);
    /* GELU over -12..12: both sides of where it saturates (|x| ~ 10) */
    float *wide = rvec(n, 12);
    snprintf(what, sizeof what, "gelu n=%zu", n);
    k_gelu_ref(want, wide, n);
    k_gelu(got, wide, n);
    same_bits(what, got, want, sizeof(float) * n);
    snprintf(what, sizeof what, "gelu_bwd n=%zu", n);
    k_gelu_bwd_ref(want, b, wide, n);
    k_gelu_bwd(got, b, wide, n);
    same_bits(what, got, want, sizeof(float) * n);
    free(wide);

    /* Adam, three steps from the same state on both paths */
    float *p1 = rvec(n, 1), *m1 = rvec(n, 0.1f), *v1 = fvec(n), *g = b;
    float *p2 = fvec(n), *m2 = fvec(n), *v2 = fvec(n);
    for (size_t i = 0; i < n; i++)
        v1[i] = 0.01f * fabsf(c[i]);
    memcpy(p2, p1, sizeof(float) * n), memcpy(m2, m1, sizeof(float) * n),
        memcpy(v2, v1, sizeof(float) * n);
    for (int t = 1; t <= 3; t++) {
        k_adam_ref(p1, m1, v1, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, t);
        k_adam(p2, m2, v2, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, t);
    }
    snprintf(what, sizeof what, "adam n=%zu", n);
    same_bits(what, p2, p1, sizeof(float) * n);
    same_bits(what, m2, m1, sizeof(float) * n);
    same_bits(what, v2, v1, sizeof(float) * n);
    free(a), free(b), free(c), free(got), free(want);
    free(p1), free(m1), free(v1), free(p2), free(m2), free(v2);
}

static void test_layernorm(int n, int c)
{
    size_t nx = (size_t)n * c;
    float *x = rvec(nx, 2), *w = rvec(c, 1), *b = rvec(c, 1), *dy = rvec(nx, 1);
    float *y1 = fvec(nx), *y2 = fvec(nx), *mu1 = fvec(n), *mu2 = fvec(n), *rs1 = fvec(n),
          *rs2 = fvec(n);
    float *g1 = fvec(nx + 2 * (size_t)c), *g2 = fvec(nx + 2 * (size_t)c); /* dx, dw, db */
    char what[80];
    for (size_t i = 0; i < nx; i += 5)
        x[i] += 3; /* a mean far from 0 */
    snprintf(what, sizeof what, "layernorm n=%d c=%d", n, c);
    k_layernorm_ref(y1, mu1, rs1, x, w, b, n, c);
    k_layernorm(y2, mu2, rs2, x, w, b, n, c);
    same_bits(what, y2, y1, sizeof(float) * nx);
    same_bits(what, mu2, mu1, sizeof(float) * n);
    same_bits(what, rs2, rs1, sizeof(float) * n);
    snprintf(what, sizeof what, "layernorm_bwd n=%d c=%d", n, c);
    k_layernorm_bwd_ref(g1, g1 + nx, g1 + nx + c, dy, x, w, mu1, rs1, n, c);
    k_layernorm_bwd(g2, g2 + nx, g2 + nx + c, dy, x, w, mu1, rs1, n, c);
    same_bits(what, g2, g1, sizeof(float) * (nx + 2 * (size_t)c)); /* dx, dw, db */
    free(x), free(w), free(b), free(dy), free(y1), free(y2), free(mu1), free(mu2), free(rs1),
        free(rs2), free(g1), free(g2);
}

static void test_attention(int B, int T, int C, int H)
{
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = rvec(nq, 2), *dout = rvec(no, 1);
    float *o1 = fvec(no), *o2 = fvec(no), *l1 = fvec(nl), *l2 = fvec(nl), *d1 = fvec(nq),
          *d2 = fvec(nq);
    char what[80];
    snprintf(what, sizeof what, "attention B=%d T=%d C=%d H=%d", B, T, C, H);
    k_attention_ref(o1, l1, qkv, B, T, C, H);
    k_attention(o2, l2, qkv, B, T, C, H);
    same_bits(what, o2, o1, sizeof(float) * no);
    same_bits(what, l2, l1, sizeof(float) * nl);
    snprintf(what, sizeof what, "attention_bwd B=%d T=%d C=%d H=%d", B, T, C, H);
    k_attention_bwd_ref(d1, dout, qkv, o1, l1, B, T, C, H);
    k_attention_bwd(d2, dout, qkv, o1, l1, B, T, C, H);
    same_bits(what, d2, d1, sizeof(float) * nq);
    free(qkv), free(dout), free(o1), free(o2), free(l1), free(l2), free(d1), free(d2);
}

/* Decoding position by position with the cache must give the rows of the
 * full causal attention, and fill the caches with the k and v columns. */
static void test_attention_step(int nb, int T, int C, int H)
{
    int hs = C / H, tmax = T + 3;
    size_t nq = (size_t)nb * T * 3 * C, no = (size_t)nb * T * C, ncache = (size_t)nb * tmax * C;
    float *qkv = rvec(nq, 2), *full = fvec(no), *lse = fvec((size_t)nb * H * T);
    float *kc1 = fvec(ncache), *vc1 = fvec(ncache), *kc2 = fvec(ncache), *vc2 = fvec(ncache);
    float *in = fvec((size_t)nb * 3 * C), *s1 = fvec((size_t)nb * C), *s2 = fvec((size_t)nb * C);
    float *row = fvec((size_t)nb * C), *kwant = fvec(ncache);
    char what[96];
    k_attention(full, lse, qkv, nb, T, C, H);
    double worst_full = 0;
    int twin_differs = 0; /* steps whose output is not the twin's bits */
    for (int pos = 0; pos < T; pos++) {
        for (int b = 0; b < nb; b++) {
            memcpy(in + (size_t)b * 3 * C, qkv + ((size_t)b * T + pos) * 3 * C,
                   sizeof(float) * 3 * C);
            memcpy(row + (size_t)b * C, full + ((size_t)b * T + pos) * C, sizeof(float) * C);
        }
        k_attention_step_ref(s1, kc1, vc1, in, nb, pos, tmax, C, H);
        k_attention_step(s2, kc2, vc2, in, nb, pos, tmax, C, H);
        double fl = rms(row, (size_t)nb * C);
        worst_full = fmax(worst_full, max_rel_err(s2, row, (size_t)nb * C, fl));
        twin_differs += memcmp(s2, s1, sizeof(float) * nb * C) != 0;
    }
    snprintf(what, sizeof what, "attention_step nb=%d T=%d C=%d H=%d", nb, T, C, H);
    CHECK(worst_full <= TOL_SUM, "%s [%s]: %.3g from k_attention's rows", what, isa_name(isa_get()),
          worst_full);
    CHECK(twin_differs == 0, "%s [%s]: %d steps' bits differ from the twin's", what,
          isa_name(isa_get()), twin_differs);
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < hs; d++)
                    kwant[((size_t)b * tmax + t) * C + hs * h + d] =
                        qkv[((size_t)b * T + t) * 3 * C + 3 * hs * h + hs + d];
    int cache_ok = 1;
    for (int b = 0; b < nb; b++)
        cache_ok &= !memcmp(kc2 + (size_t)b * tmax * C, kwant + (size_t)b * tmax * C,
                            sizeof(float) * T * C);
    CHECK(cache_ok, "%s [%s]: key cache rows are not the k columns", what, isa_name(isa_get()));
    free(qkv), free(full), free(lse), free(kc1), free(vc1), free(kc2), free(vc2);
    free(in), free(s1), free(s2), free(row), free(kwant);
}

/* Each window's last query alone must give the last rows of the full
 * causal attention, and its twin's bits. */
static void test_attention_last(int B, int T, int C, int H)
{
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * C;
    float *qkv = rvec(nq, 2), *full = fvec(no), *lse = fvec((size_t)B * H * T);
    float *row = fvec(nl), *l1 = fvec(nl), *l2 = fvec(nl);
    char what[96];
    k_attention_ref(full, lse, qkv, B, T, C, H);
    for (int b = 0; b < B; b++) /* row T-1 of window b */
        memcpy(row + (size_t)b * C, full + ((size_t)b * T + T - 1) * C, sizeof(float) * C);
    k_attention_last_ref(l1, qkv, B, T, C, H);
    k_attention_last(l2, qkv, B, T, C, H);
    double fl = rms(row, nl);
    snprintf(what, sizeof what, "attention_last B=%d T=%d C=%d H=%d", B, T, C, H);
    CHECK(max_rel_err(l1, row, nl, fl) <= 1e-6, "%s: the twin is %.3g from k_attention_ref's rows",
          what, max_rel_err(l1, row, nl, fl));
    same_bits(what, l2, l1, sizeof(float) * nl);
    free(qkv), free(full), free(lse), free(row), free(l1), free(l2);
}

/* Mean cross-entropy over the counted rows (target >= 0) and its gradient
 * times dloss, in double, as k_xent and k_xent_bwd promise: log-sum-exp
 * after the row's max; an ignored row (-1) adds no loss and gets a zero
 * gradient; the gradient is (softmax - onehot) * dloss / count; no
 * counted row gives a loss of 0. Returns the loss. */
static double xent_double(double *grad /* [n,v] */, const float *logits /* [n,v] */,
                          const int32_t *t /* [n] */, double dloss, int n, int v)
{
    int count = 0;
    for (int i = 0; i < n; i++)
        count += t[i] >= 0;
    double total = 0;
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v;
        double *g = grad + (size_t)i * v, mx = -INFINITY, s = 0;
        for (int j = 0; j < v; j++)
            mx = fmax(mx, x[j]);
        for (int j = 0; j < v; j++)
            s += exp(x[j] - mx);
        for (int j = 0; j < v; j++)
            g[j] = t[i] < 0 ? 0 : (exp(x[j] - mx) / s - (j == t[i])) * dloss / count;
        if (t[i] >= 0)
            total += mx + log(s) - x[t[i]];
    }
    return count ? total / count : 0;
}

/* k_xent and k_xent_bwd against their twins, the fused kernel against
 * the two, the fused twin against float64 (kind: "" or what the logits
 * are, for the messages); the loss's leaves of seg rows. */
static void check_xent(const char *kind, const float *logits, const int32_t *t, int n, int v,
                       int seg)
{
    size_t nx = (size_t)n * v;
    float *d1 = fvec(nx), *d2 = fvec(nx), l1, l2, dloss = 0.7f;
    char what[80];
    snprintf(what, sizeof what, "xent%s n=%d v=%d seg=%d", kind, n, v, seg);
    k_xent_ref(&l1, logits, t, n, v, seg);
    k_xent(&l2, logits, t, n, v, seg);
    same_bits(what, &l2, &l1, sizeof l1);
    snprintf(what, sizeof what, "xent_bwd%s n=%d v=%d", kind, n, v);
    k_xent_bwd_ref(d1, logits, t, &dloss, n, v);
    k_xent_bwd(d2, logits, t, &dloss, n, v);
    same_bits(what, d2, d1, sizeof(float) * nx);
    int zero = 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < v && t[i] < 0; j++)
            zero &= d2[(size_t)i * v + j] == 0;
    CHECK(zero, "%s [%s]: ignored rows have a gradient", what, isa_name(isa_get()));
    /* fused: both, bit for bit as the two kernels; the twin as the twins */
    float l3;
    snprintf(what, sizeof what, "xent_grad%s n=%d v=%d", kind, n, v);
    k_xent_grad(&l3, d1, logits, t, &dloss, n, v, seg);
    same_bits(what, &l3, &l2, sizeof l3);
    same_bits(what, d1, d2, sizeof(float) * nx);
    /* the fused twin against the loss and gradient computed here in double */
    double *dg = malloc(sizeof(double) * nx);
    float want = (float)xent_double(dg, logits, t, dloss, n, v);
    to_float(d2, dg, nx);
    k_xent_grad_ref(&l3, d1, logits, t, &dloss, n, v, seg);
    snprintf(what, sizeof what, "xent_grad_ref%s loss vs double n=%d v=%d", kind, n, v);
    close_to(what, &l3, &want, 1, TOL_SUM);
    snprintf(what, sizeof what, "xent_grad_ref%s gradient vs double n=%d v=%d", kind, n, v);
    close_to(what, d1, d2, nx, TOL_SUM);
    free(d1), free(d2), free(dg);
}

static void test_xent(int n, int v, int skip)
{
    float *logits = rvec((size_t)n * v, 4);
    int32_t *t = rtargets(n, v, skip);
    check_xent("", logits, t, n, v, 0);
    check_xent("", logits, t, n, v, 3);
    free(logits), free(t);
}

static void test_embed(int n, int c, int v)
{
    float *table = rvec((size_t)c * v, 1), *dy = rvec((size_t)n * c, 1);
    float *y1 = fvec((size_t)n * c), *y2 = fvec((size_t)n * c), *t1 = fvec((size_t)c * v),
          *t2 = fvec((size_t)c * v);
    int32_t *idx = rtargets(n, v, 0);
    char what[80];
    snprintf(what, sizeof what, "embed n=%d c=%d v=%d", n, c, v);
    k_embed_ref(y1, idx, table, n, c, v);
    k_embed(y2, idx, table, n, c, v);
    same_bits(what, y2, y1, sizeof(float) * n * c);
    k_embed_bwd_ref(t1, idx, dy, n, c, v);
    k_embed_bwd(t2, idx, dy, n, c, v); /* rows in order, as the header says: the same sums */
    same_bits(what, t2, t1, sizeof(float) * c * v);
    free(table), free(dy), free(y1), free(y2), free(t1), free(t2), free(idx);
}

/* ---- the *_seg reductions: leaves of seg rows, combined by the tree ---- */

static int nleaves(int n, int seg) { return n <= 0 ? 0 : seg < 1 ? 1 : (n + seg - 1) / seg; }
static int leaf0(int l, int seg) { return seg < 1 ? 0 : l * seg; }
static int leaf1(int l, int n, int seg) { return seg < 1 || (l + 1) * seg > n ? n : (l + 1) * seg; }

/* m pointers to the arrays base, base + len, ... */
static const float **parts_of(float *base, int m, size_t len)
{
    const float **p = malloc(sizeof(*p) * (size_t)(m ? m : 1));
    for (int k = 0; k < m; k++)
        p[k] = base + (size_t)k * len;
    return p;
}

/* The tree spelled out for 3, 5 and 6 arrays, on values where the order
 * shows: 1 + (1e8 + -1e8) = 1 but (1 + 1e8) + -1e8 = 0 in float. Then the
 * fast path against the twin at lengths around its chunk size, and out
 * aliasing parts[0]. */
static void test_tree_sum(void)
{
    enum { LEN = 5000 };
    float *x = rvec(8 * (size_t)LEN, 1), *got = fvec(LEN), *want = fvec(LEN), *ref = fvec(LEN);
    const float **p = parts_of(x, 8, LEN);
    const float *const *pp = p;
    char what[80];
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        const float h0[1] = {1}, h1[1] = {1e8f}, h2[1] = {-1e8f};
        const float *hp[3] = {h0, h1, h2};
        float o = -1;
        k_tree_sum(&o, hp, 3, 1);
        CHECK(o == 1, "tree_sum of (1, 1e8, -1e8) [%s]: %g, want 1 + (1e8 + -1e8) = 1",
              isa_name(isa), o);
        for (int i = 0; i < LEN; i++)
            want[i] = p[0][i] + (p[1][i] + p[2][i]);
        k_tree_sum(got, pp, 3, LEN);
        same_bits("tree_sum m=3 = p0 + (p1 + p2)", got, want, sizeof(float) * LEN);
        for (int i = 0; i < LEN; i++)
            want[i] = (p[0][i] + p[1][i]) + (p[2][i] + (p[3][i] + p[4][i]));
        k_tree_sum(got, pp, 5, LEN);
        same_bits("tree_sum m=5 = (p0 + p1) + (p2 + (p3 + p4))", got, want, sizeof(float) * LEN);
        for (int i = 0; i < LEN; i++)
            want[i] = (p[0][i] + (p[1][i] + p[2][i])) + (p[3][i] + (p[4][i] + p[5][i]));
        k_tree_sum(got, pp, 6, LEN);
        same_bits("tree_sum m=6", got, want, sizeof(float) * LEN);
        static const size_t lens[] = {0, 1, 17, 2047, 2048, 2049, LEN};
        for (int m = 0; m <= 8; m++)
            for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
                snprintf(what, sizeof what, "tree_sum m=%d len=%zu", m, lens[i]);
                memset(got, 0x7f, sizeof(float) * LEN); /* m = 0 must write zeros */
                k_tree_sum_ref(ref, pp, m, lens[i]);
                k_tree_sum(got, pp, m, lens[i]);
                same_bits(what, got, ref, sizeof(float) * lens[i]);
            }
        float *y = fvec(4 * (size_t)LEN);
        memcpy(y, x, sizeof(float) * 4 * LEN);
        const float **py = parts_of(y, 4, LEN);
        k_tree_sum_ref(ref, pp, 4, LEN);
        k_tree_sum(y, py, 4, LEN);
        same_bits("tree_sum into parts[0]", y, ref, sizeof(float) * LEN);
        memcpy(y, x, sizeof(float) * LEN);
        k_tree_sum_ref(y, py, 4, LEN);
        same_bits("tree_sum_ref into parts[0]", y, ref, sizeof(float) * LEN);
        free(y), free(py);
    }
    free(x), free(got), free(want), free(ref), free(p);
}

/* Against the twin (FMA on the SIMD paths against the twin's multiply then
 * add: close, not equal), and the rule spelled out: each leaf by the
 * one-leaf kernel on its rows, then k_tree_sum, must give the same bits,
 * on the twin (k_matmul_tn_ref leaves) and the current path (k_matmul_tn
 * leaves, which are one leaf of all their rows). */
static void test_matmul_tn_seg(int n, int p, int q, int seg)
{
    size_t nc = (size_t)n * q;
    int L = nleaves(p, seg);
    float *a = rvec((size_t)p * n, 1), *b = rvec((size_t)p * q, 1), *got = fvec(nc),
          *want = fvec(nc), *rule = fvec(nc), *leaves = fvec((size_t)L * nc);
    const float **lp = parts_of(leaves, L, nc);
    char what[96];
    snprintf(what, sizeof what, "matmul_tn_seg n=%d p=%d q=%d seg=%d", n, p, q, seg);
    k_matmul_tn_seg_ref(want, a, b, n, p, q, seg);
    memset(got, 0x7f, sizeof(float) * nc);
    k_matmul_tn_seg(got, a, b, n, p, q, seg);
    same_bits(what, got, want, sizeof(float) * nc);
    /* The twin's total against float64, whatever its leaves and tree:
     * the comparison below shares add_plain, the tree's addition, with it */
    double *sum = dvec(nc), *mag = dvec(nc);
    matmul64(sum, mag, a, 1, (size_t)n, b, n, p, q, as_double);
    snprintf(what, sizeof what, "matmul_tn_seg_ref n=%d p=%d q=%d seg=%d", n, p, q, seg);
    within_sum_bound(what, want, sum, mag, nc, seg_terms(p, seg) + 1);
    free(sum), free(mag);
    for (int l = 0; l < L; l++) {
        int k0 = leaf0(l, seg), k1 = leaf1(l, p, seg);
        k_matmul_tn_ref(leaves + l * nc, a + (size_t)k0 * n, b + (size_t)k0 * q, n, k1 - k0, q);
    }
    k_tree_sum_ref(rule, lp, L, nc);
    same_bits("matmul_tn_seg_ref = tree of matmul_tn_ref leaves", want, rule, sizeof(float) * nc);
    for (int l = 0; l < L; l++) {
        int k0 = leaf0(l, seg), k1 = leaf1(l, p, seg);
        k_matmul_tn(leaves + l * nc, a + (size_t)k0 * n, b + (size_t)k0 * q, n, k1 - k0, q);
    }
    k_tree_sum(rule, lp, L, nc);
    same_bits("matmul_tn_seg = tree of matmul_tn leaves", got, rule, sizeof(float) * nc);
    if (L <= 1) { /* one leaf: the plain kernel's bits */
        k_matmul_tn(rule, a, b, n, p, q);
        same_bits("matmul_tn_seg with one leaf = matmul_tn", got, rule, sizeof(float) * nc);
    }
    free(a), free(b), free(got), free(want), free(rule), free(leaves), free(lp);
}

/* Additions only, in the same order on every path: equal to the twin. */
static void test_sum_rows_seg(int n, int q, int seg)
{
    int L = nleaves(n, seg);
    float *x = rvec((size_t)n * q, 1), *got = fvec(q), *want = fvec(q), *rule = fvec(q),
          *leaves = fvec((size_t)L * q);
    const float **lp = parts_of(leaves, L, (size_t)q);
    char what[80];
    snprintf(what, sizeof what, "sum_rows_seg n=%d q=%d seg=%d", n, q, seg);
    k_sum_rows_seg_ref(want, x, n, q, seg);
    memset(got, 0x7f, sizeof(float) * q);
    k_sum_rows_seg(got, x, n, q, seg);
    same_bits(what, got, want, sizeof(float) * q);
    double *sum = dvec((size_t)q), *mag = dvec((size_t)q); /* the total, in float64 */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < q; j++)
            sum[j] += x[(size_t)i * q + j], mag[j] += fabs(x[(size_t)i * q + j]);
    snprintf(what, sizeof what, "sum_rows_seg_ref n=%d q=%d seg=%d", n, q, seg);
    within_sum_bound(what, want, sum, mag, (size_t)q, seg_terms(n, seg));
    free(sum), free(mag);
    for (int l = 0; l < L; l++)
        k_sum_rows_seg_ref(leaves + (size_t)l * q, x + (size_t)leaf0(l, seg) * q,
                           leaf1(l, n, seg) - leaf0(l, seg), q, 0); /* one leaf */
    k_tree_sum_ref(rule, lp, L, (size_t)q);
    same_bits("sum_rows_seg = tree of one-leaf sum_rows_seg_ref", got, rule, sizeof(float) * q);
    free(x), free(got), free(want), free(rule), free(leaves), free(lp);
}

/* LayerNorm's backward in float64 from the saved mean and rstd, written
 * from the calculus, not from the twin: with xh = (x - mean) rstd and
 * g = dy w, dx = rstd (g - mean_j(g) - xh mean_j(g xh)); dw = sum_i dy xh,
 * db = sum_i dy, with their magnitudes (for within_sum_bound). */
static void layernorm_bwd64(double *dx /* [n,c] */, double *dw /* [c] */, double *db /* [c] */,
                            double *mw /* [c] */, double *mb /* [c] */, const float *dy,
                            const float *x, const float *w, const float *mean, const float *rstd,
                            int n, int c)
{
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * c, *dyi = dy + (size_t)i * c;
        double mg = 0, mgx = 0;
        for (int j = 0; j < c; j++) {
            double xh = ((double)xi[j] - mean[i]) * rstd[i], g = (double)dyi[j] * w[j];
            mg += g / c, mgx += g * xh / c;
            dw[j] += dyi[j] * xh, mw[j] += fabs(dyi[j] * xh);
            db[j] += dyi[j], mb[j] += fabs(dyi[j]);
        }
        for (int j = 0; j < c; j++) {
            double xh = ((double)xi[j] - mean[i]) * rstd[i], g = (double)dyi[j] * w[j];
            dx[(size_t)i * c + j] = rstd[i] * (g - mg - xh * mgx);
        }
    }
}

/* got [n] floats against want [n] doubles, as close_to (relative, with
 * the RMS of want as the floor). */
static void close_to64(const char *what, const float *got, const double *want, size_t n,
                       double tol)
{
    double s = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        s += want[i] * want[i];
    double floor = n && sqrt(s / n) > 1e-30 ? sqrt(s / n) : 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / fmax(fabs(want[i]), floor);
        if (!(e <= worst)) /* NaN counts as the worst */
            worst = isnan(e) ? INFINITY : e;
    }
    CHECK(worst <= tol, "%s vs float64: relative error %.3g > %.3g", what, worst, tol);
}

/* The twin against layernorm_bwd64: dx to a few ulps (sums across a row
 * of c <= 96 terms), dw and db within the fp32 bound of their sums over
 * rows (dw's terms also carry the roundings of xh and of dy xh). The
 * comparisons after this one share layernorm_bwd_rows_ref with the twin. */
static void layernorm_bwd_seg_vs64(const float *dx, const float *dw, const float *db,
                                   const float *dy, const float *x, const float *w,
                                   const float *mean, const float *rstd, int n, int c, int seg)
{
    size_t nx = (size_t)n * c;
    double *dx64 = dvec(nx), *g64 = dvec(4 * (size_t)c); /* dw, db, their magnitudes */
    double *dw64 = g64, *db64 = g64 + c, *mw = g64 + 2 * c, *mb = g64 + 3 * c;
    char what[80];
    layernorm_bwd64(dx64, dw64, db64, mw, mb, dy, x, w, mean, rstd, n, c);
    snprintf(what, sizeof what, "layernorm_bwd_seg_ref dx n=%d c=%d seg=%d", n, c, seg);
    close_to64(what, dx, dx64, nx, TOL_SUM);
    snprintf(what, sizeof what, "layernorm_bwd_seg_ref dw n=%d c=%d seg=%d", n, c, seg);
    within_sum_bound(what, dw, dw64, mw, (size_t)c, seg_terms(n, seg) + 3);
    snprintf(what, sizeof what, "layernorm_bwd_seg_ref db n=%d c=%d seg=%d", n, c, seg);
    within_sum_bound(what, db, db64, mb, (size_t)c, seg_terms(n, seg));
    free(dx64), free(g64);
}

/* db is additions only: equal to the twin. dw's SIMD leaves fuse the
 * multiply-add and dx sums across a row in vectors: close to the twin. */
static void test_layernorm_bwd_seg(int n, int c, int seg)
{
    size_t nx = (size_t)n * c;
    int L = nleaves(n, seg);
    float *x = rvec(nx, 2), *w = rvec(c, 1), *b = rvec(c, 1), *dy = rvec(nx, 1), *y = fvec(nx);
    float *mean = fvec(n), *rstd = fvec(n), *dx1 = fvec(nx), *dx2 = fvec(nx), *dx3 = fvec(nx);
    float *g1 = fvec(2 * (size_t)c), *g2 = fvec(2 * (size_t)c), *g3 = fvec(2 * (size_t)c);
    float *lw = fvec((size_t)L * c), *lb = fvec((size_t)L * c);
    const float **pw = parts_of(lw, L, (size_t)c), **pb = parts_of(lb, L, (size_t)c);
    char what[80];
    snprintf(what, sizeof what, "layernorm_bwd_seg n=%d c=%d seg=%d", n, c, seg);
    k_layernorm_ref(y, mean, rstd, x, w, b, n, c);
    k_layernorm_bwd_seg_ref(dx1, g1, g1 + c, dy, x, w, mean, rstd, n, c, seg);
    layernorm_bwd_seg_vs64(dx1, g1, g1 + c, dy, x, w, mean, rstd, n, c, seg);
    memset(g2, 0x7f, sizeof(float) * 2 * c);
    k_layernorm_bwd_seg(dx2, g2, g2 + c, dy, x, w, mean, rstd, n, c, seg);
    same_bits(what, dx2, dx1, sizeof(float) * nx);
    same_bits(what, g2, g1, sizeof(float) * 2 * c); /* dw, db */
    k_layernorm_bwd(dx3, g3, g3 + c, dy, x, w, mean, rstd, n, c);
    same_bits("layernorm_bwd_seg dx = layernorm_bwd dx", dx2, dx3, sizeof(float) * nx);
    for (int l = 0; l < L; l++) {
        int i0 = leaf0(l, seg), i1 = leaf1(l, n, seg);
        size_t at = (size_t)i0 * c;
        k_layernorm_bwd_seg_ref(dx3 + at, lw + (size_t)l * c, lb + (size_t)l * c, dy + at,
                                x + at, w, mean + i0, rstd + i0, i1 - i0, c, 0); /* one leaf */
    }
    k_tree_sum_ref(g3, pw, L, (size_t)c);
    k_tree_sum_ref(g3 + c, pb, L, (size_t)c);
    same_bits("layernorm_bwd_seg_ref = tree of one-leaf layernorm_bwd_seg_ref", g1, g3,
              sizeof(float) * 2 * c);
    same_bits("layernorm_bwd_seg_ref dx = layernorm_bwd_ref dx", dx1, dx3, sizeof(float) * nx);
    for (int l = 0; l < L; l++) {
        int i0 = leaf0(l, seg), i1 = leaf1(l, n, seg);
        size_t at = (size_t)i0 * c;
        k_layernorm_bwd_seg(dx3 + at, lw + (size_t)l * c, lb + (size_t)l * c, dy + at, x + at, w,
                            mean + i0, rstd + i0, i1 - i0, c, 0);
    }
    k_tree_sum(g3, pw, L, (size_t)c);
    k_tree_sum(g3 + c, pb, L, (size_t)c);
    same_bits("layernorm_bwd_seg = tree of one-leaf layernorm_bwd_seg leaves", g2, g3,
              sizeof(float) * 2 * c);
    free(x), free(w), free(b), free(dy), free(y), free(mean), free(rstd), free(dx1), free(dx2),
        free(dx3), free(g1), free(g2), free(g3), free(lw), free(lb), free(pw), free(pb);
}

/* The residual stream's gradient folded in (seg 0: dw, db by blocks, as
 * k_layernorm_bwd): dx = (r1 + r2) + the plain kernel's dx, bit for bit,
 * and dw, db untouched by it; the twin likewise against its plain twin. */
static void test_layernorm_bwd_res(int n, int c, int seg)
{
    size_t nx = (size_t)n * c;
    float *x = rvec(nx, 2), *w = rvec(c, 1), *b = rvec(c, 1), *dy = rvec(nx, 1), *y = fvec(nx);
    float *r1 = rvec(nx, 1), *r2 = rvec(nx, 1), *mean = fvec(n), *rstd = fvec(n);
    float *dx = fvec(nx), *want = fvec(nx), *g = fvec(2 * (size_t)c), *gw = fvec(2 * (size_t)c);
    char what[96];
    k_layernorm_ref(y, mean, rstd, x, w, b, n, c);
    for (int terms = 1; terms <= 2; terms++)
        for (int twin = 0; twin < 2; twin++) {
            const float *s = terms == 2 ? r2 : NULL;
            snprintf(what, sizeof what, "layernorm_bwd_res%s n=%d c=%d seg=%d, %d terms",
                     twin ? "_ref" : "", n, c, seg, terms);
            (twin ? k_layernorm_bwd_res_ref : k_layernorm_bwd_res)(dx, g, g + c, dy, x, w, mean,
                                                                   rstd, r1, s, n, c, seg);
            if (seg > 0)
                (twin ? k_layernorm_bwd_seg_ref : k_layernorm_bwd_seg)(want, gw, gw + c, dy, x, w,
                                                                       mean, rstd, n, c, seg);
            else
                (twin ? k_layernorm_bwd_ref : k_layernorm_bwd)(want, gw, gw + c, dy, x, w, mean,
                                                               rstd, n, c);
            for (size_t i = 0; i < nx; i++)
                want[i] = (s ? r1[i] + s[i] : r1[i]) + want[i];
            same_bits(what, dx, want, sizeof(float) * nx);
            same_bits(what, g, gw, sizeof(float) * 2 * c);
        }
    free(x), free(w), free(b), free(dy), free(y), free(r1), free(r2), free(mean), free(rstd),
        free(dx), free(want), free(g), free(gw);
}

/* Additions only, in the same order on every path: equal to the twin. */
static void test_embed_bwd_seg(int n, int c, int v, int seg)
{
    size_t cv = (size_t)c * v;
    int L = nleaves(n, seg);
    float *dy = rvec((size_t)n * c, 1), *got = fvec(cv), *want = fvec(cv), *rule = fvec(cv),
          *leaves = fvec((size_t)L * cv);
    const float **lp = parts_of(leaves, L, cv);
    int32_t *idx = rtargets(n, v, 0);
    char what[80];
    for (int i = 0; i < n; i += 3)
        dy[(size_t)i * c] = -0.0f; /* a sum from +0 never ends at -0 */
    for (int i = 1; i < n; i += 4)
        idx[i] = idx[i - 1]; /* repeats inside a leaf */
    snprintf(what, sizeof what, "embed_bwd_seg n=%d c=%d v=%d seg=%d", n, c, v, seg);
    k_embed_bwd_seg_ref(want, idx, dy, n, c, v, seg);
    memset(got, 0x7f, sizeof(float) * cv);
    k_embed_bwd_seg(got, idx, dy, n, c, v, seg);
    same_bits(what, got, want, sizeof(float) * cv);
    double *sum = dvec(cv), *mag = dvec(cv); /* the scatter-add, in float64 */
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            size_t at = (size_t)ch * v + idx[i];
            sum[at] += dy[(size_t)i * c + ch], mag[at] += fabs(dy[(size_t)i * c + ch]);
        }
    snprintf(what, sizeof what, "embed_bwd_seg_ref n=%d c=%d v=%d seg=%d", n, c, v, seg);
    within_sum_bound(what, want, sum, mag, cv, seg_terms(n, seg));
    free(sum), free(mag);
    for (int l = 0; l < L; l++)
        k_embed_bwd_ref(leaves + l * cv, idx + leaf0(l, seg), dy + (size_t)leaf0(l, seg) * c,
                        leaf1(l, n, seg) - leaf0(l, seg), c, v);
    k_tree_sum_ref(rule, lp, L, cv);
    same_bits("embed_bwd_seg = tree of embed_bwd_ref leaves", got, rule, sizeof(float) * cv);
    free(dy), free(got), free(want), free(rule), free(leaves), free(lp), free(idx);
}

static void test_seg_paths(void)
{
    static const int tn[][4] = {
        {1, 1, 1, 1},      {7, 100, 40, 16},   {13, 33, 3, 5},   {64, 257, 32, 64},
        {32, 4096, 64, 128}, {96, 4096, 32, 128}, {5, 0, 8, 3},     {4, 10, 5, 1},
        {3, 17, 5, 100},   {37, 130, 65, 0},   {128, 1000, 64, 3}, {6, 200, 16, 64},
        {700, 24, 1540, 7}, /* c over 4 MiB: in blocks, edges in rows, columns and leaves */
        {301, 600, 300, 256}, /* a wide b packed, a packed (n >= 256), an edge of 1 row */
        {262, 600, 270, 0},   /* the same, one leaf of 3 k blocks, each resuming the last */
        {32, 4096, 128, 128}, /* the head's gradient: rows of b 128 long read in place */
        {65, 300, 128, 64},   /* the same rows packed: c over 64 rows */
        {262, 600, 4100, 300}, /* in blocks, leaves of 2 passes (256 rows and the rest) */
    };
    static const int sr[][3] = {{1, 3, 1},      {65, 40, 8}, {1000, 96, 128}, {4096, 32, 128},
                                {0, 5, 3},      {100, 17, 0}, {100, 17, 7},   {77, 64, 200},
                                /* 8 + 4 and 8 + 1 vectors in registers, then a tail */
                                {50, 200, 16},  {33, 150, 0}};
    static const int ln[][3] = {{1, 32, 1},  {7, 17, 3},      {100, 40, 16}, {4096, 32, 128},
                                {0, 8, 4},   {130, 96, 128}, {50, 3, 0},    {33, 20, 64},
                                /* rows of 1, 3 and 4 whole vectors: dw, db in registers */
                                {60, 16, 8}, {70, 48, 32},   {90, 64, 0}};
    static const int eb[][4] = {{1, 32, 128, 1},   {37, 5, 3, 4},    {4096, 32, 128, 128},
                                {300, 40, 256, 7}, {0, 8, 16, 2},    {100, 17, 20, 0},
                                {999, 96, 256, 128}};
    test_tree_sum();
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        for (size_t i = 0; i < sizeof tn / sizeof *tn; i++)
            test_matmul_tn_seg(tn[i][0], tn[i][1], tn[i][2], tn[i][3]);
        for (size_t i = 0; i < sizeof sr / sizeof *sr; i++)
            test_sum_rows_seg(sr[i][0], sr[i][1], sr[i][2]);
        for (size_t i = 0; i < sizeof ln / sizeof *ln; i++) {
            test_layernorm_bwd_seg(ln[i][0], ln[i][1], ln[i][2]);
            test_layernorm_bwd_res(ln[i][0], ln[i][1], ln[i][2]);
        }
        for (size_t i = 0; i < sizeof eb / sizeof *eb; i++)
            test_embed_bwd_seg(eb[i][0], eb[i][1], eb[i][2], eb[i][3]);
    }
}

static void test_paths(void)
{
    static const int mm[][3] = {
        {1, 32, 96},    {2, 2, 2},      {7, 3, 17}, {13, 32, 40}, {37, 64, 96},   {130, 17, 3},
        {257, 32, 128}, {100, 128, 32}, {6, 1, 16}, {5, 0, 8},    {4096, 32, 96}, {11, 33, 65},
        /* c ending in a panel of one vector (avx512: 64 + 16 and 16 columns), row
         * tiles of 6 and of 5 taken two at a time (a thread's claim holds several) */
        {301, 9, 80},   {130, 20, 16},
    };
    static const int tn[][3] = {{1, 1, 1},     {3, 17, 5},     {7, 100, 40}, {13, 33, 3},
                                {64, 257, 32}, {96, 4096, 32}, {4, 0, 5},    {32, 130, 128},
                                {20, 50, 80},  {26, 40, 16}};
    static const int att[][4] = {
        {1, 1, 8, 1},    {2, 7, 32, 4},  {1, 33, 48, 4},  {2, 33, 64, 4},
        {1, 128, 32, 4}, {3, 17, 24, 2}, {1, 130, 16, 2}, {2, 40, 40, 5},
        /* T 300: the backward keeps dS for a group of keys at a time and
         * adds up dQ over several groups (heads of 8 and of 20 channels) */
        {1, 300, 16, 2}, {1, 300, 40, 2},
    };
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        for (size_t i = 0; i < sizeof mm / sizeof *mm; i++)
            test_matmul(mm[i][0], mm[i][1], mm[i][2]);
        test_matmul_blocked(13, 300, 1100, 800); /* 2 x 2 blocks; 800 columns fit one */
        test_matmul_blocked(7, 600, 2100, 400);  /* 3 x 3 blocks, an edge of 52 columns */
        test_matmul_blocked(1, 600, 2100, 100);  /* a few rows: row of b by row of b */
        test_matmul_blocked(3, 300, 1100, 200);
        test_matmul_tn_blocked(13, 600, 1100, 100, 0);   /* one leaf of 600 rows */
        test_matmul_tn_blocked(20, 700, 700, 200, 300);  /* leaves of 300, 300, 100 */
        /* a small b with long rows (MM_PACK_Q) is packed, its first 100
         * columns alone are read in place: the same bits */
        test_matmul_blocked(13, 40, 300, 100);
        test_matmul_tn_blocked(20, 300, 200, 100, 128); /* leaves of 128, 128, 44 */
        for (size_t i = 0; i < sizeof tn / sizeof *tn; i++) /* p terms per sum: looser for 4096 */
            test_matmul_tn(tn[i][0], tn[i][1], tn[i][2]);
        test_transpose_sum_rows(1, 3);
        test_transpose_sum_rows(64, 17);
        test_transpose_sum_rows(65, 40);
        test_transpose_sum_rows(333, 257); /* threads, edges of both kinds */
        test_transpose_sum_rows(1000, 96); /* sums of 1000 and 4096 terms */
        test_transpose_sum_rows(4096, 32);
        test_elementwise(1);
        test_elementwise(15);
        test_elementwise(17);
        test_elementwise(1000);
        test_elementwise(300007); /* big enough to run in parallel */
        test_layernorm(1, 32);
        test_layernorm(7, 17);
        test_layernorm(3, 3);
        test_layernorm(100, 40);
        test_layernorm(5, 96);
        test_layernorm(4096, 32); /* dw, db sum 4096 rows */
        for (size_t i = 0; i < sizeof att / sizeof *att; i++)
            test_attention(att[i][0], att[i][1], att[i][2], att[i][3]);
        test_attention_step(3, 21, 24, 2);
        test_attention_step(2, 40, 32, 4);
        test_attention_step(1, 18, 32, 1); /* hs = 32: two vectors of channels */
        test_attention_last(1, 1, 8, 1);
        test_attention_last(3, 17, 24, 2);
        test_attention_last(2, 128, 32, 4);
        test_attention_last(1, 40, 32, 1); /* hs = 32 */
        test_xent(1, 128, 0);
        test_xent(7, 3, 3);
        test_xent(33, 17, 4);
        test_xent(100, 40, 7);
        test_xent(4096, 128, 128);
        test_embed(1, 32, 128);
        test_embed(37, 5, 3);
        test_embed(4096, 32, 128);
    }
}

/* ======================================================================
 * 2b. Constants that random inputs hide
 *
 * On the random inputs above some constants move a result by less than
 * its tolerance: layernorm's epsilon beside random rows' variance of about
 * 1.5 (1e-6 for 1e-5 moves rstd by some 3e-6 of itself: only a 3x3 case
 * of one path's draw, its rows' variance smaller, crossed TOL_SUM), the
 * mask and the max taken off before an exponential where scores are
 * small, Adam's eps beside gradients far above it. Each case here makes one
 * dominate, on every path, against the twin (and the twin against
 * float64 or PyTorch's formula where section 1 does not already).
 * ====================================================================== */

/* Rows of nearly constant values: the row's mean plus deviations of
 * k FLAT_STEP, k in 1..4, in pairs of opposite sign (and the mean itself
 * in the middle of an odd row), so that every sum is exact in float on
 * every path and the variance, 6e-7 to 1.1e-5, is exact too: epsilon
 * (1e-5) is half of var + eps or more. 1e-6 for it moves rstd by 35% to
 * 155%, 1.1e-5 by 2% or more. */
#define FLAT_STEP 0x1p-10f
static void test_layernorm_flat(int n, int c)
{
    size_t nx = (size_t)n * c;
    float *x = fvec(nx), *w = rvec(c, 1), *b = rvec(c, 1), *y1 = fvec(nx), *y2 = fvec(nx);
    float *mu1 = fvec(n), *mu2 = fvec(n), *rs1 = fvec(n), *rs2 = fvec(n), *rs64 = fvec(n);
    char what[80];
    for (int i = 0; i < n; i++) {
        float *row = x + (size_t)i * c, mean = 0.75f * (float)(i % 5 - 2);
        for (int j = 0; j < c / 2; j++) {
            float dev = (float)(1 + (i + 3 * j) % 4) * FLAT_STEP;
            row[j] = mean + dev, row[c - 1 - j] = mean - dev;
        }
        if (c % 2)
            row[c / 2] = mean;
        double var = 0;
        for (int j = 0; j < c; j++)
            var += ((double)row[j] - mean) * ((double)row[j] - mean) / c;
        rs64[i] = (float)(1 / sqrt(var + TORCH_LN_EPS));
    }
    snprintf(what, sizeof what, "layernorm of flat rows n=%d c=%d", n, c);
    k_layernorm_ref(y1, mu1, rs1, x, w, b, n, c);
    k_layernorm(y2, mu2, rs2, x, w, b, n, c);
    same_bits(what, y2, y1, sizeof(float) * nx);
    same_bits(what, mu2, mu1, sizeof(float) * n);
    same_bits(what, rs2, rs1, sizeof(float) * n);
    snprintf(what, sizeof what, "layernorm_ref of flat rows vs float64 n=%d c=%d", n, c);
    close_to(what, rs1, rs64, (size_t)n, TOL_SUM);
    free(x), free(w), free(b), free(y1), free(y2), free(mu1), free(mu2), free(rs1), free(rs2),
        free(rs64);
}

/* GELU where its constants decide: |x| from 2 to 10 every 2^-8, where
 * 0.044715 x^3 is 0.18 x to 4.5 x beside u's x, and from 9.5 to 10.5
 * every 2^-10, where t = -2u runs from 76 to 99 across GELU_SAT (88, near
 * 10.03) and e^t's overflow (88.7): a band 0.04 wide in x that random
 * inputs seldom hit. Bit for bit against the twin, as the contract says;
 * the twin is held to PyTorch by test_gelu_torch. */
#define GELU_CUBIC_STEPS 2048 /* x = 2 + i/256 */
#define GELU_SAT_STEPS 1024   /* x = 9.5 + i/1024 */
static void test_gelu_constants(void)
{
    enum { N = 2 * (GELU_CUBIC_STEPS + GELU_SAT_STEPS) };
    float *x = fvec(N), *ones = fvec(N), *y1 = fvec(N), *y2 = fvec(N);
    size_t k = 0;
    for (int sign = -1; sign <= 1; sign += 2) {
        for (int i = 0; i < GELU_CUBIC_STEPS; i++)
            x[k++] = (float)sign * (2.0f + (float)i / 256);
        for (int i = 0; i < GELU_SAT_STEPS; i++)
            x[k++] = (float)sign * (9.5f + (float)i / 1024);
    }
    for (int i = 0; i < N; i++)
        ones[i] = 1.0f;
    k_gelu_ref(y1, x, N);
    k_gelu(y2, x, N);
    same_bits("gelu's cubic term and saturation", y2, y1, sizeof(float) * N);
    k_gelu_bwd_ref(y1, ones, x, N);
    k_gelu_bwd(y2, ones, x, N);
    same_bits("gelu_bwd's cubic term and saturation", y2, y1, sizeof(float) * N);
    free(x), free(ones), free(y1), free(y2);
}

/* Adam from zero moments, steps 1 and 2, where the bias corrections are
 * largest (m and v divided by 1 - 0.9^t and 1 - 0.999^t: by 0.1 and
 * 0.001 at step 1), on gradients from 1e-11 to 10 in size: below eps
 * (1e-8) eps rules the step's denominator, above it the gradient does;
 * beta2 first acts at step 2. The kernel to the bit against the twin
 * after each step; the twin within ADAM_TOL lr of torch.optim.Adam's
 * update worked out here in float64 (p starts at 0, so that p's own ulp
 * is no part of it). 2e-8 for eps moves the steps of gradients near eps
 * by up to 0.17 lr; 0.998 for beta2 moves v by 9e-4 of itself at step 2. */
#define ADAM_ZERO_N 67 /* four vectors of 16 and a tail */
#define ADAM_TOL 1e-5 /* of lr: the float update's few roundings of a step of up to lr */
static void test_adam_constants(void)
{
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float p1[ADAM_ZERO_N] = {0}, m1[ADAM_ZERO_N] = {0}, v1[ADAM_ZERO_N] = {0}, g[ADAM_ZERO_N];
    float p2[ADAM_ZERO_N] = {0}, m2[ADAM_ZERO_N] = {0}, v2[ADAM_ZERO_N] = {0};
    double p[ADAM_ZERO_N] = {0}, m[ADAM_ZERO_N] = {0}, v[ADAM_ZERO_N] = {0};
    char what[64];
    for (int t = 1; t <= 2; t++) {
        for (int i = 0; i < ADAM_ZERO_N; i++) /* 1e-11 to 10, signs mixed, another at step 2 */
            g[i] = (float)(((i + t) % 3 ? 1 : -1) * pow(10.0, -11 + 12.0 * i / (ADAM_ZERO_N - 1)) *
                           (t == 2 ? 0.37 : 1));
        k_adam_ref(p1, m1, v1, g, ADAM_ZERO_N, lr, b1, b2, eps, t);
        k_adam(p2, m2, v2, g, ADAM_ZERO_N, lr, b1, b2, eps, t);
        snprintf(what, sizeof what, "adam from zero moments, step %d", t);
        same_bits(what, p2, p1, sizeof p1);
        same_bits(what, m2, m1, sizeof m1);
        same_bits(what, v2, v1, sizeof v1);
        double worst = 0;
        for (int i = 0; i < ADAM_ZERO_N; i++) {
            m[i] = b1 * m[i] + (1.0 - b1) * g[i];
            v[i] = b2 * v[i] + (1.0 - b2) * g[i] * (double)g[i];
            double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
            p[i] -= lr * mh / (sqrt(vh) + eps);
            worst = fmax(worst, fabs(p1[i] - p[i]) / lr);
        }
        CHECK(worst <= ADAM_TOL, "adam_ref from zero moments, step %d: p off torch.optim.Adam's "
              "update by %.3g lr", t, worst);
    }
}

/* Cross-entropy where the max must come off before the exponential: rows
 * of logits around 100 and -100 (e^104 overflows a float, e^-104 is 0 in
 * it), and rows where one logit is 1e4 and the rest near 0 (a one-hot
 * softmax). The loss's float sum m + log s - x[t] rounds at ulp(100)/2 =
 * 3.8e-6 absolute, of a row's loss of about 3 or 1e4: within TOL_SUM. */
#define XENT_HUGE 100.0f
#define XENT_ONE_HOT 1e4f
static void test_xent_huge(int n, int v)
{
    float *logits = rvec((size_t)n * v, 4);
    int32_t *t = rtargets(n, v, 5);
    for (int i = 0; i < n; i++) {
        float *row = logits + (size_t)i * v, shift = i % 3 == 2 ? 0.0f : XENT_HUGE;
        for (int j = 0; j < v; j++)
            row[j] += i % 3 ? -shift : shift;
        if (i % 3 == 2)
            row[(7 * i) % v] = XENT_ONE_HOT;
    }
    check_xent(" of huge logits", logits, t, n, v, 0);
    free(logits), free(t);
}

/* Attention whose scores are all hugely negative (the even heads) or
 * hugely positive (the odd ones): every token's q is ATT_HUGE in each
 * channel and its k -ATT_HUGE or ATT_HUGE, so a row's visible scores are
 * equal, -/+ ATT_HUGE^2 sqrt(hs) (2.8e4 at hs 8), and its softmax is
 * uniform; row 0 sees only key 0, the rest masked. A mask weaker than
 * -inf (say -1e4) would outweigh those scores, and exponentials without
 * the row's max would overflow or vanish. Against the twin, and the twin
 * against the exact answer: row i's output is the mean of v over keys
 * 0..i, its lse the score plus log(i + 1). (The backward is left out: P
 * from lse would cancel 2.8e4 against 2.8e4 in float.) */
#define ATT_HUGE 100.0f
static void test_attention_huge(int B, int T, int C, int H)
{
    int hs = C / H;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = rvec(nq, 1), *o1 = fvec(no), *o2 = fvec(no), *l1 = fvec(nl), *l2 = fvec(nl);
    double *o64 = dvec(no), *l64 = dvec(nl);
    char what[96];
    for (int r = 0; r < B * T; r++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < hs; d++) {
                float *q = qkv + (size_t)r * 3 * C + 3 * hs * h;
                q[d] = ATT_HUGE, q[hs + d] = h % 2 ? ATT_HUGE : -ATT_HUGE;
            }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double score = (h % 2 ? 1 : -1) * (double)ATT_HUGE * ATT_HUGE * sqrt(hs);
                l64[((size_t)b * H + h) * T + i] = score + log(i + 1.0);
                for (int d = 0; d < hs; d++) {
                    double sum = 0;
                    for (int j = 0; j <= i; j++)
                        sum += qkv[((size_t)b * T + j) * 3 * C + 3 * hs * h + 2 * hs + d];
                    o64[((size_t)b * T + i) * C + hs * h + d] = sum / (i + 1);
                }
            }
    snprintf(what, sizeof what, "attention of huge scores B=%d T=%d C=%d H=%d", B, T, C, H);
    k_attention_ref(o1, l1, qkv, B, T, C, H);
    k_attention(o2, l2, qkv, B, T, C, H);
    same_bits(what, o2, o1, sizeof(float) * no);
    same_bits(what, l2, l1, sizeof(float) * nl);
    snprintf(what, sizeof what, "attention_ref of huge scores B=%d T=%d C=%d H=%d", B, T, C, H);
    close_to64(what, o1, o64, no, TOL_SUM);
    close_to64(what, l1, l64, nl, TOL_SUM);
    free(qkv), free(o1), free(o2), free(l1), free(l2), free(o64), free(l64);
}

static void test_constants(void)
{
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        test_layernorm_flat(3, 3);
        test_layernorm_flat(6, 17); /* a block of LN_ROWS rows and 2 alone; a tail */
        test_layernorm_flat(5, 64);
        test_gelu_constants();
        test_adam_constants();
        test_xent_huge(9, 3);
        test_xent_huge(30, 130);
        test_attention_huge(1, 1, 8, 1);
        test_attention_huge(2, 5, 16, 2);  /* fewer keys than a group of scores */
        test_attention_huge(1, 40, 16, 2); /* groups, masked and not, and a tail */
    }
}

/* ======================================================================
 * 3. Determinism: the same bits whatever the thread count
 * ====================================================================== */

/* Runs `stmt` at 1, 2, 3 and 4 threads; the `n` floats at `buf` must come out
 * with the same bits each time. */
#define SAME_AT_ANY_THREADS(name, buf, n, stmt)                                                \
    do {                                                                                       \
        size_t bytes_ = sizeof(float) * (n);                                                   \
        float *first_ = fvec(n);                                                               \
        omp_set_num_threads(1);                                                                \
        stmt;                                                                                  \
        memcpy(first_, (buf), bytes_);                                                         \
        for (int th_ = 2; th_ <= 4; th_++) {                                                   \
            omp_set_num_threads(th_);                                                          \
            memset((buf), 0x7f, bytes_);                                                       \
            stmt;                                                                              \
            CHECK(!memcmp(first_, (buf), bytes_), "%s [%s]: %d threads change the bits", name, \
                  isa_name(isa_get()), th_);                                                   \
        }                                                                                      \
        free(first_);                                                                          \
    } while (0)

static void test_determinism(void)
{
    enum { N = 4096, P = 32, Q = 96, V = 128, B = 4, T = 64, C = 32, H = 4 };
    float *x = rvec((size_t)N * Q, 1), *w = rvec((size_t)P * Q, 1), *bias = rvec(Q, 1);
    float *dy = rvec((size_t)N * Q, 1), *logits = rvec((size_t)N * V, 3);
    float *out = fvec((size_t)N * V), *mean = fvec(N), *rstd = fvec(N), dloss = 1;
    float *qkv = rvec((size_t)B * T * 3 * C, 2), *att = fvec((size_t)B * T * C),
          *lse = fvec((size_t)B * H * T);
    int32_t *t = rtargets(N, V, 10), *idx = rtargets(N, V, 0);
    enum { WN = 500, WP = 300, WQ = 300 }; /* b larger than one 256 x 256 block */
    float *wide_a = rvec((size_t)WN * WP, 1), *wide_b = rvec((size_t)WP * WQ, 1);
    float *wide_c = fvec((size_t)WN * WQ);
    int saved = omp_get_max_threads();
    const float **parts = parts_of(x, 5, 65536); /* 5 x [65536]: big enough to run in parallel */
    k_layernorm_ref(out, mean, rstd, x, w, bias, N, C); /* a mean and rstd for x as [N,C] */
    k_attention_ref(att, lse, qkv, B, T, C, H);
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        SAME_AT_ANY_THREADS("matmul", out, (size_t)N * Q, k_matmul(out, x, w, bias, N, P, Q));
        SAME_AT_ANY_THREADS("matmul_ex", out, (size_t)N * Q,
                            k_matmul_ex(out, x, w, bias, dy, NULL, 1, N, P, Q));
        /* packed b, 2 x 2 blocks: each pass's tiles shared anew */
        SAME_AT_ANY_THREADS("matmul_ex packed", wide_c, (size_t)WN * WQ,
                            k_matmul_ex(wide_c, wide_a, wide_b, NULL, NULL, NULL, 1, WN, WP, WQ));
        SAME_AT_ANY_THREADS("matmul_tn", out, (size_t)P * Q, k_matmul_tn(out, x, dy, P, N, Q));
        SAME_AT_ANY_THREADS("sum_rows", out, Q, k_sum_rows(out, x, N, Q));
        SAME_AT_ANY_THREADS("layernorm", out, (size_t)N * C,
                            k_layernorm(out, mean, rstd, x, w, bias, N, C));
        SAME_AT_ANY_THREADS(
            "layernorm_bwd", out, (size_t)N * C + 2 * C,
            k_layernorm_bwd(out, out + N * C, out + N * C + C, dy, x, w, mean, rstd, N, C));
        SAME_AT_ANY_THREADS("xent", out, 1, k_xent(out, logits, t, N, V, 3));
        SAME_AT_ANY_THREADS("xent_bwd", out, (size_t)N * V,
                            k_xent_bwd(out, logits, t, &dloss, N, V));
        SAME_AT_ANY_THREADS("embed_bwd", out, (size_t)C * V, k_embed_bwd(out, idx, dy, N, C, V));
        SAME_AT_ANY_THREADS("attention", out, (size_t)B * T * C,
                            k_attention(out, out + B * T * C, qkv, B, T, C, H));
        SAME_AT_ANY_THREADS("attention_bwd", out, (size_t)B * T * 3 * C,
                            k_attention_bwd(out, dy, qkv, att, lse, B, T, C, H));
        SAME_AT_ANY_THREADS("matmul_tn_seg", out, (size_t)P * Q,
                            k_matmul_tn_seg(out, x, dy, P, N, Q, 128));
        SAME_AT_ANY_THREADS("matmul_tn_seg seg=3", out, (size_t)P * Q,
                            k_matmul_tn_seg(out, x, dy, P, N, Q, 3));
        SAME_AT_ANY_THREADS("sum_rows_seg", out, Q, k_sum_rows_seg(out, x, N, Q, 128));
        SAME_AT_ANY_THREADS("layernorm_bwd_seg", out, (size_t)N * C + 2 * C,
                            k_layernorm_bwd_seg(out, out + N * C, out + N * C + C, dy, x, w, mean,
                                                rstd, N, C, 128));
        SAME_AT_ANY_THREADS("embed_bwd_seg", out, (size_t)C * V,
                            k_embed_bwd_seg(out, idx, dy, N, C, V, 128));
        SAME_AT_ANY_THREADS("embed_bwd_seg c=96", out, (size_t)Q * V,
                            k_embed_bwd_seg(out, idx, dy, N, Q, V, 128));
        SAME_AT_ANY_THREADS("tree_sum", out, 65536, k_tree_sum(out, parts, 5, 65536));
    }
    omp_set_num_threads(saved);
    free(x), free(w), free(bias), free(dy), free(logits), free(out), free(mean), free(rstd);
    free(wide_a), free(wide_b), free(wide_c);
    free(qkv), free(att), free(lse), free(t), free(idx), free(parts);
}

/* ======================================================================
 * 4. Sharding: N simulated cores, the same bits as one
 * ====================================================================== */

/* The batch of B examples of T rows, [B*T, ...], split into N contiguous
 * shards of B/N examples; each shard reduced on its own with the same seg,
 * the N results combined by k_tree_sum: every bit must match the one call
 * over all rows. Holds when N is a power of two dividing the leaf count.
 * The loss, a mean, is the tree over the shards' means times 1/N, as the
 * all-reduce gives it. */
static void test_shards(int B, int T, int seg)
{
    enum { A1 = 128, Q1 = 64, A2 = 37, Q2 = 33, C = 64, CE = 32, V = 256 };
    int n = B * T;
    size_t nx = (size_t)n * C;
    float *a1 = rvec((size_t)n * A1, 1), *b1 = rvec((size_t)n * Q1, 1);
    float *a2 = rvec((size_t)n * A2, 1), *b2 = rvec((size_t)n * Q2, 1);
    float *x = rvec(nx, 2), *w = rvec(C, 1), *dy = rvec(nx, 1), *y = fvec(nx);
    float *mean = fvec(n), *rstd = fvec(n), *dx = fvec(nx), *dxs = fvec(nx);
    int32_t *idx = rtargets(n, V, 0);
    float *logits = rvec((size_t)n * V, 4);
    size_t big = (size_t)A1 * Q1 > (size_t)CE * V ? (size_t)A1 * Q1 : (size_t)CE * V;
    float *full = fvec(big), *got = fvec(big), *res = fvec(8 * big);
    char what[96];
    k_layernorm_ref(y, mean, rstd, x, w, w, n, C);
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        for (int N = 2; N <= 8; N *= 2) {
            if (B % N)
                continue;
            int rows = n / N;
            const float **parts = parts_of(res, N, big);
#define SHARDED(name, len, whole, shard)                                                   \
    do {                                                                                   \
        whole;                                                                             \
        for (int s = 0; s < N; s++) {                                                      \
            float *out_ = res + (size_t)s * big;                                           \
            size_t r0_ = (size_t)s * rows;                                                 \
            (void)r0_;                                                                     \
            shard;                                                                         \
        }                                                                                  \
        k_tree_sum(got, parts, N, (len));                                                  \
        snprintf(what, sizeof what, "%d shards of %s B=%d T=%d seg=%d", N, name, B, T, seg); \
        same_bits(what, got, full, sizeof(float) * (len));                                 \
    } while (0)
            for (int f = 0; f < 4; f++) { /* fp32 and bf16, each at two shapes */
                void (*tn)(float *, const float *, const float *, int, int, int, int) =
                    f < 2 ? k_matmul_tn_seg : k_matmul_tn_seg_bf16;
                const float *a = f % 2 ? a2 : a1, *bm = f % 2 ? b2 : b1;
                int na = f % 2 ? A2 : A1, nq = f % 2 ? Q2 : Q1;
                SHARDED(f < 2 ? "matmul_tn_seg" : "matmul_tn_seg_bf16", (size_t)na * nq,
                        tn(full, a, bm, na, n, nq, seg),
                        tn(out_, a + r0_ * na, bm + r0_ * nq, na, rows, nq, seg));
            }
            SHARDED("sum_rows_seg", (size_t)Q1, k_sum_rows_seg(full, b1, n, Q1, seg),
                    k_sum_rows_seg(out_, b1 + r0_ * Q1, rows, Q1, seg));
            SHARDED("layernorm_bwd_seg dw, db", 2 * (size_t)C,
                    k_layernorm_bwd_seg(dx, full, full + C, dy, x, w, mean, rstd, n, C, seg),
                    k_layernorm_bwd_seg(dxs + r0_ * C, out_, out_ + C, dy + r0_ * C, x + r0_ * C,
                                        w, mean + r0_, rstd + r0_, rows, C, seg));
            snprintf(what, sizeof what, "%d shards of layernorm_bwd_seg dx", N);
            same_bits(what, dxs, dx, sizeof(float) * nx);
            SHARDED("xent's mean loss", 1, k_xent(full, logits, idx, n, V, seg),
                    k_xent(out_, logits + r0_ * V, idx + r0_, rows, V, seg);
                    out_[0] *= 1.0f / (float)N);
            SHARDED("embed_bwd_seg", (size_t)CE * V, k_embed_bwd_seg(full, idx, dy, n, CE, V, seg),
                    k_embed_bwd_seg(out_, idx + r0_, dy + r0_ * CE, rows, CE, V, seg));
#undef SHARDED
            free(parts);
        }
    }
    free(a1), free(b1), free(a2), free(b2), free(x), free(w), free(dy), free(y), free(mean),
        free(rstd), free(dx), free(dxs), free(idx), free(logits), free(full), free(got), free(res);
}

static void test_isa_choice(void)
{
    isa_set(99);
    CHECK(isa_get() == isa_best(), "isa_set(99) gives %d, not the best %d", isa_get(), isa_best());
    isa_set(-1);
    CHECK(isa_get() == ISA_REF, "isa_set(-1) gives %d, not ref (the reading mode)", isa_get());
    CHECK(isa_best() <= isa_cpu() && isa_cpu() <= isa_top(), "paths: best %d, the CPU's %d, "
          "the binary's %d", isa_best(), isa_cpu(), isa_top());
    /* every loop over paths below stops at isa_best(): the others, said once */
    for (int isa = isa_best() + 1; isa <= isa_top(); isa++)
        SKIP_MACHINE("kernel path %s: %s", isa_name(isa), t_isa_skipped(isa));
#if defined(__aarch64__)
    CHECK(!strcmp(isa_name(ISA_REF), "ref") && !strcmp(isa_name(ISA_SCALAR), "scalar") &&
              !strcmp(isa_name(ISA_NEON), "neon"),
          "isa names");
#else
    CHECK(!strcmp(isa_name(ISA_REF), "ref") && !strcmp(isa_name(ISA_SCALAR), "scalar") &&
              !strcmp(isa_name(ISA_AVX2), "avx2") && !strcmp(isa_name(ISA_AVX512), "avx512"),
          "isa names");
#endif
}

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ======================================================================
 * 5. bf16: the rounding against the instruction, the matmul's paths
 *    against each other bit for bit, and against exact arithmetic
 * ====================================================================== */

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

#if defined(__x86_64__)
/* What the instruction itself makes of x[n] (n a multiple of 16). */
__attribute__((target("avx512f,avx512bf16"))) static void hw_round_bf16(float *y, const float *x,
                                                                         size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
        __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16);
        _mm512_storeu_si512(y + i, w);
    }
}
#else
static void hw_round_bf16(float *y, const float *x, size_t n) { (void)y, (void)x, (void)n; }
#endif

/* Floats where rounding to bf16 is delicate: ties either side, the bf16
 * grid's neighbours, denormals, the overflow edge, inf, NaNs. */
static float bf16_edge(uint64_t r)
{
    uint32_t sign = (uint32_t)(r >> 63) << 31, lo = (uint32_t)(r >> 8) & 0xffff;
    uint32_t e = (uint32_t)(r >> 24) % 254 + 1, man = (uint32_t)(r >> 32) & 0x7f0000;
    static const uint32_t low[] = {0x8000, 0x7fff, 0x8001, 0x0000, 0x0001, 0xffff};
    switch (r % 8) {
    case 0: return bits_f(sign | e << 23 | man | low[(r >> 40) % 6]); /* ties, near ties */
    case 1: return bits_f(sign | ((uint32_t)(r >> 8) & 0x7fffff));   /* denormal */
    case 2: return bits_f(sign | 0x7f7f0000u | lo);                 /* near the top */
    case 3: return bits_f(sign | 0x7f800000u | (lo ? lo << 7 : 0));  /* inf, NaNs */
    case 4: return bits_f(sign | 0x00800000u | lo);                 /* smallest normals */
    default: return bits_f((uint32_t)(r >> 16));                   /* any bits */
    }
}

static void test_round_bf16(void)
{
    /* by hand: ties to even, the carry into inf, denormals, NaN */
    const uint32_t in[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7fffffu, 0x7f7f7fffu,
                           0x807fffffu, 0x00000001u, 0x7f800001u, 0xff812345u, 0x7f800000u};
    const uint32_t want[] = {0x3f800000u, 0x3f820000u, 0x3f810000u, 0x7f800000u, 0x7f7f0000u,
                             0x80000000u, 0x00000000u, 0x7fc00000u, 0xffc10000u, 0x7f800000u};
    enum { NE = sizeof in / sizeof *in };
    float x[NE], y[NE];
    for (int i = 0; i < NE; i++)
        x[i] = bits_f(in[i]);
    for (int isa = -1; isa < isa_count(); isa++) {
        if (isa >= 0)
            isa_set(isa);
        if (isa < 0)
            k_round_bf16_ref(y, x, NE);
        else
            k_round_bf16(y, x, NE);
        for (int i = 0; i < NE; i++)
            CHECK(f_bits(y[i]) == want[i], "round_bf16 [%s] of %08x: %08x, want %08x",
                  isa < 0 ? "ref" : isa_name(isa), in[i], f_bits(y[i]), want[i]);
    }

    /* long enough to run in parallel, not a multiple of 16 */
    size_t n = 100003, n16 = n / 16 * 16;
    float *src = fvec(n), *ref = fvec(n), *got = fvec(n);
    for (size_t i = 0; i < n; i++)
        src[i] = bf16_edge(splitmix());
    k_round_bf16_ref(ref, src, n);
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        memset(got, 0x55, sizeof(float) * n);
        k_round_bf16(got, src, n);
        same_bits("round_bf16 vs its twin", got, ref, sizeof(float) * n);
        k_round_bf16(got, src, 13); /* only a tail */
        same_bits("round_bf16 of 13", got, ref, sizeof(float) * 13);
    }
    if (bf16_cpu()) {
        hw_round_bf16(got, src, n16);
        same_bits("round_bf16_ref vs vcvtneps2bf16", ref, got, sizeof(float) * n16);
    } else {
        SKIP_MACHINE("round_bf16 not compared with vcvtneps2bf16: the CPU lacks AVX512_BF16");
    }
    free(src), free(ref), free(got);
}

/* Single dot products worked out by hand from the semantics measured on
 * the instruction (see tensor.c), so the twin is not only checked against
 * itself: each one separates the right rule from a plausible wrong one. */
static void test_bf16_hand(void)
{
    /* c = bias + pairs; each case: bias, a[2], b[2] (p = 2, n = q = 1), want */
    static const struct {
        float bias, a0, a1, b0, b1, want;
    } cs[] = {
        {1, 0x1p-24f, 0x1p-24f, 1, 1, 1},                /* two roundings, not one */
        {1, 0x1.8p-24f, 0x1p-24f, 1, 1, 0x1.000002p0f},  /* k = 1 added first ... */
        {1, 0x1p-24f, 0x1.8p-24f, 1, 1, 0x1.000004p0f},  /* ... and it matters */
        {0x1p-126f, -0x1.8p-75f, 0, 0x1p-76f, 0, 0},      /* tiny after rounding: 0 */
        {0x1p-126f, -0x1p-75f, 0, 0x1p-76f, 0, 0x1p-126f}, /* tie up to 2^-126: kept */
        {0x1p-127f, 0x1p-126f, 0, 1, 0, 0x1p-126f},       /* denormal bias read as 0 */
        {0, 0x1p-126f, 0x1p-65f, 1, 0x1p-65f, 0x1p-126f}, /* 2^-130 flushed before k = 0 */
        {0, 0x1p-65f, 0x1p-126f, 0x1p-65f, 1, 0x1.1p-126f}, /* flushing is per step */
        {-0.0f, -0.0f, -0.0f, 1, 1, -0.0f},               /* -0 + -0 stays -0 */
        {0, 0x1p-127f, 0, 0x1p100f, 0, 0},               /* denormal a is 0 */
        {3, 1, 1, 0x1p127f, 0x1p127f, INFINITY},          /* overflow */
    };
    enum { NC = sizeof cs / sizeof *cs };
    typedef void mm_fn(float *, const float *, const float *, const float *, const float *,
                       const float *, int, int, int, int);
    /* p odd pads with a zero pair: -0 + (+0 * +0) = +0 before k = 0, so
     * -0 + (-0 * 1) ends at +0; a NaN in B wins over one in A */
    float a1 = -0.0f, b1 = 1, m0 = -0.0f, one = 1, c;
    float an[2] = {bits_f(0x7fc12345u), 1}, bn[2] = {bits_f(0xff812345u), 1};
    for (int isa = -1; isa < isa_count(); isa++) {
        if (isa >= 0)
            isa_set(isa);
        for (int emu = 0; emu < 1 + (isa >= 0); emu++) {
            mm_fn *mm = isa < 0 ? k_matmul_bf16_ref : emu ? k_matmul_bf16_emu : k_matmul_bf16;
            const char *path = isa < 0 ? "ref" : isa_name(isa), *how = emu ? " emulated" : "";
            for (int t = 0; t < NC; t++) {
                float a[2] = {cs[t].a0, cs[t].a1}, b[2] = {cs[t].b0, cs[t].b1};
                mm(&c, a, b, &cs[t].bias, NULL, NULL, 0, 1, 2, 1);
                CHECK(f_bits(c) == f_bits(cs[t].want), "bf16 case %d [%s%s]: %a, want %a", t,
                      path, how, c, cs[t].want);
            }
            mm(&c, &a1, &b1, &m0, NULL, NULL, 0, 1, 1, 1);
            CHECK(f_bits(c) == 0, "bf16 p = 1 from -0 [%s%s]: %a, want +0", path, how, c);
            mm(&c, an, bn, &one, NULL, NULL, 0, 1, 2, 1);
            CHECK(f_bits(c) == 0xffc10000u, "bf16 NaN in A and B [%s%s]: %08x, want B's",
                  path, how, f_bits(c));
        }
    }
}

/* bf16(x) as double, by bit arithmetic independent of the kernels. */
static double bf16_exact(float x)
{
    uint32_t u = f_bits(x);
    if ((u & 0x7f800000u) == 0) /* denormals read as zero, as the instruction does */
        return (u >> 31) ? -0.0 : 0.0;
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN (the carry below would not) */
        return NAN;
    return bits_f((u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u);
}

/* Inputs for test_bf16_shape: plain values, edge values (ties, denormals,
 * inf, NaN, huge) mixed in, or sums that end next to 2^-126 (bias there,
 * products of a few 2^-152), where the flush-to-zero decision is close. */
enum { BF_PLAIN, BF_EDGES, BF_BOUNDARY };

static void bf16_fill(float *x, size_t n, int kind, int is_bias)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = splitmix();
        float sign = r & 1 ? -1.0f : 1.0f;
        if (kind == BF_EDGES && r % 4 == 0)
            x[i] = bf16_edge(r >> 2);
        else if (kind == BF_EDGES && r % 4 == 1) /* products near 2^-126 */
            x[i] = ldexpf(sign * (1 + (float)(r >> 8 & 127) / 128), -63 - (int)(r >> 40 & 1));
        else if (kind == BF_BOUNDARY && is_bias)
            x[i] = sign * ldexpf(1 + (float)(r >> 8 & 3) * 0x1p-23f, -126);
        else if (kind == BF_BOUNDARY)
            x[i] = r % 2 ? 0.0f
                         : ldexpf(sign * (1 + (float)(r >> 8 & 127) / 128),
                                  -75 - (int)(r >> 40 & 3));
    }
}

/* A ReLU output as the gate of the bf16 gated matmul: ReLU gives exact
 * zeros often, so a third of the gate is +0 or -0, the rest keeps its
 * sign (negative values stand for a gate the twin must also close). */
static void bf16_gate_fill(float *gate, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (i % 3 == 0)
            gate[i] = i % 2 ? -0.0f : 0.0f;
        else if (i % 7 == 0) /* open, though a flush would read it as zero */
            gate[i] = 0x1p-140f;
}

/* The gated twin c against its definition: ReLU's derivative closes the
 * gate where gate <= 0 (+0 exactly there); where it is open, the fp32 sum
 * within (p+1) u sum |products| of the float64 sum of bf16-rounded
 * products, plus 2^-126 per flush (only for plain inputs: edges may be
 * inf or NaN). */
static void bf16_gated_check(const float *c, const float *a, const float *b, const float *gate,
                             int n, int p, int q, int plain)
{
    int closed_bad = 0, open_bad = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < q; j++) {
            size_t at = (size_t)i * q + j;
            if (!(gate[at] > 0)) {
                closed_bad += f_bits(c[at]) != 0;
                continue;
            }
            if (!plain)
                continue;
            double s = 0, mag = 0;
            for (int k = 0; k < p; k++) {
                double t = bf16_exact(a[(size_t)i * p + k]) * bf16_exact(b[(size_t)k * q + j]);
                s += t, mag += fabs(t);
            }
            open_bad += fabs(c[at] - s) > (p + 1) * 0x1p-24 * mag + (p + 2) * 0x1p-126;
        }
    CHECK(closed_bad == 0, "matmul_bf16_gated_ref n=%d p=%d q=%d: %d outputs not +0 where the "
          "gate is <= 0", n, p, q, closed_bad);
    CHECK(open_bad == 0, "matmul_bf16_gated_ref n=%d p=%d q=%d: %d outputs off the exact sum "
          "where the gate is open", n, p, q, open_bad);
}

/* All paths on one shape: bit-identical to the twin and to each other
 * (native, emulated, every ISA), and the twin within the fp32 error bound
 * of the exact sum of the bf16 products. */
static void test_bf16_shape(int n, int p, int q, float scale, int kind)
{
    size_t nc = (size_t)n * q;
    float *a = rvec((size_t)n * p, scale), *b = rvec((size_t)p * q, 1), *bias = rvec(q, scale);
    float *r1 = rvec(nc, 1), *r2 = rvec(nc, 1), *want = fvec(nc), *got = fvec(nc), *nat = fvec(nc);
    char what[96];
    bf16_fill(a, (size_t)n * p, kind, 0);
    bf16_fill(b, (size_t)p * q, kind, 0);
    bf16_fill(bias, (size_t)q, kind, 1);
    if (kind == BF_EDGES) { /* the epilogue's inputs too: it runs outside the sums' flush */
        bf16_fill(r1, nc, kind, 0);
        bf16_fill(r2, nc, kind, 0);
    }
    for (int variant = 0; variant < 3; variant++) {
        const float *bs = variant == 1 ? NULL : bias, *x1 = variant == 2 ? r1 : NULL;
        const float *x2 = variant == 2 ? r2 : NULL;
        int relu = variant == 2;
        k_matmul_bf16_ref(want, a, b, bs, x1, x2, relu, n, p, q);
        for (int isa = 0; isa < isa_count(); isa++) {
            isa_set(isa);
            snprintf(what, sizeof what, "matmul_bf16%s n=%d p=%d q=%d variant %d",
                     bf16_native() ? " (native)" : "", n, p, q, variant);
            memset(nat, 0x55, sizeof(float) * nc);
            k_matmul_bf16(nat, a, b, bs, x1, x2, relu, n, p, q);
            same_floats(what, nat, want, nc, x1 != NULL);
            snprintf(what, sizeof what, "matmul_bf16_emu n=%d p=%d q=%d variant %d", n, p, q,
                     variant);
            memset(got, 0x55, sizeof(float) * nc);
            k_matmul_bf16_emu(got, a, b, bs, x1, x2, relu, n, p, q);
            same_floats(what, got, want, nc, x1 != NULL);
            if (bf16_native()) {
                snprintf(what, sizeof what,
                         "matmul_bf16 native vs emulated n=%d p=%d q=%d variant %d", n, p, q,
                         variant);
                same_floats(what, nat, got, nc, x1 != NULL);
            }
        }
    }
    /* c in r1's memory (a residual added in place): the same bits */
    k_matmul_bf16_ref(want, a, b, bias, r1, r2, 1, n, p, q);
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        snprintf(what, sizeof what, "matmul_bf16 n=%d p=%d q=%d, c = r1", n, p, q);
        memcpy(got, r1, sizeof(float) * nc);
        k_matmul_bf16(got, a, b, bias, got, r2, 1, n, p, q);
        same_floats(what, got, want, nc, 1);
        memcpy(got, r1, sizeof(float) * nc);
        k_matmul_bf16_emu(got, a, b, bias, got, r2, 1, n, p, q);
        same_floats(what, got, want, nc, 1);
    }
    /* the ReLU's backward gate (r1 as the ReLU's output, with exact zeros):
     * k_matmul_bf16 then relu_bwd, and the twin, bit for bit; the twin
     * against the exact products, gated */
    bf16_gate_fill(r1, nc);
    k_matmul_bf16_gated_ref(want, a, b, r1, n, p, q);
    bf16_gated_check(want, a, b, r1, n, p, q, kind == BF_PLAIN);
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        snprintf(what, sizeof what, "matmul_bf16_gated n=%d p=%d q=%d [%s]", n, p, q,
                 isa_name(isa));
        k_matmul_bf16(nat, a, b, NULL, NULL, NULL, 0, n, p, q);
        k_relu_bwd(nat, nat, r1, nc);
        k_matmul_bf16_gated(got, a, b, r1, n, p, q);
        same_bits(what, got, nat, sizeof(float) * nc);
        same_bits(what, got, want, sizeof(float) * nc);
    }
    if (kind == BF_PLAIN) { /* |err| <= (p+1) u (|bias| + sum |products|) with u = 2^-24, plus
                     * under 2^-126 for each of the p+2 flushes at most */
        double worst = 0;
        k_matmul_bf16_ref(want, a, b, bias, NULL, NULL, 0, n, p, q);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < q; j++) {
                double s = bias[j], mag = fabs(bias[j]);
                for (int k = 0; k < p; k++) {
                    double t = bf16_exact(a[(size_t)i * p + k]) * bf16_exact(b[(size_t)k * q + j]);
                    s += t, mag += fabs(t);
                }
                double err = fabs(want[(size_t)i * q + j] - s);
                double bound = (p + 1) * 0x1p-24 * mag + (p + 2) * 0x1p-126;
                if (err > 0)
                    worst = fmax(worst, bound > 0 ? err / bound : INFINITY);
            }
        CHECK(worst <= 1, "matmul_bf16_ref n=%d p=%d q=%d vs exact sums: %.3g of the fp32 bound",
              n, p, q, worst);
    }
    free(a), free(b), free(bias), free(r1), free(r2), free(want), free(got), free(nat);
}

static void test_bf16(void)
{
    test_round_bf16();
    test_bf16_hand();
    if (t_bf16_skipped()) /* the emulations are still held to the twin */
        SKIP_MACHINE("k_matmul_bf16 and k_matmul_tn_seg_bf16 on vdpbf16ps, against the "
                     "emulation: %s", t_bf16_skipped());
    static const int shapes[][3] = {
        {1, 1, 1},     {3, 2, 5},      {7, 3, 17},  {25, 33, 31}, {24, 64, 64}, {49, 32, 96},
        {30, 64, 128}, {100, 65, 130}, {23, 5, 48}, {48, 31, 80}, {5, 0, 7},    {73, 64, 33},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int kind = BF_PLAIN; kind <= BF_BOUNDARY; kind++)
            test_bf16_shape(shapes[s][0], shapes[s][1], shapes[s][2], 1, kind);
    test_bf16_shape(4096, 64, 96, 1, BF_PLAIN); /* the model's shape, in parallel */
    test_bf16_shape(200, 64, 64, 3e-38f, BF_PLAIN); /* everything near 2^-126 */
    test_bf16_shape(200, 65, 40, 3e-38f, BF_EDGES);

    /* the same bits at any thread count, whatever the path */
    enum { N = 4096, P = 33, Q = 96 };
    float *a = rvec((size_t)N * P, 1), *b = rvec((size_t)P * Q, 1), *bias = rvec(Q, 1);
    float *r1 = rvec((size_t)N * Q, 1), *out = fvec((size_t)N * Q);
    int saved = omp_get_max_threads();
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        SAME_AT_ANY_THREADS("matmul_bf16", out, (size_t)N * Q,
                            k_matmul_bf16(out, a, b, bias, r1, NULL, 1, N, P, Q));
        SAME_AT_ANY_THREADS("matmul_bf16_emu", out, (size_t)N * Q,
                            k_matmul_bf16_emu(out, a, b, bias, r1, NULL, 1, N, P, Q));
        SAME_AT_ANY_THREADS("round_bf16", out, (size_t)N * Q, k_round_bf16(out, r1, (size_t)N * Q));
    }
    omp_set_num_threads(saved);
    free(a), free(b), free(bias), free(r1), free(out);
}

/* same_bits, but any NaN equals any NaN: past the leaves the tree adds
 * plain floats, and which of two NaNs a + b keeps is the compiler's choice
 * (it may swap the operands of an addition). */
static void same_bits_nan(const char *what, const float *got, const float *want, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !(isnan(got[i]) && isnan(want[i])) && f_bits(got[i]) != f_bits(want[i]);
    CHECK(bad == 0, "%s [%s]: %zu elements' bits differ", what, isa_name(isa_get()), bad);
}

/* The weight-gradient kernel a^T b, a[p,n], b[p,q], on every path and
 * native and emulated, against its twin bit for bit; the twin against
 * k_matmul_bf16_ref of each leaf's transpose (the hand-checked kernel), and
 * the leaves against the fp32 tree applied to those partials. */
static void test_bf16_tn(int n, int p, int q, int seg, int kind)
{
    size_t nc = (size_t)n * q;
    int L = p > 0 ? (seg < 1 ? 1 : (p + seg - 1) / seg) : 0;
    float *a = rvec((size_t)p * n + 1, 1), *b = rvec((size_t)p * q + 1, 1);
    float *want = fvec(nc), *got = fvec(nc), *nat = fvec(nc), *at = fvec((size_t)p * n + 1);
    float *part = fvec(nc * (L > 0 ? L : 1));
    const float **parts = malloc(sizeof(float *) * (L > 0 ? L : 1));
    char what[96];
    bf16_fill(a, (size_t)p * n, kind, 0);
    bf16_fill(b, (size_t)p * q, kind, 0);
    k_matmul_tn_seg_bf16_ref(want, a, b, n, p, q, seg);
    for (int l = 0; l < L; l++) { /* leaf l: matmul_bf16 of its transpose */
        int k0 = seg < 1 ? 0 : l * seg, k1 = seg < 1 || k0 + seg > p ? p : k0 + seg;
        for (int k = k0; k < k1; k++)
            for (int i = 0; i < n; i++)
                at[(size_t)i * (k1 - k0) + (k - k0)] = a[(size_t)k * n + i];
        k_matmul_bf16_ref(part + (size_t)l * nc, at, b + (size_t)k0 * q, NULL, NULL, NULL, 0, n,
                          k1 - k0, q);
        parts[l] = part + (size_t)l * nc;
    }
    k_tree_sum_ref(got, parts, L, nc);
    snprintf(what, sizeof what, "matmul_tn_seg_bf16_ref n=%d p=%d q=%d seg=%d kind %d", n, p, q,
             seg, kind);
    same_bits_nan(what, want, got, nc);
    if (kind == BF_PLAIN) { /* both sides above step by bf16_dot: the total, independently, is
                             * the float64 sum of the bf16 products (none near 2^-126 here) */
        double *sum = dvec(nc), *mag = dvec(nc);
        matmul64(sum, mag, a, 1, (size_t)n, b, n, p, q, bf16_exact);
        within_sum_bound(what, want, sum, mag, nc, seg_terms(p, seg) + 1);
        free(sum), free(mag);
    }
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        snprintf(what, sizeof what, "matmul_tn_seg_bf16%s n=%d p=%d q=%d seg=%d kind %d",
                 bf16_native() ? " (native)" : "", n, p, q, seg, kind);
        memset(nat, 0x55, sizeof(float) * nc);
        k_matmul_tn_seg_bf16(nat, a, b, n, p, q, seg);
        same_bits_nan(what, nat, want, nc);
        snprintf(what, sizeof what, "matmul_tn_seg_bf16_emu n=%d p=%d q=%d seg=%d kind %d", n, p,
                 q, seg, kind);
        memset(got, 0x55, sizeof(float) * nc);
        k_matmul_tn_seg_bf16_emu(got, a, b, n, p, q, seg);
        same_bits_nan(what, got, want, nc);
        snprintf(what, sizeof what, "matmul_tn_seg_bf16 native vs emulated n=%d p=%d q=%d seg=%d",
                 n, p, q, seg);
        if (bf16_native()) /* the same tree code after the leaves: NaNs too */
            same_bits(what, nat, got, sizeof(float) * nc);
    }
    free(a), free(b), free(want), free(got), free(nat), free(at), free(part), free(parts);
}

static void test_bf16_tn_all(void)
{
    static const int shapes[][4] = {
        /* n, p, q, seg: the model's dW shapes with one leaf per example;
         * odd leaves (a pair padded with zero at each leaf's end); leaves
         * longer than one packing (the tiles resume from c); c's rows not a
         * multiple of the threads' unit; no rows */
        {32, 512, 96, 128}, {64, 384, 32, 128}, {32, 256, 128, 128}, {37, 21, 33, 7},
        {5, 11, 17, 0},     {64, 600, 48, 0},   {19, 900, 130, 301}, {8, 1, 3, 0},
        {24, 0, 5, 3},      {1, 9, 1, 2},       {100, 40, 64, 3},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int kind = BF_PLAIN; kind <= BF_BOUNDARY; kind++)
            test_bf16_tn(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], kind);
    enum { P = 4096, N = 32, Q = 96 };
    float *a = rvec((size_t)P * N, 1), *b = rvec((size_t)P * Q, 1), *out = fvec((size_t)N * Q);
    int saved = omp_get_max_threads();
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        SAME_AT_ANY_THREADS("matmul_tn_seg_bf16", out, (size_t)N * Q,
                            k_matmul_tn_seg_bf16(out, a, b, N, P, Q, 128));
        SAME_AT_ANY_THREADS("matmul_tn_seg_bf16_emu", out, (size_t)N * Q,
                            k_matmul_tn_seg_bf16_emu(out, a, b, N, P, Q, 128));
    }
    omp_set_num_threads(saved);
    free(a), free(b), free(out);
}

/* k_attention_bf16's contract (kernels.h) in double: the products' bf16
 * operands by bf16_exact (P and dS rounded from their float values), the
 * rest exact. The backward is given out and lse. */
static void attention_bf16_naive(double *out /* [B,T,C] */, double *lse /* [B,H,T] */,
                                 double *dqkv /* [B,T,3C] */, const float *qkv /* [B,T,3C] */,
                                 const float *dout /* [B,T,C] */, const float *fo /* [B,T,C] */,
                                 const float *fl /* [B,H,T] */, int B, int T, int C, int H)
{
    int hs = C / H;
    size_t ld = 3 * (size_t)C;
    double *s = malloc(sizeof(double) * (size_t)T), *p = malloc(sizeof(double) * (size_t)T);
    memset(dqkv, 0, sizeof(double) * (size_t)B * T * ld);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            size_t r3 = (size_t)b * T * ld + 3 * hs * h, r1 = (size_t)b * T * C + hs * h;
            const float *x = qkv + r3;
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, l = 0, D = 0;
                for (int j = 0; j <= i; j++) {
                    s[j] = 0;
                    for (int d = 0; d < hs; d++)
                        s[j] += bf16_exact(x[i * ld + d]) * bf16_exact(x[j * ld + hs + d]);
                    s[j] /= sqrt(hs);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= i; j++)
                    l += p[j] = exp(s[j] - mx);
                lse[((size_t)b * H + h) * T + i] = mx + log(l);
                for (int d = 0; d < hs; d++) {
                    double acc = 0;
                    for (int j = 0; j <= i; j++)
                        acc += bf16_exact((float)p[j]) * bf16_exact(x[j * ld + 2 * hs + d]);
                    out[r1 + (size_t)i * C + d] = acc / l;
                }
                /* the backward, from the given out and lse */
                const float *g = dout + r1 + (size_t)i * C;
                for (int d = 0; d < hs; d++)
                    D += (double)g[d] * fo[r1 + (size_t)i * C + d];
                for (int j = 0; j <= i; j++) {
                    double pij = exp(s[j] - fl[((size_t)b * H + h) * T + i]), dp = 0;
                    for (int d = 0; d < hs; d++)
                        dp += bf16_exact(g[d]) * bf16_exact(x[j * ld + 2 * hs + d]);
                    double pr = bf16_exact((float)pij), ds = bf16_exact((float)(pij * (dp - D)));
                    double *dq = dqkv + r3 + i * ld, *dk = dqkv + r3 + j * ld + hs;
                    for (int d = 0; d < hs; d++) {
                        dq[d] += ds * bf16_exact(x[j * ld + hs + d]) / sqrt(hs);
                        dk[d] += ds * bf16_exact(x[i * ld + d]) / sqrt(hs);
                        dk[hs + d] += pr * bf16_exact(g[d]);
                    }
                }
            }
        }
    free(s), free(p);
}

/* got against want where some elements may differ by one bf16 rounding
 * of a term: two computations of the same probability (or dS) a float ulp
 * apart round to neighbouring bf16 values when it lies that close to a
 * rounding boundary, about one in 2^15, and every output summing that
 * term moves by up to 2^-8 of it (at T 300, 0.5% of the outputs). So:
 * every element within FLIP_TOL (relative to want's rms or itself), and
 * all but FLIP_SHARE of them within tol. Leaving the forward's P
 * unrounded put 80-99% of the outputs past 1e-5 (measured on these
 * shapes). */
#define FLIP_TOL 1e-2
#define FLIP_SHARE 0.02
static void close_but_flips(const char *what, const float *got, const float *want, size_t n,
                            double tol)
{
    double floor = rms(want, n) > 1e-30 ? rms(want, n) : 1e-30;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double s = fabs((double)want[i]) > floor ? fabs((double)want[i]) : floor;
        off += !(d / s <= tol);
    }
    double worst = max_rel_err(got, want, n, floor);
    CHECK(worst <= FLIP_TOL && off <= (size_t)(FLIP_SHARE * (double)n),
          "%s [%s]: %zu of %zu elements beyond %.3g, the worst %.3g", what, isa_name(isa_get()), off,
          n, tol, worst);
}

/* bf16 attention: the kernel on its default path (vdpbf16ps where
 * k_matmul_bf16 uses it) equals the emulation and the twin, on every
 * path; the twins are within rounding of the double contract (now and
 * then a probability rounds to the other bf16). Leaving P or dS unrounded, or
 * rounding V or dO where the contract does not, moves the results by
 * about 2^-9 of a term: far outside 1e-4. */
static void test_bf16_attention(int B, int T, int C, int H)
{
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = rvec(n3, 2.0f), *dout = rvec(n1, 1.0f);
    float *o = fvec(n1), *lse = fvec(nl), *o2 = fvec(n1), *l2 = fvec(nl);
    float *dq = fvec(n3), *dq2 = fvec(n3), *ro = fvec(n1), *rl = fvec(nl), *rdq = fvec(n3);
    double *no = malloc(sizeof(double) * n1), *nlse = malloc(sizeof(double) * nl);
    double *ndq = malloc(sizeof(double) * n3);
    char what[96];
    k_attention_bf16_ref(ro, rl, qkv, B, T, C, H);
    k_attention_bwd_bf16_ref(rdq, dout, qkv, ro, rl, B, T, C, H);
    snprintf(what, sizeof what, "attention_bf16 vs its twin B=%d T=%d C=%d H=%d", B, T, C, H);
    for (int isa = 0; isa < isa_count(); isa++) {
        isa_set(isa);
        k_attention_bf16(o, lse, qkv, B, T, C, H);
        k_attention_bf16_emu(o2, l2, qkv, B, T, C, H);
        same_bits("attention_bf16 = its emulation", o, o2, sizeof(float) * n1);
        same_bits("attention_bf16 lse = its emulation's", lse, l2, sizeof(float) * nl);
        same_bits(what, o, ro, sizeof(float) * n1);
        same_bits(what, lse, rl, sizeof(float) * nl);
        k_attention_bwd_bf16(dq, dout, qkv, ro, rl, B, T, C, H);
        k_attention_bwd_bf16_emu(dq2, dout, qkv, ro, rl, B, T, C, H);
        same_bits("attention_bwd_bf16 = its emulation", dq, dq2, sizeof(float) * n3);
        same_bits(what, dq, rdq, sizeof(float) * n3);
    }
    attention_bf16_naive(no, nlse, ndq, qkv, dout, ro, rl, B, T, C, H);
    snprintf(what, sizeof what, "attention_bf16_ref vs double B=%d T=%d C=%d H=%d", B, T, C, H);
    float *fn = fvec(n3);
    to_float(fn, no, n1);
    close_but_flips(what, ro, fn, n1, TOL_SUM);
    close_to64(what, rl, nlse, nl, TOL_SUM);
    to_float(fn, ndq, n3);
    close_but_flips(what, rdq, fn, n3, TOL_SUM);
    free(fn);
    free(qkv), free(dout), free(o), free(lse), free(o2), free(l2), free(dq), free(dq2), free(ro);
    free(rl), free(rdq), free(no), free(nlse), free(ndq);
}

/* ======================================================================
 * 6. Backends: the same bits on every backend
 * ====================================================================== */

/* Runs `stmt` on every backend; the `n` floats at `buf` must come out with
 * the bits of the plain-C backend each time. */
#define SAME_ON_EVERY_BACKEND(name, buf, n, stmt)                                              \
    do {                                                                                       \
        size_t bytes_ = sizeof(float) * (n);                                                   \
        float *first_ = fvec(n);                                                               \
        isa_set(ISA_SCALAR);                                                                   \
        stmt;                                                                                  \
        memcpy(first_, (buf), bytes_);                                                         \
        for (int isa_ = 1; isa_ < isa_count(); isa_++) {                                       \
            isa_set(isa_);                                                                     \
            memset((buf), 0x7f, bytes_);                                                       \
            stmt;                                                                              \
            CHECK(!memcmp(first_, (buf), bytes_), "%s: %s differs from scalar", name,          \
                  isa_name(isa_));                                                             \
        }                                                                                      \
        free(first_);                                                                          \
    } while (0)

static void backends_matmul(int n, int p, int q)
{
    float *a = rvec((size_t)n * p, 1), *b = rvec((size_t)p * q, 1), *bias = rvec(q, 1);
    float *r1 = rvec((size_t)n * q, 1), *r2 = rvec((size_t)n * q, 1), *c = fvec((size_t)n * q);
    float *at = rvec((size_t)p * n, 1), *ct = fvec((size_t)n * q);
    SAME_ON_EVERY_BACKEND("matmul", c, (size_t)n * q, k_matmul(c, a, b, bias, n, p, q));
    SAME_ON_EVERY_BACKEND("matmul_ex", c, (size_t)n * q,
                          k_matmul_ex(c, a, b, bias, r1, r2, 1, n, p, q));
    SAME_ON_EVERY_BACKEND("matmul_bf16", c, (size_t)n * q,
                          k_matmul_bf16(c, a, b, bias, r1, r2, 1, n, p, q));
    SAME_ON_EVERY_BACKEND("matmul_bf16_emu", c, (size_t)n * q,
                          k_matmul_bf16_emu(c, a, b, NULL, r1, NULL, 0, n, p, q));
    SAME_ON_EVERY_BACKEND("matmul_tn", ct, (size_t)n * q, k_matmul_tn(ct, at, b, n, p, q));
    SAME_ON_EVERY_BACKEND("matmul_tn_seg", ct, (size_t)n * q,
                          k_matmul_tn_seg(ct, at, b, n, p, q, 7));
    SAME_ON_EVERY_BACKEND("matmul_tn_seg_bf16", ct, (size_t)n * q,
                          k_matmul_tn_seg_bf16(ct, at, b, n, p, q, 16));
    SAME_ON_EVERY_BACKEND("matmul_tn_seg_bf16_emu", ct, (size_t)n * q,
                          k_matmul_tn_seg_bf16_emu(ct, at, b, n, p, q, 5));
    free(a), free(b), free(bias), free(r1), free(r2), free(c), free(at), free(ct);
}

static void backends_attention(int B, int T, int C, int H)
{
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = rvec(n3, 2), *dout = rvec(n1, 1), *out = fvec(n1 + nl), *lse = fvec(nl);
    float *ref = fvec(n1), *dq = fvec(n3), *kc = fvec(n1), *vc = fvec(n1);
    k_attention_ref(ref, lse, qkv, B, T, C, H);
    SAME_ON_EVERY_BACKEND("attention", out, n1 + nl,
                          k_attention(out, out + n1, qkv, B, T, C, H));
    SAME_ON_EVERY_BACKEND("attention_bwd", dq, n3,
                          k_attention_bwd(dq, dout, qkv, ref, lse, B, T, C, H));
    SAME_ON_EVERY_BACKEND("attention_bf16", out, n1 + nl,
                          k_attention_bf16(out, out + n1, qkv, B, T, C, H));
    SAME_ON_EVERY_BACKEND("attention_bwd_bf16", dq, n3,
                          k_attention_bwd_bf16(dq, dout, qkv, ref, lse, B, T, C, H));
    SAME_ON_EVERY_BACKEND("attention_bf16_emu", out, n1 + nl,
                          k_attention_bf16_emu(out, out + n1, qkv, B, T, C, H));
    SAME_ON_EVERY_BACKEND("attention_bwd_bf16_emu", dq, n3,
                          k_attention_bwd_bf16_emu(dq, dout, qkv, ref, lse, B, T, C, H));
    SAME_ON_EVERY_BACKEND("attention_last", out, (size_t)B * C,
                          k_attention_last(out, qkv, B, T, C, H));
    /* decode steps: B sequences of T positions, the caches filled as they go */
    SAME_ON_EVERY_BACKEND("attention_step", out, (size_t)B * C, {
        for (int pos = 0; pos < T; pos++)
            k_attention_step(out, kc, vc, qkv + (size_t)pos * B * 3 * C, B, pos, T, C, H);
    });
    free(qkv), free(dout), free(out), free(lse), free(ref), free(dq), free(kc), free(vc);
}

static void backends_rows(int n, int c, int v)
{
    size_t nc = (size_t)n * c, nv = (size_t)n * v;
    float *x = rvec(nc, 2), *w = rvec(c, 1), *b = rvec(c, 1), *dy = rvec(nc, 1);
    float *y = fvec(nc + 2 * (size_t)n), *g = fvec(nc + 2 * (size_t)c), *mean = fvec(n),
          *rstd = fvec(n);
    float *logits = rvec(nv, 4), *dl = fvec(nv), loss, dloss = 0.75f, *sums = fvec(c);
    float *table = rvec((size_t)c * v, 1), *dt = fvec((size_t)c * v);
    int32_t *t = rtargets(n, v, 5), *idx = rtargets(n, v, 0);
    k_layernorm_ref(y, mean, rstd, x, w, b, n, c);
    SAME_ON_EVERY_BACKEND("layernorm", y, nc + 2 * (size_t)n,
                          k_layernorm(y, y + nc, y + nc + n, x, w, b, n, c));
    SAME_ON_EVERY_BACKEND("layernorm_bwd", g, nc + 2 * (size_t)c,
                          k_layernorm_bwd(g, g + nc, g + nc + c, dy, x, w, mean, rstd, n, c));
    SAME_ON_EVERY_BACKEND("layernorm_bwd_seg", g, nc + 2 * (size_t)c,
                          k_layernorm_bwd_seg(g, g + nc, g + nc + c, dy, x, w, mean, rstd, n, c, 3));
    SAME_ON_EVERY_BACKEND("sum_rows", sums, c, k_sum_rows(sums, x, n, c));
    SAME_ON_EVERY_BACKEND("sum_rows_seg", sums, c, k_sum_rows_seg(sums, x, n, c, 4));
    SAME_ON_EVERY_BACKEND("xent", &loss, 1, k_xent(&loss, logits, t, n, v, 3));
    SAME_ON_EVERY_BACKEND("xent_bwd", dl, nv, k_xent_bwd(dl, logits, t, &dloss, n, v));
    SAME_ON_EVERY_BACKEND("embed", y, nc, k_embed(y, idx, table, n, c, v));
    SAME_ON_EVERY_BACKEND("embed_bwd", dt, (size_t)c * v, k_embed_bwd(dt, idx, dy, n, c, v));
    SAME_ON_EVERY_BACKEND("embed_bwd_seg", dt, (size_t)c * v,
                          k_embed_bwd_seg(dt, idx, dy, n, c, v, 3));
    free(x), free(w), free(b), free(dy), free(y), free(g), free(mean), free(rstd), free(logits);
    free(dl), free(sums), free(table), free(dt), free(t), free(idx);
}

static void backends_elementwise(size_t n)
{
    float *a = rvec(n, 1), *b = rvec(n, 1), *c = rvec(n, 1), *y = fvec(n);
    float *p = rvec(n, 1), *m = rvec(n, 0.1f), *v = fvec(n), *pmv = fvec(3 * n);
    const float *abc[3] = {a, b, c};
    for (size_t i = 0; i < n; i++)
        v[i] = m[i] * m[i];
    SAME_ON_EVERY_BACKEND("add", y, n, k_add(y, a, b, n));
    SAME_ON_EVERY_BACKEND("add_n", y, n, k_add_n(y, abc, 3, n));
    SAME_ON_EVERY_BACKEND("relu", y, n, k_relu(y, a, n));
    SAME_ON_EVERY_BACKEND("relu_bwd", y, n, k_relu_bwd(y, a, b, n));
    float *wide = rvec(n, 12); /* -12..12: GELU's curve and both saturations */
    SAME_ON_EVERY_BACKEND("gelu", y, n, k_gelu(y, wide, n));
    SAME_ON_EVERY_BACKEND("gelu_bwd", y, n, k_gelu_bwd(y, b, wide, n));
    free(wide);
    SAME_ON_EVERY_BACKEND("round_bf16", y, n, k_round_bf16(y, a, n));
    SAME_ON_EVERY_BACKEND("adam", pmv, 3 * n, {
        memcpy(pmv, p, sizeof(float) * n);
        memcpy(pmv + n, m, sizeof(float) * n);
        memcpy(pmv + 2 * n, v, sizeof(float) * n);
        for (int step = 1; step <= 3; step++)
            k_adam(pmv, pmv + n, pmv + 2 * n, c, n, 1e-3f, 0.9f, 0.999f, 1e-8f, step);
    });
    const float *parts[5] = {a, b, c, p, m};
    SAME_ON_EVERY_BACKEND("tree_sum", y, n, k_tree_sum(y, parts, 5, n));
    free(a), free(b), free(c), free(y), free(p), free(m), free(v), free(pmv);
}

static void test_backends(void)
{
    static const int mm[][3] = {{1, 1, 1},    {7, 3, 17},    {13, 32, 96}, {37, 64, 65},
                                {130, 17, 3}, {96, 128, 32}, {6, 33, 130}, {13, 300, 1100}};
    static const int att[][4] = {{1, 1, 8, 1},    {2, 17, 32, 4}, {1, 33, 24, 2},
                                 {2, 130, 32, 4}, {1, 40, 64, 2}, {1, 20, 40, 5},
                                 {1, 300, 24, 2}, {1, 260, 16, 2}}; /* T > 240: groups of dS */
    static const int rows[][3] = {{1, 32, 128}, {7, 17, 3}, {100, 40, 130}, {300, 96, 256}};
    int isa = isa_get();
    for (size_t i = 0; i < sizeof mm / sizeof *mm; i++)
        backends_matmul(mm[i][0], mm[i][1], mm[i][2]);
    for (size_t i = 0; i < sizeof att / sizeof *att; i++)
        backends_attention(att[i][0], att[i][1], att[i][2], att[i][3]);
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        backends_rows(rows[i][0], rows[i][1], rows[i][2]);
    backends_elementwise(1);
    backends_elementwise(17);
    backends_elementwise(1000);
    backends_elementwise(300007); /* big enough to run in parallel */
    isa_set(isa);
}

void test_kernels(void)
{
    int isa = isa_get();
    test_isa_choice();
    test_hand_values();
    test_attention_twin(1, 1, 4, 1);
    test_attention_twin(2, 7, 8, 2);
    test_attention_twin(1, 9, 24, 2); /* hs = 12 */
    test_layernorm_twin(3, 5);
    test_paths();
    test_seg_paths();
    test_determinism();
    test_shards(32, 128, 128); /* the default: one leaf per example */
    test_shards(8, 3, 3);      /* leaves shorter than a tile or a pass */
    test_bf16();
    test_bf16_attention(4, 128, 32, 4);
    test_bf16_attention(3, 7, 24, 2);
    test_bf16_attention(2, 45, 30, 2);
    test_bf16_attention(1, 300, 64, 2);
    test_bf16_tn_all();
    test_backends();
    test_constants();
    isa_set(isa);
}
