/* xla_sim.h: the device layer. It knows kernels, buffers and timing; it
 * knows nothing of graphs or models. The eager cpu device hands it one
 * kernel instruction at a time; the compiled (xla) path hands it whole
 * programs. Everything below it is tensor.c. */
#ifndef XLA_SIM_H
#define XLA_SIM_H
#include <stdio.h>
#include "tensor.h"

/* ---- the kernel instruction set ----
 * Every op the device can run is one line of ops.def: its name, its named
 * operands, the member of union kattr below that holds its attributes, and
 * its FLOP count. From that line come the op's number (enum kop), its row
 * of the op table (kop_info(), xla_sim.c) and its operand indices: the
 * builders (graph.c), the passes (fuse.c) and execution (xla_sim.c) read
 * LAYERNORM_IN_X, LAYERNORM_OUT_MEAN, ..., never a bare in[1]. */
#define OP(NAME, name, attrs, flops, nin, in, nout, out) KOP_##NAME,
enum kop {
#include "device/ops.def"
    KOP_COUNT
};
#undef OP

/* The operand indices of each op, from its lists in ops.def: for
 * OP(LAYERNORM, ..., 3, (X, W, B), 3, (Y, MEAN, RSTD)),
 *   enum { LAYERNORM_IN_X, LAYERNORM_IN_W, LAYERNORM_IN_B, LAYERNORM_NIN };
 *   enum { LAYERNORM_OUT_Y, LAYERNORM_OUT_MEAN, LAYERNORM_OUT_RSTD, LAYERNORM_NOUT };
 * KOP_EACH(n, f, NAME, (a, b, ...)) expands f(NAME, a) f(NAME, b) ...
 * for a list of n names. */
#define KOP_UNPACK(...) __VA_ARGS__
#define KOP_EACH(n, f, op, list) KOP_EACH_(n, f, op, KOP_UNPACK list)
#define KOP_EACH_(n, f, op, ...) KOP_E##n(f, op, __VA_ARGS__)
#define KOP_E0(f, op, ...)
#define KOP_E1(f, op, a) f(op, a)
#define KOP_E2(f, op, a, ...) f(op, a) KOP_E1(f, op, __VA_ARGS__)
#define KOP_E3(f, op, a, ...) f(op, a) KOP_E2(f, op, __VA_ARGS__)
#define KOP_E4(f, op, a, ...) f(op, a) KOP_E3(f, op, __VA_ARGS__)
#define KOP_E5(f, op, a, ...) f(op, a) KOP_E4(f, op, __VA_ARGS__)
#define KOP_E6(f, op, a, ...) f(op, a) KOP_E5(f, op, __VA_ARGS__)
#define KOP_E7(f, op, a, ...) f(op, a) KOP_E6(f, op, __VA_ARGS__)
#define KOP_IN_NAME(op, x) op##_IN_##x,
#define KOP_OUT_NAME(op, x) op##_OUT_##x,
#define OP(NAME, name, attrs, flops, nin, in, nout, out)      \
    enum { KOP_EACH(nin, KOP_IN_NAME, NAME, in) NAME##_NIN }; \
    enum { KOP_EACH(nout, KOP_OUT_NAME, NAME, out) NAME##_NOUT };
#include "device/ops.def"
#undef OP

/* An op's named attributes: the union member its line of ops.def names.
 * A node is created zeroed and attributes are set by name, so two
 * instructions with equal attributes are equal byte for byte (the compiler
 * compares and hashes them as bytes). */
struct embed_attr { long n, c, v, seg; };   /* n tokens, table [c,v] */
struct elementwise_attr { long n; };         /* n elements */
struct matmul_attr {
    long n, p, q; /* c[n,q] from [n,p] x [p,q] (matmul_tn: a is [p,n]) */
    long seg;     /* matmul_tn: rows per leaf of the fixed tree, 0 = one plain sum */
    long bf16;    /* 1: inputs rounded to bf16, fp32 sums (the TPU matrix unit) */
    long relu;    /* matmul_ex: ReLU before the residual adds */
};
struct transpose_attr { long rows, cols; };
struct sum_rows_attr { long n, q, seg; };
struct layernorm_attr { long n, c, seg; };   /* seg: backward only */
struct attention_attr { long B, T, C, H, bf16; };
struct decode_attr { long nb, tmax, C, H; };
struct xent_attr { long n, v; };
struct fill_attr { long n; float value; };
struct adam_attr {
    long n;
    long bf16_state; /* p, m, v stored as bf16 (XLA_USE_BF16) */
    float beta1, beta2, eps; /* the rate is an input: it may change every step */
};
/* micro: micro-batches summed into x (--grad-accum), 1 without */
struct all_reduce_attr { long n, cores, micro; };
/* site: which of the model's dropouts (its masks differ); p: drop probability */
struct dropout_attr { long n, c, site; float p; };
struct attention_drop_attr { long B, T, C, H, site; float p; }; /* B..H as attention_attr */

union kattr {
    struct embed_attr embed;
    struct elementwise_attr elementwise;
    struct matmul_attr matmul;
    struct transpose_attr transpose;
    struct sum_rows_attr sum_rows;
    struct layernorm_attr layernorm;
    struct attention_attr attention;
    struct decode_attr decode;
    struct xent_attr xent;
    struct fill_attr fill;
    struct adam_attr adam;
    struct all_reduce_attr all_reduce;
    struct dropout_attr dropout;
    struct attention_drop_attr attention_drop;
};
/* seg, wherever it appears: the backward reductions over rows sum leaves of
 * seg rows in a fixed tree (tensor.h) so that gradients do not depend on
 * how the batch is split over cores; 0 means a plain sum. */

/* How floats are computed and stored (--precision). */
enum precision {
    PREC_FP32,
    PREC_BF16,      /* TPU matrix unit: bf16 matmul and attention inputs, fp32 sums */
    PREC_BF16_PURE, /* XLA_USE_BF16: every float tensor stored as bf16 */
};

#define KMAX_IN 7
#define KMAX_OUT 3
/* The output generic code (autodiff, dumps) speaks of: an op's first, its
 * only one unless ops.def names more (layernorm's mean and rstd, ...). */
#define KOUT_FIRST 0

/* An instruction at the device: op, attributes, and its operands as
 * pointers (level 4 of 4; graph.c's head comment shows the other three). */
struct kinstr {
    int op; /* enum kop */
    union kattr attr;
    void *in[KMAX_IN];
    void *out[KMAX_OUT];
};

/* One named attribute of an op, for printing it. */
struct kop_attr {
    const char *name;
    int offset;   /* in union kattr */
    int is_float; /* else long */
};

/* The op table's row for one op. */
struct kop_info {
    const char *name;
    int nin, nout;              /* operand counts (add_n: up to nin) */
    struct kop_attr attr[6];    /* its attributes; a NULL name ends the list */
    double (*flops)(const struct kinstr *k); /* floating-point ops one call performs */
};
const struct kop_info *kop_info(int op);
/* Prints "name=value, ..." of k's attributes into buf. */
void kop_format_attrs(char *buf, size_t n, int op, const union kattr *a);

const char *kop_name(int op);
/* Floating-point operations one instruction performs (for GFLOP/s). */
double kop_flops(const struct kinstr *k);
/* Runs one instruction on the calling thread's device. */
void xs_exec(const struct kinstr *k);

/* Per-kernel profile: calls, time and flops per kernel kind. Off by default
 * so that an unprofiled run pays nothing for it. */
void xs_profile_enable(int on);
void xs_profile_report(FILE *f);


/* ---- compiled programs (the xla device) ----
 * graph.c compiles a traced graph into a Program: kernel instructions whose
 * operands are places, not pointers. A place is an offset in the device
 * arena (temporaries, transferred inputs, outputs) or a bound slot (device
 * buffers that outlive the program: weights, optimizer state, caches). */
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
    int nin, nout;
    struct transfer *tin;  /* [nin] host -> device before running */
    struct transfer *tout; /* [nout] device -> host after running */
} Program;

void program_free(Program *p);
/* Runs p replicated on cores xla:0..n-1, core c with slots[c][i] bound to
 * slot i; inputs and outputs are transferred and timed in the metrics. The
 * cores run concurrently (OpenMP across them, each core's kernels on one
 * thread; one core alone gives its kernels every thread) and meet only at
 * KOP_ALL_REDUCE instructions, which continue across processes. */
void xs_run_replicated(const Program *p, int n, void *const *const *slots);

/* ---- the simulated TPU ----
 * A board is a number of cores (devices xla:0..n-1) and the HBM of each.
 * Programs are checked against the HBM when they are compiled. */
#define XS_MAX_CORES 64
struct tpu_spec {
    const char *name;
    int cores;
    double hbm_gib;    /* per core (per device) */
    const char *about; /* where the figures come from */
};
/* The board named name, or NULL. */
const struct tpu_spec *xs_tpu(const char *name);
/* The names of the table, comma separated, for error messages. */
const char *xs_tpu_names(void);
void xs_set_device(const char *name, int cores, size_t hbm_bytes);
int xs_cores(void);
size_t xs_hbm(void);
const char *xs_device_name(void);
/* A pod: xs_hosts() processes (comm.h), each running a board of xs_cores()
 * cores; host h's core c is the pod's ordinal h * xs_cores() + c, and an
 * all-reduce spans every ordinal. */
int xs_hosts(void);
int xs_host(void);

/* ---- metrics, in PyTorch/XLA's names ---- */
/* AllReduce* is the sum over a board's cores; CrossHostAllReduce* its
 * continuation across processes (hosts of a pod), whose payload this host
 * sent and received as CrossHost{Sent,Received}Bytes (comm.h). */
enum xs_metric { M_COMPILE, M_EXECUTE, M_EXECUTE_REPLICATED, M_ALL_REDUCE, M_HOST_ALL_REDUCE,
                 M_TO_DEVICE, M_FROM_DEVICE, M_COUNT };
enum xs_counter { C_CACHED, C_UNCACHED, C_MARK_STEP, C_HOST_READ, C_ALL_REDUCE,
                  C_ALL_REDUCE_BYTES, C_HOST_ALL_REDUCE_BYTES, C_HOST_SENT_BYTES,
                  C_HOST_RECEIVED_BYTES, C_COUNTERS };
void xs_metric_add(int metric, double seconds);
void xs_counter_add(int counter, long n);
long xs_counter(int counter);
long xs_metric_samples(int metric);
double xs_metric_sum(int metric); /* seconds in all */
void xs_metrics_report(FILE *f);

/* The timeline (--profile): from start, every kernel on its core's track
 * (name, attributes, FLOPs) and every metric above on the host's, written
 * by xs_timeline_write as Chrome trace-event JSON; 0, or -1 if it fails. */
void xs_timeline_start(void);
int xs_timeline_write(const char *path);

/* What the device (xla_sim.c) tells metrics.c as it runs. */
int xs_watching(void); /* a profile or a timeline is recording kernels */
void xs_kernel_ran(const struct kinstr *k, int core, double t0, double t1);
void xs_core_ran(int core, double seconds); /* a stretch of kernels, one core */
void xs_arena_grew(int core, size_t bytes);

#endif
