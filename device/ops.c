/* device/ops.c: the op table, one row per line of ops.def: each op's name,
 * operand counts, printable attributes and FLOP count. The profile, the
 * timeline and the graph dumps read it; it calls nothing. */
#include "device/ops.h"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Causal attention does about half of the T*T work: the masked half is
 * skipped, so it is not counted either. */
static double attention_pairs(const struct kinstr *k)
{
    double B = k->attr.attention.B, T = k->attr.attention.T;
    return B * T * (T + 1) / 2;
}

static double flops_none(const struct kinstr *k) { return 0; }
static double flops_matmul(const struct kinstr *k)
{
    return 2.0 * k->attr.matmul.n * k->attr.matmul.p * k->attr.matmul.q;
}
static double flops_attention(const struct kinstr *k)
{
    return 4.0 * attention_pairs(k) * k->attr.attention.C;
}
static double flops_attention_bwd(const struct kinstr *k)
{
    return 8.0 * attention_pairs(k) * k->attr.attention.C;
}
static double flops_decode(const struct kinstr *k) /* the new query against pos+1 keys */
{
    long keys = *(const int32_t *)k->in[ATTENTION_STEP_IN_POS] + 1;
    return 4.0 * k->attr.decode.nb * keys * k->attr.decode.C;
}
static double flops_attention_last(const struct kinstr *k) /* T keys for B queries */
{
    return 4.0 * k->attr.attention.B * k->attr.attention.T * k->attr.attention.C;
}
static double flops_layernorm(const struct kinstr *k)
{
    return 8.0 * k->attr.layernorm.n * k->attr.layernorm.c;
}
static double flops_layernorm_bwd(const struct kinstr *k) /* and a folded residual sum's adds */
{
    int adds = !!k->in[LAYERNORM_BWD_IN_R1] + !!k->in[LAYERNORM_BWD_IN_R2];
    return (14.0 + adds) * k->attr.layernorm.n * k->attr.layernorm.c;
}
static double flops_xent(const struct kinstr *k)
{
    return 4.0 * k->attr.xent.n * k->attr.xent.v;
}
static double flops_xent_grad(const struct kinstr *k) { return 2 * flops_xent(k); }
static double flops_adam(const struct kinstr *k) { return 12.0 * k->attr.adam.n; }
static double flops_elementwise(const struct kinstr *k) { return (double)k->attr.elementwise.n; }

/* Each attribute struct's printable fields, by the union member's name. */
#define L(family, field) {#field, offsetof(union kattr, family.field), 0}
#define F(family, field) {#field, offsetof(union kattr, family.field), 1}
#define ATTRS_embed {L(embed, n), L(embed, c), L(embed, v), L(embed, seg)}
#define ATTRS_elementwise {L(elementwise, n)}
#define ATTRS_matmul \
    {L(matmul, n), L(matmul, p), L(matmul, q), L(matmul, seg), L(matmul, bf16), L(matmul, relu)}
#define ATTRS_transpose {L(transpose, rows), L(transpose, cols)}
#define ATTRS_sum_rows {L(sum_rows, n), L(sum_rows, q), L(sum_rows, seg)}
#define ATTRS_layernorm {L(layernorm, n), L(layernorm, c), L(layernorm, seg)}
#define ATTRS_attention \
    {L(attention, B), L(attention, T), L(attention, C), L(attention, H), L(attention, bf16)}
#define ATTRS_decode {L(decode, nb), L(decode, tmax), L(decode, C), L(decode, H)}
#define ATTRS_xent {L(xent, n), L(xent, v)}
#define ATTRS_fill {L(fill, n), F(fill, value)}
#define ATTRS_adam \
    {L(adam, n), L(adam, bf16_state), F(adam, beta1), F(adam, beta2), F(adam, eps)}
#define ATTRS_all_reduce \
    {L(all_reduce, n), L(all_reduce, cores), L(all_reduce, micro), L(all_reduce, shard), \
     L(all_reduce, at), L(all_reduce, total)}
#define ATTRS_dropout {L(dropout, n), L(dropout, c), L(dropout, site), F(dropout, p)}
#define ATTRS_attention_drop                                                                \
    {L(attention_drop, B), L(attention_drop, T), L(attention_drop, C), L(attention_drop, H), \
     L(attention_drop, site), F(attention_drop, p)}

/* One row per line of ops.def. */
#define OP(NAME, name, attrs, flops, nin, in, nout, out) \
    [KOP_##NAME] = {#name, NAME##_NIN, NAME##_NOUT, ATTRS_##attrs, flops},
static const struct kop_info kop_table[KOP_COUNT] = {
#include "device/ops.def"
};
#undef OP
#undef L
#undef F

const struct kop_info *kop_info(int op) { return &kop_table[op]; }

const char *kop_name(int op)
{
    return op >= 0 && op < KOP_COUNT ? kop_table[op].name : "?";
}

double kop_flops(const struct kinstr *k) { return kop_table[k->op].flops(k); }

void kop_format_attrs(char *buf, size_t n, int op, const union kattr *a)
{
    size_t used = 0;
    buf[0] = 0;
    for (const struct kop_attr *f = kop_table[op].attr; f < kop_table[op].attr + 6 && f->name;
         f++) {
        const char *at = (const char *)a + f->offset;
        int w = f->is_float ? snprintf(buf + used, n - used, "%s%s=%g", used ? ", " : "",
                                       f->name, *(const float *)at)
                            : snprintf(buf + used, n - used, "%s%s=%ld", used ? ", " : "",
                                       f->name, *(const long *)at);
        if (w < 0 || (size_t)w >= n - used)
            return;
        used += (size_t)w;
    }
}
