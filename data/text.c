/* text.c: training and test text in memory: one file (the reference's
 * 80/20 split) or a whole corpus (a test set), and the random windows
 * drawn from it. A corpus trained on is streamed instead (loader.c). */
#include "data/text.h"
#include "data/data.h"
#include "pod/error.h"
#include "util/util.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Under vocab 128 every byte must be ASCII; offset: of p[0] in name. */
static void check_vocab(const unsigned char *p, size_t n, int vocab, const char *name,
                        uint64_t offset)
{
    for (size_t i = 0; vocab < 256 && i < n; i++)
        if (p[i] >= vocab)
            die(1, "%s: byte 0x%02x at offset %llu is not ASCII; convert it (e.g. iconv -f "
                "utf-8 -t ascii//TRANSLIT) or train with --vocab 256", name, p[i],
                (unsigned long long)(offset + i));
}

static void grow(Data *d, size_t *cap, size_t more, const char *name)
{
    while (d->n + more > *cap)
        if (!(d->bytes = realloc(d->bytes, *cap *= 2)))
            die(1, "%s: out of memory", name);
}

/* One text file, whole; split: the reference's 80/20 split, else it is all
 * training text. */
void load_data(Data *d, const char *path, int need_len, int vocab, int split)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(1, "%s: cannot open data file (%s); data/get-data.sh downloads the corpus",
            path, strerror(errno));
    size_t cap = 1 << 20, got;
    d->bytes = xcalloc(cap, 1);
    d->n = 0;
    while ((got = fread(d->bytes + d->n, 1, cap - d->n, f)) > 0) {
        d->n += got;
        if (d->n == cap)
            grow(d, &cap, 1, path);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad)
        die(1, "%s: cannot read data file", path);
    if (!d->n)
        die(1, "%s: data file is empty", path);
    check_vocab(d->bytes, d->n, vocab, path, 0);
    d->n_train = split ? d->n * 8 / 10 : d->n;
    if (!split && d->n < (size_t)need_len + 1)
        die(1, "%s: %zu bytes; training needs at least %d", path, d->n, need_len + 1);
    if (split && (d->n_train < (size_t)need_len + 1 || d->n - d->n_train < (size_t)need_len + 1))
        die(1, "%s: %zu bytes give splits of %zu and %zu; each needs at least %d",
            path, d->n, d->n_train, d->n - d->n_train, need_len + 1);
}

/* Is --data a corpus of parts (read as a stream) rather than one file? */
int is_corpus(const char *spec)
{
    struct stat st;
    return !strncmp(spec, "pipe:", 5) || strpbrk(spec, "{*?[") || data_part_is_shard(spec) ||
           (!stat(spec, &st) && S_ISDIR(st.st_mode));
}

/* A whole corpus in memory, every document of every part one after
 * another (a test set: --test-data); all of it is test text. */
void load_corpus(Data *d, const char *spec, int need_len, int vocab)
{
    char err[1024], buf[65536];
    DataSource src;
    if (data_source_open(&src, spec, err, sizeof err))
        die(1, "%s", err);
    size_t cap = 1 << 20;
    *d = (Data){xcalloc(cap, 1), 0, 0};
    for (int i = 0; i < src.parts.n; i++) {
        DataPart part;
        WdsDoc doc;
        int r;
        if (data_part_open(&part, src.parts.path[i], 0))
            die(1, "%s", part.err);
        while ((r = data_part_next(&part, &doc)) == 1) {
            long got;
            for (uint64_t done = 0; (got = data_part_read(&part, buf, sizeof buf)) > 0;
                 done += (uint64_t)got) {
                char name[4200];
                snprintf(name, sizeof name, "%s%s%s", part.name, part.is_shard ? ": " : "",
                         part.is_shard ? doc.key : "");
                check_vocab((unsigned char *)buf, (size_t)got, vocab, name, doc.data_off + done);
                grow(d, &cap, (size_t)got, spec);
                memcpy(d->bytes + d->n, buf, (size_t)got);
                d->n += (size_t)got;
            }
            if (got < 0)
                r = -1;
            if (r < 0)
                break;
        }
        if (r < 0 || data_part_close(&part))
            die(1, "%s", part.err);
    }
    if (d->n < (size_t)need_len + 1)
        die(1, "%s: %zu bytes of text in %d parts; a test set needs at least %d", spec, d->n,
            src.parts.n, need_len + 1);
    data_source_free(&src);
}

/* B random windows of T bytes from [lo, lo+len), starts uniform in
 * [0, len-T) as in the reference. */
void sample_windows(Batch *b, const Data *d, size_t lo, size_t len, Rng *r, size_t *starts)
{
    for (int i = 0; i < b->B; i++) {
        size_t s = lo + rng_below(r, len - b->T);
        if (starts)
            starts[i] = s;
        for (int t = 0; t < b->T; t++)
            b->tok[(size_t)i * b->T + t] = d->bytes[s + t];
    }
    batch_finish(b);
}
