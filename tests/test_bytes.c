/* tests/test_bytes.c: under --vocab 256 the bytes read are the tokens the
 * model sees, every value 0..255 of them (t_write_bytes: 0 and >= 128
 * included). The windows of each input path are held to the file's bytes
 * at the offsets drawn: training windows of a text file (the run's own
 * generator, replayed here), the eval lines' test windows, a --test-data
 * corpus, and the windows streamed from a tar shard and from pipe:. Then
 * the model's side: after one gpt train step (from a text file, and from
 * pipe:), a token embedding's column has a nonzero gradient (Adam's m)
 * exactly when its byte is among the step's inputs; gpt eval's loss on
 * high bytes is PyTorch's (tests/torch_check.py); and under --vocab 128
 * byte 0x80 is refused while 0x00 and 0x7f train. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/data.h"
#include "data/loader.h"
#include "data/text.h"
#include "safetensors/safetensors.h"
#include "util/rng.h"
#include "test.h"

#define BD "tests/tmp/bytes"
#define TEXT BD "/bytes.bin"
#define WIN 16 /* bytes a window (--seq) */
#define SEED 11
#define DOC_A 1024 /* the shard's two documents: windows of WIN bytes each */
#define DOC_B 768
#define SHARD BD "/sh/train-000000.tar"
#define TOKEN_M "_gpt.adam_m.decode_transformer.token_embedding.weight"
#define STEP_WINDOWS 32 /* --batch of the gpt train steps whose gradients are read */
#define BUFFER 4        /* a stream's shuffle buffer, in windows */
#define RUN "./gpt train --context " T_STR(WIN) " --seq " T_STR(WIN) " --seed " T_STR(SEED) \
            " --embed 16 --mlp 32 --heads 2 --layers 1 --eval-batch 4 --eval-bytes 1 " \
            "--final-bytes 1 --prompt a --live off --threads 1"

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    size_t put = f ? fwrite(p, 1, n, f) : 0;
    if (f)
        fclose(f);
    CHECK(put == n, "cannot write %s", path);
}

/* A loader of `windows` windows a step from one stream over src's parts,
 * with a buffer of BUFFER windows, as gpt train makes it with --streams 1
 * --shuffle-buffer 4. */
static Loader *stream_loader(const DataSource *src, int windows, char *err, size_t elen)
{
    LoaderSpec ls = {.T = WIN, .B = windows, .streams = 1, .count = 1, .buffer = BUFFER,
                     .vocab = 256, .seed = SEED};
    return loader_start(&ls, &src->parts, NULL, err, elen);
}

/* Does the window hold byte 0 and a byte >= 128 (so that it can tell)? */
static void tally(const unsigned char *w, size_t n, int *zero, int *high)
{
    for (size_t i = 0; i < n; i++) {
        *zero |= w[i] == 0;
        *high |= w[i] >= 128;
    }
}

/* Windows a text file's training steps drew (the loader's, as gpt train
 * draws them) against its bytes at the offsets the run's generator gives:
 * starts uniform in [0, n_train - WIN), n_train its first 80%. */
static void check_train_windows(void)
{
    enum { W = 64, STEPS = 4 };
    size_t n;
    unsigned char *text = t_slurp(TEXT, &n), *drawn = malloc((size_t)STEPS * W * WIN);
    t_train_windows(TEXT, WIN, 256, SEED, W, STEPS, drawn);
    Rng r;
    rng_seed(&r, SEED, RNG_DATA);
    int wrong = 0, zero = 0, high = 0;
    for (int i = 0; i < STEPS * W; i++) {
        size_t at = (size_t)rng_below(&r, n * 8 / 10 - WIN);
        wrong += memcmp(drawn + (size_t)i * WIN, text + at, WIN) != 0;
        tally(drawn + (size_t)i * WIN, WIN, &zero, &high);
    }
    CHECK(!wrong && zero && high, "training windows of %s: %d of %d are not the file's bytes "
          "at the offsets drawn (byte 0 among them %d, bytes >= 128 %d)", TEXT, wrong,
          STEPS * W, zero, high);
    free(text);
    free(drawn);
}

/* The eval lines' test windows (sample_windows on the last 20%) against
 * the file's bytes at the offsets the eval generator gives; the targets
 * are the next bytes. */
static void check_eval_windows(void)
{
    enum { W = 64 };
    Data d;
    load_data(&d, TEXT, WIN, 256, 1);
    Batch b;
    batch_alloc(&b, W, WIN);
    Rng r, replay;
    rng_seed(&r, SEED, RNG_EVAL);
    replay = r;
    sample_windows(&b, &d, d.n_train, d.n - d.n_train, &r, NULL);
    size_t n;
    unsigned char *text = t_slurp(TEXT, &n);
    int wrong = 0, zero = 0, high = 0;
    for (int i = 0; i < W; i++) {
        size_t at = d.n_train + (size_t)rng_below(&replay, d.n - d.n_train - WIN);
        for (int t = 0; t < WIN; t++) {
            size_t k = (size_t)i * WIN + (size_t)t;
            wrong += b.tok[k] != text[at + (size_t)t] ||
                     (t + 1 < WIN && b.tgt[k] != text[at + (size_t)t + 1]);
        }
        tally(text + at, WIN, &zero, &high);
    }
    CHECK(n == d.n && !wrong && zero && high, "eval windows of %s: %d tokens or targets are not "
          "the file's bytes at the offsets drawn (byte 0 among them %d, >= 128 %d)", TEXT,
          wrong, zero, high);
    batch_free(&b);
    free(d.bytes);
    free(text);
}

/* A corpus as --test-data reads it whole: the shard's documents, and the
 * same through pipe:, are the input files' bytes one after the other. */
static void check_test_corpus(const char *spec, const unsigned char *docs)
{
    Data d;
    load_corpus(&d, spec, WIN, 256);
    CHECK(d.n == DOC_A + DOC_B && !memcmp(d.bytes, docs, d.n), "--test-data %s: %zu bytes, "
          "not the %d of its documents", spec, d.n, DOC_A + DOC_B);
    free(d.bytes);
}

/* Windows streamed from the shard (spec: the file, or pipe:cat of it):
 * the stream cuts its documents, one after the other, into windows of WIN
 * bytes (the documents' sizes are whole windows, so every epoch cuts the
 * same ones); each window drawn must be one of them. */
static void check_streamed(const char *spec, const unsigned char *docs)
{
    enum { W = 8, STEPS = 20 }; /* more windows than an epoch holds */
    DataSource src;
    char err[1024];
    CHECK(data_source_open(&src, spec, err, sizeof err) == 0, "%s", err);
    Loader *l = stream_loader(&src, W, err, sizeof err);
    CHECK(l, "%s: %s", spec, err);
    int wrong = 0, zero = 0, high = 0;
    for (int s = 0; l && s < STEPS; s++) {
        const unsigned char *rows = loader_next(l, NULL, err, sizeof err);
        CHECK(rows, "%s: %s", spec, err);
        for (int i = 0; rows && i < W; i++) {
            const unsigned char *w = rows + (size_t)i * WIN;
            int k = 0;
            while (k < (DOC_A + DOC_B) / WIN && memcmp(w, docs + (size_t)k * WIN, WIN))
                k++;
            wrong += k == (DOC_A + DOC_B) / WIN;
            tally(w, WIN, &zero, &high);
        }
    }
    loader_stop(l);
    data_source_free(&src);
    CHECK(!wrong && zero && high, "%s: %d of %d windows streamed are none of its documents' "
          "(byte 0 among them %d, >= 128 %d)", spec, wrong, STEPS * W, zero, high);
}

/* Which of the 256 token-embedding columns (bytes) had a gradient in the
 * checkpoint's one step: Adam's m, 0.1 x the gradient, is nonzero. */
static int moved_columns(const char *ckpt, int *moved)
{
    StFile f;
    char err[512];
    if (st_load(&f, ckpt, err, sizeof err)) {
        CHECK(0, "%s: %s", ckpt, err);
        return -1;
    }
    const StEntry *e = st_find(&f, TOKEN_M);
    int ok = e && e->dtype == ST_F32 && e->ndim == 2 && e->shape[1] == 256;
    CHECK(ok, "%s: no %s [C,256]", ckpt, TOKEN_M);
    const float *m = ok ? st_data(&f, e) : NULL;
    for (int b = 0; ok && b < 256; b++) {
        moved[b] = 0;
        for (int64_t c = 0; c < e->shape[0]; c++)
            moved[b] |= m[c * 256 + b] != 0;
    }
    st_free(&f);
    return ok ? 0 : -1;
}

/* After one step of W windows, byte b's column has a gradient exactly
 * when b is an input of the step: in a window's first WIN-1 places (the
 * last one's prediction has no target, and no place attends to it but
 * itself, so it gets none). inputs: the step's windows. */
static void check_gradients(const char *what, const char *ckpt, const unsigned char *inputs,
                            int windows)
{
    int moved[256], seen[256] = {0};
    if (moved_columns(ckpt, moved))
        return;
    for (int i = 0; i < windows; i++)
        for (int t = 0; t + 1 < WIN; t++)
            seen[inputs[(size_t)i * WIN + (size_t)t]] = 1;
    int wrong = 0, high_seen = 0, high_unseen = 0, first = -1;
    for (int b = 0; b < 256; b++) {
        if (moved[b] != seen[b] && (first < 0 || (first < 128 && b >= 128)))
            first = b; /* a byte >= 128 rather, if one is wrong */
        wrong += moved[b] != seen[b];
        high_seen += b >= 128 && seen[b];
        high_unseen += b >= 128 && !seen[b];
    }
    CHECK(!wrong && high_seen && high_unseen && seen[0], "%s: %d token-embedding columns have "
          "a gradient when their byte is not an input, or none when it is (the first: byte "
          "0x%02x, an input %d, moved %d); %d bytes >= 128 are inputs, %d not, byte 0 %d", what,
          wrong, first & 255, first >= 0 && seen[first], first >= 0 && moved[first], high_seen,
          high_unseen, seen[0]);
}

/* One gpt train step on the text file: its gradients against the windows
 * the run drew. */
static void check_train_gradients(void)
{
    char out[65536];
    int rc = t_run(RUN " --vocab 256 --batch " T_STR(STEP_WINDOWS) " --steps 1 --data " TEXT
                   " --out " BD "/g", out, sizeof out);
    CHECK(rc == 0, "gpt train --vocab 256 on %s: rc %d: %s", TEXT, rc, out);
    unsigned char inputs[STEP_WINDOWS * WIN];
    t_train_windows(TEXT, WIN, 256, SEED, STEP_WINDOWS, 1, inputs);
    check_gradients("gpt train --data " TEXT, BD "/g/ckpt-00000001.safetensors", inputs,
                    STEP_WINDOWS);
}

/* The same from pipe:cat of the shard: the loader's draws (one stream,
 * the buffer the flags give), made here as the run makes them. */
static void check_pipe_gradients(void)
{
    char out[65536], err[1024];
    int rc = t_run(RUN " --vocab 256 --batch " T_STR(STEP_WINDOWS) " --steps 1 --streams 1 "
                   "--shuffle-buffer " T_STR(BUFFER) " --data 'pipe:cat " SHARD "' --test-data "
                   TEXT " --out " BD "/gp", out, sizeof out);
    CHECK(rc == 0, "gpt train --vocab 256 on pipe:cat %s: rc %d: %s", SHARD, rc, out);
    DataSource src;
    CHECK(data_source_open(&src, "pipe:cat " SHARD, err, sizeof err) == 0, "%s", err);
    Loader *l = stream_loader(&src, STEP_WINDOWS, err, sizeof err);
    const unsigned char *rows = l ? loader_next(l, NULL, err, sizeof err) : NULL;
    CHECK(rows, "pipe:cat %s: %s", SHARD, err);
    if (rows)
        check_gradients("gpt train --data 'pipe:cat " SHARD "'",
                        BD "/gp/ckpt-00000001.safetensors", rows, STEP_WINDOWS);
    loader_stop(l);
    data_source_free(&src);
}

/* gpt eval's loss over the test split of high bytes is PyTorch's. */
static void check_eval_loss(void)
{
    char out[4096], ours[4096];
    if (t_run("/usr/bin/python3 -c 'import torch' 2>/dev/null", out, sizeof out)) {
        SKIP_MISSING("python3-torch", "gpt eval's loss on bytes >= 128 not held to PyTorch: no "
                     "torch for /usr/bin/python3");
        return;
    }
    int rc = t_run_stdout("./gpt eval --ckpt " BD "/g --data " TEXT, ours, sizeof ours);
    CHECK(rc == 0 && strstr(ours, "loss "), "gpt eval --vocab 256: rc %d: %s", rc, ours);
    rc = t_run("/usr/bin/python3 tests/torch_check.py " BD "/g/ckpt-00000001.safetensors " TEXT,
               out, sizeof out);
    CHECK(rc == 0 && !strcmp(out, ours), "on %s (every byte value), PyTorch's test loss is "
          "'%s' (rc %d), gpt eval's '%s'", TEXT, out, rc, ours);
}

/* Under --vocab 128 the check is at 128: byte 0x80 is refused, in a text
 * file, a --test-data file and a shard, naming the offset; 0x00 and 0x7f
 * train. */
static void check_vocab_edge(void)
{
    char text[256], out[65536];
    for (int i = 0; i < (int)sizeof text; i++)
        text[i] = (char)(i % 2 ? 0x7f : i % 3 ? 'a' + i % 26 : 0);
    write_file(BD "/ascii.txt", text, sizeof text);
    text[37] = (char)0x80;
    write_file(BD "/in80/x.txt", text, sizeof text);
    int rc = t_run(RUN " --batch 2 --steps 1 --data " BD "/ascii.txt --out " BD "/v7f", out,
                   sizeof out);
    CHECK(rc == 0, "bytes 0x00 and 0x7f under --vocab 128: rc %d: %s", rc, out);
    t_expect_one_line(RUN " --batch 2 --steps 1 --data " BD "/in80/x.txt --out " BD "/v80", 1,
                      BD "/in80/x.txt: byte 0x80 at offset 37 is not ASCII");
    t_expect_one_line(RUN " --batch 2 --steps 1 --data " BD "/ascii.txt --test-data " BD
                      "/in80/x.txt --out " BD "/v80t", 1,
                      BD "/in80/x.txt: byte 0x80 at offset 37 is not ASCII");
    rc = t_run("./gpt shard --out " BD "/sh80 " BD "/in80", out, sizeof out);
    CHECK(rc == 0, "gpt shard: rc %d: %s", rc, out);
    t_expect_one_line(RUN " --batch 2 --steps 1 --data " BD "/sh80/train-000000.tar --test-data "
                      BD "/ascii.txt --out " BD "/v80s", 1, "byte 0x80 at offset ");
}

void test_bytes(void)
{
    char out[4096];
    t_run("rm -rf " BD " && mkdir -p " BD "/in " BD "/in80", out, sizeof out);
    t_write_bytes(TEXT, 8000);
    size_t n;
    unsigned char *docs = t_slurp(TEXT, &n);
    write_file(BD "/in/a.bin", docs, DOC_A);
    write_file(BD "/in/b.bin", docs + DOC_A, DOC_B);
    int rc = t_run("./gpt shard --out " BD "/sh " BD "/in", out, sizeof out);
    CHECK(rc == 0, "gpt shard: rc %d: %s", rc, out);
    check_train_windows();
    check_eval_windows();
    check_test_corpus(SHARD, docs);
    check_test_corpus("pipe:cat " SHARD, docs);
    check_streamed(SHARD, docs);
    check_streamed("pipe:cat " SHARD, docs);
    check_train_gradients();
    check_pipe_gradients();
    check_eval_loss();
    check_vocab_edge();
    free(docs);
}
