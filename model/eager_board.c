/* model/eager_board.c: a board lent to the eager device's step, read
 * second (gpt.c calls it from model_train_step).
 *
 * Beside busy programs the trial may run a step on the redo team
 * (device/redo.h) and lend the run a board of cores (cmd/train.c). On the
 * xla device a unit of the team is a lent core's compiled program; the
 * eager device compiles nothing, so here a unit is a lent core's forward
 * and backward pass, recorded and run at once on a graph of the attempt's
 * own. Core c takes the c-th of n consecutive parts of the batch, as
 * gradient accumulation's micro-batch c of n would (accum.c), and the
 * step's graph adds the cores' gradients and losses in that tree's order
 * before the all-reduce's mean and Adam: the bits of one core's step.
 *
 * An attempt reads copies taken as its step began (the weights, its
 * windows, dropout's key) and writes only its own graph, so a late
 * attempt, resumed after another finished its core, reads nothing Adam
 * or the next batch changes; it gives up at its next kernel (xla_sim.c's
 * xs_attempt_*). */
#include "model/model.h"
#include "device/redo.h"
#include "util/pool.h"
#include "util/util.h"
#include "xla_sim.h"
#include <stdlib.h>
#include <string.h>

/* A core's finished pass: its graph holds the gradients and the loss. */
struct core_pass {
    Graph *g;
    Tensor *sum[MAX_PARAMS + 1]; /* parameter i's gradient, then the loss */
    XsAttempt *run;              /* its time and kernels */
};

/* A step's inputs, kept in the ring while its attempts may run. */
struct board_job {
    Model model;   /* the step's, its weights w the copy below */
    CorePass pass; /* gpt.c's forward and backward pass */
    int precision; /* the step's graph's */
    float *w;      /* [nw] the weights as the step began */
    size_t w_cap;
    Batch part[XS_MAX_CORES]; /* core c's windows */
};

static struct board_job jobs[REDO_RING];

/* Finished passes and their graphs, for the next attempts. */
static void *kept_passes[2 * REDO_MAX_UNITS];
static Pool pass_pool = POOL_OF(kept_passes);

static struct core_pass *pass_take(void)
{
    struct core_pass *p = pool_take(&pass_pool);
    if (!p) {
        p = xcalloc(1, sizeof *p);
        p->g = g_new();
    }
    return p;
}

static void pass_give(void *pass)
{
    struct core_pass *p = pass;
    xs_attempt_free(p->run);
    p->run = NULL;
    if (!pool_give(&pass_pool, p)) {
        g_free(p->g);
        free(p);
    }
}

static void *pass_attempt(unsigned gen, int core)
{
    struct board_job *j = &jobs[gen % REDO_RING];
    struct core_pass *p = pass_take();
    Tensor *leaf[MAX_PARAMS];
    g_set_precision(p->g, j->precision);
    xs_attempt_begin(gen, core);
    j->pass(&j->model, p->g, &j->part[core], leaf, p->sum);
    if (!(p->run = xs_attempt_end())) {
        pass_give(p);
        return NULL;
    }
    return p;
}

static const RedoWork pass_work = {pass_attempt, pass_give};

/* Job gen's entry: the weights, core c's windows and the model as the
 * step begins, for n cores. */
static void board_job_set(struct board_job *j, const Model *m, const Graph *g, const Batch *b,
                    CorePass pass, int n)
{
    if (j->w_cap < m->nw) {
        free(j->w);
        j->w = xmalloc(sizeof(float) * m->nw);
        j->w_cap = m->nw;
    }
    memcpy(j->w, m->w, sizeof(float) * m->nw);
    j->model = *m;
    j->model.w = j->w;
    j->model.ncores = 1; /* each pass is one core's */
    j->model.lent = 0;
    j->pass = pass;
    j->precision = g_precision(g);
    for (int c = 0; c < n; c++) {
        Batch *part = &j->part[c];
        if (part->B != b->B / n || part->T != b->T) {
            batch_free(part);
            batch_alloc(part, b->B / n, b->T);
        }
        micro_batch(part, b, c, n, 1);
    }
}

/* The sum of parts[0..n) in gradient accumulation's tree: halves, the
 * earlier the left operand (n a power of two). */
static Tensor *accum_tree(Graph *g, Tensor **parts, int n)
{
    if (n == 1)
        return parts[0];
    return g_add_partial(g, accum_tree(g, parts, n / 2), accum_tree(g, parts + n / 2, n - n / 2));
}

void eager_board_gradients(Model *m, Graph *g, const Batch *b, CorePass pass, Tensor **sum,
                           struct core_pass **won)
{
    int n = m->ncores;
    unsigned gen = redo_begin();
    board_job_set(&jobs[gen % REDO_RING], m, g, b, pass, n);
    redo_run(gen, n, &pass_work, (void **)won);
    g_reset(g);
    g_set_example_rows(g, b->T); /* the sums stay partial, in fp32, until the all-reduce */
    for (int c = 0; c < n; c++)
        xs_attempt_report(won[c]->run, c);
    for (int i = 0; i <= m->np; i++) {
        Tensor *parts[XS_MAX_CORES];
        for (int c = 0; c < n; c++) {
            const Tensor *t = won[c]->sum[i];
            parts[c] = g_leaf(g, TK_INPUT, t->dtype, t->data, t->rows, t->cols);
        }
        sum[i] = accum_tree(g, parts, n);
    }
}

void eager_board_release(struct core_pass **won, int n)
{
    for (int c = 0; c < n; c++)
        pass_give(won[c]);
}

