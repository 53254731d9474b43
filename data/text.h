/* text.h: text in memory and the windows drawn from it (text.c). */
#ifndef TEXT_H
#define TEXT_H
#include <stddef.h>
#include "data/batch.h"
#include "util/rng.h"

typedef struct Data {
    unsigned char *bytes; /* [n] */
    size_t n, n_train;    /* train is [0, n_train), test the rest */
} Data;

/* Each loads or dies with the reason; need_len: the shortest text that
 * gives a window. split: the reference's 80/20 split, else all training. */
void load_data(Data *d, const char *path, int need_len, int vocab, int split);
void load_corpus(Data *d, const char *spec, int need_len, int vocab); /* all test */
int is_corpus(const char *spec); /* --data names parts, not one file */

/* B random windows of T bytes from d's [lo, lo+len); starts (may be NULL)
 * gets each window's first byte's offset in d, [B]. */
void sample_windows(Batch *b, const Data *d, size_t lo, size_t len, Rng *r, size_t *starts);

#endif
