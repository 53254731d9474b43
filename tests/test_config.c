/* tests/test_config.c: gpt train --config FILE. A file of 'flag = value'
 * lines is the same run as its flags spelled out, bit for bit; the command
 * line wins over it wherever it stands; every shipped config in configs/
 * is accepted; and each kind of bad line is one usage error naming the
 * file and its line. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include "test.h"

#define TMP "tests/tmp/cfg"
#define TINY "--embed 16 --mlp 32 --heads 2 --layers 1 --context 32 --seq 32 --batch 4 " \
             "--eval-batch 8 --eval-every 5 --final-bytes 16 --warmup 0 --data " TMP "/d.txt"

/* For the runs of a big config in a tiny shape: should the file's shape
 * win over the command line's (a bug), the run is refused before its
 * first step instead of training GPT-2 small for hours. */
#define GUARD "--hbm 64M"

static void write_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "w");
    fputs(s, f);
    fclose(f);
}

/* The first line of a run's metrics.jsonl: its settings, as recorded. */
static char *recorded_config(const char *out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    char *log = (char *)t_slurp(path, NULL);
    if (log && strchr(log, '\n'))
        *strchr(log, '\n') = 0;
    return log;
}

/* Runs a and b (each an --out of its own) and compares their last
 * checkpoint bytes and the settings their run logs record. */
static void check_same_run(const char *a, const char *b, const char *out_a, const char *out_b,
                           int steps, const char *what)
{
    char out[65536], ca[512], cb[512];
    int ra = t_run(a, out, sizeof out);
    CHECK(ra == 0, "%s: '%s' failed (%d): %s", what, a, ra, out);
    int rb = t_run(b, out, sizeof out);
    CHECK(rb == 0, "%s: '%s' failed (%d): %s", what, b, rb, out);
    snprintf(ca, sizeof ca, "%s/ckpt-%08d.safetensors", out_a, steps);
    snprintf(cb, sizeof cb, "%s/ckpt-%08d.safetensors", out_b, steps);
    CHECK(ra == 0 && rb == 0 && t_same_file(ca, cb), "%s: %s and %s differ", what, ca, cb);
    char *la = recorded_config(out_a), *lb = recorded_config(out_b);
    CHECK(la && lb && !strcmp(la, lb), "%s: the run logs record other settings:\n%s\n%s", what,
          la ? la : "(none)", lb ? lb : "(none)");
    free(la);
    free(lb);
}

/* A small run's config at path: preamble, then its lines, each ended by
 * eol. */
static void write_small_run(const char *path, const char *eol, const char *preamble)
{
    static const char *const lines[] = {
        "# a small run", "", "embed = 16", "mlp=32", "  heads   =   2  ", "layers = 1",
        "context = 32", "seq = 32", "batch = 4", "eval-batch = 8", "eval-every = 5",
        "final-bytes = 16", "lr = 3e-3", "activation = gelu", "no-mlp = false",
        "prompt = the cat sat", "steps = 6", "data = " TMP "/d.txt"};
    FILE *f = fopen(path, "w");
    fputs(preamble, f);
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        fprintf(f, "%s%s", lines[i], eol);
    fclose(f);
}

/* A config and the same flags on the command line: the same checkpoint;
 * so too the file saved with CRLF line ends (a Windows editor's: no value
 * keeps its \r), and the file after 8 KiB of comments (read whole, past
 * the first 4 KiB its reader starts with). */
static void check_same_as_flags(void)
{
    write_small_run(TMP "/run.conf", "\n", "");
    check_same_run("./gpt train --config " TMP "/run.conf --out " TMP "/f1",
                   "./gpt train " TINY " --lr 3e-3 --activation gelu --prompt 'the cat sat' "
                   "--steps 6 --out " TMP "/f2",
                   TMP "/f1", TMP "/f2", 6, "--config vs the same flags");
    write_small_run(TMP "/crlf.conf", "\r\n", "");
    check_same_run("./gpt train --config " TMP "/crlf.conf --out " TMP "/f3", "true", TMP "/f3",
                   TMP "/f2", 6, "a --config file with CRLF line ends vs the same flags");
    char comments[8192 + 1];
    for (size_t i = 0; i + 64 <= sizeof comments - 1; i += 64)
        snprintf(comments + i, 65, "# %-61s\n", "a long note before the settings");
    write_small_run(TMP "/long.conf", "\n", comments);
    check_same_run("./gpt train --config " TMP "/long.conf --out " TMP "/f4", "true", TMP "/f4",
                   TMP "/f2", 6, "an 8 KiB --config file vs the same flags");
}

/* The command line wins over the file, before or after --config. */
static void check_command_line_wins(void)
{
    write_text(TMP "/wins.conf", "embed = 16\nheads = 2\nlayers = 1\ncontext = 32\nseq = 32\n"
                                 "batch = 4\neval-batch = 8\neval-every = 5\nfinal-bytes = 16\n"
                                 "mlp = 32\ndata = " TMP "/d.txt\n"
                                 "lr = 0.5\nsteps = 100\nno-mlp = true\n");
    const char *want = "./gpt train " TINY " --lr 2e-3 --steps 4 --out " TMP "/w0";
    check_same_run("./gpt train --lr 2e-3 --steps 4 --no-mlp=false --config " TMP
                   "/wins.conf --out " TMP "/w1", want, TMP "/w1", TMP "/w0", 4,
                   "flags before --config");
    /* "true": w0 is already the flags' run */
    check_same_run("./gpt train --config " TMP "/wins.conf --no-mlp=false --lr=2e-3 --steps 4 "
                   "--out " TMP "/w2", "true", TMP "/w2", TMP "/w0", 4, "flags after --config");
}

/* The file's values are deliberate, as flags are: a resume that the
 * file contradicts is refused as a contradicting flag is. */
static void check_resume_sees_file(void)
{
    char out[65536];
    write_text(TMP "/lr.conf", "lr = 0.25\n");
    int rc = t_run("./gpt train " TINY " --steps 2 --out " TMP "/r1", out, sizeof out);
    CHECK(rc == 0, "a run to resume failed: %s", out);
    t_expect_one_line("./gpt train --resume " TMP "/r1 --steps 4 --config " TMP "/lr.conf "
                      "--data " TMP "/d.txt", 2, "--lr 0.25 conflicts with the checkpoint's 0.001");
}

/* Every config in configs/ is accepted. A tiny shape and 1 step (no
 * warm-up) stand in for its own shape, which is then checked alone: an
 * impossible --cores is refused by the board (setup_board), after the
 * flags' own checks have passed the file's shape. */
static void check_shipped(void)
{
    DIR *d = opendir("configs");
    struct dirent *e;
    int n = 0;
    char cmd[1024], out[65536];
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".conf"))
            continue;
        n++;
        snprintf(cmd, sizeof cmd, "./gpt train --config configs/%s " TINY " --steps 1 "
                 GUARD " --out " TMP "/s%d", e->d_name, n);
        int rc = t_run(cmd, out, sizeof out);
        CHECK(rc == 0 && strstr(out, "saved"), "'%s' failed (%d): %s", cmd, rc, out);
        snprintf(cmd, sizeof cmd, "./gpt train --config configs/%s --cores 3", e->d_name);
        t_expect_one_line(cmd, 2, "--cores must be a power of two");
    }
    if (d)
        closedir(d);
    CHECK(n >= 4, "configs/ holds %d .conf files (want reference.conf, gpt2-small.conf, "
          "gpt2-small-b8.conf, gpt2-small-b64.conf)", n);
}

/* configs/reference.conf is the defaults spelled out: the same run as no
 * flags at all (2 steps of the reference's shape). Both read the test's
 * text instead of the corpus, which a fresh clone may not have yet: the
 * command line's --data wins over the file's on one side and over the
 * default on the other. */
static void check_reference(void)
{
    check_same_run("./gpt train --config configs/reference.conf --steps 2 --data " TMP
                   "/d.txt --out " TMP "/ref1",
                   "./gpt train --steps 2 --data " TMP "/d.txt --out " TMP "/ref2", TMP "/ref1",
                   TMP "/ref2", 2, "configs/reference.conf vs the defaults");
}

/* configs/gpt2-small.conf says GPT-2 small's run: a tiny shape trained
 * from it records the file's vocab, batch, activation and schedule; its
 * own shape shows in the refusals of a --seq and --heads it cannot take. */
static void check_gpt2_small_says(void)
{
    char out[65536];
    int rc = t_run("./gpt train --config configs/gpt2-small.conf --embed 16 --mlp 32 --heads 2 "
                   "--layers 1 --context 32 --seq 32 --eval-batch 8 --final-bytes 16 --steps 1 "
                   "--warmup 0 " GUARD " --data " TMP "/d.txt --out " TMP "/g1", out, sizeof out);
    char *log = recorded_config(TMP "/g1");
    const char *keys[] = {"\"vocab\":\"256\"", "\"batch\":\"8\"", "\"activation\":\"gelu\"",
                          "\"lr\":\"0.0006\"", "\"decay\":\"cosine\""};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        CHECK(rc == 0 && log && strstr(log, keys[i]), "gpt2-small.conf's run records no %s "
              "(%d): %s", keys[i], rc, log ? log : out);
    free(log);
    t_expect_one_line("./gpt train --config configs/gpt2-small.conf --seq 2000", 2,
                      "--seq must be 2..--context (1024), got 2000");
    t_expect_one_line("./gpt train --config configs/gpt2-small.conf --heads 7", 2,
                      "--heads 7 must be >= 1 and divide --embed 768");
}

/* configs/gpt2-small-b8.conf and -b64.conf: GPT-2 small's rows of the
 * memory table, at batch 8 and 64 of seq 1024 in one micro-batch, 3 steps,
 * an eval of 8 windows at step 0 alone, the metrics printed. A tiny shape
 * trained from each records the file's batch and eval; its seq shows in
 * the refusal of a context shorter than it. */
static void check_table_configs(void)
{
    static const char *const batch[] = {"8", "64"};
    char cmd[1024], out[65536];
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "./gpt train --config configs/gpt2-small-b%s.conf --embed 16 "
                 "--mlp 32 --heads 2 --layers 1 --context 32 --seq 32 " GUARD " --data " TMP
                 "/d.txt --out " TMP "/b%s", batch[i], batch[i]);
        int rc = t_run(cmd, out, sizeof out);
        CHECK(rc == 0 && strstr(out, "saved " TMP) && strstr(out, "ckpt-00000003") &&
                  strstr(out, "Metric: CompileTime") && !strstr(out, "step      1 |"),
              "'%s': want 3 steps, one eval line, a checkpoint at the end and the metrics "
              "(%d): %s", cmd, rc, out);
        snprintf(out, sizeof out, TMP "/b%s", batch[i]);
        char *log = recorded_config(out), want[64];
        snprintf(want, sizeof want, "\"batch\":\"%s\"", batch[i]);
        const char *keys[] = {want, "\"eval-batch\":\"8\"", "\"eval-every\":\"1000000\"",
                              "\"vocab\":\"256\"", "\"activation\":\"gelu\""};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            CHECK(log && strstr(log, keys[k]) && !strstr(log, "grad-accum"),
                  "gpt2-small-b%s.conf's run records no %s (or a grad-accum): %s", batch[i],
                  keys[k], log ? log : "(no log)");
        free(log);
        snprintf(cmd, sizeof cmd, "./gpt train --config configs/gpt2-small-b%s.conf "
                 "--context 512", batch[i]);
        t_expect_one_line(cmd, 2, "--seq must be 2..--context (512), got 1024");
    }
}

/* Each bad file: exit 2, one line naming FILE:LINE and what was wanted. */
static void check_errors(void)
{
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"# fine\n\nstepz = 3\n", TMP "/bad.conf:3: unknown flag 'stepz'"},
        {"steps = 3\nlr 0.1\n", TMP "/bad.conf:2: expected 'flag = value', got 'lr 0.1'"},
        {"steps\n", TMP "/bad.conf:1: expected 'steps = VALUE', the '=' is missing"},
        {"steps =   \n", TMP "/bad.conf:1: expected 'steps = VALUE', the value is missing"},
        {"steps = many\n", TMP "/bad.conf:1: steps expects a whole number, got 'many'"},
        {"lr = fast\n", TMP "/bad.conf:1: lr expects a number, got 'fast'"},
        {"no-mlp = yes\n", TMP "/bad.conf:1: no-mlp expects true or false, got 'yes'"},
        {"no-mlp\n", TMP "/bad.conf:1: expected 'no-mlp = true' or 'no-mlp = false'"},
        {"lr = 1e-3\n# again\nlr = 2e-3\n", TMP "/bad.conf:3: lr is set twice (first on line 1)"},
        {"config = other.conf\n", TMP "/bad.conf:1: a --config file cannot name another"},
    };
    char cmd[512];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(TMP "/bad.conf", bad[i].text);
        /* --steps given too: the file must be right even where it is overridden */
        snprintf(cmd, sizeof cmd, "./gpt train --steps 1 --config " TMP "/bad.conf --out " TMP
                 "/bad");
        t_expect_one_line(cmd, 2, bad[i].says);
    }
    t_expect_one_line("./gpt train --config " TMP "/none.conf", 2,
                      TMP "/none.conf: cannot read the --config file: No such file");
    t_expect_one_line("./gpt train --config " TMP, 2, TMP ": cannot read the --config file");
    t_expect_one_line("./gpt train --config " TMP "/run.conf --config " TMP "/run.conf", 2,
                      "--config given twice");
}

void test_config(void)
{
    char out[256];
    t_run("rm -rf " TMP " && mkdir -p " TMP, out, sizeof out);
    t_write_words(TMP "/d.txt", 39000);
    check_errors();
    check_same_as_flags();
    int failed = t_counts->fail;
    check_command_line_wins();
    check_resume_sees_file();
    /* the shipped files' tiny runs rely on the command line winning: else
     * reference.conf's 50000 steps would run */
    if (t_counts->fail > failed) {
        SKIP_MACHINE("configs/: their tiny runs need the command line to win");
        return;
    }
    check_shipped();
    check_gpt2_small_says();
    check_table_configs();
    check_reference();
}
