/* tests/test.h: the tiny harness every test file shares. */
#ifndef TEST_H
#define TEST_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The checks counted so far. They live in memory that each suite's
 * process shares with tests/run, so that a suite that crashes or hangs
 * keeps the counts it got to (tests/main.c runs each in a process). */
struct t_counts {
    int pass, fail, skip;
};
extern struct t_counts *t_counts;

/* One counted assertion; a failure prints where and why, and goes on. */
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            t_counts->pass++;                                              \
        } else {                                                           \
            t_counts->fail++;                                              \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

/* A check that cannot run here is said and counted, never passed in
 * silence. SKIP_MISSING names the Debian package that would let it run:
 * CI installs every such package, so under CI=true it is a failure.
 * SKIP_MACHINE is for what no package brings (the CPU lacks a feature,
 * GPT_ISA lowers the kernel path, the machine forbids namespaces). */
#define SKIP_MISSING(package, ...) t_skip_at(__FILE__, __LINE__, package, __VA_ARGS__)
#define SKIP_MACHINE(...) t_skip_at(__FILE__, __LINE__, NULL, __VA_ARGS__)
void t_skip_at(const char *file, int line, const char *package, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Why kernel path isa, one the binary has, does not run here ("the CPU
 * lacks avx512", "GPT_ISA=avx2 lowered the choice"), or NULL when it runs. */
const char *t_isa_skipped(int isa);
/* Why k_matmul_bf16 does not run vdpbf16ps here, or NULL when it does or
 * when the binary has no such path (off x86-64 the emulation is all). */
const char *t_bf16_skipped(void);
/* 1 when the shell command exits 0 (its output discarded): is a tool there? */
int t_have(const char *cmd);
/* 1 when the environment says this is CI (CI=true). */
int t_in_ci(void);

/* Largest |a-b| / max(|b|, floor) over n floats. */
double max_rel_err(const float *a, const float *b, size_t n, double floor);

/* Runs cmd through the shell; returns its exit code, output in out (0
 * bytes in it read as '?', so that the string goes on). */
int t_run(const char *cmd, char *out, size_t n);
/* The same, with only cmd's standard output in out: its standard error goes
 * to the suite's, for a test that holds the printed text to an exact want
 * (gpt eval and gpt sample may say on stderr how a busy machine ran them). */
int t_run_stdout(const char *cmd, char *out, size_t n);
/* Starts cmd (a shell line) in the background; returns its pid. */
pid_t t_spawn(const char *cmd);
/* A whole file in memory, NUL-terminated (NULL if unreadable); *n its size
 * (n may be NULL). */
unsigned char *t_slurp(const char *path, size_t *n);
/* Runs cmd: it must exit with code and print one line containing says. */
void t_expect_one_line(const char *cmd, int code, const char *says);
/* 1 when the two files hold the same bytes. */
int t_same_file(const char *a, const char *b);
/* 1 when two checkpoints hold the same tensors, bit for bit (names, types,
 * places and bytes); their metadata (the flags of the run) may differ. */
int t_same_tensors(const char *a, const char *b);
/* Signal tests: a trainer's progress in its --out dir, and a wait for it.
 * The step of dir's newest whole checkpoint (0: none); the steps its run
 * log (metrics.jsonl, flushed each step) records; t_wait_for polls until
 * progress(dir) reaches n, or the child pid exits (left unreaped for the
 * caller's waitpid), or a minute passes. */
int t_newest_step(const char *dir);
int t_steps_logged(const char *dir);
/* How often the text `what` occurs in dir's run log (metrics.jsonl). */
int t_log_count(const char *dir, const char *what);
void t_wait_for(int (*progress)(const char *), const char *dir, int n, pid_t pid);
/* 1 when process pid runs (exists and has not ended: a zombie has), with
 * its parent's pid and its process group in *ppid, *pgrp (either may be
 * NULL); from /proc. */
int t_running(long pid, long *ppid, long *pgrp);
/* At least `at_least` bytes of pseudo-English from a fixed seed. */
void t_write_words(const char *path, size_t at_least);
/* A number's macro as a string literal, for a command line: T_STR(SEQ). */
#define T_STR_(x) #x
#define T_STR(x) T_STR_(x)
/* mpirun as the suites start pods: as root in CI, more ranks than cores,
 * OpenMP threads left free, one thread a rank; the single-copy mechanism
 * off, as containers need. */
#define T_MPIRUN "mpirun --allow-run-as-root --oversubscribe --bind-to none " \
                 "-x OMP_NUM_THREADS=1 --mca btl_vader_single_copy_mechanism none "
/* 1 when mpirun and ./gpt-mpi (which make test builds where mpicc is) are
 * here; else a counted skip of `what` naming the package that brings the
 * missing one. */
int t_have_mpi(const char *what);
/* n bytes of every value, 0 and >= 128 included, from a fixed seed. */
void t_write_bytes(const char *path, size_t n);
/* The windows gpt train draws from the text file path with no --test-data
 * (from its first 80%): steps steps of `windows` windows (--batch x
 * --grad-accum) of seq bytes with --seed seed, drawn here by the library's
 * loader as the run draws them, into out [steps][windows][seq]. */
void t_train_windows(const char *path, int seq, int vocab, uint64_t seed, int windows,
                     int steps, unsigned char *out);
/* The cores this process may run on (its affinity mask), as gpt counts
 * them; and the thread count gpt's banner should say for them, shared by
 * `ranks` processes of a pod on this host (1: alone), with no cgroup CPU
 * quota, as "1 thread: 2 cores, 2 ranks on this host -> 1". */
int t_cores(void);
void t_threads_said(char *buf, size_t n, int ranks);

/* A sed command that leaves of a run log (metrics.jsonl) what must be the
 * same bits run after run: the "time" fields go (a busy machine's figures
 * among them). */
#define T_LOG_SED "sed 's/,\"time\":{[^}]*}}$/}/'"

/* Each suite is one function, listed in tests/main.c. */
void test_kernels(void);
void test_grads(void);
void test_model(void);
void test_ckpt(void);
void test_cli(void);
void test_xla(void);
void test_tpu(void);
void test_mpi(void);
void test_tour(void);
void test_plain(void);
void test_house(void);
void test_lock(void);
void test_data(void);
void test_loader(void);
void test_watch(void);
void test_homework(void);
void test_fmath(void);
void test_golden(void);
void test_numbers(void);
void test_optim(void);
void test_config(void);
void test_progress(void);
void test_remat(void);
void test_shard(void);
void test_accum(void);
void test_bytes(void);
void test_harness(void);
void test_gen(void);

#endif
