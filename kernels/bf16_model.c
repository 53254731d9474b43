/* kernels/bf16_model.c: the scalar model of the matrix unit's bf16 dot
 * product, what vdpbf16ps does, as measured: bf16 rounding (bf16_round),
 * one element of the bf16 matmul (bf16_dot) and its epilogue
 * (bf16_epilogue). The floor of the kernel layer (base.h): the bf16 twins
 * (tensor_bf16.c) are built on it, and the vector kernels of tensor.c
 * recompute the rare tiles their lanes cannot do exactly with it. */
#include "kernels/base.h"
#include <math.h>
#include <stdint.h>
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
