/* xla_sim.h: the device layer. It knows kernels, buffers and timing; it
 * knows nothing of graphs or models. The eager cpu device hands it one
 * kernel instruction at a time; the compiled (xla) path hands it whole
 * programs. Everything below it is tensor.c. */
#ifndef XLA_SIM_H
#define XLA_SIM_H
#include <stdio.h>
#include "tensor.h"

/* The kernel instruction set. Graph ops map onto these one to one before
 * fusion; fused kernels are added after them. */
enum kop {
    KOP_EMBED,          /* in idx i32[n], table[c,v]       out y[n,c]       a: n c v */
    KOP_EMBED_BWD,      /* in idx i32[n], dy[n,c]          out dtable[c,v]  a: n c v seg */
    KOP_ADD,            /* in a[n], b[n]                   out y[n]         a: n */
    KOP_MATMUL,         /* in a[n,p], b[p,q], bias[q]|NULL out c[n,q]       a: n p q
                           f: - bf16 (1: bf16 inputs, fp32 sums) */
    KOP_MATMUL_TN,      /* in a[p,n], b[p,q]               out c[n,q]       a: n p q seg
                           (seg > 0: the per-example tree of the *_seg kernels) */
    KOP_TRANSPOSE,      /* in x[r,s]                       out y[s,r]       a: r s */
    KOP_SUM_ROWS,       /* in x[n,q]                       out y[q]         a: n q seg */
    KOP_RELU,           /* in x[n]                         out y[n]         a: n */
    KOP_RELU_BWD,       /* in dy[n], y[n]                  out dx[n]        a: n */
    KOP_LAYERNORM,      /* in x[n,c], w[c], b[c]           out y[n,c], mean[n], rstd[n]  a: n c */
    KOP_LAYERNORM_BWD,  /* in dy, x, w, mean, rstd         out dx[n,c], dw[c], db[c]     a: n c seg */
    KOP_ATTENTION,      /* in qkv[B,T,3C]                  out o[B,T,C], lse[B,H,T]     a: B T C H */
    KOP_ATTENTION_BWD,  /* in do, qkv, o, lse              out dqkv[B,T,3C]             a: B T C H */
    KOP_ATTENTION_STEP, /* in qkv[nb,3C], kc, vc [nb,tmax,C] (written), pos i32[1]
                           out o[nb,C]                                      a: nb tmax C H */
    KOP_XENT,           /* in logits[n,v], tgt i32[n]      out loss[1]      a: n v */
    KOP_XENT_BWD,       /* in logits, tgt, dloss[1]        out dlogits[n,v] a: n v */
    KOP_FILL,           /* out y[n] = f0                                    a: n */
    KOP_ADAM,           /* in p, g, m, v [n] (p,m,v updated in place), t i32[1]
                           a: n round   f: lr b1 b2 eps (round: p,m,v kept bf16) */
    KOP_ROUND_BF16,     /* in x[n]                         out y[n] = bf16(x) a: n */
    KOP_ALL_REDUCE,     /* in x[n] of every core           out y[n] on every core =
                           (tree sum over cores) * f0     a: n cores  f: 1/cores */
    /* fused kernels, made only by the compiler */
    KOP_MATMUL_EX,      /* in a, b, bias|NULL, r1|NULL, r2|NULL  out c[n,q] =
                           relu?(a@b + bias) + r1 + r2   a: n p q   f: relu bf16 */
    KOP_ADD_N,          /* in x0..x5 (NULL-terminated)     out y[n] = ((x0+x1)+x2)+...  a: n */
    KOP_COUNT
};

/* How floats are computed and stored (--precision). */
enum precision {
    PREC_FP32,
    PREC_BF16,      /* TPU matrix unit: bf16 matmul and attention inputs, fp32 sums */
    PREC_BF16_PURE, /* XLA_USE_BF16: every float tensor stored as bf16 */
};

#define KMAX_IN 6
#define KMAX_OUT 3

/* One kernel call with its buffers resolved. */
struct kinstr {
    int op;
    void *in[KMAX_IN];
    void *out[KMAX_OUT];
    long a[4];
    float f[4];
};

const char *kop_name(int op);
/* Floating-point operations one instruction performs (for GFLOP/s). */
double kop_flops(const struct kinstr *k);
/* Runs one instruction on the calling thread's device. */
void xs_exec(const struct kinstr *k);

/* Per-kernel profile: calls, time and flops per kernel kind. Off by default
 * so that an unprofiled run pays nothing for it. */
void xs_profile_enable(int on);
void xs_profile_reset(void);
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

struct pinstr {
    int op;
    struct place in[KMAX_IN], out[KMAX_OUT];
    long a[4];
    float f[4];
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
/* Runs p on core xla:0 with slots[i] bound to slot i; inputs and outputs
 * are transferred and timed in the metrics. Its kernels use every thread. */
void xs_run(const Program *p, void *const *slots);
/* Runs p replicated on cores xla:0..n-1, core c with slots[c]. The cores
 * run concurrently (OpenMP across them, each core's kernels on one thread)
 * and meet only at KOP_ALL_REDUCE instructions. */
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

/* ---- metrics, in PyTorch/XLA's names ---- */
enum xs_metric { M_COMPILE, M_EXECUTE, M_EXECUTE_REPLICATED, M_ALL_REDUCE, M_TO_DEVICE,
                 M_FROM_DEVICE, M_COUNT };
enum xs_counter { C_CACHED, C_UNCACHED, C_MARK_STEP, C_HOST_READ, C_ALL_REDUCE,
                  C_ALL_REDUCE_BYTES, C_COUNTERS };
void xs_metric_add(int metric, double seconds);
void xs_counter_add(int counter, long n);
long xs_counter(int counter);
long xs_metric_samples(int metric);
void xs_metrics_report(FILE *f);
void xs_metrics_reset(void);

#endif
