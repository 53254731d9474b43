/* flags.c: the command line. Every command's flags are a table of struct
 * opt over one struct settings (flags.h); parse_opts reads them, the
 * check_* functions refuse what cannot run, and the rest turns settings
 * into the simulated board, a graph and a precision. Usage errors exit 2
 * with one line (pod/error.h's need and die). */
#include "cmd/flags.h"
#include "cmd/pod.h"
#include "pod/error.h"
#include "util/util.h"
#include "util/threads.h"
#include "pod/comm.h"
#include "xla_sim.h"
#include "device/redo.h"
#include "data/loader.h"
#include <omp.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


const struct settings defaults = {
    .embed = 32, .mlp = 64, .heads = 4, .layers = 4, .context = 128,
    .steps = 50000, .batch = 32, .seq = 128, .eval_every = 100, .eval_batch = 256,
    .eval_bytes = 32, .final_bytes = 256, .threads = 0, .bytes = 256, .top_k = 0,
    .num_samples = 1, .ckpt_every = 1000, .keep = 3, .vocab = VOCAB, .streams = 0, .shuffle_buffer = 1024,
    .profile_steps = 10,
    .lr = 1e-3, .temperature = 1.0, .seed = 1337,
    .data = "data/sherlock-ascii.txt", .out = "out", .init = NULL,
    .prompt = "\"Elementary, my dear", .device = "xla", .ckpt = "out",
    .precision = "fp32", .residual = "twice", .decay = "none", .activation = "relu",
    .live = "auto", .grad_accum = 1,
};

static void print_default(const struct opt *o)
{
    if (o->type == O_INT || o->type == O_FLAG)
        printf("%d", *(int *)o->ptr);
    else if (o->type == O_REAL)
        printf("%g", *(double *)o->ptr);
    else if (*(const char **)o->ptr)
        printf("'%s'", *(const char **)o->ptr);
    else
        printf("none");
}

static void usage(const char *cmd, const char *what, const struct opt *o, int n,
                  const char *operands)
{
    printf("usage: gpt %s [flags]%s\n%s\n\nflags (default in brackets):\n", cmd, operands, what);
    for (int i = 0; i < n; i++) {
        printf("  --%-13s %s [", o[i].name, o[i].help);
        print_default(&o[i]);
        printf("]\n");
    }
    exit_planned(0);
}

/* Reads v as o's type into *o->ptr. Returns NULL, or what was expected
 * (the caller says where the value came from). */
static const char *set_opt(const struct opt *o, const char *v)
{
    char *end;
    errno = 0;
    if (o->type == O_STR) {
        *(const char **)o->ptr = v;
    } else if (o->type == O_FLAG) {
        if (strcmp(v, "true") && strcmp(v, "false"))
            return "true or false";
        *(int *)o->ptr = !strcmp(v, "true");
    } else if (o->type == O_INT) {
        long x = strtol(v, &end, 10);
        if (end == v || *end || errno || x < INT_MIN || x > INT_MAX)
            return "a whole number";
        *(int *)o->ptr = (int)x;
    } else {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x))
            return "a number";
        *(double *)o->ptr = x;
    }
    return NULL;
}

/* The flags the user gave, on the command line or in the --config file,
 * so that resuming can tell a deliberate value from a default. Each name
 * once: a table has fewer rows than this. */
static const char *given[128];
static int ngiven;

int was_given(const char *name)
{
    for (int i = 0; i < ngiven; i++)
        if (!strcmp(given[i], name))
            return 1;
    return 0;
}

static void mark_given(const char *name)
{
    if (!was_given(name) && ngiven < (int)(sizeof given / sizeof *given))
        given[ngiven++] = name;
}

/* The row of table o[n] whose name is the len bytes at name, or -1. */
static int find_opt(const struct opt *o, int n, const char *name, size_t len)
{
    for (int k = 0; k < n; k++)
        if (strlen(o[k].name) == len && !strncmp(o[k].name, name, len))
            return k;
    return -1;
}

/* `--resume` alone means the output directory. */
static int value_omitted(const struct opt *o, int i, int argc, char **argv)
{
    return !strcmp(o->name, "resume") && (i + 1 == argc || !strncmp(argv[i + 1], "--", 2));
}

/* One flag of the command line, argv[*i] (its value may be the next). */
static void parse_flag(const char *cmd, int *i, int argc, char **argv, const struct opt *o,
                       int n)
{
    const char *a = argv[*i], *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    int k = find_opt(o, n, a + 2, len);
    if (k < 0)
        die(2, "unknown flag '%.*s' (see gpt %s --help)", (int)len + 2, a, cmd);
    if (!strcmp(o[k].name, "config") && was_given("config"))
        die(2, "--config given twice: a run reads one file");
    mark_given(o[k].name);
    if (!eq && value_omitted(&o[k], *i, argc, argv)) {
        *(const char **)o[k].ptr = "";
        return;
    }
    if (o[k].type == O_FLAG && !eq) { /* --flag alone; --flag=false undoes a file's true */
        *(int *)o[k].ptr = 1;
        return;
    }
    if (!eq && *i + 1 == argc)
        die(2, "--%s needs a value", o[k].name);
    const char *v = eq ? eq + 1 : argv[++*i];
    const char *want = set_opt(&o[k], v);
    if (want)
        die(2, "--%s expects %s, got '%s'", o[k].name, want, v);
}

/* ---- --config FILE: a run's flags written down ----
 * One `flag = value` a line, the flag named as in --help without its
 * dashes; blank lines and lines starting with # are skipped. The value is
 * the rest of the line, its ends' spaces trimmed, taken as written (no
 * quotes). A switch is `flag = true` or `flag = false`. A flag given on the
 * command line wins over the file's line, wherever it stands. */

/* The file's bytes, kept for the run: string settings point into them. */
static char *config_text;

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        *--e = 0;
    return s;
}

/* The whole file, NUL-terminated; an unreadable one is a usage error. */
static char *read_config_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(2, "%s: cannot read the --config file: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *text = xmalloc(cap);
    for (size_t got; (got = fread(text + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap)
            text = realloc(text, cap *= 2);
        if (!text)
            die(1, "%s: out of memory reading the --config file", path);
    }
    int failed = ferror(f), err = errno;
    fclose(f);
    if (failed)
        die(2, "%s: cannot read the --config file: %s", path, strerror(err));
    if (memchr(text, 0, n))
        die(2, "%s: not a text file of 'flag = value' lines (it holds a NUL byte)", path);
    text[n] = 0;
    return text;
}

/* Line `at` of path: sets its flag unless the command line gave it (the
 * value is checked all the same: the file must be right on its own).
 * line_of[k]: the line that set row k, 0 for none yet. */
static void config_line(const char *cmd, const char *path, int at, char *line,
                        const struct opt *o, int n, int *line_of)
{
    line = trim(line);
    if (!*line || *line == '#')
        return;
    char *eq = strchr(line, '=');
    char *key = eq ? (*eq = 0, trim(line)) : line, *v = eq ? trim(eq + 1) : NULL;
    int k = find_opt(o, n, key, strlen(key));
    if (k < 0 && !eq)
        die(2, "%s:%d: expected 'flag = value', got '%s'", path, at, line);
    if (k < 0)
        die(2, "%s:%d: unknown flag '%s' (see gpt %s --help)", path, at, key, cmd);
    if (!strcmp(key, "config"))
        die(2, "%s:%d: a --config file cannot name another", path, at);
    if (!eq && o[k].type == O_FLAG)
        die(2, "%s:%d: expected '%s = true' or '%s = false'", path, at, key, key);
    if (!v || !*v)
        die(2, "%s:%d: expected '%s = VALUE', the %s is missing", path, at, key,
            eq ? "value" : "'='");
    if (line_of[k])
        die(2, "%s:%d: %s is set twice (first on line %d)", path, at, key, line_of[k]);
    line_of[k] = at;
    union { int i; double d; const char *s; } scratch;
    struct opt into = o[k];
    if (was_given(key)) /* the command line's value stays */
        into.ptr = &scratch;
    const char *want = set_opt(&into, v);
    if (want)
        die(2, "%s:%d: %s expects %s, got '%s'", path, at, key, want, v);
    mark_given(o[k].name); /* deliberate, as a flag is: a resume checks it */
}

static void read_config(const char *cmd, const char *path, const struct opt *o, int n)
{
    config_text = read_config_file(path);
    int *line_of = xcalloc((size_t)n, sizeof *line_of), at = 1;
    for (char *line = config_text, *next; line; line = next, at++) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        config_line(cmd, path, at, line, o, n, line_of);
    }
    free(line_of);
}

void parse_opts(const char *cmd, const char *what, int argc, char **argv,
                       const struct opt *o, int n, struct operands *rest)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(cmd, what, o, n, rest ? " FILES..." : "");
        if (rest && !strcmp(a, "--")) {
            while (++i < argc)
                rest->v[rest->n++] = argv[i];
            break;
        }
        if (rest && strncmp(a, "--", 2)) {
            rest->v[rest->n++] = a;
            continue;
        }
        if (strncmp(a, "--", 2))
            die(2, "unexpected argument '%s' (see gpt %s --help)", a, cmd);
        parse_flag(cmd, &i, argc, argv, o, n);
    }
    /* the file after the whole command line, whose flags win */
    int k = find_opt(o, n, "config", strlen("config"));
    if (k >= 0 && *(const char **)o[k].ptr)
        read_config(cmd, *(const char **)o[k].ptr, o, n);
}

void check_prompt(const char *p, int vocab)
{
    need(p[0] != 0, "--prompt must not be empty");
    for (const char *c = p; *c; c++)
        need((unsigned char)*c < vocab, "--prompt must be ASCII (byte 0x%02x at offset %d)",
             (unsigned char)*c, (int)(c - p));
}

/* The thread count apply_common_flags chose, and why (the banners say). */
static struct thread_budget budget = {.threads = 1, .why = "1 thread"};
const char *threads_chosen(void) { return budget.why; }

void apply_common_flags(const struct settings *s)
{
    need(!strcmp(s->device, "cpu") || !strcmp(s->device, "xla"),
         "--device must be cpu or xla, got '%s'", s->device);
    if (s->metrics || getenv("GPT_METRICS_FILE"))
        xs_profile_enable(1);
    need(s->threads >= 0 && s->threads <= 1024, "--threads must be 0 (the cores this process may use) to 1024, got %d", s->threads);
    thread_budget(&budget, s->threads, comm_ranks_on_host());
    omp_set_num_threads(budget.threads);
    precision_of(s->precision);
}

/* --activation names one of the model's (gpt.c); the error lists them. */
static void check_activation(const char *name)
{
    char list[128] = "";
    for (int a = 0; activation_name(a); a++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", a ? ", " : "",
                 activation_name(a));
    need(activation_find(name) >= 0, "--activation must be one of %s, got '%s'", list, name);
}

static void check_model_flags(const struct settings *s)
{
    need(s->embed >= 1 && s->embed <= 4096, "--embed must be 1..4096, got %d", s->embed);
    need(s->mlp >= 1 && s->mlp <= 16384, "--mlp must be 1..16384, got %d", s->mlp);
    need(s->heads >= 1 && s->embed % s->heads == 0,
         "--heads %d must be >= 1 and divide --embed %d", s->heads, s->embed);
    need(s->layers >= 1 && s->layers <= MAX_LAYERS, "--layers must be 1..%d, got %d",
         MAX_LAYERS, s->layers);
    need(s->context >= 2 && s->context <= 1024, "--context must be 2..1024, got %d", s->context);
    need(!strcmp(s->residual, "once") || !strcmp(s->residual, "twice"),
         "--residual must be once or twice, got '%s'", s->residual);
    need(s->dropout >= 0 && s->dropout < 1, "--dropout must be 0 <= P < 1, got %g", s->dropout);
    check_activation(s->activation);
}

/* The reference's model exactly, so its PyTorch code loads our checkpoints. */
const char *reference_cannot(const struct settings *s)
{
    return s->no_mlp ? "attention-only blocks (--no-mlp)"
           : !strcmp(s->residual, "once") ? "the residual added once (--residual once)"
           : activation_find(s->activation) ? "an activation other than ReLU (--activation)"
                                            : NULL;
}

void check_train_flags(const struct settings *s)
{
    check_model_flags(s);
    need(s->steps >= 1, "--steps must be >= 1, got %d", s->steps);
    need(s->batch >= 1 && s->batch <= 65536, "--batch must be 1..65536, got %d", s->batch);
    need(s->grad_accum >= 1 && s->grad_accum <= 65536 / s->batch, "--grad-accum must be "
         "1..%d (--batch x --grad-accum at most 65536 windows), got %d", 65536 / s->batch,
         s->grad_accum);
    need(s->seq >= 2 && s->seq <= s->context, "--seq must be 2..--context (%d), got %d",
         s->context, s->seq);
    need(s->lr > 0 && s->lr < 1e3, "--lr must be above 0 and below 1000, got %g", s->lr);
    need(s->warmup >= 0 && s->warmup <= s->steps, "--warmup must be 0..--steps (%d), got %d",
         s->steps, s->warmup);
    need(!strcmp(s->decay, "none") || !strcmp(s->decay, "cosine") || !strcmp(s->decay, "linear"),
         "--decay must be cosine, linear or none, got '%s'", s->decay);
    need(s->min_lr >= 0 && s->min_lr <= s->lr, "--min-lr must be 0..--lr (%g), got %g", s->lr,
         s->min_lr);
    need(s->eval_every >= 1, "--eval-every must be >= 1, got %d", s->eval_every);
    need(s->eval_batch >= 1 && s->eval_batch <= 65536, "--eval-batch must be 1..65536, got %d", s->eval_batch);
    need(s->eval_bytes >= 0 && s->final_bytes >= 0, "--eval-bytes and --final-bytes must be >= 0");
    need(s->ckpt_every >= 1, "--ckpt-every must be >= 1, got %d", s->ckpt_every);
    need(s->keep >= 1, "--keep must be >= 1, got %d", s->keep);
    need(!(s->init && s->resume), "--init and --resume exclude each other");
    need(!strcmp(s->live, "auto") || !strcmp(s->live, "on") || !strcmp(s->live, "off"),
         "--live must be auto, on or off, got '%s'", s->live);
    need(s->seed >= 0 && s->seed < 9007199254740992.0 && s->seed == floor(s->seed),
         "--seed must be a whole number >= 0, got %g", s->seed);
    need(s->vocab == 128 || s->vocab == 256, "--vocab must be 128 (ASCII) or 256 (any byte), "
         "got %d", s->vocab);
    check_prompt(s->prompt, s->vocab);
    need(s->streams == 0 || (s->streams <= LOADER_MAX_STREAMS && !(s->streams & (s->streams - 1))
         && step_windows(s) % s->streams == 0), "--streams must be 0 or a power of two up to "
         "%d that divides --batch x --grad-accum (%d), got %d", LOADER_MAX_STREAMS,
         step_windows(s), s->streams);
    need(s->shuffle_buffer >= 1 && s->shuffle_buffer <= 1 << 24, "--shuffle-buffer must be "
         "1..16777216 windows, got %d", s->shuffle_buffer);
    need(s->profile_steps >= 1, "--profile-steps must be >= 1, got %d", s->profile_steps);
    /* the eager device keeps every value of a step until the step ends:
     * recomputing a block would cost time and save no memory */
    need(!s->remat || strcmp(s->device, "cpu"), "--remat needs --device xla (the eager cpu "
         "device keeps every value until the step ends, so recomputing saves nothing)");
}

int precision_of(const char *name)
{
    static const char *const names[] = {"fp32", "bf16", "bf16-pure"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i]))
            return i; /* enum precision */
    need(0, "--precision must be fp32, bf16 or bf16-pure, got '%s'", name);
    return 0;
}

/* "16G", "512M", "64K" or bytes; binary units, as HBM sizes are quoted. */
size_t parse_size(const char *flag, const char *v)
{
    char *end;
    double x = strtod(v, &end);
    double unit = !strcmp(end, "") || !strcmp(end, "B") ? 1
                  : !strcmp(end, "K") || !strcmp(end, "KiB") ? 1024.0
                  : !strcmp(end, "M") || !strcmp(end, "MiB") ? 1024.0 * 1024
                  : !strcmp(end, "G") || !strcmp(end, "GiB") ? 1024.0 * 1024 * 1024 : 0;
    need(end != v && unit > 0 && x * unit >= 1 && x * unit < 1e15,
         "--%s must be a size such as 16G, 512M or 65536, got '%s'", flag, v);
    return (size_t)(x * unit);
}

/* The simulated board: --tpu's table row, then --cores and --hbm. */
/* hosts: the processes training together (sample and eval run on one). */
void setup_board(const struct settings *s, int hosts)
{
    const char *name = "xla";
    int cores = 1;
    size_t hbm = (size_t)16 << 30; /* one v3 core's */
    if (s->tpu) {
        const struct tpu_spec *t = xs_tpu(s->tpu);
        need(t != NULL, "--tpu must be one of %s, got '%s'", xs_tpu_names(), s->tpu);
        name = t->name;
        cores = t->cores;
        hbm = (size_t)(t->hbm_gib * 1073741824.0);
    }
    if (s->cores)
        cores = s->cores;
    need(cores >= 1 && cores <= XS_MAX_CORES && !(cores & (cores - 1)),
         "--cores must be a power of two from 1 to %d (so results do not depend on the "
         "layout), got %d", XS_MAX_CORES, cores);
    need(cores == 1 || !strcmp(s->device, "xla"), "--cores and --tpu need --device xla");
    need(!(hosts & (hosts - 1)), "a pod needs a power of two of processes (mpirun -np), "
         "got %d", hosts);
    need(s->batch % (cores * hosts) == 0, "--batch %d does not split evenly over %d cores%s",
         s->batch, cores * hosts, hosts > 1 ? " (of all hosts)" : "");
    if (s->hbm)
        hbm = parse_size("hbm", s->hbm);
    need(s->redo == 0 || (s->redo >= 2 && s->redo <= REDO_MAX_THREADS),
         "--redo must be 0 (tried on a busy machine) or 2 to %d threads, got %d",
         REDO_MAX_THREADS, s->redo);
    if (s->redo && cores == 1) {
        const char *why = lend_problem(s, hosts, 0);
        need(!why, "--redo on one core lends the team a board of %d cores, but %s", LEND_CORES,
             why ? why : "");
    }
    xs_set_device(name, cores, hbm);
}

const char *lend_problem(const struct settings *s, int hosts, size_t weights)
{
    if (hosts > 1)
        return "a pod's ranks share their steps";
    if (s->shard_optimizer)
        return "--shard-optimizer splits Adam's moments by core";
    if (s->grad_accum > 1)
        return "--grad-accum keeps partial sums a core";
    if (s->batch % LEND_CORES)
        return "--batch does not split evenly over them";
    /* --hbm judges one core's program: a lent core's, 1/LEND_CORES of the
     * batch, would fit budgets the run's own overflows, so whether a run
     * were refused would hang on how busy the machine was */
    if (s->hbm && !strcmp(s->device, "xla"))
        return "--hbm is a budget for one core's program, not a lent core's";
    /* the cores share the weights, but the team copies them for each job
     * its late attempts may still read (xla_sim.c's core_job_set) */
    if ((double)REDO_RING * (double)weights * sizeof(float) > (double)REDO_MAX_BYTES)
        return "the redo team's copies of the weights would pass 1 GiB";
    return NULL;
}

const char *windows_lend_problem(const struct settings *s, int windows, size_t weights,
                                 const char *uneven)
{
    if (strcmp(s->device, "xla"))
        return "--device cpu lends a board to training steps only";
    if (windows % LEND_CORES)
        return uneven;
    struct settings step = *s;
    step.batch = windows; /* the windows split over the lent cores as a step's batch */
    return lend_problem(&step, 1, weights);
}

void set_board(Model *m, int cores, int lent)
{
    if (xs_cores() == cores)
        return;
    xs_set_device(xs_device_name(), cores, xs_hbm());
    if (lent)
        model_lend_cores(m, cores);
    else
        model_set_cores(m, cores);
}

void lent_board_follow(struct lent_board *b, ThreadTrial *t)
{
    if (b->lends && xs_cores() == LEND_CORES && !xs_redo_fits()) {
        b->lends = 0; /* the lent board's program has run: its arenas would not fit */
        if (t->fixed)
            fprintf(stderr, "gpt: --redo %d: the team's arenas and copies would pass 1 GiB; "
                    "its passes run on one core without it\n", t->redo);
        trial_withdraw_team(t);
    }
    int lend = b->lends && t->redoing;
    xs_set_redo(lend ? t->redo : 0);
    set_board(b->m, lend ? LEND_CORES : 1, lend);
    g_set_cores(b->g, lend ? LEND_CORES : 1);
}

/* The device decides how the graph runs: at once, or traced and compiled. */
Graph *new_graph(const struct settings *s)
{
    Graph *g = g_new();
    g_set_lazy(g, !strcmp(s->device, "xla"));
    g_set_precision(g, precision_of(s->precision));
    g_set_remat(g, s->remat);
    return g;
}

/* bf16-pure keeps the weights (and Adam state) as bf16 from the start. */
void round_to_precision(Model *m, const struct settings *s)
{
    if (precision_of(s->precision) != PREC_BF16_PURE)
        return;
    k_round_bf16(m->w, m->w, m->nw);
    k_round_bf16(m->m, m->m, m->nw);
    k_round_bf16(m->v, m->v, m->nw);
}

void report_redo(FILE *out, const char *prefix)
{
    RedoStats redo = redo_stats();
    if (redo.units > 0)
        fprintf(out, "%sthe redo team ran %ld cores' programs and redid %ld that a held thread "
                "had not finished (%ld attempts gave up)\n", prefix, redo.units, redo.redone,
                redo.given_up);
}

void report_metrics(const struct settings *s)
{
    const char *path = is_master() ? getenv("GPT_METRICS_FILE") : NULL;
    if (s->metrics) {
        xs_metrics_report(stdout);
        xs_profile_report(stdout);
    }
    if (path && *path) {
        FILE *f = fopen(path, "a");
        if (!f)
            die(1, "%s: cannot append metrics (GPT_METRICS_FILE): %s", path, strerror(errno));
        xs_metrics_report(f);
        xs_profile_report(f);
        fclose(f);
    }
}
