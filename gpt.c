/* gpt.c: the model. The reference bitesizedGPT (tests/reference_model.py),
 * op for op, written as graph ops (graph.h); the file reads top-down:
 *   parameters         the model's weights by name, and their graph leaves
 *   the forward pass   blocks of attention and MLP, from bytes to logits
 *   the training step  the loss, backward, the all-reduce and Adam, with
 *                      gradient accumulation's micro-batches
 * Below it, read second (model/): the model's data (model.h), the per-core
 * replicas and batch shards of data parallelism (replicas.c), gradient
 * accumulation's micro-batches (accum.c) and the eager device's lent board
 * (eager_board.c), kept out of the model's way.
 * Above it, using it: the sampler (cmd/sample.c: the KV-cache decoder,
 * temperature and top-k), the checkpoints (cmd/ckpt.c), the training run
 * (cmd/train.c) and the other commands (cmd/). Batches: data/batch.c. */
#include "gpt.h"
#include "model/model.h"
#include "util/rng.h"
#include "util/util.h"
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    rng_seed(&r, seed, RNG_INIT);
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
    free(m->acc);
    m->w = m->m = m->v = m->rep = m->acc = NULL;
    m->ncores = 0;
}

float *model_param(Model *m, const char *name)
{
    for (int i = 0; i < m->np; i++)
        if (!strcmp(m->p[i].name, name))
            return m->w + m->p[i].off;
    return NULL;
}

/* Data parallelism (model/replicas.c): n cores, each with a copy of core
 * 0's weights and Adam state (with --shard-optimizer, its shard of it). */
void model_set_cores(Model *m, int n)
{
    alloc_replicas(m, n, 0);
    alloc_accum(m); /* a partial sum a core */
}

/* A board lent to one core's run (cmd/train.c): n cores that read and
 * write core 0's weights and Adam state, one buffer, where a board of its
 * own holds a replica a core. What follows the step's all-reduce is the
 * same on every core, and the device runs it once (xla_sim.c). */
void model_lend_cores(Model *m, int n)
{
    alloc_replicas(m, n, 1);
    alloc_accum(m);
}

/* Every parameter's leaf, each into its named slot of L (a Linear
 * weight's slot gets W^T) and, unless leaf is NULL, into leaf[i] in table
 * order. With wt, the sampler's transposed_weights on one core, the
 * Linear weights' slots bind those copies and no transpose is recorded. */
static void param_leaves(Model *m, Graph *g, struct model_leaves *L, Tensor **leaf,
                         int with_grad, float *wt)
{
    void *w[XS_MAX_CORES];
    replica_bases(m, g, REPLICA_W, w);
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

/* The MLP's activations (Config.activation indexes this): the reference's
 * ReLU first, then GPT-2's GELU (its tanh approximation), each an
 * element-wise op of device/ops.def. */
static const struct {
    const char *name;
    int op; /* enum kop */
} activations[] = {{"relu", KOP_RELU}, {"gelu", KOP_GELU}};
#define N_ACTIVATIONS ((int)(sizeof activations / sizeof *activations))

int activation_find(const char *name)
{
    for (int i = 0; i < N_ACTIVATIONS; i++)
        if (!strcmp(name, activations[i].name))
            return i;
    return -1;
}

const char *activation_name(int a) { return a >= 0 && a < N_ACTIVATIONS ? activations[a].name : NULL; }

/* The MLP half of a block: h + mlp(ln2(h)), [n,C] -> [n,C]. */
static Tensor *mlp_half(Graph *g, const Config *c, const struct block_leaves *b, Tensor *h,
                        const struct attn_mode *a)
{
    Tensor *ln = g_layernorm(g, h, b->ln2_w, b->ln2_b); /* [n,C] */
    Tensor *f = g_unary(g, activations[c->activation].op,
                        g_matmul(g, ln, b->fc_wt, b->fc_b)); /* [n,M] */
    return g_add(g, h, drop(g, a, g_matmul(g, f, b->proj_wt, b->proj_b), 2)); /* [n,C] */
}

/* The reference's Block.forward, [n,C] -> [n,C]; with --no-mlp the
 * attention half alone. */
static Tensor *block(Graph *g, const Config *c, const struct block_leaves *b, Tensor *x,
                     const struct attn_mode *a)
{
    Tensor *h = attention_half(g, b, x, a);
    return c->no_mlp ? h : mlp_half(g, c, b, h, a);
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
    Tensor *tok = batch_slice_leaf(g, b, b->tok); /* i32 [n] */
    Tensor *pos = batch_slice_leaf(g, b, b->pos); /* i32 [n] */
    Tensor *x = embed(g, L, tok, pos);      /* [n,C] */
    if (training && m->cfg.dropout > 0) {   /* off in eval and sampling */
        a.dropout = m->cfg.dropout;
        a.rows = batch_slice_leaf(g, b, b->row);
        a.key = g_leaf(g, TK_INPUT, DT_I32, m->drop_key, 1, 2);
    }
    for (int l = 0; l < m->cfg.layers; l++) {
        a.layer = l;
        a.last = l == m->cfg.layers - 1 ? last : NULL;
        g_remat_begin(g); /* a block: what --remat recomputes in the backward pass */
        x = stack_step(g, &m->cfg, &L->block[l], x, &a); /* [n,C] ([k,C] last) */
        g_remat_end(g);
    }
    return unembed(g, L, x);
}

/* ---- the sampler's forward passes (cmd/sample.c) ----
 * Without gradients, on weights the sampler may keep transposed (wt);
 * model/model.h says what each takes. Over windows: */
Tensor *forward_windows(Model *m, Graph *g, const Batch *b, float *wt, int32_t *last)
{
    struct model_leaves L;
    param_leaves(m, g, &L, NULL, 0, wt);
    int windows = b->B / g_cores(g); /* a core's */
    Tensor *rows = last ? g_leaf(g, TK_INPUT, DT_I32, last, windows, 1) : NULL; /* i32 [windows] */
    return forward(m, g, &L, b, 0, rows);
}

/* One new byte a passage, through the KV caches: the decoder's step. */
Tensor *forward_cached(Model *m, Graph *g, int ns, int32_t *tok, int32_t *pos, float *kc,
                       float *vc, float *wt)
{
    const Config *c = &m->cfg;
    size_t cache = (size_t)ns * c->context * c->embed; /* one layer's [ns,context,C] */
    struct model_leaves L;
    param_leaves(m, g, &L, NULL, 0, wt);
    Tensor *t = g_leaf(g, TK_INPUT, DT_I32, tok, ns, 1);   /* [ns] */
    Tensor *p = g_leaf(g, TK_INPUT, DT_I32, pos, ns, 1);   /* [ns] */
    Tensor *pos1 = g_leaf(g, TK_INPUT, DT_I32, pos, 1, 1); /* [1]: the cache row */
    struct attn_mode a = {.heads = c->heads, .pos = pos1};
    Tensor *x = embed(g, &L, t, p); /* [ns,C] */
    for (int l = 0; l < c->layers; l++) {
        a.k_cache = g_leaf(g, TK_STATE, DT_F32, kc + l * cache, ns * c->context, c->embed);
        a.v_cache = g_leaf(g, TK_STATE, DT_F32, vc + l * cache, ns * c->context, c->embed);
        x = stack_step(g, c, &L.block[l], x, &a);
    }
    return unembed(g, &L, x);
}

/* ---- the loss and the training step ---- */

Tensor *model_loss(Model *m, Graph *g, const Batch *b, Tensor **leaf,
                   Tensor **logits, int with_grad)
{
    struct model_leaves L;
    param_leaves(m, g, &L, leaf, with_grad, NULL);
    Tensor *tgt = batch_slice_leaf(g, b, b->tgt); /* i32 [n] */
    *logits = forward(m, g, &L, b, with_grad, NULL); /* [n,V] */
    return g_xent(g, *logits, tgt);
}

/* The mean loss of a batch, without gradients. */
float batch_loss(Model *m, Graph *g, const Batch *b)
{
    Tensor *leaf[MAX_PARAMS], *logits;
    g_reset(g);
    return *(const float *)g_read(g, model_loss(m, g, b, leaf, &logits, 0));
}

/* Adam on every parameter, on every core's replica; t, read only, is shared. */
static void adam_update(Model *m, Graph *g, Tensor **leaf, Tensor **grad, float lr)
{
    m->t++;
    m->lr = lr;
    Tensor *t = g_leaf(g, TK_STATE, DT_I32, &m->t, 1, 1);
    Tensor *rate = g_leaf(g, TK_INPUT, DT_F32, &m->lr, 1, 1); /* data, so a schedule never recompiles */
    if (m->shards > 1) { /* --shard-optimizer: each core its shard (model/replicas.c) */
        adam_shards(m, g, leaf, grad, t, rate);
        return;
    }
    for (int i = 0; i < m->np; i++) {
        /* rows x cols, as the parameter */
        Tensor *mm = moment_leaf(m, g, REPLICA_M, &m->p[i]);
        Tensor *vv = moment_leaf(m, g, REPLICA_V, &m->p[i]);
        g_adam(g, leaf[i], grad[i], mm, vv, t, rate, 0.9f, 0.999f, 1e-8f);
    }
}

/* Dropout's key for update number t: the run's seed and t, mixed. */
static void drop_key(Model *m, int32_t t)
{
    uint64_t z = mix64(m->seed * SPLITMIX64_GAMMA + (uint64_t)t);
    m->drop_key[0] = (int32_t)(uint32_t)z;
    m->drop_key[1] = (int32_t)(uint32_t)(z >> 32);
}

/* ---- the training step ----
 * One forward and backward pass, the all-reduce and Adam; with
 * --grad-accum N, N passes whose gradients are summed on the device
 * between them (model/accum.c says how, and why the bits do not change). */

/* One forward and backward pass on mb: its gradients and loss, sum[0..np]. */
static void gradients(Model *m, Graph *g, const Batch *mb, Tensor **leaf, Tensor **sum)
{
    Tensor *logits;
    g_reset(g);
    g_set_cores(g, m->ncores > 1 ? m->ncores : 1);
    g_set_example_rows(g, mb->T); /* per-window gradient sums, in a fixed tree */
    Tensor *loss = model_loss(m, g, mb, leaf, &logits, 1);
    g_backward(g, loss, NULL);
    for (int i = 0; i < m->np; i++)
        sum[i] = g_grad(g, leaf[i]);
    sum[m->np] = loss;
}

/* The last micro-batch (or the only one): the all-reduces after the whole
 * backward pass, as one bucket, then Adam; sum[0..np] adds up `micro`
 * passes. Returns the step's loss. */
static float update(Model *m, Graph *g, Tensor **leaf, Tensor **sum, float lr, int micro)
{
    Tensor *grad[MAX_PARAMS];
    for (int i = 0; i < m->np; i++)
        grad[i] = mean_over_replicas(m, g, sum[i], i, micro);
    Tensor *loss = mean_over_replicas(m, g, sum[m->np], m->np, micro);
    adam_update(m, g, leaf, grad, lr);
    if (m->shards > 1)
        gather_shards(m, g, leaf, loss); /* the updated shards back whole on every core */
    g_mark_step(g, &loss, 1); /* one graph: forward, backward, update */
    float l = *(const float *)g_read(g, loss);
    g_set_cores(g, 1);
    g_set_example_rows(g, 0);
    return l;
}

/* The eager device on a lent board (model/eager_board.c): the cores'
 * passes by the redo team, each like a micro-batch, then one update. The
 * sums and Adam run on this thread alone: the team runs beside busy
 * programs, where a parallel region's threads wait at its end for one
 * the scheduler holds. */
static float eager_board_step(Model *m, Graph *g, const Batch *b, float lr)
{
    Tensor *leaf[MAX_PARAMS], *sum[MAX_PARAMS + 1];
    struct core_pass *won[XS_MAX_CORES];
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    eager_board_gradients(m, g, b, gradients, sum, won);
    for (int i = 0; i < m->np; i++) /* the weights the lent cores share, for Adam */
        leaf[i] = g_leaf(g, TK_PARAM, DT_F32, m->w + m->p[i].off, m->p[i].rows, m->p[i].cols);
    float loss = update(m, g, leaf, sum, lr, m->ncores);
    eager_board_release(won, m->ncores);
    omp_set_num_threads(threads);
    return loss;
}

float model_train_step(Model *m, Graph *g, const Batch *b, float lr)
{
    Tensor *leaf[MAX_PARAMS], *sum[MAX_PARAMS + 1];
    int n = micro_batches(m), cores = m->ncores > 1 ? m->ncores : 1;
    drop_key(m, m->t + 1); /* this step's masks; a resumed run has the same t */
    if (m->lent && !g_is_lazy(g))
        return eager_board_step(m, g, b, lr);
    if (n == 1) {
        gradients(m, g, b, leaf, sum);
        return update(m, g, leaf, sum, lr, 1);
    }
    Batch mb;
    batch_alloc(&mb, b->B / n, b->T);
    for (int k = 0; k < n - 1; k++) {
        micro_batch(&mb, b, k, n, cores);
        gradients(m, g, &mb, leaf, sum);
        store_partial_sums(m, g, sum, k);
        g_mark_step(g, NULL, 0); /* one graph a micro-batch */
    }
    micro_batch(&mb, b, n - 1, n, cores);
    gradients(m, g, &mb, leaf, sum);
    add_levels(m, g, sum, n - 1, 0, 1);
    float loss = update(m, g, leaf, sum, lr, n); /* reads mb: free it after */
    batch_free(&mb);
    return loss;
}
