/* kernels/base.c: the functions of the kernel layer's floor (base.h):
 * kernel scratch, a loop's items shared with stealing, the tree that
 * combines the leaves of a reduction over rows, Adam's constants, the mean
 * of per-row losses, and the vector kernels' order one lane at a time:
 * vsum's tree, vexp, vexp2 and vlog. Each is compiled
 * once, here, and called by the kernels of every backend and by the twins
 * alike. */
#include "kernels/base.h"
#include "kernels/vec.h" /* plain C here: exp2_poly, the one spelling of vexp2's fit */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/fmath.h"
#include "util/util.h"

void *kmalloc(size_t bytes) { return xaligned_alloc(bytes); }

/* ---- a loop's items, shared with stealing (base.h) ---- */

#define SHARE_LINE 64 /* bytes in a cache line */

/* A thread's remaining items [lo, hi) of one loop, packed in one word so
 * that its owner (from the front) and a thief (from the back) claim chunks
 * with one compare-and-swap each; a cache line apiece, so that an owner
 * claiming its own chunks touches no line another thread reads. */
struct share_slot {
    _Alignas(SHARE_LINE) _Atomic unsigned long long range;
};

struct share {
    int slots;                /* threads the items were shared among */
    int chunk;                /* items a claim takes, at most */
    struct share_slot slot[]; /* [loops][slots] */
};

static unsigned long long range_of(int lo, int hi)
{
    return (unsigned long long)(unsigned)lo << 32 | (unsigned)hi;
}

struct share *share_alloc(int n, int loops)
{
    int slots = omp_get_max_threads();
    size_t n_slots = (size_t)slots * (size_t)loops;
    struct share *s = kmalloc(sizeof *s + sizeof(struct share_slot) * n_slots);
    s->slots = slots;
    /* one thread (a redo team's attempt, a core of a board) has no one to
     * steal from it: its whole loop is one claim */
    s->chunk = slots == 1 ? (n > 1 ? n : 1)
                          : n / (SHARE_CHUNKS * slots) > 1 ? n / (SHARE_CHUNKS * slots) : 1;
    for (int l = 0; l < loops; l++)
        for (int t = 0; t < slots; t++) /* my_share's split */
            atomic_init(&s->slot[(size_t)l * slots + t].range,
                        range_of(share_bound(n, t, slots), share_bound(n, t + 1, slots)));
    return s;
}

/* Claims up to chunk items of slot v, from its front or its back. */
static int claim(struct share_slot *v, int chunk, int back, int *i0, int *i1)
{
    unsigned long long r = atomic_load(&v->range);
    for (;;) {
        int lo = (int)(r >> 32), hi = (int)(unsigned)r;
        if (lo >= hi)
            return 0;
        int k = hi - lo < chunk ? hi - lo : chunk;
        unsigned long long left = back ? range_of(lo, hi - k) : range_of(lo + k, hi);
        if (atomic_compare_exchange_weak(&v->range, &r, left)) { /* else r is reloaded */
            *i0 = back ? hi - k : lo;
            *i1 = *i0 + k;
            return 1;
        }
    }
}

int share_next(struct share *s, int loop, int *i0, int *i1)
{
    int chunk = s->chunk;
    struct share_slot *v = s->slot + (size_t)loop * s->slots;
    int me = omp_get_thread_num() % s->slots;
    if (claim(&v[me], chunk, 0, i0, i1))
        return 1;
    for (int d = 1; d < s->slots; d++) /* the others, from the next thread on */
        if (claim(&v[(me + d) % s->slots], chunk, 1, i0, i1))
            return 1;
    return 0;
}

/* ---- leaves and the tree ---- */

void add_plain(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dst[i] + src[i];
}

/* The tree over the arrays part[lo..hi-1] (each len floats, contiguous),
 * in place: the result lands in part[lo]. */
static void tree_inplace(add_fn *add_rows, float *part /* [hi,len] */, int lo, int hi, size_t len)
{
    if (hi - lo < 2)
        return;
    int mid = lo + (hi - lo) / 2;
    tree_inplace(add_rows, part, lo, mid, len);
    tree_inplace(add_rows, part, mid, hi, len);
    add_rows(part + (size_t)lo * len, part + (size_t)mid * len, len);
}

void tree_finish(add_fn *add_rows, float *out /* [len] */, float *part /* [m,len] */, int m,
                 size_t len)
{
    if (m < 1) {
        memset(out, 0, sizeof(float) * len);
        return;
    }
    tree_inplace(add_rows, part, 0, m, len);
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

/* Each leaf's losses summed in row order in double, divided by the count
 * and rounded once; the leaves added by the tree in float. Why divide
 * before the tree: a core of N holds count/N of the rows, so its leaves are
 * one core's times N exactly (scaling by a power of two commutes with
 * rounding), and the all-reduce's tree over the cores' losses, times 1/N,
 * gives one core's bits. Over one leaf: the row-order sum / count. No
 * counted row gives 0, not 0/0. */
float mean_loss(const double *row /* [n] */, const int32_t *targets /* [n] */, int n, int seg)
{
    int count = 0;
    for (int i = 0; i < n; i++)
        count += targets[i] >= 0;
    int leaves = leaf_count(n, seg);
    if (!count || !leaves)
        return 0.0f;
    float *part = kmalloc(sizeof(float) * (size_t)leaves); /* [leaves] */
    for (int l = 0; l < leaves; l++) {
        double total = 0.0;
        for (int i = leaf_lo(l, n, seg); i < leaf_hi(l, n, seg); i++)
            if (targets[i] >= 0)
                total += row[i];
        part[l] = (float)(total / count);
    }
    float loss;
    tree_finish(add_plain, &loss, part, leaves, 1);
    free(part);
    return loss;
}

/* ---- the vector kernels' order, one lane at a time ---- */

float lanes_sum(const float lane[LANES])
{
    float t[LANES / 2];
    for (int i = 0; i < 8; i++)
        t[i] = lane[i] + lane[i + 8];
    for (int i = 0; i < 4; i++)
        t[i] = t[i] + t[i + 4];
    for (int i = 0; i < 2; i++)
        t[i] = t[i] + t[i + 2];
    return t[0] + t[1];
}

/* x rounded to an integer, nearest even, for |x| < 2^22: adding 1.5 2^23
 * lands where floats are integers, so the add rounds (vround's bits). */
static float round_even(float x) { return (x + 12582912.0f) - 12582912.0f; }

/* p 2^n for an integer-valued n, clamped to [-126, 127] so 2^n is a
 * normal float, rounded once (vldexp's bits); a NaN n gives p 0. */
static float times_pow2(float p, float n)
{
    float k = n >= -126.0f ? (n <= 127.0f ? n : 127.0f) : -126.0f;
    uint32_t bits = n == n ? (uint32_t)((int32_t)k + 127) << 23 : 0;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* e^x as vec.h's vexp computes it, one lane: the same clamps, the same
 * split x = n ln2 + r, the same Taylor steps. */
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
    return times_pow2(p, n);
}

/* 2^x as vec.h's vexp2, one lane: x = n + f, |f| <= 1/2, 2^f by the
 * degree-6 fit exp2_poly (vec.h, highest power first), times 2^n. */
float exp2_lane(float x)
{
    x = -126.0f > x ? -126.0f : x; /* vmax: a NaN passes through */
    float n = round_even(x), f = x - n;
    float p = exp2_poly[0];
    for (int k = 1; k <= EXP2_POLY_DEG; k++)
        p = fmaf(p, f, exp2_poly[k]);
    return times_pow2(p, n);
}

/* ln x as vec.h's vlog, one lane, for positive normal x: x = m 2^e with
 * m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s), s = (m - 1)/(m + 1), by its
 * series to s^9, and e ln2 in two parts. */
float log_lane(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    float e = (float)((int32_t)(u >> 23) - 127), m;
    u = (u & 0x007fffffu) | 0x3f800000u;
    memcpy(&m, &u, sizeof m);
    if (m > 1.41421356f) {
        m = m * 0.5f; /* exact */
        e = e + 1.0f;
    }
    float f = m - 1.0f; /* exact */
    float s = f / (f + 2.0f);
    float s2 = s + s, z = s * s;
    float r = fmaf(z, 1.0f / 9, 1.0f / 7);
    r = fmaf(z, r, 1.0f / 5);
    r = fmaf(z, r, 1.0f / 3);
    float lnm = fmaf(s2, z * r, s2);
    return fmaf(e, 0.693145751953125f, fmaf(e, 1.42860682e-6f, lnm));
}
