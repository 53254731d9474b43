/* kernels/isa.c: which backend of the kernels runs. The best path the CPU
 * offers (isa_cpu), lowered by GPT_ISA (isa_best; ref, the reading mode,
 * runs the twins: reading.c), switched by the tests (isa_set), and
 * whether the bf16 products use vdpbf16ps (bf16_cpu, GPT_BF16,
 * bf16_dot_speed, bf16_native); kernels_now() gives the table of the
 * current path to the entry points (entry.c). The tables are the
 * backends' (tensor.c, the layer above), each handed in by
 * kernels_register() before main() runs; this file keeps them and picks
 * one, and names nothing of tensor.c. */
#include "kernels/tensor_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- ISA dispatch ---- */

static int isa_best_cached = -1; /* decided once, on first use */
static int isa_current = -1;     /* -1: not chosen yet, means isa_best() */

#if defined(__x86_64__)
#define ISA_TOP ISA_AVX512
static const char *const isa_names[] = {"ref", "scalar", "avx2", "avx512"};
#elif defined(__aarch64__)
#define ISA_TOP ISA_NEON
static const char *const isa_names[] = {"ref", "scalar", "neon"};
#else
#define ISA_TOP ISA_SCALAR
static const char *const isa_names[] = {"ref", "scalar"};
#endif

const char *isa_name(int isa) { return isa >= ISA_REF && isa <= ISA_TOP ? isa_names[isa] : "?"; }

/* Each path's table, as its backend registered it. Written only before
 * main() (by the constructors of tensor.c's objects, and of reading.c's
 * for the twins), read after. */
static const struct kernels *isa_tables[ISA_TOP + 1];

void kernels_register(const struct kernels *k)
{
    for (int i = ISA_REF; i <= ISA_TOP; i++)
        if (!strcmp(k->name, isa_name(i))) {
            isa_tables[i] = k;
            return;
        }
    fprintf(stderr, "gpt: kernels for %s registered, not a path of this architecture\n", k->name);
    exit(1);
}

/* Every path of the architecture must have registered its table: a build
 * that left out one of tensor.c's objects fails at start, whatever the CPU,
 * not later on the one machine that would pick the missing path. */
static void check_tables(void)
{
    for (int i = ISA_REF; i <= ISA_TOP; i++)
        if (!isa_tables[i]) {
            fprintf(stderr, "gpt: no %s kernels in this binary (tensor.c compiled for %s "
                    "registers them, reading.c the twins as ref; the Makefile's BACKENDS)\n",
                    isa_name(i), isa_name(i));
            exit(1);
        }
}

int isa_cpu(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return ISA_AVX2;
    return ISA_SCALAR;
#else
    return ISA_TOP; /* NEON is part of every arm64 CPU */
#endif
}

/* GPT_ISA may only lower the path: asking for more than the CPU has would
 * crash on an illegal instruction, so it is clamped instead. A name of
 * another architecture's path is an error. */
static int env_isa(int cpu)
{
    const char *e = getenv("GPT_ISA");
    if (!e || !*e)
        return cpu;
    for (int i = ISA_REF; i <= ISA_TOP; i++)
        if (!strcmp(e, isa_name(i)))
            return i < cpu ? i : cpu;
    fprintf(stderr, "gpt: GPT_ISA=%s is not one of", e);
    for (int i = ISA_REF; i <= ISA_TOP; i++)
        fprintf(stderr, "%s %s", i ? "," : "", isa_name(i));
    fprintf(stderr, "\n");
    exit(2);
}

int isa_top(void) { return ISA_TOP; }

int bf16_cpu(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#else
    return 0; /* the instruction is x86's */
#endif
}

/* GPT_BF16, checked with GPT_ISA at the first kernel whatever the path
 * (bf16_allowed says what it means): auto when unset. */
const char *bf16_setting(void)
{
    const char *e = getenv("GPT_BF16");
    if (!e || !*e)
        return "auto";
    if (strcmp(e, "auto") && strcmp(e, "native") && strcmp(e, "emulate")) {
        fprintf(stderr, "gpt: GPT_BF16=%s is not one of auto, native, emulate\n", e);
        exit(2);
    }
    return e;
}

/* The first call's work, out of line: so the compiler does not split
 * isa_best into a second copy of its own (isa_best.part.0), and the
 * function has one name in the binary. */
static __attribute__((noinline)) int isa_decide(void)
{
    check_tables();
    bf16_setting();
    int best = env_isa(isa_cpu()); /* a racing second caller computes the same value */
    __atomic_store_n(&isa_best_cached, best, __ATOMIC_RELEASE);
    return best;
}

int isa_best(void)
{
    int best = __atomic_load_n(&isa_best_cached, __ATOMIC_ACQUIRE);
    return best < 0 ? isa_decide() : best;
}

int isa_get(void)
{
    int isa = __atomic_load_n(&isa_current, __ATOMIC_RELAXED);
    return isa < 0 ? isa_best() : isa;
}

void isa_set(int isa)
{
    int best = isa_best();
    if (isa > best)
        isa = best;
    if (isa < ISA_REF)
        isa = ISA_REF;
    __atomic_store_n(&isa_current, isa, __ATOMIC_RELAXED);
}

const struct kernels *kernels_now(void) { return isa_tables[isa_get()]; }

int kernels_reading_mode(void) { return isa_get() == ISA_REF; }

static int bf16_mode = -1; /* 1: vdpbf16ps allowed; decided once, on first use */

#if defined(__x86_64__)
/* How fast vdpbf16ps is here, against the FMA the emulation runs on:
 * the instruction does twice an FMA's products (two pairs a lane), but
 * CPUs differ in how many of it they issue a cycle: as many as FMAs on
 * Zen 4, half as many on some Intel cores, where the emulation (one FMA a
 * product, plus rounding the operands) is faster. A few microseconds of
 * PROBE_CHAINS independent chains of each, alternated, best of
 * PROBE_ROUNDS. */
#define PROBE_CHAINS 12 /* more than latency x ports, so issue bounds it */
#define PROBE_STEPS 1024
#define PROBE_ROUNDS 8

static double probe_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile float probe_sink; /* keeps the chains' results alive */

/* Seconds for PROBE_STEPS rounds of PROBE_CHAINS vdpbf16ps (dot) or
 * vfmadd231ps on 16-lane registers. */
__attribute__((target("avx512bf16,avx512f"))) static double probe_time(int dot)
{
    __m512 acc[PROBE_CHAINS], one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < PROBE_CHAINS; i++)
        acc[i] = _mm512_setzero_ps();
    double t0 = probe_seconds();
    for (int s = 0; s < PROBE_STEPS; s++)
#pragma GCC unroll 12
        for (int i = 0; i < PROBE_CHAINS; i++)
            acc[i] = dot ? _mm512_dpbf16_ps(acc[i], (__m512bh)one, (__m512bh)one)
                         : _mm512_fmadd_ps(acc[i], one, one);
    double t = probe_seconds() - t0;
    for (int i = 1; i < PROBE_CHAINS; i++)
        acc[0] = _mm512_add_ps(acc[0], acc[i]);
    probe_sink = _mm512_reduce_add_ps(acc[0]);
    return t;
}
#endif

double bf16_dot_speed(void)
{
    static double speed = -1; /* measured once; a racing caller may measure too */
    double s;
    __atomic_load(&speed, &s, __ATOMIC_ACQUIRE);
    if (s >= 0)
        return s;
    s = 0;
#if defined(__x86_64__)
    if (bf16_cpu()) {
        double dot = 1e30, fma = 1e30;
        for (int r = 0; r < PROBE_ROUNDS; r++) {
            double d = probe_time(1), f = probe_time(0);
            dot = d < dot ? d : dot;
            fma = f < fma ? f : fma;
        }
        s = 2.0 * fma / dot; /* products a second: two a lane against one */
    }
#endif
    __atomic_store(&speed, &s, __ATOMIC_RELEASE);
    return s;
}

/* GPT_BF16 (read once): auto, the default, runs vdpbf16ps where it does
 * BF16_PAYS times the FMA's products a second (bf16_dot_speed); native
 * wherever the CPU has it (the tests, to check its bits); emulate never
 * (to time or check the emulation in a real run). Each gives the same
 * bits. The first caller's decision stands for the whole process.
 * BF16_PAYS lies between the two kinds of CPU measured: 1.0 on an Intel
 * core with AMX (there a default bf16 step took 1.09x as long on the
 * instruction as emulated), 2.0 on Zen 4 (1.15x fp32's speed on it). */
#define BF16_PAYS 1.33
static int bf16_allowed(void)
{
    int mode = __atomic_load_n(&bf16_mode, __ATOMIC_ACQUIRE);
    if (mode >= 0)
        return mode;
    const char *e = bf16_setting();
    if (!strcmp(e, "emulate") || !bf16_cpu())
        mode = 0;
    else
        mode = !strcmp(e, "native") || bf16_dot_speed() >= BF16_PAYS;
    int unset = -1;
    if (!__atomic_compare_exchange_n(&bf16_mode, &unset, mode, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        mode = unset; /* another thread decided first: its choice */
    return mode;
}

int bf16_native(void) { return kernels_now()->matmul_bf16_native && bf16_allowed(); }
