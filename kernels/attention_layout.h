/* kernels/attention_layout.h: what the fp32 attention (tensor.c) and the
 * bf16 one (kernels/bf16_sim.h) share, so that both lay a head out the
 * same way and take the same fp32 steps around their products:
 *
 *   a head's layouts   keys and values transposed to [hs,tp], 16 queries
 *                      transposed into the lanes, the padded strides, the
 *                      backward's groups of dS
 *   the fp32 steps     the softmax's numerators (softmax_exp) and the
 *                      backward's D = dO . O (bwd_d_rows)
 *
 * Part of tensor.c's object, compiled once per backend (as kernels/tiles.h
 * is): only tensor.c and kernels/bf16_sim.h include it. */
#ifndef KERNELS_ATTENTION_LAYOUT_H
#define KERNELS_ATTENTION_LAYOUT_H
#include "kernels/base.h"
#include "kernels/vec.h"

/* ---- a head's layouts ---- */

/* Zeroes columns [c0, c1) of rows [0, R) of x (rows ld apart). */
static void zero_cols(float *x, size_t ld, int R, int c0, int c1)
{
    for (int r = 0; r < R; r++)
        for (int c = c0; c < c1; c++)
            x[(size_t)r * ld + c] = 0.0f;
}

/* Row stride of the transposed per-head buffers: room for whole vectors
 * past T, plus 16 floats so rows are never a multiple of 4 KiB apart (loads
 * and stores that far apart falsely alias in the store buffer). */
static int key_stride(int T) { return round16(T) + 16; }

/* One head's keys and values, transposed to [hs,tp] so the vector loops
 * run over keys; zero-padded from T to tp. */
static void kv_transpose(float *kt /* [hs,tp] */, float *vt /* [hs,tp] */,
                         const float *qkv /* [T,3C], head's q col */, int T, int C, int hs, int tp)
{
    vtranspose(kt, (size_t)tp, qkv + hs, 3 * (size_t)C, T, hs);
    vtranspose(vt, (size_t)tp, qkv + 2 * hs, 3 * (size_t)C, T, hs);
    zero_cols(kt, (size_t)tp, hs, T, tp);
    zero_cols(vt, (size_t)tp, hs, T, tp);
}

/* The forward pass puts 16 queries in the lanes of a vector: qt[d,r] is
 * channel d of query i0+r, zero past the last query so the spare lanes
 * compute harmless numbers that are never stored. */
static void q_block_transpose(float *qt /* [hs,16] */, const float *q0 /* query i0, rows ld apart */,
                              size_t ld, int w, int hs)
{
    vtranspose(qt, VL, q0, ld, w, hs);
    zero_cols(qt, VL, hs, w, VL);
}

/* The keys whose dS the backward keeps at once, a group: a multiple of
 * 16, as many as fit DS_BYTES with a row's 16 floats of padding (all of
 * them at T 128, 16 at T 1,024), so that dS stays in L2 beside the head's
 * other rows. At GPT-2 small's shape 64 KiB to 512 KiB ran alike. */
#define DS_BYTES (128 * 1024)
static int ds_group(int T)
{
    int gk = (DS_BYTES / ((int)sizeof(float) * T) - VL) / VL * VL;
    return gk < VL ? VL : gk > round16(T) ? round16(T) : gk;
}

/* dS's row stride: the group's keys, plus 16 floats so rows are never a
 * multiple of 4 KiB apart (as key_stride). */
static size_t ds_stride(int T) { return (size_t)ds_group(T) + VL; }

/* ---- the fp32 steps ---- */

/* The softmax's numerators and their sum, for the block's 16 queries:
 * p_j = 2^(s_j - mx), summed in key order. Keys before the block (i0 of
 * them) are seen by all its queries, so only the block's own keys pay
 * for the lane mask. A pass of its own, apart from P V, so that neither
 * loop runs out of registers (AVX2 has 16, a vf takes two). Scores and
 * mx are in base 2. Returns the sum of the numerators as computed; with
 * bf16 set they are stored rounded to bf16, P V's operand. */
VINLINE vf softmax_exp(float *p /* [nk,16] */, int nk, vf mx, int i0, int bf16)
{
    vf l = vzero();
    for (int j = 0; j < i0; j++) {
        vf pj = vexp2(vsub(vload(p + VL * j), mx));
        vstore(p + VL * j, bf16 ? vbf16(pj) : pj);
        l = vadd(l, pj);
    }
    for (int j = i0; j < nk; j++) {
        vf pj = vexp2(vsub(vload(p + VL * j), mx));
        pj = vkeep(vmnot(vlanes(j - i0)), pj); /* queries before key j do not see it */
        vstore(p + VL * j, bf16 ? vbf16(pj) : pj);
        l = vadd(l, pj);
    }
    return l;
}

/* D_i = dO_i . O_i for rows i..i+U-1 (U <= 4): one chain of hs products
 * a row, in channel order. */
VINLINE void bwd_d_rows(float *D /* [T] */, const float *dout /* [T,C], head's col */,
                        const float *out /* [T,C], head's col */, int C, int hs, int i, int U)
{
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int d = 0; d < hs; d++)
UNROLL(4)
        for (int u = 0; u < U; u++)
            acc[u] += dout[(size_t)(i + u) * C + d] * out[(size_t)(i + u) * C + d];
UNROLL(4)
    for (int u = 0; u < U; u++)
        D[i + u] = acc[u];
}

#endif
