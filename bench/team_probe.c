/* bench/team_probe.c: what a step's joins cost beside a busy process,
 * apart from gpt (issue 60's "what was tried").
 *
 * A synthetic step: 140 parallel regions of 16 equal chunks of arithmetic
 * (about 3 us each), each region a join, as a default training step is
 * some 140 kernels of 20-100 us. Three ways to run it:
 *
 *   omp   an OpenMP region per kernel, chunks shared dynamically, the
 *         runtime's own join (as gpt's kernels run);
 *   team  one persistent team for the program: a thread claims chunks
 *         with an atomic counter and waits only for chunks claimed and
 *         not yet done; a thread the scheduler held off catches up
 *         without anyone waiting for it to arrive. A waiting thread
 *         spins SPIN pauses, then sleeps on a futex (or, with yield,
 *         calls sched_yield instead).
 *   redo  the same team, but a thread that has waited SPIN pauses for a
 *         chunk another claimed runs that chunk itself (the arithmetic
 *         gives the same result whoever runs it; whichever finishes first
 *         counts it, the other gives up at its next sixteenth), so that no
 *         thread ever waits for one the scheduler holds off: the ceiling
 *         of a schedule that keeps its threads working beside a busy
 *         process. A real kernel could do this only if a late thread's
 *         stores could not land once its chunk was redone.
 *
 * PROBE_SHAPE="REGIONS CHUNKS WORK" gives the step another shape, for
 * example "1 8 672000": one region of 8 long chunks, as a step run as 8
 * simulated cores' programs would be.
 *
 * It prints ms a step and the cores the process got (its CPU time over
 * its wall time). Run it alone and beside `sh -c 'while :; do :; done'`,
 * in the same session and under setsid:
 *
 *   make bench/team_probe            (x86-64: it pauses with the x86 pause)
 *   bench/team_probe omp|team|redo THREADS STEPS [SPIN [yield]]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <linux/futex.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The step's shape (PROBE_SHAPE sets another) */
enum { MAX_REGIONS = 512, MAX_CHUNKS = 64, PIECES = 16 /* a chunk's checks for a redo */ };
static int regions = 140, chunks = 16, chunk_work = 2400; /* dependent multiply-adds, ~3 us */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile float sink;

/* Runs chunk i of region r; in redo, gives up (0) between pieces once the
 * chunk is finished in step g by another thread. */
static int chunk(int region, int i, unsigned g);

static void omp_step(void)
{
    for (int r = 0; r < regions; r++) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < chunks; i++)
            chunk(r, i, 0);
    }
}

/* ---- the persistent team ----
 * Each region's counters carry the step's generation in their high half,
 * so a thread still in an old step sees that it fell behind and leaves. */
static int spin_limit = 2000, yield_to_wait, redo_held;
static atomic_uint job;                   /* the step's generation; futex word */
static atomic_uint progress;              /* regions completed; futex word */
static atomic_int sleepers;               /* threads asleep on progress */
static _Atomic unsigned long long claimed[MAX_REGIONS], done[MAX_REGIONS];
/* redo: each chunk's step once it is finished, so that a chunk run twice
 * counts once */
static _Atomic unsigned long long finished_in[MAX_REGIONS][MAX_CHUNKS];

static void futex_wait(atomic_uint *word, unsigned seen)
{
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1 << 30, NULL, NULL, 0);
}

static unsigned generation(unsigned long long v) { return (unsigned)(v >> 32); }

static unsigned count(unsigned long long v) { return (unsigned)v; }

/* Generations only grow: a chunk finished in step g or a later one is
 * done for a thread still in step g. */
static int finished_since(int r, int i, unsigned g) { return atomic_load(&finished_in[r][i]) >= g; }

static int chunk(int region, int i, unsigned g)
{
    float a = (float)region + 0.5f * (float)i;
    for (int piece = 0; piece < PIECES; piece++) {
        if (redo_held && finished_since(region, i, g))
            return 0;
        for (int k = 0; k < chunk_work / PIECES; k++)
            a = a * 1.0001f + 0.5f;
    }
    sink = a;
    return 1;
}

/* Counts chunk i of region r in step g done, once however many ran it,
 * and not at all by a thread that resumes after step g is over. */
static void finish_chunk(int r, int i, unsigned g)
{
    unsigned long long p = atomic_load(&finished_in[r][i]);
    while (p < g)
        if (atomic_compare_exchange_weak(&finished_in[r][i], &p, g)) {
            if ((int)count(atomic_fetch_add(&done[r], 1) + 1) == chunks) {
                atomic_fetch_add(&progress, 1);
                if (atomic_load(&sleepers))
                    futex_wake_all(&progress);
            }
            return;
        }
}

/* redo: runs the chunks of region r that are claimed and not finished. */
static void redo_held_chunks(int r, unsigned g)
{
    unsigned long long c = atomic_load(&claimed[r]);
    if (generation(c) != g)
        return;
    for (int i = 0; i < (int)count(c) && i < chunks; i++)
        if (!finished_since(r, i, g) && chunk(r, i, g))
            finish_chunk(r, i, g);
}

/* Claims and runs chunks of region r in step g; 0 once the step is over. */
static int work_region(int r, unsigned g)
{
    for (;;) {
        unsigned long long v = atomic_load(&claimed[r]);
        if (generation(v) != g)
            return 0;
        if ((int)count(v) >= chunks)
            return 1;
        if (!atomic_compare_exchange_weak(&claimed[r], &v, v + 1))
            continue;
        if (chunk(r, (int)count(v), g))
            finish_chunk(r, (int)count(v), g);
    }
}

/* Waits for the chunks of region r others hold; 0 once the step is over. */
static int wait_region(int r, unsigned g)
{
    for (int spins = 0;; spins++) {
        unsigned seen = atomic_load(&progress);
        unsigned long long d = atomic_load(&done[r]);
        if (generation(d) != g)
            return 0;
        if ((int)count(d) >= chunks)
            return 1;
        if (spins < spin_limit) {
            __builtin_ia32_pause();
        } else if (redo_held) {
            redo_held_chunks(r, g);
            spins = 0;
        } else if (yield_to_wait) {
            sched_yield();
        } else {
            atomic_fetch_add(&sleepers, 1);
            d = atomic_load(&done[r]);
            if (generation(d) == g && (int)count(d) < chunks)
                futex_wait(&progress, seen);
            atomic_fetch_sub(&sleepers, 1);
        }
    }
}

static void run_job(unsigned g)
{
    for (int r = 0; r < regions; r++)
        if (!work_region(r, g) || !wait_region(r, g))
            return;
}

static void *team_member(void *arg)
{
    (void)arg;
    for (unsigned seen = 0;;) {
        unsigned g;
        for (int spins = 0; (g = atomic_load(&job)) == seen; spins++)
            if (spins < 4 * spin_limit)
                __builtin_ia32_pause();
            else
                futex_wait(&job, g);
        seen = g;
        run_job(g);
    }
    return NULL;
}

static void team_step(void)
{
    static unsigned g;
    g++;
    for (int r = 0; r < regions; r++) {
        atomic_store(&claimed[r], (unsigned long long)g << 32);
        atomic_store(&done[r], (unsigned long long)g << 32);
    }
    atomic_store(&job, g);
    futex_wake_all(&job);
    run_job(g);
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "omp") && strcmp(argv[1], "team") && strcmp(argv[1], "redo"))) {
        fprintf(stderr, "usage: team_probe omp|team|redo THREADS STEPS [SPIN [yield]]\n");
        return 2;
    }
    redo_held = !strcmp(argv[1], "redo");
    const char *shape = getenv("PROBE_SHAPE");
    if (shape && (sscanf(shape, "%d %d %d", &regions, &chunks, &chunk_work) != 3 ||
                  regions < 1 || regions > MAX_REGIONS || chunks < 1 || chunks > MAX_CHUNKS ||
                  chunk_work < PIECES)) {
        fprintf(stderr, "team_probe: PROBE_SHAPE: expected \"REGIONS CHUNKS WORK\" with at most "
                        "%d regions, %d chunks and at least %d work\n", MAX_REGIONS, MAX_CHUNKS, PIECES);
        return 2;
    }
    int team = strcmp(argv[1], "omp") != 0, threads = atoi(argv[2]), steps = atoi(argv[3]);
    if (argc > 4)
        spin_limit = atoi(argv[4]);
    yield_to_wait = argc > 5 && !strcmp(argv[5], "yield");
    if (team)
        for (int t = 1; t < threads; t++) {
            pthread_t id;
            pthread_create(&id, NULL, team_member, NULL);
        }
    else
        omp_set_num_threads(threads);
    double t0 = now();
    for (int s = 0; s < steps; s++)
        team ? team_step() : omp_step();
    double wall = now() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                 (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    printf("%s, %d threads: %.3f ms a step, %.2f cores\n", argv[1], threads, 1e3 * wall / steps,
           cpu / wall);
    return 0;
}
