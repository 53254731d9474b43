/* tests/test_accum.c: gradient accumulation held to a float64 PyTorch
 * reference (tests/accum_check.py). For N = 3, 5, 6 and 7 micro-batches
 * (and 1, 2 and 4), on 1, 2, 4 and 8 cores, with --remat, with
 * --shard-optimizer, in a pod of 2 ranks and on bytes >= 128 (--vocab
 * 256), gpt train's loss (printed and logged) and, after its 3 steps, its
 * weights and Adam's moments are those of 3 Adam steps each on the mean
 * loss of all N x --batch windows the step drew, within float32 rounding
 * (the script says how close, and why). Both start from PyTorch's initial
 * weights (--init). The windows are the run's own: drawn here by the
 * library's loader with the run's seed, as gpt train draws them
 * (t_train_windows). A counted skip without python3-torch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test.h"

#define AD "tests/tmp/accum"
#define PY "/usr/bin/python3 tests/accum_check.py"
#define SEQ 16
#define STEPS 3
#define SEED 7
/* the model's shape, which accum_check.py init reads too */
#define SHAPE "--context 16 --embed 16 --mlp 32 --heads 2 --layers 2"
/* three steps, each printing its loss; the eval lines' sampling cut short */
#define RUN SHAPE " --seq " T_STR(SEQ) " --steps " T_STR(STEPS) " --seed " T_STR(SEED) \
            " --eval-every 1 --eval-batch 4 --eval-bytes 1 --final-bytes 1 --prompt a " \
            "--live off --threads 1"

/* One run: its name (its --out under AD), what it adds to RUN, --batch and
 * --grad-accum (their product: the windows of a step), --vocab, and the
 * pod's ranks (0: one process of ./gpt). */
struct accum_run {
    const char *name, *flags;
    int batch, accum, vocab, ranks;
};

static const struct accum_run runs[] = {
    {"n1", "", 6, 1, 128, 0}, /* no accumulation: the reference's own check */
    {"n2", "", 3, 2, 128, 0},
    {"n3", "", 2, 3, 128, 0},
    {"n4", "", 2, 4, 128, 0},
    {"n5", "", 2, 5, 128, 0},
    {"n6", "", 2, 6, 128, 0},
    {"n7", "", 2, 7, 128, 0},
    {"n3-cores2", "--cores 2", 4, 3, 128, 0},
    {"n5-cores4", "--cores 4", 4, 5, 128, 0},
    {"n7-cores2", "--cores 2", 2, 7, 128, 0},
    {"n3-v3-8", "--tpu v3-8", 8, 3, 128, 0},
    {"n3-remat", "--remat", 2, 3, 128, 0},
    {"n6-remat-cores2", "--remat --cores 2", 2, 6, 128, 0},
    {"n3-shard", "--shard-optimizer --cores 2", 2, 3, 128, 0},
    {"n6-shard4", "--shard-optimizer --cores 4", 4, 6, 128, 0},
    {"n1-bytes", "", 6, 1, 256, 0}, /* high bytes, byte 0 */
    {"n3-bytes", "--cores 2", 2, 3, 256, 0},
    {"n3-pod", "--cores 2", 4, 3, 128, 2},
};
#define NRUNS (sizeof runs / sizeof *runs)

static const char *data_of(int vocab)
{
    return vocab == 256 ? AD "/bytes.bin" : AD "/words.txt";
}

/* Trains r, its output in AD/NAME.log, and writes the windows its steps
 * drew to AD/NAME.windows. Returns 0 when both went well. */
static int train(const struct accum_run *r)
{
    char cmd[2048], out[65536], path[256], launcher[256] = "./gpt";
    if (r->ranks)
        snprintf(launcher, sizeof launcher, T_MPIRUN "-np %d ./gpt-mpi", r->ranks);
    snprintf(cmd, sizeof cmd, "%s train " RUN " --batch %d --grad-accum %d --vocab %d --init "
             AD "/init-%d.safetensors --data %s %s --out " AD "/%s > " AD "/%s.log", launcher,
             r->batch, r->accum, r->vocab, r->vocab, data_of(r->vocab), r->flags, r->name,
             r->name);
    int rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 0, "%s: rc %d: %s", cmd, rc, out);
    if (rc)
        return -1;
    int windows = r->batch * r->accum;
    size_t n = (size_t)STEPS * windows * SEQ;
    unsigned char *drawn = malloc(n);
    t_train_windows(data_of(r->vocab), SEQ, r->vocab, SEED, windows, STEPS, drawn);
    snprintf(path, sizeof path, AD "/%s.windows", r->name);
    FILE *f = fopen(path, "wb");
    size_t put = f ? fwrite(drawn, 1, n, f) : 0;
    if (f)
        fclose(f);
    free(drawn);
    CHECK(put == n, "%s: cannot write", path);
    return put == n ? 0 : -1;
}

/* accum_check.py's line for run name in its output, or "" */
static void line_of(const char *out, const char *name, char *line, size_t n)
{
    char head[64];
    snprintf(head, sizeof head, "%s: ", name);
    const char *at = out;
    while ((at = strstr(at, head)) && at != out && at[-1] != '\n')
        at++;
    size_t len = at ? strcspn(at, "\n") : 0;
    snprintf(line, n, "%.*s", (int)(len < n ? len : n - 1), at ? at : "");
}

/* Trains every run (the pod's when mpirun and gpt-mpi are here), marking
 * in ran[] those that went well, and appends their names to cmd. */
static void train_all(int *ran, char *cmd, size_t n)
{
    int pod = t_have_mpi("--grad-accum 3 in a pod of 2 ranks");
    for (size_t i = 0; i < NRUNS; i++) {
        if (runs[i].ranks && !pod)
            continue;
        ran[i] = train(&runs[i]) == 0;
        if (ran[i])
            snprintf(cmd + strlen(cmd), n - strlen(cmd), " %s", runs[i].name);
    }
}

/* Each run's line of accum_check.py's output must say ok; returns how
 * many do not. */
static int check_lines(const int *ran, const char *out)
{
    char line[1024];
    int failed = 0;
    for (size_t i = 0; i < NRUNS; i++) {
        if (!ran[i])
            continue;
        line_of(out, runs[i].name, line, sizeof line);
        int ok = strstr(line, ": ok ") != NULL;
        failed += !ok;
        CHECK(ok, "--batch %d --grad-accum %d --vocab %d%s%s%s: gpt train's steps are not "
              "float64 PyTorch's steps on all %d windows: %s", runs[i].batch, runs[i].accum,
              runs[i].vocab, *runs[i].flags ? " " : "", runs[i].flags,
              runs[i].ranks ? " in a pod of 2 ranks" : "", runs[i].batch * runs[i].accum,
              line[0] ? line : "no line");
    }
    return failed;
}

void test_accum(void)
{
    char out[65536], cmd[2048] = PY " check " AD;
    if (t_run("/usr/bin/python3 -c 'import torch' 2>/dev/null", out, sizeof out)) {
        SKIP_MISSING("python3-torch", "gradient accumulation not held to PyTorch: no torch for "
                     "/usr/bin/python3");
        return;
    }
    t_run("rm -rf " AD " && mkdir -p " AD, out, sizeof out);
    t_write_words(AD "/words.txt", 20000);
    t_write_bytes(AD "/bytes.bin", 20000);
    int rc = t_run(PY " init " AD " " SHAPE, out, sizeof out);
    CHECK(rc == 0, "accum_check.py init: rc %d: %s", rc, out);
    if (rc)
        return;
    int ran[NRUNS] = {0};
    train_all(ran, cmd, sizeof cmd);
    rc = t_run(cmd, out, sizeof out);
    int failed = check_lines(ran, out);
    CHECK(rc == 0 || failed, "accum_check.py check: rc %d: %s", rc, out);
}
