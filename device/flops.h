/* device/flops.h: the FLOP counters of device/flops.c, which ops.def's
 * rows name and the op table (device/ops_gen.c) points to: each gives the
 * floating-point operations one call of its ops performs. */
#ifndef DEVICE_FLOPS_H
#define DEVICE_FLOPS_H
#include "device/ops.h"

double flops_none(const struct kinstr *k);
double flops_elementwise(const struct kinstr *k); /* one per element */
double flops_matmul(const struct kinstr *k);
double flops_attention(const struct kinstr *k);
double flops_attention_bwd(const struct kinstr *k);
double flops_attention_last(const struct kinstr *k);
double flops_decode(const struct kinstr *k);
double flops_layernorm(const struct kinstr *k);
double flops_layernorm_bwd(const struct kinstr *k);
double flops_xent(const struct kinstr *k);
double flops_xent_grad(const struct kinstr *k);
double flops_adam(const struct kinstr *k);

#endif
