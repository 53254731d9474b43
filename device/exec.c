/* device/exec.c: how one instruction becomes one tensor.c call. One
 * exec_<name> a line of ops.def, in its order: what each kernel is called
 * with, operands by name (the ops a first read can skip are in
 * device/exec_side.c, the point-wise ops' are generated). The dispatch
 * table, generated from ops.def, names them all (device/exec_gen.c);
 * xla_sim.c calls its xs_dispatch on each core. */
#include "device/exec.h"
#include "tensor.h"
#include <stdint.h>

void exec_embed(const struct kinstr *k)
{
    const struct embed_attr *e = &k->attr.embed;
    k_embed(k->out[EMBED_OUT_Y], k->in[EMBED_IN_IDX], k->in[EMBED_IN_TABLE], e->n, e->c, e->v);
}

void exec_embed_bwd(const struct kinstr *k)
{
    const struct embed_attr *e = &k->attr.embed;
    float *dtable = k->out[EMBED_BWD_OUT_DTABLE];
    const int32_t *idx = k->in[EMBED_BWD_IN_IDX];
    const float *dy = k->in[EMBED_BWD_IN_DY];
    if (e->seg > 0)
        k_embed_bwd_seg(dtable, idx, dy, e->n, e->c, e->v, e->seg);
    else
        k_embed_bwd(dtable, idx, dy, e->n, e->c, e->v);
}

/* bf16: the matrix unit's kernel, with matmul_ex's epilogue left empty. */
void exec_matmul(const struct kinstr *k)
{
    const struct matmul_attr *mm = &k->attr.matmul;
    float *c = k->out[MATMUL_OUT_C];
    const float *a = k->in[MATMUL_IN_A], *b = k->in[MATMUL_IN_B], *bias = k->in[MATMUL_IN_BIAS];
    if (mm->bf16)
        k_matmul_bf16(c, a, b, bias, NULL, NULL, mm->relu, mm->n, mm->p, mm->q);
    else
        k_matmul(c, a, b, bias, mm->n, mm->p, mm->q);
}

/* a^T b; bf16 inputs with seg 0 are one leaf, k_matmul_tn's order. */
void exec_matmul_tn(const struct kinstr *k)
{
    const struct matmul_attr *mm = &k->attr.matmul;
    float *c = k->out[MATMUL_TN_OUT_C];
    const float *a = k->in[MATMUL_TN_IN_A], *b = k->in[MATMUL_TN_IN_B];
    if (mm->bf16)
        k_matmul_tn_seg_bf16(c, a, b, mm->n, mm->p, mm->q, mm->seg);
    else if (mm->seg > 0)
        k_matmul_tn_seg(c, a, b, mm->n, mm->p, mm->q, mm->seg);
    else
        k_matmul_tn(c, a, b, mm->n, mm->p, mm->q);
}

void exec_transpose(const struct kinstr *k)
{
    const struct transpose_attr *t = &k->attr.transpose;
    k_transpose(k->out[TRANSPOSE_OUT_Y], k->in[TRANSPOSE_IN_X], t->rows, t->cols);
}

void exec_sum_rows(const struct kinstr *k)
{
    const struct sum_rows_attr *s = &k->attr.sum_rows;
    float *y = k->out[SUM_ROWS_OUT_Y];
    const float *x = k->in[SUM_ROWS_IN_X];
    if (s->seg > 0)
        k_sum_rows_seg(y, x, s->n, s->q, s->seg);
    else
        k_sum_rows(y, x, s->n, s->q);
}

void exec_layernorm(const struct kinstr *k)
{
    const struct layernorm_attr *ln = &k->attr.layernorm;
    void *const *in = k->in, *const *out = k->out;
    k_layernorm(out[LAYERNORM_OUT_Y], out[LAYERNORM_OUT_MEAN], out[LAYERNORM_OUT_RSTD],
                in[LAYERNORM_IN_X], in[LAYERNORM_IN_W], in[LAYERNORM_IN_B], ln->n, ln->c);
}

void exec_layernorm_bwd(const struct kinstr *k)
{
    const struct layernorm_attr *ln = &k->attr.layernorm;
    void *const *in = k->in, *const *out = k->out;
    float *dx = out[LAYERNORM_BWD_OUT_DX], *dw = out[LAYERNORM_BWD_OUT_DW],
          *db = out[LAYERNORM_BWD_OUT_DB];
    const float *dy = in[LAYERNORM_BWD_IN_DY], *x = in[LAYERNORM_BWD_IN_X],
                *w = in[LAYERNORM_BWD_IN_W], *mean = in[LAYERNORM_BWD_IN_MEAN],
                *rstd = in[LAYERNORM_BWD_IN_RSTD], *r1 = in[LAYERNORM_BWD_IN_R1],
                *r2 = in[LAYERNORM_BWD_IN_R2];
    k_layernorm_bwd_res(dx, dw, db, dy, x, w, mean, rstd, r1, r2, ln->n, ln->c, ln->seg);
}

void exec_attention(const struct kinstr *k)
{
    const struct attention_attr *at = &k->attr.attention;
    (at->bf16 ? k_attention_bf16 : k_attention)(k->out[ATTENTION_OUT_O],
                                                k->out[ATTENTION_OUT_LSE],
                                                k->in[ATTENTION_IN_QKV], at->B, at->T, at->C,
                                                at->H);
}

void exec_attention_bwd(const struct kinstr *k)
{
    const struct attention_attr *at = &k->attr.attention;
    void *const *in = k->in;
    (at->bf16 ? k_attention_bwd_bf16 : k_attention_bwd)(
        k->out[ATTENTION_BWD_OUT_DQKV], in[ATTENTION_BWD_IN_DO], in[ATTENTION_BWD_IN_QKV],
        in[ATTENTION_BWD_IN_O], in[ATTENTION_BWD_IN_LSE], at->B, at->T, at->C, at->H);
}

void exec_xent(const struct kinstr *k)
{
    k_xent(k->out[XENT_OUT_LOSS], k->in[XENT_IN_LOGITS], k->in[XENT_IN_TARGETS], k->attr.xent.n,
           k->attr.xent.v, (int)k->attr.xent.seg);
}

void exec_xent_bwd(const struct kinstr *k)
{
    k_xent_bwd(k->out[XENT_BWD_OUT_DLOGITS], k->in[XENT_BWD_IN_LOGITS],
               k->in[XENT_BWD_IN_TARGETS], k->in[XENT_BWD_IN_DLOSS], k->attr.xent.n,
               k->attr.xent.v);
}

void exec_fill(const struct kinstr *k)
{
    float *y = k->out[FILL_OUT_Y];
    for (long i = 0; i < k->attr.fill.n; i++)
        y[i] = k->attr.fill.value;
}

/* With bf16_state the parameter and both moments are stored as bf16, as
 * XLA_USE_BF16 stores every float tensor. */
void exec_adam(const struct kinstr *k)
{
    const struct adam_attr *ad = &k->attr.adam;
    float *p = k->in[ADAM_IN_P], *m = k->in[ADAM_IN_M], *v = k->in[ADAM_IN_V];
    const float *grad = k->in[ADAM_IN_GRAD], lr = *(const float *)k->in[ADAM_IN_LR];
    int32_t step = *(const int32_t *)k->in[ADAM_IN_STEP];
    k_adam(p, m, v, grad, ad->n, lr, ad->beta1, ad->beta2, ad->eps, step);
    if (ad->bf16_state) {
        k_round_bf16(p, p, ad->n);
        k_round_bf16(m, m, ad->n);
        k_round_bf16(v, v, ad->n);
    }
}
