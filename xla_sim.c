/* xla_sim.c: the device. Dispatch (how one instruction becomes a tensor.c
 * call), and a compiled program's run on every simulated core, with the
 * all-reduce between them. graph.c decides what to run; the op table
 * (device/ops.c), the board (device/board.c), the pod's sums
 * (device/allreduce.c) and what a run tells (device/metrics.c: --metrics,
 * --profile) are the rooms below it. */
#include "xla_sim.h"
#include "device/allreduce.h"
#include "util/util.h"
#include <assert.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <omp.h>

/* ---- dispatch: one instruction becomes one tensor.c call ----
 * One exec_<name> a line of ops.def, in its order: what each kernel is
 * called with, operands by name. */

static void exec_embed(const struct kinstr *k)
{
    const struct embed_attr *e = &k->attr.embed;
    k_embed(k->out[EMBED_OUT_Y], k->in[EMBED_IN_IDX], k->in[EMBED_IN_TABLE], e->n, e->c, e->v);
}

static void exec_embed_bwd(const struct kinstr *k)
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

static void exec_add(const struct kinstr *k)
{
    k_add(k->out[ADD_OUT_Y], k->in[ADD_IN_A], k->in[ADD_IN_B], k->attr.elementwise.n);
}

/* bf16: the matrix unit's kernel, with matmul_ex's epilogue left empty. */
static void exec_matmul(const struct kinstr *k)
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
static void exec_matmul_tn(const struct kinstr *k)
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

static void exec_transpose(const struct kinstr *k)
{
    const struct transpose_attr *t = &k->attr.transpose;
    k_transpose(k->out[TRANSPOSE_OUT_Y], k->in[TRANSPOSE_IN_X], t->rows, t->cols);
}

static void exec_sum_rows(const struct kinstr *k)
{
    const struct sum_rows_attr *s = &k->attr.sum_rows;
    float *y = k->out[SUM_ROWS_OUT_Y];
    const float *x = k->in[SUM_ROWS_IN_X];
    if (s->seg > 0)
        k_sum_rows_seg(y, x, s->n, s->q, s->seg);
    else
        k_sum_rows(y, x, s->n, s->q);
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

static void exec_layernorm(const struct kinstr *k)
{
    const struct layernorm_attr *ln = &k->attr.layernorm;
    void *const *in = k->in, *const *out = k->out;
    k_layernorm(out[LAYERNORM_OUT_Y], out[LAYERNORM_OUT_MEAN], out[LAYERNORM_OUT_RSTD],
                in[LAYERNORM_IN_X], in[LAYERNORM_IN_W], in[LAYERNORM_IN_B], ln->n, ln->c);
}

static void exec_layernorm_bwd(const struct kinstr *k)
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

static void exec_attention(const struct kinstr *k)
{
    const struct attention_attr *at = &k->attr.attention;
    (at->bf16 ? k_attention_bf16 : k_attention)(k->out[ATTENTION_OUT_O],
                                                k->out[ATTENTION_OUT_LSE],
                                                k->in[ATTENTION_IN_QKV], at->B, at->T, at->C,
                                                at->H);
}

static void exec_attention_bwd(const struct kinstr *k)
{
    const struct attention_attr *at = &k->attr.attention;
    void *const *in = k->in;
    (at->bf16 ? k_attention_bwd_bf16 : k_attention_bwd)(
        k->out[ATTENTION_BWD_OUT_DQKV], in[ATTENTION_BWD_IN_DO], in[ATTENTION_BWD_IN_QKV],
        in[ATTENTION_BWD_IN_O], in[ATTENTION_BWD_IN_LSE], at->B, at->T, at->C, at->H);
}

static void exec_attention_step(const struct kinstr *k)
{
    const struct decode_attr *d = &k->attr.decode;
    void *const *in = k->in;
    k_attention_step(k->out[ATTENTION_STEP_OUT_O], in[ATTENTION_STEP_IN_KC],
                     in[ATTENTION_STEP_IN_VC], in[ATTENTION_STEP_IN_QKV], d->nb,
                     *(const int32_t *)in[ATTENTION_STEP_IN_POS], d->tmax, d->C, d->H);
}

/* q, k, v already rounded under bf16 (g_attention_last) */
static void exec_attention_last(const struct kinstr *k)
{
    const struct attention_attr *at = &k->attr.attention;
    k_attention_last(k->out[ATTENTION_LAST_OUT_O], k->in[ATTENTION_LAST_IN_QKV], at->B, at->T,
                     at->C, at->H);
}

static void exec_xent(const struct kinstr *k)
{
    k_xent(k->out[XENT_OUT_LOSS], k->in[XENT_IN_LOGITS], k->in[XENT_IN_TARGETS], k->attr.xent.n,
           k->attr.xent.v);
}

static void exec_xent_bwd(const struct kinstr *k)
{
    k_xent_bwd(k->out[XENT_BWD_OUT_DLOGITS], k->in[XENT_BWD_IN_LOGITS],
               k->in[XENT_BWD_IN_TARGETS], k->in[XENT_BWD_IN_DLOSS], k->attr.xent.n,
               k->attr.xent.v);
}

static void exec_fill(const struct kinstr *k)
{
    float *y = k->out[FILL_OUT_Y];
    for (long i = 0; i < k->attr.fill.n; i++)
        y[i] = k->attr.fill.value;
}

/* With bf16_state the parameter and both moments are stored as bf16, as
 * XLA_USE_BF16 stores every float tensor. */
static void exec_adam(const struct kinstr *k)
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

static void exec_round_bf16(const struct kinstr *k)
{
    k_round_bf16(k->out[ROUND_BF16_OUT_Y], k->in[ROUND_BF16_IN_X], k->attr.elementwise.n);
}

/* The eager device's all-reduce: one core here, so the tree over this
 * process's cores is its own buffer; the sum continues across processes.
 * (A compiled program's all-reduces run apart: run_all_reduces.) */
static void exec_all_reduce(const struct kinstr *k)
{
    long n = k->attr.all_reduce.n;
    float *y = k->out[ALL_REDUCE_OUT_Y];
    float scale = all_reduce_scale(&k->attr.all_reduce);
    memcpy(y, k->in[ALL_REDUCE_IN_X], sizeof(float) * (size_t)n);
    if (xs_hosts() > 1)
        cross_host_sum(&y, &n, 1);
    for (long i = 0; i < n; i++)
        y[i] *= scale;
}

static void exec_store(const struct kinstr *k)
{
    memcpy(k->in[STORE_IN_DST], k->in[STORE_IN_X], sizeof(float) * (size_t)k->attr.elementwise.n);
}

static void exec_dropout(const struct kinstr *k)
{
    const struct dropout_attr *d = &k->attr.dropout;
    k_dropout(k->out[DROPOUT_OUT_Y], k->in[DROPOUT_IN_X], k->in[DROPOUT_IN_ROWS],
              k->in[DROPOUT_IN_KEY], d->n, d->c, d->site, d->p);
}

/* Dropout's attention computes in fp32 whatever the precision: an
 * experiment's path (tensor.h, dropout). */
static void exec_attention_drop(const struct kinstr *k)
{
    const struct attention_drop_attr *at = &k->attr.attention_drop;
    void *const *in = k->in;
    k_attention_drop(k->out[ATTENTION_DROP_OUT_O], k->out[ATTENTION_DROP_OUT_LSE],
                     in[ATTENTION_DROP_IN_QKV], in[ATTENTION_DROP_IN_ROWS],
                     in[ATTENTION_DROP_IN_KEY], at->B, at->T, at->C, at->H, at->site, at->p);
}

static void exec_attention_drop_bwd(const struct kinstr *k)
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
static void exec_matmul_ex(const struct kinstr *k)
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
static void exec_add_n(const struct kinstr *k)
{
    const float *xs[KMAX_IN];
    int m = 0;
    while (m < KMAX_IN && k->in[m]) {
        xs[m] = k->in[m];
        m++;
    }
    k_add_n(k->out[ADD_N_OUT_Y], xs, m, k->attr.elementwise.n);
}

static void exec_xent_grad(const struct kinstr *k)
{
    k_xent_grad(k->out[XENT_GRAD_OUT_LOSS], k->out[XENT_GRAD_OUT_DLOGITS],
                k->in[XENT_GRAD_IN_LOGITS], k->in[XENT_GRAD_IN_TARGETS],
                k->in[XENT_GRAD_IN_DLOSS], k->attr.xent.n, k->attr.xent.v);
}

/* The dispatch table, made from ops.def: the line OP(NAME, name, ...)
 * becomes the entry [KOP_NAME] = exec_name. Every op gets one, so an op
 * added to ops.def without its exec_ function above does not compile;
 * there is no default that would run nothing. */
typedef void exec_fn(const struct kinstr *k);
#define OP(NAME, name, ...) [KOP_##NAME] = exec_##name,
static exec_fn *const dispatch[KOP_COUNT] = {
#include "device/ops.def"
};
#undef OP

/* One instruction on one core, timed only when metrics.c is recording, so
 * that an unprofiled run pays nothing for it. */
static void exec_on_core(const struct kinstr *k, int core)
{
    if (!xs_watching()) {
        dispatch[k->op](k);
        return;
    }
    double t0 = now_seconds();
    dispatch[k->op](k);
    xs_kernel_ran(k, core, t0, now_seconds());
}

void xs_exec(const struct kinstr *k) { exec_on_core(k, 0); }

/* ---- compiled programs ---- */

/* Each core's memory: one arena, grown to the largest plan it has run. A
 * replay of a cached program allocates nothing. */
static unsigned char *dev_arena[XS_MAX_CORES];
static size_t dev_arena_cap[XS_MAX_CORES];

static unsigned char *device_arena(int core, size_t bytes)
{
    if (bytes > dev_arena_cap[core]) {
        free(dev_arena[core]);
        dev_arena[core] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!dev_arena[core]) {
            fprintf(stderr, "gpt: out of memory (xla:%d arena of %zu bytes)\n", core, bytes);
            exit(1);
        }
        dev_arena_cap[core] = bytes;
        xs_arena_grew(core, bytes);
    }
    return dev_arena[core];
}

void program_free(Program *p)
{
    if (!p)
        return;
    free(p->ins);
    free(p->tin);
    free(p->tout);
    free(p);
}

static void *resolve(const struct place *pl, unsigned char *arena, void *const *slots)
{
    switch (pl->kind) {
    case PL_ARENA: return arena + pl->at;
    case PL_SLOT: return slots[pl->at];
    default: return NULL;
    }
}

static struct kinstr bind(const struct pinstr *pi, unsigned char *arena, void *const *slots)
{
    struct kinstr k = {.op = pi->op, .attr = pi->attr};
    for (int j = 0; j < KMAX_IN; j++)
        k.in[j] = resolve(&pi->in[j], arena, slots);
    for (int j = 0; j < KMAX_OUT; j++)
        k.out[j] = resolve(&pi->out[j], arena, slots);
    return k;
}

/* Instructions [i0, i1) on one core. */
static void run_instrs(const Program *p, int i0, int i1, int core, unsigned char *arena,
                       void *const *slots)
{
    for (int i = i0; i < i1; i++) {
        struct kinstr k = bind(&p->ins[i], arena, slots);
        exec_on_core(&k, core);
    }
}

static void transfer(const struct transfer *t, int n, unsigned char *arena,
                     void *const *slots, int to_device)
{
    for (int i = 0; i < n; i++) {
        if (to_device)
            memcpy(arena + t[i].at, slots[t[i].slot], (size_t)t[i].bytes);
        else
            memcpy(slots[t[i].slot], arena + t[i].at, (size_t)t[i].bytes);
    }
}

static void transfer_all(const Program *p, int n, unsigned char **arena,
                         void *const *const *slots, int to_device)
{
    double t0 = now_seconds();
    for (int c = 0; c < n; c++) {
        if (to_device)
            transfer(p->tin, p->nin, arena[c], slots[c], 1);
        else
            transfer(p->tout, p->nout, arena[c], slots[c], 0);
    }
    xs_metric_add(to_device ? M_TO_DEVICE : M_FROM_DEVICE, now_seconds() - t0);
}

/* Core 0's result of one all-reduce: the tree over this board's cores'
 * inputs in core order. */
static float *board_sum(const struct pinstr *pi, int n, unsigned char **arena,
                        void *const *const *slots)
{
    const float *parts[XS_MAX_CORES];
    float *out = resolve(&pi->out[ALL_REDUCE_OUT_Y], arena[0], slots[0]);
    for (int c = 0; c < n; c++)
        parts[c] = resolve(&pi->in[ALL_REDUCE_IN_X], arena[c], slots[c]);
    k_tree_sum(out, parts, n, (size_t)pi->attr.all_reduce.n);
    return out;
}

/* The consecutive all-reduces from i0, all at once: each one's tree over
 * the board's cores, then across processes, then the mean (1/replicas, a
 * power of two: exact) copied to every core, so replicas hold the same
 * bits. Returns the index after the stretch. */
static int run_all_reduces(const Program *p, int i0, int n, unsigned char **arena,
                           void *const *const *slots)
{
    int i1 = i0;
    while (i1 < p->n && p->ins[i1].op == KOP_ALL_REDUCE)
        i1++;
    float *sums[i1 - i0];
    long len[i1 - i0], bytes = 0;
    double t0 = now_seconds();
#pragma omp parallel for schedule(dynamic) if (n > 1)
    for (int i = i0; i < i1; i++)
        sums[i - i0] = board_sum(&p->ins[i], n, arena, slots);
    for (int i = i0; i < i1; i++)
        bytes += 4 * (len[i - i0] = p->ins[i].attr.all_reduce.n);
    xs_metric_add(M_ALL_REDUCE, now_seconds() - t0);
    if (xs_hosts() > 1)
        cross_host_sum(sums, len, i1 - i0);
    for (int i = i0; i < i1; i++) {
        const struct all_reduce_attr *ar = &p->ins[i].attr.all_reduce;
        float scale = all_reduce_scale(ar);
        for (long j = 0; j < len[i - i0]; j++)
            sums[i - i0][j] *= scale;
        for (int c = 1; c < n; c++)
            memcpy(resolve(&p->ins[i].out[ALL_REDUCE_OUT_Y], arena[c], slots[c]), sums[i - i0],
                   sizeof(float) * (size_t)len[i - i0]);
    }
    xs_counter_add(C_ALL_REDUCE, i1 - i0);
    xs_counter_add(C_ALL_REDUCE_BYTES, bytes);
    return i1;
}

/* Instructions [i0, i1), free of all-reduces, on every core at once. There
 * is no barrier inside: each core runs its stretch alone, one thread. One
 * core alone gives its kernels every thread instead. */
static void run_stretch(const Program *p, int i0, int i1, int n, unsigned char **arena,
                        void *const *const *slots)
{
    if (n == 1) {
        double t0 = now_seconds();
        run_instrs(p, i0, i1, 0, arena[0], slots[0]);
        xs_core_ran(0, now_seconds() - t0);
        return;
    }
    int threads = omp_get_max_threads() < n ? omp_get_max_threads() : n;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int c = 0; c < n; c++) {
        double t0 = now_seconds();
        run_instrs(p, i0, i1, c, arena[c], slots[c]);
        xs_core_ran(c, now_seconds() - t0);
    }
}

void xs_run_replicated(const Program *p, int n, void *const *const *slots)
{
    unsigned char *arena[XS_MAX_CORES];
    n = n < 1 ? 1 : n;
    for (int c = 0; c < n; c++)
        arena[c] = device_arena(c, p->arena_bytes);
    transfer_all(p, n, arena, slots, 1);
    double t0 = now_seconds();
    for (int i = 0; i < p->n;) {
        int j = i;
        while (j < p->n && p->ins[j].op != KOP_ALL_REDUCE)
            j++;
        if (j > i)
            run_stretch(p, i, j, n, arena, slots);
        i = j < p->n ? run_all_reduces(p, j, n, arena, slots) : j;
    }
    xs_metric_add(n > 1 ? M_EXECUTE_REPLICATED : M_EXECUTE, now_seconds() - t0);
    transfer_all(p, n, arena, slots, 0);
}

