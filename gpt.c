/* gpt.c: the program. Command line, data, the model written as graph ops,
 * the training loop, sampling and safetensors checkpoints.
 *
 * The model is the reference bitesizedGPT, op for op: see README.md. */
#include "gpt.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers ---- */

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "gpt: out of memory (%zu x %zu bytes)\n", n, size);
        exit(1);
    }
    return p;
}

/* Usage errors exit 2, runtime errors 1; both are one line on stderr. */
static _Noreturn void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("gpt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

/* ---- random numbers: xoshiro256**, seeded through splitmix64 ---- */

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

/* ---- the model's parameters ---- */

static void add_param(Model *m, const char *name, int ndim, int rows, int cols,
                      float fan_in)
{
    Param *p = &m->p[m->np++];
    snprintf(p->name, sizeof p->name, "decode_transformer.%s", name);
    p->ndim = ndim;
    p->rows = rows;
    p->cols = cols;
    p->off = m->nw;
    p->fan_in = fan_in;
    m->nw += (size_t)rows * cols;
}

/* A Linear layer: weight [out,in] and optionally its bias [out]. */
static void add_linear(Model *m, const char *name, int out, int in, int bias)
{
    char n[64];
    snprintf(n, sizeof n, "%s.weight", name);
    add_param(m, n, 2, out, in, (float)in);
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", name);
        add_param(m, n, 1, 1, out, (float)in);
    }
}

static void add_layernorm(Model *m, const char *name, int c)
{
    char n[64];
    snprintf(n, sizeof n, "%s.weight", name);
    add_param(m, n, 1, 1, c, 0);
    m->p[m->np - 1].is_ln_weight = 1;
    snprintf(n, sizeof n, "%s.bias", name);
    add_param(m, n, 1, 1, c, 0);
}

/* The order is the reference's state_dict order, which is also the order
 * in which initial weights are drawn. */
static void build_params(Model *m)
{
    const Config *c = &m->cfg;
    char n[64];
    add_linear(m, "token_embedding", c->embed, c->vocab, 0);
    add_linear(m, "postn_embedding", c->embed, c->context, 0);
    for (int l = 0; l < c->layers; l++) {
        snprintf(n, sizeof n, "blocks.%d.attention.attention", l);
        add_linear(m, n, 3 * c->embed, c->embed, 0);
        for (int k = 0; k < 2; k++) {
            snprintf(n, sizeof n, "blocks.%d.layer_norms.%d", l, k);
            add_layernorm(m, n, c->embed);
        }
        snprintf(n, sizeof n, "blocks.%d.compute.0", l);
        add_linear(m, n, c->mlp, c->embed, 1);
        snprintf(n, sizeof n, "blocks.%d.compute.2", l);
        add_linear(m, n, c->embed, c->mlp, 1);
    }
    add_layernorm(m, "unembedding.0", c->embed);
    add_linear(m, "unembedding.1", c->vocab, c->embed, 1);
}

int model_init(Model *m, const Config *c, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->cfg = *c;
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

float *model_param(Model *m, const char *name)
{
    for (int i = 0; i < m->np; i++)
        if (!strcmp(m->p[i].name, name))
            return m->w + m->p[i].off;
    return NULL;
}

/* ---- batches ---- */

void batch_alloc(Batch *b, int B, int T)
{
    b->B = B;
    b->T = T;
    b->tok = xcalloc((size_t)B * T, sizeof(int32_t));
    b->pos = xcalloc((size_t)B * T, sizeof(int32_t));
    b->tgt = xcalloc((size_t)B * T, sizeof(int32_t));
}

void batch_free(Batch *b)
{
    free(b->tok);
    free(b->pos);
    free(b->tgt);
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

/* ---- the model as graph ops ---- */

/* Named views of one layer's parameter leaves, in build_params order. */
struct layer_leaves {
    Tensor *attn, *ln0w, *ln0b, *ln1w, *ln1b, *fc1w, *fc1b, *fc2w, *fc2b;
};

/* A leaf of buffers the cores hold each their own of: core c's is base[c]
 * advanced by off elements (of 4 bytes). */
static Tensor *rep_leaf(Graph *g, int kind, int dtype, void *const *base, size_t off,
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

static void make_leaves(Model *m, Graph *g, Tensor **leaf, int with_grad)
{
    void *w[XS_MAX_CORES];
    replica_bases(m, g, 0, w);
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        leaf[i] = rep_leaf(g, TK_PARAM, DT_F32, w, p->off, p->rows, p->cols);
        leaf[i]->requires_grad = with_grad;
    }
}

/* Core c's shard of a batch column (tok, pos or tgt): its B/cores windows. */
static Tensor *shard_leaf(Graph *g, const Batch *b, int32_t *col)
{
    void *base[XS_MAX_CORES];
    int nc = g_cores(g), rows = b->B / nc * b->T;
    for (int c = 0; c < nc; c++)
        base[c] = col + (size_t)c * rows;
    return rep_leaf(g, TK_INPUT, DT_I32, base, 0, 1, rows);
}

static struct layer_leaves layer_view(Tensor **leaf, int l)
{
    Tensor **p = leaf + 2 + 9 * l;
    return (struct layer_leaves){p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]};
}

/* The MLP half of a block: h + MLP(LN1(h)). */
static Tensor *mlp_half(Graph *g, const struct layer_leaves *L, Tensor *h)
{
    Tensor *a = g_layernorm(g, h, L->ln1w, L->ln1b);            /* [n,C] */
    Tensor *f = g_relu(g, g_linear(g, a, L->fc1w, L->fc1b));     /* [n,M] */
    return g_add(g, h, g_linear(g, f, L->fc2w, L->fc2b));        /* [n,C] */
}

/* x [n,C] -> the attention input projection qkv [n,3C] */
static Tensor *qkv_of(Graph *g, const struct layer_leaves *L, Tensor *x)
{
    Tensor *a = g_layernorm(g, x, L->ln0w, L->ln0b); /* [n,C] */
    return g_linear(g, a, L->attn, NULL);
}

/* x + block(x) given the block's attention output att [n,C]: the
 * reference adds the residual twice. */
static Tensor *block_rest(Graph *g, const struct layer_leaves *L, Tensor *x,
                          Tensor *att)
{
    return g_add(g, x, mlp_half(g, L, g_add(g, x, att)));
}

static Tensor *unembed(Graph *g, Tensor **leaf, int np, Tensor *x)
{
    Tensor *a = g_layernorm(g, x, leaf[np - 4], leaf[np - 3]); /* [n,C] */
    return g_linear(g, a, leaf[np - 2], leaf[np - 1]);          /* [n,V] */
}

/* tok, pos i32 [n] -> x [n,C] = token embedding + position embedding */
static Tensor *embed(Graph *g, Tensor **leaf, Tensor *tok, Tensor *pos)
{
    return g_add(g, g_embed(g, tok, leaf[0]), g_embed(g, pos, leaf[1]));
}

/* Full causal forward over B windows of T bytes: logits [B*T, V]. */
static Tensor *model_logits(Model *m, Graph *g, Tensor **leaf, const Batch *b)
{
    int nb = b->B / g_cores(g); /* windows on each core */
    Tensor *tok = shard_leaf(g, b, b->tok); /* [n] */
    Tensor *pos = shard_leaf(g, b, b->pos); /* [n] */
    Tensor *x = embed(g, leaf, tok, pos);   /* [n,C] */
    for (int l = 0; l < m->cfg.layers; l++) {
        struct layer_leaves L = layer_view(leaf, l);
        Tensor *qkv = qkv_of(g, &L, x); /* [n,3C] */
        x = block_rest(g, &L, x, g_attention(g, qkv, nb, b->T, m->cfg.heads));
    }
    return unembed(g, leaf, m->np, x);
}

Tensor *model_loss(Model *m, Graph *g, const Batch *b, Tensor **leaf,
                   Tensor **logits, int with_grad)
{
    make_leaves(m, g, leaf, with_grad);
    Tensor *tgt = shard_leaf(g, b, b->tgt); /* [n] */
    *logits = model_logits(m, g, leaf, b); /* [n,V] */
    return g_xent(g, *logits, tgt);
}

/* Adam on every core's replica; t, read only, is shared. */
static void adam_all(Model *m, Graph *g, Tensor **leaf, Tensor **grad, float lr)
{
    void *mb[XS_MAX_CORES], *vb[XS_MAX_CORES];
    replica_bases(m, g, 1, mb);
    replica_bases(m, g, 2, vb);
    m->t++;
    Tensor *t = g_leaf(g, TK_STATE, DT_I32, &m->t, 1, 1);
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        Tensor *mm = rep_leaf(g, TK_STATE, DT_F32, mb, p->off, p->rows, p->cols);
        Tensor *vv = rep_leaf(g, TK_STATE, DT_F32, vb, p->off, p->rows, p->cols);
        g_adam(g, leaf[i], grad[i], mm, vv, t, lr, 0.9f, 0.999f, 1e-8f);
    }
}

float model_train_step(Model *m, Graph *g, const Batch *b, float lr)
{
    Tensor *leaf[MAX_PARAMS], *grad[MAX_PARAMS], *logits;
    g_reset(g);
    g_set_cores(g, m->ncores > 1 ? m->ncores : 1);
    g_set_example_rows(g, b->T); /* per-window gradient sums, in a fixed tree */
    Tensor *loss = model_loss(m, g, b, leaf, &logits, 1);
    g_backward(g, loss, NULL);
    /* all-reduces after the whole backward pass, as one bucket */
    for (int i = 0; i < m->np; i++)
        grad[i] = g_all_reduce(g, g_grad(g, leaf[i]));
    loss = g_all_reduce(g, loss);
    adam_all(m, g, leaf, grad, lr);
    g_mark_step(g, &loss, 1); /* one graph per step: forward, backward, update */
    float l = *(const float *)g_read(g, loss);
    g_set_cores(g, 1);
    g_set_example_rows(g, 0);
    return l;
}

/* ---- sampling ---- */

/* The decoder's state: one KV cache per layer and the step's inputs. */
struct decoder {
    int32_t tok, pos;
    float *kc, *vc; /* [layers, context, C] each */
};

/* One new byte at position d->pos through the cached model: logits [1,V]. */
static const float *decode_step(Model *m, Graph *g, struct decoder *d)
{
    const Config *c = &m->cfg;
    Tensor *leaf[MAX_PARAMS];
    size_t cache = (size_t)c->context * c->embed;
    g_reset(g);
    make_leaves(m, g, leaf, 0);
    Tensor *tok = g_leaf(g, TK_INPUT, DT_I32, &d->tok, 1, 1); /* [1] */
    Tensor *pos = g_leaf(g, TK_INPUT, DT_I32, &d->pos, 1, 1); /* [1] */
    Tensor *x = embed(g, leaf, tok, pos);                     /* [1,C] */
    for (int l = 0; l < c->layers; l++) {
        struct layer_leaves L = layer_view(leaf, l);
        Tensor *kc = g_leaf(g, TK_STATE, DT_F32, d->kc + l * cache, c->context, c->embed);
        Tensor *vc = g_leaf(g, TK_STATE, DT_F32, d->vc + l * cache, c->context, c->embed);
        Tensor *att = g_attention_step(g, qkv_of(g, &L, x), kc, vc, pos, c->heads);
        x = block_rest(g, &L, x, att);
    }
    return g_read(g, unembed(g, leaf, m->np, x));
}

/* Past the context the reference feeds the last `context` bytes afresh, so
 * positions restart at 0 and the cache cannot be reused. */
static const float *window_step(Model *m, Graph *g, Batch *w, const char *text, int n)
{
    Tensor *leaf[MAX_PARAMS];
    for (int t = 0; t < w->T; t++)
        w->tok[t] = (unsigned char)text[n - w->T + t];
    batch_finish(w);
    g_reset(g);
    make_leaves(m, g, leaf, 0);
    const float *logits = g_read(g, model_logits(m, g, leaf, w)); /* [T,V] */
    return logits + (size_t)(w->T - 1) * m->cfg.vocab;
}

/* Temperature and top-k sampling; temperature 0 is argmax. */
static int pick(const float *logits, int V, const SampleOpts *o, Rng *r)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    if (o->temperature <= 0)
        return best;
    float kth = -INFINITY; /* logits below the k-th largest are dropped */
    if (o->top_k > 0 && o->top_k < V) {
        float sorted[VOCAB];
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
    double p[VOCAB], sum = 0;
    for (int i = 0; i < V; i++) {
        p[i] = logits[i] < kth ? 0 : exp((logits[i] - logits[best]) / o->temperature);
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
        text[n] = (char)pick(window_step(m, g, &w, text, n), m->cfg.vocab, o, r);
        batch_free(&w);
        if (o->emit)
            o->emit((unsigned char)text[n], o->ctx);
    }
}

void model_generate(Model *m, Graph *g, char *text, int n, int total,
                    const SampleOpts *o, Rng *r)
{
    const Config *c = &m->cfg;
    size_t cache = (size_t)c->layers * c->context * c->embed;
    struct decoder d = {.kc = xcalloc(cache, sizeof(float)),
                        .vc = xcalloc(cache, sizeof(float))};
    Batch w;
    batch_alloc(&w, 1, c->context);
    const float *logits = NULL; /* [V] for the next byte */
    for (int i = 0; i < n && n <= c->context; i++) {
        d.tok = (unsigned char)text[i];
        d.pos = i;
        logits = decode_step(m, g, &d);
    }
    for (; n < total; n++) {
        if (n > c->context)
            logits = window_step(m, g, &w, text, n);
        text[n] = (char)pick(logits, c->vocab, o, r);
        if (o->emit)
            o->emit((unsigned char)text[n], o->ctx);
        if (n + 1 <= c->context && n + 1 < total) {
            d.tok = (unsigned char)text[n];
            d.pos = n;
            logits = decode_step(m, g, &d);
        }
    }
    batch_free(&w);
    free(d.kc);
    free(d.vc);
}

/* ---- safetensors: a strict reader ----
 * Layout: u64 little-endian header length N, N bytes of JSON, then the raw
 * data. Everything a hostile file could lie about is checked: lengths,
 * nesting, number ranges, offsets, overlaps, holes and duplicate names. */

#define ST_MAX_HEADER (100u << 20)

static const char *const st_names[] = {"F32", "I32", "BF16", "F16", "F64",
                                       "I64", "I16", "I8",   "U8",  "BOOL"};
static const int st_sizes[] = {4, 4, 2, 2, 8, 8, 2, 1, 1, 1};

struct jp {
    const char *s, *end, *start;
    char *err;
    size_t elen;
};

static int jfail(struct jp *p, const char *what)
{
    if (!p->err[0])
        snprintf(p->err, p->elen, "bad header at byte %ld: %s",
                 (long)(p->s - p->start), what);
    return -1;
}

static void jws(struct jp *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static int jeat(struct jp *p, char c)
{
    jws(p);
    if (p->s < p->end && *p->s == c) {
        p->s++;
        return 0;
    }
    char msg[32];
    snprintf(msg, sizeof msg, "expected '%c'", c);
    return jfail(p, msg);
}

static int jpeek(struct jp *p, char c)
{
    jws(p);
    return p->s < p->end && *p->s == c;
}

/* \u escapes (four hex digits) of ASCII only: names and metadata here are ASCII. */
static int jescape(struct jp *p, char *out)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = p->s < p->end ? strchr(from, *p->s) : NULL;
    if (k && *p->s) {
        *out = to[k - from];
        p->s++;
        return 0;
    }
    unsigned v = 0;
    if (p->end - p->s < 5 || *p->s != 'u')
        return jfail(p, "bad escape");
    for (int i = 1; i <= 4; i++) {
        int c = p->s[i];
        if (!isxdigit(c))
            return jfail(p, "bad \\u escape");
        v = v * 16 + (unsigned)(isdigit(c) ? c - '0' : (tolower(c) - 'a' + 10));
    }
    if (v == 0 || v > 127)
        return jfail(p, "non-ASCII \\u escape");
    *out = (char)v;
    p->s += 5;
    return 0;
}

static char *jstring(struct jp *p)
{
    if (jeat(p, '"'))
        return NULL;
    /* size the copy by the quoted span, not the rest of the header: a
     * header of many strings must cost linear, not quadratic, time */
    const char *q = p->s;
    while (q < p->end && *q != '"')
        q += *q == '\\' && q + 1 < p->end ? 2 : 1;
    char *out = xcalloc((size_t)(q - p->s) + 1, 1);
    size_t n = 0;
    while (p->s < p->end && *p->s != '"') {
        unsigned char c = (unsigned char)*p->s++;
        if (c < 0x20 || (c == '\\' && jescape(p, (char *)&c))) {
            free(out);
            jfail(p, "bad character in string");
            return NULL;
        }
        out[n++] = (char)c;
    }
    if (p->s >= p->end) {
        free(out);
        jfail(p, "unterminated string");
        return NULL;
    }
    p->s++;
    return out;
}

/* A non-negative integer below 2^53, as JSON writes it. */
static int jint(struct jp *p, int64_t *v)
{
    jws(p);
    const char *s = p->s;
    if (s >= p->end || !isdigit((unsigned char)*s))
        return jfail(p, "expected a non-negative integer");
    if (*s == '0' && s + 1 < p->end && isdigit((unsigned char)s[1]))
        return jfail(p, "leading zero");
    int64_t x = 0;
    for (; s < p->end && isdigit((unsigned char)*s); s++) {
        if (x > ((int64_t)1 << 53) / 10)
            return jfail(p, "integer too large");
        x = x * 10 + (*s - '0');
    }
    if (s < p->end && (*s == '.' || *s == 'e' || *s == 'E'))
        return jfail(p, "expected an integer");
    p->s = s;
    *v = x;
    return 0;
}

/* '[' int, ... ']' into v (at most max). */
static int jints(struct jp *p, int64_t *v, int max, int *n)
{
    *n = 0;
    if (jeat(p, '['))
        return -1;
    if (jpeek(p, ']'))
        return jeat(p, ']');
    do {
        if (*n == max)
            return jfail(p, "too many dimensions");
        if (jint(p, &v[(*n)++]))
            return -1;
    } while (jpeek(p, ',') && !jeat(p, ','));
    return jeat(p, ']');
}

static int jdtype(struct jp *p, int *dtype)
{
    char *s = jstring(p);
    if (!s)
        return -1;
    for (int i = 0; i < (int)(sizeof st_names / sizeof *st_names); i++) {
        if (!strcmp(s, st_names[i])) {
            *dtype = i;
            free(s);
            return 0;
        }
    }
    free(s);
    return jfail(p, "unknown dtype");
}

/* One field of a tensor's description; seen[] rejects repeats. */
static int jtensor_field(struct jp *p, StEntry *e, int *seen)
{
    char *key = jstring(p);
    int rc = -1, n, f;
    int64_t off[2];
    if (!key || jeat(p, ':'))
        goto out;
    f = !strcmp(key, "dtype") ? 0 : !strcmp(key, "shape") ? 1
        : !strcmp(key, "data_offsets") ? 2 : -1;
    if (f < 0 || seen[f]++) {
        rc = jfail(p, f < 0 ? "unknown tensor field" : "repeated tensor field");
        goto out;
    }
    if (f == 0)
        rc = jdtype(p, &e->dtype);
    else if (f == 1)
        rc = jints(p, e->shape, 8, &e->ndim);
    else if (!(rc = jints(p, off, 2, &n)) && n != 2)
        rc = jfail(p, "data_offsets needs two integers");
    if (f == 2 && !rc) {
        e->begin = (size_t)off[0];
        e->end = (size_t)off[1];
    }
out:
    free(key);
    return rc;
}

static int jtensor(struct jp *p, StEntry *e)
{
    int seen[3] = {0, 0, 0};
    if (jeat(p, '{'))
        return -1;
    do {
        if (jtensor_field(p, e, seen))
            return -1;
    } while (jpeek(p, ',') && !jeat(p, ','));
    if (jeat(p, '}'))
        return -1;
    return seen[0] && seen[1] && seen[2] ? 0 : jfail(p, "tensor lacks dtype, shape or data_offsets");
}

static int jmeta(struct jp *p, StFile *f)
{
    if (f->mkey)
        return jfail(p, "repeated __metadata__");
    f->mkey = xcalloc(1, sizeof(char *));
    f->mval = xcalloc(1, sizeof(char *));
    if (jeat(p, '{'))
        return -1;
    if (jpeek(p, '}'))
        return jeat(p, '}');
    do {
        f->mkey = realloc(f->mkey, sizeof(char *) * (f->nmeta + 1));
        f->mval = realloc(f->mval, sizeof(char *) * (f->nmeta + 1));
        if (!f->mkey || !f->mval)
            die(1, "out of memory (metadata)");
        f->mkey[f->nmeta] = jstring(p);
        f->mval[f->nmeta] = NULL;
        f->nmeta++;
        if (!f->mkey[f->nmeta - 1] || jeat(p, ':') || !(f->mval[f->nmeta - 1] = jstring(p)))
            return -1;
    } while (jpeek(p, ',') && !jeat(p, ','));
    return jeat(p, '}');
}

static int jentry(struct jp *p, StFile *f, int *cap)
{
    char *key = jstring(p);
    if (!key || jeat(p, ':')) {
        free(key);
        return -1;
    }
    if (!strcmp(key, "__metadata__")) {
        free(key);
        return jmeta(p, f);
    }
    if (f->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        f->e = realloc(f->e, sizeof *f->e * *cap);
        if (!f->e)
            die(1, "out of memory (header)");
    }
    StEntry *e = &f->e[f->n++];
    memset(e, 0, sizeof *e);
    e->name = key;
    return jtensor(p, e);
}

static int jheader(struct jp *p, StFile *f)
{
    int cap = 0;
    if (jeat(p, '{'))
        return -1;
    if (!jpeek(p, '}')) {
        do {
            if (jentry(p, f, &cap))
                return -1;
        } while (jpeek(p, ',') && !jeat(p, ','));
    }
    if (jeat(p, '}'))
        return -1;
    jws(p);
    return p->s == p->end ? 0 : jfail(p, "trailing bytes after the header");
}

static int cmp_begin(const void *a, const void *b)
{
    const StEntry *x = *(StEntry *const *)a, *y = *(StEntry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1
           : x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(StEntry *const *)a)->name, (*(StEntry *const *)b)->name);
}

static int st_fail(char *err, size_t elen, const char *fmt, const char *name)
{
    snprintf(err, elen, fmt, name);
    return -1;
}

/* Each tensor's byte length must match its shape and dtype. */
static int check_sizes(const StFile *f, char *err, size_t elen)
{
    for (int i = 0; i < f->n; i++) {
        const StEntry *e = &f->e[i];
        uint64_t bytes = (uint64_t)st_sizes[e->dtype];
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] > ((int64_t)1 << 40) || (e->shape[d] && bytes > (UINT64_C(1) << 62) / (uint64_t)e->shape[d]))
                return st_fail(err, elen, "tensor '%s' has an absurd shape", e->name);
            bytes *= (uint64_t)e->shape[d];
        }
        if (e->end < e->begin || e->end - e->begin != bytes)
            return st_fail(err, elen, "tensor '%s': data_offsets disagree with its shape and dtype", e->name);
    }
    return 0;
}

/* Offsets must tile the data section exactly: no overlap, no hole. Names
 * must be unique. */
static int check_layout(const StFile *f, char *err, size_t elen)
{
    StEntry **by = xcalloc((size_t)f->n, sizeof *by);
    size_t at = 0, data = f->size - f->data_off;
    int rc = 0;
    for (int i = 0; i < f->n; i++)
        by[i] = &f->e[i];
    qsort(by, (size_t)f->n, sizeof *by, cmp_name);
    for (int i = 1; i < f->n && !rc; i++)
        if (!strcmp(by[i]->name, by[i - 1]->name))
            rc = st_fail(err, elen, "duplicate tensor name '%s'", by[i]->name);
    qsort(by, (size_t)f->n, sizeof *by, cmp_begin);
    for (int i = 0; i < f->n && !rc; i++) {
        if (by[i]->begin != at)
            rc = st_fail(err, elen, "tensor '%s' overlaps another or leaves a hole", by[i]->name);
        at = by[i]->end;
    }
    if (!rc && at != data)
        rc = st_fail(err, elen, "data section size disagrees with the header%s", "");
    free(by);
    return rc;
}

int st_parse(StFile *f, unsigned char *buf, size_t size, char *err, size_t elen)
{
    memset(f, 0, sizeof *f);
    f->buf = buf;
    f->size = size;
    err[0] = 0;
    if (size < 8)
        return st_fail(err, elen, "too short to be a safetensors file%s", "");
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    if (hlen > ST_MAX_HEADER || hlen > size - 8)
        return st_fail(err, elen, "header length is larger than the file%s", "");
    f->data_off = 8 + (size_t)hlen;
    struct jp p = {(const char *)buf + 8, (const char *)buf + f->data_off,
                   (const char *)buf + 8, err, elen};
    if (jheader(&p, f) || check_sizes(f, err, elen) || check_layout(f, err, elen))
        return -1;
    return 0;
}

int st_load(StFile *f, const char *path, char *err, size_t elen)
{
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return snprintf(err, elen, "cannot open: %s", strerror(errno)), -1;
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            buf = realloc(buf, cap);
            if (!buf)
                die(1, "%s: out of memory", path);
        }
        got = fread(buf + n, 1, cap - n, fp);
        n += got;
    } while (got > 0);
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        return snprintf(err, elen, "read error"), -1;
    }
    return st_parse(f, buf, n, err, elen);
}

void st_free(StFile *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->e[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->mkey[i]);
        free(f->mval[i]);
    }
    free(f->e);
    free(f->mkey);
    free(f->mval);
    free(f->buf);
    memset(f, 0, sizeof *f);
}

const StEntry *st_find(const StFile *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name))
            return &f->e[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (f->mkey[i] && !strcmp(f->mkey[i], key))
            return f->mval[i];
    return NULL;
}

const void *st_data(const StFile *f, const StEntry *e)
{
    return f->buf + f->data_off + e->begin;
}

/* ---- safetensors: the writer and the model's checkpoints ---- */

struct buf {
    unsigned char *p;
    size_t n, cap;
};

static void buf_put(struct buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 4096;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            die(1, "out of memory (checkpoint)");
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void buf_printf(struct buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void buf_json_string(struct buf *b, const char *s)
{
    buf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c > 126)
            buf_printf(b, "\\u%04x", c);
        else
            buf_put(b, s, 1);
    }
    buf_put(b, "\"", 1);
}

/* Header and data of a file being written. */
struct stw {
    struct buf hdr, data;
};

static void stw_tensor(struct stw *w, const char *name, const char *dtype,
                       int ndim, const int64_t *shape, const void *src, size_t bytes)
{
    buf_put(&w->hdr, w->hdr.n > 1 ? "," : "", w->hdr.n > 1);
    buf_json_string(&w->hdr, name);
    buf_printf(&w->hdr, ":{\"dtype\":\"%s\",\"shape\":[", dtype);
    for (int d = 0; d < ndim; d++)
        buf_printf(&w->hdr, d ? ",%lld" : "%lld", (long long)shape[d]);
    buf_printf(&w->hdr, "],\"data_offsets\":[%zu,%zu]}", w->data.n, w->data.n + bytes);
    buf_put(&w->data, src, bytes);
}

static uint64_t fnv1a64(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The rename is durable only once the directory itself is synced. */
static void fsync_dir_of(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        slash[slash == dir] = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Writes path atomically: a temporary file in the same directory, fsync,
 * rename over the old name, fsync the directory. A crash at any moment
 * leaves either the old file or the new one, never half of one. */
static int write_atomic(const char *path, const struct buf *const *parts, int n,
                        char *err, size_t elen)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return snprintf(err, elen, "cannot create %s: %s", tmp, strerror(errno)), -1;
    for (int i = 0; i < n; i++) {
        for (size_t off = 0; off < parts[i]->n;) {
            ssize_t k = write(fd, parts[i]->p + off, parts[i]->n - off);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                snprintf(err, elen, "cannot write %s: %s", tmp, strerror(errno));
                close(fd);
                unlink(tmp);
                return -1;
            }
            off += (size_t)k;
        }
    }
    if (fsync(fd) || close(fd) || rename(tmp, path)) {
        snprintf(err, elen, "cannot save %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    fsync_dir_of(path);
    return 0;
}

/* The reference's buffers, so load_state_dict(strict=True) accepts the file. */
static void put_buffers(struct stw *w, const Config *c)
{
    int V = c->vocab, T = c->context;
    float *eye = xcalloc((size_t)V * V, sizeof(float));  /* [V,V] */
    float *mask = xcalloc((size_t)T * T, sizeof(float)); /* [T,T] */
    for (int i = 0; i < V; i++)
        eye[i * V + i] = 1;
    for (int i = 0; i < T; i++)
        for (int j = i + 1; j < T; j++)
            mask[i * T + j] = -INFINITY;
    stw_tensor(w, "onehot", "F32", 2, (int64_t[]){V, V}, eye, sizeof(float) * V * V);
    for (int l = 0; l < c->layers; l++) {
        char name[96];
        snprintf(name, sizeof name, "decode_transformer.blocks.%d.attention.causal_mask", l);
        stw_tensor(w, name, "F32", 2, (int64_t[]){T, T}, mask, sizeof(float) * T * T);
    }
    free(eye);
    free(mask);
}

static void put_params(struct stw *w, const Model *m, const float *base, const char *prefix)
{
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        char name[128];
        int64_t shape[2] = {p->rows, p->cols};
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        stw_tensor(w, name, "F32", p->ndim, p->ndim == 1 ? shape + 1 : shape,
                   base + p->off, sizeof(float) * p->rows * p->cols);
    }
}

int ckpt_save(const Model *m, const char *path, const char *const *mkey,
              const char *const *mval, int nmeta, char *err, size_t elen)
{
    struct stw w = {{0}, {0}};
    buf_put(&w.hdr, "{", 1);
    put_params(&w, m, m->w, "");
    put_buffers(&w, &m->cfg);
    put_params(&w, m, m->m, "_gpt.adam_m.");
    put_params(&w, m, m->v, "_gpt.adam_v.");
    buf_printf(&w.hdr, ",\"__metadata__\":{\"checksum\":\"%016llx\"",
               (unsigned long long)fnv1a64(w.data.p, w.data.n));
    for (int i = 0; i < nmeta; i++) {
        buf_put(&w.hdr, ",", 1);
        buf_json_string(&w.hdr, mkey[i]);
        buf_put(&w.hdr, ":", 1);
        buf_json_string(&w.hdr, mval[i]);
    }
    buf_put(&w.hdr, "}}", 2);
    while (w.hdr.n % 8)
        buf_put(&w.hdr, " ", 1); /* keeps the data 8-byte aligned */
    struct buf len = {0};
    for (int i = 0; i < 8; i++) {
        unsigned char byte = (unsigned char)((uint64_t)w.hdr.n >> (8 * i));
        buf_put(&len, &byte, 1);
    }
    const struct buf *parts[] = {&len, &w.hdr, &w.data};
    int rc = write_atomic(path, parts, 3, err, elen);
    free(len.p);
    free(w.hdr.p);
    free(w.data.p);
    return rc;
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
                 name, st_names[e->dtype], e->ndim, e->ndim ? (long long)e->shape[0] : 0LL, want);
        return -1;
    }
    memcpy(dst, st_data(f, e), sizeof(float) * p->rows * p->cols);
    return 0;
}

/* Names the model knows: parameters, the reference's buffers, and our
 * training state. Anything else means the file is not one of ours. */
static int known_name(const Model *m, const char *name)
{
    if (!strcmp(name, "onehot") || !strncmp(name, "_gpt.adam_", 10))
        return 1;
    if (strstr(name, ".attention.causal_mask"))
        return 1;
    for (int i = 0; i < m->np; i++)
        if (!strcmp(m->p[i].name, name))
            return 1;
    return 0;
}

static int check_checksum(const StFile *f, char *err, size_t elen)
{
    const char *want = st_meta(f, "checksum");
    if (!want)
        return 0; /* files written by PyTorch have none */
    char got[17];
    snprintf(got, sizeof got, "%016llx",
             (unsigned long long)fnv1a64(f->buf + f->data_off, f->size - f->data_off));
    if (strcmp(want, got))
        return snprintf(err, elen, "checksum mismatch: the data is damaged"), -1;
    return 0;
}

int ckpt_load_weights(Model *m, const StFile *f, int with_state, char *err, size_t elen)
{
    char name[160];
    if (check_checksum(f, err, elen))
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
    char name[96];
    if (!tok || !pos || !fc || tok->ndim != 2 || pos->ndim != 2 || fc->ndim != 2)
        return -1;
    int64_t C = tok->shape[0], T = pos->shape[1], M = fc->shape[0];
    if (tok->shape[1] != VOCAB || C < 1 || C > 4096 || pos->shape[0] != C || T < 2 ||
        T > 1024 || fc->shape[1] != C || M < 1 || M > 16384)
        return -1;
    *c = (Config){VOCAB, (int)T, (int)C, (int)M, meta_int(f, "heads", heads), 0};
    do
        snprintf(name, sizeof name, "decode_transformer.blocks.%d.compute.0.weight", c->layers);
    while (st_find(f, name) && ++c->layers < MAX_LAYERS);
    const char *keys[] = {"vocab", "context", "embed", "mlp", "layers"};
    const int vals[] = {c->vocab, c->context, c->embed, c->mlp, c->layers};
    for (int i = 0; i < 5; i++)
        if (meta_int(f, keys[i], vals[i]) != vals[i])
            return -1;
    return c->heads > 0 && c->embed % c->heads == 0 ? 0 : -1;
}

/* Everything below is the command line; tests link the code above. */
#ifndef GPT_NO_MAIN

/* ---- command line ---- */
#include <omp.h>

static void resolve_ckpt(const char *arg, char *path, size_t n);

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Uniform in [0, n) by multiply-shift: no modulo bias worth the name. */
static uint64_t rng_below(Rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}


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
    int threads, bytes, top_k, metrics, naive, ckpt_every, keep, cores;
    double lr, temperature, seed;
    const char *data, *out, *init, *prompt, *device, *ckpt, *resume;
    const char *tpu, *hbm, *precision;
};

static const struct settings defaults = {
    .embed = 32, .mlp = 64, .heads = 4, .layers = 4, .context = 128,
    .steps = 50000, .batch = 32, .seq = 128, .eval_every = 100, .eval_batch = 256,
    .eval_bytes = 32, .final_bytes = 256, .threads = 0, .bytes = 256, .top_k = 0,
    .ckpt_every = 1000, .keep = 3,
    .lr = 1e-3, .temperature = 1.0, .seed = 1337,
    .data = "data/sherlock-ascii.txt", .out = "out", .init = NULL,
    .prompt = "\"Elementary, my dear", .device = "xla", .ckpt = "out",
    .precision = "fp32",
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

static void usage(const char *cmd, const char *what, const struct opt *o, int n)
{
    printf("usage: gpt %s [flags]\n%s\n\nflags (default in brackets):\n", cmd, what);
    for (int i = 0; i < n; i++) {
        printf("  --%-13s %s [", o[i].name, o[i].help);
        print_default(&o[i]);
        printf("]\n");
    }
    exit(0);
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
static int optional_value(const struct opt *o, int i, int argc, char **argv)
{
    return !strcmp(o->name, "resume") && (i + 1 == argc || !strncmp(argv[i + 1], "--", 2));
}

static void parse_opts(const char *cmd, const char *what, int argc, char **argv,
                       const struct opt *o, int n)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(cmd, what, o, n);
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
        if (!eq && optional_value(&o[k], i, argc, argv)) {
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
    fputs("gpt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void check_prompt(const char *p)
{
    need(p[0] != 0, "--prompt must not be empty");
    for (const char *c = p; *c; c++)
        need((unsigned char)*c < 128, "--prompt must be ASCII (byte 0x%02x at offset %d)",
             (unsigned char)*c, (int)(c - p));
}

static int precision_of(const char *name);

static void check_common(const struct settings *s)
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
}

static void check_train_flags(const struct settings *s)
{
    check_model_flags(s);
    need(s->steps >= 1, "--steps must be >= 1, got %d", s->steps);
    need(s->batch >= 1 && s->batch <= 65536, "--batch must be 1..65536, got %d", s->batch);
    need(s->seq >= 2 && s->seq <= s->context, "--seq must be 2..--context (%d), got %d",
         s->context, s->seq);
    need(s->lr > 0 && s->lr < 1e3, "--lr must be > 0, got %g", s->lr);
    need(s->eval_every >= 1, "--eval-every must be >= 1, got %d", s->eval_every);
    need(s->eval_batch >= 1 && s->eval_batch <= 65536, "--eval-batch must be 1..65536, got %d", s->eval_batch);
    need(s->eval_bytes >= 0 && s->final_bytes >= 0, "--eval-bytes and --final-bytes must be >= 0");
    need(s->ckpt_every >= 1, "--ckpt-every must be >= 1, got %d", s->ckpt_every);
    need(s->keep >= 1, "--keep must be >= 1, got %d", s->keep);
    need(!(s->init && s->resume), "--init and --resume exclude each other");
    need(s->seed >= 0 && s->seed < 9007199254740992.0 && s->seed == floor(s->seed),
         "--seed must be a whole number >= 0, got %g", s->seed);
    check_prompt(s->prompt);
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
static size_t parse_size(const char *v)
{
    char *end;
    double x = strtod(v, &end);
    double unit = !strcmp(end, "") || !strcmp(end, "B") ? 1
                  : !strcmp(end, "K") || !strcmp(end, "KiB") ? 1024.0
                  : !strcmp(end, "M") || !strcmp(end, "MiB") ? 1024.0 * 1024
                  : !strcmp(end, "G") || !strcmp(end, "GiB") ? 1024.0 * 1024 * 1024 : 0;
    need(end != v && unit > 0 && x * unit >= 1 && x * unit < 1e15,
         "--hbm must be a size such as 16G, 512M or 65536, got '%s'", v);
    return (size_t)(x * unit);
}

/* The simulated board: --tpu's table row, then --cores and --hbm. */
static void setup_board(const struct settings *s)
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
    need(s->batch % cores == 0, "--batch %d does not split evenly over %d cores", s->batch,
         cores);
    if (s->hbm)
        hbm = parse_size(s->hbm);
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
static void store_precision(Model *m, const struct settings *s)
{
    if (precision_of(s->precision) != PREC_BF16_PURE)
        return;
    k_round_bf16(m->w, m->w, m->nw);
    k_round_bf16(m->m, m->m, m->nw);
    k_round_bf16(m->v, m->v, m->nw);
}

static void report_metrics(const struct settings *s)
{
    const char *path = getenv("GPT_METRICS_FILE");
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

/* ---- data ---- */

typedef struct Data {
    unsigned char *bytes; /* [n] */
    size_t n, n_train;    /* train is [0, n_train), test the rest */
} Data;

static void load_data(Data *d, const char *path, int need_len)
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
        if (d->n == cap && !(d->bytes = realloc(d->bytes, cap *= 2)))
            die(1, "%s: out of memory", path);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad)
        die(1, "%s: cannot read data file", path);
    if (!d->n)
        die(1, "%s: data file is empty", path);
    for (size_t i = 0; i < d->n; i++)
        if (d->bytes[i] >= 128)
            die(1, "%s: byte 0x%02x at offset %zu is not ASCII; convert the file to ASCII "
                "(e.g. iconv -f utf-8 -t ascii//TRANSLIT)", path, d->bytes[i], i);
    d->n_train = d->n * 8 / 10;
    if (d->n_train < (size_t)need_len + 1 || d->n - d->n_train < (size_t)need_len + 1)
        die(1, "%s: %zu bytes give splits of %zu and %zu; each needs at least %d",
            path, d->n, d->n_train, d->n - d->n_train, need_len + 1);
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

/* ---- train ---- */

struct trainer {
    struct settings s;
    Model model;
    Graph *g;
    Data data;
    Batch train, test;
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

static void eval_line(struct trainer *tr, int step, float train_loss)
{
    const struct settings *s = &tr->s;
    sample_windows(&tr->test, &tr->data, tr->data.n_train,
                   tr->data.n - tr->data.n_train, &tr->rng_eval);
    float test_loss = batch_loss(&tr->model, tr->g, &tr->test);
    int n = (int)strlen(s->prompt), total = n > s->eval_bytes ? n : s->eval_bytes;
    char *text = xcalloc((size_t)total + 1, 1);
    memcpy(text, s->prompt, (size_t)n);
    SampleOpts so = {.temperature = 1.0f};
    model_generate(&tr->model, tr->g, text, n, total, &so, &tr->rng_eval);
    clear_progress(tr);
    printf("step %6d | train %.4f | test %.4f | ", step, train_loss, test_loss);
    for (int i = 0; i < total; i++)
        emit_escaped((unsigned char)text[i], NULL);
    putchar('\n');
    fflush(stdout);
    free(text);
}

static void progress(struct trainer *tr, int step, float loss)
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
struct meta {
    const char *key[24];
    char val[24][280];
    int n;
};

static void meta_add(struct meta *m, const char *key, const char *fmt, ...)
{
    va_list ap;
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
    meta_add(m, "seed", "%.0f", s->seed);
    meta_add(m, "eval-every", "%d", s->eval_every);
    meta_add(m, "eval-batch", "%d", s->eval_batch);
    meta_add(m, "eval-bytes", "%d", s->eval_bytes);
    meta_add(m, "prompt", "%s", s->prompt);
    meta_add(m, "precision", "%s", s->precision);
    meta_add(m, "data_fnv1a64", "%016llx", (unsigned long long)tr->data_hash);
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
static void prune(const char *dir, int keep, int newest)
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

static void save_checkpoint(struct trainer *tr, int steps_done)
{
    struct meta m = {.n = 0};
    char path[4096], err[512];
    run_meta(tr, &m);
    meta_add(&m, "step", "%d", steps_done);
    rng_hex(m.val[m.n], &tr->rng_data);
    m.key[m.n++] = "rng_data";
    rng_hex(m.val[m.n], &tr->rng_eval);
    m.key[m.n++] = "rng_eval";
    const char *val[24];
    for (int i = 0; i < m.n; i++)
        val[i] = m.val[i];
    snprintf(path, sizeof path, "%s/ckpt-%08d.safetensors", tr->s.out, steps_done);
    if (ckpt_save(&tr->model, path, m.key, val, m.n, err, sizeof err))
        die(1, "%s", err);
    prune(tr->s.out, tr->s.keep, steps_done);
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
            die(1, "%s: bad random generator state in the metadata", path);
        memcpy(part, hex + 16 * i, 16);
        part[16] = 0;
        r->s[i] = strtoull(part, NULL, 16);
    }
}

/* A resumed run takes every state-shaping setting from its checkpoint; a
 * flag the user gave that disagrees is an error naming both values. */
static void adopt(const struct trainer *tr, const StFile *f, const char *path)
{
    struct meta now = {.n = 0};
    run_meta(tr, &now);
    for (int i = 1; i < now.n; i++) {
        const char *key = now.key[i], *was = st_meta(f, key);
        if (!was)
            die(1, "%s: checkpoint lacks '%s' in its metadata", path, key);
        if (!strcmp(was, now.val[i]))
            continue;
        if (!strcmp(key, "data_fnv1a64"))
            die(1, "%s: --data is not the file this run was trained on", path);
        if (was_given(key))
            die(2, "--%s %s conflicts with the checkpoint's %s (%s)", key, now.val[i], was, path);
    }
}

static void set_from_meta(struct settings *s, const StFile *f)
{
    int *ints[] = {&s->context, &s->embed, &s->mlp, &s->heads, &s->layers, &s->batch,
                   &s->seq, &s->eval_every, &s->eval_batch, &s->eval_bytes};
    const char *keys[] = {"context", "embed", "mlp", "heads", "layers", "batch",
                          "seq", "eval-every", "eval-batch", "eval-bytes"};
    for (int i = 0; i < 10; i++)
        if (st_meta(f, keys[i]) && !was_given(keys[i]))
            *ints[i] = atoi(st_meta(f, keys[i]));
    if (st_meta(f, "lr") && !was_given("lr"))
        s->lr = atof(st_meta(f, "lr"));
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
    resolve_ckpt(*tr->s.resume ? tr->s.resume : tr->s.out, path, n);
    if (st_load(f, path, err, sizeof err))
        die(1, "%s: %s", path, err);
    const char *fmt = st_meta(f, "format"), *step = st_meta(f, "step");
    if (!fmt || strcmp(fmt, "gpt-ckpt-1") || !step)
        die(1, "%s: not a gpt training checkpoint (no format or step in the metadata)", path);
    set_from_meta(&tr->s, f);
}

static void resume_state(struct trainer *tr, const StFile *f, const char *path)
{
    char err[512];
    adopt(tr, f, path);
    if (ckpt_load_weights(&tr->model, f, 1, err, sizeof err))
        die(1, "%s: %s", path, err);
    tr->start = atoi(st_meta(f, "step"));
    tr->model.t = tr->start;
    parse_rng(&tr->rng_data, st_meta(f, "rng_data"), path);
    parse_rng(&tr->rng_eval, st_meta(f, "rng_eval"), path);
    if (tr->start > tr->s.steps)
        die(2, "%s is at step %d, past --steps %d", path, tr->start, tr->s.steps);
}

static void init_weights(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    Config c = {VOCAB, s->context, s->embed, s->mlp, s->heads, s->layers};
    model_init(&tr->model, &c, (uint64_t)s->seed);
    rng_seed(&tr->rng_data, (uint64_t)s->seed, 1);
    rng_seed(&tr->rng_eval, (uint64_t)s->seed, 2);
    if (!s->init)
        return;
    StFile f;
    char err[512];
    if (st_load(&f, s->init, err, sizeof err) ||
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

static void train_loop(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    for (int step = tr->start; step < s->steps; step++) {
        sample_windows(&tr->train, &tr->data, 0, tr->data.n_train, &tr->rng_data);
        double t0 = now_seconds();
        float loss = model_train_step(&tr->model, tr->g, &tr->train, (float)s->lr);
        tr->t_steps += now_seconds() - t0;
        if (!isfinite(loss))
            die(1, "training diverged at step %d (loss %g); try a smaller --lr", step, loss);
        if (step % s->eval_every == 0)
            eval_line(tr, step, loss);
        progress(tr, step, loss);
        if ((step + 1) % s->ckpt_every == 0 && step + 1 < s->steps)
            save_checkpoint(tr, step + 1);
        if (stop_signal) {
            save_checkpoint(tr, step + 1);
            clear_progress(tr);
            fprintf(stderr, "gpt: stopped by signal %d after step %d; --resume continues\n",
                    stop_signal, step + 1);
            exit(128 + stop_signal);
        }
    }
}

static void final_passage(struct trainer *tr)
{
    const struct settings *s = &tr->s;
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

static void run_training(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    batch_alloc(&tr->train, s->batch, s->seq);
    batch_alloc(&tr->test, s->eval_batch, s->seq);
    tr->g = new_graph(s);
    tr->tty = isatty(STDOUT_FILENO);
    printf("gpt: %zu parameters, %s device, %s, %s kernels, %d threads, %zu train / %zu "
           "test bytes\n", tr->model.nw, s->device, s->precision, isa_name(isa_get()),
           omp_get_max_threads(), tr->data.n_train, tr->data.n - tr->data.n_train);
    if (xs_cores() > 1 || s->tpu)
        printf("gpt: %s: %d cores (xla:0..xla:%d), %d windows each, %.1f GiB HBM per core\n",
               xs_device_name(), xs_cores(), xs_cores() - 1, s->batch / xs_cores(),
               (double)xs_hbm() / 1073741824.0);
    tr->t_start = now_seconds();
    train_loop(tr);
    if (tr->start < s->steps)
        save_checkpoint(tr, s->steps);
    final_passage(tr);
    if (s->steps > tr->start)
        printf("%.2f ms/step over %d steps\n", tr->t_steps * 1e3 / (s->steps - tr->start),
               s->steps - tr->start);
    report_metrics(s);
    g_free(tr->g);
    batch_free(&tr->train);
    batch_free(&tr->test);
    model_free(&tr->model);
    free(tr->data.bytes);
}

static int cmd_train(int argc, char **argv)
{
    struct trainer tr = {.s = defaults};
    struct settings *s = &tr.s;
    const struct opt o[] = {
        {"steps", O_INT, &s->steps, "training steps"},
        {"batch", O_INT, &s->batch, "windows per batch"},
        {"seq", O_INT, &s->seq, "bytes per training window (<= context)"},
        {"lr", O_REAL, &s->lr, "Adam learning rate"},
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
        {"data", O_STR, &s->data, "ASCII text; first 80% train, rest test"},
        {"out", O_STR, &s->out, "directory for checkpoints"},
        {"init", O_STR, &s->init, "start from this safetensors file's weights"},
        {"resume", O_STR, &s->resume, "continue a run from a checkpoint (FILE, DIR, or --out)"},
        {"ckpt-every", O_INT, &s->ckpt_every, "steps between checkpoints (also at the end and on ^C)"},
        {"keep", O_INT, &s->keep, "checkpoints kept in --out, newest first"},
        {"device", O_STR, &s->device, "xla (trace, compile, cache) or cpu (eager)"},
        {"metrics", O_FLAG, &s->metrics, "print the XLA metrics and kernel profile at the end"},
        {"threads", O_INT, &s->threads, "OpenMP threads, 0 = all cores"},
        {"tpu", O_STR, &s->tpu, "simulate this TPU board (v2-8, v3-8, v4-8, v5e-8, v5p-8, v6e-8)"},
        {"cores", O_INT, &s->cores, "simulated cores, data parallel (power of two; 0 = --tpu's or 1)"},
        {"hbm", O_STR, &s->hbm, "HBM per core, e.g. 16G or 8M (default: --tpu's, or 16G)"},
        {"precision", O_STR, &s->precision, "fp32, bf16 (matrix-unit inputs) or bf16-pure (XLA_USE_BF16)"},
    };
    parse_opts("train", "Trains the model and writes a checkpoint.", argc, argv, o,
               (int)(sizeof o / sizeof *o));
    catch_signals(); /* early: a signal during set-up still ends in a checkpoint */
    StFile rf = {0};
    char rpath[4096];
    if (s->resume)
        open_resume(&tr, &rf, rpath, sizeof rpath);
    check_train_flags(s);
    check_common(s);
    setup_board(s);
    load_data(&tr.data, s->data, s->seq);
    tr.data_hash = fnv1a64(tr.data.bytes, tr.data.n);
    make_out_dir(s->out);
    refuse_overwrite(s);
    init_weights(&tr);
    if (s->resume)
        resume_state(&tr, &rf, rpath);
    store_precision(&tr.model, s);
    model_set_cores(&tr.model, xs_cores());
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
    store_precision(m, s);
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
        {"seed", O_REAL, &s.seed, "random seed"},
        {"heads", O_INT, &s.heads, "heads, for files without our metadata"},
        {"device", O_STR, &s.device, "xla (trace, compile, cache) or cpu (eager)"},
        {"metrics", O_FLAG, &s.metrics, "print the XLA metrics and kernel profile at the end"},
        {"naive", O_FLAG, &s.naive, "grow the input a byte at a time, as the reference does"},
        {"threads", O_INT, &s.threads, "OpenMP threads, 0 = all cores"},
        {"precision", O_STR, &s.precision, "fp32, bf16 or bf16-pure (default: the checkpoint's)"},
        {"hbm", O_STR, &s.hbm, "HBM of the simulated core, e.g. 16G"},
    };
    parse_opts("sample", "Streams a continuation of the prompt.", argc, argv, o,
               (int)(sizeof o / sizeof *o));
    check_prompt(s.prompt);
    need(s.bytes >= 0 && s.bytes <= 1 << 24, "--bytes must be 0..16777216, got %d", s.bytes);
    need(s.temperature >= 0, "--temperature must be >= 0, got %g", s.temperature);
    need(s.top_k >= 0 && s.top_k <= VOCAB, "--top-k must be 0..%d, got %d", VOCAB, s.top_k);
    need(s.seed >= 0 && s.seed == floor(s.seed), "--seed must be a whole number >= 0");
    check_common(&s);
    setup_board(&s);
    Model m;
    load_model(&m, s.ckpt, &s);
    int n = (int)strlen(s.prompt), total = n > s.bytes ? n : s.bytes;
    char *text = xcalloc((size_t)total + 1, 1);
    memcpy(text, s.prompt, (size_t)n);
    fputs(s.prompt, stdout);
    Rng r;
    rng_seed(&r, (uint64_t)s.seed, 3);
    SampleOpts so = {(float)s.temperature, s.top_k, emit_raw, NULL};
    Graph *g = new_graph(&s);
    if (s.naive)
        model_generate_naive(&m, g, text, n, total, &so, &r);
    else
        model_generate(&m, g, text, n, total, &so, &r);
    putchar('\n');
    report_metrics(&s);
    g_free(g);
    free(text);
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
        {"data", O_STR, &s.data, "ASCII text; the last 20% is the test split"},
        {"batch", O_INT, &s.batch, "windows per forward pass"},
        {"heads", O_INT, &s.heads, "heads, for files without our metadata"},
        {"device", O_STR, &s.device, "xla (trace, compile, cache) or cpu (eager)"},
        {"metrics", O_FLAG, &s.metrics, "print the XLA metrics and kernel profile at the end"},
        {"threads", O_INT, &s.threads, "OpenMP threads, 0 = all cores"},
        {"precision", O_STR, &s.precision, "fp32, bf16 or bf16-pure (default: the checkpoint's)"},
        {"hbm", O_STR, &s.hbm, "HBM of the simulated core, e.g. 16G"},
    };
    parse_opts("eval", "Mean next-byte loss over the whole test split.", argc, argv, o,
               (int)(sizeof o / sizeof *o));
    need(s.batch >= 1 && s.batch <= 65536, "--batch must be 1..65536, got %d", s.batch);
    check_common(&s);
    setup_board(&s);
    Model m;
    Data d;
    long windows;
    load_model(&m, s.ckpt, &s);
    load_data(&d, s.data, m.cfg.context);
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

/* ---- main ---- */

static void usage_main(FILE *f)
{
    fputs("usage: gpt <command> [flags]\n"
          "  train    train the byte-level GPT (no flags = the reference's run)\n"
          "  sample   stream a continuation from a checkpoint\n"
          "  eval     test-split loss of a checkpoint\n"
          "gpt <command> --help lists each command's flags.\n"
          "GPT_ISA=scalar|avx2|avx512 lowers the kernel path.\n", f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
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
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage_main(stdout);
        return 0;
    }
    die(2, "unknown command '%s' (gpt --help lists them)", argv[1]);
}
#endif
