/* device/redo.h: a team of threads that runs a job's units and redoes
 * the ones a held thread has not finished (a leaf of the device layer: it
 * knows units, not programs; xla_sim.c makes each simulated core's
 * program a unit).
 *
 * Beside a busy program the scheduler takes a thread off its core for
 * milliseconds, and whatever unit it holds then would hold the whole step
 * up. Here a thread with no fresh unit left starts another attempt at a
 * unit whose attempts have made no progress for a while (longer for long
 * units, whose held thread resumes long before a fresh attempt would end;
 * until then it sleeps, leaving its core to the units' threads); the
 * first attempt to finish is the unit's result, and the others give up at
 * their next check (redo_finished). An attempt computes from inputs that
 * nothing changes while it may run and writes only memory of its own, so
 * a unit's result is the same whichever attempt wins: the same bits.
 *
 * A job's attempts may outlive redo_run (a held thread resumes after its
 * unit was finished by another): the caller keeps a job's inputs in an
 * entry of a ring of REDO_RING, which redo_begin hands back only once the
 * job that used it last has no attempt running. */
#ifndef DEVICE_REDO_H
#define DEVICE_REDO_H

#define REDO_RING 16       /* jobs whose late attempts may still be running */
#define REDO_MAX_UNITS 64  /* units a job (XS_MAX_CORES) */
#define REDO_MAX_THREADS 8
/* A unit without progress this long is redone, or, for longer units, for
 * a 1/REDO_UNIT_SHARE part of a winning attempt's time; a member with no
 * stall due for REDO_SLEEP_US sleeps until one may be, or a unit ends. */
#define REDO_STALL_US 100
#define REDO_UNIT_SHARE 32
#define REDO_SLEEP_US 1000
/* The time slice each member asks of the scheduler (util/threads.h): a
 * member runs a step's units between its sleeps, 10-20 ms of the default
 * config's step beside a busy program; cut at the kernel's default slice
 * (1.4 ms on 2 cores), nearly every unit stalled once, and the team
 * redid 580 of 2,600 units in 300 steps, against 400 with this
 * (bench/README.md, "Under load", twenty-second round). */
#define REDO_SLICE_US 20000
/* Fewer units than this leave a team little to share out: a redone unit
 * would repeat too large a part of the job. */
#define REDO_MIN_UNITS 4
/* The team's arenas and copies of the cores' programs (xla_sim.c), at
 * most: a larger model keeps the plain schedule (and the trial finds the
 * team no faster). */
#define REDO_MAX_BYTES ((size_t)1 << 30)

typedef struct RedoWork {
    /* Attempts unit `unit` of job `gen`; returns its result, or NULL if it
     * gave up because redo_finished(gen, unit) said another attempt won. */
    void *(*attempt)(unsigned gen, int unit);
    /* Takes back the result of an attempt that finished second. */
    void (*discard)(void *result);
} RedoWork;

/* The team of `threads` (the caller's included), started or resized;
 * 0 stops it and joins its threads (their late attempts end first). */
void redo_set_threads(int threads);
int redo_threads(void); /* 0: no team */

/* The next job's generation. Its ring entry gen % REDO_RING is free: no
 * attempt of an older job that used it is still running. */
unsigned redo_begin(void);
/* Runs units 0..units-1 of job gen on the team and the calling thread;
 * returns when each has a result, result[u] unit u's. */
void redo_run(unsigned gen, int units, const RedoWork *w, void **result);
/* Waits until no attempt of any job is running. */
void redo_quiesce(void);

/* For an attempt: whether another attempt has finished the unit (give
 * up), and a mark of progress after each piece of work. */
int redo_finished(unsigned gen, int unit);
void redo_progressed(int unit);

/* What the team did, for the run's summary. */
typedef struct RedoStats {
    long units;    /* units of every job */
    long redone;   /* attempts started on a unit another attempt held */
    long given_up; /* attempts that stopped because another had finished */
} RedoStats;
RedoStats redo_stats(void);

#endif
