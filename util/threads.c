/* util/threads.c: the thread count a process starts from, and the OpenMP
 * runtime's wait policy (threads.h). */
#include "util/threads.h"
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- how idle threads wait ----
 *
 * A default training step runs some 140 parallel regions of 20-100 us
 * each. Both OpenMP runtimes keep one team of threads for the whole
 * program; between regions and at each region's join, a thread that has
 * nothing to do spins before it sleeps: libgomp about 3 ms by default
 * (GOMP_SPINCOUNT 300000), libomp 200 ms (KMP_BLOCKTIME). On an idle
 * machine that is harmless. Beside another busy process, the partner a
 * thread waits for has often been descheduled, and the spinning thread
 * holds the very core that partner needs, for its whole time slice: a
 * default step ran 5.3x slower beside one busy loop. Sleeping at once
 * (OMP_WAIT_POLICY=passive) costs a futex wake-up per region instead:
 * 1.37x slower alone. A short spin keeps most of both: the regions of a
 * step follow each other within a few microseconds when both threads
 * run, and a thread whose partner is away gives the core up soon after.
 * What no spin mends (beside one busy loop the default step is faster on
 * one thread) gpt train's thread trials do (cmd/train.c).
 *
 * The budget is set through the runtimes' own variables before either
 * reads them (a constructor of priority WAIT_POLICY_PRIORITY runs before
 * libgomp's, which has none, in the static binary; libomp reads its
 * variables at the first parallel region). A user's own OMP_WAIT_POLICY,
 * GOMP_SPINCOUNT or KMP_BLOCKTIME is left as it is. */

/* libgomp counts spins (about 100 a microsecond by its own estimate):
 * this is some 20 us. */
#define GOMP_SPINS "2000"
/* libomp counts milliseconds (LLVM 14's KMP_BLOCKTIME has no finer unit):
 * 1 ms is its least spin; 0, sleeping at once, made a default step 1.7x
 * slower alone (9.3 ms against 5.5). */
#define KMP_BLOCKTIME_MS "1"
/* Below the default 65535 that unprioritized constructors (libgomp's
 * initialize_env among them) run at; 101 is the first one a program may
 * use. */
#define WAIT_POLICY_PRIORITY 101

__attribute__((constructor(WAIT_POLICY_PRIORITY))) static void wait_briefly(void)
{
    if (getenv("OMP_WAIT_POLICY"))
        return; /* the user chose: active or passive, as they said */
    setenv("GOMP_SPINCOUNT", GOMP_SPINS, 0);
    setenv("KMP_BLOCKTIME", KMP_BLOCKTIME_MS, 0);
}

/* ---- the cgroup CPU quota ---- */

/* A quota read from one cgroup directory, in cores; 0 when it has none. */
static double quota_in(const char *dir, int v2)
{
    char path[4200];
    long long quota = -1, period = 0;
    int len = snprintf(path, sizeof path, v2 ? "%s/cpu.max" : "%s/cpu.cfs_quota_us", dir);
    FILE *f = len < (int)sizeof path ? fopen(path, "r") : NULL;
    if (!f)
        return 0;
    if (v2) { /* "max 100000" or "150000 100000" */
        char q[32] = "";
        if (fscanf(f, "%31s %lld", q, &period) == 2 && strcmp(q, "max"))
            quota = atoll(q);
    } else if (fscanf(f, "%lld", &quota) == 1 && quota > 0) { /* -1: none */
        FILE *p;
        len = snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
        if (len < (int)sizeof path && (p = fopen(path, "r"))) {
            if (fscanf(p, "%lld", &period) != 1)
                period = 0;
            fclose(p);
        }
    }
    fclose(f);
    return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
}

/* The tightest quota from the cgroup at mnt/rel up to the hierarchy's
 * mount point (a cgroup is held to its ancestors' quotas too). */
static double tightest_quota(const char *mnt, const char *rel, int v2)
{
    char dir[4200];
    if (snprintf(dir, sizeof dir, "%s%s", mnt, rel) >= (int)sizeof dir)
        return 0;
    size_t floor = strlen(mnt);
    double best = 0;
    for (;;) {
        double q = quota_in(dir, v2);
        if (q > 0 && (best == 0 || q < best))
            best = q;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < floor)
            return best;
        *slash = 0;
    }
}

/* This process's cgroup path in the hierarchy that has the cpu controller
 * (v1: the line naming "cpu" among its controllers; v2: the "0::" line). */
static int cgroup_path(int v2, char *path, size_t n)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[4200];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *ctl = strchr(line, ':'), *p = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!p)
            continue;
        *p++ = 0;
        ctl++;
        if (v2)
            found = !strcmp(line, "0") && !*ctl;
        else
            for (char *tok = strtok(ctl, ","); tok && !found; tok = strtok(NULL, ","))
                found = !strcmp(tok, "cpu");
        if (found && snprintf(path, n, "%s", p) >= (int)n)
            found = 0; /* a path too long to follow: no quota known */
    }
    if (f)
        fclose(f);
    return found;
}

/* Looks through /proc/self/mountinfo for the hierarchy (cgroup2, or v1's
 * with the cpu controller) and takes the quota of this process's cgroup
 * in it. */
static double quota_of_hierarchy(int v2)
{
    char cg[4096];
    if (!cgroup_path(v2, cg, sizeof cg))
        return 0;
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[8192];
    double q = 0;
    while (f && fgets(line, sizeof line, f)) {
        /* "id parent maj:min ROOT MOUNTPOINT opts ... - FSTYPE source SUPEROPTS" */
        char root[4096], mnt[4096], fstype[64] = "", super[1024] = "";
        char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2 ||
            sscanf(dash + 3, "%63s %*s %1023s", fstype, super) < 1)
            continue;
        int match = v2 ? !strcmp(fstype, "cgroup2") : !strcmp(fstype, "cgroup");
        if (match && !v2) {
            match = 0; /* the v1 hierarchy whose options name cpu */
            for (char *tok = strtok(super, ","); tok && !match; tok = strtok(NULL, ","))
                match = !strcmp(tok, "cpu");
        }
        size_t rl = strcmp(root, "/") ? strlen(root) : 0; /* the mount shows cg below root */
        if (match && !strncmp(cg, root, rl)) {
            q = tightest_quota(mnt, cg + rl, v2);
            break;
        }
    }
    if (f)
        fclose(f);
    return q;
}

double cgroup_cpu_quota(void)
{
    double v2 = quota_of_hierarchy(1), v1 = quota_of_hierarchy(0);
    if (v1 > 0 && (v2 == 0 || v1 < v2))
        return v1;
    return v2;
}

/* ---- the count ---- */

int affinity_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

void thread_budget(struct thread_budget *b, int user, int ranks_on_host)
{
    b->cores = affinity_cores();
    b->quota = cgroup_cpu_quota();
    b->ranks_on_host = ranks_on_host > 1 ? ranks_on_host : 1;
    const char *env = getenv("OMP_NUM_THREADS"); /* the runtime's own setting */
    int from_env = user <= 0 && env && atoi(env) > 0;
    if (user > 0 || from_env) {
        b->threads = user > 0 ? user : atoi(env);
        snprintf(b->why, sizeof b->why, "%d thread%s: %s", b->threads, b->threads > 1 ? "s" : "",
                 user > 0 ? "--threads" : "OMP_NUM_THREADS");
        return;
    }
    int usable = b->cores, n = 0;
    n += snprintf(b->why + n, sizeof b->why - (size_t)n, "%d core%s", b->cores,
                  b->cores > 1 ? "s" : "");
    if (b->quota > 0 && b->quota < usable) {
        usable = (int)b->quota > 1 ? (int)b->quota : 1; /* rounded down, at least 1 */
        n += snprintf(b->why + n, sizeof b->why - (size_t)n, ", quota %.3g -> %d", b->quota,
                      usable);
    }
    if (b->ranks_on_host > 1) {
        int each = usable / b->ranks_on_host > 1 ? usable / b->ranks_on_host : 1;
        n += snprintf(b->why + n, sizeof b->why - (size_t)n, ", %d ranks on this host -> %d",
                      b->ranks_on_host, each);
        usable = each;
    }
    b->threads = usable;
    char reason[sizeof b->why];
    memcpy(reason, b->why, sizeof reason);
    if (snprintf(b->why, sizeof b->why, "%d thread%s: %s", usable, usable > 1 ? "s" : "",
                 reason) >= (int)sizeof b->why)
        b->why[sizeof b->why - 1] = 0; /* cut short: still a banner */
}

int threads_dynamic(void)
{
    const char *e = getenv("OMP_DYNAMIC");
    return !(e && (!strcasecmp(e, "false") || !strcmp(e, "0")));
}

/* ---- a thread's time slice ----
 *
 * Since Linux 6.12 (the EEVDF scheduler) a thread of the fair policies
 * may ask how long it runs before a peer of equal weight takes its core:
 * sched_setattr's sched_runtime, 0.1 to 100 ms, 0 for the kernel's
 * default (1.4 ms on a 2-core Linux 6.18, more with more cores). Its
 * share of the cores over time is unchanged; it is cut less often, and
 * waits longer once cut. Older kernels ignore the field. glibc before
 * 2.41 declares neither the call nor its structure: this is its first,
 * fixed-size version (SCHED_ATTR_SIZE_VER0). */
#define SCHED_RESET_ON_FORK_FLAG 0x01 /* sched_setattr's SCHED_FLAG_RESET_ON_FORK */
struct slice_attr {
    unsigned size, policy;
    unsigned long long flags;
    int nice;
    unsigned priority;
    unsigned long long runtime_ns, deadline_ns, period_ns;
};

void thread_request_slice(unsigned us)
{
#if defined(__linux__) && defined(SYS_sched_setattr)
    struct slice_attr a = {0};
    if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) ||
        (a.policy != SCHED_OTHER && a.policy != SCHED_BATCH))
        return; /* a real-time thread has no fair slice to ask for */
    a.size = sizeof a;
    a.flags &= SCHED_RESET_ON_FORK_FLAG;
    a.runtime_ns = 1000ull * us; /* the nice value and policy as they were */
    syscall(SYS_sched_setattr, 0, &a, 0);
#else
    (void)us;
#endif
}
