/* lower.c: lowering, the stage after the memory plan (compile.c runs
 * them): what survives the passes becomes a Program (xla_sim.h), one
 * struct pinstr a node, each operand a place: the arena offset the plan
 * gave its value, or a slot. */
#include "compiler/compiler.h"

/* Where operand r lives at run time: its value's arena offset, a bound
 * slot, or nowhere (an absent operand). */
static struct place place_of(const struct plan *pl, struct ref r)
{
    long vi = value_of(pl, r);
    if (vi >= 0)
        return (struct place){PL_ARENA, pl->off_of[vi]};
    if (r.kind == REF_SLOT)
        return (struct place){PL_SLOT, r.at};
    return (struct place){PL_NONE, 0};
}

/* The program: one struct pinstr a surviving node, with the transfers in
 * (inputs copied to the arena) and out (the roots the host reads). */
Program *lower(const struct plan *pl)
{
    const struct trace *tr = pl->tr;
    Program *p = xcalloc(1, sizeof *p);
    p->n = pl->nk;
    p->ins = xcalloc((size_t)pl->nk, sizeof *p->ins);
    for (int k = 0; k < pl->nk; k++) {
        const struct tnode *t = &tr->nodes[pl->order[k]];
        struct pinstr *pi = &p->ins[k];
        pi->op = t->op;
        pi->attr = t->attr;
        for (int i = 0; i < KMAX_IN; i++)
            pi->in[i] = place_of(pl, t->in[i]);
        for (int o = 0; o < t->nout; o++)
            pi->out[o] = place_of(pl, out_ref(pl->order[k], o));
    }
    p->arena_bytes = pl->arena;
    p->nslots = tr->nslots + tr->nroots;
    p->slot_bytes = xcalloc((size_t)p->nslots, sizeof *p->slot_bytes);
    for (int s = 0; s < p->nslots; s++)
        p->slot_bytes[s] = (s < tr->nslots ? tr->slot[s] : tr->root_t[s - tr->nslots])->numel * 4;
    p->tin = xcalloc((size_t)tr->nslots, sizeof *p->tin);
    for (int s = 0; s < tr->nslots; s++)
        if (pl->slot_val[s] >= 0)
            p->tin[p->nin++] = (struct transfer){s, pl->off_of[pl->slot_val[s]],
                                                 tr->slot[s]->numel * 4};
    p->tout = xcalloc((size_t)tr->nroots, sizeof *p->tout);
    for (int r = 0; r < tr->nroots; r++) {
        struct place at = place_of(pl, tr->roots[r]);
        p->tout[p->nout++] = (struct transfer){tr->nslots + r, at.at, tr->root_t[r]->numel * 4};
    }
    return p;
}
