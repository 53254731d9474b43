/* device/flops.c: the floating-point operations one call of an op
 * performs, a function per kind of op; ops.def names each op's, and the
 * op table (device/ops_gen.c) points to it (kop_flops(), for GFLOP/s). */
#include "device/flops.h"
#include <stdint.h>

/* Causal attention does about half of the T*T work: the masked half is
 * skipped, so it is not counted either. */
static double attention_pairs(const struct kinstr *k)
{
    double B = k->attr.attention.B, T = k->attr.attention.T;
    return B * T * (T + 1) / 2;
}

double flops_none(const struct kinstr *k) { return 0; }
double flops_matmul(const struct kinstr *k)
{
    return 2.0 * k->attr.matmul.n * k->attr.matmul.p * k->attr.matmul.q;
}
double flops_attention(const struct kinstr *k)
{
    return 4.0 * attention_pairs(k) * k->attr.attention.C;
}
double flops_attention_bwd(const struct kinstr *k)
{
    return 8.0 * attention_pairs(k) * k->attr.attention.C;
}
double flops_decode(const struct kinstr *k) /* the new query against pos+1 keys */
{
    long keys = *(const int32_t *)k->in[ATTENTION_STEP_IN_POS] + 1;
    return 4.0 * k->attr.decode.nb * keys * k->attr.decode.C;
}
double flops_attention_last(const struct kinstr *k) /* T keys for B queries */
{
    return 4.0 * k->attr.attention.B * k->attr.attention.T * k->attr.attention.C;
}
double flops_layernorm(const struct kinstr *k)
{
    return 8.0 * k->attr.layernorm.n * k->attr.layernorm.c;
}
double flops_layernorm_bwd(const struct kinstr *k) /* and a folded residual sum's adds */
{
    int adds = !!k->in[LAYERNORM_BWD_IN_R1] + !!k->in[LAYERNORM_BWD_IN_R2];
    return (14.0 + adds) * k->attr.layernorm.n * k->attr.layernorm.c;
}
double flops_xent(const struct kinstr *k)
{
    return 4.0 * k->attr.xent.n * k->attr.xent.v;
}
double flops_xent_grad(const struct kinstr *k) { return 2 * flops_xent(k); }
double flops_adam(const struct kinstr *k) { return 12.0 * k->attr.adam.n; }
double flops_elementwise(const struct kinstr *k) { return (double)k->attr.elementwise.n; }
