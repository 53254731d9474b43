/* tests/test_grads.c: every op's recorded backward pass against central
 * finite differences of the same graph's forward pass.
 *
 * The objective is L = sum(y * R) for a fixed random R, computed in double
 * on the host; its gradient with respect to y is R, which g_backward takes
 * as the upstream gradient. Forward passes are float32, so differences use
 * a step of 1e-2 and are compared relative to the largest gradient of the
 * input: rounding noise is ~1e-4 of that, a wrong rule is O(1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "graph.h"
#include "test.h"

#define MAXIN 4

/* The differences' step, and the tolerance of a gradient against them,
 * relative to the largest gradient of the input (FD_SCALE_FLOOR where all
 * are smaller): a step of 1e-2 keeps truncation (~step^2 times the third
 * derivative) and the float forward's rounding (~1e-7 of L divided by the
 * step) below 1e-4 of that scale (6.8e-5 at worst, layernorm's x, as
 * measured); FD_TOL is some 300 times that, and a wrong rule is off by
 * O(1) of it. */
#define FD_STEP 1e-2f
#define FD_TOL 2e-2
#define FD_SCALE_FLOOR 1e-3

struct gcase {
    const char *name;
    int nin;
    int rows[MAXIN], cols[MAXIN];
    Tensor *(*build)(Graph *g, Tensor **in, const struct gcase *c);
    int32_t idx[64]; /* integer inputs (tokens, targets) for ops that take them */
    int B, T, H;
};

static uint64_t gstate = 0x1234567;
static float grand(void) /* uniform in [-1, 1) */
{
    gstate ^= gstate << 13;
    gstate ^= gstate >> 7;
    gstate ^= gstate << 17;
    return (float)((gstate >> 40) * 0x1.0p-24 * 2 - 1);
}

static Tensor *run_forward(Graph *g, const struct gcase *c, float **data, Tensor **leaf)
{
    g_reset(g);
    for (int i = 0; i < c->nin; i++)
        leaf[i] = g_param(g, data[i], c->rows[i], c->cols[i]);
    return c->build(g, leaf, c);
}

static double objective(Graph *g, const struct gcase *c, float **data, const float *r)
{
    Tensor *leaf[MAXIN];
    Tensor *y = run_forward(g, c, data, leaf);
    const float *v = g_read(g, y);
    double L = 0;
    for (long i = 0; i < y->numel; i++)
        L += (double)v[i] * r[i];
    return L;
}

/* Checks up to 40 coordinates of input i against its analytic gradient. */
static void check_input(Graph *g, const struct gcase *c, float **data, const float *r,
                        int i, const float *an)
{
    long n = (long)c->rows[i] * c->cols[i], step = n > 40 ? n / 40 : 1;
    double scale = FD_SCALE_FLOOR, worst = 0;
    for (long j = 0; j < n; j++)
        scale = fmax(scale, fabs(an[j]));
    for (long j = 0; j < n; j += step) {
        float keep = data[i][j];
        data[i][j] = keep + FD_STEP;
        double lp = objective(g, c, data, r);
        data[i][j] = keep - FD_STEP;
        double lm = objective(g, c, data, r);
        data[i][j] = keep;
        double fd = (lp - lm) / (2.0 * FD_STEP);
        worst = fmax(worst, fabs(fd - an[j]) / scale);
    }
    CHECK(worst < FD_TOL, "%s: input %d gradient off by %.3g of its scale", c->name, i, worst);
}

static void check_case(const struct gcase *c)
{
    Graph *g = g_new();
    float *data[MAXIN], *an[MAXIN], *r;
    Tensor *leaf[MAXIN];
    for (int i = 0; i < c->nin; i++) {
        size_t n = (size_t)c->rows[i] * c->cols[i];
        data[i] = malloc(n * sizeof(float));
        an[i] = malloc(n * sizeof(float));
        for (size_t j = 0; j < n; j++)
            data[i][j] = grand();
    }
    Tensor *y = run_forward(g, c, data, leaf);
    r = malloc((size_t)y->numel * sizeof(float));
    for (long j = 0; j < y->numel; j++)
        r[j] = grand();
    Tensor *dy = g_leaf(g, TK_INPUT, DT_F32, r, y->rows, y->cols);
    g_backward(g, y, dy);
    for (int i = 0; i < c->nin; i++) {
        Tensor *d = g_grad(g, leaf[i]);
        CHECK(d != NULL, "%s: no gradient for input %d", c->name, i);
        if (d)
            memcpy(an[i], g_read(g, d), (size_t)d->numel * sizeof(float));
    }
    for (int i = 0; i < c->nin; i++)
        check_input(g, c, data, r, i, an[i]);
    for (int i = 0; i < c->nin; i++) {
        free(data[i]);
        free(an[i]);
    }
    free(r);
    g_free(g);
}

static Tensor *b_matmul(Graph *g, Tensor **in, const struct gcase *c)
{
    return g_matmul(g, in[0], in[1], in[2]);
}
static Tensor *b_linear(Graph *g, Tensor **in, const struct gcase *c)
{
    return g_linear(g, in[0], in[1], in[2]);
}
static Tensor *b_layernorm(Graph *g, Tensor **in, const struct gcase *c)
{
    return g_layernorm(g, in[0], in[1], in[2]);
}
static Tensor *b_attention(Graph *g, Tensor **in, const struct gcase *c)
{
    return g_attention(g, in[0], c->B, c->T, c->H);
}
/* ReLU's kink at 0 breaks differences; shift inputs away from it. */
static Tensor *b_relu(Graph *g, Tensor **in, const struct gcase *c)
{
    return g_relu(g, g_add(g, in[0], in[1]));
}
/* GELU on sums of three inputs, -3..3: its minimum (-0.75), its bend
 * and the start of its linear part. */
static Tensor *b_gelu(Graph *g, Tensor **in, const struct gcase *c)
{
    return g_unary(g, KOP_GELU, g_add(g, in[0], g_add(g, in[1], in[2])));
}
static Tensor *b_embed(Graph *g, Tensor **in, const struct gcase *c)
{
    Tensor *idx = g_leaf(g, TK_INPUT, DT_I32, (void *)c->idx, 1, c->B);
    return g_embed(g, idx, in[0]);
}
static Tensor *b_xent(Graph *g, Tensor **in, const struct gcase *c)
{
    Tensor *tgt = g_leaf(g, TK_INPUT, DT_I32, (void *)c->idx, 1, c->B);
    return g_xent(g, in[0], tgt);
}
/* Dropout's masks are fixed by the key, so the op is differentiable. */
static const int32_t drop_key[2] = {99, 7}, drop_rows[64] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5,
                                                             8, 9, 7, 9, 3, 2, 3, 8, 4};
static Tensor *b_dropout(Graph *g, Tensor **in, const struct gcase *c)
{
    Tensor *rows = g_leaf(g, TK_INPUT, DT_I32, (void *)drop_rows, 1, in[0]->rows);
    Tensor *key = g_leaf(g, TK_INPUT, DT_I32, (void *)drop_key, 1, 2);
    return g_dropout(g, in[0], rows, key, 0.3f, 4);
}
static Tensor *b_attention_drop(Graph *g, Tensor **in, const struct gcase *c)
{
    Tensor *rows = g_leaf(g, TK_INPUT, DT_I32, (void *)drop_rows, 1, c->B * c->T);
    Tensor *key = g_leaf(g, TK_INPUT, DT_I32, (void *)drop_key, 1, 2);
    return g_attention_drop(g, in[0], rows, key, c->B, c->T, c->H, 0.3f, 6);
}
/* A tensor used twice must receive the sum of both gradients. */
static Tensor *b_reuse(Graph *g, Tensor **in, const struct gcase *c)
{
    Tensor *h = g_add(g, in[0], in[0]);
    return g_matmul(g, h, g_transpose(g, in[0]), NULL);
}

void test_grads(void)
{
    struct gcase cases[] = {
        {.name = "matmul+bias", .nin = 3, .rows = {5, 4, 1}, .cols = {4, 3, 3}, .build = b_matmul},
        {.name = "linear", .nin = 3, .rows = {6, 5, 1}, .cols = {4, 4, 5}, .build = b_linear},
        {.name = "layernorm", .nin = 3, .rows = {4, 1, 1}, .cols = {6, 6, 6}, .build = b_layernorm},
        {.name = "attention", .nin = 1, .rows = {10}, .cols = {24}, .build = b_attention,
         .B = 2, .T = 5, .H = 2},
        {.name = "attention hs=3", .nin = 1, .rows = {7}, .cols = {27}, .build = b_attention,
         .B = 1, .T = 7, .H = 3},
        {.name = "relu", .nin = 2, .rows = {3, 3}, .cols = {5, 5}, .build = b_relu},
        {.name = "gelu", .nin = 3, .rows = {4, 4, 4}, .cols = {7, 7, 7}, .build = b_gelu},
        {.name = "embed", .nin = 1, .rows = {4}, .cols = {6}, .build = b_embed, .B = 5,
         .idx = {1, 3, 1, 5, 0}},
        {.name = "xent", .nin = 1, .rows = {4}, .cols = {7}, .build = b_xent, .B = 4,
         .idx = {2, -1, 6, 0}},
        {.name = "reuse", .nin = 1, .rows = {3}, .cols = {3}, .build = b_reuse},
        {.name = "dropout", .nin = 1, .rows = {5}, .cols = {7}, .build = b_dropout},
        {.name = "attention_drop", .nin = 1, .rows = {10}, .cols = {24},
         .build = b_attention_drop, .B = 2, .T = 5, .H = 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i]);
}
