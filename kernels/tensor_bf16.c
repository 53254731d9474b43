/* tensor_bf16.c: the bf16 half of the kernels' contract (see kernels.h):
 * the plain-C twins of the bf16 kernels, built on the scalar model of the
 * matrix unit (bf16_model.c): rounding, matmul, weight gradients,
 * attention. tensor_ref.c holds the fp32 twins; a first read of the fp32
 * default path skips this file. */
#include "kernels/base.h"
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
