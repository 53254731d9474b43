/* kernels/entry.c: the k_* entry points of kernels.h that fix some
 * arguments of their kernel (kernels.def's KERNEL_FIXED rows). Each calls
 * the kernel of the current backend (kernels_now(), isa.c) and has no
 * arithmetic of its own. Those that pass their arguments through, one per
 * KERNEL row, are generated (kernels/entry_gen.c). */
#include "kernels/tensor_impl.h"

/* ---- matmul: the fused epilogue's parts ---- */

void k_matmul(float *c, const float *a, const float *b, const float *bias, int n, int p, int q)
{
    kernels_now()->matmul_ex(c, a, b, bias, NULL, NULL, NULL, 0, n, p, q);
}

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

/* ---- reductions over rows: seg's conventions ----
 * The plain forms (k_matmul_tn, k_embed_bwd) are one leaf of all rows
 * (seg 0); k_layernorm_bwd and k_sum_rows sum ROW_BLOCK blocks in order
 * (seg -1); a _seg entry point's seg < 1 is one leaf. */

void k_matmul_tn(float *c, const float *a, const float *b, int n, int p, int q)
{
    kernels_now()->matmul_tn_seg(c, a, b, n, p, q, 0, MM_FP32);
}

void k_matmul_tn_seg(float *c, const float *a, const float *b, int n, int p, int q, int seg)
{
    kernels_now()->matmul_tn_seg(c, a, b, n, p, q, seg, MM_FP32);
}

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

/* dw, db as k_layernorm_bwd_seg for seg > 0, as k_layernorm_bwd otherwise */
void k_layernorm_bwd_res(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *w, const float *mean, const float *rstd, const float *r1,
                         const float *r2, int n, int c, int seg)
{
    kernels_now()->layernorm_bwd_seg(dx, dw, db, dy, x, w, mean, rstd, r1, r2, n, c,
                                     seg > 0 ? seg : -1);
}

void k_sum_rows(float *out, const float *x, int n, int q)
{
    kernels_now()->sum_rows_seg(out, x, n, q, -1);
}

void k_sum_rows_seg(float *out, const float *x, int n, int q, int seg)
{
    kernels_now()->sum_rows_seg(out, x, n, q, seg < 1 ? 0 : seg);
}

void k_embed_bwd(float *dtable, const int32_t *idx, const float *dy, int n, int c, int v)
{
    kernels_now()->embed_bwd_seg(dtable, idx, dy, n, c, v, 0);
}

void k_embed_bwd_seg(float *dtable, const int32_t *idx, const float *dy, int n, int c, int v,
                     int seg)
{
    kernels_now()->embed_bwd_seg(dtable, idx, dy, n, c, v, seg < 1 ? 0 : seg);
}

/* ---- softmax cross-entropy: the loss too, or not ---- */

void k_xent_bwd(float *dlogits, const float *logits, const int32_t *targets, const float *dloss,
                int n, int v)
{
    kernels_now()->xent_bwd(dlogits, NULL, logits, targets, dloss, n, v, 0);
}

void k_xent_grad(float *loss, float *dlogits, const float *logits, const int32_t *targets,
                 const float *dloss, int n, int v, int seg)
{
    kernels_now()->xent_bwd(dlogits, loss, logits, targets, dloss, n, v, seg);
}

/* ---- attention: fp32 or bf16 operands ---- */

void k_attention(float *out, float *lse, const float *qkv, int B, int T, int C, int H)
{
    kernels_now()->attention(out, lse, qkv, B, T, C, H, MM_FP32);
}

void k_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                     const float *lse, int B, int T, int C, int H)
{
    kernels_now()->attention_bwd(dqkv, dout, qkv, out, lse, B, T, C, H, MM_FP32);
}

/* The bf16 kernels' arithmetic: vdpbf16ps where bf16_native() says, else
 * its emulation (the same bits). */
static int bf16_kind(void) { return bf16_native() ? MM_BF16_NATIVE : MM_BF16_EMU; }

void k_attention_bf16(float *out, float *lse, const float *qkv, int B, int T, int C, int H)
{
    kernels_now()->attention(out, lse, qkv, B, T, C, H, bf16_kind());
}

void k_attention_bwd_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int C, int H)
{
    kernels_now()->attention_bwd(dqkv, dout, qkv, out, lse, B, T, C, H, bf16_kind());
}

void k_attention_bf16_emu(float *out, float *lse, const float *qkv, int B, int T, int C, int H)
{
    kernels_now()->attention(out, lse, qkv, B, T, C, H, MM_BF16_EMU);
}

void k_attention_bwd_bf16_emu(float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int T, int C, int H)
{
    kernels_now()->attention_bwd(dqkv, dout, qkv, out, lse, B, T, C, H, MM_BF16_EMU);
}

/* ---- the bf16 matmuls: vdpbf16ps where bf16_native() says, else the
 * emulation (the same bits) ---- */

void k_matmul_bf16_emu(float *c, const float *a, const float *b, const float *bias,
                       const float *r1, const float *r2, int relu, int n, int p, int q)
{
    kernels_now()->matmul_bf16_emu(c, a, b, bias, r1, r2, NULL, relu, n, p, q);
}

void k_matmul_bf16(float *c, const float *a, const float *b, const float *bias, const float *r1,
                   const float *r2, int relu, int n, int p, int q)
{
    const struct kernels *k = kernels_now();
    matmul_bf16_emu_kernel *mm = bf16_native() ? k->matmul_bf16_native : k->matmul_bf16_emu;
    mm(c, a, b, bias, r1, r2, NULL, relu, n, p, q);
}

void k_matmul_bf16_gated(float *c, const float *a, const float *b, const float *gate, int n,
                         int p, int q)
{
    const struct kernels *k = kernels_now();
    matmul_bf16_emu_kernel *mm = bf16_native() ? k->matmul_bf16_native : k->matmul_bf16_emu;
    mm(c, a, b, NULL, NULL, NULL, gate, 0, n, p, q);
}

void k_matmul_tn_seg_bf16(float *c, const float *a, const float *b, int n, int p, int q, int seg)
{
    kernels_now()->matmul_tn_seg(c, a, b, n, p, q, seg, bf16_kind());
}

void k_matmul_tn_seg_bf16_emu(float *c, const float *a, const float *b, int n, int p, int q,
                              int seg)
{
    kernels_now()->matmul_tn_seg(c, a, b, n, p, q, seg, MM_BF16_EMU);
}

