/* safetensors.c: the safetensors file format, read strictly and written
 * atomically. It is a file format, not the model, so it lives apart: whoever
 * opens gpt.c meets the model first, not a JSON parser.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON, then the raw
 * data. Everything a hostile file could lie about is checked: lengths,
 * nesting, number ranges, offsets, overlaps, holes and duplicate names. */
#include "safetensors/safetensors.h"
#include "util/util.h"
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Out of memory is the one error this file does not report to its caller:
 * one line on stderr and exit 1, as everywhere in gpt (util.h's xcalloc). */
static _Noreturn void out_of_memory(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("gpt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* ---- reading ---- */

#define ST_MAX_HEADER (100u << 20)

static const char *const st_names[] = {"F32", "I32", "BF16", "F16", "F64",
                                       "I64", "I16", "I8",   "U8",  "BOOL"};
static const int st_sizes[] = {4, 4, 2, 2, 8, 8, 2, 1, 1, 1};

/* The parser's cursor over the header; err keeps the first failure. */
struct json {
    const char *s, *end, *start;
    char *err;
    size_t elen;
};

static int jfail(struct json *p, const char *what)
{
    if (!p->err[0])
        snprintf(p->err, p->elen, "bad header at byte %ld: %s",
                 (long)(p->s - p->start), what);
    return -1;
}

static void jskip_space(struct json *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static int jexpect(struct json *p, char c)
{
    jskip_space(p);
    if (p->s < p->end && *p->s == c) {
        p->s++;
        return 0;
    }
    char msg[32];
    snprintf(msg, sizeof msg, "expected '%c'", c);
    return jfail(p, msg);
}

static int jnext_is(struct json *p, char c)
{
    jskip_space(p);
    return p->s < p->end && *p->s == c;
}

/* \u escapes (four hex digits) of ASCII only: names and metadata here are ASCII. */
static int jescape(struct json *p, char *out)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = p->s < p->end ? strchr(from, *p->s) : NULL;
    if (k && *p->s) {
        *out = to[k - from];
        p->s++;
        return 0;
    }
    unsigned v = 0;
    if (p->end - p->s < 5 || *p->s != 'u')
        return jfail(p, "bad escape");
    for (int i = 1; i <= 4; i++) {
        int c = p->s[i];
        if (!isxdigit(c))
            return jfail(p, "bad \\u escape");
        v = v * 16 + (unsigned)(isdigit(c) ? c - '0' : (tolower(c) - 'a' + 10));
    }
    if (v == 0 || v > 127)
        return jfail(p, "non-ASCII \\u escape");
    *out = (char)v;
    p->s += 5;
    return 0;
}

static char *jstring(struct json *p)
{
    if (jexpect(p, '"'))
        return NULL;
    /* size the copy by the quoted span, not the rest of the header: a
     * header of many strings must cost linear, not quadratic, time */
    const char *q = p->s;
    while (q < p->end && *q != '"')
        q += *q == '\\' && q + 1 < p->end ? 2 : 1;
    char *out = xcalloc((size_t)(q - p->s) + 1, 1);
    size_t n = 0;
    while (p->s < p->end && *p->s != '"') {
        unsigned char c = (unsigned char)*p->s++;
        if (c < 0x20 || (c == '\\' && jescape(p, (char *)&c))) {
            free(out);
            jfail(p, "bad character in string");
            return NULL;
        }
        out[n++] = (char)c;
    }
    if (p->s >= p->end) {
        free(out);
        jfail(p, "unterminated string");
        return NULL;
    }
    p->s++;
    return out;
}

/* A non-negative integer below 2^53, as JSON writes it. */
static int jint(struct json *p, int64_t *v)
{
    jskip_space(p);
    const char *s = p->s;
    if (s >= p->end || !isdigit((unsigned char)*s))
        return jfail(p, "expected a non-negative integer");
    if (*s == '0' && s + 1 < p->end && isdigit((unsigned char)s[1]))
        return jfail(p, "leading zero");
    int64_t x = 0;
    for (; s < p->end && isdigit((unsigned char)*s); s++) {
        if (x > ((int64_t)1 << 53) / 10)
            return jfail(p, "integer too large");
        x = x * 10 + (*s - '0');
    }
    if (s < p->end && (*s == '.' || *s == 'e' || *s == 'E'))
        return jfail(p, "expected an integer");
    p->s = s;
    *v = x;
    return 0;
}

/* '[' int, ... ']' into v (at most max). */
static int jints(struct json *p, int64_t *v, int max, int *n)
{
    *n = 0;
    if (jexpect(p, '['))
        return -1;
    if (jnext_is(p, ']'))
        return jexpect(p, ']');
    do {
        if (*n == max)
            return jfail(p, "too many dimensions");
        if (jint(p, &v[(*n)++]))
            return -1;
    } while (jnext_is(p, ',') && !jexpect(p, ','));
    return jexpect(p, ']');
}

static int jdtype(struct json *p, int *dtype)
{
    char *s = jstring(p);
    if (!s)
        return -1;
    for (int i = 0; i < (int)(sizeof st_names / sizeof *st_names); i++) {
        if (!strcmp(s, st_names[i])) {
            *dtype = i;
            free(s);
            return 0;
        }
    }
    free(s);
    return jfail(p, "unknown dtype");
}

/* One field of a tensor's description; seen[] rejects repeats. */
static int jtensor_field(struct json *p, StEntry *e, int *seen)
{
    char *key = jstring(p);
    int rc = -1, n, f;
    int64_t off[2];
    if (!key || jexpect(p, ':'))
        goto out;
    f = !strcmp(key, "dtype") ? 0 : !strcmp(key, "shape") ? 1
        : !strcmp(key, "data_offsets") ? 2 : -1;
    if (f < 0 || seen[f]++) {
        rc = jfail(p, f < 0 ? "unknown tensor field" : "repeated tensor field");
        goto out;
    }
    if (f == 0)
        rc = jdtype(p, &e->dtype);
    else if (f == 1)
        rc = jints(p, e->shape, 8, &e->ndim);
    else if (!(rc = jints(p, off, 2, &n)) && n != 2)
        rc = jfail(p, "data_offsets needs two integers");
    if (f == 2 && !rc) {
        e->begin = (size_t)off[0];
        e->end = (size_t)off[1];
    }
out:
    free(key);
    return rc;
}

static int jtensor(struct json *p, StEntry *e)
{
    int seen[3] = {0, 0, 0};
    if (jexpect(p, '{'))
        return -1;
    do {
        if (jtensor_field(p, e, seen))
            return -1;
    } while (jnext_is(p, ',') && !jexpect(p, ','));
    if (jexpect(p, '}'))
        return -1;
    return seen[0] && seen[1] && seen[2] ? 0 : jfail(p, "tensor lacks dtype, shape or data_offsets");
}

/* One "key": "value" of the metadata. The checksum's place is kept: the
 * check hashes the file with its digits read as the writer had them. */
static int jmeta_pair(struct json *p, StFile *f)
{
    f->mkey = realloc(f->mkey, sizeof(char *) * (f->nmeta + 1));
    f->mval = realloc(f->mval, sizeof(char *) * (f->nmeta + 1));
    if (!f->mkey || !f->mval)
        out_of_memory("out of memory (metadata)");
    char **key = &f->mkey[f->nmeta], **val = &f->mval[f->nmeta];
    *val = NULL;
    f->nmeta++;
    if (!(*key = jstring(p)) || jexpect(p, ':'))
        return -1;
    jskip_space(p);
    size_t at = (size_t)(p->s - p->start) + 8 + 1; /* past the u64 length and the quote */
    if (!(*val = jstring(p)))
        return -1;
    if (!strcmp(*key, "checksum") && !f->sum_at)
        f->sum_at = at;
    return 0;
}

static int jmeta(struct json *p, StFile *f)
{
    if (f->mkey)
        return jfail(p, "repeated __metadata__");
    f->mkey = xcalloc(1, sizeof(char *));
    f->mval = xcalloc(1, sizeof(char *));
    if (jexpect(p, '{'))
        return -1;
    if (jnext_is(p, '}'))
        return jexpect(p, '}');
    do {
        if (jmeta_pair(p, f))
            return -1;
    } while (jnext_is(p, ',') && !jexpect(p, ','));
    return jexpect(p, '}');
}

static int jentry(struct json *p, StFile *f, int *cap)
{
    char *key = jstring(p);
    if (!key || jexpect(p, ':')) {
        free(key);
        return -1;
    }
    if (!strcmp(key, "__metadata__")) {
        free(key);
        return jmeta(p, f);
    }
    if (f->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        f->e = realloc(f->e, sizeof *f->e * *cap);
        if (!f->e)
            out_of_memory("out of memory (header)");
    }
    StEntry *e = &f->e[f->n++];
    memset(e, 0, sizeof *e);
    e->name = key;
    return jtensor(p, e);
}

static int jheader(struct json *p, StFile *f)
{
    int cap = 0;
    if (jexpect(p, '{'))
        return -1;
    if (!jnext_is(p, '}')) {
        do {
            if (jentry(p, f, &cap))
                return -1;
        } while (jnext_is(p, ',') && !jexpect(p, ','));
    }
    if (jexpect(p, '}'))
        return -1;
    jskip_space(p);
    return p->s == p->end ? 0 : jfail(p, "trailing bytes after the header");
}

static int cmp_begin(const void *a, const void *b)
{
    const StEntry *x = *(StEntry *const *)a, *y = *(StEntry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1
           : x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(StEntry *const *)a)->name, (*(StEntry *const *)b)->name);
}

static int st_fail(char *err, size_t elen, const char *fmt, const char *name)
{
    snprintf(err, elen, fmt, name);
    return -1;
}

/* Each tensor's byte length must match its shape and dtype. */
static int check_sizes(const StFile *f, char *err, size_t elen)
{
    for (int i = 0; i < f->n; i++) {
        const StEntry *e = &f->e[i];
        uint64_t bytes = (uint64_t)st_sizes[e->dtype];
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] > ((int64_t)1 << 40) || (e->shape[d] && bytes > (UINT64_C(1) << 62) / (uint64_t)e->shape[d]))
                return st_fail(err, elen, "tensor '%s' has an absurd shape", e->name);
            bytes *= (uint64_t)e->shape[d];
        }
        if (e->end < e->begin || e->end - e->begin != bytes)
            return st_fail(err, elen, "tensor '%s': data_offsets disagree with its shape and dtype", e->name);
    }
    return 0;
}

/* Offsets must tile the data section exactly: no overlap, no hole. Names
 * must be unique. */
static int check_layout(const StFile *f, char *err, size_t elen)
{
    StEntry **by = xcalloc((size_t)f->n, sizeof *by);
    size_t at = 0, data = f->size - f->data_off;
    int rc = 0;
    for (int i = 0; i < f->n; i++)
        by[i] = &f->e[i];
    qsort(by, (size_t)f->n, sizeof *by, cmp_name);
    for (int i = 1; i < f->n && !rc; i++)
        if (!strcmp(by[i]->name, by[i - 1]->name))
            rc = st_fail(err, elen, "duplicate tensor name '%s'", by[i]->name);
    qsort(by, (size_t)f->n, sizeof *by, cmp_begin);
    for (int i = 0; i < f->n && !rc; i++) {
        if (by[i]->begin != at)
            rc = st_fail(err, elen, "tensor '%s' overlaps another or leaves a hole", by[i]->name);
        at = by[i]->end;
    }
    if (!rc && at > data) {
        snprintf(err, elen, "truncated: the header describes %zu bytes of data, the file holds %zu",
                 at, data);
        rc = -1;
    } else if (!rc && at != data)
        rc = st_fail(err, elen, "data section size disagrees with the header%s", "");
    free(by);
    return rc;
}

int st_parse(StFile *f, unsigned char *buf, size_t size, char *err, size_t elen)
{
    memset(f, 0, sizeof *f);
    f->buf = buf;
    f->size = size;
    err[0] = 0;
    if (size < 8)
        return st_fail(err, elen, "too short to be a safetensors file%s", "");
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    if (hlen > ST_MAX_HEADER)
        return st_fail(err, elen, "header length is absurd%s", "");
    if (hlen > size - 8)
        return st_fail(err, elen, "truncated: header length is larger than the file%s", "");
    f->data_off = 8 + (size_t)hlen;
    struct json p = {(const char *)buf + 8, (const char *)buf + f->data_off,
                     (const char *)buf + 8, err, elen};
    if (jheader(&p, f) || check_sizes(f, err, elen) || check_layout(f, err, elen))
        return -1;
    return 0;
}

int st_load(StFile *f, const char *path, char *err, size_t elen)
{
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return snprintf(err, elen, "cannot open: %s", strerror(errno)), -1;
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            buf = realloc(buf, cap);
            if (!buf)
                out_of_memory("%s: out of memory", path);
        }
        got = fread(buf + n, 1, cap - n, fp);
        n += got;
    } while (got > 0);
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        return snprintf(err, elen, "read error"), -1;
    }
    if (st_parse(f, buf, n, err, elen))
        return -1;
    return st_check_checksum(f, err, elen);
}

void st_free(StFile *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->e[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->mkey[i]);
        free(f->mval[i]);
    }
    free(f->e);
    free(f->mkey);
    free(f->mval);
    free(f->buf);
    memset(f, 0, sizeof *f);
}

const StEntry *st_find(const StFile *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name))
            return &f->e[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (f->mkey[i] && !strcmp(f->mkey[i], key))
            return f->mval[i];
    return NULL;
}

const void *st_data(const StFile *f, const StEntry *e)
{
    return f->buf + f->data_off + e->begin;
}

const char *st_dtype_name(int dtype) { return st_names[dtype]; }

/* The checksum is FNV-1a over every byte of the file, header included,
 * with the checksum's own 16 hex digits read as ST_SUM_HOLE: the writer
 * hashes the file with that placeholder in their place, then writes the
 * digits over it. So a flipped byte anywhere changes either the hash (the
 * names, dtypes, shapes, offsets, metadata and data) or the digits.
 * Files written before this covered the data alone; they are still
 * accepted when their digits match that, and so keep only that check: a
 * whole-file checksum matches the data alone by chance only (2^-64). */
#define ST_SUM_HOLE "0000000000000000"

static uint64_t whole_file_sum(const StFile *f)
{
    uint64_t h = fnv1a64_more(FNV1A64_START, f->buf, f->sum_at);
    h = fnv1a64_more(h, (const unsigned char *)ST_SUM_HOLE, 16);
    return fnv1a64_more(h, f->buf + f->sum_at + 16, f->size - f->sum_at - 16);
}

static int sum_is(const char *want, uint64_t h)
{
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)h);
    return !strcmp(want, got);
}

int st_check_checksum(const StFile *f, char *err, size_t elen)
{
    const char *want = st_meta(f, "checksum"), *format = st_meta(f, "format");
    if (!want && format && !strcmp(format, ST_OUR_FORMAT))
        return snprintf(err, elen, "no checksum in a gpt checkpoint: the header is damaged"), -1;
    if (!want)
        return 0; /* files written by PyTorch have none */
    /* the digits as written (no escapes), else the whole-file sum is not theirs */
    int whole = strlen(want) == 16 && !memcmp(f->buf + f->sum_at, want, 16);
    if ((whole && sum_is(want, whole_file_sum(f))) ||
        sum_is(want, fnv1a64(f->buf + f->data_off, f->size - f->data_off)))
        return 0;
    return snprintf(err, elen, "checksum mismatch: the file is damaged"), -1;
}

/* ---- writing ---- */

static void buf_put(StBuf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 4096;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            out_of_memory("out of memory (checkpoint)");
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void buf_printf(StBuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void buf_json_string(StBuf *b, const char *s)
{
    buf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c > 126)
            buf_printf(b, "\\u%04x", c);
        else
            buf_put(b, s, 1);
    }
    buf_put(b, "\"", 1);
}

void st_add(StWriter *w, const char *name, int dtype, int ndim, const int64_t *shape,
            const void *src, size_t bytes)
{
    buf_put(&w->hdr, w->hdr.n ? "," : "{", 1);
    buf_json_string(&w->hdr, name);
    buf_printf(&w->hdr, ":{\"dtype\":\"%s\",\"shape\":[", st_names[dtype]);
    for (int d = 0; d < ndim; d++)
        buf_printf(&w->hdr, d ? ",%lld" : "%lld", (long long)shape[d]);
    buf_printf(&w->hdr, "],\"data_offsets\":[%zu,%zu]}", w->data.n, w->data.n + bytes);
    buf_put(&w->data, src, bytes);
}

/* Writes path atomically (util.h): a temporary file in the same directory,
 * fsync, rename over the old name, fsync the directory. A crash at any moment
 * leaves either the old file or the new one, never half of one. */
static int write_atomic(const char *path, const StBuf *const *parts, int n,
                        char *err, size_t elen)
{
    char *tmp = tmp_path(path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, elen, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        for (size_t off = 0; off < parts[i]->n;) {
            ssize_t k = write(fd, parts[i]->p + off, parts[i]->n - off);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                snprintf(err, elen, "cannot write %s: %s", tmp, strerror(errno));
                close(fd);
                unlink(tmp);
                free(tmp);
                return -1;
            }
            off += (size_t)k;
        }
    }
    int rc = 0;
    if (fsync(fd) || close(fd) || commit_tmp(tmp, path)) {
        snprintf(err, elen, "cannot save %s: %s", path, strerror(errno));
        unlink(tmp);
        rc = -1;
    }
    free(tmp);
    return rc;
}

/* The "__metadata__" entry, its checksum a placeholder; returns where the
 * checksum's digits are in w->hdr, for st_write to fill in. */
static size_t put_metadata(StWriter *w, const char *const *mkey, const char *const *mval,
                           int nmeta)
{
    buf_printf(&w->hdr, "%s\"__metadata__\":{\"checksum\":\"", w->hdr.n ? "," : "{");
    size_t at = w->hdr.n;
    buf_printf(&w->hdr, "%s\"", ST_SUM_HOLE);
    for (int i = 0; i < nmeta; i++) {
        buf_put(&w->hdr, ",", 1);
        buf_json_string(&w->hdr, mkey[i]);
        buf_put(&w->hdr, ":", 1);
        buf_json_string(&w->hdr, mval[i]);
    }
    buf_put(&w->hdr, "}}", 2);
    while (w->hdr.n % 8)
        buf_put(&w->hdr, " ", 1); /* keeps the data 8-byte aligned */
    return at;
}

int st_write(StWriter *w, const char *path, const char *const *mkey,
             const char *const *mval, int nmeta, char *err, size_t elen)
{
    size_t at = put_metadata(w, mkey, mval, nmeta);
    StBuf len = {0};
    for (int i = 0; i < 8; i++) {
        unsigned char byte = (unsigned char)((uint64_t)w->hdr.n >> (8 * i));
        buf_put(&len, &byte, 1);
    }
    /* the whole file, hashed with the placeholder; then the digits over it */
    uint64_t h = fnv1a64_more(fnv1a64(len.p, len.n), w->hdr.p, w->hdr.n);
    char sum[17];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)fnv1a64_more(h, w->data.p, w->data.n));
    memcpy(w->hdr.p + at, sum, 16);
    const StBuf *parts[] = {&len, &w->hdr, &w->data};
    int rc = write_atomic(path, parts, 3, err, elen);
    free(len.p);
    free(w->hdr.p);
    free(w->data.p);
    memset(w, 0, sizeof *w);
    return rc;
}
