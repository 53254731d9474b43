/* train.c: gpt train, the training run. A run is a struct trainer: its
 * settings, model, graph, text or corpus and generators. cmd_train reads
 * the flags, opens the data, starts or resumes (a checkpoint holds the
 * whole state: weights, Adam, step, generators, the loader's place), and
 * run_training loops: a batch, a step, now and then an eval line, a
 * checkpoint, a passage. A signal stops it at a step boundary, with a
 * checkpoint. */
#include "cmd/evaluate.h"
#include "cmd/sample.h"
#include "cmd/ckpt.h"
#include "cmd/commands.h"
#include "cmd/flags.h"
#include "cmd/pod.h"
#include "pod/error.h"
#include "cmd/rundir.h"
#include "cmd/schedule.h"
#include "data/text.h"
#include "gpt.h"
#include "data/loader.h"
#include "watch/watch.h"
#include "watch/trial.h"
#include "xla_sim.h"
#include "pod/comm.h"
#include "util/rng.h"
#include "util/util.h"
#include "util/fmath.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct trainer {
    struct settings s;
    Model model;
    Graph *g;
    Data data;             /* one text file: train [0, n_train), test the rest */
    Data test_set;         /* --test-data, whole */
    const Data *test;      /* test windows come from its [n_train, n) */
    DataSource corpus;     /* a corpus: its parts */
    LoaderSpec spec;       /* a corpus: how it is read */
    Loader *loader;        /* a corpus: its windows, made ahead */
    double t_data;         /* seconds the steps waited for data */
    RunLog *log;           /* the master's metrics.jsonl, loss.svg, event file */
    double t_rate;         /* t_steps at the last rate line */
    int rate_step;         /* and its step */
    Batch train, test_batch;
    size_t *eval_starts;     /* --log-eval-windows: test_batch's offsets in *test, else NULL */
    Rng rng_data, rng_eval;
    int tty, start;          /* start: the first step to run (resume) */
    int progress;            /* eval and compile progress lines on stderr */
    uint64_t data_hash;
    double t_start, t_steps; /* wall clock; seconds spent in training steps */
    ThreadTrial threads;     /* the steps' pace, and fewer threads when other programs
                              * slow them (watch/trial.h) */
    int cores;               /* the board's cores the run asked for (xs_cores(), but
                              * while one core lends the redo team a board: lend_board) */
    int lends;               /* one core that lends the redo team LEND_CORES */
    int own_board_steps;     /* steps run on the run's own board, not a lent one */
};

static void emit_escaped(int c, void *ctx)
{
    (void)ctx;
    if (c == '\n')
        fputs("\\n", stdout);
    else if (c < 32 || c == 127)
        printf("\\x%02x", c);
    else
        putchar(c);
}

static void clear_progress(const struct trainer *tr)
{
    if (tr->tty)
        fputs("\r\033[K", stdout);
}

/* Throughput per core, in the words of PyTorch/XLA's pod examples: Rate
 * is a replica's windows a second since the last eval line, GlobalRate
 * since the start. Every core of a board runs in the same step, so they
 * share one figure; in a pod each host's are its own. */
static void report_rates(struct trainer *tr, int step, float loss)
{
    const struct settings *s = &tr->s;
    int world = comm_size() * tr->cores, steps = step + 1 - tr->start;
    int since = step + 1 - tr->rate_step;
    double per_replica = (double)step_windows(s) / world;
    double rate = since > 0 && tr->t_steps > tr->t_rate
                      ? per_replica * since / (tr->t_steps - tr->t_rate) : 0;
    double global = steps > 0 && tr->t_steps > 0 ? per_replica * steps / tr->t_steps : 0;
    char line[256];
    snprintf(line, sizeof line, "\"rate\":%.2f,\"global_rate\":%.2f,\"replicas\":%d", rate,
             global, world);
    if (tr->log)
        runlog_note(tr->log, step, "rate", line);
    for (int c = 0; s->verbose && c < tr->cores; c++)
        printf("| Training Device=xla:%d Step=%d Loss=%.5f Rate=%.2f GlobalRate=%.2f "
               "Time=%.1fs\n", comm_rank() * tr->cores + c, step, loss, rate, global,
               now_seconds() - tr->t_start);
    tr->t_rate = tr->t_steps;
    tr->rate_step = step + 1;
}

/* The test loss of this host's share of the eval windows, in chunks of a
 * training micro-batch's windows (--batch, which --grad-accum repeats; a
 * host's share of it), so that an eval holds no more activations than a
 * training step. While the redo team runs, the chunks' windows are split
 * over the board the steps run on (lent or the run's own), each core's
 * program a unit of the team, as gpt eval's are (cmd/evaluate.c); else
 * they run on one core. */
static float test_loss_chunked(struct trainer *tr, double *seconds)
{
    const struct settings *s = &tr->s;
    struct eval_progress p = {.on = tr->progress, .t0 = now_seconds()};
    Batch share = host_share(&tr->test_batch);
    int chunk = s->batch / comm_size() > 0 ? s->batch / comm_size() : 1;
    /* the eager device's board lends its team to training steps only */
    g_set_cores(tr->g, tr->threads.redoing && g_is_lazy(tr->g) ? tr->model.ncores : 1);
    float loss = eval_loss(&tr->model, tr->g, &share, chunk, eval_progress_tick, &p);
    g_set_cores(tr->g, 1);
    eval_progress_clear(&p);
    *seconds = now_seconds() - p.t0;
    return pod_mean(loss);
}

static void eval_line(struct trainer *tr, int step, float train_loss)
{
    const struct settings *s = &tr->s;
    sample_windows(&tr->test_batch, tr->test, tr->test->n_train,
                   tr->test->n - tr->test->n_train, &tr->rng_eval, tr->eval_starts);
    double eval_s;
    float test_loss = test_loss_chunked(tr, &eval_s);
    int n = (int)strlen(s->prompt), total = n > s->eval_bytes ? n : s->eval_bytes;
    char *text = xcalloc((size_t)total + 1, 1);
    memcpy(text, s->prompt, (size_t)n);
    SampleOpts so = {.temperature = 1.0f};
    /* every rank holds the same weights and generator, so every rank draws
     * the same bytes (the master prints them): no rank waits for another */
    model_generate(&tr->model, tr->g, text, n, total, &so, &tr->rng_eval);
    clear_progress(tr);
    if (tr->log)
        runlog_eval(tr->log, step, train_loss, test_loss, eval_s, text, (size_t)total,
                    tr->eval_starts, s->eval_batch);
    report_rates(tr, step, train_loss);
    printf("step %6d | train %.4f | test %.4f | ", step, train_loss, test_loss);
    for (int i = 0; i < total; i++)
        emit_escaped((unsigned char)text[i], NULL);
    putchar('\n');
    fflush(stdout);
    free(text);
}

/* "2 threads", "1 thread", "8 cores redone by 3 threads" or "8 lent cores
 * redone by 3 threads": a schedule the thread trial runs (watch/trial.h). */
static void schedule_name(const struct trainer *tr, int schedule, char *buf, size_t n)
{
    const ThreadTrial *t = &tr->threads;
    int threads = schedule == RUN_FULL ? t->full : 1;
    if (schedule == RUN_REDO)
        snprintf(buf, n, "%d %scores redone by %d threads", tr->lends ? LEND_CORES : tr->cores,
                 tr->lends ? "lent " : "", t->redo);
    else
        snprintf(buf, n, "%d thread%s", threads, threads > 1 ? "s" : "");
}

/* --live: the live line's carriage returns and escape code belong on a
 * terminal a person watches, never in a log. auto asks whether stdout
 * reaches a terminal (under mpirun: mpirun's own stdout) that can erase a
 * line (TERM=dumb, as in Emacs's shell, cannot). */
static int want_live_line(const char *live)
{
    const char *term = getenv("TERM");
    if (strcmp(live, "auto"))
        return !strcmp(live, "on");
    return stdout_reaches_terminal() && !(term && !strcmp(term, "dumb"));
}

static void print_progress(struct trainer *tr, int step, float loss)
{
    static double last;
    double now = now_seconds();
    if (!tr->tty || now - last < 0.2)
        return;
    last = now;
    int done = step + 1, left = tr->s.steps - done, ran = done - tr->start;
    double per = tr->t_steps / ran;
    double eta = (now - tr->t_start) / ran * left;
    printf("\r\033[Kstep %d/%d | %.2f ms/step | %.0f tok/s | ETA %d:%02d | loss %.4f",
           done, tr->s.steps, per * 1e3, step_windows(&tr->s) * tr->s.seq / per,
           (int)eta / 60, (int)eta % 60, loss);
    if (tr->threads.pace.busy) {
        char how[80];
        schedule_name(tr, trial_schedule(&tr->threads), how, sizeof how);
        printf(" | busy machine: %.1fx slower, %s", tr->threads.pace.slowdown, how);
    }
    fflush(stdout);
}

/* Says, once as it starts and once as it ends, that the steps have
 * slowed because other programs want the cores (watch/pace.h), on stderr;
 * the run log's step lines carry the figures while it lasts. */
static void say_pace(struct trainer *tr, int step, int change)
{
    const Pace *p = &tr->threads.pace;
    if (!is_master())
        return;
    clear_progress(tr);
    if (change > 0)
        fprintf(stderr, "gpt: step %d: steps %.1fx slower than this run's best, its threads "
                "waited %.0f%% of the time for a core: other programs are busy on this machine "
                "(fewer of them, or --threads set to the cores they leave, restores the pace)\n",
                step, p->slowdown, 100 * p->waited);
    else
        fprintf(stderr, "gpt: step %d: back to pace (%.2fx the best)\n", step, p->slowdown);
}

/* A trial kept its schedule (watch/trial.h): say so. */
static void say_threads(struct trainer *tr, int step, const TrialNews *news)
{
    char kept[80], other[80];
    schedule_name(tr, news->schedule, kept, sizeof kept);
    schedule_name(tr, news->other, other, sizeof other);
    if (!is_master())
        return;
    clear_progress(tr);
    fprintf(stderr, "gpt: step %d: a step takes %.2f ms on %s, %.2f ms on %s: going on with "
            "%s (the other tried again from time to time)\n", step, news->ms, kept,
            news->other_ms, other, kept);
}

static void rng_hex(char *out, const Rng *r)
{
    sprintf(out, "%016llx%016llx%016llx%016llx", (unsigned long long)r->s[0],
            (unsigned long long)r->s[1], (unsigned long long)r->s[2],
            (unsigned long long)r->s[3]);
}

/* Every setting that shapes a run's state, as checkpoint metadata. A
 * resumed run must agree on all of them to continue bit for bit. */
#define MAX_META 40
struct meta {
    const char *key[MAX_META];
    char val[MAX_META][280];
    int n;
};

static void meta_add(struct meta *m, const char *key, const char *fmt, ...)
{
    va_list ap;
    if (m->n == MAX_META)
        die(1, "internal: more than %d checkpoint metadata keys", MAX_META);
    va_start(ap, fmt);
    vsnprintf(m->val[m->n], sizeof m->val[m->n], fmt, ap);
    va_end(ap);
    m->key[m->n++] = key;
}

static void run_meta(const struct trainer *tr, struct meta *m)
{
    const struct settings *s = &tr->s;
    const Config *c = &tr->model.cfg;
    meta_add(m, "format", ST_OUR_FORMAT);
    meta_add(m, "vocab", "%d", c->vocab);
    meta_add(m, "context", "%d", c->context);
    meta_add(m, "embed", "%d", c->embed);
    meta_add(m, "mlp", "%d", c->mlp);
    meta_add(m, "heads", "%d", c->heads);
    meta_add(m, "layers", "%d", c->layers);
    meta_add(m, "batch", "%d", s->batch);
    if (s->grad_accum > 1) /* absent means 1: a default run's file is as before */
        meta_add(m, "grad-accum", "%d", s->grad_accum);
    meta_add(m, "seq", "%d", s->seq);
    meta_add(m, "lr", "%.9g", s->lr);
    meta_add(m, "warmup", "%d", s->warmup);
    meta_add(m, "decay", "%s", s->decay);
    meta_add(m, "min-lr", "%.9g", s->min_lr);
    meta_add(m, "dropout", "%.9g", s->dropout);
    meta_add(m, "no-mlp", "%d", s->no_mlp);
    meta_add(m, "residual", "%s", s->residual);
    if (activation_find(s->activation)) /* absent means relu: a default run's file is as before */
        meta_add(m, "activation", "%s", s->activation);
    const char *why = reference_cannot(s);
    meta_add(m, "pytorch_reference", "%s%s", why ? "cannot load: " : "loads", why ? why : "");
    meta_add(m, "seed", "%.0f", s->seed);
    meta_add(m, "eval-every", "%d", s->eval_every);
    meta_add(m, "eval-batch", "%d", s->eval_batch);
    meta_add(m, "eval-bytes", "%d", s->eval_bytes);
    meta_add(m, "prompt", "%s", s->prompt);
    meta_add(m, "precision", "%s", s->precision);
    meta_add(m, "data_fnv1a64", "%016llx", (unsigned long long)tr->data_hash);
    if (tr->corpus.parts.n) {
        meta_add(m, "streams", "%d", s->streams);
        meta_add(m, "shuffle-buffer", "%d", s->shuffle_buffer);
    }
}

/* Every stream's state, gathered from the hosts that read them:
 * [streams][loader_state_size] bytes. */
static unsigned char *gather_streams(const struct trainer *tr, size_t *bytes)
{
    size_t mine = (size_t)(tr->s.streams / comm_size()) * loader_state_size(&tr->spec);
    unsigned char *local = xcalloc(mine, 1), *all = xcalloc(mine, (size_t)comm_size());
    loader_state(tr->loader, local);
    comm_allgather(local, all, mine);
    free(local);
    *bytes = mine * (size_t)comm_size();
    return all;
}

static void save_checkpoint(struct trainer *tr, int steps_done)
{
    struct meta m = {.n = 0};
    char path[4096], err[512];
    size_t stream_bytes = 0;
    unsigned char *streams = !tr->spec.text ? gather_streams(tr, &stream_bytes) : NULL;
    float *moments = ckpt_gather_moments(&tr->model); /* NULL unless sharded */
    if (!is_master()) {
        free(streams);
        free(moments);
        return;
    }
    run_meta(tr, &m);
    meta_add(&m, "step", "%d", steps_done);
    if (tr->spec.text) /* where the draws were after the last step taken */
        tr->rng_data = loader_text_rng(tr->loader);
    meta_add(&m, "rng_data", "");
    rng_hex(m.val[m.n - 1], &tr->rng_data);
    meta_add(&m, "rng_eval", "");
    rng_hex(m.val[m.n - 1], &tr->rng_eval);
    const char *val[MAX_META];
    for (int i = 0; i < m.n; i++)
        val[i] = m.val[i];
    ckpt_name(path, sizeof path, tr->s.out, steps_done);
    StWriter w = {{0}, {0}};
    ckpt_put_moments(&w, &tr->model, moments);
    if (streams) /* where every data stream is: a resume continues mid-part */
        st_add(&w, "_gpt.loader", ST_U8, 2,
               (int64_t[]){tr->s.streams, (int64_t)loader_state_size(&tr->spec)}, streams,
               stream_bytes);
    free(streams);
    int failed = st_write(&w, path, m.key, val, m.n, err, sizeof err);
    free(moments);
    if (failed)
        die(1, "%s", err);
    prune_ckpts(tr->s.out, tr->s.keep, steps_done);
    clear_progress(tr);
    printf("saved %s\n", path);
    fflush(stdout);
}

static void parse_rng(Rng *r, const char *hex, const char *path)
{
    char part[17];
    for (int i = 0; i < 4; i++) {
        if (!hex || strlen(hex) != 64)
            die_all(1, "%s: bad random generator state in the metadata", path);
        memcpy(part, hex + 16 * i, 16);
        part[16] = 0;
        r->s[i] = strtoull(part, NULL, 16);
    }
}

/* Keys a checkpoint of an older gpt lacks, and the value it then meant. */
static const char *older_default(const char *key)
{
    static const char *const table[][2] = {
        {"warmup", "0"}, {"decay", "none"}, {"min-lr", "0"}, {"dropout", "0"},
        {"no-mlp", "0"}, {"residual", "twice"}, {"pytorch_reference", "loads"},
        {"grad-accum", "1"}, {"activation", "relu"}};
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(key, table[i][0]))
            return table[i][1];
    return NULL;
}

/* The keys a run writes only away from their default (older_default's
 * value): absent from this run's metadata, they hold the default, which
 * a flag given now must not impose on a checkpoint that has another. */
static void check_resume_sparse(const struct meta *now, const StFile *f, const char *path)
{
    static const char *const sparse[] = {"grad-accum", "activation"};
    for (size_t k = 0; k < sizeof sparse / sizeof *sparse; k++) {
        const char *key = sparse[k], *was = st_meta(f, key), *def = older_default(key);
        int written = 0;
        for (int i = 0; i < now->n; i++)
            written |= !strcmp(now->key[i], key);
        if (!written && was && strcmp(was, def) && was_given(key))
            die_all(2, "--%s %s conflicts with the checkpoint's %s (%s)", key, def, was, path);
    }
}

/* A resumed run takes every state-shaping setting from its checkpoint; a
 * flag the user gave that disagrees is an error naming both values. */
static void check_resume_flags(const struct trainer *tr, const StFile *f, const char *path)
{
    struct meta now = {.n = 0};
    run_meta(tr, &now);
    for (int i = 1; i < now.n; i++) {
        const char *key = now.key[i], *was = st_meta(f, key);
        if (!was)
            was = older_default(key); /* written before the key existed */
        if (!was)
            die_all(1, "%s: checkpoint lacks '%s' in its metadata", path, key);
        if (!strcmp(was, now.val[i]))
            continue;
        if (!strcmp(key, "data_fnv1a64"))
            die_all(1, "%s: --data is not the file this run was trained on", path);
        if (was_given(key))
            die_all(2, "--%s %s conflicts with the checkpoint's %s (%s)", key, now.val[i], was,
                    path);
    }
    check_resume_sparse(&now, f, path);
}

static void set_from_meta(struct settings *s, const StFile *f)
{
    int *ints[] = {&s->context, &s->embed, &s->mlp, &s->heads, &s->layers, &s->batch,
                   &s->seq, &s->eval_every, &s->eval_batch, &s->eval_bytes, &s->vocab,
                   &s->streams, &s->shuffle_buffer, &s->grad_accum};
    const char *keys[] = {"context", "embed", "mlp", "heads", "layers", "batch",
                          "seq", "eval-every", "eval-batch", "eval-bytes", "vocab",
                          "streams", "shuffle-buffer", "grad-accum"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (st_meta(f, keys[i]) && !was_given(keys[i]))
            *ints[i] = atoi(st_meta(f, keys[i]));
    if (st_meta(f, "lr") && !was_given("lr"))
        s->lr = atof(st_meta(f, "lr"));
    if (st_meta(f, "warmup") && !was_given("warmup"))
        s->warmup = atoi(st_meta(f, "warmup"));
    if (st_meta(f, "min-lr") && !was_given("min-lr"))
        s->min_lr = atof(st_meta(f, "min-lr"));
    if (st_meta(f, "dropout") && !was_given("dropout"))
        s->dropout = atof(st_meta(f, "dropout"));
    if (st_meta(f, "no-mlp") && !was_given("no-mlp"))
        s->no_mlp = atoi(st_meta(f, "no-mlp"));
    if (st_meta(f, "decay") && !was_given("decay"))
        s->decay = st_meta(f, "decay");
    if (st_meta(f, "residual") && !was_given("residual"))
        s->residual = st_meta(f, "residual");
    if (st_meta(f, "activation") && !was_given("activation"))
        s->activation = st_meta(f, "activation");
    if (st_meta(f, "seed") && !was_given("seed"))
        s->seed = atof(st_meta(f, "seed"));
    if (st_meta(f, "prompt") && !was_given("prompt"))
        s->prompt = st_meta(f, "prompt");
    if (st_meta(f, "precision") && !was_given("precision"))
        s->precision = st_meta(f, "precision");
}

/* A file of ours that a resume can continue from. */
static int is_training_ckpt(const StFile *f)
{
    const char *fmt = st_meta(f, "format");
    return fmt && !strcmp(fmt, ST_OUR_FORMAT) && st_meta(f, "step");
}

/* --auto-resume, for a babysitter that reruns one command until it exits 0
 * (Composer's autoresume, Lightning's ckpt_path="last"): --resume when
 * --out holds a checkpoint, a fresh run when it holds none. The master
 * decides, as only it writes --out. --init seeds the fresh run alone: a
 * checkpoint holds the weights. */
static void decide_auto_resume(struct settings *s)
{
    static int steps[MAX_CKPTS];
    need(!s->resume, "--auto-resume and --resume exclude each other (--auto-resume resumes "
         "--out's newest checkpoint when there is one)");
    int found = is_master() && list_ckpts(s->out, steps, MAX_CKPTS) > 0;
    comm_broadcast(&found, sizeof found, 0);
    if (found) {
        s->resume = "";
        s->init = NULL;
    }
}

/* --auto-resume's checkpoint: the newest in dir that loads whole. Writes
 * are atomic (a temporary file, fsynced, renamed), so a kill never leaves
 * half a checkpoint; only harm from outside (a disk, a copy cut short)
 * can. Then the checkpoint before it is taken, with a warning: the run
 * replays the same steps bit for bit, where an error would have the
 * babysitter fail on every try. Returns 0, or -1 when none loads. */
static int load_newest_whole(const char *dir, StFile *f, char *path, size_t n, char *err,
                             size_t elen)
{
    static int steps[MAX_CKPTS];
    char why[512];
    int count = list_ckpts(dir, steps, MAX_CKPTS);
    for (int i = 0; i < count; i++) {
        ckpt_name(path, n, dir, steps[i]);
        if (!st_load(f, path, why, sizeof why)) { /* damaged or truncated: refused */
            if (is_training_ckpt(f))
                return 0;
            snprintf(why, sizeof why, "not a gpt training checkpoint");
        }
        st_free(f);
        fprintf(stderr, "gpt: %s: %s; --auto-resume passes it over\n", path, why);
    }
    snprintf(path, n, "%s", dir);
    snprintf(err, elen, "none of its %d checkpoints loads (the lines above say why)", count);
    return -1;
}

/* The checkpoint to resume, opened before the flags are checked because it
 * supplies their values. Kept open: the prompt points into it. The master
 * reads it and sends it to the other ranks. */
static void open_resume(struct trainer *tr, StFile *f, char *path, size_t n)
{
    char err[512];
    int failed = 0;
    if (is_master() && tr->s.auto_resume) {
        failed = load_newest_whole(tr->s.out, f, path, n, err, sizeof err);
    } else if (is_master()) {
        resolve_ckpt(*tr->s.resume ? tr->s.resume : tr->s.out, path, n);
        failed = st_load(f, path, err, sizeof err);
    }
    comm_broadcast(path, n, 0);
    if (share_from_master(f, failed, err, sizeof err))
        die(1, "%s: %s", path, err);
    if (!is_training_ckpt(f))
        die_all(1, "%s: not a gpt training checkpoint (no format or step in the metadata)", path);
    set_from_meta(&tr->s, f);
}

static void resume_state(struct trainer *tr, const StFile *f, const char *path)
{
    char err[512];
    check_resume_flags(tr, f, path);
    if (ckpt_load_weights(&tr->model, f, 1, err, sizeof err))
        die_all(1, "%s: %s", path, err);
    tr->start = atoi(st_meta(f, "step"));
    tr->model.t = tr->start;
    parse_rng(&tr->rng_data, st_meta(f, "rng_data"), path);
    parse_rng(&tr->rng_eval, st_meta(f, "rng_eval"), path);
    if (tr->start > tr->s.steps)
        die_all(2, "%s is at step %d, past --steps %d", path, tr->start, tr->s.steps);
}

/* What --auto-resume chose, said once the flags are accepted (an error
 * stays one line). A run already at --steps is done: a babysitter reruns
 * its command until it exits 0, so this rerun says so and returns 1, to
 * exit 0 at once, with no final passage again and --out left as it is. */
static int auto_resumed_done(struct trainer *tr, StFile *rf, const char *path)
{
    const struct settings *s = &tr->s;
    if (!s->auto_resume)
        return 0;
    if (!s->resume) {
        printf("gpt: --auto-resume: %s holds no checkpoint: a fresh run\n", s->out);
        return 0;
    }
    if (tr->start < s->steps) {
        printf("gpt: --auto-resume: continuing from %s (step %d)\n", path, tr->start);
        return 0;
    }
    printf("gpt: %s is step %d of --steps %d: the run is done\n", path, tr->start, s->steps);
    data_source_free(&tr->corpus);
    model_free(&tr->model);
    free(tr->data.bytes);
    free(tr->test_set.bytes);
    st_free(rf);
    return 1;
}

static void init_weights(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    Config c = {.vocab = s->vocab, .context = s->context, .embed = s->embed, .mlp = s->mlp,
                .heads = s->heads, .layers = s->layers, .no_mlp = s->no_mlp,
                .residual_once = !strcmp(s->residual, "once"), .dropout = (float)s->dropout,
                .activation = activation_find(s->activation)};
    model_init(&tr->model, &c, (uint64_t)s->seed);
    rng_seed(&tr->rng_data, (uint64_t)s->seed, RNG_DATA);
    rng_seed(&tr->rng_eval, (uint64_t)s->seed, RNG_EVAL);
    if (!s->init)
        return;
    StFile f;
    char err[512];
    if (load_on_master(&f, s->init, err, sizeof err) ||
        ckpt_load_weights(&tr->model, &f, 0, err, sizeof err))
        die(1, "%s: %s", s->init, err);
    st_free(&f);
}

/* SIGINT and SIGTERM finish the current step, save, and exit 128+signal. */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The signal that stops the run, agreed by every host (0: go on): a host
 * that stopped alone would leave the others waiting in an all-reduce. */
static int agreed_stop(void)
{
    if (comm_size() == 1)
        return stop_signal;
    float stops = stop_signal != 0;
    comm_all_reduce(&stops, 1, NULL);
    return stops == 0 ? 0 : stop_signal ? stop_signal : SIGTERM;
}

/* The step's windows, from the loader's thread, which made them ahead:
 * the whole batch drawn from the text in memory (every host draws the
 * same), or this host's share of a corpus's streams. */
static void next_batch(struct trainer *tr, Batch *share)
{
    char err[1024];
    double waited;
    const unsigned char *rows = loader_next(tr->loader, &waited, err, sizeof err);
    if (!rows)
        die(1, "%s", err);
    Batch *b = tr->spec.text ? &tr->train : share;
    for (size_t i = 0; i < (size_t)b->B * (size_t)b->T; i++)
        b->tok[i] = rows[i];
    batch_finish(b);
    tr->t_data += waited;
}

/* --profile's file; in a pod, host h > 0 writes FILE.rank<h> beside it. */
static void write_timeline(const struct settings *s)
{
    char path[4200];
    if (is_master())
        snprintf(path, sizeof path, "%s", s->profile);
    else
        snprintf(path, sizeof path, "%s.rank%d", s->profile, comm_rank());
    if (xs_timeline_write(path))
        die(1, "%s: cannot write the --profile timeline (%s)", path, strerror(errno));
    if (is_master())
        printf("gpt: wrote the timeline of %d steps to %s (Perfetto or chrome://tracing)\n",
               s->profile_steps, path);
}

/* One core's run lends the redo team a board of LEND_CORES while the team
 * runs: the cores' programs are the team's units, and any core count gives
 * the same bits. The lent cores share core 0's weights and moments
 * (model_lend_cores); the board returns when the team stops. */
static void lend_board(struct trainer *tr, int lend)
{
    set_board(&tr->model, lend ? LEND_CORES : tr->cores, lend);
}

/* The redo team for the trial to try, where one core may lend it a board
 * (lend_problem): known before the first step. */
static void offer_lent_team(struct trainer *tr)
{
    tr->lends = tr->cores == 1 && !lend_problem(&tr->s, comm_size(), tr->model.nw);
    if (tr->lends && tr->threads.full > 1)
        tr->threads.redo = trial_team(&tr->threads, REDO_MAX_THREADS);
}

/* After the first step, which compiled the program: the redo team for the
 * trial to try where there are cores' programs enough to share out and
 * memory for their attempts; or, given by --redo, a word if it cannot
 * run. */
static void offer_redo(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    if (s->redo && !xs_redo_fits() && g_is_lazy(tr->g) && is_master())
        fprintf(stderr, "gpt: --redo %d: the team's arenas and copies would pass 1 GiB; the "
                "cores' programs run without it\n", s->redo);
    /* a lent board's program has not run yet: withdraw_lent_team judges it once it has */
    if (!s->redo && !tr->lends && tr->cores >= REDO_MIN_UNITS && xs_redo_fits() &&
        tr->threads.full > 1)
        tr->threads.redo = trial_team(&tr->threads, REDO_MAX_THREADS);
}

/* A run that starts beside busy programs of its own session runs the
 * offered team at once (trial_start_team), where the first window's trial
 * would have tried it next: on one core from the first step, so that the
 * lent board's program is the only one compiled; on a board of its own
 * from the second, once the first has shown the team's memory fits. A pod
 * keeps its trial: its ranks on one host are one another's busy
 * programs. */
static void start_team(struct trainer *tr)
{
    ThreadTrial *t = &tr->threads;
    if (!t->started_shared || !t->redo || t->redoing || t->fixed || comm_size() > 1)
        return;
    trial_start_team(t, t->redo);
    xs_set_redo(t->redo);
    lend_board(tr, tr->lends);
    char how[80];
    schedule_name(tr, RUN_REDO, how, sizeof how);
    if (is_master())
        fprintf(stderr, "gpt: busy programs of this session share the cores: starting on %s "
                "(%d threads tried once they are gone)\n", how, t->full);
}

/* A lent board whose programs the team cannot take (their arenas and
 * copies past 1 GiB, known once the board's program has run): the team is
 * offered no more, and the board returns. */
static void withdraw_lent_team(struct trainer *tr)
{
    /* the eager device's board compiles nothing: lend_problem judged its copies */
    if (!tr->lends || xs_cores() != LEND_CORES || xs_redo_fits() || !g_is_lazy(tr->g))
        return;
    tr->lends = 0;
    if (tr->threads.fixed && is_master())
        fprintf(stderr, "gpt: --redo %d: the team's arenas and copies would pass 1 GiB; the "
                "step runs on one core without it\n", tr->s.redo);
    trial_withdraw_team(&tr->threads);
    lend_board(tr, 0);
}

static void train_loop(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    Batch share = host_share(&tr->train);
    trial_start(&tr->threads);
    if (s->redo) { /* the redo team given: no trial */
        tr->threads.redo = s->redo;
        tr->threads.redoing = tr->threads.fixed = 1;
        tr->lends = tr->cores == 1;
        const char *why = tr->lends ? lend_problem(s, comm_size(), tr->model.nw) : NULL;
        if (why) /* flags.c checked all but the weights' size */
            die(2, "--redo on one core lends the team a board of %d cores, but %s", LEND_CORES,
                why);
        xs_set_redo(s->redo);
        lend_board(tr, tr->lends);
    } else {
        if (tr->threads.started_one && is_master())
            fprintf(stderr, "gpt: busy programs of other sessions share the cores with this "
                    "one's session, whatever its threads: starting on 1 thread (%d tried again "
                    "once a core is idle)\n", tr->threads.full);
        offer_lent_team(tr);
        start_team(tr);
    }
    for (int step = tr->start; step < s->steps; step++) {
        if (s->profile && step == tr->start)
            xs_timeline_start();
        if (s->profile && step == tr->start + s->profile_steps)
            write_timeline(s);
        next_batch(tr, &share);
        double t0 = now_seconds();
        double lr = rate_at(s, step);
        tr->own_board_steps += xs_cores() == tr->cores;
        float loss = model_train_step(&tr->model, tr->g, &share, (float)lr);
        double dt = now_seconds() - t0;
        tr->t_steps += dt;
        TrialNews news = trial_unit(&tr->threads, dt * 1e3);
        if (step == tr->start) {
            offer_redo(tr);
            start_team(tr);
        }
        withdraw_lent_team(tr);
        xs_set_redo(tr->threads.redoing ? tr->threads.redo : 0);
        lend_board(tr, tr->lends && tr->threads.redoing);
        if (news.pace)
            say_pace(tr, step, news.pace);
        if (news.kept)
            say_threads(tr, step, &news);
        const Pace *pace = &tr->threads.pace;
        int busy = pace->busy;
        if (tr->log)
            runlog_step(tr->log, &(StepFigures){step, loss, lr, dt * 1e3,
                                                step_windows(s) * s->seq / dt, xs_counter(C_UNCACHED),
                                                xs_counter(C_CACHED), xs_counter(C_HOST_READ),
                                                busy ? pace->slowdown : 0,
                                                busy ? pace->waited : 0});
        if (!isfinite(loss))
            die_all(1, "training diverged at step %d (loss %g); try a smaller --lr", step, loss);
        if (step % s->eval_every == 0)
            eval_line(tr, step, loss);
        print_progress(tr, step, loss);
        if ((step + 1) % s->ckpt_every == 0 && step + 1 < s->steps)
            save_checkpoint(tr, step + 1);
        int stop = agreed_stop();
        if (stop) {
            save_checkpoint(tr, step + 1);
            clear_progress(tr);
            if (is_master())
                fprintf(stderr, "gpt: stopped by signal %d after step %d; --resume continues\n",
                        stop, step + 1);
            exit_planned(128 + stop);
        }
    }
}

static void final_passage(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    if (!is_master())
        return;
    int n = (int)strlen(s->prompt), total = n > s->final_bytes ? n : s->final_bytes;
    char *text = xcalloc((size_t)total + 1, 1);
    memcpy(text, s->prompt, (size_t)n);
    SampleOpts so = {.temperature = 1.0f};
    Rng r; /* its own stream: a resumed run's state must not depend on it */
    rng_seed(&r, (uint64_t)s->seed, RNG_FINAL);
    model_generate(&tr->model, tr->g, text, n, total, &so, &r);
    clear_progress(tr);
    /* every byte, as gpt sample writes it: %s would end the passage at
     * the first 0 byte the sampler draws */
    putchar('\n');
    fwrite(text, 1, (size_t)total, stdout);
    fputs("\n\n", stdout);
    free(text);
}

/* A fresh run into a directory of another run's checkpoints would replace
 * them step by step; the user must say which they mean. */
static void refuse_overwrite(const struct settings *s)
{
    static int steps[MAX_CKPTS];
    if (!s->resume && list_ckpts(s->out, steps, MAX_CKPTS) > 0)
        die(2, "%s already holds checkpoints (newest ckpt-%08d); --resume or --auto-resume "
            "continues that run, or choose another --out", s->out, steps[0]);
}

/* Each host's threads (and why: the ranks sharing its cores), its
 * ms/step, its part spent in the cross-host all-reduce, and the bytes it
 * sent and received a step: a straggler shows as the host that waits
 * least (the others wait for it). */
static void report_hosts(double step_seconds, int steps)
{
    enum { MS, WAIT, SENT, RECEIVED, FIGURES };
    struct host_report {
        double f[FIGURES];
        char threads[160]; /* threads_chosen(): "1 thread: 2 cores, 2 ranks on this host -> 1" */
    } mine, all[COMM_MAX_RANKS];
    double per = steps > 0 ? steps : 1;
    if (comm_size() == 1)
        return;
    memset(&mine, 0, sizeof mine);
    mine.f[MS] = step_seconds / per;
    mine.f[WAIT] = xs_metric_sum(M_HOST_ALL_REDUCE) / per;
    mine.f[SENT] = (double)xs_counter(C_HOST_SENT_BYTES) / per;
    mine.f[RECEIVED] = (double)xs_counter(C_HOST_RECEIVED_BYTES) / per;
    snprintf(mine.threads, sizeof mine.threads, "%s", threads_chosen());
    comm_allgather(&mine, all, sizeof mine);
    for (int r = 0; r < comm_size(); r++) {
        const double *f = all[r].f;
        printf("gpt: rank %d: %s; %.2f ms/step, %.2f of them in the cross-host all-reduce; "
               "%.0f bytes sent, %.0f received a step\n", r, all[r].threads, f[MS] * 1e3,
               f[WAIT] * 1e3, f[SENT], f[RECEIVED]);
    }
}

/* ---- train: data ---- */

/* One text file is read whole (the reference's way); a corpus is streamed.
 * The fingerprint the checkpoint keeps covers the file's bytes, or a
 * corpus's part names, and the test set's bytes. */
static void open_data(struct trainer *tr)
{
    struct settings *s = &tr->s;
    char err[1024];
    if (!is_corpus(s->data)) {
        load_data(&tr->data, s->data, s->seq, s->vocab, !s->test_data);
        tr->data_hash = fnv1a64(tr->data.bytes, tr->data.n);
    } else {
        need(s->test_data != NULL, "--data '%s' is a corpus, streamed in parts; give its "
             "test set with --test-data", s->data);
        if (data_source_open(&tr->corpus, s->data, err, sizeof err))
            die(1, "%s", err);
        tr->data_hash = FNV1A64_START;
        for (int i = 0; i < tr->corpus.parts.n; i++) {
            const char *name = tr->corpus.parts.path[i];
            tr->data_hash = fnv1a64_more(tr->data_hash, (const unsigned char *)name,
                                         strlen(name) + 1);
        }
    }
    tr->test = &tr->data;
    if (s->test_data) {
        load_corpus(&tr->test_set, s->test_data, s->seq, s->vocab);
        tr->data_hash = fnv1a64_more(tr->data_hash, tr->test_set.bytes, tr->test_set.n);
        tr->test = &tr->test_set;
    }
}

/* The corpus's streams, split over the hosts: each host reads its own. */
static void plan_streams(struct trainer *tr)
{
    struct settings *s = &tr->s;
    int parts = tr->corpus.parts.n, hosts = comm_size();
    if (!s->streams)
        s->streams = loader_default_streams(parts, step_windows(s));
    need(s->streams <= parts, "--streams %d needs as many parts; '%s' has %d", s->streams,
         s->data, parts);
    need(s->streams % hosts == 0, "'%s' gives %d data streams (%d parts), which do not split "
         "over %d hosts: each host reads parts of its own; add parts or set --streams",
         s->data, s->streams, parts, hosts);
    int S = s->streams;
    tr->spec = (LoaderSpec){.T = s->seq, .B = step_windows(s), .streams = S,
                            .first = comm_rank() * (S / hosts), .count = S / hosts,
                            .buffer = s->shuffle_buffer, .vocab = s->vocab,
                            .seed = (uint64_t)s->seed};
}

static void start_loader(struct trainer *tr, const StFile *rf, const char *path)
{
    char err[1024];
    const struct settings *s = &tr->s;
    const unsigned char *state = NULL;
    if (!tr->corpus.parts.n) /* one text file: random windows of its train split */
        tr->spec = (LoaderSpec){.T = s->seq, .B = step_windows(s), .streams = 1, .count = 1,
                                .vocab = s->vocab, .seed = (uint64_t)s->seed,
                                .text = tr->data.bytes, .text_len = tr->data.n_train,
                                .rng = tr->rng_data};
    size_t size = loader_state_size(&tr->spec);
    if (rf && !tr->spec.text) {
        const StEntry *e = st_find(rf, "_gpt.loader");
        if (!e || e->dtype != ST_U8 || e->ndim != 2 || e->shape[0] != tr->s.streams ||
            e->shape[1] != (int64_t)size)
            die_all(1, "%s: no data loader state for %d streams of %zu bytes (was the run "
                    "trained with other --seq, --streams or --shuffle-buffer?)", path,
                    tr->s.streams, size);
        state = (const unsigned char *)st_data(rf, e) + (size_t)tr->spec.first * size;
    }
    tr->loader = loader_start(&tr->spec, &tr->corpus.parts, state, err, sizeof err);
    if (!tr->loader)
        die(1, "%s", err);
}

static void describe_streams(const struct trainer *tr)
{
    const LoaderSpec *sp = &tr->spec;
    int parts = tr->corpus.parts.n;
    printf("gpt: data: %d parts in %d streams (an epoch: %d%s parts a stream), %d windows a "
           "step from each, a shuffle buffer of %d windows (%.2f MiB) each\n", parts,
           sp->streams, parts / sp->streams, parts % sp->streams ? " or 1 more" : "",
           sp->B / sp->streams, sp->buffer, (double)sp->buffer * sp->T / 1048576.0);
    if (comm_size() > 1)
        printf("gpt: data: host h reads streams %d*h .. %d*h+%d (part i of an epoch's "
               "order: stream i mod %d)\n", sp->count, sp->count, sp->count - 1, sp->streams);
}

/* What each stream read: documents and bytes in all and in its last
 * whole epoch, so that a short corpus is never a silent surprise. */
static void report_streams(const struct trainer *tr)
{
    if (tr->spec.text)
        return;
    int mine = tr->spec.count;
    StreamStats *local = xcalloc((size_t)mine, sizeof *local);
    StreamStats *all = xcalloc((size_t)tr->spec.streams, sizeof *all);
    for (int i = 0; i < mine; i++)
        local[i] = loader_stats(tr->loader, i);
    comm_allgather(local, all, sizeof *local * (size_t)mine);
    for (int i = 0; i < tr->spec.streams; i++) {
        const StreamStats *st = &all[i];
        printf("gpt: data stream %d: %llu documents, %llu bytes read; epochs done: %llu (of %d "
               "parts)", i, (unsigned long long)st->docs, (unsigned long long)st->bytes,
               (unsigned long long)st->epochs, st->parts);
        if (st->epochs)
            printf(", the last %llu documents, %llu bytes",
                   (unsigned long long)st->epoch_docs, (unsigned long long)st->epoch_bytes);
        putchar('\n');
    }
    free(local);
    free(all);
}

/* The master's run log in --out: the settings once (as the checkpoint
 * records them), then the steps. A resumed run keeps the steps before its
 * own. */
static void open_run_log(struct trainer *tr)
{
    struct meta m = {.n = 0};
    char cfg[8192] = "", err[1024];
    if (!is_master())
        return;
    run_meta(tr, &m);
    size_t n = 0;
    n += (size_t)snprintf(cfg + n, sizeof cfg - n, "\"parameters\":%zu,\"world_size\":%d",
                          tr->model.nw, comm_size() * xs_cores());
    for (int i = 0; i < m.n && n < sizeof cfg; i++) {
        n += (size_t)snprintf(cfg + n, sizeof cfg - n, ",\"%s\":\"", m.key[i]);
        for (const char *c = m.val[i]; *c && n + 8 < sizeof cfg; c++)
            n += (size_t)snprintf(cfg + n, sizeof cfg - n, *c == '"' || *c == '\\' ? "\\%c"
                                  : (unsigned char)*c < 32 || (unsigned char)*c > 126 ? "\\u%04x"
                                  : "%c", (unsigned char)*c);
        n += (size_t)snprintf(cfg + n, sizeof cfg - n, "\"");
    }
    tr->log = runlog_open(tr->s.out, cfg, tr->start, err, sizeof err);
    if (!tr->log)
        die(1, "%s", err);
}

/* --metrics: the memory plan's peak, the biggest program's arena per
 * core (the training step's), and what --remat does or would do to it.
 * The plan is the run's own board's: a lent core's program holds
 * 1/LEND_CORES of the batch, so a run whose every step was lent never
 * planned its own step, and says so rather than give a figure that its own
 * board would pass (the figure --hbm is chosen by). */
static void report_plan_peak(const struct trainer *tr)
{
    struct compile_stats st;
    if (!tr->s.metrics || !g_compile_stats(tr->g, &st))
        return;
    if (!tr->own_board_steps && tr->start < tr->s.steps) {
        printf("gpt: memory plan: every step ran on a board of %d cores lent to the redo "
               "team (%d of the batch's %d windows a core), so the plan of the run's own core "
               "was not made (--threads 1 makes it)\n", LEND_CORES, tr->s.batch / LEND_CORES,
               tr->s.batch);
        return;
    }
    printf("gpt: memory plan: peak arena %.2f MiB per core, --remat %s", st.peak_arena / 1048576.0,
           tr->s.remat ? "on\n" : "off");
    if (!tr->s.remat && st.peak_remat_arena)
        printf(" (with it, an estimated %.2f MiB)\n", st.peak_remat_arena / 1048576.0);
    else if (!tr->s.remat)
        putchar('\n');
}

static void run_training(struct trainer *tr)
{
    const struct settings *s = &tr->s;
    batch_alloc(&tr->train, step_windows(s), s->seq);
    batch_alloc(&tr->test_batch, s->eval_batch, s->seq);
    if (s->log_eval_windows)
        tr->eval_starts = xcalloc((size_t)s->eval_batch, sizeof *tr->eval_starts);
    tr->g = new_graph(s);
    tr->tty = want_live_line(s->live);
    tr->progress = is_master() && progress_on_stderr(s->live);
    if (is_master()) /* a compile of GPT-2's size takes seconds: say so */
        watch_compiles(tr->progress, 1.0);
    printf("gpt: %zu parameters, %s device, %s, %s kernels, %s; ", tr->model.nw, s->device,
           s->precision, isa_name(isa_get()), threads_chosen());
    if (!tr->spec.text)
        printf("%d parts streamed / %zu test bytes\n", tr->corpus.parts.n,
               tr->test->n - tr->test->n_train);
    else
        printf("%zu train / %zu test bytes\n", tr->data.n_train, tr->test->n - tr->test->n_train);
    if (!tr->spec.text)
        describe_streams(tr);
    int hosts = comm_size(), world = hosts * xs_cores();
    if (xs_cores() > 1 || s->tpu)
        printf("gpt: %s: %d cores (xla:0..xla:%d), %d windows each, %.1f GiB HBM per core\n",
               xs_device_name(), xs_cores(), xs_cores() - 1, s->batch / world,
               (double)xs_hbm() / 1073741824.0);
    if (hosts > 1)
        printf("gpt: pod of %d hosts x %d cores over %s: world size %d (ordinals 0..%d), "
               "master ordinal 0\n", hosts, xs_cores(), comm_name(), world, world - 1);
    if (s->grad_accum > 1)
        printf("gpt: gradient accumulation: %d micro-batches of %d windows, one optimizer "
               "step of %d windows (%d tokens)\n", s->grad_accum, s->batch, step_windows(s),
               step_windows(s) * s->seq);
    tr->t_start = now_seconds();
    tr->rate_step = tr->start;
    open_run_log(tr);
    train_loop(tr);
    xs_set_redo(0); /* the team's threads joined */
    lend_board(tr, 0);
    if (tr->start < s->steps)
        save_checkpoint(tr, s->steps);
    if (s->profile && s->steps - tr->start <= s->profile_steps)
        write_timeline(s);
    report_streams(tr);
    report_hosts(tr->t_steps, s->steps - tr->start); /* the last collective */
    final_passage(tr);
    int steps = s->steps - tr->start;
    if (steps > 0)
        printf("%.2f ms/step over %d steps; the steps waited %.4f ms/step for data\n",
               tr->t_steps * 1e3 / steps, steps, tr->t_data * 1e3 / steps);
    report_redo(stdout, "");
    report_metrics(s);
    report_plan_peak(tr);
    char err[1024];
    if (runlog_close(tr->log, err, sizeof err))
        die(1, "%s", err);
    loader_stop(tr->loader);
    data_source_free(&tr->corpus);
    g_free(tr->g);
    batch_free(&tr->train);
    batch_free(&tr->test_batch);
    free(tr->eval_starts);
    model_free(&tr->model);
    free(tr->data.bytes);
    free(tr->test_set.bytes);
}

/* gpt train once its flags are read: set up (fresh, or from a checkpoint),
 * train, save. */
static int start_run(struct trainer *tr)
{
    struct settings *s = &tr->s;
    catch_signals(); /* early: a signal during set-up still ends in a checkpoint */
    StFile rf = {0};
    char rpath[4096];
    /* --out's lock before its checkpoints are read: a run still writing
     * there refuses this one, and cannot add one after the choice of
     * checkpoint is made. The master alone locks, as it alone writes;
     * a new directory is made and locked below. */
    if (is_master())
        lock_out_dir(s->out);
    if (s->auto_resume)
        decide_auto_resume(s);
    if (s->resume)
        open_resume(tr, &rf, rpath, sizeof rpath);
    check_train_flags(s);
    apply_common_flags(s);
    setup_board(s, comm_size());
    need(s->eval_batch % comm_size() == 0, "--eval-batch %d does not split evenly over %d "
         "hosts", s->eval_batch, comm_size());
    open_data(tr);
    if (tr->corpus.parts.n)
        plan_streams(tr);
    check_same_data(tr->data_hash, s->data);
    if (is_master()) {
        make_out_dir(s->out); /* and its lock, if not taken above */
        refuse_overwrite(s);
    }
    init_weights(tr);
    if (s->resume)
        resume_state(tr, &rf, rpath);
    if (auto_resumed_done(tr, &rf, rpath))
        return 0;
    round_to_precision(&tr->model, s);
    tr->model.shard_optimizer = s->shard_optimizer;
    tr->cores = xs_cores();
    model_set_cores(&tr->model, tr->cores);
    model_set_accum(&tr->model, s->grad_accum);
    start_loader(tr, s->resume ? &rf : NULL, rpath);
    run_training(tr);
    st_free(&rf);
    return 0;
}

int cmd_train(int argc, char **argv)
{
    struct trainer tr = {.s = defaults};
    struct settings *s = &tr.s;
    const struct opt o[] = {
        {"config", O_STR, &s->config, "read flags from FILE: 'flag = value' lines, # comments, "
         "a switch as 'flag = true'; flags given here win"},
        {"steps", O_INT, &s->steps, "training steps"},
        {"batch", O_INT, &s->batch, "windows per batch (per micro-batch with --grad-accum)"},
        {"grad-accum", O_INT, &s->grad_accum, "micro-batches of --batch windows per optimizer "
         "step, their gradients summed"},
        {"seq", O_INT, &s->seq, "bytes per training window (<= context)"},
        {"lr", O_REAL, &s->lr, "Adam learning rate (the peak, with a schedule)"},
        {"warmup", O_INT, &s->warmup, "steps of linear warm-up to --lr"},
        {"decay", O_STR, &s->decay, "after warm-up: cosine, linear (to --min-lr) or none"},
        {"min-lr", O_REAL, &s->min_lr, "the rate --decay ends at"},
        {"dropout", O_REAL, &s->dropout, "dropout on attention probabilities, attention and MLP "
         "outputs (training only)"},
        {"no-mlp", O_FLAG, &s->no_mlp, "attention-only blocks (no MLP)"},
        {"residual", O_STR, &s->residual, "once, or twice as the reference adds it"},
        {"activation", O_STR, &s->activation, "the MLP's: relu as the reference, or gelu "
         "(GPT-2's, the tanh approximation)"},
        {"embed", O_INT, &s->embed, "embedding width C"},
        {"mlp", O_INT, &s->mlp, "MLP hidden width"},
        {"heads", O_INT, &s->heads, "attention heads (divides embed)"},
        {"layers", O_INT, &s->layers, "transformer blocks"},
        {"context", O_INT, &s->context, "context length (position embeddings)"},
        {"eval-every", O_INT, &s->eval_every, "steps between eval lines"},
        {"eval-batch", O_INT, &s->eval_batch, "random test windows per eval"},
        {"eval-bytes", O_INT, &s->eval_bytes, "length of each eval continuation, prompt included"},
        {"log-eval-windows", O_FLAG, &s->log_eval_windows, "each eval record of metrics.jsonl "
         "lists where its test windows start (byte offsets in the test text)"},
        {"final-bytes", O_INT, &s->final_bytes, "length of the final passage, prompt included"},
        {"prompt", O_STR, &s->prompt, "prompt for continuations"},
        {"seed", O_REAL, &s->seed, "random seed (weights, batches, sampling)"},
        {"data", O_STR, &s->data, "a text file (first 80% train, rest test), or a corpus streamed "
         "in parts: DIR, 'a/*.txt', 'train-{0000..0063}.tar' (WebDataset), pipe:CMD"},
        {"test-data", O_STR, &s->test_data, "the test set (same forms), read whole; needed "
         "with a corpus"},
        {"vocab", O_INT, &s->vocab, "128 (ASCII, the reference) or 256 (any bytes: UTF-8)"},
        {"streams", O_INT, &s->streams, "a corpus's data streams (0: by part count, up to 8)"},
        {"shuffle-buffer", O_INT, &s->shuffle_buffer, "a stream's shuffle buffer, in windows"},
        {"out", O_STR, &s->out, "directory for checkpoints"},
        {"init", O_STR, &s->init, "start from this safetensors file's weights"},
        {"resume", O_STR, &s->resume, "continue a run from a checkpoint (FILE, DIR, or --out)"},
        {"auto-resume", O_FLAG, &s->auto_resume, "continue --out's newest checkpoint if it has "
         "one, else start fresh; at --steps, exit 0 (for a command rerun until it succeeds)"},
        {"ckpt-every", O_INT, &s->ckpt_every, "steps between checkpoints (also at the end and on ^C)"},
        {"keep", O_INT, &s->keep, "checkpoints kept in --out, newest first"},
        {"device", O_STR, &s->device, "xla (trace, compile, cache) or cpu (eager)"},
        {"metrics", O_FLAG, &s->metrics, "print the XLA metrics and kernel profile at the end"},
        {"live", O_STR, &s->live, "the live progress line: auto (on a terminal a person "
         "watches), on or off"},
        {"verbose", O_FLAG, &s->verbose, "per-core throughput lines at each eval (PyTorch/XLA's)"},
        {"profile", O_STR, &s->profile, "write a timeline of the first steps (Chrome trace JSON)"},
        {"profile-steps", O_INT, &s->profile_steps, "steps --profile records"},
        {"threads", O_INT, &s->threads, "OpenMP threads, 0 = the cores this process may use"},
        {"tpu", O_STR, &s->tpu, "simulate this TPU board (v2-8, v3-8, v4-8, v5e-8, v5p-8, v6e-8)"},
        {"cores", O_INT, &s->cores, "simulated cores, data parallel (power of two; 0 = --tpu's or 1)"},
        {"redo", O_INT, &s->redo, "threads of a team whose idle threads redo the cores' programs "
         "a descheduled thread holds (2-8; one core lends itself 8 cores); 0 = tried when the "
         "machine is busy"},
        {"hbm", O_STR, &s->hbm, "HBM per core, e.g. 16G or 8M (default: --tpu's, or 16G)"},
        {"precision", O_STR, &s->precision, "fp32, bf16 (matrix-unit inputs) or bf16-pure (XLA_USE_BF16)"},
        {"remat", O_FLAG, &s->remat, "recompute each block's activations in the backward pass "
         "instead of keeping them (less HBM, more compute; the same bits)"},
        {"shard-optimizer", O_FLAG, &s->shard_optimizer, "each core of the pod keeps only its "
         "shard of Adam's state (ZeRO-1); the same bits"},
    };
    parse_opts("train", "Trains the model and writes a checkpoint.", argc, argv, o,
               (int)(sizeof o / sizeof *o), NULL);
    return start_run(&tr);
}
