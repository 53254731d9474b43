/* tests/test_homework.c: the reference workshop's exercises as flags:
 * dropout (its kernels against a direct computation, its masks' rate and
 * determinism across threads and a resume), attention-only blocks, the
 * single residual, learning-rate schedules and gpt sweep. */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor.h"
#include "test.h"

#define TINY "--embed 16 --heads 2 --layers 2 --context 32 --seq 32 --batch 4 " \
             "--eval-batch 8 --eval-every 10 --data tests/tmp/hw.txt"

static float frand(unsigned *s) /* uniform in [-1, 1) */
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) * 0x1.0p-23f - 1.0f;
}

/* Dropout's attention, forward and backward, against P, its mask and the
 * products written out in double; at p = 0 it is k_attention_ref's bits. */
static void check_attention_drop(void)
{
    enum { B = 2, T = 9, C = 12, H = 3, HS = C / H };
    unsigned s = 7;
    int32_t key[2] = {12345, -678}, rows[B * T];
    float qkv[B * T * 3 * C], out[B * T * C], lse[B * H * T], dout[B * T * C];
    float ref[B * T * C], rlse[B * H * T], dq[B * T * 3 * C], dq0[B * T * 3 * C];
    for (int i = 0; i < B * T * 3 * C; i++)
        qkv[i] = frand(&s);
    for (int i = 0; i < B * T * C; i++)
        dout[i] = frand(&s);
    for (int i = 0; i < B * T; i++)
        rows[i] = 100 + i;
    k_attention_drop(out, lse, qkv, rows, key, B, T, C, H, 5, 0.0f);
    k_attention_ref(ref, rlse, qkv, B, T, C, H);
    CHECK(!memcmp(out, ref, sizeof out) && !memcmp(lse, rlse, sizeof lse),
          "attention_drop at p = 0 is not attention's bits");
    k_attention_drop_bwd(dq, dout, qkv, out, lse, rows, key, B, T, C, H, 5, 0.0f);
    k_attention_bwd_ref(dq0, dout, qkv, ref, rlse, B, T, C, H);
    CHECK(!memcmp(dq, dq0, sizeof dq), "attention_drop_bwd at p = 0 is not attention_bwd's bits");

    float p = 0.3f;
    double worst = 0, worst_b = 0;
    k_attention_drop(out, lse, qkv, rows, key, B, T, C, H, 5, p);
    k_attention_drop_bwd(dq, dout, qkv, out, lse, rows, key, B, T, C, H, 5, p);
    double *gq = calloc(B * T * 3 * C, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *x = qkv + (size_t)b * T * 3 * C + 3 * HS * h;
            for (int i = 0; i < T; i++) {
                double sc[T], mx = -1e30, l = 0, m[T], pp[T], dpp[T], o[HS] = {0};
                for (int j = 0; j <= i; j++) {
                    double d = 0;
                    for (int c = 0; c < HS; c++)
                        d += (double)x[i * 3 * C + c] * x[j * 3 * C + HS + c];
                    sc[j] = d / sqrt(HS);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j <= i; j++)
                    l += exp(sc[j] - mx);
                for (int j = 0; j <= i; j++) {
                    m[j] = k_dropout_keep(key, 5, rows[b * T + i], (long)h * T + j, p) / (1.0 - p);
                    pp[j] = exp(sc[j] - mx) / l;
                    for (int c = 0; c < HS; c++)
                        o[c] += pp[j] * m[j] * x[j * 3 * C + 2 * HS + c];
                }
                for (int c = 0; c < HS; c++) {
                    double e = fabs(o[c] - out[(b * T + i) * C + HS * h + c]);
                    worst = e > worst ? e : worst;
                }
                /* backward: dP~ = dO.V, dP = dP~ m, dS = P (dP - sum P dP) */
                const float *g = dout + (b * T + i) * C + HS * h;
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    double dv = 0;
                    for (int c = 0; c < HS; c++)
                        dv += (double)g[c] * x[j * 3 * C + 2 * HS + c];
                    dpp[j] = dv * m[j];
                    D += pp[j] * dpp[j];
                }
                for (int j = 0; j <= i; j++) {
                    double ds = pp[j] * (dpp[j] - D) / sqrt(HS);
                    double *gb = gq + (size_t)b * T * 3 * C + 3 * HS * h;
                    for (int c = 0; c < HS; c++) {
                        gb[i * 3 * C + c] += ds * x[j * 3 * C + HS + c];
                        gb[j * 3 * C + HS + c] += ds * x[i * 3 * C + c];
                        gb[j * 3 * C + 2 * HS + c] += pp[j] * m[j] * g[c];
                    }
                }
            }
        }
    for (int i = 0; i < B * T * 3 * C; i++) {
        double e = fabs(gq[i] - dq[i]);
        worst_b = e > worst_b ? e : worst_b;
    }
    free(gq);
    CHECK(worst < 1e-5, "attention_drop's output is %g from the direct computation", worst);
    CHECK(worst_b < 1e-5, "attention_drop_bwd is %g from the direct computation", worst_b);
}

/* The masks drop about p of the elements, scale the rest by 1/(1-p), and
 * differ between sites, rows and keys. */
static void check_dropout_masks(void)
{
    enum { N = 256, CC = 64 };
    static float x[N * CC], y[N * CC], y2[N * CC];
    int32_t rows[N], key[2] = {1, 2}, other[2] = {1, 3};
    for (int i = 0; i < N; i++)
        rows[i] = i;
    for (int i = 0; i < N * CC; i++)
        x[i] = 1.0f;
    k_dropout(y, x, rows, key, N, CC, 0, 0.2f);
    int dropped = 0, scaled = 1;
    for (int i = 0; i < N * CC; i++) {
        dropped += y[i] == 0;
        scaled &= y[i] == 0 || y[i] == 1.0f / 0.8f;
    }
    double rate = (double)dropped / (N * CC);
    CHECK(fabs(rate - 0.2) < 0.01 && scaled, "dropout 0.2 dropped %.4f (scaled right: %d)", rate,
          scaled);
    k_dropout(y2, x, rows, key, N, CC, 1, 0.2f);
    CHECK(memcmp(y, y2, sizeof y), "two dropout sites share a mask");
    k_dropout(y2, x, rows, other, N, CC, 0, 0.2f);
    CHECK(memcmp(y, y2, sizeof y), "two steps' keys give one mask");
}

/* The step after which a run's output (a file) says it stopped on `sig`,
 * and whether that step's checkpoint is in dir and the newest there; -1
 * when it does not say so. Waits up to a minute for the line: a sweep's
 * runs are not the test's children, it cannot wait for them. */
static int stopped_at(const char *log, int sig, const char *dir, int *saved)
{
    char want[64], ckpt[4200];
    int step = -1;
    snprintf(want, sizeof want, "stopped by signal %d after step ", sig);
    for (int ms = 0; ms < 60000 && step < 0; ms += 10) {
        char *text = (char *)t_slurp(log, NULL), *at = text ? strstr(text, want) : NULL;
        if (at)
            step = atoi(at + strlen(want));
        free(text);
        if (step < 0)
            usleep(10000);
    }
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-%08d.safetensors", dir, step);
    *saved = step > 0 && access(ckpt, F_OK) == 0 && t_newest_step(dir) == step;
    return step;
}

static int meta_says(const char *file, const char *text)
{
    char cmd[512], out[64];
    snprintf(cmd, sizeof cmd, "head -c 65536 %s | tr -d '\\0' | grep -c -F '%s'", file, text);
    return t_run(cmd, out, sizeof out) == 0 && atoi(out) > 0;
}

/* Dropout runs: bit-identical with 1 and 2 threads, on 1 and 4 simulated
 * cores, and across a SIGTERM and resume; different from no dropout;
 * sampling and eval of the checkpoint work (dropout off). */
static void check_dropout_runs(void)
{
    char out[65536];
    int rc = t_run("./gpt train " TINY " --dropout 0.2 --steps 20 --threads 1 --out tests/tmp/h1"
                   " && ./gpt train " TINY " --dropout 0.2 --steps 20 --threads 2 --out "
                   "tests/tmp/h2 && ./gpt train " TINY " --dropout 0.2 --steps 20 --cores 4 "
                   "--out tests/tmp/h3 && ./gpt train " TINY " --steps 20 --out tests/tmp/h4",
                   out, sizeof out);
    CHECK(rc == 0, "dropout runs failed: %s", out);
    CHECK(t_same_file("tests/tmp/h1/ckpt-00000020.safetensors",
                      "tests/tmp/h2/ckpt-00000020.safetensors"),
          "--dropout: 1 and 2 threads gave different checkpoints");
    rc = t_run("cmp -s tests/tmp/h1/ckpt-00000020.safetensors tests/tmp/h4/ckpt-00000020.safetensors",
               out, sizeof out);
    CHECK(rc != 0, "--dropout 0.2 trained the same weights as no dropout");
    rc = t_run("python3 -c \"import json,struct,sys,hashlib\n"
               "def w(p):\n b=open(p,'rb').read();n=struct.unpack('<Q',b[:8])[0];h=json.loads(b[8:8+n]);d=b[8+n:]\n"
               " return hashlib.sha256(b''.join(d[h[k]['data_offsets'][0]:h[k]['data_offsets'][1]] for k in sorted(h) if k!='__metadata__')).hexdigest()\n"
               "print(w('tests/tmp/h1/ckpt-00000020.safetensors')==w('tests/tmp/h3/ckpt-00000020.safetensors'))\"",
               out, sizeof out);
    CHECK(rc == 0 && strstr(out, "True"), "--dropout: 4 simulated cores trained other weights "
          "than 1: %s", out);
    /* SIGTERM mid-run (7 of 600 steps logged, no checkpoint due before
     * the end: the one there is the signal's), then resume with another
     * thread count */
    t_run("rm -rf tests/tmp/h5 tests/tmp/h5.err", out, sizeof out);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c",
              "exec ./gpt train " TINY " --dropout 0.2 --steps 600 --threads 1 "
              "--out tests/tmp/h5 > /dev/null 2>tests/tmp/h5.err", (char *)NULL);
        _exit(127);
    }
    t_wait_for(t_steps_logged, "tests/tmp/h5", 7, pid);
    kill(pid, SIGTERM);
    int st, saved;
    waitpid(pid, &st, 0);
    int step = stopped_at("tests/tmp/h5.err", SIGTERM, "tests/tmp/h5", &saved);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 143 && step >= 7 && step < 600 && saved,
          "--dropout: SIGTERM mid-run gave exit %d, stopped after step %d, its checkpoint %s",
          WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st), step, saved ? "saved" : "missing");
    rc = t_run("./gpt train " TINY " --dropout 0.2 --steps 600 --threads 2 --resume tests/tmp/h5 "
               "--out tests/tmp/h5 "
               "&& ./gpt train " TINY " --dropout 0.2 --steps 600 --out tests/tmp/h6", out,
               sizeof out);
    CHECK(rc == 0 && t_same_file("tests/tmp/h5/ckpt-00000600.safetensors",
                                 "tests/tmp/h6/ckpt-00000600.safetensors"),
          "--dropout: a resumed run differs from a straight one: %s", out);
    rc = t_run("./gpt sample --ckpt tests/tmp/h1 --bytes 40 --temperature 0 && ./gpt eval --ckpt "
               "tests/tmp/h1 --data tests/tmp/hw.txt", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "loss "), "sampling or eval of a dropout run failed: %s", out);
    rc = t_run("./gpt train " TINY " --dropout 1 --steps 2 --out tests/tmp/h7", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--dropout"), "--dropout 1 was not refused (rc %d): %s", rc, out);
}

/* Attention-only blocks and the single residual train, sample and say in
 * their metadata that PyTorch's reference cannot load them. */
static void check_variants(void)
{
    char out[65536];
    int rc = t_run("./gpt train " TINY " --no-mlp --steps 20 --out tests/tmp/h8 && ./gpt train "
                   TINY " --residual once --steps 20 --out tests/tmp/h9 && ./gpt sample --ckpt "
                   "tests/tmp/h8 --bytes 40 && ./gpt sample --ckpt tests/tmp/h9 --bytes 40",
                   out, sizeof out);
    CHECK(rc == 0, "--no-mlp or --residual once failed: %s", out);
    CHECK(meta_says("tests/tmp/h8/ckpt-00000020.safetensors", "cannot load: attention-only") &&
              meta_says("tests/tmp/h9/ckpt-00000020.safetensors", "cannot load: the residual"),
          "a checkpoint PyTorch's reference cannot load does not say so");
    CHECK(meta_says("tests/tmp/h4/ckpt-00000020.safetensors", "\"pytorch_reference\":\"loads\""),
          "the reference's model is not marked as loadable by PyTorch");
    rc = t_run("cmp -s tests/tmp/h8/ckpt-00000020.safetensors tests/tmp/h4/ckpt-00000020.safetensors"
               " || cmp -s tests/tmp/h9/ckpt-00000020.safetensors "
               "tests/tmp/h4/ckpt-00000020.safetensors", out, sizeof out);
    CHECK(rc != 0, "a variant trained the reference's weights");
    rc = t_run("./gpt train " TINY " --residual thrice --steps 2 --out tests/tmp/h10", out,
               sizeof out);
    CHECK(rc == 2 && strstr(out, "--residual"), "--residual thrice was not refused: %s", out);
}

/* Warm-up then decay: the rates the run log records, one compiled step. */
static void check_schedules(void)
{
    char out[65536];
    int rc = t_run("./gpt train " TINY " --steps 6 --lr 1e-3 --warmup 2 --decay linear --min-lr "
                   "1e-4 --metrics --out tests/tmp/h11 | grep -A1 UncachedCompile | tail -1 && "
                   "grep -o '\"lr\":[0-9.e-]*' tests/tmp/h11/metrics.jsonl | cut -d: -f2 | tr '\\n' ' '",
                   out, sizeof out);
    double lr[6] = {0};
    long compiles = 0;
    char *p = strstr(out, "Value:");
    if (p)
        compiles = strtol(p + 6, &p, 10);
    for (int i = 0; p && i < 6; i++)
        lr[i] = strtod(p, &p);
    const double want[6] = {5e-4, 1e-3, 1e-3, 7e-4, 4e-4, 1e-4};
    int ok = rc == 0;
    for (int i = 0; i < 6; i++)
        ok &= fabs(lr[i] - want[i]) < 1e-9;
    CHECK(ok, "warm-up 2 then linear decay gave rates %g %g %g %g %g %g: %s", lr[0], lr[1], lr[2],
          lr[3], lr[4], lr[5], out);
    /* the same run at a constant rate compiles the same programs (the step,
     * the eval's, the sampler's): a rate that changed the step's graph
     * would add one */
    rc = t_run("rm -rf tests/tmp/h11c && ./gpt train " TINY " --steps 6 --lr 1e-3 --metrics "
               "--out tests/tmp/h11c | "
               "grep -A1 UncachedCompile | tail -1", out, sizeof out);
    p = strstr(out, "Value:");
    long constant = p ? strtol(p + 6, NULL, 10) : -1;
    CHECK(compiles > 0 && compiles == constant,
          "a schedule recompiled the step (%ld compiles, %ld at a constant rate)", compiles,
          constant);
    rc = t_run("./gpt train " TINY " --steps 6 --decay cosine --min-lr 1 --out tests/tmp/h12", out,
               sizeof out);
    CHECK(rc == 2 && strstr(out, "--min-lr"), "--min-lr above --lr was not refused: %s", out);
}

/* gpt sweep runs the grid at once, each run in its own directory, and
 * prints the final table; run again, it resumes nothing and redoes
 * nothing; a killed sweep's runs resume to the straight runs' bits. */
static void check_sweep(void)
{
    char out[65536];
    t_run("rm -rf tests/tmp/sw tests/tmp/sw2", out, sizeof out);
    int rc = t_run("./gpt sweep " TINY " --lr 1e-3,3e-3 --no-mlp 0,1 --steps 30 --out tests/tmp/sw",
                   out, sizeof out);
    CHECK(rc == 0 && strstr(out, "4 runs") && strstr(out, "final") &&
              strstr(out, "lr=1e-3,no-mlp=0") && strstr(out, "lr=3e-3,no-mlp=1") &&
              strstr(out, "tests/tmp/sw/loss.svg"),
          "gpt sweep failed or printed no final table: %s", out);
    rc = t_run("ls tests/tmp/sw/lr=3e-3,no-mlp=1/ckpt-00000030.safetensors "
               "tests/tmp/sw/lr=3e-3,no-mlp=1/log.txt tests/tmp/sw/loss.svg", out, sizeof out);
    CHECK(rc == 0, "a sweep run lacks its checkpoint, log or the plot: %s", out);
    rc = t_run("./gpt train " TINY " --lr 3e-3 --no-mlp --steps 30 --out tests/tmp/h13", out,
               sizeof out);
    CHECK(rc == 0 && t_same_file("tests/tmp/h13/ckpt-00000030.safetensors",
                                 "tests/tmp/sw/lr=3e-3,no-mlp=1/ckpt-00000030.safetensors"),
          "a sweep's run differs from the same gpt train alone");
    /* killed outright once both runs have logged 5 steps (mid-run, 3000
     * steps each, no checkpoint due before step 1000): the runs stop as on
     * ^C and save; the same command finishes them */
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", "exec ./gpt sweep " TINY " --lr 1e-3,3e-3 --steps 3000 "
              "--out tests/tmp/sw2 > /dev/null 2>&1", (char *)NULL);
        _exit(127);
    }
    t_wait_for(t_steps_logged, "tests/tmp/sw2/lr=1e-3", 5, pid);
    t_wait_for(t_steps_logged, "tests/tmp/sw2/lr=3e-3", 5, pid);
    kill(pid, SIGKILL);
    int st, saved[2], step[2];
    waitpid(pid, &st, 0);
    step[0] = stopped_at("tests/tmp/sw2/lr=1e-3/log.txt", SIGINT, "tests/tmp/sw2/lr=1e-3", &saved[0]);
    step[1] = stopped_at("tests/tmp/sw2/lr=3e-3/log.txt", SIGINT, "tests/tmp/sw2/lr=3e-3", &saved[1]);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && step[0] >= 5 && step[0] < 3000 &&
              step[1] >= 5 && step[1] < 3000 && saved[0] && saved[1],
          "a SIGKILLed sweep (%s) did not have its runs stop as on ^C mid-run and save: they "
          "stopped after steps %d and %d, checkpoints %s and %s",
          WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "not killed", step[0], step[1],
          saved[0] ? "saved" : "missing", saved[1] ? "saved" : "missing");
    rc = t_run("./gpt sweep " TINY " --lr 1e-3,3e-3 --steps 3000 --out "
               "tests/tmp/sw2 && ./gpt train " TINY " --lr 3e-3 --steps 3000 --out tests/tmp/h14",
               out, sizeof out);
    CHECK(rc == 0 && t_same_file("tests/tmp/h14/ckpt-00003000.safetensors",
                                 "tests/tmp/sw2/lr=3e-3/ckpt-00003000.safetensors"),
          "a killed and rerun sweep's run differs from a straight run: %s", out);
    rc = t_run("./gpt sweep --lr 1e-3,,2 --out tests/tmp/sw3", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--lr"), "an empty value in a sweep list was not refused: %s",
          out);
}

void test_homework(void)
{
    char out[256];
    t_run("rm -rf tests/tmp/h? tests/tmp/h?? && mkdir -p tests/tmp", out, sizeof out);
    t_write_words("tests/tmp/hw.txt", 30000);
    check_attention_drop();
    check_dropout_masks();
    check_dropout_runs();
    check_variants();
    check_schedules();
    check_sweep();
}
