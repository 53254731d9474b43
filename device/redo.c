/* device/redo.c: a team that redoes the units a held thread has not
 * finished (redo.h). bench/README.md, "Under load", sixth to eighth
 * rounds, has the measurements behind it. */
#include "device/redo.h"
#include "pod/error.h"
#include "util/threads.h"
#include "util/util.h"
#include <linux/futex.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <math.h>
#include <time.h>

/* Pauses a thread spins on a job's start before it sleeps: about as long
 * as the gap between two programs of a step. */
#define REDO_SPIN 2000

struct job {
    int units;
    const RedoWork *work;
    atomic_uint running; /* its attempts not yet returned; a futex word */
};

static struct {
    int threads;                         /* the team's, the caller's thread included */
    pthread_t worker[REDO_MAX_THREADS];
    atomic_uint gen;                     /* the newest job; a futex word */
    atomic_int stop;
    _Atomic unsigned long long handed;   /* gen << 32 | its fresh units handed out */
    atomic_uint finished_in[REDO_MAX_UNITS]; /* the newest job each unit has a result in */
    atomic_uint progress[REDO_MAX_UNITS];    /* pieces done on each unit, any attempt */
    atomic_uint left;                    /* units of the newest job without a result; futex */
    void **result;                       /* the newest job's results, the caller's array */
    struct job ring[REDO_RING];
    atomic_long units, redone, given_up;
    atomic_uint unit_us; /* a winning attempt's time, averaged over the last few */
} team;

static unsigned next_gen; /* the caller's: the generation redo_begin hands out next */

/* A spinning thread's hint to the core (x86 pause, Arm yield): the
 * sibling hyperthread, or the power, gets the cycles. */
static inline void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void futex_wait(atomic_uint *word, unsigned seen)
{
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

/* As futex_wait, for at most `us` microseconds. */
static void futex_wait_us(atomic_uint *word, unsigned seen, double us)
{
    long ns = (long)(us * 1e3);
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

static void futex_wake_all(atomic_uint *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1 << 30, NULL, NULL, 0);
}

int redo_finished(unsigned gen, int unit) { return atomic_load(&team.finished_in[unit]) >= gen; }

void redo_progressed(int unit)
{
    atomic_fetch_add_explicit(&team.progress[unit], 1, memory_order_relaxed);
}

/* One attempt at a unit; the first to finish gives it its result. */
static void attempt(unsigned gen, int unit, int redoing)
{
    struct job *j = &team.ring[gen % REDO_RING];
    /* counted before the check: a job's entry is reused (redo_begin) only
     * once its units are finished and its count is back at 0 */
    atomic_fetch_add(&j->running, 1);
    void *r = NULL;
    double t0 = now_seconds();
    if (!redo_finished(gen, unit)) {
        if (redoing)
            atomic_fetch_add(&team.redone, 1);
        if (!(r = j->work->attempt(gen, unit)))
            atomic_fetch_add(&team.given_up, 1);
    }
    if (r) {
        unsigned f = atomic_load(&team.finished_in[unit]);
        int won = 0;
        while (f < gen && !(won = atomic_compare_exchange_weak(&team.finished_in[unit], &f, gen)))
            ;
        if (won) {
            unsigned us = (unsigned)(1e6 * (now_seconds() - t0)), was = atomic_load(&team.unit_us);
            atomic_store(&team.unit_us, was ? was - was / 4 + us / 4 : us); /* a race loses one */
            team.result[unit] = r;
            atomic_fetch_sub(&team.left, 1);
            futex_wake_all(&team.left); /* the caller at 0; a sleeping member at each */
        } else {
            j->work->discard(r);
        }
    }
    if (atomic_fetch_sub(&j->running, 1) == 1)
        futex_wake_all(&j->running);
}

/* A team member's part of job gen: fresh units while there are any, then
 * the held ones, until every unit has a result. */
static void take_part(unsigned gen)
{
    const struct job *j = &team.ring[gen % REDO_RING];
    for (;;) {
        unsigned long long h = atomic_load(&team.handed);
        if ((unsigned)(h >> 32) != gen || (int)(unsigned)h >= j->units)
            break;
        if (atomic_compare_exchange_weak(&team.handed, &h, h + 1))
            attempt(gen, (int)(unsigned)h, 0);
    }
    unsigned seen[REDO_MAX_UNITS];
    double since[REDO_MAX_UNITS], t = now_seconds();
    for (int u = 0; u < j->units; u++)
        seen[u] = atomic_load(&team.progress[u]), since[u] = t;
    /* a held unit is redone once its stall could have run a share of a
     * whole attempt: a long unit's holder resumes (the scheduler's slice
     * is milliseconds) long before a fresh attempt would end */
    double stall = 1e-6 * fmax(REDO_STALL_US, atomic_load(&team.unit_us) / REDO_UNIT_SHARE);
    for (int waiting = 1; waiting && atomic_load(&team.gen) == gen;) {
        waiting = 0;
        unsigned left = atomic_load(&team.left);
        double next = INFINITY; /* the time to the first stall that may be due */
        t = now_seconds();
        for (int u = 0; u < j->units; u++) {
            if (redo_finished(gen, u))
                continue;
            waiting = 1;
            unsigned at = atomic_load_explicit(&team.progress[u], memory_order_relaxed);
            if (at != seen[u]) {
                seen[u] = at, since[u] = t;
            } else if (t - since[u] >= stall) {
                attempt(gen, u, 1);
                since[u] = t = now_seconds();
            }
            next = fmin(next, since[u] + stall - t);
        }
        /* every unit left runs, on a thread of its own: sleep rather than
         * spin when no stall may be due for a while, so that their threads
         * get this one's core (a busy program may share them) */
        if (waiting && next > 1e-6 * REDO_SLEEP_US)
            futex_wait_us(&team.left, left, 1e6 * next);
        else
            spin_pause();
    }
}

static void *worker(void *arg)
{
    unsigned seen = (unsigned)(uintptr_t)arg;
    omp_set_num_threads(1); /* a unit's kernels on this thread alone */
    for (;;) {
        unsigned gen;
        for (int spins = 0; (gen = atomic_load(&team.gen)) == seen && !atomic_load(&team.stop);
             spins++)
            if (spins < REDO_SPIN)
                spin_pause();
            else
                futex_wait(&team.gen, gen);
        if (atomic_load(&team.stop))
            return NULL;
        seen = gen;
        take_part(gen);
    }
}

void redo_set_threads(int threads)
{
    threads = threads > REDO_MAX_THREADS ? REDO_MAX_THREADS : threads < 2 ? 0 : threads;
    if (threads == team.threads)
        return;
    if (team.threads) {
        /* the stop moves the word the members sleep on: a member between
         * its look at the flag and its sleep finds the word changed and
         * looks again, where a wake-up alone would come before its sleep
         * (the job's entry of this generation is never used) */
        atomic_store(&team.stop, 1);
        atomic_store(&team.gen, ++next_gen);
        futex_wake_all(&team.gen);
        for (int t = 1; t < team.threads; t++)
            pthread_join(team.worker[t], NULL);
        atomic_store(&team.stop, 0);
    }
    team.threads = threads;
    /* the caller is a member too; the others inherit its slice */
    thread_request_slice(threads ? REDO_SLICE_US : 0);
    for (int t = 1; t < threads; t++)
        if (pthread_create(&team.worker[t], NULL, worker,
                           (void *)(uintptr_t)atomic_load(&team.gen)))
            die(1, "cannot start the redo team's thread %d of %d", t, threads - 1);
}

int redo_threads(void) { return team.threads; }

unsigned redo_begin(void)
{
    unsigned gen = ++next_gen;
    struct job *j = &team.ring[gen % REDO_RING];
    for (unsigned r; (r = atomic_load(&j->running)) != 0;)
        futex_wait(&j->running, r);
    return gen;
}

void redo_run(unsigned gen, int units, const RedoWork *w, void **result)
{
    struct job *j = &team.ring[gen % REDO_RING];
    j->units = units;
    j->work = w;
    team.result = result;
    atomic_fetch_add(&team.units, units);
    atomic_store(&team.left, (unsigned)units);
    atomic_store(&team.handed, (unsigned long long)gen << 32);
    atomic_store(&team.gen, gen);
    futex_wake_all(&team.gen);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    take_part(gen);
    omp_set_num_threads(threads);
    for (unsigned left; (left = atomic_load(&team.left)) != 0;)
        futex_wait(&team.left, left);
}

void redo_quiesce(void)
{
    for (int i = 0; i < REDO_RING; i++)
        for (unsigned r; (r = atomic_load(&team.ring[i].running)) != 0;)
            futex_wait(&team.ring[i].running, r);
}

RedoStats redo_stats(void)
{
    return (RedoStats){atomic_load(&team.units), atomic_load(&team.redone),
                       atomic_load(&team.given_up)};
}
