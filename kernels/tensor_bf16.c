/* tensor_bf16.c: the bf16 half of the kernels' contract (see tensor.h):
 * the scalar model of the matrix unit's bf16 dot product (what
 * vdpbf16ps does, as measured), and the plain-C twins of the bf16
 * kernels built on it: rounding, matmul, weight gradients, attention.
 * tensor_ref.c holds the fp32 twins and dispatch; a first read of the
 * fp32 default path skips this file. */
#include "kernels/tensor_impl.h"
#include <math.h>
#include <string.h>

/* ---- bf16 numerics ---- */

/* The bf16 kernels: TPU matrix-unit numerics (bf16 inputs, fp32 sums).
 *
 * The native path is one vdpbf16ps per pair of k; the emulated paths must
 * give its bits exactly, so its semantics were measured on the machine this
 * was written on (AMD Zen 5, family 1Ah) with probe programs calling
 * _mm512_dpbf16_ps: 32M random lanes against an exact (__float128) model,
 * and edge cases made by hand. What they showed, which matches Intel's
 * pseudo-code:
 *  - lane i reads the pair (lo = bf16 element 2i, hi = 2i+1) of both
 *    sources and makes two steps, hi first: acc = acc + a_hi*b_hi rounded
 *    once (a fused multiply-add), then acc = acc + a_lo*b_lo rounded once.
 *    1 + 2^-24 + 2^-24 gives 1 (one rounding of the sum would give
 *    1 + 2^-23), and which of 2^-24 and 1.5*2^-24 sits in the hi half
 *    changes the result (1 + 2^-23 against 1 + 2^-22);
 *  - always round to nearest even; MXCSR's rounding, FTZ and DAZ bits make
 *    no difference (all 16 combinations tried);
 *  - denormal operands, the bf16 elements and the fp32 accumulator alike,
 *    read as zero of their sign;
 *  - a result tiny after rounding to 24 bits with unbounded exponent
 *    becomes zero of its sign, after each step (so between the two too):
 *    2^-126 - 3*2^-152 gives 0, 2^-126 - 2^-151 gives 2^-126;
 *  - NaN: the first NaN operand in the order first multiplicand (the
 *    intrinsic's second argument), second multiplicand, accumulator, with
 *    its quiet bit set; an invalid step with no NaN operand (inf*0,
 *    inf-inf) gives the default NaN 0xFFC00000.
 * vcvtneps2bf16 and vcvtne2ps2bf16 were compared on all 2^32 inputs with
 * bf16_bits below: no difference.
 *
 * In this file A = bf16(a) is always the second multiplicand and B =
 * bf16(b) the first, so a NaN in B wins over one in A. */

static uint32_t f2u(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* bf16(x) as the upper half of a float's bits: what vcvtneps2bf16 gives. */
static uint32_t bf16_bits(float x)
{
    uint32_t u = f2u(x);
    if ((u & 0x7f800000u) == 0) /* the instruction reads denormals as zero */
        return u & 0x80000000u;
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quieted, payload truncated */
        return (u | 0x00400000u) & 0xffff0000u;
    return (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u; /* carries into inf past the top */
}

float bf16_round(float x) { return u2f(bf16_bits(x)); }

static float daz(float x)
{
    uint32_t u = f2u(x);
    return (u & 0x7f800000u) ? x : u2f(u & 0x80000000u);
}

/* One vdpbf16ps step on one lane: acc + x*y, x the first multiplicand. */
static float bf16_step(float acc, float x, float y)
{
    acc = daz(acc), x = daz(x), y = daz(y);
    float r = fmaf(x, y, acc);
    uint32_t m = f2u(r) & 0x7fffffffu;
    if (m > 0x00800000u && m <= 0x7f800000u) /* normal or inf: nothing to flush */
        return r;
    if (m > 0x7f800000u) {
        uint32_t nan = isnan(x) ? f2u(x) : isnan(y) ? f2u(y) : isnan(acc) ? f2u(acc) : 0xffc00000u;
        return u2f(nan | 0x00400000u);
    }
    if (m < 0x00800000u) /* below 2^-126 on the denormal grid: tiny at 24 bits too */
        return u2f(f2u(r) & 0x80000000u);
    /* |r| == 2^-126 may have been rounded up from a value that 24 bits
     * keep below 2^-126. Then |acc| and |x*y| are below 2^-60 (else the
     * exact sum would be a multiple of 2^-84, not within 2^-150 of
     * 2^-126), so scaling acc and the smaller factor by 2^64 is exact and
     * puts the rounding where 24 bits are available. */
    float s = fabsf(x) < fabsf(y) ? x : y, t = fabsf(x) < fabsf(y) ? y : x;
    float rs = fmaf(s * 0x1p64f, t, acc * 0x1p64f);
    return fabsf(rs) < 0x1p-62f ? copysignf(0.0f, rs) : rs * 0x1p-64f;
}

/* One element: acc after the steps over ar (a row of A, stride sak) and
 * bc (a column of B, stride ldb), p long, pairs ascending, hi first, a
 * missing hi partner (p odd) being the zero the packing pads with. */
float bf16_dot(float acc, const float *ar, size_t sak, const float *bc, size_t ldb, int p)
{
    for (int k = 0; k < p; k += 2) {
        int hi = k + 1 < p;
        acc = bf16_step(acc, hi ? bc[(size_t)(k + 1) * ldb] : 0.0f,
                        hi ? ar[(size_t)(k + 1) * sak] : 0.0f);
        acc = bf16_step(acc, bc[(size_t)k * ldb], ar[(size_t)k * sak]);
    }
    return acc;
}

/* The epilogue as the vector paths do it (mm_epilogue): max(y, 0) turns
 * NaN and -0 into +0 like this comparison does. */
float bf16_epilogue(float y, const float *r1, const float *r2, const float *gate, int relu,
                    size_t at)
{
    if (relu)
        y = y > 0 ? y : 0.0f;
    if (gate)
        y = gate[at] > 0 ? y : 0.0f;
    if (r1)
        y += r1[at];
    if (r2)
        y += r2[at];
    return y;
}

/* ---- bf16 rounding ---- */

/* bf16_bits, 8 or 16 lanes at once. */

void k_round_bf16_ref(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = bf16_round(x[i]);
}


/* ---- bf16 matmul ---- */

/* -- bf16 matmul: twin -- */

void k_matmul_bf16_ref(float *c /* [n,q] */, const float *a /* [n,p] */, const float *b /* [p,q] */,
                       const float *bias /* [q] or NULL */, const float *r1 /* [n,q] or NULL */,
                       const float *r2 /* [n,q] or NULL */, int relu, int n, int p, int q)
{
    size_t na = (size_t)n * p, nb = (size_t)p * q;
    float *ra = kmalloc(sizeof(float) * (na + nb)), *rb = ra + na; /* [n,p], [p,q] */
    k_round_bf16_ref(ra, a, na);
    k_round_bf16_ref(rb, b, nb);
#pragma omp parallel for schedule(static) if ((long)n * p * q >= PAR_WORK)
    for (int i = 0; i < n; i++)
        for (int j = 0; j < q; j++) {
            size_t at = (size_t)i * q + j;
            float y = bf16_dot(bias ? bias[j] : 0.0f, ra + (size_t)i * p, 1, rb + j, (size_t)q, p);
            c[at] = bf16_epilogue(y, r1, r2, NULL, relu, at);
        }
    free(ra);
}

void k_matmul_bf16_gated_ref(float *c /* [n,q] */, const float *a /* [n,p] */,
                             const float *b /* [p,q] */, const float *gate /* [n,q] */, int n,
                             int p, int q)
{
    k_matmul_bf16_ref(c, a, b, NULL, NULL, NULL, 0, n, p, q);
    for (size_t i = 0; i < (size_t)n * q; i++)
        c[i] = bf16_epilogue(c[i], NULL, NULL, gate, 0, i);
}

/* ---- bf16 weight-gradient matmul ---- */

/* a^T b over the leaves of the weight gradients. */

/* -- bf16 weight-gradient matmul: twin -- */

/* Each leaf's partial by bf16_dot, then the tree. */
void k_matmul_tn_seg_bf16_ref(float *c /* [n,q] */, const float *a /* [p,n] */,
                              const float *b /* [p,q] */, int n, int p, int q, int seg)
{
    int L = leaf_count(p, seg);
    size_t na = (size_t)p * n, nb = (size_t)p * q, nc = (size_t)n * q;
    float *ra = kmalloc(sizeof(float) * (na + nb)), *rb = ra + na; /* [p,n], [p,q] */
    float *part = kmalloc(sizeof(float) * (size_t)L * nc);         /* [L,n,q] */
    k_round_bf16_ref(ra, a, na);
    k_round_bf16_ref(rb, b, nb);
#pragma omp parallel for schedule(static) if ((long)n * p * q >= PAR_WORK)
    for (int i = 0; i < n; i++)
        for (int l = 0; l < L; l++) {
            int k0 = leaf_lo(l, p, seg), rows = leaf_hi(l, p, seg) - k0;
            for (int j = 0; j < q; j++)
                part[(size_t)l * nc + (size_t)i * q + j] =
                    bf16_dot(0.0f, ra + (size_t)k0 * n + i, (size_t)n, rb + (size_t)k0 * q + j,
                             (size_t)q, rows);
        }
    tree_finish(add_plain, c, part, L, nc);
    free(ra);
    free(part);
}

/* ---- bf16 attention ---- */

/* The kernels are the fp32 head drivers with their bf16 flag set
 * (round_block in tensor.c); the twins round first, then call the fp32
 * twins. */

/* -- bf16 attention: twins -- */

void k_attention_bf16_ref(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                          const float *qkv /* [B,T,3C] */, int B, int T, int C, int H)
{
    size_t n = (size_t)B * T * 3 * C;
    float *r = kmalloc(sizeof(float) * n); /* [B,T,3C] */
    k_round_bf16_ref(r, qkv, n);
    k_attention_ref(out, lse, r, B, T, C, H);
    free(r);
}

void k_attention_bwd_bf16_ref(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                              const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                              const float *lse /* [B,H,T] */, int B, int T, int C, int H)
{
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
    float *rq = kmalloc(sizeof(float) * (n3 + n1)), *rd = rq + n3; /* [B,T,3C], [B,T,C] */
    k_round_bf16_ref(rq, qkv, n3);
    k_round_bf16_ref(rd, dout, n1);
    k_attention_bwd_ref(dqkv, rd, rq, out, lse, B, T, C, H);
    free(rq);
}
