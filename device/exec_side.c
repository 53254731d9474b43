/* device/exec_side.c: the executors a first read can skip (device/exec.c
 * has the rest and the dispatch table): ops that only the compiler's fusion
 * makes (matmul_ex, add_n, xent_grad), decoding's attention, bf16
 * rounding, the eager all-reduce, gradient accumulation's store, dropout. */
#include "device/exec_side.h"
#include "device/allreduce.h"
#include "device/board.h"
#include "tensor.h"
#include <assert.h>
#include <string.h>

void exec_attention_step(const struct kinstr *k)
{
    const struct decode_attr *d = &k->attr.decode;
    void *const *in = k->in;
    k_attention_step(k->out[ATTENTION_STEP_OUT_O], in[ATTENTION_STEP_IN_KC],
                     in[ATTENTION_STEP_IN_VC], in[ATTENTION_STEP_IN_QKV], d->nb,
                     *(const int32_t *)in[ATTENTION_STEP_IN_POS], d->tmax, d->C, d->H);
}

/* q, k, v already rounded under bf16 (g_attention_last) */
void exec_attention_last(const struct kinstr *k)
{
    const struct attention_attr *at = &k->attr.attention;
    k_attention_last(k->out[ATTENTION_LAST_OUT_O], k->in[ATTENTION_LAST_IN_QKV], at->B, at->T,
                     at->C, at->H);
}

void exec_round_bf16(const struct kinstr *k)
{
    k_round_bf16(k->out[ROUND_BF16_OUT_Y], k->in[ROUND_BF16_IN_X], k->attr.elementwise.n);
}

/* The eager device's all-reduce: one core here, so the tree over this
 * process's cores is its own buffer; the sum continues across processes.
 * (A compiled program's all-reduces run apart: run_all_reduces.) */
void exec_all_reduce(const struct kinstr *k)
{
    const struct all_reduce_attr *ar = &k->attr.all_reduce;
    if (ar->shard) { /* a reduce-scatter, this process's one core its shard */
        struct board_reduce r = {.in = {k->in[ALL_REDUCE_IN_X]}, .out = {k->out[ALL_REDUCE_OUT_Y]},
                                 .len = ar->n, .scale = all_reduce_scale(ar), .shard = 1,
                                 .at = (size_t)ar->at, .total = (size_t)ar->total};
        all_reduce_stretch(&r, 1, 1);
        return;
    }
    long n = k->attr.all_reduce.n;
    float *y = k->out[ALL_REDUCE_OUT_Y];
    float scale = all_reduce_scale(&k->attr.all_reduce);
    memcpy(y, k->in[ALL_REDUCE_IN_X], sizeof(float) * (size_t)n);
    if (xs_hosts() > 1)
        cross_host_sum(&y, &n, 1);
    for (long i = 0; i < n; i++)
        y[i] *= scale;
}

/* --shard-optimizer's Adam: the core updates only the part of the
 * parameter its pod ordinal owns (allreduce.c's shard_piece), M and V
 * being its shard of the moments alone (element j of the layout at j -
 * the shard's start); that part as exec_adam updates a whole parameter. */
void exec_adam_shard(const struct kinstr *k)
{
    const struct adam_attr *ad = &k->attr.adam;
    int cores = (int)ad->shard_cores, shards = cores * xs_hosts(), o = xs_host() * cores + k->core;
    size_t lo, hi;
    shard_piece((size_t)ad->at, (size_t)ad->n, (size_t)ad->total, o, shards, &lo, &hi);
    if (hi == lo)
        return; /* none of this parameter is ours */
    size_t in_m = (size_t)ad->at + lo - shard_lo((size_t)ad->total, o, shards), n = hi - lo;
    float *p = (float *)k->in[ADAM_SHARD_IN_P] + lo, *m = (float *)k->in[ADAM_SHARD_IN_M] + in_m;
    float *v = (float *)k->in[ADAM_SHARD_IN_V] + in_m;
    const float *grad = (const float *)k->in[ADAM_SHARD_IN_GRAD] + lo;
    float lr = *(const float *)k->in[ADAM_SHARD_IN_LR];
    k_adam(p, m, v, grad, n, lr, ad->beta1, ad->beta2, ad->eps,
           *(const int32_t *)k->in[ADAM_SHARD_IN_STEP]);
    if (ad->bf16_state) {
        k_round_bf16(p, p, n);
        k_round_bf16(m, m, n);
        k_round_bf16(v, v, n);
    }
}

/* The eager device's all-gather: one core, so only across processes. */
void exec_all_gather(const struct kinstr *k)
{
    const struct all_reduce_attr *ar = &k->attr.all_reduce;
    struct board_reduce r = {.out = {k->in[ALL_GATHER_IN_X]}, .len = ar->n, .shard = 1,
                             .at = (size_t)ar->at, .total = (size_t)ar->total};
    all_gather_stretch(&r, 1, 1);
}

void exec_store(const struct kinstr *k)
{
    memcpy(k->in[STORE_IN_DST], k->in[STORE_IN_X], sizeof(float) * (size_t)k->attr.elementwise.n);
}

void exec_dropout(const struct kinstr *k)
{
    const struct dropout_attr *d = &k->attr.dropout;
    k_dropout(k->out[DROPOUT_OUT_Y], k->in[DROPOUT_IN_X], k->in[DROPOUT_IN_ROWS],
              k->in[DROPOUT_IN_KEY], d->n, d->c, d->site, d->p);
}

/* Dropout's attention computes in fp32 whatever the precision: an
 * experiment's path (tensor.h, dropout). */
void exec_attention_drop(const struct kinstr *k)
{
    const struct attention_drop_attr *at = &k->attr.attention_drop;
    void *const *in = k->in;
    k_attention_drop(k->out[ATTENTION_DROP_OUT_O], k->out[ATTENTION_DROP_OUT_LSE],
                     in[ATTENTION_DROP_IN_QKV], in[ATTENTION_DROP_IN_ROWS],
                     in[ATTENTION_DROP_IN_KEY], at->B, at->T, at->C, at->H, at->site, at->p);
}

void exec_attention_drop_bwd(const struct kinstr *k)
{
    const struct attention_drop_attr *at = &k->attr.attention_drop;
    void *const *in = k->in;
    k_attention_drop_bwd(k->out[ATTENTION_DROP_BWD_OUT_DQKV], in[ATTENTION_DROP_BWD_IN_DO],
                         in[ATTENTION_DROP_BWD_IN_QKV], in[ATTENTION_DROP_BWD_IN_O],
                         in[ATTENTION_DROP_BWD_IN_LSE], in[ATTENTION_DROP_BWD_IN_ROWS],
                         in[ATTENTION_DROP_BWD_IN_KEY], at->B, at->T, at->C, at->H, at->site,
                         at->p);
}

/* A matmul with its fused epilogue (fuse.c): ReLU and residual adds, or
 * the gate of a ReLU's backward, alone. */
void exec_matmul_ex(const struct kinstr *k)
{
    const struct matmul_attr *mm = &k->attr.matmul;
    void *const *in = k->in;
    float *c = k->out[MATMUL_EX_OUT_C];
    const float *a = in[MATMUL_EX_IN_A], *b = in[MATMUL_EX_IN_B], *bias = in[MATMUL_EX_IN_BIAS];
    const float *r1 = in[MATMUL_EX_IN_R1], *r2 = in[MATMUL_EX_IN_R2], *gate = in[MATMUL_EX_IN_GATE];
    assert(!gate || (!bias && !r1 && !r2 && !mm->relu)); /* fuse.c's rule: a gate alone */
    if (gate && mm->bf16)
        k_matmul_bf16_gated(c, a, b, gate, mm->n, mm->p, mm->q);
    else if (gate)
        k_matmul_gated(c, a, b, gate, mm->n, mm->p, mm->q);
    else if (mm->bf16)
        k_matmul_bf16(c, a, b, bias, r1, r2, mm->relu, mm->n, mm->p, mm->q);
    else
        k_matmul_ex(c, a, b, bias, r1, r2, mm->relu, mm->n, mm->p, mm->q);
}

/* x0 + x1 + ...: the inputs up to the first absent one */
void exec_add_n(const struct kinstr *k)
{
    const float *xs[KMAX_IN];
    int m = 0;
    while (m < KMAX_IN && k->in[m]) {
        xs[m] = k->in[m];
        m++;
    }
    k_add_n(k->out[ADD_N_OUT_Y], xs, m, k->attr.elementwise.n);
}

void exec_xent_grad(const struct kinstr *k)
{
    k_xent_grad(k->out[XENT_GRAD_OUT_LOSS], k->out[XENT_GRAD_OUT_DLOGITS],
                k->in[XENT_GRAD_IN_LOGITS], k->in[XENT_GRAD_IN_TARGETS],
                k->in[XENT_GRAD_IN_DLOSS], k->attr.xent.n, k->attr.xent.v,
                (int)k->attr.xent.seg);
}
