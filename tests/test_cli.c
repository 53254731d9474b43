/* tests/test_cli.c: the binary as a user runs it: determinism across
 * thread counts, sampling and eval, and a clear one-line refusal with the
 * right exit code for every kind of bad input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tensor.h"
#include "util/threads.h"
#include "util/util.h"
#include "test.h"

#define SMALL "--embed 16 --heads 2 --layers 1 --context 32 --seq 32 --batch 4 " \
              "--eval-batch 8 --eval-every 10 --data tests/tmp/d.txt"

static void write_file(const char *path, const char *s, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(s, 1, n, f);
    fclose(f);
}

static void make_data(void)
{
    char out[256];
    t_run("rm -rf tests/tmp/t? tests/tmp/k? && mkdir -p tests/tmp", out, sizeof out);
    t_write_words("tests/tmp/d.txt", 39000);
}

static void check_determinism(void)
{
    char out[65536];
    int rc1 = t_run("./gpt train " SMALL " --steps 30 --out tests/tmp/t1 --threads 1", out, sizeof out);
    CHECK(rc1 == 0 && strstr(out, "step      0 | train") && strstr(out, "saved"),
          "small training run failed (%d): %s", rc1, out);
    int rc2 = t_run("./gpt train " SMALL " --steps 30 --out tests/tmp/t2 --threads 2", out, sizeof out);
    CHECK(rc2 == 0, "2-thread run failed: %s", out);
    CHECK(t_same_file("tests/tmp/t1/ckpt-00000030.safetensors", "tests/tmp/t2/ckpt-00000030.safetensors"),
          "1 and 2 threads gave different checkpoints");
}

static void check_learning(void)
{
    char out[65536];
    int rc = t_run("./gpt train " SMALL " --steps 300 --lr 3e-3 --eval-every 299 --out tests/tmp/t3", out, sizeof out);
    float l0 = 0, l1 = 0;
    const char *a = strstr(out, "step      0 |"), *b = strstr(out, "step    299 |");
    CHECK(rc == 0 && a && b && sscanf(a, "step %*d | train %*f | test %f", &l0) == 1 &&
              sscanf(b, "step %*d | train %*f | test %f", &l1) == 1 && l1 < 0.7f * l0,
          "training did not learn: test loss %.3f -> %.3f (%d)", l0, l1, rc);
}

static void check_sample_eval(void)
{
    char a[4096], b[4096], out[4096];
    const char *s = "./gpt sample --ckpt tests/tmp/t3 --prompt 'the cat' --bytes 80 --seed 5";
    CHECK(t_run_stdout(s, a, sizeof a) == 0 && t_run_stdout(s, b, sizeof b) == 0 &&
              !strcmp(a, b) && !strncmp(a, "the cat", 7) && strlen(a) == 81,
          "sampling is not reproducible or has the wrong length: '%s'", a);
    char two[8192], want[sizeof a + sizeof two], c6[4096];
    CHECK(t_run_stdout("./gpt sample --ckpt tests/tmp/t3 --prompt 'the cat' --bytes 200 "
                       "--seed 5 --num-samples 2", two, sizeof two) == 0 &&
              t_run_stdout("./gpt sample --ckpt tests/tmp/t3 --prompt 'the cat' --bytes 200 "
                           "--seed 5", a, sizeof a) == 0 &&
              t_run_stdout("./gpt sample --ckpt tests/tmp/t3 --prompt 'the cat' --bytes 200 "
                           "--seed 6", c6, sizeof c6) == 0,
          "--num-samples 2 failed: %s", two);
    snprintf(want, sizeof want, "==== passage 1 of 2 (seed 5) ====\n%s\n==== passage 2 of 2 "
             "(seed 6) ====\n%s", a, c6);
    CHECK(!strcmp(two, want), "--num-samples 2 --seed 5 is not --seed 5's and --seed 6's "
          "passages: '%s'", two);
    CHECK(t_run_stdout("./gpt sample --ckpt tests/tmp/t3 --prompt 'the' --temperature 0 "
                       "--bytes 40", a, sizeof a) == 0 && strlen(a) == 41,
          "greedy sampling failed: %s", a);
    CHECK(t_run("./gpt eval --ckpt tests/tmp/t3/ckpt-00000300.safetensors --data tests/tmp/d.txt",
              out, sizeof out) == 0 && strstr(out, "loss ") && strstr(out, "bpb "),
          "eval failed: %s", out);
    CHECK(t_run("./gpt train --init tests/torch_init.safetensors --embed 16 --heads 2 --layers 1 "
              "--context 32 --seq 32 --batch 2 --steps 2 --data tests/tmp/d.txt --out tests/tmp/t4",
              out, sizeof out) == 0, "--init of a PyTorch file failed: %s", out);
}

static void check_refusals(void)
{
    static const struct {
        const char *cmd;
        int code;
        const char *says;
    } bad[] = {
        {"./gpt train --bogus 1", 2, "unknown flag '--bogus'"},
        {"./gpt train --steps 0", 2, "--steps"},
        {"./gpt train --batch x", 2, "--batch expects a whole number"},
        {"./gpt train --lr -1", 2, "--lr"},
        {"./gpt train --heads 5", 2, "--heads 5"},
        {"./gpt train --seq 200", 2, "--seq"},
        {"./gpt train --prompt ''", 2, "--prompt"},
        {"./gpt train --steps", 2, "--steps needs a value"},
        {"./gpt frobnicate", 2, "unknown command"},
        {"GPT_ISA=mmx ./gpt train", 2, "GPT_ISA"},
        {"./gpt train " SMALL " --data tests/tmp/missing.txt", 1, "tests/tmp/missing.txt: cannot open"},
        {"./gpt train " SMALL " --data tests/tmp/empty.txt", 1, "empty"},
        {"./gpt train " SMALL " --data tests/tmp/short.txt", 1, "each needs at least 33"},
        {"./gpt train " SMALL " --data tests/tmp/utf8.txt", 1, "offset 10"},
        {"./gpt train " SMALL " --out /proc/nope", 1, "/proc/nope"},
        {"./gpt sample --ckpt tests/tmp/garbage.safetensors", 1, "garbage.safetensors"},
        {"./gpt train " SMALL " --out tests/tmp/t1", 2, "tests/tmp/t1 already holds checkpoints"},
        {"./gpt sample --ckpt tests/tmp/nothing", 1, "tests/tmp/nothing"},
        {"./gpt eval --ckpt tests/tmp/t1 --data tests/tmp/empty.txt", 1, "empty"},
        {"./gpt eval --ckpt tests/tmp/t1 --data tests/tmp/d.txt --redo 3 --chunk 4", 2,
         "--redo lends each pass a board of 8 cores, but a pass's windows (--chunk"},
        {"./gpt eval --ckpt tests/tmp/t1 --redo 9", 2, "--redo must be 0"},
        {"./gpt eval --ckpt tests/tmp/t1 --data tests/tmp/d.txt --device cpu --redo 3", 2,
         "--redo lends each pass a board of 8 cores, but --device cpu lends a board to "
         "training steps only"},
        {"./gpt sample --ckpt tests/tmp/t1 --redo 3", 2, "--redo lends each window step a board "
                                                         "of 8 cores, but its windows, one a "
                                                         "passage (--num-samples)"},
        {"./gpt train --cores 3", 2, "--cores must be a power of two"},
        {"./gpt train --cores 8 --redo 1", 2, "--redo must be 0"},
        {"./gpt train --redo 3 --batch 12", 2, "--redo on one core lends the team a board of 8 "
                                               "cores, but --batch does not split evenly"},
        {"./gpt train --redo 3 --grad-accum 2", 2, "but --grad-accum keeps partial sums"},
        {"./gpt train --tpu v9-8", 2, "--tpu must be one of v2-8"},
        {"./gpt train --batch 4 --tpu v2-8", 2, "--batch 4 does not split evenly over 8 cores"},
        {"./gpt train --device cpu --cores 2", 2, "need --device xla"},
        {"./gpt train --precision fp16", 2, "--precision must be fp32, bf16 or bf16-pure"},
        {"./gpt train --hbm lots", 2, "--hbm must be a size"},
        {"./gpt sample --ckpt tests/tmp/t1 --precision bf8", 2, "--precision"},
        {"./gpt sample --ckpt tests/tmp/t1 --num-samples 0", 2, "--num-samples"},
        {"./gpt sample --ckpt tests/tmp/t1 --num-samples 2 --naive", 2, "--naive"},
        {"./gpt train " SMALL " --out tests/tmp/t1 --auto-resume --resume", 2, "exclude"},
        {"./gpt train " SMALL " --out tests/tmp/t1 --auto-resume --lr 0.5", 2,
         "--lr 0.5 conflicts with the checkpoint's 0.001"},
        {"./gpt train " SMALL " --out tests/tmp/t1 --auto-resume --steps 20", 2, "past --steps 20"},
        {"./gpt train --live sometimes", 2, "--live must be auto, on or off"},
    };
    write_file("tests/tmp/empty.txt", "", 0);
    write_file("tests/tmp/short.txt", "only forty bytes of text, not enough....", 40);
    write_file("tests/tmp/utf8.txt", "plain text\xe2\x80\x99s", 13);
    write_file("tests/tmp/garbage.safetensors", "\x10\0\0\0\0\0\0\0{not json}", 18);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        t_expect_one_line(bad[i].cmd, bad[i].code, bad[i].says);
}

/* Has dir a checkpoint (tmp 0), or the temporary file of one being
 * written, which a kill leaves behind (tmp 1)? */
static int has_ckpt_file(const char *dir, int tmp)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)))
        found |= !strncmp(e->d_name, "ckpt-", 5) && !strstr(e->d_name, ".tmp") == !tmp;
    if (d)
        closedir(d);
    return found;
}

static int has_ckpt(const char *dir) { return has_ckpt_file(dir, 0); }

#define KILLRUN "exec ./gpt train " SMALL " --steps 400 --ckpt-every 3 --keep 2 --out tests/tmp/k1 " \
                ">/dev/null 2>&1"

/* SIGKILL mid-run, resuming each time: each round draws a step 3 to 32
 * past the checkpoint it resumes from, waits for the checkpoint at or past
 * it (so training is under way whatever the machine's speed) and kills
 * 0-3 ms later (many land inside a checkpoint write, as one is written
 * every 3 steps). 8 rounds use under 400 steps, so every kill must hit a
 * live trainer past its drawn step. The final checkpoint must be the uninterrupted run's,
 * byte for byte. */
static void check_kill_resume(void)
{
    char out[65536];
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    t_run("./gpt train " SMALL " --steps 400 --ckpt-every 3 --out tests/tmp/k0", out, sizeof out);
    t_run("rm -rf tests/tmp/k1", out, sizeof out);
    int kills = 0, cut = 0, st, at = 0;
    for (int round = 0; round < 8; round++) {
        int from = t_newest_step("tests/tmp/k1");
        at = from + 3 + rand() % 30;
        pid_t pid = t_spawn(from ? KILLRUN " --resume" : KILLRUN);
        t_wait_for(t_newest_step, "tests/tmp/k1", at, pid);
        usleep((useconds_t)(rand() % 3000));
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        /* killed, and past the drawn step: mid-run */
        kills += WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && t_newest_step("tests/tmp/k1") >= at;
        cut += has_ckpt_file("tests/tmp/k1", 1);
    }
    CHECK(kills == 8, "%d of 8 SIGKILLs (seed %u) hit a trainer mid-run; the last round waited "
          "for step %d, the newest checkpoint is step %d", kills, seed, at,
          t_newest_step("tests/tmp/k1"));
    int rc = t_run(has_ckpt("tests/tmp/k1") ? KILLRUN " --resume" : KILLRUN, out, sizeof out);
    CHECK(rc == 0 &&
              t_same_file("tests/tmp/k0/ckpt-00000400.safetensors", "tests/tmp/k1/ckpt-00000400.safetensors"),
          "after %d SIGKILLs (%d cut a write; seed %u) the resumed run's checkpoint differs (rc %d)",
          kills, cut, seed, rc);
    /* and its run log is the straight run's, once the "time" fields go */
    rc = t_run("for d in k0 k1; do " T_LOG_SED " tests/tmp/$d/metrics.jsonl > "
               "tests/tmp/$d.log; done; cmp tests/tmp/k0.log tests/tmp/k1.log && wc -l < "
               "tests/tmp/k0.log", out, sizeof out);
    CHECK(rc == 0 && atoi(out) > 400, "after %d SIGKILLs (seed %u) the resumed run's log differs "
          "from the straight run's: %s", kills, seed, out);
}

#define AUTO_FLAGS SMALL " --steps 1500 --ckpt-every 3 --threads 1"
#define AUTORUN "./gpt train " AUTO_FLAGS " --keep 2 --auto-resume --out tests/tmp/k3"

/* What a babysitter does: the same --auto-resume command, SIGKILLed at
 * moments drawn from a fixed seed (most land in one of the checkpoint
 * writes, one every 3 steps), then left to finish. Damage from outside,
 * a truncated newest checkpoint, falls back to the one before. The end is
 * the straight run's checkpoint and log; one more rerun exits 0 at once. */
static void check_auto_resume(void)
{
    char out[65536];
    srand(2026);
    t_run("rm -rf tests/tmp/k3 tests/tmp/k4 && ./gpt train " AUTO_FLAGS " --out tests/tmp/k4",
          out, sizeof out);
    int kills = 0, cut = 0, st;
    for (int round = 0; round < 10; round++) {
        pid_t pid = t_spawn("exec " AUTORUN " >/dev/null 2>&1");
        usleep((useconds_t)(20000 + rand() % 130000));
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        kills += WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        cut += has_ckpt_file("tests/tmp/k3", 1);
    }
    int rc = t_run("cd tests/tmp/k3 && f=$(ls ckpt-*.safetensors | tail -1) && head -c 5000 $f "
                   "> x && mv x $f", out, sizeof out);
    CHECK(rc == 0 && kills >= 5, "%d of 10 runs killed, no checkpoint to damage: %s", kills, out);
    rc = t_run(AUTORUN, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "--auto-resume passes it over") &&
              t_same_file("tests/tmp/k4/ckpt-00001500.safetensors",
                          "tests/tmp/k3/ckpt-00001500.safetensors"),
          "after %d SIGKILLs (%d cut a write) and a damaged checkpoint, --auto-resume did not "
          "end with the straight run's checkpoint (rc %d): %.2000s", kills, cut, rc, out);
    rc = t_run("for d in k3 k4; do " T_LOG_SED " tests/tmp/$d/metrics.jsonl > "
               "tests/tmp/$d.log; done; cmp tests/tmp/k3.log tests/tmp/k4.log", out, sizeof out);
    CHECK(rc == 0, "after %d SIGKILLs the --auto-resume run's log differs: %s", kills, out);
    rc = t_run(AUTORUN, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "the run is done") && !strstr(out, "step  ") &&
              t_same_file("tests/tmp/k4/ckpt-00001500.safetensors",
                          "tests/tmp/k3/ckpt-00001500.safetensors"),
          "a finished --auto-resume run, rerun, did not just exit 0 (rc %d): %s", rc, out);
}

/* docs/babysit.sh reruns until 0, and stops on a usage error (2) or after
 * its tries. */
static void check_babysit(void)
{
    char out[4096];
    int rc = t_run("(echo 0 > tests/tmp/n && BABYSIT_DELAY=0 docs/babysit.sh sh -c 'n=$(cat "
                   "tests/tmp/n); echo $((n + 1)) > tests/tmp/n; [ $n -ge 2 ]' && cat tests/tmp/n)",
                   out, sizeof out);
    CHECK(rc == 0 && strstr(out, "try 2 of 20 exited 1") && strstr(out, "\n3\n"),
          "babysit.sh did not rerun a failing command until it exited 0 (rc %d): %s", rc, out);
    rc = t_run("BABYSIT_DELAY=0 BABYSIT_TRIES=2 docs/babysit.sh sh -c 'exit 7'", out, sizeof out);
    CHECK(rc == 7 && strstr(out, "try 2 of 2 exited 7; giving up"), "babysit.sh's limit of "
          "tries (rc %d): %s", rc, out);
    rc = t_run("BABYSIT_DELAY=0 docs/babysit.sh ./gpt train --steps 0", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "not rerunning") && !strstr(out, "try 1"),
          "babysit.sh reran a usage error (rc %d): %s", rc, out);
}

/* The live line shows on a terminal (script's), not with TERM=dumb (a
 * terminal that cannot erase a line) nor --live off; --live on puts it
 * even in a file. */
static void check_live_line(void)
{
    static const struct {
        const char *cmd;
        int live;
    } runs[] = {
        {"TERM=xterm script -qec './gpt train " SMALL " --steps 20 --out tests/tmp/l1' /dev/null", 1},
        {"TERM=dumb script -qec './gpt train " SMALL " --steps 20 --out tests/tmp/l2' /dev/null", 0},
        {"TERM=xterm script -qec './gpt train " SMALL " --steps 20 --live off --out tests/tmp/l3' "
         "/dev/null", 0},
        {"./gpt train " SMALL " --steps 20 --live on --out tests/tmp/l4", 1},
    };
    char out[65536];
    if (t_run("command -v script", out, sizeof out)) {
        SKIP_MISSING("bsdutils", "the live line on a terminal not checked: no script(1)");
        return;
    }
    t_run("rm -rf tests/tmp/l?", out, sizeof out);
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int rc = t_run(runs[i].cmd, out, sizeof out);
        CHECK(rc == 0 && !strstr(out, "\r\033[Kstep ") == !runs[i].live,
              "%s: the live line should %sshow (rc %d)", runs[i].cmd, runs[i].live ? "" : "not ",
              rc);
    }
}

/* SIGTERM finishes the step, saves and exits 143; resuming (with another
 * thread count) ends where an uninterrupted run ends. The signal comes
 * once the run log records 10 steps: mid-run, with 390 to go; and as no
 * checkpoint is due before the end, the one there is the signal's. */
static void check_sigterm(void)
{
    char out[65536];
    t_run("rm -rf tests/tmp/k2 tests/tmp/k2.err", out, sizeof out);
    pid_t pid = t_spawn("exec ./gpt train " SMALL " --steps 400 --out tests/tmp/k2 --threads 2 "
                      ">/dev/null 2>tests/tmp/k2.err");
    t_wait_for(t_steps_logged, "tests/tmp/k2", 10, pid);
    kill(pid, SIGTERM);
    int st, step = -1;
    waitpid(pid, &st, 0);
    char *err = (char *)t_slurp("tests/tmp/k2.err", NULL), ckpt[64];
    const char *said = err ? strstr(err, "stopped by signal 15 after step ") : NULL;
    if (said)
        step = atoi(said + strlen("stopped by signal 15 after step "));
    snprintf(ckpt, sizeof ckpt, "tests/tmp/k2/ckpt-%08d.safetensors", step);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 143 && step >= 10 && step < 400 &&
              access(ckpt, F_OK) == 0 && t_newest_step("tests/tmp/k2") == step,
          "SIGTERM mid-run: exit %d, stopped after step %d, its checkpoint %s (newest %d): %s",
          WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st), step,
          access(ckpt, F_OK) ? "missing" : "saved", t_newest_step("tests/tmp/k2"),
          err ? err : "(no output)");
    free(err);
    int rc = t_run("./gpt train --steps 400 --out tests/tmp/k2 --resume --threads 1 --data tests/tmp/d.txt",
                 out, sizeof out);
    CHECK(rc == 0 && t_same_file("tests/tmp/k0/ckpt-00000400.safetensors", "tests/tmp/k2/ckpt-00000400.safetensors"),
          "resumed after SIGTERM, the final checkpoint differs (rc %d): %s", rc, out);
    rc = t_run("./gpt train --steps 400 --out tests/tmp/k2 --resume --embed 64 --data tests/tmp/d.txt", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--embed 64 conflicts"), "conflicting resume: %d %s", rc, out);
}

/* The promise: a simulated v3-8 (8 cores) writes the checkpoint a
 * single core writes; resuming on another layout changes nothing; the
 * bf16 paths agree with and without vdpbf16ps; too little HBM is refused
 * before the first step. */
static void check_tpu(void)
{
    char out[65536];
    t_run("rm -rf tests/tmp/c1 tests/tmp/c8 tests/tmp/c2 tests/tmp/h1 tests/tmp/bn tests/tmp/be "
          "tests/tmp/ba tests/tmp/bf",
          out, sizeof out);
    int rc = t_run("./gpt train " SMALL " --batch 8 --steps 20 --out tests/tmp/c1 --cores 1", out,
                 sizeof out);
    CHECK(rc == 0, "--cores 1 failed: %s", out);
    rc = t_run("./gpt train " SMALL " --batch 8 --steps 20 --out tests/tmp/c8 --tpu v3-8 --metrics",
             out, sizeof out);
    CHECK(rc == 0 && strstr(out, "ExecuteReplicatedTime") && strstr(out, "AllReduceBytes") &&
              strstr(out, "Device: xla:7"), "--tpu v3-8 run or its metrics failed: %s", out);
    CHECK(t_same_file("tests/tmp/c1/ckpt-00000020.safetensors", "tests/tmp/c8/ckpt-00000020.safetensors"),
          "--tpu v3-8 and --cores 1 wrote different checkpoints");
    rc = t_run("./gpt train " SMALL " --batch 8 --steps 10 --out tests/tmp/c2 --cores 8 && "
             "./gpt train --steps 20 --out tests/tmp/c2 --resume --cores 2 --data tests/tmp/d.txt",
             out, sizeof out);
    CHECK(rc == 0 && t_same_file("tests/tmp/c1/ckpt-00000020.safetensors",
                               "tests/tmp/c2/ckpt-00000020.safetensors"),
          "8 cores resumed on 2 differ from 1 core (rc %d): %s", rc, out);
    if (t_bf16_skipped()) { /* both runs would be the emulation */
        SKIP_MACHINE("bf16 runs with and without vdpbf16ps: %s", t_bf16_skipped());
    } else {
        rc = t_run("./gpt train " SMALL " --steps 10 --out tests/tmp/bn --precision bf16 && "
                   "GPT_BF16=emulate ./gpt train " SMALL " --steps 10 --out tests/tmp/be "
                   "--precision bf16", out, sizeof out);
        CHECK(rc == 0 && t_same_file("tests/tmp/bn/ckpt-00000010.safetensors",
                                     "tests/tmp/be/ckpt-00000010.safetensors"),
              "bf16 with and without vdpbf16ps differ (rc %d): %s", rc, out);
        /* auto, the default, takes whichever of the two is faster here */
        double speed = bf16_dot_speed();
        CHECK(speed > 0.05 && speed < 20, "vdpbf16ps measured at %.3fx the FMA's products a second",
              speed);
        rc = t_run("GPT_BF16=auto ./gpt train " SMALL " --steps 10 --out tests/tmp/ba "
                   "--precision bf16", out, sizeof out);
        CHECK(rc == 0 && t_same_file("tests/tmp/ba/ckpt-00000010.safetensors",
                                     "tests/tmp/be/ckpt-00000010.safetensors"),
              "bf16 under GPT_BF16=auto (vdpbf16ps %.2fx the FMA) differs from the emulation "
              "(rc %d): %s", speed, rc, out);
    }
    rc = t_run("GPT_BF16=fast ./gpt train " SMALL " --steps 1 --out tests/tmp/bf --precision bf16",
               out, sizeof out);
    CHECK(rc == 2 && strstr(out, "GPT_BF16=fast is not one of auto, native, emulate") &&
              !has_ckpt("tests/tmp/bf"),
          "an unknown GPT_BF16 was not refused with exit 2 (rc %d): %s", rc, out);
    rc = t_run("./gpt train " SMALL " --steps 10 --out tests/tmp/h1 --hbm 256K", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "RESOURCE_EXHAUSTED") && strstr(out, "largest buffers") &&
              !strstr(out, "step      0") && !has_ckpt("tests/tmp/h1"),
          "a program over --hbm was not refused before the first step (rc %d): %s", rc, out);
}

/* --grad-accum N: N micro-batches, one optimizer step; every batch
 * reduction is one fixed tree, so the tensors equal one batch of N times
 * the windows (cores, dropout and bf16-pure included); the checkpoint
 * keeps N, a resume keeps it and refuses another. */
static void check_grad_accum(void)
{
    char out[65536];
#define GA(dir) "tests/tmp/" dir "/ckpt-00000006.safetensors"
    static const struct {
        const char *flags, *dir;
    } runs[] = {
        {"--batch 8", "ga-ref"},
        {"--batch 2 --grad-accum 4", "ga-4"},
        {"--batch 4 --grad-accum 2 --cores 2", "ga-2x2"},
        {"--batch 8 --dropout 0.1 --precision bf16-pure", "ga-dref"},
        {"--batch 2 --grad-accum 4 --dropout 0.1 --precision bf16-pure --cores 2", "ga-d4"},
    };
    char cmd[512];
    t_run("rm -rf tests/tmp/ga-*", out, sizeof out);
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        snprintf(cmd, sizeof cmd, "./gpt train " SMALL " --steps 6 --eval-every 3 %s --out "
                 "tests/tmp/%s", runs[i].flags, runs[i].dir);
        int rc = t_run(cmd, out, sizeof out);
        CHECK(rc == 0, "%s: rc %d: %s", runs[i].flags, rc, out);
    }
    CHECK(strstr(out, "gradient accumulation: 4 micro-batches of 2 windows, one optimizer step "
                 "of 8 windows (256 tokens)"), "the run does not say what a step is: %s", out);
    CHECK(t_same_tensors(GA("ga-ref"), GA("ga-4")), "--batch 2 --grad-accum 4 differs from --batch 8");
    CHECK(t_same_tensors(GA("ga-ref"), GA("ga-2x2")),
          "--batch 4 --grad-accum 2 --cores 2 differs from --batch 8");
    CHECK(t_same_tensors(GA("ga-dref"), GA("ga-d4")),
          "with dropout and bf16-pure, --grad-accum 4 on 2 cores differs from --batch 8");
    CHECK(!t_same_tensors(GA("ga-ref"), GA("ga-dref")), "dropout changed nothing");
    int rc = t_run("./gpt train " SMALL " --steps 3 --eval-every 3 --batch 2 --grad-accum 4 "
                   "--out tests/tmp/ga-r && ./gpt train --steps 6 --resume --out tests/tmp/ga-r "
                   "--data tests/tmp/d.txt", out, sizeof out);
    CHECK(rc == 0 && t_same_file(GA("ga-4"), GA("ga-r")),
          "a resumed --grad-accum run differs from the straight one (rc %d): %s", rc, out);
    t_expect_one_line("./gpt train --steps 9 --resume --out tests/tmp/ga-r --data tests/tmp/d.txt "
                      "--grad-accum 2", 2, "--grad-accum 2 conflicts with the checkpoint's 4");
    t_expect_one_line("./gpt train " SMALL " --grad-accum 0 --out tests/tmp/ga-x", 2,
                      "--grad-accum");
    /* the run log: the flag, and a step's tokens are its 8 windows of 32 */
    unsigned char *log = t_slurp("tests/tmp/ga-4/metrics.jsonl", NULL);
    const char *step = log ? strstr((char *)log, "\"kind\":\"step\"") : NULL;
    const char *ms = step ? strstr(step, "\"ms\":") : NULL, *tps = step ? strstr(step, "\"tokens_per_s\":") : NULL;
    double tokens = ms && tps ? atof(ms + 5) * 1e-3 * atof(tps + 15) : 0;
    CHECK(log && strstr((char *)log, "\"grad-accum\":\"4\"") && tokens > 255 && tokens < 257,
          "the run log lacks grad-accum or counts %.1f tokens a step, want 256", tokens);
    free(log);
#undef GA
}

/* A copy of checkpoint `from` at `to` with the metadata text `was`
 * replaced by `now` (of the same length, so the header's size holds). */
static int patch_ckpt(const char *from, const char *to, const char *was, const char *now)
{
    size_t n, len = strlen(was);
    unsigned char *b = t_slurp(from, &n);
    char *at = b ? memmem(b, n, was, len) : NULL;
    /* the checksum redone as the writer does (the whole file, its digits
     * zeros while hashed): the edit is meant, not damage */
    char *sum = b ? memmem(b, n, "\"checksum\":\"", 12) : NULL;
    if (at && sum) {
        memcpy(at, now, len);
        memset(sum + 12, '0', 16);
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64(b, n));
        memcpy(sum + 12, hex, 16);
        write_file(to, (char *)b, n);
    }
    free(b);
    return at && sum;
}

/* The loss `gpt eval` prints for a checkpoint, or -1. */
static float eval_loss(const char *ckpt)
{
    char cmd[512], out[4096];
    float loss = -1;
    snprintf(cmd, sizeof cmd, "./gpt eval --ckpt %s --data tests/tmp/d.txt", ckpt);
    if (t_run(cmd, out, sizeof out) != 0 || !strstr(out, "loss ") ||
        sscanf(strstr(out, "loss "), "loss %f", &loss) != 1)
        return -1;
    return loss;
}

/* --activation gelu: the run differs from ReLU's; its checkpoint records
 * it, so a resume continues with GELU and eval and sample run it (a copy
 * whose key is renamed away, as an older file lacks it, means ReLU and
 * evaluates differently); an unknown name is a one-line refusal naming
 * the flag and the choices. */
static void check_activation(void)
{
    char out[65536];
#define ACT(dir) "tests/tmp/" dir "/ckpt-00000006.safetensors"
    t_run("rm -rf tests/tmp/act-*", out, sizeof out);
    int rc = t_run("./gpt train " SMALL " --steps 6 --eval-every 3 --out tests/tmp/act-relu && "
                   "./gpt train " SMALL " --steps 6 --eval-every 3 --activation gelu "
                   "--out tests/tmp/act-gelu && "
                   "./gpt train " SMALL " --steps 3 --eval-every 3 --activation gelu "
                   "--out tests/tmp/act-r && ./gpt train --steps 6 --resume --out tests/tmp/act-r "
                   "--data tests/tmp/d.txt", out, sizeof out);
    CHECK(rc == 0, "--activation runs failed (rc %d): %s", rc, out);
    CHECK(!t_same_tensors(ACT("act-relu"), ACT("act-gelu")), "--activation gelu changed nothing");
    CHECK(t_same_file(ACT("act-gelu"), ACT("act-r")),
          "a resumed --activation gelu run differs from the straight one");
    t_expect_one_line("./gpt train --steps 9 --resume --out tests/tmp/act-r --data tests/tmp/d.txt "
                      "--activation relu", 2, "--activation relu conflicts with the checkpoint's gelu");
    t_expect_one_line("./gpt train " SMALL " --activation tanh --out tests/tmp/act-x", 2,
                      "--activation must be one of relu, gelu, got 'tanh'");
    CHECK(patch_ckpt(ACT("act-gelu"), "tests/tmp/act-old.safetensors", "\"activation\"",
                     "\"activatioX\""),
          "the gelu checkpoint does not record its activation");
    float gelu = eval_loss(ACT("act-gelu")), old = eval_loss("tests/tmp/act-old.safetensors");
    float relu = eval_loss(ACT("act-relu"));
    CHECK(gelu > 0 && old > 0 && relu > 0 && gelu != old,
          "eval of the gelu checkpoint %.6f, of it without the key (relu) %.6f", gelu, old);
    CHECK(patch_ckpt(ACT("act-gelu"), "tests/tmp/act-bad.safetensors", "\"gelu\"", "\"tanh\"") &&
              eval_loss("tests/tmp/act-bad.safetensors") < 0,
          "eval accepts a checkpoint whose activation is unknown");
    char a[4096], b[4096];
    CHECK(t_run_stdout("./gpt sample --ckpt " ACT("act-gelu") " --prompt 'the' --temperature 0 "
                       "--bytes 200", a, sizeof a) == 0 &&
              t_run_stdout("./gpt sample --ckpt tests/tmp/act-old.safetensors --prompt 'the' "
                           "--temperature 0 --bytes 200", b, sizeof b) == 0 && strcmp(a, b),
          "sampling the gelu checkpoint and it without the key gave the same text: %s", a);
#undef ACT
}

/* One step of the small model, OMP_NUM_THREADS unset: the thread count
 * is gpt's own choice. */
#define ONE_STEP "env -u OMP_NUM_THREADS ./gpt train " SMALL " --steps 1"

/* The banner of `run` (a shell line ending in gpt train's flags) says
 * "kernels, <said>;": the thread count and its reason. */
static void check_banner_threads(const char *run, const char *said, const char *dir)
{
    char cmd[1024], out[65536], want[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s && %s --out %s", dir, run, dir);
    snprintf(want, sizeof want, "kernels, %s;", said);
    int rc = t_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, want), "%s: the banner does not say '%s' (rc %d): %.500s", run,
          want, rc, out);
}

/* The thread count from the machine (the affinity mask: taskset), from
 * --threads and from OMP_NUM_THREADS, each said with its reason. */
static void check_threads_said(void)
{
    char said[160];
    if (cgroup_cpu_quota() > 0) {
        SKIP_MACHINE("the thread count from the cores alone: the tests run under a CPU quota "
                     "of %.3g", cgroup_cpu_quota());
    } else {
        t_threads_said(said, sizeof said, 1);
        check_banner_threads(ONE_STEP, said, "tests/tmp/th-all");
    }
    if (!t_have("taskset -c 0 true"))
        SKIP_MISSING("util-linux", "the thread count under taskset -c 0 not checked: no taskset");
    else
        check_banner_threads("taskset -c 0 " ONE_STEP, "1 thread: 1 core", "tests/tmp/th-one");
    check_banner_threads(ONE_STEP " --threads 3", "3 threads: --threads", "tests/tmp/th-flag");
    check_banner_threads("OMP_NUM_THREADS=3 ./gpt train " SMALL " --steps 1",
                         "3 threads: OMP_NUM_THREADS", "tests/tmp/th-env");
}

/* text into a control file; 0 when the kernel took it (it says so at the
 * write, which fclose makes). */
static int write_control(const char *dir, const char *file, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int bad = fputs(text, f) < 0;
    return fclose(f) || bad ? -1 : 0;
}

/* 1 when the whitespace-separated list in file has word. */
static int control_has(const char *path, const char *word)
{
    char *text = (char *)t_slurp(path, NULL), *tok, *save = NULL;
    int found = 0;
    for (tok = text ? strtok_r(text, " \n", &save) : NULL; tok && !found;
         tok = strtok_r(NULL, " \n", &save))
        found = !strcmp(tok, word);
    free(text);
    return found;
}

/* A new cgroup with a CPU quota of 1.5 cores: cgroup v1's cpu hierarchy
 * (cpu.cfs_quota_us 150000 a period of 100000), else a child of this
 * process's cgroup2 where the cpu controller is enabled (cpu.max
 * "150000 100000"). dir gets its path; NULL, or why none could be made. */
static const char *make_quota_cgroup(char *dir, size_t n)
{
    static const char *const v1[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"};
    static const char *const v2[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
    char path[600], mine[512] = "";
    for (size_t i = 0; i < sizeof v1 / sizeof *v1; i++) {
        snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", v1[i]);
        snprintf(dir, n, "%s/gpt-test-%d", v1[i], (int)getpid());
        if (access(path, F_OK) || mkdir(dir, 0755))
            continue;
        if (!write_control(dir, "cpu.cfs_period_us", "100000") &&
            !write_control(dir, "cpu.cfs_quota_us", "150000"))
            return NULL;
        rmdir(dir);
    }
    char *cg = (char *)t_slurp("/proc/self/cgroup", NULL), *at = cg ? strstr(cg, "0::") : NULL;
    if (at && (at == cg || at[-1] == '\n'))
        sscanf(at + 3, "%511[^\n]", mine);
    free(cg);
    for (size_t i = 0; mine[0] && i < sizeof v2 / sizeof *v2; i++) {
        snprintf(path, sizeof path, "%s%s/cgroup.subtree_control", v2[i], mine);
        snprintf(dir, n, "%s%s/gpt-test-%d", v2[i], strcmp(mine, "/") ? mine : "", (int)getpid());
        if (!control_has(path, "cpu") || mkdir(dir, 0755))
            continue;
        if (!write_control(dir, "cpu.max", "150000 100000"))
            return NULL;
        rmdir(dir);
    }
    return "no cgroup with a CPU quota could be made (no writable cgroup v1 cpu hierarchy, "
           "and no cpu controller enabled below this process's cgroup2)";
}

/* gpt train in a cgroup of 1.5 cores on a machine of 2 or more: 1 thread,
 * and the banner says the quota. The cgroup is removed after. */
static void check_quota(void)
{
    char dir[600], cmd[2048], said[160];
    const char *why = make_quota_cgroup(dir, sizeof dir);
    if (why) {
        SKIP_MACHINE("the thread count under a cgroup CPU quota: %s", why);
        return;
    }
    if (t_cores() < 2 || cgroup_cpu_quota() > 0) {
        SKIP_MACHINE("the thread count under a quota of 1.5: %d core%s here%s", t_cores(),
                     t_cores() > 1 ? "s" : "", cgroup_cpu_quota() > 0 ? ", already a quota" : "");
    } else {
        snprintf(said, sizeof said, "1 thread: %d cores, quota 1.5 -> 1", t_cores());
        /* the shell joins the cgroup, then becomes gpt */
        snprintf(cmd, sizeof cmd, "sh -c 'echo $$ > %s/cgroup.procs && exec \"$@\"' sh "
                 ONE_STEP, dir);
        check_banner_threads(cmd, said, "tests/tmp/th-quota");
    }
    CHECK(rmdir(dir) == 0, "the test's cgroup %s could not be removed", dir);
}

/* A run of SMALL on 8 cores, its own or lent, with --metrics and --profile,
 * into tests/tmp/NAME: its output NAME.txt, its kernel profile's calls
 * NAME.calls ("kernel calls" lines) and its timeline's events per track
 * NAME.tracks ("tid events" lines, 0 the host's). Returns t_run's status. */
static int profiled_run(const char *name, const char *prefix, const char *flags)
{
    char cmd[1024], out[256];
    snprintf(cmd, sizeof cmd,
             "m=tests/tmp/%s; rm -rf $m && %s ./gpt train " SMALL " %s --metrics "
             "--profile $m.json --out $m > $m.txt 2>&1 && sed -n '/^Kernel profile/,$p' $m.txt | "
             "awk '{print $1, $2}' > $m.calls && /usr/bin/python3 -c \"import json, "
             "collections, sys; e = json.load(open(sys.argv[1]))['traceEvents']; [print(t, n) "
             "for t, n in sorted(collections.Counter(x['tid'] for x in e if x['ph'] == 'X')."
             "items())]\" $m.json > $m.tracks", name, prefix, flags);
    return t_run(cmd, out, sizeof out);
}

/* --metrics and --profile while the redo team runs the cores' programs
 * (--redo 3 on 8 cores): only a winning attempt's kernels are reported,
 * so the profile's calls and each core's timeline events are those of a
 * run without the team, however many attempts were redone. The team's
 * run has every thread on one core, and batches of 256, where it redoes
 * a unit every step or two. */
static void check_metrics_on_team(void)
{
    char out[4096];
    if (!t_have("taskset -c 0 true")) {
        SKIP_MISSING("util-linux", "--metrics on the redo team not checked: no taskset");
        return;
    }
    int rc = profiled_run("mr0", "", "--batch 256 --steps 20 --cores 8 --redo 0");
    if (rc == 0)
        rc = profiled_run("mr3", "taskset -c 0", "--batch 256 --steps 20 --cores 8 --redo 3");
    if (rc == 0) /* the cores' tracks (the host's may differ: the team's copies) */
        rc = t_run("m=tests/tmp/mr; grep -h 'the redo team ran' ${m}3.txt && grep -q '^matmul ' "
                   "${m}3.calls && cmp ${m}0.calls ${m}3.calls && for r in 0 3; do grep -v "
                   "'^0 ' $m$r.tracks > $m$r.cores; done && cmp ${m}0.cores ${m}3.cores && echo "
                   "same", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "same"), "--metrics and --profile on the redo team: the "
          "kernel profile's calls or the cores' timeline events differ from a run without "
          "it, or the team did not run (rc %d): %.400s", rc, out);
    /* one core that lends the team a board of 8: the lent cores are on the
     * timeline, and the device keeps its name */
    rc = profiled_run("mrl", "taskset -c 0", "--batch 8 --steps 20 --redo 3");
    if (rc == 0)
        rc = t_run("m=tests/tmp/mrl; grep -a 'Device: xla:7 (xla)' $m.txt && test \"$(cut -d' ' "
                   "-f1 $m.tracks | tr '\\n' ' ')\" = '0 1 2 3 4 5 6 7 8 ' && echo lent", out,
                   sizeof out);
    CHECK(rc == 0 && strstr(out, "lent"), "--metrics and --profile on a board lent to the redo "
          "team: want 'Device: xla:7 (xla)' and events on the host and 8 cores' tracks (rc "
          "%d): %.400s", rc, out);
}

void test_cli(void)
{
    make_data();
    check_determinism();
    check_kill_resume();
    check_auto_resume();
    check_babysit();
    check_live_line();
    check_sigterm();
    check_learning();
    check_sample_eval();
    check_refusals();
    check_tpu();
    check_metrics_on_team();
    check_grad_accum();
    check_activation();
    check_threads_said();
    check_quota();
}
