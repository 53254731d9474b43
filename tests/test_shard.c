/* tests/test_shard.c: --shard-optimizer (ZeRO-1). Each of a pod's cores
 * keeps only its shard of Adam's moments, updates its shard of the
 * weights after a reduce-scatter and all-gathers them: the checkpoints
 * and run log must be an unsharded run's (Adam is element-wise, and the
 * reduce-scatter adds in the all-reduce's tree), on simulated cores and on
 * a pod's ranks; the state a core holds and plans is 1/N of it; a pod
 * moves no more bytes a step than the all-reduce did; a checkpoint holds
 * the whole state, so a run resumes sharded or not with any N. With
 * --remat too, the bytes are still the plain run's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test.h"

#define DATA "tests/tmp/shard.txt"
/* The model's shape, which params() counts in closed form. */
#define C 16
#define V 128
#define T 32
#define M (4 * C)
#define TINY "--embed 16 --heads 2 --layers 1 --context 32 --seq 32 --batch 8 " \
             "--eval-batch 8 --eval-every 10 --data " DATA " --threads 1"
#define CKPT(dir, step) "tests/tmp/" dir "/ckpt-000000" step ".safetensors"
#define MPIRUN T_MPIRUN

/* The reference's parameters for one block, counted from its definition
 * (tests/reference_model.py): both embeddings, the block's qkv weight,
 * two LayerNorms, the MLP's two Linear layers with biases, the final
 * LayerNorm and the head with its bias. */
static long params(void)
{
    long block = 3L * C * C + 2 * C + 2 * C + ((long)M * C + M) + ((long)C * M + C);
    return (long)C * V + (long)C * T + block + 2 * C + ((long)V * C + V);
}

/* Floats of each core's moment buffers over n ordinals: the largest shard
 * of the flat layout (the parameters, then the loss); one ordinal keeps
 * the moments whole, as an unsharded run does. */
static long shard_floats(int n) { return n == 1 ? params() : (params() + 1 + n - 1) / n; }

/* One run of ./gpt (np 0) or of a pod of np ranks of gpt-mpi. */
static int train(int np, const char *flags, const char *dir, char *out, size_t n)
{
    char cmd[1024];
    if (np)
        snprintf(cmd, sizeof cmd, "rm -rf tests/tmp/%s; " MPIRUN "-np %d ./gpt-mpi train " TINY
                 " %s --out tests/tmp/%s", dir, np, flags, dir);
    else
        snprintf(cmd, sizeof cmd, "rm -rf tests/tmp/%s; ./gpt train " TINY " %s --out tests/tmp/%s",
                 dir, flags, dir);
    return t_run(cmd, out, n);
}

/* The value printed under --metrics' counter `name`, or -1. */
static long counter(const char *out, const char *name)
{
    const char *at = strstr(out, name);
    return at && (at = strstr(at, "Value: ")) ? atol(at + 7) : -1;
}

/* The run logs of tests/tmp/a and tests/tmp/b the same once their
 * "time" fields go: the losses (each step's is gathered with the
 * weights, the layout's last float), rates and eval lines a user reads. */
static int same_log(const char *a, const char *b)
{
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "for d in %s %s; do sed 's/,\"time\":{[^}]*}}$/}/' "
             "tests/tmp/$d/metrics.jsonl > tests/tmp/$d.log || exit 1; done; cmp tests/tmp/%s.log "
             "tests/tmp/%s.log", a, b, a, b);
    return t_run(cmd, out, sizeof out) == 0;
}

/* Sharded and unsharded, on 1, 2 and 8 simulated cores, and with the
 * other ways a step can go (bf16-pure state, micro-batches, dropout), and
 * on a layout the cores do not divide: the same checkpoint bytes, and the
 * same run log. */
static void check_same_bits(void)
{
    static const char *const runs[][2] = {
        {"--cores 1", "c1"}, {"--cores 2", "c2"}, {"--cores 8", "c8"},
        {"--cores 4 --precision bf16-pure", "pure"},
        {"--cores 2 --batch 4 --grad-accum 2", "accum"},
        {"--cores 4 --dropout 0.1", "drop"},
        /* 5700 weights and the loss: 8 does not divide the layout, the
         * last shard ends at its last float */
        {"--cores 8 --embed 12", "odd"}};
    char out[65536], flags[160], a[32], b[32], fa[96], fb[96];
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        snprintf(flags, sizeof flags, "--steps 10 %s", runs[i][0]);
        snprintf(a, sizeof a, "s-%s-u", runs[i][1]);
        int rc = train(0, flags, a, out, sizeof out);
        snprintf(flags, sizeof flags, "--steps 10 %s --shard-optimizer", runs[i][0]);
        snprintf(b, sizeof b, "s-%s-s", runs[i][1]);
        rc |= train(0, flags, b, out, sizeof out);
        snprintf(fa, sizeof fa, "tests/tmp/%s/ckpt-00000010.safetensors", a);
        snprintf(fb, sizeof fb, "tests/tmp/%s/ckpt-00000010.safetensors", b);
        CHECK(rc == 0 && t_same_file(fa, fb),
              "%s: --shard-optimizer changed the checkpoint (rc %d): %s", runs[i][0], rc, out);
        CHECK(rc == 0 && same_log(a, b), "%s: --shard-optimizer changed the run log (the "
              "losses): tests/tmp/%s.log, tests/tmp/%s.log", runs[i][0], a, b);
        snprintf(flags, sizeof flags, "--steps 10 %s --shard-optimizer --remat", runs[i][0]);
        snprintf(b, sizeof b, "s-%s-sr", runs[i][1]);
        rc = train(0, flags, b, out, sizeof out);
        snprintf(fb, sizeof fb, "tests/tmp/%s/ckpt-00000010.safetensors", b);
        CHECK(rc == 0 && t_same_file(fa, fb), "%s: --shard-optimizer with --remat changed the "
              "checkpoint (rc %d): %s", runs[i][0], rc, out);
    }
}

/* The moments a core holds (--metrics) and the state its programs plan
 * (the --hbm refusal's figure: the moments and the i32 step) are 1/N:
 * 2 x 4 bytes x the largest shard, against 2 x 4 x every parameter. */
static void check_state_per_core(void)
{
    char out[65536], flags[96];
    for (int n = 1; n <= 8; n *= 2) {
        snprintf(flags, sizeof flags, "--steps 2 --cores %d --metrics --shard-optimizer", n);
        int rc = train(0, flags, "s-state", out, sizeof out);
        long core = counter(out, "OptimizerStateBytesPerCore");
        long host = counter(out, "OptimizerStateBytesPerHost");
        CHECK(rc == 0 && core == 8 * shard_floats(n) && host == n * core,
              "%d cores: state %ld bytes a core, %ld a host; expected %ld (rc %d)", n, core, host,
              8 * shard_floats(n), rc);
    }
    int rc = train(0, "--steps 2 --cores 8 --metrics", "s-state", out, sizeof out);
    CHECK(rc == 0 && counter(out, "OptimizerStateBytesPerCore") == 8 * params(),
          "unsharded: %ld bytes of state a core, expected %ld", counter(out,
          "OptimizerStateBytesPerCore"), 8 * params());
    static const char *const plans[] = {"--cores 8", "--cores 8 --shard-optimizer"};
    for (int i = 0; i < 2; i++) {
        snprintf(flags, sizeof flags, "--steps 2 --hbm 1K %s", plans[i]);
        rc = train(0, flags, "s-plan", out, sizeof out);
        const char *at = strstr(out, "weights + ");
        long planned = at ? atol(at + 10) : -1, want = 8 * shard_floats(i ? 8 : 1) + 4;
        CHECK(rc == 1 && planned == want, "%s: the plan counts %ld bytes of optimizer state a "
              "core, expected %ld: %s", plans[i], planned, want, out);
    }
}

/* A checkpoint holds the whole state: sharded on 2 cores resumed
 * unsharded on 4, and unsharded on 1 resumed sharded on 8, end with a
 * straight run's bytes; a sharded run's file is an unsharded one's. */
static void check_resume(void)
{
    char out[65536];
    int rc = train(0, "--steps 20", "s-straight", out, sizeof out);
    rc |= train(0, "--steps 10 --cores 2 --shard-optimizer", "s-ra", out, sizeof out);
    rc |= t_run("./gpt train " TINY " --steps 20 --cores 4 --resume --out tests/tmp/s-ra", out,
                sizeof out);
    rc |= train(0, "--steps 10", "s-rb", out, sizeof out);
    rc |= t_run("./gpt train " TINY " --steps 20 --cores 8 --shard-optimizer --resume --out "
                "tests/tmp/s-rb", out, sizeof out);
    CHECK(rc == 0, "resume runs failed: %s", out);
    CHECK(t_same_file(CKPT("s-ra", "10"), CKPT("s-rb", "10")),
          "a sharded run's checkpoint is not an unsharded run's");
    CHECK(t_same_tensors(CKPT("s-straight", "20"), CKPT("s-ra", "20")),
          "sharded on 2 cores, resumed unsharded on 4, differs from a straight run");
    CHECK(t_same_tensors(CKPT("s-straight", "20"), CKPT("s-rb", "20")),
          "unsharded, resumed sharded on 8 cores, differs from a straight run");
}

/* `shard-optimizer = true` in a --config file shards the state. */
static void check_config(void)
{
    char out[65536];
    FILE *f = fopen("tests/tmp/shard.conf", "w");
    if (!f) {
        CHECK(0, "cannot write tests/tmp/shard.conf");
        return;
    }
    fprintf(f, "# ZeRO-1\nshard-optimizer = true\ncores = 4\n");
    fclose(f);
    int rc = train(0, "--steps 2 --metrics --config tests/tmp/shard.conf", "s-conf", out,
                   sizeof out);
    CHECK(rc == 0 && counter(out, "OptimizerStateBytesPerCore") == 8 * shard_floats(4),
          "--config's shard-optimizer = true did not shard (rc %d): %s", rc, out);
}

/* Pods of 2 and 4 ranks, and of 2 ranks x 2 cores, sharded: one process's
 * bytes; the master sends no more than the unsharded all-reduce did (the
 * reduce-scatter and the all-gather are its two halves), also past the
 * all-reduce's 32 KiB threshold (--mlp 256, 4 ranks); state 1/N a core. */
static void check_pods(void)
{
    static const struct { int np; const char *flags; int shards; } pods[] = {
        {2, "--cores 1", 2}, {4, "--cores 1", 4}, {2, "--cores 2", 4}, {4, "--cores 1 --mlp 256", 0}};
    char out[65536], flags[160];
    int rc = train(0, "--steps 10", "s-one", out, sizeof out);
    rc |= train(0, "--steps 10 --mlp 256", "s-one-big", out, sizeof out);
    CHECK(rc == 0, "one process: %s", out);
    for (size_t i = 0; i < sizeof pods / sizeof *pods; i++) {
        long sent[2];
        for (int sh = 0; sh < 2; sh++) {
            snprintf(flags, sizeof flags, "--steps 10 --metrics %s%s", pods[i].flags,
                     sh ? " --shard-optimizer" : "");
            rc = train(pods[i].np, flags, sh ? "s-pod-s" : "s-pod-u", out, sizeof out);
            sent[sh] = counter(out, "CrossHostSentBytes");
            long core = counter(out, "OptimizerStateBytesPerCore");
            CHECK(rc == 0 && (!sh || !pods[i].shards || core == 8 * shard_floats(pods[i].shards)),
                  "pod of %d %s%s: rc %d, %ld bytes of state a core: %s", pods[i].np,
                  pods[i].flags, sh ? " sharded" : "", rc, core, out);
        }
        const char *one = pods[i].shards ? CKPT("s-one", "10") : CKPT("s-one-big", "10");
        CHECK(t_same_file(one, CKPT("s-pod-s", "10")),
              "a sharded pod of %d %s differs from one process", pods[i].np, pods[i].flags);
        CHECK(sent[1] > 0 && sent[1] <= sent[0], "pod of %d %s: sharded sends %ld bytes, the "
              "all-reduce %ld", pods[i].np, pods[i].flags, sent[1], sent[0]);
        printf("  pod of %d %s: the master sent %ld bytes in 10 steps unsharded, %ld sharded\n",
               pods[i].np, pods[i].flags, sent[0], sent[1]);
    }
    static const char *const with_remat[] = {"--remat", "--shard-optimizer --remat"};
    for (int np = 2; np <= 4; np += 2) /* remat on a pod, alone and sharded: one process's bytes */
        for (int w = 0; w < 2; w++) {
            snprintf(flags, sizeof flags, "--steps 10 %s", with_remat[w]);
            rc = train(np, flags, "s-pod-sr", out, sizeof out);
            CHECK(rc == 0 && t_same_file(CKPT("s-one", "10"), CKPT("s-pod-sr", "10")),
                  "a pod of %d with %s differs from one process (rc %d): %s", np, with_remat[w],
                  rc, out);
        }
    rc = train(2, "--steps 10 --device cpu --shard-optimizer", "s-pod-eager", out, sizeof out);
    CHECK(rc == 0 && t_same_file(CKPT("s-one", "10"), CKPT("s-pod-eager", "10")),
          "a sharded pod of 2 on the eager device differs from one process (rc %d): %s", rc, out);
    rc = train(2, "--steps 10 --shard-optimizer", "s-pr", out, sizeof out);
    rc |= t_run("./gpt train " TINY " --steps 20 --cores 4 --shard-optimizer --resume --out "
                "tests/tmp/s-pr", out, sizeof out);
    rc |= train(0, "--steps 20", "s-straight2", out, sizeof out);
    CHECK(rc == 0 && t_same_tensors(CKPT("s-straight2", "20"), CKPT("s-pr", "20")),
          "a sharded pod of 2 resumed on 4 sharded cores differs from a straight run: %s", out);
}

void test_shard(void)
{
    char out[256];
    t_run("mkdir -p tests/tmp", out, sizeof out);
    t_write_words(DATA, 40000);
    check_same_bits();
    check_state_per_core();
    check_resume();
    check_config();
    if (t_have_mpi("the shard suite's pods"))
        check_pods();
}
