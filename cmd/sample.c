/* cmd/sample.c: sampling, a use of the model, read second. A KV-cache
 * decoder feeds each new byte through the model once (gpt.c's
 * forward_cached), several passages side by side; each byte is drawn from
 * its logits with a temperature and top-k. The reference's own way, every
 * byte re-reading the whole text, is model_generate_naive. */
#include "cmd/sample.h"
#include "cmd/flags.h"
#include "util/fmath.h"
#include "util/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Core 0's weights with every Linear weight stored transposed, W^T
 * [in,out] at its offset: the sampler's, made once so that its hundreds of
 * small graphs transpose nothing (as weights stay where a TPU keeps them,
 * in the layout the matmul reads). Training transposes in its graph, as
 * its weights change every step. */
static float *transposed_weights(const Model *m)
{
    const float *w = model_replica(m, 0, REPLICA_W); /* [nw] */
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
    float *logits;  /* [ns,V] a window step's, gathered from a lent board's cores */
};

/* One new byte per passage at position d->pos[0] through the cached model:
 * logits [ns,V]. */
static const float *decode_step(Model *m, Graph *g, struct decoder *d)
{
    g_reset(g);
    return g_read(g, forward_cached(m, g, d->ns, d->tok, d->pos, d->kc, d->vc, d->wt));
}

/* Past the context the reference feeds the last `context` bytes afresh, so
 * positions restart at 0 and the cache cannot be reused: one window per
 * passage, w->B of them, each ending at byte n. With a decoder, only each
 * window's last row leaves the last layer's attention: logits [B,V],
 * passage s's in row s. Without (the naive sampler): logits [B*T,V], every
 * position, as the reference computes them. Windows, unlike the decode
 * step, write no cache: on a lent board each core takes B/cores of them,
 * and its program is a unit the redo team may redo. */
static const float *window_step(Model *m, Graph *g, Batch *w, char *const *text, int n,
                                const struct decoder *d)
{
    for (int s = 0; s < w->B; s++)
        for (int t = 0; t < w->T; t++)
            w->tok[(size_t)s * w->T + t] = (unsigned char)text[s][n - w->T + t];
    batch_finish(w);
    g_reset(g);
    Tensor *logits = forward_windows(m, g, w, d ? d->wt : NULL, d ? d->last : NULL);
    if (g_cores(g) == 1)
        return g_read(g, logits);
    g_read_cores(g, logits, d->logits, (size_t)w->B * (size_t)m->cfg.vocab);
    return d->logits;
}

/* The first of the largest logits: the greedy byte. */
static int argmax_byte(const float *logits, int V)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

double sample_weights(const float *logits, int V, const SampleOpts *o, double *p)
{
    int best = argmax_byte(logits, V);
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
    double sum = 0;
    for (int i = 0; i < V; i++) {
        p[i] = logits[i] < kth ? 0 : fm_exp((logits[i] - logits[best]) / o->temperature);
        sum += p[i];
    }
    return sum;
}

int sample_byte(const float *logits, int V, const SampleOpts *o, Rng *r)
{
    int best = argmax_byte(logits, V);
    if (o->temperature <= 0)
        return best;
    double p[MAX_VOCAB], sum = sample_weights(logits, V, o, p);
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
                        .last = xcalloc((size_t)ns, sizeof(int32_t)),
                        .logits = xcalloc((size_t)ns * (size_t)V, sizeof(float))};
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
    for (double t0 = now_seconds(); n < total; n++) {
        if (o->threads) { /* the byte before: a unit of the thread trial */
            double t1 = now_seconds();
            trial_unit(o->threads, 1e3 * (t1 - t0));
            t0 = t1;
        }
        if (n > c->context) {
            if (o->board) /* lent while the trial runs the team */
                lent_board_follow(o->board, o->threads);
            logits = window_step(m, g, &w, text, n, &d);
        }
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
    free(d.logits);
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
