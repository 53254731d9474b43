/* tensor.c: the fp32 compute kernels, written once over the vector layer.
 *
 * The name is the design card's, but this file holds no `Tensor` type
 * and never sees one: its kernels take plain float arrays with their
 * shapes passed beside them. The program's Tensor, the graph's value
 * (compiler/node.h), lives three layers up.
 *
 * This file is compiled once per backend of vec.h (AVX-512, AVX2, NEON,
 * plain C: the Makefile passes -DVEC_AVX512 and the matching -m flags, and
 * so on) and fills one table, `struct kernels` (its rows: kernels/
 * kernels.def), that the k_* entry points of kernels/kernels.h
 * (kernels/entry.c) call through; a constructor registers the table with
 * kernels/isa.c, the layer below, which never names this file. The
 * contract of every kernel, its plain-C twin, is in kernels/tensor_ref.c
 * (the tree's reductions: tensor_seg.c; the bf16 kernels: tensor_bf16.c);
 * the tests hold each backend to it: read a kernel's twin first, then the
 * kernel here. The Makefile gives every function of this file its
 * backend's name (matmul_ex_avx2).
 *
 * Three headers of kernels/ are part of this file's object, compiled with
 * it once per backend (no other object includes them):
 *   kernels/tiles.h             the performance machinery: register tile
 *                               sizes by backend (MR, MM_V, ...), matmul's
 *                               register tiles (struct mm, mm_tiles), packed
 *                               panels of b, chunks of element-wise work,
 *                               prefetching
 *   kernels/attention_layout.h  a head's layouts and the fp32 steps that
 *                               the fp32 and bf16 attention share
 *   kernels/bf16_sim.h          the bf16 simulation: rounding, the bf16
 *                               matmul emulated (every backend) and native
 *                               (vdpbf16ps, AVX-512 only), its weight
 *                               gradients' leaves and attention, on tiles
 *                               of their own
 *
 * Map of this file, by family, each under a banner "---- name ----":
 *   matmul                      c = epilogue(a @ b + bias), by register tiles
 *   leaves and the tree         add_into and k_tree_sum's chunks
 *   weight-gradient matmul      a^T b, leaves over threads (fp32 or bf16)
 *   attention                   forward, backward, decode step, last query
 *   layernorm                   forward, backward by blocks or leaves
 *   softmax cross-entropy       forward and backward
 *   element-wise                add, add_n, relu, relu_bwd, gelu, gelu_bwd
 *   sums over rows              by blocks or leaves
 *   transpose                   by blocks of shuffles in registers
 *   embedding                   forward, backward by leaves
 *   Adam                        the update
 *   the table                   and its registration with kernels/isa.c
 *
 * The same bits on every backend: each output element is produced by the
 * same sequence of exactly rounded operations whatever the backend, the
 * thread count or the register tile: tiles of any height or width do the
 * same FMAs in the same order per element, reductions across lanes use
 * vsum's one tree, reductions over rows fixed blocks (ROW_BLOCK) or the
 * leaves and tree of kernels/kernels.h. What a backend may choose is only
 * how many elements it works on at once (MR and the other sizes of
 * kernels/tiles.h), never the order of the operations on one of them. */
#include "kernels/tensor_impl.h"
#include "kernels/vec.h"
#include "kernels/gelu.h" /* GELU's constants and steps, the twin's too */
#include "kernels/tiles.h"
#include "kernels/attention_layout.h"
#include "kernels/bf16_sim.h"
#include "util/fmath.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- matmul ---- */

/* Contract (k_matmul_ex_ref, k_matmul_gated_ref): c[i][j] starts at
 * bias[j] (or 0) and takes one FMA a[i][k]*b[k][j] per k in order
 * 0..p-1; then max(., 0) if relu, 0 where gate <= 0, + r1, + r2.
 *
 * The tiles are kernels/tiles.h's: struct mm (one matmul's operands and
 * its pass over k and over columns), mm_tiles (row tiles of c, each an
 * MR x MM_PW block in registers) and the packed panels of a wide b
 * (b_in_place, pack_b_row, packed_pass). Below: matmul_ex, which picks
 * among them, and the few-rows path that needs none. */

/* A b that tiles would read packed (not b_in_place: wide, or with long
 * rows) times a few rows of a (the sampler's decode steps, a row a
 * passage): packing b would read and write all of it to serve a tile or
 * two. Instead each row k of b, contiguous, is loaded once and multiplied
 * into every row of c over a band of columns, whose sums wait in c (a few
 * KiB, in L1); then the epilogue. The same FMAs in the same order for
 * every element: the same bits as the tiles. */
#define MM_FEW_ROWS 4  /* fewer rows of c than this go row of b by row of b */
#define MM_FEW_BAND 512 /* columns of c a thread works on at once, at most */

static void matmul_few_rows(const struct mm *m, int n)
{
    int nth = omp_get_max_threads(), q = m->q, p = m->p;
    int bands = (q + MM_FEW_BAND - 1) / MM_FEW_BAND;
    bands = (bands + nth - 1) / nth * nth; /* as many for each thread */
    int width = round16((q + bands - 1) / bands);
    int epi = m->relu || m->gate || m->r1 || m->r2;
#pragma omp parallel for schedule(static) if ((long)n * p * q >= PAR_WORK)
    for (int band = 0; band < bands; band++) {
        int j0 = band * width, j1 = min_int(q, j0 + width);
        for (int r = 0; r < n; r++)
            for (int j = j0; j < j1; j += VL) {
                int w = min_int(VL, j1 - j);
                vstore_n(m->c + (size_t)r * q + j, m->bias ? vload_n(m->bias + j, w) : vzero(), w);
            }
        for (int k = 0; k < p; k++) {
            const float *bk = m->b + (size_t)k * q; /* row k of b */
            for (int r = 0; r < n; r++) {
                vf ar = vset(m->a[(size_t)r * p + k]);
                float *cr = m->c + (size_t)r * q;
                for (int j = j0; j < j1; j += VL) {
                    int w = min_int(VL, j1 - j);
                    vstore_n(cr + j, vfma(ar, vload_n(bk + j, w), vload_n(cr + j, w)), w);
                }
            }
        }
        for (int r = 0; r < n && epi; r++)
            for (int j = j0; j < j1; j += VL) {
                int w = min_int(VL, j1 - j);
                size_t e = (size_t)r * q + j;
                vstore_n(m->c + e,
                         mm_epilogue(vload_n(m->c + e, w), m->relu, m->gate, m->r1, m->r2, e, w), w);
            }
    }
}

static void matmul_ex(float *c /* [n,q] */, const float *a /* [n,p] */, const float *b /* [p,q] */,
                      const float *bias /* [q] or NULL */, const float *r1 /* [n,q] or NULL */,
                      const float *r2 /* [n,q] or NULL */, const float *gate /* [n,q] or NULL */,
                      int relu, int n, int p, int q)
{
    struct mm m = {.c = c, .a = a, .b = b, .bias = bias, .r1 = r1, .r2 = r2, .gate = gate,
                   .relu = relu, .p = p, .q = q, .k0 = 0, .k1 = p, .kinit = 0,
                   .j0 = 0, .j1 = q, .ldb = (size_t)q, .bps = MM_PW};
    int tiles = row_tiles(n);
    if (b_in_place(p, q)) {
        struct share *sh = share_alloc(tiles, 1); /* the row tiles, shared with stealing */
#pragma omp parallel if ((long)n * p * q >= PAR_WORK)
        {
            int t0, t1;
            while (share_next(sh, 0, &t0, &t1))
                mm_tiles(&m, n, t0, t1);
        }
        free(sh);
        return;
    }
    if (n < MM_FEW_ROWS) {
        matmul_few_rows(&m, n);
        return;
    }
    /* Blocks of columns, and of k within them: a tile's sums wait in c
     * between k blocks (fp32 stored and reloaded: no bit changes) and the
     * epilogue runs after the last. Each block is packed by the team, then
     * multiplied; the loops' barriers keep the one buffer consistent. */
    float *bp = kmalloc(sizeof(float) * MM_KC * MM_NC);
    int kblocks = (p + MM_KC - 1) / MM_KC, passes = (q + MM_NC - 1) / MM_NC * kblocks;
    struct share *sh = share_alloc(tiles, passes); /* each pass's row tiles */
#pragma omp parallel if ((long)n * p * q >= PAR_WORK)
    for (int j0 = 0; j0 < q; j0 += MM_NC)
        for (int k0 = 0; k0 < p; k0 += MM_KC) {
            struct mm pass =
                packed_pass(&m, bp, k0, min_int(p, k0 + MM_KC), j0, min_int(q, j0 + MM_NC));
            if (pass.k1 < p) /* not the last block: no epilogue yet */
                pass.relu = 0, pass.r1 = pass.r2 = pass.gate = NULL;
#pragma omp for schedule(static)
            for (int k = pass.k0; k < pass.k1; k++)
                pack_b_row(bp, b, q, MM_KC, k, k0, pass.j0, pass.j1);
            int t0, t1, pass_no = j0 / MM_NC * kblocks + k0 / MM_KC;
            while (share_next(sh, pass_no, &t0, &t1))
                mm_tiles(&pass, n, t0, t1);
#pragma omp barrier /* before the next pass packs over bp */
        }
    free(bp);
    free(sh);
}

/* ---- leaves and the tree ---- */

/* dst = dst + src, element-wise: the tree's one operation. One rounding
 * per element, so the vector width changes no bit. */
static void add_into(float *restrict dst, const float *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(dst + i, vadd(vload(dst + i), vload(src + i)));
    if (i < n)
        vstore_n(dst + i, vadd(vload_n(dst + i, (int)(n - i)), vload_n(src + i, (int)(n - i))),
                 (int)(n - i));
}

/* k_tree_sum in chunks of TREE_CHUNK elements, each chunk's tree with one
 * scratch chunk per level, chunks in parallel. */
#define TREE_CHUNK 2048

static void tree_chunk(float *out /* [len] */, const float *const *parts, int lo, int hi,
                       size_t off, size_t len, float *tmp /* [levels,TREE_CHUNK] */, int d)
{
    if (hi - lo == 1) {
        if (out != parts[lo] + off)
            memcpy(out, parts[lo] + off, sizeof(float) * len);
        return;
    }
    int mid = lo + (hi - lo) / 2;
    float *right = tmp + (size_t)d * TREE_CHUNK;
    tree_chunk(out, parts, lo, mid, off, len, tmp, d + 1);
    tree_chunk(right, parts, mid, hi, off, len, tmp, d + 1);
    add_into(out, right, len);
}

static void tree_sum(float *out /* [len] */, const float *const *parts /* m x [len] */, int m,
                     size_t len)
{
    if (m < 1) {
        memset(out, 0, sizeof(float) * len);
        return;
    }
    long nch = (long)((len + TREE_CHUNK - 1) / TREE_CHUNK);
    int depth = tree_depth(m);
#pragma omp parallel if (len * (size_t)m >= 4 * PAR_WORK)
    {
        float *tmp = kmalloc(sizeof(float) * (size_t)(depth ? depth : 1) * TREE_CHUNK);
#pragma omp for schedule(static)
        for (long ch = 0; ch < nch; ch++) {
            size_t off = (size_t)ch * TREE_CHUNK;
            size_t l = len - off < TREE_CHUNK ? len - off : TREE_CHUNK;
            tree_chunk(out + off, parts, 0, m, off, l, tmp, 0);
        }
        free(tmp);
    }
}

/* ---- weight-gradient matmul ---- */

/* Contract (k_matmul_tn_seg_ref): each leaf of seg rows of a and b sums
 * its rows in order from zero, one FMA per row, as matmul does; the leaves
 * are combined by the tree. The leaves run on matmul's tiles (tn_band,
 * kernels/tiles.h); a bf16 leaf is kernels/bf16_sim.h's tn_leaf_bf16. */

/* matmul_tn runs its long k loop, where it reads b in place, in passes of
 * this many rows of a and b: one pass's rows stay in L1 while every tile
 * of c uses them. (A packed b goes in passes of MM_KC: tn_leaf, tn_blocks.) */
#define TN_KBLOCK 64
_Static_assert(TN_KBLOCK <= MM_KC, "tn_leaf packs a pass of a into MM_KC rows");

/* One thread's part of matmul_tn_seg: its row tiles [t0, t1) of c over the
 * leaves of the subtree it evaluates (all of them, or its own subtree when
 * the threads split the leaves). A subtree's left child writes to the
 * subtree's own output, its right child to the scratch array of the
 * subtree's level, so a tree of L leaves needs tree_depth(L) arrays of
 * [n,q] and adds each leaf in while it is still in cache. */
struct tn_tree {
    const struct mm *m;
    float *tmp; /* [depth,n,q] */
    int n, seg, mr, t0, t1;
    int lda; /* a's row stride: n, unless this is a block's view (tn_blocks) */
    int kpass; /* rows of a and b a pass where b is not the leaf's to pack (tn_leaf), <= MM_KC */
    enum mm_kind kind;
    void *pack;   /* bf16: this thread's packed pairs of a leaf's rows */
    float *bpack; /* fp32, wide b: this thread's packed block of b, or NULL */
};

/* a's row stride (floats) from which a tile reads its rows of a from a
 * packed copy (tn_band_packed). Below it the copy cost more than it saved:
 * at the default model's n of 32 and 64 the weight gradients took 1.06x-
 * 1.18x as long. */
#define TN_PACK_A 256

/* Whether a weight gradient's leaf reads b ([rows, q]) where it is. Also
 * rows of MM_PACK_Q floats when c is at most TN_PACK_B_N rows tall: each
 * row of b then serves only a few row tiles, so packing it costs more than
 * the lines it saves. The default model's head gradient (n 32, q 128)
 * took 0.86x as long in place on both AVX-512 and AVX2; at n 64 the two
 * ran level, at n 128-192 packed was 1.02x-1.09x faster. */
#define TN_PACK_B_N 64
static int tn_b_in_place(long rows, int n, int q)
{
    if (n <= TN_PACK_B_N && q <= MM_PACK_Q && rows * q <= (long)MM_KC * MM_NC)
        return 1;
    return b_in_place(rows, q);
}

/* Row tile r of c over the pass's rows [k0, k1) of a and b, its MR
 * columns of a first copied into ap, contiguous. a is [p,n], read as its
 * transpose: in place, each k of the tile takes a line of a, n floats on
 * from the last, for 6 floats, so that over 256 k a tile spreads 6 KiB of
 * data over 16 KiB of L1 and up to 256 pages (at n of 1,536 each row of
 * a is 6 KiB). The same values in the same order: the same bits. */
static void tn_band_packed(const struct tn_tree *t, const struct mm *pass, int r,
                           float *ap /* [k1 - k0, MR] */)
{
    int i = tile_start(t->n, r), R = tile_rows(t->n, r), kc = pass->k1 - pass->k0;
    const float *src = t->m->a + (size_t)pass->k0 * t->lda + i; /* [kc, R], rows lda apart */
    if (R == MR)
        copy_rows(ap, MR, src, (size_t)t->lda, kc, MR);
    else
        for (int k = 0; k < kc; k++)
            for (int u = 0; u < MR; u++)
                ap[(size_t)k * MR + u] = u < R ? src[(size_t)k * t->lda + u] : 0.0f;
    struct mm tile = *pass; /* c from row i, a's rows MR apart, k counted from the pass's k0 */
    tile.c = pass->c + (size_t)i * pass->q;
    tile.a = ap;
    tile.kinit = pass->k0 == pass->kinit ? 0 : -1; /* a fresh start or a resumed one, as before */
    tile.k0 = 0, tile.k1 = kc;
    tn_band(&tile, 0, R, MR);
}

/* Row tiles [t0, t1) of c over one pass, a read in place or packed. */
static void tn_pass(const struct tn_tree *t, const struct mm *pass, float *ap /* [MM_KC, MR] */)
{
    int r = t->t0, narrow = t->lda < TN_PACK_A && mm_narrow_end(pass);
    while (r < t->t1)
        if (t->lda >= TN_PACK_A) {
            tn_band_packed(t, pass, r, ap);
            r++;
        } else if (tiles_pair(narrow, t->n, r, t->t1)) {
            tn_band_pair(pass, tile_start(t->n, r), tile_rows(t->n, r), t->lda);
            r += 2;
        } else {
            tn_band(pass, tile_start(t->n, r), tile_rows(t->n, r), t->lda);
            r++;
        }
}

/* One fp32 leaf, rows [k0, k1) of a and b, for row tiles [t0, t1) of c.
 * A wide b goes in packed blocks, as matmul's (each thread packs its
 * own). */
static void tn_leaf(const struct tn_tree *t, float *dst, int k0, int k1)
{
    float ap[MM_KC * MR]; /* a tile's rows of a, packed (passes are at most MM_KC rows) */
    struct mm pass = *t->m;
    pass.c = dst;
    pass.kinit = k0;
    if (t->bpack) {
        for (int j0 = 0; j0 < pass.j1; j0 += MM_NC)
            for (int kb = k0; kb < k1; kb += MM_KC) {
                struct mm blk = packed_pass(&pass, t->bpack, kb, min_int(k1, kb + MM_KC), j0,
                                            min_int(pass.j1, j0 + MM_NC));
                for (int k = blk.k0; k < blk.k1; k++)
                    pack_b_row(t->bpack, t->m->b, (int)t->m->ldb, MM_KC, k, kb, blk.j0, blk.j1);
                tn_pass(t, &blk, ap);
            }
        return;
    }
    for (int k = k0; k < k1; k += t->kpass) {
        pass.k0 = k;
        pass.b = t->m->b + (size_t)k * t->m->ldb;
        pass.k1 = min_int(k + t->kpass, k1);
        tn_pass(t, &pass, ap);
    }
}

/* The first row of c's row tile `tile` (or n past the last): fp32 tiles
 * as tile_start, bf16 ones BF_TN_MR rows each. */
static int tn_row(const struct tn_tree *t, int tile)
{
    return t->kind == MM_FP32 ? tile_start(t->n, tile) : min_int(t->n, tile * t->mr);
}

static void tn_subtree(const struct tn_tree *t, float *dst /* [n,q] */, int lo, int hi, int d)
{
    if (hi - lo == 1) {
        int k0 = leaf_lo(lo, t->m->p, t->seg), k1 = leaf_hi(lo, t->m->p, t->seg);
        if (t->kind == MM_FP32)
            tn_leaf(t, dst, k0, k1);
        else
            tn_leaf_bf16(dst, t->m, t->n, t->t0 * t->mr, min_int(t->n, t->t1 * t->mr), t->pack,
                         t->kind == MM_BF16_NATIVE, k0, k1);
        return;
    }
    int mid = lo + (hi - lo) / 2, q = t->m->q;
    float *right = t->tmp + (size_t)d * t->n * q; /* [n,q] */
    tn_subtree(t, dst, lo, mid, d + 1);
    tn_subtree(t, right, mid, hi, d + 1);
    size_t r0 = (size_t)tn_row(t, t->t0), r1 = (size_t)tn_row(t, t->t1);
    add_into(dst + r0 * q, right + r0 * q, (r1 - r0) * q);
}

/* An fp32 c of more than TN_BLOCKED_C bytes goes block by block
 * (tn_blocks), each block's partial sums in TN_BLOCK_BYTES (half an L2).
 * Below it, the leaves' whole-c partial sums stay within the caches
 * enough that the other ways are as fast or faster: they pack b once a
 * leaf, where a block packs it again for every column block and thread
 * (measured on AVX2, 2 threads: a 384 x 1152 c, 1.7 MiB, ran 0.7x as
 * fast in blocks; a 768 x 3072 c, 9 MiB, 1.3x as fast). */
#define TN_BLOCKED_C (4 << 20) /* bytes */
#define TN_BLOCK_BYTES (512 * 1024)

/* Rows of c in a block MM_NC columns wide whose depth + 1 arrays of
 * partial sums fit TN_BLOCK_BYTES, in whole row tiles. */
static int tn_block_rows(int depth)
{
    int rows = TN_BLOCK_BYTES / ((depth + 1) * MM_NC * (int)sizeof(float));
    return rows >= 2 * MR ? rows / MR * MR : MR;
}

/* A large c block by block, the threads sharing the blocks: each block
 * runs the whole tree over the leaves in a buffer of its own, [rows, w] a
 * level, so that its partial sums stay in cache, and is then copied into
 * c. Over the whole of c, a leaf's partial sums would go out to memory
 * and come back at every add of the tree; and c's rows, a multiple of 4
 * KiB apart in a wide c, would crowd a few cache sets. The view of a
 * block: a from the block's first row (rows still t->lda apart), b its
 * column block packed whole (all p rows, once per thread and column
 * block), c its buffer. */
static void tn_blocks(const struct tn_tree *t, float *c /* [n,q] */, int n, int q, int L,
                      int depth)
{
    int rows = tn_block_rows(depth), p = t->m->p;
    int row_blocks = (n + rows - 1) / rows, col_blocks = (q + MM_NC - 1) / MM_NC;
    float *buf = kmalloc(sizeof(float) * (size_t)(depth + 1) * rows * MM_NC);
    float *bp = kmalloc(sizeof(float) * (size_t)p * MM_NC); /* [MM_NC / MM_PW, p, MM_PW] */
    int packed = -1;                                        /* the column block in bp */
#pragma omp for schedule(static)
    for (int blk = 0; blk < row_blocks * col_blocks; blk++) {
        int cb = blk / row_blocks, r0 = blk % row_blocks * rows, j0 = cb * MM_NC;
        int nr = min_int(rows, n - r0), w = min_int(MM_NC, q - j0);
        if (packed != cb) /* a thread's blocks come column block by column block */
            for (int k = 0; k < p; k++)
                pack_b_row(bp, t->m->b, q, p, k, 0, j0, j0 + w);
        packed = cb;
        struct mm view = *t->m;
        view.c = buf, view.a = t->m->a + r0, view.b = bp, view.ldb = MM_PW;
        view.bps = (size_t)p * MM_PW, view.q = w, view.j0 = 0, view.j1 = w;
        struct tn_tree b = *t;
        b.m = &view, b.tmp = buf + (size_t)rows * MM_NC, b.n = nr, b.bpack = NULL;
        b.t0 = 0, b.t1 = row_tiles(nr);
        /* b packed: passes as long as a packed block's (tn_leaf's), not
         * TN_KBLOCK's, which suits a b read in place. A pass of 64 rows
         * repacked each tile's columns of a and stored and reloaded its
         * sums 4 times as often: the embed-768 model's weight gradients
         * took 1.0x-1.16x as long (median 1.07x). */
        b.kpass = MM_KC;
        tn_subtree(&b, buf, 0, L, 0);
        copy_rows(c + (size_t)r0 * q + j0, (size_t)q, buf, (size_t)w, nr, w);
    }
    free(bp);
    free(buf);
}

/* Each thread reads only its leaves' rows of a and b when the leaves split
 * evenly into subtrees (with the threads sharing c's rows, each would read
 * all of b) and c is small; a large fp32 c goes in blocks (tn_blocks);
 * else the threads share c's rows over all leaves. The same bits every
 * way. */
static void matmul_tn_seg(float *c /* [n,q] */, const float *a /* [p,n] */,
                          const float *b /* [p,q] */, int n, int p, int q, int seg, int kind)
{
    struct mm mm = {.c = c, .a = a, .b = b, .p = p, .q = q, .k0 = 0, .k1 = p, .kinit = 0,
                    .j0 = 0, .j1 = q, .ldb = (size_t)q, .bps = MM_PW}; /* no epilogue */
    const struct mm *m = &mm;
    int mr = kind == MM_FP32 ? MR : BF_TN_MR;
    int L = leaf_count(p, seg), tiles = kind == MM_FP32 ? row_tiles(n) : (n + mr - 1) / mr;
    size_t nc = (size_t)n * q;
    if (L == 0 || n <= 0) {
        memset(c, 0, sizeof(float) * nc);
        return;
    }
    int par = (long)n * p * q >= PAR_WORK, nth = par ? omp_get_max_threads() : 1;
    int blocked = kind == MM_FP32 && L > 1 && nc * sizeof(float) > TN_BLOCKED_C;
    int split = !blocked && leaf_split(nth, L), depth = tree_depth(L);
    int sub = tree_depth(split ? L / nth : 1);
    /* split: per thread [sub,n,q] scratch and [n,q] for its subtree's
     * result (thread 0's goes to c); sharing rows: one [depth,n,q] (a
     * nested region may get fewer threads than asked: then they share) */
    size_t own = (size_t)(sub + 1) * nc, shared = blocked ? 1 : (size_t)depth * nc;
    float *tmp = kmalloc(sizeof(float) * (split && nth * own > shared ? nth * own : shared));
    float **res = kmalloc(sizeof(float *) * (size_t)nth);
#pragma omp parallel if (par) num_threads(nth)
    {
        int me = omp_get_thread_num(), lo = 0, hi = L;
        struct tn_tree t = {.m = m, .tmp = tmp, .n = n, .seg = seg, .mr = mr, .t0 = 0,
                            .t1 = tiles, .lda = n, .kpass = TN_KBLOCK,
                            .kind = (enum mm_kind)kind};
        if (kind != MM_FP32) /* [BF_TN_K, ldb + lda] floats hold either packing */
            t.pack = kmalloc(sizeof(float) * BF_TN_K * (size_t)(round16(q) + round16(n)));
        else if (!blocked && !tn_b_in_place(seg < 1 ? p : min_int(seg, p), n, q))
            t.bpack = kmalloc(sizeof(float) * MM_KC * MM_NC); /* a leaf's wide b, packed */
        float *dst = c;
        int mine = split && omp_get_num_threads() == nth; /* this thread's own subtree */
        if (mine) {
            t.tmp = tmp + (size_t)me * own;
            dst = me ? t.tmp + (size_t)sub * nc : c;
            lo = me * (L / nth), hi = lo + L / nth;
            res[me] = dst;
        } else if (!blocked) {
            my_share(tiles, &t.t0, &t.t1);
        }
        if (blocked)
            tn_blocks(&t, c, n, q, L, depth);
        else if (t.t0 < t.t1)
            tn_subtree(&t, dst, lo, hi, 0);
        free(t.pack);
        free(t.bpack);
        if (mine) {
#pragma omp barrier
#pragma omp single
            tree_sum(c, (const float *const *)res, nth, nc); /* nested: serial */
        }
    }
    free(res);
    free(tmp);
}

/* ---- attention ---- */

/* Contract (k_attention_ref and friends): causal softmax attention per
 * (batch, head). The kernels keep scores in base 2: q is scaled by
 * log2(e)/sqrt(hs) before the dot products (one FMA chain over the hs
 * channels, in channel order), the softmax's exponential is vexp2, and
 * lse goes back to base e at the end. The backward pass recomputes the
 * probabilities from lse, flash-attention style.
 *
 * A head's layouts (its keys and values transposed to [hs,tp], 16 queries
 * transposed into the lanes, the padded strides) and two fp32 steps, the
 * softmax's numerators (softmax_exp) and D = dO . O (bwd_d_rows), are in
 * kernels/attention_layout.h: the bf16 attention (kernels/bf16_sim.h,
 * attention_bf16) shares them, so that both take the same steps. */

/* -- attention: forward, 16 queries at a time, one per lane -- */

/* ot[g, r] = acc[g][r] / l[r]: nd channels of the block's queries, still
 * a channel a row (the block's output is transposed once at its end). */
VINLINE void pv_store(float *ot /* [nd,16] */, const vf *acc /* [PV_G] */, vf l, int nd)
{
UNROLL(8)
    for (int g = 0; g < PV_G; g++)
        if (g < nd)
            vstore(ot + VL * g, vdiv(acc[g], l));
}

/* PV_G output channels of a block of queries: the sum over keys of
 * probability times value, in PV_G independent accumulators. The values
 * are read where they are, a key's channels d0.. in one row of qkv (the
 * rows the scores' keys came from, so still in cache); a partial group
 * (nd < PV_G) reads only its own channels. */
VINLINE void pv_group(float *ot /* [nd,16] */, const float *p /* [nk,16] */,
                      const float *v /* value 0's channel d0, rows ld apart */, size_t ld, int nk,
                      vf l, int nd)
{
    vf acc[PV_G];
UNROLL(8)
    for (int g = 0; g < PV_G; g++)
        acc[g] = vzero();
    for (int j = 0; j < nk; j++) {
        vf pj = vload(p + VL * j);
        const float *vj = v + (size_t)j * ld; /* [nd] */
UNROLL(8)
        for (int g = 0; g < PV_G; g++)
            if (g < nd)
                acc[g] = vfma(pj, vset(vj[g]), acc[g]);
    }
    pv_store(ot, acc, l, nd);
}

/* Scores of keys j..j+SC_W-1 for the block's 16 queries (transposed and
 * scaled in qt), causally masked if `masked` (keys before the block need
 * no mask), into sc; returns their lane-wise max. Each score is still one
 * chain of hs FMAs in channel order, but SC_W chains overlap (8 on
 * AVX-512: the forward 0.97x-0.98x the time of 4). */
VINLINE vf key_scores(float *sc /* [tp,16] */, const float *qt /* [hs,16] */,
                      const float *qkv /* [T,3C], head's q col */, size_t ld, int j, int i0,
                      int hs, int masked)
{
    const float *k = qkv + (size_t)j * ld + hs; /* key j's [hs]; the next ld apart */
    vf s[SC_W];
UNROLL(8)
    for (int u = 0; u < SC_W; u++)
        s[u] = vzero();
UNROLL_BY(8)
    for (int d = 0; d < hs; d++) {
        vf qd = vload(qt + VL * d);
UNROLL(8)
        for (int u = 0; u < SC_W; u++)
            s[u] = vfma(qd, vset(k[u * ld + d]), s[u]);
    }
    vf mx = vset(-INFINITY);
UNROLL(8)
    for (int u = 0; u < SC_W; u++) {
        if (masked)
            s[u] = vsel(vlanes(j + u - i0), vset(-INFINITY), s[u]);
        vstore(sc + VL * (j + u), s[u]);
        mx = vmax(mx, s[u]);
    }
    return mx;
}

VINLINE void attention_body(float *o /* [T,C], head's col */, float *lse /* [T] */,
                            const float *qkv /* [T,3C], head's q col */, int T, int C, int hs,
                            float *qt /* [hs,16] */, float *sc /* [tp,16] */)
{
    const size_t ld = 3 * (size_t)C;
    const vf scale2 = vset(LOG2E / sqrtf((float)hs)), ninf = vset(-INFINITY);
    for (int i0 = 0; i0 < T; i0 += VL) {
        int w = min_int(VL, T - i0), nk = i0 + w; /* queries i0.., keys 0..nk-1 */
        prefetch_rows(qkv, ld, nk, min_int(T, nk + VL), 3 * hs); /* the next block's */
        q_block_transpose(qt, qkv + i0 * ld, ld, w, hs);
        for (int d = 0; d < hs; d++)
            vstore(qt + VL * d, vmul(vload(qt + VL * d), scale2));
        vf mx = ninf;
        int j = 0;
        for (; j + SC_W <= i0; j += SC_W)
            mx = vmax(mx, key_scores(sc, qt, qkv, ld, j, i0, hs, 0));
        for (; j + SC_W <= nk; j += SC_W)
            mx = vmax(mx, key_scores(sc, qt, qkv, ld, j, i0, hs, 1));
        for (; j < nk; j++) {
            const float *k = qkv + j * ld + hs; /* [hs] */
            vf s = vzero();
UNROLL_BY(8)
            for (int d = 0; d < hs; d++)
                s = vfma(vload(qt + VL * d), vset(k[d]), s);
            s = vsel(vlanes(j - i0), ninf, s); /* queries before key j */
            vstore(sc + VL * j, s);
            mx = vmax(mx, s);
        }
        /* qt is done with once the scores are in: it takes the output,
         * a channel a row, transposed into o at the end */
        vf l = softmax_exp(sc, nk, mx, i0, 0);
        for (int d0 = 0; d0 < hs; d0 += PV_G)
            pv_group(qt + VL * d0, sc, qkv + 2 * hs + d0, ld, nk, l, min_int(PV_G, hs - d0));
        vtranspose(o + (size_t)i0 * C, (size_t)C, qt, VL, hs, w);
        vstore_n(lse + i0, vadd(vmul(mx, vset(LN2)), vlog(l)), w); /* back to base e */
    }
}

/* hs = 8 (the default model's head) gets its own copy with the channel
 * loops unrolled. */
static void attention_head(float *o, float *lse, const float *qkv, int T, int C, int hs, float *qt,
                           float *sc)
{
    if (hs == 8)
        attention_body(o, lse, qkv, T, C, 8, qt, sc);
    else
        attention_body(o, lse, qkv, T, C, hs, qt, sc);
}

/* -- attention: backward -- */

/* acc[u] = sum over channels d of x[u][d] t[d][k0..k0+15], in channel
 * order, for U <= 4 rows of x (rows ldx apart) against 16 keys of a
 * transposed [hs,tp] block (kt or vt); and, unless acc2 is NULL, the same
 * for x2 against t2 into acc2 in the same pass (S and dP): 4 or 8 chains
 * of FMAs side by side. */
VINLINE void keys_dot(vf *acc /* [U] */, const float *x /* [U,hs], rows ldx apart */, size_t ldx,
                      const float *t /* [hs,tp] */, vf *acc2 /* [U] or NULL */,
                      const float *x2 /* [U,hs], rows ldx2 apart */, size_t ldx2,
                      const float *t2 /* [hs,tp] */, int tp, int k0, int hs, int U)
{
UNROLL(4)
    for (int u = 0; u < U; u++) {
        acc[u] = vzero();
        if (acc2)
            acc2[u] = vzero();
    }
UNROLL_BY(8)
    for (int d = 0; d < hs; d++) {
        vf td = vload(t + (size_t)d * tp + k0);
        vf td2 = acc2 ? vload(t2 + (size_t)d * tp + k0) : td;
UNROLL(4)
        for (int u = 0; u < U; u++) {
            acc[u] = vfma(vset(x[(size_t)u * ldx + d]), td, acc[u]);
            if (acc2)
                acc2[u] = vfma(vset(x2[(size_t)u * ldx2 + d]), td2, acc2[u]);
        }
    }
}

/* P and dS of queries i..i+U-1 (U <= 4) against keys k0..k0+15 (keys in
 * the lanes): S and from it P, dP and dS = P (dP - D). Four rows give the
 * exponential 4 vectors side by side. Where 8 sums fit the registers
 * beside their operands (SDP_TOGETHER: AVX-512), S and dP are summed in
 * one pass, 8 chains of FMAs (the head's backward 0.96x the time of two
 * passes); elsewhere in two, S then dP, 4 chains each (with 2 rows and
 * both sums in one pass, AVX2 took 1.04x-1.05x as long). */
VINLINE void bwd_probs_rows(float *pr /* [T,16] */,
                            float *ds /* the chunk's [T,16], rows lds apart */, size_t lds,
                            const float *dout /* [T,C], head's col */,
                            const float *qkv /* [T,3C], head's q col */, const float *lse /* [T] */,
                            const float *D /* [T] */, int C, int hs, const float *kt /* [hs,tp] */,
                            const float *vt /* [hs,tp] */, int tp, int k0, int i, int U,
                            size_t ld3, vf scale2, int masked)
{
    const float *q = qkv + (size_t)i * ld3, *g = dout + (size_t)i * C; /* row i's */
    vf acc[4], dp[4];
    keys_dot(acc, q, ld3, kt, SDP_TOGETHER ? dp : NULL, g, (size_t)C, vt, tp, k0, hs, U); /* S (dP) */
    /* in base 2, as the forward: P = 2^(s scale log2(e) - lse log2(e)) */
UNROLL(4)
    for (int u = 0; u < U; u++)
        acc[u] = vfms(acc[u], scale2, vset(lse[i + u] * LOG2E));
    vexp2_n(acc, U);
UNROLL(4)
    for (int u = 0; u < U; u++) {
        int r = i + u;
        vf p = acc[u];
        if (masked)
            p = vkeep(vlanes(r + 1 - k0), p); /* keys after r are not seen */
        vstore(pr + VL * (size_t)r, p);
        if (SDP_TOGETHER)
            vstore(ds + (size_t)r * lds, vmul(p, vsub(dp[u], vset(D[r]))));
    }
    if (SDP_TOGETHER)
        return;
    keys_dot(dp, g, (size_t)C, vt, NULL, NULL, 0, NULL, tp, k0, hs, U); /* dP */
UNROLL(4)
    for (int u = 0; u < U; u++) {
        int r = i + u;
        vf p = vload(pr + VL * (size_t)r);
        vstore(ds + (size_t)r * lds, vmul(p, vsub(dp[u], vset(D[r]))));
    }
}

/* The backward pass of one head, a chunk of 16 keys at a time, in three
 * sweeps over the queries that see the chunk, each with its reduction in
 * registers rather than in memory:
 *  1. P and dS (keys in the lanes), P kept as rows of 16 and dS in the
 *     chunk's 16 columns of its group's dS (ds_group);
 *  2. dV and dK summed over those queries in accumulators, then
 *     transposed into the key rows a whole [hs,16] block at a time;
 *  3. at a group's last chunk, the group's share of dQ_i = scale sum_j
 *     dS_ij K_j, Q_W queries at a time so the chains overlap: 16 channels
 *     in the lanes of a vector while a head has more than 8 left, the last
 *     8 or fewer with two keys to a vector (bwd_q_pairs). */
VINLINE void bwd_probs(float *pr /* [T,16] */,
                       float *ds /* the chunk's [T,16], rows lds apart */, size_t lds,
                       const float *dout /* [T,C], head's col */,
                       const float *qkv /* [T,3C], head's q col */, const float *lse /* [T] */,
                       const float *D /* [T] */, int T, int C, int hs,
                       const float *kt /* [hs,tp] */, const float *vt /* [hs,tp] */, int tp, int k0)
{
    const size_t ld3 = 3 * (size_t)C;
    const vf scale2 = vset(LOG2E / sqrtf((float)hs));
    int i = k0, diagonal = min_int(T, k0 + VL); /* rows that see only some of the keys */
    for (; i + 4 <= diagonal; i += 4)
        bwd_probs_rows(pr, ds, lds, dout, qkv, lse, D, C, hs, kt, vt, tp, k0, i, 4, ld3, scale2, 1);
    for (; i < diagonal; i++)
        bwd_probs_rows(pr, ds, lds, dout, qkv, lse, D, C, hs, kt, vt, tp, k0, i, 1, ld3, scale2, 1);
    for (; i + 4 <= T; i += 4)
        bwd_probs_rows(pr, ds, lds, dout, qkv, lse, D, C, hs, kt, vt, tp, k0, i, 4, ld3, scale2, 0);
    for (; i < T; i++)
        bwd_probs_rows(pr, ds, lds, dout, qkv, lse, D, C, hs, kt, vt, tp, k0, i, 1, ld3, scale2, 0);
}

/* One of dV and dK for keys k0..k0+15 (in the lanes), channels
 * d0..d0+nd-1 (nd <= KV_G): t[g][r] = scale * sum over rows i of
 * w[i][r] x[i][g], rows i in order from k0. dV takes w = P and x = dO, dK
 * w = dS and x = Q; each in its own pass, so the accumulators and the one
 * row of weights fit AVX2's 16 registers. t keeps the channels a row of 16
 * keys each, for bwd_kv's one transpose into dqkv. */
VINLINE void bwd_kv_pass(float *t /* [nd,16] */,
                         const float *w /* row k0's 16 weights, rows ldw apart */, size_t ldw,
                         const float *x /* row k0's channel d0, rows ldx apart */, size_t ldx,
                         int rows, int nd, float scale)
{
    vf acc[KV_G];
UNROLL(8)
    for (int g = 0; g < KV_G; g++)
        acc[g] = vzero();
    for (int i = 0; i < rows; i++) {
        vf wi = vload(w + i * ldw);
UNROLL(8)
        for (int g = 0; g < KV_G; g++)
            if (g < nd)
                acc[g] = vfma(wi, vset(x[i * ldx + g]), acc[g]);
    }
    vf sc = vset(scale); /* x 1 is exact */
UNROLL(8)
    for (int g = 0; g < KV_G; g++)
        if (g < nd)
            vstore(t + VL * g, vmul(acc[g], sc));
}

/* dV and dK of keys k0..k0+15, all hs channels, KV_G at a time, each into
 * its [hs,16] buffer and from there transposed into its key rows. */
VINLINE void bwd_kv(float *dqkv /* [T,3C], head's q col */, const float *pr /* [T,16] */,
                    const float *ds /* the chunk's [T,16], rows lds apart */, size_t lds,
                    const float *dout /* [T,C], head's col */,
                    const float *qkv /* [T,3C], head's q col */, int T, int C, int hs, int k0,
                    float *tv /* [hs,16] */, float *tk /* [hs,16] */)
{
    const size_t ld3 = 3 * (size_t)C;
    int rows = T - k0;
    const float *p0 = pr + VL * (size_t)k0, *s0 = ds + (size_t)k0 * lds; /* row k0's */
    const float *g0 = dout + (size_t)k0 * C, *q0 = qkv + k0 * ld3;      /* row k0's */
    const float scale = 1.0f / sqrtf((float)hs);
    /* hs = 8 where KV_G is 6 (AVX2): two passes of 4, not 6 and 2; a pass
     * of 2 channels has too few chains to hide the FMA's latency */
    int gs = hs == 8 && KV_G < 8 ? 4 : KV_G, d0 = 0;
    for (; d0 + gs <= hs; d0 += gs) /* nd a constant: no test per channel */
        if (gs == 4) {
            bwd_kv_pass(tv + VL * d0, p0, VL, g0 + d0, (size_t)C, rows, 4, 1.0f);
            bwd_kv_pass(tk + VL * d0, s0, lds, q0 + d0, ld3, rows, 4, scale);
        } else {
            bwd_kv_pass(tv + VL * d0, p0, VL, g0 + d0, (size_t)C, rows, KV_G, 1.0f);
            bwd_kv_pass(tk + VL * d0, s0, lds, q0 + d0, ld3, rows, KV_G, scale);
        }
    if (d0 < hs) {
        bwd_kv_pass(tv + VL * d0, p0, VL, g0 + d0, (size_t)C, rows, hs - d0, 1.0f);
        bwd_kv_pass(tk + VL * d0, s0, lds, q0 + d0, ld3, rows, hs - d0, scale);
    }
    float *row = dqkv + (size_t)k0 * ld3; /* key k0's q col */
    vtranspose(row + 2 * hs, ld3, tv, VL, hs, min_int(VL, rows));
    vtranspose(row + hs, ld3, tk, VL, hs, min_int(VL, rows));
}

/* bwd_q_pairs' scratch: the zipped keys [T/2,16], the odd sums [T,8]. */
static size_t q_pairs_floats(int T) { return (size_t)VL * ((T + 1) / 2) + 8 * (size_t)T; }

/* A backward head's scratch after kt and vt: dS, P [T,16], D [T], the
 * [hs,16] of dV and of dK for 16 keys, and bwd_q_pairs' zipped keys and
 * odd sums. */
static size_t ds_floats(int T, int hs)
{
    return (size_t)T * (ds_stride(T) + VL + 1) + 2 * VL * (size_t)hs + q_pairs_floats(T);
}

/* dQ_i = scale sum_j dS_ij K_j, summed a group of keys at a time: dS is
 * kept only for the group's keys, [T, group + 16] (ds_group), not for all
 * T (4 MiB a head at T 1,024; in groups, GPT-2 small's backward took
 * 0.78x-0.83x as long). Each query's sums wait between groups
 * in its own dQ row of dqkv: read back at each group but the first,
 * scaled and stored for good at the group that holds the query's own key.
 * Each sum's FMA chain runs over its keys in order, so the bits are those
 * of one pass over a whole row of dS, whatever the group. */

/* The pass's sums so far: zero at the first group, else from dq. */
VINLINE vf q_sum_v(const float *dq, int kb, int nd) { return kb ? vload_n(dq, nd) : vzero(); }

/* The channels of dQ that bwd_q_pairs takes (the last 8 or fewer; all of
 * a head of 8) start at q_pairs_d0(hs); hs when there are none. */
static int q_pairs_d0(int hs)
{
    int d0 = 0;
    while (hs - d0 > 8)
        d0 += VL;
    return min_int(d0, hs);
}

/* Keys kb..ke-1's share of dQ for queries i0..i0+W-1 (W <= Q_W),
 * channels d0..d0+nd-1 (nd <= 8). 8 channels fill half a vector, so the
 * other half takes the next key: lane 2c of a query's vector sums channel
 * c over the even keys, lane 2c+1 over the odd ones, each chain in key
 * order, and dQ is the even sum plus the odd one: one FMA where a half
 * vector took two (the backward of a head of 8: 0.93x-0.97x the time
 * with dQ in half vectors, one key an FMA). kz holds keys j and j+1 zipped
 * so (zip_keys); between groups the even sums wait in dq, the odd ones in
 * odd. The pass's last query sees keys up to its own; the entries of dS
 * past an earlier query's own key are the zeros bwd_probs wrote on the
 * diagonal. W is a constant at each call, so the sums stay in registers. */
VINLINE void bwd_q_pairs(float *dqkv /* [T,3C], head's q col */, float *odd /* [T,8] */,
                         const float *ds /* [T,lds] */, size_t lds,
                         const float *kz /* [T/2,16] */,
                         const float *qkv /* [T,3C], head's q col */, int C, int hs, int kb,
                         int ke, int i0, int W, int d0, int nd)
{
    const size_t ld3 = 3 * (size_t)C;
    float *dq = dqkv + (size_t)i0 * ld3 + d0, *oq = odd + (size_t)i0 * 8; /* [W,nd], [W,8] */
    const float *s = ds + (size_t)i0 * lds - kb; /* s[r * lds + j]: query i0+r, key j */
    int j1 = min_int(ke, i0 + W), last = i0 < ke, j = kb; /* kb is even */
    vf acc[Q_W];
UNROLL(8)
    for (int r = 0; r < W; r++)
        acc[r] = kb ? hzip(hload_n(dq + r * ld3, nd), hload_n(oq + 8 * r, 8)) : vzero();
    for (; j + 2 <= j1; j += 2) {
        vf k = vload(kz + (size_t)8 * j); /* keys j and j+1 */
UNROLL(8)
        for (int r = 0; r < W; r++)
            acc[r] = vfma(vdup2(s + r * lds + j), k, acc[r]);
    }
    if (j < j1) { /* an even key alone: its odd lanes add nothing */
        vf k = hzip(hload_n(qkv + j * ld3 + hs + d0, nd), hzero());
UNROLL(8)
        for (int r = 0; r < W; r++)
            acc[r] = vfma(vset(s[r * lds + j]), k, acc[r]);
    }
    vh scale = hset(1.0f / sqrtf((float)hs));
UNROLL(8)
    for (int r = 0; r < W; r++) {
        vh even, odds;
        hunzip(acc[r], &even, &odds);
        if (last) {
            hstore_n(dq + r * ld3, hmul(hadd(even, odds), scale), nd);
        } else {
            hstore_n(dq + r * ld3, even, nd);
            hstore_n(oq + 8 * r, odds, 8);
        }
    }
}

/* Channels d0..d0+nd-1 of keys 0..T-1 zipped two keys a row for
 * bwd_q_pairs: kz[j/2] = hzip(K_j, K_j+1), zero past the last key. */
static void zip_keys(float *kz /* [T/2,16] */, const float *qkv /* [T,3C], head's q col */, int T,
                     int C, int hs, int d0, int nd)
{
    const size_t ld3 = 3 * (size_t)C;
    for (int j = 0; j < T; j += 2) {
        vh k1 = j + 1 < T ? hload_n(qkv + (j + 1) * ld3 + hs + d0, nd) : hzero();
        vstore(kz + (size_t)8 * j, hzip(hload_n(qkv + j * ld3 + hs + d0, nd), k1));
    }
}

/* Keys kb..ke-1's share of dQ for queries i0..i0+W-1 (W <= Q_W),
 * channels d0..d0+nd-1 (8 < nd <= 16), one chain over the keys in order
 * per channel: each dS entry feeds 16 lanes. Q_W divides 16, so a pass's
 * queries lie in one block of 16 rows. */
VINLINE void bwd_q_wide(float *dqkv /* [T,3C], head's q col */, const float *ds /* [T,lds] */,
                        size_t lds, const float *qkv /* [T,3C], head's q col */, int C, int hs,
                        int kb, int ke, int i0, int W, int d0, int nd)
{
    const size_t ld3 = 3 * (size_t)C;
    float *dq = dqkv + (size_t)i0 * ld3 + d0; /* [W,nd], rows ld3 apart */
    const float *s = ds + (size_t)i0 * lds - kb; /* s[r * lds + j]: query i0+r, key j */
    int j1 = min_int(ke, i0 + W), last = i0 < ke;
    vf acc[Q_W];
UNROLL(8)
    for (int r = 0; r < W; r++)
        acc[r] = q_sum_v(dq + r * ld3, kb, nd);
    for (int j = kb; j < j1; j++) {
        vf k = vload_n(qkv + j * ld3 + hs + d0, nd);
UNROLL(8)
        for (int r = 0; r < W; r++)
            acc[r] = vfma(vset(s[r * lds + j]), k, acc[r]);
    }
    vf scale = vset(last ? 1.0f / sqrtf((float)hs) : 1.0f); /* x 1 is exact */
UNROLL(8)
    for (int r = 0; r < W; r++)
        vstore_n(dq + r * ld3, vmul(acc[r], scale), nd);
}

/* Keys kb..ke-1's share of dQ for every query that sees them (kb..T-1),
 * channels d0..d0+nd-1 (8 < nd <= 16), Q_W queries a pass. */
VINLINE void bwd_q_cols(float *dqkv, const float *ds, size_t lds, const float *qkv, int T, int C,
                        int hs, int kb, int ke, int d0, int nd)
{
    int i0 = kb;
    for (; i0 + Q_W <= T; i0 += Q_W)
        bwd_q_wide(dqkv, ds, lds, qkv, C, hs, kb, ke, i0, Q_W, d0, nd);
    for (; i0 < T; i0++)
        bwd_q_wide(dqkv, ds, lds, qkv, C, hs, kb, ke, i0, 1, d0, nd);
}

/* Keys kb..ke-1's share of dQ, all channels: 16 at a time while more than
 * 8 are left, the last 8 or fewer in pairs of keys (bwd_q_pairs). */
VINLINE void bwd_q_group(float *dqkv, float *odd, const float *ds, size_t lds, const float *kz,
                         const float *qkv, int T, int C, int hs, int kb, int ke)
{
    int d0 = 0, dp = q_pairs_d0(hs);
    for (; d0 < dp; d0 += VL)
        if (hs - d0 >= VL) /* a constant: whole vectors */
            bwd_q_cols(dqkv, ds, lds, qkv, T, C, hs, kb, ke, d0, VL);
        else
            bwd_q_cols(dqkv, ds, lds, qkv, T, C, hs, kb, ke, d0, hs - d0);
    if (dp < hs) {
        int nd = hs - dp, i0 = kb;
        for (; i0 + Q_W <= T; i0 += Q_W)
            bwd_q_pairs(dqkv, odd, ds, lds, kz, qkv, C, hs, kb, ke, i0, Q_W, dp, nd);
        for (; i0 < T; i0++)
            bwd_q_pairs(dqkv, odd, ds, lds, kz, qkv, C, hs, kb, ke, i0, 1, dp, nd);
    }
}

/* next_qkv: the next head's q column in qkv, or NULL. A head starts by
 * reading all its keys and values at once (kv_transpose), so while this
 * head computes, the next head's are asked for, a chunk's worth of rows
 * at each chunk. The rest of its inputs a head reads row by row as it
 * goes, which the hardware keeps up with: asking for them too (dO, O,
 * lse and dqkv's rows, 11 lines a row against 2) made the backward
 * slower, 0.93x-0.97x as fast as asking for the keys and values alone. */
VINLINE void attention_bwd_body(float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *lse, int T, int C, int hs, float *kt, float *vt,
                                float *ds, int tp, const float *next_qkv)
{
    int gk = ds_group(T);
    size_t lds = ds_stride(T);
    float *pr = ds + (size_t)T * lds, *D = pr + VL * (size_t)T; /* [T,16], [T] */
    float *tv = D + T, *tk = tv + VL * (size_t)hs;                /* [hs,16] each */
    float *kz = tk + VL * (size_t)hs, *odd = kz + VL * (size_t)((T + 1) / 2); /* [T/2,16], [T,8] */
    kv_transpose(kt, vt, qkv, T, C, hs, tp);
    int dp = q_pairs_d0(hs);
    if (dp < hs)
        zip_keys(kz, qkv, T, C, hs, dp, hs - dp);
    /* Past 8 channels a row's chain waits on its additions, so 4 rows go
     * side by side (0.92x-0.96x the backward's time at head sizes 16-64);
     * at 8, one row at a time is faster (4 rows: 1.04x as long) */
    int i = 0;
    if (hs > 8)
        for (; i + 4 <= T; i += 4)
            bwd_d_rows(D, dout, out, C, hs, i, 4);
    for (; i < T; i++)
        bwd_d_rows(D, dout, out, C, hs, i, 1);
    for (int k0 = 0; k0 < T; k0 += VL) {
        if (next_qkv) /* keys and values, 2 hs floats from the key column */
            prefetch_rows(next_qkv + hs, 3 * (size_t)C, k0, min_int(T, k0 + VL), 2 * hs);
        int kb = k0 - k0 % gk, ke = min_int(kb + gk, T); /* the chunk's group of keys */
        float *dsc = ds + (k0 - kb);                      /* the chunk's columns of dS */
        bwd_probs(pr, dsc, lds, dout, qkv, lse, D, T, C, hs, kt, vt, tp, k0);
        bwd_kv(dqkv, pr, dsc, lds, dout, qkv, T, C, hs, k0, tv, tk);
        if (k0 + VL >= ke) /* the group's last chunk */
            bwd_q_group(dqkv, odd, ds, lds, kz, qkv, T, C, hs, kb, ke);
    }
}

/* ds is a group's dS, [T,ds_stride(T)], followed by [T,16], [T] and
 * twice [hs,16] of scratch (ds_floats); next_qkv the next head's q
 * column, or NULL. hs = 8 gets its own copy with the channel loops
 * unrolled. */
static void attention_bwd_head(float *dqkv /* [T,3C], head's q col */,
                               const float *dout /* [T,C], head's col */,
                               const float *qkv /* [T,3C], head's q col */,
                               const float *out /* [T,C], head's col */, const float *lse /* [T] */,
                               int T, int C, int hs, float *kt /* [hs,tp] */,
                               float *vt /* [hs,tp] */,
                               float *ds /* ds_floats(T, hs) */, int tp,
                               const float *next_qkv)
{
    if (hs == 8)
        attention_bwd_body(dqkv, dout, qkv, out, lse, T, C, 8, kt, vt, ds, tp, next_qkv);
    else
        attention_bwd_body(dqkv, dout, qkv, out, lse, T, C, hs, kt, vt, ds, tp, next_qkv);
}

/* -- attention: one query (a decode step, a window's last query) -- */

/* A query against nk keys of one head (rows ld apart): hs-long dot
 * products 16 channels at a time (vsum's tree across the lanes), then the
 * softmax in base e and the weighted sum of the values. s: [round16(nk)]. */
static void attend_one(float *o /* [hs] */, const float *q /* [hs] */,
                       const float *k0 /* [nk], rows ld apart */,
                       const float *v0 /* [nk], rows ld apart */, int nk, int ld, int hs,
                       float *s /* [round16(nk)] */)
{
    const float scale = 1.0f / sqrtf((float)hs);
    float mx = -INFINITY;
    for (int j = 0; j < nk; j++) {
        vf acc = vzero();
        for (int d = 0; d < hs; d += VL)
            acc = vfma(vload_n(q + d, hs - d), vload_n(k0 + (size_t)j * ld + d, hs - d), acc);
        s[j] = vsum(acc) * scale;
        mx = s[j] > mx ? s[j] : mx;
    }
    vf sum = vzero();
    for (int j = 0; j < nk; j += VL) {
        vf e = vkeep(vlanes(nk - j), vexp(vsub(vload_n(s + j, nk - j), vset(mx))));
        vstore_n(s + j, e, nk - j);
        sum = vadd(sum, e);
    }
    vf l = vset(vsum(sum));
    for (int d = 0; d < hs; d += VL) {
        vf acc = vzero();
        for (int j = 0; j < nk; j++)
            acc = vfma(vset(s[j]), vload_n(v0 + (size_t)j * ld + d, hs - d), acc);
        vstore_n(o + d, vdiv(acc, l), hs - d);
    }
}

/* -- attention: the head drivers -- */

/* (batch, head) pairs shared by the threads (share_next: each its own
 * share, stealing at the end), each thread with its own scratch. */

static void attention(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                      const float *qkv /* [B,T,3C] */, int B, int T, int C, int H, int kind)
{
    if (kind != MM_FP32) {
        attention_bf16(out, lse, qkv, B, T, C, H, kind == MM_BF16_NATIVE);
        return;
    }
    int hs = C / H;
    struct share *sh = share_alloc(B * H, 1);
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        size_t nqt = VL * (size_t)hs, nsc = VL * (size_t)key_stride(T);
        float *qt = kmalloc(sizeof(float) * (nqt + nsc)); /* [hs,16] */
        float *sc = qt + nqt; /* [tp,16] scores, then probabilities */
        int h0, h1;
        while (share_next(sh, 0, &h0, &h1)) {
            for (int bh = h0; bh < h1; bh++) {
                int b = bh / H, h = bh % H;
                size_t blk = (size_t)T * 3 * C;
                const float *x = qkv + b * blk + 3 * hs * h; /* head's q col */
                if (bh + 1 < B * H) /* the next head's first block, as prefetch_rows says */
                    prefetch_rows(qkv + (bh + 1) / H * blk + 3 * hs * ((bh + 1) % H),
                                  3 * (size_t)C, 0, min_int(T, VL), 3 * hs);
                attention_head(out + (size_t)b * T * C + hs * h, lse + (size_t)bh * T, x, T, C, hs,
                               qt, sc);
            }
        }
        free(qt);
    }
    free(sh);
}

/* A head of more than HEAD_PACK channels runs its backward on contiguous
 * copies of its rows, [T,3hs] of q, k, v, [T,hs] of dO and of O, and
 * writes [T,3hs] of dqkv, copied out at its end. In place its rows are 3C
 * (and C) floats apart, and each of the backward's walks down a column
 * touches a line every 9 KiB (q, k, v) or 3 KiB (dO, O) at C 768: lines
 * in 4 of L1's 64 sets, so a walk of more than 32 rows cannot stay in L1
 * (the likely cause: perf here counts no cache misses). Copied, GPT-2
 * small's backward (T 1024, 12 heads of 64) took 0.66x as long; 4 heads
 * of 16 to 64 at T 128 to 1024, 0.83x-0.95x (0.99x at 16 and T 128); 4
 * heads of 8, 1.12x, so those stay in place. The same values, the same
 * bits. */
#define HEAD_PACK 8

static void attention_bwd(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                          const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                          const float *lse /* [B,H,T] */, int B, int T, int C, int H, int kind)
{
    if (kind != MM_FP32) {
        attention_bwd_bf16(dqkv, dout, qkv, out, lse, B, T, C, H, kind == MM_BF16_NATIVE);
        return;
    }
    int hs = C / H, tp = key_stride(T), pack = hs > HEAD_PACK;
    struct share *sh = share_alloc(B * H, 1);
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        size_t np = pack ? (size_t)T * 8 * hs : 0, nds = ds_floats(T, hs);
        float *kt = kmalloc(sizeof(float) * (2 * (size_t)hs * tp + nds + np)); /* [hs,tp] */
        float *vt = kt + (size_t)hs * tp;                                      /* [hs,tp] */
        float *ds = vt + (size_t)hs * tp; /* dS, P, D, dV and dK of 16 keys */
        float *pq = ds + nds;                          /* [T,3hs] the head's q, k, v */
        float *pdq = pq + (size_t)T * 3 * hs;          /* [T,3hs] its dq, dk, dv */
        float *pg = pdq + (size_t)T * 3 * hs, *po = pg + (size_t)T * hs; /* [T,hs] dO, O */
        int h0, h1;
        while (share_next(sh, 0, &h0, &h1)) {
            for (int bh = h0; bh < h1; bh++) {
                int b = bh / H, h = bh % H;
                size_t r3 = (size_t)b * T * 3 * C + 3 * hs * h, r1 = (size_t)b * T * C + hs * h;
                const float *x = qkv + r3, *d = dout + r1;
                if (pack) { /* rows hs apart: the head's "C" is hs */
                    copy_rows(pq, 3 * (size_t)hs, x, 3 * (size_t)C, T, 3 * hs);
                    copy_rows(pg, (size_t)hs, d, (size_t)C, T, hs);
                    copy_rows(po, (size_t)hs, out + r1, (size_t)C, T, hs);
                    attention_bwd_head(pdq, pg, pq, po, lse + (size_t)bh * T, T, hs, hs, kt, vt, ds,
                                       tp, NULL);
                    copy_rows(dqkv + r3, 3 * (size_t)C, pdq, 3 * (size_t)hs, T, 3 * hs);
                    continue;
                }
                /* the next head: this thread's next unless bh ends its share */
                int nb = (bh + 1) / H, nh = (bh + 1) % H;
                const float *next = qkv + (size_t)nb * T * 3 * C + 3 * hs * nh;
                attention_bwd_head(dqkv + r3, d, x, out + r1, lse + (size_t)bh * T, T, C, hs, kt,
                                   vt, ds, tp, bh + 1 < B * H ? next : NULL);
            }
        }
        free(kt);
    }
    free(sh);
}

/* Each window's last query against its T keys: k_attention_last. */
static void attention_last(float *out /* [B,C] */, const float *qkv /* [B,T,3C] */, int B, int T,
                           int C, int H)
{
    int hs = C / H;
#pragma omp parallel if ((long)B * T * C >= PAR_WORK)
    {
        float *s = kmalloc(sizeof(float) * (size_t)round16(T)); /* [T] scores */
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            int b = bh / H, h = bh % H;
            const float *x = qkv + (size_t)b * T * 3 * C + 3 * hs * h; /* head's q, row 0 */
            attend_one(out + (size_t)b * C + hs * h, x + (size_t)(T - 1) * 3 * C, x + hs,
                       x + 2 * hs, T, 3 * C, hs, s);
        }
        free(s);
    }
}

/* A decode step: the new token's k and v appended to the caches, then its
 * query against rows 0..pos. */
static void attention_step(float *out /* [nb,C] */, float *kc /* [nb,tmax,C] */,
                           float *vc /* [nb,tmax,C] */, const float *qkv /* [nb,3C] */, int nb,
                           int pos, int tmax, int C, int H)
{
    int hs = C / H, nk = pos + 1;
    for (int s = 0; s < nb; s++)
        for (int h = 0; h < H; h++) {
            size_t at = ((size_t)s * tmax + pos) * C + hs * h;
            const float *x = qkv + (size_t)s * 3 * C + 3 * hs * h;
            memcpy(kc + at, x + hs, sizeof(float) * (size_t)hs);
            memcpy(vc + at, x + 2 * hs, sizeof(float) * (size_t)hs);
        }
#pragma omp parallel if ((long)nb * nk * C >= PAR_WORK)
    {
        float *s = kmalloc(sizeof(float) * (size_t)round16(nk)); /* [nk] scores */
#pragma omp for schedule(static)
        for (int bh = 0; bh < nb * H; bh++) {
            int b = bh / H, h = bh % H;
            size_t c0 = (size_t)b * tmax * C + hs * h; /* cache row 0, head's col */
            attend_one(out + (size_t)b * C + hs * h, qkv + (size_t)b * 3 * C + 3 * hs * h, kc + c0,
                       vc + c0, nk, C, hs, s);
        }
        free(s);
    }
}

/* ---- layernorm ---- */

#define LN_ROWS 4 /* rows normalized side by side (any number: the same bits) */

/* Contract (k_layernorm_ref): per row, mean = (sum x) / c, var = (sum
 * (x - mean)^2) / c, rstd = 1 / sqrt(var + eps), y = (x - mean) rstd w + b.
 * Here each sum runs in 16 lanes (lane i takes columns i, i+16, ...) and
 * ends in vsum's tree; (x - mean)^2 and the final w, b are FMAs. */

/* Rows i..i+R-1, each step for all R rows before the next: a row is a
 * chain of two sums across lanes, a square root and a division, so R rows
 * side by side keep the pipes busy where one row would wait on latency.
 * Each pass takes the row's whole vectors, then a partial one (c % 16:
 * none in any model of whole vectors): with a lane mask at every vector,
 * clang's layernorm took 1.27x gcc's time. */
VINLINE void layernorm_rows(float *y /* [n,c] */, float *mean /* [n] */, float *rstd /* [n] */,
                            const float *x /* [n,c] */, const float *w /* [c] */,
                            const float *b /* [c] */, int i, int R, int c)
{
    vf acc[LN_ROWS], muv[LN_ROWS], rsv[LN_ROWS];
    int cw = c - c % VL, t = c - cw; /* whole vectors' columns, the tail's */
UNROLL(4)
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)(i + r) * c; /* [c] */
        acc[r] = muv[r] = rsv[r] = vzero(); /* (gcc cannot tell the later loops set them) */
        for (int j = 0; j < cw; j += VL)
            acc[r] = vadd(acc[r], vload(xr + j));
        if (t)
            acc[r] = vadd(acc[r], vload_n(xr + cw, t));
    }
UNROLL(4)
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)(i + r) * c; /* [c] */
        mean[i + r] = vsum(acc[r]) / (float)c;
        muv[r] = vset(mean[i + r]);
        acc[r] = vzero();
        for (int j = 0; j < cw; j += VL) {
            vf d = vsub(vload(xr + j), muv[r]);
            acc[r] = vfma(d, d, acc[r]);
        }
        if (t) { /* masked lanes: 0 - mu, kept out of the sum */
            vf d = vkeep(vlanes(t), vsub(vload_n(xr + cw, t), muv[r]));
            acc[r] = vfma(d, d, acc[r]);
        }
    }
UNROLL(4)
    for (int r = 0; r < R; r++) {
        rstd[i + r] = 1.0f / sqrtf(vsum(acc[r]) / (float)c + LN_EPS);
        rsv[r] = vset(rstd[i + r]);
    }
UNROLL(4)
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)(i + r) * c; /* [c] */
        float *yr = y + (size_t)(i + r) * c;       /* [c] */
        for (int j = 0; j < cw; j += VL) {
            vf xh = vmul(vsub(vload(xr + j), muv[r]), rsv[r]);
            vstore(yr + j, vfma(xh, vload(w + j), vload(b + j)));
        }
        if (t) {
            vf xh = vmul(vsub(vload_n(xr + cw, t), muv[r]), rsv[r]);
            vstore_n(yr + cw, vfma(xh, vload_n(w + cw, t), vload_n(b + cw, t)), t);
        }
    }
}

static void layernorm(float *y /* [n,c] */, float *mean /* [n] */, float *rstd /* [n] */,
                      const float *x /* [n,c] */, const float *w /* [c] */,
                      const float *b /* [c] */, int n, int c)
{
    int blocks = (n + LN_ROWS - 1) / LN_ROWS;
    struct share *shr = share_alloc(blocks, 1); /* shared with stealing */
#pragma omp parallel if ((long)n * c >= PAR_WORK)
    FOR_SHARED(shr, t) {
        int i = t * LN_ROWS;
        if (i + LN_ROWS <= n)
            layernorm_rows(y, mean, rstd, x, w, b, i, LN_ROWS, c);
        else
            for (; i < n; i++)
                layernorm_rows(y, mean, rstd, x, w, b, i, 1, c);
    }
    free(shr);
}

/* Rows [i0, i1): their dx (plus r1 + r2, those present, when the
 * compiler folded the residual stream's gradient sum in), and their partial
 * dw, db (pw, pb [c]) summed over the rows in order from zero. */
/* t lanes of a row's dx from its g = dy w and x-hat: rstd (g - mean(g) -
 * x-hat mean(g x-hat)), then plus r1 + r2 (those present, from element
 * `at`) when the compiler folded the residual stream's gradient sum in:
 * (r1 + r2) + d, add_n's order, d its last operand. */
VINLINE vf ln_bwd_dx(vf g, vf xh, vf s1c, vf s2c, vf rsv, const float *r1, const float *r2,
                     size_t at, int t)
{
    vf d = vmul(rsv, vsub(vsub(g, s1c), vmul(xh, s2c)));
    if (r1) {
        vf r = vload_n(r1 + at, t);
        d = vadd(r2 ? vadd(r, vload_n(r2 + at, t)) : r, d);
    }
    return d;
}

/* layernorm_bwd_block for a row of NV whole vectors (NV <= LN_REG_V, <= 4), the
 * same operations in the same order, but the partial dw and db kept in
 * registers across the rows and each row's x-hat and g from its first pass
 * reused in its second. In memory, each row's update of pw and pb waited
 * on the row before's (a store, then its load): the default model's
 * backward layernorm took 1.11x-1.14x as long (gcc and clang). */
VINLINE void layernorm_bwd_regs(float *dx /* [n,c] */, float *pw /* [c] */, float *pb /* [c] */,
                                const float *dy /* [n,c] */, const float *x /* [n,c] */,
                                const float *w /* [c] */, const float *mean /* [n] */,
                                const float *rstd /* [n] */, const float *r1 /* [n,c] or NULL */,
                                const float *r2 /* [n,c] or NULL */, int i0, int i1, int NV)
{
    const int c = NV * VL;
    vf aw[4], ab[4], xh[4], g[4]; /* [NV] */
UNROLL(4)
    for (int v = 0; v < NV; v++)
        aw[v] = ab[v] = vzero();
    for (int i = i0; i < i1; i++) {
        const float *xi = x + (size_t)i * c, *gi = dy + (size_t)i * c; /* [c] each */
        vf muv = vset(mean[i]), rsv = vset(rstd[i]);
        vf s1v = vzero(), s2v = vzero();
UNROLL(4)
        for (int v = 0; v < NV; v++) {
            vf gy = vload(gi + VL * v);
            xh[v] = vmul(vsub(vload(xi + VL * v), muv), rsv);
            g[v] = vmul(gy, vload(w + VL * v));
            s1v = vadd(s1v, g[v]);
            s2v = vfma(g[v], xh[v], s2v);
            aw[v] = vfma(gy, xh[v], aw[v]);
            ab[v] = vadd(gy, ab[v]);
        }
        vf s1c = vset(vsum(s1v) / (float)c), s2c = vset(vsum(s2v) / (float)c);
UNROLL(4)
        for (int v = 0; v < NV; v++) {
            size_t at = (size_t)i * c + VL * v;
            vstore(dx + at, ln_bwd_dx(g[v], xh[v], s1c, s2c, rsv, r1, r2, at, VL));
        }
    }
UNROLL(4)
    for (int v = 0; v < NV; v++) {
        vstore(pw + VL * v, aw[v]);
        vstore(pb + VL * v, ab[v]);
    }
}

static void layernorm_bwd_block(float *dx /* [n,c] */, float *pw /* [c] */, float *pb /* [c] */,
                                const float *dy /* [n,c] */, const float *x /* [n,c] */,
                                const float *w /* [c] */, const float *mean /* [n] */,
                                const float *rstd /* [n] */, const float *r1 /* [n,c] or NULL */,
                                const float *r2 /* [n,c] or NULL */, int i0, int i1, int c)
{
    switch (c % VL || c / VL > LN_REG_V ? 0 : c / VL) { /* NV a constant in each instance */
    case 1: layernorm_bwd_regs(dx, pw, pb, dy, x, w, mean, rstd, r1, r2, i0, i1, 1); return;
    case 2: layernorm_bwd_regs(dx, pw, pb, dy, x, w, mean, rstd, r1, r2, i0, i1, 2); return;
    case 3: layernorm_bwd_regs(dx, pw, pb, dy, x, w, mean, rstd, r1, r2, i0, i1, 3); return;
    case 4: layernorm_bwd_regs(dx, pw, pb, dy, x, w, mean, rstd, r1, r2, i0, i1, 4); return;
    default: break;
    }
    for (int j = 0; j < c; j++)
        pw[j] = pb[j] = 0.0f;
    for (int i = i0; i < i1; i++) {
        const float *xi = x + (size_t)i * c, *gi = dy + (size_t)i * c; /* [c] each */
        float *dxi = dx + (size_t)i * c;                               /* [c] */
        vf muv = vset(mean[i]), rsv = vset(rstd[i]);
        vf s1v = vzero(), s2v = vzero();
        for (int j = 0; j < c; j += VL) { /* masked lanes load 0, so add 0 everywhere */
            int t = c - j;
            vf gy = vload_n(gi + j, t);
            vf xh = vkeep(vlanes(t), vmul(vsub(vload_n(xi + j, t), muv), rsv));
            vf g = vmul(gy, vload_n(w + j, t));
            s1v = vadd(s1v, g);
            s2v = vfma(g, xh, s2v);
            vstore_n(pw + j, vfma(gy, xh, vload_n(pw + j, t)), t);
            vstore_n(pb + j, vadd(gy, vload_n(pb + j, t)), t);
        }
        vf s1c = vset(vsum(s1v) / (float)c), s2c = vset(vsum(s2v) / (float)c);
        for (int j = 0; j < c; j += VL) {
            int t = c - j;
            vf xh = vmul(vsub(vload_n(xi + j, t), muv), rsv);
            vf g = vmul(vload_n(gi + j, t), vload_n(w + j, t));
            vstore_n(dxi + j, ln_bwd_dx(g, xh, s1c, s2c, rsv, r1, r2, (size_t)i * c + j, t), t);
        }
    }
}

/* dw, db reduced over the rows: by ROW_BLOCK blocks summed in block order
 * (seg < 0, k_layernorm_bwd), or by the leaves and the tree. */
static void layernorm_bwd_seg(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                              const float *dy /* [n,c] */, const float *x /* [n,c] */,
                              const float *w /* [c] */, const float *mean /* [n] */,
                              const float *rstd /* [n] */, const float *r1 /* [n,c] or NULL */,
                              const float *r2 /* [n,c] or NULL */, int n, int c, int seg)
{
    int blocked = seg < 0, rows = blocked ? ROW_BLOCK : seg;
    int L = leaf_count(n, rows);
    float *pw = kmalloc(sizeof(float) * 2 * (size_t)L * c); /* [L,c] partial dw */
    float *pb = pw + (size_t)L * c;                         /* [L,c] partial db */
    struct share *shr = share_alloc(L, 1); /* shared with stealing */
#pragma omp parallel if ((long)n * c >= PAR_WORK)
    FOR_SHARED(shr, l)
        layernorm_bwd_block(dx, pw + (size_t)l * c, pb + (size_t)l * c, dy, x, w, mean, rstd, r1,
                            r2, leaf_lo(l, n, rows), leaf_hi(l, n, rows), c);
    free(shr);
    if (blocked) { /* in block order */
        memset(dw, 0, sizeof(float) * (size_t)c);
        memset(db, 0, sizeof(float) * (size_t)c);
        for (int l = 0; l < L; l++) {
            add_into(dw, pw + (size_t)l * c, (size_t)c);
            add_into(db, pb + (size_t)l * c, (size_t)c);
        }
    } else {
        tree_finish(add_into, dw, pw, L, (size_t)c);
        tree_finish(add_into, db, pb, L, (size_t)c);
    }
    free(pw);
}

/* ---- softmax cross-entropy ---- */

/* Contract (k_xent_ref, k_xent_bwd_ref): per row, the max, then the sum of
 * e^(x - max) in 16 lanes ending in vsum's tree (vexp), loss = max +
 * log(sum) - x[target], each row's loss summed in row order in double. */

/* Max and sum of exp(x - max) over one row; masked lanes take part as
 * -inf in the max and 0 in the sum. The exponentials are kept in e if
 * it is not NULL (the backward pass scales them rather than computing
 * them again). */
static void row_stats(const float *x /* [v] */, int v, float *mx, float *sum, float *e /* [v] */)
{
    vf m16 = vset(-INFINITY);
    int j = 0, t = v % VL; /* whole vectors, then a tail of t */
    for (; j + VL <= v; j += VL)
        m16 = vmax(m16, vload(x + j));
    if (t)
        m16 = vsel(vlanes(t), vmax(m16, vload_n(x + j, t)), m16);
    float m = vmaxr(m16);
    vf s16 = vzero(), mv = vset(m);
    for (j = 0; j + VL <= v; j += VL) {
        vf ej = vexp(vsub(vload(x + j), mv));
        if (e)
            vstore(e + j, ej);
        s16 = vadd(s16, ej);
    }
    if (t) {
        vf ej = vkeep(vlanes(t), vexp(vsub(vload_n(x + j, t), mv)));
        if (e)
            vstore_n(e + j, ej, t);
        s16 = vadd(s16, ej);
    }
    *mx = m;
    *sum = vsum(s16);
}

static void xent(float *loss /* [1] */, const float *logits /* [n,v] */,
                 const int32_t *targets /* [n] */, int n, int v, int seg)
{
    double *row = kmalloc(sizeof(double) * (size_t)n); /* [n] per-row losses */
    struct share *shr = share_alloc(n, 1); /* shared with stealing */
#pragma omp parallel if ((long)n * v >= PAR_WORK)
    FOR_SHARED(shr, i) {
        const float *x = logits + (size_t)i * v; /* [v] */
        float m, s;
        row[i] = 0.0;
        if (targets[i] < 0)
            continue;
        row_stats(x, v, &m, &s, NULL);
        row[i] = (double)(m + fm_logf(s) - x[targets[i]]);
    }
    free(shr);
    *loss = mean_loss(row, targets, n, seg);
    free(row);
}

/* dlogits = (e^(x - max) * (1/sum) - onehot) * scale, the exponentials
 * left in dx by row_stats; and the row's loss, as xent computes it, when
 * `loss` is not NULL (the same row_stats: the same bits). */
static void xent_bwd_row(float *dx /* [v] */, double *loss, const float *x /* [v] */, int t,
                         float scale, int v)
{
    float m, s;
    row_stats(x, v, &m, &s, dx);
    if (loss)
        *loss = (double)(m + fm_logf(s) - x[t]);
    vf iv = vset(1.0f / s), sc = vset(scale);
    for (int j = 0; j < v; j += VL) {
        vf p = vmul(vload_n(dx + j, v - j), iv);
        if (t >= j && t < j + VL)
            p = vsel(vlane_is(t - j), vsub(p, vset(1.0f)), p);
        vstore_n(dx + j, vmul(p, sc), v - j);
    }
}

/* The gradient, and the loss too when `loss` is not NULL (the compiler's
 * fusion of xent and xent_bwd over the same logits: one pass over them). */
static void xent_bwd(float *dlogits /* [n,v] */, float *loss /* [1] or NULL */,
                     const float *logits /* [n,v] */, const int32_t *targets /* [n] */,
                     const float *dloss /* [1] */, int n, int v, int seg)
{
    int count = 0;
    for (int i = 0; i < n; i++)
        count += targets[i] >= 0;
    float scale = count ? dloss[0] / (float)count : 0.0f;
    double *row = loss ? kmalloc(sizeof(double) * (size_t)n) : NULL; /* [n] per-row losses */
    struct share *shr = share_alloc(n, 1); /* shared with stealing */
#pragma omp parallel if ((long)n * v >= PAR_WORK)
    FOR_SHARED(shr, i) {
        float *dx = dlogits + (size_t)i * v; /* [v] */
        if (row)
            row[i] = 0.0;
        if (targets[i] < 0)
            memset(dx, 0, sizeof(float) * (size_t)v);
        else
            xent_bwd_row(dx, row ? row + i : NULL, logits + (size_t)i * v, targets[i], scale, v);
    }
    free(shr);
    if (loss)
        *loss = mean_loss(row, targets, n, seg);
    free(row);
}

/* ---- element-wise ---- */

/* Element-wise kernels (and Adam) run in chunks of ELT_CHUNK elements,
 * claimed by the threads with stealing (FOR_SHARED_CHUNKS, kernels/
 * tiles.h); every element is computed alone, so the split changes no bit.
 * Each chunk: whole vectors, then one partial vector (FOR_VECTORS). */

static void add(float *y /* [n] */, const float *a /* [n] */, const float *b /* [n] */, size_t n)
{
    struct share *shr = share_alloc(ELT_CHUNKS(n), 1); /* shared with stealing */
#pragma omp parallel if (n >= 4 * PAR_WORK)
    FOR_SHARED_CHUNKS(shr, n, lo)
        FOR_VECTORS(CHUNK_LEN(n, lo), i, w,
                    vstore_n(y + lo + i, vadd(vload_n(a + lo + i, w), vload_n(b + lo + i, w)), w))
    free(shr);
}

/* y = ((x[0] + x[1]) + x[2]) + ...: one pass for m inputs. */
static void add_n(float *y /* [n] */, const float *const *x /* m x [n] */, int m, size_t n)
{
    struct share *shr = share_alloc(ELT_CHUNKS(n), 1); /* shared with stealing */
#pragma omp parallel if (n >= 4 * PAR_WORK)
    FOR_SHARED_CHUNKS(shr, n, lo)
        FOR_VECTORS(CHUNK_LEN(n, lo), i, w, {
            vf s = vload_n(x[0] + lo + i, w);
            for (int k = 1; k < m; k++)
                s = vadd(s, vload_n(x[k] + lo + i, w));
            vstore_n(y + lo + i, s, w);
        })
    free(shr);
}

static void relu(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    struct share *shr = share_alloc(ELT_CHUNKS(n), 1); /* shared with stealing */
#pragma omp parallel if (n >= 4 * PAR_WORK)
    FOR_SHARED_CHUNKS(shr, n, lo)
        FOR_VECTORS(CHUNK_LEN(n, lo), i, w,
                    vstore_n(y + lo + i, vrelu(vload_n(x + lo + i, w)), w))
    free(shr);
}

static void relu_bwd(float *dx /* [n] */, const float *dy /* [n] */, const float *y /* [n] */,
                     size_t n)
{
    struct share *shr = share_alloc(ELT_CHUNKS(n), 1); /* shared with stealing */
#pragma omp parallel if (n >= 4 * PAR_WORK)
    FOR_SHARED_CHUNKS(shr, n, lo)
        FOR_VECTORS(CHUNK_LEN(n, lo), i, w, {
            vm on = vgt(vload_n(y + lo + i, w), vzero());
            vstore_n(dx + lo + i, vkeep(on, vload_n(dy + lo + i, w)), w);
        })
    free(shr);
}

/* GELU (contract: k_gelu_ref, k_gelu_bwd_ref, whose bits these are: the
 * steps of kernels/gelu.h, one vector of lanes at a time, e^t by vexp,
 * saturated where |t| > GELU_SAT). */

/* t = -2u = (x (-2 sqrt(2/pi))) (x^2 K + 1) */
VINLINE vf gelu_t(vf x)
{
    vf x2 = vmul(x, x);
    return vmul(vmul(x, vset(-GELU_2C)), vadd(vmul(x2, vset(GELU_K)), vset(1.0f)));
}

/* s = 1 / (1 + e^t), 0 where t > GELU_SAT; *e = e^t */
VINLINE vf gelu_s(vf t, vf *e)
{
    *e = vexp(t);
    vf s = vdiv(vset(1.0f), vadd(vset(1.0f), *e));
    return vsel(vgt(t, vset(GELU_SAT)), vzero(), s);
}

static void gelu(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    struct share *shr = share_alloc(ELT_CHUNKS(n), 1); /* shared with stealing */
#pragma omp parallel if (n >= 4 * PAR_WORK)
    FOR_SHARED_CHUNKS(shr, n, lo)
        FOR_VECTORS(CHUNK_LEN(n, lo), i, w, {
            vf e;
            vf xv = vload_n(x + lo + i, w);
            vstore_n(y + lo + i, vmul(xv, gelu_s(gelu_t(xv), &e)), w);
        })
    free(shr);
}

/* dx = dy (s + slope s (e^t s)), the second term 0 where |t| > GELU_SAT */
static void gelu_bwd(float *dx /* [n] */, const float *dy /* [n] */, const float *x /* [n] */,
                     size_t n)
{
    struct share *shr = share_alloc(ELT_CHUNKS(n), 1); /* shared with stealing */
#pragma omp parallel if (n >= 4 * PAR_WORK)
    FOR_SHARED_CHUNKS(shr, n, lo)
        FOR_VECTORS(CHUNK_LEN(n, lo), i, w, {
            vf e;
            vf xv = vload_n(x + lo + i, w);
            vf t = gelu_t(xv);
            vf s = gelu_s(t, &e);
            vf slope = vmul(vmul(xv, vset(GELU_2C)),
                            vadd(vmul(vmul(xv, xv), vset(GELU_3K)), vset(1.0f)));
            vf term = vmul(slope, vmul(s, vmul(e, s)));
            vm sat = vmor(vgt(t, vset(GELU_SAT)), vgt(vsub(vzero(), t), vset(GELU_SAT)));
            vf d = vadd(s, vsel(sat, vzero(), term));
            vstore_n(dx + lo + i, vmul(vload_n(dy + lo + i, w), d), w);
        })
    free(shr);
}

/* ---- sums over rows ---- */

/* Contract (k_sum_rows_ref): each column summed over rows in order from
 * zero, within each block or leaf; then blocks in order (seg < 0, by
 * ROW_BLOCK) or leaves by the tree. */

/* NV whole vectors of columns from j of rows [i0, i1) of x summed in
 * order, from zero, in registers (NV a constant at each call). */
VINLINE void sum_cols(float *part /* [q] */, const float *x /* [n,q] */, int i0, int i1, int q,
                      int j, int NV)
{
    vf acc[SUM_V];
UNROLL(8)
    for (int v = 0; v < NV; v++)
        acc[v] = vzero();
    for (int i = i0; i < i1; i++)
UNROLL(8)
        for (int v = 0; v < NV; v++)
            acc[v] = vadd(acc[v], vload(x + (size_t)i * q + j + VL * v));
UNROLL(8)
    for (int v = 0; v < NV; v++)
        vstore(part + j + VL * v, acc[v]);
}

/* part[q] = rows [i0, i1) of x summed in order, from zero: the whole
 * vectors up to SUM_V at a time in registers, then the tail row by row in
 * memory. All in memory, each row's sum waited on the row before's (a
 * store, then its load): the default model's bias gradients took 1.5x-1.6x
 * as long. */
static void sum_block(float *part /* [q] */, const float *x /* [n,q] */, int i0, int i1, int q)
{
    int j = 0, nv = q / VL;
    for (; nv >= SUM_V; nv -= SUM_V, j += SUM_V * VL)
        sum_cols(part, x, i0, i1, q, j, SUM_V);
    if (SUM_V > 4 && nv >= 4)
        sum_cols(part, x, i0, i1, q, j, 4), nv -= 4, j += 4 * VL;
    if (nv >= 2)
        sum_cols(part, x, i0, i1, q, j, 2), nv -= 2, j += 2 * VL;
    if (nv >= 1)
        sum_cols(part, x, i0, i1, q, j, 1), j += VL;
    if (j < q) {
        memset(part + j, 0, sizeof(float) * (size_t)(q - j));
        for (int i = i0; i < i1; i++)
            add_into(part + j, x + (size_t)i * q + j, (size_t)(q - j));
    }
}

static void sum_rows_seg(float *out /* [q] */, const float *x /* [n,q] */, int n, int q, int seg)
{
    int blocked = seg < 0, rows = blocked ? ROW_BLOCK : seg;
    int L = leaf_count(n, rows);
    float *part = kmalloc(sizeof(float) * (size_t)L * q); /* [L,q] */
    struct share *shr = share_alloc(L, 1); /* shared with stealing */
#pragma omp parallel if ((long)n * q >= PAR_WORK)
    FOR_SHARED(shr, l)
        sum_block(part + (size_t)l * q, x, leaf_lo(l, n, rows), leaf_hi(l, n, rows), q);
    free(shr);
    if (blocked) {
        memset(out, 0, sizeof(float) * (size_t)q);
        for (int l = 0; l < L; l++)
            add_into(out, part + (size_t)l * q, (size_t)q);
    } else {
        tree_finish(add_into, out, part, L, (size_t)q);
    }
    free(part);
}

/* ---- transpose ---- */

/* out = in^T in blocks of TR_BLOCK x TR_BLOCK, each by vtranspose's 8 x 8
 * shuffles in registers: a block reads 16 floats of 16 rows of in and
 * writes 16 floats of 16 rows of out, whole lines when the rows are
 * aligned, so no line of out is left half written to be fetched again.
 * Element by element over 32 x 32 blocks, a weight 768 or 3,072 floats
 * wide (a column's rows in a few cache sets) moved at 1.9 GB/s on one
 * thread of Zen 4, a sixth of memcpy's speed. Data movement: the same
 * bits any way. */
#define TR_BLOCK 16

static void transpose(float *out /* [s,r] */, const float *in /* [r,s] */, int r, int s)
{
    int strips = (r + TR_BLOCK - 1) / TR_BLOCK;
    struct share *shr = share_alloc(strips, 1); /* shared with stealing */
#pragma omp parallel if ((long)r * s >= 4 * PAR_WORK)
    FOR_SHARED(shr, b) {
        int i0 = b * TR_BLOCK, R = min_int(TR_BLOCK, r - i0);
        for (int j0 = 0; j0 < s; j0 += TR_BLOCK)
            vtranspose(out + (size_t)j0 * r + i0, (size_t)r, in + (size_t)i0 * s + j0, (size_t)s,
                       R, min_int(TR_BLOCK, s - j0));
    }
    free(shr);
}

/* ---- embedding ---- */

/* Contract (k_embed_ref, k_embed_bwd_seg_ref): a gather of columns; its
 * backward adds each row's gradient into its byte's column, rows in order
 * within a leaf, leaves by the tree (one leaf for k_embed_bwd). */

static void embed(float *y /* [n,c] */, const int32_t *idx /* [n] */,
                  const float *table /* [c,v] */, int n, int c, int v)
{
    /* a byte's embedding is a column of table: transposed once, each row
     * is then one contiguous copy (a gather per element is slower) */
    float *rows = kmalloc(sizeof(float) * (size_t)c * v); /* [v,c] */
    vtranspose(rows, (size_t)c, table, (size_t)v, c, v);
    struct share *shr = share_alloc(n, 1); /* shared with stealing */
#pragma omp parallel if ((long)n * c >= PAR_WORK)
    FOR_SHARED(shr, i)
        memcpy(y + (size_t)i * c, rows + (size_t)idx[i] * c, sizeof(float) * (size_t)c);
    free(shr);
    free(rows);
}

/* embed_bwd_seg, sparse: a leaf of seg rows touches at most seg of the v
 * table entries, so each tree level keeps a [v,c] buffer (a row's gradient
 * contiguous) plus a flag per entry, and only touched entries are zeroed,
 * summed and merged. Skipping the rest changes no bits: the twin's partial
 * for an untouched entry is +0, and x + (+0) == x for every x that a sum
 * starting from +0 can produce (never -0 under round-to-nearest). Threads
 * split the channels, so each has the whole tree for its channels. */
struct embed_tree {
    float *buf;          /* [levels,v,c1-c0]: this thread's own */
    unsigned char *seen; /* [levels,v]: entry touched at this level */
    const int32_t *idx;  /* [n] */
    const float *dy;     /* [n,c] */
    int n, c, v, seg, c0, c1; /* this thread's channels [c0, c1) */
};

static void embed_subtree(const struct embed_tree *e, int lo, int hi, int d)
{
    size_t w = (size_t)(e->c1 - e->c0), vc = (size_t)e->v * w;
    float *buf = e->buf + (size_t)d * vc; /* [v,w] */
    unsigned char *seen = e->seen + (size_t)d * e->v;
    if (hi - lo == 1) {
        memset(seen, 0, (size_t)e->v);
        for (int i = leaf_lo(lo, e->n, e->seg); i < leaf_hi(lo, e->n, e->seg); i++) {
            int u = e->idx[i];
            float *row = buf + (size_t)u * w; /* [w] */
            if (!seen[u]) {
                memset(row, 0, sizeof(float) * w);
                seen[u] = 1;
            }
            add_into(row, e->dy + (size_t)i * e->c + e->c0, w);
        }
        return;
    }
    int mid = lo + (hi - lo) / 2;
    embed_subtree(e, lo, mid, d);      /* left child: this level's buffer */
    embed_subtree(e, mid, hi, d + 1); /* right child: the next level's */
    const float *rbuf = buf + vc;
    const unsigned char *rseen = seen + e->v;
    for (int u = 0; u < e->v; u++) {
        if (!rseen[u])
            continue;
        float *row = buf + (size_t)u * w;
        const float *r = rbuf + (size_t)u * w;
        if (seen[u])
            add_into(row, r, w);
        else /* +0 + r == r */
            memcpy(row, r, sizeof(float) * w);
        seen[u] = 1;
    }
}

static void embed_bwd_seg(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                              const float *dy /* [n,c] */, int n, int c, int v, int seg)
{
    int L = leaf_count(n, seg), levels = tree_depth(L) + 1, groups = (c + 15) / 16;
#pragma omp parallel if ((long)n * c >= PAR_WORK)
    {
        int g0, g1;
        my_share(groups, &g0, &g1); /* 16-channel groups: one cache line each */
        struct embed_tree e = {.idx = idx, .dy = dy, .n = n, .c = c, .v = v, .seg = seg,
                               .c0 = min_int(c, 16 * g0), .c1 = min_int(c, 16 * g1)};
        int w = e.c1 - e.c0;
        if (w > 0) {
            /* each thread's own buffers: sharing one [levels,v,c], the
             * threads wrote neighbouring lines of each row, and the
             * default model's embedding backward took 1.5x-1.65x as long
             * (2 threads; even so, 1 thread is faster here: each thread
             * still streams all of dy for its half of the channels) */
            e.buf = kmalloc(sizeof(float) * (size_t)levels * v * w);
            e.seen = kmalloc((size_t)levels * v);
            if (L > 0)
                embed_subtree(&e, 0, L, 0);
            else
                memset(e.seen, 0, (size_t)v);
            for (int ch = e.c0; ch < e.c1; ch++)
                for (int u = 0; u < v; u++)
                    dtable[(size_t)ch * v + u] =
                        e.seen[u] ? e.buf[(size_t)u * w + (ch - e.c0)] : 0.0f;
            free(e.seen);
            free(e.buf);
        }
    }
}

/* ---- Adam ---- */

/* Contract (k_adam_ref): m += (1-b1)(g-m); v = b2 v + ((1-b2) g) g;
 * p -= (step m) / (sqrt(v)/bc2s + eps): no FMA, in this order. */
VINLINE void adam_vec(float *p, float *m, float *v, const float *g, int w, const struct adam_k *k)
{
    vf gi = vload_n(g, w), mi = vload_n(m, w), vi = vload_n(v, w), pi = vload_n(p, w);
    mi = vadd(mi, vmul(vset(k->omb1), vsub(gi, mi)));
    vi = vadd(vmul(vset(k->b2), vi), vmul(vmul(vset(k->omb2), gi), gi));
    vf denom = vadd(vdiv(vsqrt(vi), vset(k->bc2s)), vset(k->eps));
    pi = vsub(pi, vdiv(vmul(vset(k->step), mi), denom));
    vstore_n(m, mi, w);
    vstore_n(v, vi, w);
    vstore_n(p, pi, w);
}

static void adam(float *p /* [n] */, float *m /* [n] */, float *v /* [n] */,
                 const float *g /* [n] */, size_t n, float lr, float b1, float b2, float eps, int t)
{
    struct adam_k k = adam_consts(lr, b1, b2, eps, t);
    struct share *shr = share_alloc(ELT_CHUNKS(n), 1); /* shared with stealing */
#pragma omp parallel if (n >= PAR_WORK)
    FOR_SHARED_CHUNKS(shr, n, lo)
        FOR_VECTORS(CHUNK_LEN(n, lo), i, w,
                    adam_vec(p + lo + i, m + lo + i, v + lo + i, g + lo + i, w, &k))
    free(shr);
}

/* ---- the table ---- */

#if defined(VEC_AVX512)
#define KERNELS kernels_avx512
#elif defined(VEC_AVX2)
#define KERNELS kernels_avx2
#elif defined(VEC_NEON)
#define KERNELS kernels_neon
#else
#define KERNELS kernels_scalar
#endif

/* .name = name for every row of kernels.def: each names a function of
 * this file. Static: no file names a backend's table; it goes down to
 * the kernel layer by the call below. */
static const struct kernels KERNELS = {
    .name = VEC_NAME,
    /* make gen: begin. The rows of kernels/kernels.def, as gen/gen.c
     * writes them: edit that file, then run make gen. */
    .matmul_ex = matmul_ex,
    .tree_sum = tree_sum,
    .matmul_tn_seg = matmul_tn_seg,
    .attention = attention,
    .attention_bwd = attention_bwd,
    .attention_step = attention_step,
    .attention_last = attention_last,
    .layernorm = layernorm,
    .layernorm_bwd_seg = layernorm_bwd_seg,
    .xent = xent,
    .xent_bwd = xent_bwd,
    .add = add,
    .add_n = add_n,
    .relu = relu,
    .relu_bwd = relu_bwd,
    .gelu = gelu,
    .gelu_bwd = gelu_bwd,
    .sum_rows_seg = sum_rows_seg,
    .transpose = transpose,
    .embed = embed,
    .embed_bwd_seg = embed_bwd_seg,
    .adam = adam,
    .round_bf16 = round_bf16,
    .matmul_bf16_emu = matmul_bf16_emu,
    /* make gen: end */
    .matmul_bf16_native = MATMUL_BF16_NATIVE,
};

/* Hands this backend's table to the ISA choice (kernels/isa.c) before
 * main() runs: every object of this file linked in is a path the binary
 * can take, and kernels/, the layer below, never names one. (The
 * Makefile renames this function per backend too: register_table_avx2.) */
__attribute__((constructor)) static void register_table(void) { kernels_register(&KERNELS); }
