/* xla_sim.c: the device. The op table, dispatch (how one instruction
 * becomes a tensor.c call), the simulated board and its cores, a compiled
 * program's run on every core, and the all-reduce between them. graph.c
 * decides what to run; metrics.c keeps what the run tells (--metrics,
 * --profile). */
#include "xla_sim.h"
#include "pod/comm.h"
#include "util/util.h"
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <omp.h>

/* ---- the op table ---- */

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
#define ATTRS_all_reduce {L(all_reduce, n), L(all_reduce, cores), L(all_reduce, micro)}
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

static void cross_host_sum(float *const *sums, const long *len, int m);

/* ---- dispatch: one instruction becomes one tensor.c call ---- */

static void exec_attention(const struct kinstr *k)
{
    const struct attention_attr *at = &k->attr.attention;
    void *const *in = k->in, *const *out = k->out;
    if (k->op == KOP_ATTENTION)
        (at->bf16 ? k_attention_bf16 : k_attention)(out[ATTENTION_OUT_O], out[ATTENTION_OUT_LSE],
                                                    in[ATTENTION_IN_QKV], at->B, at->T, at->C,
                                                    at->H);
    else
        (at->bf16 ? k_attention_bwd_bf16 : k_attention_bwd)(
            out[ATTENTION_BWD_OUT_DQKV], in[ATTENTION_BWD_IN_DO], in[ATTENTION_BWD_IN_QKV],
            in[ATTENTION_BWD_IN_O], in[ATTENTION_BWD_IN_LSE], at->B, at->T, at->C, at->H);
}

/* Dropout's attention computes in fp32 whatever the precision: an
 * experiment's path (tensor.h, dropout). */
static void exec_attention_drop(const struct kinstr *k)
{
    const struct attention_drop_attr *at = &k->attr.attention_drop;
    void *const *in = k->in, *const *out = k->out;
    if (k->op == KOP_ATTENTION_DROP)
        k_attention_drop(out[ATTENTION_DROP_OUT_O], out[ATTENTION_DROP_OUT_LSE],
                         in[ATTENTION_DROP_IN_QKV], in[ATTENTION_DROP_IN_ROWS],
                         in[ATTENTION_DROP_IN_KEY], at->B, at->T, at->C, at->H, at->site, at->p);
    else
        k_attention_drop_bwd(out[ATTENTION_DROP_BWD_OUT_DQKV], in[ATTENTION_DROP_BWD_IN_DO],
                             in[ATTENTION_DROP_BWD_IN_QKV], in[ATTENTION_DROP_BWD_IN_O],
                             in[ATTENTION_DROP_BWD_IN_LSE], in[ATTENTION_DROP_BWD_IN_ROWS],
                             in[ATTENTION_DROP_BWD_IN_KEY], at->B, at->T, at->C, at->H, at->site,
                             at->p);
}

static void exec_decode(const struct kinstr *k)
{
    const struct decode_attr *d = &k->attr.decode;
    void *const *in = k->in;
    k_attention_step(k->out[ATTENTION_STEP_OUT_O], in[ATTENTION_STEP_IN_KC],
                     in[ATTENTION_STEP_IN_VC], in[ATTENTION_STEP_IN_QKV], d->nb,
                     *(const int32_t *)in[ATTENTION_STEP_IN_POS], d->tmax, d->C, d->H);
}

static void fill(float *y /* [n] */, long n, float v)
{
    for (long i = 0; i < n; i++)
        y[i] = v;
}

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

/* KOP_MATMUL is KOP_MATMUL_EX without the residual inputs, the gate and
 * ReLU; the two share A, B, BIAS and C's places. */
_Static_assert((int)MATMUL_IN_A == MATMUL_EX_IN_A && (int)MATMUL_IN_B == MATMUL_EX_IN_B &&
                   (int)MATMUL_IN_BIAS == MATMUL_EX_IN_BIAS && (int)MATMUL_OUT_C == MATMUL_EX_OUT_C,
               "matmul's operands are matmul_ex's first ones");
static void exec_matmul(const struct kinstr *k)
{
    const struct matmul_attr *mm = &k->attr.matmul;
    void *const *in = k->in;
    float *c = k->out[MATMUL_EX_OUT_C];
    const float *a = in[MATMUL_EX_IN_A], *b = in[MATMUL_EX_IN_B], *bias = in[MATMUL_EX_IN_BIAS];
    const float *r1 = k->op == KOP_MATMUL_EX ? in[MATMUL_EX_IN_R1] : NULL;
    const float *r2 = k->op == KOP_MATMUL_EX ? in[MATMUL_EX_IN_R2] : NULL;
    const float *gate = k->op == KOP_MATMUL_EX ? in[MATMUL_EX_IN_GATE] : NULL;
    assert(!gate || (!bias && !r1 && !r2 && !mm->relu)); /* fuse.c's rule: a gate alone */
    if (gate && mm->bf16)
        k_matmul_bf16_gated(c, a, b, gate, mm->n, mm->p, mm->q);
    else if (gate)
        k_matmul_gated(c, a, b, gate, mm->n, mm->p, mm->q);
    else if (mm->bf16)
        k_matmul_bf16(c, a, b, bias, r1, r2, mm->relu, mm->n, mm->p, mm->q);
    else if (k->op == KOP_MATMUL)
        k_matmul(c, a, b, bias, mm->n, mm->p, mm->q);
    else
        k_matmul_ex(c, a, b, bias, r1, r2, mm->relu, mm->n, mm->p, mm->q);
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

/* The all-reduce's mean: 1/(values summed), a power of two in training,
 * so exact: every core, every host and every micro-batch summed into x. */
static float all_reduce_scale(const struct all_reduce_attr *ar)
{
    return 1.0f / (float)(ar->cores * ar->micro * comm_size());
}

/* The eager device's all-reduce: one core here, so the tree over this
 * process's cores is its own buffer; the sum continues across processes. */
static void exec_all_reduce_alone(const struct kinstr *k)
{
    long n = k->attr.all_reduce.n;
    float *y = k->out[ALL_REDUCE_OUT_Y];
    float scale = all_reduce_scale(&k->attr.all_reduce);
    memcpy(y, k->in[ALL_REDUCE_IN_X], sizeof(float) * (size_t)n);
    if (comm_size() > 1)
        cross_host_sum(&y, &n, 1);
    for (long i = 0; i < n; i++)
        y[i] *= scale;
}

static void dispatch(const struct kinstr *k)
{
    const union kattr *a = &k->attr;
    void *const *in = k->in, *const *out = k->out;
    switch (k->op) {
    case KOP_EMBED:
        k_embed(out[EMBED_OUT_Y], in[EMBED_IN_IDX], in[EMBED_IN_TABLE], a->embed.n, a->embed.c,
                a->embed.v);
        break;
    case KOP_EMBED_BWD: exec_embed_bwd(k); break;
    case KOP_ADD: k_add(out[ADD_OUT_Y], in[ADD_IN_A], in[ADD_IN_B], a->elementwise.n); break;
    case KOP_MATMUL:
    case KOP_MATMUL_EX: exec_matmul(k); break;
    case KOP_MATMUL_TN: exec_matmul_tn(k); break;
    case KOP_TRANSPOSE:
        k_transpose(out[TRANSPOSE_OUT_Y], in[TRANSPOSE_IN_X], a->transpose.rows, a->transpose.cols);
        break;
    case KOP_SUM_ROWS: exec_sum_rows(k); break;
    case KOP_RELU: k_relu(out[RELU_OUT_Y], in[RELU_IN_X], a->elementwise.n); break;
    case KOP_RELU_BWD:
        k_relu_bwd(out[RELU_BWD_OUT_DX], in[RELU_BWD_IN_DY], in[RELU_BWD_IN_Y], a->elementwise.n);
        break;
    case KOP_GELU: k_gelu(out[GELU_OUT_Y], in[GELU_IN_X], a->elementwise.n); break;
    case KOP_GELU_BWD:
        k_gelu_bwd(out[GELU_BWD_OUT_DX], in[GELU_BWD_IN_DY], in[GELU_BWD_IN_X], a->elementwise.n);
        break;
    case KOP_LAYERNORM: exec_layernorm(k); break;
    case KOP_LAYERNORM_BWD: exec_layernorm_bwd(k); break;
    case KOP_ATTENTION:
    case KOP_ATTENTION_BWD: exec_attention(k); break;
    case KOP_ATTENTION_STEP: exec_decode(k); break;
    case KOP_ATTENTION_LAST: /* q, k, v already rounded under bf16 (g_attention_last) */
        k_attention_last(out[ATTENTION_LAST_OUT_O], in[ATTENTION_LAST_IN_QKV], a->attention.B,
                         a->attention.T, a->attention.C, a->attention.H);
        break;
    case KOP_XENT:
        k_xent(out[XENT_OUT_LOSS], in[XENT_IN_LOGITS], in[XENT_IN_TARGETS], a->xent.n, a->xent.v);
        break;
    case KOP_XENT_BWD:
        k_xent_bwd(out[XENT_BWD_OUT_DLOGITS], in[XENT_BWD_IN_LOGITS], in[XENT_BWD_IN_TARGETS],
                   in[XENT_BWD_IN_DLOSS], a->xent.n, a->xent.v);
        break;
    case KOP_XENT_GRAD:
        k_xent_grad(out[XENT_GRAD_OUT_LOSS], out[XENT_GRAD_OUT_DLOGITS], in[XENT_GRAD_IN_LOGITS],
                    in[XENT_GRAD_IN_TARGETS], in[XENT_GRAD_IN_DLOSS], a->xent.n, a->xent.v);
        break;
    case KOP_FILL: fill(out[FILL_OUT_Y], a->fill.n, a->fill.value); break;
    case KOP_ADAM: exec_adam(k); break;
    case KOP_ROUND_BF16:
        k_round_bf16(out[ROUND_BF16_OUT_Y], in[ROUND_BF16_IN_X], a->elementwise.n);
        break;
    case KOP_ALL_REDUCE: exec_all_reduce_alone(k); break;
    case KOP_STORE:
        memcpy(in[STORE_IN_DST], in[STORE_IN_X], sizeof(float) * (size_t)a->elementwise.n);
        break;
    case KOP_ADD_N: exec_add_n(k); break;
    case KOP_DROPOUT:
        k_dropout(out[DROPOUT_OUT_Y], in[DROPOUT_IN_X], in[DROPOUT_IN_ROWS], in[DROPOUT_IN_KEY],
                  a->dropout.n, a->dropout.c, a->dropout.site, a->dropout.p);
        break;
    case KOP_ATTENTION_DROP:
    case KOP_ATTENTION_DROP_BWD: exec_attention_drop(k); break;
    default: break;
    }
}

/* One instruction on one core, timed only when metrics.c is recording, so
 * that an unprofiled run pays nothing for it. */
static void exec_on_core(const struct kinstr *k, int core)
{
    if (!xs_watching()) {
        dispatch(k);
        return;
    }
    double t0 = now_seconds();
    dispatch(k);
    xs_kernel_ran(k, core, t0, now_seconds());
}

void xs_exec(const struct kinstr *k) { exec_on_core(k, 0); }

/* ---- the simulated board ---- */

/* Public figures (Google Cloud TPU documentation, system architecture
 * pages): HBM per chip divided among the devices PyTorch/XLA sees on it.
 * v2 and v3 chips hold two TensorCores, each its own device; v4 and v5p
 * fuse theirs into one "megacore" device per chip; v5e and v6e chips have
 * one core. */
static const struct tpu_spec tpus[] = {
    {"v2-8", 8, 8, "4 chips x 2 cores, 16 GiB HBM per chip"},
    {"v3-8", 8, 16, "4 chips x 2 cores, 32 GiB HBM per chip"},
    {"v4-8", 4, 32, "4 chips, one megacore device each, 32 GiB HBM per chip"},
    {"v5e-8", 8, 16, "8 chips x 1 core, 16 GiB HBM per chip"},
    {"v5p-8", 4, 95, "4 chips, one megacore device each, 95 GiB HBM per chip"},
    {"v6e-8", 8, 32, "8 chips x 1 core, 32 GiB HBM per chip"},
};
#define NTPUS (int)(sizeof tpus / sizeof *tpus)

const struct tpu_spec *xs_tpu(const char *name)
{
    for (int i = 0; i < NTPUS; i++)
        if (!strcmp(tpus[i].name, name))
            return &tpus[i];
    return NULL;
}

const char *xs_tpu_names(void)
{
    static char buf[256];
    if (!buf[0])
        for (int i = 0; i < NTPUS; i++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "",
                     tpus[i].name);
    return buf;
}

static struct {
    char name[64];
    int cores;
    size_t hbm;
} board = {"xla", 1, (size_t)16 << 30};

void xs_set_device(const char *name, int cores, size_t hbm_bytes)
{
    snprintf(board.name, sizeof board.name, "%s", name);
    board.cores = cores < 1 ? 1 : cores > XS_MAX_CORES ? XS_MAX_CORES : cores;
    board.hbm = hbm_bytes;
}

int xs_cores(void) { return board.cores; }
size_t xs_hbm(void) { return board.hbm; }
const char *xs_device_name(void) { return board.name; }
int xs_hosts(void) { return comm_size(); }
int xs_host(void) { return comm_rank(); }

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

/* The boards' sums of every process, summed across processes (comm.c adds
 * them in the tree's order over ranks: a board's cores are a subtree of
 * the pod's, so the pod's sum has the bits of one board with all its
 * cores). The stretch's buffers travel as one message, as XLA's all-reduce
 * combiner would send them. */
static void cross_host_sum(float *const *sums, const long *len, int m)
{
    size_t total = 0;
    for (int i = 0; i < m; i++)
        total += (size_t)len[i];
    float *packed = malloc(sizeof(float) * total + 1), *at = packed;
    if (!packed) {
        fprintf(stderr, "gpt: out of memory (all-reduce of %zu floats)\n", total);
        exit(1);
    }
    for (int i = 0; i < m; at += len[i], i++)
        memcpy(at, sums[i], sizeof(float) * (size_t)len[i]);
    struct comm_traffic moved = {0, 0};
    double t0 = now_seconds();
    comm_all_reduce(packed, total, &moved);
    xs_metric_add(M_HOST_ALL_REDUCE, now_seconds() - t0);
    xs_counter_add(C_HOST_ALL_REDUCE_BYTES, (long)(total * sizeof(float)));
    xs_counter_add(C_HOST_SENT_BYTES, (long)moved.sent);
    xs_counter_add(C_HOST_RECEIVED_BYTES, (long)moved.received);
    at = packed;
    for (int i = 0; i < m; at += len[i], i++)
        memcpy(sums[i], at, sizeof(float) * (size_t)len[i]);
    free(packed);
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
    if (comm_size() > 1)
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

