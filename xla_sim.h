/* xla_sim.h: the device layer. It knows kernels, buffers and timing; it
 * knows nothing of graphs or models. The eager cpu device hands it one
 * kernel instruction at a time; the compiled (xla) path hands it whole
 * programs. Everything below it is tensor.c. */
#ifndef XLA_SIM_H
#define XLA_SIM_H
#include <stdio.h>
#include "tensor.h"

/* ---- the kernel instruction set ----
 * Every op the device can run, with its operands (in -> out) and its named
 * attributes. Graph ops map onto these one to one; the compiler's fusion
 * adds the last two. Attributes are named fields of union kattr below:
 * graph.c's builders and fusion set and read them by name, and dispatch (the
 * one switch in xla_sim.c) passes them to the kernels by name. kop_table
 * (xla_sim.c) is the one place that gives each op its name, operand counts,
 * printable attribute list and FLOP count, for the profile and the dumps. */
enum kop {
    KOP_EMBED,          /* idx i32[n], table[c,v] -> y[n,c]                      embed */
    KOP_EMBED_BWD,      /* idx i32[n], dy[n,c] -> dtable[c,v]                    embed */
    KOP_ADD,            /* a[n], b[n] -> y[n]                                    elementwise */
    KOP_MATMUL,         /* a[n,p], b[p,q], bias[q]|NULL -> c[n,q]                matmul */
    KOP_MATMUL_TN,      /* a[p,n], b[p,q] -> c[n,q] = a^T b (weight gradients)   matmul */
    KOP_TRANSPOSE,      /* x[rows,cols] -> y[cols,rows]                          transpose */
    KOP_SUM_ROWS,       /* x[n,q] -> y[q]                                        sum_rows */
    KOP_RELU,           /* x[n] -> y[n]                                          elementwise */
    KOP_RELU_BWD,       /* dy[n], y[n] -> dx[n]                                  elementwise */
    KOP_LAYERNORM,      /* x[n,c], w[c], b[c] -> y[n,c], mean[n], rstd[n]        layernorm */
    KOP_LAYERNORM_BWD,  /* dy, x, w, mean, rstd -> dx[n,c], dw[c], db[c]         layernorm */
    KOP_ATTENTION,      /* qkv[B*T,3C] -> o[B*T,C], lse[B*H,T]                   attention */
    KOP_ATTENTION_BWD,  /* do, qkv, o, lse -> dqkv[B*T,3C]                       attention */
    KOP_ATTENTION_STEP, /* qkv[nb,3C], kc, vc[nb*tmax,C] (written), pos i32[1]
                           -> o[nb,C]                                            decode */
    KOP_ATTENTION_LAST, /* qkv[B*T,3C] -> o[B,C], each window's last query       attention */
    KOP_XENT,           /* logits[n,v], tgt i32[n] -> loss[1]                    xent */
    KOP_XENT_BWD,       /* logits, tgt, dloss[1] -> dlogits[n,v]                 xent */
    KOP_FILL,           /* -> y[n] = value                                       fill */
    KOP_ADAM,           /* p, g, m, v[n] (p, m, v updated in place), t i32[1]    adam */
    KOP_ROUND_BF16,     /* x[n] -> y[n] = bf16(x)                                elementwise */
    KOP_ALL_REDUCE,     /* x[n] of every core -> y[n] on every core, the mean    all_reduce */
    KOP_DROPOUT,        /* x[n,c], rows i32[n], key i32[2] -> y[n,c]             dropout */
    KOP_ATTENTION_DROP, /* qkv, rows i32[B*T], key i32[2] -> o, lse (dropped P)  attention_drop */
    KOP_ATTENTION_DROP_BWD, /* do, qkv, o, lse, rows, key -> dqkv                attention_drop */
    /* fused kernels, made only by the compiler */
    KOP_MATMUL_EX,      /* a, b, bias|NULL, r1|NULL, r2|NULL -> c[n,q] =
                           relu?(a@b + bias) + r1 + r2                           matmul */
    KOP_ADD_N,          /* x0..x5 (NULL-terminated) -> y[n] = ((x0+x1)+x2)+...   elementwise */
    KOP_COUNT
};

/* An op's named attributes: the union member named at the end of its line
 * above. A node is created zeroed and attributes are set by name, so two
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
struct all_reduce_attr { long n, cores; };
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

#define KMAX_IN 6
#define KMAX_OUT 3

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
 * continuation across processes (hosts of a pod). */
enum xs_metric { M_COMPILE, M_EXECUTE, M_EXECUTE_REPLICATED, M_ALL_REDUCE, M_HOST_ALL_REDUCE,
                 M_TO_DEVICE, M_FROM_DEVICE, M_COUNT };
enum xs_counter { C_CACHED, C_UNCACHED, C_MARK_STEP, C_HOST_READ, C_ALL_REDUCE,
                  C_ALL_REDUCE_BYTES, C_HOST_ALL_REDUCE_BYTES, C_COUNTERS };
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

#endif
