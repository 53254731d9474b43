/* compiler/record.h: the graph's insides, shared by the graph layer's
 * three files, top to bottom: graph.c (the builders of one training step,
 * autodiff, the cut), compiler/graph_side.c (the second-read builders:
 * data parallelism, dropout, inference-only attention) and
 * compiler/record.c (tensors, nodes, eager execution, precision). Calls go
 * down only. Nothing else includes it: the rest of the program sees
 * graph.h. */
#ifndef COMPILER_RECORD_H
#define COMPILER_RECORD_H
#include "compiler/compiler.h"

/* A bump arena: chunks reused from one step to the next (g_reset). */
struct chunk {
    struct chunk *next;
    size_t cap, used;
    _Alignas(64) unsigned char mem[];
};

struct arena {
    struct chunk *head, *cur;
};

/* Nodes [begin, end) of the record: one block's forward, which --remat
 * records again in the backward pass instead of keeping its values. */
struct remat_region {
    int begin, end; /* end -1: still open */
};

struct Graph {
    /* the record */
    Node *nodes; /* [cap_nodes] */
    int n_nodes, cap_nodes;
    int n_tensors;
    Tensor **grads; /* [cap_grads] by tensor id */
    int cap_grads;
    struct arena meta, data;
    /* how ops are recorded */
    int seg;  /* rows per example for backward reductions, 0: off */
    int prec; /* enum precision */
    int phase;  /* enum phase of the nodes recorded now */
    int region; /* the open remat region's number (1..), 0: none */
    /* rematerialization: the regions marked, and whether g_backward
     * recomputes them (g_set_remat) */
    struct remat_region *regions; /* [n_regions] in recording order */
    int n_regions, cap_regions;
    int remat;
    /* the device */
    int lazy;  /* record only; cuts compile and run */
    int cores; /* simulated cores a cut runs on */
    struct compiler compiler;
};


/* ---- record.c: the record, below graph.c and graph_side.c ---- */

/* n bytes, 64-byte aligned, until arena_rewind. */
void *arena_alloc(struct arena *a, size_t n);
void arena_rewind(struct arena *a);
void arena_free(struct arena *a);
/* A node for op with the op table's number of inputs, in[0..nin). */
Node *new_node(Graph *g, int op, Tensor *const *in);
/* Adds an output (diff: it may take a gradient). */
Tensor *add_out(Graph *g, Node *n, int dtype, int rows, int cols, int diff);
/* Runs n at once on the eager device; records only on the lazy one. */
void run_if_eager(Graph *g, Node *n);
/* The gradient slot of t: autodiff's (graph.c) and --remat's (remat.c). */
Tensor **grad_slot(Graph *g, const Tensor *t);
void shape_fail(const char *op, const Tensor *a, const Tensor *b);
/* a + b, unrounded. */
Tensor *build_add(Graph *g, Tensor *a, Tensor *b);
/* y as the device stores it: rounded to bf16 under bf16-pure. */
Tensor *as_stored(Graph *g, Tensor *y);
/* A batch reduction's partial sum: kept in fp32 in training. */
Tensor *as_stored_partial(Graph *g, Tensor *y);
/* A matrix-unit operand: rounded to bf16 under --precision bf16. */
Tensor *mxu_operand(Graph *g, Tensor *x);
/* x was made by a bf16 rounding. */
int is_rounded(const Graph *g, const Tensor *x);

#define IN(...) ((Tensor *const[KMAX_IN]){__VA_ARGS__}) /* the rest NULL */

/* ---- graph_side.c: second-read builders, below graph.c ---- */

/* The backward of g_attention_drop node att. */
Tensor *build_attention_drop_bwd(Graph *g, const Node *att, Tensor *dy);

/* ---- remat.c: --remat's recompute, below graph.c ---- */

/* The remat region ending at node i that g_backward is to recompute, or
 * NULL; *r, the region to look at (n_regions - 1 at first), walks down
 * as i does. */
const struct remat_region *remat_region_ending(const Graph *g, int i, int *r);
/* Records region r's forward again and runs rule (autodiff's, for one
 * node) on the recompute, last node first; returns r->begin. */
int remat_backward(Graph *g, const struct remat_region *r, void (*rule)(Graph *, int));

#endif
