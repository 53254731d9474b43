/* loader.c: training windows from a corpus of many parts, on a thread of
 * its own (see loader.h for the scheme). Read top-down: a stream's state,
 * its epochs and parts, cutting windows, the shuffle buffer, then the
 * thread and its queue of ready steps.
 *
 * The thread runs up to two steps ahead of the trainer, so the trainer's
 * checkpoint must not see the streams as they are but as they were after
 * the last step it took. Each step made ahead keeps what undoes it: the
 * streams' positions before it, and which buffer slots it drew, whose old
 * windows are its own rows. loader_state pauses the thread and undoes the
 * steps made ahead on a copy, newest first; this costs a step a few bytes
 * a window, however large the buffer. */
#include "data/loader.h"
#include "util/util.h"
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef unsigned long long ull;

/* ---- a stream ---- */

/* Where a stream is: saved in checkpoints as it is (this machine's byte
 * order), followed by the partial window [T] and the buffer [K][T]. */
struct stream_pos {
    uint64_t magic;    /* STREAM_MAGIC: the layout of this struct */
    uint64_t epoch;    /* the epoch being read, from 0 */
    uint64_t part;     /* index into this stream's parts of the epoch */
    uint64_t in_doc;   /* 1: a document of that part is open */
    uint64_t doc_off;  /* its sample's offset in the part: reopen there */
    uint64_t doc_done; /* its bytes already read */
    uint64_t filled;   /* bytes of the partial window */
    Rng rng;           /* the buffer's draws */
    uint64_t docs, bytes;             /* read in all */
    uint64_t epoch_docs, epoch_bytes; /* read in this epoch so far */
    uint64_t last_docs, last_bytes;   /* in the last finished epoch */
};
#define STREAM_MAGIC 0x67707473747231ull /* "gptstr1" */

struct stream {
    int id;                /* 0..S-1 */
    struct stream_pos pos;
    unsigned char *partial; /* [T] the window being cut */
    unsigned char *buffer;  /* [K][T] the shuffle buffer */
    int *order;             /* [nparts] the part order of order_epoch */
    uint64_t order_epoch;
    DataPart part;          /* the open part, when open */
    WdsDoc doc;             /* its open document, when pos.in_doc */
    int open;
};

struct slot {               /* one step's windows, ready or being made */
    unsigned char *rows;    /* [count][B/S][T]: the windows drawn ([B][T] from text) */
    Rng rng_before;         /* text in memory: the generator before them */
    struct stream_pos *before; /* [count] each stream's position before them */
    unsigned char *partial; /* [count][T] and its partial window */
    uint32_t *drawn;        /* [count][B/S] the buffer slot each row came from */
    int *ndrawn;            /* [count] rows drawn (fewer than B/S if the step failed) */
    int ready, failed;
    char err[1024];
};

#define SLOTS 3 /* one held by the trainer, two made ahead */

struct Loader {
    LoaderSpec spec;
    const DataList *parts;
    struct stream *streams; /* [count] */
    size_t state_size;
    struct slot slot[SLOTS];
    long made, taken;       /* steps made by the thread, handed to the trainer */
    int quit, pause, busy;  /* busy: the thread is making a step */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char err[1024];
};

size_t loader_state_size(const LoaderSpec *spec)
{
    return sizeof(struct stream_pos) + (size_t)spec->T * (1 + (size_t)spec->buffer);
}

int loader_default_streams(int nparts, int B)
{
    int s = 1;
    while (s * 2 <= nparts && s * 2 <= 8 && B % (s * 2) == 0)
        s *= 2;
    return s;
}

static int stream_fail(struct Loader *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->err, sizeof l->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- epochs and parts ---- */

/* The parts this stream reads in an epoch: every S-th of the epoch's order. */
static int parts_per_epoch(const Loader *l, int id)
{
    int n = l->parts->n, S = l->spec.streams;
    return n / S + (id < n % S);
}

/* Part k of stream s in epoch e: the epoch's order is a Fisher-Yates
 * shuffle of all parts drawn from the seed and the epoch alone, so every
 * host of a pod computes the same order. */
static const char *part_name(Loader *l, struct stream *s, uint64_t epoch, uint64_t k)
{
    int n = l->parts->n;
    if (s->order_epoch != epoch) {
        Rng r;
        rng_seed(&r, l->spec.seed, 0x5348415244ull + epoch); /* "SHARD" + epoch */
        for (int i = 0; i < n; i++)
            s->order[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(((unsigned __int128)rng_next(&r) * (uint64_t)(i + 1)) >> 64);
            int t = s->order[i];
            s->order[i] = s->order[j];
            s->order[j] = t;
        }
        s->order_epoch = epoch;
    }
    return l->parts->path[s->order[(size_t)s->id + k * (size_t)l->spec.streams]];
}

/* Opens the stream's current part at its saved document (if any), and
 * skips the bytes of it already read. */
static int open_part(Loader *l, struct stream *s)
{
    struct stream_pos *p = &s->pos;
    const char *name = part_name(l, s, p->epoch, p->part);
    if (data_part_open(&s->part, name, p->in_doc ? p->doc_off : 0))
        return stream_fail(l, "%s", s->part.err);
    s->open = 1;
    if (!p->in_doc)
        return 0;
    int r = data_part_next(&s->part, &s->doc);
    if (r <= 0)
        return stream_fail(l, "%s: cannot resume at offset %llu%s%s", name, (ull)p->doc_off,
                           r < 0 ? ": " : " (the part has changed)", r < 0 ? s->part.err : "");
    char skip[16384];
    for (uint64_t left = p->doc_done; left > 0;) {
        long got = data_part_read(&s->part, skip, left < sizeof skip ? left : sizeof skip);
        if (got <= 0)
            return stream_fail(l, "%s: cannot resume at offset %llu of %s (the part has "
                               "changed)", name, (ull)p->doc_done, s->doc.key);
        left -= (uint64_t)got;
    }
    return 0;
}

/* The current part is read: on to the next, and to the next epoch after
 * the stream's last part. An epoch that yields no text is an error (the
 * stream would loop forever on nothing). */
static int next_part(Loader *l, struct stream *s)
{
    struct stream_pos *p = &s->pos;
    int failed = data_part_close(&s->part);
    s->open = 0;
    if (failed)
        return stream_fail(l, "%s", s->part.err);
    p->in_doc = 0;
    if (++p->part < (uint64_t)parts_per_epoch(l, s->id))
        return 0;
    if (p->epoch_bytes == 0)
        return stream_fail(l, "data stream %d read no text in epoch %llu (%d parts, such as "
                           "%s)", s->id, (ull)p->epoch, parts_per_epoch(l, s->id),
                           part_name(l, s, p->epoch, 0));
    p->last_docs = p->epoch_docs;
    p->last_bytes = p->epoch_bytes;
    p->epoch_docs = p->epoch_bytes = 0;
    p->epoch++;
    p->part = 0;
    return 0;
}

/* ---- cutting windows ---- */

/* Reads into the partial window until it holds T bytes, across documents,
 * parts and epochs. Under vocab 128 every byte must be ASCII. */
static int fill_window(Loader *l, struct stream *s)
{
    struct stream_pos *p = &s->pos;
    size_t T = (size_t)l->spec.T;
    while (p->filled < T) {
        if (!s->open && open_part(l, s))
            return -1;
        if (!p->in_doc) {
            int r = data_part_next(&s->part, &s->doc);
            if (r < 0)
                return stream_fail(l, "%s", s->part.err);
            if (r == 0) {
                if (next_part(l, s))
                    return -1;
                continue;
            }
            p->in_doc = 1;
            p->doc_off = s->doc.sample_off;
            p->doc_done = 0;
            p->docs++;
            p->epoch_docs++;
        }
        unsigned char *dst = s->partial + p->filled;
        long got = data_part_read(&s->part, dst, T - p->filled);
        if (got < 0)
            return stream_fail(l, "%s", s->part.err);
        if (got == 0) {
            p->in_doc = 0;
            continue;
        }
        for (long i = 0; l->spec.vocab < 256 && i < got; i++)
            if (dst[i] >= l->spec.vocab)
                return stream_fail(l, "%s: %s: byte 0x%02x at offset %llu is not ASCII; "
                                   "--vocab 256 trains on any bytes", s->part.name, s->doc.key,
                                   dst[i], (ull)(s->doc.data_off + p->doc_done + (uint64_t)i));
        p->filled += (uint64_t)got;
        p->doc_done += (uint64_t)got;
        p->bytes += (uint64_t)got;
        p->epoch_bytes += (uint64_t)got;
    }
    return 0;
}

/* Cuts the next window into dst[T]. */
static int next_window(Loader *l, struct stream *s, unsigned char *dst)
{
    if (fill_window(l, s))
        return -1;
    memcpy(dst, s->partial, (size_t)l->spec.T);
    s->pos.filled = 0;
    return 0;
}

/* ---- the shuffle buffer ---- */

/* n windows into out[n][T], each from a random slot of the buffer, which
 * the stream's next window refills. */
static int draw_windows(Loader *l, struct stream *s, unsigned char *out, uint32_t *drawn,
                        int n, int *ndrawn)
{
    size_t T = (size_t)l->spec.T, K = (size_t)l->spec.buffer;
    for (int i = 0; i < n; i++) {
        size_t slot = (size_t)(((unsigned __int128)rng_next(&s->pos.rng) * K) >> 64);
        drawn[i] = (uint32_t)slot;
        memcpy(out + (size_t)i * T, s->buffer + slot * T, T);
        *ndrawn = i + 1; /* a failed refill leaves the slot as it was: still undoable */
        if (next_window(l, s, s->buffer + slot * T))
            return -1;
    }
    return 0;
}

/* ---- saving and restoring a stream ---- */

static void save_stream(const Loader *l, const struct stream *s, unsigned char *out)
{
    size_t T = (size_t)l->spec.T;
    memcpy(out, &s->pos, sizeof s->pos);
    memcpy(out + sizeof s->pos, s->partial, T);
    memcpy(out + sizeof s->pos + T, s->buffer, T * (size_t)l->spec.buffer);
}

static StreamStats stream_stats(const Loader *l, const struct stream *s)
{
    const struct stream_pos *p = &s->pos;
    return (StreamStats){p->epoch, p->docs, p->bytes, p->last_docs, p->last_bytes,
                         parts_per_epoch(l, s->id)};
}

/* A new stream fills its buffer; a resumed one takes its saved state and
 * re-opens its part where it was. */
static int start_stream(Loader *l, struct stream *s, const unsigned char *saved)
{
    size_t T = (size_t)l->spec.T, K = (size_t)l->spec.buffer;
    if (saved) {
        memcpy(&s->pos, saved, sizeof s->pos);
        if (s->pos.magic != STREAM_MAGIC || s->pos.filled >= T ||
            s->pos.part >= (uint64_t)parts_per_epoch(l, s->id))
            return stream_fail(l, "data stream %d: the checkpoint's loader state does not fit "
                               "this corpus", s->id);
        memcpy(s->partial, saved + sizeof s->pos, T);
        memcpy(s->buffer, saved + sizeof s->pos + T, T * K);
        return s->pos.in_doc ? open_part(l, s) : 0;
    }
    s->pos = (struct stream_pos){.magic = STREAM_MAGIC};
    rng_seed(&s->pos.rng, l->spec.seed, 0x4255464645ull + (uint64_t)s->id); /* "BUFFE" */
    for (size_t k = 0; k < K; k++)
        if (next_window(l, s, s->buffer + k * T))
            return -1;
    return 0;
}

/* ---- the thread: steps made ahead ---- */

/* Text in memory: B windows at offsets uniform in [0, len - T), drawn by
 * multiply-shift as text.c's sample_windows draws them. */
static void draw_from_text(Loader *l, struct slot *sl)
{
    size_t T = (size_t)l->spec.T, range = l->spec.text_len - T;
    sl->rng_before = l->spec.rng;
    for (int i = 0; i < l->spec.B; i++) {
        size_t at = (size_t)(((unsigned __int128)rng_next(&l->spec.rng) * range) >> 64);
        memcpy(sl->rows + (size_t)i * T, l->spec.text + at, T);
    }
}

static void make_step(Loader *l, struct slot *sl)
{
    const LoaderSpec *sp = &l->spec;
    int per = sp->B / sp->streams;
    size_t T = (size_t)sp->T;
    if (sp->text) {
        draw_from_text(l, sl);
        return;
    }
    for (int i = 0; i < sp->count; i++) { /* all of it first: a failing step stays undoable */
        sl->before[i] = l->streams[i].pos;
        memcpy(sl->partial + (size_t)i * T, l->streams[i].partial, T);
        sl->ndrawn[i] = 0;
    }
    for (int i = 0; i < sp->count; i++) {
        if (draw_windows(l, &l->streams[i], sl->rows + (size_t)i * per * T,
                         sl->drawn + (size_t)i * per, per, &sl->ndrawn[i])) {
            sl->failed = 1;
            memcpy(sl->err, l->err, sizeof sl->err);
            return;
        }
    }
}

static void *loader_main(void *arg)
{
    Loader *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        /* the trainer holds slot (taken-1) % SLOTS until its next call */
        while (!l->quit && (l->pause || l->made - l->taken >= SLOTS - 1))
            pthread_cond_wait(&l->cv, &l->mu);
        int quit = l->quit;
        struct slot *sl = &l->slot[l->made % SLOTS];
        l->busy = !quit;
        pthread_mutex_unlock(&l->mu);
        if (quit)
            return NULL;
        make_step(l, sl);
        pthread_mutex_lock(&l->mu);
        sl->ready = 1;
        l->made++;
        l->busy = 0;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        if (sl->failed)
            return NULL;
    }
}

const unsigned char *loader_next(Loader *l, double *waited, char *err, size_t elen)
{
    double t0 = now_seconds();
    pthread_mutex_lock(&l->mu);
    if (l->taken > 0) /* the previous step's slot is free again */
        l->slot[(l->taken - 1) % SLOTS].ready = 0;
    struct slot *sl = &l->slot[l->taken % SLOTS];
    while (!sl->ready) /* the thread is making it, so it needs no wake-up */
        pthread_cond_wait(&l->cv, &l->mu);
    l->taken++;
    pthread_mutex_unlock(&l->mu);
    if (waited)
        *waited = now_seconds() - t0;
    /* now the thread may make the next step; woken only after the clock
     * stopped, since on a busy machine the wake-up may run it in our place */
    pthread_cond_broadcast(&l->cv);
    if (sl->failed) {
        snprintf(err, elen, "%s", sl->err);
        return NULL;
    }
    return sl->rows;
}

/* Runs fn with the thread idle between steps. */
static void paused(Loader *l, void (*fn)(Loader *l, void *arg), void *arg)
{
    pthread_mutex_lock(&l->mu);
    l->pause = 1;
    while (l->busy)
        pthread_cond_wait(&l->cv, &l->mu);
    fn(l, arg);
    l->pause = 0;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* The streams as the trainer has seen them: the live streams with the
 * steps made ahead undone, newest first. */
static void state_as_taken(Loader *l, void *arg)
{
    unsigned char *out = arg;
    size_t T = (size_t)l->spec.T;
    int per = l->spec.B / l->spec.streams;
    for (int i = 0; i < l->spec.count; i++) {
        unsigned char *st = out + (size_t)i * l->state_size;
        save_stream(l, &l->streams[i], st);
        unsigned char *buffer = st + sizeof(struct stream_pos) + T;
        for (long k = l->made - 1; k >= l->taken; k--) {
            const struct slot *sl = &l->slot[k % SLOTS];
            for (int j = sl->ndrawn[i] - 1; j >= 0; j--) /* the old windows are its rows */
                memcpy(buffer + (size_t)sl->drawn[(size_t)i * per + j] * T,
                       sl->rows + ((size_t)i * per + (size_t)j) * T, T);
            memcpy(st, &sl->before[i], sizeof sl->before[i]);
            memcpy(st + sizeof(struct stream_pos), sl->partial + (size_t)i * T, T);
        }
    }
}

void loader_state(Loader *l, unsigned char *out)
{
    paused(l, state_as_taken, out);
}

struct stats_arg {
    int i;
    StreamStats st;
};

static void stats_as_taken(Loader *l, void *arg)
{
    struct stats_arg *a = arg;
    struct stream s = l->streams[a->i];
    if (l->made > l->taken)
        s.pos = l->slot[l->taken % SLOTS].before[a->i];
    a->st = stream_stats(l, &s);
}

static void rng_as_taken(Loader *l, void *arg)
{
    *(Rng *)arg = l->made > l->taken ? l->slot[l->taken % SLOTS].rng_before : l->spec.rng;
}

Rng loader_text_rng(Loader *l)
{
    Rng r;
    paused(l, rng_as_taken, &r);
    return r;
}

StreamStats loader_stats(Loader *l, int i)
{
    struct stats_arg a = {i, {0}};
    paused(l, stats_as_taken, &a);
    return a.st;
}

/* ---- starting and stopping ---- */

static void free_all(Loader *l)
{
    for (int i = 0; !l->spec.text && i < l->spec.count; i++) {
        struct stream *s = &l->streams[i];
        if (s->open)
            data_part_close(&s->part);
        free(s->partial);
        free(s->buffer);
        free(s->order);
    }
    for (int i = 0; i < SLOTS; i++) {
        free(l->slot[i].rows);
        free(l->slot[i].before);
        free(l->slot[i].partial);
        free(l->slot[i].drawn);
        free(l->slot[i].ndrawn);
    }
    free(l->streams);
    free(l);
}

Loader *loader_start(const LoaderSpec *spec, const DataList *parts, const unsigned char *state,
                     char *err, size_t elen)
{
    Loader *l = xcalloc(1, sizeof *l);
    l->spec = *spec;
    l->parts = parts;
    l->state_size = loader_state_size(spec);
    size_t T = (size_t)spec->T, K = (size_t)spec->buffer, rows = spec->text ? (size_t)spec->B
               : (size_t)spec->count * (size_t)(spec->B / spec->streams);
    l->streams = xcalloc((size_t)spec->count, sizeof *l->streams);
    for (int i = 0; i < SLOTS; i++) {
        l->slot[i].rows = xcalloc(rows, T);
        l->slot[i].before = xcalloc((size_t)spec->count, sizeof(struct stream_pos));
        l->slot[i].partial = xcalloc((size_t)spec->count, T);
        l->slot[i].drawn = xcalloc(rows, sizeof(uint32_t));
        l->slot[i].ndrawn = xcalloc((size_t)spec->count, sizeof(int));
    }
    for (int i = 0; !spec->text && i < spec->count; i++) {
        struct stream *s = &l->streams[i];
        s->id = spec->first + i;
        s->partial = xcalloc(T, 1);
        s->buffer = xcalloc(K, T);
        s->order = xcalloc((size_t)parts->n, sizeof(int));
        s->order_epoch = UINT64_MAX;
        if (start_stream(l, s, state ? state + (size_t)i * l->state_size : NULL)) {
            snprintf(err, elen, "%s", l->err);
            free_all(l);
            return NULL;
        }
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    /* signals belong to the trainer (a stop ends in a checkpoint): the
     * thread blocks them, and a read on it is never interrupted */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&l->thread, NULL, loader_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        snprintf(err, elen, "cannot start the data loader thread (%s)", strerror(rc));
        free_all(l);
        return NULL;
    }
    return l;
}

void loader_stop(Loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->quit = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free_all(l);
}
