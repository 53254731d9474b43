/* tests/test_lock.c: one run per --out directory (cmd/rundir.c's lock).
 * Two trainers started at once: one runs, the other is refused before it
 * writes, naming the holder; a holder frozen (SIGSTOP) at its start and
 * mid-run refuses a second run and the directory does not change; the
 * lock is held from a run's start to its exit (probed while it is frozen);
 * a holder SIGKILLed, or one whose pipe:CMD left a child behind, blocks
 * nobody; gpt shard and gpt sweep are refused too, and a sweep
 * waits for a run directory's old process instead of failing the run.
 * Freezing the holder, not racing it, keeps the checks deterministic. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cmd/rundir.h"
#include "test.h"

#define DIR "tests/tmp/lk"
#define RUN "./gpt train --embed 16 --heads 2 --layers 1 --context 32 --seq 32 --batch 4 " \
            "--eval-batch 8 --eval-every 10 --threads 1 --data " DIR "/d.txt"

static int exit_code(pid_t pid)
{
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int has_exited(pid_t pid)
{
    siginfo_t si = {0};
    return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

/* Does out name pid and this host, as the lock's one-line refusal does? */
static int names_holder(const char *out, pid_t pid)
{
    char host[256] = "", want[400];
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "pid %ld, host %s ", (long)pid, host);
    return strstr(out, want) && strstr(out, "another run writes into this directory") &&
           strchr(out, '\n') == out + strlen(out) - 1;
}

/* Every file of dir with its size and time: what a refused run must not
 * change. */
static void listing(const char *dir, char *out, size_t n)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -lA --full-time %s", dir);
    t_run(cmd, out, n);
}

/* Until the lock file of dir names pid (it has taken the lock). */
static void wait_for_lock(const char *dir, pid_t pid)
{
    char path[512], want[64];
    snprintf(path, sizeof path, "%s/" LOCK_FILE, dir);
    snprintf(want, sizeof want, "pid %ld,", (long)pid);
    for (int ms = 0; ms < 60000 && !has_exited(pid); ms++) {
        char *s = (char *)t_slurp(path, NULL);
        int held = s && strstr(s, want);
        free(s);
        if (held)
            return;
        usleep(1000);
    }
}

/* Every 20 ms until pid ends: stop it (waitpid says stopped: alive, not
 * in its exit, which drops the lock) and try dir's lock from here; it must
 * be taken. Counts the probes and those that found it free; returns pid's
 * exit code. */
static int probe_until_exit(const char *dir, pid_t pid, int *probes, int *found_free)
{
    char path[512];
    int st;
    snprintf(path, sizeof path, "%s/" LOCK_FILE, dir);
    for (;;) {
        usleep(20000);
        kill(pid, SIGSTOP);
        if (waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st))
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        *found_free += fd < 0 || flock(fd, LOCK_SH | LOCK_NB) == 0;
        if (fd >= 0)
            close(fd); /* and a shared lock it may have got */
        ++*probes;
        kill(pid, SIGCONT);
    }
}

/* With holder frozen, a second --auto-resume run on dir: exit 1 naming
 * it, and dir as it was. Then the holder goes on, or is SIGKILLed where
 * it stands (then_kill). */
static void check_refused(const char *when, const char *dir, pid_t holder, int then_kill)
{
    char before[8192], after[8192], out[8192], cmd[512];
    kill(holder, SIGSTOP);
    int alive = !has_exited(holder);
    listing(dir, before, sizeof before);
    snprintf(cmd, sizeof cmd, RUN " --steps 3000 --auto-resume --out %s", dir);
    int rc = t_run(cmd, out, sizeof out);
    listing(dir, after, sizeof after);
    kill(holder, then_kill ? SIGKILL : SIGCONT);
    CHECK(alive && rc == 1 && names_holder(out, holder) && !strcmp(before, after),
          "%s: a second run on a held %s (holder pid %ld %s) gave exit %d, %s: %s", when, dir,
          (long)holder, alive ? "alive" : "already ended", rc,
          strcmp(before, after) ? "and changed the directory" : "the directory unchanged", out);
}

/* Two trainers (seeds 1 and 2) let go at once on one new --out: one ends
 * 0, the other 1 naming the first; the directory is the winner's alone,
 * file for file the same run made alone elsewhere. */
static void check_race(void)
{
    char out[8192];
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "while [ ! -e " DIR "/go ]; do sleep 0.01; done; exec " RUN
                 " --seed %d --steps 1500 --final-bytes 30000 --out " DIR "/r > " DIR
                 "/r%d.log 2>&1", i + 1, i);
        pid[i] = t_spawn(cmd);
    }
    t_run("touch " DIR "/go", out, sizeof out);
    int rc[2] = {exit_code(pid[0]), exit_code(pid[1])};
    int w = rc[1] == 0, l = !w;
    char path[64], cmd[1024];
    snprintf(path, sizeof path, DIR "/r%d.log", l);
    char *said = (char *)t_slurp(path, NULL);
    CHECK(rc[w] == 0 && rc[l] == 1 && said && names_holder(said, pid[w]),
          "two runs at once on one --out: exits %d and %d; the loser said: %s", rc[0], rc[1],
          said ? said : "(nothing)");
    free(said);
    snprintf(cmd, sizeof cmd, RUN " --seed %d --steps 1500 --final-bytes 30000 --out " DIR
             "/solo > /dev/null 2>&1", w + 1);
    t_run(cmd, out, sizeof out);
    int rcmp = t_run("cd " DIR " && for d in r solo; do ls -A $d | grep -v '^events' > $d.ls; "
                     T_LOG_SED " $d/metrics.jsonl > $d.log; done; "
                     "cmp r.ls solo.ls && cmp r.log solo.log && cmp r/ckpt-00001000.safetensors "
                     "solo/ckpt-00001000.safetensors && cmp r/ckpt-00001500.safetensors "
                     "solo/ckpt-00001500.safetensors && ls r | grep -c '^events'",
                     out, sizeof out);
    CHECK(rcmp == 0 && atoi(out) == 1, "the raced directory is not the winner's run alone "
          "(seed %d): %s", w + 1, out);
}

/* A holder frozen at its start and mid-run refuses a second run; SIGKILLed
 * there, its lock blocks nobody: --auto-resume continues its run, and
 * holds the lock from its start to its exit (its final passage of 30000
 * bytes included), probed every 20 ms. */
static void check_held_then_killed(void)
{
    pid_t h = t_spawn("exec " RUN " --steps 3000 --ckpt-every 50 --out " DIR "/h > " DIR
                    "/h1.log 2>&1");
    wait_for_lock(DIR "/h", h);
    check_refused("at its start", DIR "/h", h, 0);
    t_wait_for(t_newest_step, DIR "/h", 100, h);
    check_refused("mid-run", DIR "/h", h, 1);
    int rc = exit_code(h);
    CHECK(rc == 128 + SIGKILL && t_newest_step(DIR "/h") < 3000,
          "the holder was not killed mid-run: exit %d, newest checkpoint %d", rc,
          t_newest_step(DIR "/h"));
    /* its lock file still names it; the kernel dropped the lock with it */
    h = t_spawn("exec " RUN " --steps 3000 --ckpt-every 50 --auto-resume --final-bytes 30000 "
              "--out " DIR "/h > " DIR "/h2.log 2>&1");
    wait_for_lock(DIR "/h", h);
    int probes = 0, found_free = 0;
    rc = probe_until_exit(DIR "/h", h, &probes, &found_free);
    CHECK(probes >= 10 && found_free == 0, "the lock of a run was free at %d of %d probes "
          "between its start and its exit", found_free, probes);
    char *said = (char *)t_slurp(DIR "/h2.log", NULL);
    CHECK(rc == 0 && said && strstr(said, "--auto-resume: continuing from") &&
              t_newest_step(DIR "/h") == 3000,
          "after a SIGKILL, --auto-resume on the dead run's directory: exit %d: %.2000s", rc,
          said ? said : "(nothing)");
    free(said);
}

/* A pipe:CMD's command that leaves a child running (here a sleep) must
 * not keep the lock of a SIGKILLed trainer: the lock file is not
 * inherited. */
static void check_children_do_not_hold(void)
{
    char out[8192];
#define PIPE_RUN RUN " --data 'pipe:(sleep 60 >/dev/null 2>&1 & echo $! >> " DIR "/sleepers); " \
                 "cat " DIR "/sh/train-000000.tar' --test-data " DIR "/d.txt --out " DIR "/p"
    t_run("./gpt shard --out " DIR "/sh " DIR "/d.txt", out, sizeof out);
    pid_t h = t_spawn("exec " PIPE_RUN " --steps 3000 > /dev/null 2>&1");
    t_wait_for(t_steps_logged, DIR "/p", 5, h);
    kill(h, SIGKILL);
    exit_code(h);
    int rc = t_run(PIPE_RUN " --steps 20 --auto-resume", out, sizeof out);
    CHECK(rc == 0, "a pipe:CMD's child kept a SIGKILLed run's lock (exit %d): %.2000s", rc, out);
    char *pids = (char *)t_slurp(DIR "/sleepers", NULL), *at = pids;
    for (long p; at && (p = strtol(at, &at, 10)) > 0;)
        kill((pid_t)p, SIGKILL); /* the sleeps this test started */
    free(pids);
}

/* A lock held by a child of this test, through rundir.c (as gpt holds
 * it), until release. */
struct holder {
    pid_t pid;
    int fd; /* closed: the child ends */
};

static struct holder hold(const char *dir)
{
    int ready[2], end[2];
    char c;
    if (pipe2(ready, O_CLOEXEC) || pipe2(end, O_CLOEXEC)) /* not left to gpt runs */
        return (struct holder){-1, -1};
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]), close(end[1]);
        make_out_dir(dir);
        if (write(ready[1], "x", 1) == 1 && read(end[0], &c, 1) < 0)
            _exit(1);
        _exit(0);
    }
    close(ready[1]), close(end[0]);
    if (read(ready[0], &c, 1) != 1)
        fprintf(stderr, "the holder of %s did not start\n", dir);
    close(ready[0]);
    return (struct holder){pid, end[1]};
}

static void release(struct holder h)
{
    close(h.fd);
    exit_code(h.pid);
}

/* Every command that writes an out directory is refused by a held one,
 * and writes nothing there; released, it runs. */
static void check_commands(void)
{
    static const char *const cmds[] = {
        RUN " --steps 5 --out " DIR "/x",
        RUN " --steps 5 --out " DIR "/x --resume",
        RUN " --steps 5 --out " DIR "/x --auto-resume",
        "./gpt shard --out " DIR "/x " DIR "/d.txt",
        "./gpt sweep --steps 5 --lr 1e-3,2e-3 --data " DIR "/d.txt --out " DIR "/x",
    };
    char out[8192], before[8192], after[8192];
    struct holder h = hold(DIR "/x");
    listing(DIR "/x", before, sizeof before);
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        int rc = t_run(cmds[i], out, sizeof out);
        listing(DIR "/x", after, sizeof after);
        CHECK(rc == 1 && names_holder(out, h.pid) && !strcmp(before, after),
              "%s, on a directory held by pid %ld: exit %d, %s: %s", cmds[i], (long)h.pid, rc,
              strcmp(before, after) ? "the directory changed" : "the directory unchanged", out);
    }
    release(h);
    int rc = t_run(cmds[3], out, sizeof out);
    CHECK(rc == 0, "released, %s failed (%d): %s", cmds[3], rc, out);
}

/* A sweep whose run directory is held (a run of a killed sweep, still
 * saving) waits for it, then runs it. */
static void check_sweep_waits(void)
{
    char out[8192];
    t_run("mkdir -p " DIR "/sw", out, sizeof out);
    struct holder h = hold(DIR "/sw/run");
    pid_t s = t_spawn("exec ./gpt sweep --steps 5 --data " DIR "/d.txt --out " DIR "/sw > " DIR
                    "/sw.log 2>&1");
    char *said = NULL;
    for (int ms = 0; ms < 60000 && !has_exited(s) && !(said && strstr(said, "waiting for"));
         ms += 10) {
        free(said);
        usleep(10000);
        said = (char *)t_slurp(DIR "/sw.log", NULL);
    }
    int waited = said && strstr(said, "waiting for") && !has_exited(s);
    free(said);
    release(h);
    int rc = exit_code(s);
    said = (char *)t_slurp(DIR "/sw.log", NULL);
    CHECK(waited && rc == 0 && t_newest_step(DIR "/sw/run") == 5,
          "a sweep with a held run directory (%s) gave exit %d: %.2000s",
          waited ? "it waited" : "it did not wait", rc, said ? said : "(nothing)");
    free(said);
}

void test_lock(void)
{
    char out[256];
    t_run("rm -rf " DIR " && mkdir -p " DIR, out, sizeof out);
    t_write_words(DIR "/d.txt", 39000);
    check_race();
    check_held_then_killed();
    check_children_do_not_hold();
    check_commands();
    check_sweep_waits();
}
