/* tests/test_mpi.c: pods over MPI, as a user runs them with mpirun. N
 * processes of M simulated cores write the same checkpoint bytes as one
 * process of N x M cores; a killed rank ends the run quickly, and the
 * resumed run still matches; ranks started with different flags are
 * refused. A counted skip when gpt-mpi or mpirun is missing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "util/threads.h"
#include "test.h"

/* As root in CI, 4 ranks on 2 cores, the single-copy mechanism off, as
 * containers need; OpenMP threads left to each rank's own choice. */
#define MPIRUN_OWN_THREADS "mpirun --allow-run-as-root --oversubscribe --bind-to none " \
                           "--mca btl_vader_single_copy_mechanism none "
#define MPIRUN T_MPIRUN
#define DATA "tests/tmp/mpi.txt"
#define TINY_OWN_THREADS "--embed 16 --heads 2 --layers 1 --context 32 --seq 32 --batch 8 " \
                         "--eval-batch 8 --eval-every 10 --data " DATA
#define TINY TINY_OWN_THREADS " --threads 1"
#define CKPT(dir, step) "tests/tmp/" dir "/ckpt-000000" step ".safetensors"

/* One training run of the pod np x cores (np 0: ./gpt, one process). */
static int train(int np, int cores, const char *flags, const char *out_dir, char *out, size_t n)
{
    char cmd[1024];
    if (np)
        snprintf(cmd, sizeof cmd, MPIRUN "-np %d ./gpt-mpi train " TINY " --cores %d %s --out %s",
                 np, cores, flags, out_dir);
    else
        snprintf(cmd, sizeof cmd, "./gpt train " TINY " --cores %d %s --out %s", cores, flags,
                 out_dir);
    return t_run(cmd, out, n);
}

/* Checks one pod layout against one process holding the same replicas. */
static void check_layout(int np, int cores, const char *prec)
{
    char out[65536], flags[64], dir[64], ref[96], got[96];
    snprintf(flags, sizeof flags, "--steps 20 --precision %s", prec);
    snprintf(dir, sizeof dir, "tests/tmp/m-%dx%d-%s", np, cores, prec);
    int rc = train(np, cores, flags, dir, out, sizeof out);
    CHECK(rc == 0, "mpirun -np %d --cores %d %s: rc %d: %s", np, cores, prec, rc, out);
    snprintf(ref, sizeof ref, "tests/tmp/m-ref%d-%s/ckpt-00000020.safetensors", np * cores, prec);
    snprintf(got, sizeof got, "%s/ckpt-00000020.safetensors", dir);
    CHECK(t_same_file(ref, got), "%dx%d %s differs from one process of %d cores", np, cores,
          prec, np * cores);
}

/* Every layout of 4 replicas gives one process's bytes (which are one
 * core's), fp32 and bf16; and so does 1x1. */
static void check_layouts(void)
{
    static const char *const precisions[] = {"fp32", "bf16"};
    char out[65536], flags[64], dir[64];
    for (int p = 0; p < 2; p++) {
        snprintf(flags, sizeof flags, "--steps 20 --precision %s", precisions[p]);
        for (int cores = 1; cores <= 4; cores *= 4) {
            snprintf(dir, sizeof dir, "tests/tmp/m-ref%d-%s", cores, precisions[p]);
            int rc = train(0, cores, flags, dir, out, sizeof out);
            CHECK(rc == 0, "one process, %d cores, %s: rc %d: %s", cores, precisions[p], rc, out);
        }
        char one[96], four[96];
        snprintf(one, sizeof one, "tests/tmp/m-ref1-%s/ckpt-00000020.safetensors", precisions[p]);
        snprintf(four, sizeof four, "tests/tmp/m-ref4-%s/ckpt-00000020.safetensors", precisions[p]);
        CHECK(t_same_file(one, four), "one process, %s: 1 and 4 cores differ", precisions[p]);
        check_layout(1, 1, precisions[p]);
        check_layout(1, 4, precisions[p]);
        check_layout(2, 2, precisions[p]);
        check_layout(4, 1, precisions[p]);
    }
}

/* Only the master prints; the eval loss and metrics cover the pod. */
static void check_output(void)
{
    char out[65536];
    int rc = train(2, 2, "--steps 11 --metrics", "tests/tmp/m-out", out, sizeof out);
    CHECK(rc == 0, "2x2 with --metrics: rc %d: %s", rc, out);
    const char *first = strstr(out, "step      0 |");
    CHECK(first && !strstr(first + 1, "step      0 |"), "not exactly one eval line per step: %s",
          out);
    CHECK(strstr(out, "Metric: CrossHostAllReduceTime") && strstr(out, "CrossHostAllReduceBytes"),
          "no cross-host all-reduce metrics: %s", out);
    CHECK(strstr(out, "rank 0:") && strstr(out, "rank 1:"), "no per-rank step times: %s", out);
    CHECK(strstr(out, "2 hosts x 2 cores"), "the pod's layout is not reported: %s", out);
}

/* The network path: TCP only, no shared memory. */
static void check_tcp(void)
{
    char out[65536];
    int rc = t_run(MPIRUN "--mca btl self,tcp -np 2 ./gpt-mpi train " TINY
                   " --steps 20 --cores 2 --out tests/tmp/m-tcp", out, sizeof out);
    CHECK(rc == 0, "2x2 over TCP: rc %d: %s", rc, out);
    CHECK(t_same_file(CKPT("m-ref4-fp32", "20"), CKPT("m-tcp", "20")),
          "2x2 over TCP differs from one process of 4 cores");
}

/* The eager cpu device all-reduces op by op, across processes too. */
static void check_eager(void)
{
    char out[65536];
    int rc = train(0, 1, "--steps 20 --device cpu", "tests/tmp/m-cpu1", out, sizeof out);
    rc |= train(2, 1, "--steps 20 --device cpu", "tests/tmp/m-cpu2", out, sizeof out);
    CHECK(rc == 0 && t_same_file(CKPT("m-cpu1", "20"), CKPT("m-cpu2", "20")),
          "the eager device over 2 ranks differs from one process (rc %d): %s", rc, out);
}

/* Gradient accumulation in a pod: 2 ranks x 2 cores, 2 micro-batches of
 * 4 windows, write the tensors of one process's batch of 8. */
static void check_grad_accum(void)
{
    char out[65536];
    int rc = train(2, 2, "--steps 20 --batch 4 --grad-accum 2", "tests/tmp/m-ga", out, sizeof out);
    CHECK(rc == 0 && t_same_tensors(CKPT("m-ref1-fp32", "20"), CKPT("m-ga", "20")),
          "2x2 with --grad-accum 2 differs from one process's --batch 8 (rc %d): %s", rc, out);
}

/* Ranks started with different flags are refused, naming the rank. */
/* 4 ranks with a gradient over SMALL_ALL_REDUCE_BYTES (comm.c: 32 KiB):
 * the all-reduce's sharded path, where each rank sums its shard of the 4
 * ranks' copies, must add them in rank order, as one process does. The
 * small models above stay under it (and 2 ranks never take it). */
static void check_large_all_reduce(void)
{
    char out[65536];
    int rc = train(0, 1, "--steps 3 --mlp 256", "tests/tmp/m-big1", out, sizeof out);
    CHECK(rc == 0, "one process, --mlp 256: rc %d: %s", rc, out);
    rc = train(4, 1, "--steps 3 --mlp 256 --metrics", "tests/tmp/m-big4", out, sizeof out);
    const char *bytes = strstr(out, "CrossHostAllReduceBytes");
    CHECK(rc == 0 && bytes, "4x1, --mlp 256: rc %d: %s", rc, out);
    CHECK(t_same_tensors(CKPT("m-big1", "03"), CKPT("m-big4", "03")),
          "4x1 with a %s all-reduce differs from one process", bytes ? bytes : "large");
}

static void check_flag_mismatch(void)
{
    char out[65536];
    int rc = t_run(MPIRUN "-np 1 ./gpt-mpi train " TINY " --steps 5 --out tests/tmp/m-mis : "
                   "-np 1 ./gpt-mpi train " TINY " --steps 6 --out tests/tmp/m-mis", out,
                   sizeof out);
    CHECK(rc == 2 && strstr(out, "rank 1") && strstr(out, "--steps 6"),
          "different flags per rank: rc %d: %s", rc, out);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* An error every rank meets at once is said once, by the master, and the
 * pod exits with its code: a diverged loss (1), a bad flag (2), a bad
 * GPT_COMM_TIMEOUT (2). */
static void check_errors_said_once(void)
{
    char out[65536];
    int rc = t_run(MPIRUN "-np 2 ./gpt-mpi train " TINY " --steps 20 --lr 100 "
                   "--out tests/tmp/m-div", out, sizeof out);
    CHECK(rc == 1 && count(out, "training diverged") == 1 && !strstr(out, "rank 1"),
          "a diverged pod: rc %d, want 1 and one line: %s", rc, out);
    rc = t_run(MPIRUN "-np 2 ./gpt-mpi train " TINY " --steps -3 --out tests/tmp/m-bad", out,
               sizeof out);
    CHECK(rc == 2 && count(out, "--steps") == 1, "a bad flag in a pod: rc %d: %s", rc, out);
    rc = t_run(MPIRUN "-np 2 -x GPT_COMM_TIMEOUT=soon ./gpt-mpi train " TINY " --steps 5 "
               "--out tests/tmp/m-bad", out, sizeof out);
    CHECK(rc == 2 && count(out, "GPT_COMM_TIMEOUT") == 1, "a bad GPT_COMM_TIMEOUT: rc %d: %s",
          rc, out);
}

/* A corpus of 4 shards over 2 ranks: each rank reads its own 2 shards
 * (a logging pipe tells who read what), and the checkpoint is one
 * process's, bit for bit. */
static void check_shards(void)
{
    char out[65536], path[64];
    t_run("rm -rf tests/tmp/m-sh && mkdir -p tests/tmp/m-sh/in", out, sizeof out);
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "tests/tmp/m-sh/in/d%d.txt", i);
        t_write_words(path, 3000);
    }
    FILE *f = fopen("tests/tmp/m-sh/cat.sh", "w");
    if (f) {
        fputs("echo \"$OMPI_COMM_WORLD_RANK $1\" >> tests/tmp/m-sh/reads.log; cat \"$1\"\n", f);
        fclose(f);
    }
#define SH_FLAGS "--data 'pipe:sh tests/tmp/m-sh/cat.sh tests/tmp/m-sh/s/train-00000{0..3}.tar' " \
                 "--test-data tests/tmp/m-sh/in/d0.txt --shuffle-buffer 4 --steps 10"
    int rc = t_run("./gpt shard --out tests/tmp/m-sh/s --max-bytes 12K tests/tmp/m-sh/in && "
                   "./gpt train " TINY " " SH_FLAGS " --out tests/tmp/m-sh/one", out, sizeof out);
    CHECK(rc == 0, "one process on shards: rc %d: %s", rc, out);
    t_run("rm -f tests/tmp/m-sh/reads.log", out, sizeof out);
    rc = t_run(MPIRUN "-np 2 ./gpt-mpi train " TINY " " SH_FLAGS " --out tests/tmp/m-sh/two",
               out, sizeof out);
    CHECK(rc == 0 && t_same_file("tests/tmp/m-sh/one/ckpt-00000010.safetensors",
                                 "tests/tmp/m-sh/two/ckpt-00000010.safetensors"),
          "2 ranks on shards differ from one process (rc %d): %s", rc, out);
    t_run("sort tests/tmp/m-sh/reads.log | sed 's|tests/tmp/m-sh/s/||'", out, sizeof out);
    int r0 = 0, r1 = 0, shards = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), shards++)
        *(line[0] == '0' ? &r0 : &r1) |= 1 << atoi(strchr(line, '-') + 1);
    CHECK(shards == 4 && r0 + r1 == 15 && !(r0 & r1) && r0 && r1,
          "ranks read shards %x and %x (%d reads), want disjoint halves of 4", r0, r1, shards);
#undef SH_FLAGS
}

/* A rank that fails ends the run with its rank named: here rank 1 runs in
 * a directory whose data differs from the master's, then in one without
 * the data file. */
static void check_rank_failures(void)
{
    char out[65536];
    t_run("rm -rf tests/tmp/m-h1 tests/tmp/m-h2 && mkdir -p tests/tmp/m-h1/d tests/tmp/m-h2/d && "
          "cp " DATA " tests/tmp/m-h1/d/x.txt && cp " DATA " tests/tmp/m-h2/d/x.txt && "
          "echo more >> tests/tmp/m-h2/d/x.txt", out, sizeof out);
    const char *run = "--embed 16 --heads 2 --layers 1 --context 32 --seq 32 --batch 8 "
                      "--eval-batch 8 --steps 5 --data d/x.txt --out o";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, MPIRUN "-np 1 -wdir tests/tmp/m-h1 %s/gpt-mpi train %s : "
             "-np 1 -wdir tests/tmp/m-h2 %s/gpt-mpi train %s", getenv("PWD"), run,
             getenv("PWD"), run);
    int rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "gpt: rank 1: d/x.txt differs from the master's --data"),
          "a rank with other data: rc %d: %s", rc, out);
    t_run("rm tests/tmp/m-h2/d/x.txt", out, sizeof out);
    rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "gpt: rank 1: d/x.txt: cannot open data file"),
          "a rank without the data: rc %d: %s", rc, out);
}

/* Resuming a 2x2 run as 4x1 and as one process of 4 cores continues bit
 * for bit. */
static void check_resume_layouts(void)
{
    char out[65536];
    int rc = train(0, 4, "--steps 40", "tests/tmp/m-straight", out, sizeof out);
    rc |= train(2, 2, "--steps 20", "tests/tmp/m-res", out, sizeof out);
    rc |= t_run("cp -r tests/tmp/m-res tests/tmp/m-res2", out, sizeof out);
    rc |= train(4, 1, "--steps 40 --resume", "tests/tmp/m-res", out, sizeof out);
    rc |= train(0, 4, "--steps 40 --resume", "tests/tmp/m-res2", out, sizeof out);
    CHECK(rc == 0, "resume runs failed: %s", out);
    CHECK(t_same_file(CKPT("m-straight", "40"), CKPT("m-res", "40")),
          "2x2 resumed as 4x1 differs from a straight run");
    CHECK(t_same_file(CKPT("m-straight", "40"), CKPT("m-res2", "40")),
          "2x2 resumed as 1x4 differs from a straight run");
}

/* --auto-resume in a pod: the master looks in --out and every rank
 * follows. A fresh run, a rerun of a finished one (exit 0, nothing
 * trained), then more steps past a damaged newest checkpoint, from the
 * one before it: a straight run's bytes. */
static void check_auto_resume(void)
{
    char out[65536];
    int rc = train(2, 2, "--steps 20 --ckpt-every 10 --auto-resume", "tests/tmp/m-auto", out,
                   sizeof out);
    CHECK(rc == 0 && strstr(out, "no checkpoint: a fresh run"), "a fresh --auto-resume pod: "
          "rc %d: %s", rc, out);
    rc = train(2, 2, "--steps 20 --ckpt-every 10 --auto-resume", "tests/tmp/m-auto", out,
               sizeof out);
    CHECK(rc == 0 && strstr(out, "the run is done") && !strstr(out, "step     "),
          "a finished --auto-resume pod, rerun: rc %d: %s", rc, out);
    t_run("head -c 4000 " CKPT("m-auto", "20") " > tests/tmp/m-x && mv tests/tmp/m-x "
          CKPT("m-auto", "20"), out, sizeof out);
    rc = train(2, 2, "--steps 40 --ckpt-every 10 --auto-resume", "tests/tmp/m-auto", out,
               sizeof out);
    CHECK(rc == 0 && strstr(out, "continuing from tests/tmp/m-auto/ckpt-00000010") &&
              t_same_file(CKPT("m-straight", "40"), CKPT("m-auto", "40")),
          "a pod's --auto-resume past a damaged checkpoint differs from a straight run (rc %d): "
          "%s", rc, out);
}

/* Has file path one of the bytes of set (an unreadable file counts)? */
static int has_byte(const char *path, const char *set)
{
    unsigned char *s = t_slurp(path, NULL);
    int found = !s || strpbrk((char *)s, set);
    free(s);
    return found;
}

#define LOGRUN "./gpt-mpi train " TINY " --steps 30 --final-bytes 0"
/* a shell between mpirun and the rank (it forks: the command is not its last) */
#define LOGRUN_SH "sh -c \"" LOGRUN " --out tests/tmp/m-wrap && :\""

/* mpirun gives a rank's stdout a pseudo-terminal even when its own goes to
 * a file: the log must still read like one process's (no live line, the
 * same eval lines), and on a terminal (script's) the live line shows. */
static void check_pod_log(void)
{
    char out[65536];
    int rc = t_run(MPIRUN "-np 2 " LOGRUN " --out tests/tmp/m-log > tests/tmp/m-log.txt && "
                   "./gpt train " TINY " --steps 30 --final-bytes 0 --cores 2 --out "
                   "tests/tmp/m-log1 > tests/tmp/m-log1.txt && grep -a '^step' tests/tmp/m-log.txt "
                   "> tests/tmp/m-log.ev && grep -a '^step' tests/tmp/m-log1.txt | cmp - "
                   "tests/tmp/m-log.ev", out, sizeof out);
    CHECK(rc == 0 && !has_byte("tests/tmp/m-log.txt", "\r\033"), "a pod's log in a file has the live "
          "line, or other eval lines than one process's (rc %d): %s", rc, out);
    rc = t_run("rm -rf tests/tmp/m-wrap && " MPIRUN "-np 2 " LOGRUN_SH " > tests/tmp/m-wrap.txt",
               out, sizeof out);
    CHECK(rc == 0 && !has_byte("tests/tmp/m-wrap.txt", "\r\033"), "a pod's log in a file, the "
          "ranks under a shell, has the live line (rc %d): %s", rc, out);
    if (t_run("command -v script", out, sizeof out)) {
        SKIP_MISSING("bsdutils", "a pod's live line on a terminal not checked: no script(1)");
        return;
    }
    rc = t_run("rm -rf tests/tmp/m-wrap && TERM=xterm script -qec '" MPIRUN "-np 2 " LOGRUN_SH
               "' /dev/null > tests/tmp/m-tty.txt", out, sizeof out);
    unsigned char *tty = t_slurp("tests/tmp/m-tty.txt", NULL);
    CHECK(rc == 0 && tty && strstr((char *)tty, "\r\033[Kstep "), "a pod on a terminal shows "
          "no live line (rc %d): %s", rc, tty ? (char *)tty : out);
    free(tty);
    rc = t_run("TERM=xterm script -qec '" MPIRUN "-np 2 " LOGRUN " --live off --out "
               "tests/tmp/m-off' /dev/null > tests/tmp/m-off.txt", out, sizeof out);
    CHECK(rc == 0 && !has_byte("tests/tmp/m-off.txt", "\033"), "--live off on a terminal still "
          "shows the live line (rc %d)", rc);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

#define KILLRUN "--embed 32 --heads 4 --layers 2 --context 64 --seq 64 --batch 16 " \
                "--eval-batch 16 --eval-every 100 --data " DATA " --threads 1 --ckpt-every 20 " \
                "--keep 100000"

/* The newest checkpoint's step in dir, or -1. */
static int newest_step(const char *dir)
{
    char cmd[256], out[256];
    snprintf(cmd, sizeof cmd, "ls %s | sed -n 's/^ckpt-0*\\([0-9][0-9]*\\)\\.safetensors$/\\1/p' "
             "| sort -n | tail -1", dir);
    return t_run(cmd, out, sizeof out) == 0 && out[0] ? atoi(out) : -1;
}

/* Starts a long 2-rank run in the background and SIGKILLs one rank once it
 * has written two checkpoints; returns the seconds from the kill to the
 * end of mpirun (or a large number when it did not end), rc its code. */
static double kill_a_rank(int *killed, int *rc)
{
    char out[256];
    t_run("rm -rf tests/tmp/m-kill tests/tmp/m-kill.rc", out, sizeof out);
    t_run("(" MPIRUN "-np 2 ./gpt-mpi train " KILLRUN " --steps 1000000 --out tests/tmp/m-kill "
          "> tests/tmp/m-kill.log 2>&1; echo $? > tests/tmp/m-kill.rc) >/dev/null 2>&1 &",
          out, sizeof out);
    double t0 = now_s();
    while (access("tests/tmp/m-kill/ckpt-00000040.safetensors", F_OK) && now_s() - t0 < 120)
        usleep(10000);
    /* a rank, not mpirun nor the shell: their command lines name it too */
    *killed = t_run("pkill -9 -n -f '^./gpt-mpi train .*tests/tmp/m-kill'", out, sizeof out) == 0;
    double t_kill = now_s();
    while (access("tests/tmp/m-kill.rc", F_OK) && now_s() - t_kill < 90)
        usleep(10000);
    double took = now_s() - t_kill;
    t_run("cat tests/tmp/m-kill.rc", out, sizeof out);
    *rc = atoi(out);
    return took;
}

/* A rank that hangs (SIGSTOP) mid-run: within GPT_COMM_TIMEOUT every
 * other rank stops with a line naming it, and the job ends. */
static void check_hung_rank(void)
{
    char out[65536];
    t_run("rm -rf tests/tmp/m-hang tests/tmp/m-hang.rc", out, sizeof out);
    t_run("(" MPIRUN "-np 4 -x GPT_COMM_TIMEOUT=3 ./gpt-mpi train " KILLRUN " --batch 8 "
          "--steps 1000000 --out tests/tmp/m-hang > tests/tmp/m-hang.log 2>&1; "
          "echo $? > tests/tmp/m-hang.rc) >/dev/null 2>&1 &", out, sizeof out);
    double t0 = now_s();
    while (access("tests/tmp/m-hang/ckpt-00000020.safetensors", F_OK) && now_s() - t0 < 120)
        usleep(10000);
    int stopped = t_run("P=$(pgrep -n -f '^./gpt-mpi train .*tests/tmp/m-hang') && "
                        "tr '\\0' '\\n' < /proc/$P/environ | "
                        "sed -n 's/^OMPI_COMM_WORLD_RANK=//p' && kill -STOP $P", out,
                        sizeof out) == 0;
    int rank = atoi(out);
    double t_stop = now_s();
    while (access("tests/tmp/m-hang.rc", F_OK) && now_s() - t_stop < 60)
        usleep(10000);
    double took = now_s() - t_stop;
    char want[64];
    snprintf(want, sizeof want, "no answer for 3 s from rank %d (host ", rank);
    t_run("pkill -KILL -f '^./gpt-mpi train .*tests/tmp/m-hang'; cat tests/tmp/m-hang.log "
          "tests/tmp/m-hang.rc", out, sizeof out);
    CHECK(stopped && took < 30 && strstr(out, want) && strstr(out, "in an all-reduce; stopping "
          "the run"), "a hung rank %d: the pod took %.1f s, or no line names it: %s", rank,
          took, out);
}

/* SIGKILL one rank mid-run: the job ends with an error well within a
 * minute, the newest checkpoint loads, and resuming from it matches a
 * straight run. */
static void check_kill(void)
{
    char out[65536], cmd[1024];
    int killed, rc;
    double took = kill_a_rank(&killed, &rc);
    CHECK(killed && rc != 0 && took < 60, "killing a rank: killed %d, rc %d after %.1f s", killed,
          rc, took);
    int last = newest_step("tests/tmp/m-kill");
    CHECK(last >= 40, "no checkpoint survived the kill (newest step %d)", last);
    CHECK(t_run("./gpt eval --ckpt tests/tmp/m-kill --data " DATA, out, sizeof out) == 0,
          "the newest checkpoint after the kill does not load: %s", out);
    snprintf(cmd, sizeof cmd, MPIRUN "-np 2 ./gpt-mpi train " KILLRUN " --steps %d --resume "
             "--out tests/tmp/m-kill", last + 30);
    rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 0, "resume after the kill: rc %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "./gpt train " KILLRUN " --cores 2 --steps %d "
             "--out tests/tmp/m-kill-straight", last + 30);
    rc = t_run(cmd, out, sizeof out);
    snprintf(cmd, sizeof cmd, "tests/tmp/m-kill/ckpt-%08d.safetensors", last + 30);
    char straight[128];
    snprintf(straight, sizeof straight, "tests/tmp/m-kill-straight/ckpt-%08d.safetensors",
             last + 30);
    CHECK(rc == 0 && t_same_file(cmd, straight),
          "the run resumed after a kill differs from a straight one (rc %d)", rc);
}

/* Two ranks on this host share its cores: each rank's thread count is
 * its share (1 each on a 2-core machine), and each says so in its line of
 * the pod's report (rank 0 in its banner too); the checkpoint is one
 * process's of --cores 2, whose threads are all the cores. */
static void check_ranks_on_host(void)
{
    char out[65536], said[160], want[200];
    if (cgroup_cpu_quota() > 0) {
        SKIP_MACHINE("the threads of 2 ranks on one host: the tests run under a CPU quota");
        return;
    }
    t_threads_said(said, sizeof said, 2);
    int rc = t_run("env -u OMP_NUM_THREADS " MPIRUN_OWN_THREADS "-np 2 ./gpt-mpi train "
                   TINY_OWN_THREADS " --steps 6 --out tests/tmp/m-host", out, sizeof out);
    for (int rank = 0; rank < 2; rank++) {
        snprintf(want, sizeof want, "gpt: rank %d: %s; ", rank, said);
        CHECK(rc == 0 && strstr(out, want), "2 ranks on one host: no line '%s' (rc %d): %s",
              want, rc, out);
    }
    snprintf(want, sizeof want, "kernels, %s;", said);
    CHECK(strstr(out, want), "2 ranks on one host: the banner does not say '%s': %s", want, out);
    rc = t_run("env -u OMP_NUM_THREADS ./gpt train " TINY_OWN_THREADS " --cores 2 --steps 6 "
               "--out tests/tmp/m-host-one", out, sizeof out);
    CHECK(rc == 0 && t_same_file(CKPT("m-host", "06"), CKPT("m-host-one", "06")),
          "2 ranks on one host differ from one process of --cores 2 (rc %d): %s", rc, out);
}

void test_mpi(void)
{
    if (!t_have_mpi("the mpi suite"))
        return;
    char out[256];
    t_run("rm -rf tests/tmp/m-* && mkdir -p tests/tmp", out, sizeof out);
    t_write_words(DATA, 40000);
    check_layouts();
    check_output();
    check_tcp();
    check_eager();
    check_grad_accum();
    check_large_all_reduce();
    check_flag_mismatch();
    check_errors_said_once();
    check_shards();
    check_rank_failures();
    check_resume_layouts();
    check_auto_resume();
    check_pod_log();
    check_kill();
    check_hung_rank();
    check_ranks_on_host();
}
