/* tensor.c: the compute kernels, the bottom layer (see tensor.h).
 *
 * Map. The file runs by kernel family, each section under a banner
 * "---- name ----" (search for it), in this order:
 *   shared helpers               target macros, PAR_WORK, ROW_BLOCK, xmalloc, my_share, sum_blocks
 *   ISA dispatch                 isa_best/get/set (GPT_ISA), bf16_native (GPT_BF16), DISPATCH
 *   SIMD helpers                 lane masks, horizontal sum, exp8 and exp16
 *   matmul                       k_matmul, k_matmul_ex: c = epilogue(a @ b + bias), by tiles
 *   leaves and the tree          the *_seg kernels' leaves and tree, k_tree_sum
 *   weight-gradient matmul       k_matmul_tn, k_matmul_tn_seg: a^T b, leaves over threads
 *   attention                    forward, backward, decode step, the head drivers
 *   layernorm                    forward, backward, backward over leaves
 *   softmax cross-entropy        k_xent, k_xent_bwd
 *   element-wise                 k_add, k_add_n, k_relu, k_relu_bwd
 *   sums over rows               k_sum_rows (ROW_BLOCK partials), k_sum_rows_seg (leaves)
 *   transpose                    k_transpose: cache-blocked, one plain path
 *   embedding                    k_embed, k_embed_bwd, k_embed_bwd_seg: one plain path
 *   Adam                         k_adam
 *   bf16 numerics                what vdpbf16ps does, as measured, and its scalar model
 *   bf16 rounding                k_round_bf16 (and round_span, one thread's rounding)
 *   bf16 matmul                  k_matmul_bf16: emulated (AVX2, AVX-512) and native tiles
 *   bf16 weight-gradient matmul  k_matmul_tn_seg_bf16: the leaves on those tiles
 *   bf16 attention               k_attention_bf16, k_attention_bwd_bf16: rounding on load
 *
 * Inside a family: the plain-C twins (*_ref) first: they state the
 * contract (shapes, summation order), are the oracle the tests trust, and
 * are the scalar path; they run in parallel only over independent output
 * rows, so they keep the determinism contract trivially. Then the AVX2
 * path and the AVX-512 path (after any helper both use), the drivers that
 * run either path's block or head functions, and the k_* entry points
 * last; a "-- family: part --" line marks each part. Everything named
 * bf16 is in the bf16 sections at the end; the fp32 drivers that serve
 * it too (the weight-gradient tree, the attention heads) take a flag and
 * reach it through this file's only two forward declarations,
 * tn_leaf_bf16 and round_span. The SIMD paths are compiled
 * with target attributes, not -march, so one binary runs everywhere and
 * picks its path at run time.
 *
 * Determinism: every output element is produced by one thread, by a sequence
 * of operations that does not depend on how work is split among threads.
 * Register-blocked tiles and their remainder paths do the same FMAs in the
 * same order per element; reductions over rows use blocks of a fixed size
 * (ROW_BLOCK), combined in block order. The *_seg kernels instead sum
 * leaves of `seg` rows and combine the leaves by the balanced tree of
 * tensor.h, which also makes them independent of how rows are sharded
 * over simulated cores.
 */
#include "tensor.h"
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- shared helpers ---- */

#define T_AVX2 __attribute__((target("avx2,fma")))
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
/* Small helpers must be inlined into their caller: an intrinsic only
 * compiles inside a function that carries the matching target. */
#define INLINE_AVX2 static inline __attribute__((always_inline, target("avx2,fma")))
#define INLINE_AVX512 \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

/* Below this much work (multiply-adds or elements), waking a second thread
 * costs more than it saves; single-token decoding lives down there. */
#define PAR_WORK 16384L

/* log2(e) and ln(2) as floats: the attention softmaxes work in base 2. */
#define LOG2E 1.44269504f
#define LN2 0.693147182f

/* Rows per partial sum in reductions over rows. A constant, never derived
 * from the thread count, so the summation tree is always the same. */
#define ROW_BLOCK 64

/* Cache-line aligned, so threads writing neighbouring slices of one
 * scratch buffer never share a line. */
static void *xmalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64 * !bytes);
    if (!p) {
        fprintf(stderr, "gpt: out of memory (%zu bytes of kernel scratch)\n", bytes);
        exit(1);
    }
    return p;
}

static int min_int(int a, int b) { return a < b ? a : b; }

static int round16(int x) { return (x + 15) / 16 * 16; }

/* This thread's contiguous share [*i0, *i1) of n items. Used where a thread
 * must keep its items across several passes; which thread computes an item
 * never changes how it is computed. */
static void my_share(int n, int *i0, int *i1)
{
    int nth = omp_get_num_threads(), me = omp_get_thread_num();
    *i0 = (int)((long)n * me / nth);
    *i1 = (int)((long)n * (me + 1) / nth);
}

/* Final step of a blocked row reduction: out[q] = sum of part[nblk,q] over
 * blocks, in block order. */
static void sum_blocks(float *out /* [q] */, const float *part /* [nblk,q] */, int nblk, int q)
{
    for (int j = 0; j < q; j++)
        out[j] = 0.0f;
    for (int b = 0; b < nblk; b++)
        for (int j = 0; j < q; j++)
            out[j] += part[(size_t)b * q + j];
}

/* ---- ISA dispatch ---- */

static int isa_best_cached = -1; /* decided once, on first use */
static int isa_current = -1;     /* -1: not chosen yet, means isa_best() */

const char *isa_name(int isa)
{
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    return isa >= ISA_SCALAR && isa <= ISA_AVX512 ? names[isa] : "?";
}

static int cpu_isa(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return ISA_AVX2;
    return ISA_SCALAR;
}

/* GPT_ISA may only lower the path: asking for more than the CPU has would
 * crash on an illegal instruction, so it is clamped instead. */
static int env_isa(int cpu)
{
    const char *e = getenv("GPT_ISA");
    if (!e || !*e)
        return cpu;
    for (int i = ISA_SCALAR; i <= ISA_AVX512; i++)
        if (!strcmp(e, isa_name(i)))
            return i < cpu ? i : cpu;
    fprintf(stderr, "gpt: GPT_ISA=%s is not one of scalar, avx2, avx512\n", e);
    exit(2);
}

int isa_best(void)
{
    int best = __atomic_load_n(&isa_best_cached, __ATOMIC_ACQUIRE);
    if (best < 0) { /* a racing second caller computes the same value */
        best = env_isa(cpu_isa());
        __atomic_store_n(&isa_best_cached, best, __ATOMIC_RELEASE);
    }
    return best;
}

int isa_get(void)
{
    int isa = __atomic_load_n(&isa_current, __ATOMIC_RELAXED);
    return isa < 0 ? isa_best() : isa;
}

void isa_set(int isa)
{
    int best = isa_best();
    if (isa > best)
        isa = best;
    if (isa < ISA_SCALAR)
        isa = ISA_SCALAR;
    __atomic_store_n(&isa_current, isa, __ATOMIC_RELAXED);
}

static int bf16_mode = -1; /* 1: vdpbf16ps allowed; decided once, on first use */

/* GPT_BF16=emulate turns the instruction off (to time or check the
 * emulation in a real run); the emulation is the only choice without it. */
static int bf16_allowed(void)
{
    int mode = __atomic_load_n(&bf16_mode, __ATOMIC_ACQUIRE);
    if (mode < 0) { /* a racing second caller computes the same value */
        const char *e = getenv("GPT_BF16");
        if (e && *e && strcmp(e, "emulate") && strcmp(e, "auto")) {
            fprintf(stderr, "gpt: GPT_BF16=%s is not one of auto, emulate\n", e);
            exit(2);
        }
        __builtin_cpu_init();
        mode = __builtin_cpu_supports("avx512bf16") && !(e && !strcmp(e, "emulate"));
        __atomic_store_n(&bf16_mode, mode, __ATOMIC_RELEASE);
    }
    return mode;
}

int bf16_native(void) { return isa_get() == ISA_AVX512 && bf16_allowed(); }

/* Calls name_avx512, name_avx2 or the twin k_name_ref by the current path. */
#define DISPATCH(name, ...)                             \
    switch (isa_get()) {                                \
    case ISA_AVX512: name##_avx512(__VA_ARGS__); break; \
    case ISA_AVX2: name##_avx2(__VA_ARGS__); break;     \
    default: k_##name##_ref(__VA_ARGS__); break;        \
    }

/* ---- SIMD helpers ---- */

/* AVX2 + FMA: 8 floats per vector. */

/* Lanes 0..n-1 set: the mask for maskload/maskstore of a partial vector. */
INLINE_AVX2 __m256i lanes8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE_AVX2 float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* exp(x) within ~2 ulp for x <= 88, as softmax needs (its arguments are
 * <= 0). x = n ln2 + r, |r| <= ln2/2, and the degree-7 Taylor polynomial
 * of e^r is already below float precision there. Below -87 it returns
 * ~1e-38 instead of a subnormal, harmless next to a softmax's 1. */
INLINE_AVX2 __m256 exp8(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x); /* NaN in, NaN out */
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147182f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-1.90465430e-9f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e)); /* p * 2^n */
}

/* 2^f for |f| <= 1/2, highest power first: a degree-6 fit of relative
 * error below 8e-8 (an ulp), for exp2_8 and exp2_16. */
static const float exp2_poly[7] = {1.53467176e-4f, 1.33999391e-3f, 9.61848535e-3f,
                                   5.55032864e-2f, 2.40226462e-1f, 6.93147182e-1f, 1.0f};

/* 2^x, exp2_16's reduction and polynomial (the attention softmaxes keep
 * their scores in base 2) with the exponent bits built as exp8 does: x is
 * clamped to [-126, 127] so that 2^n is a normal float. */
INLINE_AVX2 __m256 exp2_8(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(-126.0f), x); /* NaN in, NaN out */
    x = _mm256_min_ps(_mm256_set1_ps(127.0f), x);
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n); /* exact */
    __m256 p = _mm256_set1_ps(exp2_poly[0]);
#pragma GCC unroll 6
    for (int k = 1; k <= 6; k++)
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(exp2_poly[k]));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e)); /* p * 2^n */
}

/* AVX-512: 16 floats per vector, partial vectors by mask registers. */

INLINE_AVX512 __mmask16 lanes16(int n) /* lanes 0..n-1 set */
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* exp(x) within ~2 ulp, the same reduction and polynomial as exp8; scalef
 * applies 2^n without building exponent bits, so it underflows to 0 and
 * overflows to inf like expf. */
INLINE_AVX512 __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x); /* keeps r finite; NaN passes */
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147182f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-1.90465430e-9f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 2^x for the attention softmaxes, which keep their scores in base 2 (the
 * scale 1/sqrt(hs) and log2(e) applied to q or to the scores) so that exp
 * needs no ln2 reduction: x = n + f, |f| <= 1/2, and 2^f by exp2_poly,
 * four operations fewer than exp16. Below -126 it returns ~1e-38 instead
 * of a subnormal, harmless next to a softmax's 1; above 128, inf, as
 * scalef overflows. */
INLINE_AVX512 __m512 exp2_16(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(-126.0f), x); /* keeps f finite; NaN passes */
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n); /* exact */
    __m512 p = _mm512_set1_ps(exp2_poly[0]);
#pragma GCC unroll 6
    for (int k = 1; k <= 6; k++)
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(exp2_poly[k]));
    return _mm512_scalef_ps(p, n);
}

/* ---- matmul ---- */

/* -- matmul: twins -- */

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

/* -- matmul: the tiles' arguments, shared by both paths and matmul_tn -- */

/* Everything a matmul tile needs. The same tiles serve matmul (a is [n,p],
 * row stride p) and matmul_tn (a is [p,n], read as its transpose). A tile
 * runs k over [k0, k1): from k0 = 0 it starts at the bias (or 0), later it
 * resumes from the partial sums stored in c, so splitting the k loop into
 * passes changes no bits. */
struct mm {
    float *c;             /* [n,q] */
    const float *a;       /* [n,p] or [p,n] */
    const float *b;       /* [p,q] */
    const float *bias;    /* [q] or NULL */
    const float *r1, *r2; /* [n,q] or NULL, added after the optional ReLU */
    int relu, p, q;
    int k0, k1; /* this pass's range of k */
    int kinit;  /* where the sums start: a pass from k0 == kinit initialises
                 * (bias or 0), a later one resumes from c */
};

/* -- matmul: AVX2 -- */

#define MR_AVX2 6 /* rows per tile: 6x2 accumulators + 2 b + 1 broadcast = 15 of 16 ymm */

/* An R x 8V tile of c at (i, j): element (r, k) of a is a[(i+r)*ars + k*aks].
 * Every element is bias (or 0) followed by one FMA per k, in k order, for
 * any R: so tiles and the 1-row remainder give the same bits. The last
 * vector holds last_w columns; a partial one is read and written through a
 * mask (masked stores are slow on AMD, so a full one is not). */
INLINE_AVX2 void mm_tile_avx2(const struct mm *m, int i, int j, int R, int V, int last_w,
                              size_t ars, size_t aks)
{
    __m256 acc[MR_AVX2][2];
    const float *a = m->a + i * ars; /* tile's row 0 */
    const float *b = m->b + j;       /* tile's column 0 */
    const __m256i tail = lanes8(last_w);
    int full = last_w == 8 ? V : V - 1; /* vectors needing no mask */
#pragma GCC unroll 2
    for (int v = 0; v < V; v++) {
        __m256 init = _mm256_setzero_ps();
        if (m->bias && m->k0 == m->kinit)
            init = v < full ? _mm256_loadu_ps(m->bias + j + 8 * v)
                            : _mm256_maskload_ps(m->bias + j + 8 * v, tail);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const float *cr = m->c + (size_t)(i + r) * m->q + j + 8 * v;
            acc[r][v] = m->k0 == m->kinit ? init
                        : v < full ? _mm256_loadu_ps(cr)
                                   : _mm256_maskload_ps(cr, tail);
        }
    }
    for (int k = m->k0; k < m->k1; k++) {
        const float *bk = b + (size_t)k * m->q; /* [8V] */
        __m256 bv[2];
#pragma GCC unroll 2
        for (int v = 0; v < V; v++)
            bv[v] = v < full ? _mm256_loadu_ps(bk + 8 * v) : _mm256_maskload_ps(bk + 8 * v, tail);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256 ar = _mm256_broadcast_ss(a + r * ars + k * aks);
#pragma GCC unroll 2
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm256_fmadd_ps(ar, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        size_t at = (size_t)(i + r) * m->q + j;
#pragma GCC unroll 2
        for (int v = 0; v < V; v++) {
            __m256 y = acc[r][v];
            __m256i msk = v < full ? _mm256_set1_epi32(-1) : tail;
            if (m->relu)
                y = _mm256_max_ps(y, _mm256_setzero_ps());
            if (m->r1)
                y = _mm256_add_ps(y, _mm256_maskload_ps(m->r1 + at + 8 * v, msk));
            if (m->r2)
                y = _mm256_add_ps(y, _mm256_maskload_ps(m->r2 + at + 8 * v, msk));
            if (v < full)
                _mm256_storeu_ps(m->c + at + 8 * v, y);
            else
                _mm256_maskstore_ps(m->c + at + 8 * v, msk, y);
        }
    }
}

/* R rows of c (R == MR_AVX2, or fewer at the bottom edge), all columns. */
INLINE_AVX2 void mm_rows_avx2(const struct mm *m, int i, int R, size_t ars, size_t aks)
{
    for (int j = 0; j < m->q; j += 16) {
        int w = min_int(16, m->q - j), V = (w + 7) / 8, last_w = w - 8 * (V - 1);
        if (R == MR_AVX2 && V == 2)
            mm_tile_avx2(m, i, j, MR_AVX2, 2, last_w, ars, aks);
        else if (R == MR_AVX2)
            mm_tile_avx2(m, i, j, MR_AVX2, 1, last_w, ars, aks);
        else
            for (int r = 0; r < R; r++) {
                if (V == 2)
                    mm_tile_avx2(m, i + r, j, 1, 2, last_w, ars, aks);
                else
                    mm_tile_avx2(m, i + r, j, 1, 1, last_w, ars, aks);
            }
    }
}

/* Rows [i, i+R) of c = a @ b, a's rows contiguous. Out of line: the
 * parallel loop below calls it from plain C (OpenMP cannot be outlined
 * from a function compiled for another target, in clang), and its strides
 * stay constants for the tile code inlined here. */
T_AVX2 static void mm_band_avx2(const struct mm *m, int i, int R)
{
    mm_rows_avx2(m, i, R, (size_t)m->p, 1);
}

static void matmul_avx2(const struct mm *m, int n)
{
    int tiles = (n + MR_AVX2 - 1) / MR_AVX2;
#pragma omp parallel for schedule(static) if ((long)n * m->p * m->q >= PAR_WORK)
    for (int t = 0; t < tiles; t++)
        mm_band_avx2(m, t * MR_AVX2, min_int(MR_AVX2, n - t * MR_AVX2));
}

/* -- matmul: AVX-512 -- */

#define MR_AVX512 6 /* rows per tile: 6x4 accumulators + 4 b + 1 broadcast = 29 of 32 zmm */

/* The AVX-512 twin of mm_tile_avx2: an R x 16V tile, V <= 4, one FMA
 * chain per element in k order whatever R is. */
INLINE_AVX512 void mm_tile_avx512(const struct mm *m, int i, int j, int R, int V, __mmask16 tail,
                                  size_t ars, size_t aks)
{
    __m512 acc[MR_AVX512][4];
    const float *a = m->a + i * ars; /* tile's row 0 */
    const float *b = m->b + j;       /* tile's column 0 */
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) {
        __mmask16 msk = v < V - 1 ? (__mmask16)0xFFFF : tail;
        int fresh = m->k0 == m->kinit;
        __m512 init = m->bias && fresh ? _mm512_maskz_loadu_ps(msk, m->bias + j + 16 * v)
                                       : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const float *cr = m->c + (size_t)(i + r) * m->q + j + 16 * v;
            acc[r][v] = fresh ? init : _mm512_maskz_loadu_ps(msk, cr);
        }
    }
    for (int k = m->k0; k < m->k1; k++) {
        const float *bk = b + (size_t)k * m->q; /* [16V] */
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            bv[v] = _mm512_maskz_loadu_ps(v < V - 1 ? (__mmask16)0xFFFF : tail, bk + 16 * v);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 ar = _mm512_set1_ps(a[r * ars + k * aks]);
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        size_t at = (size_t)(i + r) * m->q + j;
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            __mmask16 msk = v < V - 1 ? (__mmask16)0xFFFF : tail;
            __m512 y = acc[r][v];
            if (m->relu)
                y = _mm512_max_ps(y, _mm512_setzero_ps());
            if (m->r1)
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(msk, m->r1 + at + 16 * v));
            if (m->r2)
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(msk, m->r2 + at + 16 * v));
            _mm512_mask_storeu_ps(m->c + at + 16 * v, msk, y);
        }
    }
}

/* Picks the tile instance for V vectors; R is a constant at each call. */
INLINE_AVX512 void mm_panel_avx512(const struct mm *m, int i, int j, int R, int V, __mmask16 tail,
                                   size_t ars, size_t aks)
{
    switch (V) {
    case 1: mm_tile_avx512(m, i, j, R, 1, tail, ars, aks); break;
    case 2: mm_tile_avx512(m, i, j, R, 2, tail, ars, aks); break;
    case 3: mm_tile_avx512(m, i, j, R, 3, tail, ars, aks); break;
    default: mm_tile_avx512(m, i, j, R, 4, tail, ars, aks); break;
    }
}

/* R rows of c (R == MR_AVX512, or fewer at the bottom edge), all columns in
 * panels of 64. */
INLINE_AVX512 void mm_rows_avx512(const struct mm *m, int i, int R, size_t ars, size_t aks)
{
    for (int j = 0; j < m->q; j += 64) {
        int w = min_int(64, m->q - j), V = (w + 15) / 16;
        __mmask16 tail = lanes16(w - 16 * (V - 1));
        if (R == MR_AVX512)
            mm_panel_avx512(m, i, j, MR_AVX512, V, tail, ars, aks);
        else
            for (int r = 0; r < R; r++)
                mm_panel_avx512(m, i + r, j, 1, V, tail, ars, aks);
    }
}

/* As mm_band_avx2. */
T_AVX512 static void mm_band_avx512(const struct mm *m, int i, int R)
{
    mm_rows_avx512(m, i, R, (size_t)m->p, 1);
}

static void matmul_avx512(const struct mm *m, int n)
{
    int tiles = (n + MR_AVX512 - 1) / MR_AVX512;
#pragma omp parallel for schedule(static) if ((long)n * m->p * m->q >= PAR_WORK)
    for (int t = 0; t < tiles; t++)
        mm_band_avx512(m, t * MR_AVX512, min_int(MR_AVX512, n - t * MR_AVX512));
}

/* -- matmul: entry points -- */

void k_matmul_ex(float *c /* [n,q] */, const float *a /* [n,p] */, const float *b /* [p,q] */,
                 const float *bias /* [q] or NULL */, const float *r1 /* [n,q] or NULL */,
                 const float *r2 /* [n,q] or NULL */, int relu, int n, int p, int q)
{
    struct mm m = {c, a, b, bias, r1, r2, relu, p, q, 0, p, 0};
    switch (isa_get()) {
    case ISA_AVX512: matmul_avx512(&m, n); break;
    case ISA_AVX2: matmul_avx2(&m, n); break;
    default: k_matmul_ex_ref(c, a, b, bias, r1, r2, relu, n, p, q); break;
    }
}

void k_matmul(float *c /* [n,q] */, const float *a /* [n,p] */, const float *b /* [p,q] */,
              const float *bias /* [q] or NULL */, int n, int p, int q)
{
    k_matmul_ex(c, a, b, bias, NULL, NULL, 0, n, p, q);
}

/* ---- leaves and the tree ---- */

/* The *_seg kernels' leaves of seg rows and the balanced tree that
 * combines them; the rule is stated in tensor.h. */

/* Number of leaves of seg rows over n rows; seg < 1 means one leaf. */
static int leaf_count(int n, int seg)
{
    if (n <= 0)
        return 0;
    return seg < 1 ? 1 : (int)(((long)n + seg - 1) / seg);
}

/* Leaf l's rows are [leaf_lo, leaf_hi). */
static int leaf_lo(int l, int n, int seg) { return seg < 1 ? 0 : (int)((long)l * seg); }

static int leaf_hi(int l, int n, int seg)
{
    long hi = seg < 1 ? n : ((long)l + 1) * seg;
    return hi < n ? (int)hi : n;
}

/* Levels of a tree over m leaves: ceil(log2 m), 0 for m <= 1. A subtree
 * evaluated with one scratch array per level for its right children
 * needs this many scratch arrays. */
static int tree_depth(int m)
{
    int d = 0;
    while (d < 31 && (1L << d) < m)
        d++;
    return d;
}

/* dst = dst + src, element-wise: the tree's one operation. One rounding
 * per element, so any vector width gives the same bits; the twins use this
 * plain loop, the fast paths add_into (below), which picks the widest. */
static void add_plain(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dst[i] + src[i];
}

T_AVX2 static void add_into_avx2(float *restrict dst, const float *restrict src, size_t n)
{
    size_t nv = n / 8 * 8;
    for (size_t i = 0; i < nv; i += 8)
        _mm256_storeu_ps(dst + i,
                         _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i)));
    add_plain(dst + nv, src + nv, n - nv);
}

T_AVX512 static void add_into_avx512(float *restrict dst, const float *restrict src, size_t n)
{
    size_t nv = n / 16 * 16;
    for (size_t i = 0; i < nv; i += 16)
        _mm512_storeu_ps(dst + i,
                         _mm512_add_ps(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(src + i)));
    add_plain(dst + nv, src + nv, n - nv);
}

static void add_into(float *restrict dst, const float *restrict src, size_t n)
{
    switch (isa_get()) {
    case ISA_AVX512: add_into_avx512(dst, src, n); break;
    case ISA_AVX2: add_into_avx2(dst, src, n); break;
    default: add_plain(dst, src, n); break;
    }
}

typedef void add_fn(float *restrict, const float *restrict, size_t);

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

/* out = the tree over m leaf partials part[m,len] (destroyed); 0 if m = 0. */
static void tree_finish(add_fn *add, float *out /* [len] */, float *part /* [m,len] */, int m,
                        size_t len)
{
    if (m < 1) {
        memset(out, 0, sizeof(float) * len);
        return;
    }
    tree_inplace(add, part, 0, m, len);
    memcpy(out, part, sizeof(float) * len);
}

/* -- leaves and the tree: k_tree_sum -- */

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
    float *right = xmalloc(sizeof(float) * len); /* [len] */
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

static void tree_sum_chunked(float *out /* [len] */, const float *const *parts /* m x [len] */,
                             int m, size_t len)
{
    if (m < 1) {
        memset(out, 0, sizeof(float) * len);
        return;
    }
    long nch = (long)((len + TREE_CHUNK - 1) / TREE_CHUNK);
    int depth = tree_depth(m);
#pragma omp parallel if (len * (size_t)m >= 4 * PAR_WORK)
    {
        float *tmp = xmalloc(sizeof(float) * (size_t)(depth ? depth : 1) * TREE_CHUNK);
#pragma omp for schedule(static)
        for (long ch = 0; ch < nch; ch++) {
            size_t off = (size_t)ch * TREE_CHUNK;
            size_t l = len - off < TREE_CHUNK ? len - off : TREE_CHUNK;
            tree_chunk(out + off, parts, 0, m, off, l, tmp, 0);
        }
        free(tmp);
    }
}

void k_tree_sum(float *out /* [len] */, const float *const *parts /* m x [len] */, int m,
                size_t len)
{
    tree_sum_chunked(out, parts, m, len);
}

/* ---- weight-gradient matmul ---- */

/* -- weight-gradient matmul: twins -- */

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

/* Every leaf's partial c[n,q] in scratch, then the tree. */
void k_matmul_tn_seg_ref(float *c /* [n,q] */, const float *a /* [p,n] */,
                         const float *b /* [p,q] */, int n, int p, int q, int seg)
{
    int L = leaf_count(p, seg);
    size_t nc = (size_t)n * q;
    float *part = xmalloc(sizeof(float) * (size_t)L * nc); /* [L,n,q] */
#pragma omp parallel for schedule(static) if ((long)n * p * q >= PAR_WORK)
    for (int i = 0; i < n; i++)
        for (int l = 0; l < L; l++) {
            float *ci = part + (size_t)l * nc + (size_t)i * q; /* [q] */
            for (int j = 0; j < q; j++)
                ci[j] = 0.0f;
            for (int k = leaf_lo(l, p, seg); k < leaf_hi(l, p, seg); k++) {
                float aki = a[(size_t)k * n + i];
                const float *bk = b + (size_t)k * q; /* [q] */
                for (int j = 0; j < q; j++)
                    ci[j] += aki * bk[j];
            }
        }
    tree_finish(add_plain, c, part, L, nc);
    free(part);
}

/* -- weight-gradient matmul: AVX2, one leaf on the matmul tiles -- */

/* matmul_tn runs its long k loop in passes of this many rows of a and b:
 * one pass's rows (at most 64 x (n + q) floats for the model's widths) stay
 * in L1 while every tile of c uses them, instead of streaming all of b from
 * L2 once per tile. */
#define TN_KBLOCK 64

/* One leaf of matmul_tn for row tiles [t0, t1) of c: k from leaf->kinit
 * to k_end, in passes of TN_KBLOCK rows of a and b. */
T_AVX2 static void tn_leaf_avx2(const struct mm *leaf, int n, int t0, int t1, int k_end)
{
    struct mm pass = *leaf;
    for (int k = leaf->kinit; k < k_end; k += TN_KBLOCK) {
        pass.k0 = k;
        pass.k1 = min_int(k + TN_KBLOCK, k_end);
        for (int t = t0; t < t1; t++)
            mm_rows_avx2(&pass, t * MR_AVX2, min_int(MR_AVX2, n - t * MR_AVX2), 1, (size_t)n);
    }
}

/* -- weight-gradient matmul: AVX-512 -- */

T_AVX512 static void tn_leaf_avx512(const struct mm *leaf, int n, int t0, int t1, int k_end)
{
    struct mm pass = *leaf;
    for (int k = leaf->kinit; k < k_end; k += TN_KBLOCK) {
        pass.k0 = k;
        pass.k1 = min_int(k + TN_KBLOCK, k_end);
        for (int t = t0; t < t1; t++)
            mm_rows_avx512(&pass, t * MR_AVX512, min_int(MR_AVX512, n - t * MR_AVX512), 1,
                           (size_t)n);
    }
}

/* -- weight-gradient matmul: the tree over the leaves, over threads -- */

typedef void tn_leaf_fn(const struct mm *, int, int, int, int);

/* bf16 weight gradients (below, with the other bf16 kernels): rows of a
 * leaf packed BF_TN_K at a time (even, so a pair never straddles two
 * packings), c's rows shared between threads in units of BF_TN_MR. */
#define BF_TN_K 256
#define BF_TN_MR 8
enum bf_path { BF_NONE = -1, BF_NATIVE, BF_EMU_AVX512, BF_EMU_AVX2 };

/* One thread's part of matmul_tn_seg: its row tiles [t0, t1) of c over
 * the leaves of the subtree it evaluates (all of them, or its own subtree
 * when the threads split the leaves). A subtree's left child writes to the
 * subtree's own output, its right child to the scratch array of the
 * subtree's level, so a tree of L leaves needs tree_depth(L) arrays of
 * [n,q] and adds each leaf in while it is still in cache. */
struct tn_tree {
    const struct mm *m;
    tn_leaf_fn *leaf;
    float *tmp; /* [depth,n,q] */
    int n, seg, mr, t0, t1;
    int bf;     /* enum bf_path: BF_NONE for fp32 */
    void *pack; /* bf16: this thread's packed pairs of a leaf's rows */
};

/* A leaf of a bf16 weight gradient: in the bf16 weight-gradient section. */
static void tn_leaf_bf16(const struct tn_tree *t, float *dst, int k0, int k1);

static void tn_subtree(const struct tn_tree *t, float *dst /* [n,q] */, int lo, int hi, int d)
{
    if (hi - lo == 1) {
        struct mm leaf = *t->m;
        int k0 = leaf_lo(lo, t->m->p, t->seg), k1 = leaf_hi(lo, t->m->p, t->seg);
        leaf.c = dst;
        leaf.kinit = k0;
        if (t->bf != BF_NONE)
            tn_leaf_bf16(t, dst, k0, k1);
        else
            t->leaf(&leaf, t->n, t->t0, t->t1, k1);
        return;
    }
    int mid = lo + (hi - lo) / 2, q = t->m->q;
    float *right = t->tmp + (size_t)d * t->n * q; /* [n,q] */
    tn_subtree(t, dst, lo, mid, d + 1);
    tn_subtree(t, right, mid, hi, d + 1);
    size_t r0 = (size_t)t->t0 * t->mr, r1 = (size_t)min_int(t->n, t->t1 * t->mr);
    add_into(dst + r0 * q, right + r0 * q, (r1 - r0) * q);
}

/* Whether nth threads can each take a whole subtree of the L leaves: the
 * subtrees at depth log2(nth) are then [t*L/nth, (t+1)*L/nth), and the
 * tree over their results is the tree's top (the sharding rule, tensor.h). */
static int leaf_split(int nth, int L) { return nth > 1 && !(nth & (nth - 1)) && L % nth == 0; }

/* Each thread reads only its leaves' rows of a and b when the leaves split
 * evenly into subtrees (with the threads sharing c's rows, each read all
 * of b, from memory at the model's sizes); else the threads share c's rows
 * over all leaves. The same bits either way. */
static void matmul_tn_seg_tiles(tn_leaf_fn *leaf, int mr, const struct mm *m, int n, int seg,
                                int bf)
{
    int L = leaf_count(m->p, seg), tiles = (n + mr - 1) / mr;
    size_t nc = (size_t)n * m->q;
    if (L == 0) {
        memset(m->c, 0, sizeof(float) * nc);
        return;
    }
    int par = (long)n * m->p * m->q >= PAR_WORK, nth = par ? omp_get_max_threads() : 1;
    int split = leaf_split(nth, L), depth = tree_depth(L), sub = tree_depth(split ? L / nth : 1);
    /* split: per thread [sub,n,q] scratch and [n,q] for its subtree's
     * result (thread 0's goes to c); sharing rows: one [depth,n,q] (a
     * nested region may get fewer threads than asked: then they share) */
    size_t own = (size_t)(sub + 1) * nc, shared = (size_t)depth * nc;
    float *tmp = xmalloc(sizeof(float) * (split && nth * own > shared ? nth * own : shared));
    float **res = xmalloc(sizeof(float *) * (size_t)nth);
#pragma omp parallel if (par) num_threads(nth)
    {
        int me = omp_get_thread_num(), lo = 0, hi = L;
        struct tn_tree t = {m, leaf, tmp, n, seg, mr, 0, tiles, bf, NULL};
        if (bf != BF_NONE) /* [BF_TN_K, ldb + lda] floats hold either path's packing */
            t.pack = xmalloc(sizeof(float) * BF_TN_K * (size_t)(round16(m->q) + round16(n)));
        float *dst = m->c;
        int mine = split && omp_get_num_threads() == nth; /* this thread's own subtree */
        if (mine) {
            t.tmp = tmp + (size_t)me * own;
            dst = me ? t.tmp + (size_t)sub * nc : m->c;
            lo = me * (L / nth), hi = lo + L / nth;
            res[me] = dst;
        } else {
            my_share(tiles, &t.t0, &t.t1);
        }
        if (t.t0 < t.t1)
            tn_subtree(&t, dst, lo, hi, 0);
        free(t.pack);
        if (mine) {
#pragma omp barrier
#pragma omp single
            tree_sum_chunked(m->c, (const float *const *)res, nth, nc); /* nested: serial */
        }
    }
    free(res);
    free(tmp);
}

/* -- weight-gradient matmul: entry points -- */

/* bf: BF_NONE for fp32, else the bf16 path (the emulations when the
 * instruction is missing or not wanted). */
static void matmul_tn_seg_any(float *c /* [n,q] */, const float *a /* [p,n] */,
                              const float *b /* [p,q] */, int n, int p, int q, int seg, int bf)
{
    struct mm m = {c, a, b, NULL, NULL, NULL, 0, p, q, 0, p, 0};
    int isa = isa_get();
    if (isa == ISA_SCALAR && bf == BF_NONE)
        k_matmul_tn_seg_ref(c, a, b, n, p, q, seg);
    else if (isa == ISA_SCALAR)
        k_matmul_tn_seg_bf16_ref(c, a, b, n, p, q, seg);
    else if (bf != BF_NONE) /* AVX2 has only the emulation */
        matmul_tn_seg_tiles(NULL, BF_TN_MR, &m, n, seg, isa == ISA_AVX2 ? BF_EMU_AVX2 : bf);
    else if (isa == ISA_AVX512)
        matmul_tn_seg_tiles(tn_leaf_avx512, MR_AVX512, &m, n, seg, BF_NONE);
    else
        matmul_tn_seg_tiles(tn_leaf_avx2, MR_AVX2, &m, n, seg, BF_NONE);
}

void k_matmul_tn_seg(float *c /* [n,q] */, const float *a /* [p,n] */, const float *b /* [p,q] */,
                     int n, int p, int q, int seg)
{
    matmul_tn_seg_any(c, a, b, n, p, q, seg, BF_NONE);
}

/* One leaf of all p rows: the SIMD paths are the seg kernel's, with no
 * tree; the twin needs no scratch. */
void k_matmul_tn(float *c /* [n,q] */, const float *a /* [p,n] */, const float *b /* [p,q] */,
                 int n, int p, int q)
{
    if (isa_get() == ISA_SCALAR)
        k_matmul_tn_ref(c, a, b, n, p, q);
    else
        k_matmul_tn_seg(c, a, b, n, p, q, 0);
}

/* ---- attention ---- */

/* -- attention: twins -- */

/* One query of one head against keys 0..nk-1: fills s [nk] with the
 * probabilities, returns the log-sum-exp of the scaled scores. */
static float softmax_row_ref(float *s /* [nk] */, const float *q /* [hs] */,
                             const float *k0 /* key 0's [hs], rows ld apart */, size_t ld, int nk,
                             int hs)
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
        s[j] = expf(s[j] - mx);
        l += s[j];
    }
    for (int j = 0; j < nk; j++)
        s[j] /= l;
    return mx + logf(l);
}

/* Dropout on the probabilities (tensor.h, dropout), or none when NULL. */
struct drop_mask {
    const int32_t *key, *rows; /* [2], [B*T] */
    long site;
    float p;
};

/* What survives of P_ij, head h, query row `row`: 1/(1-p) or 0; 1 without
 * dropout (so the products below keep their bits). */
static float kept_scale(const struct drop_mask *dm, int32_t row, int h, int T, int j)
{
    if (!dm)
        return 1.0f;
    return k_dropout_keep(dm->key, dm->site, row, (long)h * T + j, dm->p) ? 1.0f / (1.0f - dm->p)
                                                                          : 0.0f;
}

static void attention_ref(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                          const float *qkv /* [B,T,3C] */, int B, int T, int C, int H,
                          const struct drop_mask *dm)
{
    int hs = C / H;
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        float *s = xmalloc(sizeof(float) * (size_t)T); /* [T] probabilities */
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
    attention_ref(out, lse, qkv, B, T, C, H, NULL);
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
            float pr = expf(dot * scale - lse[i]);
            float ds = pr * (dp * kept - D);
            for (int d = 0; d < hs; d++) {
                dq[d] += scale * ds * k[d];
                dk[d] += scale * ds * q[d];
                dv[d] += pr * kept * g[d];
            }
        }
    }
}

static void attention_bwd_ref(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
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
    attention_bwd_ref(dqkv, dout, qkv, out, lse, B, T, C, H, NULL);
}

/* Appends the new token's k and v to the caches: the common first half of
 * every attention_step path. */
static void kv_append(float *kc /* [nb,tmax,C] */, float *vc /* [nb,tmax,C] */,
                      const float *qkv /* [nb,3C] */, int nb, int pos, int tmax, int C, int H)
{
    int hs = C / H;
    for (int s = 0; s < nb; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < hs; d++) {
                size_t at = ((size_t)s * tmax + pos) * C + hs * h + d;
                kc[at] = qkv[(size_t)s * 3 * C + 3 * hs * h + hs + d];
                vc[at] = qkv[(size_t)s * 3 * C + 3 * hs * h + 2 * hs + d];
            }
}

/* One query of one head against nk keys and values (rows ld apart): the
 * decode step's and the windows' last query's attention. s: [nk] scratch. */
static void attend_one_ref(float *o /* [hs] */, const float *q /* [hs] */,
                           const float *k0 /* [nk], rows ld apart */,
                           const float *v0 /* [nk], rows ld apart */, size_t ld, int nk, int hs,
                           float *s /* [nk] */)
{
    softmax_row_ref(s, q, k0, ld, nk, hs);
    for (int d = 0; d < hs; d++) {
        float acc = 0.0f;
        for (int j = 0; j < nk; j++)
            acc += s[j] * v0[(size_t)j * ld + d];
        o[d] = acc;
    }
}

void k_attention_step_ref(float *out /* [nb,C] */, float *kc /* [nb,tmax,C] */,
                          float *vc /* [nb,tmax,C] */, const float *qkv /* [nb,3C] */, int nb,
                          int pos, int tmax, int C, int H)
{
    int hs = C / H;
    float *s = xmalloc(sizeof(float) * (size_t)(pos + 1)); /* [pos+1] */
    kv_append(kc, vc, qkv, nb, pos, tmax, C, H);
    for (int b = 0; b < nb; b++)
        for (int h = 0; h < H; h++) {
            size_t c0 = (size_t)b * tmax * C + hs * h; /* cache row 0, head's col */
            attend_one_ref(out + (size_t)b * C + hs * h, qkv + (size_t)b * 3 * C + 3 * hs * h,
                           kc + c0, vc + c0, (size_t)C, pos + 1, hs, s);
        }
    free(s);
}

void k_attention_last_ref(float *out /* [B,C] */, const float *qkv /* [B,T,3C] */, int B, int T,
                          int C, int H)
{
    int hs = C / H;
    float *s = xmalloc(sizeof(float) * (size_t)T); /* [T] */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *x = qkv + (size_t)b * T * 3 * C + 3 * hs * h; /* head's q, row 0 */
            attend_one_ref(out + (size_t)b * C + hs * h, x + (size_t)(T - 1) * 3 * C, x + hs,
                           x + 2 * hs, 3 * (size_t)C, T, hs, s);
        }
    free(s);
}

/* -- attention: transposed operands for the SIMD heads -- */

/* dst[c, r] = src[r, c] for rows r < R and columns c < K (dst's rows dld
 * apart, src's sld apart): 8 x 8 blocks by shuffles, the edges one by
 * one. The attention heads transpose their q, k and v with it, a few
 * thousand floats a head: one by one that was a fifth of the forward. */
T_AVX2 static void transpose_block(float *dst, size_t dld, const float *src, size_t sld, int R,
                                   int K)
{
    int r0 = 0;
    for (; r0 + 8 <= R; r0 += 8) {
        int c0 = 0;
        for (; c0 + 8 <= K; c0 += 8) {
            __m256 x[8], t[8], u[8];
            for (int k = 0; k < 8; k++)
                x[k] = _mm256_loadu_ps(src + (size_t)(r0 + k) * sld + c0);
            for (int k = 0; k < 8; k += 2) {
                t[k] = _mm256_unpacklo_ps(x[k], x[k + 1]);
                t[k + 1] = _mm256_unpackhi_ps(x[k], x[k + 1]);
            }
            for (int k = 0; k < 8; k += 4) {
                u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
                u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
                u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
                u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
            }
            for (int k = 0; k < 4; k++) {
                float *lo = dst + (size_t)(c0 + k) * dld + r0, *hi = lo + 4 * dld;
                _mm256_storeu_ps(lo, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
                _mm256_storeu_ps(hi, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
            }
        }
        for (int c = c0; c < K; c++)
            for (int r = r0; r < r0 + 8; r++)
                dst[(size_t)c * dld + r] = src[(size_t)r * sld + c];
    }
    for (int c = 0; c < K; c++)
        for (int r = r0; r < R; r++)
            dst[(size_t)c * dld + r] = src[(size_t)r * sld + c];
}

/* Zeroes columns [c0, c1) of rows [0, R) of x (rows ld apart). */
static void zero_cols(float *x, size_t ld, int R, int c0, int c1)
{
    for (int r = 0; r < R; r++)
        for (int c = c0; c < c1; c++)
            x[(size_t)r * ld + c] = 0.0f;
}

/* One head's keys and values, transposed to [hs,tp] so the SIMD loops run
 * over keys; zero-padded from T to tp (a multiple of 16) so whole vectors
 * can be loaded past the last key. */
static void kv_transpose(float *kt /* [hs,tp] */, float *vt /* [hs,tp] */,
                         const float *qkv /* [T,3C], head's q col */, int T, int C, int hs, int tp)
{
    transpose_block(kt, (size_t)tp, qkv + hs, 3 * (size_t)C, T, hs);
    transpose_block(vt, (size_t)tp, qkv + 2 * hs, 3 * (size_t)C, T, hs);
    zero_cols(kt, (size_t)tp, hs, T, tp);
    zero_cols(vt, (size_t)tp, hs, T, tp);
}

/* Row stride of the transposed per-head buffers: room for whole vectors
 * past T, plus 16 floats so rows are never a multiple of 4 KiB apart (loads
 * and stores that far apart falsely alias in the store buffer). */
static int key_stride(int T) { return round16(T) + 16; }

/* The forward pass puts W queries in the lanes of a vector: qt[d,r] is
 * channel d of query i0+r, zero past the last query so the spare lanes
 * compute harmless numbers that are never stored. */
static void q_block_transpose(float *qt /* [hs,W] */, const float *q0 /* query i0, rows ld apart */,
                              size_t ld, int w, int W, int hs)
{
    transpose_block(qt, (size_t)W, q0, ld, w, hs);
    zero_cols(qt, (size_t)W, hs, w, W);
}

/* vt[d,j] = channel d of value j, for channels padded with zeros to a
 * multiple of 8, so the output can be summed 8 channels at a time. */
static void v_transpose(float *vt /* [round8(hs),tp] */,
                        const float *qkv /* [T,3C], head's q col */, int T, int C, int hs, int tp)
{
    transpose_block(vt, (size_t)tp, qkv + 2 * hs, 3 * (size_t)C, T, hs);
    zero_cols(vt, (size_t)tp, hs, T, tp);
    zero_cols(vt + (size_t)hs * tp, (size_t)tp, (hs + 7) / 8 * 8 - hs, 0, tp);
}

/* -- attention: AVX2 -- */

/* 8 output channels of a block of 8 queries: the sum over keys of
 * probability times value, in 8 independent accumulators. vt's rows past
 * hs are zero, so a partial group costs time but no care. */
INLINE_AVX2 void pv_group_avx2(float *o /* [w,C], at channel d0 */, int C,
                               const float *p /* [nk,8] */, const float *vt /* [8,tp], from d0 */,
                               int tp, int nk, __m256 l, int w, int nd)
{
    __m256 acc[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        acc[g] = _mm256_setzero_ps();
    for (int j = 0; j < nk; j++) {
        __m256 pj = _mm256_loadu_ps(p + 8 * j);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            acc[g] = _mm256_fmadd_ps(pj, _mm256_broadcast_ss(vt + (size_t)g * tp + j), acc[g]);
    }
    float tmp[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) /* constant indices keep acc in registers */
        if (g < nd) {
            _mm256_storeu_ps(tmp, _mm256_div_ps(acc[g], l));
            for (int r = 0; r < w; r++)
                o[(size_t)r * C + g] = tmp[r];
        }
}

/* One (batch, head) forward, 8 queries at a time, one per lane: the scores
 * of key j against the block's queries form one vector, so the softmax and
 * the weighted sum run down the keys with no horizontal sums. Scores are
 * kept for the whole block (two passes: max, then exp). */
T_AVX2 static void attention_head_avx2(float *o /* [T,C], head's col */, float *lse /* [T] */,
                                       const float *qkv /* [T,3C], head's q col */, int T, int C,
                                       int hs, float *qt /* [hs,8] */,
                                       float *vt /* [round8(hs),tp] */, float *sc /* [tp,8] */,
                                       int tp)
{
    const size_t ld = 3 * (size_t)C;
    /* scores in base 2, as attention_body_avx512 keeps them */
    const __m256 scale2 = _mm256_set1_ps(LOG2E / sqrtf((float)hs)),
                 ninf = _mm256_set1_ps(-INFINITY);
    v_transpose(vt, qkv, T, C, hs, tp);
    for (int i0 = 0; i0 < T; i0 += 8) {
        int w = min_int(8, T - i0), nk = i0 + w; /* queries i0.., keys 0..nk-1 */
        q_block_transpose(qt, qkv + i0 * ld, ld, w, 8, hs);
        __m256 mx = ninf;
        for (int j = 0; j < nk; j++) {
            const float *k = qkv + j * ld + hs; /* [hs] */
            __m256 s = _mm256_setzero_ps();
            for (int d = 0; d < hs; d++)
                s = _mm256_fmadd_ps(_mm256_loadu_ps(qt + 8 * d), _mm256_broadcast_ss(k + d), s);
            __m256 hide = _mm256_castsi256_ps(lanes8(j - i0)); /* queries before key j */
            s = _mm256_blendv_ps(_mm256_mul_ps(s, scale2), ninf, hide);
            _mm256_storeu_ps(sc + 8 * j, s);
            mx = _mm256_max_ps(mx, s);
        }
        __m256 l = _mm256_setzero_ps();
        for (int j = 0; j < nk; j++) {
            __m256 hide = _mm256_castsi256_ps(lanes8(j - i0));
            __m256 p =
                _mm256_andnot_ps(hide, exp2_8(_mm256_sub_ps(_mm256_loadu_ps(sc + 8 * j), mx)));
            _mm256_storeu_ps(sc + 8 * j, p);
            l = _mm256_add_ps(l, p);
        }
        for (int d0 = 0; d0 < hs; d0 += 8)
            pv_group_avx2(o + (size_t)i0 * C + d0, C, sc, vt + (size_t)d0 * tp, tp, nk, l, w,
                          min_int(8, hs - d0));
        float mf[8], lf[8];
        _mm256_storeu_ps(mf, mx);
        _mm256_storeu_ps(lf, l);
        for (int r = 0; r < w; r++) /* back to base e */
            lse[i0 + r] = mf[r] * LN2 + logf(lf[r]);
    }
}

/* One (batch, head) backward, flash-attention style: probabilities are
 * recomputed from lse, dK and dV accumulate in transposed buffers over
 * queries in order, dQ is finished per query. */
T_AVX2 static void attention_bwd_head_avx2(float *dqkv /* [T,3C], head's q col */,
                                           const float *dout /* [T,C], head's col */,
                                           const float *qkv /* [T,3C], head's q col */,
                                           const float *out /* [T,C], head's col */,
                                           const float *lse /* [T] */, int T, int C, int hs,
                                           float *kt /* [hs,tp] */, float *vt /* [hs,tp] */,
                                           float *dkt /* [hs,tp] */, float *dvt /* [hs,tp] */,
                                           float *ds /* [tp] */, int tp)
{
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t ld3 = 3 * (size_t)C;
    kv_transpose(kt, vt, qkv, T, C, hs, tp);
    memset(dkt, 0, sizeof(float) * (size_t)hs * tp);
    memset(dvt, 0, sizeof(float) * (size_t)hs * tp);
    for (int i = 0; i < T; i++) {
        const float *q = qkv + i * ld3, *g = dout + (size_t)i * C, *o = out + (size_t)i * C;
        float D = 0.0f;
        for (int d = 0; d < hs; d++)
            D += g[d] * o[d];
        int nc = i / 8 + 1;
        __m256 last = _mm256_castsi256_ps(lanes8(i + 1 - 8 * (nc - 1)));
        __m256 li2 = _mm256_set1_ps(lse[i] * LOG2E), Dv = _mm256_set1_ps(D); /* base 2 */
        for (int c = 0; c < nc; c++) {
            __m256 s = _mm256_setzero_ps(), dp = _mm256_setzero_ps();
            for (int d = 0; d < hs; d++) {
                s = _mm256_fmadd_ps(_mm256_set1_ps(q[d]),
                                    _mm256_loadu_ps(kt + (size_t)d * tp + 8 * c), s);
                dp = _mm256_fmadd_ps(_mm256_set1_ps(g[d]),
                                     _mm256_loadu_ps(vt + (size_t)d * tp + 8 * c), dp);
            }
            __m256 p = exp2_8(_mm256_fmsub_ps(s, _mm256_set1_ps(scale * LOG2E), li2));
            if (c == nc - 1)
                p = _mm256_and_ps(p, last);
            __m256 dsv = _mm256_mul_ps(p, _mm256_sub_ps(dp, Dv));
            _mm256_storeu_ps(ds + 8 * c, dsv);
            for (int d = 0; d < hs; d++) {
                float *dvc = dvt + (size_t)d * tp + 8 * c, *dkc = dkt + (size_t)d * tp + 8 * c;
                _mm256_storeu_ps(dvc,
                                 _mm256_fmadd_ps(p, _mm256_set1_ps(g[d]), _mm256_loadu_ps(dvc)));
                _mm256_storeu_ps(dkc,
                                 _mm256_fmadd_ps(dsv, _mm256_set1_ps(q[d]), _mm256_loadu_ps(dkc)));
            }
        }
        for (int d = 0; d < hs; d++) {
            __m256 acc = _mm256_setzero_ps();
            for (int c = 0; c < nc; c++)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(ds + 8 * c),
                                      _mm256_loadu_ps(kt + (size_t)d * tp + 8 * c), acc);
            dqkv[i * ld3 + d] = hsum8(acc) * scale;
        }
    }
    for (int j = 0; j < T; j++)
        for (int d = 0; d < hs; d++) {
            dqkv[j * ld3 + hs + d] = dkt[(size_t)d * tp + j] * scale;
            dqkv[j * ld3 + 2 * hs + d] = dvt[(size_t)d * tp + j];
        }
}

/* A query against nk keys of one head (a decode step's cache, or a
 * window's rows; rows ld apart): hs-long dot products, 8 channels at a
 * time, then softmax and the weighted sum of the values. */
T_AVX2 static void attention_step_head_avx2(float *o /* [hs] */, const float *q /* [hs] */,
                                            const float *k0 /* [nk], rows ld apart */,
                                            const float *v0 /* [nk], rows ld apart */, int nk,
                                            int ld, int hs, float *s /* [round16(nk)] */)
{
    const float scale = 1.0f / sqrtf((float)hs);
    float mx = -INFINITY;
    for (int j = 0; j < nk; j++) {
        __m256 acc = _mm256_setzero_ps();
        for (int d = 0; d < hs; d += 8) {
            __m256i msk = lanes8(hs - d);
            acc = _mm256_fmadd_ps(_mm256_maskload_ps(q + d, msk),
                                  _mm256_maskload_ps(k0 + (size_t)j * ld + d, msk), acc);
        }
        s[j] = hsum8(acc) * scale;
        mx = s[j] > mx ? s[j] : mx;
    }
    int nc = (nk + 7) / 8;
    __m256 last = _mm256_castsi256_ps(lanes8(nk - 8 * (nc - 1))), sum = _mm256_setzero_ps();
    for (int c = 0; c < nc; c++) { /* s has room for whole vectors */
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + 8 * c), _mm256_set1_ps(mx)));
        if (c == nc - 1)
            e = _mm256_and_ps(e, last);
        _mm256_storeu_ps(s + 8 * c, e);
        sum = _mm256_add_ps(sum, e);
    }
    float l = hsum8(sum);
    for (int d = 0; d < hs; d += 8) {
        __m256i msk = lanes8(hs - d);
        __m256 acc = _mm256_setzero_ps();
        for (int j = 0; j < nk; j++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(s[j]),
                                  _mm256_maskload_ps(v0 + (size_t)j * ld + d, msk), acc);
        float tmp[8];
        _mm256_storeu_ps(tmp, _mm256_div_ps(acc, _mm256_set1_ps(l)));
        for (int e = 0; e < 8 && d + e < hs; e++)
            o[d + e] = tmp[e];
    }
}

/* -- attention: AVX-512, the twins of the AVX2 head functions -- */

/* lanes16 for n < 16 without branches (the attention loops' masks). */
INLINE_AVX512 __mmask16 below16(int n) { return (__mmask16)((1u << (n > 0 ? n : 0)) - 1u); }

/* o[r, g] = acc[g][r] / l[r]: 8 channels of w queries out of the lanes. */
INLINE_AVX512 void pv_store_avx512(float *o /* [w,C] */, int C, const __m512 *acc /* [8] */,
                                   __m512 l, int w, int nd)
{
    float tmp[16];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        if (g < nd) {
            _mm512_storeu_ps(tmp, _mm512_div_ps(acc[g], l));
            for (int r = 0; r < w; r++)
                o[(size_t)r * C + g] = tmp[r];
        }
}

INLINE_AVX512 void pv_group_avx512(float *o /* [w,C], at channel d0 */, int C,
                                   const float *p /* [nk,16] */,
                                   const float *vt /* [8,tp], from d0 */, int tp, int nk, __m512 l,
                                   int w, int nd)
{
    __m512 acc[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        acc[g] = _mm512_setzero_ps();
    for (int j = 0; j < nk; j++) {
        __m512 pj = _mm512_loadu_ps(p + 16 * j);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            acc[g] = _mm512_fmadd_ps(pj, _mm512_set1_ps(vt[(size_t)g * tp + j]), acc[g]);
    }
    pv_store_avx512(o, C, acc, l, w, nd);
}

/* The softmax's exp and sum, with the first 8 channels of P V summed in
 * the same pass (one pass over the scores instead of two); the
 * probabilities are left in p for the other channels. Scores and mx are in
 * base 2 (attention_body_avx512). Returns the sum. */
INLINE_AVX512 __m512 pv_first_avx512(float *o /* [w,C] */, int C, float *p /* [nk,16] */,
                                     const float *vt /* [8,tp] */, int tp, int nk, __m512 mx,
                                     int i0, int w, int nd)
{
    __m512 acc[8], l = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        acc[g] = _mm512_setzero_ps();
    for (int j = 0; j < nk; j++) {
        __m512 e = exp2_16(_mm512_sub_ps(_mm512_loadu_ps(p + 16 * j), mx));
        __m512 pj = _mm512_maskz_mov_ps((__mmask16)~below16(j - i0), e);
        _mm512_storeu_ps(p + 16 * j, pj);
        l = _mm512_add_ps(l, pj);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            acc[g] = _mm512_fmadd_ps(pj, _mm512_set1_ps(vt[(size_t)g * tp + j]), acc[g]);
    }
    pv_store_avx512(o, C, acc, l, w, nd);
    return l;
}

/* Scores of keys j..j+3 for the block's 16 queries (transposed and
 * scaled in qt), causally masked, into sc; returns their lane-wise max. */
INLINE_AVX512 __m512 scores4_avx512(float *sc /* [tp,16] */, const float *qt /* [hs,16] */,
                                    const float *qkv /* [T,3C], head's q col */, size_t ld, int j,
                                    int i0, int hs)
{
    const float *k = qkv + (size_t)j * ld + hs; /* key j's [hs]; the next ld apart */
    __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
#pragma GCC unroll 8
    for (int d = 0; d < hs; d++) {
        __m512 qd = _mm512_loadu_ps(qt + 16 * d);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            s[u] = _mm512_fmadd_ps(qd, _mm512_set1_ps(k[u * ld + d]), s[u]);
    }
    __m512 mx = _mm512_set1_ps(-INFINITY);
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) { /* queries before key j+u do not see it */
        s[u] = _mm512_mask_mov_ps(s[u], below16(j + u - i0), _mm512_set1_ps(-INFINITY));
        _mm512_storeu_ps(sc + 16 * (j + u), s[u]);
        mx = _mm512_max_ps(mx, s[u]);
    }
    return mx;
}

INLINE_AVX512 void attention_body_avx512(float *o /* [T,C], head's col */, float *lse /* [T] */,
                                         const float *qkv /* [T,3C], head's q col */, int T, int C,
                                         int hs, float *qt /* [hs,16] */,
                                         float *vt /* [round8(hs),tp] */, float *sc /* [tp,16] */,
                                         int tp)
{
    const size_t ld = 3 * (size_t)C;
    /* scores in base 2: q scaled by 1/sqrt(hs) and log2(e), so the
     * softmax's exp is exp2_16 */
    const __m512 scale2 = _mm512_set1_ps(LOG2E / sqrtf((float)hs)),
                 ninf = _mm512_set1_ps(-INFINITY);
    v_transpose(vt, qkv, T, C, hs, tp);
    for (int i0 = 0; i0 < T; i0 += 16) {
        int w = min_int(16, T - i0), nk = i0 + w; /* queries i0.., keys 0..nk-1 */
        q_block_transpose(qt, qkv + i0 * ld, ld, w, 16, hs);
        for (int d = 0; d < hs; d++)
            _mm512_storeu_ps(qt + 16 * d, _mm512_mul_ps(_mm512_loadu_ps(qt + 16 * d), scale2));
        __m512 mx = ninf;
        int j = 0;
        /* four keys at a time: each score is still one chain of hs FMAs
         * in channel order (the same bits, NaN payloads aside), but four
         * chains overlap */
        for (; j + 4 <= nk; j += 4)
            mx = _mm512_max_ps(mx, scores4_avx512(sc, qt, qkv, ld, j, i0, hs));
        for (; j < nk; j++) {
            const float *k = qkv + j * ld + hs; /* [hs] */
            __m512 s = _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int d = 0; d < hs; d++)
                s = _mm512_fmadd_ps(_mm512_loadu_ps(qt + 16 * d), _mm512_set1_ps(k[d]), s);
            s = _mm512_mask_mov_ps(s, below16(j - i0), ninf); /* queries before key j */
            _mm512_storeu_ps(sc + 16 * j, s);
            mx = _mm512_max_ps(mx, s);
        }
        __m512 l = pv_first_avx512(o + (size_t)i0 * C, C, sc, vt, tp, nk, mx, i0, w,
                                   min_int(8, hs));
        for (int d0 = 8; d0 < hs; d0 += 8)
            pv_group_avx512(o + (size_t)i0 * C + d0, C, sc, vt + (size_t)d0 * tp, tp, nk, l, w,
                            min_int(8, hs - d0));
        float mf[16], lf[16];
        _mm512_storeu_ps(mf, mx);
        _mm512_storeu_ps(lf, l);
        for (int r = 0; r < w; r++) /* back to base e */
            lse[i0 + r] = mf[r] * LN2 + logf(lf[r]);
    }
}

/* hs = 8 (the default model's head) gets its own copy with the channel
 * loops unrolled. */
T_AVX512 static void attention_head_avx512(float *o /* [T,C], head's col */, float *lse /* [T] */,
                                           const float *qkv /* [T,3C], head's q col */, int T,
                                           int C, int hs, float *qt /* [hs,16] */,
                                           float *vt /* [round8(hs),tp] */, float *sc /* [tp,16] */,
                                           int tp)
{
    if (hs == 8)
        attention_body_avx512(o, lse, qkv, T, C, 8, qt, vt, sc, tp);
    else
        attention_body_avx512(o, lse, qkv, T, C, hs, qt, vt, sc, tp);
}

/* P and dS of queries i..i+U-1 against keys k0..k0+15. */
INLINE_AVX512 void bwd_probs_rows(float *pr /* [T,16] */, float *ds /* [T,tp] */,
                                  const float *dout /* [T,C], head's col */,
                                  const float *qkv /* [T,3C], head's q col */,
                                  const float *lse /* [T] */, const float *D /* [T] */, int C,
                                  int hs, const float *kt /* [hs,tp] */,
                                  const float *vt /* [hs,tp] */, int tp, int k0, int i, int U,
                                  size_t ld3, __m512 scale2)
{
    __m512 s[4], dp[4];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++)
        s[u] = dp[u] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int d = 0; d < hs; d++) {
        __m512 kd = _mm512_loadu_ps(kt + (size_t)d * tp + k0);
        __m512 vd = _mm512_loadu_ps(vt + (size_t)d * tp + k0);
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            const float *q = qkv + (size_t)(i + u) * ld3, *g = dout + (size_t)(i + u) * C;
            s[u] = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), kd, s[u]);
            dp[u] = _mm512_fmadd_ps(_mm512_set1_ps(g[d]), vd, dp[u]);
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < U; u++) {
        int r = i + u;
        /* in base 2, as the forward: P = 2^(s scale log2(e) - lse log2(e)) */
        __m512 p = exp2_16(_mm512_fmsub_ps(s[u], scale2, _mm512_set1_ps(lse[r] * LOG2E)));
        p = _mm512_maskz_mov_ps(lanes16(r + 1 - k0), p); /* keys after r are not seen */
        _mm512_storeu_ps(pr + 16 * (size_t)r, p);
        _mm512_storeu_ps(ds + (size_t)r * tp + k0,
                         _mm512_mul_ps(p, _mm512_sub_ps(dp[u], _mm512_set1_ps(D[r]))));
    }
}

/* The backward pass of one head in three sweeps, each with its reduction
 * in registers rather than in memory:
 *  1. per 16-key chunk, for every query that sees it (keys in the lanes):
 *     P and dS, kept as rows of 16 (P) and in the [T,tp] matrix dS;
 *  2. per chunk, dV and dK summed over those queries in 16 accumulators;
 *  3. dQ_i = scale sum_j dS_ij K_j, channels in the lanes, 8 queries at a
 *     time so the chains overlap. */
INLINE_AVX512 void bwd_probs_avx512(float *pr /* [T,16], rows k0.. */, float *ds /* [T,tp] */,
                                    const float *dout /* [T,C], head's col */,
                                    const float *qkv /* [T,3C], head's q col */,
                                    const float *lse /* [T] */, const float *D /* [T] */, int T,
                                    int C, int hs, const float *kt /* [hs,tp] */,
                                    const float *vt /* [hs,tp] */, int tp, int k0)
{
    const size_t ld3 = 3 * (size_t)C;
    const __m512 scale2 = _mm512_set1_ps(LOG2E / sqrtf((float)hs));
    int i = k0;
    /* U queries at a time: each dot product is still one chain of hs FMAs
     * in channel order (the same bits), but 2U chains overlap */
    for (; i + 2 <= T; i += 2)
        bwd_probs_rows(pr, ds, dout, qkv, lse, D, C, hs, kt, vt, tp, k0, i, 2, ld3, scale2);
    for (; i < T; i++)
        bwd_probs_rows(pr, ds, dout, qkv, lse, D, C, hs, kt, vt, tp, k0, i, 1, ld3, scale2);
}

/* dV and dK of keys k0..k0+15, channels d0..d0+nd-1 (nd <= 8). */
INLINE_AVX512 void bwd_kv_avx512(float *dqkv /* [T,3C], head's q col */,
                                 const float *pr /* [T,16] */, const float *ds /* [T,tp] */,
                                 const float *dout /* [T,C], head's col */,
                                 const float *qkv /* [T,3C], head's q col */, int T, int C, int hs,
                                 int tp, int k0, int d0, int nd)
{
    const size_t ld3 = 3 * (size_t)C;
    __m512 av[8], ak[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        av[g] = ak[g] = _mm512_setzero_ps();
    for (int i = k0; i < T; i++) {
        const float *q = qkv + i * ld3 + d0, *gr = dout + (size_t)i * C + d0;
        __m512 p = _mm512_loadu_ps(pr + 16 * (size_t)i), s = _mm512_loadu_ps(ds + (size_t)i * tp + k0);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            if (g < nd) {
                av[g] = _mm512_fmadd_ps(p, _mm512_set1_ps(gr[g]), av[g]);
                ak[g] = _mm512_fmadd_ps(s, _mm512_set1_ps(q[g]), ak[g]);
            }
    }
    float tv[8][16], tk[8][16], scale = 1.0f / sqrtf((float)hs);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        if (g < nd) {
            _mm512_storeu_ps(tv[g], av[g]);
            _mm512_storeu_ps(tk[g], ak[g]);
        }
    for (int r = 0; r < min_int(16, T - k0); r++) {
        float *row = dqkv + (size_t)(k0 + r) * ld3 + d0; /* [3hs] from channel d0 */
        for (int g = 0; g < nd; g++) {
            row[hs + g] = tk[g][r] * scale;
            row[2 * hs + g] = tv[g][r];
        }
    }
}

/* dQ of queries i0..i0+W-1 (all in one 16-key chunk row block), channels
 * d0..d0+nd-1: dS entries past each query's own key are zero. W is a
 * constant at each call, so the accumulators stay in registers. */
INLINE_AVX512 void bwd_q_avx512(float *dqkv /* [T,3C], head's q col */, const float *ds /* [T,tp] */,
                                const float *qkv /* [T,3C], head's q col */, int C, int hs, int tp,
                                int i0, int W, int d0, int nd)
{
    const size_t ld3 = 3 * (size_t)C;
    const __mmask8 m = (__mmask8)((1u << nd) - 1);
    __m256 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < W; r++)
        acc[r] = _mm256_setzero_ps();
    for (int j = 0; j < i0 + W; j++) {
        __m256 k = _mm256_maskz_loadu_ps(m, qkv + j * ld3 + hs + d0);
#pragma GCC unroll 8
        for (int r = 0; r < W; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(ds[(size_t)(i0 + r) * tp + j]), k, acc[r]);
    }
    __m256 scale = _mm256_set1_ps(1.0f / sqrtf((float)hs));
#pragma GCC unroll 8
    for (int r = 0; r < W; r++)
        _mm256_mask_storeu_ps(dqkv + (size_t)(i0 + r) * ld3 + d0, m, _mm256_mul_ps(acc[r], scale));
}

INLINE_AVX512 void attention_bwd_body_avx512(float *dqkv, const float *dout, const float *qkv,
                                             const float *out, const float *lse, int T, int C,
                                             int hs, float *kt, float *vt, float *ds, int tp)
{
    float *pr = ds + (size_t)T * tp, *D = pr + 16 * (size_t)T; /* [T,16], [T] */
    kv_transpose(kt, vt, qkv, T, C, hs, tp);
    for (int i = 0; i < T; i++) {
        const float *g = dout + (size_t)i * C, *o = out + (size_t)i * C; /* [hs] each */
        float acc = 0.0f;
        for (int d = 0; d < hs; d++)
            acc += g[d] * o[d];
        D[i] = acc;
    }
    for (int k0 = 0; k0 < T; k0 += 16) {
        bwd_probs_avx512(pr, ds, dout, qkv, lse, D, T, C, hs, kt, vt, tp, k0);
        for (int d0 = 0; d0 < hs; d0 += 8)
            bwd_kv_avx512(dqkv, pr, ds, dout, qkv, T, C, hs, tp, k0, d0, min_int(8, hs - d0));
    }
    for (int d0 = 0; d0 < hs; d0 += 8) {
        int nd = min_int(8, hs - d0), i0 = 0;
        for (; i0 + 8 <= T; i0 += 8)
            bwd_q_avx512(dqkv, ds, qkv, C, hs, tp, i0, 8, d0, nd);
        for (; i0 < T; i0++)
            bwd_q_avx512(dqkv, ds, qkv, C, hs, tp, i0, 1, d0, nd);
    }
}

/* ds is [T,tp] followed by [T,16] and [T] of scratch. hs = 8 (the default
 * model's head) gets its own copy with the channel loops unrolled and K, V
 * held in registers. */
T_AVX512 static void attention_bwd_head_avx512(float *dqkv /* [T,3C], head's q col */,
                                               const float *dout /* [T,C], head's col */,
                                               const float *qkv /* [T,3C], head's q col */,
                                               const float *out /* [T,C], head's col */,
                                               const float *lse /* [T] */, int T, int C, int hs,
                                               float *kt /* [hs,tp] */, float *vt /* [hs,tp] */,
                                               float *dkt /* unused */, float *dvt /* unused */,
                                               float *ds /* [T,tp] + [T,16] + [T] */, int tp)
{
    if (hs == 8)
        attention_bwd_body_avx512(dqkv, dout, qkv, out, lse, T, C, 8, kt, vt, ds, tp);
    else
        attention_bwd_body_avx512(dqkv, dout, qkv, out, lse, T, C, hs, kt, vt, ds, tp);
}

/* The twin of attention_step_head_avx2. */
T_AVX512 static void attention_step_head_avx512(float *o /* [hs] */, const float *q /* [hs] */,
                                                const float *k0 /* [nk], rows ld apart */,
                                                const float *v0 /* [nk], rows ld apart */, int nk,
                                                int ld, int hs, float *s /* [round16(nk)] */)
{
    const float scale = 1.0f / sqrtf((float)hs);
    float mx = -INFINITY;
    for (int j = 0; j < nk; j++) {
        __m512 acc = _mm512_setzero_ps();
        for (int d = 0; d < hs; d += 16) {
            __mmask16 t = lanes16(hs - d);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(t, q + d),
                                  _mm512_maskz_loadu_ps(t, k0 + (size_t)j * ld + d), acc);
        }
        s[j] = _mm512_reduce_add_ps(acc) * scale;
        mx = s[j] > mx ? s[j] : mx;
    }
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < nk; j += 16) {
        __mmask16 t = lanes16(nk - j);
        __m512 e = _mm512_maskz_mov_ps(
            t, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, s + j), _mm512_set1_ps(mx))));
        _mm512_mask_storeu_ps(s + j, t, e);
        sum = _mm512_add_ps(sum, e);
    }
    __m512 l = _mm512_set1_ps(_mm512_reduce_add_ps(sum));
    for (int d = 0; d < hs; d += 16) {
        __mmask16 t = lanes16(hs - d);
        __m512 acc = _mm512_setzero_ps();
        for (int j = 0; j < nk; j++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(s[j]),
                                  _mm512_maskz_loadu_ps(t, v0 + (size_t)j * ld + d), acc);
        _mm512_mask_storeu_ps(o + d, t, _mm512_div_ps(acc, l));
    }
}

/* -- attention: head drivers -- */

/* Shared by the SIMD paths: split (batch, head) pairs over threads, each
 * thread with its own scratch. */

typedef void attention_head_fn(float *, float *, const float *, int, int, int, float *, float *,
                               float *, int);
typedef void attention_bwd_head_fn(float *, const float *, const float *, const float *,
                                   const float *, int, int, int, float *, float *, float *, float *,
                                   float *, int);
typedef void attention_step_head_fn(float *, const float *, const float *, const float *, int, int,
                                    int, float *);

/* One thread's bf16 rounding: in the bf16 rounding section. */
static void round_span(float *y, const float *x, size_t n);

/* bf16 operands: a thread's heads come in batch order (static schedule), so
 * it rounds batch b's whole block of len floats once, when its first head
 * of b arrives, into s, and its other heads of b read that copy. */
static const float *round_block(float *s, int *have, int b, const float *x, size_t len)
{
    if (*have != b) {
        round_span(s, x, len);
        *have = b;
    }
    return s;
}

static void attention_heads(attention_head_fn *head, float *out /* [B,T,C] */,
                            float *lse /* [B,H,T] */, const float *qkv /* [B,T,3C] */, int B, int T,
                            int C, int H, int bf16)
{
    int hs = C / H, tp = key_stride(T), hs8 = (hs + 7) / 8 * 8;
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        size_t nqt = 16 * (size_t)hs, nvt = (size_t)hs8 * tp, nsc = 16 * (size_t)tp;
        size_t nr = bf16 ? (size_t)T * 3 * C : 0;
        float *qt = xmalloc(sizeof(float) * (nqt + nvt + nsc + nr)); /* [hs,16] (or 8) */
        float *vt = qt + nqt;                                        /* [hs8,tp] */
        float *sc = vt + nvt; /* [tp,16] scores, then probabilities */
        float *rq = sc + nsc; /* [T,3C] batch b's rounded q, k, v */
        int have = -1;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            int b = bh / H, h = bh % H;
            size_t blk = (size_t)T * 3 * C;
            const float *x = qkv + b * blk + 3 * hs * h; /* head's q col */
            if (bf16)
                x = round_block(rq, &have, b, qkv + b * blk, blk) + 3 * hs * h;
            head(out + (size_t)b * T * C + hs * h, lse + (size_t)bh * T, x, T, C, hs, qt, vt, sc,
                 tp);
        }
        free(qt);
    }
}

static void attention_bwd_heads(attention_bwd_head_fn *head, float *dqkv /* [B,T,3C] */,
                                const float *dout /* [B,T,C] */, const float *qkv /* [B,T,3C] */,
                                const float *out /* [B,T,C] */, const float *lse /* [B,H,T] */,
                                int B, int T, int C, int H, int bf16)
{
    int hs = C / H, tp = key_stride(T);
#pragma omp parallel if ((long)B * T * T * C >= PAR_WORK)
    {
        size_t nr = bf16 ? (size_t)T * 4 * C : 0, nds = (size_t)T * (tp + 17);
        float *kt = xmalloc(sizeof(float) * (4 * (size_t)hs * tp + nds + nr)); /* [hs,tp] */
        float *vt = kt + (size_t)hs * tp;                                      /* [hs,tp] */
        float *dkt = vt + (size_t)hs * tp;                                     /* [hs,tp] */
        float *dvt = dkt + (size_t)hs * tp;                                    /* [hs,tp] */
        float *ds = dvt + (size_t)hs * tp; /* [T,tp] + [T,16] + [T]: dS, P, D (AVX2: [tp]) */
        float *rq = ds + nds;               /* [T,3C] batch b's rounded q, k, v */
        float *rd = rq + (size_t)T * 3 * C; /* [T,C] batch b's rounded dout */
        int have_q = -1, have_d = -1;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            int b = bh / H, h = bh % H;
            size_t b3 = (size_t)b * T * 3 * C, b1 = (size_t)b * T * C;
            size_t r3 = b3 + 3 * hs * h, r1 = b1 + hs * h;
            const float *x = qkv + r3, *d = dout + r1;
            if (bf16) {
                x = round_block(rq, &have_q, b, qkv + b3, (size_t)T * 3 * C) + 3 * hs * h;
                d = round_block(rd, &have_d, b, dout + b1, (size_t)T * C) + hs * h;
            }
            head(dqkv + r3, d, x, out + r1, lse + (size_t)bh * T, T, C, hs, kt, vt, dkt, dvt, ds,
                 tp);
        }
        free(kt);
    }
}

/* Each window's last query against its T keys: k_attention_last. */
static void attention_last_heads(attention_step_head_fn *head, float *out /* [B,C] */,
                                 const float *qkv /* [B,T,3C] */, int B, int T, int C, int H)
{
    int hs = C / H;
#pragma omp parallel if ((long)B * T * C >= PAR_WORK)
    {
        float *s = xmalloc(sizeof(float) * (size_t)round16(T)); /* [T] scores */
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            int b = bh / H, h = bh % H;
            const float *x = qkv + (size_t)b * T * 3 * C + 3 * hs * h; /* head's q, row 0 */
            head(out + (size_t)b * C + hs * h, x + (size_t)(T - 1) * 3 * C, x + hs, x + 2 * hs, T,
                 3 * C, hs, s);
        }
        free(s);
    }
}

static void attention_step_heads(attention_step_head_fn *head, float *out /* [nb,C] */,
                                 float *kc /* [nb,tmax,C] */, float *vc /* [nb,tmax,C] */,
                                 const float *qkv /* [nb,3C] */, int nb, int pos, int tmax, int C,
                                 int H)
{
    int hs = C / H, nk = pos + 1;
    kv_append(kc, vc, qkv, nb, pos, tmax, C, H);
#pragma omp parallel if ((long)nb * nk * C >= PAR_WORK)
    {
        float *s = xmalloc(sizeof(float) * (size_t)round16(nk)); /* [nk] scores */
#pragma omp for schedule(static)
        for (int bh = 0; bh < nb * H; bh++) {
            int b = bh / H, h = bh % H;
            size_t c0 = (size_t)b * tmax * C + hs * h; /* cache row 0, head's col */
            head(out + (size_t)b * C + hs * h, qkv + (size_t)b * 3 * C + 3 * hs * h, kc + c0,
                 vc + c0, nk, C, hs, s);
        }
        free(s);
    }
}

/* -- attention: entry points -- */

static void attention_any(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                          const float *qkv /* [B,T,3C] */, int B, int T, int C, int H, int bf16)
{
    switch (isa_get()) {
    case ISA_AVX512: attention_heads(attention_head_avx512, out, lse, qkv, B, T, C, H, bf16); break;
    case ISA_AVX2: attention_heads(attention_head_avx2, out, lse, qkv, B, T, C, H, bf16); break;
    default:
        if (bf16)
            k_attention_bf16_ref(out, lse, qkv, B, T, C, H);
        else
            k_attention_ref(out, lse, qkv, B, T, C, H);
        break;
    }
}

void k_attention(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                 const float *qkv /* [B,T,3C] */, int B, int T, int C, int H)
{
    attention_any(out, lse, qkv, B, T, C, H, 0);
}

static void attention_bwd_any(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                              const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                              const float *lse /* [B,H,T] */, int B, int T, int C, int H, int bf16)
{
    switch (isa_get()) {
    case ISA_AVX512:
        attention_bwd_heads(attention_bwd_head_avx512, dqkv, dout, qkv, out, lse, B, T, C, H, bf16);
        break;
    case ISA_AVX2:
        attention_bwd_heads(attention_bwd_head_avx2, dqkv, dout, qkv, out, lse, B, T, C, H, bf16);
        break;
    default:
        if (bf16)
            k_attention_bwd_bf16_ref(dqkv, dout, qkv, out, lse, B, T, C, H);
        else
            k_attention_bwd_ref(dqkv, dout, qkv, out, lse, B, T, C, H);
        break;
    }
}

void k_attention_bwd(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                     const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                     const float *lse /* [B,H,T] */, int B, int T, int C, int H)
{
    attention_bwd_any(dqkv, dout, qkv, out, lse, B, T, C, H, 0);
}

void k_attention_step(float *out /* [nb,C] */, float *kc /* [nb,tmax,C] */,
                      float *vc /* [nb,tmax,C] */, const float *qkv /* [nb,3C] */, int nb, int pos,
                      int tmax, int C, int H)
{
    switch (isa_get()) {
    case ISA_AVX512:
        attention_step_heads(attention_step_head_avx512, out, kc, vc, qkv, nb, pos, tmax, C, H);
        break;
    case ISA_AVX2:
        attention_step_heads(attention_step_head_avx2, out, kc, vc, qkv, nb, pos, tmax, C, H);
        break;
    default: k_attention_step_ref(out, kc, vc, qkv, nb, pos, tmax, C, H); break;
    }
}

void k_attention_last(float *out /* [B,C] */, const float *qkv /* [B,T,3C] */, int B, int T, int C,
                      int H)
{
    switch (isa_get()) {
    case ISA_AVX512: attention_last_heads(attention_step_head_avx512, out, qkv, B, T, C, H); break;
    case ISA_AVX2: attention_last_heads(attention_step_head_avx2, out, qkv, B, T, C, H); break;
    default: k_attention_last_ref(out, qkv, B, T, C, H); break;
    }
}

/* ---- dropout ---- */

int k_dropout_keep(const int32_t *key, long site, int32_t row, long col, float p)
{
    /* the element's id (site < 2^12, row < 2^28, col < 2^24) under the
     * step's key, then splitmix64's finalizer: 24 uniform bits */
    uint64_t k = (uint64_t)(uint32_t)key[0] | (uint64_t)(uint32_t)key[1] << 32;
    uint64_t z = k ^ ((uint64_t)site << 52) ^ ((uint64_t)(uint32_t)row << 24) ^ (uint64_t)col;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 40) >= (uint32_t)(p * 16777216.0f);
}

void k_dropout(float *y, const float *x, const int32_t *rows, const int32_t *key, long n, long c,
               long site, float p)
{
    float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n * c >= PAR_WORK)
    for (long r = 0; r < n; r++)
        for (long j = 0; j < c; j++)
            y[r * c + j] = k_dropout_keep(key, site, rows[r], j, p) ? x[r * c + j] * keep_scale
                                                                      : 0.0f;
}

/* The attention twins with the mask: dropout is plain C (tensor.h). */
void k_attention_drop(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                      const float *qkv /* [B,T,3C] */, const int32_t *rows /* [B*T] */,
                      const int32_t *key /* [2] */, int B, int T, int C, int H, long site,
                      float p)
{
    struct drop_mask dm = {key, rows, site, p};
    attention_ref(out, lse, qkv, B, T, C, H, &dm);
}

void k_attention_drop_bwd(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                          const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                          const float *lse /* [B,H,T] */, const int32_t *rows /* [B*T] */,
                          const int32_t *key /* [2] */, int B, int T, int C, int H, long site,
                          float p)
{
    struct drop_mask dm = {key, rows, site, p};
    attention_bwd_ref(dqkv, dout, qkv, out, lse, B, T, C, H, &dm);
}

/* ---- layernorm ---- */

#define LN_EPS 1e-5f

/* -- layernorm: twins -- */

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

/* Rows [i0, i1): their dx, and dw, db summed over them in order from 0. */
static void layernorm_bwd_rows_ref(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                                   const float *dy /* [n,c] */, const float *x /* [n,c] */,
                                   const float *w /* [c] */, const float *mean /* [n] */,
                                   const float *rstd /* [n] */, int i0, int i1, int c)
{
    for (int j = 0; j < c; j++)
        dw[j] = db[j] = 0.0f;
    for (int i = i0; i < i1; i++) {
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

void k_layernorm_bwd_ref(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                         const float *dy /* [n,c] */, const float *x /* [n,c] */,
                         const float *w /* [c] */, const float *mean /* [n] */,
                         const float *rstd /* [n] */, int n, int c)
{
    layernorm_bwd_rows_ref(dx, dw, db, dy, x, w, mean, rstd, 0, n, c);
}

void k_layernorm_bwd_seg_ref(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                             const float *dy /* [n,c] */, const float *x /* [n,c] */,
                             const float *w /* [c] */, const float *mean /* [n] */,
                             const float *rstd /* [n] */, int n, int c, int seg)
{
    int L = leaf_count(n, seg);
    float *pw = xmalloc(sizeof(float) * 2 * (size_t)L * c); /* [L,c] partial dw */
    float *pb = pw + (size_t)L * c;                         /* [L,c] partial db */
    for (int l = 0; l < L; l++)
        layernorm_bwd_rows_ref(dx, pw + (size_t)l * c, pb + (size_t)l * c, dy, x, w, mean, rstd,
                               leaf_lo(l, n, seg), leaf_hi(l, n, seg), c);
    tree_finish(add_plain, dw, pw, L, (size_t)c);
    tree_finish(add_plain, db, pb, L, (size_t)c);
    free(pw);
}

/* -- layernorm: AVX2 -- */

T_AVX2 static void layernorm_row_avx2(float *y /* [c] */, float *mean, float *rstd,
                                      const float *x /* [c] */, const float *w /* [c] */,
                                      const float *b /* [c] */, int c)
{
    int cv = c / 8 * 8;
    __m256 acc = _mm256_setzero_ps();
    for (int j = 0; j < cv; j += 8)
        acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + j));
    float mu = hsum8(acc);
    for (int j = cv; j < c; j++)
        mu += x[j];
    mu /= (float)c;
    __m256 muv = _mm256_set1_ps(mu);
    acc = _mm256_setzero_ps();
    for (int j = 0; j < cv; j += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + j), muv);
        acc = _mm256_fmadd_ps(d, d, acc);
    }
    float var = hsum8(acc);
    for (int j = cv; j < c; j++)
        var += (x[j] - mu) * (x[j] - mu);
    var /= (float)c;
    float rs = 1.0f / sqrtf(var + LN_EPS);
    __m256 rsv = _mm256_set1_ps(rs);
    for (int j = 0; j < cv; j += 8) {
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), muv), rsv);
        _mm256_storeu_ps(y + j,
                         _mm256_fmadd_ps(xh, _mm256_loadu_ps(w + j), _mm256_loadu_ps(b + j)));
    }
    for (int j = cv; j < c; j++)
        y[j] = (x[j] - mu) * rs * w[j] + b[j];
    *mean = mu;
    *rstd = rs;
}

static void layernorm_avx2(float *y /* [n,c] */, float *mean /* [n] */,
                                  float *rstd /* [n] */, const float *x /* [n,c] */,
                                  const float *w /* [c] */, const float *b /* [c] */, int n, int c)
{
#pragma omp parallel for schedule(static) if ((long)n * c >= PAR_WORK)
    for (int i = 0; i < n; i++)
        layernorm_row_avx2(y + (size_t)i * c, mean + i, rstd + i, x + (size_t)i * c, w, b, c);
}

/* Rows [i0, i1): their dx, and the block's partial dw, db (pw, pb [c]). */
T_AVX2 static void layernorm_bwd_block_avx2(float *dx /* [n,c] */, float *pw /* [c] */,
                                            float *pb /* [c] */, const float *dy /* [n,c] */,
                                            const float *x /* [n,c] */, const float *w /* [c] */,
                                            const float *mean /* [n] */,
                                            const float *rstd /* [n] */, int i0, int i1, int c)
{
    int cv = c / 8 * 8;
    for (int j = 0; j < c; j++)
        pw[j] = pb[j] = 0.0f;
    for (int i = i0; i < i1; i++) {
        const float *xi = x + (size_t)i * c, *gi = dy + (size_t)i * c; /* [c] each */
        float *dxi = dx + (size_t)i * c;                               /* [c] */
        float mu = mean[i], rs = rstd[i];
        __m256 muv = _mm256_set1_ps(mu), rsv = _mm256_set1_ps(rs);
        __m256 s1v = _mm256_setzero_ps(), s2v = _mm256_setzero_ps();
        for (int j = 0; j < cv; j += 8) {
            __m256 gy = _mm256_loadu_ps(gi + j);
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xi + j), muv), rsv);
            __m256 g = _mm256_mul_ps(gy, _mm256_loadu_ps(w + j));
            s1v = _mm256_add_ps(s1v, g);
            s2v = _mm256_fmadd_ps(g, xh, s2v);
            _mm256_storeu_ps(pw + j, _mm256_fmadd_ps(gy, xh, _mm256_loadu_ps(pw + j)));
            _mm256_storeu_ps(pb + j, _mm256_add_ps(gy, _mm256_loadu_ps(pb + j)));
        }
        float s1 = hsum8(s1v), s2 = hsum8(s2v);
        for (int j = cv; j < c; j++) {
            float xh = (xi[j] - mu) * rs, g = gi[j] * w[j];
            s1 += g;
            s2 += g * xh;
            pw[j] += gi[j] * xh;
            pb[j] += gi[j];
        }
        s1 /= (float)c;
        s2 /= (float)c;
        __m256 s1c = _mm256_set1_ps(s1), s2c = _mm256_set1_ps(s2);
        for (int j = 0; j < cv; j += 8) {
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xi + j), muv), rsv);
            __m256 g = _mm256_mul_ps(_mm256_loadu_ps(gi + j), _mm256_loadu_ps(w + j));
            __m256 t = _mm256_sub_ps(_mm256_sub_ps(g, s1c), _mm256_mul_ps(xh, s2c));
            _mm256_storeu_ps(dxi + j, _mm256_mul_ps(rsv, t));
        }
        for (int j = cv; j < c; j++) {
            float xh = (xi[j] - mu) * rs, g = gi[j] * w[j];
            dxi[j] = rs * (g - s1 - xh * s2);
        }
    }
}

/* -- layernorm: AVX-512 -- */

T_AVX512 static void layernorm_row_avx512(float *y /* [c] */, float *mean, float *rstd,
                                          const float *x /* [c] */, const float *w /* [c] */,
                                          const float *b /* [c] */, int c)
{
    __m512 acc = _mm512_setzero_ps();
    for (int j = 0; j < c; j += 16)
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(lanes16(c - j), x + j));
    float mu = _mm512_reduce_add_ps(acc) / (float)c;
    __m512 muv = _mm512_set1_ps(mu);
    acc = _mm512_setzero_ps();
    for (int j = 0; j < c; j += 16) {
        __mmask16 t = lanes16(c - j);
        __m512 d = _mm512_maskz_sub_ps(t, _mm512_maskz_loadu_ps(t, x + j), muv);
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    float rs = 1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)c + LN_EPS);
    __m512 rsv = _mm512_set1_ps(rs);
    for (int j = 0; j < c; j += 16) {
        __mmask16 t = lanes16(c - j);
        __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, x + j), muv), rsv);
        __m512 yv =
            _mm512_fmadd_ps(xh, _mm512_maskz_loadu_ps(t, w + j), _mm512_maskz_loadu_ps(t, b + j));
        _mm512_mask_storeu_ps(y + j, t, yv);
    }
    *mean = mu;
    *rstd = rs;
}

static void layernorm_avx512(float *y /* [n,c] */, float *mean /* [n] */,
                                      float *rstd /* [n] */, const float *x /* [n,c] */,
                                      const float *w /* [c] */, const float *b /* [c] */, int n,
                                      int c)
{
#pragma omp parallel for schedule(static) if ((long)n * c >= PAR_WORK)
    for (int i = 0; i < n; i++)
        layernorm_row_avx512(y + (size_t)i * c, mean + i, rstd + i, x + (size_t)i * c, w, b, c);
}

T_AVX512 static void layernorm_bwd_block_avx512(float *dx /* [n,c] */, float *pw /* [c] */,
                                                float *pb /* [c] */, const float *dy /* [n,c] */,
                                                const float *x /* [n,c] */,
                                                const float *w /* [c] */,
                                                const float *mean /* [n] */,
                                                const float *rstd /* [n] */, int i0, int i1, int c)
{
    for (int j = 0; j < c; j++)
        pw[j] = pb[j] = 0.0f;
    for (int i = i0; i < i1; i++) {
        const float *xi = x + (size_t)i * c, *gi = dy + (size_t)i * c; /* [c] each */
        float *dxi = dx + (size_t)i * c;                               /* [c] */
        __m512 muv = _mm512_set1_ps(mean[i]), rsv = _mm512_set1_ps(rstd[i]);
        __m512 s1v = _mm512_setzero_ps(), s2v = _mm512_setzero_ps();
        for (int j = 0; j < c; j += 16) { /* masked lanes load 0, so add 0 everywhere */
            __mmask16 t = lanes16(c - j);
            __m512 gy = _mm512_maskz_loadu_ps(t, gi + j);
            __m512 xh =
                _mm512_maskz_mul_ps(t, _mm512_sub_ps(_mm512_maskz_loadu_ps(t, xi + j), muv), rsv);
            __m512 g = _mm512_mul_ps(gy, _mm512_maskz_loadu_ps(t, w + j));
            s1v = _mm512_add_ps(s1v, g);
            s2v = _mm512_fmadd_ps(g, xh, s2v);
            _mm512_mask_storeu_ps(pw + j, t,
                                  _mm512_fmadd_ps(gy, xh, _mm512_maskz_loadu_ps(t, pw + j)));
            _mm512_mask_storeu_ps(pb + j, t, _mm512_add_ps(gy, _mm512_maskz_loadu_ps(t, pb + j)));
        }
        __m512 s1c = _mm512_set1_ps(_mm512_reduce_add_ps(s1v) / (float)c);
        __m512 s2c = _mm512_set1_ps(_mm512_reduce_add_ps(s2v) / (float)c);
        for (int j = 0; j < c; j += 16) {
            __mmask16 t = lanes16(c - j);
            __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, xi + j), muv), rsv);
            __m512 g =
                _mm512_mul_ps(_mm512_maskz_loadu_ps(t, gi + j), _mm512_maskz_loadu_ps(t, w + j));
            __m512 d = _mm512_sub_ps(_mm512_sub_ps(g, s1c), _mm512_mul_ps(xh, s2c));
            _mm512_mask_storeu_ps(dxi + j, t, _mm512_mul_ps(rsv, d));
        }
    }
}

/* -- layernorm: backward drivers: ROW_BLOCK blocks, or leaves and the tree -- */

/* Blocked layernorm backward for any ISA: the block function differs. */
typedef void ln_bwd_block_fn(float *, float *, float *, const float *, const float *, const float *,
                             const float *, const float *, int, int, int);

static void layernorm_bwd_blocked(ln_bwd_block_fn *block, float *dx /* [n,c] */,
                                  float *dw /* [c] */, float *db /* [c] */,
                                  const float *dy /* [n,c] */, const float *x /* [n,c] */,
                                  const float *w /* [c] */, const float *mean /* [n] */,
                                  const float *rstd /* [n] */, int n, int c)
{
    int nblk = (n + ROW_BLOCK - 1) / ROW_BLOCK;
    float *pw = xmalloc(sizeof(float) * 2 * (size_t)nblk * c); /* [nblk,c] partial dw */
    float *pb = pw + (size_t)nblk * c;                         /* [nblk,c] partial db */
#pragma omp parallel for schedule(static) if ((long)n * c >= PAR_WORK)
    for (int b = 0; b < nblk; b++)
        block(dx, pw + (size_t)b * c, pb + (size_t)b * c, dy, x, w, mean, rstd, b * ROW_BLOCK,
              min_int(n, (b + 1) * ROW_BLOCK), c);
    sum_blocks(dw, pw, nblk, c);
    sum_blocks(db, pb, nblk, c);
    free(pw);
}

static void layernorm_bwd_leaves(ln_bwd_block_fn *block, float *dx /* [n,c] */,
                                 float *dw /* [c] */, float *db /* [c] */,
                                 const float *dy /* [n,c] */, const float *x /* [n,c] */,
                                 const float *w /* [c] */, const float *mean /* [n] */,
                                 const float *rstd /* [n] */, int n, int c, int seg)
{
    int L = leaf_count(n, seg);
    float *pw = xmalloc(sizeof(float) * 2 * (size_t)L * c); /* [L,c] partial dw */
    float *pb = pw + (size_t)L * c;                         /* [L,c] partial db */
#pragma omp parallel for schedule(static) if ((long)n * c >= PAR_WORK)
    for (int l = 0; l < L; l++)
        block(dx, pw + (size_t)l * c, pb + (size_t)l * c, dy, x, w, mean, rstd,
              leaf_lo(l, n, seg), leaf_hi(l, n, seg), c);
    tree_finish(add_into, dw, pw, L, (size_t)c);
    tree_finish(add_into, db, pb, L, (size_t)c);
    free(pw);
}

/* -- layernorm: entry points -- */

void k_layernorm(float *y /* [n,c] */, float *mean /* [n] */, float *rstd /* [n] */,
                 const float *x /* [n,c] */, const float *w /* [c] */, const float *b /* [c] */,
                 int n, int c)
{
    DISPATCH(layernorm, y, mean, rstd, x, w, b, n, c)
}

void k_layernorm_bwd(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                     const float *dy /* [n,c] */, const float *x /* [n,c] */,
                     const float *w /* [c] */, const float *mean /* [n] */,
                     const float *rstd /* [n] */, int n, int c)
{
    switch (isa_get()) {
    case ISA_AVX512:
        layernorm_bwd_blocked(layernorm_bwd_block_avx512, dx, dw, db, dy, x, w, mean, rstd, n, c);
        break;
    case ISA_AVX2:
        layernorm_bwd_blocked(layernorm_bwd_block_avx2, dx, dw, db, dy, x, w, mean, rstd, n, c);
        break;
    default: k_layernorm_bwd_ref(dx, dw, db, dy, x, w, mean, rstd, n, c); break;
    }
}

void k_layernorm_bwd_seg(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                         const float *dy /* [n,c] */, const float *x /* [n,c] */,
                         const float *w /* [c] */, const float *mean /* [n] */,
                         const float *rstd /* [n] */, int n, int c, int seg)
{
    switch (isa_get()) {
    case ISA_AVX512:
        layernorm_bwd_leaves(layernorm_bwd_block_avx512, dx, dw, db, dy, x, w, mean, rstd, n, c,
                             seg);
        break;
    case ISA_AVX2:
        layernorm_bwd_leaves(layernorm_bwd_block_avx2, dx, dw, db, dy, x, w, mean, rstd, n, c,
                             seg);
        break;
    default: k_layernorm_bwd_seg_ref(dx, dw, db, dy, x, w, mean, rstd, n, c, seg); break;
    }
}

/* ---- softmax cross-entropy ---- */

/* -- softmax cross-entropy: twins -- */

static int count_targets(const int32_t *targets /* [n] */, int n)
{
    int count = 0;
    for (int i = 0; i < n; i++)
        count += targets[i] >= 0;
    return count;
}

/* Sums per-row losses in row order, in double: the same total whatever
 * thread produced each row. No counted row gives 0, not 0/0. */
static float mean_loss(const double *row /* [n] */, const int32_t *targets /* [n] */, int n)
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

void k_xent_ref(float *loss /* [1] */, const float *logits /* [n,v] */,
                const int32_t *targets /* [n] */, int n, int v)
{
    double *row = xmalloc(sizeof(double) * (size_t)n); /* [n] */
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v; /* [v] */
        row[i] = 0.0;
        if (targets[i] < 0)
            continue;
        float mx = -INFINITY, s = 0.0f;
        for (int j = 0; j < v; j++)
            mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j < v; j++)
            s += expf(x[j] - mx);
        row[i] = (double)(mx + logf(s) - x[targets[i]]);
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
            s += expf(x[j] - mx);
        for (int j = 0; j < v; j++)
            dx[j] = targets[i] < 0 ? 0.0f : (expf(x[j] - mx) / s - (j == targets[i])) * scale;
    }
}

/* -- softmax cross-entropy: AVX2 -- */

INLINE_AVX2 float hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

/* Max and sum of exp(x - max) over one row of logits. */
T_AVX2 static void row_stats_avx2(const float *x /* [v] */, int v, float *mx, float *sum)
{
    int vv = v / 8 * 8;
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < vv; j += 8)
        m8 = _mm256_max_ps(m8, _mm256_loadu_ps(x + j));
    float m = hmax8(m8);
    for (int j = vv; j < v; j++)
        m = x[j] > m ? x[j] : m;
    __m256 s8 = _mm256_setzero_ps(), mv = _mm256_set1_ps(m);
    for (int j = 0; j < vv; j += 8)
        s8 = _mm256_add_ps(s8, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv)));
    float s = hsum8(s8);
    for (int j = vv; j < v; j++)
        s += expf(x[j] - m);
    *mx = m;
    *sum = s;
}

static void xent_avx2(float *loss /* [1] */, const float *logits /* [n,v] */,
                             const int32_t *targets /* [n] */, int n, int v)
{
    double *row = xmalloc(sizeof(double) * (size_t)n); /* [n] per-row losses */
#pragma omp parallel for schedule(static) if ((long)n * v >= PAR_WORK)
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v; /* [v] */
        float m, s;
        row[i] = 0.0;
        if (targets[i] < 0)
            continue;
        row_stats_avx2(x, v, &m, &s);
        row[i] = (double)(m + logf(s) - x[targets[i]]);
    }
    *loss = mean_loss(row, targets, n);
    free(row);
}

/* One row of k_xent_bwd (the entry point runs the rows in parallel). */
T_AVX2 static void xent_bwd_row_avx2(float *dx /* [v] */, const float *x /* [v] */, int t,
                                     float scale, int v)
{
    int vv = v / 8 * 8;
    {
        float m, s;
        row_stats_avx2(x, v, &m, &s);
        float inv = 1.0f / s;
        __m256 mv = _mm256_set1_ps(m), iv = _mm256_set1_ps(inv), sc = _mm256_set1_ps(scale);
        __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), tv = _mm256_set1_epi32(t);
        for (int j = 0; j < vv; j += 8) {
            __m256 p = _mm256_mul_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv)), iv);
            __m256i hit = _mm256_cmpeq_epi32(_mm256_add_epi32(lane, _mm256_set1_epi32(j)), tv);
            p = _mm256_sub_ps(p, _mm256_and_ps(_mm256_castsi256_ps(hit), _mm256_set1_ps(1.0f)));
            _mm256_storeu_ps(dx + j, _mm256_mul_ps(p, sc));
        }
        for (int j = vv; j < v; j++)
            dx[j] = (expf(x[j] - m) * inv - (j == t)) * scale;
    }
}

/* -- softmax cross-entropy: AVX-512 -- */

/* Max and sum of exp(x - max) over one row; masked lanes take part as
 * -inf in the max and 0 in the sum. */
T_AVX512 static void row_stats_avx512(const float *x /* [v] */, int v, float *mx, float *sum)
{
    __m512 m16 = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < v; j += 16)
        m16 = _mm512_mask_max_ps(m16, lanes16(v - j), m16,
                                 _mm512_maskz_loadu_ps(lanes16(v - j), x + j));
    float m = _mm512_reduce_max_ps(m16);
    __m512 s16 = _mm512_setzero_ps(), mv = _mm512_set1_ps(m);
    for (int j = 0; j < v; j += 16) {
        __mmask16 t = lanes16(v - j);
        s16 = _mm512_add_ps(
            s16, _mm512_maskz_mov_ps(t, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, x + j), mv))));
    }
    *mx = m;
    *sum = _mm512_reduce_add_ps(s16);
}

static void xent_avx512(float *loss /* [1] */, const float *logits /* [n,v] */,
                                 const int32_t *targets /* [n] */, int n, int v)
{
    double *row = xmalloc(sizeof(double) * (size_t)n); /* [n] per-row losses */
#pragma omp parallel for schedule(static) if ((long)n * v >= PAR_WORK)
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v; /* [v] */
        float m, s;
        row[i] = 0.0;
        if (targets[i] < 0)
            continue;
        row_stats_avx512(x, v, &m, &s);
        row[i] = (double)(m + logf(s) - x[targets[i]]);
    }
    *loss = mean_loss(row, targets, n);
    free(row);
}

T_AVX512 static void xent_bwd_row_avx512(float *dx /* [v] */, const float *x /* [v] */, int t,
                                         float scale, int v)
{
    {
        float m, s;
        row_stats_avx512(x, v, &m, &s);
        __m512 mv = _mm512_set1_ps(m), iv = _mm512_set1_ps(1.0f / s), sc = _mm512_set1_ps(scale);
        __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        for (int j = 0; j < v; j += 16) {
            __mmask16 msk = lanes16(v - j);
            __m512 p =
                _mm512_mul_ps(exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(msk, x + j), mv)), iv);
            __mmask16 hit = _mm512_cmpeq_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(j)),
                                                    _mm512_set1_epi32(t));
            p = _mm512_mask_sub_ps(p, hit, p, _mm512_set1_ps(1.0f));
            _mm512_mask_storeu_ps(dx + j, msk, _mm512_mul_ps(p, sc));
        }
    }
}

/* -- softmax cross-entropy: entry points -- */

void k_xent(float *loss /* [1] */, const float *logits /* [n,v] */,
            const int32_t *targets /* [n] */, int n, int v)
{
    DISPATCH(xent, loss, logits, targets, n, v)
}

void k_xent_bwd(float *dlogits /* [n,v] */, const float *logits /* [n,v] */,
                const int32_t *targets /* [n] */, const float *dloss /* [1] */, int n, int v)
{
    int isa = isa_get(), count = count_targets(targets, n);
    float scale = count ? dloss[0] / (float)count : 0.0f;
    if (isa == ISA_SCALAR) {
        k_xent_bwd_ref(dlogits, logits, targets, dloss, n, v);
        return;
    }
#pragma omp parallel for schedule(static) if ((long)n * v >= PAR_WORK)
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v; /* [v] */
        float *dx = dlogits + (size_t)i * v;     /* [v] */
        if (targets[i] < 0)
            memset(dx, 0, sizeof(float) * (size_t)v);
        else if (isa == ISA_AVX512)
            xent_bwd_row_avx512(dx, x, targets[i], scale, v);
        else
            xent_bwd_row_avx2(dx, x, targets[i], scale, v);
    }
}

/* ---- element-wise ---- */

/* -- element-wise: twins -- */

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

/* -- element-wise: AVX2, vectors then a scalar tail doing the same operation -- */

T_AVX2 static void add_avx2(float *y /* [n] */, const float *a /* [n] */, const float *b /* [n] */,
                            size_t n)
{
    size_t nv = n / 8 * 8;
    for (size_t i = 0; i < nv; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (size_t i = nv; i < n; i++)
        y[i] = a[i] + b[i];
}

T_AVX2 static void add_n_avx2(float *y /* [n] */, const float *const *x /* m x [n] */, int m,
                              size_t n)
{
    size_t nv = n / 8 * 8;
    for (size_t i = 0; i < nv; i += 8) {
        __m256 s = _mm256_loadu_ps(x[0] + i);
        for (int k = 1; k < m; k++)
            s = _mm256_add_ps(s, _mm256_loadu_ps(x[k] + i));
        _mm256_storeu_ps(y + i, s);
    }
    for (size_t i = nv; i < n; i++) {
        float s = x[0][i];
        for (int k = 1; k < m; k++)
            s += x[k][i];
        y[i] = s;
    }
}

T_AVX2 static void relu_avx2(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    size_t nv = n / 8 * 8;
    for (size_t i = 0; i < nv; i += 8) /* max(x, 0) returns 0 for NaN, like x > 0 ? x : 0 */
        _mm256_storeu_ps(y + i, _mm256_max_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps()));
    for (size_t i = nv; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0.0f;
}

T_AVX2 static void relu_bwd_avx2(float *dx /* [n] */, const float *dy /* [n] */,
                                 const float *y /* [n] */, size_t n)
{
    size_t nv = n / 8 * 8;
    for (size_t i = 0; i < nv; i += 8) {
        __m256 on = _mm256_cmp_ps(_mm256_loadu_ps(y + i), _mm256_setzero_ps(), _CMP_GT_OQ);
        _mm256_storeu_ps(dx + i, _mm256_and_ps(on, _mm256_loadu_ps(dy + i)));
    }
    for (size_t i = nv; i < n; i++)
        dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

/* -- element-wise: AVX-512, whole vectors in parallel then one masked vector -- */

T_AVX512 static void add_avx512(float *y /* [n] */, const float *a /* [n] */,
                                const float *b /* [n] */, size_t n)
{
    size_t nv = n / 16 * 16;
    for (size_t i = 0; i < nv; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    __mmask16 t = lanes16((int)(n - nv));
    _mm512_mask_storeu_ps(
        y + nv, t,
        _mm512_add_ps(_mm512_maskz_loadu_ps(t, a + nv), _mm512_maskz_loadu_ps(t, b + nv)));
}

T_AVX512 static void add_n_avx512(float *y /* [n] */, const float *const *x /* m x [n] */, int m,
                                  size_t n)
{
    size_t nv = n / 16 * 16;
    for (size_t i = 0; i < nv; i += 16) {
        __m512 s = _mm512_loadu_ps(x[0] + i);
        for (int k = 1; k < m; k++)
            s = _mm512_add_ps(s, _mm512_loadu_ps(x[k] + i));
        _mm512_storeu_ps(y + i, s);
    }
    __mmask16 t = lanes16((int)(n - nv));
    __m512 s = _mm512_maskz_loadu_ps(t, x[0] + nv);
    for (int k = 1; k < m; k++)
        s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(t, x[k] + nv));
    _mm512_mask_storeu_ps(y + nv, t, s);
}

T_AVX512 static void relu_avx512(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    size_t nv = n / 16 * 16;
    for (size_t i = 0; i < nv; i += 16) /* max(x, 0) returns 0 for NaN, like x > 0 ? x : 0 */
        _mm512_storeu_ps(y + i, _mm512_max_ps(_mm512_loadu_ps(x + i), _mm512_setzero_ps()));
    __mmask16 t = lanes16((int)(n - nv));
    _mm512_mask_storeu_ps(y + nv, t,
                          _mm512_max_ps(_mm512_maskz_loadu_ps(t, x + nv), _mm512_setzero_ps()));
}

T_AVX512 static void relu_bwd_avx512(float *dx /* [n] */, const float *dy /* [n] */,
                                     const float *y /* [n] */, size_t n)
{
    size_t nv = n / 16 * 16;
    for (size_t i = 0; i < nv; i += 16) {
        __mmask16 on = _mm512_cmp_ps_mask(_mm512_loadu_ps(y + i), _mm512_setzero_ps(), _CMP_GT_OQ);
        _mm512_storeu_ps(dx + i, _mm512_maskz_loadu_ps(on, dy + i));
    }
    __mmask16 t = lanes16((int)(n - nv));
    __mmask16 on =
        _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(t, y + nv), _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_mask_storeu_ps(dx + nv, t, _mm512_maskz_loadu_ps(on, dy + nv));
}

/* -- element-wise: entry points -- */

/* Element-wise kernels (and Adam) run in chunks of ELT_CHUNK elements, a
 * thread each; every element is computed alone, so the split changes no
 * bit, and a chunk is whole vectors but the last. The SIMD functions run
 * one chunk: an OpenMP loop stays in plain C, since clang cannot outline
 * one from inside a function compiled for another target. */
#define ELT_CHUNK ((size_t)1 << 14)
#define CHUNK_LEN(n, lo) ((n) - (lo) < ELT_CHUNK ? (n) - (lo) : ELT_CHUNK)

void k_add(float *y /* [n] */, const float *a /* [n] */, const float *b /* [n] */, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= 4 * PAR_WORK)
    for (size_t lo = 0; lo < n; lo += ELT_CHUNK)
        DISPATCH(add, y + lo, a + lo, b + lo, CHUNK_LEN(n, lo))
}

void k_add_n(float *y /* [n] */, const float *const *x /* m x [n] */, int m, size_t n)
{
    if (m > 16) { /* more than a fused add ever has: one chunk */
        DISPATCH(add_n, y, x, m, n)
        return;
    }
#pragma omp parallel for schedule(static) if (n >= 4 * PAR_WORK)
    for (size_t lo = 0; lo < n; lo += ELT_CHUNK) {
        const float *xs[16]; /* [m] the chunk of each input */
        for (int k = 0; k < m; k++)
            xs[k] = x[k] + lo;
        DISPATCH(add_n, y + lo, xs, m, CHUNK_LEN(n, lo))
    }
}

void k_relu(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= 4 * PAR_WORK)
    for (size_t lo = 0; lo < n; lo += ELT_CHUNK)
        DISPATCH(relu, y + lo, x + lo, CHUNK_LEN(n, lo))
}

void k_relu_bwd(float *dx /* [n] */, const float *dy /* [n] */, const float *y /* [n] */, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= 4 * PAR_WORK)
    for (size_t lo = 0; lo < n; lo += ELT_CHUNK)
        DISPATCH(relu_bwd, dx + lo, dy + lo, y + lo, CHUNK_LEN(n, lo))
}

/* ---- sums over rows ---- */

/* -- sums over rows: twins -- */

void k_sum_rows_ref(float *out /* [q] */, const float *x /* [n,q] */, int n, int q)
{
    for (int j = 0; j < q; j++)
        out[j] = 0.0f;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < q; j++)
            out[j] += x[(size_t)i * q + j];
}

void k_sum_rows_seg_ref(float *out /* [q] */, const float *x /* [n,q] */, int n, int q, int seg)
{
    int L = leaf_count(n, seg);
    float *part = xmalloc(sizeof(float) * (size_t)L * q); /* [L,q] */
    for (int l = 0; l < L; l++) {
        float *pl = part + (size_t)l * q; /* [q] */
        for (int j = 0; j < q; j++)
            pl[j] = 0.0f;
        for (int i = leaf_lo(l, n, seg); i < leaf_hi(l, n, seg); i++)
            for (int j = 0; j < q; j++)
                pl[j] += x[(size_t)i * q + j];
    }
    tree_finish(add_plain, out, part, L, (size_t)q);
    free(part);
}

/* -- sums over rows: AVX2, in ROW_BLOCK partials -- */

/* part[q] = rows [i0, i1) of x summed in order, from zero. */
T_AVX2 static void sum_block_avx2(float *part /* [q] */, const float *x /* [n,q] */, int i0, int i1,
                                  int q)
{
    int qv = q / 8 * 8;
    for (int j = 0; j < q; j++)
        part[j] = 0.0f;
    for (int i = i0; i < i1; i++) {
        const float *xi = x + (size_t)i * q; /* [q] */
        for (int j = 0; j < qv; j += 8)
            _mm256_storeu_ps(part + j,
                             _mm256_add_ps(_mm256_loadu_ps(part + j), _mm256_loadu_ps(xi + j)));
        for (int j = qv; j < q; j++)
            part[j] += xi[j];
    }
}

static void sum_rows_avx2(float *out /* [q] */, const float *x /* [n,q] */, int n, int q)
{
    int nblk = (n + ROW_BLOCK - 1) / ROW_BLOCK;
    float *part = xmalloc(sizeof(float) * (size_t)nblk * q); /* [nblk,q] */
#pragma omp parallel for schedule(static) if ((long)n * q >= PAR_WORK)
    for (int b = 0; b < nblk; b++)
        sum_block_avx2(part + (size_t)b * q, x, b * ROW_BLOCK, min_int(n, (b + 1) * ROW_BLOCK), q);
    sum_blocks(out, part, nblk, q);
    free(part);
}

/* -- sums over rows: AVX-512 -- */

T_AVX512 static void sum_block_avx512(float *part /* [q] */, const float *x /* [n,q] */, int i0,
                                      int i1, int q)
{
    for (int j = 0; j < q; j++)
        part[j] = 0.0f;
    for (int i = i0; i < i1; i++) {
        const float *xi = x + (size_t)i * q; /* [q] */
        for (int j = 0; j < q; j += 16) {
            __mmask16 t = lanes16(q - j);
            __m512 s =
                _mm512_add_ps(_mm512_maskz_loadu_ps(t, part + j), _mm512_maskz_loadu_ps(t, xi + j));
            _mm512_mask_storeu_ps(part + j, t, s);
        }
    }
}

static void sum_rows_avx512(float *out /* [q] */, const float *x /* [n,q] */, int n, int q)
{
    int nblk = (n + ROW_BLOCK - 1) / ROW_BLOCK;
    float *part = xmalloc(sizeof(float) * (size_t)nblk * q); /* [nblk,q] */
#pragma omp parallel for schedule(static) if ((long)n * q >= PAR_WORK)
    for (int b = 0; b < nblk; b++)
        sum_block_avx512(part + (size_t)b * q, x, b * ROW_BLOCK, min_int(n, (b + 1) * ROW_BLOCK),
                         q);
    sum_blocks(out, part, nblk, q);
    free(part);
}

/* -- sums over rows: leaves and the tree, for either path's block function -- */

typedef void sum_block_fn(float *, const float *, int, int, int);

static void sum_rows_leaves(sum_block_fn *block, float *out /* [q] */, const float *x /* [n,q] */,
                            int n, int q, int seg)
{
    int L = leaf_count(n, seg);
    float *part = xmalloc(sizeof(float) * (size_t)L * q); /* [L,q] */
#pragma omp parallel for schedule(static) if ((long)n * q >= PAR_WORK)
    for (int l = 0; l < L; l++)
        block(part + (size_t)l * q, x, leaf_lo(l, n, seg), leaf_hi(l, n, seg), q);
    tree_finish(add_into, out, part, L, (size_t)q);
    free(part);
}

/* -- sums over rows: entry points -- */

void k_sum_rows(float *out /* [q] */, const float *x /* [n,q] */, int n, int q)
{
    DISPATCH(sum_rows, out, x, n, q)
}

void k_sum_rows_seg(float *out /* [q] */, const float *x /* [n,q] */, int n, int q, int seg)
{
    switch (isa_get()) {
    case ISA_AVX512: sum_rows_leaves(sum_block_avx512, out, x, n, q, seg); break;
    case ISA_AVX2: sum_rows_leaves(sum_block_avx2, out, x, n, q, seg); break;
    default: k_sum_rows_seg_ref(out, x, n, q, seg); break;
    }
}

/* ---- transpose ---- */

/* One plain path for every ISA: data movement, where SIMD buys nothing
 * that the cache blocking does not. */

void k_transpose_ref(float *out /* [s,r] */, const float *in /* [r,s] */, int r, int s)
{
    for (int i = 0; i < r; i++)
        for (int j = 0; j < s; j++)
            out[(size_t)j * r + i] = in[(size_t)i * s + j];
}

#define TR_BLOCK 32 /* a 32x32 float tile of in and out fit in L1 together */

static void transpose_blocked(float *out /* [s,r] */, const float *in /* [r,s] */, int r, int s)
{
    int nbi = (r + TR_BLOCK - 1) / TR_BLOCK;
#pragma omp parallel for schedule(static) if ((long)r * s >= 4 * PAR_WORK)
    for (int bi = 0; bi < nbi; bi++) {
        int i0 = bi * TR_BLOCK, i1 = min_int(i0 + TR_BLOCK, r);
        for (int j0 = 0; j0 < s; j0 += TR_BLOCK) {
            int j1 = min_int(j0 + TR_BLOCK, s);
            for (int i = i0; i < i1; i++)
                for (int j = j0; j < j1; j++)
                    out[(size_t)j * r + i] = in[(size_t)i * s + j];
        }
    }
}

void k_transpose(float *out /* [s,r] */, const float *in /* [r,s] */, int r, int s)
{
    transpose_blocked(out, in, r, s);
}

/* ---- embedding ---- */

/* -- embedding: twins -- */

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

void k_embed_bwd_seg_ref(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                         const float *dy /* [n,c] */, int n, int c, int v, int seg)
{
    int L = leaf_count(n, seg);
    size_t cv = (size_t)c * v;
    float *part = xmalloc(sizeof(float) * (size_t)L * cv); /* [L,c,v] */
    for (int l = 0; l < L; l++) {
        float *pl = part + (size_t)l * cv; /* [c,v] */
        memset(pl, 0, sizeof(float) * cv);
        for (int i = leaf_lo(l, n, seg); i < leaf_hi(l, n, seg); i++)
            for (int ch = 0; ch < c; ch++)
                pl[(size_t)ch * v + idx[i]] += dy[(size_t)i * c + ch];
    }
    tree_finish(add_plain, dtable, part, L, cv);
    free(part);
}

/* -- embedding: the one fast path, plain C (data movement, like transpose) -- */

static void embed_gather(float *y /* [n,c] */, const int32_t *idx /* [n] */,
                         const float *table /* [c,v] */, int n, int c, int v)
{
#pragma omp parallel for schedule(static) if ((long)n * c >= PAR_WORK)
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            y[(size_t)i * c + ch] = table[(size_t)ch * v + idx[i]];
}

/* Accumulates in a [v,c] buffer, where a row's gradient is contiguous, then
 * transposes. Each entry still sums its rows in order 0..n-1 from zero, so
 * the result is bit-identical to the twin. */
static void embed_scatter(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                          const float *dy /* [n,c] */, int n, int c, int v)
{
    float *acc = xmalloc(sizeof(float) * (size_t)v * c); /* [v,c] */
    memset(acc, 0, sizeof(float) * (size_t)v * c);
    for (int i = 0; i < n; i++) {
        float *row = acc + (size_t)idx[i] * c; /* [c] */
        const float *g = dy + (size_t)i * c;   /* [c] */
        for (int ch = 0; ch < c; ch++)
            row[ch] += g[ch];
    }
    transpose_blocked(dtable, acc, v, c);
    free(acc);
}

/* embed_bwd_seg, sparse: a leaf of seg rows touches at most seg of the v
 * table entries, so each tree level keeps a [v,c] buffer (a row's gradient
 * contiguous) plus a flag per entry, and only touched entries are zeroed,
 * summed and merged. Skipping the rest changes no bits: the twin's partial
 * for an untouched entry is +0, and x + (+0) == x for every x that a sum
 * starting from +0 can produce (never -0 under round-to-nearest). Threads
 * split the channels, so each has the whole tree for its channels. */
struct embed_tree {
    float *buf;          /* [levels,v,c] */
    unsigned char *seen; /* [levels,v]: entry touched at this level */
    const int32_t *idx;  /* [n] */
    const float *dy;     /* [n,c] */
    int n, c, v, seg, c0, c1; /* this thread's channels [c0, c1) */
};

static void embed_subtree(const struct embed_tree *e, int lo, int hi, int d)
{
    size_t vc = (size_t)e->v * e->c, w = (size_t)(e->c1 - e->c0);
    float *buf = e->buf + (size_t)d * vc; /* [v,c] */
    unsigned char *seen = e->seen + (size_t)d * e->v;
    if (hi - lo == 1) {
        memset(seen, 0, (size_t)e->v);
        for (int i = leaf_lo(lo, e->n, e->seg); i < leaf_hi(lo, e->n, e->seg); i++) {
            int u = e->idx[i];
            float *row = buf + (size_t)u * e->c + e->c0; /* [w] */
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
        float *row = buf + (size_t)u * e->c + e->c0;
        const float *r = rbuf + (size_t)u * e->c + e->c0;
        if (seen[u])
            add_into(row, r, w);
        else /* +0 + r == r */
            memcpy(row, r, sizeof(float) * w);
        seen[u] = 1;
    }
}

static void embed_scatter_seg(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                              const float *dy /* [n,c] */, int n, int c, int v, int seg)
{
    int L = leaf_count(n, seg), levels = tree_depth(L) + 1, groups = (c + 15) / 16;
    float *buf = xmalloc(sizeof(float) * (size_t)levels * v * c); /* [levels,v,c] */
#pragma omp parallel if ((long)n * c >= PAR_WORK)
    {
        int g0, g1;
        my_share(groups, &g0, &g1); /* 16-channel groups: one cache line each */
        struct embed_tree e = {buf, NULL, idx, dy, n, c, v, seg, min_int(c, 16 * g0),
                               min_int(c, 16 * g1)};
        if (e.c0 < e.c1) {
            e.seen = xmalloc((size_t)levels * v);
            if (L > 0)
                embed_subtree(&e, 0, L, 0);
            else
                memset(e.seen, 0, (size_t)v);
            for (int ch = e.c0; ch < e.c1; ch++)
                for (int u = 0; u < v; u++)
                    dtable[(size_t)ch * v + u] = e.seen[u] ? buf[(size_t)u * c + ch] : 0.0f;
            free(e.seen);
        }
    }
    free(buf);
}

/* -- embedding: entry points -- */

void k_embed(float *y /* [n,c] */, const int32_t *idx /* [n] */, const float *table /* [c,v] */,
             int n, int c, int v)
{
    embed_gather(y, idx, table, n, c, v);
}

void k_embed_bwd(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                 const float *dy /* [n,c] */, int n, int c, int v)
{
    embed_scatter(dtable, idx, dy, n, c, v);
}

void k_embed_bwd_seg(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                     const float *dy /* [n,c] */, int n, int c, int v, int seg)
{
    embed_scatter_seg(dtable, idx, dy, n, c, v, seg);
}

/* ---- Adam ---- */

/* Bias corrections as torch computes them (in double), reduced to the two
 * floats the per-element update needs. */
struct adam_k {
    float omb1, b2, omb2, eps, step, bc2s;
};

static struct adam_k adam_consts(float lr, float b1, float b2, float eps, int t)
{
    double bc1 = 1.0 - pow((double)b1, t), bc2 = 1.0 - pow((double)b2, t);
    struct adam_k k = {1.0f - b1, b2, 1.0f - b2, eps, (float)(lr / bc1), (float)sqrt(bc2)};
    return k;
}

/* The update of one element; the SIMD paths do the same operations in the
 * same order (no FMA), so every path gives the same bits. */
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

T_AVX2 static void adam_avx2(float *p /* [n] */, float *m /* [n] */, float *v /* [n] */,
                             const float *g /* [n] */, size_t n, const struct adam_k *k)
{
    size_t nv = n / 8 * 8;
    __m256 omb1 = _mm256_set1_ps(k->omb1), b2 = _mm256_set1_ps(k->b2);
    __m256 omb2 = _mm256_set1_ps(k->omb2), eps = _mm256_set1_ps(k->eps);
    __m256 step = _mm256_set1_ps(k->step), bc2s = _mm256_set1_ps(k->bc2s);
    for (size_t i = 0; i < nv; i += 8) { /* adam_one's operations, in its order */
        __m256 gi = _mm256_loadu_ps(g + i), mi = _mm256_loadu_ps(m + i);
        __m256 vi = _mm256_loadu_ps(v + i), pi = _mm256_loadu_ps(p + i);
        mi = _mm256_add_ps(mi, _mm256_mul_ps(omb1, _mm256_sub_ps(gi, mi)));
        vi = _mm256_add_ps(_mm256_mul_ps(b2, vi), _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2s), eps);
        pi = _mm256_sub_ps(pi, _mm256_div_ps(_mm256_mul_ps(step, mi), denom));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, pi);
    }
    for (size_t i = nv; i < n; i++)
        adam_one(p + i, m + i, v + i, g[i], k);
}

/* adam_one's operations, in its order, 16 elements at a time. */
INLINE_AVX512 void adam_vec_avx512(float *p, float *m, float *v, const float *g, __mmask16 t,
                                   const struct adam_k *k)
{
    __m512 gi = _mm512_maskz_loadu_ps(t, g), mi = _mm512_maskz_loadu_ps(t, m);
    __m512 vi = _mm512_maskz_loadu_ps(t, v), pi = _mm512_maskz_loadu_ps(t, p);
    mi = _mm512_add_ps(mi, _mm512_mul_ps(_mm512_set1_ps(k->omb1), _mm512_sub_ps(gi, mi)));
    vi = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(k->b2), vi),
                       _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(k->omb2), gi), gi));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), _mm512_set1_ps(k->bc2s)),
                                 _mm512_set1_ps(k->eps));
    pi = _mm512_sub_ps(pi, _mm512_div_ps(_mm512_mul_ps(_mm512_set1_ps(k->step), mi), denom));
    _mm512_mask_storeu_ps(m, t, mi);
    _mm512_mask_storeu_ps(v, t, vi);
    _mm512_mask_storeu_ps(p, t, pi);
}

T_AVX512 static void adam_avx512(float *p /* [n] */, float *m /* [n] */, float *v /* [n] */,
                                 const float *g /* [n] */, size_t n, const struct adam_k *k)
{
    size_t nv = n / 16 * 16;
    for (size_t i = 0; i < nv; i += 16)
        adam_vec_avx512(p + i, m + i, v + i, g + i, (__mmask16)0xFFFF, k);
    adam_vec_avx512(p + nv, m + nv, v + nv, g + nv, lanes16((int)(n - nv)), k);
}

void k_adam(float *p /* [n] */, float *m /* [n] */, float *v /* [n] */, const float *g /* [n] */,
            size_t n, float lr, float b1, float b2, float eps, int t)
{
    struct adam_k k = adam_consts(lr, b1, b2, eps, t);
#pragma omp parallel for schedule(static) if (n >= PAR_WORK)
    for (size_t lo = 0; lo < n; lo += ELT_CHUNK) { /* chunks as the element-wise kernels' */
        size_t len = CHUNK_LEN(n, lo);
        switch (isa_get()) {
        case ISA_AVX512: adam_avx512(p + lo, m + lo, v + lo, g + lo, len, &k); break;
        case ISA_AVX2: adam_avx2(p + lo, m + lo, v + lo, g + lo, len, &k); break;
        default: k_adam_ref(p + lo, m + lo, v + lo, g + lo, len, lr, b1, b2, eps, t); break;
        }
    }
}

/* ---- bf16 numerics ---- */

/* The bf16 kernels: TPU matrix-unit numerics (bf16 inputs, fp32 sums).
 *
 * The native path is one vdpbf16ps per pair of k; the emulated paths must
 * give its bits exactly, so its semantics were measured on the machine this
 * was written on (AMD Zen 5, family 1Ah) with probe programs calling
 * _mm512_dpbf16_ps: 32M random lanes against an exact (__float128) model,
 * and edge cases made by hand. What they showed, which matches Intel's
 * pseudo-code:
 *  - lane i reads the pair (lo = bf16 element 2i, hi = 2i+1) of both
 *    sources and makes two steps, hi first: acc = acc + a_hi*b_hi rounded
 *    once (a fused multiply-add), then acc = acc + a_lo*b_lo rounded once.
 *    1 + 2^-24 + 2^-24 gives 1 (one rounding of the sum would give
 *    1 + 2^-23), and which of 2^-24 and 1.5*2^-24 sits in the hi half
 *    changes the result (1 + 2^-23 against 1 + 2^-22);
 *  - always round to nearest even; MXCSR's rounding, FTZ and DAZ bits make
 *    no difference (all 16 combinations tried);
 *  - denormal operands, the bf16 elements and the fp32 accumulator alike,
 *    read as zero of their sign;
 *  - a result tiny after rounding to 24 bits with unbounded exponent
 *    becomes zero of its sign, after each step (so between the two too):
 *    2^-126 - 3*2^-152 gives 0, 2^-126 - 2^-151 gives 2^-126;
 *  - NaN: the first NaN operand in the order first multiplicand (the
 *    intrinsic's second argument), second multiplicand, accumulator, with
 *    its quiet bit set; an invalid step with no NaN operand (inf*0,
 *    inf-inf) gives the default NaN 0xFFC00000.
 * vcvtneps2bf16 and vcvtne2ps2bf16 were compared on all 2^32 inputs with
 * bf16_bits below: no difference.
 *
 * In this file A = bf16(a) is always the second multiplicand and B =
 * bf16(b) the first, so a NaN in B wins over one in A. */

static uint32_t f2u(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* bf16(x) as the upper half of a float's bits: what vcvtneps2bf16 gives. */
static uint32_t bf16_bits(float x)
{
    uint32_t u = f2u(x);
    if ((u & 0x7f800000u) == 0) /* the instruction reads denormals as zero */
        return u & 0x80000000u;
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quieted, payload truncated */
        return (u | 0x00400000u) & 0xffff0000u;
    return (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u; /* carries into inf past the top */
}

static float bf16_round(float x) { return u2f(bf16_bits(x)); }

static float daz(float x)
{
    uint32_t u = f2u(x);
    return (u & 0x7f800000u) ? x : u2f(u & 0x80000000u);
}

/* One vdpbf16ps step on one lane: acc + x*y, x the first multiplicand. */
static float bf16_step(float acc, float x, float y)
{
    acc = daz(acc), x = daz(x), y = daz(y);
    float r = fmaf(x, y, acc);
    uint32_t m = f2u(r) & 0x7fffffffu;
    if (m > 0x00800000u && m <= 0x7f800000u) /* normal or inf: nothing to flush */
        return r;
    if (m > 0x7f800000u) {
        uint32_t nan = isnan(x) ? f2u(x) : isnan(y) ? f2u(y) : isnan(acc) ? f2u(acc) : 0xffc00000u;
        return u2f(nan | 0x00400000u);
    }
    if (m < 0x00800000u) /* below 2^-126 on the denormal grid: tiny at 24 bits too */
        return u2f(f2u(r) & 0x80000000u);
    /* |r| == 2^-126 may have been rounded up from a value that 24 bits
     * keep below 2^-126. Then |acc| and |x*y| are below 2^-60 (else the
     * exact sum would be a multiple of 2^-84, not within 2^-150 of
     * 2^-126), so scaling acc and the smaller factor by 2^64 is exact and
     * puts the rounding where 24 bits are available. */
    float s = fabsf(x) < fabsf(y) ? x : y, t = fabsf(x) < fabsf(y) ? y : x;
    float rs = fmaf(s * 0x1p64f, t, acc * 0x1p64f);
    return fabsf(rs) < 0x1p-62f ? copysignf(0.0f, rs) : rs * 0x1p-64f;
}

/* One element: acc after the steps over ar (a row of A, stride sak) and
 * bc (a column of B, stride ldb), p long, pairs ascending, hi first, a
 * missing hi partner (p odd) being the zero the packing pads with. */
static float bf16_dot(float acc, const float *ar, size_t sak, const float *bc, size_t ldb, int p)
{
    for (int k = 0; k < p; k += 2) {
        int hi = k + 1 < p;
        acc = bf16_step(acc, hi ? bc[(size_t)(k + 1) * ldb] : 0.0f,
                        hi ? ar[(size_t)(k + 1) * sak] : 0.0f);
        acc = bf16_step(acc, bc[(size_t)k * ldb], ar[(size_t)k * sak]);
    }
    return acc;
}

/* The epilogue as the vector paths do it: max(y, 0) turns NaN and -0 into
 * +0 like this comparison does. */
static float bf16_epilogue(float y, const float *r1, const float *r2, int relu, size_t at)
{
    if (relu)
        y = y > 0 ? y : 0.0f;
    if (r1)
        y += r1[at];
    if (r2)
        y += r2[at];
    return y;
}

/* ---- bf16 rounding ---- */

/* bf16_bits, 8 or 16 lanes at once. */

void k_round_bf16_ref(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = bf16_round(x[i]);
}

INLINE_AVX2 __m256i bf16_bits_avx2(__m256i u)
{
    const __m256i top = _mm256_set1_epi32((int)0xffff0000u);
    __m256i rne = _mm256_add_epi32(
        u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                            _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
    __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i isnan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
    __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)),
                                     _mm256_setzero_si256());
    __m256i y = _mm256_and_si256(_mm256_blendv_epi8(rne, quiet, isnan), top);
    return _mm256_blendv_epi8(y, _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)), den);
}

T_AVX2 static void round_bf16_avx2(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    size_t nv = n / 8 * 8;
    for (size_t i = 0; i < nv; i += 8)
        _mm256_storeu_si256((__m256i *)(y + i),
                            bf16_bits_avx2(_mm256_loadu_si256((const __m256i *)(x + i))));
    k_round_bf16_ref(y + nv, x + nv, n - nv);
}

INLINE_AVX512 __m512i bf16_bits_avx512(__m512i u)
{
    __m512i rne = _mm512_add_epi32(
        u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                            _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    __mmask16 isnan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                               _mm512_set1_epi32(0x7f800000));
    __mmask16 den = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    __m512i y = _mm512_mask_or_epi32(rne, isnan, u, _mm512_set1_epi32(0x00400000));
    y = _mm512_and_si512(y, _mm512_set1_epi32((int)0xffff0000u));
    return _mm512_mask_and_epi32(y, den, u, _mm512_set1_epi32((int)0x80000000u));
}

T_AVX512 static void round_bf16_avx512(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    size_t nv = n / 16 * 16;
    for (size_t i = 0; i < nv; i += 16)
        _mm512_storeu_si512(y + i, bf16_bits_avx512(_mm512_loadu_si512(x + i)));
    __mmask16 tail = lanes16((int)(n - nv));
    _mm512_mask_storeu_epi32(y + nv, tail,
                             bf16_bits_avx512(_mm512_maskz_loadu_epi32(tail, x + nv)));
}

/* One thread's rounding. Kernels call it on a few dozen floats at a time:
 * even a parallel construct whose if() is false costs a microsecond. */
static void round_span(float *y /* [n] */, const float *x /* [n] */, size_t n)
{
    switch (isa_get()) {
    case ISA_AVX512: round_bf16_avx512(y, x, n); break;
    case ISA_AVX2: round_bf16_avx2(y, x, n); break;
    default: k_round_bf16_ref(y, x, n); break;
    }
}

void k_round_bf16(float *y /* [n] */, const float *x /* [n] */, size_t n)
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

/* ---- bf16 matmul ---- */

/* -- bf16 matmul: twin -- */

void k_matmul_bf16_ref(float *c /* [n,q] */, const float *a /* [n,p] */, const float *b /* [p,q] */,
                       const float *bias /* [q] or NULL */, const float *r1 /* [n,q] or NULL */,
                       const float *r2 /* [n,q] or NULL */, int relu, int n, int p, int q)
{
    size_t na = (size_t)n * p, nb = (size_t)p * q;
    float *ra = xmalloc(sizeof(float) * (na + nb)), *rb = ra + na; /* [n,p], [p,q] */
    k_round_bf16_ref(ra, a, na);
    k_round_bf16_ref(rb, b, nb);
#pragma omp parallel for schedule(static) if ((long)n * p * q >= PAR_WORK)
    for (int i = 0; i < n; i++)
        for (int j = 0; j < q; j++) {
            size_t at = (size_t)i * q + j;
            float y = bf16_dot(bias ? bias[j] : 0.0f, ra + (size_t)i * p, 1, rb + j, (size_t)q, p);
            c[at] = bf16_epilogue(y, r1, r2, relu, at);
        }
    free(ra);
}

/* -- bf16 matmul: shared by the blocked paths -- */

/* Rows of A made ready (rounded or packed) at a time: every tile height
 * used below divides it. */
#define BF_RB 24

/* Everything a bf16 tile needs. A block's rows are in ab in ready form
 * (rounded floats, or packed pairs on the native path), zero past p; B is
 * ready in bb (stride ldb >= q, zero past q and past p). A's element
 * (row r, k) is at ab[r*sar + k*sak]: (lda, 1) for a @ b, (1, lda) for
 * a^T b, whose a is packed the way b is. */
struct bfmm {
    float *c;                   /* [n,q] */
    const void *ab, *bb;        /* float [.,.] and [pe,ldb], or uint32 pairs
                                 * [.,.] and [p2,ldb] */
    const float *bias, *r1, *r2;
    int relu, p, q;
    int resume;                 /* sums go on from c (a later pass over k),
                                 * not from bias or 0 */
    size_t sar, sak, ldb;
};

/* Column panels of at most maxv vectors of w lanes, split evenly so that
 * q = 96 runs as 3 + 3 vectors, not 4 + 2. *v0 is panel t's first vector,
 * the return value its width in vectors. */
static int bf_panel(int q, int w, int maxv, int t, int *v0)
{
    int nv = (q + w - 1) / w, np = (nv + maxv - 1) / maxv, base = nv / np, extra = nv % np;
    *v0 = t * base + min_int(t, extra);
    return base + (t < extra);
}

static int bf_panels(int q, int w, int maxv) { return ((q + w - 1) / w + maxv - 1) / maxv; }

/* Where element (row i, column col) of c starts its sum. */
static float bf_init(const struct bfmm *m, int i, int col)
{
    return m->resume ? m->c[(size_t)i * m->q + col] : m->bias ? m->bias[col] : 0.0f;
}

/* The scalar fallback of the emulated tiles: rows [i, i+R) x cols [j, j1)
 * of one block, from the same rounded floats, by bf16_dot. */
static void bf_tile_exact(const struct bfmm *m, int i, int bi, int R, int j, int j1)
{
    const float *ab = m->ab, *bb = m->bb;
    for (int r = 0; r < R; r++)
        for (int col = j; col < j1; col++) {
            size_t at = (size_t)(i + r) * m->q + col;
            float y = bf16_dot(bf_init(m, i + r, col), ab + (size_t)(bi + r) * m->sar, m->sak,
                               bb + col, m->ldb, m->p);
            m->c[at] = bf16_epilogue(y, m->r1, m->r2, m->relu, at);
        }
}

/* Rounds b[p,q] (row stride lds) into bb[pe,ldb] (pe = p rounded up to
 * even), zero-padded: the emulated paths' operands (A's row block, whose
 * padding row lands in the block's spare room, B, and both of a^T b). */
static void bf_round_b(float *bb, const float *b, size_t lds, int p, int q, size_t ldb)
{
    int pe = p + (p & 1);
    for (int k = 0; k < pe; k++)
        for (size_t j = 0; j < ldb; j++)
            bb[(size_t)k * ldb + j] =
                k < p && j < (size_t)q ? bf16_round(b[(size_t)k * lds + j]) : 0.0f;
}

/* -- bf16 matmul: emulated, AVX2 -- */

/* A plain FMA per step gives vdpbf16ps's bits as long as no step result is
 * tiny (|r| <= 2^-126, nonzero: flushing and the rounding boundary), no
 * accumulator starts denormal, and nothing is NaN (payload choice). The
 * tiles track the smallest 2*bits(r) - 1 (unsigned: zero maps to the top,
 * tiny nonzero values below 2^24) and recompute a whole tile exactly by
 * bf16_dot when it saw either; on real data that never happens. */

#define BF_MR_AVX2 4 /* 4x2 accumulators + 2 b + broadcast + 2 trackers + 2 temps = 15 of 16 ymm */

INLINE_AVX2 __m256i bf_track_avx2(__m256i lo, __m256 r)
{
    __m256i u = _mm256_castps_si256(r);
    return _mm256_min_epu32(lo, _mm256_sub_epi32(_mm256_add_epi32(u, u), _mm256_set1_epi32(1)));
}

INLINE_AVX2 void bf_tile_avx2(const struct bfmm *m, int i, int bi, int j, int R, int V, int last_w)
{
    const float *ab = (const float *)m->ab + (size_t)bi * m->sar, *bb = (const float *)m->bb + j;
    __m256 acc[BF_MR_AVX2][2];
    __m256i lo[2] = {_mm256_set1_epi32(-1), _mm256_set1_epi32(-1)}; /* two min chains */
    const __m256i tail = lanes8(last_w);
    int full = last_w == 8 ? V : V - 1;
#pragma GCC unroll 2
    for (int v = 0; v < V; v++) {
        __m256 init = _mm256_setzero_ps();
        if (m->bias)
            init = v < full ? _mm256_loadu_ps(m->bias + j + 8 * v)
                            : _mm256_maskload_ps(m->bias + j + 8 * v, tail);
        __m256i msk = v < full ? _mm256_set1_epi32(-1) : tail;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) { /* a denormal start must be read as zero */
            const float *cr = m->c + (size_t)(i + r) * m->q + j + 8 * v;
            acc[r][v] = m->resume ? _mm256_maskload_ps(cr, msk) : init;
            lo[0] = bf_track_avx2(lo[0], acc[r][v]);
        }
    }
    int pe = m->p + (m->p & 1);
    for (int k = 0; k < pe; k += 2)
#pragma GCC unroll 2
        for (int h = 1; h >= 0; h--) { /* the hi element of the pair first */
            const float *bk = bb + (size_t)(k + h) * m->ldb;
            __m256 bv[2];
#pragma GCC unroll 2
            for (int v = 0; v < V; v++)
                bv[v] = _mm256_loadu_ps(bk + 8 * v);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const float *ar = ab + (size_t)r * m->sar + (size_t)(k + h) * m->sak;
                __m256 av = _mm256_broadcast_ss(ar);
#pragma GCC unroll 2
                for (int v = 0; v < V; v++) {
                    acc[r][v] = _mm256_fmadd_ps(bv[v], av, acc[r][v]);
                    lo[r & 1] = bf_track_avx2(lo[r & 1], acc[r][v]);
                }
            }
        }
    __m256i least = _mm256_min_epu32(lo[0], lo[1]);
    __m256i tiny = _mm256_cmpeq_epi32(_mm256_min_epu32(least, _mm256_set1_epi32(0xffffff)), least);
    __m256 nan = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < V; v++)
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(acc[r][v], acc[r][v], _CMP_UNORD_Q));
    if (_mm256_movemask_ps(_mm256_or_ps(nan, _mm256_castsi256_ps(tiny)))) {
        bf_tile_exact(m, i, bi, R, j, min_int(j + 8 * V, m->q));
        return;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        size_t at = (size_t)(i + r) * m->q + j;
#pragma GCC unroll 2
        for (int v = 0; v < V; v++) {
            __m256 y = acc[r][v];
            __m256i msk = v < full ? _mm256_set1_epi32(-1) : tail;
            if (m->relu)
                y = _mm256_max_ps(y, _mm256_setzero_ps());
            if (m->r1)
                y = _mm256_add_ps(y, _mm256_maskload_ps(m->r1 + at + 8 * v, msk));
            if (m->r2)
                y = _mm256_add_ps(y, _mm256_maskload_ps(m->r2 + at + 8 * v, msk));
            if (v < full)
                _mm256_storeu_ps(m->c + at + 8 * v, y);
            else
                _mm256_maskstore_ps(m->c + at + 8 * v, msk, y);
        }
    }
}

/* R rows of one block (R == BF_MR_AVX2 or 1), all columns. */
INLINE_AVX2 void bf_rows_avx2(const struct bfmm *m, int i, int bi, int R)
{
    for (int j = 0; j < m->q; j += 16) {
        int w = min_int(16, m->q - j), V = (w + 7) / 8, last_w = w - 8 * (V - 1);
        if (R == BF_MR_AVX2 && V == 2)
            bf_tile_avx2(m, i, bi, j, BF_MR_AVX2, 2, last_w);
        else if (R == BF_MR_AVX2)
            bf_tile_avx2(m, i, bi, j, BF_MR_AVX2, 1, last_w);
        else if (V == 2)
            bf_tile_avx2(m, i, bi, j, 1, 2, last_w);
        else
            bf_tile_avx2(m, i, bi, j, 1, 1, last_w);
    }
}

/* Rows [i0, i0+rows) of c, A's rows from ab's row 0. */
T_AVX2 static void bf_block_avx2(const struct bfmm *m, int i0, int rows)
{
    int r = 0;
    for (; r + BF_MR_AVX2 <= rows; r += BF_MR_AVX2)
        bf_rows_avx2(m, i0 + r, r, BF_MR_AVX2);
    for (; r < rows; r++)
        bf_rows_avx2(m, i0 + r, r, 1);
}

/* One block of rows of the emulated bf16 matmul: AVX2's or AVX-512's. */
typedef void bf_block_fn(const struct bfmm *m, int i0, int rows);

/* The emulated paths' driver: B rounded to bf16 once, then blocks of A's
 * rows rounded and multiplied, a block a thread at a time. */
static void matmul_bf16_rounded(bf_block_fn *block, struct bfmm *m, const float *a,
                                const float *b, int n)
{
    int p = m->p, pe = p + (p & 1), blocks = (n + BF_RB - 1) / BF_RB;
    size_t lda = (size_t)pe;
    m->sar = lda, m->sak = 1;
    m->ldb = (size_t)(m->q + 15) / 16 * 16;
    float *bb = xmalloc(sizeof(float) * ((size_t)pe * m->ldb));
    bf_round_b(bb, b, (size_t)m->q, p, m->q, m->ldb);
    m->bb = bb;
#pragma omp parallel if ((long)n * p * m->q >= PAR_WORK)
    {
        float *ab = xmalloc(sizeof(float) * BF_RB * lda);
        struct bfmm mine = *m;
        mine.ab = ab;
#pragma omp for schedule(static)
        for (int t = 0; t < blocks; t++) {
            int i0 = t * BF_RB, rows = min_int(BF_RB, n - i0);
            bf_round_b(ab, a + (size_t)i0 * p, (size_t)p, rows, p, lda);
            block(&mine, i0, rows);
        }
        free(ab);
    }
    free(bb);
}

/* -- bf16 matmul: emulated, AVX-512F: the AVX2 tiles' scheme, 16 lanes -- */

INLINE_AVX512 __m512i bf_track_avx512(__m512i lo, __m512 r)
{
    __m512i u = _mm512_castps_si512(r);
    return _mm512_min_epu32(lo, _mm512_sub_epi32(_mm512_add_epi32(u, u), _mm512_set1_epi32(1)));
}

/* An R x 16V tile (4x4, 6x3, 8x2, 12x1: the trackers need registers too),
 * the row block's rounded A at ab. Four trackers, so that the chain of
 * min operations does not outlast the FMAs. */
INLINE_AVX512 void bf_tile_emu_avx512(const struct bfmm *m, int i, int bi, int j, int R, int V,
                                      __mmask16 tail)
{
    const float *ab = (const float *)m->ab + (size_t)bi * m->sar, *bb = (const float *)m->bb + j;
    __m512 acc[24];
    __m512i lo[4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++)
        lo[t] = _mm512_set1_epi32(-1);
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) {
        __mmask16 msk = v < V - 1 ? (__mmask16)0xFFFF : tail;
        __m512 init =
            m->bias ? _mm512_maskz_loadu_ps(msk, m->bias + j + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 24
        for (int r = 0; r < R; r++) {
            acc[r * V + v] =
                m->resume ? _mm512_maskz_loadu_ps(msk, m->c + (size_t)(i + r) * m->q + j + 16 * v)
                          : init;
            lo[0] = bf_track_avx512(lo[0], acc[r * V + v]);
        }
    }
    int pe = m->p + (m->p & 1);
    for (int k = 0; k < pe; k += 2)
#pragma GCC unroll 2
        for (int h = 1; h >= 0; h--) {
            const float *bk = bb + (size_t)(k + h) * m->ldb;
            __m512 bv[4];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                bv[v] = _mm512_loadu_ps(bk + 16 * v);
#pragma GCC unroll 24
            for (int r = 0; r < R; r++) {
                __m512 av = _mm512_set1_ps(ab[(size_t)r * m->sar + (size_t)(k + h) * m->sak]);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++) {
                    acc[r * V + v] = _mm512_fmadd_ps(bv[v], av, acc[r * V + v]);
                    lo[(r * V + v) & 3] = bf_track_avx512(lo[(r * V + v) & 3], acc[r * V + v]);
                }
            }
        }
    __m512i least =
        _mm512_min_epu32(_mm512_min_epu32(lo[0], lo[1]), _mm512_min_epu32(lo[2], lo[3]));
    __mmask16 bad = _mm512_cmplt_epu32_mask(least, _mm512_set1_epi32(0x1000000));
#pragma GCC unroll 24
    for (int e = 0; e < R * V; e++)
        bad |= _mm512_cmp_ps_mask(acc[e], acc[e], _CMP_UNORD_Q);
    if (bad) {
        bf_tile_exact(m, i, bi, R, j, min_int(j + 16 * V, m->q));
        return;
    }
#pragma GCC unroll 24
    for (int r = 0; r < R; r++) {
        size_t at = (size_t)(i + r) * m->q + j;
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            __mmask16 msk = v < V - 1 ? (__mmask16)0xFFFF : tail;
            __m512 y = acc[r * V + v];
            if (m->relu)
                y = _mm512_max_ps(y, _mm512_setzero_ps());
            if (m->r1)
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(msk, m->r1 + at + 16 * v));
            if (m->r2)
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(msk, m->r2 + at + 16 * v));
            _mm512_mask_storeu_ps(m->c + at + 16 * v, msk, y);
        }
    }
}

/* Rows [i0, i0+rows) of c, A's rows from ab's row 0, in column panels of
 * at most maxv vectors; a panel of V vectors runs as tiles of hV rows, the
 * rows left over one by one (a tile's height changes no bits). A macro so
 * that R and V are constants inside each tile. */
#define BF_ROWS(tile, m, i0, rows, maxv, h1, h2, h3, h4)                                   \
    do {                                                                                   \
        for (int pn_ = 0; pn_ < bf_panels((m)->q, 16, maxv); pn_++) {                      \
            int v0_, V_ = bf_panel((m)->q, 16, maxv, pn_, &v0_), j_ = 16 * v0_;            \
            __mmask16 tl_ = lanes16(min_int((m)->q - j_, 16 * V_) - 16 * (V_ - 1));        \
            int R_ = V_ == 1 ? (h1) : V_ == 2 ? (h2) : V_ == 3 ? (h3) : (h4), r_ = 0;      \
            for (; r_ + R_ <= (rows); r_ += R_)                                            \
                switch (V_) {                                                              \
                case 1: tile(m, (i0) + r_, r_, j_, (h1), 1, tl_); break;                   \
                case 2: tile(m, (i0) + r_, r_, j_, (h2), 2, tl_); break;                   \
                case 3: tile(m, (i0) + r_, r_, j_, (h3), 3, tl_); break;                   \
                default: tile(m, (i0) + r_, r_, j_, (h4), 4, tl_); break;                  \
                }                                                                          \
            for (; r_ < (rows); r_++)                                                      \
                switch (V_) {                                                              \
                case 1: tile(m, (i0) + r_, r_, j_, 1, 1, tl_); break;                      \
                case 2: tile(m, (i0) + r_, r_, j_, 1, 2, tl_); break;                      \
                case 3: tile(m, (i0) + r_, r_, j_, 1, 3, tl_); break;                      \
                default: tile(m, (i0) + r_, r_, j_, 1, 4, tl_); break;                     \
                }                                                                          \
        }                                                                                  \
    } while (0)

/* Rows [i0, i0+rows) of c, A's rows from ab's row 0. */
T_AVX512 static void bf_block_emu_avx512(const struct bfmm *m, int i0, int rows)
{
    BF_ROWS(bf_tile_emu_avx512, m, i0, rows, 4, 12, 8, 6, 4);
}

/* -- bf16 matmul: native, vdpbf16ps -- */

#define BF16_TARGET "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma"
#define T_BF16 __attribute__((target(BF16_TARGET)))
#define INLINE_BF16 static inline __attribute__((always_inline, target(BF16_TARGET)))

/* B as the instruction wants it: pairs [p2,ldb] of (b[2j][col] in the low
 * half, b[2j+1][col] in the high half), zero past p and q; b's rows lds
 * apart. Once per call (per leaf block for a^T b, whose a is packed so too). */
T_BF16 static void bf_pack_b(uint32_t *bp, const float *b, size_t lds, int p, int q, size_t ldb)
{
    /* vcvtne2ps2bf16 puts one row's 16 values after the other's; vpermw
     * interleaves them into 16 pairs: 5 instructions where widening each
     * half and merging took 10 (the packing is a third of a weight
     * gradient's time at the model's shapes) */
    static const uint16_t pairs[32] = {0, 16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                       21, 6, 22, 7,  23, 8,  24, 9,  25, 10, 26,
                                       11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(pairs);
    int p2 = (p + 1) / 2;
    for (int jp = 0; jp < p2; jp++) {
        const float *lo = b + (size_t)2 * jp * lds, *hi = 2 * jp + 1 < p ? lo + lds : NULL;
        for (size_t j = 0; j < ldb; j += 16) {
            __mmask16 have = lanes16(q - (int)j);
            __m512 l = _mm512_maskz_loadu_ps(have, lo + j);
            __m512 h = hi ? _mm512_maskz_loadu_ps(have, hi + j) : _mm512_setzero_ps();
            __m512i both = (__m512i)_mm512_cvtne2ps_pbh(h, l);
            _mm512_storeu_si512(bp + (size_t)jp * ldb + j, _mm512_permutexvar_epi16(idx, both));
        }
    }
}

/* Rows [i0, i0+R) of a[.,p] as pairs [R,lda] (lda a multiple of 16 >= p2),
 * zero past p: 32 floats make 16 pairs in one vcvtne2ps2bf16. */
T_BF16 static void bf_pack_a(uint32_t *ap, const float *a, int i0, int R, int p, size_t lda)
{
    for (int r = 0; r < R; r++) {
        const float *ar = a + (size_t)(i0 + r) * p;
        for (size_t k = 0; k < 2 * lda; k += 32) {
            int have = p - (int)k;
            __m512 lo = _mm512_maskz_loadu_ps(lanes16(have), ar + k);
            __m512 hi = _mm512_maskz_loadu_ps(lanes16(have - 16), ar + k + 16);
            _mm512_storeu_si512(ap + (size_t)r * lda + k / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

INLINE_BF16 void bf_tile_native(const struct bfmm *m, int i, int bi, int j, int R, int V,
                                __mmask16 tail)
{
    const uint32_t *ap = (const uint32_t *)m->ab + (size_t)bi * m->sar;
    const uint32_t *bp = (const uint32_t *)m->bb + j;
    __m512 acc[24];
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) {
        __mmask16 msk = v < V - 1 ? (__mmask16)0xFFFF : tail;
        __m512 init =
            m->bias ? _mm512_maskz_loadu_ps(msk, m->bias + j + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 24
        for (int r = 0; r < R; r++)
            acc[r * V + v] =
                m->resume ? _mm512_maskz_loadu_ps(msk, m->c + (size_t)(i + r) * m->q + j + 16 * v)
                          : init;
    }
    int p2 = (m->p + 1) / 2;
    for (int k = 0; k < p2; k++) {
        const uint32_t *bk = bp + (size_t)k * m->ldb;
        __m512i bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            bv[v] = _mm512_loadu_si512(bk + 16 * v);
#pragma GCC unroll 24
        for (int r = 0; r < R; r++) {
            __m512i av = _mm512_set1_epi32((int)ap[(size_t)r * m->sar + (size_t)k * m->sak]);
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[r * V + v] = _mm512_dpbf16_ps(acc[r * V + v], (__m512bh)bv[v], (__m512bh)av);
        }
    }
#pragma GCC unroll 24
    for (int r = 0; r < R; r++) {
        size_t at = (size_t)(i + r) * m->q + j;
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            __mmask16 msk = v < V - 1 ? (__mmask16)0xFFFF : tail;
            __m512 y = acc[r * V + v];
            if (m->relu)
                y = _mm512_max_ps(y, _mm512_setzero_ps());
            if (m->r1)
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(msk, m->r1 + at + 16 * v));
            if (m->r2)
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(msk, m->r2 + at + 16 * v));
            _mm512_mask_storeu_ps(m->c + at + 16 * v, msk, y);
        }
    }
}

/* Rows [i0, i0+rows) of c: 16 to 24 accumulators (12 when q <= 16):
 * vdpbf16ps needs 16 in flight to reach its peak here, 8 give two thirds;
 * taller tiles run out of registers for their row pointers. */
T_BF16 static void bf_block_native(const struct bfmm *m, int i0, int rows)
{
    BF_ROWS(bf_tile_native, m, i0, rows, 4, 12, 8, 8, 6);
}

static void matmul_bf16_native(struct bfmm *m, const float *a, const float *b, int n)
{
    int p = m->p, p2 = (p + 1) / 2, blocks = (n + BF_RB - 1) / BF_RB;
    size_t lda = (size_t)(p2 + 15) / 16 * 16;
    m->sar = lda, m->sak = 1;
    m->ldb = (size_t)(m->q + 15) / 16 * 16;
    uint32_t *bp = xmalloc(sizeof(uint32_t) * ((size_t)p2 * m->ldb));
    bf_pack_b(bp, b, (size_t)m->q, p, m->q, m->ldb);
    m->bb = bp;
#pragma omp parallel if ((long)n * p * m->q >= PAR_WORK)
    {
        uint32_t *ap = xmalloc(sizeof(uint32_t) * BF_RB * lda);
        struct bfmm mine = *m;
        mine.ab = ap;
#pragma omp for schedule(static)
        for (int t = 0; t < blocks; t++) {
            int i0 = t * BF_RB, rows = min_int(BF_RB, n - i0);
            bf_pack_a(ap, a, i0, rows, p, lda);
            bf_block_native(&mine, i0, rows);
        }
        free(ap);
    }
    free(bp);
}

/* -- bf16 matmul: entry points -- */

void k_matmul_bf16_emu(float *c /* [n,q] */, const float *a /* [n,p] */, const float *b /* [p,q] */,
                       const float *bias /* [q] or NULL */, const float *r1 /* [n,q] or NULL */,
                       const float *r2 /* [n,q] or NULL */, int relu, int n, int p, int q)
{
    struct bfmm m = {.c = c, .bias = bias, .r1 = r1, .r2 = r2, .relu = relu, .p = p, .q = q};
    if (n <= 0 || q <= 0)
        return;
    switch (isa_get()) {
    case ISA_AVX512: matmul_bf16_rounded(bf_block_emu_avx512, &m, a, b, n); break;
    case ISA_AVX2: matmul_bf16_rounded(bf_block_avx2, &m, a, b, n); break;
    default: k_matmul_bf16_ref(c, a, b, bias, r1, r2, relu, n, p, q); break;
    }
}

void k_matmul_bf16(float *c /* [n,q] */, const float *a /* [n,p] */, const float *b /* [p,q] */,
                   const float *bias /* [q] or NULL */, const float *r1 /* [n,q] or NULL */,
                   const float *r2 /* [n,q] or NULL */, int relu, int n, int p, int q)
{
    struct bfmm m = {.c = c, .bias = bias, .r1 = r1, .r2 = r2, .relu = relu, .p = p, .q = q};
    if (n > 0 && q > 0 && bf16_native())
        matmul_bf16_native(&m, a, b, n);
    else
        k_matmul_bf16_emu(c, a, b, bias, r1, r2, relu, n, p, q);
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
    float *ra = xmalloc(sizeof(float) * (na + nb)), *rb = ra + na; /* [p,n], [p,q] */
    float *part = xmalloc(sizeof(float) * (size_t)L * nc);         /* [L,n,q] */
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

/* -- bf16 weight-gradient matmul: a leaf's block, per path (tiles above) -- */

/* a^T b over rows of a leaf: a [p,r1-r0] and b [p,q] (row strides lds_a
 * and q) rounded into m's A and B, then c's rows [r0, r1). */
T_AVX2 static void bf_tn_avx2(struct bfmm *m, const float *a, size_t lds_a, const float *b,
                              int r0, int r1)
{
    bf_round_b((float *)m->bb, b, (size_t)m->q, m->p, m->q, m->ldb);
    bf_round_b((float *)m->ab, a, lds_a, m->p, r1 - r0, m->sak);
    bf_block_avx2(m, r0, r1 - r0);
}

T_AVX512 static void bf_tn_emu_avx512(struct bfmm *m, const float *a, size_t lds_a,
                                      const float *b, int r0, int r1)
{
    bf_round_b((float *)m->bb, b, (size_t)m->q, m->p, m->q, m->ldb);
    bf_round_b((float *)m->ab, a, lds_a, m->p, r1 - r0, m->sak);
    BF_ROWS(bf_tile_emu_avx512, m, r0, r1 - r0, 3, 8, 8, 4, 4);
}

/* a^T b: both operands packed as pairs along the leaf's rows, 8 x 3
 * vectors of accumulators at most (24, as above). */
T_BF16 static void bf_tn_native(struct bfmm *m, const float *a, size_t lds_a, const float *b,
                                int r0, int r1)
{
    bf_pack_b((uint32_t *)m->bb, b, (size_t)m->q, m->p, m->q, m->ldb);
    bf_pack_b((uint32_t *)m->ab, a, lds_a, m->p, r1 - r0, m->sak);
    BF_ROWS(bf_tile_native, m, r0, r1 - r0, 3, 8, 8, 8, 6); /* 4 vectors: never, maxv 3 */
}

/* -- bf16 weight-gradient matmul: one leaf, for the fp32 tree -- */

/* One leaf of rows [k0, k1) is exactly k_matmul_bf16 of a[k0:k1]^T and
 * b[k0:k1] with no bias: its pairs are rows (k0, k0+1), (k0+2, k0+3), ...,
 * restarting at each leaf, so that a core's shard of whole leaves computes
 * the same partials and the fp32 tree above combines them unchanged. a's
 * columns are c's rows; this thread's share, [r0, r1), is packed like b,
 * so that row r's pair k is at ab[r + k*lda]. BF_TN_K rows at a time: the
 * packing stays in cache and the later passes resume from c. */
static void tn_leaf_bf16(const struct tn_tree *t, float *dst /* [n,q] */, int k0, int k1)
{
    int n = t->n, q = t->m->q, r0 = t->t0 * BF_TN_MR, r1 = min_int(n, t->t1 * BF_TN_MR);
    size_t ldb = (size_t)round16(q), lda = (size_t)round16(r1 - r0);
    struct bfmm m = {.c = dst, .q = q, .sar = 1, .sak = lda, .ldb = ldb};
    m.bb = t->pack;                                 /* [BF_TN_K, ldb] at most */
    m.ab = (const float *)t->pack + BF_TN_K * ldb; /* [BF_TN_K, lda] at most */
    for (int k = k0; k < k1; k += BF_TN_K) {
        const float *a = t->m->a + (size_t)k * n + r0, *b = t->m->b + (size_t)k * q;
        m.p = min_int(BF_TN_K, k1 - k);
        m.resume = k > k0;
        switch (t->bf) {
        case BF_NATIVE: bf_tn_native(&m, a, (size_t)n, b, r0, r1); break;
        case BF_EMU_AVX512: bf_tn_emu_avx512(&m, a, (size_t)n, b, r0, r1); break;
        default: bf_tn_avx2(&m, a, (size_t)n, b, r0, r1); break;
        }
    }
}

/* -- bf16 weight-gradient matmul: entry points -- */

void k_matmul_tn_seg_bf16(float *c /* [n,q] */, const float *a /* [p,n] */,
                          const float *b /* [p,q] */, int n, int p, int q, int seg)
{
    matmul_tn_seg_any(c, a, b, n, p, q, seg, bf16_native() ? BF_NATIVE : BF_EMU_AVX512);
}

void k_matmul_tn_seg_bf16_emu(float *c /* [n,q] */, const float *a /* [p,n] */,
                              const float *b /* [p,q] */, int n, int p, int q, int seg)
{
    matmul_tn_seg_any(c, a, b, n, p, q, seg, BF_EMU_AVX512);
}

/* ---- bf16 attention ---- */

/* The SIMD paths are the fp32 head drivers with their bf16 flag set
 * (round_block); the twins round first, then call the fp32 twins. */

/* -- bf16 attention: twins -- */

void k_attention_bf16_ref(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                          const float *qkv /* [B,T,3C] */, int B, int T, int C, int H)
{
    size_t n = (size_t)B * T * 3 * C;
    float *r = xmalloc(sizeof(float) * n); /* [B,T,3C] */
    k_round_bf16_ref(r, qkv, n);
    k_attention_ref(out, lse, r, B, T, C, H);
    free(r);
}

void k_attention_bwd_bf16_ref(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                              const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                              const float *lse /* [B,H,T] */, int B, int T, int C, int H)
{
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
    float *rq = xmalloc(sizeof(float) * (n3 + n1)), *rd = rq + n3; /* [B,T,3C], [B,T,C] */
    k_round_bf16_ref(rq, qkv, n3);
    k_round_bf16_ref(rd, dout, n1);
    k_attention_bwd_ref(dqkv, rd, rq, out, lse, B, T, C, H);
    free(rq);
}

/* -- bf16 attention: entry points -- */

void k_attention_bf16(float *out /* [B,T,C] */, float *lse /* [B,H,T] */,
                      const float *qkv /* [B,T,3C] */, int B, int T, int C, int H)
{
    attention_any(out, lse, qkv, B, T, C, H, 1);
}

void k_attention_bwd_bf16(float *dqkv /* [B,T,3C] */, const float *dout /* [B,T,C] */,
                          const float *qkv /* [B,T,3C] */, const float *out /* [B,T,C] */,
                          const float *lse /* [B,H,T] */, int B, int T, int C, int H)
{
    attention_bwd_any(dqkv, dout, qkv, out, lse, B, T, C, H, 1);
}
