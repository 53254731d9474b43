/* tensor_ref.c: the contract of the compute kernels (see kernels.h): the
 * plain-C twins (*_ref) of the fp32 kernels, the readable statement of
 * what each computes (shapes, summation order) and the oracle the tests
 * hold every backend of tensor.c to. Elsewhere, for a later read: the
 * twins of the fused ops and dropout (fused_ref.c, dropout.c), of the
 * tree's reductions (tensor_seg.c), of the decode step (tensor_decode.c)
 * and of the bf16 kernels (tensor_bf16.c).
 *
 * The twins are plain loops: a sum is `s += x * y` (a multiply, then an
 * add), where the kernels use a fused multiply-add and 16 lanes, so twin
 * and kernel agree to rounding, not to the bit; every backend of the
 * kernels agrees with every other to the bit. The twins run in parallel
 * only over independent output rows, so their bits do not depend on the
 * thread count either. No libm on any path whose bits matter: fmath.h. */
#include "kernels/tensor_ref.h"
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
            for (int j = 0; j < q; j++)
                ci[j] += aik * bk[j];
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
                ci[j] += aki * bk[j];
        }
    }
}

/* ---- attention ---- */

/* One query's probabilities and log-sum-exp (tensor_ref.h). */
float softmax_row_ref(float *s /* [nk] */, const float *q /* [hs] */,
                      const float *k0 /* key 0's [hs], rows ld apart */, size_t ld, int nk, int hs)
{
    float scale = 1.0f / sqrtf((float)hs), mx = -INFINITY, l = 0.0f;
    for (int j = 0; j < nk; j++) {
        float dot = 0.0f;
        for (int d = 0; d < hs; d++)
            dot += q[d] * k0[j * ld + d];
        s[j] = dot * scale;
        mx = s[j] > mx ? s[j] : mx;
    }
    for (int j = 0; j < nk; j++) {
        s[j] = fm_expf(s[j] - mx);
        l += s[j];
    }
    for (int j = 0; j < nk; j++)
        s[j] /= l;
    return mx + fm_logf(l);
}

void attention_masked_ref(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                          const float *qkv /* [B,T,3C] */, int B, int T, int C, int H,
                          const struct drop_mask *dm)
{
    int hs = C / H;
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        float *s = kmalloc(sizeof(float) * (size_t)T); /* [T] probabilities */
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            int b = bh / H, h = bh % H;
            const float *base = qkv + (size_t)b * T * 3 * C + 3 * hs * h; /* head's q, row 0 */
            for (int i = 0; i < T; i++) {
                const float *q = base + (size_t)i * 3 * C;         /* [hs] */
                float *o = out + ((size_t)b * T + i) * C + hs * h; /* [hs] */
                lse[(size_t)bh * T + i] =
                    softmax_row_ref(s, q, base + hs, 3 * (size_t)C, i + 1, hs);
                for (int j = 0; j <= i && dm; j++) /* the dropped probabilities */
                    s[j] *= kept_scale(dm, dm->rows[(size_t)b * T + i], h, T, j);
                for (int d = 0; d < hs; d++) {
                    float acc = 0.0f;
                    for (int j = 0; j <= i; j++)
                        acc += s[j] * base[(size_t)j * 3 * C + 2 * hs + d];
                    o[d] = acc;
                }
            }
        }
        free(s);
    }
}

void k_attention_ref(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                     const float *qkv /* [B,T,3C] */, int B, int T, int C, int H)
{
    attention_masked_ref(out, lse, qkv, B, T, C, H, NULL);
}

/* The backward pass of one (batch, head), recomputing the probabilities
 * from lse: P_ij = exp(s_ij - lse_i), D_i = dO_i.O_i,
 * dS_ij = P_ij (dO_i.V_j - D_i), dQ_i = scale sum_j dS_ij K_j,
 * dK_j = scale sum_i dS_ij Q_i, dV_j = sum_i P_ij dO_i. With dropout m_ij
 * (kept_scale) the output used P~ = P m: dV_j = sum_i P~_ij dO_i and
 * dS_ij = P_ij (dO_i.V_j m_ij - D_i), D_i still dO_i.O_i. rows [T]: the
 * batch's global rows (dropout only). */
static void attention_bwd_head_ref(float *dqkv /* [T,3C], head's q col */,
                                   const float *dout /* [T,C], head's col */,
                                   const float *qkv /* [T,3C], head's q col */,
                                   const float *out /* [T,C], head's col */,
                                   const float *lse /* [T] */, int T, int C, int hs,
                                   const struct drop_mask *dm, const int32_t *rows, int h)
{
    size_t ld3 = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int i = 0; i < T; i++)
        for (int d = 0; d < 3 * hs; d++)
            dqkv[i * ld3 + d] = 0.0f;
    for (int i = 0; i < T; i++) {
        const float *q = qkv + i * ld3, *g = dout + (size_t)i * C, *o = out + (size_t)i * C;
        float *dq = dqkv + i * ld3; /* [hs] */
        float D = 0.0f;
        for (int d = 0; d < hs; d++)
            D += g[d] * o[d];
        for (int j = 0; j <= i; j++) {
            const float *k = qkv + j * ld3 + hs, *v = qkv + j * ld3 + 2 * hs; /* [hs] each */
            float *dk = dqkv + j * ld3 + hs, *dv = dqkv + j * ld3 + 2 * hs;   /* [hs] each */
            float dot = 0.0f, dp = 0.0f;
            for (int d = 0; d < hs; d++) {
                dot += q[d] * k[d];
                dp += g[d] * v[d];
            }
            float kept = kept_scale(dm, dm ? rows[i] : 0, h, T, j);
            float pr = fm_expf(dot * scale - lse[i]);
            float ds = pr * (dp * kept - D);
            for (int d = 0; d < hs; d++) {
                dq[d] += scale * ds * k[d];
                dk[d] += scale * ds * q[d];
                dv[d] += pr * kept * g[d];
            }
        }
    }
}

void attention_bwd_masked_ref(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                              const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                              const float *lse /* [B,H,T] */, int B, int T, int C, int H,
                              const struct drop_mask *dm)
{
    int hs = C / H;
#pragma omp parallel for schedule(static) if ((long)B * T * T * C >= PAR_WORK)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        size_t r3 = (size_t)b * T * 3 * C + 3 * hs * h, r1 = (size_t)b * T * C + hs * h;
        attention_bwd_head_ref(dqkv + r3, dout + r1, qkv + r3, out + r1, lse + (size_t)bh * T, T, C,
                               hs, dm, dm ? dm->rows + (size_t)b * T : NULL, h);
    }
}

void k_attention_bwd_ref(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                         const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                         const float *lse /* [B,H,T] */, int B, int T, int C, int H)
{
    attention_bwd_masked_ref(dqkv, dout, qkv, out, lse, B, T, C, H, NULL);
}

/* ---- layernorm ---- */

void k_layernorm_ref(float *y /* [n,c] */, float *mean /* [n] */, float *rstd /* [n] */,
                     const float *x /* [n,c] */, const float *w /* [c] */, const float *b /* [c] */,
                     int n, int c)
{
#pragma omp parallel for schedule(static) if ((long)n * c >= PAR_WORK)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * c; /* [c] */
        float *yi = y + (size_t)i * c;       /* [c] */
        float mu = 0.0f, var = 0.0f;
        for (int j = 0; j < c; j++)
            mu += xi[j];
        mu /= (float)c;
        for (int j = 0; j < c; j++)
            var += (xi[j] - mu) * (xi[j] - mu);
        var /= (float)c;
        float rs = 1.0f / sqrtf(var + LN_EPS);
        for (int j = 0; j < c; j++)
            yi[j] = (xi[j] - mu) * rs * w[j] + b[j];
        mean[i] = mu;
        rstd[i] = rs;
    }
}

/* dx row by row; dw, db summed over the rows in order from 0. */
void k_layernorm_bwd_ref(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                         const float *dy /* [n,c] */, const float *x /* [n,c] */,
                         const float *w /* [c] */, const float *mean /* [n] */,
                         const float *rstd /* [n] */, int n, int c)
{
    for (int j = 0; j < c; j++)
        dw[j] = db[j] = 0.0f;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * c, *gi = dy + (size_t)i * c; /* [c] each */
        float *dxi = dx + (size_t)i * c;                               /* [c] */
        float mu = mean[i], rs = rstd[i], s1 = 0.0f, s2 = 0.0f;
        for (int j = 0; j < c; j++) {
            float xh = (xi[j] - mu) * rs, g = gi[j] * w[j];
            s1 += g;
            s2 += g * xh;
            dw[j] += gi[j] * xh;
            db[j] += gi[j];
        }
        s1 /= (float)c;
        s2 /= (float)c;
        for (int j = 0; j < c; j++) {
            float xh = (xi[j] - mu) * rs, g = gi[j] * w[j];
            dxi[j] = rs * (g - s1 - xh * s2);
        }
    }
}

/* ---- softmax cross-entropy ---- */

static int count_targets(const int32_t *targets /* [n] */, int n)
{
    int count = 0;
    for (int i = 0; i < n; i++)
        count += targets[i] >= 0;
    return count;
}

void k_xent_ref(float *loss /* [1] */, const float *logits /* [n,v] */,
                const int32_t *targets /* [n] */, int n, int v)
{
    double *row = kmalloc(sizeof(double) * (size_t)n); /* [n] */
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v; /* [v] */
        row[i] = 0.0;
        if (targets[i] < 0)
            continue;
        float mx = -INFINITY, s = 0.0f;
        for (int j = 0; j < v; j++)
            mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j < v; j++)
            s += fm_expf(x[j] - mx);
        row[i] = (double)(mx + fm_logf(s) - x[targets[i]]);
    }
    *loss = mean_loss(row, targets, n);
    free(row);
}

void k_xent_bwd_ref(float *dlogits /* [n,v] */, const float *logits /* [n,v] */,
                    const int32_t *targets /* [n] */, const float *dloss /* [1] */, int n, int v)
{
    int count = count_targets(targets, n);
    float scale = count ? dloss[0] / (float)count : 0.0f;
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v; /* [v] */
        float *dx = dlogits + (size_t)i * v;     /* [v] */
        float mx = -INFINITY, s = 0.0f;
        for (int j = 0; j < v; j++)
            mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j < v; j++)
            s += fm_expf(x[j] - mx);
        for (int j = 0; j < v; j++)
            dx[j] = targets[i] < 0 ? 0.0f : (fm_expf(x[j] - mx) / s - (j == targets[i])) * scale;
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

/* GELU, the tanh approximation, as x sigmoid(2u): 0.5 x (1 + tanh u) =
 * x e^u / (e^u + e^-u) = x / (1 + e^-2u). Unlike the other twins, these
 * give the kernels' bits exactly (an activation's few operations are
 * cheap to copy, and the model's every MLP runs them): each step below is
 * one IEEE operation in the kernels' order, with e^t computed as vec.h's
 * vexp does (exp_lane, base.c). fmaf is one exactly rounded operation, like
 * + and *, so it gives the same bits everywhere (vec.h's plain-C backend
 * uses it too). Where e^t leaves the float range (|t| > 88, |x| > ~10)
 * the result is saturated: s is 0 or 1 and the slope's second term 0, so
 * no inf * 0 makes a NaN however large x is. */
#define GELU_2C 1.59576912f /* 2 sqrt(2/pi) */
#define GELU_K 0.044715f
#define GELU_3K 0.134145f /* 3 GELU_K, u's slope */
#define GELU_SAT 88.0f    /* |t| beyond this: saturated */

/* t = -2u = (x (-2 sqrt(2/pi))) (x^2 K + 1): the sigmoid's argument, negated. */
static float gelu_t(float x)
{
    float x2 = x * x;
    return (x * -GELU_2C) * (x2 * GELU_K + 1.0f);
}

/* s = sigmoid(-t) = 1 / (1 + e^t), 0 where e^t overflows; *e = e^t. */
static float gelu_s(float t, float *e)
{
    *e = exp_lane(t);
    return t > GELU_SAT ? 0.0f : 1.0f / (1.0f + *e);
}

void k_gelu_ref(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float e;
        y[i] = x[i] * gelu_s(gelu_t(x[i]), &e);
    }
}

/* d/dx x s(x) = s + x s (1 - s) 2u', 2u' = 2 sqrt(2/pi) (3K x^2 + 1), with
 * 1 - s = e^t s (no cancellation where s is near 1). */
void k_gelu_bwd_ref(float *dx /* [n] */, const float *dy /* [n] */, const float *x /* [n] */,
                    size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float e, t = gelu_t(x[i]), s = gelu_s(t, &e);
        float slope = (x[i] * GELU_2C) * (x[i] * x[i] * GELU_3K + 1.0f);
        float term = slope * (s * (e * s));
        dx[i] = dy[i] * (s + (t > GELU_SAT || -t > GELU_SAT ? 0.0f : term));
    }
}

/* ---- sums over rows ---- */

void k_sum_rows_ref(float *out /* [q] */, const float *x /* [n,q] */, int n, int q)
{
    for (int j = 0; j < q; j++)
        out[j] = 0.0f;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < q; j++)
            out[j] += x[(size_t)i * q + j];
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
