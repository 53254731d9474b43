/* batch.c: batches of windows of bytes (batch.h). */
#include "data/batch.h"
#include "util/util.h"
#include <stdlib.h>
#include <string.h>

/* Batches: B windows of T token bytes, their positions and targets. */
void batch_alloc(Batch *b, int B, int T)
{
    b->B = B;
    b->T = T;
    b->tok = xcalloc((size_t)B * T, sizeof(int32_t));
    b->pos = xcalloc((size_t)B * T, sizeof(int32_t));
    b->tgt = xcalloc((size_t)B * T, sizeof(int32_t));
    b->row = xcalloc((size_t)B * T, sizeof(int32_t));
    for (size_t k = 0; k < (size_t)B * T; k++) /* fixed: a host's share keeps its rows' */
        b->row[k] = (int32_t)k;
}

void batch_free(Batch *b)
{
    free(b->tok);
    free(b->pos);
    free(b->tgt);
    free(b->row);
    memset(b, 0, sizeof *b);
}

void batch_finish(Batch *b)
{
    for (int i = 0; i < b->B; i++) {
        for (int t = 0; t < b->T; t++) {
            size_t k = (size_t)i * b->T + t;
            b->pos[k] = t;
            b->tgt[k] = t + 1 < b->T ? b->tok[k + 1] : -1;
        }
    }
}
