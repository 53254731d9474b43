/* kernels/base.c: the functions of the kernel layer's floor (base.h):
 * kernel scratch, the tree that combines the leaves of a reduction over
 * rows, Adam's constants, the mean of per-row losses, and e^x as one lane
 * of vec.h's vexp. Each is compiled once, here, and called by
 * the kernels of every backend and by the twins alike. */
#include "kernels/base.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/fmath.h"
#include "util/util.h"

void *kmalloc(size_t bytes) { return xaligned_alloc(bytes); }

/* ---- leaves and the tree ---- */

void add_plain(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dst[i] + src[i];
}

/* The tree over the arrays part[lo..hi-1] (each len floats, contiguous),
 * in place: the result lands in part[lo]. */
static void tree_inplace(add_fn *add, float *part /* [hi,len] */, int lo, int hi, size_t len)
{
    if (hi - lo < 2)
        return;
    int mid = lo + (hi - lo) / 2;
    tree_inplace(add, part, lo, mid, len);
    tree_inplace(add, part, mid, hi, len);
    add(part + (size_t)lo * len, part + (size_t)mid * len, len);
}

void tree_finish(add_fn *add, float *out /* [len] */, float *part /* [m,len] */, int m,
                 size_t len)
{
    if (m < 1) {
        memset(out, 0, sizeof(float) * len);
        return;
    }
    tree_inplace(add, part, 0, m, len);
    memcpy(out, part, sizeof(float) * len);
}

/* ---- Adam's constants ---- */

/* Bias corrections as torch computes them (in double), reduced to the two
 * floats the per-element update needs. */
struct adam_k adam_consts(float lr, float b1, float b2, float eps, int t)
{
    double bc1 = 1.0 - fm_powi((double)b1, t), bc2 = 1.0 - fm_powi((double)b2, t);
    struct adam_k k = {
        .omb1 = 1.0f - b1,
        .b2 = b2,
        .omb2 = 1.0f - b2,
        .eps = eps,
        .step = (float)(lr / bc1),
        .bc2s = (float)sqrt(bc2),
    };
    return k;
}

/* Sums per-row losses in row order, in double: the same total whatever
 * thread produced each row. No counted row gives 0, not 0/0. */
float mean_loss(const double *row /* [n] */, const int32_t *targets /* [n] */, int n)
{
    double total = 0.0;
    int count = 0;
    for (int i = 0; i < n; i++)
        if (targets[i] >= 0) {
            total += row[i];
            count++;
        }
    return count ? (float)(total / count) : 0.0f;
}

/* x rounded to an integer, nearest even, for |x| < 2^22: adding 1.5 2^23
 * lands where floats are integers, so the add rounds (vround's bits). */
static float round_even(float x) { return (x + 12582912.0f) - 12582912.0f; }

/* e^x as vec.h's vexp computes it, one lane: the same clamps, the same
 * split x = n ln2 + r, the same Taylor steps, so the twins that need the
 * kernels' exact bits (an activation's, tensor_ref.c) can have them. */
float exp_lane(float x)
{
    static const float taylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                    1.0f / 6,    0.5f,       1.0f,       1.0f};
    x = -87.0f > x ? -87.0f : x; /* vmax, then vmin: a NaN passes through */
    x = 88.0f < x ? 88.0f : x;
    float n = round_even(x * LOG2E);
    float r = fmaf(-n, LN2, x);
    r = fmaf(-n, -1.90465430e-9f, r); /* ln2's low part */
    float p = taylor[0];
    for (int k = 1; k < 8; k++)
        p = fmaf(p, r, taylor[k]);
    uint32_t bits = n == n ? (uint32_t)((int)n + 127) << 23 : 0x3f800000u; /* 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}
