/* tests/test_golden.c: the same bits on every machine.
 *
 * tests/test_kernels.c holds the backends of one machine to each other;
 * this suite holds every machine to one committed answer. A short training
 * run (fp32 and bf16, one core and a simulated v3-8 board) on text the
 * tests write themselves must produce a checkpoint, and log step losses,
 * whose SHA-256s are the ones below, on every kernel path the machine can
 * run (GPT_ISA: ref, scalar, avx2, avx512 on x86-64; ref, scalar, neon on
 * arm64) and with the bf16 instruction turned off (GPT_BF16=emulate); each
 * path it cannot run here is a counted skip that says why. ref is the
 * reading mode: the plain-C twins run as the kernels and the compiler
 * fuses nothing, so its hashes hold the twins and the unfused program to
 * every other path's bits. So a run preempted on one machine resumes on
 * another with the same bits, and a change that moves any bit anywhere
 * shows here.
 *
 * The hashes were made by `make test` on x86-64 and reproduced on arm64
 * under qemu-aarch64-static (make test-arm64). A change that means to
 * change the numbers (a new summation order, a new kernel) updates them:
 * run the suite, check that every path agrees, and copy the new hash. */
#include "tensor.h"
#include "test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_DATA "tests/tmp/golden.txt"
/* The default model on a small batch: every kernel of a training step
 * runs, with evals and sampling, in about a second on x86-64. */
#define GOLDEN_RUN                                                                             \
    "--data " GOLDEN_DATA " --steps 8 --batch 8 --eval-every 4 --eval-batch 8 --eval-bytes 24 " \
    "--final-bytes 40 --ckpt-every 8 --seed 7"

/* Whole checkpoint files: when the checksum came to cover the header too,
 * these changed in its 16 hex digits alone (the tensors' bytes did not).
 * GOLDEN_BF16 changed when bf16 attention moved onto the bf16 tiles (P
 * and dS rounded, every product summed in vdpbf16ps's pairs). GOLDEN_FP32
 * and GOLDEN_GELU changed when a head of 8's dQ came to sum its even and
 * odd keys apart (tensor.c, bwd_q_pairs). */
#define GOLDEN_FP32 "b5cad30233a2db54c2154a2fc4dd128aabfa57f39090c15f0a6363d8d10ceac3"
#define GOLDEN_BF16 "2e88c46b4e5ce8cfbb8fc581fa0bd166ea2b0f05c70f98947bc593b9c36cf598"
/* --activation gelu: the GELU kernels' e^x and divisions, on every path */
#define GOLDEN_GELU "012d55a70bbe4748debcbfd148097e07c8001858e430ae0d702652d9d2f93ac6"

/* `gpt sample` from the fp32 golden checkpoint: 4 passages of 200 bytes,
 * past the 128-byte context, so the hash covers the prompt's forward, the
 * batched decode steps (attention_step) and the windows re-run for every
 * byte after the context fills (attention_last), on every path. */
#define GOLDEN_SAMPLE_FLAGS "--num-samples 4 --bytes 200 --seed 7"
#define GOLDEN_SAMPLE "39f97e0dd79afdccd673fb5504a78dd91398907a764126b2ba3a83f78ffd7eff"

/* The steps' logged losses, the run log's "step" lines' step and loss
 * (printed to 9 digits: a float's every bit), which the cores' means,
 * all-reduced, make with one core's bits (kernels.h, k_xent's seg). They
 * changed when the loss came to be summed by the tree of leaves. */
#define GOLDEN_FP32_LOSSES "3dbac11807d6827fb4ae554fef5b263cf42a982c0196d82685871eba6690db8a"
#define GOLDEN_BF16_LOSSES "4f5b0811ab87ab06cef7dd2eed43d4508e74026f56e8129cb81b2fb358cdd9a0"
#define GOLDEN_GELU_LOSSES "0f4b709c061517d9b56d4573f75aecdc8c9185a4163b5822d6dba758b564c495"
#define LOSS_LINES "grep -o '\"kind\":\"step\",\"step\":[0-9]*,\"loss\":[^,]*'"

/* One core and eight give the same bits (the tree of tensor.h), so each
 * precision has one hash of the checkpoint and one of the losses. */
static const struct {
    const char *name, *flags, *sha256, *losses;
} golden[] = {
    {"fp32, 1 core", "", GOLDEN_FP32, GOLDEN_FP32_LOSSES},
    {"fp32, --tpu v3-8", "--tpu v3-8", GOLDEN_FP32, GOLDEN_FP32_LOSSES},
    {"bf16, 1 core", "--precision bf16", GOLDEN_BF16, GOLDEN_BF16_LOSSES},
    {"bf16, --tpu v3-8", "--precision bf16 --tpu v3-8", GOLDEN_BF16, GOLDEN_BF16_LOSSES},
    {"fp32 gelu, 1 core", "--activation gelu", GOLDEN_GELU, GOLDEN_GELU_LOSSES},
    {"fp32 gelu, --tpu v3-8", "--activation gelu --tpu v3-8", GOLDEN_GELU, GOLDEN_GELU_LOSSES},
};

/* The checkpoint's SHA-256 after one golden run on path `isa`, or "" if
 * the run failed (its output is printed then). */
static void golden_hash(char hash[65], const char *isa, const char *bf16, const char *flags,
                        const char *out)
{
    char cmd[1024], text[8192];
    hash[0] = 0;
    snprintf(cmd, sizeof cmd, "rm -rf %s && GPT_ISA=%s GPT_BF16=%s ./gpt train " GOLDEN_RUN
                              " %s --out %s > %s.log 2>&1 && sha256sum %s/ckpt-00000008.safetensors",
             out, isa, bf16, flags, out, out, out);
    if (t_run(cmd, text, sizeof text) != 0 || strlen(text) < 64) {
        fprintf(stderr, "golden run failed: %s\n%s\n", cmd, text);
        return;
    }
    memcpy(hash, text, 64);
    hash[64] = 0;
}

/* The SHA-256 of the logged losses of the golden run in out, or "". */
static void losses_hash(char hash[65], const char *out)
{
    char cmd[512], text[256];
    hash[0] = 0;
    snprintf(cmd, sizeof cmd, LOSS_LINES " %s/metrics.jsonl | sha256sum", out);
    if (t_run(cmd, text, sizeof text) != 0 || strlen(text) < 64) {
        fprintf(stderr, "golden losses failed: %s\n%s\n", cmd, text);
        return;
    }
    memcpy(hash, text, 64);
    hash[64] = 0;
}

/* The SHA-256 of what `gpt sample` prints from the checkpoint in dir on
 * path `isa`, or "" if it failed. */
static void sample_hash(char hash[65], const char *isa, const char *dir)
{
    char cmd[1024], text[8192];
    hash[0] = 0;
    snprintf(cmd, sizeof cmd,
             "GPT_ISA=%s ./gpt sample --ckpt %s " GOLDEN_SAMPLE_FLAGS " > %s/sample.txt 2> %s/sample.log"
             " && sha256sum %s/sample.txt",
             isa, dir, dir, dir, dir);
    if (t_run(cmd, text, sizeof text) != 0 || strlen(text) < 64) {
        fprintf(stderr, "golden sample failed: %s\n%s\n", cmd, text);
        return;
    }
    memcpy(hash, text, 64);
    hash[64] = 0;
}

/* The compiled step's fused ops (compiler/fuse.c), counted in the graphs
 * GPT_SAVE_GRAPHS writes after the passes, of one small step on path isa. */
#define UNFUSED_DIR "tests/tmp/golden-unfused"
static int fused_ops(const char *isa)
{
    char cmd[1024], out[256];
    snprintf(cmd, sizeof cmd,
             "rm -rf " UNFUSED_DIR "/%s && mkdir -p " UNFUSED_DIR "/%s && GPT_ISA=%s GPT_SAVE_GRAPHS=" UNFUSED_DIR "/%s/g "
             "GPT_SAVE_GRAPHS_FMT=text ./gpt train --embed 16 --heads 2 --layers 1 --context 16 "
             "--seq 16 --batch 4 --eval-every 1000 --steps 1 --data " GOLDEN_DATA " --out "
             UNFUSED_DIR "/%s/run > /dev/null 2>&1 && cat " UNFUSED_DIR "/%s/g-*-after.txt | "
             "grep -cE ' = (matmul_ex|add_n|xent_grad)\\b'",
             isa, isa, isa, isa, isa, isa);
    int rc = t_run(cmd, out, sizeof out);
    return rc == 0 || rc == 1 ? atoi(out) : -1; /* grep -c exits 1 when it counts 0 */
}

/* The reading mode runs every op the model wrote as its own twin: no
 * fused op in its program, where the plain-C kernels' (every machine's
 * scalar path) has some. */
static void check_reading_unfused(void)
{
    int ref = fused_ops("ref"), fused = fused_ops("scalar");
    CHECK(ref == 0, "GPT_ISA=ref compiled %d fused ops (matmul_ex, add_n, xent_grad), want 0",
          ref);
    CHECK(fused > 0, "GPT_ISA=scalar compiled %d fused ops: the count proves nothing", fused);
}

void test_golden(void)
{
    t_run("mkdir -p tests/tmp", (char[64]){0}, 64);
    t_write_words(GOLDEN_DATA, 200000);
    for (size_t g = 0; g < sizeof golden / sizeof *golden; g++)
        for (int isa = 0; isa <= isa_best(); isa++)
            for (int emulate = 0; emulate <= (isa == isa_best() && bf16_native()); emulate++) {
                char hash[65], out[128];
                const char *bf16 = emulate ? "emulate" : "native";
                snprintf(out, sizeof out, "tests/tmp/golden-%zu-%s-%s", g, isa_name(isa), bf16);
                golden_hash(hash, isa_name(isa), bf16, golden[g].flags, out);
                CHECK(!strcmp(hash, golden[g].sha256),
                      "golden run %s on %s (GPT_BF16=%s): checkpoint sha256 %s, want %s",
                      golden[g].name, isa_name(isa), bf16, hash, golden[g].sha256);
                losses_hash(hash, out);
                CHECK(!strcmp(hash, golden[g].losses),
                      "golden run %s on %s (GPT_BF16=%s): logged losses' sha256 %s, want %s",
                      golden[g].name, isa_name(isa), bf16, hash, golden[g].losses);
            }
    for (int isa = 0; isa <= isa_best(); isa++) { /* from golden[0]'s checkpoint on that path */
        char hash[65], dir[128];
        snprintf(dir, sizeof dir, "tests/tmp/golden-0-%s-native", isa_name(isa));
        sample_hash(hash, isa_name(isa), dir);
        CHECK(!strcmp(hash, GOLDEN_SAMPLE), "golden sample on %s (%s): sha256 %s, want %s",
              isa_name(isa), GOLDEN_SAMPLE_FLAGS, hash, GOLDEN_SAMPLE);
    }
    check_reading_unfused();
    /* the paths the binary has that did not run: said, and why */
    for (int isa = isa_best() + 1; isa <= isa_top(); isa++)
        SKIP_MACHINE("golden runs on %s: %s", isa_name(isa), t_isa_skipped(isa));
    if (t_bf16_skipped())
        SKIP_MACHINE("golden bf16 runs on vdpbf16ps, against GPT_BF16=emulate: %s",
                     t_bf16_skipped());
}
