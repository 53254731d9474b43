/* kernels/kernels.h: the kernel layer's interface, the bottom layer but
 * for the helpers. Everything a caller of the kernels uses is declared
 * here: the ISA choice (kernels/isa.c), every dispatched entry point (k_*,
 * kernels/entry.c) and every plain-C twin (suffix _ref, kernels/tensor_ref.c
 * and its neighbours: the contract). An entry point runs the current
 * backend's kernel, from the table that backend registered with isa.c
 * (kernels_register, kernels/tensor_impl.h): tensor.c, a layer above,
 * written once over the vector layer vec.h and compiled for each backend:
 * AVX-512, AVX2 or plain C on x86-64 (picked at run time), NEON or plain C
 * on arm64. No file of kernels/ includes tensor.h or calls tensor.c; the
 * layers above include this header through tensor.h. All tensors are
 * dense, row-major float32 unless said otherwise.
 *
 * Map: the declarations follow tensor.c's sections, under the same
 * "---- name ----" banners: ISA dispatch; matmul (with its fused form
 * k_matmul_ex); leaves and the tree (the rule every *_seg kernel follows,
 * and k_tree_sum); the weight-gradient matmul (k_matmul_tn, _seg);
 * attention (forward, backward, decode step); layernorm; softmax
 * cross-entropy; element-wise (add, add_n, relu); sums over rows;
 * transpose; embedding; Adam; then the bf16 kernels (rounding, matmul,
 * weight-gradient matmul, attention). Each entry point comes before its
 * twin.
 *
 * Determinism contract: for a fixed ISA path, every output bit is the same
 * whatever the OpenMP thread count, because each output element is produced
 * by one fixed sequence of operations (reductions use fixed blocks that do
 * not depend on the thread count, combined in a fixed order).
 */
#ifndef KERNELS_KERNELS_H
#define KERNELS_KERNELS_H
#include <stddef.h>
#include <stdint.h>

/* ---- ISA dispatch ---- */

/* Paths in increasing order of speed; x86-64 has ref, scalar, avx2,
 * avx512, arm64 has ref, scalar, neon. ref, the reading mode, runs the
 * plain-C twins themselves as the kernels (kernels/reading.c), and the
 * compiler fuses nothing in it: a debugger steps through the contract in
 * a real training step, which gives the bits of every other path. */
enum isa { ISA_REF = 0, ISA_SCALAR = 1, ISA_AVX2 = 2, ISA_AVX512 = 3, ISA_NEON = 2 };

/* Best path this CPU supports, lowered (never raised) by the environment
 * variable GPT_ISA=ref|scalar|avx2|avx512 (x86-64) or ref|scalar|neon
 * (arm64). Decided once, on first call. */
int isa_best(void);
/* The path the k_* entry points use now; tests switch it. */
int isa_get(void);
void isa_set(int isa); /* clamped to isa_best() */
const char *isa_name(int isa);
/* 1 on the reading path (ISA_REF): the compiler then runs no fusion pass,
 * so each op of the model runs its own twin. */
int kernels_reading_mode(void);

/* 1 when k_matmul_bf16 runs vdpbf16ps on the current path. */
int bf16_native(void);

/* What the CPU itself offers, whatever GPT_ISA and GPT_BF16 say, and the
 * best path compiled in: the tests say why a path of the binary does not
 * run here (the CPU lacks it, or the environment lowered the choice). */
int isa_cpu(void);  /* the best path this CPU runs */
int isa_top(void);  /* the best path this binary has: avx512, or neon */
int bf16_cpu(void); /* 1 when the CPU has vdpbf16ps (AVX512_BF16) */
/* vdpbf16ps's products a second over the fp32 FMA's, measured once on
 * the first call (0 without AVX512_BF16): GPT_BF16=auto uses the
 * instruction only where it pays. */
double bf16_dot_speed(void);
/* GPT_BF16: "auto" (also when unset), "native" or "emulate"; anything
 * else ends the program with exit 2. */
const char *bf16_setting(void);

/* ---- matmul ---- */

/* c[n,q] = a[n,p] @ b[p,q] (+ bias[q] when bias != NULL) */
void k_matmul(float *c, const float *a, const float *b, const float *bias,
              int n, int p, int q);
void k_matmul_ref(float *c, const float *a, const float *b, const float *bias,
                  int n, int p, int q);

/* A fused kernel (made by the graph compiler):
 * c[n,q] = relu?(a[n,p] @ b[p,q] + bias[q]) + r1[n,q] + r2[n,q], where bias,
 * r1 and r2 may be NULL. The matmul part is bit-identical to k_matmul, and
 * the additions happen in this order, so fusing never changes a result
 * (but for one freedom: an addition of two NaNs gives one of them, which
 * one being the compiler's choice, as IEEE 754 leaves it open). */
void k_matmul_ex(float *c, const float *a, const float *b, const float *bias,
                 const float *r1, const float *r2, int relu, int n, int p, int q);
void k_matmul_ex_ref(float *c, const float *a, const float *b, const float *bias,
                     const float *r1, const float *r2, int relu, int n, int p, int q);
/* Another (made by the graph compiler from a matmul and the relu_bwd that
 * takes it as dy): c[n,q] = a[n,p] @ b[p,q] where gate[n,q] > 0, else 0;
 * gate is the ReLU's output. The matmul part is bit-identical to k_matmul,
 * and 0 is relu_bwd's +0. */
void k_matmul_gated(float *c, const float *a, const float *b, const float *gate, int n, int p,
                    int q);
void k_matmul_gated_ref(float *c, const float *a, const float *b, const float *gate, int n,
                        int p, int q);

/* ---- leaves and the tree ----
 *
 * Reductions over rows as a fixed tree of leaves (the *_seg kernels).
 * Why: data-parallel training splits the batch's rows over N cores and sums
 * the per-core gradients; the result must have the same bits for every N
 * (1, 2, 4, 8) and thread count. So a reduction over n rows is done as:
 * leaves of `seg` rows each (rows [l*seg, (l+1)*seg), the last one shorter
 * if seg does not divide n; seg < 1 means one leaf of all rows), each leaf
 * summed over its rows in row order from 0 exactly as a plain loop adds
 * them; then the L = ceil(n/seg) leaf partials combined by the balanced tree
 *   reduce(lo,hi) = hi-lo == 1 ? leaf[lo] : reduce(lo,mid) + reduce(mid,hi),
 *   mid = lo + (hi-lo)/2,
 * added element-wise in float, left operand first. mid depends only on
 * hi-lo, so a core holding leaves [c*L/N, (c+1)*L/N) computes exactly that
 * subtree, and k_tree_sum over the N core results gives the single-core
 * bits whenever N is a power of two dividing L. With seg = the rows of one
 * example, no leaf straddles two examples. No rows (n = 0): zeros. */

/* out[len] = the tree over the m >= 0 arrays parts[0..m-1] (each [len]):
 * the all-reduce's combine step. out may be parts[0], no other part. */
void k_tree_sum(float *out, const float *const *parts, int m, size_t len);
void k_tree_sum_ref(float *out, const float *const *parts, int m, size_t len);

/* ---- weight-gradient matmul ---- */

/* c[n,q] = a^T @ b with a[p,n], b[p,q]: the weight-gradient shape, a long
 * reduction over p summed in order 0..p-1 for every element. */
void k_matmul_tn(float *c, const float *a, const float *b, int n, int p, int q);
void k_matmul_tn_ref(float *c, const float *a, const float *b, int n, int p, int q);

/* c[n,q] = a^T @ b, a[p,n], b[p,q], reduced over the p rows by the tree. */
void k_matmul_tn_seg(float *c, const float *a, const float *b, int n, int p, int q, int seg);
void k_matmul_tn_seg_ref(float *c, const float *a, const float *b, int n, int p, int q, int seg);

/* ---- attention ---- */

/* Causal self-attention, fused: never holds all B*H*T*T scores.
 * qkv [B,T,3C], per head h (hs = C/H): q = cols [3hs*h, 3hs*h+hs), k the
 * next hs, v the next hs. out [B,T,C], head h in cols [hs*h, hs*h+hs).
 * lse [B,H,T]: log-sum-exp of each query's scaled scores (for backward).
 * Scores scaled by 1/sqrt(hs); keys j > query i are skipped, not masked. */
void k_attention(float *out, float *lse, const float *qkv, int B, int T, int C, int H);
void k_attention_ref(float *out, float *lse, const float *qkv, int B, int T, int C, int H);
/* dqkv [B,T,3C] overwritten. dQ_i = sum_j dS_ij K_j / sqrt(hs), its
 * channels taken 16 at a time from channel 0: a group of more than 8 has
 * one chain over the keys in order per channel; a last group of 8 or
 * fewer (all of a head of 8) sums the even keys and the odd keys in two
 * chains, then adds them (tensor.c, bwd_q_pairs). */
void k_attention_bwd(float *dqkv, const float *dout, const float *qkv,
                     const float *out, const float *lse, int B, int T, int C, int H);
void k_attention_bwd_ref(float *dqkv, const float *dout, const float *qkv,
                         const float *out, const float *lse, int B, int T, int C, int H);

/* One decoding step with a KV cache, for nb independent sequences at the
 * same position pos: qkv [nb,3C] is the new token's projection; its k and
 * v are written into kc, vc [nb,tmax,C] at row pos, then the query attends
 * to rows 0..pos. out [nb,C]. */
void k_attention_step(float *out, float *kc, float *vc, const float *qkv,
                      int nb, int pos, int tmax, int C, int H);
void k_attention_step_ref(float *out, float *kc, float *vc, const float *qkv,
                          int nb, int pos, int tmax, int C, int H);

/* Each window's last query only: out [B,C] is row T-1 of each window of
 * k_attention over qkv [B,T,3C], computed as a decode step's is (the
 * sampler past the context reads nothing else of its last layer). */
void k_attention_last(float *out, const float *qkv, int B, int T, int C, int H);
void k_attention_last_ref(float *out, const float *qkv, int B, int T, int C, int H);

/* ---- dropout ----
 * Which elements dropout keeps is a pure function of (key, site, row,
 * col): a counter-based hash, no generator state, so any thread, core or
 * rank decides any element alone and the same masks come back in the
 * backward pass and after a resume. key: the step's 64-bit key (two i32
 * words, low first); site: which dropout of the model; row: the element's
 * global row (example index * T + position), from rows[]; p: the drop
 * probability; kept values are scaled by 1/(1-p) (inverted dropout).
 * Plain C: dropout is an experiment's path, not the reference's. */

/* 1 if element (row, col) at site survives. */
int k_dropout_keep(const int32_t *key, long site, int32_t row, long col, float p);
/* y[n,c] = keep ? x / (1-p) : 0, row r's global row rows[r]. y may be x. */
void k_dropout(float *y, const float *x, const int32_t *rows, const int32_t *key, long n, long c,
               long site, float p);
/* k_attention with dropout on the probabilities: P_ij of head h is kept
 * by (key, site, rows[b*T+i], h*T+j). lse is the undropped softmax's. */
void k_attention_drop(float *out, float *lse, const float *qkv, const int32_t *rows,
                      const int32_t *key, int B, int T, int C, int H, long site, float p);
void k_attention_drop_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, const int32_t *rows, const int32_t *key, int B,
                          int T, int C, int H, long site, float p);

/* ---- layernorm ---- */

/* LayerNorm over the last dim, eps 1e-5, biased variance.
 * x,y [n,c]; w,b [c]; mean,rstd [n] saved for the backward pass. */
void k_layernorm(float *y, float *mean, float *rstd, const float *x,
                 const float *w, const float *b, int n, int c);
void k_layernorm_ref(float *y, float *mean, float *rstd, const float *x,
                     const float *w, const float *b, int n, int c);
/* dx [n,c] (overwritten); dw, db [c] (overwritten, reduced over n). */
void k_layernorm_bwd(float *dx, float *dw, float *db, const float *dy,
                     const float *x, const float *w, const float *mean,
                     const float *rstd, int n, int c);
void k_layernorm_bwd_ref(float *dx, float *dw, float *db, const float *dy,
                         const float *x, const float *w, const float *mean,
                         const float *rstd, int n, int c);
/* The same, dw and db [c] reduced over the n rows by the tree; dx [n,c]
 * exactly as k_layernorm_bwd computes it. */
void k_layernorm_bwd_seg(float *dx, float *dw, float *db, const float *dy,
                         const float *x, const float *w, const float *mean,
                         const float *rstd, int n, int c, int seg);
void k_layernorm_bwd_seg_ref(float *dx, float *dw, float *db, const float *dy,
                             const float *x, const float *w, const float *mean,
                             const float *rstd, int n, int c, int seg);
/* With the residual stream's gradient folded in (the compiler's fusion of
 * the add or add_n that takes dx last): dx = (r1 + r2) + the layernorm's dx,
 * r2 or both NULL for fewer terms. dw, db as k_layernorm_bwd_seg for seg >
 * 0, as k_layernorm_bwd otherwise. */
void k_layernorm_bwd_res(float *dx, float *dw, float *db, const float *dy,
                         const float *x, const float *w, const float *mean,
                         const float *rstd, const float *r1, const float *r2, int n, int c,
                         int seg);
void k_layernorm_bwd_res_ref(float *dx, float *dw, float *db, const float *dy,
                             const float *x, const float *w, const float *mean,
                             const float *rstd, const float *r1, const float *r2, int n, int c,
                             int seg);

/* ---- softmax cross-entropy ---- */

/* Mean softmax cross-entropy over the rows whose target is >= 0.
 * logits [n,v]; targets [n] (int32, < 0 = ignored); loss [1]. seg: the
 * rows' losses divided by the count and summed by the tree of leaves of
 * seg rows, each leaf in double and rounded once (base.c mean_loss), so
 * the cores' losses all-reduced give one core's bits; seg < 1: one leaf. */
void k_xent(float *loss, const float *logits, const int32_t *targets, int n, int v, int seg);
void k_xent_ref(float *loss, const float *logits, const int32_t *targets, int n, int v, int seg);
/* dlogits [n,v] = (softmax - onehot) * dloss[0] / count; ignored rows 0. */
void k_xent_bwd(float *dlogits, const float *logits, const int32_t *targets,
                const float *dloss, int n, int v);
void k_xent_bwd_ref(float *dlogits, const float *logits, const int32_t *targets,
                    const float *dloss, int n, int v);
/* Both in one pass over the logits (made by the graph compiler from an
 * xent and the xent_bwd of the same logits): loss as k_xent, dlogits as
 * k_xent_bwd, bit for bit. */
void k_xent_grad(float *loss, float *dlogits, const float *logits, const int32_t *targets,
                 const float *dloss, int n, int v, int seg);
void k_xent_grad_ref(float *loss, float *dlogits, const float *logits, const int32_t *targets,
                     const float *dloss, int n, int v, int seg);

/* ---- element-wise ---- */

/* y[n] = a[n] + b[n] */
void k_add(float *y, const float *a, const float *b, size_t n);
void k_add_ref(float *y, const float *a, const float *b, size_t n);

/* A fused kernel (made by the graph compiler):
 * y[n] = ((x[0] + x[1]) + x[2]) + ... over m >= 1 inputs, one pass. */
void k_add_n(float *y, const float *const *x, int m, size_t n);
void k_add_n_ref(float *y, const float *const *x, int m, size_t n);

/* y = max(x, 0); dx = dy where y > 0 else 0 */
void k_relu(float *y, const float *x, size_t n);
void k_relu_ref(float *y, const float *x, size_t n);
void k_relu_bwd(float *dx, const float *dy, const float *y, size_t n);
void k_relu_bwd_ref(float *dx, const float *dy, const float *y, size_t n);

/* ---- sums over rows ---- */

/* out[q] = sum over rows of x[n,q] */
void k_sum_rows(float *out, const float *x, int n, int q);
void k_sum_rows_ref(float *out, const float *x, int n, int q);

/* out[q] = sum over rows of x[n,q], by the tree. */
void k_sum_rows_seg(float *out, const float *x, int n, int q, int seg);
void k_sum_rows_seg_ref(float *out, const float *x, int n, int q, int seg);

/* ---- transpose ---- */

/* out[s,r] = in[r,s]^T */
void k_transpose(float *out, const float *in, int r, int s);
void k_transpose_ref(float *out, const float *in, int r, int s);

/* ---- embedding ---- */

/* y[i,:] = table[:, idx[i]]: table [c,v] in PyTorch's Linear layout, so a
 * byte's embedding is a column. idx [n] int32 in [0,v); y [n,c]. */
void k_embed(float *y, const int32_t *idx, const float *table, int n, int c, int v);
void k_embed_ref(float *y, const int32_t *idx, const float *table, int n, int c, int v);
/* dtable [c,v] overwritten: dtable[:, idx[i]] += dy[i,:], rows i in order. */
void k_embed_bwd(float *dtable, const int32_t *idx, const float *dy, int n, int c, int v);
void k_embed_bwd_ref(float *dtable, const int32_t *idx, const float *dy, int n, int c, int v);
/* dtable [c,v] overwritten: the scatter-add above per leaf of seg rows
 * (rows in order, from 0), the leaves' tables combined by the tree. */
void k_embed_bwd_seg(float *dtable, const int32_t *idx, const float *dy, int n, int c, int v,
                     int seg);
void k_embed_bwd_seg_ref(float *dtable, const int32_t *idx, const float *dy, int n, int c, int v,
                         int seg);

/* ---- Adam ---- */

/* torch.optim.Adam (no weight decay, no amsgrad), step t >= 1, in place:
 * m += (1-b1)(g-m); v = b2 v + (1-b2) g^2;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). */
void k_adam(float *p, float *m, float *v, const float *g, size_t n,
            float lr, float b1, float b2, float eps, int t);
void k_adam_ref(float *p, float *m, float *v, const float *g, size_t n,
                float lr, float b1, float b2, float eps, int t);

/* ---- bf16 rounding ---- */

/* The bf16 kernels give TPU matrix-unit numerics (bf16 inputs, fp32 sums). */

/* y[n] = x[n] rounded to bfloat16, kept as float (low 16 bits zero), bit
 * for bit what vcvtneps2bf16 gives: nearest even; fp32 denormals become
 * zero of their sign (the instruction reads them as zero, so the bf16
 * matmul never sees a denormal input); NaN stays NaN, quieted, top payload
 * bits kept; values rounding past the largest bf16 become inf. */
void k_round_bf16(float *y, const float *x, size_t n);
void k_round_bf16_ref(float *y, const float *x, size_t n);

/* ---- bf16 matmul ---- */

/* c[n,q] = relu?(A @ B + bias[q]) + r1[n,q] + r2[n,q] as k_matmul_ex
 * (bias, r1, r2 may be NULL; the epilogue in that order), with A =
 * k_round_bf16(a[n,p]), B = k_round_bf16(b[p,q]), and each dot product
 * summed the way one vdpbf16ps per pair of k sums it: from bias (or 0),
 * over the pairs (2j, 2j+1), j ascending (p odd: a zero partner), each pair
 * as acc += A[2j+1]*B[2j+1], then acc += A[2j]*B[2j], each step one fused
 * multiply-add rounded to nearest even, denormal operands read as zero and
 * results tiny after rounding flushed to zero of their sign. Every path
 * gives the same bits: vdpbf16ps on the avx512 path of a CPU with
 * AVX512_BF16 where it is faster than the emulation (GPT_BF16=auto, the
 * default; native: wherever the CPU has it; emulate: never; read once), an
 * exact emulation otherwise; tensor.c records how the instruction's
 * behaviour was measured.
 * The epilogue adds as k_matmul_ex's, with its freedom for two NaNs. */
void k_matmul_bf16(float *c, const float *a, const float *b, const float *bias,
                   const float *r1, const float *r2, int relu, int n, int p, int q);
void k_matmul_bf16_ref(float *c, const float *a, const float *b, const float *bias,
                       const float *r1, const float *r2, int relu, int n, int p, int q);
/* The current path's emulation even where the instruction exists: the
 * tests hold it to the instruction's bits. */
void k_matmul_bf16_emu(float *c, const float *a, const float *b, const float *bias,
                       const float *r1, const float *r2, int relu, int n, int p, int q);
/* k_matmul_gated's bf16 twin: c = A @ B (as k_matmul_bf16) where
 * gate[n,q] > 0, else 0. */
void k_matmul_bf16_gated(float *c, const float *a, const float *b, const float *gate, int n,
                         int p, int q);
void k_matmul_bf16_gated_ref(float *c, const float *a, const float *b, const float *gate, int n,
                             int p, int q);

/* ---- bf16 weight-gradient matmul ---- */

/* c[n,q] = a^T @ b, a[p,n], b[p,q], on the matrix unit: each leaf of seg
 * rows (as k_matmul_tn_seg) is k_matmul_bf16 of the leaf's a^T and b with
 * no bias, so its pairs of k are the leaf's rows (lo, lo+1), (lo+2, lo+3),
 * ... (an odd last row paired with zero); the leaves' partials are then
 * combined by the fp32 tree, so shards of whole leaves still sum to the
 * same bits. vdpbf16ps where k_matmul_bf16 uses it, else its emulation;
 * _emu forces the emulation. */
void k_matmul_tn_seg_bf16(float *c, const float *a, const float *b, int n, int p, int q, int seg);
void k_matmul_tn_seg_bf16_ref(float *c, const float *a, const float *b, int n, int p, int q,
                              int seg);
void k_matmul_tn_seg_bf16_emu(float *c, const float *a, const float *b, int n, int p, int q,
                              int seg);

/* ---- bf16 attention ---- */

/* Attention as a TPU runs it in bf16: every product on the matrix unit
 * (the bf16 matmul's tiles and their numerics, bf16_dot), everything
 * between them in fp32. Forward, per head: S = Q K^T with bf16 Q and K,
 * then s = S log2(e)/sqrt(hs) in fp32 and the softmax of k_attention (base
 * 2, the same masks, l summed from the fp32 P); P rounded to bf16 for
 * O = (P V) / l, V bf16; lse = max ln 2 + log l. Backward, recomputing
 * P = 2^(S log2(e)/sqrt(hs) - lse log2(e)) from the same bf16 S, with dP = dO V^T
 * (bf16 dO, V), D = dO . O in fp32 from the unrounded dO, dS = P (dP - D):
 * dV = P^T dO, dK = (dS^T Q) / sqrt(hs) and dQ = (dS K) / sqrt(hs), P and
 * dS rounded to bf16. Each product's pairs start at key or query 0; terms
 * past the causal mask are exact zeros, which add nothing. _emu forces
 * the emulation; the twins compute the same products by bf16_dot, and the
 * fp32 arithmetic around them in the kernels' order: the same bits. */
void k_attention_bf16(float *out, float *lse, const float *qkv, int B, int T, int C, int H);
void k_attention_bf16_ref(float *out, float *lse, const float *qkv, int B, int T, int C, int H);
void k_attention_bf16_emu(float *out, float *lse, const float *qkv, int B, int T, int C, int H);
void k_attention_bwd_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int C, int H);
void k_attention_bwd_bf16_ref(float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int C, int H);
void k_attention_bwd_bf16_emu(float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int T, int C, int H);

/* ---- every KERNEL row of kernels/kernels.def ----
 * Its entry point k_name and its plain-C twin k_name_ref, both with the
 * row's parameters, written by make gen (a kernel added to the table is
 * declared there; those above are declared again, with what they
 * compute). */
#include "kernels/kernels_gen.h"

#endif
