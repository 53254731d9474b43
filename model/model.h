/* model.h: the model layer's own interface, between gpt.c and its rooms
 * read second in model/ (the layers above use gpt.h alone). */
#ifndef MODEL_H
#define MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "gpt.h"

/* replicas.c: leaves with a buffer on every core. A leaf of buffers the
 * cores hold each their own of: core c's is base[c] advanced by off
 * elements (of 4 bytes). */
Tensor *per_core_leaf(Graph *g, int kind, int dtype, void *const *base, size_t off,
                      int rows, int cols);
/* Every core's block `which` (enum replica_block) into base[]. */
void replica_bases(const Model *m, const Graph *g, int which, void **base);
/* Parameter p's Adam moment (REPLICA_M or REPLICA_V) on every core. */
Tensor *moment_leaf(const Model *m, Graph *g, int which, const Param *p);
/* Each core's shard of a batch column (tok, pos, tgt or row): its B/cores
 * windows. */
Tensor *shard_leaf(Graph *g, const Batch *b, int32_t *col);

/* gpt.c: the forward passes the sampler (sample.c) records, without
 * gradients. wt: core 0's weights with every Linear weight stored
 * transposed (sample.c's transposed_weights), or NULL. forward_windows:
 * the logits of b's windows; with last (i32 [B], each window's last row)
 * those rows alone, [B,V], else [B*T,V]. forward_cached: one new byte of
 * each of ns passages, tok[s], all at position pos[0], through the KV
 * caches kc and vc ([layers, ns, context, C] each): logits [ns,V]. */
Tensor *forward_windows(Model *m, Graph *g, const Batch *b, float *wt, int32_t *last);
Tensor *forward_cached(Model *m, Graph *g, int ns, int32_t *tok, int32_t *pos, float *kc,
                       float *vc, float *wt);

/* accum.c: gradient accumulation's micro-batches and partial sums. */
int micro_batches(const Model *m); /* 1 unless model_set_accum() said more */
/* The partial sums' buffer, a level of them per bit of N - 1, per core. */
void alloc_accum(Model *m);
/* Micro-batch k of n from b: each core's k-th part of its windows. */
void micro_batch(Batch *mb, const Batch *b, int k, int n, int cores);
/* Adds the partial sums of k's set bits from level j up (the trailing ones,
 * or all with to_top) into sum[0..np]; returns the first level left. */
int add_levels(Model *m, Graph *g, Tensor **sum, int k, int j, int to_top);
void store_partial_sums(Model *m, Graph *g, Tensor **sum, int k);

#endif
