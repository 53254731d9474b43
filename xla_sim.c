/* xla_sim.c: the device: one instruction on a core, and a compiled
 * program's run on every simulated core, with the all-reduce between
 * them. graph.c decides what to run. The rooms below it: dispatch, one
 * small function an op (device/exec.c: exec_matmul calls k_matmul), the
 * op table (device/ops.c), the board (device/board.c), the pod's sums
 * (device/allreduce.c) and what a run tells (device/metrics.c: --metrics,
 * --profile). */
#include "xla_sim.h"
#include "device/allreduce.h"
#include "device/exec.h"
#include "util/util.h"
#include <string.h>
#include <stdlib.h>
#include <omp.h>

/* One instruction on one core, timed only when metrics.c is recording, so
 * that an unprofiled run pays nothing for it. */
static void exec_on_core(const struct kinstr *k, int core)
{
    if (!xs_watching()) {
        xs_dispatch(k);
        return;
    }
    double t0 = now_seconds();
    xs_dispatch(k);
    xs_kernel_ran(k, core, t0, now_seconds());
}

void xs_exec(const struct kinstr *k) { exec_on_core(k, 0); }

/* ---- compiled programs ---- */

/* Each core's memory: one arena, grown to the largest plan it has run. A
 * replay of a cached program allocates nothing. */
static unsigned char *dev_arena[XS_MAX_CORES];
static size_t dev_arena_cap[XS_MAX_CORES];

static unsigned char *device_arena(int core, size_t bytes)
{
    if (bytes > dev_arena_cap[core]) {
        free(dev_arena[core]);
        dev_arena[core] = xaligned_alloc(bytes);
        dev_arena_cap[core] = bytes;
        xs_arena_grew(core, bytes);
    }
    return dev_arena[core];
}

void program_free(Program *p)
{
    if (!p)
        return;
    free(p->ins);
    free(p->tin);
    free(p->tout);
    free(p);
}

static void *resolve(const struct place *pl, unsigned char *arena, void *const *slots)
{
    switch (pl->kind) {
    case PL_ARENA: return arena + pl->at;
    case PL_SLOT: return slots[pl->at];
    default: return NULL;
    }
}

static struct kinstr bind(const struct pinstr *pi, unsigned char *arena, void *const *slots,
                          int core)
{
    struct kinstr k = {.op = pi->op, .core = core, .attr = pi->attr};
    for (int j = 0; j < KMAX_IN; j++)
        k.in[j] = resolve(&pi->in[j], arena, slots);
    for (int j = 0; j < KMAX_OUT; j++)
        k.out[j] = resolve(&pi->out[j], arena, slots);
    return k;
}

/* Instructions [i0, i1) on one core. */
static void run_instrs(const Program *p, int i0, int i1, int core, unsigned char *arena,
                       void *const *slots)
{
    for (int i = i0; i < i1; i++) {
        struct kinstr k = bind(&p->ins[i], arena, slots, core);
        exec_on_core(&k, core);
    }
}

static void transfer(const struct transfer *t, int n, unsigned char *arena,
                     void *const *slots, int to_device)
{
    for (int i = 0; i < n; i++) {
        if (to_device)
            memcpy(arena + t[i].at, slots[t[i].slot], (size_t)t[i].bytes);
        else
            memcpy(slots[t[i].slot], arena + t[i].at, (size_t)t[i].bytes);
    }
}

static void transfer_all(const Program *p, int n, unsigned char **arena,
                         void *const *const *slots, int to_device)
{
    double t0 = now_seconds();
    for (int c = 0; c < n; c++) {
        if (to_device)
            transfer(p->tin, p->nin, arena[c], slots[c], 1);
        else
            transfer(p->tout, p->nout, arena[c], slots[c], 0);
    }
    xs_metric_add(to_device ? M_TO_DEVICE : M_FROM_DEVICE, now_seconds() - t0);
}

/* The consecutive all-reduces from i0 alike (or all-gathers: is_collective),
 * all at once, as one collective (device/allreduce.c): each one's operands
 * on every core. Returns the index after the stretch. */
static int run_all_reduces(const Program *p, int i0, int n, unsigned char **arena,
                           void *const *const *slots)
{
    int i1 = i0, gather = p->ins[i0].op == KOP_ALL_GATHER;
    while (i1 < p->n &&
           same_collective(&p->ins[i1].attr, p->ins[i1].op, &p->ins[i0].attr, p->ins[i0].op))
        i1++;
    struct board_reduce *r = xcalloc((size_t)(i1 - i0), sizeof *r);
    for (int i = i0; i < i1; i++) {
        const struct pinstr *pi = &p->ins[i];
        const struct place *y = gather ? &pi->in[ALL_GATHER_IN_X] : &pi->out[ALL_REDUCE_OUT_Y];
        r[i - i0] = board_reduce_of(pi->op, &pi->attr.all_reduce);
        for (int c = 0; c < n; c++) {
            r[i - i0].in[c] = resolve(&pi->in[ALL_REDUCE_IN_X], arena[c], slots[c]);
            r[i - i0].out[c] = resolve(y, arena[c], slots[c]);
        }
    }
    (gather ? all_gather_stretch : all_reduce_stretch)(r, i1 - i0, n);
    free(r);
    return i1;
}

/* Instructions [i0, i1), free of all-reduces, on every core at once. There
 * is no barrier inside: each core runs its stretch alone, one thread. One
 * core alone gives its kernels every thread instead. */
static void run_stretch(const Program *p, int i0, int i1, int n, unsigned char **arena,
                        void *const *const *slots)
{
    if (n == 1) {
        double t0 = now_seconds();
        run_instrs(p, i0, i1, 0, arena[0], slots[0]);
        xs_core_ran(0, now_seconds() - t0);
        return;
    }
    int threads = omp_get_max_threads() < n ? omp_get_max_threads() : n;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int c = 0; c < n; c++) {
        double t0 = now_seconds();
        run_instrs(p, i0, i1, c, arena[c], slots[c]);
        xs_core_ran(c, now_seconds() - t0);
    }
}

void xs_run_replicated(const Program *p, int n, void *const *const *slots)
{
    unsigned char *arena[XS_MAX_CORES];
    n = n < 1 ? 1 : n;
    for (int c = 0; c < n; c++)
        arena[c] = device_arena(c, p->arena_bytes);
    transfer_all(p, n, arena, slots, 1);
    double t0 = now_seconds();
    for (int i = 0; i < p->n;) {
        int j = i;
        while (j < p->n && !is_collective(p->ins[j].op))
            j++;
        if (j > i)
            run_stretch(p, i, j, n, arena, slots);
        i = j < p->n ? run_all_reduces(p, j, n, arena, slots) : j;
    }
    xs_metric_add(n > 1 ? M_EXECUTE_REPLICATED : M_EXECUTE, now_seconds() - t0);
    transfer_all(p, n, arena, slots, 0);
}

