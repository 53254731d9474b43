/* vec.h: the vector layer under the kernels. One logical vector of 16
 * float lanes, `vf`, and the few operations the kernels need, so that each
 * kernel is written once (tensor.c) and compiled once per backend:
 *
 *   VEC_AVX512  one zmm register                       x86-64 with AVX-512
 *   VEC_AVX2    two ymm registers (lanes 0-7, 8-15)    x86-64 with AVX2 + FMA
 *   VEC_NEON    four q registers (lanes 0-3, ... )     arm64
 *   (none)      16 floats in a struct, plain C         anything
 *
 * The same bits on every backend: every operation here is exactly rounded
 * IEEE single precision (add, sub, mul, div, sqrt, and a fused multiply-add
 * rounded once), so a kernel that does the same operations in the same
 * order on each lane gets the same bits whatever backend runs it. The few
 * operations that are not one IEEE operation (max and select, the
 * horizontal sum, exp and exp2, bf16 rounding) are defined below by what
 * they compute, and each backend computes exactly that:
 *   vmax(a, b) = a > b ? a : b        (x86's maxps; NEON's fmax differs on
 *   vmin(a, b) = a < b ? a : b         -0 and NaN, so it is not used)
 *   vsum(v)    = the tree ((l0+l8) + (l4+l12)) + ((l2+l10) + (l6+l14)) + ...:
 *                halves added lane-wise (i + i+8), then (i + i+4), (i + i+2),
 *                then lane 0 + lane 1: what _mm512_reduce_add_ps does.
 * Nothing here reads the rounding mode or flushes denormals (no reciprocal
 * or square-root estimates, no libm) but vflush_begin/vflush_end, which
 * set x86's flush-to-zero mode around the bf16 emulation's sums, and
 * vpin, which keeps those sums inside it.
 *
 * Naming: v* on vf; vm is a mask of 16 lanes (from vlanes, vgt, vnan).
 * Half vectors: vh, 8 lanes, with h* versions of the few operations a loop
 * over 8 lanes needs (an attention head of 8 channels: 16 lanes would
 * carry 8 idle ones at full cost). Each h* operation is its v* twin on
 * fewer lanes, so it gives the same bits. Pairs put two half vectors in
 * one vf, lane c of each in lanes 2c and 2c+1: hzip, hunzip, and vdup2
 * (two floats repeated), so 8 channels of two sums fill 16 lanes.
 * Partial vectors: vload_n reads lanes 0..n-1 and zeroes the rest without
 * touching memory past them; vstore_n writes lanes 0..n-1 only. */
#ifndef VEC_H
#define VEC_H
#include <stdint.h>
#include <string.h>

#define VL 16 /* lanes of a vf */

#define VINLINE static inline __attribute__((always_inline))

/* Loop unrolling the same way under gcc and clang. UNROLL(n) before a
 * loop over a register tile (rows, vectors, groups: a constant in each
 * inlined copy) unrolls it whole, so its accumulators stay in registers:
 * gcc's "unroll n" does that. clang needs a full unroll without a count
 * (with one it may keep the tile on the stack), and its loop vectorizer
 * kept out: left free, it interleaved attention's dQ loop over 8 queries
 * two at a time before the unroller ran, so the tile lived on the stack,
 * each FMA a load and a store, and the backward ran 20% slower than gcc's.
 * UNROLL_BY(n) before a loop whose length is known only at run time
 * unrolls it n times. Neither changes the order of the operations. */
#define VEC_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define UNROLL(n) VEC_PRAGMA(clang loop unroll(full) vectorize(disable) interleave(disable))
#define UNROLL_BY(n) VEC_PRAGMA(unroll n)
#else
#define UNROLL(n) VEC_PRAGMA(GCC unroll n)
#define UNROLL_BY(n) VEC_PRAGMA(GCC unroll n)
#endif

/* ======================================================================
 * AVX-512: one __m512, masks in k registers.
 * ====================================================================== */
#if defined(VEC_AVX512)
#include <immintrin.h>
#define VEC_NAME "avx512"

typedef __m512 vf;
typedef __mmask16 vm;
typedef __m512i vu; /* 16 x uint32: the bf16 tile's tiny-result tracker */

VINLINE vf vzero(void) { return _mm512_setzero_ps(); }
VINLINE vf vset(float x) { return _mm512_set1_ps(x); }
VINLINE vf vload(const float *p) { return _mm512_loadu_ps(p); }

VINLINE void vstore(float *p, vf v) { _mm512_storeu_ps(p, v); }
VINLINE vm vlanes(int n) /* lanes 0..n-1 */
{
    return n >= 16 ? (vm)0xFFFF : n <= 0 ? (vm)0 : (vm)((1u << n) - 1);
}
VINLINE vf vload_n(const float *p, int n) { return _mm512_maskz_loadu_ps(vlanes(n), p); }
VINLINE void vstore_n(float *p, vf v, int n) { _mm512_mask_storeu_ps(p, vlanes(n), v); }

/* The half vector: 8 lanes, one ymm (see "half vectors" below). */
typedef __m256 vh;
VINLINE vh hzero(void) { return _mm256_setzero_ps(); }
VINLINE vh hset(float x) { return _mm256_set1_ps(x); }
VINLINE vh hfma(vh a, vh b, vh c) { return _mm256_fmadd_ps(a, b, c); }
VINLINE vh hmul(vh a, vh b) { return _mm256_mul_ps(a, b); }
VINLINE vh hload_n(const float *p, int n) { return _mm256_maskz_loadu_ps((__mmask8)vlanes(n), p); }
VINLINE void hstore_n(float *p, vh v, int n) { _mm256_mask_storeu_ps(p, (__mmask8)vlanes(n), v); }
VINLINE vh hadd(vh a, vh b) { return _mm256_add_ps(a, b); }
/* Pairs: lanes 2c and 2c+1 of a vf hold lane c of two half vectors. */
VINLINE vf vdup2(const float *p) /* p[0], p[1], p[0], p[1], ... */
{
    double d;
    memcpy(&d, p, sizeof d);
    return _mm512_castpd_ps(_mm512_set1_pd(d));
}
VINLINE vf hzip(vh a, vh b)
{
    const __m512i ix = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutex2var_ps(_mm512_castps256_ps512(a), ix, _mm512_castps256_ps512(b));
}
VINLINE void hunzip(vf x, vh *a, vh *b)
{
    const __m512i ev = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512 y = _mm512_permutexvar_ps(ev, x);
    *a = _mm512_castps512_ps256(y);
    *b = _mm512_extractf32x8_ps(y, 1);
}

VINLINE vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
VINLINE vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
VINLINE vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
VINLINE vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
VINLINE vf vsqrt(vf a) { return _mm512_sqrt_ps(a); }
VINLINE vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }  /* a*b + c */
VINLINE vf vfms(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }  /* a*b - c */
VINLINE vf vfnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); } /* c - a*b */
VINLINE vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
VINLINE vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }

VINLINE vm vgt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
VINLINE vm vnan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
VINLINE vm vmand(vm a, vm b) { return (vm)(a & b); }
VINLINE vm vmor(vm a, vm b) { return (vm)(a | b); }
VINLINE vm vmnot(vm a) { return (vm)~a; }
VINLINE int vmany(vm a) { return a != 0; }
VINLINE vf vsel(vm m, vf a, vf b) { return _mm512_mask_mov_ps(b, m, a); } /* m ? a : b */
VINLINE vf vkeep(vm m, vf a) { return _mm512_maskz_mov_ps(m, a); }       /* m ? a : 0 */

/* x rounded to an integer, nearest even (|x| < 2^22); p * 2^n for an
 * integer-valued n in [-126, 127], rounded once (scalef here, a multiply
 * by 2^n built from exponent bits elsewhere: the same bits). Outside those
 * ranges (only in lanes vexp2's callers mask) the result is garbage, never
 * undefined behaviour. */
VINLINE vf vround(vf x)
{
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
VINLINE vf vldexp(vf p, vf n) { return _mm512_scalef_ps(p, n); }

/* x = m * 2^e for a positive normal x: m in [1, 2), e an integer. */
VINLINE vf vsplit_exp(vf x, vf *e)
{
    __m512i u = _mm512_castps_si512(x);
    *e = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(u, 23), _mm512_set1_epi32(127)));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32(0x007fffff)),
                                               _mm512_set1_epi32(0x3f800000)));
}

/* The max over the lanes by vsum's tree, each step a > b ? a : b with a
 * the lower lanes. */
VINLINE float vmaxr(vf v)
{
    __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_max_ss(q, _mm_movehdup_ps(q)));
}

VINLINE float vsum(vf v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

/* bf16 rounding of every lane (bf16_bits in tensor.c says what it does) */
VINLINE vf vbf16(vf x)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i rne = _mm512_add_epi32(
        u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                            _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    __mmask16 isnan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                               _mm512_set1_epi32(0x7f800000));
    __mmask16 den = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    __m512i y = _mm512_mask_or_epi32(rne, isnan, u, _mm512_set1_epi32(0x00400000));
    y = _mm512_and_si512(y, _mm512_set1_epi32((int)0xffff0000u));
    return _mm512_castsi512_ps(_mm512_mask_and_epi32(y, den, u, _mm512_set1_epi32((int)0x80000000u)));
}

/* The bf16 tiles' tracker: the least of 2*bits(r) - 1 (unsigned) seen, so
 * that zero maps to the top and tiny nonzero results below 2^24. */
VINLINE vu vtrack_init(void) { return _mm512_set1_epi32(-1); }
VINLINE vu vtrack(vu lo, vf r)
{
    __m512i u = _mm512_castps_si512(r);
    return _mm512_min_epu32(lo, _mm512_sub_epi32(_mm512_add_epi32(u, u), _mm512_set1_epi32(1)));
}
VINLINE vu vtrack_min(vu a, vu b) { return _mm512_min_epu32(a, b); }
VINLINE int vtrack_tiny(vu lo) /* any result with 0 < |r| < 2^-126 * (1 + ...) */
{
    return _mm512_cmplt_epu32_mask(lo, _mm512_set1_epi32(0x1000000)) != 0;
}
/* x86 flushes in hardware (vflush_begin); vpin makes x's value exist at
 * this point of the program, so no sum moves past the flush's end (by
 * value: an address taken would keep a tile in memory under clang). */
#define VEC_HW_FLUSH 1
VINLINE vf vpin(vf x)
{
    __asm__ volatile("" : "+v"(x));
    return x;
}

/* ======================================================================
 * AVX2 + FMA: two __m256, lanes 0-7 and 8-15; masks as all-ones lanes.
 * ====================================================================== */
#elif defined(VEC_AVX2)
#include <immintrin.h>
#define VEC_NAME "avx2"

typedef struct { __m256 h[2]; } vf;
typedef struct { __m256 h[2]; } vm;
typedef struct { __m256i h[2]; } vu;

#define VEC2(expr0, expr1) ((vf){{(expr0), (expr1)}})

VINLINE vf vzero(void) { return VEC2(_mm256_setzero_ps(), _mm256_setzero_ps()); }
VINLINE vf vset(float x) { return VEC2(_mm256_set1_ps(x), _mm256_set1_ps(x)); }
VINLINE vf vload(const float *p) { return VEC2(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }

VINLINE void vstore(float *p, vf v)
{
    _mm256_storeu_ps(p, v.h[0]);
    _mm256_storeu_ps(p + 8, v.h[1]);
}
VINLINE __m256i vlanes8(int n) /* lanes 0..n-1 of 8 */
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
VINLINE vm vlanes(int n)
{
    vm m = {{_mm256_castsi256_ps(vlanes8(n)), _mm256_castsi256_ps(vlanes8(n - 8))}};
    return m;
}
VINLINE vf vload_n(const float *p, int n)
{
    if (n >= 16)
        return vload(p);
    return VEC2(_mm256_maskload_ps(p, vlanes8(n)), _mm256_maskload_ps(p + 8, vlanes8(n - 8)));
}
VINLINE void vstore_n(float *p, vf v, int n)
{
    if (n >= 16) {
        vstore(p, v);
        return;
    }
    _mm256_maskstore_ps(p, vlanes8(n), v.h[0]);
    _mm256_maskstore_ps(p + 8, vlanes8(n - 8), v.h[1]);
}


/* The half vector: 8 lanes, one ymm (see "half vectors" below). */
typedef __m256 vh;
VINLINE vh hzero(void) { return _mm256_setzero_ps(); }
VINLINE vh hset(float x) { return _mm256_set1_ps(x); }
VINLINE vh hfma(vh a, vh b, vh c) { return _mm256_fmadd_ps(a, b, c); }
VINLINE vh hmul(vh a, vh b) { return _mm256_mul_ps(a, b); }
VINLINE vh hload_n(const float *p, int n)
{
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, vlanes8(n));
}
VINLINE void hstore_n(float *p, vh v, int n)
{
    if (n >= 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, vlanes8(n), v);
}
VINLINE vh hadd(vh a, vh b) { return _mm256_add_ps(a, b); }
VINLINE vf vdup2(const float *p)
{
    double d;
    memcpy(&d, p, sizeof d);
    __m256 t = _mm256_castpd_ps(_mm256_set1_pd(d));
    vf r = {{t, t}};
    return r;
}
VINLINE vf hzip(vh a, vh b)
{
    __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b); /* by 128-bit lane */
    vf r = {{_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31)}};
    return r;
}
VINLINE void hunzip(vf x, vh *a, vh *b)
{
    __m256 e = _mm256_shuffle_ps(x.h[0], x.h[1], _MM_SHUFFLE(2, 0, 2, 0)); /* 0 2 8 10 | 4 6 12 14 */
    __m256 o = _mm256_shuffle_ps(x.h[0], x.h[1], _MM_SHUFFLE(3, 1, 3, 1));
    *a = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    *b = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}

#define VEC2_OP(name, call)                                                                    \
    VINLINE vf name(vf a, vf b) { return VEC2(call(a.h[0], b.h[0]), call(a.h[1], b.h[1])); }
VEC2_OP(vadd, _mm256_add_ps)
VEC2_OP(vsub, _mm256_sub_ps)
VEC2_OP(vmul, _mm256_mul_ps)
VEC2_OP(vdiv, _mm256_div_ps)
VEC2_OP(vmax, _mm256_max_ps)
VEC2_OP(vmin, _mm256_min_ps)
VINLINE vf vsqrt(vf a) { return VEC2(_mm256_sqrt_ps(a.h[0]), _mm256_sqrt_ps(a.h[1])); }
VINLINE vf vfma(vf a, vf b, vf c)
{
    return VEC2(_mm256_fmadd_ps(a.h[0], b.h[0], c.h[0]), _mm256_fmadd_ps(a.h[1], b.h[1], c.h[1]));
}
VINLINE vf vfms(vf a, vf b, vf c)
{
    return VEC2(_mm256_fmsub_ps(a.h[0], b.h[0], c.h[0]), _mm256_fmsub_ps(a.h[1], b.h[1], c.h[1]));
}
VINLINE vf vfnma(vf a, vf b, vf c)
{
    return VEC2(_mm256_fnmadd_ps(a.h[0], b.h[0], c.h[0]),
                _mm256_fnmadd_ps(a.h[1], b.h[1], c.h[1]));
}

VINLINE vm vgt(vf a, vf b)
{
    vm m = {{_mm256_cmp_ps(a.h[0], b.h[0], _CMP_GT_OQ), _mm256_cmp_ps(a.h[1], b.h[1], _CMP_GT_OQ)}};
    return m;
}
VINLINE vm vnan(vf a)
{
    vm m = {{_mm256_cmp_ps(a.h[0], a.h[0], _CMP_UNORD_Q),
             _mm256_cmp_ps(a.h[1], a.h[1], _CMP_UNORD_Q)}};
    return m;
}
VINLINE vm vmand(vm a, vm b)
{
    vm m = {{_mm256_and_ps(a.h[0], b.h[0]), _mm256_and_ps(a.h[1], b.h[1])}};
    return m;
}
VINLINE vm vmor(vm a, vm b)
{
    vm m = {{_mm256_or_ps(a.h[0], b.h[0]), _mm256_or_ps(a.h[1], b.h[1])}};
    return m;
}
VINLINE vm vmnot(vm a)
{
    __m256 ones = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    vm m = {{_mm256_xor_ps(a.h[0], ones), _mm256_xor_ps(a.h[1], ones)}};
    return m;
}
VINLINE int vmany(vm a) { return _mm256_movemask_ps(_mm256_or_ps(a.h[0], a.h[1])) != 0; }
VINLINE vf vsel(vm m, vf a, vf b)
{
    return VEC2(_mm256_blendv_ps(b.h[0], a.h[0], m.h[0]), _mm256_blendv_ps(b.h[1], a.h[1], m.h[1]));
}
VINLINE vf vkeep(vm m, vf a) { return VEC2(_mm256_and_ps(m.h[0], a.h[0]), _mm256_and_ps(m.h[1], a.h[1])); }

VINLINE vf vround(vf x)
{
    return VEC2(_mm256_round_ps(x.h[0], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                _mm256_round_ps(x.h[1], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
VINLINE __m256 vpow2i8(__m256 n)
{
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                  23);
    return _mm256_castsi256_ps(e);
}
VINLINE vf vldexp(vf p, vf n) { return vmul(p, VEC2(vpow2i8(n.h[0]), vpow2i8(n.h[1]))); }

VINLINE __m256 vsplit_exp8(__m256 x, __m256 *e)
{
    __m256i u = _mm256_castps_si256(x);
    *e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(127)));
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(0x007fffff)),
                                               _mm256_set1_epi32(0x3f800000)));
}
VINLINE vf vsplit_exp(vf x, vf *e)
{
    vf m;
    m.h[0] = vsplit_exp8(x.h[0], &e->h[0]);
    m.h[1] = vsplit_exp8(x.h[1], &e->h[1]);
    return m;
}

VINLINE float vmaxr(vf v)
{
    __m256 h = _mm256_max_ps(v.h[0], v.h[1]);
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_max_ss(q, _mm_movehdup_ps(q)));
}

VINLINE float vsum(vf v)
{
    __m256 h = _mm256_add_ps(v.h[0], v.h[1]);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

VINLINE __m256i vbf16_8(__m256i u)
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
VINLINE vf vbf16(vf x)
{
    return VEC2(_mm256_castsi256_ps(vbf16_8(_mm256_castps_si256(x.h[0]))),
                _mm256_castsi256_ps(vbf16_8(_mm256_castps_si256(x.h[1]))));
}

VINLINE vu vtrack_init(void)
{
    vu t = {{_mm256_set1_epi32(-1), _mm256_set1_epi32(-1)}};
    return t;
}
VINLINE __m256i vtrack8(__m256i lo, __m256 r)
{
    __m256i u = _mm256_castps_si256(r);
    return _mm256_min_epu32(lo, _mm256_sub_epi32(_mm256_add_epi32(u, u), _mm256_set1_epi32(1)));
}
VINLINE vu vtrack(vu lo, vf r)
{
    vu t = {{vtrack8(lo.h[0], r.h[0]), vtrack8(lo.h[1], r.h[1])}};
    return t;
}
VINLINE vu vtrack_min(vu a, vu b)
{
    vu t = {{_mm256_min_epu32(a.h[0], b.h[0]), _mm256_min_epu32(a.h[1], b.h[1])}};
    return t;
}
VINLINE int vtrack_tiny(vu lo)
{
    __m256i least = _mm256_min_epu32(lo.h[0], lo.h[1]);
    __m256i tiny = _mm256_cmpeq_epi32(_mm256_min_epu32(least, _mm256_set1_epi32(0xffffff)), least);
    return _mm256_movemask_ps(_mm256_castsi256_ps(tiny)) != 0;
}
#define VEC_HW_FLUSH 1 /* as AVX-512's */
VINLINE vf vpin(vf x)
{
    __asm__ volatile("" : "+x"(x.h[0]), "+x"(x.h[1]));
    return x;
}

/* ======================================================================
 * NEON (arm64): four float32x4_t, lanes 0-3, 4-7, 8-11, 12-15.
 * ====================================================================== */
#elif defined(VEC_NEON)
#include <arm_neon.h>
#define VEC_NAME "neon"

typedef struct { float32x4_t q[4]; } vf;
typedef struct { uint32x4_t q[4]; } vm;
typedef struct { uint32x4_t q[4]; } vu;

#define VEC4(f) ((vf){{f(0), f(1), f(2), f(3)}})
#define VM4(f) ((vm){{f(0), f(1), f(2), f(3)}})

VINLINE vf vzero(void)
{
#define Z_(i) vdupq_n_f32(0.0f)
    return VEC4(Z_);
#undef Z_
}
VINLINE vf vset(float x)
{
#define S_(i) vdupq_n_f32(x)
    return VEC4(S_);
#undef S_
}
VINLINE vf vload(const float *p)
{
#define L_(i) vld1q_f32(p + 4 * (i))
    return VEC4(L_);
#undef L_
}
VINLINE void vstore(float *p, vf v)
{
    for (int i = 0; i < 4; i++)
        vst1q_f32(p + 4 * i, v.q[i]);
}

VINLINE vm vlanes(int n)
{
    static const int32_t idx[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int32x4_t nv = vdupq_n_s32(n);
#define M_(i) vcltq_s32(vld1q_s32(idx + 4 * (i)), nv)
    return VM4(M_);
#undef M_
}
VINLINE vf vload_n(const float *p, int n)
{
    if (n >= 16)
        return vload(p);
    float t[16] = {0};
    if (n > 0)
        memcpy(t, p, sizeof(float) * (size_t)n);
    return vload(t);
}
VINLINE void vstore_n(float *p, vf v, int n)
{
    if (n >= 16) {
        vstore(p, v);
        return;
    }
    float t[16];
    vstore(t, v);
    if (n > 0)
        memcpy(p, t, sizeof(float) * (size_t)n);
}

/* The half vector: 8 lanes, two q registers. */
typedef struct { float32x4_t q[2]; } vh;
VINLINE vh hzero(void)
{
    vh r = {{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}};
    return r;
}
VINLINE vh hset(float x)
{
    vh r = {{vdupq_n_f32(x), vdupq_n_f32(x)}};
    return r;
}
VINLINE vh hfma(vh a, vh b, vh c)
{
    vh r = {{vfmaq_f32(c.q[0], a.q[0], b.q[0]), vfmaq_f32(c.q[1], a.q[1], b.q[1])}};
    return r;
}
VINLINE vh hmul(vh a, vh b)
{
    vh r = {{vmulq_f32(a.q[0], b.q[0]), vmulq_f32(a.q[1], b.q[1])}};
    return r;
}
VINLINE vh hload_n(const float *p, int n)
{
    float t[8] = {0};
    if (n >= 8)
        memcpy(t, p, sizeof t);
    else if (n > 0)
        memcpy(t, p, sizeof(float) * (size_t)n);
    vh r = {{vld1q_f32(t), vld1q_f32(t + 4)}};
    return r;
}
VINLINE void hstore_n(float *p, vh v, int n)
{
    float t[8];
    vst1q_f32(t, v.q[0]);
    vst1q_f32(t + 4, v.q[1]);
    if (n > 0)
        memcpy(p, t, sizeof(float) * (size_t)(n < 8 ? n : 8));
}
VINLINE vh hadd(vh a, vh b)
{
    vh r = {{vaddq_f32(a.q[0], b.q[0]), vaddq_f32(a.q[1], b.q[1])}};
    return r;
}
VINLINE vf vdup2(const float *p)
{
    float32x4_t t = vcombine_f32(vld1_f32(p), vld1_f32(p));
    vf r = {{t, t, t, t}};
    return r;
}
VINLINE vf hzip(vh a, vh b)
{
    vf r = {{vzip1q_f32(a.q[0], b.q[0]), vzip2q_f32(a.q[0], b.q[0]), vzip1q_f32(a.q[1], b.q[1]),
             vzip2q_f32(a.q[1], b.q[1])}};
    return r;
}
VINLINE void hunzip(vf x, vh *a, vh *b)
{
    a->q[0] = vuzp1q_f32(x.q[0], x.q[1]), a->q[1] = vuzp1q_f32(x.q[2], x.q[3]);
    b->q[0] = vuzp2q_f32(x.q[0], x.q[1]), b->q[1] = vuzp2q_f32(x.q[2], x.q[3]);
}

#define VEC4_OP(name, call)                                                                    \
    VINLINE vf name(vf a, vf b)                                                                \
    {                                                                                          \
        vf r;                                                                                  \
        for (int i = 0; i < 4; i++)                                                            \
            r.q[i] = call(a.q[i], b.q[i]);                                                     \
        return r;                                                                              \
    }
VEC4_OP(vadd, vaddq_f32)
VEC4_OP(vsub, vsubq_f32)
VEC4_OP(vmul, vmulq_f32)
VEC4_OP(vdiv, vdivq_f32)
VINLINE vf vsqrt(vf a)
{
    vf r;
    for (int i = 0; i < 4; i++)
        r.q[i] = vsqrtq_f32(a.q[i]);
    return r;
}
VINLINE vf vfma(vf a, vf b, vf c)
{
    vf r;
    for (int i = 0; i < 4; i++)
        r.q[i] = vfmaq_f32(c.q[i], a.q[i], b.q[i]);
    return r;
}
VINLINE vf vfms(vf a, vf b, vf c) /* a*b - c = a*b + (-c), one rounding */
{
    vf r;
    for (int i = 0; i < 4; i++)
        r.q[i] = vfmaq_f32(vnegq_f32(c.q[i]), a.q[i], b.q[i]);
    return r;
}
VINLINE vf vfnma(vf a, vf b, vf c) /* c - a*b */
{
    vf r;
    for (int i = 0; i < 4; i++)
        r.q[i] = vfmsq_f32(c.q[i], a.q[i], b.q[i]);
    return r;
}
VINLINE vm vgt(vf a, vf b)
{
    vm m;
    for (int i = 0; i < 4; i++)
        m.q[i] = vcgtq_f32(a.q[i], b.q[i]);
    return m;
}
VINLINE vm vnan(vf a)
{
    vm m;
    for (int i = 0; i < 4; i++)
        m.q[i] = vmvnq_u32(vceqq_f32(a.q[i], a.q[i]));
    return m;
}
VINLINE vm vmand(vm a, vm b)
{
    vm m;
    for (int i = 0; i < 4; i++)
        m.q[i] = vandq_u32(a.q[i], b.q[i]);
    return m;
}
VINLINE vm vmor(vm a, vm b)
{
    vm m;
    for (int i = 0; i < 4; i++)
        m.q[i] = vorrq_u32(a.q[i], b.q[i]);
    return m;
}
VINLINE vm vmnot(vm a)
{
    vm m;
    for (int i = 0; i < 4; i++)
        m.q[i] = vmvnq_u32(a.q[i]);
    return m;
}
VINLINE int vmany(vm a)
{
    uint32x4_t o = vorrq_u32(vorrq_u32(a.q[0], a.q[1]), vorrq_u32(a.q[2], a.q[3]));
    return vmaxvq_u32(o) != 0;
}
VINLINE vf vsel(vm m, vf a, vf b)
{
    vf r;
    for (int i = 0; i < 4; i++)
        r.q[i] = vbslq_f32(m.q[i], a.q[i], b.q[i]);
    return r;
}
VINLINE vf vkeep(vm m, vf a) { return vsel(m, a, vzero()); }
/* x86's maxps and minps, not NEON's fmax/fmin (which differ on -0, NaN) */
VINLINE float32x4_t vmax4(float32x4_t a, float32x4_t b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
VINLINE vf vmax(vf a, vf b) { return vsel(vgt(a, b), a, b); }
VINLINE vf vmin(vf a, vf b) { return vsel(vgt(b, a), a, b); }

VINLINE vf vround(vf x)
{
    vf r;
    for (int i = 0; i < 4; i++)
        r.q[i] = vrndnq_f32(x.q[i]);
    return r;
}
VINLINE vf vldexp(vf p, vf n)
{
    vf r;
    for (int i = 0; i < 4; i++)
        r.q[i] = vmulq_f32(p.q[i], vreinterpretq_f32_s32(vshlq_n_s32(
                                       vaddq_s32(vcvtnq_s32_f32(n.q[i]), vdupq_n_s32(127)), 23)));
    return r;
}

VINLINE vf vsplit_exp(vf x, vf *e)
{
    vf m;
    for (int i = 0; i < 4; i++) {
        uint32x4_t u = vreinterpretq_u32_f32(x.q[i]);
        e->q[i] = vcvtq_f32_s32(
            vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(u, 23)), vdupq_n_s32(127)));
        m.q[i] = vreinterpretq_f32_u32(
            vorrq_u32(vandq_u32(u, vdupq_n_u32(0x007fffff)), vdupq_n_u32(0x3f800000)));
    }
    return m;
}

VINLINE float vmaxr(vf v)
{
    float32x4_t a = vmax4(v.q[0], v.q[2]), b = vmax4(v.q[1], v.q[3]); /* i, i+8 */
    float32x4_t c = vmax4(a, b);                                        /* i, i+4 */
    float32x4_t d = vmax4(c, vextq_f32(c, c, 2));                       /* i, i+2 */
    float x = vgetq_lane_f32(d, 0), y = vgetq_lane_f32(d, 1);
    return x > y ? x : y;
}

VINLINE float vsum(vf v)
{
    float32x4_t a = vaddq_f32(v.q[0], v.q[2]), b = vaddq_f32(v.q[1], v.q[3]); /* i + i+8 */
    float32x4_t c = vaddq_f32(a, b);                                            /* i + i+4 */
    float32x2_t d = vadd_f32(vget_low_f32(c), vget_high_f32(c));                /* i + i+2 */
    return vget_lane_f32(d, 0) + vget_lane_f32(d, 1);
}

VINLINE uint32x4_t vbf16_4(uint32x4_t u)
{
    uint32x4_t rne = vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff),
                                            vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1))));
    uint32x4_t quiet = vorrq_u32(u, vdupq_n_u32(0x00400000));
    uint32x4_t isnan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    uint32x4_t den = vceqq_u32(vandq_u32(u, vdupq_n_u32(0x7f800000)), vdupq_n_u32(0));
    uint32x4_t y = vandq_u32(vbslq_u32(isnan, quiet, rne), vdupq_n_u32(0xffff0000u));
    return vbslq_u32(den, vandq_u32(u, vdupq_n_u32(0x80000000u)), y);
}
VINLINE vf vbf16(vf x)
{
    vf r;
    for (int i = 0; i < 4; i++)
        r.q[i] = vreinterpretq_f32_u32(vbf16_4(vreinterpretq_u32_f32(x.q[i])));
    return r;
}

VINLINE vu vtrack_init(void)
{
    vu t;
    for (int i = 0; i < 4; i++)
        t.q[i] = vdupq_n_u32(0xffffffffu);
    return t;
}
VINLINE vu vtrack(vu lo, vf r)
{
    vu t;
    for (int i = 0; i < 4; i++) {
        uint32x4_t u = vreinterpretq_u32_f32(r.q[i]);
        t.q[i] = vminq_u32(lo.q[i], vsubq_u32(vaddq_u32(u, u), vdupq_n_u32(1)));
    }
    return t;
}
VINLINE vu vtrack_min(vu a, vu b)
{
    vu t;
    for (int i = 0; i < 4; i++)
        t.q[i] = vminq_u32(a.q[i], b.q[i]);
    return t;
}
VINLINE int vtrack_tiny(vu lo)
{
    uint32x4_t m = vminq_u32(vminq_u32(lo.q[0], lo.q[1]), vminq_u32(lo.q[2], lo.q[3]));
    return vminvq_u32(m) < 0x1000000u;
}
/* No hardware flush that matches: arm64's flush-to-zero judges tininess
 * before rounding, vdpbf16ps after. The tiles track instead. */
#define VEC_HW_FLUSH 0
VINLINE vf vpin(vf x) { return x; }

/* ======================================================================
 * Plain C: 16 floats. fmaf is one IEEE fused multiply-add everywhere
 * (an instruction on arm64 and FMA x86 CPUs, exact software otherwise).
 * ====================================================================== */
#else
#include <math.h>
#define VEC_PLAIN 1
#define VEC_NAME "scalar"

typedef struct { float f[16]; } vf;
typedef struct { uint16_t bits; } vm;
typedef struct { uint32_t u[16]; } vu;

#define VFOR for (int i_ = 0; i_ < 16; i_++)

VINLINE vf vzero(void)
{
    vf r;
    VFOR r.f[i_] = 0.0f;
    return r;
}
VINLINE vf vset(float x)
{
    vf r;
    VFOR r.f[i_] = x;
    return r;
}
VINLINE vf vload(const float *p)
{
    vf r;
    memcpy(r.f, p, sizeof r.f);
    return r;
}
VINLINE void vstore(float *p, vf v) { memcpy(p, v.f, sizeof v.f); }

VINLINE vm vlanes(int n)
{
    vm m = {(uint16_t)(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1)};
    return m;
}
VINLINE vf vload_n(const float *p, int n)
{
    vf r = vzero();
    if (n > 0)
        memcpy(r.f, p, sizeof(float) * (size_t)(n < 16 ? n : 16));
    return r;
}
VINLINE void vstore_n(float *p, vf v, int n)
{
    if (n > 0)
        memcpy(p, v.f, sizeof(float) * (size_t)(n < 16 ? n : 16));
}

/* The half vector: 8 floats. */
typedef struct { float f[8]; } vh;
VINLINE vh hzero(void)
{
    vh r;
    for (int i = 0; i < 8; i++)
        r.f[i] = 0.0f;
    return r;
}
VINLINE vh hset(float x)
{
    vh r;
    for (int i = 0; i < 8; i++)
        r.f[i] = x;
    return r;
}
VINLINE vh hfma(vh a, vh b, vh c)
{
    for (int i = 0; i < 8; i++)
        c.f[i] = fmaf(a.f[i], b.f[i], c.f[i]);
    return c;
}
VINLINE vh hmul(vh a, vh b)
{
    for (int i = 0; i < 8; i++)
        a.f[i] = a.f[i] * b.f[i];
    return a;
}
VINLINE vh hload_n(const float *p, int n)
{
    vh r = hzero();
    if (n > 0)
        memcpy(r.f, p, sizeof(float) * (size_t)(n < 8 ? n : 8));
    return r;
}
VINLINE void hstore_n(float *p, vh v, int n)
{
    if (n > 0)
        memcpy(p, v.f, sizeof(float) * (size_t)(n < 8 ? n : 8));
}
VINLINE vh hadd(vh a, vh b)
{
    for (int i = 0; i < 8; i++)
        a.f[i] = a.f[i] + b.f[i];
    return a;
}
VINLINE vf vdup2(const float *p)
{
    vf r;
    for (int i = 0; i < 16; i++)
        r.f[i] = p[i & 1];
    return r;
}
VINLINE vf hzip(vh a, vh b)
{
    vf r;
    for (int c = 0; c < 8; c++)
        r.f[2 * c] = a.f[c], r.f[2 * c + 1] = b.f[c];
    return r;
}
VINLINE void hunzip(vf x, vh *a, vh *b)
{
    for (int c = 0; c < 8; c++)
        a->f[c] = x.f[2 * c], b->f[c] = x.f[2 * c + 1];
}

#define VPLAIN_OP(name, expr)                                                                  \
    VINLINE vf name(vf a, vf b)                                                                \
    {                                                                                          \
        vf r;                                                                                  \
        VFOR r.f[i_] = expr;                                                                   \
        return r;                                                                              \
    }
VPLAIN_OP(vadd, a.f[i_] + b.f[i_])
VPLAIN_OP(vsub, a.f[i_] - b.f[i_])
VPLAIN_OP(vmul, a.f[i_] * b.f[i_])
VPLAIN_OP(vdiv, a.f[i_] / b.f[i_])
VPLAIN_OP(vmax, a.f[i_] > b.f[i_] ? a.f[i_] : b.f[i_])
VPLAIN_OP(vmin, a.f[i_] < b.f[i_] ? a.f[i_] : b.f[i_])
VINLINE vf vsqrt(vf a)
{
    vf r;
    VFOR r.f[i_] = sqrtf(a.f[i_]);
    return r;
}
VINLINE vf vfma(vf a, vf b, vf c)
{
    vf r;
    VFOR r.f[i_] = fmaf(a.f[i_], b.f[i_], c.f[i_]);
    return r;
}
VINLINE vf vfms(vf a, vf b, vf c)
{
    vf r;
    VFOR r.f[i_] = fmaf(a.f[i_], b.f[i_], -c.f[i_]);
    return r;
}
VINLINE vf vfnma(vf a, vf b, vf c)
{
    vf r;
    VFOR r.f[i_] = fmaf(-a.f[i_], b.f[i_], c.f[i_]);
    return r;
}
VINLINE vm vgt(vf a, vf b)
{
    vm m = {0};
    VFOR m.bits |= (uint16_t)((a.f[i_] > b.f[i_]) << i_);
    return m;
}
VINLINE vm vnan(vf a)
{
    vm m = {0};
    VFOR m.bits |= (uint16_t)((a.f[i_] != a.f[i_]) << i_);
    return m;
}
VINLINE vm vmand(vm a, vm b) { return (vm){(uint16_t)(a.bits & b.bits)}; }
VINLINE vm vmor(vm a, vm b) { return (vm){(uint16_t)(a.bits | b.bits)}; }
VINLINE vm vmnot(vm a) { return (vm){(uint16_t)~a.bits}; }
VINLINE int vmany(vm a) { return a.bits != 0; }
VINLINE vf vsel(vm m, vf a, vf b)
{
    vf r;
    VFOR r.f[i_] = (m.bits >> i_) & 1 ? a.f[i_] : b.f[i_];
    return r;
}
VINLINE vf vkeep(vm m, vf a) { return vsel(m, a, vzero()); }

/* Round to nearest even by the 1.5 * 2^23 trick: exact for |x| < 2^22
 * under the default rounding mode, and no libm. */
VINLINE vf vround(vf x)
{
    vf r;
    VFOR
    {
        float t = x.f[i_] + 12582912.0f; /* no -ffast-math: both roundings stay */
        r.f[i_] = t - 12582912.0f;
    }
    return r;
}
VINLINE vf vldexp(vf p, vf n)
{
    vf r;
    VFOR
    {
        /* n outside [-126, 127] (a masked lane of vexp2's) is clamped before
         * the conversion, which C leaves undefined out of int's range */
        float k = n.f[i_] >= -126.0f ? (n.f[i_] <= 127.0f ? n.f[i_] : 127.0f) : -126.0f;
        uint32_t e = n.f[i_] == n.f[i_] ? (uint32_t)((int32_t)k + 127) << 23 : 0;
        float scale;
        memcpy(&scale, &e, sizeof e);
        r.f[i_] = p.f[i_] * scale;
    }
    return r;
}

VINLINE vf vsplit_exp(vf x, vf *e)
{
    vf m;
    VFOR
    {
        uint32_t u;
        memcpy(&u, &x.f[i_], sizeof u);
        e->f[i_] = (float)((int32_t)(u >> 23) - 127);
        u = (u & 0x007fffffu) | 0x3f800000u;
        memcpy(&m.f[i_], &u, sizeof u);
    }
    return m;
}

VINLINE float vmaxr(vf v)
{
    float t[8];
    for (int i = 0; i < 8; i++)
        t[i] = v.f[i] > v.f[i + 8] ? v.f[i] : v.f[i + 8];
    for (int i = 0; i < 4; i++)
        t[i] = t[i] > t[i + 4] ? t[i] : t[i + 4];
    for (int i = 0; i < 2; i++)
        t[i] = t[i] > t[i + 2] ? t[i] : t[i + 2];
    return t[0] > t[1] ? t[0] : t[1];
}

VINLINE float vsum(vf v)
{
    float t[8];
    for (int i = 0; i < 8; i++)
        t[i] = v.f[i] + v.f[i + 8];
    for (int i = 0; i < 4; i++)
        t[i] = t[i] + t[i + 4];
    for (int i = 0; i < 2; i++)
        t[i] = t[i] + t[i + 2];
    return t[0] + t[1];
}

VINLINE vf vbf16(vf x)
{
    vf r;
    VFOR
    {
        uint32_t u, y;
        memcpy(&u, &x.f[i_], sizeof u);
        if ((u & 0x7f800000u) == 0)
            y = u & 0x80000000u;
        else if ((u & 0x7fffffffu) > 0x7f800000u)
            y = (u | 0x00400000u) & 0xffff0000u;
        else
            y = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
        memcpy(&r.f[i_], &y, sizeof y);
    }
    return r;
}

VINLINE vu vtrack_init(void)
{
    vu t;
    VFOR t.u[i_] = 0xffffffffu;
    return t;
}
VINLINE vu vtrack(vu lo, vf r)
{
    VFOR
    {
        uint32_t u;
        memcpy(&u, &r.f[i_], sizeof u);
        u = u + u - 1;
        lo.u[i_] = u < lo.u[i_] ? u : lo.u[i_];
    }
    return lo;
}
VINLINE vu vtrack_min(vu a, vu b)
{
    VFOR a.u[i_] = b.u[i_] < a.u[i_] ? b.u[i_] : a.u[i_];
    return a;
}
VINLINE int vtrack_tiny(vu lo)
{
    int tiny = 0;
    VFOR tiny |= lo.u[i_] < 0x1000000u;
    return tiny;
}
#define VEC_HW_FLUSH 0 /* plain C has no portable flush mode */
VINLINE vf vpin(vf x) { return x; }
#endif

/* vdpbf16ps's flushing by the hardware (x86): MXCSR's DAZ (denormal
 * operands read as zero) and FTZ (a result tiny after rounding with
 * unbounded exponent becomes zero of its sign; x86 judges tininess after
 * rounding, as the instruction does) for the stretch between begin and
 * end, the calling thread only. Where VEC_HW_FLUSH is 0 they do nothing. */
#if VEC_HW_FLUSH
enum {
    MXCSR_DAZ = 0x0040,
    MXCSR_MASKS = 0x1f80,    /* every exception masked: no trap, as the instruction */
    MXCSR_ROUNDING = 0x6000, /* 0: to nearest even, the instruction's only mode */
    MXCSR_FTZ = 0x8000,
};
/* The caller's mode comes back whole at the end (the sticky exception
 * flags raised in between with it: nothing reads them). */
VINLINE unsigned vflush_begin(void)
{
    unsigned csr = _mm_getcsr();
    _mm_setcsr((csr & ~(unsigned)MXCSR_ROUNDING) | MXCSR_MASKS | MXCSR_DAZ | MXCSR_FTZ);
    return csr;
}
VINLINE void vflush_end(unsigned csr) { _mm_setcsr(csr); }
#else
VINLINE unsigned vflush_begin(void) { return 0; }
VINLINE void vflush_end(unsigned csr) { (void)csr; }
#endif

/* ======================================================================
 * Built on the above, the same on every backend.
 * ====================================================================== */

VINLINE vf vrelu(vf x) { return vmax(x, vzero()); } /* x > 0 ? x : 0 (NaN, -0 give +0) */

/* Lane i of a vector, and the lane of index k alone. */
VINLINE float vlane(vf v, int i)
{
    float t[16];
    vstore(t, v);
    return t[i];
}
VINLINE vm vlane_is(int k) { return vmand(vlanes(k + 1), vmnot(vlanes(k))); }

/* dst[c, r] = src[r, c] for rows r < R and columns c < K (dst's rows dld
 * apart, src's sld apart): data movement, no arithmetic, so any way of
 * doing it gives the same bits. x86: 8 x 8 blocks by shuffles, the edges
 * one by one (one by one, the attention heads' transposes were a fifth of
 * the forward pass). The block's loops are unrolled so that its rows stay
 * in registers: left to itself, gcc kept them in arrays on the stack, and
 * the attention forward took 1.05x as long. */
VINLINE void vtranspose(float *dst, size_t dld, const float *src, size_t sld, int R, int K)
{
    int r0 = 0;
#if defined(VEC_AVX512) || defined(VEC_AVX2)
    for (; r0 + 8 <= R; r0 += 8) {
        int c0 = 0;
        for (; c0 + 8 <= K; c0 += 8) {
            __m256 x[8], t[8], u[8];
UNROLL(8)
            for (int k = 0; k < 8; k++)
                x[k] = _mm256_loadu_ps(src + (size_t)(r0 + k) * sld + c0);
UNROLL(4)
            for (int k = 0; k < 8; k += 2) {
                t[k] = _mm256_unpacklo_ps(x[k], x[k + 1]);
                t[k + 1] = _mm256_unpackhi_ps(x[k], x[k + 1]);
            }
UNROLL(2)
            for (int k = 0; k < 8; k += 4) {
                u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
                u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
                u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
                u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
            }
UNROLL(4)
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
#endif
    for (int c = 0; c < K; c++)
        for (int r = r0; r < R; r++)
            dst[(size_t)c * dld + r] = src[(size_t)r * sld + c];
}

/* 2^f for |f| <= 1/2, highest power first: a degree-6 fit of relative
 * error below 8e-8 (an ulp). */
#define EXP2_POLY_DEG 6
static const float exp2_poly[EXP2_POLY_DEG + 1] = {1.53467176e-4f, 1.33999391e-3f,
                                                   9.61848535e-3f, 5.55032864e-2f,
                                                   2.40226462e-1f, 6.93147182e-1f, 1.0f};

/* 2^x for x < 127.5, for the attention softmaxes, which keep their scores
 * in base 2 (their arguments are <= 0 but for rounding; a lane past that
 * gives garbage, which only a lane the caller masks can hold): x = n + f,
 * |f| <= 1/2, 2^f by exp2_poly, times 2^n from exponent bits. x is clamped
 * at -126 so that 2^n is a normal float: below it returns ~1e-38 instead
 * of a subnormal (harmless next to a softmax's 1); NaN gives NaN.
 * vexp2_n takes U <= 4 vectors in place, each step for all U before the
 * next, so that their chains overlap in the order the source gives them:
 * called once a row, clang 14 ran 4 rows' chains one after another. */
VINLINE void vexp2_n(vf *x /* [U] */, int U)
{
    vf n[4], f[4], p[4];
UNROLL(4)
    for (int u = 0; u < U; u++) {
        x[u] = vmax(vset(-126.0f), x[u]);
        n[u] = vround(x[u]);
        f[u] = vsub(x[u], n[u]); /* exact */
        p[u] = vset(exp2_poly[0]);
    }
UNROLL(6)
    for (int k = 1; k <= EXP2_POLY_DEG; k++)
UNROLL(4)
        for (int u = 0; u < U; u++)
            p[u] = vfma(p[u], f[u], vset(exp2_poly[k]));
UNROLL(4)
    for (int u = 0; u < U; u++)
        x[u] = vldexp(p[u], n[u]);
}

VINLINE vf vexp2(vf x)
{
    vexp2_n(&x, 1);
    return x;
}

/* e^x within ~2 ulp for x <= 88, as softmax and cross-entropy need (their
 * arguments are <= 0): x = n ln2 + r, |r| <= ln2/2 (ln2 in two parts), and
 * the degree-7 Taylor polynomial of e^r. Below -87 it returns ~1e-38
 * instead of a subnormal, harmless next to a softmax's 1. */
VINLINE vf vexp(vf x)
{
    x = vmin(vset(88.0f), vmax(vset(-87.0f), x));
    vf n = vround(vmul(x, vset(1.44269504f)));
    vf r = vfnma(n, vset(0.693147182f), x);
    r = vfnma(n, vset(-1.90465430e-9f), r);
    static const float taylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                    1.0f / 6,    0.5f,       1.0f,       1.0f};
    vf p = vset(taylor[0]);
    for (int k = 1; k < 8; k++)
        p = vfma(p, r, vset(taylor[k]));
    return vldexp(p, n);
}

/* ln(x) within ~1 ulp for positive normal x (a softmax's sum, >= 1):
 * x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln(m) = 2 atanh(s) with
 * s = (m - 1)/(m + 1), |s| < 0.172, by its series to s^9, and e ln2 in
 * two parts (ln2_hi has 16 bits, so e * ln2_hi is exact). */
VINLINE vf vlog(vf x)
{
    vf e, m = vsplit_exp(x, &e);
    vm big = vgt(m, vset(1.41421356f));
    m = vsel(big, vmul(m, vset(0.5f)), m); /* exact */
    e = vsel(big, vadd(e, vset(1.0f)), e);
    vf f = vsub(m, vset(1.0f)); /* exact */
    vf s = vdiv(f, vadd(f, vset(2.0f)));
    vf s2 = vadd(s, s), z = vmul(s, s);
    vf r = vfma(z, vset(1.0f / 9), vset(1.0f / 7));
    r = vfma(z, r, vset(1.0f / 5));
    r = vfma(z, r, vset(1.0f / 3));
    vf lnm = vfma(s2, vmul(z, r), s2);
    return vfma(e, vset(0.693145751953125f), vfma(e, vset(1.42860682e-6f), lnm));
}

#endif
