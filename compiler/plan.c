/* plan.c: the memory plan, the stage after the passes (compile.c runs
 * them). Every value a program keeps in its arena (a node's output, or an
 * input copied in) lives from the instruction that makes it to the last
 * that reads it; values alive at the same time get disjoint offsets of one
 * arena. plan_memory, in order: the surviving nodes in run order,
 * collect_values (each value and when it lives), place_values (its
 * offset), check_hbm (the arena and the resident buffers fit a core). */
#include "compiler/compiler.h"
#include <stdlib.h>
#include <string.h>

static long value_bytes(long rows, long cols) { return (rows * cols * 4 + 63) & ~63L; }

static void add_value(struct plan *e, struct ref ref, long bytes, int first)
{
    struct value *v = &e->val[e->nval];
    *v = (struct value){.ref = ref, .bytes = bytes, .first = first, .last = first,
                        .id = e->nval};
    if (ref.kind == REF_SLOT)
        e->slot_val[ref.at] = e->nval;
    else
        e->where[out_index(ref)] = e->nval;
    e->nval++;
}

/* The value an operand reads, or -1 (none, or a slot bound in place). */
long value_of(const struct plan *e, struct ref r)
{
    return r.kind == REF_NONE ? -1 : r.kind == REF_SLOT ? e->slot_val[r.at]
                                                        : e->where[out_index(r)];
}

/* The device runs a stretch of consecutive all-reduces as one collective,
 * all at once; so within it no buffer may be reused: every operand lives
 * from the stretch's first instruction to its last. */
static void widen_collectives(struct plan *e)
{
    for (int k0 = 0; k0 < e->nk;) {
        int k1 = k0;
        while (k1 < e->nk && e->tr->nodes[e->order[k1]].op == KOP_ALL_REDUCE)
            k1++;
        for (int i = 0; k1 > k0 && i < e->nval; i++) {
            struct value *v = &e->val[i];
            if (v->first >= k0 && v->first < k1)
                v->first = k0;
            if (v->last >= k0 && v->last < k1)
                v->last = k1 - 1;
        }
        k0 = k1 > k0 ? k1 : k0 + 1;
    }
}

static void collect_values(struct plan *e)
{
    const struct trace *tr = e->tr;
    for (int s = 0; s < tr->nslots; s++) {
        e->slot_val[s] = -1;
        if (tr->slot[s]->kind == TK_INPUT)
            add_value(e, slot_ref(s), value_bytes(tr->slot[s]->rows, tr->slot[s]->cols), -1);
    }
    for (int k = 0; k < e->nk; k++) {
        const struct tnode *t = &tr->nodes[e->order[k]];
        for (int o = 0; o < t->nout; o++)
            add_value(e, out_ref(e->order[k], o), value_bytes(t->rows[o], t->cols[o]), k);
        for (int i = 0; i < KMAX_IN; i++) {
            long vi = value_of(e, t->in[i]);
            if (vi >= 0)
                e->val[vi].last = k;
        }
    }
    for (int r = 0; r < tr->nroots; r++)
        if (is_out(tr->roots[r]))
            e->val[value_of(e, tr->roots[r])].last = e->nk; /* read after the run */
    widen_collectives(e);
}

static int by_size_desc(const void *a, const void *b)
{
    const struct value *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return x->first - y->first;
}

/* The lowest offset for v[i] that overlaps none of v[0..i), the values
 * already placed, that is alive at the same time as v[i]: start at 0 and
 * step past every such value in the way until none is. */
static long lowest_free_offset(const struct value *v, int i)
{
    long off = 0;
    for (int moved = 1; moved;) {
        moved = 0;
        for (int j = 0; j < i; j++) {
            int alive = v[j].first <= v[i].last && v[i].first <= v[j].last;
            int clash = off < v[j].off + v[j].bytes && v[j].off < off + v[i].bytes;
            if (alive && clash) {
                off = v[j].off + v[j].bytes;
                moved = 1;
            }
        }
    }
    return off;
}

/* Greedy best-known heuristic: biggest values first, each at the lowest
 * free offset. Sorts v; returns the arena's size. */
static size_t place_values(struct value *v, int n)
{
    size_t high = 0;
    qsort(v, (size_t)n, sizeof *v, by_size_desc);
    for (int i = 0; i < n; i++) {
        v[i].off = lowest_free_offset(v, i);
        if ((size_t)(v[i].off + v[i].bytes) > high)
            high = (size_t)(v[i].off + v[i].bytes);
    }
    return high;
}

/* XLA refuses at compile time a program whose buffers do not fit a core's
 * HBM; so do we (explain.c's refuse_hbm says what did not fit). Resident
 * buffers (weights, optimizer state) count too. */
static void check_hbm(const struct plan *e, const struct value *by_size, size_t arena)
{
    size_t resident = 0, hbm = xs_hbm();
    for (int s = 0; s < e->tr->nslots; s++)
        if (e->tr->slot[s]->kind != TK_INPUT)
            resident += (size_t)e->tr->slot[s]->numel * 4;
    if (hbm && arena + resident > hbm)
        refuse_hbm(e, by_size, arena, resident);
}

/* The plan for the trace's surviving nodes: each value's offset in one
 * arena (pl->off_of), refused (check_hbm) if it does not fit a core. */
void plan_memory(const struct trace *tr, struct plan *pl)
{
    *pl = (struct plan){.tr = tr};
    pl->order = xcalloc((size_t)tr->n, sizeof(int));
    for (int i = 0; i < tr->n; i++)
        if (!tr->nodes[i].dead)
            pl->order[pl->nk++] = i;
    pl->val = xcalloc((size_t)(tr->n * KMAX_OUT + tr->nslots), sizeof *pl->val);
    pl->where = xcalloc((size_t)tr->n * KMAX_OUT, sizeof *pl->where);
    pl->slot_val = xcalloc((size_t)tr->nslots, sizeof *pl->slot_val);
    collect_values(pl);
    pl->by_size = xcalloc((size_t)pl->nval, sizeof *pl->by_size);
    memcpy(pl->by_size, pl->val, sizeof *pl->by_size * (size_t)pl->nval);
    pl->arena = place_values(pl->by_size, pl->nval); /* sorts, then sets off */
    pl->off_of = xcalloc((size_t)pl->nval, sizeof *pl->off_of);
    for (int i = 0; i < pl->nval; i++)
        pl->off_of[pl->by_size[i].id] = pl->by_size[i].off;
    check_hbm(pl, pl->by_size, pl->arena);
}

void plan_free(struct plan *pl)
{
    free(pl->order);
    free(pl->val);
    free(pl->where);
    free(pl->slot_val);
    free(pl->by_size);
    free(pl->off_of);
}
