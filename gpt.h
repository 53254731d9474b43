/* gpt.h: the model (gpt.c): its parameters and training step, its sampler
 * (model/sample.c), replicas (model/replicas.c) and checkpoints
 * (model/ckpt.c, in the format of safetensors.h). */
#ifndef GPT_H
#define GPT_H
#include <stddef.h>
#include <stdint.h>
#include "data/batch.h"
#include "graph.h"
#include "safetensors/safetensors.h"
#include "util/rng.h"

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
#define VOCAB 128     /* ASCII: the reference */
#define MAX_VOCAB 256 /* --vocab 256: any byte */
#define MAX_LAYERS 64
#define MAX_PARAMS (4 + 9 * MAX_LAYERS + 4) /* 2 embeddings, 9 per block, 4 in the head; 2 spare */

typedef struct Config {
    int vocab, context, embed, mlp, heads, layers;
    /* the reference's homework; zero is the reference */
    int no_mlp;        /* attention-only blocks: no layer_norms.1, no MLP */
    int residual_once; /* x = block(x), not the reference's x + block(x) */
    float dropout;     /* training only: attention probabilities, attention
                        * output, MLP output (nanoGPT's places) */
    int activation;    /* the MLP's, by its index in gpt.c's table (0: ReLU) */
} Config;

/* The MLP's activations by name (--activation): the index of one, or -1
 * if none is called so; the name of index a, or NULL past the last. */
int activation_find(const char *name);
const char *activation_name(int a);

typedef struct Param {
    char name[96];
    int ndim, rows, cols; /* ndim 1: a vector of cols */
    size_t off;           /* into Model.w, .m, .v */
    float fan_in;         /* init bound is 1/sqrt(fan_in); 0 = LayerNorm */
    int is_ln_weight;
    int matmul_t;         /* a Linear weight the forward multiplies by as x W^T */
    size_t leaf;          /* where gpt.c puts its graph leaf: an offset in
                           * struct model_leaves */
} Param;

typedef struct Model {
    Config cfg;
    int np;
    Param p[MAX_PARAMS];
    size_t nw;          /* total parameter count */
    float *w, *m, *v;   /* [nw] weights and Adam moments, one block each */
    int32_t t;          /* Adam step count */
    float lr;           /* the recorded step's rate: its graph leaf reads it here */
    uint64_t seed;      /* the run's seed, from model_init: dropout's keys */
    int32_t drop_key[2]; /* the recorded step's dropout key (its leaf reads it) */
    int ncores;         /* simulated cores holding a replica (w, m, v: core 0's) */
    float *rep;         /* [ncores-1][REPLICA_BLOCKS][nw]: the other cores' w, m, v */
    int accum;          /* micro-batches a step (--grad-accum), 1: none */
    float *acc;         /* [levels][ncores][nw+1] their partial sums of gradients
                         * and loss, on the device between micro-batches */
} Model;

/* Builds the parameter table and draws PyTorch-style initial weights. */
int model_init(Model *m, const Config *c, uint64_t seed);
void model_free(Model *m);
float *model_param(Model *m, const char *name); /* NULL if no such */
/* Replicates core 0's weights and Adam state on n cores (n >= 1). */
void model_set_cores(Model *m, int n);
/* Splits each step's batch into n micro-batches (n >= 1; after
 * model_set_cores): see model_train_step. */
void model_set_accum(Model *m, int n);
/* Core c's weights, Adam m or v (which: enum replica_block): [nw]. */
enum replica_block { REPLICA_W = 0, REPLICA_M = 1, REPLICA_V = 2, REPLICA_BLOCKS = 3 };
float *model_replica(const Model *m, int core, int which);

/* One forward pass to the mean loss, recorded on g. leaf[i] receives the
 * graph leaf of parameter i; *logits the [B*T, V] logits. */
Tensor *model_loss(Model *m, Graph *g, const Batch *b, Tensor **leaf,
                   Tensor **logits, int with_grad);
/* The mean loss of a batch, without gradients. */
float batch_loss(Model *m, Graph *g, const Batch *b);
/* The mean loss of b, as batch_loss gives it bit for bit, from forward
 * passes of `chunk` windows at a time (all at once if chunk >= b->B or
 * chunk < 1); after each, tick (may be NULL) hears the windows done. */
typedef void (*eval_tick)(int done, int total, void *ctx);
float eval_loss(Model *m, Graph *g, const Batch *b, int chunk, eval_tick tick, void *ctx);
/* Forward, backward and Adam update; returns the batch loss before it. On
 * the xla device with m->ncores > 1 the batch is split over the cores: each
 * computes its shard's gradients, an all-reduce averages them, and every
 * replica applies the same update. The weights do not depend on ncores.
 * With m->accum = N > 1, b holds N micro-batches: each core's windows of
 * b, in N consecutive parts, one per forward and backward pass. The
 * weights are those of one step on all of b when N is a power of two. */
float model_train_step(Model *m, Graph *g, const Batch *b, float lr);

/* Sampling with a KV cache; each new byte is handed to emit (may be NULL).
 * text must hold total bytes; it starts with the prompt of n bytes.
 * temperature 0 is greedy; top_k 0 keeps all. */
typedef struct SampleOpts {
    float temperature;
    int top_k;
    void (*emit)(int byte, void *ctx);
    void *ctx;
} SampleOpts;
void model_generate(Model *m, Graph *g, char *text, int n, int total,
                    const SampleOpts *o, Rng *r);
/* One byte drawn from one row of V logits: temperature 0 is the argmax
 * (the first of equal largest), else a draw from softmax(logits / T) over
 * the top_k largest; logits tied with the k-th largest are kept too, as
 * nanoGPT's `logits < v[-1]` keeps them. Public for tests/test_numbers.c,
 * which holds both to softmax computed on its own. */
int sample_byte(const float *logits, int V, const SampleOpts *o, Rng *r);
/* The weights sample_byte draws from (temperature > 0): p[i] =
 * exp((logits[i] - max) / T) for a kept logit, 0 for a dropped one;
 * returns their sum. */
double sample_weights(const float *logits, int V, const SampleOpts *o, double *p);
/* ns passages of the same prompt at once, text[s] and r[s] passage s's
 * (text[s][0..n) the prompt); one forward pass per byte serves them all.
 * o->emit, if set, streams passage 0. Passage s's bytes do not depend on
 * ns: model_generate(text[0], r[0]) writes passage 0's. */
void model_generate_many(Model *m, Graph *g, char *const *text, int ns, int n, int total,
                         const SampleOpts *o, Rng *r);
/* The reference's way: every byte re-reads the whole (growing) text, so on
 * the xla device every new length is a new graph shape. */
void model_generate_naive(Model *m, Graph *g, char *text, int n, int total,
                          const SampleOpts *o, Rng *r);

/* Checkpoints (model/ckpt.c): the reference's state_dict names plus _gpt.* training state. */
int ckpt_save(const Model *m, const char *path, const char *const *mkey,
              const char *const *mval, int nmeta, char *err, size_t elen);
/* The config a file describes (metadata, else tensor shapes; heads then
 * comes from the argument). Returns 0, or -1 if it describes none. */
int ckpt_config(const StFile *f, Config *c, int heads);
/* Loads weights (and, when with_state, Adam state) for m's config. */
/* The model's tensors (weights, buffers, Adam state) into a writer, for a
 * caller that adds tensors of its own (train.c's data loader state). */
void ckpt_put(StWriter *w, const Model *m);
int ckpt_load_weights(Model *m, const StFile *f, int with_state, char *err, size_t elen);

#endif
