/* lower.c: compile() runs the passes (fuse.c) and lowers what survives
 * into a Program (xla_sim.h): the memory plan (plan.c) gives each value an
 * arena offset, and each operand becomes a place: an offset, or a slot. */
#include "compiler/compiler.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Where operand r lives at run time: its value's arena offset, a bound
 * slot, or nowhere (an absent operand). */
static struct place place_of(const struct emit *e, const long *off_of, struct ref r)
{
    long vi = value_of(e, r);
    if (vi >= 0)
        return (struct place){PL_ARENA, off_of[vi]};
    if (r.kind == REF_SLOT)
        return (struct place){PL_SLOT, r.at};
    return (struct place){PL_NONE, 0};
}

/* The program: one struct pinstr a surviving node, with the transfers in
 * (inputs copied to the arena) and out (the roots the host reads). */
static Program *emit_program(struct emit *e, const long *off_of, size_t arena)
{
    const struct trace *tr = e->tr;
    Program *p = xcalloc(1, sizeof *p);
    p->n = e->nk;
    p->ins = xcalloc((size_t)e->nk, sizeof *p->ins);
    for (int k = 0; k < e->nk; k++) {
        const struct tnode *t = &tr->nodes[e->order[k]];
        struct pinstr *pi = &p->ins[k];
        pi->op = t->op;
        pi->attr = t->attr;
        for (int i = 0; i < KMAX_IN; i++)
            pi->in[i] = place_of(e, off_of, t->in[i]);
        for (int o = 0; o < t->nout; o++)
            pi->out[o] = place_of(e, off_of, out_ref(e->order[k], o));
    }
    p->arena_bytes = arena;
    p->nslots = tr->nslots + tr->nroots;
    p->tin = xcalloc((size_t)tr->nslots, sizeof *p->tin);
    for (int s = 0; s < tr->nslots; s++)
        if (e->slot_val[s] >= 0)
            p->tin[p->nin++] = (struct transfer){s, off_of[e->slot_val[s]],
                                                 tr->slot[s]->numel * 4};
    p->tout = xcalloc((size_t)tr->nroots, sizeof *p->tout);
    for (int r = 0; r < tr->nroots; r++) {
        struct place pl = place_of(e, off_of, tr->roots[r]);
        p->tout[p->nout++] = (struct transfer){tr->nslots + r, pl.at, tr->root_t[r]->numel * 4};
    }
    return p;
}

/* ---- compile ---- */

static void record_plan(struct compiler *cc, const struct value *v, int n)
{
    free(cc->plan);
    cc->plan = xcalloc((size_t)n, sizeof *cc->plan);
    cc->nplan = n;
    cc->last.buffers = 0;
    for (int i = 0; i < n; i++) {
        cc->plan[i] = (struct plan_buf){v[i].off, v[i].bytes, v[i].first, v[i].last};
        cc->last.buffers += (size_t)v[i].bytes;
    }
}

static void emit_free(struct emit *e)
{
    free(e->order);
    free(e->val);
    free(e->where);
    free(e->slot_val);
}

/* Plans memory for the surviving nodes and emits the program. */
static Program *lower(struct compiler *cc, const struct trace *tr)
{
    struct emit e = {.tr = tr};
    e.order = xcalloc((size_t)tr->n, sizeof(int));
    for (int i = 0; i < tr->n; i++)
        if (!tr->nodes[i].dead)
            e.order[e.nk++] = i;
    e.val = xcalloc((size_t)(tr->n * KMAX_OUT + tr->nslots), sizeof *e.val);
    e.where = xcalloc((size_t)tr->n * KMAX_OUT, sizeof *e.where);
    e.slot_val = xcalloc((size_t)tr->nslots, sizeof *e.slot_val);
    collect_values(&e);
    struct value *by_size = xcalloc((size_t)e.nval, sizeof *by_size);
    memcpy(by_size, e.val, sizeof *by_size * (size_t)e.nval);
    size_t arena = place_values(by_size, e.nval); /* sorts, then sets off */
    long *off_of = xcalloc((size_t)e.nval, sizeof *off_of);
    for (int i = 0; i < e.nval; i++)
        off_of[by_size[i].id] = by_size[i].off;
    check_hbm(&e, by_size, arena);
    record_plan(cc, by_size, e.nval);
    Program *p = emit_program(&e, off_of, arena);
    memset(cc->kernels, 0, sizeof cc->kernels);
    for (int k = 0; k < e.nk; k++)
        cc->kernels[tr->nodes[e.order[k]].op]++;
    cc->last.kernels = e.nk;
    cc->last.arena = arena;
    free(off_of);
    free(by_size);
    emit_free(&e);
    return p;
}


static void save_graph(const struct compiler *cc, const struct trace *tr, const char *stage,
                       const Program *p)
{
    const char *prefix = getenv("GPT_SAVE_GRAPHS"), *fmt = getenv("GPT_SAVE_GRAPHS_FMT");
    if (!prefix || !*prefix || xs_host() != 0) /* in a pod, host 0 alone writes them */
        return;
    int dot = fmt && !strcmp(fmt, "dot");
    char path[4096];
    snprintf(path, sizeof path, "%s-%03d-%s.%s", prefix, cc->ncache, stage, dot ? "dot" : "txt");
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gpt: GPT_SAVE_GRAPHS: cannot write %s\n", path);
        return;
    }
    dump_trace(tr, f, dot, p);
    fclose(f);
}

/* The passes, in order, then lowering. */
Program *compile(struct compiler *cc, struct trace *tr)
{
    double t0 = now_seconds();
    cc->last.nodes = tr->n;
    save_graph(cc, tr, "before", NULL);
    cse(tr);
    dce(tr);
    fuse_matmul(tr);
    fuse_adds(tr);
    fuse_layernorm_bwd(tr);
    fuse_xent(tr);
    Program *p = lower(cc, tr);
    cc->last.ms = (now_seconds() - t0) * 1e3;
    save_graph(cc, tr, "after", p);
    return p;
}
