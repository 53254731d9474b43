/* watch/pace.h: whether a run's steps have slowed because the machine is
 * busy, to say so on the live line and in the log (a leaf: it reads the
 * clock and /proc, nothing of gpt's).
 *
 * Steps are timed in windows of PACE_WINDOW, or of fewer where steps are
 * long (a window of about PACE_WINDOW_MS, at least PACE_MIN_WINDOW steps:
 * a large model's run gets its trial within seconds, not after 25 steps
 * of seconds each); a window's median against the fastest window's
 * median so far is the slowdown. The kernel's own
 * account says why: the time this process's threads sat runnable waiting
 * for a core (/proc/self/task/N/schedstat's run delay), as a share of the
 * window's time. Steps PACE_SLOW times slower, with threads kept from
 * their cores, is a busy machine; a window back within PACE_BACK of the
 * best ends it. How many cores sat idle (/proc/stat, the whole machine's)
 * says whether more threads would find a core: counted over a span of
 * PACE_IDLE_MS or more, since /proc/stat counts in ticks of 10 ms, which a
 * window of short units (a sampled byte: 0.2 ms) may not even see. */
#ifndef WATCH_PACE_H
#define WATCH_PACE_H

#define PACE_WINDOW 25  /* steps a window, at most */
#define PACE_WINDOW_MS 1000.0 /* fewer for steps past 40 ms: a window of about this */
#define PACE_MIN_WINDOW 3 /* steps; a median of 3 still sets one slow step aside */
/* The first window is short: beside a busy program, a run that starts on
 * too many threads learns it from its threads' wait within two steps (a
 * step on two threads beside one busy loop took 2.2x the step on one;
 * gpt train then tries one thread), not after a whole window. */
#define PACE_FIRST 2
#define PACE_SLOW 1.5   /* a window this much slower than the best is busy ... */
#define PACE_BACK 1.25  /* ... and this close to it again is not */
/* Threads kept from their cores this share of a window's time: other
 * programs want the cores, even where the run never saw a faster pace (it
 * started beside them). */
#define PACE_CONTENDED 0.10
/* The idle cores' span: 100 ms of /proc/stat's ticks put them within a
 * tenth of a core per CPU counted. */
#define PACE_IDLE_MS 100.0
#define PACE_IDLE_NO_PROC -1.0 /* idle_cores where /proc/stat does not say */
#define PACE_IDLE_PENDING -2.0 /* ... before a span since pace_new_span has ended */

typedef struct Pace {
    double ms[PACE_WINDOW]; /* this window's step times */
    int n;                  /* of them so far */
    int len;                /* this window's steps: PACE_FIRST, then PACE_WINDOW or
                             * fewer (the last median's steps in PACE_WINDOW_MS) */
    double best;            /* the fastest window median yet; 0 before one */
    double median;          /* the last whole window's median step, ms */
    int windows;            /* whole windows timed */
    double slowdown;        /* the last whole window's median / best */
    double waited;          /* its threads' run delay / (its wall time x threads) */
    double idle_cores;      /* the machine's idle CPU time over the last span of
                             * PACE_IDLE_MS or more to end with a window, in cores
                             * (every program's: /proc/stat); PACE_IDLE_NO_PROC or
                             * PACE_IDLE_PENDING */
    int others_running;     /* other programs' runnable threads as the window
                             * ended (/proc/loadavg less this process's); -1 unknown */
    int others_apart;       /* the other programs' running processes if every one is
                             * in another scheduling group (pace_others), else 0; -1
                             * unknown (pace_step leaves it so; watch/trial.c asks) */
    double cores_used;      /* this process's CPU time over the window's wall time */
    double delay0, t0, cpu0; /* run delay (s), clock and CPU time at the window's start */
    double idle_t0;         /* the clock at the idle cores' span's start */
    unsigned long long idle0, total0; /* /proc/stat's idle and all ticks then */
    int busy;               /* the state said last */
} Pace;

/* Starts the first window. A run calls it after its first step, which
 * traces and compiles and would tell nothing of the pace. */
void pace_start(Pace *p);
/* Starts the idle cores' span afresh (idle_cores pending): the schedule
 * has changed, and the idle cores of the one before would mislead. */
void pace_new_span(Pace *p);
/* One step of ms milliseconds on `threads` threads; at a window's end,
 * returns +1 when the run has just become busy, -1 when it has just
 * recovered, else 0. A trial window (another thread count tried) is timed
 * but judged against nothing: it says 0 and leaves the best and the state. */
int pace_step(Pace *p, double ms, int threads, int trial);
/* Other programs' running processes (state R, kernel threads aside), by
 * whether the kernel shares the cores with them in this process's
 * scheduling group (same) or in another (apart): another session's
 * autogroup, or another cgroup of the cpu controller. The kernel shares
 * the cores between groups first, so beside programs apart this process
 * gets its group's share whatever its thread count. -1 and -1 where
 * /proc does not say. */
void pace_others(int *same, int *apart);
/* The window's others_apart from pace_others, asked only when a trial is
 * due (a walk over /proc); its running processes also mend an
 * others_running of none (see pace.c). */
void pace_ask_others(Pace *p);
/* pace_others as the run starts, walked only when /proc/loadavg counts
 * other programs' runnable threads (else none and none). */
void pace_others_now(int *same, int *apart);

#endif
