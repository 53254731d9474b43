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
 * again only after a window that left TRIAL_SPARE of a core idle,
 * machine-wide (where /proc does not say, regardless): while the other
 * programs take every core, more threads would find none. Any thread
 * count gives the same bits. */
#ifndef WATCH_TRIAL_H
#define WATCH_TRIAL_H
#include "watch/pace.h"

#define TRIAL_RETRY 8      /* windows before the first trial's sequel */
#define TRIAL_RETRY_MAX 64 /* windows between trials at the most */
#define TRIAL_GAIN 0.95    /* a trial's count is kept when this much faster */
#define TRIAL_SPARE 0.5    /* idle cores over a window that make a trial worth it */

typedef struct ThreadTrial {
    Pace pace;     /* the units' pace; started after the first unit */
    int units;     /* units timed so far (the first, which compiles, is not) */
    int full, now; /* the count at the start; the count running */
    int cores;     /* the cores this process may run on (its affinity) */
    int trying;    /* this window tries `now` against ref_ms */
    double ref_ms; /* the median unit of the window before the trial */
    int since;     /* windows since the last trial */
    int every;     /* windows between trials now */
} ThreadTrial;

/* What one unit's end brought (trial_unit's result). */
typedef struct TrialNews {
    int pace;      /* +1: the pace has just turned busy, -1: back; 0 */
    int kept;      /* a trial has just kept its count, t->now (ref_ms: the other's) */
} TrialNews;

/* Starts on OpenMP's current thread count; the pace starts with the
 * first unit's end (trial_unit). */
void trial_start(ThreadTrial *t);

/* One unit of ms milliseconds has ended: pace it, and try or keep a thread
 * count at a window's end. The first unit after trial_start only starts
 * the pace (it traces and compiles). */
TrialNews trial_unit(ThreadTrial *t, double ms);

#endif
