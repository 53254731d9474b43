/* watch/trial.c: fewer threads on a busy machine (trial.h). */
#include "watch/trial.h"
#include "util/threads.h"
#include <omp.h>
#include <string.h>

static void run_threads(ThreadTrial *t, int n)
{
    t->now = n;
    omp_set_num_threads(n);
}

void trial_start(ThreadTrial *t)
{
    memset(t, 0, sizeof *t);
    t->full = t->now = omp_get_max_threads();
    t->cores = affinity_cores();
    t->since = t->every = TRIAL_RETRY; /* the first trial may come at once */
}

/* At a window's end: a trial judged, or one begun. */
static int after_window(ThreadTrial *t)
{
    const Pace *p = &t->pace;
    t->since++;
    if (t->trying) {
        t->trying = 0;
        if (!(p->median < TRIAL_GAIN * t->ref_ms)) { /* no gain: back */
            run_threads(t, t->now == 1 ? t->full : 1);
            t->every = 2 * t->every < TRIAL_RETRY_MAX ? 2 * t->every : TRIAL_RETRY_MAX;
            return 0;
        }
        t->every = TRIAL_RETRY;
        return 1;
    }
    int due = t->since >= t->every;
    if (t->now == 1 && p->idle_cores >= 0 && p->idle_cores < TRIAL_SPARE)
        due = 0; /* every core taken: more threads would find none */
    if (t->now > 1 && t->now <= t->cores && p->others_running == 0)
        due = 0; /* no other program wants a core, and the threads have a core each: they
                  * waited on one another's (as new threads may, before the kernel spreads
                  * them) */
    if (due && (t->now == 1 || p->busy || p->waited >= PACE_CONTENDED)) {
        t->ref_ms = p->median;
        t->trying = 1;
        t->since = 0;
        run_threads(t, t->now == 1 ? t->full : 1);
    }
    return 0;
}

TrialNews trial_unit(ThreadTrial *t, double ms)
{
    TrialNews news = {0, 0};
    if (t->units++ == 0) {
        pace_start(&t->pace); /* the first unit compiled: the pace starts after it */
        return news;
    }
    int windows = t->pace.windows, trying = t->trying;
    news.pace = pace_step(&t->pace, ms, t->now, trying);
    if (t->full > 1 && t->pace.windows != windows)
        news.kept = after_window(t);
    return news;
}
