/* tensor_bf16.c: the bf16 half of the kernels' contract (see kernels.h):
 * the plain-C twins of the bf16 kernels, built on the scalar model of the
 * matrix unit (bf16_model.c): rounding, matmul, weight gradients,
 * attention. tensor_ref.c holds the fp32 twins; a first read of the fp32
 * default path skips this file. */
#include "kernels/base.h"
#include <math.h>
#include <stdlib.h>

/* ---- bf16 rounding ---- */

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

/* The kernels run every product on the bf16 tiles (kernels.h says what
 * is rounded where); the twins compute each product by bf16_dot over
 * whole rows and columns from key or query 0 (the kernels' pairs), with
 * the masked entries exact zeros, and the fp32 parts in plain C in the
 * kernels' order: the softmax in base 2 as the fp32 twins (tensor_ref.c),
 * 2^x and ln x as vec.h's one lane at a time (base.h). */

/* -- bf16 attention: twins -- */

/* Rows [0,T) of a head's n columns (rows ld apart), rounded, into [T,n]. */
static float *round_cols(const float *x, size_t ld, int T, int n)
{
    float *r = kmalloc(sizeof(float) * ((size_t)T * n + 1));
    for (int i = 0; i < T; i++)
        for (int d = 0; d < n; d++)
            r[(size_t)i * n + d] = bf16_round(x[(size_t)i * ld + d]);
    return r;
}

void k_attention_bf16_ref(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                          const float *qkv /* [B,T,3C] */, int B, int T, int C, int H)
{
    int hs = C / H;
    float scale2 = LOG2E / sqrtf((float)hs); /* the scores to base 2 */
    float *s = kmalloc(sizeof(float) * ((size_t)T + 1)), *p = kmalloc(sizeof(float) * ((size_t)T + 1));
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        const float *x = qkv + (size_t)b * T * 3 * C + 3 * hs * h; /* head's q col */
        float *q = round_cols(x, 3 * (size_t)C, T, hs), *k = round_cols(x + hs, 3 * (size_t)C, T, hs);
        float *v = round_cols(x + 2 * hs, 3 * (size_t)C, T, hs);
        for (int i = 0; i < T; i++) {
            float mx = -INFINITY, l = 0.0f;
            for (int j = 0; j <= i; j++) {
                s[j] = bf16_dot(0.0f, k + (size_t)j * hs, 1, q + (size_t)i * hs, 1, hs) * scale2;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j <= i; j++) {
                float e = exp2_lane(s[j] - mx);
                l += e; /* the sum from the fp32 numerators, P V from the rounded */
                p[j] = bf16_round(e);
            }
            float *o = out + ((size_t)b * T + i) * C + hs * h; /* [hs] */
            for (int d = 0; d < hs; d++)
                o[d] = bf16_dot(0.0f, v + d, (size_t)hs, p, 1, i + 1) / l;
            lse[(size_t)bh * T + i] = mx * LN2 + log_lane(l); /* back to base e */
        }
        free(q), free(k), free(v);
    }
    free(s), free(p);
}

void k_attention_bwd_bf16_ref(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                              const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                              const float *lse /* [B,H,T] */, int B, int T, int C, int H)
{
    int hs = C / H;
    size_t ld3 = 3 * (size_t)C, tt = (size_t)T * T;
    float scale = 1.0f / sqrtf((float)hs), scale2 = LOG2E * scale; /* the kernel's product */
    float *p = kmalloc(sizeof(float) * 2 * tt), *ds = p + tt; /* [T,T] each, bf16 */
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        size_t r3 = (size_t)b * T * 3 * C + 3 * hs * h, r1 = (size_t)b * T * C + hs * h;
        const float *x = qkv + r3, *g = dout + r1, *o = out + r1;
        float *q = round_cols(x, ld3, T, hs), *k = round_cols(x + hs, ld3, T, hs);
        float *v = round_cols(x + 2 * hs, ld3, T, hs), *gr = round_cols(g, (size_t)C, T, hs);
        float *dx = dqkv + r3;
        for (int i = 0; i < T; i++) {
            float D = 0.0f;
            for (int d = 0; d < hs; d++)
                D += g[(size_t)i * C + d] * o[(size_t)i * C + d];
            for (int j = 0; j < T; j++) {
                float pij = 0.0f, dsij = 0.0f;
                if (j <= i) {
                    float sij = bf16_dot(0.0f, q + (size_t)i * hs, 1, k + (size_t)j * hs, 1, hs);
                    float dp = bf16_dot(0.0f, gr + (size_t)i * hs, 1, v + (size_t)j * hs, 1, hs);
                    /* s scale2 - lse log2(e), one rounding (vfms), then 2^x */
                    pij = exp2_lane(fmaf(sij, scale2, -(lse[(size_t)bh * T + i] * LOG2E)));
                    dsij = pij * (dp - D);
                }
                p[(size_t)i * T + j] = bf16_round(pij);
                ds[(size_t)i * T + j] = bf16_round(dsij);
            }
        }
        for (int j = 0; j < T; j++)
            for (int d = 0; d < hs; d++) {
                dx[(size_t)j * ld3 + 2 * hs + d] = bf16_dot(0.0f, gr + d, (size_t)hs, p + j, (size_t)T, T);
                dx[(size_t)j * ld3 + hs + d] =
                    bf16_dot(0.0f, q + d, (size_t)hs, ds + j, (size_t)T, T) * scale;
                dx[(size_t)j * ld3 + d] =
                    bf16_dot(0.0f, ds + (size_t)j * T, 1, k + d, (size_t)hs, T) * scale;
            }
        free(q), free(k), free(v), free(gr);
    }
    free(p);
}
