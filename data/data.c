/* data.c: where training text comes from: patterns to paths, tar shards
 * read as a stream in WebDataset's layout, pipe: sources, and a writer of
 * reproducible shards. It is a file format and a file system's worth of
 * code, not the model, so it lives apart from gpt.c, beside safetensors.c.
 *
 * A tar archive is a sequence of 512-byte blocks: a header block, the
 * member's data padded to a whole block, the next header, ..., and zero
 * blocks at the end. The reader never holds more than one header (or one
 * pax or long-name header, at most 1 MiB) in memory, and reads strictly
 * forward, so a shard may arrive through a pipe. Everything a damaged
 * shard could lie about is checked, and each error is one line naming the
 * shard and the byte offset where it went wrong. */
#include "data/data.h"
#include "util/util.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *xstrndup(const char *s, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

static int fail(char *err, size_t elen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, elen, fmt, ap);
    va_end(ap);
    return -1;
}

typedef unsigned long long ull; /* for printf's %llu */

/* ==== naming: patterns to paths ==== */

void data_list_add(DataList *l, const char *path)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->path = xrealloc(l->path, sizeof *l->path * (size_t)l->cap);
    }
    l->path[l->n++] = xstrdup(path);
}

void data_list_free(DataList *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->path[i]);
    free(l->path);
    memset(l, 0, sizeof *l);
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void sort_from(DataList *l, int first)
{
    qsort(l->path + first, (size_t)(l->n - first), sizeof *l->path, cmp_path);
}

/* ---- brace expansion ----
 * Bash's rules, as WebDataset's braceexpand follows them: the first brace
 * that expands is replaced by each of its alternatives in turn, and each
 * result is expanded again from that point, so the first brace varies
 * slowest and nested braces expand inside their alternative. */

struct expansion {
    const char *pattern;
    DataList *out;
    int first;     /* out's size before this pattern */
    char *err;
    size_t elen;
};

/* The '}' matching the '{' at s[i], or 0 if there is none. */
static size_t brace_end(const char *s, size_t i)
{
    int depth = 0;
    for (; s[i]; i++) {
        if (s[i] == '\\' && s[i + 1])
            i++;
        else if (s[i] == '{')
            depth++;
        else if (s[i] == '}' && --depth == 0)
            return i;
    }
    return 0;
}

/* Offsets of the commas of s(open, close) outside inner braces, in at[]
 * (when not NULL); returns how many. */
static int brace_commas(const char *s, size_t open, size_t close, size_t *at)
{
    int n = 0, depth = 0;
    for (size_t i = open + 1; i < close; i++) {
        if (s[i] == '\\' && i + 1 < close)
            i++;
        else if (s[i] == '{' || s[i] == '}')
            depth += s[i] == '{' ? 1 : -1;
        else if (s[i] == ',' && depth == 0 && at)
            at[n++] = i;
        else if (s[i] == ',' && depth == 0)
            n++;
    }
    return n;
}

struct range {
    long long from, to, step;
    int width; /* zero padding, 0 for none */
};

/* A whole number of at most 18 digits at p (before end): its value, and
 * its length in *len; NULL if there is none. */
static const char *range_number(const char *p, const char *end, long long *v, int *len,
                                int *padded)
{
    const char *start = p, *digits = p + (p < end && *p == '-');
    for (p = digits; p < end && isdigit((unsigned char)*p); p++)
        if (p - digits == 18)
            return NULL;
    if (p == digits)
        return NULL;
    *v = strtoll(start, NULL, 10);
    *len = (int)(p - start);
    *padded = digits[0] == '0' && p - digits > 1;
    return p;
}

/* "A..B" or "A..B..STEP" between p and end: 1 and r, or 0. Bash pads
 * every term to the longer bound's width when either has a leading zero. */
static int brace_range(const char *p, const char *end, struct range *r)
{
    int la, lb, ls, pa, pb, ps;
    r->step = 1;
    p = range_number(p, end, &r->from, &la, &pa);
    if (!p || end - p < 3 || p[0] != '.' || p[1] != '.')
        return 0;
    p = range_number(p + 2, end, &r->to, &lb, &pb);
    if (p && end - p >= 3 && p[0] == '.' && p[1] == '.')
        p = range_number(p + 2, end, &r->step, &ls, &ps);
    if (!p || p != end)
        return 0;
    if (r->step < 0)
        r->step = -r->step;
    if (r->step == 0)
        r->step = 1;
    r->width = pa || pb ? (la > lb ? la : lb) : 0;
    return 1;
}

/* The first brace at or after `from` that expands (has a comma or is a
 * range): 1 with its bounds, or 0. A brace that does not expand, such as
 * {a}, stays, but braces inside it may expand. */
static int next_brace(const char *s, size_t from, size_t *open, size_t *close)
{
    for (size_t i = from; s[i]; i++) {
        if (s[i] == '\\' && s[i + 1]) {
            i++;
            continue;
        }
        size_t end = s[i] == '{' ? brace_end(s, i) : 0;
        struct range r;
        if (end && (brace_commas(s, i, end, NULL) > 0 ||
                    brace_range(s + i + 1, s + end, &r))) {
            *open = i;
            *close = end;
            return 1;
        }
    }
    return 0;
}

/* Adds a finished word, its escapes removed; an empty word is dropped. */
static int emit_word(struct expansion *x, const char *s)
{
    char *w = xmalloc(strlen(s) + 1), *o = w;
    for (; *s; s++) {
        if (*s == '\\' && strchr("{},\\", s[1]) && s[1])
            s++;
        *o++ = *s;
    }
    *o = 0;
    if (*w && x->out->n - x->first >= DATA_MAX_PATHS) {
        free(w);
        return fail(x->err, x->elen, "%s: expands to more than %d paths", x->pattern,
                    DATA_MAX_PATHS);
    }
    if (*w)
        data_list_add(x->out, w);
    free(w);
    return 0;
}

static int expand_from(struct expansion *x, const char *s, size_t from);

/* s with s[open..close] replaced by alt[0..n), expanded from open. */
static int expand_alt(struct expansion *x, const char *s, size_t open, size_t close,
                      const char *alt, size_t n)
{
    size_t tail = strlen(s + close + 1);
    char *t = xmalloc(open + n + tail + 1);
    memcpy(t, s, open);
    memcpy(t + open, alt, n);
    memcpy(t + open + n, s + close + 1, tail + 1);
    int rc = expand_from(x, t, open);
    free(t);
    return rc;
}

static int expand_from(struct expansion *x, const char *s, size_t from)
{
    size_t open, close;
    if (!next_brace(s, from, &open, &close))
        return emit_word(x, s);
    size_t *comma = xmalloc(sizeof *comma * (close - open));
    int n = brace_commas(s, open, close, comma), rc = 0;
    struct range r;
    if (n > 0) {
        for (int k = 0; k <= n && !rc; k++) {
            size_t a = k ? comma[k - 1] + 1 : open + 1, b = k < n ? comma[k] : close;
            rc = expand_alt(x, s, open, close, s + a, b - a);
        }
    } else if (brace_range(s + open + 1, s + close, &r)) {
        unsigned long long count = (unsigned long long)(r.to > r.from ? r.to - r.from
                                                                       : r.from - r.to) /
                                   (unsigned long long)r.step + 1;
        if (count > DATA_MAX_PATHS)
            rc = fail(x->err, x->elen, "%s: expands to more than %d paths", x->pattern,
                      DATA_MAX_PATHS);
        for (unsigned long long k = 0; k < count && !rc; k++) {
            char num[32];
            long long v = r.from + (r.to >= r.from ? 1 : -1) * (long long)k * r.step;
            int len = snprintf(num, sizeof num, "%0*lld", r.width, v);
            rc = expand_alt(x, s, open, close, num, (size_t)len);
        }
    }
    free(comma);
    return rc;
}

/* Every '{' has its '}' and every '}' its '{' (escapes aside): 0, or -1
 * naming the offset of the first brace without a partner. */
static int check_braces(const char *p, char *err, size_t elen)
{
    size_t n = strlen(p), depth = 0;
    size_t *open = xmalloc(sizeof *open * (n + 1));
    long bad = -1;
    for (size_t i = 0; i < n && bad < 0; i++) {
        if (p[i] == '\\' && p[i + 1])
            i++;
        else if (p[i] == '{')
            open[depth++] = i;
        else if (p[i] == '}' && depth == 0)
            bad = (long)i;
        else if (p[i] == '}')
            depth--;
    }
    if (bad < 0 && depth > 0)
        bad = (long)open[depth - 1];
    free(open);
    return bad < 0 ? 0 : fail(err, elen, "%s: unbalanced brace at offset %ld", p, bad);
}

int data_expand_braces(const char *pattern, DataList *out, char *err, size_t elen)
{
    struct expansion x = {pattern, out, out->n, err, elen};
    if (check_braces(pattern, err, elen))
        return -1;
    if (expand_from(&x, pattern, 0)) {
        while (out->n > x.first)
            free(out->path[--out->n]);
        return -1;
    }
    if (out->n == x.first)
        return fail(err, elen, "%s: expands to nothing", pattern);
    return 0;
}

/* ---- directories and globs ---- */

static int list_into(const char *dir, DataList *out, int depth, char *err, size_t elen)
{
    DIR *d = opendir(dir);
    if (!d)
        return fail(err, elen, "%s: cannot open directory (%s)", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    size_t dlen = strlen(dir);
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        size_t plen = dlen + strlen(e->d_name) + 2;
        char *path = xmalloc(plen);
        snprintf(path, plen, "%s%s%s", dir, dlen && dir[dlen - 1] == '/' ? "" : "/", e->d_name);
        struct stat ls, st;
        if (lstat(path, &ls))
            rc = fail(err, elen, "%s: cannot stat (%s)", path, strerror(errno));
        else if (S_ISDIR(ls.st_mode) && depth >= 64)
            rc = fail(err, elen, "%s: directories nested too deep", path);
        else if (S_ISDIR(ls.st_mode))
            rc = list_into(path, out, depth + 1, err, elen);
        else if (!stat(path, &st) && S_ISREG(st.st_mode))
            data_list_add(out, path);
        if (!rc && out->n > DATA_MAX_PATHS)
            rc = fail(err, elen, "%s: holds more than %d files", dir, DATA_MAX_PATHS);
        free(path);
    }
    closedir(d);
    return rc;
}

int data_list_dir(const char *dir, DataList *out, char *err, size_t elen)
{
    int first = out->n;
    if (list_into(dir, out, 0, err, elen))
        return -1;
    if (out->n == first)
        return fail(err, elen, "%s: no files in this directory", dir);
    sort_from(out, first);
    return 0;
}

int data_glob(const char *pattern, DataList *out, char *err, size_t elen)
{
    glob_t g;
    int first = out->n, rc = 0, grc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (grc && grc != GLOB_NOMATCH)
        return fail(err, elen, "%s: cannot expand the pattern (%s)", pattern,
                    grc == GLOB_NOSPACE ? "out of memory" : "read error");
    for (size_t i = 0; !grc && !rc && i < g.gl_pathc; i++) {
        struct stat st;
        if (stat(g.gl_pathv[i], &st) == 0 && S_ISDIR(st.st_mode))
            rc = list_into(g.gl_pathv[i], out, 0, err, elen);
        else if (stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode))
            data_list_add(out, g.gl_pathv[i]);
        if (!rc && out->n - first > DATA_MAX_PATHS)
            rc = fail(err, elen, "%s: matches more than %d files", pattern, DATA_MAX_PATHS);
    }
    if (!grc)
        globfree(&g);
    if (rc)
        return -1;
    if (out->n == first)
        return fail(err, elen, "%s: matches no file", pattern);
    sort_from(out, first);
    return 0;
}

/* ==== reading tar shards ==== */

#define BLOCK 512
#define MAX_META (1u << 20) /* the largest pax or long-name header read */

static uint64_t padded(uint64_t n) { return (n + BLOCK - 1) / BLOCK * BLOCK; }

static int tar_fail(TarReader *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(t->err, sizeof t->err, "%s: ", t->name);
    vsnprintf(t->err + n, sizeof t->err - (size_t)n, fmt, ap);
    va_end(ap);
    t->done = -1;
    return -1;
}

/* Reads up to n bytes: the count (short only at the end of the stream),
 * or -1 on a read error. */
static long read_full(TarReader *t, void *buf, size_t n)
{
    size_t got = fread(buf, 1, n, t->f);
    if (got < n && ferror(t->f))
        return tar_fail(t, "read error at offset %llu (%s)", (ull)(t->pos + got),
                        strerror(errno));
    t->pos += got;
    return (long)got;
}

/* Skips up to n bytes: a seek in a regular file, reads through a pipe.
 * Returns the bytes skipped (fewer at the end of the stream), or -1. */
static int64_t skip_bytes(TarReader *t, uint64_t n)
{
    if (t->file_size >= 0) {
        uint64_t left = (uint64_t)t->file_size > t->pos ? (uint64_t)t->file_size - t->pos : 0;
        uint64_t k = n < left ? n : left;
        if (k && fseeko(t->f, (off_t)k, SEEK_CUR))
            return tar_fail(t, "cannot seek to offset %llu (%s)", (ull)(t->pos + k),
                            strerror(errno));
        t->pos += k;
        return (int64_t)k;
    }
    char buf[16384];
    uint64_t done = 0;
    while (done < n) {
        size_t want = n - done < sizeof buf ? (size_t)(n - done) : sizeof buf;
        long got = read_full(t, buf, want);
        if (got < 0)
            return -1;
        done += (uint64_t)got;
        if ((size_t)got < want)
            break;
    }
    return (int64_t)done;
}

void tar_begin(TarReader *t, FILE *f, const char *name, uint64_t start)
{
    struct stat st;
    memset(t, 0, sizeof *t);
    t->f = f;
    t->name = name;
    t->long_size = -1;
    t->file_size = -1;
    int fd = fileno(f);
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ftello(f) == 0)
        t->file_size = st.st_size;
    int64_t got = start ? skip_bytes(t, start) : 0;
    if (got >= 0 && (uint64_t)got < start)
        tar_fail(t, "cannot resume at offset %llu: the shard ends at offset %llu", (ull)start,
                 (ull)got);
    t->pos = start;
}

/* A field as text for an error: printable bytes as they are, others as
 * \xNN, trailing NULs dropped. */
static const char *show_field(const unsigned char *p, size_t len, char *out, size_t n)
{
    while (len && !p[len - 1])
        len--;
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < n; i++)
        o += (size_t)snprintf(out + o, n - o, p[i] >= 32 && p[i] < 127 ? "%c" : "\\x%02x",
                              p[i]);
    out[o] = 0;
    return out;
}

/* A numeric header field: octal digits after optional spaces, ended by a
 * space or NUL (what follows a NUL is ignored, as Python's tarfile does),
 * or GNU's base-256 (first byte 0x80, then big-endian). An empty field is
 * 0. Returns 0 and *v (below 2^63), or -1. */
static int parse_number(const unsigned char *p, size_t len, uint64_t *v)
{
    uint64_t x = 0;
    size_t i = 0;
    if (p[0] == 0x80) {
        for (i = 1; i < len; i++) {
            if (x >> 55)
                return -1;
            x = x << 8 | p[i];
        }
        *v = x;
        return 0;
    }
    while (i < len && p[i] == ' ')
        i++;
    for (; i < len && p[i] >= '0' && p[i] <= '7'; i++) {
        if (x >> 59)
            return -1;
        x = x * 8 + (uint64_t)(p[i] - '0');
    }
    for (; i < len && p[i]; i++)
        if (p[i] != ' ')
            return -1;
    *v = x;
    return 0;
}

/* The stored checksum must equal the header's byte sum with the checksum
 * field read as spaces (unsigned, or signed as some old tars summed). */
static int check_checksum(TarReader *t, const unsigned char *h, uint64_t at)
{
    unsigned sum = 0;
    int ssum = 0;
    for (int i = 0; i < BLOCK; i++) {
        unsigned char c = i >= 148 && i < 156 ? ' ' : h[i];
        sum += c;
        ssum += (signed char)c;
    }
    uint64_t found;
    char shown[64];
    if (parse_number(h + 148, 8, &found))
        return tar_fail(t, "bad header checksum at offset %llu (expected %06o, found '%s')",
                        (ull)at, sum, show_field(h + 148, 8, shown, sizeof shown));
    if (found != sum && (int64_t)found != ssum)
        return tar_fail(t, "bad header checksum at offset %llu (expected %06o, found %06llo)",
                        (ull)at, sum, (ull)found);
    return 0;
}

static int is_zero(const unsigned char *h)
{
    for (int i = 0; i < BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

/* The next header block: 1, 0 at the end of the archive (a zero block,
 * then another, or the end of the stream), -1 on error. A stream must end
 * with the end blocks: one cut at a header is truncated, not short. */
static int read_header(TarReader *t, unsigned char *h)
{
    uint64_t at = t->pos;
    long got = read_full(t, h, BLOCK);
    if (got < 0)
        return -1;
    if (got == 0 && at == 0)
        return tar_fail(t, "empty file, not a tar archive");
    if (got == 0)
        return tar_fail(t, "ends at offset %llu without the end-of-archive blocks "
                        "(truncated?)", (ull)at);
    if (got < BLOCK)
        return tar_fail(t, "truncated header at offset %llu (the shard ends after %ld of "
                        "its 512 bytes)", (ull)at, got);
    if (!is_zero(h))
        return check_checksum(t, h, at) ? -1 : 1;
    got = read_full(t, h, BLOCK);
    if (got < 0)
        return -1;
    if (got == BLOCK && !is_zero(h))
        return tar_fail(t, "a lone zero block at offset %llu, then more headers", (ull)at);
    t->done = 1;
    return 0;
}

/* The member whose data is cut short: its header, its data's offset, and
 * where the stream ended. */
static int truncated(TarReader *t, const char *path, uint64_t hdr, uint64_t data_off,
                     uint64_t size, uint64_t end)
{
    return tar_fail(t, "truncated member '%s' (header at offset %llu): %llu bytes of data "
                    "from offset %llu, padded to %llu, but the shard ends at offset %llu",
                    path, (ull)hdr, (ull)size, (ull)data_off, (ull)padded(size), (ull)end);
}

/* Reads the data and padding of a pax or long-name header (h, at offset
 * hdr) into memory: a malloc'd, NUL-terminated buffer, or NULL. */
static char *read_meta(TarReader *t, const unsigned char *h, uint64_t hdr, uint64_t size)
{
    const char *what = h[156] == 'x' ? "pax" : "long-name";
    if (size > MAX_META) {
        tar_fail(t, "%s header at offset %llu is too large (%llu bytes; at most %u)", what,
                 (ull)hdr, (ull)size, MAX_META);
        return NULL;
    }
    char *buf = xmalloc((size_t)size + 1);
    uint64_t at = t->pos;
    long got = read_full(t, buf, (size_t)size);
    int64_t pad = got == (long)size ? skip_bytes(t, padded(size) - size) : 0;
    if (got >= 0 && pad >= 0 && (uint64_t)got + (uint64_t)pad < padded(size)) {
        char name[101];
        memcpy(name, h, 100);
        name[100] = 0;
        truncated(t, name, hdr, at, size, t->pos);
    }
    if (t->done < 0) {
        free(buf);
        return NULL;
    }
    buf[size] = 0;
    return buf;
}

static int bad_pax(TarReader *t, uint64_t at, const char *why)
{
    return tar_fail(t, "malformed pax record at offset %llu: %s", (ull)at, why);
}

/* One pax record "LEN KEY=VALUE\n" at buf[i] (LEN counts the whole record);
 * path= and size= are kept for the next member, other keys ignored.
 * Returns the record's length, or -1. */
static long pax_record(TarReader *t, const char *buf, size_t n, size_t i, uint64_t at)
{
    size_t len = 0, j = i;
    for (; j < n && isdigit((unsigned char)buf[j]) && len <= n; j++)
        len = len * 10 + (size_t)(buf[j] - '0');
    if (j == i || j >= n || buf[j] != ' ')
        return bad_pax(t, at, "its length is not a number followed by a space");
    if (len > n - i || len < j - i + 4)
        return bad_pax(t, at, len > n - i ? "its length runs past the header's end"
                                          : "its length is too short for 'KEY=VALUE\\n'");
    const char *kv = buf + j + 1, *end = buf + i + len - 1;
    const char *eq = memchr(kv, '=', (size_t)(end - kv));
    if (*end != '\n')
        return bad_pax(t, at, "it does not end in a newline");
    if (!eq || eq == kv)
        return bad_pax(t, at, "it is not KEY=VALUE");
    size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
    if (klen == 4 && !memcmp(kv, "path", 4)) {
        free(t->long_path);
        t->long_path = xstrndup(eq + 1, vlen);
    } else if (klen == 4 && !memcmp(kv, "size", 4)) {
        int64_t v = 0;
        size_t k = 0;
        for (; k < vlen && isdigit((unsigned char)eq[1 + k]) && v < INT64_MAX / 10 - 9; k++)
            v = v * 10 + (eq[1 + k] - '0');
        if (k == 0 || k < vlen)
            return bad_pax(t, at, "its size is not a number");
        t->long_size = v;
    }
    return (long)len;
}

/* A pax extended header's records; trailing NULs are allowed. */
static int parse_pax(TarReader *t, const char *buf, size_t n, uint64_t at)
{
    for (size_t i = 0; i < n && buf[i];) {
        long len = pax_record(t, buf, n, i, at + i);
        if (len < 0)
            return -1;
        i += (size_t)len;
    }
    return 0;
}

/* A header's path: its name field, after the prefix field in POSIX ustar
 * (GNU's format keeps other things there). */
static char *header_path(const unsigned char *h)
{
    char name[101], prefix[156];
    memcpy(name, h, 100);
    name[100] = 0;
    memcpy(prefix, h + 345, 155);
    prefix[155] = 0;
    if (memcmp(h + 257, "ustar\0", 6) || !prefix[0])
        return xstrdup(name);
    size_t n = strlen(prefix) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", prefix, name);
    return p;
}

/* Makes path (malloc'd) the current member, its data next in the stream. */
static void set_current(TarReader *t, char *path, uint64_t first, uint64_t size)
{
    free(t->path);
    t->path = path;
    t->cur = (TarMember){path, size, first, t->pos};
    t->left = size;
    t->pad = padded(size) - size;
}

/* Skips what is left of the current member: data and padding. */
static int finish_member(TarReader *t)
{
    uint64_t n = t->left + t->pad;
    int64_t got = n ? skip_bytes(t, n) : 0;
    if (got < 0)
        return -1;
    if ((uint64_t)got < n)
        return truncated(t, t->cur.path, t->cur.hdr_off, t->cur.data_off, t->cur.size, t->pos);
    t->left = t->pad = 0;
    return 0;
}

/* A pax ('x') or GNU long-name ('L') header: it names the next member. */
static int read_long(TarReader *t, const unsigned char *h, uint64_t hdr, uint64_t size)
{
    char *buf = read_meta(t, h, hdr, size);
    if (!buf)
        return -1;
    int rc = 0;
    if (h[156] == 'x') {
        rc = parse_pax(t, buf, (size_t)size, t->pos - padded(size));
    } else {
        free(t->long_path);
        t->long_path = xstrdup(buf);
    }
    free(buf);
    return rc;
}

/* What a header's type flag means: a regular file ('0', '7', and the old
 * '\0' unless its name ends in '/'), a member without data (links,
 * devices, directories, FIFOs: their size field is ignored, as Python's
 * tarfile ignores it), or anything else, whose data is skipped. */
enum { REGULAR, NO_DATA, SKIPPED };

static int member_kind(int type, const char *path)
{
    size_t n = strlen(path);
    if (type == '0' || type == '7' || (type == 0 && !(n && path[n - 1] == '/')))
        return REGULAR;
    return type == 0 || (type >= '1' && type <= '6') ? NO_DATA : SKIPPED;
}

/* tar_next's search: headers from t->pos until a regular file's. Out of
 * line, so that tar_next stays one function in the binary (the compiler
 * would split the search off as a ".part" copy under a second name). */
__attribute__((noinline)) static int next_regular(TarReader *t, TarMember *m)
{
    unsigned char h[BLOCK];
    uint64_t first = t->pos, size;
    int r;
    while ((r = read_header(t, h)) == 1) {
        uint64_t hdr = t->pos - BLOCK;
        char shown[64];
        int type = h[156];
        if (parse_number(h + 124, 12, &size))
            return tar_fail(t, "header at offset %llu: its size field '%s' is not a number",
                            (ull)hdr, show_field(h + 124, 12, shown, sizeof shown));
        if (type == 'x' || type == 'L') {
            if (read_long(t, h, hdr, size))
                return -1;
            continue;
        }
        int meta = type == 'g' || type == 'K'; /* global pax, GNU long link name */
        char *path = meta || !t->long_path ? header_path(h) : t->long_path;
        if (!meta) {
            size = t->long_size >= 0 ? (uint64_t)t->long_size : size;
            t->long_path = NULL; /* path has it now */
            t->long_size = -1;
        }
        int kind = meta ? SKIPPED : member_kind(type, path);
        set_current(t, path, meta ? hdr : first, kind == NO_DATA ? 0 : size);
        if (kind == REGULAR && t->file_size >= 0 &&
            t->pos + padded(size) > (uint64_t)t->file_size)
            return truncated(t, path, first, t->pos, size, (uint64_t)t->file_size);
        if (kind == REGULAR) {
            *m = t->cur;
            return 1;
        }
        if (finish_member(t))
            return -1;
        first = meta ? first : t->pos;
    }
    return r;
}

int tar_next(TarReader *t, TarMember *m)
{
    if (t->done || finish_member(t))
        return t->done > 0 ? 0 : -1;
    return next_regular(t, m);
}

long tar_read(TarReader *t, void *buf, size_t n)
{
    if (t->done < 0)
        return -1;
    if (n > t->left)
        n = (size_t)t->left;
    if (n > (1u << 30))
        n = 1u << 30;
    long got = n ? read_full(t, buf, n) : 0;
    if (got < 0)
        return -1;
    t->left -= (uint64_t)got;
    if ((size_t)got < n)
        return truncated(t, t->cur.path, t->cur.hdr_off, t->cur.data_off, t->cur.size, t->pos);
    return got;
}

void tar_end(TarReader *t)
{
    free(t->path);
    free(t->long_path);
    t->path = t->long_path = NULL;
}

/* ==== WebDataset samples ==== */

int wds_split(const char *path, const char **ext)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base)
        return -1;
    *ext = dot + 1;
    return (int)(dot - path);
}

static int is_text(const char *ext)
{
    return !strcasecmp(ext, "txt") || !strcasecmp(ext, "text");
}

void wds_begin(WdsReader *w, FILE *f, const char *name, uint64_t start)
{
    memset(w, 0, sizeof *w);
    tar_begin(&w->tar, f, name, start);
}

/* The current sample ends: count it if it had no document. */
static void close_sample(WdsReader *w)
{
    if (w->key && !w->key_has_doc)
        w->skipped++;
    free(w->key);
    w->key = NULL;
}

int wds_next(WdsReader *w, WdsDoc *d)
{
    TarMember m;
    int r;
    while ((r = tar_next(&w->tar, &m)) == 1) {
        const char *ext;
        int klen = wds_split(m.path, &ext);
        if (klen < 0)
            continue;
        if (!w->key || strlen(w->key) != (size_t)klen || memcmp(w->key, m.path, (size_t)klen)) {
            close_sample(w);
            w->key = xstrndup(m.path, (size_t)klen);
            w->key_off = m.hdr_off;
            w->key_has_doc = 0;
            w->samples++;
        }
        if (w->key_has_doc || !is_text(ext))
            continue;
        w->key_has_doc = 1;
        w->docs++;
        *d = (WdsDoc){w->key, m.size, m.data_off, w->key_off};
        return 1;
    }
    if (r == 0)
        close_sample(w);
    return r;
}

long wds_read(WdsReader *w, void *buf, size_t n) { return tar_read(&w->tar, buf, n); }

void wds_end(WdsReader *w)
{
    free(w->key);
    w->key = NULL;
    tar_end(&w->tar);
}

/* ==== a corpus ==== */

int data_part_is_shard(const char *part)
{
    size_t n = strlen(part);
    return !strncmp(part, "pipe:", 5) || (n >= 4 && !strcmp(part + n - 4, ".tar"));
}

static int add_word(DataSource *s, const char *w, char *err, size_t elen)
{
    struct stat st;
    if (!strncmp(w, "pipe:", 5) && !w[5])
        return fail(err, elen, "%s: pipe: needs a command", w);
    if (!strncmp(w, "pipe:", 5)) {
        data_list_add(&s->parts, w);
        return 0;
    }
    if (strpbrk(w, "*?["))
        return data_glob(w, &s->parts, err, elen);
    if (stat(w, &st))
        return fail(err, elen, "%s: cannot open data file (%s)", w, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return data_list_dir(w, &s->parts, err, elen);
    data_list_add(&s->parts, w);
    return 0;
}

int data_source_open(DataSource *s, const char *spec, char *err, size_t elen)
{
    DataList words = {0};
    memset(s, 0, sizeof *s);
    int rc = data_expand_braces(spec, &words, err, elen);
    for (int i = 0; !rc && i < words.n; i++)
        rc = add_word(s, words.path[i], err, elen);
    data_list_free(&words);
    if (rc)
        data_source_free(s);
    return rc;
}

void data_source_free(DataSource *s) { data_list_free(&s->parts); }

static int part_fail(DataPart *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    p->state = -1;
    return -1;
}

/* sh -c cmd, its stdout ours. The command starts with no signal blocked,
 * whatever the calling thread blocks (the data loader's thread blocks them
 * all), so that SIGPIPE, ^C and SIGTERM reach it as usual. */
static FILE *start_command(const char *cmd)
{
    sigset_t none, old;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, &old);
    FILE *f = popen(cmd, "r");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return f;
}

int data_part_open(DataPart *p, const char *name, uint64_t start)
{
    struct stat st;
    memset(p, 0, sizeof *p);
    p->name = name;
    p->is_shard = data_part_is_shard(name);
    p->is_pipe = !strncmp(name, "pipe:", 5);
    p->f = p->is_pipe ? start_command(name + 5) : fopen(name, "rb");
    if (!p->f)
        return part_fail(p, "%s: cannot %s (%s)", name,
                         p->is_pipe ? "start the command" : "open data file", strerror(errno));
    if (p->is_shard) {
        wds_begin(&p->w, p->f, name, start);
        return 0;
    }
    if (fstat(fileno(p->f), &st))
        return part_fail(p, "%s: cannot stat (%s)", name, strerror(errno));
    if (start)
        return part_fail(p, "%s: a text file is one document; it cannot resume at offset %llu",
                         name, (ull)start);
    p->size = p->left = (uint64_t)st.st_size;
    return 0;
}

/* The part's end (r 0) or failure (r -1). A pipe's command is waited for
 * then: at the end it must have exited 0 (the rest of its output, such as
 * tar's padding, is read first so that it does not die writing it); after
 * a failure a non-zero exit is the likelier cause and replaces the
 * reader's error, unless it was SIGPIPE, which our closing sent. */
static int finish_part(DataPart *p, int r)
{
    char buf[16384];
    if (r < 0 && p->is_shard)
        snprintf(p->err, sizeof p->err, "%s", p->w.tar.err);
    if (p->is_pipe && p->f) {
        while (r == 0 && fread(buf, 1, sizeof buf, p->f) > 0)
            ;
        int st = pclose(p->f);
        p->f = NULL;
        if (st == -1)
            r = part_fail(p, "%s: cannot wait for the command (%s)", p->name, strerror(errno));
        else if (r < 0 && (WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st) - 128) == SIGPIPE)
            ; /* killed by our closing (a shell reports it as 128 + SIGPIPE) */
        else if (WIFEXITED(st) && WEXITSTATUS(st))
            r = part_fail(p, "%s exited with status %d", p->name, WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
            r = part_fail(p, "%s was killed by signal %d (%s)", p->name, WTERMSIG(st),
                          strsignal(WTERMSIG(st)));
    }
    p->state = r < 0 ? -1 : 1;
    return r;
}

int data_part_next(DataPart *p, WdsDoc *d)
{
    if (p->state)
        return p->state > 0 ? 0 : -1;
    if (!p->is_shard) {
        if (p->yielded)
            return finish_part(p, 0);
        p->yielded = 1;
        *d = (WdsDoc){p->name, p->size, 0, 0};
        return 1;
    }
    int r = wds_next(&p->w, d);
    return r == 1 ? 1 : finish_part(p, r);
}

long data_part_read(DataPart *p, void *buf, size_t n)
{
    if (p->state < 0)
        return -1;
    if (p->is_shard) {
        long r = wds_read(&p->w, buf, n);
        return r < 0 ? finish_part(p, -1) : r;
    }
    if (n > p->left)
        n = (size_t)p->left;
    if (n > (1u << 30))
        n = 1u << 30;
    size_t got = n ? fread(buf, 1, n, p->f) : 0;
    p->left -= got;
    if (got < n)
        return part_fail(p, "%s: %s at offset %llu of %llu bytes", p->name,
                         ferror(p->f) ? "read error" : "the file ended early (did it change?)",
                         (ull)(p->size - p->left), (ull)p->size);
    return (long)got;
}

int data_part_close(DataPart *p)
{
    if (p->f && p->is_pipe)
        pclose(p->f);
    else if (p->f)
        fclose(p->f);
    p->f = NULL;
    if (p->is_shard)
        wds_end(&p->w);
    return p->state < 0 ? -1 : 0;
}

/* ==== writing tar shards ==== */

#define USTAR_MAX_SIZE 077777777777ull /* 11 octal digits: 8 GiB - 1 */

static int write_fail(TarWriter *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return -1;
}

static int put(TarWriter *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return write_fail(w, "%s: cannot write (%s)", w->tmp, strerror(errno));
    w->pos += n;
    return 0;
}

static int put_padding(TarWriter *w, uint64_t size)
{
    static const unsigned char zero[BLOCK];
    return put(w, zero, (size_t)(padded(size) - size));
}

static void put_octal(unsigned char *field, size_t len, uint64_t v)
{
    char tmp[24];
    snprintf(tmp, sizeof tmp, "%0*llo", (int)len - 1, (ull)v);
    memcpy(field, tmp, len - 1);
    field[len - 1] = 0;
}

/* A ustar header: name (at most 100 bytes) under prefix[0..plen) (at most
 * 155), the fields every shard gets alike, and the checksum. */
static void ustar_header(unsigned char *h, const char *prefix, size_t plen, const char *name,
                         size_t nlen, uint64_t size, int type)
{
    memset(h, 0, BLOCK);
    memcpy(h, name, nlen);
    put_octal(h + 100, 8, 0644); /* mode */
    put_octal(h + 108, 8, 0);    /* uid */
    put_octal(h + 116, 8, 0);    /* gid */
    put_octal(h + 124, 12, size);
    put_octal(h + 136, 12, 0);   /* mtime */
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar\0" "00", 8);
    put_octal(h + 329, 8, 0);    /* devmajor */
    put_octal(h + 337, 8, 0);    /* devminor */
    memcpy(h + 345, prefix, plen);
    unsigned sum = 8 * ' '; /* the checksum field counts as spaces */
    for (int i = 0; i < BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

/* Where ustar can hold path: -1 in the name field alone, k >= 0 split at
 * the '/' at path[k] into prefix and name, -2 nowhere (a pax header). */
static long ustar_split(const char *path)
{
    size_t n = strlen(path);
    if (n <= 100)
        return -1;
    for (size_t k = n - 1; k-- > 1;) /* an empty prefix would lose a leading '/' */
        if (path[k] == '/' && k <= 155 && n - k - 1 <= 100)
            return n - k - 1 ? (long)k : -2;
    return -2;
}

static void pax_add(char **buf, size_t *n, const char *key, const char *val)
{
    size_t body = strlen(key) + strlen(val) + 3, len = body + 1;
    char digits[24];
    while (len != body + (size_t)snprintf(digits, sizeof digits, "%zu", len))
        len = body + strlen(digits);
    *buf = xrealloc(*buf, *n + len + 1);
    *n += (size_t)snprintf(*buf + *n, len + 1, "%zu %s=%s\n", len, key, val);
}

/* The pax records path needs ("path=", "size="), or NULL if none. */
static char *pax_for(const char *path, uint64_t size, size_t *n)
{
    char *buf = NULL, num[24];
    *n = 0;
    if (ustar_split(path) == -2)
        pax_add(&buf, n, "path", path);
    if (size > USTAR_MAX_SIZE) {
        snprintf(num, sizeof num, "%llu", (ull)size);
        pax_add(&buf, n, "size", num);
    }
    return buf;
}

uint64_t tar_member_bytes(const char *path, uint64_t size)
{
    size_t n;
    char *pax = pax_for(path, size, &n);
    free(pax);
    return (pax ? BLOCK + padded(n) : 0) + BLOCK + padded(size);
}

static int put_headers(TarWriter *w, const char *path, uint64_t size)
{
    unsigned char h[BLOCK];
    size_t n, len = strlen(path);
    char *pax = pax_for(path, size, &n);
    int rc = 0;
    if (pax) {
        static const char name[] = "././@PaxHeader";
        ustar_header(h, "", 0, name, sizeof name - 1, n, 'x');
        rc = put(w, h, BLOCK) || put(w, pax, n) || put_padding(w, n) ? -1 : 0;
        free(pax);
    }
    long k = ustar_split(path);
    uint64_t field = size > USTAR_MAX_SIZE ? 0 : size;
    if (k >= 0)
        ustar_header(h, path, (size_t)k, path + k + 1, len - (size_t)k - 1, field, '0');
    else
        ustar_header(h, "", 0, path, len < 100 ? len : 100, field, '0');
    return rc || put(w, h, BLOCK) ? -1 : 0;
}

int tar_write_open(TarWriter *w, const char *path)
{
    memset(w, 0, sizeof *w);
    w->path = xstrdup(path);
    w->tmp = tmp_path(path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f)
        return write_fail(w, "%s: cannot create (%s)", w->tmp, strerror(errno));
    return 0;
}

int tar_write_member(TarWriter *w, const char *path, const void *data, uint64_t size)
{
    if (put_headers(w, path, size) || put(w, data, (size_t)size) || put_padding(w, size))
        return -1;
    return 0;
}

int tar_write_file(TarWriter *w, const char *path, FILE *src, const char *src_name,
                   uint64_t size)
{
    if (put_headers(w, path, size))
        return -1;
    char *buf = xmalloc(1 << 16);
    uint64_t done = 0;
    int rc = 0;
    while (!rc && done < size) {
        size_t want = size - done < (1 << 16) ? (size_t)(size - done) : (1 << 16);
        size_t got = fread(buf, 1, want, src);
        if (got < want)
            rc = write_fail(w, "%s: %s after %llu of its %llu bytes", src_name,
                            ferror(src) ? "read error" : "ended early (did it change?)",
                            (ull)(done + got), (ull)size);
        else
            rc = put(w, buf, got);
        done += got;
    }
    free(buf);
    return rc || put_padding(w, size) ? -1 : 0;
}

static void writer_free(TarWriter *w)
{
    free(w->path);
    free(w->tmp);
    w->path = w->tmp = NULL;
    w->f = NULL;
}

int tar_write_close(TarWriter *w)
{
    static const unsigned char end[2 * BLOCK];
    int rc = w->f ? put(w, end, sizeof end) : -1;
    if (!rc && (fflush(w->f) || fsync(fileno(w->f))))
        rc = write_fail(w, "%s: cannot write (%s)", w->tmp, strerror(errno));
    if (w->f && fclose(w->f) && !rc)
        rc = write_fail(w, "%s: cannot write (%s)", w->tmp, strerror(errno));
    w->f = NULL;
    if (!rc && commit_tmp(w->tmp, w->path))
        rc = write_fail(w, "%s: cannot rename to %s (%s)", w->tmp, w->path, strerror(errno));
    if (rc)
        unlink(w->tmp);
    writer_free(w);
    return rc;
}

void tar_write_abort(TarWriter *w)
{
    if (w->f)
        fclose(w->f);
    if (w->tmp)
        unlink(w->tmp);
    writer_free(w);
}
