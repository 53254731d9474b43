/* kernels/tiles.h: the kernels' performance machinery, which decides how
 * much work a kernel of tensor.c does at once and where its operands
 * wait, never what it computes:
 *
 *   register tiles, by backend   MR, MM_V and the other tiled loops' sizes
 *   matmul's register tiles      struct mm and mm_tile: an R x 16V block of c
 *                                in registers, its epilogue, the edge tiles
 *   row tiles                    which rows of c each tile takes
 *                                (tile_start), two narrow tiles as one pair
 *   packed panels of b           a wide b copied block by block into
 *                                contiguous panels that stay in L2
 *   chunks of element-wise work  FOR_SHARED_CHUNKS, FOR_VECTORS
 *   prefetching                  rows asked for one step ahead
 *
 * Any choice made here gives the same bits: a tile of any height or width
 * does the same FMAs in the same order per element of c (tensor.c's header
 * says why that holds).
 *
 * It is part of tensor.c's object, compiled once per backend with that
 * backend's -m flags: tensor.c includes it (directly, and through
 * kernels/bf16_sim.h), and nothing else does. Its functions are static, as
 * they were inside tensor.c, so the compiler inlines them into the kernels
 * just as before, and the Makefile gives each its backend's name
 * (mm_edge_avx2). */
#ifndef KERNELS_TILES_H
#define KERNELS_TILES_H
#include "kernels/base.h"
#include "kernels/vec.h"
#include <string.h>

/* Register tiles, by backend: how many rows (MR) and vectors of columns
 * (MM_V) a matmul tile holds in registers (accumulators + loads <= the
 * register file: 32 zmm, 16 ymm with a vf being two, 32 q with a vf being
 * four), and the same for the other tiled loops. Any value gives the same
 * bits. */
#if defined(VEC_AVX512)
#define MR 6          /* 6x4 accumulators + 4 b + 1 broadcast = 29 of 32 zmm */
#define MM_V 4
#define PV_G 8        /* attention: channels summed in one pass over the keys */
#define KV_G 8        /* attention backward: channels of dK or dV per pass */
#define SDP_TOGETHER 1 /* attention backward: S and dP in one pass, 8 sums */
#define SC_W 8        /* attention: keys scored at once, a chain each */
#define Q_W 8         /* attention backward: queries of dQ per pass, 16 channels each */
#define BF_H 12, 8, 6, 4 /* bf16 tile heights for 1, 2, 3, 4 vectors */
#define BF_V 4
#define BF_ATT_H 8, 8, 6, 4 /* bf16 attention: 8 rows, a head of 8 channels in one tile */
#define BF_TRACKERS 4 /* tiny-result trackers (unused: x86 flushes in hardware) */
#define LN_REG_V 4    /* layernorm_bwd: vectors a row whose dw, db, x-hat, g stay in registers */
#define SUM_V 8       /* sum_rows: vectors of column sums in registers at once */
#elif defined(VEC_AVX2)
#define MR 6          /* 6x2 accumulators + 2 b + 1 broadcast = 15 of 16 ymm */
#define MM_V 1
#define PV_G 4
#define KV_G 6        /* 6x2 accumulators + 2 weights + 1 broadcast = 15 of 16 ymm */
#define SDP_TOGETHER 0 /* 8 sums would take all 16 ymm */
#define SC_W 4
#define Q_W 4         /* 4x2 accumulators + 2 keys + 1 broadcast (a divisor of 16) */
#define BF_H 6, 6, 6, 6 /* as MR: no tracker registers (the hardware flushes) */
#define BF_V 1
#define BF_ATT_H 4, 4, 4, 4 /* 8 ymm of sums: taller tiles (6, 8) ran slower */
#define BF_TRACKERS 1
#define LN_REG_V 1    /* 4 x 2 ymm: at 2 vectors gcc spilled them */
#define SUM_V 8       /* 8 x 2 ymm, the loads from memory */
#elif defined(VEC_NEON)
#define MR 6          /* 6x4 accumulators + 4 b + 1 broadcast = 29 of 32 q */
#define MM_V 1
#define PV_G 4
#define KV_G 4
#define SDP_TOGETHER 0 /* 8 sums would take all 32 q */
#define SC_W 4
#define Q_W 4
#define BF_H 4, 4, 4, 4
#define BF_V 1
#define BF_ATT_H 4, 4, 4, 4
#define BF_TRACKERS 1
#define LN_REG_V 0    /* 4 x 4 q already half the registers: none */
#define SUM_V 4
#else
#define MR 4
#define MM_V 1
#define PV_G 8
#define KV_G 8
#define SDP_TOGETHER 0
#define SC_W 4
#define Q_W 4
#define BF_H 4, 4, 4, 4
#define BF_V 1
#define BF_ATT_H 4, 4, 4, 4
#define BF_TRACKERS 1
#define LN_REG_V 4
#define SUM_V 8
#endif

/* Rows [0, T) of n floats from src (rows sld apart) to dst (dld apart). */
static void copy_rows(float *dst, size_t dld, const float *src, size_t sld, int T, int n)
{
    for (int i = 0; i < T; i++)
        memcpy(dst + (size_t)i * dld, src + (size_t)i * sld, sizeof(float) * (size_t)n);
}

/* ---- matmul's register tiles ---- */

/* Everything a matmul tile needs. The same tiles serve matmul (a is [n,p],
 * row stride p) and matmul_tn (a is [p,n], read as its transpose). A tile
 * runs k over [k0, k1): from k0 = kinit it starts at the bias (or 0), a
 * later pass resumes from the partial sums stored in c, so splitting the k
 * loop into passes changes no bits. */
struct mm {
    float *c;             /* [n,q] */
    const float *a;       /* [n,p] or [p,n] */
    const float *b;       /* element (k0, j0) of b; see ldb, bps */
    const float *bias;    /* [q] or NULL */
    const float *r1, *r2; /* [n,q] or NULL, added after the optional ReLU */
    const float *gate;    /* [n,q] or NULL: c is 0 where gate <= 0 (a ReLU's backward) */
    int relu, p, q;
    int k0, k1; /* this pass's range of k */
    int kinit;  /* where the sums start */
    int j0, j1; /* this pass's columns of c */
    size_t ldb; /* b's row stride: q, or MM_PW when packed */
    size_t bps; /* from one panel of MM_PW columns of b to the next */
};

/* Columns of c a tile spans at most: its panel of b. */
#define MM_PW (VL * MM_V)

/* What every matmul tile (fp32 and bf16) does to a finished vector of c,
 * w lanes at element `at`: the ReLU, the ReLU's backward gate, the
 * residuals, in the contract's order. */
VINLINE vf mm_epilogue(vf y, int relu, const float *gate, const float *r1, const float *r2,
                       size_t at, int w)
{
    if (relu)
        y = vrelu(y);
    if (gate)
        y = vkeep(vgt(vload_n(gate + at, w), vzero()), y);
    if (r1)
        y = vadd(y, vload_n(r1 + at, w));
    if (r2)
        y = vadd(y, vload_n(r2 + at, w));
    return y;
}

/* An R x 16V tile of c at (i, j): element (r, k) of a is a[(i+r)*ars +
 * k*aks]; the last vector holds `last` columns; epi: whether c has an
 * epilogue (a constant at each call). */
VINLINE void mm_tile(const struct mm *m, int i, int j, int R, int V, int last, size_t ars,
                     size_t aks, int epi)
{
    vf acc[2 * MR][MM_V]; /* R <= MR, or 2 MR rows of half a panel (mm_pair) */
    const float *a = m->a + i * ars;                                 /* tile's row 0 */
    const float *b = m->b + (size_t)((j - m->j0) / MM_PW) * m->bps; /* tile's column 0 */
    int fresh = m->k0 == m->kinit;
UNROLL(4)
    for (int v = 0; v < V; v++) {
        int w = v < V - 1 ? VL : last;
        vf init = m->bias && fresh ? vload_n(m->bias + j + VL * v, w) : vzero();
UNROLL(12)
        for (int r = 0; r < R; r++)
            acc[r][v] = fresh ? init : vload_n(m->c + (size_t)(i + r) * m->q + j + VL * v, w);
    }
    /* b's rows by a pointer that steps: finding row k as b + (k - k0) ldb
     * at each k cost gcc six integer instructions (a sign extension and a
     * multiply among them) beside the 24 FMAs, and the default model's
     * matmuls and weight gradients took 1.04x-1.06x as long */
    const float *bk = b; /* row k of the panel: [16V] */
    const size_t ldb = m->ldb;
    const int k1 = m->k1;
    for (int k = m->k0; k < k1; k++, bk += ldb) {
        vf bv[MM_V];
UNROLL(4)
        for (int v = 0; v < V; v++)
            bv[v] = vload_n(bk + VL * v, v < V - 1 ? VL : last);
UNROLL(12)
        for (int r = 0; r < R; r++) {
            vf ar = vset(a[r * ars + k * aks]);
UNROLL(4)
            for (int v = 0; v < V; v++)
                acc[r][v] = vfma(ar, bv[v], acc[r][v]);
        }
    }
    /* Most tiles have no epilogue (a weight gradient's partial sums, a @ b
     * + bias): an instance of their own stores the sums as they are.
     * Asking mm_epilogue's four questions at each of a tile's vectors cost
     * these tiles 10% at the default model's shapes, where k is only
     * 32-128 long; the same test in one instance for both made clang spill
     * the edge tiles' sums. */
    if (!epi) {
UNROLL(12)
        for (int r = 0; r < R; r++)
UNROLL(4)
            for (int v = 0; v < V; v++)
                vstore_n(m->c + (size_t)(i + r) * m->q + j + VL * v, acc[r][v],
                         v < V - 1 ? VL : last);
        return;
    }
UNROLL(12)
    for (int r = 0; r < R; r++) {
        size_t at = (size_t)(i + r) * m->q + j;
UNROLL(4)
        for (int v = 0; v < V; v++) {
            int w = v < V - 1 ? VL : last;
            size_t e = at + VL * v;
            vstore_n(m->c + e, mm_epilogue(acc[r][v], m->relu, m->gate, m->r1, m->r2, e, w), w);
        }
    }
}

/* Picks the tile instance for V vectors; R is a constant at each call. */
VINLINE void mm_panel(const struct mm *m, int i, int j, int R, int V, int last, size_t ars,
                      size_t aks, int epi)
{
    switch (V) {
    case 1: mm_tile(m, i, j, R, 1, last, ars, aks, epi); break;
#if MM_V >= 4
    case 2: mm_tile(m, i, j, R, 2, last, ars, aks, epi); break;
    case 3: mm_tile(m, i, j, R, 3, last, ars, aks, epi); break;
    default: mm_tile(m, i, j, R, 4, last, ars, aks, epi); break;
#endif
    }
}

/* The R < MR rows at the bottom edge, in tiles of 4, 2 and 1 rows (a
 * weight gradient's c has as few as 32 rows, so its edge is no sliver: one
 * row at a time, each row's two chains of FMAs wait on their latency).
 * They ask the epilogue's questions whether c has one or not. Out of
 * line, so that no compiler merges this call with the full tile's and
 * loses MR as a constant (clang then keeps the accumulators on the stack). */
static __attribute__((noinline)) void mm_edge(const struct mm *m, int i, int j, int R, int V,
                                              int last, size_t ars, size_t aks)
{
    int r = 0;
    if (MR > 4 && r + 4 <= R) {
        mm_panel(m, i + r, j, 4, V, last, ars, aks, 1);
        r += 4;
    }
    if (r + 2 <= R) {
        mm_panel(m, i + r, j, 2, V, last, ars, aks, 1);
        r += 2;
    }
    if (r < R)
        mm_panel(m, i + r, j, 1, V, last, ars, aks, 1);
}

/* R rows of c (R == MR or MR - 1, or fewer at the bottom edge), all columns, in
 * panels of MM_V vectors. Whole panels get a tile of their own in which
 * `last` is the constant VL: with no lane masks to keep, AVX2's 16
 * registers hold the whole tile (sharing the loop with the masked edge
 * panel, gcc kept the masks in registers and spilled an accumulator). */
VINLINE void mm_rows(const struct mm *m, int i, int R, size_t ars, size_t aks)
{
    int epi = m->relu || m->gate || m->r1 || m->r2;
    for (int j = m->j0; j < m->j1; j += MM_PW) {
        int w = min_int(MM_PW, m->j1 - j), V = (w + VL - 1) / VL, last = w - VL * (V - 1);
        if (R < MR - 1 || (R < MR && w < MM_PW))
            mm_edge(m, i, j, R, V, last, ars, aks);
        else if (R < MR && epi) /* a tile one row short (tile_start) */
            mm_panel(m, i, j, MR - 1, MM_V, VL, ars, aks, 1);
        else if (R < MR)
            mm_panel(m, i, j, MR - 1, MM_V, VL, ars, aks, 0);
        else if (w == MM_PW && epi)
            mm_panel(m, i, j, MR, MM_V, VL, ars, aks, 1);
        else if (w == MM_PW)
            mm_panel(m, i, j, MR, MM_V, VL, ars, aks, 0);
        else if (epi)
            mm_panel(m, i, j, MR, V, last, ars, aks, 1);
        else
            mm_panel(m, i, j, MR, V, last, ars, aks, 0);
    }
}

/* Whether c's columns end in a narrow panel of whole vectors, at most
 * half of MM_PW (AVX-512's c of 32 or 96 columns: 2 vectors), which
 * mm_pair runs 2 MR rows at a time. */
static int mm_narrow_end(const struct mm *m)
{
    int w = (m->j1 - m->j0) % MM_PW;
    return MM_V >= 2 && w > 0 && w % VL == 0 && 2 * w <= MM_PW;
}

/* Two row tiles of R rows each (MR or MR - 1) at rows i.. of c
 * (mm_narrow_end), all columns: whole panels as two tiles, the narrow last
 * one as one tile of 2R rows. A tile of MR rows x 2 vectors gives each k
 * 12 FMAs against 8 loads and the loop's own work: 4096 x 96 @ 96 x 32
 * ran at 53% of a thread's FMA peak. 2 MR rows hold 24 sums (of AVX-512's
 * 32 registers) and give each k twice the FMAs: the default model's
 * matmuls with c of 32 columns took 0.84x-0.89x as long, its weight
 * gradients with 32 or 96 columns 0.64x-0.84x. The same FMAs in the same
 * order for each element of c. */
VINLINE void mm_pair_rows(const struct mm *m, int i, int R, size_t ars, size_t aks)
{
    int epi = m->relu || m->gate || m->r1 || m->r2;
    for (int j = m->j0; j < m->j1; j += MM_PW) {
        int V = min_int(MM_PW, m->j1 - j) / VL;
        if (V == MM_V) {
            for (int h = 0; h < 2 * R; h += R)
                if (epi)
                    mm_panel(m, i + h, j, R, MM_V, VL, ars, aks, 1);
                else
                    mm_panel(m, i + h, j, R, MM_V, VL, ars, aks, 0);
        } else if (V == 1 && epi) {
            mm_tile(m, i, j, 2 * R, 1, VL, ars, aks, 1);
        } else if (V == 1) {
            mm_tile(m, i, j, 2 * R, 1, VL, ars, aks, 0);
        } else if (epi) {
            mm_tile(m, i, j, 2 * R, MM_V / 2, VL, ars, aks, 1);
        } else {
            mm_tile(m, i, j, 2 * R, MM_V / 2, VL, ars, aks, 0);
        }
    }
}

/* mm_pair_rows with R a constant in each instance. */
VINLINE void mm_pair(const struct mm *m, int i, int R, size_t ars, size_t aks)
{
    if (R == MR)
        mm_pair_rows(m, i, MR, ars, aks);
    else
        mm_pair_rows(m, i, MR - 1, ars, aks);
}

/* ---- row tiles: which rows each tile takes ---- */

/* Row tiles of c, n rows: tile t is rows [tile_start(n, t), tile_start(n,
 * t + 1)). MR rows each and what is left in the last, unless that would
 * be a thin tile of 1 to MR/2 rows, whose few chains of FMAs wait on
 * their latency; then the tiles are of MR and MR - 1 rows, the MR-row
 * ones first. The default model's weight gradients have 32 rows: as 5
 * tiles of 6 and one of 2 a row took 1.13x-1.17x as long as at 30 rows,
 * as 6, 6, 5, 5, 5, 5 it takes 1.01x-1.02x. Which tile computes a row
 * changes no bits. */
static int row_tiles(int n) { return (n + MR - 1) / MR; }
static int tile_start(int n, int t)
{
    int tall = n - (MR - 1) * row_tiles(n); /* the MR-row tiles, if balanced */
    if (n % MR == 0 || n % MR > MR / 2 || tall < 0)
        return min_int(n, t * MR);
    return t <= tall ? t * MR : tall * MR + (t - tall) * (MR - 1);
}
static int tile_rows(int n, int t) { return tile_start(n, t + 1) - tile_start(n, t); }

/* Whether row tiles t and t + 1 of n rows go as a pair (mm_pair): c ends
 * in a narrow panel, tile t + 1 is still in [.., t1), and both tiles have
 * MR or both MR - 1 rows. */
static int tiles_pair(int narrow, int n, int t, int t1)
{
    int R = tile_rows(n, t);
    return narrow && t + 1 < t1 && (R == MR || R == MR - 1) && tile_rows(n, t + 1) == R;
}

/* Rows [i, i+R) of c = a @ b, and of c = a^T b (a [p,n]), and the same
 * for two tiles of R rows (mm_pair): out of line, each with its strides
 * constant for the tile code inlined into it. */
static void mm_band(const struct mm *m, int i, int R) { mm_rows(m, i, R, (size_t)m->p, 1); }
static void tn_band(const struct mm *m, int i, int R, int n) { mm_rows(m, i, R, 1, (size_t)n); }
static void mm_band_pair(const struct mm *m, int i, int R) { mm_pair(m, i, R, (size_t)m->p, 1); }
static void tn_band_pair(const struct mm *m, int i, int R, int n) { mm_pair(m, i, R, 1, (size_t)n); }

/* Row tiles [t0, t1) of c = a @ b (n rows): two at a time while they
 * pair (tiles_pair), where c ends in a narrow panel (mm_narrow_end). */
static void mm_tiles(const struct mm *m, int n, int t0, int t1)
{
    int t = t0, narrow = mm_narrow_end(m);
    while (t < t1)
        if (tiles_pair(narrow, n, t, t1)) {
            mm_band_pair(m, tile_start(n, t), tile_rows(n, t));
            t += 2;
        } else {
            mm_band(m, tile_start(n, t), tile_rows(n, t));
            t++;
        }
}

/* ---- packed panels of b ---- */

/* A b larger than MM_KC x MM_NC floats (a model wider than about 128),
 * or with long rows (MM_PACK_Q below), goes in blocks of at most that
 * size (256 KiB), each packed into panels of MM_PW columns, contiguous
 * and zero-padded, that stay in L2 while every row tile passes over them.
 * Unpacked, a tile's walk down a wide b takes a new page at every k,
 * which no prefetcher follows. MM_NC is a multiple of every backend's
 * MM_PW. */
#define MM_KC 256
#define MM_NC 256

/* Rows of b from this many floats long are packed too, whatever b's size:
 * in place, a tile's walk down a panel of b takes a line every q floats,
 * and at q 128-512 (0.5-2 KiB apart: lines that fall in a few of L1's
 * sets) the matmuls and weight gradients of an embed-256 model took
 * 1.04x-1.27x as long as packed (1 and 2 threads; 1.0x at p 32, q 128).
 * Below 128 the copy costs more than it saves: packed, the default
 * model's weight gradients (q 32-96) took 1.03x-1.16x as long. */
#define MM_PACK_Q 128

/* Whether tiles read b ([rows, q], rows q floats apart) where it is. */
static int b_in_place(long rows, int q) { return rows * q <= (long)MM_KC * MM_NC && q < MM_PACK_Q; }

/* Row k of a block of b (rows from k0, columns [j0, j1)) into bp, whose
 * panels are kc rows each: panel t's row k at bp[(t * kc + k - k0) *
 * MM_PW], columns past j1 zero. */
static void pack_b_row(float *bp /* [MM_NC / MM_PW, kc, MM_PW] */, const float *b /* [p,q] */,
                       int q, int kc, int k, int k0, int j0, int j1)
{
    const float *src = b + (size_t)k * q;
    for (int j = j0; j < j1; j += MM_PW) {
        float *row = bp + ((size_t)((j - j0) / MM_PW) * kc + (size_t)(k - k0)) * MM_PW;
        int w = j1 - j;
        if (w >= MM_PW) /* whole vectors: no call to memcpy for 16 floats */
            for (int v = 0; v < MM_PW; v += VL)
                vstore(row + v, vload(src + j + v));
        else
            for (int v = 0; v < MM_PW; v += VL)
                vstore(row + v, v < w ? vload_n(src + j + v, w - v) : vzero());
    }
}

/* A pass over one packed block of b: rows [k0, k1), columns [j0, j1). */
static struct mm packed_pass(const struct mm *m, float *bp, int k0, int k1, int j0, int j1)
{
    struct mm pass = *m;
    pass.j0 = j0, pass.j1 = j1, pass.k0 = k0, pass.k1 = k1;
    pass.b = bp, pass.ldb = MM_PW, pass.bps = MM_KC * MM_PW;
    return pass;
}

/* ---- chunks of element-wise work ---- */

/* Element-wise kernels (and Adam) run in chunks of ELT_CHUNK elements,
 * claimed by the threads with stealing; every element is computed alone,
 * so the split changes no bit. Each chunk: whole vectors, then one
 * partial vector. */
#define ELT_CHUNK ((size_t)1 << 14)
#define CHUNK_LEN(n, lo) ((n) - (lo) < ELT_CHUNK ? (n) - (lo) : ELT_CHUNK)
#define ELT_CHUNKS(n) ((int)(((n) + ELT_CHUNK - 1) / ELT_CHUNK))
/* for (size_t lo = 0; lo < n; lo += ELT_CHUNK), the chunks claimed with
 * stealing from s = share_alloc(ELT_CHUNKS(n), 1), as FOR_SHARED does
 * (the inner loop only binds lo, the chunk's first element, once). */
#define FOR_SHARED_CHUNKS(s, n, lo)                                                            \
    FOR_SHARED(s, lo##_chunk)                                                                  \
        for (size_t lo = (size_t)lo##_chunk * ELT_CHUNK, lo##_once = 1; lo##_once; lo##_once = 0)

/* Runs `body(i, w)` for the vectors of [0, n): w = 16, then the rest. */
#define FOR_VECTORS(n, i, w, body)                                                             \
    for (size_t i = 0; i < (n); i += VL) {                                                     \
        int w = (n) - i < VL ? (int)((n) - i) : VL;                                            \
        body;                                                                                  \
    }

/* ---- prefetching ---- */

/* Asks for columns [0, n) of rows r0..r1-1 of x (rows ld apart) to be
 * brought into cache, a 64-byte line at a time. A head reads a few
 * columns of rows far apart, a pattern the hardware prefetchers follow
 * late, so each kernel asks one step ahead: the forward for the next
 * block of queries while this one computes, the backward for the next
 * head's keys and values while this head's chunks of keys compute. Cold
 * inputs (each kernel's come from the kernel before, evicted by others)
 * cost the backward a fifth of its time without this. */
static void prefetch_rows(const float *x, size_t ld, int r0, int r1, int n)
{
    for (int r = r0; r < r1; r++) {
        const float *row = x + (size_t)r * ld;
        for (int c = 0; c < n; c += 16) /* a line a step, and the last */
            __builtin_prefetch(row + c);
        __builtin_prefetch(row + n - 1);
    }
}

#endif
