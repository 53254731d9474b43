/* tensor_ref.c: the contract of the compute kernels (see tensor.h).
 *
 * Two things live here, compiled once (the bf16 twins and the scalar model
 * of the matrix unit are tensor_bf16.c):
 *   - the plain-C twins (*_ref) of every kernel: the readable statement of
 *     what each computes (shapes, summation order), and the oracle the
 *     tests hold every backend of tensor.c to;
 *   - ISA dispatch (GPT_ISA, GPT_BF16) and the k_* entry points, which
 *     call the table of the current backend (tensor_impl.h). Embedding,
 *     transpose and dropout have one plain path, here: data movement and
 *     an experiment's path, where vectors buy little.
 *
 * The twins are plain loops: a sum is `s += x * y` (a multiply, then an
 * add), where the kernels use a fused multiply-add and 16 lanes, so twin
 * and kernel agree to rounding, not to the bit; every backend of the
 * kernels agrees with every other to the bit. The twins run in parallel
 * only over independent output rows, so their bits do not depend on the
 * thread count either. No libm on any path whose bits matter: fmath.h.
 *
 * Map, under "---- name ----" banners: ISA dispatch; matmul; leaves and
 * the tree; weight-gradient matmul; attention; dropout; layernorm; softmax
 * cross-entropy; element-wise; sums over rows; transpose; embedding;
 * Adam; the entry points. */
#include "kernels/tensor_impl.h"
#include "util/fmath.h"
#include "util/util.h"
#include <math.h>
#include <string.h>

/* ---- ISA dispatch ---- */

static int isa_best_cached = -1; /* decided once, on first use */
static int isa_current = -1;     /* -1: not chosen yet, means isa_best() */

#if defined(__x86_64__)
#define ISA_TOP ISA_AVX512
static const char *const isa_names[] = {"scalar", "avx2", "avx512"};
static const struct kernels *const isa_tables[] = {&kernels_scalar, &kernels_avx2,
                                                   &kernels_avx512};
#elif defined(__aarch64__)
#define ISA_TOP ISA_NEON
static const char *const isa_names[] = {"scalar", "neon"};
static const struct kernels *const isa_tables[] = {&kernels_scalar, &kernels_neon};
#else
#define ISA_TOP ISA_SCALAR
static const char *const isa_names[] = {"scalar"};
static const struct kernels *const isa_tables[] = {&kernels_scalar};
#endif

const char *isa_name(int isa) { return isa >= ISA_SCALAR && isa <= ISA_TOP ? isa_names[isa] : "?"; }

int isa_cpu(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return ISA_AVX2;
    return ISA_SCALAR;
#else
    return ISA_TOP; /* NEON is part of every arm64 CPU */
#endif
}

/* GPT_ISA may only lower the path: asking for more than the CPU has would
 * crash on an illegal instruction, so it is clamped instead. A name of
 * another architecture's path is an error. */
static int env_isa(int cpu)
{
    const char *e = getenv("GPT_ISA");
    if (!e || !*e)
        return cpu;
    for (int i = ISA_SCALAR; i <= ISA_TOP; i++)
        if (!strcmp(e, isa_name(i)))
            return i < cpu ? i : cpu;
    fprintf(stderr, "gpt: GPT_ISA=%s is not one of", e);
    for (int i = ISA_SCALAR; i <= ISA_TOP; i++)
        fprintf(stderr, "%s %s", i ? "," : "", isa_name(i));
    fprintf(stderr, "\n");
    exit(2);
}

int isa_top(void) { return ISA_TOP; }

int bf16_cpu(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#else
    return 0; /* the instruction is x86's */
#endif
}

int isa_best(void)
{
    int best = __atomic_load_n(&isa_best_cached, __ATOMIC_ACQUIRE);
    if (best < 0) { /* a racing second caller computes the same value */
        best = env_isa(isa_cpu());
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

const struct kernels *kernels_now(void) { return isa_tables[isa_get()]; }

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
        mode = bf16_cpu() && !(e && !strcmp(e, "emulate"));
        __atomic_store_n(&bf16_mode, mode, __ATOMIC_RELEASE);
    }
    return mode;
}

int bf16_native(void) { return kernels_now()->matmul_bf16_native && bf16_allowed(); }

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

void k_matmul_gated_ref(float *c /* [n,q] */, const float *a /* [n,p] */,
                        const float *b /* [p,q] */, const float *gate /* [n,q] */, int n, int p,
                        int q)
{
    k_matmul_ref(c, a, b, NULL, n, p, q);
    for (size_t i = 0; i < (size_t)n * q; i++)
        c[i] = gate[i] > 0 ? c[i] : 0.0f;
}

/* ---- leaves and the tree ---- */

/* dst = dst + src, element-wise: the tree's one operation. */
void add_plain(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dst[i] + src[i];
}

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
    float *part = kmalloc(sizeof(float) * (size_t)L * nc); /* [L,n,q] */
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
        s[j] = fm_expf(s[j] - mx);
        l += s[j];
    }
    for (int j = 0; j < nk; j++)
        s[j] /= l;
    return mx + fm_logf(l);
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
    float *s = kmalloc(sizeof(float) * (size_t)(pos + 1)); /* [pos+1] */
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
    float *s = kmalloc(sizeof(float) * (size_t)T); /* [T] */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *x = qkv + (size_t)b * T * 3 * C + 3 * hs * h; /* head's q, row 0 */
            attend_one_ref(out + (size_t)b * C + hs * h, x + (size_t)(T - 1) * 3 * C, x + hs,
                           x + 2 * hs, 3 * (size_t)C, T, hs, s);
        }
    free(s);
}

/* ---- dropout ---- */

int k_dropout_keep(const int32_t *key, long site, int32_t row, long col, float p)
{
    /* the element's id (site < 2^12, row < 2^28, col < 2^24) under the
     * step's key, then splitmix64's finalizer: 24 uniform bits */
    uint64_t k = (uint64_t)(uint32_t)key[0] | (uint64_t)(uint32_t)key[1] << 32;
    uint64_t id = ((uint64_t)site << 52) ^ ((uint64_t)(uint32_t)row << 24) ^ (uint64_t)col;
    uint64_t z = mix64(k ^ id);
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
    float *pw = kmalloc(sizeof(float) * 2 * (size_t)L * c); /* [L,c] partial dw */
    float *pb = pw + (size_t)L * c;                         /* [L,c] partial db */
    for (int l = 0; l < L; l++)
        layernorm_bwd_rows_ref(dx, pw + (size_t)l * c, pb + (size_t)l * c, dy, x, w, mean, rstd,
                               leaf_lo(l, n, seg), leaf_hi(l, n, seg), c);
    tree_finish(add_plain, dw, pw, L, (size_t)c);
    tree_finish(add_plain, db, pb, L, (size_t)c);
    free(pw);
}

void k_layernorm_bwd_res_ref(float *dx /* [n,c] */, float *dw /* [c] */, float *db /* [c] */,
                             const float *dy /* [n,c] */, const float *x /* [n,c] */,
                             const float *w /* [c] */, const float *mean /* [n] */,
                             const float *rstd /* [n] */, const float *r1 /* [n,c] or NULL */,
                             const float *r2 /* [n,c] or NULL */, int n, int c, int seg)
{
    if (seg > 0)
        k_layernorm_bwd_seg_ref(dx, dw, db, dy, x, w, mean, rstd, n, c, seg);
    else
        k_layernorm_bwd_ref(dx, dw, db, dy, x, w, mean, rstd, n, c);
    for (size_t i = 0; r1 && i < (size_t)n * c; i++)
        dx[i] = (r2 ? r1[i] + r2[i] : r1[i]) + dx[i];
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

void k_xent_grad_ref(float *loss /* [1] */, float *dlogits /* [n,v] */,
                     const float *logits /* [n,v] */, const int32_t *targets /* [n] */,
                     const float *dloss /* [1] */, int n, int v)
{
    k_xent_ref(loss, logits, targets, n, v);
    k_xent_bwd_ref(dlogits, logits, targets, dloss, n, v);
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

/* GELU, the tanh approximation, as x sigmoid(2u): 0.5 x (1 + tanh u) =
 * x e^u / (e^u + e^-u) = x / (1 + e^-2u). Unlike the other twins, these
 * give the kernels' bits exactly (an activation's few operations are
 * cheap to copy, and the model's every MLP runs them): each step below is
 * one IEEE operation in the kernels' order, with e^t computed as vec.h's
 * vexp does (exp_as_vexp). fmaf is one exactly rounded operation, like
 * + and *, so it gives the same bits everywhere (vec.h's plain-C backend
 * uses it too). Where e^t leaves the float range (|t| > 88, |x| > ~10)
 * the result is saturated: s is 0 or 1 and the slope's second term 0, so
 * no inf * 0 makes a NaN however large x is. */
#define GELU_2C 1.59576912f /* 2 sqrt(2/pi) */
#define GELU_K 0.044715f
#define GELU_3K 0.134145f /* 3 GELU_K, u's slope */
#define GELU_SAT 88.0f    /* |t| beyond this: saturated */

/* x rounded to an integer, nearest even, for |x| < 2^22: the sum lands
 * where floats are integers, so the add rounds (vround's bits). */
static float round_even(float x) { return (x + 12582912.0f) - 12582912.0f; }

/* e^x as vexp computes it, lane by lane (vec.h states the steps). */
static float exp_as_vexp(float x)
{
    static const float taylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                    1.0f / 6,    0.5f,       1.0f,       1.0f};
    x = -87.0f > x ? -87.0f : x; /* vmax, then vmin: a NaN passes through */
    x = 88.0f < x ? 88.0f : x;
    float n = round_even(x * 1.44269504f);
    float r = fmaf(-n, 0.693147182f, x);
    r = fmaf(-n, -1.90465430e-9f, r);
    float p = taylor[0];
    for (int k = 1; k < 8; k++)
        p = fmaf(p, r, taylor[k]);
    uint32_t bits = n == n ? (uint32_t)((int)n + 127) << 23 : 0x3f800000u; /* 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* t = -2u = (x (-2 sqrt(2/pi))) (x^2 K + 1): the sigmoid's argument, negated. */
static float gelu_t(float x)
{
    float x2 = x * x;
    return (x * -GELU_2C) * (x2 * GELU_K + 1.0f);
}

/* s = sigmoid(-t) = 1 / (1 + e^t), 0 where e^t overflows; *e = e^t. */
static float gelu_s(float t, float *e)
{
    *e = exp_as_vexp(t);
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
    float *part = kmalloc(sizeof(float) * (size_t)L * q); /* [L,q] */
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

/* ---- transpose ---- */

/* One plain path for every backend: data movement, where vectors buy
 * nothing that the cache blocking does not. */

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
    float *part = kmalloc(sizeof(float) * (size_t)L * cv); /* [L,c,v] */
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

/* -- embedding: entry points -- */

void k_embed(float *y /* [n,c] */, const int32_t *idx /* [n] */, const float *table /* [c,v] */,
             int n, int c, int v)
{
    kernels_now()->embed(y, idx, table, n, c, v);
}

void k_embed_bwd(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                 const float *dy /* [n,c] */, int n, int c, int v)
{
    kernels_now()->embed_bwd_seg(dtable, idx, dy, n, c, v, 0); /* one leaf */
}

void k_embed_bwd_seg(float *dtable /* [c,v] */, const int32_t *idx /* [n] */,
                     const float *dy /* [n,c] */, int n, int c, int v, int seg)
{
    kernels_now()->embed_bwd_seg(dtable, idx, dy, n, c, v, seg < 1 ? 0 : seg);
}

/* ---- Adam ---- */

/* Bias corrections as torch computes them (in double), reduced to the two
 * floats the per-element update needs. */
struct adam_k adam_consts(float lr, float b1, float b2, float eps, int t)
{
    double bc1 = 1.0 - fm_powi((double)b1, t), bc2 = 1.0 - fm_powi((double)b2, t);
    struct adam_k k = {1.0f - b1, b2, 1.0f - b2, eps, (float)(lr / bc1), (float)sqrt(bc2)};
    return k;
}

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

/* ---- the entry points ---- */

/* Each calls the current backend's kernel (tensor.c); none has its own
 * arithmetic. */

void k_matmul_ex(float *c, const float *a, const float *b, const float *bias, const float *r1,
                 const float *r2, int relu, int n, int p, int q)
{
    kernels_now()->matmul_ex(c, a, b, bias, r1, r2, NULL, relu, n, p, q);
}

void k_matmul_gated(float *c, const float *a, const float *b, const float *gate, int n, int p,
                    int q)
{
    kernels_now()->matmul_ex(c, a, b, NULL, NULL, NULL, gate, 0, n, p, q);
}

void k_matmul(float *c, const float *a, const float *b, const float *bias, int n, int p, int q)
{
    k_matmul_ex(c, a, b, bias, NULL, NULL, 0, n, p, q);
}

void k_tree_sum(float *out, const float *const *parts, int m, size_t len)
{
    kernels_now()->tree_sum(out, parts, m, len);
}

void k_matmul_tn_seg(float *c, const float *a, const float *b, int n, int p, int q, int seg)
{
    kernels_now()->matmul_tn_seg(c, a, b, n, p, q, seg, TN_FP32);
}

/* One leaf of all p rows. */
void k_matmul_tn(float *c, const float *a, const float *b, int n, int p, int q)
{
    k_matmul_tn_seg(c, a, b, n, p, q, 0);
}

void k_attention(float *out, float *lse, const float *qkv, int B, int T, int C, int H)
{
    kernels_now()->attention(out, lse, qkv, B, T, C, H, 0);
}

void k_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                     const float *lse, int B, int T, int C, int H)
{
    kernels_now()->attention_bwd(dqkv, dout, qkv, out, lse, B, T, C, H, 0);
}

void k_attention_step(float *out, float *kc, float *vc, const float *qkv, int nb, int pos,
                      int tmax, int C, int H)
{
    kernels_now()->attention_step(out, kc, vc, qkv, nb, pos, tmax, C, H);
}

void k_attention_last(float *out, const float *qkv, int B, int T, int C, int H)
{
    kernels_now()->attention_last(out, qkv, B, T, C, H);
}

void k_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w,
                 const float *b, int n, int c)
{
    kernels_now()->layernorm(y, mean, rstd, x, w, b, n, c);
}

/* dw, db by ROW_BLOCK blocks in order: seg -1 tells the kernel so. */
void k_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                     const float *w, const float *mean, const float *rstd, int n, int c)
{
    kernels_now()->layernorm_bwd_seg(dx, dw, db, dy, x, w, mean, rstd, NULL, NULL, n, c, -1);
}

void k_layernorm_bwd_seg(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *w, const float *mean, const float *rstd, int n, int c,
                         int seg)
{
    kernels_now()->layernorm_bwd_seg(dx, dw, db, dy, x, w, mean, rstd, NULL, NULL, n, c,
                                     seg < 1 ? 0 : seg);
}

void k_layernorm_bwd_res(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *w, const float *mean, const float *rstd, const float *r1,
                         const float *r2, int n, int c, int seg)
{
    kernels_now()->layernorm_bwd_seg(dx, dw, db, dy, x, w, mean, rstd, r1, r2, n, c,
                                     seg > 0 ? seg : -1);
}

void k_xent(float *loss, const float *logits, const int32_t *targets, int n, int v)
{
    kernels_now()->xent(loss, logits, targets, n, v);
}

void k_xent_bwd(float *dlogits, const float *logits, const int32_t *targets, const float *dloss,
                int n, int v)
{
    kernels_now()->xent_bwd(dlogits, NULL, logits, targets, dloss, n, v);
}

void k_xent_grad(float *loss, float *dlogits, const float *logits, const int32_t *targets,
                 const float *dloss, int n, int v)
{
    kernels_now()->xent_bwd(dlogits, loss, logits, targets, dloss, n, v);
}

void k_add(float *y, const float *a, const float *b, size_t n) { kernels_now()->add(y, a, b, n); }

void k_add_n(float *y, const float *const *x, int m, size_t n) { kernels_now()->add_n(y, x, m, n); }

void k_relu(float *y, const float *x, size_t n) { kernels_now()->relu(y, x, n); }

void k_relu_bwd(float *dx, const float *dy, const float *y, size_t n)
{
    kernels_now()->relu_bwd(dx, dy, y, n);
}

void k_gelu(float *y, const float *x, size_t n) { kernels_now()->gelu(y, x, n); }

void k_gelu_bwd(float *dx, const float *dy, const float *x, size_t n)
{
    kernels_now()->gelu_bwd(dx, dy, x, n);
}

/* By ROW_BLOCK blocks in order: seg -1 tells the kernel so. */
void k_sum_rows(float *out, const float *x, int n, int q)
{
    kernels_now()->sum_rows_seg(out, x, n, q, -1);
}

void k_sum_rows_seg(float *out, const float *x, int n, int q, int seg)
{
    kernels_now()->sum_rows_seg(out, x, n, q, seg < 1 ? 0 : seg);
}

void k_adam(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2,
            float eps, int t)
{
    kernels_now()->adam(p, m, v, g, n, lr, b1, b2, eps, t);
}

void k_round_bf16(float *y, const float *x, size_t n) { kernels_now()->round_bf16(y, x, n); }

void k_matmul_bf16_emu(float *c, const float *a, const float *b, const float *bias,
                       const float *r1, const float *r2, int relu, int n, int p, int q)
{
    kernels_now()->matmul_bf16_emu(c, a, b, bias, r1, r2, NULL, relu, n, p, q);
}

void k_matmul_bf16(float *c, const float *a, const float *b, const float *bias, const float *r1,
                   const float *r2, int relu, int n, int p, int q)
{
    if (bf16_native())
        kernels_now()->matmul_bf16_native(c, a, b, bias, r1, r2, NULL, relu, n, p, q);
    else
        k_matmul_bf16_emu(c, a, b, bias, r1, r2, relu, n, p, q);
}

void k_matmul_bf16_gated(float *c, const float *a, const float *b, const float *gate, int n,
                         int p, int q)
{
    if (bf16_native())
        kernels_now()->matmul_bf16_native(c, a, b, NULL, NULL, NULL, gate, 0, n, p, q);
    else
        kernels_now()->matmul_bf16_emu(c, a, b, NULL, NULL, NULL, gate, 0, n, p, q);
}

void k_matmul_tn_seg_bf16(float *c, const float *a, const float *b, int n, int p, int q, int seg)
{
    kernels_now()->matmul_tn_seg(c, a, b, n, p, q, seg,
                                 bf16_native() ? TN_BF16_NATIVE : TN_BF16_EMU);
}

void k_matmul_tn_seg_bf16_emu(float *c, const float *a, const float *b, int n, int p, int q,
                              int seg)
{
    kernels_now()->matmul_tn_seg(c, a, b, n, p, q, seg, TN_BF16_EMU);
}

void k_attention_bf16(float *out, float *lse, const float *qkv, int B, int T, int C, int H)
{
    kernels_now()->attention(out, lse, qkv, B, T, C, H, 1);
}

void k_attention_bwd_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int C, int H)
{
    kernels_now()->attention_bwd(dqkv, dout, qkv, out, lse, B, T, C, H, 1);
}
