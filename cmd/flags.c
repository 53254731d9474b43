/* flags.c: the command line. Every command's flags are a table of struct
 * opt over one struct settings (flags.h); parse_opts reads them, the
 * check_* functions refuse what cannot run, and the rest turns settings
 * into the simulated board, a graph and a precision. Usage errors exit 2
 * with one line (pod/error.h's need and die). */
#include "cmd/flags.h"
#include "cmd/pod.h"
#include "pod/error.h"
#include "xla_sim.h"
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

static void set_opt(const struct opt *o, const char *v)
{
    char *end;
    errno = 0;
    if (o->type == O_STR) {
        *(const char **)o->ptr = v;
    } else if (o->type == O_INT) {
        long x = strtol(v, &end, 10);
        if (end == v || *end || errno || x < INT_MIN || x > INT_MAX)
            die(2, "--%s expects a whole number, got '%s'", o->name, v);
        *(int *)o->ptr = (int)x;
    } else {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x))
            die(2, "--%s expects a number, got '%s'", o->name, v);
        *(double *)o->ptr = x;
    }
}

/* The flags the user gave, so that resuming can tell a deliberate value
 * from a default. */
static const char *given[64];
static int ngiven;

int was_given(const char *name)
{
    for (int i = 0; i < ngiven; i++)
        if (!strcmp(given[i], name))
            return 1;
    return 0;
}

/* `--resume` alone means the output directory. */
static int value_omitted(const struct opt *o, int i, int argc, char **argv)
{
    return !strcmp(o->name, "resume") && (i + 1 == argc || !strncmp(argv[i + 1], "--", 2));
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
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        int k = 0;
        while (k < n && (strlen(o[k].name) != len || strncmp(o[k].name, a + 2, len)))
            k++;
        if (k == n)
            die(2, "unknown flag '%.*s' (see gpt %s --help)", (int)len + 2, a, cmd);
        if (ngiven < 64)
            given[ngiven++] = o[k].name;
        if (!eq && value_omitted(&o[k], i, argc, argv)) {
            *(const char **)o[k].ptr = "";
            continue;
        }
        if (o[k].type == O_FLAG) {
            if (eq)
                die(2, "--%s takes no value", o[k].name);
            *(int *)o[k].ptr = 1;
            continue;
        }
        if (!eq && i + 1 == argc)
            die(2, "--%s needs a value", o[k].name);
        set_opt(&o[k], eq ? eq + 1 : argv[++i]);
    }
}

void check_prompt(const char *p, int vocab)
{
    need(p[0] != 0, "--prompt must not be empty");
    for (const char *c = p; *c; c++)
        need((unsigned char)*c < vocab, "--prompt must be ASCII (byte 0x%02x at offset %d)",
             (unsigned char)*c, (int)(c - p));
}

void apply_common_flags(const struct settings *s)
{
    need(!strcmp(s->device, "cpu") || !strcmp(s->device, "xla"),
         "--device must be cpu or xla, got '%s'", s->device);
    if (s->metrics || getenv("GPT_METRICS_FILE"))
        xs_profile_enable(1);
    need(s->threads >= 0 && s->threads <= 1024, "--threads must be 0 (all cores) to 1024, got %d", s->threads);
    if (s->threads)
        omp_set_num_threads(s->threads);
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
    xs_set_device(name, cores, hbm);
}

/* The device decides how the graph runs: at once, or traced and compiled. */
Graph *new_graph(const struct settings *s)
{
    Graph *g = g_new();
    g_set_lazy(g, !strcmp(s->device, "xla"));
    g_set_precision(g, precision_of(s->precision));
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
