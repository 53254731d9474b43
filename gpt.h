/* gpt.h: the model (gpt.c): its parameters, forward passes and training
 * step. The model's data (Config, Param, Model) is declared in
 * model/model.h, beside the files gpt.c builds on; the sampler
 * (cmd/sample.h) and the checkpoints (cmd/ckpt.h) use the model from
 * above. */
#ifndef GPT_H
#define GPT_H
#include <stddef.h>
#include <stdint.h>
#include "data/batch.h"
#include "graph.h"
#include "model/model.h"

#define GPT_VERSION "1.0.0"
#define GPT_STR_(x) #x
#define GPT_STR(x) GPT_STR_(x)
#ifdef __clang__ /* the compiler and runtime, for gpt --version */
#define GPT_COMPILER "clang " GPT_STR(__clang_major__) "." GPT_STR(__clang_minor__)
#else
#define GPT_COMPILER "gcc " __VERSION__
#endif
#ifndef GPT_RUNTIME /* make LLVM=1 says "libomp, mimalloc" */
#define GPT_RUNTIME "libgomp"
#endif

/* The MLP's activations by name (--activation): the index of one, or -1
 * if none is called so; the name of index a, or NULL past the last. */
int activation_find(const char *name);
const char *activation_name(int a);

/* Builds the parameter table and draws PyTorch-style initial weights. */
int model_init(Model *m, const Config *c, uint64_t seed);
void model_free(Model *m);
float *model_param(Model *m, const char *name); /* NULL if no such */
/* Replicates core 0's weights and Adam state on n cores (n >= 1). */
void model_set_cores(Model *m, int n);
/* n cores that share core 0's weights and Adam state (a lent board):
 * any core count gives the same bits, so one core's run may lend itself
 * more for a while, and return them with nothing to copy back. */
void model_lend_cores(Model *m, int n);
/* Splits each step's batch into n micro-batches (n >= 1; after
 * model_set_cores): see model_train_step. */
void model_set_accum(Model *m, int n);
/* The forward passes the sampler (cmd/sample.c) records, without
 * gradients. wt: core 0's weights with every Linear weight stored
 * transposed (sample.c's transposed_weights), or NULL. forward_windows:
 * the logits of b's windows, each core its B/cores of them; with last (i32
 * [B/cores], a core's windows' last rows, the same on every core) those
 * rows alone, [B/cores,V] a core, else [B/cores*T,V]. forward_cached: one new byte of
 * each of ns passages, tok[s], all at position pos[0], through the KV
 * caches kc and vc ([layers, ns, context, C] each): logits [ns,V]. */
Tensor *forward_windows(Model *m, Graph *g, const Batch *b, float *wt, int32_t *last);
Tensor *forward_cached(Model *m, Graph *g, int ns, int32_t *tok, int32_t *pos, float *kc,
                       float *vc, float *wt);

/* One forward pass to the mean loss, recorded on g. leaf[i] receives the
 * graph leaf of parameter i; *logits the [B*T, V] logits. */
Tensor *model_loss(Model *m, Graph *g, const Batch *b, Tensor **leaf,
                   Tensor **logits, int with_grad);
/* The mean loss of a batch, without gradients. */
float batch_loss(Model *m, Graph *g, const Batch *b);
/* Forward, backward and Adam update; returns the batch loss before it. On
 * the xla device with m->ncores > 1 the batch is split over the cores: each
 * computes its shard's gradients, an all-reduce averages them, and every
 * replica applies the same update. The weights do not depend on ncores.
 * With m->accum = N > 1, b holds N micro-batches: each core's windows of
 * b, in N consecutive parts, one per forward and backward pass. The
 * weights are those of one step on all of b when N is a power of two. */
float model_train_step(Model *m, Graph *g, const Batch *b, float lr);

#endif
