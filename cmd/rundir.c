/* rundir.c: a run's directory (--out): its checkpoints,
 * ckpt-<step>.safetensors, found, pruned and named; and its lock, which
 * lets one process at a time write there. */
#include "cmd/rundir.h"
#include "pod/error.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int cmp_int_desc(const void *a, const void *b)
{
    return *(const int *)b - *(const int *)a;
}

/* The steps of dir's ckpt-*.safetensors, newest first; returns the count. */
int list_ckpts(const char *dir, int *steps, int max)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < max) {
        int k, len = 0;
        if (sscanf(e->d_name, "ckpt-%d.safetensors%n", &k, &len) == 1 &&
            len == (int)strlen(e->d_name))
            steps[n++] = k;
    }
    if (d)
        closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_int_desc);
    return n;
}

/* The checkpoint of step `step` in dir. */
void ckpt_name(char *path, size_t n, const char *dir, int step)
{
    snprintf(path, n, "%s/ckpt-%08d.safetensors", dir, step);
}

/* Keeps the newest `keep` checkpoints up to step newest. */
void prune_ckpts(const char *dir, int keep, int newest)
{
    static int steps[MAX_CKPTS];
    char path[4096];
    int n = list_ckpts(dir, steps, MAX_CKPTS), kept = 0;
    for (int i = 0; i < n; i++) {
        if (steps[i] > newest || kept++ < keep)
            continue;
        ckpt_name(path, sizeof path, dir, steps[i]);
        unlink(path);
    }
}

/* Makes dir if need be and takes its lock, before anything is written
 * there. */
void make_out_dir(const char *dir)
{
    if (mkdir(dir, 0755) && errno != EEXIST)
        die(1, "%s: cannot create output directory (%s)", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK))
        die(1, "%s: output directory is not a writable directory", dir);
    if (lock_out_dir(dir))
        die(1, "%s/%s: cannot create the run's lock file (%s)", dir, LOCK_FILE, strerror(errno));
}

/* ---- the lock: one run per directory ----
 *
 * dir/.lock is held with flock(2) for the process's whole life and never
 * removed (removing it would let a second process lock a new file of the
 * same name while the first still holds the old one). The kernel drops
 * the lock when the process ends, however it ends, so a dead run never
 * blocks a new one. O_CLOEXEC keeps it from children (a pipe:CMD's
 * command) that could outlive the run. The file's one line says who holds
 * it, for the error of a process refused. The name starts with a dot, so
 * a directory given as --data (gpt shard's) does not read it as text.
 * In a pod the master alone locks, as it alone writes --out: the ranks of
 * one run share the directory, and a second pod's master, refused, ends
 * its whole pod (pod/error.c). */

static int held_fd = -1; /* this process's lock, or -1 */

/* Is fd the file this process already holds (the same directory named
 * twice, or by another path)? */
static int already_held(int fd)
{
    struct stat a, b;
    return held_fd >= 0 && !fstat(held_fd, &a) && !fstat(fd, &b) && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* The holder's line, written once the lock is held: emptied first, so
 * that a reader finds the whole line or nothing. */
static void record_holder(int fd)
{
    char host[256] = "", line[512];
    gethostname(host, sizeof host - 1);
    int n = snprintf(line, sizeof line, "pid %ld, host %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) || pwrite(fd, line, (size_t)n, 0) != n)
        fprintf(stderr, "gpt: cannot write the run's lock file (%s); a run refused will not "
                "learn who holds it\n", strerror(errno));
}

/* A line of this host naming a process gone: the last holder's, read in
 * the moment between the new holder's flock and its record_holder. */
static int stale(const char *line)
{
    char host[256] = "", theirs[256];
    long pid;
    gethostname(host, sizeof host - 1);
    return sscanf(line, "pid %ld, host %255s", &pid, theirs) == 2 && !strcmp(theirs, host) &&
           kill((pid_t)pid, 0) && errno == ESRCH;
}

/* Who holds fd's lock, from its line; tries for a second while the line
 * is missing (the holder has the lock but has not written it yet). */
static void read_holder(int fd, char *who, size_t n)
{
    for (int tries = 0; tries < 100; tries++) {
        ssize_t got = pread(fd, who, n - 1, 0);
        who[got > 0 ? got : 0] = 0;
        int whole = got > 0 && who[got - 1] == '\n';
        who[strcspn(who, "\n")] = 0;
        if (whole && !stale(who))
            return;
        usleep(10000);
    }
    if (!*who)
        snprintf(who, n, "a process that wrote no pid in the lock file");
}

/* Takes dir's lock for the rest of this process's life, or dies (exit 1)
 * naming the process that holds it. Returns -1, errno set, when the lock
 * file cannot be opened (dir is not there yet). */
int lock_out_dir(const char *dir)
{
    char path[4200], who[512];
    snprintf(path, sizeof path, "%s/%s", dir, LOCK_FILE);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    if (already_held(fd)) {
        close(fd);
        return 0;
    }
    if (!flock(fd, LOCK_EX | LOCK_NB)) {
        record_holder(fd);
        held_fd = fd; /* kept open: closing it would drop the lock */
        return 0;
    }
    if (errno == EWOULDBLOCK) {
        read_holder(fd, who, sizeof who);
        die(1, "%s: another run writes into this directory: %s (its lock file %s); wait for "
            "it to end, or choose another --out", dir, who, path);
    }
    /* a file system without locks: run as before the lock, and say so */
    fprintf(stderr, "gpt: %s: cannot lock (%s); nothing stops a second run from writing "
            "into %s\n", path, strerror(errno), dir);
    close(fd);
    return 0;
}

/* Waits while another process holds dir's lock (a run of a killed sweep
 * still saving its checkpoint), saying whom it waits for. Returns -1 when
 * a signal cut the wait short. */
int wait_out_dir(const char *dir)
{
    char path[4200], who[512];
    snprintf(path, sizeof path, "%s/%s", dir, LOCK_FILE);
    int fd = open(path, O_RDWR | O_CLOEXEC), rc = 0;
    if (fd < 0)
        return 0; /* no lock file: nobody has run there */
    if (flock(fd, LOCK_EX | LOCK_NB) && errno == EWOULDBLOCK) {
        read_holder(fd, who, sizeof who);
        fprintf(stderr, "gpt: %s: waiting for %s, which writes there, to end\n", dir, who);
        rc = flock(fd, LOCK_EX) && errno == EINTR ? -1 : 0;
    }
    close(fd); /* and with it the lock, for the run about to start */
    return rc;
}

/* A directory stands for its newest ckpt-*.safetensors. */
void resolve_ckpt(const char *arg, char *path, size_t n)
{
    struct stat st;
    static int steps[MAX_CKPTS];
    if (stat(arg, &st))
        die(1, "%s: cannot open checkpoint (%s)", arg, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        snprintf(path, n, "%s", arg);
    else if (list_ckpts(arg, steps, MAX_CKPTS) < 1)
        die(1, "%s: no ckpt-*.safetensors in this directory", arg);
    else
        ckpt_name(path, n, arg, steps[0]);
}
