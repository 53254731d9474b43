/* tests/test_ckpt.c: safetensors checkpoints written and read back, a
 * PyTorch-written file, and hostile files that must be refused with a
 * message rather than crash or load garbage. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cmd/ckpt.h"
#include "gpt.h"
#include "test.h"

static void check_roundtrip(void)
{
    Config c = {.vocab = VOCAB, .context = 32, .embed = 16, .mlp = 24, .heads = 2, .layers = 2};
    Model a, b;
    char err[256];
    model_init(&a, &c, 42);
    for (size_t i = 0; i < a.nw; i++) {
        a.m[i] = a.w[i] * 0.5f;
        a.v[i] = a.w[i] * a.w[i];
    }
    mkdir("tests/tmp", 0755);
    const char *key[] = {"format", "note"}, *val[] = {"gpt-ckpt-1", "quote \" and \\n"};
    CHECK(!ckpt_save(&a, "tests/tmp/rt.safetensors", key, val, 2, err, sizeof err),
          "save: %s", err);
    StFile f;
    CHECK(!st_load(&f, "tests/tmp/rt.safetensors", err, sizeof err), "load: %s", err);
    model_init(&b, &c, 1);
    CHECK(!ckpt_load_weights(&b, &f, 1, err, sizeof err), "weights: %s", err);
    CHECK(!memcmp(a.w, b.w, a.nw * 4) && !memcmp(a.m, b.m, a.nw * 4) &&
              !memcmp(a.v, b.v, a.nw * 4), "weights or Adam state changed in a round trip");
    CHECK(st_meta(&f, "note") && !strcmp(st_meta(&f, "note"), val[1]), "metadata escaped wrongly");
    CHECK(!ckpt_save(&b, "tests/tmp/rt2.safetensors", key, val, 2, err, sizeof err), "%s", err);
    size_t n1, n2;
    unsigned char *p1 = t_slurp("tests/tmp/rt.safetensors", &n1), *p2 = t_slurp("tests/tmp/rt2.safetensors", &n2);
    CHECK(p1 && p2 && n1 == n2 && !memcmp(p1, p2, n1), "re-saved checkpoint differs");
    /* a flipped data byte is caught by the checksum */
    p1[n1 - 3] ^= 0x10;
    StFile bad;
    CHECK(!st_parse(&bad, p1, n1, err, sizeof err), "flipped data byte broke the header");
    CHECK(ckpt_load_weights(&b, &bad, 0, err, sizeof err) && strstr(err, "checksum"),
          "flipped data byte not caught: %s", err);
    st_free(&bad);
    /* another config's file names the first tensor that does not fit */
    Config other = c;
    other.embed = 32;
    Model o;
    model_init(&o, &other, 1);
    CHECK(ckpt_load_weights(&o, &f, 0, err, sizeof err) && strstr(err, "token_embedding"),
          "wrong-config checkpoint accepted or badly named: %s", err);
    model_free(&o);
    free(p2);
    st_free(&f);
    model_free(&a);
    model_free(&b);
}

/* The PyTorch-written file parses and its weights load for its config. */
static void check_torch_file(void)
{
    StFile f;
    char err[256];
    CHECK(!st_load(&f, "tests/torch_init.safetensors", err, sizeof err), "torch file: %s", err);
    if (!f.buf)
        return;
    Config c = {.vocab = VOCAB, .context = 32, .embed = 16, .mlp = 64, .heads = 2, .layers = 1};
    Model m;
    model_init(&m, &c, 0);
    CHECK(!ckpt_load_weights(&m, &f, 0, err, sizeof err), "torch weights: %s", err);
    const StEntry *e = st_find(&f, "decode_transformer.unembedding.1.bias");
    CHECK(e && !memcmp(st_data(&f, e), model_param(&m, e->name), e->end - e->begin),
          "torch weights not copied");
    model_free(&m);
    st_free(&f);
}

/* Builds a file from a header string and n data bytes, then parses it. */
static int parse_header(const char *hdr, size_t data, char *err, size_t elen)
{
    size_t h = strlen(hdr), n = 8 + h + data;
    unsigned char *p = calloc(n, 1);
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(p + 8, hdr, h);
    StFile f;
    int rc = st_parse(&f, p, n, err, elen);
    st_free(&f);
    return rc;
}

static void check_hostile(void)
{
    static const struct {
        const char *hdr;
        size_t data;
        const char *why;
    } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "expected"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,4]}}", 4, "shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4, "large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "lacks"},
        {"{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", 0, "expected"},
        {"{\"a\\q\":{}}", 0, "escape"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "expected"},
        {"{} x", 0, "trailing"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "integer"},
        {"", 0, "expected"},
    };
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        int rc = parse_header(bad[i].hdr, bad[i].data, err, sizeof err);
        CHECK(rc == -1 && strstr(err, bad[i].why), "hostile header %zu: rc %d, '%s' lacks '%s'",
              i, rc, err, bad[i].why);
    }
    /* a length field larger than the file, and a file too short to hold one */
    unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    StFile f;
    CHECK(st_parse(&f, memcpy(malloc(16), big, 16), 16, err, sizeof err) && strstr(err, "header length"),
          "huge header length accepted: %s", err);
    st_free(&f);
    CHECK(st_parse(&f, malloc(3), 3, err, sizeof err) && strstr(err, "short"), "3-byte file: %s", err);
    st_free(&f);
    CHECK(!parse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ", 8, err, sizeof err),
          "a valid padded header was refused: %s", err);
}

/* Rewrites checkpoint path with tensor name one column wider ([r,c] to
 * [r,c+1], the new column zero), everything else as it was: a file whose
 * matrix has the right rows and the wrong width. */
static void widen_tensor(const char *path, const char *name)
{
    StFile f;
    char err[256];
    CHECK(!st_load(&f, path, err, sizeof err), "%s: %s", path, err);
    if (!f.buf)
        return;
    StWriter w = {{0}, {0}};
    for (int i = 0; i < f.n; i++) {
        const StEntry *e = &f.e[i];
        const unsigned char *src = st_data(&f, e);
        if (strcmp(e->name, name)) {
            st_add(&w, e->name, e->dtype, e->ndim, e->shape, src, e->end - e->begin);
            continue;
        }
        int64_t r = e->shape[0], c = e->shape[1], shape[2] = {r, c + 1};
        float *wide = calloc((size_t)(r * (c + 1)), sizeof(float));
        for (int64_t k = 0; k < r; k++)
            memcpy(wide + k * (c + 1), src + k * c * 4, (size_t)c * 4);
        st_add(&w, e->name, e->dtype, 2, shape, wide, (size_t)(r * (c + 1)) * 4);
        free(wide);
    }
    const char *mkey[64], *mval[64]; /* the metadata but the checksum, which st_write redoes */
    int nm = 0;
    for (int i = 0; i < f.nmeta && nm < 64; i++)
        if (strcmp(f.mkey[i], "checksum"))
            mkey[nm] = f.mkey[i], mval[nm++] = f.mval[i];
    CHECK(!st_write(&w, path, mkey, mval, nm, err, sizeof err), "rewrite %s: %s", path, err);
    st_free(&f);
}

/* A matrix with the right rows and one column too many: refused, naming
 * it, by the C-level load and by every command that reads a checkpoint. */
static void check_wrong_width(void)
{
#define WIDE_DIR "tests/tmp/ckw"
#define WIDE WIDE_DIR "/ckpt-00000002.safetensors"
#define WIDE_NAME "decode_transformer.blocks.0.compute.2.weight"
    char out[4096], err[256];
    t_write_words("tests/tmp/ckw.txt", 4000);
    int rc = t_run("rm -rf " WIDE_DIR " && ./gpt train --embed 16 --mlp 24 --heads 2 --layers 1 "
                   "--context 16 --seq 16 --batch 2 --eval-batch 2 --eval-every 100 --steps 2 "
                   "--data tests/tmp/ckw.txt --out " WIDE_DIR, out, sizeof out);
    CHECK(rc == 0, "a 2-step run to make a checkpoint failed (%d): %s", rc, out);
    if (rc)
        return;
    widen_tensor(WIDE, WIDE_NAME); /* [16,24] -> [16,25] */
    Config c = {.vocab = VOCAB, .context = 16, .embed = 16, .mlp = 24, .heads = 2, .layers = 1};
    Model m;
    StFile f;
    model_init(&m, &c, 1);
    CHECK(!st_load(&f, WIDE, err, sizeof err), "widened file: %s", err);
    err[0] = 0;
    CHECK(ckpt_load_weights(&m, &f, 1, err, sizeof err) && strstr(err, WIDE_NAME),
          "a [16,25] " WIDE_NAME " for [16,24] was loaded, or badly named: '%s'", err);
    st_free(&f);
    model_free(&m);
    t_expect_one_line("./gpt sample --ckpt " WIDE " --bytes 4", 1, WIDE_NAME);
    t_expect_one_line("./gpt eval --ckpt " WIDE " --data tests/tmp/ckw.txt", 1, WIDE_NAME);
    t_expect_one_line("./gpt train --resume --steps 4 --data tests/tmp/ckw.txt --out " WIDE_DIR, 1,
                      WIDE_NAME);
}

void test_ckpt(void)
{
    check_roundtrip();
    check_torch_file();
    check_hostile();
    check_wrong_width();
}
