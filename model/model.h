/* model/model.h: the model's data, and the rooms gpt.c builds on, read
 * second: the per-core replicas of data parallelism (replicas.c) and
 * gradient accumulation's micro-batches (accum.c). The model's data is
 * declared here, below gpt.c, because these rooms read it too; gpt.h
 * includes this for the layers above. */
#ifndef MODEL_H
#define MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "data/batch.h"
#include "graph.h"

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
    int shard_optimizer; /* --shard-optimizer: model_set_cores splits m and v */
    int shards;         /* the pod's cores the moments are split over (1: none) */
    size_t mlen;        /* floats in each core's m and v: nw, or the largest shard */
    float *rep;         /* [ncores-1][nw + 2 mlen]: the other cores' w, m, v */
    int lent;           /* a lent board: every core reads and writes core 0's w, m, v */
    int accum;          /* micro-batches a step (--grad-accum), 1: none */
    float *acc;         /* [levels][ncores][nw+1] their partial sums of gradients
                         * and loss, on the device between micro-batches */
} Model;

/* Core c's weights [nw], Adam m or v [mlen] (which: enum replica_block). */
enum replica_block { REPLICA_W = 0, REPLICA_M = 1, REPLICA_V = 2, REPLICA_BLOCKS = 3 };
float *model_replica(const Model *m, int core, int which);

/* replicas.c: leaves with a buffer on every core. A leaf of buffers the
 * cores hold each their own of: core c's is base[c] advanced by off
 * elements (of 4 bytes). */
Tensor *per_core_leaf(Graph *g, int kind, int dtype, void *const *base, size_t off,
                      int rows, int cols);
/* Every core's block `which` (enum replica_block) into base[]. */
void replica_bases(const Model *m, const Graph *g, int which, void **base);
/* Parameter p's Adam moment (REPLICA_M or REPLICA_V) on every core. */
Tensor *moment_leaf(const Model *m, Graph *g, int which, const Param *p);
/* --shard-optimizer (ZeRO-1; replicas.c says how the moments are split).
 * The flat layout's length: every parameter, then the loss. */
long shard_total(const Model *m);
/* Splits core 0's whole m and v over the pod's m->shards ordinals, each
 * core keeping its own shard alone (m->m, m->v become core 0's). */
void shard_moments(Model *m);
/* Every core's and host's shards into mm and vv [nw], on every host: a
 * collective, every process calls it. */
void model_full_moments(const Model *m, float *mm, float *vv);
/* Puts the moments back whole on core 0 (a collective). */
void unshard_moments(Model *m);
/* n cores' replicas of core 0's weights and Adam state, or of the weights
 * and each core's shard of the state (--shard-optimizer); lent: n cores
 * that share core 0's, with no replicas (model_lend_cores). */
void alloc_replicas(Model *m, int n, int lent);
/* The mean over every replica (each core of each process) of x,
 * parameter i's gradient summed over micro micro-batches (i = np: the
 * loss): the step's all-reduce, or under --shard-optimizer its
 * reduce-scatter (each core gets its shard of the mean). */
Tensor *mean_over_replicas(Model *m, Graph *g, Tensor *x, int i, int micro);
/* For a sharded model (m->shards > 1): records Adam on each core's shard
 * of every parameter. */
void adam_shards(Model *m, Graph *g, Tensor **leaf, Tensor **grad, Tensor *t, Tensor *rate);
/* For a sharded model: the all-gather of the updated weights and the loss. */
void gather_shards(Model *m, Graph *g, Tensor **leaf, Tensor *loss);
/* Each core's slice of a batch column (tok, pos, tgt or row): its B/cores
 * windows ("shard" is kept for the optimizer state's, --shard-optimizer). */
Tensor *batch_slice_leaf(Graph *g, const Batch *b, int32_t *col);

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

/* eager_board.c: the eager device's step on a lent board of m->ncores,
 * each core's pass (gpt.c's forward and backward on its windows) a unit
 * of the redo team on a graph of its own. Gradients sets sum[0..np] on g
 * to the cores' gradients and losses added in gradient accumulation's
 * tree, reading won[0..ncores), the winning passes; release gives them
 * back once the step has read them. */
typedef void (*CorePass)(Model *m, Graph *g, const Batch *mb, Tensor **leaf, Tensor **sum);
struct core_pass;
void eager_board_gradients(Model *m, Graph *g, const Batch *b, CorePass pass, Tensor **sum,
                           struct core_pass **won);
void eager_board_release(struct core_pass **won, int n);

#endif
