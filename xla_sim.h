/* xla_sim.h: the device layer. It knows kernels, buffers and timing; it
 * knows nothing of graphs or models. The eager cpu device hands it one
 * kernel instruction at a time; the compiled (xla) path hands it whole
 * programs. It includes the rooms below it, for its callers: the
 * instruction set and op table (device/ops.h), the board
 * (device/board.h), the metrics (device/metrics.h) and the redo team's
 * limits (device/redo.h). Everything below
 * them is tensor.c. */
#ifndef XLA_SIM_H
#define XLA_SIM_H
#include <stdio.h>
#include "tensor.h"
#include "device/ops.h"
#include "device/board.h"
#include "device/metrics.h"
#include "device/redo.h"

/* How floats are computed and stored (--precision). */
enum precision {
    PREC_FP32,
    PREC_BF16,      /* TPU matrix unit: bf16 operands of every product, fp32 sums */
    PREC_BF16_PURE, /* XLA_USE_BF16: every float tensor stored as bf16 */
};

/* Runs one instruction on the calling thread's device. */
void xs_exec(const struct kinstr *k);

/* ---- compiled programs (the xla device) ----
 * The compiler (compiler/) makes a traced graph a Program: kernel
 * instructions whose operands are places, not pointers. A place is an
 * offset in the device arena (temporaries, transferred inputs, outputs)
 * or a bound slot (device buffers that outlive the program: weights,
 * optimizer state, caches). */
enum place_kind { PL_NONE, PL_ARENA, PL_SLOT };

struct place {
    int kind; /* enum place_kind */
    long at;  /* arena byte offset, or slot index */
};

/* An instruction of a compiled program: operands are places (level 3 of 4). */
struct pinstr {
    int op; /* enum kop */
    union kattr attr;
    struct place in[KMAX_IN], out[KMAX_OUT];
};

/* A host buffer copied into the arena before the run, or out after it. */
struct transfer {
    int slot;   /* host pointer's slot */
    long at;    /* arena offset */
    long bytes;
};

typedef struct Program {
    int n;                 /* instructions */
    struct pinstr *ins;    /* [n] */
    size_t arena_bytes;    /* the memory plan's high-water mark */
    int nslots;
    long *slot_bytes;      /* [nslots] each slot's size */
    int nin, nout;
    struct transfer *tin;  /* [nin] host -> device before running */
    struct transfer *tout; /* [nout] device -> host after running */
} Program;

void program_free(Program *p);
/* Runs p replicated on cores xla:0..n-1, core c with slots[c][i] bound to
 * slot i; inputs and outputs are transferred and timed in the metrics. The
 * cores run concurrently (OpenMP across them, each core's kernels on one
 * thread; one core alone gives its kernels every thread) and meet only at
 * KOP_ALL_REDUCE and KOP_ALL_GATHER instructions, which continue across
 * processes. */
void xs_run_replicated(const Program *p, int n, void *const *const *slots);

/* Beside busy programs: the cores' programs up to the first all-reduce
 * run by a team of `threads` that redoes a core's program a descheduled
 * thread holds (device/redo.h); 0 (the default) runs them as above. The
 * same bits either way. A profile or timeline counts each core's kernels
 * once, the winning attempt's. */
void xs_set_redo(int threads);
/* Whether the last program run on several cores was small enough for the
 * team (its arenas and copies within 1 GiB); 0 before one. */
int xs_redo_fits(void);

/* The eager device's attempts (model/eager_board.c): between begin and
 * end, the kernels xs_exec runs on this thread are attempt `gen` at core
 * `core`'s, a unit of the redo team. Once another attempt has finished
 * the core they are skipped (the attempt gives up), and while metrics.c
 * records they are kept, not reported. end returns the attempt's record,
 * or NULL if it gave up; report gives the winner's time and kernels to
 * core `core` (the caller's thread, after redo_run), free takes a record
 * back. */
typedef struct attempt_arena XsAttempt;
void xs_attempt_begin(unsigned gen, int core);
XsAttempt *xs_attempt_end(void);
void xs_attempt_report(const XsAttempt *a, int core);
void xs_attempt_free(XsAttempt *a);
#endif
