/* compiler/node.h: the recorded graph's values and ops, level 1 of an
 * instruction's four (graph.c's head comment): Tensor, a recorded value;
 * Node, a recorded op; the graph's handle; and the leaves, tensors whose
 * buffers the caller owns (record.c). The compiler reads Nodes, so they
 * are declared here, below graph.c; graph.h includes this for the model. */
#ifndef COMPILER_NODE_H
#define COMPILER_NODE_H
#include <stdint.h>
#include "xla_sim.h"

enum dtype { DT_F32, DT_I32 };
enum tkind {
    TK_TEMP,  /* produced by a node, lives until g_reset */
    TK_PARAM, /* caller-owned weights: leaves that take gradients */
    TK_INPUT, /* caller-owned data: tokens, positions, targets */
    TK_STATE, /* caller-owned buffers a node updates in place */
};

typedef struct Tensor {
    int id;
    int dtype, kind;
    int rows, cols; /* every tensor is a matrix; a vector has rows = 1 */
    long numel;
    void *data;        /* [rows,cols] of dtype; core 0's when replicated */
    void **rep;        /* [cores] each core's buffer, or NULL: one for all */
    int node;          /* index of the producing node, -1 for a leaf */
    int requires_grad; /* a gradient must flow back into it */
} Tensor;

/* A recorded op (level 1 of an instruction's four, see graph.c). */
typedef struct Node {
    int op; /* enum kop */
    union kattr attr; /* its named attributes (xla_sim.h) */
    int nin, nout;
    Tensor *in[KMAX_IN];
    Tensor *out[KMAX_OUT];
    int done; /* lazy mode: already executed by an earlier cut */
    int region; /* the remat region (a block) it was recorded in, 1..; 0: none */
    int phase;  /* enum phase: when it was recorded */
} Node;

/* When a node was recorded: the forward pass, the backward pass, or, in
 * the backward pass, a region's forward recorded again (--remat). A
 * recomputed node is a barrier to CSE: merged with its forward original
 * it would keep the forward's activations alive after all. */
enum phase { PHASE_FORWARD, PHASE_BACKWARD, PHASE_RECOMPUTE };

typedef struct Graph Graph;

Tensor *g_leaf(Graph *g, int kind, int dtype, void *data, int rows, int cols);
Tensor *g_param(Graph *g, float *data, int rows, int cols);

#endif
