/* compiler.h: what the lazy compiler's files share. compile.c is the
 * driver (read it first): at a cut (graph.c's run_pending) it runs the
 * stages in order, each a function of its own file, and no stage calls the
 * driver or a later stage:
 *
 *   trace.c   trace_build: the pending work, as a trace of struct tnode
 *   cache.c   key_build, cache_lookup: a hit ends the cut's compiling
 *   fuse.c    the passes, in the driver's table (cse, dce, the fusions)
 *   plan.c    plan_memory: each value's arena offset
 *   lower.c   lower: the program of places (struct pinstr)
 *   cache.c   cache_insert
 *
 * Side rooms: dump.c (the trace and program as text or DOT,
 * GPT_SAVE_GRAPHS), explain.c (GPT_XLA_DEBUG's explanations).
 *
 * One instruction at four levels (see graph.c's head comment): Node,
 * struct tnode (here), struct pinstr and struct kinstr (xla_sim.h). */
#ifndef COMPILER_H
#define COMPILER_H
#include <stdint.h>
#include <stdio.h>
#include "compiler/graph_side.h"
#include "util/util.h"

/* ---- level 2: the traced node and its operand references ---- */

/* Where a traced operand comes from: nothing, slot s (an external buffer,
 * bound when the program runs), or output k of traced node i. */
enum ref_kind { REF_NONE, REF_SLOT, REF_OUT };
struct ref {
    int kind; /* enum ref_kind */
    int at;   /* REF_SLOT: the slot; REF_OUT: the traced node */
    int out;  /* REF_OUT: which of the node's outputs */
};

static inline struct ref no_ref(void) { return (struct ref){REF_NONE, 0, 0}; }
static inline struct ref slot_ref(int slot) { return (struct ref){REF_SLOT, slot, 0}; }
static inline struct ref out_ref(int node, int out) { return (struct ref){REF_OUT, node, out}; }
static inline int is_out(struct ref r) { return r.kind == REF_OUT; }
static inline int is_set(struct ref r) { return r.kind != REF_NONE; }

static inline int same_ref(struct ref a, struct ref b)
{
    return a.kind == b.kind && a.at == b.at && a.out == b.out;
}

/* A node output's index in the tables kept per output (uses, forwarding,
 * values): KMAX_OUT entries per traced node. */
static inline long out_index(struct ref r) { return (long)r.at * KMAX_OUT + r.out; }

struct tnode {
    int op, nin, nout, dead;
    int region, phase; /* the Node's: its remat region and enum phase */
    union kattr attr;
    struct ref in[KMAX_IN];
    int rows[KMAX_OUT], cols[KMAX_OUT];
};

struct trace {
    int n, nslots, nroots;
    struct tnode *nodes; /* [n] in recording order, a topological order */
    Tensor **slot;       /* [nslots] external buffers */
    struct ref *roots;   /* [nroots] the values the host keeps */
    Tensor **root_t;     /* [nroots] their tensors */
};

struct cache_entry {
    uint64_t hash;
    int64_t *key;
    long keylen;
    Program *prog;
};

/* What the lazy compiler keeps from one cut to the next (Graph holds one). */
struct compiler {
    struct cache_entry *cache; /* [ncache] compiled programs, by structure */
    int ncache, capcache;
    struct compile_stats last; /* what the last new compile did */
    struct plan_buf *plan;     /* [nplan] the last new program's buffers */
    int nplan;
    int kernels[KOP_COUNT];    /* the last new program's kernels of each op */
    /* GPT_XLA_DEBUG's warnings: the counters after the warm-up steps */
    long warm_compiles, warm_reads;
    int warned_compiles, warned_reads;
};

/* ---- compile.c: the driver ---- */

/* A cut's program: trace (filling tr, which the caller binds and frees),
 * key, cache lookup; on a miss the passes, the memory plan, lowering and
 * cache insertion. NULL when nothing is pending. */
Program *compile_cut(struct compiler *cc, Node *nodes, int n_nodes, int n_tensors,
                     Tensor *const *roots, int nroots, const char *why, struct trace *tr);

/* A compile's progress, for a person waiting at a terminal: the stage
 * beginning (a pass's name, "memory plan", "lowering"; NULL when the
 * compile is done), its number `at` of `stages`, the trace's live nodes,
 * the seconds since the compile began. The compiler calls the hook when
 * one is set; the program (cmd/) sets it, as the compiler must not call
 * up into it. */
struct compile_progress {
    const char *stage;
    int at, stages, nodes;
    double seconds;
};
extern void (*compile_progress_hook)(const struct compile_progress *p);
/* Tells the hook, when one is set, that a stage begins (explain.c). */
void tell_stage(const char *stage, int at, int stages, const struct trace *tr, double t0);

/* ---- trace.c ---- */

/* The pending work of the record nodes[0..n_nodes) that the roots need,
 * plus pending side effects; marks those nodes done. */
void trace_build(Node *nodes, int n_nodes, int n_tensors, Tensor *const *roots, int nroots,
                 struct trace *tr);
void trace_free(struct trace *tr);

/* ---- cache.c: the key and the cache ---- */

/* A trace's structure as words: never a pointer or a value. */
struct key {
    int64_t *v;
    long n, cap;
    uint64_t hash;
};
struct key key_build(const struct trace *tr);
/* The cached program of k's structure, or NULL. */
Program *cache_lookup(const struct compiler *cc, const struct key *k);
/* Caches p under k, which it takes (k->v becomes NULL). */
void cache_insert(struct compiler *cc, struct key *k, Program *p);
void cache_free(struct compiler *cc);

/* ---- fuse.c: the passes, each over the whole trace ---- */

void cse(struct trace *tr);
void dce(struct trace *tr);
void fuse_matmul(struct trace *tr);
void fuse_adds(struct trace *tr);
void fuse_layernorm_bwd(struct trace *tr);
void fuse_xent(struct trace *tr);

/* ---- plan.c: the memory plan ---- */

/* A value the program keeps in its arena, and when it is alive. */
struct value {
    struct ref ref;  /* a node output, or the slot of a transferred input */
    long bytes, off;
    int first, last; /* instruction indices; inputs are born at -1 */
    int id;          /* its index before the plan sorted the values */
};

/* The memory plan: the surviving nodes in run order, the values they make
 * and read, and each value's arena offset; what lowering works on. */
struct plan {
    const struct trace *tr;
    int *order;            /* [nk] live node indices in run order */
    int nk;
    struct value *val;     /* [nval] */
    int nval;
    long *where;           /* [n*KMAX_OUT] value index of each node output */
    long *slot_val;        /* [nslots] value index of a transferred input, or -1 */
    struct value *by_size; /* [nval] the values placed: biggest first, with offsets */
    long *off_of;          /* [nval] the offset of val[i] */
    size_t arena;          /* bytes */
};

void plan_memory(const struct trace *tr, struct plan *pl);
void plan_free(struct plan *pl);
/* The value an operand reads, or -1 (none, or a slot bound in place). */
long value_of(const struct plan *pl, struct ref r);

/* ---- remat.c: what --remat would save ---- */

/* The arena plan e would need with --remat, estimated from e's values
 * (not planned again); 0 when e has no marked blocks or no backward pass,
 * or recomputes already. */
size_t remat_estimate(const struct plan *e);

/* ---- lower.c ---- */

Program *lower(const struct plan *pl);

/* ---- dump.c and explain.c: the side rooms ---- */

/* The trace as text or DOT; with p, each node's kernel and memory plan. */
void dump_trace(const struct trace *tr, FILE *f, int dot, const Program *p);
/* GPT_SAVE_GRAPHS's file <prefix>-<index>-<stage> of the trace. */
void save_graph(int index, const struct trace *tr, const char *stage, const Program *p);
int debug_on(void); /* GPT_XLA_DEBUG */
void explain_miss(const struct compiler *cc, const struct key *k, const char *why);
/* A program that does not fit --hbm: one line naming its biggest buffers, exit 1. */
_Noreturn void refuse_hbm(const struct plan *e, const struct value *by_size, size_t arena,
                          size_t resident);
void explain_compile(const struct compiler *cc, const Program *p, uint64_t hash,
                     const char *why);
void check_rates(struct compiler *cc);
/* What a new program is, kept in cc for tests and the debug line
 * (g_compile_stats, g_plan, g_kernel_count): its buffers and kernels. */
void record_compile(struct compiler *cc, const struct plan *pl);

#endif
