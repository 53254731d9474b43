/* watch/trial.c: fewer threads on a busy machine (trial.h). */
#include "watch/trial.h"
#include "util/threads.h"
#include <omp.h>
#include <string.h>

static void run_schedule(ThreadTrial *t, int schedule)
{
    if (schedule != trial_schedule(t))
        pace_new_span(&t->pace);
    t->redoing = schedule == RUN_REDO;
    t->now = schedule == RUN_FULL ? t->full : 1;
    omp_set_num_threads(t->now);
}

int trial_schedule(const ThreadTrial *t)
{
    return t->redoing ? RUN_REDO : t->now == 1 ? RUN_ONE : RUN_FULL;
}

void trial_start(ThreadTrial *t)
{
    memset(t, 0, sizeof *t);
    t->full = t->now = omp_get_max_threads();
    t->cores = affinity_cores();
    t->since = t->every = TRIAL_RETRY; /* the first trial may come at once */
    t->failed = -1;
    if (!threads_dynamic()) { /* OMP_DYNAMIC=false: the count as chosen, no trials */
        t->fixed = 1;
        return;
    }
    /* Beside busy programs of other scheduling groups only, the kernel
     * gives this process its group's share whatever its thread count
     * (pace_others): one thread from the first unit, as a trial would find
     * after a window at the full count's pace. A core left idle brings the
     * full count's trial (trial_next). Beside busy programs of its own
     * group the caller may start the team at once (trial_start_team). */
    int same, apart;
    pace_others_now(&same, &apart);
    t->started_one = t->full > 1 && same == 0 && apart > 0;
    /* on one core the team's threads would only take turns */
    t->started_shared = t->full > 1 && t->cores > 1 && same > 0;
    t->shared_threads = same;
    if (t->started_one)
        run_schedule(t, RUN_ONE);
}

void trial_start_team(ThreadTrial *t, int redo)
{
    t->redo = redo;
    run_schedule(t, RUN_REDO);
    /* the first window, PACE_FIRST steps of threads just started, would
     * show the team too little CPU time (trial_next would try one thread
     * for a whole window): the next window's end judges it instead */
    t->since = t->every - 2;
}

int trial_team(const ThreadTrial *t, int most)
{
    int team = t->full + (t->shared_threads > 1 ? t->shared_threads : 1);
    return team < most ? team : most;
}

void trial_start_one(ThreadTrial *t)
{
    run_schedule(t, RUN_ONE);
}

void trial_withdraw_team(ThreadTrial *t)
{
    if (t->redoing)
        run_schedule(t, RUN_FULL);
    t->redo = 0;
    t->fixed = 0;
}

/* Whether a team is offered and may take a share from other programs:
 * the process may run on two cores or more (on one, the team's threads
 * would only take turns), some of their threads are runnable (threads
 * that only outnumber the cores gain nothing by it), and not every one of
 * them is in another scheduling group (whose share the kernel keeps from
 * the team). */
static int team_may_gain(const ThreadTrial *t)
{
    return t->redo && t->cores > 1 && t->pace.others_running != 0 && t->pace.others_apart <= 0;
}

int trial_next(const ThreadTrial *t)
{
    const Pace *p = &t->pace;
    switch (trial_schedule(t)) {
    case RUN_FULL:
        if (t->now <= t->cores && p->others_running == 0)
            return -1; /* no other program wants a core, and the threads have a core each:
                        * they waited on one another's (as new threads may, before the
                        * kernel spreads them) */
        if (!p->busy && p->waited < PACE_CONTENDED)
            return -1;
        return team_may_gain(t) && t->failed != RUN_REDO ? RUN_REDO : RUN_ONE;
    case RUN_ONE:
        if (p->idle_cores == PACE_IDLE_PENDING)
            return -1; /* not yet known: the trial waits for the span's end */
        if (p->idle_cores == PACE_IDLE_NO_PROC || p->idle_cores >= TRIAL_SPARE)
            return RUN_FULL;
        /* every core taken: more threads of their own would find none, but a
         * redo team's spare thread takes a share and waits on no one */
        return team_may_gain(t) ? RUN_REDO : -1;
    default: /* the team's spare thread keeps every core taken: the others decide */
        if (p->others_running == 0)
            return RUN_FULL;
        if (p->others_apart > 0)
            return RUN_ONE;
        return p->cores_used < TRIAL_ONE_CORE ? RUN_ONE : -1;
    }
}

/* Runs `schedule` for a window, against the one running, whose median
 * unit was ref_ms. */
static void begin_trial(ThreadTrial *t, int schedule, double ref_ms)
{
    t->ref_ms = ref_ms;
    t->trying = 1;
    t->since = 0;
    t->before = trial_schedule(t);
    run_schedule(t, schedule);
}

/* At a window's end: a trial judged (what it kept, into news), or one
 * begun. */
static void after_window(ThreadTrial *t, TrialNews *news)
{
    const Pace *p = &t->pace;
    t->since++;
    if (t->trying) {
        int tried = trial_schedule(t), from = t->before;
        t->trying = 0;
        if (!(p->median < TRIAL_GAIN * t->ref_ms)) { /* no gain: back */
            t->failed = tried;
            run_schedule(t, from);
            t->kept_ms = t->ref_ms;
            t->every = 2 * t->every < TRIAL_RETRY_MAX ? 2 * t->every : TRIAL_RETRY_MAX;
            if (from == RUN_FULL && tried == RUN_REDO)
                begin_trial(t, RUN_ONE, t->ref_ms); /* one thread's turn, at once */
            return;
        }
        t->failed = -1;
        t->kept_ms = p->median;
        t->every = TRIAL_RETRY;
        news->kept = 1;
        news->schedule = tried, news->ms = p->median;
        news->other = from, news->other_ms = t->ref_ms;
        /* the team beat the full count on about one core's time: one thread
         * may beat it in turn (a busy program of another session leaves the
         * whole process one core, which the team's threads share) */
        if (from == RUN_FULL && tried == RUN_REDO && p->cores_used < TRIAL_ONE_CORE)
            begin_trial(t, RUN_ONE, p->median);
        return;
    }
    if (t->kept_ms > 0 && p->median > t->kept_ms / TRIAL_GAIN)
        t->since = t->every; /* slower than when the trial kept this schedule: the other
                              * programs have changed, and a trial is due at once */
    /* the team's trial depends on the others' groups; and off the full
     * count, a count of none others (the full count's trial) is confirmed:
     * a walk over /proc, so not at every window of a run alone */
    if (t->since >= t->every && t->redo &&
        (t->pace.others_running > 0 || trial_schedule(t) != RUN_FULL))
        pace_ask_others(&t->pace);
    int next = t->since >= t->every ? trial_next(t) : -1;
    if (next >= 0)
        begin_trial(t, next, p->median);
}

TrialNews trial_unit(ThreadTrial *t, double ms)
{
    TrialNews news = {0};
    if (t->units++ == 0) {
        pace_start(&t->pace); /* the first unit compiled: the pace starts after it */
        return news;
    }
    int windows = t->pace.windows, trying = t->trying;
    news.pace = pace_step(&t->pace, ms, t->now, trying);
    if (t->full > 1 && !t->fixed && t->pace.windows != windows)
        after_window(t, &news);
    return news;
}
