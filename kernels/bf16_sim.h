/* kernels/bf16_sim.h: the bf16 simulation: the kernels that compute what
 * a TPU's bf16 matrix unit computes (k_round_bf16, k_matmul_bf16_emu, and
 * the bf16 kinds of k_matmul_tn_seg, k_attention and k_attention_bwd), on
 * the vector layer, every backend; and on AVX-512 with AVX512_BF16 the
 * same products on vdpbf16ps itself, with the same bits.
 *
 * Beside it: kernels/bf16_model.c is the scalar model of one vdpbf16ps
 * (bf16_dot), the bits this file is held to; kernels/tensor_bf16.c holds
 * these kernels' plain-C twins.
 *
 *   rounding           round_bf16
 *   the tiles          struct bfmm: a block of c from operands made ready
 *                      (rounded floats, or packed pairs natively)
 *   emulated matmul    FMAs in vdpbf16ps's order, every backend
 *   native matmul      vdpbf16ps (AVX-512 only)
 *   weight gradients   one leaf for tensor.c's fp32 tree (tn_leaf_bf16)
 *   attention          every product on the tiles, the softmax in fp32
 *
 * A header because it is part of tensor.c's object, compiled once per
 * backend with its -m flags: tensor.c includes it (and nothing else does),
 * its table names these kernels, and the Makefile gives each function its
 * backend's name (matmul_bf16_emu_avx2). It uses the machinery of
 * kernels/tiles.h and a head's layouts from kernels/attention_layout.h,
 * never tensor.c itself. */
#ifndef KERNELS_BF16_SIM_H
#define KERNELS_BF16_SIM_H
#include "kernels/tiles.h"
#include "kernels/attention_layout.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Contract (kernels/bf16_model.c): operands rounded to bf16 as
 * vcvtneps2bf16 does, and each dot product summed the way one vdpbf16ps
 * per pair of k sums it. */

/* ---- rounding ---- */

/* One thread's rounding. Kernels call it on a few dozen floats at a time:
 * even a parallel construct whose if() is false costs a microsecond. */
static void round_span(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    FOR_VECTORS(n, i, w, vstore_n(y + i, vbf16(vload_n(x + i, w)), w))
}

static void round_bf16(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    enum { CHUNK = 4096 };
    if (n < 4 * PAR_WORK) {
        round_span(y, x, n);
        return;
    }
    long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        size_t i = (size_t)c * CHUNK;
        round_span(y + i, x + i, n - i < CHUNK ? n - i : CHUNK);
    }
}

/* ---- the tiles' arguments ---- */

/* Rows of A made ready (rounded or packed) at a time: every tile height
 * used below divides it. */
#define BF_RB 24

/* Everything a bf16 tile needs. A block's rows are in ab in ready form
 * (rounded floats, or packed pairs on the native path), zero past p; B is
 * ready in bb (stride ldb >= q, zero past q and past p). A's element
 * (row r, k) is at ab[r*sar + k*sak]: (lda, 1) for a @ b, (1, lda) for
 * a^T b, whose a is packed the way b is. */
struct bfmm {
    float *c;            /* [n,q] */
    float *raw;          /* emulated, with an epilogue: the block's sums before it, [BF_RB,q] */
    float *scratch;      /* emulated: raw's home when c shares memory with r1, r2 or gate */
    unsigned csr;        /* emulated: the caller's floating-point mode, outside the flush */
    const void *ab, *bb; /* float [.,.] and [pe,ldb], or uint32 pairs [.,.] and [p2,ldb] */
    const float *bias, *r1, *r2, *gate; /* the epilogue's, as struct mm's */
    int relu, n, p, q;
    int resume; /* sums go on from c (a later pass over k), not from bias or 0 */
    size_t sar, sak, ldb;
};

/* Column panels of at most maxv vectors, split evenly so that q = 96 runs
 * as 3 + 3 vectors, not 4 + 2. *v0 is panel t's first vector, the return
 * value its width in vectors. */
static int bf_panel(int q, int maxv, int t, int *v0)
{
    int nv = (q + VL - 1) / VL, np = (nv + maxv - 1) / maxv, base = nv / np, extra = nv % np;
    *v0 = t * base + min_int(t, extra);
    return base + (t < extra);
}

static int bf_panels(int q, int maxv) { return ((q + VL - 1) / VL + maxv - 1) / maxv; }

/* Rows [i0, i0+rows) of c, A's rows from ab's row 0, in column panels of
 * at most maxv vectors; a panel of V vectors runs as tiles of hV rows, the
 * rows left over one by one (a tile's height changes no bits). A macro so
 * that R and V are constants inside each tile. */
#define BF_ROWS(tile, m, i0, rows, maxv, h1, h2, h3, h4)                                       \
    do {                                                                                       \
        for (int pn_ = 0; pn_ < bf_panels((m)->q, maxv); pn_++) {                              \
            int v0_, V_ = bf_panel((m)->q, maxv, pn_, &v0_), j_ = VL * v0_;                    \
            int tl_ = min_int((m)->q - j_, VL * V_) - VL * (V_ - 1);                           \
            int R_ = V_ == 1 ? (h1) : V_ == 2 ? (h2) : V_ == 3 ? (h3) : (h4), r_ = 0;          \
            for (; r_ + R_ <= (rows); r_ += R_)                                                \
                BF_TILE_V(tile, m, (i0) + r_, r_, j_, V_, tl_, h1, h2, h3, h4);                \
            for (; r_ < (rows); r_++)                                                          \
                BF_TILE_V(tile, m, (i0) + r_, r_, j_, V_, tl_, 1, 1, 1, 1);                    \
        }                                                                                      \
    } while (0)
/* BF_ROWS with BF_H's four heights spelled out first. */
#define BF_ROWS_EXPANDED(...) BF_ROWS(__VA_ARGS__)
#define BF_TILE_V(tile, m, i, bi, j, V, tl, h1, h2, h3, h4)                                    \
    switch (V) {                                                                               \
    case 1: tile(m, i, bi, j, (h1), 1, tl); break;                                             \
    case 2: tile(m, i, bi, j, (h2), 2, tl); break;                                             \
    case 3: tile(m, i, bi, j, (h3), 3, tl); break;                                             \
    default: tile(m, i, bi, j, (h4), 4, tl); break;                                            \
    }

/* The scalar fallback of the emulated tiles: rows [i, i+R) x cols [j, j1)
 * of one block, from the same rounded floats, by bf16_dot; the sums go
 * where the vector tile's would (raw, for the block's epilogue, or c). */
static void bf_tile_exact(const struct bfmm *m, int i, int bi, int R, int j, int j1)
{
    const float *ab = m->ab, *bb = m->bb;
    for (int r = 0; r < R; r++)
        for (int col = j; col < j1; col++) {
            size_t at = (size_t)(i + r) * m->q + col;
            float init = m->resume ? m->c[at] : m->bias ? m->bias[col] : 0.0f;
            float y = bf16_dot(init, ab + (size_t)(bi + r) * m->sar, m->sak, bb + col, m->ldb, m->p);
            if (m->raw)
                m->raw[(size_t)(bi + r) * m->q + col] = y;
            else
                m->c[at] = y;
        }
}

/* Rounds b[p,q] (row stride lds) into bb[pe,ldb] (pe = p rounded up to
 * even), zero-padded: the emulated paths' operands. Rows back to back in
 * both (the model's widths) go as one span: a row of 32 floats is too
 * short to pay for a call of its own. */
static void bf_round_b(float *bb, const float *b, size_t lds, int p, int q, size_t ldb)
{
    if (lds == (size_t)q && ldb == (size_t)q)
        round_span(bb, b, (size_t)p * (size_t)q);
    else
        for (int k = 0; k < p; k++) {
            float *row = bb + (size_t)k * ldb;
            round_span(row, b + (size_t)k * lds, (size_t)q);
            if (ldb > (size_t)q)
                memset(row + q, 0, sizeof(float) * (ldb - (size_t)q));
        }
    if (p & 1) /* the odd last row's partner */
        memset(bb + (size_t)p * ldb, 0, sizeof(float) * ldb);
}

/* ---- the emulated matmul, every backend ---- */

/* A plain FMA per step gives vdpbf16ps's bits as long as no step result is
 * tiny (|r| <= 2^-126, nonzero: flushing and the rounding boundary), no
 * accumulator starts denormal, and nothing is NaN (payload choice). On
 * x86 the hardware flushes and reads denormals as zero just as the
 * instruction does (vflush_begin); elsewhere the tiles track the smallest
 * 2*bits(r) - 1 (vtrack) and recompute a whole tile exactly by bf16_dot
 * when it saw either. A NaN sends the tile to bf16_dot everywhere; on real
 * data that never happens. B is the first multiplicand, as the
 * instruction's. The tile runs inside its block's flush (bf_block_emu: two
 * changes of mode a tile cost a tenth of the kernel's time) and leaves its
 * sums in raw when the block has an epilogue, which runs after the flush. */
VINLINE void bf_tile_emu(const struct bfmm *m, int i, int bi, int j, int R, int V, int last)
{
    const float *ab = (const float *)m->ab + (size_t)bi * m->sar, *bb = (const float *)m->bb + j;
    vf acc[24][4]; /* [R][V]: two indices, as mm_tile's, keep clang's tile in registers */
    vu lo[BF_TRACKERS];
UNROLL(4)
    for (int t = 0; t < BF_TRACKERS; t++)
        lo[t] = vtrack_init();
UNROLL(4)
    for (int v = 0; v < V; v++) {
        int w = v < V - 1 ? VL : last;
        vf init = m->bias ? vload_n(m->bias + j + VL * v, w) : vzero();
UNROLL(24)
        for (int r = 0; r < R; r++) { /* a denormal start must be read as zero */
            vf start = m->resume ? vload_n(m->c + (size_t)(i + r) * m->q + j + VL * v, w) : init;
            acc[r][v] = vpin(start); /* made after the block's vflush_begin: so is every FMA */
            if (!VEC_HW_FLUSH)
                lo[0] = vtrack(lo[0], acc[r][v]);
        }
    }
    int pe = m->p + (m->p & 1);
    for (int k = 0; k < pe; k += 2)
UNROLL(2)
        for (int h = 1; h >= 0; h--) { /* the hi element of the pair first */
            const float *bk = bb + (size_t)(k + h) * m->ldb;
            vf bv[4];
UNROLL(4)
            for (int v = 0; v < V; v++)
                bv[v] = vload(bk + VL * v);
UNROLL(24)
            for (int r = 0; r < R; r++) {
                vf av = vset(ab[(size_t)r * m->sar + (size_t)(k + h) * m->sak]);
UNROLL(4)
                for (int v = 0; v < V; v++) {
                    acc[r][v] = vfma(bv[v], av, acc[r][v]);
                    if (!VEC_HW_FLUSH)
                        lo[(r * V + v) % BF_TRACKERS] =
                            vtrack(lo[(r * V + v) % BF_TRACKERS], acc[r][v]);
                }
            }
        }
UNROLL(24)
    for (int r = 0; r < R; r++) /* every sum made before the flush ends or pauses */
UNROLL(4)
        for (int v = 0; v < V; v++)
            acc[r][v] = vpin(acc[r][v]);
    vu least = lo[0];
UNROLL(4)
    for (int t = 1; t < BF_TRACKERS; t++)
        least = vtrack_min(least, lo[t]);
    vm nan = vlanes(0);
UNROLL(24)
    for (int r = 0; r < R; r++)
UNROLL(4)
        for (int v = 0; v < V; v++)
            nan = vmor(nan, vnan(acc[r][v]));
    if ((!VEC_HW_FLUSH && vtrack_tiny(least)) || vmany(nan)) {
        vflush_end(m->csr); /* bf16_dot models the flush in software */
        bf_tile_exact(m, i, bi, R, j, min_int(j + VL * V, m->q));
        vflush_begin();
        return;
    }
    float *out = m->raw ? m->raw + (size_t)bi * m->q : m->c + (size_t)i * m->q;
UNROLL(24)
    for (int r = 0; r < R; r++)
UNROLL(4)
        for (int v = 0; v < V; v++)
            vstore_n(out + (size_t)r * m->q + j + VL * v, acc[r][v], v < V - 1 ? VL : last);
}

/* c's rows [i0, i0+rows) = the epilogue of the block's sums in raw:
 * elementwise, so c may share memory with r1, r2 or gate. */
static void bf_epilogue_rows(const struct bfmm *m, int i0, int rows)
{
    size_t e0 = (size_t)i0 * m->q, n = (size_t)rows * m->q, i = 0;
    for (; i + VL <= n; i += VL) /* whole vectors: no lane masks to build */
        vstore(m->c + e0 + i,
               mm_epilogue(vload(m->raw + i), m->relu, m->gate, m->r1, m->r2, e0 + i, VL));
    if (i < n) {
        int w = (int)(n - i);
        vstore_n(m->c + e0 + i,
                 mm_epilogue(vload_n(m->raw + i, w), m->relu, m->gate, m->r1, m->r2, e0 + i, w),
                 w);
    }
}

/* Rows [i0, i0+rows) of c, A's rows from ab's row 0: the sums in one
 * flush, then the epilogue (if any) outside it. */
static void bf_block_emu(const struct bfmm *m, int i0, int rows)
{
    struct bfmm in = *m;
    int epilogue = in.relu || in.gate || in.r1 || in.r2; /* the bias is where the sums start */
    in.raw = !epilogue ? NULL : in.scratch ? in.scratch : in.c + (size_t)i0 * in.q;
    if (in.raw && i0 + rows < in.n) { /* the next block's epilogue rows, a block ahead */
        const float *const epi[] = {in.r1, in.r2, in.gate};
        int next = min_int(in.n, i0 + 2 * rows);
        for (int e = 0; e < 3; e++)
            if (epi[e])
                prefetch_rows(epi[e], (size_t)in.q, i0 + rows, next, in.q);
    }
    in.csr = vflush_begin();
    BF_ROWS_EXPANDED(bf_tile_emu, &in, i0, rows, BF_V, BF_H);
    vflush_end(in.csr);
    if (in.raw)
        bf_epilogue_rows(&in, i0, rows);
}

/* 1 when c[n,q] shares memory with any of x, y, z ([n,q] or NULL). */
static int shares(const float *c, int n, int q, const float *x, const float *y, const float *z)
{
    const float *const in[] = {x, y, z};
    uintptr_t c0 = (uintptr_t)c, c1 = (uintptr_t)(c + (size_t)n * q);
    for (int e = 0; e < 3; e++)
        if (in[e] && (uintptr_t)in[e] < c1 && (uintptr_t)(in[e] + (size_t)n * q) > c0)
            return 1;
    return 0;
}

/* B rounded to bf16 once, then blocks of A's rows rounded and multiplied,
 * a block a thread at a time. With an epilogue, a block's sums wait in c
 * (in scratch when c is also an input of the epilogue) and the epilogue
 * runs over them once the flush has ended. */
static void matmul_bf16_emu(float *c /* [n,q] */, const float *a /* [n,p] */,
                            const float *b /* [p,q] */, const float *bias /* [q] or NULL */,
                            const float *r1 /* [n,q] or NULL */, const float *r2 /* [n,q] or NULL */,
                            const float *gate /* [n,q] or NULL */, int relu, int n, int p, int q)
{
    struct bfmm m = {.c = c, .bias = bias, .r1 = r1, .r2 = r2, .gate = gate, .relu = relu,
                     .n = n, .p = p, .q = q};
    if (n <= 0 || q <= 0)
        return;
    int pe = p + (p & 1), blocks = (n + BF_RB - 1) / BF_RB;
    size_t lda = (size_t)pe;
    m.sar = lda, m.sak = 1;
    m.ldb = (size_t)round16(q);
    float *bb = kmalloc(sizeof(float) * ((size_t)pe * m.ldb));
    bf_round_b(bb, b, (size_t)q, p, q, m.ldb);
    m.bb = bb;
    struct share *sh = share_alloc(blocks, 1); /* the row blocks, shared with stealing */
#pragma omp parallel if ((long)n * p * q >= PAR_WORK)
    {
        float *ab = kmalloc(sizeof(float) * BF_RB * lda);
        struct bfmm mine = m;
        mine.ab = ab;
        mine.scratch = shares(c, n, q, r1, r2, gate)
                           ? kmalloc(sizeof(float) * BF_RB * (size_t)q) : NULL;
        int t0, t1;
        while (share_next(sh, 0, &t0, &t1))
            for (int t = t0; t < t1; t++) {
                int i0 = t * BF_RB, rows = min_int(BF_RB, n - i0);
                bf_round_b(ab, a + (size_t)i0 * p, (size_t)p, rows, p, lda);
                bf_block_emu(&mine, i0, rows);
            }
        free(mine.scratch);
        free(ab);
    }
    free(sh);
    free(bb);
}

/* ---- native, vdpbf16ps (AVX-512 with AVX512_BF16 only) ---- */

#if defined(VEC_AVX512)
/* The one place below the vector layer: an instruction only one backend
 * has. Its bits equal the emulation's (the tests hold them together). */
#define T_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))
#define INLINE_BF16 VINLINE T_BF16

/* B as the instruction wants it: pairs [p2,ldb] of (b[2j][col] in the low
 * half, b[2j+1][col] in the high half), zero past p and q; b's rows lds
 * apart. vcvtne2ps2bf16 puts one row's 16 values after the other's; vpermw
 * interleaves them into 16 pairs. */
T_BF16 static void bf_pack_b(uint32_t *bp, const float *b, size_t lds, int p, int q, size_t ldb)
{
    static const uint16_t pairs[32] = {0, 16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                       21, 6, 22, 7,  23, 8,  24, 9,  25, 10, 26,
                                       11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(pairs);
    int p2 = (p + 1) / 2;
    for (int jp = 0; jp < p2; jp++) {
        const float *lo = b + (size_t)2 * jp * lds, *hi = 2 * jp + 1 < p ? lo + lds : NULL;
        for (size_t j = 0; j < ldb; j += 16) {
            __mmask16 have = vlanes(q - (int)j);
            __m512 l = _mm512_maskz_loadu_ps(have, lo + j);
            __m512 h = hi ? _mm512_maskz_loadu_ps(have, hi + j) : _mm512_setzero_ps();
            __m512i both = (__m512i)_mm512_cvtne2ps_pbh(h, l);
            _mm512_storeu_si512(bp + (size_t)jp * ldb + j, _mm512_permutexvar_epi16(idx, both));
        }
    }
}

/* Rows [i0, i0+R) of a[.,p] (rows lds apart) as pairs [R,lda] (lda a
 * multiple of 16 >= p2), zero past p: 32 floats make 16 pairs in one
 * vcvtne2ps2bf16. */
T_BF16 static void bf_pack_a(uint32_t *ap, const float *a, size_t lds, int i0, int R, int p,
                             size_t lda)
{
    for (int r = 0; r < R; r++) {
        const float *ar = a + (size_t)(i0 + r) * lds;
        for (size_t k = 0; k < 2 * lda; k += 32) {
            int have = p - (int)k;
            __m512 lo = _mm512_maskz_loadu_ps(vlanes(have), ar + k);
            __m512 hi = _mm512_maskz_loadu_ps(vlanes(have - 16), ar + k + 16);
            _mm512_storeu_si512(ap + (size_t)r * lda + k / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

INLINE_BF16 void bf_tile_native(const struct bfmm *m, int i, int bi, int j, int R, int V, int last)
{
    const uint32_t *ap = (const uint32_t *)m->ab + (size_t)bi * m->sar;
    const uint32_t *bp = (const uint32_t *)m->bb + j;
    __m512 acc[24];
UNROLL(4)
    for (int v = 0; v < V; v++) {
        int w = v < V - 1 ? VL : last;
        __m512 init = m->bias ? vload_n(m->bias + j + VL * v, w) : vzero();
UNROLL(24)
        for (int r = 0; r < R; r++)
            acc[r * V + v] =
                m->resume ? vload_n(m->c + (size_t)(i + r) * m->q + j + VL * v, w) : init;
    }
    int p2 = (m->p + 1) / 2;
    for (int k = 0; k < p2; k++) {
        const uint32_t *bk = bp + (size_t)k * m->ldb;
        __m512i bv[4];
UNROLL(4)
        for (int v = 0; v < V; v++)
            bv[v] = _mm512_loadu_si512(bk + VL * v);
UNROLL(24)
        for (int r = 0; r < R; r++) {
            __m512i av = _mm512_set1_epi32((int)ap[(size_t)r * m->sar + (size_t)k * m->sak]);
UNROLL(4)
            for (int v = 0; v < V; v++)
                acc[r * V + v] = _mm512_dpbf16_ps(acc[r * V + v], (__m512bh)bv[v], (__m512bh)av);
        }
    }
UNROLL(24)
    for (int r = 0; r < R; r++) {
        size_t at = (size_t)(i + r) * m->q + j;
UNROLL(4)
        for (int v = 0; v < V; v++) {
            int w = v < V - 1 ? VL : last;
            size_t e = at + VL * v;
            vstore_n(m->c + e, mm_epilogue(acc[r * V + v], m->relu, m->gate, m->r1, m->r2, e, w),
                     w);
        }
    }
}

/* 16 to 24 accumulators (12 when q <= 16): vdpbf16ps needs 16 in flight
 * to reach its peak here; taller tiles run out of registers. */
T_BF16 static void bf_block_native(const struct bfmm *m, int i0, int rows)
{
    BF_ROWS(bf_tile_native, m, i0, rows, 4, 12, 8, 8, 6);
}

static void matmul_bf16_native(float *c /* [n,q] */, const float *a /* [n,p] */,
                               const float *b /* [p,q] */, const float *bias /* [q] or NULL */,
                               const float *r1 /* [n,q] or NULL */,
                               const float *r2 /* [n,q] or NULL */,
                               const float *gate /* [n,q] or NULL */, int relu, int n, int p, int q)
{
    struct bfmm m = {.c = c, .bias = bias, .r1 = r1, .r2 = r2, .gate = gate, .relu = relu,
                     .n = n, .p = p, .q = q};
    if (n <= 0 || q <= 0)
        return;
    int p2 = (p + 1) / 2, blocks = (n + BF_RB - 1) / BF_RB;
    size_t lda = (size_t)round16(p2);
    m.sar = lda, m.sak = 1;
    m.ldb = (size_t)round16(q);
    uint32_t *bp = kmalloc(sizeof(uint32_t) * ((size_t)p2 * m.ldb));
    bf_pack_b(bp, b, (size_t)q, p, q, m.ldb);
    m.bb = bp;
    struct share *sh = share_alloc(blocks, 1); /* the row blocks, shared with stealing */
#pragma omp parallel if ((long)n * p * q >= PAR_WORK)
    {
        uint32_t *ap = kmalloc(sizeof(uint32_t) * BF_RB * lda);
        struct bfmm mine = m;
        mine.ab = ap;
        int t0, t1;
        while (share_next(sh, 0, &t0, &t1))
            for (int t = t0; t < t1; t++) {
                int i0 = t * BF_RB, rows = min_int(BF_RB, n - i0);
                bf_pack_a(ap, a, (size_t)p, i0, rows, p, lda);
                bf_block_native(&mine, i0, rows);
            }
        free(ap);
    }
    free(sh);
    free(bp);
}

/* a^T b: both operands packed as pairs along the leaf's rows, 8 x 3
 * vectors of accumulators at most. */
T_BF16 static void bf_tn_native(struct bfmm *m, const float *a, size_t lds_a, const float *b,
                                int r0, int r1)
{
    bf_pack_b((uint32_t *)m->bb, b, (size_t)m->q, m->p, m->q, m->ldb);
    bf_pack_b((uint32_t *)m->ab, a, lds_a, m->p, r1 - r0, m->sak);
    BF_ROWS(bf_tile_native, m, r0, r1 - r0, 3, 8, 8, 8, 6); /* 4 vectors: never, maxv 3 */
}
#define MATMUL_BF16_NATIVE matmul_bf16_native
#else
#define MATMUL_BF16_NATIVE NULL
#endif

/* ---- weight gradients, one leaf for the fp32 tree ---- */

/* a^T b over rows of a leaf: a [p,r1-r0] and b [p,q] (row strides lds_a
 * and q) rounded into m's A and B, then c's rows [r0, r1). */
static void bf_tn_emu(struct bfmm *m, const float *a, size_t lds_a, const float *b, int r0, int r1)
{
    bf_round_b((float *)m->bb, b, (size_t)m->q, m->p, m->q, m->ldb);
    bf_round_b((float *)m->ab, a, lds_a, m->p, r1 - r0, m->sak);
    m->csr = vflush_begin(); /* no epilogue: the sums go straight to c */
    BF_ROWS_EXPANDED(bf_tile_emu, m, r0, r1 - r0, BF_V < 3 ? BF_V : 3, BF_H);
    vflush_end(m->csr);
}

/* bf16 weight gradients: rows of a leaf packed BF_TN_K at a time (even, so
 * a pair never straddles two packings), c's rows shared between threads
 * in units of BF_TN_MR. */
#define BF_TN_K 256
#define BF_TN_MR 8

/* One leaf of rows [k0, k1) is exactly the bf16 matmul of a[k0:k1]^T and
 * b[k0:k1] with no bias: its pairs are rows (k0, k0+1), (k0+2, k0+3), ...,
 * restarting at each leaf, so that a core's shard of whole leaves computes
 * the same partials and the fp32 tree above (tensor.c's matmul_tn_seg)
 * combines them unchanged. g holds a [p,n] and b [p,q]; a's columns are
 * c's rows; this thread's share, [r0, r1), is packed like b, so that row
 * r's pair k is at ab[r + k*lda]. BF_TN_K rows at a time: the packing (in
 * pack, the thread's [BF_TN_K, round16(q) + round16(n)] floats) stays in
 * cache and the later passes resume from c. native: on vdpbf16ps. */
static void tn_leaf_bf16(float *dst /* [n,q] */, const struct mm *g, int n, int r0, int r1,
                         void *pack, int native, int k0, int k1)
{
    int q = g->q;
    size_t ldb = (size_t)round16(q), lda = (size_t)round16(r1 - r0);
    struct bfmm m = {.c = dst, .q = q, .sar = 1, .sak = lda, .ldb = ldb};
    m.bb = pack;                                 /* [BF_TN_K, ldb] at most */
    m.ab = (const float *)pack + BF_TN_K * ldb; /* [BF_TN_K, lda] at most */
    for (int k = k0; k < k1; k += BF_TN_K) {
        const float *a = g->a + (size_t)k * n + r0, *b = g->b + (size_t)k * q;
        m.p = min_int(BF_TN_K, k1 - k);
        m.resume = k > k0;
#if defined(VEC_AVX512)
        if (native) {
            bf_tn_native(&m, a, (size_t)n, b, r0, r1);
            continue;
        }
#endif
        bf_tn_emu(&m, a, (size_t)n, b, r0, r1);
    }
}

/* ---- attention on the tiles ---- */

/* Attention in bf16 (k_attention_bf16's contract) as a TPU runs it: every
 * product on the matrix unit, here the tiles above, and the softmax
 * between them in fp32. A thread rounds a batch's q, k, v (and dO) once,
 * like the fp32 kernels' inputs; every product's operands are then views
 * of rounded floats, which the emulated tiles read in place and the
 * native ones read packed into pairs (bf_opnd). P and dS are rounded as
 * they are made. */

/* An operand made ready: element k of row r of A's rows at
 * at + r*ld + k (bf_rows), or row k of a column-form operand (B, or A
 * as the transpose of rows) at at + k*ld (bf_cols); packed natively,
 * where k counts pairs (so k, k0 even) and ld is in pairs. */
struct bf_opnd {
    const float *at;
    size_t ld;
    int pairs;
};

/* rows [rows,p] (lds apart) as A's rows; native: packed into buf,
 * [rows, round16(p2)] */
static struct bf_opnd bf_rows(const float *src, size_t lds, int rows, int p, float *buf,
                              int native)
{
#if defined(VEC_AVX512)
    if (native) {
        size_t ld = (size_t)round16((p + 1) / 2);
        bf_pack_a((uint32_t *)buf, src, lds, 0, rows, p, ld);
        return (struct bf_opnd){buf, ld, 1};
    }
#endif
    (void)rows, (void)p, (void)buf, (void)native;
    return (struct bf_opnd){src, lds, 0};
}

/* src [p,q] (lds apart) in column form; native: packed into buf,
 * [p2, round16(q)] */
static struct bf_opnd bf_cols(const float *src, size_t lds, int p, int q, float *buf, int native)
{
#if defined(VEC_AVX512)
    if (native) {
        size_t ld = (size_t)round16(q);
        bf_pack_b((uint32_t *)buf, src, lds, p, q, ld);
        return (struct bf_opnd){buf, ld, 1};
    }
#endif
    (void)p, (void)q, (void)buf, (void)native;
    return (struct bf_opnd){src, lds, 0};
}

/* Row k (even) of a column-form operand. */
static const float *bf_row_at(struct bf_opnd o, int k)
{
    return o.at + (size_t)(o.pairs ? k / 2 : k) * o.ld;
}

#if defined(VEC_AVX512)
T_BF16 static void bf_product_native(const struct bfmm *m)
{
    BF_ROWS_EXPANDED(bf_tile_native, m, 0, m->n, 4, BF_ATT_H);
}
#endif

/* c[n,q] (rows q apart) = A B: A from row a0 of a's rows (a_cols 0), or
 * the transpose of a column-form operand from its row a0 (a_cols 1); B
 * from row b0 and column j0 of b; the sums from zero or (resume) from c.
 * By the calling thread; the emulation in a flush of its own, so that the
 * fp32 work around it keeps its denormals. An odd p reads element p of A
 * and row p of B: the callers make one zero and the other finite, as the
 * zero partner bf16_dot pairs an odd last element with. */
static void bf_product(float *c, struct bf_opnd a, int a_cols, int a0, struct bf_opnd b, int b0,
                       int j0, int n, int p, int q, int resume)
{
    struct bfmm m = {.c = c, .n = n, .p = p, .q = q, .resume = resume};
    m.ab = a_cols ? bf_row_at(a, a0) : a.at + (size_t)a0 * a.ld;
    m.sar = a_cols ? 1 : a.ld, m.sak = a_cols ? a.ld : 1;
    m.bb = bf_row_at(b, b0) + j0, m.ldb = b.ld;
#if defined(VEC_AVX512)
    if (a.pairs) {
        bf_product_native(&m);
        return;
    }
#endif
    m.csr = vflush_begin();
    BF_ROWS_EXPANDED(bf_tile_emu, &m, 0, n, BF_V, BF_ATT_H);
    vflush_end(m.csr);
}

/* A thread's scratch, carved from one allocation (with base NULL it only
 * counts): a batch's rounded q, k, v and dO, each with a zero row past
 * the last (the odd last element's partner) and 16 floats more (the
 * tiles' loads past a head's last channel), then one head's buffers. */
struct bf_att_bufs {
    float *rq, *rd;                             /* [T+1,3C]+16, [T+1,C]+16 */
    float *qt, *sc, *ot;                        /* forward */
    float *kt, *vt, *s, *dp, *pw, *ds, *dq, *D, *tv, *tk; /* backward */
    float *pk[8];                               /* native: packed operands */
};

static float *bf_take(float *base, size_t *at, size_t n)
{
    float *p = base ? base + *at : NULL;
    *at += n;
    return p;
}

/* A native pack: the largest of the forms packed, A's rows or the column
 * form of [T,hs] or [T,16] (whole vectors of pairs), [hs,T] (tp a row) and
 * the group's dS rows. */
static size_t bf_pack_floats(int T, int hs)
{
    size_t rows = (size_t)(T + 2) * round16(hs > VL ? hs : VL);
    size_t keys = (size_t)(hs + 1) * key_stride(T);
    size_t group = (size_t)T * round16((ds_group(T) + 1) / 2);
    size_t most = rows > keys ? rows : keys;
    return most > group ? most : group;
}

static size_t bf_att_carve(struct bf_att_bufs *b, float *base, int T, int C, int hs, int bwd,
                           int native)
{
    size_t at = 0, rows = (size_t)T + 1, tp = (size_t)key_stride(T);
    b->rq = bf_take(base, &at, rows * 3 * C + VL);
    b->rd = bf_take(base, &at, bwd ? rows * C + VL : 0);
    if (!bwd) {
        b->qt = bf_take(base, &at, VL * (size_t)(hs + 1)); /* [hs+1,16] a block's Q^T */
        b->sc = bf_take(base, &at, VL * rows);             /* [T+1,16] S^T, then P^T */
        b->ot = bf_take(base, &at, VL * (size_t)hs);       /* [hs,16] O^T */
    } else {
        b->kt = bf_take(base, &at, (size_t)(hs + 1) * tp); /* [hs+1,tp] K^T */
        b->vt = bf_take(base, &at, (size_t)(hs + 1) * tp); /* [hs+1,tp] V^T */
        b->s = bf_take(base, &at, VL * (size_t)T);         /* [T,16] a chunk's S */
        b->dp = bf_take(base, &at, VL * (size_t)T);        /* [T,16] a chunk's dP */
        b->pw = bf_take(base, &at, VL * rows);             /* [T+1,16] a chunk's P */
        b->ds = bf_take(base, &at, rows * ds_stride(T));   /* [T+1,lds] the group's dS */
        b->dq = bf_take(base, &at, (size_t)T * hs);        /* [T,hs] dQ's sums */
        b->D = bf_take(base, &at, (size_t)T);              /* [T] dO . O */
        b->tv = bf_take(base, &at, VL * (size_t)hs);       /* [hs,16] a chunk's dV^T */
        b->tk = bf_take(base, &at, VL * (size_t)hs);       /* [hs,16] a chunk's dK^T */
    }
    if (base) /* the rows past the last stay zero: nothing writes them */
        memset(base, 0, sizeof(float) * at);
    for (int k = 0; k < 8; k++) /* written whole by each packing */
        b->pk[k] = bf_take(base, &at, native ? bf_pack_floats(T, hs) : 0);
    return at;
}

/* The batch's rounded copy of len floats, made when the thread's head
 * comes from another batch than the last (as the heads come in batch
 * order, once a batch unless a head is stolen). */
static const float *bf_batch(float *copy, int *have, int b, const float *x, size_t len)
{
    if (*have != b) {
        round_span(copy, x, len);
        *have = b;
    }
    return copy;
}

/* One head, 16 queries at a time in the lanes (as attention_body): S^T =
 * K Q^T (K's rows as A), scaled to base 2 and masked; the softmax of the
 * fp32 kernel; P rounded; O^T = V^T P^T, then / l. */
static void attention_head_bf16(float *o /* [T,C], head's col */, float *lse /* [T] */,
                                const float *x /* rounded [T+1,3C], head's q col */, int T, int C,
                                int hs, const struct bf_att_bufs *b, int native)
{
    const size_t ld3 = 3 * (size_t)C;
    const vf scale2 = vset(LOG2E / sqrtf((float)hs)), ninf = vset(-INFINITY);
    struct bf_opnd k = bf_rows(x + hs, ld3, T, hs, b->pk[0], native);
    struct bf_opnd vc = bf_cols(x + 2 * hs, ld3, T, hs, b->pk[1], native);
    for (int i0 = 0; i0 < T; i0 += VL) {
        int w = min_int(VL, T - i0), nk = i0 + w; /* queries i0.., keys 0..nk-1 */
        q_block_transpose(b->qt, x + (size_t)i0 * ld3, ld3, w, hs);
        struct bf_opnd qt = bf_cols(b->qt, VL, hs, VL, b->pk[2], native);
        bf_product(b->sc, k, 0, 0, qt, 0, 0, nk, hs, VL, 0);
        vf mx = ninf;
        for (int j = 0; j < nk; j++) {
            vf s = vmul(vload(b->sc + VL * j), scale2);
            if (j >= i0)
                s = vsel(vlanes(j - i0), ninf, s); /* queries before key j */
            vstore(b->sc + VL * j, s);
            mx = vmax(mx, s);
        }
        vf l = softmax_exp(b->sc, nk, mx, i0, 1);
        struct bf_opnd pt = bf_cols(b->sc, VL, nk, VL, b->pk[3], native);
        bf_product(b->ot, vc, 1, 0, pt, 0, 0, hs, nk, VL, 0);
        for (int d = 0; d < hs; d++)
            vstore(b->ot + VL * d, vdiv(vload(b->ot + VL * d), l));
        vtranspose(o + (size_t)i0 * C, (size_t)C, b->ot, VL, hs, w);
        vstore_n(lse + i0, vadd(vmul(mx, vset(LN2)), vlog(l)), w); /* to base e, as in fp32 */
    }
}

static void attention_bf16(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                           const float *qkv /* [B,T,3C] */, int B, int T, int C, int H,
                           int native)
{
    int hs = C / H;
    size_t blk = (size_t)T * 3 * C;
    struct share *sh = share_alloc(B * H, 1);
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        struct bf_att_bufs b;
        float *base = kmalloc(sizeof(float) * bf_att_carve(&b, NULL, T, C, hs, 0, native));
        bf_att_carve(&b, base, T, C, hs, 0, native);
        int have = -1, h0, h1;
        while (share_next(sh, 0, &h0, &h1))
            for (int bh = h0; bh < h1; bh++) {
                int bt = bh / H, h = bh % H;
                const float *x = bf_batch(b.rq, &have, bt, qkv + bt * blk, blk) + 3 * hs * h;
                attention_head_bf16(out + (size_t)bt * T * C + hs * h, lse + (size_t)bh * T, x, T,
                                    C, hs, &b, native);
            }
        free(base);
    }
    free(sh);
}

/* One head's backward, a chunk of 16 keys at a time in the lanes (as
 * attention_bwd_body): S and dP of every query that sees the chunk (Q's
 * and dO's rows against K^T and V^T), P and dS = P (dP - D) in fp32 and
 * rounded, then dV^T = dO^T P and dK^T = Q^T dS over those queries; a
 * group's dQ = dS K at its last chunk, resuming the groups before. */
static void attention_bwd_head_bf16(float *dqkv /* [T,3C], head's q col */,
                                    const float *g /* rounded [T+1,C], head's col */,
                                    const float *x /* rounded [T+1,3C], head's q col */,
                                    const float *dout /* [T,C], head's col */,
                                    const float *out /* [T,C], head's col */,
                                    const float *lse /* [T] */, int T, int C, int hs,
                                    const struct bf_att_bufs *b, int native)
{
    const size_t ld3 = 3 * (size_t)C, tp = (size_t)key_stride(T), lds = ds_stride(T);
    const int gk = ds_group(T);
    const float scale = 1.0f / sqrtf((float)hs);
    const vf scale2 = vset(LOG2E * scale);
    kv_transpose(b->kt, b->vt, x, T, C, hs, (int)tp);
    struct bf_opnd q = bf_rows(x, ld3, T, hs, b->pk[0], native);
    struct bf_opnd gr = bf_rows(g, (size_t)C, T, hs, b->pk[1], native);
    struct bf_opnd kt = bf_cols(b->kt, tp, hs, T, b->pk[2], native);
    struct bf_opnd vt = bf_cols(b->vt, tp, hs, T, b->pk[3], native);
    struct bf_opnd qc = bf_cols(x, ld3, T, hs, b->pk[4], native);
    struct bf_opnd gc = bf_cols(g, (size_t)C, T, hs, b->pk[5], native);
    struct bf_opnd kc = bf_cols(x + hs, ld3, T, hs, b->pk[6], native);
    for (int i = 0; i < T; i++)
        bwd_d_rows(b->D, dout, out, C, hs, i, 1);
    for (int k0 = 0; k0 < T; k0 += VL) {
        int rows = T - k0, kb = k0 - k0 % gk, ke = min_int(kb + gk, T); /* the chunk's group */
        float *dsc = b->ds + (k0 - kb);                                 /* its columns of dS */
        bf_product(b->s + VL * k0, q, 0, k0, kt, 0, k0, rows, hs, VL, 0);
        bf_product(b->dp + VL * k0, gr, 0, k0, vt, 0, k0, rows, hs, VL, 0);
        for (int i = k0; i < T; i++) {
            vf p = vexp2(vfms(vload(b->s + VL * i), scale2, vset(lse[i] * LOG2E)));
            p = vkeep(vlanes(min_int(i + 1, T) - k0), p); /* keys after i, and past T */
            vf d = vmul(p, vsub(vload(b->dp + VL * i), vset(b->D[i])));
            vstore(b->pw + VL * i, vbf16(p));
            vstore(dsc + i * lds, vbf16(d));
        }
        struct bf_opnd pw = bf_cols(b->pw + VL * k0, VL, rows, VL, b->pk[7], native);
        bf_product(b->tv, gc, 1, k0, pw, 0, 0, hs, rows, VL, 0);
        struct bf_opnd dsw = bf_cols(dsc + k0 * lds, lds, rows, VL, b->pk[7], native);
        bf_product(b->tk, qc, 1, k0, dsw, 0, 0, hs, rows, VL, 0);
        for (int d = 0; d < hs; d++) /* x 1/sqrt(hs) after the sum, as dQ */
            vstore(b->tk + VL * d, vmul(vload(b->tk + VL * d), vset(scale)));
        float *row = dqkv + (size_t)k0 * ld3; /* key k0's q col */
        vtranspose(row + 2 * hs, ld3, b->tv, VL, hs, min_int(VL, rows));
        vtranspose(row + hs, ld3, b->tk, VL, hs, min_int(VL, rows));
        if (k0 + VL < ke)
            continue;
        /* the group's last chunk: its share of dQ, 16 queries at a time,
         * each block against the group's keys up to its own last (so
         * every entry of dS read was written) */
        struct bf_opnd dsr = bf_rows(b->ds + kb * lds, lds, T - kb, ke - kb, b->pk[7], native);
        for (int i0 = kb; i0 < T; i0 += VL) {
            int w = min_int(VL, T - i0), p = min_int(ke, i0 + VL) - kb;
            bf_product(b->dq + (size_t)i0 * hs, dsr, 0, i0 - kb, kc, kb, 0, w, p, hs, kb > 0);
        }
    }
    const vf sc = vset(scale);
    for (int i = 0; i < T; i++) /* x 1/sqrt(hs) after the sum, into dQ's rows */
        for (int d = 0; d < hs; d += VL)
            vstore_n(dqkv + (size_t)i * ld3 + d,
                     vmul(vload_n(b->dq + (size_t)i * hs + d, hs - d), sc), hs - d);
}

static void attention_bwd_bf16(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                               const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                               const float *lse /* [B,H,T] */, int B, int T, int C, int H,
                               int native)
{
    int hs = C / H;
    size_t b3 = (size_t)T * 3 * C, b1 = (size_t)T * C;
    struct share *sh = share_alloc(B * H, 1);
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        struct bf_att_bufs b;
        float *base = kmalloc(sizeof(float) * bf_att_carve(&b, NULL, T, C, hs, 1, native));
        bf_att_carve(&b, base, T, C, hs, 1, native);
        int have_q = -1, have_d = -1, h0, h1;
        while (share_next(sh, 0, &h0, &h1))
            for (int bh = h0; bh < h1; bh++) {
                int bt = bh / H, h = bh % H;
                size_t r3 = bt * b3 + 3 * hs * h, r1 = bt * b1 + hs * h;
                const float *x = bf_batch(b.rq, &have_q, bt, qkv + bt * b3, b3) + 3 * hs * h;
                const float *g = bf_batch(b.rd, &have_d, bt, dout + bt * b1, b1) + hs * h;
                attention_bwd_head_bf16(dqkv + r3, g, x, dout + r1, out + r1,
                                        lse + (size_t)bh * T, T, C, hs, &b, native);
            }
        free(base);
    }
    free(sh);
}

#endif
