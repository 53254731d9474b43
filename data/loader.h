/* loader.h: training windows streamed from a corpus of many parts (tar
 * shards, pipe:CMD, text files), the WebDataset way, on a thread of its
 * own that runs ahead of the device (PyTorch/XLA's MpDeviceLoader).
 *
 * The corpus is read by S independent streams. Each epoch shuffles the
 * order of the parts with the run's seed; part i of that order belongs to
 * stream i mod S. A stream reads its parts one after another, cuts the
 * concatenated text of their documents into consecutive windows of T
 * bytes, and passes them through a shuffle buffer of K windows: a step
 * takes B/S windows from each stream, each from a random slot of the
 * buffer, which the stream's next window refills. Row r of a step's batch
 * comes from stream r / (B/S), so a host of a pod that trains rows
 * [first*B/S, (first+count)*B/S) reads only its own streams' parts, and the
 * bytes do not depend on how many hosts share the work.
 *
 * Memory stays bounded by S*K*T bytes of buffer, however large the corpus.
 * A stream's whole state (epoch, part, document, offset, partial window,
 * buffer and generator) fits in loader_state_size() bytes, which a
 * checkpoint stores so that a resumed run continues bit for bit, mid-part:
 * the part is re-opened (a pipe re-run and read up to the offset).
 *
 * One text file in memory (the reference's way) goes through the same
 * thread: each step is B windows at random offsets, and its state is the
 * generator alone. */
#ifndef LOADER_H
#define LOADER_H
#include <stddef.h>
#include <stdint.h>
#include "data/data.h"
#include "util/rng.h"

#define LOADER_MAX_STREAMS 64

typedef struct LoaderSpec {
    int T;             /* bytes a window (--seq) */
    int B;             /* windows a step, all hosts together (--batch) */
    int streams;       /* S: a power of two dividing B */
    int first, count;  /* this host's streams: [first, first+count) */
    int buffer;        /* K: the shuffle buffer, windows per stream */
    int vocab;         /* 128: a byte >= 128 is an error; 256: any byte */
    uint64_t seed;     /* the shard order of each epoch, the buffers' draws */
    /* Text in memory instead of parts (the reference's way): each step is
     * B windows, all hosts' (each host keeps its share), starting at
     * offsets in [0, text_len - T) drawn from rng. */
    const unsigned char *text;
    size_t text_len;
    Rng rng;
} LoaderSpec;

/* What a stream has read, for the report. */
typedef struct StreamStats {
    uint64_t epochs;            /* epochs finished */
    uint64_t docs, bytes;       /* in all */
    uint64_t epoch_docs, epoch_bytes; /* in its last finished epoch */
    int parts;                  /* parts an epoch */
} StreamStats;

typedef struct Loader Loader;

/* Bytes of one stream's saved state. */
size_t loader_state_size(const LoaderSpec *spec);

/* Starts the thread. parts are the corpus (kept by the caller); state is
 * NULL to start at the beginning, else count states of loader_state_size
 * bytes, this host's streams' part of a checkpoint. NULL with err on a bad
 * spec or state (errors while reading come from loader_next). */
Loader *loader_start(const LoaderSpec *spec, const DataList *parts, const unsigned char *state,
                     char *err, size_t elen);
/* This host's windows of the next step: [count*B/S][T] bytes (text in
 * memory: all B windows), valid until
 * the next call. Blocks until they are ready; *waited (if not NULL) gets
 * the seconds it blocked. NULL with a one-line err (naming the part and
 * offset) if a stream failed. */
const unsigned char *loader_next(Loader *l, double *waited, char *err, size_t elen);
/* The state of this host's streams after the last loader_next (or at the
 * start): count * loader_state_size bytes into out. */
void loader_state(Loader *l, unsigned char *out);
/* Text in memory: the generator as it was after the last loader_next. */
Rng loader_text_rng(Loader *l);
/* Stream first+i's figures after the last loader_next. */
StreamStats loader_stats(Loader *l, int i);
/* Stops the thread and frees everything. */
void loader_stop(Loader *l);

/* The default number of streams for n parts and batch B: the largest power
 * of two that is at most n, at most 8, and divides B. */
int loader_default_streams(int nparts, int B);

#endif
