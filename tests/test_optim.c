/* tests/test_optim.c: training's numbers held to PyTorch: Adam's
 * hyperparameters, step by step, and gpt eval's loss and bits per byte.
 * (The lazy device's fused program next to the eager one, both against
 * PyTorch's gradients and Adam steps, is in tests/test_model.c.)
 *
 * The expected numbers are PyTorch's, committed with the scripts that
 * make them: tests/make_adam_reference.py wrote tests/adam_reference.h,
 * tests/make_eval_reference.py wrote tests/eval_*. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpt.h"
#include "test.h"
#include "adam_reference.h"

/* ---- Adam ---- */

/* The hyperparameters of one run: the trainer's (gpt.c's adam_update),
 * or one changed, to show the reference would see the change. */
struct adam_hyper {
    float b1, b2, eps;
};
static const struct adam_hyper trainer_hyper = {0.9f, 0.999f, 1e-8f};

/* Ways to run the update: the plain-C twin, the kernel of the current
 * ISA path, and g_adam on the eager (cpu) and lazy (xla) devices, as the
 * trainer records it. */
enum adam_path { BY_TWIN, BY_KERNEL, BY_EAGER, BY_LAZY };

/* The worst errors of a run over all steps: of p per unit of lr (a step
 * moves p by about lr), of m per unit of the element's largest gradient,
 * and of v per unit of its square, so that every element counts whatever
 * its size. */
struct adam_err {
    double p, m, v;
};

/* Fits the trainer's Adam to torch.optim.Adam's to within rounding: the
 * two order their float32 operations differently (m += (1-b1)(g-m) here,
 * m = b1 m + (1-b1) g there), which costs p 3e-6 lr and m, v 1.5e-7 at
 * most. Adam with eps 1e-7, beta1 0.8 or beta2 0.99 puts p 4e-3 lr away
 * or more (eps: 2 lr, where the gradients are near 1e-8), and a changed
 * beta puts its moment 4e-2 away. */
static int adam_fits(const struct adam_err *e)
{
    return e->p <= 3e-5 && e->m <= 1e-6 && e->v <= 1e-6;
}

/* One step through g_adam, leaves as gpt.c makes them: p a parameter,
 * m, v and the step count state, the rate an input. */
static void graph_step(Graph *g, float *p, float *m, float *v, const float *grad, int32_t *t,
                       float *lr, const struct adam_hyper *h)
{
    g_reset(g);
    Tensor *tp = g_param(g, p, 1, ADAM_N);
    Tensor *tg = g_leaf(g, TK_INPUT, DT_F32, (float *)grad, 1, ADAM_N);
    Tensor *tm = g_leaf(g, TK_STATE, DT_F32, m, 1, ADAM_N);
    Tensor *tv = g_leaf(g, TK_STATE, DT_F32, v, 1, ADAM_N);
    Tensor *tt = g_leaf(g, TK_STATE, DT_I32, t, 1, 1);
    Tensor *tl = g_leaf(g, TK_INPUT, DT_F32, lr, 1, 1);
    g_adam(g, tp, tg, tm, tv, tt, tl, h->b1, h->b2, h->eps);
    g_mark_step(g, NULL, 0); /* the lazy device runs it here */
}

/* The larger of a running error and a new one; a NaN is the worst and
 * stays. (Not fmax, which drops NaNs, and whose reductions in adam_run
 * crash aarch64 gcc 12 at -O2: an internal error in
 * vect_transform_reduction.) */
static double worst(double a, double b) { return isnan(a) || b <= a ? a : b; }

/* ADAM_STEPS steps from adam_p0, each compared with PyTorch's. */
static struct adam_err adam_run(enum adam_path path, const struct adam_hyper *h)
{
    float p[ADAM_N], m[ADAM_N] = {0}, v[ADAM_N] = {0}, lr = ADAM_LR;
    double size[ADAM_N] = {0};
    memcpy(p, adam_p0, sizeof p);
    for (int s = 0; s < ADAM_STEPS; s++)
        for (int i = 0; i < ADAM_N; i++)
            size[i] = worst(size[i], fabs(adam_grad[s][i]));
    Graph *g = path >= BY_EAGER ? g_new() : NULL;
    if (g)
        g_set_lazy(g, path == BY_LAZY);
    struct adam_err e = {0, 0, 0};
    for (int32_t s = 0; s < ADAM_STEPS; s++) {
        int32_t t = s + 1;
        if (path == BY_TWIN)
            k_adam_ref(p, m, v, adam_grad[s], ADAM_N, lr, h->b1, h->b2, h->eps, t);
        else if (path == BY_KERNEL)
            k_adam(p, m, v, adam_grad[s], ADAM_N, lr, h->b1, h->b2, h->eps, t);
        else
            graph_step(g, p, m, v, adam_grad[s], &t, &lr, h);
        for (int i = 0; i < ADAM_N; i++) {
            e.p = worst(e.p, fabs((double)p[i] - adam_want_p[s][i]) / ADAM_LR);
            e.m = worst(e.m, fabs((double)m[i] - adam_want_m[s][i]) / size[i]);
            e.v = worst(e.v, fabs((double)v[i] - adam_want_v[s][i]) / (size[i] * size[i]));
        }
    }
    if (g)
        g_free(g);
    return e;
}

static void check_adam_path(enum adam_path path, const char *name)
{
    struct adam_err e = adam_run(path, &trainer_hyper);
    CHECK(adam_fits(&e), "Adam by %s vs torch.optim.Adam: p off by %.3g lr, m by %.3g, v by "
          "%.3g of the gradient's size", name, e.p, e.m, e.v);
}

/* The reference must tell each hyperparameter: with any one changed, the
 * plain-C twin no longer fits it (else the gradients do not exercise it). */
static void check_adam_sensitive(void)
{
    static const struct {
        struct adam_hyper h;
        const char *what;
    } wrong[] = {
        {{0.9f, 0.999f, 1e-7f}, "eps 1e-7"},
        {{0.8f, 0.999f, 1e-8f}, "beta1 0.8"},
        {{0.9f, 0.99f, 1e-8f}, "beta2 0.99"},
    };
    for (size_t k = 0; k < sizeof wrong / sizeof *wrong; k++) {
        struct adam_err e = adam_run(BY_TWIN, &wrong[k].h);
        CHECK(!adam_fits(&e), "Adam with %s fits torch's eps 1e-8, betas (0.9, 0.999): the "
              "reference does not exercise it", wrong[k].what);
    }
}

static void check_adam(void)
{
    check_adam_path(BY_TWIN, "the plain-C twin");
    int isa_was = isa_get();
    for (int isa = 0; isa <= isa_best(); isa++) {
        char name[64];
        isa_set(isa);
        snprintf(name, sizeof name, "the %s kernel", isa_name(isa));
        check_adam_path(BY_KERNEL, name);
    }
    isa_set(isa_was);
#if defined(__x86_64__)
    const int top = ISA_AVX512; /* the fastest path built */
#elif defined(__aarch64__)
    const int top = ISA_NEON;
#else
    const int top = ISA_SCALAR;
#endif
    if (isa_best() < top)
        SKIP_MACHINE("Adam's kernels past %s (up to %s) not run: this CPU or GPT_ISA stops there",
                     isa_name(isa_best()), isa_name(top));
    check_adam_path(BY_EAGER, "g_adam on the cpu device");
    check_adam_path(BY_LAZY, "g_adam on the xla device");
    check_adam_sensitive();
}

/* ---- gpt eval ---- */

#define EVAL_ARGS "--ckpt tests/eval_ckpt.safetensors --data tests/eval_text.txt"

struct eval_line {
    double loss, bpb;
    long windows;
    int context;
};

/* The numbers of a line "loss L bpb B (N windows of T bytes)" (gpt eval's
 * and tests/torch_check.py's): 0, or -1 when none is found. */
static int parse_eval(const char *out, struct eval_line *e)
{
    const char *at = strstr(out, "loss ");
    return at && sscanf(at, "loss %lf bpb %lf (%ld windows of %d bytes)", &e->loss, &e->bpb,
                        &e->windows, &e->context) == 4 ? 0 : -1;
}

/* PyTorch's loss and bits per byte for the committed checkpoint and text. */
static int eval_reference(struct eval_line *want)
{
    size_t n;
    char *text = (char *)t_slurp("tests/eval_reference.txt", &n);
    const char *at = text ? strstr(text, "\nloss ") : NULL;
    int ok = at && sscanf(at + 1, "loss %lf bpb %lf windows %ld context %d", &want->loss,
                          &want->bpb, &want->windows, &want->context) == 4;
    free(text);
    CHECK(ok, "tests/eval_reference.txt: no line 'loss L bpb B windows N context T' "
          "(tests/make_eval_reference.py writes it)");
    return ok ? 0 : -1;
}

/* One run of gpt eval against PyTorch's numbers. The loss is printed to
 * 6 decimals, bits per byte to 4: the tolerances are a little over half
 * a unit in the last place, plus float32's rounding. 7 windows in chunks
 * of 3 leave a last chunk of 1 (padded), so a mean weighted by the
 * wrong count misses by 1e-2 or more; bits per byte from log10 or log2
 * mixed up miss by more still. */
static void check_eval_run(const char *flags, const struct eval_line *want)
{
    char cmd[512], out[4096];
    struct eval_line got;
    snprintf(cmd, sizeof cmd, "./gpt eval " EVAL_ARGS " %s", flags);
    int rc = t_run(cmd, out, sizeof out);
    if (rc != 0 || parse_eval(out, &got)) {
        CHECK(0, "gpt eval %s: rc %d: %s", flags, rc, out);
        return;
    }
    CHECK(got.windows == want->windows && got.context == want->context,
          "gpt eval %s: %ld windows of %d bytes; PyTorch's test split has %ld of %d", flags,
          got.windows, got.context, want->windows, want->context);
    CHECK(fabs(got.loss - want->loss) <= 2e-6, "gpt eval %s: loss %.6f; PyTorch's %.9f", flags,
          got.loss, want->loss);
    CHECK(fabs(got.bpb - want->bpb) <= 6e-5, "gpt eval %s: %.4f bits per byte; PyTorch's "
          "loss / ln 2 is %.9f", flags, got.bpb, want->bpb);
}

/* The committed numbers were made by tests/torch_check.py; when PyTorch
 * is here, it runs again now and must give them (the checkpoint, the text
 * or the script changed else, and the reference needs remaking). */
static void check_eval_live(const struct eval_line *want)
{
    char out[4096];
    struct eval_line live;
    if (t_run("/usr/bin/python3 -c 'import torch' 2>/dev/null", out, sizeof out) != 0) {
        SKIP_MISSING("python3-torch", "PyTorch not installed: gpt eval is held to the committed "
                     "numbers only, not to tests/torch_check.py run now");
        return;
    }
    int rc = t_run("/usr/bin/python3 tests/torch_check.py tests/eval_ckpt.safetensors "
                   "tests/eval_text.txt", out, sizeof out);
    CHECK(rc == 0 && !parse_eval(out, &live) && fabs(live.loss - want->loss) <= 6e-7 &&
              fabs(live.bpb - want->bpb) <= 6e-5 && live.windows == want->windows,
          "tests/torch_check.py now: rc %d: %s; committed: loss %.9f bpb %.9f, %ld windows "
          "(remake with tests/make_eval_reference.py)", rc, out, want->loss, want->bpb,
          want->windows);
}

static void check_eval(void)
{
    struct eval_line want;
    if (eval_reference(&want))
        return;
    /* bits per byte from the loss, by libm: the reference's two numbers agree */
    CHECK(fabs(want.bpb - want.loss / log(2.0)) <= 1e-8, "tests/eval_reference.txt: bpb %.9f "
          "is not loss %.9f / ln 2", want.bpb, want.loss);
    check_eval_run("--batch 3 --device cpu", &want);
    check_eval_run("--batch 3 --device xla", &want);
    check_eval_run("", &want); /* one chunk of all 7 windows */
    check_eval_live(&want);
}

/* The trainer records its Adam with torch.optim.Adam's defaults (betas
 * 0.9 and 0.999, eps 1e-8, as the README says): every adam node of the
 * compiled step, as GPT_SAVE_GRAPHS writes it, unsharded on one core and
 * sharded over two (model/replicas.c records those). The kernels' tests
 * hold k_adam to its twin for any hyperparameters; this holds the values
 * the training step passes. */
#define HYPER_DIR "tests/tmp/optim-hyper"
#define TORCH_ADAM_DEFAULTS "beta1=0.9, beta2=0.999, eps=1e-08}"
static void check_trainer_hyper(void)
{
    static const char *layouts[] = {"--cores 1", "--cores 2 --shard-optimizer"};
    char out[4096], cmd[1024];
    t_run("rm -rf " HYPER_DIR " && mkdir -p " HYPER_DIR, out, sizeof out);
    t_write_words(HYPER_DIR "/text.txt", 20000);
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        snprintf(cmd, sizeof cmd,
                 "rm -rf " HYPER_DIR "/g* " HYPER_DIR "/run && GPT_SAVE_GRAPHS=" HYPER_DIR
                 "/g GPT_SAVE_GRAPHS_FMT=text ./gpt train --embed 16 --heads 2 --layers 1 "
                 "--context 16 --seq 16 --batch 4 --eval-every 1000 --steps 1 %s --data " HYPER_DIR
                 "/text.txt --out " HYPER_DIR "/run >/dev/null 2>&1 && cat " HYPER_DIR
                 "/g-*-after.txt | grep -c ' = adam' && cat " HYPER_DIR
                 "/g-*-after.txt | grep ' = adam' | grep -vc '" TORCH_ADAM_DEFAULTS "'",
                 layouts[i]);
        int rc = t_run(cmd, out, sizeof out), nodes = atoi(out), off = -1;
        const char *second = strchr(out, '\n');
        if (second)
            off = atoi(second + 1);
        /* grep -vc exits 1 when every node matches: that is the pass */
        CHECK(rc == 1 && nodes > 0 && off == 0,
              "gpt train %s: %d adam nodes, %d not with torch.optim.Adam's defaults (%s): %s",
              layouts[i], nodes, off, TORCH_ADAM_DEFAULTS, out);
    }
}

void test_optim(void)
{
    check_adam();
    check_trainer_hyper();
    check_eval();
}
