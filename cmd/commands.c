/* commands.c: gpt sample, eval, shard and plot: the commands besides
 * train (train.c) and sweep (sweep.c). */
#include "cmd/sample.h"
#include "cmd/ckpt.h"
#include "cmd/evaluate.h"
#include "cmd/commands.h"
#include "cmd/flags.h"
#include "cmd/pod.h"
#include "pod/error.h"
#include "cmd/rundir.h"
#include "data/text.h"
#include "gpt.h"
#include "data/data.h"
#include "watch/watch.h"
#include "xla_sim.h"
#include "pod/comm.h"
#include "util/rng.h"
#include "util/util.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

/* ---- loading a model for sample and eval ---- */

/* Loads a checkpoint; a run's precision, when the caller did not choose
 * one, becomes s->precision (kept in static storage). *batch (may be
 * NULL): the run's training batch, or 0 if the file does not say. */
static void load_model(Model *m, const char *arg, struct settings *s, int *batch)
{
    static char prec[16];
    int heads = s->heads;
    char path[4096], err[512];
    StFile f;
    Config c;
    resolve_ckpt(arg, path, sizeof path);
    if (st_load(&f, path, err, sizeof err))
        die(1, "%s: %s", path, err);
    if (ckpt_config(&f, &c, heads))
        die(1, "%s: not a gpt checkpoint (missing or inconsistent config)", path);
    model_init(m, &c, 0);
    if (ckpt_load_weights(m, &f, 0, err, sizeof err))
        die(1, "%s: %s", path, err);
    const char *p = st_meta(&f, "precision"), *b = st_meta(&f, "batch");
    if (batch)
        *batch = b && atoi(b) > 0 ? atoi(b) : 0;
    if (p && !was_given("precision") && strlen(p) < sizeof prec) {
        snprintf(prec, sizeof prec, "%s", p);
        s->precision = prec;
        precision_of(prec);
    }
    st_free(&f);
    round_to_precision(m, s);
}

/* ---- sample ---- */

static void emit_raw(int c, void *ctx)
{
    (void)ctx;
    putchar(c);
    fflush(stdout);
}

/* The thread trial of a sample or an eval, and the redo team it offers
 * (team: a lent board, an eval's or a sample's) of trial_team's threads,
 * as gpt train's: beside busy programs of its own session, the
 * team at once, or without one, one thread (where the first window's
 * trial would go, and a short run would be over first). A team given
 * (--redo: given threads) runs throughout, with no trial. */
static void start_threads(ThreadTrial *t, int team, int given)
{
    trial_start(t);
    t->redo = team && t->full > 1 ? trial_team(t, REDO_MAX_THREADS) : 0;
    if (given) {
        trial_start_team(t, given);
        t->fixed = 1;
    } else if (t->started_shared && t->redo)
        trial_start_team(t, t->redo);
    else if (t->started_shared)
        trial_start_one(t);
}

/* gpt sample's own flags, refused with a usage error. */
static void check_sample_flags(const struct settings *s)
{
    check_prompt(s->prompt, MAX_VOCAB);
    need(s->bytes >= 0 && s->bytes <= 1 << 24, "--bytes must be 0..16777216, got %d", s->bytes);
    need(s->temperature >= 0, "--temperature must be >= 0, got %g", s->temperature);
    need(s->top_k >= 0 && s->top_k <= MAX_VOCAB, "--top-k must be 0..%d, got %d", MAX_VOCAB,
         s->top_k);
    need(s->seed >= 0 && s->seed == floor(s->seed), "--seed must be a whole number >= 0");
    need(s->num_samples >= 1 && s->num_samples <= 4096, "--num-samples must be 1..4096, got %d",
         s->num_samples);
    need(!(s->naive && s->num_samples > 1), "--naive generates one passage; drop --num-samples");
}

int cmd_sample(int argc, char **argv)
{
    struct settings s = defaults;
    const struct opt o[] = {
        {"ckpt", O_STR, &s.ckpt, "checkpoint file, or a directory (newest ckpt-*)"},
        {"prompt", O_STR, &s.prompt, "text to continue"},
        {"bytes", O_INT, &s.bytes, "bytes to print, prompt included"},
        {"temperature", O_REAL, &s.temperature, "softmax temperature, 0 = greedy"},
        {"top-k", O_INT, &s.top_k, "sample among the k likeliest bytes, 0 = all"},
        {"seed", O_REAL, &s.seed, "random seed (passage i of --num-samples uses SEED+i)"},
        {"num-samples", O_INT, &s.num_samples, "passages generated at once, printed when done"},
        {"heads", O_INT, &s.heads, "heads, for files without our metadata"},
        {"device", O_STR, &s.device, "xla (trace, compile, cache) or cpu (eager)"},
        {"metrics", O_FLAG, &s.metrics, "print the XLA metrics and kernel profile at the end"},
        {"naive", O_FLAG, &s.naive, "grow the input a byte at a time, as the reference does"},
        {"threads", O_INT, &s.threads, "OpenMP threads, 0 = the cores this process may use"},
        {"redo", O_INT, &s.redo, "threads of a team whose idle threads redo the cores' programs "
         "a descheduled thread holds, each window step past the context on a board of 8 lent "
         "cores (2-8; --num-samples a multiple of 8); 0 = tried when the machine is busy"},
        {"precision", O_STR, &s.precision, "fp32, bf16 or bf16-pure (default: the checkpoint's)"},
        {"hbm", O_STR, &s.hbm, "HBM of the simulated core, e.g. 16G"},
    };
    parse_opts("sample", "Streams a continuation of the prompt.", argc, argv, o,
               (int)(sizeof o / sizeof *o), NULL);
    if (!is_master())
        return 0; /* in a pod the master alone samples */
    check_sample_flags(&s);
    apply_common_flags(&s);
    setup_board(&s, 1);
    Model m;
    load_model(&m, s.ckpt, &s, NULL);
    check_prompt(s.prompt, m.cfg.vocab); /* a vocab-128 model knows only ASCII */
    int ns = s.num_samples, n = (int)strlen(s.prompt), total = n > s.bytes ? n : s.bytes;
    char **text = xcalloc((size_t)ns, sizeof *text); /* [ns] passages */
    Rng *r = xcalloc((size_t)ns, sizeof *r);          /* [ns] their generators */
    for (int i = 0; i < ns; i++) {
        text[i] = xcalloc((size_t)total + 1, 1);
        memcpy(text[i], s.prompt, (size_t)n);
        rng_seed(&r[i], (uint64_t)s.seed + (uint64_t)i, RNG_SAMPLE); /* = --seed SEED+i alone */
    }
    Graph *g = new_graph(&s);
    ThreadTrial threads; /* fewer threads, or the redo team, should other programs hold the cores */
    /* past the context each passage's window is fed afresh: a step of ns
     * windows; the decode steps before write their KV caches in place, on
     * one core, which no team may redo */
    const char *why = windows_lend_problem(
        &s, ns, m.nw, "its windows, one a passage (--num-samples), do not split evenly over them");
    if (s.redo && why) /* setup_board has checked what it can of it */
        die(2, "--redo lends each window step a board of %d cores, but %s", LEND_CORES, why);
    struct lent_board board = {&m, g, !why && total > m.cfg.context + 1};
    start_threads(&threads, board.lends, s.redo);
    SampleOpts so = {(float)s.temperature, s.top_k, ns == 1 ? emit_raw : NULL, NULL, &threads,
                     board.lends ? &board : NULL};
    if (ns == 1)
        fputs(s.prompt, stdout); /* one passage streams as it grows */
    if (s.naive)
        model_generate_naive(&m, g, text[0], n, total, &so, &r[0]);
    else
        model_generate_many(&m, g, text, ns, n, total, &so, r);
    xs_set_redo(0); /* the team's threads joined */
    set_board(&m, 1, 0);
    if (ns == 1)
        putchar('\n');
    for (int i = 0; i < ns && ns > 1; i++) { /* every byte, a 0 byte too, as emit_raw does */
        printf("%s==== passage %d of %d (seed %.0f) ====\n", i ? "\n" : "", i + 1, ns, s.seed + i);
        fwrite(text[i], 1, (size_t)total, stdout);
        putchar('\n');
    }
    report_redo(stderr, "gpt: ");
    report_metrics(&s);
    g_free(g);
    for (int i = 0; i < ns; i++)
        free(text[i]);
    free(text);
    free(r);
    model_free(&m);
    return 0;
}

/* ---- eval ---- */

/* The windows of each forward pass: --chunk, else the run's training
 * batch (the memory of a training step is known to fit), at most --batch. */
static int eval_chunk_size(int chunk, int trained, int batch)
{
    int c = chunk ? chunk : trained ? trained : batch;
    return c < batch ? c : batch;
}

int cmd_eval(int argc, char **argv)
{
    struct settings s = defaults;
    s.batch = 256;
    int chunk = 0, trained;
    const struct opt o[] = {
        {"ckpt", O_STR, &s.ckpt, "checkpoint file, or a directory (newest ckpt-*)"},
        {"data", O_STR, &s.data, "a text file; the last 20% is the test split"},
        {"test-data", O_STR, &s.test_data, "a test set, whole: a file, DIR, glob, shards or "
         "pipe:CMD (instead of --data's split)"},
        {"batch", O_INT, &s.batch, "windows per partial mean (the loss's last bits depend on "
         "it); each goes through the model --chunk windows at a time"},
        {"chunk", O_INT, &chunk, "windows per forward pass, at most --batch (0: the "
         "checkpoint's training --batch, a training step's memory)"},
        {"heads", O_INT, &s.heads, "heads, for files without our metadata"},
        {"device", O_STR, &s.device, "xla (trace, compile, cache) or cpu (eager)"},
        {"metrics", O_FLAG, &s.metrics, "print the XLA metrics and kernel profile at the end"},
        {"threads", O_INT, &s.threads, "OpenMP threads, 0 = the cores this process may use"},
        {"redo", O_INT, &s.redo, "threads of a team whose idle threads redo the cores' programs "
         "a descheduled thread holds, each pass on a board of 8 lent cores (2-8); 0 = tried "
         "when the machine is busy"},
        {"precision", O_STR, &s.precision, "fp32, bf16 or bf16-pure (default: the checkpoint's)"},
        {"hbm", O_STR, &s.hbm, "HBM of the simulated core, e.g. 16G"},
    };
    parse_opts("eval", "Mean next-byte loss over the whole test split.", argc, argv, o,
               (int)(sizeof o / sizeof *o), NULL);
    if (!is_master())
        return 0; /* in a pod the master alone evaluates */
    need(s.batch >= 1 && s.batch <= 65536, "--batch must be 1..65536, got %d", s.batch);
    need(chunk >= 0 && chunk <= 65536, "--chunk must be 0..65536, got %d", chunk);
    apply_common_flags(&s);
    setup_board(&s, 1);
    Model m;
    Data d;
    long windows;
    load_model(&m, s.ckpt, &s, &trained);
    if (s.test_data)
        load_corpus(&d, s.test_data, m.cfg.context, m.cfg.vocab);
    else
        load_data(&d, s.data, m.cfg.context, m.cfg.vocab, 1);
    Graph *g = new_graph(&s);
    int tty = progress_on_stderr("auto");
    int pass = eval_chunk_size(chunk, trained, s.batch);
    ThreadTrial threads; /* fewer threads, or the redo team, should other programs hold the cores */
    const char *why = windows_lend_problem(&s, pass, m.nw,
                                           "a pass's windows (--chunk, else the checkpoint's "
                                           "training --batch) do not split evenly over them");
    if (s.redo && why) /* setup_board has checked what it can of it */
        die(2, "--redo lends each pass a board of %d cores, but %s", LEND_CORES, why);
    struct lent_board board = {&m, g, !why};
    start_threads(&threads, board.lends, s.redo);
    lent_board_follow(&board, &threads);
    double t0 = now_seconds();
    struct eval_progress p = {.on = tty, .t0 = t0, .threads = &threads, .last = t0,
                              .board = &board};
    watch_compiles(tty, 1.0);
    double loss = eval_split(&m, g, &d, s.batch, pass, &windows, &p);
    eval_progress_clear(&p);
    xs_set_redo(0); /* the team's threads joined */
    set_board(&m, 1, 0);
    printf("loss %.6f bpb %.4f (%ld windows of %d bytes)\n", loss, loss / log(2.0),
           windows, m.cfg.context);
    report_redo(stderr, "gpt: ");
    report_metrics(&s);
    g_free(g);
    free(d.bytes);
    model_free(&m);
    return 0;
}

/* ---- shard ---- */

/* A run of gpt shard: one sample per input file, shard after shard. */
struct sharder {
    const char *dir, *prefix;
    uint64_t max_bytes;
    int width;          /* digits of a sample's key */
    TarWriter w;        /* the shard being written */
    char path[4096];    /* its name */
    int shards, in_shard;
    long docs;
    uint64_t bytes, text_bytes;
};

/* The inputs in the order given, a directory standing for its files. */
static void shard_inputs(const struct operands *args, DataList *in)
{
    char err[1024];
    for (int i = 0; i < args->n; i++) {
        struct stat st;
        if (stat(args->v[i], &st))
            die(1, "%s: cannot open input file (%s)", args->v[i], strerror(errno));
        if (S_ISDIR(st.st_mode) && data_list_dir(args->v[i], in, err, sizeof err))
            die(1, "%s", err);
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
            die(1, "%s: not a regular file", args->v[i]);
        if (S_ISREG(st.st_mode))
            data_list_add(in, args->v[i]);
    }
}

/* Shards of an older run would mix with these (a glob of DIR takes both). */
static void refuse_old_shards(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = strlen(prefix);
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, prefix, n) && e->d_name[n] == '-' && len > n + 4 &&
            !strcmp(e->d_name + len - 4, ".tar"))
            die(2, "%s already holds %s; choose another --out or --prefix", dir, e->d_name);
    }
    if (d)
        closedir(d);
}

static void shard_fail(struct sharder *r)
{
    char err[sizeof r->w.err];
    memcpy(err, r->w.err, sizeof err);
    tar_write_abort(&r->w);
    die(1, "%s", err);
}

static void shard_close(struct sharder *r)
{
    if (tar_write_close(&r->w))
        die(1, "%s", r->w.err);
    uint64_t bytes = r->w.pos;
    printf("%s: %d documents, %llu bytes\n", r->path, r->in_shard, (unsigned long long)bytes);
    fflush(stdout);
    r->bytes += bytes;
    r->shards++;
    r->in_shard = 0;
}

/* Sample i: KEY.name (the input's path, for provenance) and KEY.txt (its
 * bytes), in a new shard when this one would pass --max-bytes. */
static void shard_add(struct sharder *r, int i, const char *file)
{
    char name[48], text[48];
    struct stat st;
    FILE *src = fopen(file, "rb");
    if (!src || fstat(fileno(src), &st))
        die(1, "%s: cannot open input file (%s)", file, strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    snprintf(name, sizeof name, "%0*d.name", r->width, i);
    snprintf(text, sizeof text, "%0*d.txt", r->width, i);
    uint64_t need = tar_member_bytes(name, strlen(file)) + tar_member_bytes(text, size);
    if (r->in_shard && r->w.pos + need + 1024 > r->max_bytes)
        shard_close(r);
    if (!r->in_shard) {
        snprintf(r->path, sizeof r->path, "%s/%s-%06d.tar", r->dir, r->prefix, r->shards);
        if (tar_write_open(&r->w, r->path))
            shard_fail(r);
    }
    if (tar_write_member(&r->w, name, file, strlen(file)) ||
        tar_write_file(&r->w, text, src, file, size))
        shard_fail(r);
    fclose(src);
    r->in_shard++;
    r->docs++;
    r->text_bytes += size;
}

int cmd_shard(int argc, char **argv)
{
    const char *out = NULL, *max_bytes = "256M", *prefix = "train";
    const struct opt o[] = {
        {"out", O_STR, &out, "directory for the shards (required)"},
        {"max-bytes", O_STR, &max_bytes, "largest shard, e.g. 64M (a larger file gets one alone)"},
        {"prefix", O_STR, &prefix, "shard names: PREFIX-000000.tar, ..."},
    };
    struct operands files = {xcalloc((size_t)argc + 1, sizeof(char *)), 0};
    parse_opts("shard", "Writes FILES (a directory: its files) as WebDataset tar shards, one "
               "sample a file:\nKEY.txt its bytes, KEY.name its path.", argc, argv, o,
               (int)(sizeof o / sizeof *o), &files);
    if (!is_master())
        return 0; /* in a pod the master alone writes */
    need(out != NULL && *out, "gpt shard needs --out DIR");
    need(files.n > 0, "gpt shard needs input files (see gpt shard --help)");
    need(*prefix && !strchr(prefix, '/'), "--prefix must be a file name, got '%s'", prefix);
    struct sharder r = {.dir = out, .prefix = prefix, .max_bytes = parse_size("max-bytes", max_bytes)};
    DataList in = {0};
    shard_inputs(&files, &in);
    r.width = 6;
    for (long n = in.n - 1; n >= 1000000; n /= 10)
        r.width++;
    make_out_dir(out);
    refuse_old_shards(out, prefix);
    for (int i = 0; i < in.n; i++)
        shard_add(&r, i, in.path[i]);
    shard_close(&r);
    printf("%d shards, %ld documents, %llu bytes of text (%llu in all) in %s\n", r.shards,
           r.docs, (unsigned long long)r.text_bytes, (unsigned long long)r.bytes, out);
    data_list_free(&in);
    free(files.v);
    return 0;
}

/* ---- plot ---- */

int cmd_plot(int argc, char **argv)
{
    const char *out = "plot.svg", **dirs = xcalloc((size_t)argc + 1, sizeof *dirs);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: gpt plot RUN_DIR... [-o FILE]\nDraws the train and test loss of "
                   "each run (its --out directory's metrics.jsonl) on one chart.\n\n"
                   "  -o FILE   the SVG to write ['plot.svg']\n");
            exit_planned(0);
        }
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out")) {
            need(i + 1 < argc, "%s needs a file name", argv[i]);
            out = argv[++i];
        } else {
            need(strncmp(argv[i], "-", 1) != 0, "unknown flag '%s' (see gpt plot --help)",
                 argv[i]);
            dirs[n++] = argv[i];
        }
    }
    need(n > 0, "gpt plot needs at least one run directory (see gpt plot --help)");
    if (!is_master())
        return 0;
    char err[1024];
    if (plot_runs(dirs, n, out, err, sizeof err))
        die(1, "%s", err);
    printf("wrote %s (%d runs)\n", out, n);
    free(dirs);
    return 0;
}

/* ---- main ---- */
