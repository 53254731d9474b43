/* device/exec_side.h: the executors of device/exec_side.c, for the
 * dispatch table (device/exec_gen.c, generated from ops.def). */
#ifndef DEVICE_EXEC_SIDE_H
#define DEVICE_EXEC_SIDE_H
#include "device/ops.h"

void exec_attention_step(const struct kinstr *k);
void exec_attention_last(const struct kinstr *k);
void exec_round_bf16(const struct kinstr *k);
void exec_all_reduce(const struct kinstr *k);
void exec_all_gather(const struct kinstr *k);
void exec_adam_shard(const struct kinstr *k);
void exec_store(const struct kinstr *k);
void exec_dropout(const struct kinstr *k);
void exec_attention_drop(const struct kinstr *k);
void exec_attention_drop_bwd(const struct kinstr *k);
void exec_matmul_ex(const struct kinstr *k);
void exec_add_n(const struct kinstr *k);
void exec_xent_grad(const struct kinstr *k);

#endif
