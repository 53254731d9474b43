/* cmd/evaluate.c: the eval loss of many windows, in chunks. One forward
 * pass over an eval batch of many windows holds every window's
 * activations at once (gigabytes at GPT-2's shape). So the windows go
 * through the model `chunk` at a time, every chunk of one shape (the last
 * padded with copies of a real window), so the lazy device compiles one
 * program and reuses it. Each chunk's logits are kept; one xent over all
 * of them then gives the loss with the bits of the single pass: a row's
 * logits do not depend on the other rows in its pass, and xent sums its
 * rows' losses in row order (kernels/base.c mean_loss), which partial
 * sums per chunk would reorder. */
#include "cmd/evaluate.h"
#include "util/util.h"
#include <stdlib.h>
#include <string.h>

/* Windows [w0, w0 + c->B) of b into c; past b's end, copies of its last. */
static void eval_chunk(Batch *c, const Batch *b, int w0)
{
    size_t T = (size_t)b->T;
    for (int i = 0; i < c->B; i++) {
        size_t from = (size_t)(w0 + i < b->B ? w0 + i : b->B - 1) * T, to = (size_t)i * T;
        memcpy(c->tok + to, b->tok + from, T * sizeof(int32_t));
        memcpy(c->pos + to, b->pos + from, T * sizeof(int32_t));
        memcpy(c->tgt + to, b->tgt + from, T * sizeof(int32_t));
        memcpy(c->row + to, b->row + from, T * sizeof(int32_t));
    }
}

float eval_loss(Model *m, Graph *g, const Batch *b, int chunk, eval_tick tick, void *ctx)
{
    if (chunk < 1 || chunk >= b->B)
        return batch_loss(m, g, b);
    size_t V = (size_t)m->cfg.vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)b->B * (size_t)b->T * V);
    Batch c;
    batch_alloc(&c, chunk, b->T);
    for (int w0 = 0; w0 < b->B; w0 += chunk) {
        int real = b->B - w0 < chunk ? b->B - w0 : chunk;
        eval_chunk(&c, b, w0);
        g_reset(g);
        const float *lg = g_read(g, forward_windows(m, g, &c, NULL, NULL)); /* [rows,V] */
        memcpy(logits + (size_t)w0 * (size_t)b->T * V, lg,
               sizeof(float) * (size_t)real * (size_t)b->T * V);
        if (tick)
            tick(w0 + real, b->B, ctx);
    }
    batch_free(&c);
    g_reset(g);
    Tensor *all = g_leaf(g, TK_INPUT, DT_F32, logits, b->B * b->T, (int)V);
    float loss = *(const float *)g_read(g, g_xent(g, all, shard_leaf(g, b, b->tgt)));
    free(logits);
    return loss;
}
