/* kernels/reading.c: the reading mode's table (GPT_ISA=ref): the plain-C
 * twins themselves as the kernels, so that a learner can set a breakpoint
 * in a twin (tensor_ref.c and its neighbours) and step through a real
 * training step. The twins are the contract: they give every kernel's
 * bits, so a run on this path writes the checkpoint every other path
 * writes, only slower. In this mode the compiler runs no fusion pass
 * (kernels_reading_mode, isa.c): each op of the model runs its own twin.
 *
 * A row of kernels.def whose twin takes the row's parameters is the twin
 * itself; the KERNEL_FIXED rows, whose entry points fix a flag or seg's
 * convention (entry.c), take the small adapters below. */
#include "kernels/tensor_impl.h"
#include "kernels/tensor_ref.h"

/* ---- matmul ---- */

/* The fused epilogue's order: relu, then 0 where gate <= 0, then + r1,
 * then + r2. A gated product has no bias, relu or residual (the
 * compiler's rule, fuse.c), so it is the gated twin alone. */
static void ref_matmul_ex(float *c, const float *a, const float *b, const float *bias,
                          const float *r1, const float *r2, const float *gate, int relu, int n,
                          int p, int q)
{
    if (gate)
        k_matmul_gated_ref(c, a, b, gate, n, p, q);
    else
        k_matmul_ex_ref(c, a, b, bias, r1, r2, relu, n, p, q);
}

static void ref_matmul_bf16(float *c, const float *a, const float *b, const float *bias,
                            const float *r1, const float *r2, const float *gate, int relu, int n,
                            int p, int q)
{
    if (gate)
        k_matmul_bf16_gated_ref(c, a, b, gate, n, p, q);
    else
        k_matmul_bf16_ref(c, a, b, bias, r1, r2, relu, n, p, q);
}

/* ---- weight-gradient matmul ---- */

static void ref_matmul_tn_seg(float *c, const float *a, const float *b, int n, int p, int q,
                              int seg, int kind)
{
    if (kind == MM_FP32)
        k_matmul_tn_seg_ref(c, a, b, n, p, q, seg);
    else
        k_matmul_tn_seg_bf16_ref(c, a, b, n, p, q, seg);
}

/* ---- attention ---- */

static void ref_attention(float *out, float *lse, const float *qkv, int B, int T, int C, int H,
                          int kind)
{
    if (kind == MM_FP32)
        k_attention_ref(out, lse, qkv, B, T, C, H);
    else
        k_attention_bf16_ref(out, lse, qkv, B, T, C, H);
}

static void ref_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int C, int H, int kind)
{
    if (kind == MM_FP32)
        k_attention_bwd_ref(dqkv, dout, qkv, out, lse, B, T, C, H);
    else
        k_attention_bwd_bf16_ref(dqkv, dout, qkv, out, lse, B, T, C, H);
}

/* ---- layernorm ---- */

/* The table's seg: < 0 ROW_BLOCK blocks summed in order, 0 one leaf, > 0
 * leaves and the tree (entry.c); layernorm_bwd_any_ref reads it so. */
static void ref_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const float *mean, const float *rstd,
                              const float *r1, const float *r2, int n, int c, int seg)
{
    layernorm_bwd_any_ref(dx, dw, db, dy, x, w, mean, rstd, r1, r2, n, c, seg);
}

/* ---- softmax cross-entropy ---- */

static void ref_xent_bwd(float *dlogits, float *loss, const float *logits,
                         const int32_t *targets, const float *dloss, int n, int v, int seg)
{
    if (loss)
        k_xent_grad_ref(loss, dlogits, logits, targets, dloss, n, v, seg);
    else
        k_xent_bwd_ref(dlogits, logits, targets, dloss, n, v);
}

/* ---- sums over rows ---- */

static void ref_sum_rows(float *out, const float *x, int n, int q, int seg)
{
    if (seg < 0)
        k_sum_rows_ref(out, x, n, q);
    else
        k_sum_rows_seg_ref(out, x, n, q, seg);
}

/* ---- the table ---- */

/* Every row of kernels.def: a KERNEL row is its twin, k_name_ref; the
 * KERNEL_FIXED rows are named one by one after them. */
static const struct kernels kernels_ref = {
    .name = "ref",
    /* make gen: begin. The KERNEL rows of kernels/kernels.def, each its
     * twin, as gen/gen.c writes them: edit that file, then run make gen. */
    .tree_sum = k_tree_sum_ref,
    .attention_step = k_attention_step_ref,
    .attention_last = k_attention_last_ref,
    .layernorm = k_layernorm_ref,
    .xent = k_xent_ref,
    .add = k_add_ref,
    .add_n = k_add_n_ref,
    .relu = k_relu_ref,
    .relu_bwd = k_relu_bwd_ref,
    .gelu = k_gelu_ref,
    .gelu_bwd = k_gelu_bwd_ref,
    .transpose = k_transpose_ref,
    .embed = k_embed_ref,
    .adam = k_adam_ref,
    .round_bf16 = k_round_bf16_ref,
    /* make gen: end */
    .matmul_ex = ref_matmul_ex,
    .matmul_tn_seg = ref_matmul_tn_seg,
    .attention = ref_attention,
    .attention_bwd = ref_attention_bwd,
    .layernorm_bwd_seg = ref_layernorm_bwd,
    .xent_bwd = ref_xent_bwd,
    .sum_rows_seg = ref_sum_rows,
    .embed_bwd_seg = k_embed_bwd_seg_ref,
    .matmul_bf16_emu = ref_matmul_bf16,
    .matmul_bf16_native = NULL, /* the twins are one path: bf16_dot's model */
};

/* Hands the table to the ISA choice (isa.c) before main() runs, as each
 * backend of tensor.c does its own. */
__attribute__((constructor)) static void register_reading_table(void)
{
    kernels_register(&kernels_ref);
}
