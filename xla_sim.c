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
#include "device/redo.h"
#include "pod/error.h"
#include "util/pool.h"
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
    struct kernel_run r = xs_kernel_run_of(k, t0, now_seconds());
    xs_kernel_ran(&r, core);
}

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

/* The last program run on several cores, and whether the redo team fits
 * it (redo_fits, below): reckoned once a program, not once a step. */
static const Program *fit_for;
static int last_fit;

void program_free(Program *p)
{
    if (!p)
        return;
    redo_quiesce(); /* a late attempt may still read it */
    if (p == fit_for)
        fit_for = NULL; /* a new program may come at its address */
    free(p->ins);
    free(p->slot_bytes);
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

/* Whether core c binds slot s to core 0's buffer: one buffer every core
 * shares (a lent board's weights and moments, or a leaf of one buffer). */
static int shares_slot(void *const *const *slots, int c, long s)
{
    return c > 0 && slots[c][s] == slots[0][s];
}

/* Whether the stretch [i0, i1) writes a slot every core shares (a lent
 * board's weights and moments: model_lend_cores). Only the stretch after
 * the program's last collective may: there every core holds the same
 * values (the all-reduce's), so one core's run writes what every core's
 * would, and it runs once, on core 0. Anywhere else each core would write
 * its own values into the one buffer: a program the device refuses. */
static int writes_shared_slot(const Program *p, int i0, int i1, int n,
                              void *const *const *slots)
{
    int shared = 0;
    for (int i = i0; i < i1 && !shared; i++) {
        const struct pinstr *pi = &p->ins[i];
        for (int o = 0; o < KMAX_OUT; o++)
            shared |= pi->out[o].kind == PL_SLOT && shares_slot(slots, 1, pi->out[o].at);
        for (int k = 0; k < KMAX_IN; k++)
            shared |= (kop_writes(pi->op) >> k & 1) && pi->in[k].kind == PL_SLOT &&
                      shares_slot(slots, 1, pi->in[k].at);
    }
    int after_last = i0 > 0 && is_collective(p->ins[i0 - 1].op) && i1 == p->n;
    if (shared && !after_last)
        die(1, "a program writes a buffer its %d cores share outside the stretch after its "
            "last collective", n);
    return shared;
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

/* ---- the cores' programs redone (device/redo.h) ----
 * Each attempt at a core's stretch runs in an arena of its own from a
 * pool, from copies of the slots the stretch reads, taken as its job
 * began: a late attempt, resumed after its core's result came from
 * another, reads nothing the step has changed since (Adam's weights, the
 * next batch) and writes nothing another reads, until it gives up at its
 * next instruction. */

_Static_assert(XS_MAX_CORES <= REDO_MAX_UNITS, "a redo job has a unit a core");

struct attempt_arena {
    unsigned char *at;
    size_t cap;
    double seconds;          /* the attempt's time, for the core's busy time */
    struct kernel_run *runs; /* [nruns] its kernels, while metrics.c records them */
    int nruns, runs_cap;
};

/* One stretch of the cores, kept in the ring while its attempts may run. */
struct core_job {
    const Program *p;
    int i0, i1;
    void **slots;          /* [n][nslots] core c's slot s, or its copy, or NULL */
    unsigned char *copies; /* the slots the stretch reads, as the job began */
    size_t slots_cap, copies_cap;
};

static struct core_job core_jobs[REDO_RING];
/* Arenas of finished attempts, for the next ones. */
static void *kept_arenas[2 * REDO_MAX_UNITS];
static Pool arena_pool = POOL_OF(kept_arenas);

static struct attempt_arena *arena_take(size_t bytes)
{
    struct attempt_arena *a = pool_take(&arena_pool);
    if (!a)
        a = xcalloc(1, sizeof *a);
    if (a->cap < bytes) {
        free(a->at);
        a->at = xaligned_alloc(bytes);
        a->cap = bytes;
    }
    return a;
}

static void arena_give(void *arena)
{
    struct attempt_arena *a = arena;
    if (!pool_give(&arena_pool, a)) {
        free(a->at);
        free(a->runs);
        free(a);
    }
}

/* An attempt's kernel, kept until the attempt wins (xs_kernel_ran). */
static void attempt_keep_run(struct attempt_arena *a, struct kernel_run r)
{
    if (a->nruns == a->runs_cap) {
        a->runs_cap = a->runs_cap ? 2 * a->runs_cap : 256;
        a->runs = xrealloc(a->runs, sizeof *a->runs * (size_t)a->runs_cap);
    }
    a->runs[a->nruns++] = r;
}

static void *core_attempt(unsigned gen, int core)
{
    const struct core_job *j = &core_jobs[gen % REDO_RING];
    const Program *p = j->p;
    double t0 = now_seconds();
    struct attempt_arena *a = arena_take(p->arena_bytes);
    void *const *slots = j->slots + (size_t)core * (size_t)p->nslots;
    int watched = xs_watching();
    transfer(p->tin, p->nin, a->at, slots, 1);
    a->nruns = 0;
    for (int i = j->i0; i < j->i1; i++) {
        if (redo_finished(gen, core)) {
            arena_give(a);
            return NULL;
        }
        struct kinstr k = bind(&p->ins[i], a->at, slots, core);
        double k0 = watched ? now_seconds() : 0;
        xs_dispatch(&k);
        if (watched)
            attempt_keep_run(a, xs_kernel_run_of(&k, k0, now_seconds()));
        redo_progressed(core);
    }
    a->seconds = now_seconds() - t0;
    return a;
}

static const RedoWork core_work = {core_attempt, arena_give};

/* Whether the stretch [i0, i1) may be redone: it writes no slot, as an
 * output or in place, which an attempt that lost would write too. */
static int redo_safe(const Program *p, int i0, int i1)
{
    for (int i = i0; i < i1; i++) {
        if (kop_writes(p->ins[i].op))
            return 0;
        for (int o = 0; o < KMAX_OUT; o++)
            if (p->ins[i].out[o].kind == PL_SLOT)
                return 0;
    }
    return 1;
}

/* The slots the stretch [i0, i1) reads (reads[s] = 1: those transferred
 * in and those bound in place); returns their bytes, one core's. */
static size_t stretch_reads(const Program *p, int i0, int i1, char *reads)
{
    size_t bytes = 0;
    memset(reads, 0, (size_t)p->nslots);
    for (int t = 0; t < p->nin; t++)
        reads[p->tin[t].slot] = 1;
    for (int i = i0; i < i1; i++)
        for (int k = 0; k < KMAX_IN; k++)
            if (p->ins[i].in[k].kind == PL_SLOT)
                reads[p->ins[i].in[k].at] = 1;
    for (int s = 0; s < p->nslots; s++)
        bytes += reads[s] ? (size_t)p->slot_bytes[s] : 0;
    return bytes;
}

/* The bytes of the copies core_job_set takes of the slots reads[] marks
 * on n cores: a slot the cores share, once. */
static size_t copies_bytes(const Program *p, const char *reads, int n,
                           void *const *const *slots)
{
    size_t bytes = 0;
    for (int c = 0; c < n; c++)
        for (int s = 0; s < p->nslots; s++)
            if (reads[s] && !shares_slot(slots, c, s))
                bytes += (size_t)p->slot_bytes[s];
    return bytes;
}

/* Whether the team's memory for the stretch [0, i1) of n cores stays
 * within REDO_MAX_BYTES (device/redo.h): the copies of every job in the ring, and an
 * arena for each core's result and each thread's attempt (a team of the
 * most threads). */
static int redo_fits(const Program *p, int i1, int n, void *const *const *slots)
{
    char *reads = xmalloc((size_t)p->nslots);
    stretch_reads(p, 0, i1, reads);
    size_t copies = copies_bytes(p, reads, n, slots);
    free(reads);
    size_t arenas = (size_t)(n + REDO_MAX_THREADS) * p->arena_bytes;
    return REDO_RING * copies + arenas <= REDO_MAX_BYTES;
}

/* Job gen's entry: the stretch, and copies of the slots it reads on each
 * of n cores; a slot the cores share, one copy they share. */
static void core_job_set(unsigned gen, const Program *p, int i0, int i1, int n,
                         void *const *const *slots)
{
    struct core_job *j = &core_jobs[gen % REDO_RING];
    size_t nslots = (size_t)p->nslots;
    char *reads = xmalloc(nslots);
    stretch_reads(p, i0, i1, reads);
    size_t bytes = copies_bytes(p, reads, n, slots);
    if (n * nslots > j->slots_cap) {
        free(j->slots);
        j->slots = xcalloc(n * nslots, sizeof *j->slots);
        j->slots_cap = n * nslots;
    }
    if (bytes > j->copies_cap) {
        free(j->copies);
        j->copies = xaligned_alloc(bytes);
        j->copies_cap = bytes;
    }
    unsigned char *at = j->copies;
    for (int c = 0; c < n; c++)
        for (size_t s = 0; s < nslots; s++) {
            void **copy = &j->slots[c * nslots + s];
            if (!reads[s]) {
                *copy = NULL;
            } else if (shares_slot(slots, c, (long)s)) {
                *copy = j->slots[s]; /* core 0's */
            } else {
                *copy = at;
                memcpy(at, slots[c][s], (size_t)p->slot_bytes[s]);
                at += p->slot_bytes[s];
            }
        }
    free(reads);
    j->p = p, j->i0 = i0, j->i1 = i1;
}

/* The stretch [0, i1) of n cores, transfers in included, by the redo
 * team: arena[c] becomes core c's result, the arena of the attempt won[c]
 * (arena_give it back after the program). Returns the clock after the
 * copies, which count as the transfer in. */
static double redo_stretch(const Program *p, int i1, int n, unsigned char **arena, void **won,
                           void *const *const *slots)
{
    unsigned gen = redo_begin();
    double t0 = now_seconds();
    core_job_set(gen, p, 0, i1, n, slots);
    double t1 = now_seconds();
    xs_metric_add(M_TO_DEVICE, t1 - t0);
    redo_run(gen, n, &core_work, won);
    for (int c = 0; c < n; c++) {
        const struct attempt_arena *a = won[c];
        arena[c] = a->at;
        xs_core_ran(c, a->seconds);
        for (int r = 0; r < a->nruns; r++) /* the winner's kernels, when watched */
            xs_kernel_ran(&a->runs[r], c);
    }
    return t1;
}

/* ---- the eager device's attempts ----
 * An eager kernel runs where the model's graph records it. On a lent
 * board (model/eager_board.c) the graph is an attempt's at a core, run by
 * a member of the redo team: this thread's attempt, while one is on. */
static _Thread_local struct attempt_arena *eager_run;
static _Thread_local unsigned eager_gen;
static _Thread_local int eager_core, eager_gave_up;
static _Thread_local double eager_t0;

void xs_attempt_begin(unsigned gen, int core)
{
    eager_run = arena_take(0); /* its kernels' records; the graph holds the values */
    eager_run->nruns = 0;
    eager_gen = gen, eager_core = core, eager_gave_up = 0;
    eager_t0 = now_seconds();
}

XsAttempt *xs_attempt_end(void)
{
    struct attempt_arena *a = eager_run;
    eager_run = NULL;
    a->seconds = now_seconds() - eager_t0;
    if (eager_gave_up) {
        arena_give(a);
        return NULL;
    }
    return a;
}

void xs_attempt_report(const XsAttempt *a, int core)
{
    xs_core_ran(core, a->seconds);
    for (int r = 0; r < a->nruns; r++)
        xs_kernel_ran(&a->runs[r], core);
}

void xs_attempt_free(XsAttempt *a)
{
    if (a)
        arena_give(a);
}

/* A kernel of this thread's attempt: skipped, and every one after it,
 * once another attempt has the core's result (what the graph records
 * from then on is never read). */
static void attempt_exec(struct attempt_arena *a, const struct kinstr *k)
{
    if (eager_gave_up || (eager_gave_up = redo_finished(eager_gen, eager_core)))
        return;
    int watched = xs_watching();
    double k0 = watched ? now_seconds() : 0;
    xs_dispatch(k);
    if (watched)
        attempt_keep_run(a, xs_kernel_run_of(k, k0, now_seconds()));
    redo_progressed(eager_core);
}

void xs_exec(const struct kinstr *k)
{
    if (eager_run)
        attempt_exec(eager_run, k);
    else
        exec_on_core(k, 0);
}

void xs_set_redo(int threads) { redo_set_threads(threads); }
int xs_redo_fits(void) { return last_fit; }

void xs_run_replicated(const Program *p, int n, void *const *const *slots)
{
    unsigned char *arena[XS_MAX_CORES];
    void *won[XS_MAX_CORES];
    n = n < 1 ? 1 : n;
    int first = 0; /* the first all-reduce */
    while (first < p->n && !is_collective(p->ins[first].op))
        first++;
    if (n > 1 && first > 0 && p != fit_for) {
        fit_for = p;
        last_fit = redo_fits(p, first, n, slots);
    }
    int redo = n > 1 && first > 0 && redo_threads() && redo_safe(p, 0, first) && last_fit;
    double t0;
    if (redo) {
        t0 = redo_stretch(p, first, n, arena, won, slots);
    } else {
        for (int c = 0; c < n; c++)
            arena[c] = device_arena(c, p->arena_bytes);
        transfer_all(p, n, arena, slots, 1);
        t0 = now_seconds();
    }
    int once = 0; /* the last stretch ran on core 0 for every core */
    for (int i = redo ? first : 0; i < p->n;) {
        int j = i;
        while (j < p->n && !is_collective(p->ins[j].op))
            j++;
        if (j > i) {
            once = n > 1 && writes_shared_slot(p, i, j, n, slots);
            run_stretch(p, i, j, once ? 1 : n, arena, slots);
        }
        i = j < p->n ? run_all_reduces(p, j, n, arena, slots) : j;
    }
    xs_metric_add(n > 1 ? M_EXECUTE_REPLICATED : M_EXECUTE, now_seconds() - t0);
    transfer_all(p, once ? 1 : n, arena, slots, 0); /* the host reads core 0's outputs */
    if (redo)
        for (int c = 0; c < n; c++)
            arena_give(won[c]);
}
