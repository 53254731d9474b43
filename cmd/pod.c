/* cmd/pod.c: one run over several processes.
 * gpt-mpi under mpirun runs one process per host of a pod. Every process
 * runs the same command on the same flags and data, with --cores simulated
 * cores of its own. In PyTorch/XLA's words: the world is every core of
 * every host, a core's ordinal is host * cores + core, and the master
 * ordinal 0 (on host 0) alone prints, logs and writes checkpoints. Every
 * host draws the same global batch from the same seed and trains on its
 * share; the all-reduce joins them (xla_sim.c over comm.c). With one
 * process (the static gpt) all of this reduces to nothing. The errors are
 * pod/error.h's. */
#include "cmd/pod.h"
#include "pod/comm.h"
#include "pod/error.h"
#include "util/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

int is_master(void) { return comm_rank() == 0; }

/* Any exit but a planned one (an error in a lower layer) aborts the pod,
 * so the other ranks do not wait for this one. */
static void leave_pod(void)
{
    if (exit_was_planned())
        comm_finalize();
    else if (comm_size() > 1)
        comm_abort(1);
}

/* Every rank must be started with the same command and flags. The ranks
 * compare a hash of their whole command line; on a mismatch a differing
 * rank names itself and both command lines, and every rank exits 2. */
static void check_same_flags(int argc, char **argv)
{
    uint64_t mine = FNV1A64_START, all[COMM_MAX_RANKS];
    if (comm_size() == 1)
        return;
    for (int i = 1; i < argc; i++) /* NUL-joined: "a b" and "a" "b" differ */
        mine = fnv1a64_more(mine, (const unsigned char *)argv[i], strlen(argv[i]) + 1);
    comm_allgather(&mine, all, sizeof mine);
    int differ = 0;
    for (int r = 1; r < comm_size(); r++)
        differ |= all[r] != all[0];
    if (!differ)
        return;
    char line[4096] = "", master[4096];
    for (int i = 1; i < argc; i++)
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", i > 1 ? " " : "",
                 argv[i]);
    memcpy(master, line, sizeof master);
    comm_broadcast(master, sizeof master, 0); /* for the message only */
    if (mine != all[0])
        fprintf(stderr, "gpt: rank %d was started as 'gpt %s' but rank 0 as 'gpt %s'; every "
                "rank needs the same command and flags\n", comm_rank(), line, master);
    exit_planned(2);
}

/* Every host must train on the same bytes. */
void check_same_data(uint64_t hash, const char *path)
{
    uint64_t all[COMM_MAX_RANKS];
    if (comm_size() == 1)
        return;
    comm_allgather(&hash, all, sizeof hash);
    if (hash != all[0])
        die(1, "%s differs from the master's --data (fnv1a64 %016llx, rank 0 has %016llx); "
            "every host needs the same file", path, (unsigned long long)hash,
            (unsigned long long)all[0]);
}

/* This host's share of a global batch: its B/hosts consecutive windows,
 * which its cores split among them in ordinal order. */
Batch host_share(const Batch *b)
{
    int B = b->B / comm_size();
    size_t first = (size_t)comm_rank() * (size_t)B * (size_t)b->T;
    return (Batch){B, b->T, b->tok + first, b->pos + first, b->tgt + first, b->row + first};
}

/* The mean over hosts of a value each computed on an equal share. */
float pod_mean(float x)
{
    comm_all_reduce(&x, 1, NULL);
    return x * (1.0f / (float)comm_size());
}

/* The master reads a file the other hosts may not have (no shared file
 * system is assumed) and sends its bytes to every rank. */
int load_on_master(StFile *f, const char *path, char *err, size_t elen)
{
    return share_from_master(f, is_master() ? st_load(f, path, err, elen) : 0, err, elen);
}

/* The file the master has loaded (failed: its st_load's result), sent to
 * every rank; when the master failed, it says why and the others leave. */
int share_from_master(StFile *f, int failed, char *err, size_t elen)
{
    if (comm_size() == 1)
        return failed;
    long long size = -1;
    if (is_master() && !failed)
        size = (long long)f->size;
    comm_broadcast(&size, sizeof size, 0);
    if (size < 0) { /* the master says why and ends the run */
        if (is_master())
            return -1;
        comm_barrier();
        exit(1);
    }
    unsigned char *buf = is_master() ? f->buf : xcalloc((size_t)size, 1);
    comm_broadcast(buf, (size_t)size, 0);
    return is_master() ? 0 : st_parse(f, buf, (size_t)size, err, elen);
}

/* Where process pid's fd 1 points: "/dev/pts/3", "/home/a/log", "pipe:[12]". */
static int stdout_of(pid_t pid, char *target, size_t n)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/%d/fd/1", (int)pid);
    ssize_t len = readlink(link, target, n - 1);
    if (len < 0)
        return -1;
    target[len] = 0;
    return 0;
}

/* Process pid's parent (0 if unknown), from /proc/pid/stat: "pid (comm) state ppid". */
static pid_t parent_of(pid_t pid)
{
    char path[64], line[512];
    int ppid = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f && fgets(line, sizeof line, f) && strrchr(line, ')'))
        sscanf(strrchr(line, ')') + 1, " %*c %d", &ppid);
    if (f)
        fclose(f);
    return ppid;
}

/* Whether stdout reaches a terminal, where a person watches. Under mpirun
 * a rank's stdout is a pseudo-terminal whatever mpirun's own output is
 * (Open MPI forwards a local rank's output through one, even to a file),
 * so there the launcher's stdout decides: the nearest ancestor whose fd 1
 * is not ours (mpirun, or orted on another host; a shell between them,
 * as in mpirun sh -c '...', shares ours) is a terminal device (/dev/pts/N,
 * /dev/ttyN) only when a person watches it. */
int stdout_reaches_terminal(void)
{
    char mine[256], theirs[256];
    if (!isatty(STDOUT_FILENO))
        return 0;
    if (!getenv("OMPI_COMM_WORLD_SIZE")) /* set by Open MPI's launcher for its ranks */
        return 1;
    if (stdout_of(getpid(), mine, sizeof mine))
        return 0;
    for (pid_t p = getppid(); p > 1; p = parent_of(p)) {
        if (stdout_of(p, theirs, sizeof theirs))
            return 0; /* out of sight: take it for a log */
        if (strcmp(theirs, mine))
            return !strncmp(theirs, "/dev/pts/", 9) || !strncmp(theirs, "/dev/tty", 8);
    }
    return 0;
}

/* Joins the pod (with one process: nothing), and keeps the other ranks
 * quiet: they speak only to report an error. */
void join_pod(int *argc, char ***argv)
{
    comm_init(argc, argv);
    atexit(leave_pod);
    need(comm_size() <= COMM_MAX_RANKS, "a pod has at most %d processes, got %d",
         COMM_MAX_RANKS, comm_size());
    const char *t = getenv("GPT_COMM_TIMEOUT");
    if (t && *t) {
        char *end;
        double seconds = strtod(t, &end);
        need(*end == 0 && seconds > 0, "GPT_COMM_TIMEOUT must be a number of seconds > 0, "
             "got '%s'", t);
        comm_set_timeout(seconds);
    }
    if (!is_master() && !freopen("/dev/null", "w", stdout))
        die(1, "cannot silence stdout on rank %d", comm_rank());
    check_same_flags(*argc, *argv);
}
