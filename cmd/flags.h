/* flags.h: the settings of every command and the flags that set them
 * (flags.c). */
#ifndef FLAGS_H
#define FLAGS_H
#include <stddef.h>
#include <stdio.h>
#include "gpt.h"
#include "graph.h"
#include "watch/trial.h"

enum { O_INT, O_REAL, O_STR, O_FLAG };

/* One flag: --name sets *ptr, of the type's C type. */
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
    int threads, bytes, top_k, metrics, naive, ckpt_every, keep, cores, num_samples;
    int vocab, streams, shuffle_buffer, verbose, profile_steps;
    int no_mlp, warmup;
    double lr, temperature, seed, dropout, min_lr;
    const char *residual, *decay, *activation;
    const char *data, *test_data, *out, *init, *prompt, *device, *ckpt, *resume, *profile;
    const char *tpu, *hbm, *precision;
    const char *config; /* --config: a file of 'flag = value' lines (flags.c) */
    int auto_resume;  /* train: --resume when --out holds a checkpoint, else a fresh run */
    const char *live; /* train: the live line, auto (where a person watches), on or off */
    int grad_accum;   /* train: micro-batches of --batch windows an optimizer step */
    int remat;        /* train: recompute each block's activations in the backward pass */
    int shard_optimizer; /* train: Adam's moments split over the pod's cores (ZeRO-1) */
    int log_eval_windows; /* train: each eval record lists its test windows' offsets */
    int redo;         /* train: the redo team's threads from the first step; 0: when tried */
};

/* Windows an optimizer step takes, all hosts together: --batch x --grad-accum. */
static inline int step_windows(const struct settings *s) { return s->batch * s->grad_accum; }

/* The reference's values: every command starts from them. */
extern const struct settings defaults;

/* The arguments that are not flags, for a command that takes some (gpt
 * shard's FILES); v has room for argc of them. After "--" every argument
 * is one. */
struct operands {
    const char **v;
    int n;
};

/* Parses argc flags of command cmd (what: its line in --help) against the
 * table o[n]; operands go to rest (NULL: a command that takes none). A
 * table with a "config" row (O_STR) reads --config FILE's 'flag = value'
 * lines too, after the command line, whose flags win. */
void parse_opts(const char *cmd, const char *what, int argc, char **argv,
                const struct opt *o, int n, struct operands *rest);
int was_given(const char *name); /* on the command line or --config, not by default */

/* Each refuses, with a usage error (exit 2), what cannot run. */
void check_prompt(const char *p, int vocab);
void apply_common_flags(const struct settings *s); /* --device, --threads, --precision */
/* "2 threads: 2 cores, quota 1.5 -> 1": the count --threads 0 chose from
 * the machine (util/threads.h), or the one given, with its reason. */
const char *threads_chosen(void);
void check_train_flags(const struct settings *s);
/* One core's run lends the redo team a board of LEND_CORES simulated cores
 * (gpt train --redo, and the busy machine's trial): why these settings
 * cannot, or NULL. The lent cores share core 0's weights and moments
 * (model_lend_cores), but the team copies the weights for each job of its
 * ring: weights, the model's (0 before it is made), are checked against
 * REDO_MAX_BYTES. A run given --hbm keeps its one core: the budget is
 * for that core's program. The programs' arenas are judged once one has run
 * (xs_redo_fits); the eager device runs no programs, its cores' passes
 * each a graph of its own (model/eager_board.c). */
#define LEND_CORES 8 /* the eighth round's best board beside busy programs */
const char *lend_problem(const struct settings *s, int hosts, size_t weights);
/* The same for gpt eval's passes and gpt sample's window steps, each of
 * `windows` windows run as one step's batch: `uneven`, the reason given
 * when they do not split over LEND_CORES, else lend_problem's. */
const char *windows_lend_problem(const struct settings *s, int windows, size_t weights,
                                 const char *uneven);
/* The simulated board of `cores` for m: its own (model_set_cores), or lent
 * to the redo team, its cores sharing core 0's weights (model_lend_cores). */
void set_board(Model *m, int cores, int lent);
/* A board beside busy programs for a command's passes (gpt eval's, gpt
 * sample's window steps past the context), as gpt train's one core lends
 * itself one (cmd/train.c): one core, or LEND_CORES lent to the redo team
 * while the thread trial runs it. Each pass's windows are split over the
 * lent cores, each core's program a unit the team may redo when a busy
 * program holds a thread off its core; any board gives the same bits. */
struct lent_board {
    Model *m;
    Graph *g;
    int lends; /* the team is offered a lent board */
};
/* The board for the next pass: lent while the trial runs the team (or
 * always, the team given: --redo). A lent board whose program the team
 * cannot take (its arenas past the team's memory, known once it has run)
 * goes back, and the team is offered no more (trial_withdraw_team). */
void lent_board_follow(struct lent_board *b, ThreadTrial *t);
/* What the settings ask that the reference model cannot be, or NULL. */
const char *reference_cannot(const struct settings *s);
int precision_of(const char *name);                   /* enum precision */
size_t parse_size(const char *flag, const char *v); /* "16G", "512M", bytes */

/* From settings to a run: the simulated board (hosts: processes training
 * together), a graph on --device, weights rounded to --precision, and the
 * metrics report of --metrics and GPT_METRICS_FILE. */
void setup_board(const struct settings *s, int hosts);
Graph *new_graph(const struct settings *s);
void round_to_precision(Model *m, const struct settings *s);
void report_metrics(const struct settings *s);
/* What the redo team did, if it ran: a line on out, after prefix. */
void report_redo(FILE *out, const char *prefix);

#endif
