/* kernels/tensor_seg.c: the twins of the reductions over rows done by the
 * tree (see kernels.h, "leaves and the tree"): the tree itself
 * (k_tree_sum_ref) and the *_seg twins, which make a sum over rows come
 * out the same on any number of cores. Each leaf is the plain twin of
 * tensor_ref.c over the leaf's rows (rows in order, from 0), and the
 * leaves' partials are combined by the tree (tree_finish, base.c). The
 * default step runs three of them in the reading mode (the weight
 * gradients of the matmuls, the biases and the embeddings). */
#include "kernels/tensor_ref.h"
#include <stdlib.h>
#include <string.h>

/* ---- leaves and the tree ---- */

/* out = the tree over parts[lo..hi-1]; out may be parts[lo] itself. */
static void tree_sum_ref(float *out /* [len] */, const float *const *parts /* m x [len] */, int lo,
                         int hi, size_t len)
{
    if (hi - lo == 1) {
        if (out != parts[lo])
            memcpy(out, parts[lo], sizeof(float) * len);
        return;
    }
    int mid = lo + (hi - lo) / 2;
    float *right = kmalloc(sizeof(float) * len); /* [len] */
    tree_sum_ref(out, parts, lo, mid, len);
    tree_sum_ref(right, parts, mid, hi, len);
    add_plain(out, right, len);
    free(right);
}

void k_tree_sum_ref(float *out /* [len] */, const float *const *parts /* m x [len] */, int m,
                    size_t len)
{
    if (m < 1)
        memset(out, 0, sizeof(float) * len);
    else
        tree_sum_ref(out, parts, 0, m, len);
}

/* ---- weight-gradient matmul ---- */

void k_matmul_tn_seg_ref(float *c /* [n,q] */, const float *a /* [p,n] */,
                         const float *b /* [p,q] */, int n, int p, int q, int seg)
{
    int L = leaf_count(p, seg);
    size_t nc = (size_t)n * q;
    float *part = kmalloc(sizeof(float) * (size_t)L * nc); /* [L,n,q] */
    for (int l = 0; l < L; l++) {
        int k0 = leaf_lo(l, p, seg), rows = leaf_hi(l, p, seg) - k0;
        k_matmul_tn_ref(part + (size_t)l * nc, a + (size_t)k0 * n, b + (size_t)k0 * q, n, rows, q);
    }
    tree_finish(add_plain, c, part, L, nc);
    free(part);
}

/* ---- layernorm ---- */

/* dx row by row as k_layernorm_bwd_ref; dw, db per leaf, then the tree. */
void k_layernorm_bwd_seg_ref(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                             const float *dy /* [n,c] */, const float *x /* [n,c] */,
                             const float *w /* [c] */, const float *mean /* [n] */,
                             const float *rstd /* [n] */, int n, int c, int seg)
{
    layernorm_bwd_any_ref(dx, dw, db, dy, x, w, mean, rstd, NULL, NULL, n, c, seg < 1 ? 0 : seg);
}

/* seg > 0: leaves and the tree; otherwise as k_layernorm_bwd_ref, by
 * ROW_BLOCK blocks. */
void k_layernorm_bwd_res_ref(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                             const float *dy /* [n,c] */, const float *x /* [n,c] */,
                             const float *w /* [c] */, const float *mean /* [n] */,
                             const float *rstd /* [n] */, const float *r1 /* [n,c] or NULL */,
                             const float *r2 /* [n,c] or NULL */, int n, int c, int seg)
{
    layernorm_bwd_any_ref(dx, dw, db, dy, x, w, mean, rstd, r1, r2, n, c, seg > 0 ? seg : -1);
}

/* ---- sums over rows ---- */

void k_sum_rows_seg_ref(float *out /* [q] */, const float *x /* [n,q] */, int n, int q, int seg)
{
    int L = leaf_count(n, seg);
    float *part = kmalloc(sizeof(float) * (size_t)L * q); /* [L,q] */
    for (int l = 0; l < L; l++) {
        int i0 = leaf_lo(l, n, seg);
        sum_rows_leaf_ref(part + (size_t)l * q, x, i0, leaf_hi(l, n, seg), q);
    }
    tree_finish(add_plain, out, part, L, (size_t)q);
    free(part);
}

/* ---- embedding ---- */

void k_embed_bwd_seg_ref(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                         const float *dy /* [n,c] */, int n, int c, int v, int seg)
{
    int L = leaf_count(n, seg);
    size_t cv = (size_t)c * v;
    float *part = kmalloc(sizeof(float) * (size_t)L * cv); /* [L,c,v] */
    for (int l = 0; l < L; l++) {
        int i0 = leaf_lo(l, n, seg);
        k_embed_bwd_ref(part + (size_t)l * cv, idx + i0, dy + (size_t)i0 * c,
                        leaf_hi(l, n, seg) - i0, c, v);
    }
    tree_finish(add_plain, dtable, part, L, cv);
    free(part);
}
