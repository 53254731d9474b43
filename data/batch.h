/* batch.h: a batch of windows of bytes, the model's input (batch.c). */
#ifndef BATCH_H
#define BATCH_H
#include <stdint.h>

/* Token windows, their positions and next-byte targets. */
typedef struct Batch {
    int B, T;
    int32_t *tok, *pos, *tgt; /* [B*T] each */
    int32_t *row;             /* [B*T] each position's row in the whole batch:
                               * dropout's masks follow the example, not the
                               * core or host that computes it */
} Batch;
void batch_alloc(Batch *b, int B, int T);
void batch_free(Batch *b);
/* Fills pos and tgt from tok (targets of the last position are ignored). */
void batch_finish(Batch *b);

#endif
