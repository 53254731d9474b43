/* tests/test_data.c: the data layer (data.c) and gpt shard. Brace
 * expansion as bash does it; directories and globs; tar shards written by
 * Python's tarfile, by GNU tar and by us, read as WebDataset documents and
 * checked against Python's own reading (tests/tar_check.py); every kind of
 * damaged shard refused in one line naming the exact offset; pipe:
 * sources and their exit status; gpt shard end to end; and the random
 * test windows drawn from text in memory (text.c). Python checks are
 * counted skips when /usr/bin/python3 is missing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data/data.h"
#include "safetensors/safetensors.h"
#include "data/text.h"
#include "test.h"
#include "util/util.h"

#define TMP "tests/tmp/data"
#define PY "/usr/bin/python3"

static int have_python(void) { return access(PY, X_OK) == 0; }

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

/* ---- brace expansion ---- */

/* The expansion of pattern joined by spaces, or "ERR: the error". */
static const char *expand(const char *pattern)
{
    static char out[8192];
    char err[1024];
    DataList l = {0};
    if (data_expand_braces(pattern, &l, err, sizeof err)) {
        snprintf(out, sizeof out, "ERR: %s", err);
    } else {
        out[0] = 0;
        for (int i = 0; i < l.n; i++)
            snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "", l.path[i]);
    }
    data_list_free(&l);
    return out;
}

static void check_braces(void)
{
    static const struct {
        const char *pattern, *want;
    } cases[] = {
        {"plain.txt", "plain.txt"},
        {"train-{000000..000003}.tar", "train-000000.tar train-000001.tar train-000002.tar train-000003.tar"},
        {"{1..010}", "001 002 003 004 005 006 007 008 009 010"},
        {"{08..11}", "08 09 10 11"},
        {"{0..3}", "0 1 2 3"},
        {"{5..1}", "5 4 3 2 1"},
        {"{-1..1}", "-1 0 1"},
        {"{1..7..3}", "1 4 7"},
        {"{a,b,c}.txt", "a.txt b.txt c.txt"},
        {"x{1,2}y{a,b}", "x1ya x1yb x2ya x2yb"},
        {"{a,b{1,2}}c", "ac b1c b2c"},
        {"s-{0..1}/{x,y}-{00..01}", "s-0/x-00 s-0/x-01 s-0/y-00 s-0/y-01 s-1/x-00 s-1/x-01 s-1/y-00 s-1/y-01"},
        {"{a}", "{a}"},
        {"{a{1,2}}", "{a1} {a2}"},
        {"x{,.gz}", "x x.gz"},
        {"a\\{1,2\\}", "a{1,2}"},
        {"pipe:cat s-{0..1}.tar", "pipe:cat s-0.tar pipe:cat s-1.tar"},
        {"{,}", "ERR: {,}: expands to nothing"},
        {"", "ERR: : expands to nothing"},
        {"{0..1000000}", "ERR: {0..1000000}: expands to more than 1000000 paths"},
        {"{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}", "ERR: {0..9}{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}: expands to more than 1000000 paths"},
        {"a{b", "ERR: a{b: unbalanced brace at offset 1"},
        {"a}b", "ERR: a}b: unbalanced brace at offset 1"},
        {"{x,{y,z}", "ERR: {x,{y,z}: unbalanced brace at offset 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *got = expand(cases[i].pattern);
        CHECK(!strcmp(got, cases[i].want), "'%s' expands to '%s', want '%s'", cases[i].pattern,
              got, cases[i].want);
    }
    DataList l = {0};
    char err[256];
    CHECK(data_expand_braces("{0..999999}", &l, err, sizeof err) == 0 && l.n == 1000000 &&
              !strcmp(l.path[999999], "999999"), "a million paths: %d", l.n);
    data_list_free(&l);
}

/* ---- directories, globs, sources ---- */

static const char *joined(const DataList *l, int rc, const char *err)
{
    static char out[4096];
    if (rc)
        return snprintf(out, sizeof out, "ERR: %s", err), out;
    out[0] = 0;
    for (int i = 0; i < l->n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "", l->path[i]);
    return out;
}

static void check_listing(void)
{
    char out[256], err[1024];
    t_run("rm -rf " TMP "/dl && mkdir -p " TMP "/dl/sub/deeper " TMP "/dl/.git " TMP "/empty && "
          "cd " TMP "/dl && touch b.txt a.txt a-b.txt sub/c.txt sub/deeper/d .hidden .git/x && "
          "ln -s sub link && ln -s b.txt b-link.txt", out, sizeof out);
    DataList l = {0};
    int rc = data_list_dir(TMP "/dl", &l, err, sizeof err);
    const char *want = TMP "/dl/a-b.txt " TMP "/dl/a.txt " TMP "/dl/b-link.txt " TMP "/dl/b.txt "
                       TMP "/dl/sub/c.txt " TMP "/dl/sub/deeper/d";
    CHECK(!strcmp(joined(&l, rc, err), want), "listing: '%s'", joined(&l, rc, err));
    data_list_free(&l);
    rc = data_list_dir(TMP "/empty", &l, err, sizeof err);
    CHECK(rc && !strcmp(err, TMP "/empty: no files in this directory"), "empty dir: %s", err);
    data_list_free(&l);
    rc = data_glob(TMP "/dl/*.txt", &l, err, sizeof err);
    want = TMP "/dl/a-b.txt " TMP "/dl/a.txt " TMP "/dl/b-link.txt " TMP "/dl/b.txt";
    CHECK(!strcmp(joined(&l, rc, err), want), "glob: '%s'", joined(&l, rc, err));
    data_list_free(&l);
    rc = data_glob(TMP "/dl/s*", &l, err, sizeof err);
    want = TMP "/dl/sub/c.txt " TMP "/dl/sub/deeper/d";
    CHECK(!strcmp(joined(&l, rc, err), want), "glob of a directory: '%s'", joined(&l, rc, err));
    data_list_free(&l);
    rc = data_glob(TMP "/dl/*.nope", &l, err, sizeof err);
    CHECK(rc && !strcmp(err, TMP "/dl/*.nope: matches no file"), "glob of nothing: %s", err);
    data_list_free(&l);
}

static void check_sources(void)
{
    DataSource s;
    char err[1024];
    int rc = data_source_open(&s, TMP "/dl/{a,b}.txt", err, sizeof err);
    CHECK(!strcmp(joined(&s.parts, rc, err), TMP "/dl/a.txt " TMP "/dl/b.txt"), "files: %s",
          joined(&s.parts, rc, err));
    data_source_free(&s);
    rc = data_source_open(&s, "{" TMP "/dl/sub,pipe:cat x.tar}", err, sizeof err);
    CHECK(!strcmp(joined(&s.parts, rc, err), TMP "/dl/sub/c.txt " TMP "/dl/sub/deeper/d pipe:cat x.tar"),
          "a directory and a pipe: %s", joined(&s.parts, rc, err));
    data_source_free(&s);
    rc = data_source_open(&s, TMP "/missing-{0..1}.tar", err, sizeof err);
    CHECK(rc && strstr(err, TMP "/missing-0.tar: cannot open data file"), "missing: %s", err);
    rc = data_source_open(&s, "pipe:", err, sizeof err);
    CHECK(rc && strstr(err, "pipe: needs a command"), "empty pipe: %s", err);
    CHECK(data_part_is_shard("a/b.tar") && data_part_is_shard("pipe:zstdcat x.tar.zst") &&
              !data_part_is_shard("a/b.txt") && !data_part_is_shard("tar"), "data_part_is_shard");
}

/* ---- reading documents ---- */

static uint64_t fnv_update(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Part's documents as tests/tar_check.py lists them ("KEY SIZE DATA_OFF
 * SAMPLE_OFF FNV1A64" a line, then "samples N skipped K"), each read in
 * pieces of `piece` bytes; an error ends it with "ERR: the error". */
static void listing(const char *part, uint64_t start, size_t piece, char *out, size_t n)
{
    DataPart p;
    WdsDoc d;
    unsigned char buf[8192];
    int r = data_part_open(&p, part, start);
    out[0] = 0;
    while (r == 0 && (r = data_part_next(&p, &d)) == 1) {
        uint64_t h = 0xcbf29ce484222325ull, total = 0;
        long got;
        while ((got = data_part_read(&p, buf, piece)) > 0) {
            h = fnv_update(h, buf, (size_t)got);
            total += (uint64_t)got;
        }
        r = got < 0 ? -1 : 0;
        snprintf(out + strlen(out), n - strlen(out), "%s %llu %llu %llu %016llx%s\n", d.key,
                 (unsigned long long)d.size, (unsigned long long)d.data_off,
                 (unsigned long long)d.sample_off, (unsigned long long)h,
                 total == d.size ? "" : " (short)");
    }
    if (r < 0)
        snprintf(out + strlen(out), n - strlen(out), "ERR: %s\n", p.err);
    else
        snprintf(out + strlen(out), n - strlen(out), "samples %ld skipped %ld\n", p.w.samples,
                 p.w.skipped);
    data_part_close(&p);
}

/* Python's listing of shard, or "" if Python failed. */
static const char *python_listing(const char *shard)
{
    static char out[65536];
    char cmd[512];
    snprintf(cmd, sizeof cmd, PY " tests/tar_check.py list %s", shard);
    if (t_run(cmd, out, sizeof out))
        out[0] = 0;
    return out;
}

/* Our listing equals Python's, read whole, in odd pieces and through a pipe. */
static void check_against_python(const char *shard, int min_docs)
{
    static char mine[65536], odd[65536], piped[65536];
    char pipe[512];
    listing(shard, 0, 8192, mine, sizeof mine);
    listing(shard, 0, 7, odd, sizeof odd);
    snprintf(pipe, sizeof pipe, "pipe:cat %s", shard);
    listing(pipe, 0, 8192, piped, sizeof piped);
    int docs = 0;
    for (char *c = mine; (c = strchr(c, '\n')); c++)
        docs++;
    CHECK(docs - 1 >= min_docs && !strstr(mine, "ERR") && !strstr(mine, "(short)"),
          "%s: %d documents, want %d: %s", shard, docs - 1, min_docs, mine);
    CHECK(!strcmp(mine, odd) && !strcmp(mine, piped), "%s: whole, in pieces and piped differ:\n"
          "%s\n%s\n%s", shard, mine, odd, piped);
    if (!have_python()) {
        SKIP_MISSING("python3", "%s not read by Python's tarfile: no " PY, shard);
        return;
    }
    const char *py = python_listing(shard);
    CHECK(!strcmp(mine, py), "%s: we read\n%sPython reads\n%s", shard, mine, py);
}

static void check_python_archives(void)
{
    char out[4096];
    if (!have_python()) {
        SKIP_MISSING("python3", "tar archives written by Python's tarfile: no " PY);
        return;
    }
    int rc = t_run("rm -rf " TMP "/py && mkdir -p " TMP "/py && " PY
                   " tests/tar_check.py make " TMP "/py", out, sizeof out);
    CHECK(rc == 0, "tests/tar_check.py make failed: %s", out);
    check_against_python(TMP "/py/ustar.tar", 4);
    check_against_python(TMP "/py/pax.tar", 6);
    check_against_python(TMP "/py/gnu.tar", 6);
}

/* GNU tar's own formats: long directory and file names, an empty
 * document, a symlink and directories (skipped). Each document must be
 * its file's bytes. */
static void check_gnu_archives(void)
{
    char out[4096], cmd[1024];
    const char *long_dir = "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
                           "dddddddddddddddddddddddddddddddddddddddddddddddddddddddd";
    snprintf(cmd, sizeof cmd, "rm -rf " TMP "/gnu && mkdir -p " TMP "/gnu/src/%s " TMP
             "/gnu/src/u/v && cd " TMP "/gnu/src && head -c 1500 /etc/passwd > s1.txt && "
             "echo '{}' > s1.json && : > empty.txt && head -c 512 /etc/passwd > u/v/w.text && "
             "head -c 700 /etc/passwd > %s/%0130d.txt && ln -s s1.txt s9.txt", long_dir, long_dir, 7);
    int rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 0, "making GNU tar's input failed: %s", out);
    static const char *const formats[] = {"gnu", "pax"};
    for (int i = 0; i < 2; i++) {
        char tar[256], doc[1024];
        snprintf(tar, sizeof tar, TMP "/gnu/%s.tar", formats[i]);
        snprintf(cmd, sizeof cmd, "tar --format=%s --sort=name -cf %s -C " TMP "/gnu/src .",
                 formats[i], tar);
        CHECK(t_run(cmd, out, sizeof out) == 0, "%s failed: %s", cmd, out);
        check_against_python(tar, 4);
        DataPart p;
        WdsDoc d;
        int docs = 0, same = 1;
        data_part_open(&p, tar, 0);
        while (data_part_next(&p, &d) == 1) {
            size_t n;
            snprintf(doc, sizeof doc, TMP "/gnu/src/%s.txt", d.key);
            unsigned char *want = t_slurp(doc, &n), *got = malloc(d.size + 1);
            if (!want) {
                snprintf(doc, sizeof doc, TMP "/gnu/src/%s.text", d.key);
                want = t_slurp(doc, &n);
            }
            long k = data_part_read(&p, got, d.size + 1);
            same &= want && (size_t)k == n && n == d.size && !memcmp(want, got, n);
            free(want);
            free(got);
            docs++;
        }
        CHECK(docs == 4 && same && data_part_close(&p) == 0, "%s: %d documents, same %d: %s",
              tar, docs, same, p.err);
    }
}

/* ---- damaged shards ---- */

static void fix_checksum(unsigned char *h)
{
    unsigned sum = 0;
    memset(h + 148, ' ', 8);
    for (int i = 0; i < 512; i++)
        sum += h[i];
    sprintf((char *)h + 148, "%06o", sum);
    h[155] = ' ';
}

/* A ustar header made by hand, for what our writer never writes. */
static void make_header(unsigned char *h, const char *name, unsigned long long size, int type)
{
    memset(h, 0, 512);
    memcpy(h, name, strlen(name));
    sprintf((char *)h + 100, "%07o", 0644);
    sprintf((char *)h + 124, "%011llo", size);
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar\0" "00", 8);
    fix_checksum(h);
}

/* The bytes KEY.txt holds in our test shards (tests/tar_check.py's content()). */
static size_t content(const char *name, char *out)
{
    size_t n = 0;
    for (int i = 0; i < 37; i++)
        n += (size_t)sprintf(out + n, "%s\n", name);
    return n;
}

/* TMP/base.tar: a.txt (1000 bytes) at 0, data at 512; b.txt (600) at
 * 1536, data at 2048; end blocks at 3072; 4096 bytes. */
static unsigned char *make_base(size_t *n)
{
    TarWriter w;
    char a[1000], b[600];
    memset(a, 'a', sizeof a);
    memset(b, 'b', sizeof b);
    int rc = tar_write_open(&w, TMP "/base.tar");
    rc = rc || tar_write_member(&w, "a.txt", a, sizeof a) || tar_write_member(&w, "b.txt", b, sizeof b);
    CHECK(tar_write_close(&w) == 0 && rc == 0, "writing base.tar: %s", w.err);
    unsigned char *p = t_slurp(TMP "/base.tar", n);
    CHECK(p && *n == 4096, "base.tar has %zu bytes, want 4096", *n);
    return p;
}

/* The first line of part's listing that is not one of base.tar's documents. */
static const char *outcome(const char *part)
{
    static char out[8192];
    listing(part, 0, 8192, out, sizeof out);
    char *line = out;
    while (!strncmp(line, "a 1000 512 0 ", 13) || !strncmp(line, "b 600 2048 1536 ", 16))
        line = strchr(line, '\n') + 1;
    line[strcspn(line, "\n")] = 0;
    return line;
}

/* Writes bad.tar: base's first `cut` bytes, edited; its outcome must be `want`. */
static void expect_bad(const unsigned char *base, size_t cut, size_t at, const void *edit,
                       size_t elen, int fix, const char *want)
{
    unsigned char *p = malloc(cut + 1);
    memcpy(p, base, cut);
    if (edit)
        memcpy(p + at, edit, elen);
    if (fix)
        fix_checksum(p + at / 512 * 512);
    write_file(TMP "/bad.tar", p, cut);
    free(p);
    const char *got = outcome(TMP "/bad.tar");
    size_t len = strlen(want); /* a final '*': want is a prefix */
    int prefix = len && want[len - 1] == '*';
    CHECK(prefix ? !strncmp(got, want, len - 1) : !strcmp(got, want),
          "damaged shard: got '%s', want '%s'", got, want);
}

static void check_damage(void)
{
    size_t n;
    unsigned char *base = make_base(&n);
    if (!base || n != 4096)
        return;
    char want[512];
    unsigned long found = strtoul((const char *)base + 1536 + 148, NULL, 8);
    snprintf(want, sizeof want, "ERR: " TMP "/bad.tar: bad header checksum at offset 1536 "
             "(expected %06lo, found %06lo)", found + 1, found);
    expect_bad(base, 4096, 1536, "c", 1, 0, want); /* b.txt -> c.txt, checksum kept */
    expect_bad(base, 4096, 1536 + 148, "zzzzzz", 6, 0, "ERR: " TMP "/bad.tar: bad header "
               "checksum at offset 1536 (expected 0*");
    expect_bad(base, 1636, 0, NULL, 0, 0, "ERR: " TMP "/bad.tar: truncated header at offset "
               "1536 (the shard ends after 100 of its 512 bytes)");
    expect_bad(base, 2348, 0, NULL, 0, 0, "ERR: " TMP "/bad.tar: truncated member 'b.txt' "
               "(header at offset 1536): 600 bytes of data from offset 2048, padded to 1024, "
               "but the shard ends at offset 2348");
    expect_bad(base, 2658, 0, NULL, 0, 0, "ERR: " TMP "/bad.tar: truncated member 'b.txt' "
               "(header at offset 1536): 600 bytes of data from offset 2048, padded to 1024, "
               "but the shard ends at offset 2658");
    expect_bad(base, 3072, 0, NULL, 0, 0, "ERR: " TMP "/bad.tar: ends at offset 3072 without "
               "the end-of-archive blocks (truncated?)");
    expect_bad(base, 0, 0, NULL, 0, 0, "ERR: " TMP "/bad.tar: empty file, not a tar archive");
    expect_bad(base, 4096, 1536 + 124, "12x45678901", 11, 1, "ERR: " TMP "/bad.tar: header at "
               "offset 1536: its size field '12x45678901' is not a number");
    expect_bad(base, 4096, 1536 + 124, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfd\xa8", 12, 1,
               "ERR: " TMP "/bad.tar: header at offset 1536: its size field "
               "'\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfd\\xa8' is not a number");
    /* base-256 sizes are numbers: 600 this way reads as before */
    expect_bad(base, 4096, 1536 + 124, "\x80\0\0\0\0\0\0\0\0\0\x02\x58", 12, 1,
               "samples 2 skipped 0");
    expect_bad(base, 3584, 0, NULL, 0, 0, "samples 2 skipped 0"); /* one end block is enough */
    free(base);
}

/* A hand-made archive: appends a header and its padded data at *at. */
static void put_member(unsigned char *buf, size_t *at, const char *name, int type,
                       unsigned long long field, const char *data, size_t n)
{
    make_header(buf + *at, name, field, type);
    memcpy(buf + *at + 512, data, n);
    *at += 512 + (n + 511) / 512 * 512;
}

/* The outcome of a hand-made archive of `n` bytes (end blocks added). */
static const char *outcome_of(unsigned char *buf, size_t n)
{
    memset(buf + n, 0, 1024);
    write_file(TMP "/bad.tar", buf, n + 1024);
    return outcome(TMP "/bad.tar");
}

static void check_pax_damage(void)
{
    static unsigned char buf[1 << 16];
    char path[160], want[512];
    TarWriter w;
    size_t n = 0;
    snprintf(path, sizeof path, "p/%0150d.txt", 0);
    tar_write_open(&w, TMP "/pax.tar");
    tar_write_member(&w, path, "hello", 5);
    CHECK(tar_write_close(&w) == 0, "writing pax.tar: %s", w.err);
    unsigned char *pax = t_slurp(TMP "/pax.tar", &n);
    CHECK(pax && n == 3072 && !memcmp(pax + 512, "166 path=p/000", 14), "pax.tar: %zu bytes", n);
    if (!pax || n != 3072)
        return;
    snprintf(want, sizeof want, "p/%0150d 5 1536 0 ", 0);
    expect_bad(pax, n, 0, NULL, 0, 0, strcat(want, "*"));
#define PAXERR "ERR: " TMP "/bad.tar: malformed pax record at offset "
    expect_bad(pax, n, 512, "1x6", 3, 0, PAXERR "512: its length is not a number followed by a space");
    expect_bad(pax, n, 512, "999", 3, 0, PAXERR "512: its length runs past the header's end");
    expect_bad(pax, n, 512, "004", 3, 0, PAXERR "512: its length is too short for 'KEY=VALUE\\n'");
    expect_bad(pax, n, 512 + 165, "X", 1, 0, PAXERR "512: it does not end in a newline");
    expect_bad(pax, n, 512 + 8, ":", 1, 0, PAXERR "512: it is not KEY=VALUE");
    expect_bad(pax, 600, 0, NULL, 0, 0, "ERR: " TMP "/bad.tar: truncated member '././@PaxHeader' "
               "(header at offset 0): 166 bytes of data from offset 512, padded to 512, but the "
               "shard ends at offset 600");
    free(pax);
    /* size= overrides the header's size field; the second record's offset */
    n = 0;
    put_member(buf, &n, "././@PaxHeader", 'x', 29, "18 comment=hello!\n11 size=10\n", 29);
    put_member(buf, &n, "z.txt", '0', 0, "0123456789", 10);
    CHECK(!strncmp(outcome_of(buf, n), "z 10 1536 0 ", 12), "pax size=: %s", outcome_of(buf, n));
    n = 0;
    put_member(buf, &n, "././@PaxHeader", 'x', 29, "18 comment=hello!\n11 size=1x\n", 29);
    put_member(buf, &n, "z.txt", '0', 0, "0123456789", 10);
    CHECK(!strcmp(outcome_of(buf, n), PAXERR "530: its size is not a number"), "pax size=1x: %s",
          outcome_of(buf, n));
    n = 0;
    put_member(buf, &n, "././@PaxHeader", 'x', 2 << 20, "", 0);
    CHECK(!strcmp(outcome_of(buf, n), "ERR: " TMP "/bad.tar: pax header at offset 0 is too large "
                  "(2097152 bytes; at most 1048576)"), "huge pax header: %s", outcome_of(buf, n));
    /* a symlink's size field is ignored, a volume label's data skipped */
    n = 0;
    put_member(buf, &n, "l.txt", '2', 100, "", 0);
    put_member(buf, &n, "vol", 'V', 10, "0123456789", 10);
    put_member(buf, &n, "m.txt", '0', 5, "hello", 5);
    CHECK(!strncmp(outcome_of(buf, n), "m 5 2048 1536 ", 14), "skipping: %s", outcome_of(buf, n));
    /* a zero block, then more headers */
    memset(buf, 0, 512);
    n = 512;
    put_member(buf, &n, "m.txt", '0', 5, "hello", 5);
    CHECK(!strcmp(outcome_of(buf, n), "ERR: " TMP "/bad.tar: a lone zero block at offset 0, then "
                  "more headers"), "a lone zero block: %s", outcome_of(buf, n));
    memset(buf, 0, 1024);
    write_file(TMP "/empty.tar", buf, 1024);
    CHECK(!strcmp(outcome(TMP "/empty.tar"), "samples 0 skipped 0"), "an empty archive: %s",
          outcome(TMP "/empty.tar"));
#undef PAXERR
}

/* ---- WebDataset samples ---- */

static void check_split(void)
{
    const char *ext = "";
    CHECK(wds_split("a/b/c.d.e", &ext) == 5 && !strcmp(ext, "d.e"), "a/b/c.d.e: %s", ext);
    CHECK(wds_split("x.", &ext) == 1 && !strcmp(ext, ""), "x.");
    CHECK(wds_split("a.b/c", &ext) == -1 && wds_split(".x", &ext) == -1 &&
              wds_split("a/.x.txt", &ext) == -1 && wds_split("noext", &ext) == -1,
          "paths without a key");
}

/* Samples by key: a sample without text is counted, not returned; a key
 * seen again later is a new sample; ".txt" and ".text" in any case. */
static void check_webdataset(void)
{
    static const char *const names[] = {"s1.json", "s1.txt", "s2.jpg", "dir/s3.seg.txt",
                                        "s4.TXT", "s5.text", ".hidden.txt", "noext",
                                        "s6.txt", "s6.text", "s1.txt"};
    static const int doc[] = {0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1};
    static const int starts[] = {1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1}; /* a new sample */
    char data[4096], want[4096] = "", resumed[4096] = "", got[4096];
    unsigned long long off = 0, sample = 0, s6 = 0;
    TarWriter w;
    tar_write_open(&w, TMP "/wds.tar");
    for (int i = 0; i < 11; i++) {
        size_t n = content(names[i], data);
        tar_write_member(&w, names[i], data, n);
        sample = starts[i] ? off : sample;
        s6 = i == 8 ? sample : s6;
        char line[256];
        snprintf(line, sizeof line, "%.*s %zu %llu %llu %016llx\n", (int)strcspn(names[i], "."),
                 names[i], n, off + 512, sample,
                 (unsigned long long)fnv1a64((unsigned char *)data, n));
        if (doc[i])
            strcat(want, line);
        if (doc[i] && i >= 8)
            strcat(resumed, line);
        off += 512 + (n + 511) / 512 * 512;
    }
    CHECK(tar_write_close(&w) == 0, "writing wds.tar: %s", w.err);
    strcat(want, "samples 7 skipped 2\n");
    strcat(resumed, "samples 2 skipped 0\n");
    listing(TMP "/wds.tar", 0, 8192, got, sizeof got);
    CHECK(!strcmp(got, want), "wds.tar reads as\n%swant\n%s", got, want);
    check_against_python(TMP "/wds.tar", 5);
    listing(TMP "/wds.tar", s6, 3, got, sizeof got);
    CHECK(!strcmp(got, resumed), "resumed at %llu:\n%swant\n%s", s6, got, resumed);
    listing(TMP "/wds.tar", 100, 8192, got, sizeof got);
    CHECK(!strncmp(got, "ERR: " TMP "/wds.tar: bad header checksum at offset 100 ", 52),
          "resumed inside a header: %s", got);
    listing(TMP "/wds.tar", 1000000, 8192, got, sizeof got);
    CHECK(strstr(got, "cannot resume at offset 1000000: the shard ends at offset"),
          "resumed past the end: %s", got);
}

/* ---- writing ---- */

/* Names for every way ustar holds a path: the name field (100 bytes), the
 * prefix field, a pax header; GNU tar, Python and our reader agree. */
static void check_writer(void)
{
    char names[5][320], got[8192] = "", want[8192] = "", out[8192];
    snprintf(names[0], 320, "%0100d", 0);
    snprintf(names[1], 320, "%060d/%090d.txt", 1, 1);
    snprintf(names[2], 320, "%0250d.txt", 2);
    snprintf(names[3], 320, "%0150d/%020d.txt", 3, 3);
    snprintf(names[4], 320, "empty.txt");
    TarWriter w;
    int sizes_ok = 1;
    tar_write_open(&w, TMP "/names.tar");
    for (int i = 0; i < 5; i++) {
        uint64_t before = w.pos;
        tar_write_member(&w, names[i], "x", i < 4);
        sizes_ok &= w.pos - before == tar_member_bytes(names[i], i < 4);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s\n", names[i]);
    }
    CHECK(tar_write_close(&w) == 0 && sizes_ok, "writing names.tar: %s (sizes %d)", w.err, sizes_ok);
    FILE *f = fopen(TMP "/names.tar", "rb");
    TarReader t;
    TarMember m;
    tar_begin(&t, f, TMP "/names.tar", 0);
    while (tar_next(&t, &m) == 1)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s\n", m.path);
    CHECK(!strcmp(got, want) && t.done == 1, "we read the names back as\n%s%s", got, t.err);
    tar_end(&t);
    fclose(f);
    CHECK(t_run("tar tf " TMP "/names.tar", out, sizeof out) == 0 && !strcmp(out, want),
          "GNU tar lists\n%s", out);
    if (have_python())
        CHECK(t_run(PY " -c 'import tarfile,sys; [print(m.name) for m in tarfile.open(sys.argv[1])]' "
                  TMP "/names.tar", out, sizeof out) == 0 && !strcmp(out, want),
              "Python lists\n%s", out);
    else
        SKIP_MISSING("python3", "our long names not listed by Python's tarfile: no " PY);
}

/* ---- pipe: ---- */

static void expect_listing(const char *part, const char *want)
{
    char got[8192];
    listing(part, 0, 8192, got, sizeof got);
    CHECK(!strcmp(got, want), "%s gives\n%swant\n%s", part, got, want);
}

static void check_pipes(void)
{
    char whole[8192], want[8192];
    listing(TMP "/wds.tar", 0, 8192, whole, sizeof whole);
    expect_listing("pipe:false", "ERR: pipe:false exited with status 1\n");
    expect_listing("pipe:exit 3", "ERR: pipe:exit 3 exited with status 3\n");
    expect_listing("pipe:nonexistent-command-xyz 2>/dev/null",
                   "ERR: pipe:nonexistent-command-xyz 2>/dev/null exited with status 127\n");
    expect_listing("pipe:kill -9 $$", "ERR: pipe:kill -9 $$ was killed by signal 9 (Killed)\n");
    /* every document read, then the command fails: an error, not a short part */
    snprintf(want, sizeof want, "%.*sERR: pipe:cat " TMP "/wds.tar; exit 3 exited with status 3\n",
             (int)(strstr(whole, "samples") - whole), whole);
    expect_listing("pipe:cat " TMP "/wds.tar; exit 3", want);
    /* a truncated stream: the reader's error, or the command's when it failed */
    const char *a = "a 1000 512 0 ";
    char got[8192];
    listing("pipe:head -c 2348 " TMP "/base.tar", 0, 8192, got, sizeof got);
    CHECK(!strncmp(got, a, strlen(a)) && strstr(got, "\nERR: pipe:head -c 2348 " TMP "/base.tar: "
          "truncated member 'b.txt' (header at offset 1536): 600 bytes of data from offset "
          "2048, padded to 1024, but the shard ends at offset 2348\n"), "piped truncation: %s", got);
    listing("pipe:head -c 2348 " TMP "/base.tar; exit 4", 0, 8192, got, sizeof got);
    CHECK(strstr(got, "\nERR: pipe:head -c 2348 " TMP "/base.tar; exit 4 exited with status 4\n"),
          "piped truncation and a failed command: %s", got);
    /* closed early, a pipe is not judged (its command may die of SIGPIPE) */
    DataPart p;
    WdsDoc d;
    char buf[16];
    int rc = data_part_open(&p, "pipe:yes | head -c 100000000", 0);
    rc = rc || data_part_next(&p, &d) != -1; /* not a tar: the reader's error */
    CHECK(rc == 0 && data_part_close(&p) == -1 && strstr(p.err, "pipe:yes | head -c 100000000: "
          "bad header checksum at offset 0"), "garbage from a pipe: %s", p.err);
    rc = data_part_open(&p, "pipe:cat " TMP "/wds.tar " TMP "/wds.tar; exit 5", 0);
    rc = rc || data_part_next(&p, &d) != 1 || data_part_read(&p, buf, sizeof buf) != sizeof buf;
    CHECK(rc == 0 && data_part_close(&p) == 0, "closing a pipe early: %s", p.err);
}

/* ---- gpt shard ---- */

#define SHIN TMP "/sh-in/"
#define INPUTS SHIN "f0.txt " SHIN "f1.txt " SHIN "f2.txt " SHIN "f3.txt " SHIN "f4.txt " SHIN "f5.txt"

/* Each document of the shards is its input file, byte for byte. */
static void check_shard_documents(const char *spec, int want_docs)
{
    DataSource s;
    char err[1024], path[256];
    int docs = 0, same = 1;
    CHECK(data_source_open(&s, spec, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < s.parts.n; i++) {
        DataPart p;
        WdsDoc d;
        data_part_open(&p, s.parts.path[i], 0);
        while (data_part_next(&p, &d) == 1) {
            size_t n;
            snprintf(path, sizeof path, SHIN "f%d.txt", atoi(d.key));
            unsigned char *want = t_slurp(path, &n), *got = malloc(d.size + 1);
            same &= want && data_part_read(&p, got, d.size + 1) == (long)n && !memcmp(got, want, n);
            free(want);
            free(got);
            docs++;
        }
        CHECK(data_part_close(&p) == 0, "%s", p.err);
    }
    data_source_free(&s);
    CHECK(docs == want_docs && same, "%s: %d documents (want %d), same bytes %d", spec, docs,
          want_docs, same);
}

/* Six inputs; with --max-bytes 8K (shard bytes: 512 a header, data padded
 * to 512, 1024 at the end) they fill shards of 2, 1, 1 and 2 documents:
 * the first shard exactly 8192 bytes, the third one file over the limit. */
static void check_shard_command(void)
{
    static const size_t sizes[] = {3000, 1000, 5000, 7000, 200, 100};
    char out[8192], path[256];
    t_run("rm -rf " TMP "/sh-* && mkdir -p " SHIN, out, sizeof out);
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, SHIN "f%d.txt", i);
        t_write_words(path, sizes[i]);
    }
    int rc = t_run("./gpt shard --out " TMP "/sh-a --max-bytes 8K " INPUTS, out, sizeof out);
    CHECK(rc == 0 && strstr(out, TMP "/sh-a/train-000000.tar: 2 documents, 8192 bytes\n" TMP
                            "/sh-a/train-000001.tar: 1 documents, 7680 bytes\n" TMP
                            "/sh-a/train-000002.tar: 1 documents, 9728 bytes\n" TMP
                            "/sh-a/train-000003.tar: 2 documents, 5120 bytes\n4 shards, 6 documents"),
          "gpt shard: %d %s", rc, out);
    rc = t_run("./gpt shard --out " TMP "/sh-b --max-bytes 8K " INPUTS, out, sizeof out);
    int same = rc == 0;
    for (int i = 0; i < 4; i++) {
        char a[256], b[256];
        snprintf(a, sizeof a, TMP "/sh-a/train-%06d.tar", i);
        snprintf(b, sizeof b, TMP "/sh-b/train-%06d.tar", i);
        same &= t_same_file(a, b);
    }
    CHECK(same && access(TMP "/sh-a/train-000004.tar", F_OK) != 0,
          "two runs of gpt shard differ, or wrote a fifth shard");
    rc = t_run("tar tf " TMP "/sh-a/train-000000.tar && tar xOf " TMP "/sh-a/train-000003.tar "
               "000005.name", out, sizeof out);
    CHECK(rc == 0 && !strcmp(out, "000000.name\n000000.txt\n000001.name\n000001.txt\n" SHIN "f5.txt"),
          "GNU tar reads\n%s", out);
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, TMP "/sh-a/train-%06d.tar", i);
        check_against_python(path, i == 0 || i == 3 ? 2 : 1);
    }
    check_shard_documents(TMP "/sh-a/train-{000000..000003}.tar", 6);
    rc = t_run("./gpt shard --out " TMP "/sh-c --prefix val " SHIN, out, sizeof out);
    CHECK(rc == 0 && strstr(out, TMP "/sh-c/val-000000.tar: 6 documents"), "a directory: %s", out);
    check_shard_documents(TMP "/sh-c", 6);
}

static void check_shard_refusals(void)
{
    static const struct {
        const char *cmd;
        int code;
        const char *says;
    } bad[] = {
        {"./gpt shard --out " TMP "/sh-a " SHIN "f0.txt", 2, TMP "/sh-a already holds train-0000"},
        {"./gpt shard --out " TMP "/sh-d " SHIN "nope.txt", 1, SHIN "nope.txt: cannot open input file"},
        {"./gpt shard " SHIN "f0.txt", 2, "gpt shard needs --out DIR"},
        {"./gpt shard --out " TMP "/sh-d", 2, "gpt shard needs input files"},
        {"./gpt shard --out " TMP "/sh-d --max-bytes lots " SHIN "f0.txt", 2, "--max-bytes must be a size"},
        {"./gpt shard --out " TMP "/sh-d --prefix a/b " SHIN "f0.txt", 2, "--prefix must be a file name"},
        {"./gpt shard --out /proc/nope " SHIN "f0.txt", 1, "/proc/nope"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        t_expect_one_line(bad[i].cmd, bad[i].code, bad[i].says);
}

/* ---- random windows from text in memory ---- */

/* sample_windows draws the eval lines' test windows: T bytes each from
 * [lo, lo+len), starting uniformly in [lo, lo + len - T), as the
 * reference's torch.randint(len(data) - block_size) does. On a split only
 * 1 to 3 bytes longer than a window, every allowed start must come up, at
 * about its share, and no other: an off-by-one in the range shows here,
 * where on a big split it would hardly move a draw. Byte i of the text is
 * i, so a window's first token is its start. */
static void check_test_windows(void)
{
    enum { T = 8, B = 30, CALLS = 100, LO = 20 };
    unsigned char text[64];
    for (int i = 0; i < 64; i++)
        text[i] = (unsigned char)i;
    Data d = {text, sizeof text, LO};
    Batch b;
    batch_alloc(&b, B, T);
    for (size_t gap = 1; gap <= 3; gap++) {
        size_t len = T + gap, count[64] = {0}, bad = 0;
        Rng r;
        rng_seed(&r, 1234 + gap, RNG_EVAL);
        for (int c = 0; c < CALLS; c++) {
            sample_windows(&b, &d, LO, len, &r, NULL);
            for (int i = 0; i < B; i++) {
                const int32_t *w = b.tok + (size_t)i * T;
                for (int t = 0; t < T; t++) /* T consecutive bytes of the text */
                    bad += w[t] != w[0] + t;
                count[w[0]]++;
            }
        }
        CHECK(!bad, "gap %zu: %zu tokens of a window are not the text after its start", gap, bad);
        size_t outside = 0, draws = (size_t)B * CALLS, share = draws / gap;
        for (size_t s = 0; s < 64; s++)
            if (s < LO || s >= LO + gap)
                outside += count[s];
        CHECK(!outside, "gap %zu: %zu windows start outside [%d, %zu)", gap, outside, LO,
              LO + gap);
        /* a share of 1000 to 3000 draws: 20% off is over 7 standard deviations */
        for (size_t s = LO; s < LO + gap; s++)
            CHECK(count[s] * 10 >= share * 8 && count[s] * 10 <= share * 12, "gap %zu: the start "
                  "%zu drawn %zu times in %zu, want about %zu", gap, s, count[s], draws, share);
    }
    batch_free(&b);
}

void test_data(void)
{
    char out[256];
    t_run("rm -rf " TMP " && mkdir -p " TMP, out, sizeof out);
    check_braces();
    check_listing();
    check_sources();
    check_split();
    check_python_archives();
    check_gnu_archives();
    check_damage();
    check_pax_damage();
    check_webdataset();
    check_writer();
    check_pipes();
    check_shard_command();
    check_shard_refusals();
    check_test_windows();
}
