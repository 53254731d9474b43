/* cmd/evaluate.c: the eval loss of many windows, in chunks. One forward
 * pass over an eval batch of many windows holds every window's
 * activations at once (gigabytes at GPT-2's shape). So the windows go
 * through the model `chunk` at a time, every chunk of one shape (the last
 * padded with copies of a real window), so the lazy device compiles one
 * program and reuses it. Each chunk's logits are kept; one xent over all
 * of them then gives the loss with the bits of the single pass: a row's
 * logits do not depend on the other rows in its pass, and xent sums its
 * rows' losses in row order (kernels/base.c mean_loss: one leaf, as an
 * eval records no example rows), which partial sums per chunk would
 * reorder. On a board of several simulated cores (gpt eval's lent board,
 * below) each pass's windows are split over them, and each core's rows
 * of logits are read in turn: the same rows, the same bits.
 *
 * Below: gpt eval's loss over a whole test split (eval_split), and the
 * lines a person at a terminal sees while an eval or a compile runs. */
#include "cmd/evaluate.h"
#include "cmd/pod.h"
#include "cmd/flags.h"
#include "compiler/compiler.h"
#include "compiler/graph_side.h"
#include "util/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Windows [w0, w0 + c->B) of b into c; past b's end, copies of its last. */
static void eval_chunk(Batch *c, const Batch *b, int w0)
{
    size_t T = (size_t)b->T;
    for (int i = 0; i < c->B; i++) {
        size_t from = (size_t)(w0 + i < b->B ? w0 + i : b->B - 1) * T, to = (size_t)i * T;
        memcpy(c->tok + to, b->tok + from, T * sizeof(int32_t));
        memcpy(c->pos + to, b->pos + from, T * sizeof(int32_t));
        memcpy(c->tgt + to, b->tgt + from, T * sizeof(int32_t));
        memcpy(c->row + to, b->row + from, T * sizeof(int32_t));
    }
}

float eval_loss(Model *m, Graph *g, const Batch *b, int chunk, eval_tick tick, void *ctx)
{
    int cores = g_cores(g); /* the passes' board (a tick may change it); the one pass and
                             * the xent run on one core */
    if (chunk < 1 || chunk >= b->B || chunk % cores) {
        g_set_cores(g, 1);
        float loss = batch_loss(m, g, b);
        g_set_cores(g, cores);
        return loss;
    }
    size_t V = (size_t)m->cfg.vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)b->B * (size_t)b->T * V);
    Batch c;
    batch_alloc(&c, chunk, b->T);
    for (int w0 = 0; w0 < b->B; w0 += chunk) {
        int real = b->B - w0 < chunk ? b->B - w0 : chunk;
        eval_chunk(&c, b, w0);
        g_reset(g);
        g_read_cores(g, forward_windows(m, g, &c, NULL, NULL), /* [rows,V] a core */
                     logits + (size_t)w0 * (size_t)b->T * V, (size_t)real * (size_t)b->T * V);
        if (tick)
            tick(w0 + real, b->B, ctx);
    }
    batch_free(&c);
    g_reset(g);
    cores = g_cores(g);
    g_set_cores(g, 1);
    Tensor *all = g_leaf(g, TK_INPUT, DT_F32, logits, b->B * b->T, (int)V);
    float loss = *(const float *)g_read(g, g_xent(g, all, batch_slice_leaf(g, b, b->tgt)));
    free(logits);
    g_set_cores(g, cores);
    return loss;
}

/* ---- an eval's progress line ---- */

void eval_progress_tick(int done, int total, void *ctx)
{
    struct eval_progress *p = ctx;
    double now = now_seconds(), t = now - p->t0;
    if (p->threads) { /* the pass just ended: a unit of the thread trial */
        trial_unit(p->threads, 1e3 * (now - p->last));
        if (p->board)
            lent_board_follow(p->board, p->threads);
    }
    p->last = now;
    if (!p->on || t < 2.0)
        return;
    fprintf(stderr, "\r\033[Keval %ld/%ld windows, %.0f s", p->before + done,
            p->total ? p->total : total, t);
    fflush(stderr);
    p->shown = 1;
}

void eval_progress_clear(struct eval_progress *p)
{
    if (p->shown)
        fputs("\r\033[K", stderr);
    p->shown = 0;
}

/* ---- gpt eval: a whole test split ---- */

/* Windows [w0, w0 + b->B) of the test split into b; past its end,
 * windows of zeros whose targets are ignored (-1). */
static void split_batch(Batch *b, const Data *d, long w0, long real)
{
    size_t T = (size_t)b->T;
    memset(b->tok, 0, sizeof(int32_t) * (size_t)b->B * T);
    for (size_t i = 0; i < (size_t)real * T; i++)
        b->tok[i] = d->bytes[d->n_train + (size_t)w0 * T + i];
    batch_finish(b);
    for (size_t i = (size_t)real * T; i < (size_t)b->B * T; i++)
        b->tgt[i] = -1;
}

double eval_split(Model *m, Graph *g, const Data *d, int batch, int chunk, long *windows,
                  struct eval_progress *p)
{
    int T = m->cfg.context;
    long nw = (long)((d->n - d->n_train) / (size_t)T);
    double sum = 0;
    Batch b;
    batch_alloc(&b, (int)(nw < batch ? nw : batch), T);
    if (p)
        p->total = nw;
    for (long w0 = 0; w0 < nw; w0 += b.B) {
        long real = nw - w0 < b.B ? nw - w0 : b.B;
        split_batch(&b, d, w0, real);
        if (p)
            p->before = w0;
        sum += (double)eval_loss(m, g, &b, chunk, p ? eval_progress_tick : NULL, p) *
               (double)real;
    }
    batch_free(&b);
    *windows = nw;
    return sum / (double)nw;
}

/* ---- terminals ---- */

int progress_on_stderr(const char *live)
{
    const char *term = getenv("TERM");
    if (strcmp(live, "auto"))
        return !strcmp(live, "on");
    if (!isatty(STDERR_FILENO) || (term && !strcmp(term, "dumb")))
        return 0;
    /* a rank's stderr under Open MPI is a pseudo-terminal even into a file */
    return !getenv("OMPI_COMM_WORLD_SIZE") || stdout_reaches_terminal();
}

/* ---- a compile's progress line and its log line ---- */

static int compile_transient, compile_shown;
static double compile_log_after;

/* n with a comma every three digits, as people read counts. */
static void grouped(long n, char *out, size_t size)
{
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%ld", n), o = 0;
    for (int i = 0; i < len && o + 2 < (int)size; i++) {
        if (i > 0 && digits[i - 1] != '-' && (len - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = 0;
}

static void compile_line(const struct compile_progress *p)
{
    char nodes[40];
    grouped(p->nodes, nodes, sizeof nodes);
    if (p->stage) {
        if (!compile_transient)
            return;
        fprintf(stderr, "\r\033[Kcompiling: %s (stage %d of %d), %s nodes, %.1f s", p->stage,
                p->at, p->stages, nodes, p->seconds);
        fflush(stderr);
        compile_shown = 1;
        return;
    }
    if (compile_shown)
        fputs("\r\033[K", stderr);
    compile_shown = 0;
    if (p->seconds >= compile_log_after)
        fprintf(stderr, "gpt: compiled a program of %s nodes in %.1f s\n", nodes, p->seconds);
    fflush(stderr);
}

void watch_compiles(int transient, double log_after_s)
{
    compile_transient = transient;
    compile_log_after = log_after_s;
    compile_progress_hook = compile_line;
}
