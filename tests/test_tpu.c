/* tests/test_tpu.c: simulated TPU cores and bf16. Data parallel training
 * gives the same bits for 1, 2, 4 and 8 cores and 1 or 2 threads, with
 * identical replicas and the same loss every step, and a run that changes
 * its core count between steps (as the busy machine's trial lends a board)
 * does too; bf16 modes do what they say and keep the devices and layouts
 * in agreement. */
#include <math.h>
#include <sys/mman.h>
#include <signal.h>
#include <stdatomic.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "util/rng.h"
#include "safetensors/safetensors.h"
#include "gpt.h"
#include "cmd/evaluate.h"
#include "compiler/graph_side.h"
#include "xla_sim.h"
#include "device/redo.h"
#include "util/threads.h"
#include "watch/pace.h"
#include "test.h"
#include <time.h>

static const Config cfg = {.vocab = VOCAB, .context = 32, .embed = 32, .mlp = 64, .heads = 4, .layers = 2};

static void fill(Batch *b, uint64_t seed)
{
    Rng r;
    rng_seed(&r, seed, 11);
    for (int i = 0; i < b->B * b->T; i++)
        b->tok[i] = 32 + (int)(rng_next(&r) % 90);
    batch_finish(b);
}

enum { STEPS = 6, LENT8 = -8 };

/* Trains STEPS steps of a fresh model, step s on cores[s] cores (0: the
 * eager cpu device, for every step; LENT8: a board of 8 lent, whose cores
 * share core 0's weights and moments), in the given precision; each
 * step's loss into loss[]. m is left for the caller to inspect. */
static float train_on(Model *m, const int cores[STEPS], int prec, float loss[STEPS])
{
    model_init(m, &cfg, 21);
    Graph *g = g_new();
    g_set_lazy(g, cores[0] > 0);
    g_set_precision(g, prec);
    Batch b;
    batch_alloc(&b, 8, 32);
    for (int s = 0; s < STEPS; s++) {
        if (cores[s] == LENT8 && (s == 0 || cores[s - 1] != LENT8))
            model_lend_cores(m, -LENT8);
        else if (cores[s] != LENT8 && (s == 0 || cores[s] != cores[s - 1]))
            model_set_cores(m, cores[s] > 0 ? cores[s] : 1);
        fill(&b, (uint64_t)s);
        loss[s] = model_train_step(m, g, &b, 3e-3f);
    }
    batch_free(&b);
    g_free(g);
    return loss[STEPS - 1];
}

/* The same on `cores` cores throughout. */
static float train(Model *m, int cores, int prec, float loss[STEPS])
{
    const int on[STEPS] = {cores, cores, cores, cores, cores, cores};
    return train_on(m, on, prec, loss);
}

/* The first step whose loss differs from want's, or -1. */
static int first_other(const float got[STEPS], const float want[STEPS])
{
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&got[s], &want[s], sizeof *got))
            return s;
    return -1;
}

static int same_state(const Model *a, const Model *b, int core)
{
    size_t n = a->nw * sizeof(float);
    return !memcmp(a->w, model_replica(b, core, REPLICA_W), n) &&
           !memcmp(a->m, model_replica(b, core, REPLICA_M), n) &&
           !memcmp(a->v, model_replica(b, core, REPLICA_V), n);
}

/* One precision: the eager device on one core is the reference; every
 * core count and thread count must reproduce it, on every replica. */
static void check_layouts(int prec, const char *name)
{
    Model ref;
    float want[STEPS], got[STEPS];
    train(&ref, 0, prec, want);
    int keep = omp_get_max_threads();
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (int cores = 1; cores <= 8; cores *= 2) {
            Model m;
            train(&m, cores, prec, got);
            int same = 1;
            for (int c = 0; c < cores; c++)
                same &= same_state(&ref, &m, c);
            CHECK(same, "%s: %d cores, %d threads: weights or replicas differ from one core",
                  name, cores, threads);
            int s = first_other(got, want);
            CHECK(s < 0, "%s: %d cores, %d threads: step %d's loss %.9g, one core's %.9g", name,
                  cores, threads, s, got[s < 0 ? 0 : s], want[s < 0 ? 0 : s]);
            model_free(&m);
        }
    }
    omp_set_num_threads(keep);
    model_free(&ref);
}

/* One core's run switched to a board of 8 for two steps and back, as
 * replicas of its own (model_set_cores) or lent (model_lend_cores: cmd/
 * train.c's lend_board, the cores sharing core 0's weights and moments,
 * which the device updates once): the losses and the weights of one core
 * throughout. Where the device ran a lent board's Adam on every core, the
 * one buffer took 8 updates a step. */
static void check_lent_board(int prec, const char *name)
{
    static const int one[STEPS] = {1, 1, 1, 1, 1, 1};
    static const int board[2][STEPS] = {{1, 1, 8, 8, 1, 1}, {1, 1, LENT8, LENT8, 1, 1}};
    Model ref;
    float want[STEPS], got[STEPS];
    train_on(&ref, one, prec, want);
    int keep = omp_get_max_threads();
    for (int lent = 0; lent < 2; lent++)
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            Model m;
            train_on(&m, board[lent], prec, got);
            int s = first_other(got, want);
            CHECK(same_state(&ref, &m, 0) && s < 0, "%s: a board of 8 %s for steps 2-3, %d "
                  "threads: the weights differ from one core's, or step %d's loss", name,
                  lent ? "lent" : "of replicas", threads, s);
            model_free(&m);
        }
    omp_set_num_threads(keep);
    model_free(&ref);
}

/* A lent board holds no replicas: every core's weights and moments are
 * core 0's. */
static void check_lent_shares(void)
{
    Model m;
    model_init(&m, &cfg, 21);
    model_lend_cores(&m, 8);
    int shared = m.rep == NULL && m.lent;
    for (int c = 0; c < 8; c++)
        for (int k = REPLICA_W; k < REPLICA_BLOCKS; k++)
            shared &= model_replica(&m, c, k) == model_replica(&m, 0, k);
    CHECK(shared, "a lent board of 8: a core holds weights or moments of its own");
    model_set_cores(&m, 8);
    CHECK(m.rep != NULL && !m.lent && model_replica(&m, 3, REPLICA_W) != m.w,
          "a board of 8 after a lent one: the replicas are not each core's own");
    model_free(&m);
}

/* A program that writes a buffer its cores share before they meet in a
 * collective would have each core write its own values into it: the
 * device refuses it (exit 1) rather than run it. */
static void check_shared_write_refused(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        omp_set_num_threads(1); /* the parent's OpenMP threads are not in this process */
        float w[4] = {1, 2, 3, 4}, mm[4] = {0}, vv[4] = {0}, lr = 1e-3f;
        int32_t t = 1;
        void *wd[XS_MAX_CORES], *md[XS_MAX_CORES], *vd[XS_MAX_CORES];
        for (int c = 0; c < 2; c++)
            wd[c] = w, md[c] = mm, vd[c] = vv;
        Graph *g = g_new();
        g_set_lazy(g, 1);
        g_set_cores(g, 2);
        Tensor *p = g_leaf_rep(g, TK_PARAM, DT_F32, wd, 1, 4);
        Tensor *m = g_leaf_rep(g, TK_STATE, DT_F32, md, 1, 4);
        Tensor *v = g_leaf_rep(g, TK_STATE, DT_F32, vd, 1, 4);
        Tensor *tt = g_leaf(g, TK_STATE, DT_I32, &t, 1, 1);
        Tensor *rate = g_leaf(g, TK_INPUT, DT_F32, &lr, 1, 1);
        g_adam(g, p, g_fill(g, 0.5f, 1, 4), m, v, tt, rate, 0.9f, 0.999f, 1e-8f);
        g_mark_step(g, NULL, 0);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "Adam on 2 cores sharing one buffer, with no "
          "all-reduce before it: the device ran it (status %d)", st);
}

/* An eval tick that switches the graph's board between 8 cores and 1 as
 * passes of 8 windows end, the last to 1 (ctx: the graph). */
static void switch_board(int done, int total, void *ctx)
{
    (void)total;
    g_set_cores(ctx, done % 16 ? 8 : 1);
}

/* gpt eval's passes on a board of 8 lent cores (cmd/evaluate.c): each
 * pass's windows split over the cores and each core's logits read back
 * (g_read_core), on 1 or 2 threads and on the redo team: the loss of one
 * core, bit for bit, and every pass a replicated program. A pass that does
 * not split evenly over the cores runs on one. */
static void check_eval_board(void)
{
    enum { WINDOWS = 32, PASS = 16 };
    Model m;
    model_init(&m, &cfg, 21);
    Graph *g = g_new();
    g_set_lazy(g, 1);
    Batch b;
    batch_alloc(&b, WINDOWS, cfg.context);
    fill(&b, 5);
    float want = eval_loss(&m, g, &b, PASS, NULL, NULL);
    model_lend_cores(&m, 8);
    g_set_cores(g, 8);
    int keep = omp_get_max_threads();
    for (int run = 0; run < 3; run++) { /* 1 thread, 2, the team */
        omp_set_num_threads(run == 1 ? 2 : 1);
        xs_set_redo(run == 2 ? 3 : 0);
        long rep0 = xs_metric_samples(M_EXECUTE_REPLICATED);
        float got = eval_loss(&m, g, &b, PASS, NULL, NULL);
        long passes = xs_metric_samples(M_EXECUTE_REPLICATED) - rep0;
        CHECK(!memcmp(&got, &want, sizeof got) && passes == WINDOWS / PASS && g_cores(g) == 8,
              "eval on 8 lent cores (%s): loss %.9g, one core's %.9g; %ld replicated passes, "
              "want %d; the graph left on %d cores", run == 2 ? "the redo team" :
              run ? "2 threads" : "1 thread", got, want, passes, WINDOWS / PASS, g_cores(g));
    }
    xs_set_redo(0);
    omp_set_num_threads(keep);
    /* the trial's board changes between passes (cmd/flags.c, lent_board_follow) */
    float switched = eval_loss(&m, g, &b, PASS / 2, switch_board, g);
    CHECK(!memcmp(&switched, &want, sizeof switched) && g_cores(g) == 1, "eval whose board "
          "went between 8 cores and 1 as passes ended: loss %.9g, want %.9g; the graph left "
          "on %d cores, where the last pass's tick left it on 1", switched, want, g_cores(g));
    float uneven = eval_loss(&m, g, &b, 4, NULL, NULL); /* 4 windows a pass: one core */
    CHECK(!memcmp(&uneven, &want, sizeof uneven), "eval of 4-window passes beside a board of 8: "
          "loss %.9g, want %.9g", uneven, want);
    batch_free(&b);
    g_free(g);
    model_free(&m);
}

/* The replicated program: one all-reduce per gradient and the loss, one
 * compile for all steps, and the all-reduce metrics move. */
static void check_program(void)
{
    long u0 = xs_counter(C_UNCACHED), ar0 = xs_counter(C_ALL_REDUCE);
    long rep0 = xs_metric_samples(M_EXECUTE_REPLICATED);
    Model m;
    const int four[STEPS] = {4, 4, 4, 4, 4, 4};
    float loss[STEPS];
    train_on(&m, four, PREC_FP32, loss);
    long ar = xs_counter(C_ALL_REDUCE) - ar0;
    CHECK(xs_counter(C_UNCACHED) - u0 == 1, "%d steps on 4 cores: %ld compiles", STEPS,
          xs_counter(C_UNCACHED) - u0);
    CHECK(ar == (long)STEPS * (m.np + 1), "%d steps: %ld all-reduces, want %d", STEPS, ar,
          STEPS * (m.np + 1));
    CHECK(xs_metric_samples(M_EXECUTE_REPLICATED) - rep0 == STEPS, "ExecuteReplicatedTime has "
          "%ld samples for %d steps", xs_metric_samples(M_EXECUTE_REPLICATED) - rep0, STEPS);
    model_free(&m);
}

static int all_bf16(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if (u & 0xffff)
            return 0;
    }
    return 1;
}

/* bf16 keeps fp32 master weights and state; bf16-pure stores them as
 * bf16. Both stay near fp32 over a few steps, and neither equals it. */
static void check_precisions(void)
{
    Model f, h, p;
    float loss[STEPS];
    float lf = train(&f, 1, PREC_FP32, loss);
    float lh = train(&h, 1, PREC_BF16, loss);
    float lp = train(&p, 1, PREC_BF16_PURE, loss);
    CHECK(!all_bf16(h.w, h.nw) && all_bf16(p.w, p.nw) && all_bf16(p.m, p.nw) &&
              all_bf16(p.v, p.nw), "bf16 must keep fp32 weights, bf16-pure bf16 ones");
    CHECK(memcmp(f.w, h.w, f.nw * 4) && memcmp(f.w, p.w, f.nw * 4),
          "bf16 modes left the weights as fp32 computes them");
    CHECK(fabsf(lh - lf) < 0.05f && fabsf(lp - lf) < 0.1f,
          "losses after 6 steps: fp32 %g, bf16 %g, bf16-pure %g", lf, lh, lp);
    model_free(&f);
    model_free(&h);
    model_free(&p);
}

/* ---- the redo team's members with no unit to attempt (device/redo.h) ---- */

enum { LONG_UNIT_MS = 100 };

static double cpu_seconds(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A unit of LONG_UNIT_MS of its thread's CPU time, a piece each quarter
 * millisecond of it: as long as a core's program at embed 256. */
static void *long_unit(unsigned gen, int unit)
{
    static char done;
    double t0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID), piece = t0;
    for (double t; (t = cpu_seconds(CLOCK_THREAD_CPUTIME_ID)) - t0 < 1e-3 * LONG_UNIT_MS;) {
        if (t - piece < 0.25e-3)
            continue;
        if (redo_finished(gen, unit))
            return NULL;
        redo_progressed(unit);
        piece = t;
    }
    return &done;
}

static void keep_result(void *result) { (void)result; }

/* Jobs of 2 long units on a team of 3 on two idle cores: once the team
 * knows their length, the third member sleeps while the two run, rather
 * than spin or redo a unit whose thread runs between pieces: the
 * process's CPU time is the units' own. (Beside busy programs a unit's
 * thread may be held long enough for a redo to be right.) */
static void check_redo_member_sleeps(void)
{
    int same, apart;
    pace_others_now(&same, &apart);
    if (affinity_cores() < 2 || same + apart > 0) {
        SKIP_MACHINE("the redo team's waiting member not checked: this process may run on one "
                     "core, or other programs' threads are runnable (%d), which may hold a "
                     "unit's thread long enough to redo it", same + apart);
        return;
    }
    static const RedoWork work = {long_unit, keep_result};
    void *result[2];
    int threads = redo_threads();
    double cpu = INFINITY, units = 2e-3 * LONG_UNIT_MS;
    redo_set_threads(3);
    /* the first two jobs teach the team the units' length; of the next
     * three, the least CPU (a program that starts meanwhile may hold a
     * unit's thread, and then a redo is right) */
    for (int job = 0; job < 5 && cpu >= 1.2 * units; job++) {
        double c0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
        redo_run(redo_begin(), 2, &work, result);
        redo_quiesce();
        if (job >= 2)
            cpu = fmin(cpu, cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0);
    }
    redo_set_threads(threads);
    pace_others_now(&same, &apart);
    if (cpu >= 1.2 * units && same + apart > 0) {
        SKIP_MACHINE("the redo team's waiting member not checked: other programs' threads "
                     "became runnable (%d)", same + apart);
        return;
    }
    CHECK(cpu < 1.2 * units, "a job of 2 units of %d ms on a team of 3 took %.0f ms of CPU, "
          "want under 1.2x the units' %.0f ms (the third member asleep)", LONG_UNIT_MS,
          1e3 * cpu, 1e3 * units);
}

/* Stops of the team at STOP_CYCLES moments, STOP_STEP_NS apart, from its
 * start to STOP_CYCLES * STOP_STEP_NS = 100 us after: across the moment
 * its members, having spun on the next job's word, go to sleep on it
 * (about 30-45 us here). */
enum { STOP_CYCLES = 10000, STOP_STEP_NS = 10, STOP_WAIT_S = 30 };

/* Every stop of the team ends every member, even a member between its
 * look at the stop flag and its sleep: if the stop's wake-up came in
 * between, a member that slept on an unchanged word slept for good, and
 * `gpt sample` hung at its end (beside a busy loop, where a member is
 * more often taken off its core in between). The team started and
 * stopped STOP_CYCLES times, in a child given STOP_WAIT_S. */
static void check_redo_stops(void)
{
    int threads = redo_threads();
    redo_set_threads(0); /* a forked child has no members of the parent's */
    atomic_int *done_cycles = mmap(NULL, sizeof(atomic_int), PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pid = done_cycles == MAP_FAILED ? -1 : fork();
    if (pid == 0) {
        for (int i = 0; i < STOP_CYCLES; i++) {
            redo_set_threads(3);
            double until = cpu_seconds(CLOCK_MONOTONIC) + 1e-9 * STOP_STEP_NS * i;
            while (cpu_seconds(CLOCK_MONOTONIC) < until)
                ;
            redo_set_threads(0);
            atomic_store(done_cycles, i + 1);
        }
        _exit(0);
    }
    int status = -1, done = 0;
    for (int ms = 0; pid > 0 && ms < 1000 * STOP_WAIT_S && !done; ms += 10) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (!done)
            usleep(10000);
    }
    if (pid > 0 && !done) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    redo_set_threads(threads);
    CHECK(done && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the redo team started and stopped %d times: %s after %d", STOP_CYCLES,
          pid < 0    ? "could not fork"
          : done     ? "the child failed"
                     : "a stop hung (a member slept through its wake-up)",
          pid < 0 ? 0 : atomic_load(done_cycles));
    if (done_cycles != MAP_FAILED)
        munmap(done_cycles, sizeof(atomic_int));
}

/* A thread's time slice as the kernel shows it (se.slice in
 * /proc/self/task/TID/sched, ns); -1 where it shows none. */
static long long task_slice_ns(const char *tid)
{
    char path[300], line[256];
    long long ns = -1;
    snprintf(path, sizeof path, "/proc/self/task/%s/sched", tid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "se.slice", 8))
            sscanf(strchr(line, ':') + 1, "%lld", &ns);
    if (f)
        fclose(f);
    return ns;
}

/* The threads of this process whose slice is `ns`. */
static int tasks_with_slice(long long ns)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.' && task_slice_ns(e->d_name) == ns;
    if (d)
        closedir(d);
    return n;
}

/* The redo team's members ask the scheduler for a slice of REDO_SLICE_US
 * (device/redo.h): the caller and the 2 threads of a team of 3 show it
 * while the team is on, and the caller its default again once it stops;
 * a thread's nice value stays as it was (a user's `nice gpt train`).
 * Kernels before Linux 6.12 take no slice from a program: skipped. */
static void check_redo_slices(void)
{
    char self[32];
    snprintf(self, sizeof self, "%d", (int)gettid());
    long long before = task_slice_ns(self), asked = 1000LL * REDO_SLICE_US;
    int threads = redo_threads();
    redo_set_threads(0);
    thread_request_slice(REDO_SLICE_US);
    int takes = task_slice_ns(self) == asked;
    thread_request_slice(0);
    if (before < 0 || !takes) {
        SKIP_MACHINE("the redo team's slices not checked: this kernel %s", before < 0 ?
                     "shows no thread's slice" : "takes no slice from a program (Linux 6.12+)");
        redo_set_threads(threads);
        return;
    }
    /* threads started while the caller held the slice inherited it */
    int others = tasks_with_slice(asked);
    redo_set_threads(3);
    int members = tasks_with_slice(asked) - others;
    redo_set_threads(0);
    long long after = task_slice_ns(self);
    redo_set_threads(threads);
    CHECK(members == 3 && after == before, "a team of 3: %d threads with a slice of %lld ns, "
          "want 3; the caller's after the team %lld ns, want its default %lld", members, asked,
          after, before);
    pid_t pid = fork();
    if (pid == 0) {
        int niced = setpriority(PRIO_PROCESS, 0, 5) == 0;
        thread_request_slice(REDO_SLICE_US);
        snprintf(self, sizeof self, "%d", (int)gettid());
        _exit(niced && getpriority(PRIO_PROCESS, 0) == 5 && task_slice_ns(self) == asked ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a thread of nice 5 asking for a slice: want nice 5 kept and the slice taken (status %d)",
          status);
}

void test_tpu(void)
{
    check_layouts(PREC_FP32, "fp32");
    check_layouts(PREC_BF16, "bf16");
    check_layouts(PREC_BF16_PURE, "bf16-pure");
    check_lent_board(PREC_FP32, "fp32");
    check_lent_board(PREC_BF16, "bf16");
    check_lent_shares();
    check_shared_write_refused();
    check_program();
    check_eval_board();
    check_redo_member_sleeps();
    check_redo_slices();
    check_redo_stops();
    check_precisions();
}
