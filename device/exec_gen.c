/* device/exec_gen.c: dispatch: the point-wise ops' executors, and every op's
 * in a table by its number. Generated from device/ops.def by gen/gen.c (`make
 * gen`): edit that, not this file, then run make gen; make test's gen suite
 * fails while this file is stale. */
#include "device/exec.h"
#include "device/exec_side.h"
#include "tensor.h"

/* A POINTWISE row's executor: its kernel takes the output, the inputs in
 * the row's order, and n. */
static void exec_add(const struct kinstr *k)
{
    k_add(k->out[ADD_OUT_Y], k->in[ADD_IN_A], k->in[ADD_IN_B], k->attr.elementwise.n);
}

static void exec_relu(const struct kinstr *k)
{
    k_relu(k->out[RELU_OUT_Y], k->in[RELU_IN_X], k->attr.elementwise.n);
}

static void exec_relu_bwd(const struct kinstr *k)
{
    k_relu_bwd(k->out[RELU_BWD_OUT_DX], k->in[RELU_BWD_IN_DY], k->in[RELU_BWD_IN_Y],
               k->attr.elementwise.n);
}

static void exec_gelu(const struct kinstr *k)
{
    k_gelu(k->out[GELU_OUT_Y], k->in[GELU_IN_X], k->attr.elementwise.n);
}

static void exec_gelu_bwd(const struct kinstr *k)
{
    k_gelu_bwd(k->out[GELU_BWD_OUT_DX], k->in[GELU_BWD_IN_DY], k->in[GELU_BWD_IN_X],
               k->attr.elementwise.n);
}

/* Every op's executor: the point-wise ones above, the others by hand in
 * device/exec.c and device/exec_side.c (an op without one does not compile;
 * there is no default that would run nothing). */
typedef void exec_fn(const struct kinstr *k);
static exec_fn *const dispatch[KOP_COUNT] = {
    [KOP_EMBED] = exec_embed,
    [KOP_EMBED_BWD] = exec_embed_bwd,
    [KOP_ADD] = exec_add,
    [KOP_MATMUL] = exec_matmul,
    [KOP_MATMUL_TN] = exec_matmul_tn,
    [KOP_TRANSPOSE] = exec_transpose,
    [KOP_SUM_ROWS] = exec_sum_rows,
    [KOP_RELU] = exec_relu,
    [KOP_RELU_BWD] = exec_relu_bwd,
    [KOP_GELU] = exec_gelu,
    [KOP_GELU_BWD] = exec_gelu_bwd,
    [KOP_LAYERNORM] = exec_layernorm,
    [KOP_LAYERNORM_BWD] = exec_layernorm_bwd,
    [KOP_ATTENTION] = exec_attention,
    [KOP_ATTENTION_BWD] = exec_attention_bwd,
    [KOP_ATTENTION_STEP] = exec_attention_step,
    [KOP_ATTENTION_LAST] = exec_attention_last,
    [KOP_XENT] = exec_xent,
    [KOP_XENT_BWD] = exec_xent_bwd,
    [KOP_FILL] = exec_fill,
    [KOP_ADAM] = exec_adam,
    [KOP_ADAM_SHARD] = exec_adam_shard,
    [KOP_ROUND_BF16] = exec_round_bf16,
    [KOP_ALL_REDUCE] = exec_all_reduce,
    [KOP_ALL_GATHER] = exec_all_gather,
    [KOP_STORE] = exec_store,
    [KOP_DROPOUT] = exec_dropout,
    [KOP_ATTENTION_DROP] = exec_attention_drop,
    [KOP_ATTENTION_DROP_BWD] = exec_attention_drop_bwd,
    [KOP_MATMUL_EX] = exec_matmul_ex,
    [KOP_ADD_N] = exec_add_n,
    [KOP_XENT_GRAD] = exec_xent_grad,
};

void xs_dispatch(const struct kinstr *k) { dispatch[k->op](k); }
