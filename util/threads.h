/* util/threads.h: how many OpenMP threads a process runs, and how the
 * runtime's idle threads wait (a leaf: it includes no other header of
 * gpt's).
 *
 * A step is a chain of short parallel regions, each ending in a join. On
 * a machine that runs other work, a thread that reaches the join first
 * must not burn the core its late partner needs: the runtime is told to
 * spin only briefly, then sleep (threads.c says how and why), and the
 * thread count starts from what the process may really use: the cores
 * its affinity allows, a cgroup's CPU quota (a container's --cpus), and
 * its share of the host when several ranks of a pod run there. */
#ifndef UTIL_THREADS_H
#define UTIL_THREADS_H
#include <stddef.h>

/* What the machine lets this process use, and the count chosen from it. */
struct thread_budget {
    int cores;         /* processors in this process's affinity mask */
    double quota;      /* the cgroup's CPU quota in cores; 0: none */
    int ranks_on_host; /* processes of the run on this host (1 alone) */
    int threads;       /* the OpenMP threads chosen: at least 1 */
    char why[160];     /* "2 threads: 2 cores, quota 1.5 -> 1", for the banner */
};

/* The cgroup CPU quota of this process, in cores (the tightest of its
 * cgroup and the cgroup's ancestors, v1 or v2); 0 when there is none. */
double cgroup_cpu_quota(void);

/* The processors in this process's affinity mask (at least 1). */
int affinity_cores(void);

/* Fills b from the machine: user > 0 is --threads N and wins, then
 * OMP_NUM_THREADS; else the
 * cores of the affinity mask, capped by the quota (rounded down, at least
 * 1), divided among the ranks on this host (at least 1 each). */
void thread_budget(struct thread_budget *b, int user, int ranks_on_host);

/* 0 when the user set OMP_DYNAMIC to false (or 0): OpenMP's "the runtime
 * may not change the thread count", so the threads stay as chosen however
 * busy the machine is (no trial, no redo team unless --redo asks), and a
 * run takes the same path as on an idle machine (for a profile, or the
 * plain path's listing). Unset, the count adapts: 1. */
int threads_dynamic(void);

/* Asks the scheduler to run the calling thread `us` microseconds before
 * it hands the core to another fair thread (0: the default), keeping its
 * policy and nice value; a no-op where the kernel cannot (threads.c). */
void thread_request_slice(unsigned us);

#endif
