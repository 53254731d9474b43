/* tests/test_xla.c: the lazy (xla) device: same numbers as eager, one
 * compile per graph shape, fusion counts, a sound memory plan, and a
 * forced hash collision caught by the full structural comparison. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cmd/sample.h"
#include "gpt.h"
#include "test.h"

static const Config small = {.vocab = VOCAB, .context = 64, .embed = 32, .mlp = 64, .heads = 4, .layers = 2};

static void fill_batch(Batch *b, uint64_t seed)
{
    Rng r;
    rng_seed(&r, seed, 9);
    for (int i = 0; i < b->B * b->T; i++)
        b->tok[i] = 32 + (int)(rng_next(&r) % 90);
    batch_finish(b);
}

static Graph *lazy_graph(void)
{
    Graph *g = g_new();
    g_set_lazy(g, 1);
    return g;
}

/* Every fusion is exact, so the two devices agree to the bit. */
static void check_same_as_eager(void)
{
    Model a, b;
    model_init(&a, &small, 3);
    model_init(&b, &small, 3);
    Graph *ge = g_new(), *gl = lazy_graph();
    Batch bt;
    batch_alloc(&bt, 4, 64);
    int same = 1;
    for (int s = 0; s < 20; s++) {
        fill_batch(&bt, (uint64_t)s);
        float le = model_train_step(&a, ge, &bt, 1e-3f);
        float ll = model_train_step(&b, gl, &bt, 1e-3f);
        same &= !memcmp(&le, &ll, sizeof le);
    }
    CHECK(same, "xla and cpu losses differ over 20 steps");
    CHECK(!memcmp(a.w, b.w, a.nw * 4) && !memcmp(a.m, b.m, a.nw * 4),
          "xla and cpu weights differ after 20 steps");
    batch_free(&bt);
    g_free(ge);
    g_free(gl);
    model_free(&a);
    model_free(&b);
}

static void check_compile_counts(void)
{
    Model m;
    model_init(&m, &small, 4);
    Graph *g = lazy_graph();
    Batch bt;
    batch_alloc(&bt, 4, 64);
    long u0 = xs_counter(C_UNCACHED), c0 = xs_counter(C_CACHED);
    for (int s = 0; s < 10; s++) {
        fill_batch(&bt, (uint64_t)s);
        model_train_step(&m, g, &bt, 1e-3f);
    }
    CHECK(xs_counter(C_UNCACHED) - u0 == 1 && xs_counter(C_CACHED) - c0 == 9,
          "10 train steps: %ld compiles, %ld hits", xs_counter(C_UNCACHED) - u0,
          xs_counter(C_CACHED) - c0);
    char text[201] = "Elementary";
    SampleOpts so = {0};
    Rng r;
    rng_seed(&r, 1, 1);
    u0 = xs_counter(C_UNCACHED);
    model_generate(&m, g, text, 10, 200, &so, &r);
    CHECK(xs_counter(C_UNCACHED) - u0 == 2, "static sampler compiled %ld graphs for 200 bytes",
          xs_counter(C_UNCACHED) - u0);
    char naive[41] = "Elementary";
    u0 = xs_counter(C_UNCACHED);
    model_generate_naive(&m, g, naive, 10, 40, &so, &r);
    CHECK(xs_counter(C_UNCACHED) - u0 == 30, "naive sampler compiled %ld graphs for 30 lengths",
          xs_counter(C_UNCACHED) - u0);
    CHECK(!memcmp(text, naive, 40), "naive and cached greedy samplers disagree");
    batch_free(&bt);
    g_free(g);
    model_free(&m);
}

/* Compiles the default model's train graph and checks what came out. */
static void check_train_program(void)
{
    Config c = {.vocab = VOCAB, .context = 128, .embed = 32, .mlp = 64, .heads = 4, .layers = 4};
    Model m;
    model_init(&m, &c, 5);
    Graph *g = lazy_graph();
    Batch bt;
    batch_alloc(&bt, 2, 128);
    fill_batch(&bt, 1);
    model_train_step(&m, g, &bt, 1e-3f);
    struct compile_stats st;
    g_compile_stats(g, &st);
    /* per layer: fc1+ReLU and fc2+residual fold into matmul_ex; backward,
     * fc2's dx and the ReLU's backward likewise, and the residual stream's
     * gradient sums (add chains, add_n) fold into the layernorm_bwd whose
     * dx they take last */
    CHECK(g_kernel_count(g, KOP_RELU) == 0, "a ReLU was not folded into its matmul");
    CHECK(g_kernel_count(g, KOP_XENT) == 0 && g_kernel_count(g, KOP_XENT_GRAD) == 1,
          "cross-entropy's forward and backward are not one kernel");
    CHECK(g_kernel_count(g, KOP_RELU_BWD) == 0, "a ReLU's backward was not folded into the "
          "matmul that makes its dy");
    CHECK(g_kernel_count(g, KOP_MATMUL_EX) >= 2 * c.layers, "only %d fused matmuls",
          g_kernel_count(g, KOP_MATMUL_EX));
    CHECK(g_kernel_count(g, KOP_ADD_N) == 0, "%d add chains not folded into layernorm_bwd",
          g_kernel_count(g, KOP_ADD_N));
    CHECK(g_kernel_count(g, KOP_ADD) == c.layers + 1, "%d adds, want the forward's %d",
          g_kernel_count(g, KOP_ADD), c.layers + 1);
    CHECK(g_kernel_count(g, KOP_ATTENTION) == c.layers, "attention is not one kernel per layer");
    CHECK(st.kernels < st.nodes, "fusion removed nothing: %d nodes -> %d kernels", st.nodes,
          st.kernels);
    const struct plan_buf *p;
    int n = g_plan(g, &p), clash = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            clash += p[i].first <= p[j].last && p[j].first <= p[i].last &&
                     p[i].off < p[j].off + p[j].bytes && p[j].off < p[i].off + p[i].bytes;
    CHECK(n > 100 && clash == 0, "memory plan: %d buffers, %d overlapping live pairs", n, clash);
    CHECK(st.arena < st.buffers, "arena %zu is not smaller than the buffers' sum %zu", st.arena,
          st.buffers);
    batch_free(&bt);
    g_free(g);
    model_free(&m);
}

/* With every hash equal, only the structural comparison tells two graphs
 * apart: both must compile, and each must give its own right answer. */
static void check_collision(void)
{
    Model m;
    model_init(&m, &small, 6);
    Graph *ge = g_new(), *gl = lazy_graph();
    uint64_t keep = g_hash_mask;
    g_hash_mask = 0;
    long u0 = xs_counter(C_UNCACHED);
    int ok = 1;
    for (int B = 1; B <= 3; B++) {
        Batch bt;
        Tensor *leaf[MAX_PARAMS], *lg;
        batch_alloc(&bt, B, 32);
        fill_batch(&bt, (uint64_t)B);
        g_reset(ge);
        g_reset(gl);
        float le = *(const float *)g_read(ge, model_loss(&m, ge, &bt, leaf, &lg, 0));
        float ll = *(const float *)g_read(gl, model_loss(&m, gl, &bt, leaf, &lg, 0));
        ok &= le == ll;
        batch_free(&bt);
    }
    g_hash_mask = keep;
    CHECK(ok && xs_counter(C_UNCACHED) - u0 == 3,
          "colliding hashes: %ld compiles for 3 shapes, results %s", xs_counter(C_UNCACHED) - u0,
          ok ? "right" : "wrong");
    g_free(ge);
    g_free(gl);
    model_free(&m);
}

/* One graph of the lazy device: the loss of logits W, then Adam writes W
 * in place, then the loss's backward, which reads W after the write. The
 * loss must be W's before the write, as eager computes it: the xent
 * fusion must not move the forward's read of W past Adam's write. Returns
 * the loss; w becomes W after the step, dw the gradient. */
static float xent_then_adam(Graph *g, float *w, float *dw, const int *tgt, int rows, int v)
{
    int n = rows * v, step = 1;
    float *gr = malloc(sizeof(float) * (size_t)n), *mom = calloc((size_t)n, sizeof(float));
    float *var = calloc((size_t)n, sizeof(float)), lr = 0.5f;
    for (int i = 0; i < n; i++) /* mixed signs: Adam moves each weight by +-lr */
        gr[i] = (i * 7 % 5) - 2.0f;
    Tensor *W = g_param(g, w, rows, v), *T = g_leaf(g, TK_INPUT, DT_I32, (void *)tgt, rows, 1);
    Tensor *loss = g_xent(g, W, T);
    g_adam(g, W, g_leaf(g, TK_INPUT, DT_F32, gr, rows, v), g_leaf(g, TK_STATE, DT_F32, mom, rows, v),
           g_leaf(g, TK_STATE, DT_F32, var, rows, v), g_leaf(g, TK_STATE, DT_I32, &step, 1, 1),
           g_leaf(g, TK_INPUT, DT_F32, &lr, 1, 1), 0.9f, 0.999f, 1e-8f);
    g_backward(g, loss, NULL);
    Tensor *keep[2] = {loss, g_grad(g, W)};
    g_mark_step(g, keep, 2);
    float l = *(const float *)g_read(g, loss);
    memcpy(dw, g_read(g, keep[1]), sizeof(float) * (size_t)n);
    free(gr), free(mom), free(var);
    return l;
}

/* No trace of the model puts an in-place write between a loss and its
 * backward; a graph built by hand does, and the lazy device must still
 * give eager's numbers and the loss of the weights before the write. */
static void check_xent_before_write(void)
{
    enum { ROWS = 4, V = 8 };
    const int tgt[ROWS] = {1, 5, 0, 7};
    float wl[ROWS * V], we[ROWS * V], dl[ROWS * V], de[ROWS * V];
    double want = 0;
    for (int i = 0; i < ROWS * V; i++)
        wl[i] = we[i] = (float)((i * 5 % 11) - 5) / 4;
    for (int r = 0; r < ROWS; r++) { /* mean of logsumexp - logit[target], in double */
        double s = 0;
        for (int j = 0; j < V; j++)
            s += exp(wl[r * V + j]);
        want += (log(s) - wl[r * V + tgt[r]]) / ROWS;
    }
    Graph *gl = lazy_graph(), *ge = g_new();
    float ll = xent_then_adam(gl, wl, dl, tgt, ROWS, V);
    float le = xent_then_adam(ge, we, de, tgt, ROWS, V);
    CHECK(fabs(ll - want) <= 1e-5 * want, "xla loss read after Adam's write: %.9g, want %.9g",
          ll, want);
    CHECK(!memcmp(&ll, &le, sizeof ll) && !memcmp(wl, we, sizeof wl) && !memcmp(dl, de, sizeof dl),
          "xent then Adam then backward: xla differs from cpu (loss %.9g vs %.9g)", ll, le);
    g_free(gl);
    g_free(ge);
}

void test_xla(void)
{
    check_same_as_eager();
    check_compile_counts();
    check_train_program();
    check_collision();
    check_xent_before_write();
}
