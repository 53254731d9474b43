/* gpt.c: the program. The model written as graph ops, its training step
 * and sampler, its checkpoints, and the command line.
 *
 * The model is the reference bitesizedGPT (tests/reference_model.py), op
 * for op. The file reads top-down, the model first:
 *   the model          its parameters by name, the forward pass, the loss
 *                      and the training step (backward, all-reduce, Adam)
 *   sampling           the KV-cache decoder, temperature and top-k
 *   data parallelism   per-core replicas and batch shards, kept out of the
 *                      model's way
 *   checkpoints        the model to and from safetensors tensors (the file
 *                      format itself is safetensors.c)
 *   helpers            random numbers, batches, allocation
 *   a pod              several processes (gpt-mpi): the master, errors
 *                      said once, flags and data checked equal, shares
 *   the program        data, flags, train, sample, eval, main (tests link
 *                      everything above it) */
#include "gpt.h"
#include "data.h"
#include "loader.h"
#include "watch.h"
#include "fmath.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void *xcalloc(size_t n, size_t size);

/* ==== the model ==== */

/* One block's parameters in a recorded graph. Shapes are PyTorch's, but
 * a Linear layer's weight [out,in] is held as W^T [in,out], the right
 * operand of x W^T: param_leaves transposes the weight's leaf in the
 * graph, or binds the sampler's copy kept transposed (transposed_weights).
 * C is the embedding width, M the MLP's. The reference's names are on the
 * right, under decode_transformer.blocks.<l>. */
struct block_leaves {
    Tensor *qkv_wt;           /* [C,3C] attention.attention.weight^T */
    Tensor *ln1_w, *ln1_b;    /* [C]    layer_norms.0, before attention */
    Tensor *ln2_w, *ln2_b;    /* [C]    layer_norms.1, before the MLP */
    Tensor *fc_wt, *fc_b;     /* [C,M], [M] compute.0 */
    Tensor *proj_wt, *proj_b; /* [M,C], [C] compute.2 */
};

/* The whole model's leaves in one recorded graph, filled from the
 * parameter table by param_leaves; V is the vocabulary, T the context.
 * Reference names under decode_transformer. */
struct model_leaves {
    Tensor *tok_emb;                       /* [C,V] token_embedding.weight */
    Tensor *pos_emb;                       /* [C,T] postn_embedding.weight */
    struct block_leaves block[MAX_LAYERS]; /* blocks.<l> */
    Tensor *lnf_w, *lnf_b;                 /* [C]   unembedding.0 */
    Tensor *head_wt, *head_b;              /* [C,V], [V] unembedding.1 */
};

/* Made in the data-parallel section: leaves with a buffer on every core. */
static void param_leaves(Model *m, Graph *g, struct model_leaves *L, Tensor **leaf,
                         int with_grad, float *wt);
static float *transposed_weights(const Model *m);
static Tensor *moment_leaf(const Model *m, Graph *g, int which, const Param *p);
static Tensor *shard_leaf(Graph *g, const Batch *b, int32_t *col);

/* ---- parameters ----
 * Model.p lists them in the reference's state_dict order, which is also
 * the order initial weights are drawn in; each records the slot its leaf
 * fills in struct model_leaves. */

/* A leaf's slot, e.g. LEAF(block[l].fc_w): an offset rather than a
 * pointer, as every recorded graph has leaves of its own. */
#define LEAF(member) offsetof(struct model_leaves, member)
#define NO_BIAS ((size_t)-1)

static void add_param(Model *m, const char *name, int ndim, int rows, int cols,
                      float fan_in, size_t leaf)
{
    Param *p = &m->p[m->np++];
    snprintf(p->name, sizeof p->name, "decode_transformer.%s", name);
    p->ndim = ndim;
    p->rows = rows;
    p->cols = cols;
    p->off = m->nw;
    p->fan_in = fan_in;
    p->leaf = leaf;
    m->nw += (size_t)rows * cols;
}

/* A Linear layer: weight [out,in] and, unless b_leaf is NO_BIAS, bias [out].
 * Its weight's slot holds W^T (struct block_leaves); the embeddings, also
 * Linear in the reference, are tables looked up by column: NO_MATMUL. */
#define NO_MATMUL 0
#define MATMUL 1
static void add_linear(Model *m, const char *name, int out, int in, size_t w_leaf,
                       size_t b_leaf, int matmul)
{
    char n[64];
    snprintf(n, sizeof n, "%s.weight", name);
    add_param(m, n, 2, out, in, (float)in, w_leaf);
    m->p[m->np - 1].matmul_t = matmul;
    if (b_leaf != NO_BIAS) {
        snprintf(n, sizeof n, "%s.bias", name);
        add_param(m, n, 1, 1, out, (float)in, b_leaf);
    }
}

static void add_layernorm(Model *m, const char *name, int c, size_t w_leaf, size_t b_leaf)
{
    char n[64];
    snprintf(n, sizeof n, "%s.weight", name);
    add_param(m, n, 1, 1, c, 0, w_leaf);
    m->p[m->np - 1].is_ln_weight = 1;
    snprintf(n, sizeof n, "%s.bias", name);
    add_param(m, n, 1, 1, c, 0, b_leaf);
}

/* "blocks.<l>.<part>" in buf [64] */
static const char *in_block(char *buf, int l, const char *part)
{
    snprintf(buf, 64, "blocks.%d.%s", l, part);
    return buf;
}

static void build_params(Model *m)
{
    const Config *c = &m->cfg;
    int V = c->vocab, T = c->context, C = c->embed, M = c->mlp;
    char n[64];
    add_linear(m, "token_embedding", C, V, LEAF(tok_emb), NO_BIAS, NO_MATMUL);
    add_linear(m, "postn_embedding", C, T, LEAF(pos_emb), NO_BIAS, NO_MATMUL);
    for (int l = 0; l < c->layers; l++) {
        add_linear(m, in_block(n, l, "attention.attention"), 3 * C, C, LEAF(block[l].qkv_wt),
                   NO_BIAS, MATMUL);
        add_layernorm(m, in_block(n, l, "layer_norms.0"), C, LEAF(block[l].ln1_w),
                      LEAF(block[l].ln1_b));
        if (c->no_mlp)
            continue; /* an attention-only block */
        add_layernorm(m, in_block(n, l, "layer_norms.1"), C, LEAF(block[l].ln2_w),
                      LEAF(block[l].ln2_b));
        add_linear(m, in_block(n, l, "compute.0"), M, C, LEAF(block[l].fc_wt),
                   LEAF(block[l].fc_b), MATMUL);
        add_linear(m, in_block(n, l, "compute.2"), C, M, LEAF(block[l].proj_wt),
                   LEAF(block[l].proj_b), MATMUL);
    }
    add_layernorm(m, "unembedding.0", C, LEAF(lnf_w), LEAF(lnf_b));
    add_linear(m, "unembedding.1", V, C, LEAF(head_wt), LEAF(head_b), MATMUL);
}

int model_init(Model *m, const Config *c, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->seed = seed;
    build_params(m);
    m->w = xcalloc(m->nw, sizeof(float));
    m->m = xcalloc(m->nw, sizeof(float));
    m->v = xcalloc(m->nw, sizeof(float));
    Rng r;
    rng_seed(&r, seed, 0);
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        float *w = m->w + p->off; /* [rows*cols] */
        float bound = p->fan_in > 0 ? 1.0f / sqrtf(p->fan_in) : 0;
        for (int j = 0; j < p->rows * p->cols; j++)
            w[j] = p->fan_in > 0 ? (2 * rng_float(&r) - 1) * bound
                                 : (float)p->is_ln_weight;
    }
    return 0;
}

void model_free(Model *m)
{
    free(m->w);
    free(m->m);
    free(m->v);
    free(m->rep);
    m->w = m->m = m->v = m->rep = NULL;
    m->ncores = 0;
}

float *model_param(Model *m, const char *name)
{
    for (int i = 0; i < m->np; i++)
        if (!strcmp(m->p[i].name, name))
            return m->w + m->p[i].off;
    return NULL;
}

/* ---- the forward pass ---- */

/* What attention attends over: whole causal windows (training, and the
 * sampler past the context), or, for one new position, a layer's KV cache
 * (the decode step). */
struct attn_mode {
    int windows, T, heads;     /* windows of T positions each */
    Tensor *k_cache, *v_cache; /* [context,C] each, or NULL: windows */
    Tensor *pos;               /* i32 [1]: the new position, with a cache */
    float dropout;             /* > 0 only in a training step */
    Tensor *rows, *key;        /* dropout's: i32 [n] global rows, i32 [2] the step's key */
    int layer;                 /* the block: its dropouts are sites 3l, 3l+1, 3l+2 */
    Tensor *last;              /* i32 [windows] each window's last row, or NULL */
};

/* x's rows a->last (all when NULL): the sampler reads only each window's
 * last row, and past its attention a block's rows are independent. A
 * table's entries are its columns (embed), so the rows are looked up in
 * x^T. */
static Tensor *kept_rows(Graph *g, const struct attn_mode *a, Tensor *x /* [n,C] */)
{
    return a->last ? g_embed(g, a->last, g_transpose(g, x)) : x;
}

/* Dropout at one of the block's three sites, when training with it. */
static Tensor *drop(Graph *g, const struct attn_mode *a, Tensor *x, int which)
{
    return a->dropout > 0 ? g_dropout(g, x, a->rows, a->key, a->dropout, 3 * a->layer + which)
                          : x;
}

/* tok, pos i32 [n] -> x [n,C] = token embedding + position embedding */
static Tensor *embed(Graph *g, const struct model_leaves *L, Tensor *tok, Tensor *pos)
{
    Tensor *t = g_embed(g, tok, L->tok_emb); /* [n,C] */
    Tensor *p = g_embed(g, pos, L->pos_emb); /* [n,C] */
    return g_add(g, t, p);
}

/* The attention half of a block: h = x + attn(ln1(x)), [n,C] -> [n,C]. */
static Tensor *attention_half(Graph *g, const struct block_leaves *b, Tensor *x,
                              const struct attn_mode *a)
{
    Tensor *ln = g_layernorm(g, x, b->ln1_w, b->ln1_b); /* [n,C] */
    Tensor *qkv = g_matmul(g, ln, b->qkv_wt, NULL);     /* [n,3C] */
    Tensor *att; /* [n,C] */
    if (a->k_cache)
        att = g_attention_step(g, qkv, a->k_cache, a->v_cache, a->pos, a->heads);
    else if (a->last) /* [windows,C] */
        att = g_attention_last(g, qkv, a->windows, a->T, a->heads);
    else if (a->dropout > 0) /* site 3l: the probabilities */
        att = g_attention_drop(g, qkv, a->rows, a->key, a->windows, a->T, a->heads, a->dropout,
                               3 * a->layer);
    else
        att = g_attention(g, qkv, a->windows, a->T, a->heads);
    return g_add(g, kept_rows(g, a, x), drop(g, a, att, 1));
}

/* The MLP half of a block: h + mlp(ln2(h)), [n,C] -> [n,C]. */
static Tensor *mlp_half(Graph *g, const struct block_leaves *b, Tensor *h,
                        const struct attn_mode *a)
{
    Tensor *ln = g_layernorm(g, h, b->ln2_w, b->ln2_b);       /* [n,C] */
    Tensor *f = g_relu(g, g_matmul(g, ln, b->fc_wt, b->fc_b)); /* [n,M] */
    return g_add(g, h, drop(g, a, g_matmul(g, f, b->proj_wt, b->proj_b), 2)); /* [n,C] */
}

/* The reference's Block.forward, [n,C] -> [n,C]; with --no-mlp the
 * attention half alone. */
static Tensor *block(Graph *g, const Config *c, const struct block_leaves *b, Tensor *x,
                     const struct attn_mode *a)
{
    Tensor *h = attention_half(g, b, x, a);
    return c->no_mlp ? h : mlp_half(g, b, h, a);
}

/* The stack's step: the reference adds the residual twice, x + block(x)
 * where block(x) already is x + ...; --residual once keeps block(x). */
static Tensor *stack_step(Graph *g, const Config *c, const struct block_leaves *b, Tensor *x,
                          const struct attn_mode *a)
{
    Tensor *y = block(g, c, b, x, a); /* [n,C], or [windows,C] with a->last */
    return c->residual_once ? y : g_add(g, kept_rows(g, a, x), y);
}

/* x [n,C] -> logits [n,V] = head(lnf(x)) */
static Tensor *unembed(Graph *g, const struct model_leaves *L, Tensor *x)
{
    Tensor *ln = g_layernorm(g, x, L->lnf_w, L->lnf_b); /* [n,C] */
    return g_matmul(g, ln, L->head_wt, L->head_b);
}

/* The reference's forward over a batch of B windows of T bytes: logits
 * [n,V] for this core's n = B/cores*T positions. Like the reference it
 * adds the residual twice (stack_step): x + block(x), where block(x) is
 * already h + mlp(ln2(h)) with h = x + attn(ln1(x)). With last, i32 [B]
 * each window's last row (the sampler's), the last layer attends for
 * those rows alone and the rest of the model runs on them: logits [B,V]. */
static Tensor *forward(Model *m, Graph *g, const struct model_leaves *L, const Batch *b,
                       int training, Tensor *last)
{
    struct attn_mode a = {.windows = b->B / g_cores(g), .T = b->T, .heads = m->cfg.heads};
    Tensor *tok = shard_leaf(g, b, b->tok); /* i32 [n] */
    Tensor *pos = shard_leaf(g, b, b->pos); /* i32 [n] */
    Tensor *x = embed(g, L, tok, pos);      /* [n,C] */
    if (training && m->cfg.dropout > 0) {   /* off in eval and sampling */
        a.dropout = m->cfg.dropout;
        a.rows = shard_leaf(g, b, b->row);
        a.key = g_leaf(g, TK_INPUT, DT_I32, m->drop_key, 1, 2);
    }
    for (int l = 0; l < m->cfg.layers; l++) {
        a.layer = l;
        a.last = l == m->cfg.layers - 1 ? last : NULL;
        x = stack_step(g, &m->cfg, &L->block[l], x, &a); /* [n,C] ([k,C] last) */
    }
    return unembed(g, L, x);
}

/* ---- the loss and the training step ---- */

Tensor *model_loss(Model *m, Graph *g, const Batch *b, Tensor **leaf,
                   Tensor **logits, int with_grad)
{
    struct model_leaves L;
    param_leaves(m, g, &L, leaf, with_grad, NULL);
    Tensor *tgt = shard_leaf(g, b, b->tgt); /* i32 [n] */
    *logits = forward(m, g, &L, b, with_grad, NULL); /* [n,V] */
    return g_xent(g, *logits, tgt);
}

/* Adam on every parameter, on every core's replica; t, read only, is shared. */
static void adam_update(Model *m, Graph *g, Tensor **leaf, Tensor **grad, float lr)
{
    m->t++;
    m->lr = lr;
    Tensor *t = g_leaf(g, TK_STATE, DT_I32, &m->t, 1, 1);
    Tensor *rate = g_leaf(g, TK_INPUT, DT_F32, &m->lr, 1, 1); /* data, so a schedule never recompiles */
    for (int i = 0; i < m->np; i++) {
        Tensor *mm = moment_leaf(m, g, 1, &m->p[i]); /* rows x cols, as the parameter */
        Tensor *vv = moment_leaf(m, g, 2, &m->p[i]);
        g_adam(g, leaf[i], grad[i], mm, vv, t, rate, 0.9f, 0.999f, 1e-8f);
    }
}

/* Dropout's key for update number t: the run's seed and t, mixed. */
static void drop_key(Model *m, int32_t t)
{
    uint64_t z = m->seed * 0x9E3779B97F4A7C15ull + (uint64_t)t;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    m->drop_key[0] = (int32_t)(uint32_t)z;
    m->drop_key[1] = (int32_t)(uint32_t)(z >> 32);
}

float model_train_step(Model *m, Graph *g, const Batch *b, float lr)
{
    Tensor *leaf[MAX_PARAMS], *grad[MAX_PARAMS], *logits;
    drop_key(m, m->t + 1); /* this step's masks; a resumed run has the same t */
    g_reset(g);
    g_set_cores(g, m->ncores > 1 ? m->ncores : 1);
    g_set_example_rows(g, b->T); /* per-window gradient sums, in a fixed tree */
    Tensor *loss = model_loss(m, g, b, leaf, &logits, 1);
    g_backward(g, loss, NULL);
    /* all-reduces after the whole backward pass, as one bucket */
    for (int i = 0; i < m->np; i++)
        grad[i] = g_all_reduce(g, g_grad(g, leaf[i]));
    loss = g_all_reduce(g, loss);
    adam_update(m, g, leaf, grad, lr);
    g_mark_step(g, &loss, 1); /* one graph per step: forward, backward, update */
    float l = *(const float *)g_read(g, loss);
    g_set_cores(g, 1);
    g_set_example_rows(g, 0);
    return l;
}

/* ==== sampling ==== */

/* The decoder's state for ns passages decoded side by side: one KV cache
 * per layer, the step's inputs and the weights kept transposed. All
 * passages sit at the same position (they share the prompt), so one decode
 * step serves them all. */
struct decoder {
    int ns;         /* passages */
    int32_t *tok;   /* [ns] each passage's newest byte */
    int32_t *pos;   /* [ns] its position, the same for all */
    float *kc, *vc; /* [layers, ns, context, C] each */
    float *wt;      /* [nw] transposed_weights */
    int32_t *last;  /* [ns] past the context, each window's last row */
};

/* One new byte per passage at position d->pos[0] through the cached model:
 * logits [ns,V]. */
static const float *decode_step(Model *m, Graph *g, struct decoder *d)
{
    const Config *c = &m->cfg;
    size_t cache = (size_t)d->ns * c->context * c->embed; /* one layer's [ns,context,C] */
    struct model_leaves L;
    g_reset(g);
    param_leaves(m, g, &L, NULL, 0, d->wt);
    Tensor *tok = g_leaf(g, TK_INPUT, DT_I32, d->tok, d->ns, 1); /* [ns] */
    Tensor *pos = g_leaf(g, TK_INPUT, DT_I32, d->pos, d->ns, 1); /* [ns] */
    Tensor *pos1 = g_leaf(g, TK_INPUT, DT_I32, d->pos, 1, 1);    /* [1]: the cache row */
    struct attn_mode a = {.heads = c->heads, .pos = pos1};
    Tensor *x = embed(g, &L, tok, pos); /* [ns,C] */
    for (int l = 0; l < c->layers; l++) {
        a.k_cache = g_leaf(g, TK_STATE, DT_F32, d->kc + l * cache, d->ns * c->context, c->embed);
        a.v_cache = g_leaf(g, TK_STATE, DT_F32, d->vc + l * cache, d->ns * c->context, c->embed);
        x = stack_step(g, c, &L.block[l], x, &a);
    }
    return g_read(g, unembed(g, &L, x));
}

/* Past the context the reference feeds the last `context` bytes afresh, so
 * positions restart at 0 and the cache cannot be reused: one window per
 * passage, w->B of them, each ending at byte n. With a decoder, only each
 * window's last row leaves the last layer's attention: logits [B,V],
 * passage s's in row s. Without (the naive sampler): logits [B*T,V], every
 * position, as the reference computes them. */
static const float *window_step(Model *m, Graph *g, Batch *w, char *const *text, int n,
                                const struct decoder *d)
{
    struct model_leaves L;
    for (int s = 0; s < w->B; s++)
        for (int t = 0; t < w->T; t++)
            w->tok[(size_t)s * w->T + t] = (unsigned char)text[s][n - w->T + t];
    batch_finish(w);
    g_reset(g);
    param_leaves(m, g, &L, NULL, 0, d ? d->wt : NULL);
    Tensor *last = d ? g_leaf(g, TK_INPUT, DT_I32, d->last, w->B, 1) : NULL; /* i32 [B] */
    return g_read(g, forward(m, g, &L, w, 0, last));
}

/* Temperature and top-k sampling; temperature 0 is argmax. */
static int sample_byte(const float *logits, int V, const SampleOpts *o, Rng *r)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    if (o->temperature <= 0)
        return best;
    float kth = -INFINITY; /* logits below the k-th largest are dropped */
    if (o->top_k > 0 && o->top_k < V) {
        float sorted[MAX_VOCAB];
        memcpy(sorted, logits, sizeof(float) * V);
        for (int i = 0; i < o->top_k; i++)
            for (int j = i + 1; j < V; j++)
                if (sorted[j] > sorted[i]) {
                    float t = sorted[i];
                    sorted[i] = sorted[j];
                    sorted[j] = t;
                }
        kth = sorted[o->top_k - 1];
    }
    double p[MAX_VOCAB], sum = 0;
    for (int i = 0; i < V; i++) {
        p[i] = logits[i] < kth ? 0 : fm_exp((logits[i] - logits[best]) / o->temperature);
        sum += p[i];
    }
    double u = rng_float(r) * sum;
    for (int i = 0; i < V; i++) {
        if (u < p[i])
            return i;
        u -= p[i];
    }
    return best;
}

void model_generate_naive(Model *m, Graph *g, char *text, int n, int total,
                          const SampleOpts *o, Rng *r)
{
    for (; n < total; n++) {
        Batch w;
        batch_alloc(&w, 1, n < m->cfg.context ? n : m->cfg.context);
        const float *logits = window_step(m, g, &w, &text, n, NULL); /* [T,V] */
        text[n] = (char)sample_byte(logits + (size_t)(w.T - 1) * m->cfg.vocab, m->cfg.vocab, o, r);
        batch_free(&w);
        g_mark_step(g, NULL, 0); /* a step a byte, as a PyTorch/XLA generation loop marks it */
        if (o->emit)
            o->emit((unsigned char)text[n], o->ctx);
    }
}

void model_generate_many(Model *m, Graph *g, char *const *text, int ns, int n, int total,
                         const SampleOpts *o, Rng *r)
{
    const Config *c = &m->cfg;
    int V = c->vocab;
    size_t cache = (size_t)c->layers * ns * c->context * c->embed;
    struct decoder d = {.ns = ns,
                        .tok = xcalloc((size_t)ns, sizeof(int32_t)),
                        .pos = xcalloc((size_t)ns, sizeof(int32_t)),
                        .kc = xcalloc(cache, sizeof(float)),
                        .vc = xcalloc(cache, sizeof(float)),
                        .wt = transposed_weights(m),
                        .last = xcalloc((size_t)ns, sizeof(int32_t))};
    for (int s = 0; s < ns; s++)
        d.last[s] = (s + 1) * c->context - 1;
    Batch w;
    batch_alloc(&w, ns, c->context);
    const float *logits = NULL; /* [ns,V]: passage s's next-byte logits in row s */
    for (int i = 0; i < n && n <= c->context; i++) {
        for (int s = 0; s < ns; s++)
            d.tok[s] = (unsigned char)text[s][i], d.pos[s] = i;
        logits = decode_step(m, g, &d);
    }
    for (; n < total; n++) {
        if (n > c->context)
            logits = window_step(m, g, &w, text, n, &d);
        for (int s = 0; s < ns; s++)
            text[s][n] = (char)sample_byte(logits + (size_t)s * V, V, o, &r[s]);
        if (o->emit)
            o->emit((unsigned char)text[0][n], o->ctx);
        if (n + 1 <= c->context && n + 1 < total) {
            for (int s = 0; s < ns; s++)
                d.tok[s] = (unsigned char)text[s][n], d.pos[s] = n;
            logits = decode_step(m, g, &d);
        }
    }
    batch_free(&w);
    free(d.last);
    free(d.wt);
    free(d.tok);
    free(d.pos);
    free(d.kc);
    free(d.vc);
}

void model_generate(Model *m, Graph *g, char *text, int n, int total,
                    const SampleOpts *o, Rng *r)
{
    model_generate_many(m, g, &text, 1, n, total, o, r);
}

/* ==== data parallelism ====
 * On n simulated cores each core holds a replica of the weights and Adam
 * state (Model.rep) and runs the step on its own B/n windows of the batch.
 * The model above asks for its leaves here and never sees the cores. */

void model_set_cores(Model *m, int n)
{
    free(m->rep);
    m->ncores = n;
    m->rep = n > 1 ? xcalloc((size_t)(n - 1) * 3 * m->nw, sizeof(float)) : NULL;
    for (int c = 1; c < n; c++)
        for (int k = 0; k < 3; k++)
            memcpy(model_replica(m, c, k), model_replica(m, 0, k), m->nw * sizeof(float));
}

float *model_replica(const Model *m, int core, int which)
{
    if (core == 0)
        return which == 0 ? m->w : which == 1 ? m->m : m->v;
    return m->rep + ((size_t)(core - 1) * 3 + (size_t)which) * m->nw;
}

/* A leaf of buffers the cores hold each their own of: core c's is base[c]
 * advanced by off elements (of 4 bytes). */
static Tensor *per_core_leaf(Graph *g, int kind, int dtype, void *const *base, size_t off,
                             int rows, int cols)
{
    void *d[XS_MAX_CORES];
    for (int c = 0; c < g_cores(g); c++)
        d[c] = (char *)base[c] + 4 * off;
    return g_leaf_rep(g, kind, dtype, d, rows, cols);
}

/* Every core's block `which` (see model_replica). */
static void replica_bases(const Model *m, const Graph *g, int which, void **base)
{
    for (int c = 0; c < g_cores(g); c++)
        base[c] = model_replica(m, c, which);
}

/* Every parameter's leaf, each into its named slot of L (a Linear
 * weight's slot gets W^T) and, unless leaf is NULL, into leaf[i] in table
 * order. With wt, the sampler's transposed_weights on one core, the
 * Linear weights' slots bind those copies and no transpose is recorded. */
static void param_leaves(Model *m, Graph *g, struct model_leaves *L, Tensor **leaf,
                         int with_grad, float *wt)
{
    void *w[XS_MAX_CORES];
    replica_bases(m, g, 0, w);
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        Tensor **slot = (Tensor **)((char *)L + p->leaf);
        if (wt && p->matmul_t) { /* [in,out] */
            *slot = g_leaf(g, TK_PARAM, DT_F32, wt + p->off, p->cols, p->rows);
            continue;
        }
        Tensor *t = per_core_leaf(g, TK_PARAM, DT_F32, w, p->off, p->rows, p->cols);
        t->requires_grad = with_grad;
        if (leaf)
            leaf[i] = t;
        *slot = p->matmul_t ? g_transpose(g, t) : t;
    }
}

/* Core 0's weights with every Linear weight stored transposed, W^T
 * [in,out] at its offset: the sampler's, made once so that its hundreds of
 * small graphs transpose nothing (as weights stay where a TPU keeps them,
 * in the layout the matmul reads). Training transposes in its graph, as
 * its weights change every step. */
static float *transposed_weights(const Model *m)
{
    const float *w = model_replica(m, 0, 0); /* [nw] */
    float *wt = xcalloc(m->nw, sizeof(float));
    memcpy(wt, w, sizeof(float) * m->nw);
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        for (int r = 0; r < p->rows && p->matmul_t; r++)
            for (int c = 0; c < p->cols; c++)
                wt[p->off + (size_t)c * p->rows + r] = w[p->off + (size_t)r * p->cols + c];
    }
    return wt;
}

/* Parameter p's Adam moment (which 1: m, 2: v) on every core. */
static Tensor *moment_leaf(const Model *m, Graph *g, int which, const Param *p)
{
    void *base[XS_MAX_CORES];
    replica_bases(m, g, which, base);
    return per_core_leaf(g, TK_STATE, DT_F32, base, p->off, p->rows, p->cols);
}

/* Core c's shard of a batch column (tok, pos or tgt): its B/cores windows. */
static Tensor *shard_leaf(Graph *g, const Batch *b, int32_t *col)
{
    void *base[XS_MAX_CORES];
    int nc = g_cores(g), rows = b->B / nc * b->T;
    for (int c = 0; c < nc; c++)
        base[c] = col + (size_t)c * rows;
    return per_core_leaf(g, TK_INPUT, DT_I32, base, 0, 1, rows);
}

/* ==== checkpoints ====
 * The reference's state_dict names, so PyTorch loads our files and we load
 * its, plus our training state under _gpt.*. The file format is
 * safetensors.c's; this is the model's side of it. */

/* The reference's buffers, so load_state_dict(strict=True) accepts the file. */
static void put_buffers(StWriter *w, const Config *c)
{
    int V = c->vocab, T = c->context;
    float *eye = xcalloc((size_t)V * V, sizeof(float));  /* [V,V] */
    float *mask = xcalloc((size_t)T * T, sizeof(float)); /* [T,T] */
    for (int i = 0; i < V; i++)
        eye[i * V + i] = 1;
    for (int i = 0; i < T; i++)
        for (int j = i + 1; j < T; j++)
            mask[i * T + j] = -INFINITY;
    st_add(w, "onehot", ST_F32, 2, (int64_t[]){V, V}, eye, sizeof(float) * V * V);
    for (int l = 0; l < c->layers; l++) {
        char name[96];
        snprintf(name, sizeof name, "decode_transformer.blocks.%d.attention.causal_mask", l);
        st_add(w, name, ST_F32, 2, (int64_t[]){T, T}, mask, sizeof(float) * T * T);
    }
    free(eye);
    free(mask);
}

static void put_params(StWriter *w, const Model *m, const float *base, const char *prefix)
{
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        char name[128];
        int64_t shape[2] = {p->rows, p->cols};
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        st_add(w, name, ST_F32, p->ndim, p->ndim == 1 ? shape + 1 : shape, base + p->off,
               sizeof(float) * p->rows * p->cols);
    }
}

void ckpt_put(StWriter *w, const Model *m)
{
    put_params(w, m, m->w, "");
    put_buffers(w, &m->cfg);
    put_params(w, m, m->m, "_gpt.adam_m.");
    put_params(w, m, m->v, "_gpt.adam_v.");
}

int ckpt_save(const Model *m, const char *path, const char *const *mkey,
              const char *const *mval, int nmeta, char *err, size_t elen)
{
    StWriter w = {{0}, {0}};
    ckpt_put(&w, m);
    return st_write(&w, path, mkey, mval, nmeta, err, elen);
}
/* Copies one parameter from the file after checking dtype and shape. */
static int load_param(const StFile *f, const Param *p, const char *name,
                      float *dst, char *err, size_t elen)
{
    const StEntry *e = st_find(f, name);
    if (!e)
        return snprintf(err, elen, "missing tensor '%s'", name), -1;
    int ok = e->dtype == ST_F32 && e->ndim == p->ndim &&
             (p->ndim == 1 ? e->shape[0] == p->cols
                           : e->shape[0] == p->rows && e->shape[1] == p->cols);
    if (!ok) {
        char want[48];
        if (p->ndim == 1)
            snprintf(want, sizeof want, "[%d]", p->cols);
        else
            snprintf(want, sizeof want, "[%d,%d]", p->rows, p->cols);
        snprintf(err, elen, "tensor '%s' is %s with %d dims (first %lld), expected F32 %s",
                 name, st_dtype_name(e->dtype), e->ndim, e->ndim ? (long long)e->shape[0] : 0LL, want);
        return -1;
    }
    memcpy(dst, st_data(f, e), sizeof(float) * p->rows * p->cols);
    return 0;
}

/* Names the model knows: parameters, the reference's buffers, and our
 * training state. Anything else means the file is not one of ours. */
static int known_name(const Model *m, const char *name)
{
    if (!strcmp(name, "onehot") || !strncmp(name, "_gpt.adam_", 10) ||
        !strcmp(name, "_gpt.loader"))
        return 1;
    if (strstr(name, ".attention.causal_mask"))
        return 1;
    for (int i = 0; i < m->np; i++)
        if (!strcmp(m->p[i].name, name))
            return 1;
    return 0;
}

int ckpt_load_weights(Model *m, const StFile *f, int with_state, char *err, size_t elen)
{
    char name[160];
    if (st_check_checksum(f, err, elen))
        return -1;
    for (int i = 0; i < f->n; i++)
        if (!known_name(m, f->e[i].name))
            return snprintf(err, elen, "unexpected tensor '%s'", f->e[i].name), -1;
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        if (load_param(f, p, p->name, m->w + p->off, err, elen))
            return -1;
        if (!with_state)
            continue;
        snprintf(name, sizeof name, "_gpt.adam_m.%s", p->name);
        if (load_param(f, p, name, m->m + p->off, err, elen))
            return -1;
        snprintf(name, sizeof name, "_gpt.adam_v.%s", p->name);
        if (load_param(f, p, name, m->v + p->off, err, elen))
            return -1;
    }
    return 0;
}

static int meta_int(const StFile *f, const char *key, int fallback)
{
    const char *v = st_meta(f, key);
    char *end;
    long x = v ? strtol(v, &end, 10) : fallback;
    return v && (*end || x < 1 || x > 1 << 20) ? -1 : (int)x;
}

/* The config a file describes, read off its tensor shapes (heads cannot
 * be, so it comes from the metadata or the argument). Metadata that
 * disagrees with the shapes makes the file invalid. Deriving the config
 * from the tensors bounds the model we allocate by the file's own size. */
int ckpt_config(const StFile *f, Config *c, int heads)
{
    const StEntry *tok = st_find(f, "decode_transformer.token_embedding.weight");
    const StEntry *pos = st_find(f, "decode_transformer.postn_embedding.weight");
    const StEntry *fc = st_find(f, "decode_transformer.blocks.0.compute.0.weight");
    const StEntry *qkv = st_find(f, "decode_transformer.blocks.0.attention.attention.weight");
    const char *residual = st_meta(f, "residual");
    char name[96];
    if (!tok || !pos || !qkv || tok->ndim != 2 || pos->ndim != 2 || (fc && fc->ndim != 2))
        return -1;
    int64_t C = tok->shape[0], T = pos->shape[1], M = fc ? fc->shape[0] : 0; /* no MLP: 0 */
    if ((tok->shape[1] != 128 && tok->shape[1] != 256) || C < 1 || C > 4096 || pos->shape[0] != C || T < 2 ||
        T > 1024 || (fc && (fc->shape[1] != C || M < 1 || M > 16384)))
        return -1;
    if (residual && strcmp(residual, "once") && strcmp(residual, "twice"))
        return -1;
    *c = (Config){.vocab = (int)tok->shape[1], .context = (int)T, .embed = (int)C, .mlp = (int)M,
                  .heads = meta_int(f, "heads", heads)};
    c->no_mlp = !fc;
    c->residual_once = residual && !strcmp(residual, "once");
    do /* every block has its attention weight, with or without an MLP */
        snprintf(name, sizeof name, "decode_transformer.blocks.%d.attention.attention.weight",
                 c->layers);
    while (st_find(f, name) && ++c->layers < MAX_LAYERS);
    const char *keys[] = {"vocab", "context", "embed", "mlp", "layers"};
    const int vals[] = {c->vocab, c->context, c->embed, c->mlp, c->layers};
    for (int i = 0; i < 5; i++)
        if (!(c->no_mlp && i == 3) && meta_int(f, keys[i], vals[i]) != vals[i])
            return -1;
    return c->heads > 0 && c->embed % c->heads == 0 ? 0 : -1;
}

/* ==== helpers: random numbers, batches, allocation ==== */

/* xoshiro256**, seeded through splitmix64 */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void rng_seed(Rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(Rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

float rng_float(Rng *r) { return (float)(rng_next(r) >> 40) * 0x1.0p-24f; }

/* Batches: B windows of T token bytes, their positions and targets. */
void batch_alloc(Batch *b, int B, int T)
{
    b->B = B;
    b->T = T;
    b->tok = xcalloc((size_t)B * T, sizeof(int32_t));
    b->pos = xcalloc((size_t)B * T, sizeof(int32_t));
    b->tgt = xcalloc((size_t)B * T, sizeof(int32_t));
    b->row = xcalloc((size_t)B * T, sizeof(int32_t));
    for (size_t k = 0; k < (size_t)B * T; k++) /* fixed: a host's share keeps its rows' */
        b->row[k] = (int32_t)k;
}

void batch_free(Batch *b)
{
    free(b->tok);
    free(b->pos);
    free(b->tgt);
    free(b->row);
    memset(b, 0, sizeof *b);
}

void batch_finish(Batch *b)
{
    for (int i = 0; i < b->B; i++) {
        for (int t = 0; t < b->T; t++) {
            size_t k = (size_t)i * b->T + t;
            b->pos[k] = t;
            b->tgt[k] = t + 1 < b->T ? b->tok[k + 1] : -1;
        }
    }
}

/* Out of memory is not worth a recovery path: one line and exit 1. */
static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "gpt: out of memory (%zu x %zu bytes)\n", n, size);
        exit(1);
    }
    return p;
}

/* ==== the program ====
 * Everything below is left out of the tests (GPT_NO_MAIN). */
#ifndef GPT_NO_MAIN
#include <omp.h>
#include "comm.h"

/* ---- a pod: one run over several processes ----
 * gpt-mpi under mpirun runs one process per host of a pod. Every process
 * runs the same command on the same flags and data, with --cores simulated
 * cores of its own. In PyTorch/XLA's words: the world is every core of
 * every host, a core's ordinal is host * cores + core, and the master
 * ordinal 0 (on host 0) alone prints, logs and writes checkpoints. Every
 * host draws the same global batch from the same seed and trains on its
 * share; the all-reduce joins them (xla_sim.c over comm.c). With one
 * process (the static gpt) all of this reduces to nothing. */

static int is_master(void) { return comm_rank() == 0; }

/* Set just before a planned exit: every rank leaves the pod together. Any
 * other exit (an error in a lower layer) aborts the pod, so the other
 * ranks do not wait for this one. */
static int planned_exit;

static void leave_pod(void)
{
    if (planned_exit)
        comm_finalize();
    else if (comm_size() > 1)
        comm_abort(1);
}

static _Noreturn void exit_planned(int code)
{
    planned_exit = 1;
    fflush(stdout);
    exit(code);
}

/* Usage errors exit 2, runtime errors 1; both are one line on stderr. In
 * a pod a usage error is every rank's (they run the same flags), so the
 * master alone says it while the others wait for it to; a runtime error is
 * said, with its rank, by the rank that meets it. Either way every rank
 * stops. */
static _Noreturn void vdie(int code, const char *fmt, va_list ap)
{
    int waited = 0;
    if (code == 2 && !is_master() && comm_size() > 1) {
        /* the master's abort ends this wait; aborting first could cut its line */
        comm_set_timeout(30);
        comm_barrier();
        waited = 1; /* the master met no such error: say it here */
    }
    if (code != 2 || is_master() || waited) {
        fputs("gpt: ", stderr);
        if (comm_size() > 1 && (code != 2 || waited))
            fprintf(stderr, "rank %d: ", comm_rank());
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    if (comm_size() > 1)
        comm_abort(code);
    exit(code);
}

static _Noreturn void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdie(code, fmt, ap);
}

/* An error every rank meets at the same point from the same bytes (a
 * diverged loss, a bad checkpoint): the master says it once and every rank
 * leaves the pod together. */
static _Noreturn void die_all(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (comm_size() == 1)
        vdie(code, fmt, ap);
    if (is_master()) {
        fputs("gpt: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
    comm_barrier();
    exit_planned(code);
}

/* Every rank must be started with the same command and flags. The ranks
 * compare a hash of their whole command line; on a mismatch a differing
 * rank names itself and both command lines, and every rank exits 2. */
static void check_same_flags(int argc, char **argv)
{
    uint64_t mine = FNV1A64_START, all[COMM_MAX_RANKS];
    if (comm_size() == 1)
        return;
    for (int i = 1; i < argc; i++) /* NUL-joined: "a b" and "a" "b" differ */
        mine = fnv1a64_more(mine, (const unsigned char *)argv[i], strlen(argv[i]) + 1);
    comm_allgather(&mine, all, sizeof mine);
    int differ = 0;
    for (int r = 1; r < comm_size(); r++)
        differ |= all[r] != all[0];
    if (!differ)
        return;
    char line[4096] = "", master[4096];
    for (int i = 1; i < argc; i++)
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", i > 1 ? " " : "",
                 argv[i]);
    memcpy(master, line, sizeof master);
    comm_broadcast(master, sizeof master, 0); /* for the message only */
    if (mine != all[0])
        fprintf(stderr, "gpt: rank %d was started as 'gpt %s' but rank 0 as 'gpt %s'; every "
                "rank needs the same command and flags\n", comm_rank(), line, master);
    exit_planned(2);
}

/* Every host must train on the same bytes. */
static void check_same_data(uint64_t hash, const char *path)
{
    uint64_t all[COMM_MAX_RANKS];
    if (comm_size() == 1)
        return;
    comm_allgather(&hash, all, sizeof hash);
    if (hash != all[0])
        die(1, "%s differs from the master's --data (fnv1a64 %016llx, rank 0 has %016llx); "
            "every host needs the same file", path, (unsigned long long)hash,
            (unsigned long long)all[0]);
}

/* This host's share of a global batch: its B/hosts consecutive windows,
 * which its cores split among them in ordinal order. */
static Batch host_share(const Batch *b)
{
    int B = b->B / comm_size();
    size_t first = (size_t)comm_rank() * (size_t)B * (size_t)b->T;
    return (Batch){B, b->T, b->tok + first, b->pos + first, b->tgt + first, b->row + first};
}

/* The mean over hosts of a value each computed on an equal share. */
static float pod_mean(float x)
{
    comm_all_reduce(&x, 1);
    return x * (1.0f / (float)comm_size());
}

/* The master reads a file the other hosts may not have (no shared file
 * system is assumed) and sends its bytes to every rank. */
static int load_on_master(StFile *f, const char *path, char *err, size_t elen)
{
    if (comm_size() == 1)
        return st_load(f, path, err, elen);
    long long size = -1;
    if (is_master() && !st_load(f, path, err, elen))
        size = (long long)f->size;
    comm_broadcast(&size, sizeof size, 0);
    if (size < 0) { /* the master says why and ends the run */
        if (is_master())
            return -1;
        comm_barrier();
        exit(1);
    }
    unsigned char *buf = is_master() ? f->buf : xcalloc((size_t)size, 1);
    comm_broadcast(buf, (size_t)size, 0);
    return is_master() ? 0 : st_parse(f, buf, (size_t)size, err, elen);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ---- data ---- */

typedef struct Data {
    unsigned char *bytes; /* [n] */
    size_t n, n_train;    /* train is [0, n_train), test the rest */
} Data;

/* Uniform in [0, n) by multiply-shift: no modulo bias worth the name. */
static uint64_t rng_below(Rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* Under vocab 128 every byte must be ASCII; offset: of p[0] in name. */
static void check_vocab(const unsigned char *p, size_t n, int vocab, const char *name,
                        uint64_t offset)
{
    for (size_t i = 0; vocab < 256 && i < n; i++)
        if (p[i] >= vocab)
            die(1, "%s: byte 0x%02x at offset %llu is not ASCII; convert it (e.g. iconv -f "
                "utf-8 -t ascii//TRANSLIT) or train with --vocab 256", name, p[i],
                (unsigned long long)(offset + i));
}

static void grow(Data *d, size_t *cap, size_t more, const char *name)
{
    while (d->n + more > *cap)
        if (!(d->bytes = realloc(d->bytes, *cap *= 2)))
            die(1, "%s: out of memory", name);
}

/* One text file, whole; split: the reference's 80/20 split, else it is all
 * training text. */
static void load_data(Data *d, const char *path, int need_len, int vocab, int split)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(1, "%s: cannot open data file (%s); data/get-data.sh downloads the corpus",
            path, strerror(errno));
    size_t cap = 1 << 20, got;
    d->bytes = xcalloc(cap, 1);
    d->n = 0;
    while ((got = fread(d->bytes + d->n, 1, cap - d->n, f)) > 0) {
        d->n += got;
        if (d->n == cap)
            grow(d, &cap, 1, path);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad)
        die(1, "%s: cannot read data file", path);
    if (!d->n)
        die(1, "%s: data file is empty", path);
    check_vocab(d->bytes, d->n, vocab, path, 0);
    d->n_train = split ? d->n * 8 / 10 : d->n;
    if (!split && d->n < (size_t)need_len + 1)
        die(1, "%s: %zu bytes; training needs at least %d", path, d->n, need_len + 1);
    if (split && (d->n_train < (size_t)need_len + 1 || d->n - d->n_train < (size_t)need_len + 1))
        die(1, "%s: %zu bytes give splits of %zu and %zu; each needs at least %d",
            path, d->n, d->n_train, d->n - d->n_train, need_len + 1);
}

/* Is --data a corpus of parts (read as a stream) rather than one file? */
static int is_corpus(const char *spec)
{
    struct stat st;
    return !strncmp(spec, "pipe:", 5) || strpbrk(spec, "{*?[") || data_part_is_shard(spec) ||
           (!stat(spec, &st) && S_ISDIR(st.st_mode));
}

/* A whole corpus in memory, every document of every part one after
 * another (a test set: --test-data); all of it is test text. */
static void load_corpus(Data *d, const char *spec, int need_len, int vocab)
{
    char err[1024], buf[65536];
    DataSource src;
    if (data_source_open(&src, spec, err, sizeof err))
        die(1, "%s", err);
    size_t cap = 1 << 20;
    *d = (Data){xcalloc(cap, 1), 0, 0};
    for (int i = 0; i < src.parts.n; i++) {
        DataPart part;
        WdsDoc doc;
        int r;
        if (data_part_open(&part, src.parts.path[i], 0))
            die(1, "%s", part.err);
        while ((r = data_part_next(&part, &doc)) == 1) {
            long got;
            for (uint64_t done = 0; (got = data_part_read(&part, buf, sizeof buf)) > 0;
                 done += (uint64_t)got) {
                char name[4200];
                snprintf(name, sizeof name, "%s%s%s", part.name, part.is_shard ? ": " : "",
                         part.is_shard ? doc.key : "");
                check_vocab((unsigned char *)buf, (size_t)got, vocab, name, doc.data_off + done);
                grow(d, &cap, (size_t)got, spec);
                memcpy(d->bytes + d->n, buf, (size_t)got);
                d->n += (size_t)got;
            }
            if (got < 0)
                r = -1;
            if (r < 0)
                break;
        }
        if (r < 0 || data_part_close(&part))
            die(1, "%s", part.err);
    }
    if (d->n < (size_t)need_len + 1)
        die(1, "%s: %zu bytes of text in %d parts; a test set needs at least %d", spec, d->n,
            src.parts.n, need_len + 1);
    data_source_free(&src);
}

/* B random windows of T bytes from [lo, lo+len), starts uniform in
 * [0, len-T) as in the reference. */
static void sample_windows(Batch *b, const Data *d, size_t lo, size_t len, Rng *r)
{
    for (int i = 0; i < b->B; i++) {
        size_t s = lo + rng_below(r, len - b->T);
        for (int t = 0; t < b->T; t++)
            b->tok[(size_t)i * b->T + t] = d->bytes[s + t];
    }
    batch_finish(b);
}

static float batch_loss(Model *m, Graph *g, const Batch *b)
{
    Tensor *leaf[MAX_PARAMS], *logits;
    g_reset(g);
    return *(const float *)g_read(g, model_loss(m, g, b, leaf, &logits, 0));
}

/* ---- command line ---- */

static void resolve_ckpt(const char *arg, char *path, size_t n);

enum { O_INT, O_REAL, O_STR, O_FLAG };

struct opt {
    const char *name;
    int type;
    void *ptr; /* int *, double * or const char ** */
    const char *help;
};

/* Every setting of every command, with the reference's values. */
struct settings {
    int embed, mlp, heads, layers, context;
    int steps, batch, seq, eval_every, eval_batch, eval_bytes, final_bytes;
    int threads, bytes, top_k, metrics, naive, ckpt_every, keep, cores, num_samples;
    int vocab, streams, shuffle_buffer, verbose, profile_steps;
    int no_mlp, warmup;
    double lr, temperature, seed, dropout, min_lr;
    const char *residual, *decay;
    const char *data, *test_data, *out, *init, *prompt, *device, *ckpt, *resume, *profile;
    const char *tpu, *hbm, *precision;
};

static const struct settings defaults = {
    .embed = 32, .mlp = 64, .heads = 4, .layers = 4, .context = 128,
    .steps = 50000, .batch = 32, .seq = 128, .eval_every = 100, .eval_batch = 256,
    .eval_bytes = 32, .final_bytes = 256, .threads = 0, .bytes = 256, .top_k = 0,
    .num_samples = 1, .ckpt_every = 1000, .keep = 3, .vocab = VOCAB, .streams = 0, .shuffle_buffer = 1024,
    .profile_steps = 10,
    .lr = 1e-3, .temperature = 1.0, .seed = 1337,
    .data = "data/sherlock-ascii.txt", .out = "out", .init = NULL,
    .prompt = "\"Elementary, my dear", .device = "xla", .ckpt = "out",
    .precision = "fp32", .residual = "twice", .decay = "none",
};

static void print_default(const struct opt *o)
{
    if (o->type == O_INT || o->type == O_FLAG)
        printf("%d", *(int *)o->ptr);
    else if (o->type == O_REAL)
        printf("%g", *(double *)o->ptr);
    else if (*(const char **)o->ptr)
        printf("'%s'", *(const char **)o->ptr);
    else
        printf("none");
}

static void usage(const char *cmd, const char *what, const struct opt *o, int n,
                  const char *operands)
{
    printf("usage: gpt %s [flags]%s\n%s\n\nflags (default in brackets):\n", cmd, operands, what);
    for (int i = 0; i < n; i++) {
        printf("  --%-13s %s [", o[i].name, o[i].help);
        print_default(&o[i]);
        printf("]\n");
    }
    exit_planned(0);
}

static void set_opt(const struct opt *o, const char *v)
{
    char *end;
    errno = 0;
    if (o->type == O_STR) {
        *(const char **)o->ptr = v;
    } else if (o->type == O_INT) {
        long x = strtol(v, &end, 10);
        if (end == v || *end || errno || x < INT_MIN || x > INT_MAX)
            die(2, "--%s expects a whole number, got '%s'", o->name, v);
        *(int *)o->ptr = (int)x;
    } else {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x))
            die(2, "--%s expects a number, got '%s'", o->name, v);
        *(double *)o->ptr = x;
    }
}

/* The flags the user gave, so that resuming can tell a deliberate value
 * from a default. */
static const char *given[64];
static int ngiven;

static int was_given(const char *name)
{
    for (int i = 0; i < ngiven; i++)
        if (!strcmp(given[i], name))
            return 1;
    return 0;
}

/* `--resume` alone means the output directory. */
static int value_omitted(const struct opt *o, int i, int argc, char **argv)
{
    return !strcmp(o->name, "resume") && (i + 1 == argc || !strncmp(argv[i + 1], "--", 2));
}

/* The arguments that are not flags, for a command that takes some (gpt
 * shard's FILES); v has room for argc of them. After "--" every argument
 * is one. */
struct operands {
    const char **v;
    int n;
};

static void parse_opts(const char *cmd, const char *what, int argc, char **argv,
                       const struct opt *o, int n, struct operands *rest)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(cmd, what, o, n, rest ? " FILES..." : "");
        if (rest && !strcmp(a, "--")) {
            while (++i < argc)
                rest->v[rest->n++] = argv[i];
            break;
        }
        if (rest && strncmp(a, "--", 2)) {
            rest->v[rest->n++] = a;
            continue;
        }
        if (strncmp(a, "--", 2))
            die(2, "unexpected argument '%s' (see gpt %s --help)", a, cmd);
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        int k = 0;
        while (k < n && (strlen(o[k].name) != len || strncmp(o[k].name, a + 2, len)))
            k++;
        if (k == n)
            die(2, "unknown flag '%.*s' (see gpt %s --help)", (int)len + 2, a, cmd);
        if (ngiven < 64)
            given[ngiven++] = o[k].name;
        if (!eq && value_omitted(&o[k], i, argc, argv)) {
            *(const char **)o[k].ptr = "";
            continue;
        }
        if (o[k].type == O_FLAG) {
            if (eq)
                die(2, "--%s takes no value", o[k].name);
            *(int *)o[k].ptr = 1;
            continue;
        }
        if (!eq && i + 1 == argc)
            die(2, "--%s needs a value", o[k].name);
        set_opt(&o[k], eq ? eq + 1 : argv[++i]);
    }
}

static void need(int ok, const char *fmt, ...)
{
    if (ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    vdie(2, fmt, ap);
}

static void check_prompt(const char *p, int vocab)
{
    need(p[0] != 0, "--prompt must not be empty");
    for (const char *c = p; *c; c++)
        need((unsigned char)*c < vocab, "--prompt must be ASCII (byte 0x%02x at offset %d)",
             (unsigned char)*c, (int)(c - p));
}

static int precision_of(const char *name);

static void apply_common_flags(const struct settings *s)
{
    need(!strcmp(s->device, "cpu") || !strcmp(s->device, "xla"),
         "--device must be cpu or xla, got '%s'", s->device);
    if (s->metrics || getenv("GPT_METRICS_FILE"))
        xs_profile_enable(1);
    need(s->threads >= 0 && s->threads <= 1024, "--threads must be 0 (all cores) to 1024, got %d", s->threads);
    if (s->threads)
        omp_set_num_threads(s->threads);
    precision_of(s->precision);
}

static void check_model_flags(const struct settings *s)
{
    need(s->embed >= 1 && s->embed <= 4096, "--embed must be 1..4096, got %d", s->embed);
    need(s->mlp >= 1 && s->mlp <= 16384, "--mlp must be 1..16384, got %d", s->mlp);
    need(s->heads >= 1 && s->embed % s->heads == 0,
         "--heads %d must be >= 1 and divide --embed %d", s->heads, s->embed);
    need(s->layers >= 1 && s->layers <= MAX_LAYERS, "--layers must be 1..%d, got %d",
         MAX_LAYERS, s->layers);
    need(s->context >= 2 && s->context <= 1024, "--context must be 2..1024, got %d", s->context);
    need(!strcmp(s->residual, "once") || !strcmp(s->residual, "twice"),
         "--residual must be once or twice, got '%s'", s->residual);
    need(s->dropout >= 0 && s->dropout < 1, "--dropout must be 0 <= P < 1, got %g", s->dropout);
}

/* The reference's model exactly, so its PyTorch code loads our checkpoints. */
static const char *reference_cannot(const struct settings *s)
{
    return s->no_mlp ? "attention-only blocks (--no-mlp)"
           : !strcmp(s->residual, "once") ? "the residual added once (--residual once)"
                                          : NULL;
}

/* The rate of update number `step` (0-based) of a run of `steps`: linear
 * warm-up over the first --warmup updates, then --decay from --lr to
 * --min-lr at the last; none keeps --lr, the reference's constant rate. */
static double rate_at(const struct settings *s, int step)
{
    if (step < s->warmup)
        return s->lr * (step + 1) / s->warmup;
    if (!strcmp(s->decay, "none") || s->steps - s->warmup <= 1)
        return s->lr;
    double done = (double)(step - s->warmup) / (s->steps - s->warmup - 1); /* 0 .. 1 */
    double shape = !strcmp(s->decay, "cosine") ? 0.5 * (1 + fm_cos(M_PI * done)) : 1 - done;
    return s->min_lr + (s->lr - s->min_lr) * shape;
}

static void check_train_flags(const struct settings *s)
{
    check_model_flags(s);
    need(s->steps >= 1, "--steps must be >= 1, got %d", s->steps);
    need(s->batch >= 1 && s->batch <= 65536, "--batch must be 1..65536, got %d", s->batch);
    need(s->seq >= 2 && s->seq <= s->context, "--seq must be 2..--context (%d), got %d",
         s->context, s->seq);
    need(s->lr > 0 && s->lr < 1e3, "--lr must be above 0 and below 1000, got %g", s->lr);
    need(s->warmup >= 0 && s->warmup <= s->steps, "--warmup must be 0..--steps (%d), got %d",
         s->steps, s->warmup);
    need(!strcmp(s->decay, "none") || !strcmp(s->decay, "cosine") || !strcmp(s->decay, "linear"),
         "--decay must be cosine, linear or none, got '%s'", s->decay);
    need(s->min_lr >= 0 && s->min_lr <= s->lr, "--min-lr must be 0..--lr (%g), got %g", s->lr,
         s->min_lr);
    need(s->eval_every >= 1, "--eval-every must be >= 1, got %d", s->eval_every);
    need(s->eval_batch >= 1 && s->eval_batch <= 65536, "--eval-batch must be 1..65536, got %d", s->eval_batch);
    need(s->eval_bytes >= 0 && s->final_bytes >= 0, "--eval-bytes and --final-bytes must be >= 0");
    need(s->ckpt_every >= 1, "--ckpt-every must be >= 1, got %d", s->ckpt_every);
    need(s->keep >= 1, "--keep must be >= 1, got %d", s->keep);
    need(!(s->init && s->resume), "--init and --resume exclude each other");
    need(s->seed >= 0 && s->seed < 9007199254740992.0 && s->seed == floor(s->seed),
         "--seed must be a whole number >= 0, got %g", s->seed);
    need(s->vocab == 128 || s->vocab == 256, "--vocab must be 128 (ASCII) or 256 (any byte), "
         "got %d", s->vocab);
    check_prompt(s->prompt, s->vocab);
    need(s->streams == 0 || (s->streams <= LOADER_MAX_STREAMS && !(s->streams & (s->streams - 1))
         && s->batch % s->streams == 0), "--streams must be 0 or a power of two up to %d that "
         "divides --batch %d, got %d", LOADER_MAX_STREAMS, s->batch, s->streams);
    need(s->shuffle_buffer >= 1 && s->shuffle_buffer <= 1 << 24, "--shuffle-buffer must be "
         "1..16777216 windows, got %d", s->shuffle_buffer);
    need(s->profile_steps >= 1, "--profile-steps must be >= 1, got %d", s->profile_steps);
}

static int precision_of(const char *name)
{
    static const char *const names[] = {"fp32", "bf16", "bf16-pure"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i]))
            return i; /* enum precision */
    need(0, "--precision must be fp32, bf16 or bf16-pure, got '%s'", name);
    return 0;
}

/* "16G", "512M", "64K" or bytes; binary units, as HBM sizes are quoted. */
static size_t parse_size(const char *flag, const char *v)
{
    char *end;
    double x = strtod(v, &end);
    double unit = !strcmp(end, "") || !strcmp(end, "B") ? 1
                  : !strcmp(end, "K") || !strcmp(end, "KiB") ? 1024.0
                  : !strcmp(end, "M") || !strcmp(end, "MiB") ? 1024.0 * 1024
                  : !strcmp(end, "G") || !strcmp(end, "GiB") ? 1024.0 * 1024 * 1024 : 0;
    need(end != v && unit > 0 && x * unit >= 1 && x * unit < 1e15,
         "--%s must be a size such as 16G, 512M or 65536, got '%s'", flag, v);
    return (size_t)(x * unit);
}

/* The simulated board: --tpu's table row, then --cores and --hbm. */
/* hosts: the processes training together (sample and eval run on one). */
static void setup_board(const struct settings *s, int hosts)
{
    const char *name = "xla";
    int cores = 1;
    size_t hbm = (size_t)16 << 30; /* one v3 core's */
    if (s->tpu) {
        const struct tpu_spec *t = xs_tpu(s->tpu);
        need(t != NULL, "--tpu must be one of %s, got '%s'", xs_tpu_names(), s->tpu);
        name = t->name;
        cores = t->cores;
        hbm = (size_t)(t->hbm_gib * 1073741824.0);
    }
    if (s->cores)
        cores = s->cores;
    need(cores >= 1 && cores <= XS_MAX_CORES && !(cores & (cores - 1)),
         "--cores must be a power of two from 1 to %d (so results do not depend on the "
         "layout), got %d", XS_MAX_CORES, cores);
    need(cores == 1 || !strcmp(s->device, "xla"), "--cores and --tpu need --device xla");
    need(!(hosts & (hosts - 1)), "a pod needs a power of two of processes (mpirun -np), "
         "got %d", hosts);
    need(s->batch % (cores * hosts) == 0, "--batch %d does not split evenly over %d cores%s",
         s->batch, cores * hosts, hosts > 1 ? " (of all hosts)" : "");
    if (s->hbm)
        hbm = parse_size("hbm", s->hbm);
    xs_set_device(name, cores, hbm);
}

/* The device decides how the graph runs: at once, or traced and compiled. */
static Graph *new_graph(const struct settings *s)
{
    Graph *g = g_new();
    g_set_lazy(g, !strcmp(s->device, "xla"));
    g_set_precision(g, precision_of(s->precision));
    return g;
}

/* bf16-pure keeps the weights (and Adam state) as bf16 from the start. */
static void round_to_precision(Model *m, const struct settings *s)
{
    if (precision_of(s->precision) != PREC_BF16_PURE)
        return;
    k_round_bf16(m->w, m->w, m->nw);
    k_round_bf16(m->m, m->m, m->nw);
    k_round_bf16(m->v, m->v, m->nw);
}

static void report_metrics(const struct settings *s)
{
    const char *path = is_master() ? getenv("GPT_METRICS_FILE") : NULL;
    if (s->metrics) {
        xs_metrics_report(stdout);
        xs_profile_report(stdout);
    }
    if (path && *path) {
        FILE *f = fopen(path, "a");
        if (!f)
            die(1, "%s: cannot append metrics (GPT_METRICS_FILE): %s", path, strerror(errno));
        xs_metrics_report(f);
        xs_profile_report(f);
        fclose(f);
    }
}

/* ---- train ---- */

struct trainer {
    struct settings s;
    Model model;
    Graph *g;
    Data data;             /* one text file: train [0, n_train), test the rest */
    Data test_set;         /* --test-data, whole */
    const Data *test;      /* test windows come from its [n_train, n) */
    DataSource corpus;     /* a corpus: its parts */
    LoaderSpec spec;       /* a corpus: how it is read */
    Loader *loader;        /* a corpus: its windows, made ahead */
    double t_data;         /* seconds the steps waited for data */
    RunLog *log;           /* the master's metrics.jsonl, loss.svg, event file */
    double t_rate;         /* t_steps at the last rate line */
    int rate_step;         /* and its step */
    Batch train, test_batch;
    Rng rng_data, rng_eval;
    int tty, start;          /* start: the first step to run (resume) */
    uint64_t data_hash;
    double t_start, t_steps; /* wall clock; seconds spent in training steps */
};

static void emit_escaped(int c, void *ctx)
{
    (void)ctx;
    if (c == '\n')
        fputs("\\n", stdout);
    else if (c < 32 || c == 127)
        printf("\\x%02x", c);
    else
        putchar(c);
}

static void clear_progress(const struct trainer *tr)
{
    if (tr->tty)
        fputs("\r\033[K", stdout);
}

/* Throughput per core, in the words of PyTorch/XLA's pod examples: Rate
 * is a replica's windows a second since the last eval line, GlobalRate
 * since the start. Every core of a board runs in the same step, so they
 * share one figure; in a pod each host's are its own. */
static void report_rates(struct trainer *tr, int step, float loss)
{
    const struct settings *s = &tr->s;
    int world = comm_size() * xs_cores(), steps = step + 1 - tr->start;
    int since = step + 1 - tr->rate_step;
    double per_replica = (double)s->batch / world;
    double rate = since > 0 && tr->t_steps > tr->t_rate
                      ? per_replica * since / (tr->t_steps - tr->t_rate) : 0;
    double global = steps > 0 && tr->t_steps > 0 ? per_replica * steps / tr->t_steps : 0;
    char line[256];
    snprintf(line, sizeof line, "\"rate\":%.2f,\"global_rate\":%.2f,\"replicas\":%d", rate,
             global, world);
    if (tr->log)
        runlog_note(tr->log, step, "rate", line);
    for (int c = 0; s->verbose && c < xs_cores(); c++)
        printf("| Training Device=xla:%d Step=%d Loss=%.5f Rate=%.2f GlobalRate=%.2f "
               "Time=%.1fs\n", comm_rank() * xs_cores() + c, step, loss, rate, global,
               now_seconds() - tr->t_start);
    tr->t_rate = tr->t_steps;
    tr->rate_step = step + 1;
}

static void eval_line(struct trainer *tr, int step, float train_loss)
{
    const struct settings *s = &tr->s;
    sample_windows(&tr->test_batch, tr->test, tr->test->n_train,
                   tr->test->n - tr->test->n_train, &tr->rng_eval);
    Batch share = host_share(&tr->test_batch);
    float test_loss = pod_mean(batch_loss(&tr->model, tr->g, &share));
    int n = (int)strlen(s->prompt), total = n > s->eval_bytes ? n : s->eval_bytes;
    char *text = xcalloc((size_t)total + 1, 1);
    memcpy(text, s->prompt, (size_t)n);
    SampleOpts so = {.temperature = 1.0f};
    /* every rank holds the same weights and generator, so every rank draws
     * the same bytes (the master prints them): no rank waits for another */
    model_generate(&tr->model, tr->g, text, n, total, &so, &tr->rng_eval);
    clear_progress(tr);
    if (tr->log)
        runlog_eval(tr->log, step, train_loss, test_loss, text, (size_t)total);
    report_rates(tr, step, train_loss);
    printf("step %6d | train %.4f | test %.4f | ", step, train_loss, test_loss);
    for (int i = 0; i < total; i++)
        emit_escaped((unsigned char)text[i], NULL);
    putchar('\n');
    fflush(stdout);
    free(text);
}

static void print_progress(struct trainer *tr, int step, float loss)
{
    static double last;
    double now = now_seconds();
    if (!tr->tty || now - last < 0.2)
        return;
    last = now;
    int done = step + 1, left = tr->s.steps - done, ran = done - tr->start;
    double per = tr->t_steps / ran;
    double eta = (now - tr->t_start) / ran * left;
    printf("\r\033[Kstep %d/%d | %.2f ms/step | %.0f tok/s | ETA %d:%02d | loss %.4f",
           done, tr->s.steps, per * 1e3, tr->s.batch * tr->s.seq / per,
           (int)eta / 60, (int)eta % 60, loss);
    fflush(stdout);
}

static void rng_hex(char *out, const Rng *r)
{
    sprintf(out, "%016llx%016llx%016llx%016llx", (unsigned long long)r->s[0],
            (unsigned long long)r->s[1], (unsigned long long)r->s[2],
            (unsigned long long)r->s[3]);
}

/* Every setting that shapes a run's state, as checkpoint metadata. A
 * resumed run must agree on all of them to continue bit for bit. */
#define MAX_META 40
struct meta {
    const char *key[MAX_META];
    char val[MAX_META][280];
    int n;
};

static void meta_add(struct meta *m, const char *key, const char *fmt, ...)
{
    va_list ap;
    if (m->n == MAX_META)
        die(1, "internal: more than %d checkpoint metadata keys", MAX_META);
    va_start(ap, fmt);
    vsnprintf(m->val[m->n], sizeof m->val[m->n], fmt, ap);
    va_end(ap);
    m->key[m->n++] = key;
}

static void run_meta(const struct trainer *tr, struct meta *m)
{
    const struct settings *s = &tr->s;
    const Config *c = &tr->model.cfg;
    meta_add(m, "format", "gpt-ckpt-1");
    meta_add(m, "vocab", "%d", c->vocab);
    meta_add(m, "context", "%d", c->context);
    meta_add(m, "embed", "%d", c->embed);
    meta_add(m, "mlp", "%d", c->mlp);
    meta_add(m, "heads", "%d", c->heads);
    meta_add(m, "layers", "%d", c->layers);
    meta_add(m, "batch", "%d", s->batch);
    meta_add(m, "seq", "%d", s->seq);
    meta_add(m, "lr", "%.9g", s->lr);
    meta_add(m, "warmup", "%d", s->warmup);
    meta_add(m, "decay", "%s", s->decay);
    meta_add(m, "min-lr", "%.9g", s->min_lr);
    meta_add(m, "dropout", "%.9g", s->dropout);
    meta_add(m, "no-mlp", "%d", s->no_mlp);
    meta_add(m, "residual", "%s", s->residual);
    const char *why = reference_cannot(s);
    meta_add(m, "pytorch_reference", "%s%s", why ? "cannot load: " : "loads", why ? why : "");
    meta_add(m, "seed", "%.0f", s->seed);
    meta_add(m, "eval-every", "%d", s->eval_every);
    meta_add(m, "eval-batch", "%d", s->eval_batch);
    meta_add(m, "eval-bytes", "%d", s->eval_bytes);
    meta_add(m, "prompt", "%s", s->prompt);
    meta_add(m, "precision", "%s", s->precision);
    meta_add(m, "data_fnv1a64", "%016llx", (unsigned long long)tr->data_hash);
    if (tr->corpus.parts.n) {
        meta_add(m, "streams", "%d", s->streams);
        meta_add(m, "shuffle-buffer", "%d", s->shuffle_buffer);
    }
}

static int cmp_int_desc(const void *a, const void *b)
{
    return *(const int *)b - *(const int *)a;
}

/* The steps of dir's ckpt-*.safetensors, newest first; returns the count. */
static int list_ckpts(const char *dir, int *steps, int max)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < max) {
        int k, len = 0;
        if (sscanf(e->d_name, "ckpt-%d.safetensors%n", &k, &len) == 1 &&
            len == (int)strlen(e->d_name))
            steps[n++] = k;
    }
    if (d)
        closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_int_desc);
    return n;
}

/* Keeps the newest `keep` checkpoints up to step newest. */
static void prune_ckpts(const char *dir, int keep, int newest)
{
    static int steps[4096];
    char path[4096];
    int n = list_ckpts(dir, steps, 4096), kept = 0;
    for (int i = 0; i < n; i++) {
        if (steps[i] > newest || kept++ < keep)
            continue;
        snprintf(path, sizeof path, "%s/ckpt-%08d.safetensors", dir, steps[i]);
        unlink(path);
    }
}

/* Every stream's state, gathered from the hosts that read them:
 * [streams][loader_state_size] bytes. */
static unsigned char *gather_streams(const struct trainer *tr, size_t *bytes)
{
    size_t mine = (size_t)(tr->s.streams / comm_size()) * loader_state_size(&tr->spec);
    unsigned char *local = xcalloc(mine, 1), *all = xcalloc(mine, (size_t)comm_size());
    loader_state(tr->loader, local);
    comm_allgather(local, all, mine);
    free(local);
    *bytes = mine * (size_t)comm_size();
    return all;
}

static void save_checkpoint(struct trainer *tr, int steps_done)
{
    struct meta m = {.n = 0};
    char path[4096], err[512];
    size_t stream_bytes = 0;
    unsigned char *streams = !tr->spec.text ? gather_streams(tr, &stream_bytes) : NULL;
    if (!is_master()) {
        free(streams);
        return;
    }
    run_meta(tr, &m);
    meta_add(&m, "step", "%d", steps_done);
    if (tr->spec.text) /* where the draws were after the last step taken */
        tr->rng_data = loader_text_rng(tr->loader);
    meta_add(&m, "rng_data", "");
    rng_hex(m.val[m.n - 1], &tr->rng_data);
    meta_add(&m, "rng_eval", "");
    rng_hex(m.val[m.n - 1], &tr->rng_eval);
    const char *val[MAX_META];
    for (int i = 0; i < m.n; i++)
        val[i] = m.val[i];
    snprintf(path, sizeof path, "%s/ckpt-%08d.safetensors", tr->s.out, steps_done);
    StWriter w = {{0}, {0}};
    ckpt_put(&w, &tr->model);
    if (streams) /* where every data stream is: a resume continues mid-part */
        st_add(&w, "_gpt.loader", ST_U8, 2,
               (int64_t[]){tr->s.streams, (int64_t)loader_state_size(&tr->spec)}, streams,
               stream_bytes);
    free(streams);
    if (st_write(&w, path, m.key, val, m.n, err, sizeof err))
        die(1, "%s", err);
    prune_ckpts(tr->s.out, tr->s.keep, steps_done);
    clear_progress(tr);
    printf("saved %s\n", path);
    fflush(stdout);
}

static void make_out_dir(const char *dir)
{
    if (mkdir(dir, 0755) && errno != EEXIST)
        die(1, "%s: cannot create output directory (%s)", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK))
        die(1, "%s: output directory is not a writable directory", dir);
}

static void parse_rng(Rng *r, const char *hex, const char *path)
{
    char part[17];
    for (int i = 0; i < 4; i++) {
        if (!hex || strlen(hex) != 64)
            die_all(1, "%s: bad random generator state in the metadata", path);
        memcpy(part, hex + 16 * i, 16);
        part[16] = 0;
        r->s[i] = strtoull(part, NULL, 16);
    }
}

/* Keys a checkpoint of an older gpt lacks, and the value it then meant. */
static const char *older_default(const char *key)
{
    static const char *const table[][2] = {
        {"warmup", "0"}, {"decay", "none"}, {"min-lr", "0"}, {"dropout", "0"},
        {"no-mlp", "0"}, {"residual", "twice"}, {"pytorch_reference", "loads"}};
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(key, table[i][0]))
            return table[i][1];
    return NULL;
}

/* A resumed run takes every state-shaping setting from its checkpoint; a
 * flag the user gave that disagrees is an error naming both values. */
static void check_resume_flags(const struct trainer *tr, const StFile *f, const char *path)
{
    struct meta now = {.n = 0};
    run_meta(tr, &now);
    for (int i = 1; i < now.n; i++) {
        const char *key = now.key[i], *was = st_meta(f, key);
        if (!was)
            was = older_default(key); /* written before the key existed */
        if (!was)
            die_all(1, "%s: checkpoint lacks '%s' in its metadata", path, key);
        if (!strcmp(was, now.val[i]))
            continue;
        if (!strcmp(key, "data_fnv1a64"))
            die_all(1, "%s: --data is not the file this run was trained on", path);
        if (was_given(key))
            die_all(2, "--%s %s conflicts with the checkpoint's %s (%s)", key, now.val[i], was,
                    path);
    }
}

static void set_from_meta(struct settings *s, const StFile *f)
{
    int *ints[] = {&s->context, &s->embed, &s->mlp, &s->heads, &s->layers, &s->batch,
                   &s->seq, &s->eval_every, &s->eval_batch, &s->eval_bytes, &s->vocab,
                   &s->streams, &s->shuffle_buffer};
    const char *keys[] = {"context", "embed", "mlp", "heads", "layers", "batch",
                          "seq", "eval-every", "eval-batch", "eval-bytes", "vocab",
                          "streams", "shuffle-buffer"};
    for (int i = 0; i < 13; i++)
        if (st_meta(f, keys[i]) && !was_given(keys[i]))
            *ints[i] = atoi(st_meta(f, keys[i]));
    if (st_meta(f, "lr") && !was_given("lr"))
        s->lr = atof(st_meta(f, "lr"));
    if (st_meta(f, "warmup") && !was_given("warmup"))
        s->warmup = atoi(st_meta(f, "warmup"));
    if (st_meta(f, "min-lr") && !was_given("min-lr"))
        s->min_lr = atof(st_meta(f, "min-lr"));
    if (st_meta(f, "dropout") && !was_given("dropout"))
        s->dropout = atof(st_meta(f, "dropout"));
    if (st_meta(f, "no-mlp") && !was_given("no-mlp"))
        s->no_mlp = atoi(st_meta(f, "no-mlp"));
    if (st_meta(f, "decay") && !was_given("decay"))
        s->decay = st_meta(f, "decay");
    if (st_meta(f, "residual") && !was_given("residual"))
        s->residual = st_meta(f, "residual");
    if (st_meta(f, "seed") && !was_given("seed"))
        s->seed = atof(st_meta(f, "seed"));
    if (st_meta(f, "prompt") && !was_given("prompt"))
        s->prompt = st_meta(f, "prompt");
    if (st_meta(f, "precision") && !was_given("precision"))
        s->precision = st_meta(f, "precision");
}

/* The checkpoint to resume, opened before the flags are checked because it
 * supplies their values. Kept open: the prompt points into it. */
static void open_resume(struct trainer *tr, StFile *f, char *path, size_t n)
{
    char err[512];
    if (is_master())
        resolve_ckpt(*tr->s.resume ? tr->s.resume : tr->s.out, path, n);
    comm_broadcast(path, n, 0);
    if (load_on_master(f, path, err, sizeof err))
        die(1, "%s: %s", path, err);
    const char *fmt = st_meta(f, "format"), *step = st_meta(f, "step");
    if (!fmt || strcmp(fmt, "gpt-ckpt-1") || !step)
        die_all(1, "%s: not a gpt training checkpoint (no format or step in the metadata)", path);
    set_from_meta(&tr->s, f);
}

static void resume_state(struct trainer *tr, const StFile *f, const char *path)
{
    char err[512];
    check_resume_flags(tr, f, path);
    if (ckpt_load_weights(&tr->model, f, 1, err, sizeof err))
        die_all(1, "%s: %s", path, err);
    tr->start = atoi(st_meta(f, "step"));
    tr->model.t = tr->start;
    parse_rng(&tr->rng_data, st_meta(f, "rng_data"), path);
    parse_rng(&tr->rng_eval, st_meta(f, "rng_eval"), path);
    if (tr->start > tr->s.steps)
        die_all(2, "%s is at step %d, past --steps %d", path, tr->start, tr->s.steps);
}

static void init_weights(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    Config c = {.vocab = s->vocab, .context = s->context, .embed = s->embed, .mlp = s->mlp,
                .heads = s->heads, .layers = s->layers, .no_mlp = s->no_mlp,
                .residual_once = !strcmp(s->residual, "once"), .dropout = (float)s->dropout};
    model_init(&tr->model, &c, (uint64_t)s->seed);
    rng_seed(&tr->rng_data, (uint64_t)s->seed, 1);
    rng_seed(&tr->rng_eval, (uint64_t)s->seed, 2);
    if (!s->init)
        return;
    StFile f;
    char err[512];
    if (load_on_master(&f, s->init, err, sizeof err) ||
        ckpt_load_weights(&tr->model, &f, 0, err, sizeof err))
        die(1, "%s: %s", s->init, err);
    st_free(&f);
}

/* SIGINT and SIGTERM finish the current step, save, and exit 128+signal. */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The signal that stops the run, agreed by every host (0: go on): a host
 * that stopped alone would leave the others waiting in an all-reduce. */
static int agreed_stop(void)
{
    if (comm_size() == 1)
        return stop_signal;
    float stops = stop_signal != 0;
    comm_all_reduce(&stops, 1);
    return stops == 0 ? 0 : stop_signal ? stop_signal : SIGTERM;
}

/* The step's windows, from the loader's thread, which made them ahead:
 * the whole batch drawn from the text in memory (every host draws the
 * same), or this host's share of a corpus's streams. */
static void next_batch(struct trainer *tr, Batch *share)
{
    char err[1024];
    double waited;
    const unsigned char *rows = loader_next(tr->loader, &waited, err, sizeof err);
    if (!rows)
        die(1, "%s", err);
    Batch *b = tr->spec.text ? &tr->train : share;
    for (size_t i = 0; i < (size_t)b->B * (size_t)b->T; i++)
        b->tok[i] = rows[i];
    batch_finish(b);
    tr->t_data += waited;
}

/* --profile's file; in a pod, host h > 0 writes FILE.rank<h> beside it. */
static void write_timeline(const struct settings *s)
{
    char path[4200];
    if (is_master())
        snprintf(path, sizeof path, "%s", s->profile);
    else
        snprintf(path, sizeof path, "%s.rank%d", s->profile, comm_rank());
    if (xs_timeline_write(path))
        die(1, "%s: cannot write the --profile timeline (%s)", path, strerror(errno));
    if (is_master())
        printf("gpt: wrote the timeline of %d steps to %s (Perfetto or chrome://tracing)\n",
               s->profile_steps, path);
}

static void train_loop(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    Batch share = host_share(&tr->train);
    for (int step = tr->start; step < s->steps; step++) {
        if (s->profile && step == tr->start)
            xs_timeline_start();
        if (s->profile && step == tr->start + s->profile_steps)
            write_timeline(s);
        next_batch(tr, &share);
        double t0 = now_seconds();
        double lr = rate_at(s, step);
        float loss = model_train_step(&tr->model, tr->g, &share, (float)lr);
        double dt = now_seconds() - t0;
        tr->t_steps += dt;
        if (tr->log)
            runlog_step(tr->log, &(StepFigures){step, loss, lr, dt * 1e3,
                                                s->batch * s->seq / dt, xs_counter(C_UNCACHED),
                                                xs_counter(C_CACHED), xs_counter(C_HOST_READ)});
        if (!isfinite(loss))
            die_all(1, "training diverged at step %d (loss %g); try a smaller --lr", step, loss);
        if (step % s->eval_every == 0)
            eval_line(tr, step, loss);
        print_progress(tr, step, loss);
        if ((step + 1) % s->ckpt_every == 0 && step + 1 < s->steps)
            save_checkpoint(tr, step + 1);
        int stop = agreed_stop();
        if (stop) {
            save_checkpoint(tr, step + 1);
            clear_progress(tr);
            if (is_master())
                fprintf(stderr, "gpt: stopped by signal %d after step %d; --resume continues\n",
                        stop, step + 1);
            exit_planned(128 + stop);
        }
    }
}

static void final_passage(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    if (!is_master())
        return;
    int n = (int)strlen(s->prompt), total = n > s->final_bytes ? n : s->final_bytes;
    char *text = xcalloc((size_t)total + 1, 1);
    memcpy(text, s->prompt, (size_t)n);
    SampleOpts so = {.temperature = 1.0f};
    Rng r; /* its own stream: a resumed run's state must not depend on it */
    rng_seed(&r, (uint64_t)s->seed, 4);
    model_generate(&tr->model, tr->g, text, n, total, &so, &r);
    clear_progress(tr);
    printf("\n%s\n\n", text);
    free(text);
}

/* A fresh run into a directory of another run's checkpoints would replace
 * them step by step; the user must say which they mean. */
static void refuse_overwrite(const struct settings *s)
{
    static int steps[4096];
    if (!s->resume && list_ckpts(s->out, steps, 4096) > 0)
        die(2, "%s already holds checkpoints (newest ckpt-%08d); --resume continues that run, "
            "or choose another --out", s->out, steps[0]);
}

/* Each host's ms/step and its part spent in the cross-host all-reduce: a
 * straggler shows as the host that waits least (the others wait for it). */
static void report_hosts(double step_seconds, int steps)
{
    double mine[2] = {step_seconds / (steps > 0 ? steps : 1),
                      xs_metric_sum(M_HOST_ALL_REDUCE) / (steps > 0 ? steps : 1)};
    double all[2 * COMM_MAX_RANKS];
    if (comm_size() == 1)
        return;
    comm_allgather(mine, all, sizeof mine);
    for (int r = 0; r < comm_size(); r++)
        printf("gpt: rank %d: %.2f ms/step, %.2f of them in the cross-host all-reduce\n", r,
               all[2 * r] * 1e3, all[2 * r + 1] * 1e3);
}

/* ---- train: data ---- */

/* One text file is read whole (the reference's way); a corpus is streamed.
 * The fingerprint the checkpoint keeps covers the file's bytes, or a
 * corpus's part names, and the test set's bytes. */
static void open_data(struct trainer *tr)
{
    struct settings *s = &tr->s;
    char err[1024];
    if (!is_corpus(s->data)) {
        load_data(&tr->data, s->data, s->seq, s->vocab, !s->test_data);
        tr->data_hash = fnv1a64(tr->data.bytes, tr->data.n);
    } else {
        need(s->test_data != NULL, "--data '%s' is a corpus, streamed in parts; give its "
             "test set with --test-data", s->data);
        if (data_source_open(&tr->corpus, s->data, err, sizeof err))
            die(1, "%s", err);
        tr->data_hash = FNV1A64_START;
        for (int i = 0; i < tr->corpus.parts.n; i++) {
            const char *name = tr->corpus.parts.path[i];
            tr->data_hash = fnv1a64_more(tr->data_hash, (const unsigned char *)name,
                                         strlen(name) + 1);
        }
    }
    tr->test = &tr->data;
    if (s->test_data) {
        load_corpus(&tr->test_set, s->test_data, s->seq, s->vocab);
        tr->data_hash = fnv1a64_more(tr->data_hash, tr->test_set.bytes, tr->test_set.n);
        tr->test = &tr->test_set;
    }
}

/* The corpus's streams, split over the hosts: each host reads its own. */
static void plan_streams(struct trainer *tr)
{
    struct settings *s = &tr->s;
    int parts = tr->corpus.parts.n, hosts = comm_size();
    if (!s->streams)
        s->streams = loader_default_streams(parts, s->batch);
    need(s->streams <= parts, "--streams %d needs as many parts; '%s' has %d", s->streams,
         s->data, parts);
    need(s->streams % hosts == 0, "'%s' gives %d data streams (%d parts), which do not split "
         "over %d hosts: each host reads parts of its own; add parts or set --streams",
         s->data, s->streams, parts, hosts);
    int S = s->streams;
    tr->spec = (LoaderSpec){.T = s->seq, .B = s->batch, .streams = S,
                            .first = comm_rank() * (S / hosts), .count = S / hosts,
                            .buffer = s->shuffle_buffer, .vocab = s->vocab,
                            .seed = (uint64_t)s->seed};
}

static void start_loader(struct trainer *tr, const StFile *rf, const char *path)
{
    char err[1024];
    const struct settings *s = &tr->s;
    const unsigned char *state = NULL;
    if (!tr->corpus.parts.n) /* one text file: random windows of its train split */
        tr->spec = (LoaderSpec){.T = s->seq, .B = s->batch, .streams = 1, .count = 1,
                                .vocab = s->vocab, .seed = (uint64_t)s->seed,
                                .text = tr->data.bytes, .text_len = tr->data.n_train,
                                .rng = tr->rng_data};
    size_t size = loader_state_size(&tr->spec);
    if (rf && !tr->spec.text) {
        const StEntry *e = st_find(rf, "_gpt.loader");
        if (!e || e->dtype != ST_U8 || e->ndim != 2 || e->shape[0] != tr->s.streams ||
            e->shape[1] != (int64_t)size)
            die_all(1, "%s: no data loader state for %d streams of %zu bytes (was the run "
                    "trained with other --seq, --streams or --shuffle-buffer?)", path,
                    tr->s.streams, size);
        state = (const unsigned char *)st_data(rf, e) + (size_t)tr->spec.first * size;
    }
    tr->loader = loader_start(&tr->spec, &tr->corpus.parts, state, err, sizeof err);
    if (!tr->loader)
        die(1, "%s", err);
}

static void describe_streams(const struct trainer *tr)
{
    const LoaderSpec *sp = &tr->spec;
    int parts = tr->corpus.parts.n;
    printf("gpt: data: %d parts in %d streams (an epoch: %d%s parts a stream), %d windows a "
           "step from each, a shuffle buffer of %d windows (%.2f MiB) each\n", parts,
           sp->streams, parts / sp->streams, parts % sp->streams ? " or 1 more" : "",
           sp->B / sp->streams, sp->buffer, (double)sp->buffer * sp->T / 1048576.0);
    if (comm_size() > 1)
        printf("gpt: data: host h reads streams %d*h .. %d*h+%d (part i of an epoch's "
               "order: stream i mod %d)\n", sp->count, sp->count, sp->count - 1, sp->streams);
}

/* What each stream read: documents and bytes in all and in its last
 * whole epoch, so that a short corpus is never a silent surprise. */
static void report_streams(const struct trainer *tr)
{
    if (tr->spec.text)
        return;
    int mine = tr->spec.count;
    StreamStats *local = xcalloc((size_t)mine, sizeof *local);
    StreamStats *all = xcalloc((size_t)tr->spec.streams, sizeof *all);
    for (int i = 0; i < mine; i++)
        local[i] = loader_stats(tr->loader, i);
    comm_allgather(local, all, sizeof *local * (size_t)mine);
    for (int i = 0; i < tr->spec.streams; i++) {
        const StreamStats *st = &all[i];
        printf("gpt: data stream %d: %llu documents, %llu bytes read; epochs done: %llu (of %d "
               "parts)", i, (unsigned long long)st->docs, (unsigned long long)st->bytes,
               (unsigned long long)st->epochs, st->parts);
        if (st->epochs)
            printf(", the last %llu documents, %llu bytes",
                   (unsigned long long)st->epoch_docs, (unsigned long long)st->epoch_bytes);
        putchar('\n');
    }
    free(local);
    free(all);
}

/* The master's run log in --out: the settings once (as the checkpoint
 * records them), then the steps. A resumed run keeps the steps before its
 * own. */
static void open_run_log(struct trainer *tr)
{
    struct meta m = {.n = 0};
    char cfg[8192] = "", err[1024];
    if (!is_master())
        return;
    run_meta(tr, &m);
    size_t n = 0;
    n += (size_t)snprintf(cfg + n, sizeof cfg - n, "\"parameters\":%zu,\"world_size\":%d",
                          tr->model.nw, comm_size() * xs_cores());
    for (int i = 0; i < m.n && n < sizeof cfg; i++) {
        n += (size_t)snprintf(cfg + n, sizeof cfg - n, ",\"%s\":\"", m.key[i]);
        for (const char *c = m.val[i]; *c && n + 8 < sizeof cfg; c++)
            n += (size_t)snprintf(cfg + n, sizeof cfg - n, *c == '"' || *c == '\\' ? "\\%c"
                                  : (unsigned char)*c < 32 || (unsigned char)*c > 126 ? "\\u%04x"
                                  : "%c", (unsigned char)*c);
        n += (size_t)snprintf(cfg + n, sizeof cfg - n, "\"");
    }
    tr->log = runlog_open(tr->s.out, cfg, tr->start, err, sizeof err);
    if (!tr->log)
        die(1, "%s", err);
}

static void run_training(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    batch_alloc(&tr->train, s->batch, s->seq);
    batch_alloc(&tr->test_batch, s->eval_batch, s->seq);
    tr->g = new_graph(s);
    tr->tty = isatty(STDOUT_FILENO);
    printf("gpt: %zu parameters, %s device, %s, %s kernels, %d threads, ", tr->model.nw,
           s->device, s->precision, isa_name(isa_get()), omp_get_max_threads());
    if (!tr->spec.text)
        printf("%d parts streamed / %zu test bytes\n", tr->corpus.parts.n,
               tr->test->n - tr->test->n_train);
    else
        printf("%zu train / %zu test bytes\n", tr->data.n_train, tr->test->n - tr->test->n_train);
    if (!tr->spec.text)
        describe_streams(tr);
    int hosts = comm_size(), world = hosts * xs_cores();
    if (xs_cores() > 1 || s->tpu)
        printf("gpt: %s: %d cores (xla:0..xla:%d), %d windows each, %.1f GiB HBM per core\n",
               xs_device_name(), xs_cores(), xs_cores() - 1, s->batch / world,
               (double)xs_hbm() / 1073741824.0);
    if (hosts > 1)
        printf("gpt: pod of %d hosts x %d cores over %s: world size %d (ordinals 0..%d), "
               "master ordinal 0\n", hosts, xs_cores(), comm_name(), world, world - 1);
    tr->t_start = now_seconds();
    tr->rate_step = tr->start;
    open_run_log(tr);
    train_loop(tr);
    if (tr->start < s->steps)
        save_checkpoint(tr, s->steps);
    if (s->profile && s->steps - tr->start <= s->profile_steps)
        write_timeline(s);
    report_streams(tr);
    report_hosts(tr->t_steps, s->steps - tr->start); /* the last collective */
    final_passage(tr);
    int steps = s->steps - tr->start;
    if (steps > 0)
        printf("%.2f ms/step over %d steps; the steps waited %.4f ms/step for data\n",
               tr->t_steps * 1e3 / steps, steps, tr->t_data * 1e3 / steps);
    report_metrics(s);
    char err[1024];
    if (runlog_close(tr->log, err, sizeof err))
        die(1, "%s", err);
    loader_stop(tr->loader);
    data_source_free(&tr->corpus);
    g_free(tr->g);
    batch_free(&tr->train);
    batch_free(&tr->test_batch);
    model_free(&tr->model);
    free(tr->data.bytes);
    free(tr->test_set.bytes);
}

static int cmd_train(int argc, char **argv)
{
    struct trainer tr = {.s = defaults};
    struct settings *s = &tr.s;
    const struct opt o[] = {
        {"steps", O_INT, &s->steps, "training steps"},
        {"batch", O_INT, &s->batch, "windows per batch"},
        {"seq", O_INT, &s->seq, "bytes per training window (<= context)"},
        {"lr", O_REAL, &s->lr, "Adam learning rate (the peak, with a schedule)"},
        {"warmup", O_INT, &s->warmup, "steps of linear warm-up to --lr"},
        {"decay", O_STR, &s->decay, "after warm-up: cosine, linear (to --min-lr) or none"},
        {"min-lr", O_REAL, &s->min_lr, "the rate --decay ends at"},
        {"dropout", O_REAL, &s->dropout, "dropout on attention probabilities, attention and MLP "
         "outputs (training only)"},
        {"no-mlp", O_FLAG, &s->no_mlp, "attention-only blocks (no MLP)"},
        {"residual", O_STR, &s->residual, "once, or twice as the reference adds it"},
        {"embed", O_INT, &s->embed, "embedding width C"},
        {"mlp", O_INT, &s->mlp, "MLP hidden width"},
        {"heads", O_INT, &s->heads, "attention heads (divides embed)"},
        {"layers", O_INT, &s->layers, "transformer blocks"},
        {"context", O_INT, &s->context, "context length (position embeddings)"},
        {"eval-every", O_INT, &s->eval_every, "steps between eval lines"},
        {"eval-batch", O_INT, &s->eval_batch, "random test windows per eval"},
        {"eval-bytes", O_INT, &s->eval_bytes, "length of each eval continuation, prompt included"},
        {"final-bytes", O_INT, &s->final_bytes, "length of the final passage, prompt included"},
        {"prompt", O_STR, &s->prompt, "prompt for continuations"},
        {"seed", O_REAL, &s->seed, "random seed (weights, batches, sampling)"},
        {"data", O_STR, &s->data, "a text file (first 80% train, rest test), or a corpus streamed "
         "in parts: DIR, 'a/*.txt', 'train-{0000..0063}.tar' (WebDataset), pipe:CMD"},
        {"test-data", O_STR, &s->test_data, "the test set (same forms), read whole; needed "
         "with a corpus"},
        {"vocab", O_INT, &s->vocab, "128 (ASCII, the reference) or 256 (any bytes: UTF-8)"},
        {"streams", O_INT, &s->streams, "a corpus's data streams (0: by part count, up to 8)"},
        {"shuffle-buffer", O_INT, &s->shuffle_buffer, "a stream's shuffle buffer, in windows"},
        {"out", O_STR, &s->out, "directory for checkpoints"},
        {"init", O_STR, &s->init, "start from this safetensors file's weights"},
        {"resume", O_STR, &s->resume, "continue a run from a checkpoint (FILE, DIR, or --out)"},
        {"ckpt-every", O_INT, &s->ckpt_every, "steps between checkpoints (also at the end and on ^C)"},
        {"keep", O_INT, &s->keep, "checkpoints kept in --out, newest first"},
        {"device", O_STR, &s->device, "xla (trace, compile, cache) or cpu (eager)"},
        {"metrics", O_FLAG, &s->metrics, "print the XLA metrics and kernel profile at the end"},
        {"verbose", O_FLAG, &s->verbose, "per-core throughput lines at each eval (PyTorch/XLA's)"},
        {"profile", O_STR, &s->profile, "write a timeline of the first steps (Chrome trace JSON)"},
        {"profile-steps", O_INT, &s->profile_steps, "steps --profile records"},
        {"threads", O_INT, &s->threads, "OpenMP threads, 0 = all cores"},
        {"tpu", O_STR, &s->tpu, "simulate this TPU board (v2-8, v3-8, v4-8, v5e-8, v5p-8, v6e-8)"},
        {"cores", O_INT, &s->cores, "simulated cores, data parallel (power of two; 0 = --tpu's or 1)"},
        {"hbm", O_STR, &s->hbm, "HBM per core, e.g. 16G or 8M (default: --tpu's, or 16G)"},
        {"precision", O_STR, &s->precision, "fp32, bf16 (matrix-unit inputs) or bf16-pure (XLA_USE_BF16)"},
    };
    parse_opts("train", "Trains the model and writes a checkpoint.", argc, argv, o,
               (int)(sizeof o / sizeof *o), NULL);
    catch_signals(); /* early: a signal during set-up still ends in a checkpoint */
    StFile rf = {0};
    char rpath[4096];
    if (s->resume)
        open_resume(&tr, &rf, rpath, sizeof rpath);
    check_train_flags(s);
    apply_common_flags(s);
    setup_board(s, comm_size());
    need(s->eval_batch % comm_size() == 0, "--eval-batch %d does not split evenly over %d "
         "hosts", s->eval_batch, comm_size());
    open_data(&tr);
    if (tr.corpus.parts.n)
        plan_streams(&tr);
    check_same_data(tr.data_hash, s->data);
    if (is_master()) {
        make_out_dir(s->out);
        refuse_overwrite(s);
    }
    init_weights(&tr);
    if (s->resume)
        resume_state(&tr, &rf, rpath);
    round_to_precision(&tr.model, s);
    model_set_cores(&tr.model, xs_cores());
    start_loader(&tr, s->resume ? &rf : NULL, rpath);
    run_training(&tr);
    st_free(&rf);
    return 0;
}

/* ---- loading a model for sample and eval ---- */

/* A directory stands for its newest ckpt-*.safetensors. */
static void resolve_ckpt(const char *arg, char *path, size_t n)
{
    struct stat st;
    static int steps[4096];
    if (stat(arg, &st))
        die(1, "%s: cannot open checkpoint (%s)", arg, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        snprintf(path, n, "%s", arg);
    else if (list_ckpts(arg, steps, 4096) < 1)
        die(1, "%s: no ckpt-*.safetensors in this directory", arg);
    else
        snprintf(path, n, "%s/ckpt-%08d.safetensors", arg, steps[0]);
}

/* Loads a checkpoint; a run's precision, when the caller did not choose
 * one, becomes s->precision (kept in static storage). */
static void load_model(Model *m, const char *arg, struct settings *s)
{
    static char prec[16];
    int heads = s->heads;
    char path[4096], err[512];
    StFile f;
    Config c;
    resolve_ckpt(arg, path, sizeof path);
    if (st_load(&f, path, err, sizeof err))
        die(1, "%s: %s", path, err);
    if (ckpt_config(&f, &c, heads))
        die(1, "%s: not a gpt checkpoint (missing or inconsistent config)", path);
    model_init(m, &c, 0);
    if (ckpt_load_weights(m, &f, 0, err, sizeof err))
        die(1, "%s: %s", path, err);
    const char *p = st_meta(&f, "precision");
    if (p && !was_given("precision") && strlen(p) < sizeof prec) {
        snprintf(prec, sizeof prec, "%s", p);
        s->precision = prec;
        precision_of(prec);
    }
    st_free(&f);
    round_to_precision(m, s);
}

/* ---- sample ---- */

static void emit_raw(int c, void *ctx)
{
    (void)ctx;
    putchar(c);
    fflush(stdout);
}

static int cmd_sample(int argc, char **argv)
{
    struct settings s = defaults;
    const struct opt o[] = {
        {"ckpt", O_STR, &s.ckpt, "checkpoint file, or a directory (newest ckpt-*)"},
        {"prompt", O_STR, &s.prompt, "text to continue"},
        {"bytes", O_INT, &s.bytes, "bytes to print, prompt included"},
        {"temperature", O_REAL, &s.temperature, "softmax temperature, 0 = greedy"},
        {"top-k", O_INT, &s.top_k, "sample among the k likeliest bytes, 0 = all"},
        {"seed", O_REAL, &s.seed, "random seed (passage i of --num-samples uses SEED+i)"},
        {"num-samples", O_INT, &s.num_samples, "passages generated at once, printed when done"},
        {"heads", O_INT, &s.heads, "heads, for files without our metadata"},
        {"device", O_STR, &s.device, "xla (trace, compile, cache) or cpu (eager)"},
        {"metrics", O_FLAG, &s.metrics, "print the XLA metrics and kernel profile at the end"},
        {"naive", O_FLAG, &s.naive, "grow the input a byte at a time, as the reference does"},
        {"threads", O_INT, &s.threads, "OpenMP threads, 0 = all cores"},
        {"precision", O_STR, &s.precision, "fp32, bf16 or bf16-pure (default: the checkpoint's)"},
        {"hbm", O_STR, &s.hbm, "HBM of the simulated core, e.g. 16G"},
    };
    parse_opts("sample", "Streams a continuation of the prompt.", argc, argv, o,
               (int)(sizeof o / sizeof *o), NULL);
    if (!is_master())
        return 0; /* in a pod the master alone samples */
    check_prompt(s.prompt, MAX_VOCAB);
    need(s.bytes >= 0 && s.bytes <= 1 << 24, "--bytes must be 0..16777216, got %d", s.bytes);
    need(s.temperature >= 0, "--temperature must be >= 0, got %g", s.temperature);
    need(s.top_k >= 0 && s.top_k <= MAX_VOCAB, "--top-k must be 0..%d, got %d", MAX_VOCAB,
         s.top_k);
    need(s.seed >= 0 && s.seed == floor(s.seed), "--seed must be a whole number >= 0");
    need(s.num_samples >= 1 && s.num_samples <= 4096, "--num-samples must be 1..4096, got %d",
         s.num_samples);
    need(!(s.naive && s.num_samples > 1), "--naive generates one passage; drop --num-samples");
    apply_common_flags(&s);
    setup_board(&s, 1);
    Model m;
    load_model(&m, s.ckpt, &s);
    check_prompt(s.prompt, m.cfg.vocab); /* a vocab-128 model knows only ASCII */
    int ns = s.num_samples, n = (int)strlen(s.prompt), total = n > s.bytes ? n : s.bytes;
    char **text = xcalloc((size_t)ns, sizeof *text); /* [ns] passages */
    Rng *r = xcalloc((size_t)ns, sizeof *r);          /* [ns] their generators */
    for (int i = 0; i < ns; i++) {
        text[i] = xcalloc((size_t)total + 1, 1);
        memcpy(text[i], s.prompt, (size_t)n);
        rng_seed(&r[i], (uint64_t)s.seed + (uint64_t)i, 3); /* = --seed SEED+i alone */
    }
    SampleOpts so = {(float)s.temperature, s.top_k, ns == 1 ? emit_raw : NULL, NULL};
    if (ns == 1)
        fputs(s.prompt, stdout); /* one passage streams as it grows */
    Graph *g = new_graph(&s);
    if (s.naive)
        model_generate_naive(&m, g, text[0], n, total, &so, &r[0]);
    else
        model_generate_many(&m, g, text, ns, n, total, &so, r);
    if (ns == 1)
        putchar('\n');
    for (int i = 0; i < ns && ns > 1; i++)
        printf("%s==== passage %d of %d (seed %.0f) ====\n%s\n", i ? "\n" : "", i + 1, ns,
               s.seed + i, text[i]);
    report_metrics(&s);
    g_free(g);
    for (int i = 0; i < ns; i++)
        free(text[i]);
    free(text);
    free(r);
    model_free(&m);
    return 0;
}

/* ---- eval ---- */

/* Mean loss over consecutive windows of the test split, chunk by chunk;
 * chunk means are weighted by their window counts. The last chunk is
 * padded with ignored windows so that every chunk has one shape (one
 * compiled program on the xla device). */
static double eval_test_split(Model *m, Graph *g, const Data *d, int chunk, long *windows)
{
    int T = m->cfg.context;
    long nw = (long)((d->n - d->n_train) / (size_t)T);
    double sum = 0;
    Batch b;
    batch_alloc(&b, (int)(nw < chunk ? nw : chunk), T);
    for (long w0 = 0; w0 < nw; w0 += b.B) {
        long real = nw - w0 < b.B ? nw - w0 : b.B;
        memset(b.tok, 0, sizeof(int32_t) * (size_t)b.B * T);
        for (long i = 0; i < real * T; i++)
            b.tok[i] = d->bytes[d->n_train + (size_t)w0 * T + (size_t)i];
        batch_finish(&b);
        for (long i = real * T; i < (long)b.B * T; i++)
            b.tgt[i] = -1;
        sum += (double)batch_loss(m, g, &b) * (double)real;
    }
    batch_free(&b);
    *windows = nw;
    return sum / (double)nw;
}

static int cmd_eval(int argc, char **argv)
{
    struct settings s = defaults;
    s.batch = 256;
    const struct opt o[] = {
        {"ckpt", O_STR, &s.ckpt, "checkpoint file, or a directory (newest ckpt-*)"},
        {"data", O_STR, &s.data, "a text file; the last 20% is the test split"},
        {"test-data", O_STR, &s.test_data, "a test set, whole: a file, DIR, glob, shards or "
         "pipe:CMD (instead of --data's split)"},
        {"batch", O_INT, &s.batch, "windows per forward pass"},
        {"heads", O_INT, &s.heads, "heads, for files without our metadata"},
        {"device", O_STR, &s.device, "xla (trace, compile, cache) or cpu (eager)"},
        {"metrics", O_FLAG, &s.metrics, "print the XLA metrics and kernel profile at the end"},
        {"threads", O_INT, &s.threads, "OpenMP threads, 0 = all cores"},
        {"precision", O_STR, &s.precision, "fp32, bf16 or bf16-pure (default: the checkpoint's)"},
        {"hbm", O_STR, &s.hbm, "HBM of the simulated core, e.g. 16G"},
    };
    parse_opts("eval", "Mean next-byte loss over the whole test split.", argc, argv, o,
               (int)(sizeof o / sizeof *o), NULL);
    if (!is_master())
        return 0; /* in a pod the master alone evaluates */
    need(s.batch >= 1 && s.batch <= 65536, "--batch must be 1..65536, got %d", s.batch);
    apply_common_flags(&s);
    setup_board(&s, 1);
    Model m;
    Data d;
    long windows;
    load_model(&m, s.ckpt, &s);
    if (s.test_data)
        load_corpus(&d, s.test_data, m.cfg.context, m.cfg.vocab);
    else
        load_data(&d, s.data, m.cfg.context, m.cfg.vocab, 1);
    Graph *g = new_graph(&s);
    double loss = eval_test_split(&m, g, &d, s.batch, &windows);
    printf("loss %.6f bpb %.4f (%ld windows of %d bytes)\n", loss, loss / log(2.0),
           windows, m.cfg.context);
    report_metrics(&s);
    g_free(g);
    free(d.bytes);
    model_free(&m);
    return 0;
}

/* ---- shard ---- */

/* A run of gpt shard: one sample per input file, shard after shard. */
struct sharder {
    const char *dir, *prefix;
    uint64_t max_bytes;
    int width;          /* digits of a sample's key */
    TarWriter w;        /* the shard being written */
    char path[4096];    /* its name */
    int shards, in_shard;
    long docs;
    uint64_t bytes, text_bytes;
};

/* The inputs in the order given, a directory standing for its files. */
static void shard_inputs(const struct operands *args, DataList *in)
{
    char err[1024];
    for (int i = 0; i < args->n; i++) {
        struct stat st;
        if (stat(args->v[i], &st))
            die(1, "%s: cannot open input file (%s)", args->v[i], strerror(errno));
        if (S_ISDIR(st.st_mode) && data_list_dir(args->v[i], in, err, sizeof err))
            die(1, "%s", err);
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
            die(1, "%s: not a regular file", args->v[i]);
        if (S_ISREG(st.st_mode))
            data_list_add(in, args->v[i]);
    }
}

/* Shards of an older run would mix with these (a glob of DIR takes both). */
static void refuse_old_shards(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = strlen(prefix);
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, prefix, n) && e->d_name[n] == '-' && len > n + 4 &&
            !strcmp(e->d_name + len - 4, ".tar"))
            die(2, "%s already holds %s; choose another --out or --prefix", dir, e->d_name);
    }
    if (d)
        closedir(d);
}

static void shard_fail(struct sharder *r)
{
    char err[sizeof r->w.err];
    memcpy(err, r->w.err, sizeof err);
    tar_write_abort(&r->w);
    die(1, "%s", err);
}

static void shard_close(struct sharder *r)
{
    if (tar_write_close(&r->w))
        die(1, "%s", r->w.err);
    uint64_t bytes = r->w.pos;
    printf("%s: %d documents, %llu bytes\n", r->path, r->in_shard, (unsigned long long)bytes);
    fflush(stdout);
    r->bytes += bytes;
    r->shards++;
    r->in_shard = 0;
}

/* Sample i: KEY.name (the input's path, for provenance) and KEY.txt (its
 * bytes), in a new shard when this one would pass --max-bytes. */
static void shard_add(struct sharder *r, int i, const char *file)
{
    char name[48], text[48];
    struct stat st;
    FILE *src = fopen(file, "rb");
    if (!src || fstat(fileno(src), &st))
        die(1, "%s: cannot open input file (%s)", file, strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    snprintf(name, sizeof name, "%0*d.name", r->width, i);
    snprintf(text, sizeof text, "%0*d.txt", r->width, i);
    uint64_t need = tar_member_bytes(name, strlen(file)) + tar_member_bytes(text, size);
    if (r->in_shard && r->w.pos + need + 1024 > r->max_bytes)
        shard_close(r);
    if (!r->in_shard) {
        snprintf(r->path, sizeof r->path, "%s/%s-%06d.tar", r->dir, r->prefix, r->shards);
        if (tar_write_open(&r->w, r->path))
            shard_fail(r);
    }
    if (tar_write_member(&r->w, name, file, strlen(file)) ||
        tar_write_file(&r->w, text, src, file, size))
        shard_fail(r);
    fclose(src);
    r->in_shard++;
    r->docs++;
    r->text_bytes += size;
}

static int cmd_shard(int argc, char **argv)
{
    const char *out = NULL, *max_bytes = "256M", *prefix = "train";
    const struct opt o[] = {
        {"out", O_STR, &out, "directory for the shards (required)"},
        {"max-bytes", O_STR, &max_bytes, "largest shard, e.g. 64M (a larger file gets one alone)"},
        {"prefix", O_STR, &prefix, "shard names: PREFIX-000000.tar, ..."},
    };
    struct operands files = {xcalloc((size_t)argc + 1, sizeof(char *)), 0};
    parse_opts("shard", "Writes FILES (a directory: its files) as WebDataset tar shards, one "
               "sample a file:\nKEY.txt its bytes, KEY.name its path.", argc, argv, o,
               (int)(sizeof o / sizeof *o), &files);
    if (!is_master())
        return 0; /* in a pod the master alone writes */
    need(out != NULL && *out, "gpt shard needs --out DIR");
    need(files.n > 0, "gpt shard needs input files (see gpt shard --help)");
    need(*prefix && !strchr(prefix, '/'), "--prefix must be a file name, got '%s'", prefix);
    struct sharder r = {.dir = out, .prefix = prefix, .max_bytes = parse_size("max-bytes", max_bytes)};
    DataList in = {0};
    shard_inputs(&files, &in);
    r.width = 6;
    for (long n = in.n - 1; n >= 1000000; n /= 10)
        r.width++;
    make_out_dir(out);
    refuse_old_shards(out, prefix);
    for (int i = 0; i < in.n; i++)
        shard_add(&r, i, in.path[i]);
    shard_close(&r);
    printf("%d shards, %ld documents, %llu bytes of text (%llu in all) in %s\n", r.shards,
           r.docs, (unsigned long long)r.text_bytes, (unsigned long long)r.bytes, out);
    data_list_free(&in);
    free(files.v);
    return 0;
}

/* ---- plot ---- */

static int cmd_plot(int argc, char **argv)
{
    const char *out = "plot.svg", **dirs = xcalloc((size_t)argc + 1, sizeof *dirs);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: gpt plot RUN_DIR... [-o FILE]\nDraws the train and test loss of "
                   "each run (its --out directory's metrics.jsonl) on one chart.\n\n"
                   "  -o FILE   the SVG to write ['plot.svg']\n");
            exit_planned(0);
        }
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out")) {
            need(i + 1 < argc, "%s needs a file name", argv[i]);
            out = argv[++i];
        } else {
            need(strncmp(argv[i], "-", 1) != 0, "unknown flag '%s' (see gpt plot --help)",
                 argv[i]);
            dirs[n++] = argv[i];
        }
    }
    need(n > 0, "gpt plot needs at least one run directory (see gpt plot --help)");
    if (!is_master())
        return 0;
    char err[1024];
    if (plot_runs(dirs, n, out, err, sizeof err))
        die(1, "%s", err);
    printf("wrote %s (%d runs)\n", out, n);
    free(dirs);
    return 0;
}

/* ---- main ---- */

static void usage_main(FILE *f)
{
    fputs("usage: gpt <command> [flags]\n"
          "  train    train the byte-level GPT (no flags = the reference's run)\n"
          "  sample   stream a continuation from a checkpoint\n"
          "  eval     test-split loss of a checkpoint\n"
          "  shard    write text files as WebDataset tar shards\n"
          "  plot     draw runs' losses on one chart (their --out directories)\n"
          "  sweep    a grid of training runs at once (flags with comma lists)\n"
          "gpt --version prints the version.\n"
          "gpt <command> --help lists each command's flags.\n"
          "GPT_ISA=scalar|avx2|avx512 lowers the kernel path.\n", f);
}

/* Joins the pod (with one process: nothing), and keeps the other ranks
 * quiet: they speak only to report an error. */
static void join_pod(int *argc, char ***argv)
{
    comm_init(argc, argv);
    atexit(leave_pod);
    need(comm_size() <= COMM_MAX_RANKS, "a pod has at most %d processes, got %d",
         COMM_MAX_RANKS, comm_size());
    const char *t = getenv("GPT_COMM_TIMEOUT");
    if (t && *t) {
        char *end;
        double seconds = strtod(t, &end);
        need(*end == 0 && seconds > 0, "GPT_COMM_TIMEOUT must be a number of seconds > 0, "
             "got '%s'", t);
        comm_set_timeout(seconds);
    }
    if (!is_master() && !freopen("/dev/null", "w", stdout))
        die(1, "cannot silence stdout on rank %d", comm_rank());
    check_same_flags(*argc, *argv);
}

static int run_command(int argc, char **argv)
{
    if (argc < 2) {
        if (is_master())
            usage_main(stderr);
        return 2;
    }
    isa_best(); /* validates GPT_ISA before any work */
    if (!strcmp(argv[1], "train"))
        return cmd_train(argc - 2, argv + 2);
    if (!strcmp(argv[1], "sample"))
        return cmd_sample(argc - 2, argv + 2);
    if (!strcmp(argv[1], "eval"))
        return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(argv[1], "shard"))
        return cmd_shard(argc - 2, argv + 2);
    if (!strcmp(argv[1], "plot"))
        return cmd_plot(argc - 2, argv + 2);
    if (!strcmp(argv[1], "sweep"))
        return cmd_sweep(argc - 2, argv + 2);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("gpt %s (%s build, %s, %s)\n", GPT_VERSION, comm_name(), GPT_COMPILER, GPT_RUNTIME);
        return 0;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage_main(stdout);
        return 0;
    }
    die(2, "unknown command '%s' (gpt --help lists them)", argv[1]);
}

int main(int argc, char **argv)
{
    join_pod(&argc, &argv);
    exit_planned(run_command(argc, argv));
}
#endif
