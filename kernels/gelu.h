/* kernels/gelu.h: GPT-2's GELU: its constants, spelled once for the
 * kernel (tensor.c, which does these steps over vec.h's vectors) and its
 * twin, and the twin's steps a lane at a time (tensor_ref.c); the two
 * give the same bits:
 *   y = x sigmoid(2u) = 0.5 x (1 + tanh u) = x / (1 + e^-2u),
 *   u = sqrt(2/pi) (x + K x^3),
 * each step one IEEE operation in the order below, e^t vec.h's vexp
 * (exp_lane, base.h). fmaf is no step here: the kernel fuses nothing.
 * Where e^t leaves the float range (|t| > GELU_SAT, |x| > ~10) the result
 * is saturated: s is 0 or 1 and the slope's term 0, so no inf * 0 makes a
 * NaN however large x is. Included by tensor.c and tensor_ref.c only. */
#ifndef KERNELS_GELU_H
#define KERNELS_GELU_H
#include "kernels/base.h"

#define GELU_2C 1.59576912f /* 2 sqrt(2/pi) */
#define GELU_K 0.044715f
#define GELU_3K 0.134145f /* 3 GELU_K, u's slope */
#define GELU_SAT 88.0f    /* |t| beyond this: saturated */

/* t = -2u = (x (-2 sqrt(2/pi))) (x^2 K + 1): the sigmoid's argument, negated. */
static inline float gelu_t_lane(float x)
{
    float x2 = x * x;
    return (x * -GELU_2C) * (x2 * GELU_K + 1.0f);
}

/* s = sigmoid(-t) = 1 / (1 + e^t), 0 where e^t overflows; *e = e^t. */
static inline float gelu_s_lane(float t, float *e)
{
    *e = exp_lane(t);
    return t > GELU_SAT ? 0.0f : 1.0f / (1.0f + *e);
}

/* 2u' = 2 sqrt(2/pi) (3K x^2 + 1): the backward's slope of -t. */
static inline float gelu_slope_lane(float x)
{
    return (x * GELU_2C) * (x * x * GELU_3K + 1.0f);
}

/* 1 where t is saturated either way: the slope's term is then 0. */
static inline int gelu_saturated(float t) { return t > GELU_SAT || -t > GELU_SAT; }

#endif
