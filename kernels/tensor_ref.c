/* tensor_ref.c: the contract of the compute kernels (see kernels.h): the
 * plain-C twins (*_ref) of the fp32 kernels, the readable statement of
 * what each computes (shapes, summation order) and the oracle the tests
 * hold every backend of tensor.c to. Elsewhere, for a later read: the
 * twins of the fused ops and dropout (fused_ref.c, dropout.c), of the
 * tree's reductions (tensor_seg.c), of the decode step (tensor_decode.c)
 * and of the bf16 kernels (tensor_bf16.c).
 *
 * The twins are plain loops that give the kernels' bits: each says, in
 * the order the kernels of tensor.c do it, every rounding they make. A
 * dot product is a chain of fused multiply-adds (fmaf, one rounding, as
 * vec.h's vfma) in index order; a sum along a row keeps 16 lane sums and
 * ends in vsum's tree (lanes_sum, base.h); e^x, 2^x and ln x are vec.h's
 * polynomials one lane at a time (exp_lane, exp2_lane, log_lane). So the
 * reading mode (GPT_ISA=ref, reading.c) can run them as the kernels and
 * train to the same checkpoint. The twins run in parallel only over
 * independent output rows, so their bits do not depend on the thread
 * count either. No libm on any path whose bits matter: fmath.h. */
#include "kernels/tensor_ref.h"
#include "kernels/gelu.h"
#include "util/fmath.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- matmul ---- */

void k_matmul_ex_ref(float *c /* [n,q] */, const float *a /* [n,p] */, const float *b /* [p,q] */,
                     const float *bias /* [q] or NULL */, const float *r1 /* [n,q] or NULL */,
                     const float *r2 /* [n,q] or NULL */, int relu, int n, int p, int q)
{
#pragma omp parallel for schedule(static) if ((long)n * p * q >= PAR_WORK)
    for (int i = 0; i < n; i++) {
        float *ci = c + (size_t)i * q; /* [q] */
        for (int j = 0; j < q; j++)
            ci[j] = bias ? bias[j] : 0.0f;
        for (int k = 0; k < p; k++) {
            float aik = a[(size_t)i * p + k];
            const float *bk = b + (size_t)k * q; /* [q] */
            for (int j = 0; j < q; j++) /* one FMA a k, k in order: vfma's chain */
                ci[j] = fmaf(aik, bk[j], ci[j]);
        }
        for (int j = 0; j < q; j++) {
            if (relu)
                ci[j] = ci[j] > 0 ? ci[j] : 0.0f;
            if (r1)
                ci[j] += r1[(size_t)i * q + j];
            if (r2)
                ci[j] += r2[(size_t)i * q + j];
        }
    }
}

void k_matmul_ref(float *c /* [n,q] */, const float *a /* [n,p] */, const float *b /* [p,q] */,
                  const float *bias /* [q] or NULL */, int n, int p, int q)
{
    k_matmul_ex_ref(c, a, b, bias, NULL, NULL, 0, n, p, q);
}

/* ---- weight-gradient matmul ---- */

void k_matmul_tn_ref(float *c /* [n,q] */, const float *a /* [p,n] */, const float *b /* [p,q] */,
                     int n, int p, int q)
{
#pragma omp parallel for schedule(static) if ((long)n * p * q >= PAR_WORK)
    for (int i = 0; i < n; i++) {
        float *ci = c + (size_t)i * q; /* [q] */
        for (int j = 0; j < q; j++)
            ci[j] = 0.0f;
        for (int k = 0; k < p; k++) {
            float aki = a[(size_t)k * n + i];
            const float *bk = b + (size_t)k * q; /* [q] */
            for (int j = 0; j < q; j++)
                ci[j] = fmaf(aki, bk[j], ci[j]);
        }
    }
}

/* ---- attention ---- */

/* The kernels keep the scores in base 2, so the softmax's exponential is
 * 2^x (exp2_lane): the forward scales q by log2(e)/sqrt(hs) before the dot
 * products, the backward scales each score as it recomputes P from lse.
 * Every dot product is one FMA chain over the hs channels in order. */

/* q . k over hs channels: one FMA a channel, in channel order. */
static float dot_chain(const float *q /* [hs] */, const float *k /* [hs] */, int hs)
{
    float acc = 0.0f;
    for (int d = 0; d < hs; d++)
        acc = fmaf(q[d], k[d], acc);
    return acc;
}

/* One query row i of one head: o [hs] and its lse, with dropout's mask
 * (or none). p: [T] scratch, qs: [hs] scratch. */
static void attention_row_ref(float *o /* [hs] */, float *lse, const float *base /* head's q, row 0 */,
                              size_t ld, int i, int hs, const struct drop_mask *dm, int32_t row,
                              int h, int T, float *p, float *qs)
{
    const float *q = base + (size_t)i * ld; /* [hs]; key j at base + j ld + hs, value + 2 hs */
    float scale2 = LOG2E / sqrtf((float)hs), mx = -INFINITY, l = 0.0f;
    for (int d = 0; d < hs; d++)
        qs[d] = q[d] * scale2; /* the scale first, then the dot products */
    for (int j = 0; j <= i; j++) {
        p[j] = dot_chain(qs, base + (size_t)j * ld + hs, hs);
        mx = mx > p[j] ? mx : p[j]; /* vmax */
    }
    for (int j = 0; j <= i; j++) { /* the numerators, summed in key order */
        p[j] = exp2_lane(p[j] - mx);
        l += p[j];
    }
    for (int j = 0; j <= i && dm; j++) /* dropout: after the sum, before P V */
        p[j] *= kept_scale(dm, row, h, T, j);
    for (int d = 0; d < hs; d++) { /* P V over the keys in order, then / l */
        float acc = 0.0f;
        for (int j = 0; j <= i; j++)
            acc = fmaf(p[j], base[(size_t)j * ld + 2 * hs + d], acc);
        o[d] = acc / l;
    }
    *lse = mx * LN2 + log_lane(l); /* back to base e: a multiply, then an add */
}

void attention_masked_ref(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                          const float *qkv /* [B,T,3C] */, int B, int T, int C, int H,
                          const struct drop_mask *dm)
{
    int hs = C / H;
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        float *p = kmalloc(sizeof(float) * (size_t)(T + hs)), *qs = p + T; /* [T], [hs] */
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            int b = bh / H, h = bh % H;
            const float *base = qkv + (size_t)b * T * 3 * C + 3 * hs * h; /* head's q, row 0 */
            for (int i = 0; i < T; i++)
                attention_row_ref(out + ((size_t)b * T + i) * C + hs * h, lse + (size_t)bh * T + i,
                                  base, 3 * (size_t)C, i, hs, dm, dm ? dm->rows[(size_t)b * T + i] : 0,
                                  h, T, p, qs);
        }
        free(p);
    }
}

void k_attention_ref(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                     const float *qkv /* [B,T,3C] */, int B, int T, int C, int H)
{
    attention_masked_ref(out, lse, qkv, B, T, C, H, NULL);
}

/* The channels of dQ from which the kernel sums even and odd keys apart:
 * the last 8 or fewer, when a head's channels leave 8 or fewer past a
 * multiple of 16 (all of a head of 8). There 8 channels fill half a
 * vector, so the kernel puts the next key in the other half (tensor.c,
 * bwd_q_pairs); hs when there are none. */
static int pairs_from(int hs)
{
    int d0 = 0;
    while (hs - d0 > 8)
        d0 += LANES;
    return d0 < hs ? d0 : hs;
}

/* The backward pass of one (batch, head), recomputing the probabilities
 * from lse: P_ij = 2^(s_ij log2(e)/sqrt(hs) - lse_i log2(e)), s_ij = Q_i.K_j,
 * D_i = dO_i.O_i (products then adds: no FMA), dS_ij = P_ij (dO_i.V_j -
 * D_i), then dV_j = sum_i P_ij dO_i, dK_j = (sum_i dS_ij Q_i) / sqrt(hs)
 * over queries i >= j in order, and dQ_i = (sum_j dS_ij K_j) / sqrt(hs)
 * over keys j <= i in order. With dropout m_ij (kept_scale) the output
 * used P~ = P m: dV_j = sum_i P~_ij dO_i and dS_ij = P_ij (dO_i.V_j m_ij -
 * D_i), D_i still dO_i.O_i. rows [T]: the batch's global rows (dropout
 * only). pd: [2,T,T] scratch for P~ and dS. */
static void attention_bwd_head_ref(float *dqkv /* [T,3C], head's q col */,
                                   const float *dout /* [T,C], head's col */,
                                   const float *qkv /* [T,3C], head's q col */,
                                   const float *out /* [T,C], head's col */,
                                   const float *lse /* [T] */, int T, int C, int hs,
                                   const struct drop_mask *dm, const int32_t *rows, int h,
                                   float *pd)
{
    size_t ld3 = 3 * (size_t)C, TT = (size_t)T * T;
    float scale = 1.0f / sqrtf((float)hs), scale2 = LOG2E / sqrtf((float)hs);
    float *P = pd, *dS = pd + TT; /* [T,T] each, query i's row, key j's column */
    int dp = pairs_from(hs);
    for (int i = 0; i < T; i++) {
        const float *q = qkv + i * ld3, *g = dout + (size_t)i * C, *o = out + (size_t)i * C;
        float D = 0.0f;
        for (int d = 0; d < hs; d++)
            D += g[d] * o[d];
        for (int j = 0; j <= i; j++) {
            const float *k = qkv + j * ld3 + hs, *v = qkv + j * ld3 + 2 * hs; /* [hs] each */
            float kept = kept_scale(dm, dm ? rows[i] : 0, h, T, j);
            /* s scale2 - lse log2(e) in one rounding: the kernel's vfms */
            float pr = exp2_lane(fmaf(dot_chain(q, k, hs), scale2, -(lse[i] * LOG2E)));
            P[(size_t)i * T + j] = pr * kept;
            dS[(size_t)i * T + j] = pr * (dot_chain(g, v, hs) * kept - D);
        }
    }
    for (int j = 0; j < T; j++) /* dV and dK: key j's, over queries i >= j in order */
        for (int d = 0; d < hs; d++) {
            float dv = 0.0f, dk = 0.0f;
            for (int i = j; i < T; i++) {
                dv = fmaf(P[(size_t)i * T + j], dout[(size_t)i * C + d], dv);
                dk = fmaf(dS[(size_t)i * T + j], qkv[i * ld3 + d], dk);
            }
            dqkv[j * ld3 + 2 * hs + d] = dv;
            dqkv[j * ld3 + hs + d] = dk * scale;
        }
    for (int i = 0; i < T; i++) /* dQ: query i's, over keys j <= i in order */
        for (int d = 0; d < hs; d++) {
            float sum[2] = {0.0f, 0.0f}; /* even keys, odd keys (from pairs_from) */
            for (int j = 0; j <= i; j++) {
                float *acc = &sum[d >= dp ? j % 2 : 0];
                *acc = fmaf(dS[(size_t)i * T + j], qkv[j * ld3 + hs + d], *acc);
            }
            dqkv[i * ld3 + d] = (d >= dp ? sum[0] + sum[1] : sum[0]) * scale;
        }
}

void attention_bwd_masked_ref(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                              const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                              const float *lse /* [B,H,T] */, int B, int T, int C, int H,
                              const struct drop_mask *dm)
{
    int hs = C / H;
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        float *pd = kmalloc(sizeof(float) * 2 * (size_t)T * T); /* [2,T,T] */
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            int b = bh / H, h = bh % H;
            size_t r3 = (size_t)b * T * 3 * C + 3 * hs * h, r1 = (size_t)b * T * C + hs * h;
            attention_bwd_head_ref(dqkv + r3, dout + r1, qkv + r3, out + r1, lse + (size_t)bh * T,
                                   T, C, hs, dm, dm ? dm->rows + (size_t)b * T : NULL, h, pd);
        }
        free(pd);
    }
}

void k_attention_bwd_ref(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                         const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                         const float *lse /* [B,H,T] */, int B, int T, int C, int H)
{
    attention_bwd_masked_ref(dqkv, dout, qkv, out, lse, B, T, C, H, NULL);
}

/* ---- layernorm ---- */

/* The kernels sum a row in 16 lanes (lane l takes columns l, l+16, ...)
 * and end in vsum's tree (lanes_sum); (x - mean)^2 and the final w, b are
 * FMAs. */
void k_layernorm_ref(float *y /* [n,c] */, float *mean /* [n] */, float *rstd /* [n] */,
                     const float *x /* [n,c] */, const float *w /* [c] */, const float *b /* [c] */,
                     int n, int c)
{
#pragma omp parallel for schedule(static) if ((long)n * c >= PAR_WORK)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * c; /* [c] */
        float *yi = y + (size_t)i * c;       /* [c] */
        float sum[LANES] = {0}, sq[LANES] = {0};
        for (int j = 0; j < c; j++)
            sum[j % LANES] += xi[j];
        float mu = lanes_sum(sum) / (float)c;
        for (int j = 0; j < c; j++) {
            float d = xi[j] - mu;
            sq[j % LANES] = fmaf(d, d, sq[j % LANES]);
        }
        float rs = 1.0f / sqrtf(lanes_sum(sq) / (float)c + LN_EPS);
        for (int j = 0; j < c; j++)
            yi[j] = fmaf((xi[j] - mu) * rs, w[j], b[j]);
        mean[i] = mu;
        rstd[i] = rs;
    }
}

/* Rows [i0, i1): their dx, plus r1 + r2 (those present) when the compiler
 * folded the residual stream's gradient sum in: (r1 + r2) + dx, add_n's
 * order with dx its last term; and their partial dw, db (pw, pb [c]),
 * summed over the rows in order from zero. */
static void layernorm_bwd_rows_ref(float *dx /* [n,c] */, float *pw /* [c] */, float *pb /* [c] */,
                                   const float *dy /* [n,c] */, const float *x /* [n,c] */,
                                   const float *w /* [c] */, const float *mean /* [n] */,
                                   const float *rstd /* [n] */, const float *r1 /* [n,c] or NULL */,
                                   const float *r2 /* [n,c] or NULL */, int i0, int i1, int c)
{
    for (int j = 0; j < c; j++)
        pw[j] = pb[j] = 0.0f;
    for (int i = i0; i < i1; i++) {
        size_t at = (size_t)i * c; /* the row's first element */
        float mu = mean[i], rs = rstd[i], s1[LANES] = {0}, s2[LANES] = {0};
        for (int j = 0; j < c; j++) {
            float xh = (x[at + j] - mu) * rs, g = dy[at + j] * w[j];
            s1[j % LANES] += g;
            s2[j % LANES] = fmaf(g, xh, s2[j % LANES]);
            pw[j] = fmaf(dy[at + j], xh, pw[j]);
            pb[j] = dy[at + j] + pb[j];
        }
        float s1c = lanes_sum(s1) / (float)c, s2c = lanes_sum(s2) / (float)c;
        for (int j = 0; j < c; j++) {
            float xh = (x[at + j] - mu) * rs, g = dy[at + j] * w[j];
            float d = rs * ((g - s1c) - xh * s2c);
            if (r1)
                d = (r2 ? r1[at + j] + r2[at + j] : r1[at + j]) + d;
            dx[at + j] = d;
        }
    }
}

/* dw, db by ROW_BLOCK blocks of rows, summed in block order from zero
 * (seg < 0, as k_layernorm_bwd), or by leaves of seg rows and the tree
 * (seg 0: one leaf). */
void layernorm_bwd_any_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, const float *mean, const float *rstd, const float *r1,
                           const float *r2, int n, int c, int seg)
{
    int blocked = seg < 0, rows = blocked ? ROW_BLOCK : seg, L = leaf_count(n, rows);
    float *pw = kmalloc(sizeof(float) * 2 * ((size_t)L + 1) * c); /* [L,c] partial dw */
    float *pb = pw + (size_t)L * c;                               /* [L,c] partial db */
    for (int l = 0; l < L; l++)
        layernorm_bwd_rows_ref(dx, pw + (size_t)l * c, pb + (size_t)l * c, dy, x, w, mean, rstd,
                               r1, r2, leaf_lo(l, n, rows), leaf_hi(l, n, rows), c);
    if (blocked) {
        for (int j = 0; j < c; j++)
            dw[j] = db[j] = 0.0f;
        for (int l = 0; l < L; l++) {
            add_plain(dw, pw + (size_t)l * c, (size_t)c);
            add_plain(db, pb + (size_t)l * c, (size_t)c);
        }
    } else {
        tree_finish(add_plain, dw, pw, L, (size_t)c);
        tree_finish(add_plain, db, pb, L, (size_t)c);
    }
    free(pw);
}

void k_layernorm_bwd_ref(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                         const float *dy /* [n,c] */, const float *x /* [n,c] */,
                         const float *w /* [c] */, const float *mean /* [n] */,
                         const float *rstd /* [n] */, int n, int c)
{
    layernorm_bwd_any_ref(dx, dw, db, dy, x, w, mean, rstd, NULL, NULL, n, c, -1);
}

/* ---- softmax cross-entropy ---- */

static int count_targets(const int32_t *targets /* [n] */, int n)
{
    int count = 0;
    for (int i = 0; i < n; i++)
        count += targets[i] >= 0;
    return count;
}

/* A row's max and the sum of e^(x - max) in 16 lanes, then vsum's tree;
 * the exponentials kept in e when it is not NULL. */
static float row_sum_ref(const float *x /* [v] */, int v, float *mx, float *e /* [v] or NULL */)
{
    float m = -INFINITY, lane[LANES] = {0};
    for (int j = 0; j < v; j++)
        m = m > x[j] ? m : x[j]; /* vmax */
    for (int j = 0; j < v; j++) {
        float ej = exp_lane(x[j] - m);
        if (e)
            e[j] = ej;
        lane[j % LANES] += ej;
    }
    *mx = m;
    return lanes_sum(lane);
}

/* The loss of a row with target t: max + log(sum) - x[t]. */
static double row_loss_ref(const float *x /* [v] */, int v, int t)
{
    float m, s = row_sum_ref(x, v, &m, NULL);
    return (double)(m + fm_logf(s) - x[t]);
}

void k_xent_ref(float *loss /* [1] */, const float *logits /* [n,v] */,
                const int32_t *targets /* [n] */, int n, int v, int seg)
{
    double *row = kmalloc(sizeof(double) * (size_t)n); /* [n] */
    for (int i = 0; i < n; i++)
        row[i] = targets[i] < 0 ? 0.0 : row_loss_ref(logits + (size_t)i * v, v, targets[i]);
    *loss = mean_loss(row, targets, n, seg);
    free(row);
}

/* dx = (e^(x - max) (1/sum) - onehot) scale: the reciprocal once, a
 * multiply a logit, 1 subtracted at the target alone. */
void k_xent_bwd_ref(float *dlogits /* [n,v] */, const float *logits /* [n,v] */,
                    const int32_t *targets /* [n] */, const float *dloss /* [1] */, int n, int v)
{
    int count = count_targets(targets, n);
    float scale = count ? dloss[0] / (float)count : 0.0f;
    for (int i = 0; i < n; i++) {
        float *dx = dlogits + (size_t)i * v; /* [v] */
        if (targets[i] < 0) {
            memset(dx, 0, sizeof(float) * (size_t)v);
            continue;
        }
        float m, inv = 1.0f / row_sum_ref(logits + (size_t)i * v, v, &m, dx);
        for (int j = 0; j < v; j++) {
            float p = dx[j] * inv;
            dx[j] = (j == targets[i] ? p - 1.0f : p) * scale;
        }
    }
}

/* ---- element-wise ---- */

void k_add_ref(float *y /* [n] */, const float *a /* [n] */, const float *b /* [n] */, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

void k_add_n_ref(float *y /* [n] */, const float *const *x /* m x [n] */, int m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = x[0][i];
        for (int k = 1; k < m; k++)
            s += x[k][i];
        y[i] = s;
    }
}

void k_relu_ref(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void k_relu_bwd_ref(float *dx /* [n] */, const float *dy /* [n] */, const float *y /* [n] */,
                    size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

/* GELU (kernels/gelu.h spells its steps, for the kernel too). */
void k_gelu_ref(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float e;
        y[i] = x[i] * gelu_s_lane(gelu_t_lane(x[i]), &e);
    }
}

/* d/dx x s(x) = s + x s (1 - s) 2u', with 1 - s = e^t s (no cancellation
 * where s is near 1). */
void k_gelu_bwd_ref(float *dx /* [n] */, const float *dy /* [n] */, const float *x /* [n] */,
                    size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float e, t = gelu_t_lane(x[i]), s = gelu_s_lane(t, &e);
        float term = gelu_slope_lane(x[i]) * (s * (e * s));
        dx[i] = dy[i] * (s + (gelu_saturated(t) ? 0.0f : term));
    }
}

/* ---- sums over rows ---- */

/* out = rows [i0, i1) of x summed in order from zero: a block's or a
 * leaf's sum. */
void sum_rows_leaf_ref(float *out /* [q] */, const float *x /* [n,q] */, int i0, int i1, int q)
{
    for (int j = 0; j < q; j++)
        out[j] = 0.0f;
    for (int i = i0; i < i1; i++)
        add_plain(out, x + (size_t)i * q, (size_t)q);
}

/* ROW_BLOCK blocks, each summed over its rows from zero, then the blocks'
 * sums added in block order from zero. */
void k_sum_rows_ref(float *out /* [q] */, const float *x /* [n,q] */, int n, int q)
{
    float *part = kmalloc(sizeof(float) * (size_t)q); /* [q] one block's sum */
    for (int j = 0; j < q; j++)
        out[j] = 0.0f;
    for (int i0 = 0; i0 < n; i0 += ROW_BLOCK) {
        sum_rows_leaf_ref(part, x, i0, min_int(i0 + ROW_BLOCK, n), q);
        add_plain(out, part, (size_t)q);
    }
    free(part);
}

/* ---- transpose ---- */

void k_transpose_ref(float *out /* [s,r] */, const float *in /* [r,s] */, int r, int s)
{
    for (int i = 0; i < r; i++)
        for (int j = 0; j < s; j++)
            out[(size_t)j * r + i] = in[(size_t)i * s + j];
}

/* ---- embedding ---- */

void k_embed_ref(float *y /* [n,c] */, const int32_t *idx /* [n] */, const float *table /* [c,v] */,
                 int n, int c, int v)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            y[(size_t)i * c + ch] = table[(size_t)ch * v + idx[i]];
}

void k_embed_bwd_ref(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                     const float *dy /* [n,c] */, int n, int c, int v)
{
    memset(dtable, 0, sizeof(float) * (size_t)c * v);
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            dtable[(size_t)ch * v + idx[i]] += dy[(size_t)i * c + ch];
}

/* ---- Adam ---- */

/* The update of one element; the kernel (adam_vec in tensor.c) does the
 * same operations in the same order (no FMA), so it agrees to the bit. */
static inline void adam_one(float *p, float *m, float *v, float g, const struct adam_k *k)
{
    *m = *m + k->omb1 * (g - *m);
    *v = k->b2 * *v + k->omb2 * g * g;
    float denom = sqrtf(*v) / k->bc2s + k->eps;
    *p = *p - k->step * *m / denom;
}

void k_adam_ref(float *p /* [n] */, float *m /* [n] */, float *v /* [n] */,
                const float *g /* [n] */, size_t n, float lr, float b1, float b2, float eps, int t)
{
    struct adam_k k = adam_consts(lr, b1, b2, eps, t);
    for (size_t i = 0; i < n; i++)
        adam_one(p + i, m + i, v + i, g[i], &k);
}
