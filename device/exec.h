/* device/exec.h: dispatch, one instruction on the calling thread as the
 * tensor.c call its op names: xs_dispatch (device/exec_gen.c, generated
 * from ops.def), and the executors of device/exec.c that its table names
 * (device/exec_side.h has the others). */
#ifndef DEVICE_EXEC_H
#define DEVICE_EXEC_H
#include "device/ops.h"

void xs_dispatch(const struct kinstr *k);

void exec_embed(const struct kinstr *k);
void exec_embed_bwd(const struct kinstr *k);
void exec_matmul(const struct kinstr *k);
void exec_matmul_tn(const struct kinstr *k);
void exec_transpose(const struct kinstr *k);
void exec_sum_rows(const struct kinstr *k);
void exec_layernorm(const struct kinstr *k);
void exec_layernorm_bwd(const struct kinstr *k);
void exec_attention(const struct kinstr *k);
void exec_attention_bwd(const struct kinstr *k);
void exec_xent(const struct kinstr *k);
void exec_xent_bwd(const struct kinstr *k);
void exec_fill(const struct kinstr *k);
void exec_adam(const struct kinstr *k);

#endif
