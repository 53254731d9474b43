/* compile.c: the lazy compiler's driver; read it first. At a cut
 * (graph.c's run_pending) compile_cut runs the stages in order, each a
 * function of its own file; none calls back here or into a later stage:
 *
 *   trace_build    the pending nodes the cut needs, as a trace    trace.c
 *   key_build      the trace's structure as words (no pointers)   cache.c
 *   cache_lookup   hash, then the full key: a hit is the program  cache.c
 *   passes[]       cse, dce, the fusions, in the table's order    fuse.c
 *   plan_memory    each value's offset in one arena               plan.c
 *   lower          the program of places (struct pinstr)          lower.c
 *   cache_insert   the program, under its key                     cache.c
 *
 * GPT_SAVE_GRAPHS's dumps (dump.c) and GPT_XLA_DEBUG's explanations
 * (explain.c) only watch. */
#include "compiler/compiler.h"
#include <stdlib.h>
#include <string.h>

/* The passes (fuse.c), in the order they run. Each rewrites the trace in
 * place and none changes a bit of any result. The fusions merge ops into
 * kernels of their own; the reading mode (GPT_ISA=ref) skips them, so
 * each op the model wrote runs its own twin. cse and dce stay: they
 * merge no two ops into one kernel, only drop an op whose value another
 * already gives or nothing needs, so every op left still runs as written. */
static const struct pass {
    const char *name;
    void (*run)(struct trace *tr);
    int fusion; /* 1: skipped in the reading mode */
} passes[] = {
    {"cse", cse, 0},                               /* an op equal to an earlier one reuses it */
    {"dce", dce, 0},                               /* drop what no result needs */
    {"fuse_matmul", fuse_matmul, 1},               /* ReLU, residual adds, ReLU's gate */
    {"fuse_adds", fuse_adds, 1},                   /* a chain of adds: one add_n */
    {"fuse_layernorm_bwd", fuse_layernorm_bwd, 1}, /* the residual gradient's sum */
    {"fuse_xent", fuse_xent, 1},                   /* loss and gradient in one pass */
};

#define STAGES (int)(sizeof passes / sizeof *passes + 2) /* the passes, plan, lowering */

/* A cache miss: the passes, the memory plan, lowering; each stage told to tell_stage. */
static Program *compile(struct compiler *cc, struct trace *tr)
{
    double t0 = now_seconds();
    int saving = getenv("GPT_SAVE_GRAPHS") != NULL; /* the graphs to files (dump.c) */
    cc->last.nodes = tr->n;
    if (saving)
        save_graph(cc->ncache, tr, "before", NULL);
    for (size_t i = 0; i < sizeof passes / sizeof *passes; i++) {
        tell_stage(passes[i].name, (int)i + 1, STAGES, tr, t0);
        if (!(passes[i].fusion && kernels_reading_mode()))
            passes[i].run(tr);
    }
    struct plan pl;
    tell_stage("memory plan", STAGES - 1, STAGES, tr, t0);
    plan_memory(tr, &pl);
    tell_stage("lowering", STAGES, STAGES, tr, t0);
    Program *p = lower(&pl);
    record_compile(cc, &pl);
    plan_free(&pl);
    cc->last.ms = (now_seconds() - t0) * 1e3;
    tell_stage(NULL, STAGES, STAGES, tr, t0);
    if (saving)
        save_graph(cc->ncache, tr, "after", p);
    return p;
}

Program *compile_cut(struct compiler *cc, Node *nodes, int n_nodes, int n_tensors,
                     Tensor *const *roots, int nroots, const char *why, struct trace *tr)
{
    trace_build(nodes, n_nodes, n_tensors, roots, nroots, tr);
    if (tr->n == 0)
        return NULL;
    struct key k = key_build(tr);
    Program *p = cache_lookup(cc, &k);
    if (p) {
        xs_counter_add(C_CACHED, 1);
        free(k.v);
        return p;
    }
    if (debug_on() && cc->ncache)
        explain_miss(cc, &k, why);
    p = compile(cc, tr);
    xs_metric_add(M_COMPILE, cc->last.ms * 1e-3);
    xs_counter_add(C_UNCACHED, 1);
    cache_insert(cc, &k, p);
    if (debug_on())
        explain_compile(cc, p, k.hash, why);
    return p;
}
