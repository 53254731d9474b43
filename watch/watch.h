/* watch.h: what a training run leaves for a person to watch it by, in its
 * --out directory, written by the master alone:
 *
 *   metrics.jsonl   the run log: the config once, then a line per step and
 *                   per eval. Every field outside "time" is deterministic:
 *                   a killed and resumed run's log equals a straight run's
 *                   once "time" is dropped (a resume keeps the lines before
 *                   its step and drops the ones it repeats).
 *   loss.svg        train and test loss against steps, redrawn at each eval.
 *   events.out.tfevents.*   the same scalars for TensorBoard: TFRecord
 *                   framing (masked CRC-32C) around Event protos, written
 *                   here without a protobuf library.
 *
 * All three are rebuilt from the kept log when a run resumes; each is
 * replaced atomically (a temporary file, then a rename). gpt plot draws
 * several runs' logs on one chart. It knows nothing of the model. */
#ifndef WATCH_H
#define WATCH_H
#include <stddef.h>

typedef struct RunLog RunLog;

/* One step's figures: loss and lr are the run's; the rest goes under
 * "time" (it differs from run to run). */
typedef struct StepFigures {
    int step;
    float loss;
    double lr;
    double ms, tokens_per_s; /* this step */
    long compiles, cache_hits, host_reads; /* so far in this process */
    double slowdown, waited; /* while the machine is busy (watch/pace.h), else 0 */
} StepFigures;

/* Opens dir's log. config_json: one JSON object of the run's settings.
 * resume_step > 0 keeps the log's lines before that step (none is an
 * error only if the log is missing: then it starts afresh). NULL with err. */
RunLog *runlog_open(const char *dir, const char *config_json, int resume_step, char *err,
                    size_t elen);
void runlog_step(RunLog *l, const StepFigures *f);
/* An eval line: its test loss, the seconds the loss took (under "time")
 * and the continuation (n bytes, any bytes); with windows (else NULL), the
 * offsets where its nw test windows start in the test text. */
void runlog_eval(RunLog *l, int step, float train_loss, float test_loss, double eval_s,
                 const char *text, size_t n, const size_t *windows, int nw);
/* A line of free-form figures under "time", e.g. per-core rates. */
void runlog_note(RunLog *l, int step, const char *kind, const char *time_json);
/* Flushes and frees; 0, or -1 with err if a write failed. */
int runlog_close(RunLog *l, char *err, size_t elen);

/* Draws the logs of n run directories on one chart into out (SVG). */
int plot_runs(const char *const *dirs, int n, const char *out, char *err, size_t elen);

#endif
