/* tests/test_loader.c: training on a corpus streamed in parts, as a user
 * runs it: tar shards written by gpt shard, the same through pipe:, a
 * resume mid-part that continues bit for bit, epochs through a small
 * shuffle buffer, --vocab 256 on UTF-8 text, and the one-line errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test.h"

#define LD "tests/tmp/ld"
#define MODEL "--embed 16 --heads 2 --layers 1 --mlp 16 --context 32 --seq 32 --batch 8 " \
              "--eval-batch 8 --eval-every 10 --threads 2"
#define SHARDS LD "/sh/train-{000000..000003}.tar"
#define CORPUS MODEL " --data '" SHARDS "' --test-data " LD "/test.txt"

/* The lines a run prints at its eval steps: the same run, the same lines. */
static void eval_lines(const char *log, char *out, size_t n)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep '^step' %s", log);
    t_run(cmd, out, n);
}

static void make_corpus(void)
{
    char out[8192], path[256];
    t_run("rm -rf " LD " && mkdir -p " LD "/in", out, sizeof out);
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, LD "/in/doc%d.txt", i);
        t_write_words(path, 3000 + 50 * (size_t)i); /* two a shard */
    }
    t_write_words(LD "/test.txt", 4000);
    int rc = t_run("./gpt shard --out " LD "/sh --max-bytes 12K " LD "/in", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "4 shards, 8 documents"), "gpt shard: %d %s", rc, out);
}

/* Shards train; pipe:cat of the same shards gives the same run. */
static void check_shards_and_pipes(void)
{
    char out[65536], a[8192], b[8192];
    int rc = t_run("./gpt train " CORPUS " --steps 30 --out " LD "/r1 > " LD "/r1.log 2>&1",
                   out, sizeof out);
    t_run("cat " LD "/r1.log", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "4 parts in 4 streams") && strstr(out, "data stream 3: ") &&
          strstr(out, "waited"), "training on shards: rc %d: %s", rc, out);
    rc = t_run("./gpt train " MODEL " --data 'pipe:cat " SHARDS "' --test-data " LD
               "/test.txt --steps 30 --out " LD "/r2 > " LD "/r2.log 2>&1", out, sizeof out);
    eval_lines(LD "/r1.log", a, sizeof a);
    eval_lines(LD "/r2.log", b, sizeof b);
    CHECK(rc == 0 && a[0] && !strcmp(a, b), "pipe:cat differs from the files (rc %d):\n%s\n%s",
          rc, a, b);
}

/* A pipe's command starts with no signal blocked (the loader's thread
 * blocks them all), so SIGPIPE, ^C and SIGTERM reach it as usual. grep
 * reads its own mask, which it inherits from the shell: the shell's own
 * (/proc/$$) shows every signal blocked while dash forks, a race. */
static void check_pipe_signals(void)
{
    char out[65536];
    int rc = t_run("./gpt train " MODEL " --data 'pipe:grep SigBlk /proc/self/status >&2; cat " LD
                   "/sh/train-000000.tar' --test-data " LD "/test.txt --steps 2 --out " LD "/sig",
                   out, sizeof out);
    CHECK(rc == 0 && strstr(out, "SigBlk:\t0000000000000000"), "a pipe command's blocked "
          "signals: rc %d: %.400s", rc, out);
}

/* A resume mid-part continues bit for bit, at another thread count too. */
static void check_resume(const char *flags, const char *name)
{
    char out[65536], cmd[1024];
    snprintf(cmd, sizeof cmd, "./gpt train " CORPUS " %s --steps 40 --ckpt-every 10 --keep 5 "
             "--out " LD "/%s-a && mkdir -p " LD "/%s-b && cp " LD "/%s-a/ckpt-00000020."
             "safetensors " LD "/%s-b/ && ./gpt train " CORPUS " %s --threads 1 --steps 40 "
             "--resume --out " LD "/%s-b", flags, name, name, name, name, flags, name);
    int rc = t_run(cmd, out, sizeof out);
    char a[256], b[256];
    snprintf(a, sizeof a, LD "/%s-a/ckpt-00000040.safetensors", name);
    snprintf(b, sizeof b, LD "/%s-b/ckpt-00000040.safetensors", name);
    CHECK(rc == 0 && t_same_file(a, b), "%s: resumed at step 20 differs from straight (rc %d): "
          "%s", name, rc, rc ? out : "");
}

/* One stream over all parts with a 3-window buffer: several epochs, and
 * the report gives each epoch's documents and bytes. */
static void check_epochs(void)
{
    char out[65536];
    int rc = t_run("./gpt train " CORPUS " --streams 1 --shuffle-buffer 3 --batch 32 --steps 40 "
                   "--out " LD "/ep", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "data stream 0: ") && strstr(out, "the last 8 documents, "),
          "epochs: rc %d: %s", rc, out);
    check_resume("--streams 1 --shuffle-buffer 3 --batch 32", "ep-res");
}

/* UTF-8 trains under --vocab 256, which the checkpoint keeps; vocab 128
 * refuses it, naming the file and offset. */
static void check_vocab(void)
{
    char out[65536];
    FILE *f = fopen(LD "/utf8.txt", "w");
    for (int i = 0; f && i < 400; i++)
        fprintf(f, "Élémentaire, mon cher Watson — %d naïve café. ", i);
    if (f)
        fclose(f);
    int rc = t_run("./gpt train " MODEL " --data " LD "/utf8.txt --steps 10 --out " LD "/u128",
                   out, sizeof out);
    CHECK(rc == 1 && strstr(out, LD "/utf8.txt: byte 0xc3 at offset 0 is not ASCII") &&
          strstr(out, "--vocab 256"), "UTF-8 under vocab 128: rc %d: %s", rc, out);
    rc = t_run("./gpt train " MODEL " --vocab 256 --data " LD "/utf8.txt --steps 30 --out " LD
               "/u256 && ./gpt sample --ckpt " LD "/u256 --prompt 'Élé' --bytes 40 && ./gpt "
               "eval --ckpt " LD "/u256 --data " LD "/utf8.txt", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "loss "), "--vocab 256: rc %d: %s", rc, out);
    /* PyTorch's reference, built with 256, loads it and agrees (when installed) */
    char ours[256];
    if (t_run("/usr/bin/python3 -c 'import torch' 2>/dev/null", out, sizeof out) == 0) {
        t_run("./gpt eval --ckpt " LD "/u256 --data " LD "/utf8.txt", ours, sizeof ours);
        rc = t_run("/usr/bin/python3 tests/torch_check.py " LD "/u256/ckpt-00000030.safetensors "
                   LD "/utf8.txt", out, sizeof out);
        CHECK(rc == 0 && !strcmp(out, ours), "PyTorch on the vocab-256 checkpoint: rc %d: %s "
              "(gpt eval: %s)", rc, out, ours);
    } else {
        SKIP_MISSING("python3-torch", "the vocab-256 checkpoint not loaded into PyTorch's "
                     "reference: no torch for /usr/bin/python3");
    }
    rc = t_run("./gpt sample --ckpt " LD "/r1 --prompt 'Élé' --bytes 4", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--prompt must be ASCII"), "a UTF-8 prompt to a vocab-128 "
          "model: rc %d: %s", rc, out);
    /* inside a shard: the shard, the member and the offset */
    rc = t_run("mkdir -p " LD "/u8in && cp " LD "/utf8.txt " LD "/u8in/ && ./gpt shard --out "
               LD "/u8sh " LD "/u8in > /dev/null && ./gpt train " MODEL " --data '" LD
               "/u8sh/*.tar' --test-data " LD "/test.txt --steps 5 --out " LD "/u8x", out,
               sizeof out);
    CHECK(rc == 1 && strstr(out, LD "/u8sh/train-000000.tar: 000000: byte 0xc3 at offset "),
          "UTF-8 in a shard under vocab 128: rc %d: %s", rc, out);
}

static void expect_error(const char *flags, int want_rc, const char *want)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "./gpt train " MODEL " %s --steps 5 --out " LD "/bad", flags);
    t_expect_one_line(cmd, want_rc, want);
}

static void check_errors(void)
{
    expect_error("--data '" SHARDS "'", 2, "give its test set with --test-data");
    expect_error("--data '" LD "/none-*.tar' --test-data " LD "/test.txt", 1, "none-*.tar");
    expect_error("--data 'pipe:exit 3' --test-data " LD "/test.txt", 1,
                 "pipe:exit 3 exited with status 3");
    expect_error("--data '" LD "/sh/train-{000000..000009}.tar' --test-data " LD "/test.txt", 1,
                 "train-000004.tar: cannot open data file");
    char out[256];
    t_run("head -c 3000 " LD "/sh/train-000000.tar > " LD "/cut.tar && cp " LD "/sh/train-000001."
          "tar " LD "/sum.tar && printf 'X' | dd of=" LD "/sum.tar bs=1 seek=0 conv=notrunc "
          "2>/dev/null", out, sizeof out);
    expect_error("--data " LD "/cut.tar --test-data " LD "/test.txt", 1,
                 LD "/cut.tar: truncated member '000000.txt'");
    expect_error("--data " LD "/sum.tar --test-data " LD "/test.txt", 1,
                 LD "/sum.tar: bad header checksum at offset 0");
    expect_error("--data '" SHARDS "' --test-data " LD "/test.txt --streams 3", 2,
                 "--streams must be 0 or a power of two");
    expect_error("--data '" SHARDS "' --test-data " LD "/test.txt --streams 8", 2,
                 "--streams 8 needs as many parts");
    expect_error("--data '" SHARDS "' --test-data " LD "/test.txt --vocab 100", 2,
                 "--vocab must be 128");
}

void test_loader(void)
{
    make_corpus();
    check_shards_and_pipes();
    check_pipe_signals();
    check_resume("", "res");
    check_epochs();
    check_vocab();
    check_errors();
}
