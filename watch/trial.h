/* watch/trial.h: fewer threads on a busy machine (a leaf: it reads the
 * pace, watch/pace.h, and the affinity's cores, util/threads.h, and sets
 * OpenMP's thread count).
 *
 * A training step, an eval's forward pass, a sampled byte: each is some
 * tens to hundreds of short parallel regions, each as slow as its slowest
 * thread, and another program may hold a thread off its core. A loop of
 * such units paces them (watch/pace.h); when the pace says busy, or the
 * threads waited PACE_CONTENDED of a window for their cores while another
 * program's threads were runnable (or the threads outnumber the cores the
 * process may use), the next window runs on one thread and the faster
 * count is kept. Another trial
 * comes TRIAL_RETRY windows later (the other program may have ended),
 * twice as late after each trial that changed nothing, up to
 * TRIAL_RETRY_MAX. Running on one thread, the loop tries its full count
 * again only once the pace's last span of PACE_IDLE_MS or more left
 * TRIAL_SPARE of a core idle, machine-wide (where /proc does not say,
 * regardless): while the other programs take every core, more threads
 * would find none. Any thread count gives the same bits.
 *
 * A caller that can run a redo team (xla_sim.h's xs_set_redo: simulated
 * cores whose programs a waiting thread redoes) offers it in `redo`. A
 * busy run then tries the team first, and from one thread tries it while
 * another program's threads are runnable; from the team it tries the full
 * count once no other program's threads are, else one thread if the team
 * ran on less than TRIAL_ONE_CORE cores' time (Pace's cores_used). The caller
 * reads `redoing` after each unit and runs the team or not; its threads
 * give the same bits too. When the team loses to the full count, or beats
 * it on less than TRIAL_ONE_CORE cores' time, one thread is tried at once
 * in turn (against the faster); and a window TRIAL_GAIN slower than the
 * schedule was when the last trial was judged makes the next trial due at
 * once: the other programs have changed (or the first windows, before the
 * kernel had shared the cores out, flattered it). */
#ifndef WATCH_TRIAL_H
#define WATCH_TRIAL_H
#include "watch/pace.h"

#define TRIAL_RETRY 8      /* windows before the first trial's sequel */
#define TRIAL_RETRY_MAX 64 /* windows between trials at the most */
#define TRIAL_GAIN 0.95    /* a trial's count is kept when this much faster */
#define TRIAL_SPARE 0.5    /* idle cores over a window that make a trial worth it */
/* A redo team that ran on less CPU time than this many cores' may lose to
 * one thread (which its redone work does not burden) */
#define TRIAL_ONE_CORE 1.15

/* What a window runs: OpenMP's full count, one thread, or the redo team
 * (with one OpenMP thread for what it does not run). */
enum trial_schedule { RUN_FULL, RUN_ONE, RUN_REDO };

typedef struct ThreadTrial {
    Pace pace;     /* the units' pace; started after the first unit */
    int units;     /* units timed so far (the first, which compiles, is not) */
    int full, now; /* the count at the start; the count running */
    int cores;     /* the cores this process may run on (its affinity) */
    int redo;      /* the redo team's threads the caller offers; 0: none */
    int redoing;   /* the redo team runs (now is 1, unless fixed) */
    int fixed;     /* the schedule was given (--redo, or OMP_DYNAMIC=false): no trials */
    int before;    /* the schedule before the last trial (enum trial_schedule) */
    int failed;    /* the schedule the last trial found no faster, or -1 */
    int trying;    /* this window tries the schedule against ref_ms */
    double ref_ms; /* the median unit of the window before the trial */
    double kept_ms; /* the schedule's median when the last trial was judged; 0: none */
    int since;     /* windows since the last trial */
    int every;     /* windows between trials now */
    int started_one; /* started on one thread: every other busy program was
                      * in another scheduling group */
    int started_shared; /* other programs ran in this process's scheduling
                         * group as it started, on two cores or more (the
                         * caller may start the team at once: trial_start_team) */
    int shared_threads; /* their runnable threads then */
} ThreadTrial;

/* What one unit's end brought (trial_unit's result). */
typedef struct TrialNews {
    int pace;      /* +1: the pace has just turned busy, -1: back; 0 */
    int kept;      /* a trial has just kept its schedule: */
    int schedule;  /* ... this one (enum trial_schedule), a unit taking ms */
    double ms;
    int other;     /* ... over the one it ran before, other_ms */
    double other_ms;
} TrialNews;

/* Starts on OpenMP's current thread count, or on one thread when every
 * other running program is in another scheduling group (started_one);
 * the pace starts with the first unit's end (trial_unit). */
void trial_start(ThreadTrial *t);

/* Runs the redo team of `redo` threads from the next unit, without a
 * trial: for a run that started beside busy programs of its own
 * scheduling group (started_shared), where the first window's trial would
 * try the team next and a short run would spend its start on the way. The
 * second window's end judges it as any window on the team (trial_next). */
void trial_start_team(ThreadTrial *t, int redo);

/* The redo team's threads for the caller to offer, at most `most`: a
 * thread more than the full count for each busy thread of its scheduling
 * group as it started, one at least. In a group the kernel shares the
 * cores out by thread, and a team that takes its share leaves its held
 * units fewer threads to wait for (bench/README.md, "Under load",
 * nineteenth round). */
int trial_team(const ThreadTrial *t, int most);

/* Runs one thread from the next unit, without a trial: for a caller with
 * no redo team to offer that started beside busy programs of its own
 * scheduling group (started_shared). Its full count would share the cores
 * with them and wait at every region's end for a thread they hold off its
 * core, as a trial after the first window would find; a short run (a
 * sampled passage) would be over first. The full count is tried once a
 * span of the pace's leaves a core idle. */
void trial_start_one(ThreadTrial *t);

/* The team offered no more (its memory would not fit): a run on it goes
 * back to the full count, and a given schedule is no longer fixed. */
void trial_withdraw_team(ThreadTrial *t);

/* The schedule running now (enum trial_schedule). */
int trial_schedule(const ThreadTrial *t);

/* The schedule a trial that is due would try after the window t->pace
 * has just judged, or -1: none. */
int trial_next(const ThreadTrial *t);

/* One unit of ms milliseconds has ended: pace it, and try or keep a thread
 * count at a window's end. The first unit after trial_start only starts
 * the pace (it traces and compiles). */
TrialNews trial_unit(ThreadTrial *t, double ms);

#endif
