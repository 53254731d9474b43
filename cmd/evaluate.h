/* cmd/evaluate.h: the eval loss of many windows, in chunks (evaluate.c),
 * so that an eval's memory stays within a training step's; and the
 * progress lines a terminal shows while an eval or a compile runs. */
#ifndef CMD_EVALUATE_H
#define CMD_EVALUATE_H
#include "gpt.h"
#include "data/text.h"
#include "cmd/flags.h"
#include "watch/trial.h"

/* The mean loss of b, as batch_loss gives it bit for bit, from forward
 * passes of `chunk` windows at a time (all at once if chunk >= b->B or
 * chunk < 1); after each, tick (may be NULL) hears the windows done. */
typedef void (*eval_tick)(int done, int total, void *ctx);
float eval_loss(Model *m, Graph *g, const Batch *b, int chunk, eval_tick tick, void *ctx);

/* An eval's progress line on stderr, once the eval has run 2 s: `on`
 * when a person watches (progress_on_stderr), `before` windows done
 * before the batch that ticks, of `total` (0: the batch's own). With
 * `threads`, each pass between ticks is timed as a unit of that thread
 * trial (`last`: the clock as the eval starts). */
struct eval_progress {
    int on, shown;
    double t0;
    long before, total;
    ThreadTrial *threads; /* each pass a unit of its trial (watch/trial.h); NULL: none */
    double last;          /* the clock at the last tick, for the trial */
    struct lent_board *board; /* the board that follows the trial's schedule, or NULL */
};
void eval_progress_tick(int done, int total, void *ctx); /* an eval_tick; ctx: the struct */
void eval_progress_clear(struct eval_progress *p);

/* The mean loss over d's test split, cut into consecutive windows of the
 * context: `batch` windows at a time give a partial mean (the last batch
 * padded with ignored windows), weighted by its real windows; each batch
 * goes through the model `chunk` windows at a time (eval_loss). p may be
 * NULL. *windows: the windows evaluated. */
double eval_split(Model *m, Graph *g, const Data *d, int batch, int chunk, long *windows,
                  struct eval_progress *p);

/* Whether carriage-return lines belong on stderr, by --live: on, off, or
 * auto (stderr is a terminal that can erase a line, and under mpirun the
 * launcher's output is a terminal too). */
int progress_on_stderr(const char *live);

/* Installs the compile hook: with `transient`, a line on stderr that
 * names each stage of a compile as it begins, cleared at its end; and a
 * compile that took log_after_s seconds or more leaves a line on stderr
 * saying how long. Call it on the one process that speaks. */
void watch_compiles(int transient, double log_after_s);

#endif
