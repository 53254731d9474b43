/* tests/test_loader.c: training on a corpus streamed in parts, as a user
 * runs it: tar shards written by gpt shard, the same through pipe:, a
 * resume mid-part that continues bit for bit, epochs through a small
 * shuffle buffer, --vocab 256 on UTF-8 text, and the one-line errors;
 * then the loader's draws themselves (loader.h), against what its scheme
 * predicts: the shuffle buffer, each epoch's order of parts, and parts
 * split over streams. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data/loader.h"
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
    snprintf(cmd, sizeof cmd, "grep -a '^step' %s", log);
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
        t_run_stdout("./gpt eval --ckpt " LD "/u256 --data " LD "/utf8.txt", ours, sizeof ours);
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

/* ---- the loader's draws, against its scheme ---- */

#define WT 8 /* bytes a window in these tests */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A loader of windows of WT bytes over parts: S streams, all on this host,
 * B windows a step, a buffer of K windows. */
static Loader *start_loader(const DataList *parts, int S, int B, int K, uint64_t seed)
{
    LoaderSpec spec = {.T = WT, .B = B, .streams = S, .first = 0, .count = S, .buffer = K,
                       .vocab = 128, .seed = seed};
    char err[1024];
    Loader *l = loader_start(&spec, parts, NULL, err, sizeof err);
    CHECK(l, "loader_start: %s", err);
    return l;
}

/* The next step's windows, or NULL after a failed check. */
static const unsigned char *next_rows(Loader *l)
{
    char err[1024];
    const unsigned char *rows = loader_next(l, NULL, err, sizeof err);
    CHECK(rows, "loader_next: %s", err);
    return rows;
}

/* Parts of one window each, "aaaaaaaa", "bbbbbbbb", ...: a window's first
 * byte names its part. */
static void one_window_parts(DataList *parts, int n)
{
    char path[256], text[WT + 1];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, LD "/lt/part-%c.txt", 'a' + i);
        memset(text, 'a' + i, WT);
        text[WT] = 0;
        write_text(path, text);
        data_list_add(parts, path);
    }
}

/* The shuffle buffer of K windows: it starts with the stream's first K
 * windows, and each draw takes one of its K slots uniformly, which the
 * stream's next window refills. So the first window drawn is uniformly one
 * of the first K (over 40 seeds each comes up: all but one fail to with
 * probability below 1e-4); draw i takes a window among the first K + i;
 * none is drawn twice; and a window waits a geometric time (p = 1/K) to be
 * drawn: one still in the buffer after 60 draws has odds of 1e-7. One part
 * of 400 numbered windows, "w000123\n", not read to its end here. */
static void check_shuffle_buffer(void)
{
    enum { K = 4, N = 400, DRAWS = 300, SEEDS = 40 };
    static char text[N * WT + 1];
    for (int i = 0; i < N; i++) /* % 10^6: 6 digits, as gcc -O1 cannot tell from N */
        snprintf(text + i * WT, WT + 1, "w%06u\n", (unsigned)i % 1000000u);
    write_text(LD "/lt/numbered.txt", text);
    DataList parts = {0};
    data_list_add(&parts, LD "/lt/numbered.txt");
    int first[K] = {0}, wild = 0;
    for (int seed = 1; seed <= SEEDS; seed++) {
        Loader *l = start_loader(&parts, 1, 1, K, (uint64_t)seed);
        const unsigned char *rows = l ? next_rows(l) : NULL;
        int w = rows ? atoi((const char *)rows + 1) : -1;
        if (w >= 0 && w < K)
            first[w]++;
        else
            wild++;
        loader_stop(l);
    }
    for (int k = 0; k < K; k++)
        CHECK(first[k] > 0, "of %d seeds none drew window %d first (the buffer holds windows "
              "0..%d at the start)", SEEDS, k, K - 1);
    CHECK(!wild, "%d of %d seeds drew first a window the buffer cannot hold yet", wild, SEEDS);

    int times[N] = {0}, late = 0;
    Loader *l = start_loader(&parts, 1, 1, K, 7);
    for (int i = 0; l && i < DRAWS; i++) {
        const unsigned char *rows = next_rows(l);
        if (!rows)
            break;
        int w = atoi((const char *)rows + 1);
        if (w < 0 || w >= K + i) {
            late++;
            continue;
        }
        times[w]++;
    }
    loader_stop(l);
    CHECK(!late, "%d draws took a window not yet read into the buffer", late);
    int twice = 0, missed = 0;
    for (int w = 0; w < N; w++) {
        twice += times[w] > 1;
        missed += w < DRAWS - 60 && times[w] == 0;
    }
    CHECK(!twice && !missed, "of windows 0..%d, %d drawn more than once, %d never drawn in %d "
          "draws", DRAWS - 61, twice, missed, DRAWS);
    data_list_free(&parts);
}

/* Each epoch's order of parts is a uniformly random permutation (a
 * Fisher-Yates shuffle): over 180 epochs of 3 parts, each of the 6 orders
 * comes up about 30 times, the 4 that leave a part in place included. One
 * stream with a buffer of one window reads the parts in the epoch's order,
 * and a step of 3 windows is an epoch. */
static void check_part_order(void)
{
    enum { EPOCHS = 180 };
    static const char *const order[6] = {"abc", "acb", "bac", "bca", "cab", "cba"};
    DataList parts = {0};
    one_window_parts(&parts, 3);
    int seen[6] = {0}, other = 0;
    Loader *l = start_loader(&parts, 1, 3, 1, 11);
    for (int e = 0; l && e < EPOCHS; e++) {
        const unsigned char *rows = next_rows(l);
        if (!rows)
            break;
        char got[4] = {(char)rows[0], (char)rows[WT], (char)rows[2 * WT], 0};
        int k = 0;
        while (k < 6 && strcmp(got, order[k]))
            k++;
        if (k < 6)
            seen[k]++;
        else
            other++;
    }
    loader_stop(l);
    CHECK(!other, "%d of %d epochs did not read each part once", other, EPOCHS);
    /* each order's count is binomial (180, 1/6): mean 30, deviation 5 */
    for (int k = 0; k < 6; k++)
        CHECK(seen[k] >= 10 && seen[k] <= 50, "the parts in order %s in %d of %d epochs, want "
              "about %d", order[k], seen[k], EPOCHS, EPOCHS / 6);
    data_list_free(&parts);
}

/* 5 parts over 2 streams: part i of an epoch's order belongs to stream
 * i mod 2, so stream 0 reads 3 parts an epoch and stream 1 reads 2, and
 * together they read every part once. One window a part and a buffer of
 * one window: stream 0's windows 3e..3e+2 and stream 1's 2e..2e+1 are
 * epoch e's parts. The report's bytes of an epoch add up to the corpus. */
static void check_stream_split(void)
{
    enum { STEPS = 30, EPOCHS = STEPS / 3 };
    DataList parts = {0};
    one_window_parts(&parts, 5);
    char win[2][STEPS];
    int steps = 0;
    Loader *l = start_loader(&parts, 2, 2, 1, 5);
    for (; l && steps < STEPS; steps++) {
        const unsigned char *rows = next_rows(l); /* row r from stream r */
        if (!rows)
            break;
        win[0][steps] = (char)rows[0];
        win[1][steps] = (char)rows[WT];
    }
    int bad = steps < STEPS;
    for (int e = 0; !bad && e < EPOCHS; e++) {
        int read[6] = {0}; /* read[5]: a window of no part */
        for (int i = 0; i < 5; i++) {
            int p = (i < 3 ? win[0][3 * e + i] : win[1][2 * e + i - 3]) - 'a';
            read[p >= 0 && p < 5 ? p : 5]++;
        }
        for (int p = 0; p < 6; p++)
            bad += read[p] != (p < 5);
        CHECK(!bad, "epoch %d: stream 0 read %.3s, stream 1 %.2s: not each of 5 parts once", e,
              win[0] + 3 * e, win[1] + 2 * e);
    }
    StreamStats s0 = l ? loader_stats(l, 0) : (StreamStats){0};
    StreamStats s1 = l ? loader_stats(l, 1) : (StreamStats){0};
    loader_stop(l);
    CHECK(s0.parts == 3 && s1.parts == 2 && s0.epochs >= EPOCHS - 1 && s1.epochs >= EPOCHS - 1 &&
          s0.epoch_bytes + s1.epoch_bytes == 5 * WT, "streams of 5 parts: %d and %d parts, "
          "%llu and %llu bytes an epoch (want 3 and 2 parts, %d bytes in all)", s0.parts,
          s1.parts, (unsigned long long)s0.epoch_bytes, (unsigned long long)s1.epoch_bytes,
          5 * WT);
    data_list_free(&parts);
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
    char out[256];
    t_run("mkdir -p " LD "/lt", out, sizeof out);
    check_shuffle_buffer();
    check_part_order();
    check_stream_split();
}
