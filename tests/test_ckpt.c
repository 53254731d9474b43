/* tests/test_ckpt.c: safetensors checkpoints written and read back, a
 * PyTorch-written file, hostile files that must be refused with a
 * message rather than crash or load garbage, and a run directory's
 * checkpoints: --keep's rotation, a resume's eval generator, and
 * --auto-resume. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cmd/ckpt.h"
#include "gpt.h"
#include "util/util.h"
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
    CHECK(st_check_checksum(&bad, err, sizeof err) && strstr(err, "checksum"),
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

/* ---- damaged copies of a real checkpoint ----
 * A short run's checkpoint, copied 47 times with one byte flipped (in the
 * header's names, dtypes, shapes, offsets, metadata and checksum, and in
 * the data) or cut short: every command that reads a checkpoint must
 * refuse each copy with one line naming it (exit 1). Byte flips in an
 * optimizer-state name once loaded: the checksum covered the data only. */
#define DMG_DIR "tests/tmp/ckd"
#define DMG_DATA "tests/tmp/ckd.txt"
#define DMG_GOOD DMG_DIR "/run/ckpt-00000002.safetensors"
#define DMG_TINY "--embed 16 --mlp 24 --heads 2 --layers 1 --context 16 --seq 16 --batch 2 " \
                 "--eval-batch 2 --eval-every 100"
#define DMG_COPIES 47

/* A flipped byte: at the first match of needle in the header plus delta;
 * needle NULL: byte delta of the file; "": delta bytes from the data. The
 * byte found there must be `was` (0: any, a value the run computed). */
static const struct damage {
    const char *what, *needle;
    long delta;
    char was;
} header_flips[] = {
    {"header length, low byte", NULL, 0, 0},
    {"header length, second byte", NULL, 1, 0},
    {"the opening brace", "{\"decode", 0, '{'},
    {"a weight's name", "token_embedding", 3, 'e'},
    {"an Adam m tensor's name", "_gpt.adam_m.decode_transformer.blocks.0.compute.2.bias", 20, 'r'},
    {"an Adam v tensor's name", "_gpt.adam_v.decode_transformer.unembedding.1.weight", 40, 'n'},
    {"the adam_v prefix", "_gpt.adam_v.", 10, 'v'},
    {"the onehot buffer's name", "\"onehot\"", 2, 'n'},
    {"a causal mask's name", "causal_mask", 1, 'a'},
    {"a dtype's letter", "\"F32\"", 1, 'F'},
    {"a dtype's digit", "\"F32\"", 2, '3'},
    {"the dtype key", "\"dtype\"", 2, 't'},
    {"a shape digit", "\"shape\":[128,16]", 9, '1'},
    {"an Adam tensor's shape digit",
     "_gpt.adam_v.decode_transformer.unembedding.0.bias\":{\"dtype\":\"F32\",\"shape\":[1", 76, '6'},
    {"a begin offset's digit", "\"shape\":[128,128],\"data_offsets\":[", 35, '4'},
    {"an end offset's digit", "\"data_offsets\":[0,", 18, '8'},
    {"the last end offset's digit", "\"__metadata__\"", -4, '4'},
    {"a key's colon", "\"data_offsets\":", 14, ':'},
    {"a comma between tensors", "]},\"", 2, ','},
    {"the __metadata__ key", "__metadata__", 2, 'm'},
    {"the checksum's key", "\"checksum\"", 4, 'c'},
    {"the checksum's first digit", "\"checksum\":\"", 12, 0},
    {"the checksum's last digit", "\"checksum\":\"", 27, 0},
    {"the format key", "\"format\"", 1, 'f'},
    {"the format's version", "gpt-ckpt-1", 9, '1'},
    {"the step", "\"step\":\"", 8, '2'},
    {"the learning rate", "\"lr\":\"", 10, '1'},
    {"the heads", "\"heads\":\"", 9, '2'},
    {"the seed", "\"seed\":\"", 8, '1'},
    {"the prompt", "\"prompt\":\"", 12, 'E'},
    {"a generator state", "\"rng_data\":\"", 20, 0},
    {"the data fingerprint", "\"data_fnv1a64\":\"", 16, 0},
    {"the closing brace", "\"}}", 2, '}'},
    {"the header's last byte (padding or brace)", "", -1, 0},
};

static long flip_at(const unsigned char *p, size_t data_off, const struct damage *d)
{
    if (!d->needle)
        return d->delta;
    if (!*d->needle)
        return (long)data_off + d->delta;
    char *hdr = strndup((const char *)p + 8, data_off - 8);
    char *m = strstr(hdr, d->needle);
    long at = m ? 8 + (m - hdr) + d->delta : -1;
    free(hdr);
    return at;
}

static void put_file(const char *path, const unsigned char *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(p, 1, n, fp) == n && !fclose(fp), "cannot write %s", path);
}

/* Copy i: p with byte `at` flipped (xor), or its first `cut` bytes. */
static void put_copy(int i, const unsigned char *p, size_t n, long at, unsigned char xor,
                     size_t cut, char *path, size_t plen)
{
    unsigned char *q = malloc(n);
    memcpy(q, p, n);
    if (at >= 0)
        q[at] ^= xor;
    snprintf(path, plen, DMG_DIR "/bad-%02d.safetensors", i);
    put_file(path, q, at >= 0 ? n : cut);
    free(q);
}

/* The 47 copies: header flips, data flips spread over the data section
 * (low and high bits), and truncations. Their paths and what each is. */
static int make_copies(const unsigned char *p, size_t n, char path[][64], char what[][80])
{
    size_t data_off = 8 + (size_t)(p[0] | p[1] << 8 | p[2] << 16), data = n - data_off;
    size_t cuts[] = {0, 5, 8 + (data_off - 8) / 2, data_off, data_off + data / 2, n - 1};
    int k = 0, nh = (int)(sizeof header_flips / sizeof *header_flips);
    for (int i = 0; i < nh; i++, k++) {
        long at = flip_at(p, data_off, &header_flips[i]);
        const struct damage *d = &header_flips[i];
        CHECK(at >= 0 && (!d->was || p[at] == d->was), "%s: '%s' not in the header, or %+ld "
              "from it is not '%c'", d->what, d->needle, d->delta, d->was);
        put_copy(k, p, n, at < 0 ? 0 : at, i ? 0x01 : 0x08, 0, path[k], 64);
        snprintf(what[k], 80, "flip in %s", d->what);
    }
    for (int i = 0; i <= 6; i++, k++) {
        put_copy(k, p, n, (long)(data_off + (data - 1) * (size_t)i / 6), i % 2 ? 0x80 : 0x01, 0,
                 path[k], 64);
        snprintf(what[k], 80, "flip in the data, at %d/6 of it", i);
    }
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++, k++) {
        put_copy(k, p, n, -1, 0, cuts[i], path[k], 64);
        snprintf(what[k], 80, "cut to %zu of %zu bytes", cuts[i], n);
    }
    return k;
}

/* The commands that read a checkpoint, each with the file for %s. */
static const char *const readers[] = {
    "./gpt sample --ckpt %s --bytes 4",
    "./gpt eval --ckpt %s --data " DMG_DATA,
    "./gpt train --resume %s --steps 4 --data " DMG_DATA " --out " DMG_DIR "/resumed",
    "rm -rf " DMG_DIR "/init && ./gpt train --init %s " DMG_TINY " --steps 1 --data " DMG_DATA " --out " DMG_DIR "/init",
};

/* Every reader exits with code on path: 1 with one line naming it, or 0. */
static void check_readers(const char *path, const char *what, int code)
{
    char cmd[512], out[65536];
    for (size_t r = 0; r < sizeof readers / sizeof *readers; r++) {
        snprintf(cmd, sizeof cmd, readers[r], path);
        int rc = t_run(cmd, out, sizeof out), lines = 0;
        for (char *c = out; *c; c++)
            lines += *c == '\n';
        CHECK(rc == code && (code == 0 || (lines == 1 && strstr(out, path))),
              "%s (%s): '%s' gave exit %d (want %d): %s", path, what, cmd, rc, code, out);
    }
}

/* --auto-resume passes a damaged newest checkpoint over, saying why, and
 * resumes the one before it (here at --steps already: done, exit 0). */
static void check_auto_resume(const unsigned char *good, size_t n, const char *bad, const char *what)
{
    char out[65536];
    size_t nb;
    unsigned char *b = t_slurp(bad, &nb);
    t_run("rm -rf " DMG_DIR "/auto && mkdir -p " DMG_DIR "/auto", out, sizeof out);
    put_file(DMG_DIR "/auto/ckpt-00000002.safetensors", good, n);
    put_file(DMG_DIR "/auto/ckpt-00000004.safetensors", b, nb);
    free(b);
    int rc = t_run("./gpt train --auto-resume --steps 2 --data " DMG_DATA " --out " DMG_DIR "/auto",
                   out, sizeof out);
    CHECK(rc == 0 && strstr(out, "auto/ckpt-00000004.safetensors: ") && strstr(out, "passes it over"),
          "--auto-resume and a newest checkpoint with %s: exit %d: %s", what, rc, out);
}

/* A file written before the checksum covered the header: its digits are
 * the data's FNV-1a. Still accepted, and a flipped data byte refused. */
static void check_old_form(const unsigned char *good, size_t n)
{
    unsigned char *p = malloc(n);
    memcpy(p, good, n);
    size_t data_off = 8 + (size_t)(p[0] | p[1] << 8 | p[2] << 16);
    char *hdr = strndup((const char *)p + 8, data_off - 8), sum[17];
    char *at = strstr(hdr, "\"checksum\":\"") + 12;
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)fnv1a64(p + data_off, n - data_off));
    memcpy(p + 8 + (at - hdr), sum, 16);
    put_file(DMG_DIR "/old.safetensors", p, n);
    check_readers(DMG_DIR "/old.safetensors", "the data-only checksum of older files", 0);
    p[n - 5] ^= 0x01;
    put_file(DMG_DIR "/old-bad.safetensors", p, n);
    check_readers(DMG_DIR "/old-bad.safetensors", "an older file, a data byte flipped", 1);
    free(hdr);
    free(p);
}

static void check_damaged_copies(void)
{
    char out[4096], path[DMG_COPIES + 8][64], what[DMG_COPIES + 8][80];
    t_write_words(DMG_DATA, 4000);
    int rc = t_run("rm -rf " DMG_DIR " && mkdir -p " DMG_DIR " && ./gpt train " DMG_TINY
                   " --steps 2 --data " DMG_DATA " --out " DMG_DIR "/run", out, sizeof out);
    CHECK(rc == 0, "a 2-step run to make a checkpoint failed (%d): %s", rc, out);
    size_t n;
    unsigned char *good = rc ? NULL : t_slurp(DMG_GOOD, &n);
    if (!good)
        return;
    int k = make_copies(good, n, path, what);
    CHECK(k == DMG_COPIES, "%d damaged copies, want %d", k, DMG_COPIES);
    for (int i = 0; i < k; i++)
        check_readers(path[i], what[i], 1);
    check_readers(DMG_GOOD, "undamaged", 0);
    check_auto_resume(good, n, path[4], what[4]);   /* an Adam m name */
    check_auto_resume(good, n, path[20], what[20]); /* the checksum's key */
    check_auto_resume(good, n, path[k - 2], what[k - 2]); /* cut mid-data */
    check_old_form(good, n);
    free(good);
}

/* ---- a run directory's checkpoints: --keep, --resume, --auto-resume ---- */

#define ROT_DIR "tests/tmp/ckr"
#define ROT_RUN "./gpt train --embed 16 --mlp 24 --heads 2 --layers 1 --context 16 --seq 16 " \
                "--batch 2 --eval-batch 4 --eval-every 3 --eval-bytes 24 --final-bytes 0 " \
                "--data " DMG_DATA

/* The ckpt-*.safetensors of dir, by step, as "4 6 8 " (ls sorts them). */
static void ckpt_steps(const char *dir, char *out, size_t n)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cd %s && for f in ckpt-*.safetensors; do n=${f#ckpt-}; "
             "n=${n%%.safetensors}; printf '%%s ' $(expr $n + 0); done", dir);
    if (t_run(cmd, out, n))
        *out = 0;
}

/* The line of out that starts with "step N |" (an eval line), or "". */
static void eval_line_of(const char *out, int step, char *line, size_t n)
{
    char head[32];
    snprintf(head, sizeof head, "step %6d |", step);
    const char *at = strstr(out, head);
    snprintf(line, n, "%.*s", at ? (int)strcspn(at, "\n") : 0, at ? at : "");
}

/* Saves at 2, 4, 6 and 8 and at the end, 10: --keep 3 leaves 6, 8 and 10.
 * A resume from 6 (copied alone into a new directory) prints the straight
 * run's eval lines at 6 and 9 (the test windows and the text drawn by the
 * eval generator the checkpoint saved). --auto-resume resumes a directory
 * that --keep 1 leaves one checkpoint in. */
static void check_rotation(void)
{
    char out[65536], resumed[65536], got[256], a[512], b[512];
    t_run("rm -rf " ROT_DIR " && mkdir -p " ROT_DIR "/resumed " ROT_DIR "/one", out, sizeof out);
    int rc = t_run(ROT_RUN " --steps 10 --ckpt-every 2 --keep 3 --out " ROT_DIR "/run", out,
                   sizeof out);
    ckpt_steps(ROT_DIR "/run", got, sizeof got);
    CHECK(rc == 0 && !strcmp(got, "6 8 10 "), "--keep 3 of checkpoints at 2, 4, 6, 8 and 10 "
          "left steps '%s' (want '6 8 10 '; rc %d)", got, rc);
    rc = t_run("cp " ROT_DIR "/run/ckpt-00000006.safetensors " ROT_DIR "/resumed/ && ./gpt train "
               "--resume --steps 10 --data " DMG_DATA " --out " ROT_DIR "/resumed", resumed,
               sizeof resumed);
    for (int step = 6; step <= 9; step += 3) {
        eval_line_of(out, step, a, sizeof a);
        eval_line_of(resumed, step, b, sizeof b);
        CHECK(rc == 0 && *a && !strcmp(a, b), "resumed from step 6, the eval line of step %d "
              "is '%s'; the straight run's '%s' (rc %d)", step, b, a, rc);
    }
    rc = t_run(ROT_RUN " --steps 4 --ckpt-every 2 --keep 1 --out " ROT_DIR "/one && " ROT_RUN
               " --steps 6 --ckpt-every 2 --keep 1 --auto-resume --out " ROT_DIR "/one", out,
               sizeof out);
    ckpt_steps(ROT_DIR "/one", got, sizeof got);
    CHECK(rc == 0 && strstr(out, "--auto-resume: continuing from " ROT_DIR "/one/ckpt-00000004."
                            "safetensors (step 4)") && !strcmp(got, "6 "),
          "--auto-resume on a directory of one checkpoint (--keep 1): rc %d, left '%s': %s", rc,
          got, out);
}

void test_ckpt(void)
{
    check_roundtrip();
    check_torch_file();
    check_hostile();
    check_wrong_width();
    check_damaged_copies();
    check_rotation();
}
