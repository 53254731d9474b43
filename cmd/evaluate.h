/* cmd/evaluate.h: the eval loss of many windows, in chunks (evaluate.c),
 * so that an eval's memory stays within a training step's. */
#ifndef CMD_EVALUATE_H
#define CMD_EVALUATE_H
#include "gpt.h"

/* The mean loss of b, as batch_loss gives it bit for bit, from forward
 * passes of `chunk` windows at a time (all at once if chunk >= b->B or
 * chunk < 1); after each, tick (may be NULL) hears the windows done. */
typedef void (*eval_tick)(int done, int total, void *ctx);
float eval_loss(Model *m, Graph *g, const Batch *b, int chunk, eval_tick tick, void *ctx);

#endif
