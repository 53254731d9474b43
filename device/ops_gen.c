/* device/ops_gen.c: the op table, kop_table: a row per op of device/ops.def.
 * Generated from device/ops.def by gen/gen.c (`make gen`): edit that, not
 * this file, then run make gen; make test's gen suite fails while this file
 * is stale. */
#include "device/flops.h"
#include "device/ops.h"
#include <stddef.h>

/* What the dumps and the profile print of each attribute struct
 * (ops.def's ATTRS rows): name, offset in union kattr, is_float; a NULL
 * name ends it. */
static const struct kop_attr embed_attrs[] = {
    {"n", offsetof(union kattr, embed.n), 0},
    {"c", offsetof(union kattr, embed.c), 0},
    {"v", offsetof(union kattr, embed.v), 0},
    {"seg", offsetof(union kattr, embed.seg), 0},
    {NULL, 0, 0},
};

static const struct kop_attr elementwise_attrs[] = {
    {"n", offsetof(union kattr, elementwise.n), 0},
    {NULL, 0, 0},
};

static const struct kop_attr matmul_attrs[] = {
    {"n", offsetof(union kattr, matmul.n), 0},
    {"p", offsetof(union kattr, matmul.p), 0},
    {"q", offsetof(union kattr, matmul.q), 0},
    {"seg", offsetof(union kattr, matmul.seg), 0},
    {"bf16", offsetof(union kattr, matmul.bf16), 0},
    {"relu", offsetof(union kattr, matmul.relu), 0},
    {NULL, 0, 0},
};

static const struct kop_attr transpose_attrs[] = {
    {"rows", offsetof(union kattr, transpose.rows), 0},
    {"cols", offsetof(union kattr, transpose.cols), 0},
    {NULL, 0, 0},
};

static const struct kop_attr sum_rows_attrs[] = {
    {"n", offsetof(union kattr, sum_rows.n), 0},
    {"q", offsetof(union kattr, sum_rows.q), 0},
    {"seg", offsetof(union kattr, sum_rows.seg), 0},
    {NULL, 0, 0},
};

static const struct kop_attr layernorm_attrs[] = {
    {"n", offsetof(union kattr, layernorm.n), 0},
    {"c", offsetof(union kattr, layernorm.c), 0},
    {"seg", offsetof(union kattr, layernorm.seg), 0},
    {NULL, 0, 0},
};

static const struct kop_attr attention_attrs[] = {
    {"B", offsetof(union kattr, attention.B), 0},
    {"T", offsetof(union kattr, attention.T), 0},
    {"C", offsetof(union kattr, attention.C), 0},
    {"H", offsetof(union kattr, attention.H), 0},
    {"bf16", offsetof(union kattr, attention.bf16), 0},
    {NULL, 0, 0},
};

static const struct kop_attr decode_attrs[] = {
    {"nb", offsetof(union kattr, decode.nb), 0},
    {"tmax", offsetof(union kattr, decode.tmax), 0},
    {"C", offsetof(union kattr, decode.C), 0},
    {"H", offsetof(union kattr, decode.H), 0},
    {NULL, 0, 0},
};

static const struct kop_attr xent_attrs[] = {
    {"n", offsetof(union kattr, xent.n), 0},
    {"v", offsetof(union kattr, xent.v), 0},
    {"seg", offsetof(union kattr, xent.seg), 0},
    {NULL, 0, 0},
};

static const struct kop_attr fill_attrs[] = {
    {"n", offsetof(union kattr, fill.n), 0},
    {"value", offsetof(union kattr, fill.value), 1},
    {NULL, 0, 0},
};

static const struct kop_attr adam_attrs[] = {
    {"n", offsetof(union kattr, adam.n), 0},
    {"bf16_state", offsetof(union kattr, adam.bf16_state), 0},
    {"beta1", offsetof(union kattr, adam.beta1), 1},
    {"beta2", offsetof(union kattr, adam.beta2), 1},
    {"eps", offsetof(union kattr, adam.eps), 1},
    {NULL, 0, 0},
};

static const struct kop_attr all_reduce_attrs[] = {
    {"n", offsetof(union kattr, all_reduce.n), 0},
    {"cores", offsetof(union kattr, all_reduce.cores), 0},
    {"micro", offsetof(union kattr, all_reduce.micro), 0},
    {"shard", offsetof(union kattr, all_reduce.shard), 0},
    {"at", offsetof(union kattr, all_reduce.at), 0},
    {"total", offsetof(union kattr, all_reduce.total), 0},
    {NULL, 0, 0},
};

static const struct kop_attr dropout_attrs[] = {
    {"n", offsetof(union kattr, dropout.n), 0},
    {"c", offsetof(union kattr, dropout.c), 0},
    {"site", offsetof(union kattr, dropout.site), 0},
    {"p", offsetof(union kattr, dropout.p), 1},
    {NULL, 0, 0},
};

static const struct kop_attr attention_drop_attrs[] = {
    {"B", offsetof(union kattr, attention_drop.B), 0},
    {"T", offsetof(union kattr, attention_drop.T), 0},
    {"C", offsetof(union kattr, attention_drop.C), 0},
    {"H", offsetof(union kattr, attention_drop.H), 0},
    {"site", offsetof(union kattr, attention_drop.site), 0},
    {"p", offsetof(union kattr, attention_drop.p), 1},
    {NULL, 0, 0},
};

/* name, operand counts, printable attributes, FLOP count, inputs written */
const struct kop_info kop_table[KOP_COUNT] = {
    [KOP_EMBED] = {"embed", EMBED_NIN, EMBED_NOUT, embed_attrs, flops_none, 0},
    [KOP_EMBED_BWD] = {"embed_bwd", EMBED_BWD_NIN, EMBED_BWD_NOUT, embed_attrs, flops_none, 0},
    [KOP_ADD] = {"add", ADD_NIN, ADD_NOUT, elementwise_attrs, flops_elementwise, 0},
    [KOP_MATMUL] = {"matmul", MATMUL_NIN, MATMUL_NOUT, matmul_attrs, flops_matmul, 0},
    [KOP_MATMUL_TN] = {"matmul_tn", MATMUL_TN_NIN, MATMUL_TN_NOUT, matmul_attrs, flops_matmul, 0},
    [KOP_TRANSPOSE] = {"transpose", TRANSPOSE_NIN, TRANSPOSE_NOUT, transpose_attrs, flops_none, 0},
    [KOP_SUM_ROWS] = {"sum_rows", SUM_ROWS_NIN, SUM_ROWS_NOUT, sum_rows_attrs, flops_none, 0},
    [KOP_RELU] = {"relu", RELU_NIN, RELU_NOUT, elementwise_attrs, flops_elementwise, 0},
    [KOP_RELU_BWD] = {"relu_bwd", RELU_BWD_NIN, RELU_BWD_NOUT, elementwise_attrs, flops_elementwise,
                      0},
    [KOP_GELU] = {"gelu", GELU_NIN, GELU_NOUT, elementwise_attrs, flops_elementwise, 0},
    [KOP_GELU_BWD] = {"gelu_bwd", GELU_BWD_NIN, GELU_BWD_NOUT, elementwise_attrs, flops_elementwise,
                      0},
    [KOP_LAYERNORM] = {"layernorm", LAYERNORM_NIN, LAYERNORM_NOUT, layernorm_attrs, flops_layernorm,
                       0},
    [KOP_LAYERNORM_BWD] = {"layernorm_bwd", LAYERNORM_BWD_NIN, LAYERNORM_BWD_NOUT, layernorm_attrs,
                           flops_layernorm_bwd, 0},
    [KOP_ATTENTION] = {"attention", ATTENTION_NIN, ATTENTION_NOUT, attention_attrs, flops_attention,
                       0},
    [KOP_ATTENTION_BWD] = {"attention_bwd", ATTENTION_BWD_NIN, ATTENTION_BWD_NOUT, attention_attrs,
                           flops_attention_bwd, 0},
    [KOP_ATTENTION_STEP] = {"attention_step", ATTENTION_STEP_NIN, ATTENTION_STEP_NOUT, decode_attrs,
                            flops_decode, 1u << ATTENTION_STEP_IN_KC | 1u << ATTENTION_STEP_IN_VC},
    [KOP_ATTENTION_LAST] = {"attention_last", ATTENTION_LAST_NIN, ATTENTION_LAST_NOUT,
                            attention_attrs, flops_attention_last, 0},
    [KOP_XENT] = {"xent", XENT_NIN, XENT_NOUT, xent_attrs, flops_xent, 0},
    [KOP_XENT_BWD] = {"xent_bwd", XENT_BWD_NIN, XENT_BWD_NOUT, xent_attrs, flops_xent, 0},
    [KOP_FILL] = {"fill", FILL_NIN, FILL_NOUT, fill_attrs, flops_none, 0},
    [KOP_ADAM] = {"adam", ADAM_NIN, ADAM_NOUT, adam_attrs, flops_adam,
                  1u << ADAM_IN_P | 1u << ADAM_IN_M | 1u << ADAM_IN_V},
    [KOP_ADAM_SHARD] = {"adam_shard", ADAM_SHARD_NIN, ADAM_SHARD_NOUT, adam_attrs, flops_adam,
                        1u << ADAM_SHARD_IN_P | 1u << ADAM_SHARD_IN_M | 1u << ADAM_SHARD_IN_V},
    [KOP_ROUND_BF16] = {"round_bf16", ROUND_BF16_NIN, ROUND_BF16_NOUT, elementwise_attrs,
                        flops_none, 0},
    [KOP_ALL_REDUCE] = {"all_reduce", ALL_REDUCE_NIN, ALL_REDUCE_NOUT, all_reduce_attrs, flops_none,
                        0},
    [KOP_ALL_GATHER] = {"all_gather", ALL_GATHER_NIN, ALL_GATHER_NOUT, all_reduce_attrs, flops_none,
                        1u << ALL_GATHER_IN_X},
    [KOP_STORE] = {"store", STORE_NIN, STORE_NOUT, elementwise_attrs, flops_none,
                   1u << STORE_IN_DST},
    [KOP_DROPOUT] = {"dropout", DROPOUT_NIN, DROPOUT_NOUT, dropout_attrs, flops_none, 0},
    [KOP_ATTENTION_DROP] = {"attention_drop", ATTENTION_DROP_NIN, ATTENTION_DROP_NOUT,
                            attention_drop_attrs, flops_attention, 0},
    [KOP_ATTENTION_DROP_BWD] = {"attention_drop_bwd", ATTENTION_DROP_BWD_NIN,
                                ATTENTION_DROP_BWD_NOUT, attention_drop_attrs, flops_attention_bwd,
                                0},
    [KOP_MATMUL_EX] = {"matmul_ex", MATMUL_EX_NIN, MATMUL_EX_NOUT, matmul_attrs, flops_matmul, 0},
    [KOP_ADD_N] = {"add_n", ADD_N_NIN, ADD_N_NOUT, elementwise_attrs, flops_elementwise, 0},
    [KOP_XENT_GRAD] = {"xent_grad", XENT_GRAD_NIN, XENT_GRAD_NOUT, xent_attrs, flops_xent_grad, 0},
};
