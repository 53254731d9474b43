/* tests/test_model.c: the whole model against numbers PyTorch produced
 * (tests/make_reference.py wrote tests/ref_*.safetensors): logits, loss,
 * every gradient, and ten Adam steps (their losses and the weights they
 * leave), on the eager cpu device and on the xla device's compiled, fused
 * program; with the reference's ReLU and with GELU (ref_gelu). Also the
 * KV-cached sampler against full recomputation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cmd/evaluate.h"
#include "safetensors/safetensors.h"
#include "cmd/sample.h"
#include "device/metrics.h"
#include "gpt.h"
#include "test.h"
#include "util/rng.h"

static int meta(const StFile *f, const char *key)
{
    const char *v = st_meta(f, key);
    return v ? atoi(v) : -1;
}

/* Weights by name from the reference file into a model of its config. */
static int load_reference(const char *path, StFile *f, Model *m, Batch *b)
{
    char err[256];
    if (st_load(f, path, err, sizeof err)) {
        CHECK(0, "%s: %s", path, err);
        return -1;
    }
    Config c = {.vocab = VOCAB, .context = meta(f, "context"), .embed = meta(f, "embed"), .mlp = meta(f, "mlp"), .heads = meta(f, "heads"), .layers = meta(f, "layers")};
    const char *act = st_meta(f, "activation"); /* absent: relu */
    c.activation = act ? activation_find(act) : 0;
    CHECK(c.activation >= 0, "%s: unknown activation '%s'", path, act);
    if (c.activation < 0) {
        st_free(f);
        return -1;
    }
    model_init(m, &c, 0);
    for (int i = 0; i < m->np; i++) {
        const StEntry *e = st_find(f, m->p[i].name);
        CHECK(e && e->end - e->begin == sizeof(float) * m->p[i].rows * m->p[i].cols,
              "%s: tensor %s missing or mis-sized", path, m->p[i].name);
        if (e)
            memcpy(m->w + m->p[i].off, st_data(f, e), e->end - e->begin);
    }
    const StEntry *tok = st_find(f, "ref.tokens");
    batch_alloc(b, (int)tok->shape[0], (int)tok->shape[1]);
    memcpy(b->tok, st_data(f, tok), tok->end - tok->begin);
    batch_finish(b);
    return 0;
}

/* Largest |a-b| over the largest |b|: the fair measure for a gradient,
 * whose small entries carry no relative precision. */
static double norm_err(const float *a, const float *b, size_t n)
{
    double d = 0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return d / s;
}

/* The device a check runs on, for its messages. */
static const char *device(int lazy) { return lazy ? "xla" : "cpu"; }

/* Forward and backward once. On the xla device the loss, logits and every
 * gradient are kept by one cut, so they come from one compiled program:
 * the forward and backward passes fused (fuse.c), the ReLU's backward
 * folded into a matmul among them. */
static void check_forward_backward(const char *path, Model *m, const StFile *f, const Batch *b,
                                   int lazy)
{
    Graph *g = g_new();
    g_set_lazy(g, lazy);
    Tensor *leaf[MAX_PARAMS], *logits, *keep[MAX_PARAMS + 2];
    Tensor *loss = model_loss(m, g, b, leaf, &logits, 1);
    g_backward(g, loss, NULL);
    int nk = 0;
    keep[nk++] = loss;
    keep[nk++] = logits;
    for (int i = 0; i < m->np; i++)
        if (g_grad(g, leaf[i]))
            keep[nk++] = g_grad(g, leaf[i]);
    g_mark_step(g, keep, nk); /* nothing to do on the eager device */
    const float *ref_loss = st_data(f, st_find(f, "ref.loss"));
    float got = *(const float *)g_read(g, loss);
    CHECK(fabs(got - *ref_loss) <= 1e-5 * fabs(*ref_loss), "%s [%s]: loss %.7f vs torch %.7f",
          path, device(lazy), got, *ref_loss);
    const StEntry *le = st_find(f, "ref.logits");
    double lerr = max_rel_err(g_read(g, logits), st_data(f, le), (size_t)logits->numel, 1.0);
    CHECK(lerr <= 1e-5, "%s [%s]: logits differ by %.3g relative", path, device(lazy), lerr);
    for (int i = 0; i < m->np; i++) {
        char name[160];
        snprintf(name, sizeof name, "ref.grad.%s", m->p[i].name);
        const StEntry *e = st_find(f, name);
        Tensor *d = g_grad(g, leaf[i]);
        CHECK(e && d, "%s: gradient %s missing", path, name);
        if (!e || !d)
            continue;
        double err = norm_err(g_read(g, d), st_data(f, e), (size_t)d->numel);
        CHECK(err <= 1e-4, "%s [%s]: %s differs by %.3g", path, device(lazy), name, err);
    }
    g_free(g);
}

/* Largest |got-want| over the largest |want-init|: an error measured
 * against how far training moved the weights, so that a change in how
 * Adam moves them (eps, the betas, the bias corrections) shows whatever
 * the weights' own size. */
static double moved_err(const float *got, const float *want, const float *init, size_t n)
{
    double d = 0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)got[i] - want[i]));
        s = fmax(s, fabs((double)want[i] - init[i]));
    }
    return d / s;
}

/* After the ten steps every weight must sit where torch.optim.Adam put it
 * (ref.adam.NAME), measured against how far it moved (moved_err). Float32
 * noise between the two programs stays near 1e-4 of the move; Adam with
 * eps 1e-7 instead of 1e-8 lands 4e-2 of it away or more (the small
 * gradients, whose steps eps damps), other betas further still. */
static void check_adam_weights(const char *path, const Model *m, const StFile *f, int lazy)
{
    double worst = 0;
    const char *where = "";
    for (int i = 0; i < m->np; i++) {
        char name[160];
        snprintf(name, sizeof name, "ref.adam.%s", m->p[i].name);
        const StEntry *e = st_find(f, name), *init = st_find(f, m->p[i].name);
        size_t n = (size_t)m->p[i].rows * m->p[i].cols;
        CHECK(e && init && e->end - e->begin == sizeof(float) * n,
              "%s: %s missing or mis-sized (regenerate with tests/make_reference.py)", path, name);
        if (!e || !init)
            continue;
        double err = moved_err(m->w + m->p[i].off, st_data(f, e), st_data(f, init), n);
        if (err > worst)
            worst = err, where = m->p[i].name;
    }
    CHECK(worst <= 1e-3, "%s [%s]: weights after ten Adam steps differ from torch's by %.3g of "
          "their move (%s)", path, device(lazy), worst, where);
}

static void check_adam(const char *path, Model *m, const StFile *f, const Batch *b0, int lazy)
{
    const StEntry *toks = st_find(f, "ref.adam_tokens"), *ls = st_find(f, "ref.adam_losses");
    const int32_t *all = st_data(f, toks);
    const float *want = st_data(f, ls);
    Graph *g = g_new();
    g_set_lazy(g, lazy);
    Batch b;
    batch_alloc(&b, b0->B, b0->T);
    double worst = 0;
    for (int s = 0; s < 10; s++) {
        memcpy(b.tok, all + (size_t)s * b.B * b.T, sizeof(int32_t) * b.B * b.T);
        batch_finish(&b);
        float got = model_train_step(m, g, &b, 1e-3f);
        worst = fmax(worst, fabs(got - want[s]) / fabs(want[s]));
    }
    CHECK(worst <= 1e-5, "%s [%s]: Adam-step losses differ by %.3g relative", path,
          device(lazy), worst);
    check_adam_weights(path, m, f, lazy);
    batch_free(&b);
    g_free(g);
}

/* On the eager device (lazy 0), and on the xla device (lazy 1), whose
 * compiled programs fuse (fuse.c): a fusion that is not exact fails here.
 * The compiler has no switch to turn fusion off, so the unfused program is
 * not compared. */
static void check_reference(const char *path, int lazy)
{
    StFile f;
    Model m;
    Batch b;
    if (load_reference(path, &f, &m, &b))
        return;
    check_forward_backward(path, &m, &f, &b, lazy);
    check_adam(path, &m, &f, &b, lazy);
    batch_free(&b);
    model_free(&m);
    st_free(&f);
}

/* Greedy argmax of the last row of a full forward pass over text[0..n). */
static int full_argmax(Model *m, Graph *g, const char *text, int n)
{
    int T = n < m->cfg.context ? n : m->cfg.context;
    Batch b;
    Tensor *leaf[MAX_PARAMS], *logits;
    batch_alloc(&b, 1, T);
    for (int t = 0; t < T; t++)
        b.tok[t] = (unsigned char)text[n - T + t];
    batch_finish(&b);
    g_reset(g);
    model_loss(m, g, &b, leaf, &logits, 0);
    const float *row = (const float *)g_read(g, logits) + (size_t)(T - 1) * VOCAB;
    int best = 0;
    for (int i = 1; i < VOCAB; i++)
        if (row[i] > row[best])
            best = i;
    batch_free(&b);
    return best;
}

/* The cached sampler must pick exactly what recomputing every prefix from
 * scratch picks, before and after the text outgrows the context (past it,
 * the sampler's windows keep only their last rows after the last
 * attention), on the cpu and xla devices. */
static void check_kv_cache(int lazy, const char *activation)
{
    Config c = {.vocab = VOCAB, .context = 16, .embed = 24, .mlp = 40, .heads = 3, .layers = 2,
                .activation = activation_find(activation)};
    Model m;
    model_init(&m, &c, 7);
    Graph *g = g_new();
    g_set_lazy(g, lazy);
    char text[61] = "The cat";
    SampleOpts so = {0};
    Rng r;
    rng_seed(&r, 1, 1);
    model_generate(&m, g, text, 7, 60, &so, &r);
    int same = 1;
    for (int n = 7; n < 60; n++)
        same &= full_argmax(&m, g, text, n) == (unsigned char)text[n];
    CHECK(same, "%s, %s: KV-cached greedy sampling differs from full recomputation",
          lazy ? "xla" : "cpu", activation);
    g_free(g);
    model_free(&m);
}

/* Passages decoded side by side (gpt sample --num-samples) are each the
 * passage their generator gives alone, on the cpu and xla devices, through
 * the cached steps and the windows past the context (the batched matmuls,
 * layernorms and attention give each row the bits it gets alone). */
static void check_many_passages(int lazy)
{
    enum { NS = 3, TOTAL = 60 };
    Config c = {.vocab = VOCAB, .context = 16, .embed = 24, .mlp = 40, .heads = 3, .layers = 2};
    Model m;
    model_init(&m, &c, 7);
    Graph *g = g_new();
    g_set_lazy(g, lazy);
    char many[NS][TOTAL + 1], one[TOTAL + 1], *text[NS];
    SampleOpts so = {.temperature = 1.0f};
    Rng r[NS], alone;
    for (int s = 0; s < NS; s++) {
        memset(many[s], 0, sizeof many[s]);
        memcpy(many[s], "The cat", 7);
        text[s] = many[s];
        rng_seed(&r[s], 11 + (uint64_t)s, RNG_SAMPLE);
    }
    model_generate_many(&m, g, text, NS, 7, TOTAL, &so, r);
    int same = 1, differ = 0;
    for (int s = 0; s < NS; s++) {
        memset(one, 0, sizeof one);
        memcpy(one, "The cat", 7);
        rng_seed(&alone, 11 + (uint64_t)s, RNG_SAMPLE);
        model_generate(&m, g, one, 7, TOTAL, &so, &alone);
        same &= !memcmp(one, many[s], TOTAL);
        differ |= s > 0 && memcmp(many[0], many[s], TOTAL) != 0;
    }
    CHECK(same, "%s: a passage of --num-samples differs from the same generator alone",
          lazy ? "xla" : "cpu");
    CHECK(differ, "passages with different generators came out the same");
    g_free(g);
    model_free(&m);
}

/* The eval loss in chunks (eval_loss) has the bits of one pass over the
 * whole batch on the eager cpu device (batch_loss, today's path), for
 * chunks that divide the batch, that leave a padded last chunk, of one
 * window, and the whole; on the xla device the chunks share one program. */
static void check_eval_chunks(void)
{
    Config c = {.vocab = VOCAB, .context = 13, .embed = 24, .mlp = 40, .heads = 3, .layers = 2};
    Model m;
    model_init(&m, &c, 5);
    Batch b;
    batch_alloc(&b, 12, 13);
    Rng r;
    rng_seed(&r, 3, 1);
    for (int i = 0; i < b.B * b.T; i++)
        b.tok[i] = (int32_t)rng_below(&r, VOCAB);
    batch_finish(&b);
    Graph *cpu = g_new(), *xla = g_new();
    g_set_lazy(xla, 1);
    float whole = batch_loss(&m, cpu, &b);
    static const int chunks[] = {4, 5, 1, 12, 40};
    for (int k = 0; k < 5; k++) {
        long u0 = xs_counter(C_UNCACHED), c0 = xs_counter(C_CACHED);
        float lazy = eval_loss(&m, xla, &b, chunks[k], NULL, NULL);
        float eager = eval_loss(&m, cpu, &b, chunks[k], NULL, NULL);
        CHECK(!memcmp(&lazy, &whole, 4) && !memcmp(&eager, &whole, 4),
              "eval in chunks of %d: xla %.9g, cpu %.9g, one pass %.9g", chunks[k], lazy,
              eager, whole);
        /* 3 chunks: one forward program, compiled and reused twice, and
         * the xent over all (compiled at 4, cached at 5: the padded last
         * chunk of 5 has the others' shape) */
        long want_new = chunks[k] == 4 ? 2 : 1, want_hits = chunks[k] == 4 ? 2 : 3;
        if (chunks[k] == 4 || chunks[k] == 5)
            CHECK(xs_counter(C_UNCACHED) - u0 == want_new &&
                  xs_counter(C_CACHED) - c0 == want_hits,
                  "eval of 3 chunks of %d: %ld compiles, %ld cache hits (want %ld, %ld)",
                  chunks[k], xs_counter(C_UNCACHED) - u0, xs_counter(C_CACHED) - c0, want_new,
                  want_hits);
    }
    CHECK(whole > 0 && fabsf(whole - logf((float)VOCAB)) < 1.0f,
          "an untrained model's loss %g is not near log(vocab)", whole);
    g_free(cpu);
    g_free(xla);
    batch_free(&b);
    model_free(&m);
}

void test_model(void)
{
    check_eval_chunks();
    check_many_passages(0);
    check_many_passages(1);
    for (int lazy = 0; lazy <= 1; lazy++) {
        check_reference("tests/ref_default.safetensors", lazy);
        check_reference("tests/ref_odd.safetensors", lazy);
        check_reference("tests/ref_gelu.safetensors", lazy);
    }
    for (int lazy = 0; lazy <= 1; lazy++) {
        check_kv_cache(lazy, "relu");
        check_kv_cache(lazy, "gelu");
    }
}
