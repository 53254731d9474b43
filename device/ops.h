/* device/ops.h: the device's instruction set, the layer below everything
 * that speaks of kernels (xla_sim.c runs them, metrics.c counts them, the
 * compiler and graph.c build them): each op's number, its named operands,
 * its attributes, and the op table (device/ops_gen.c, read through
 * device/ops.c): name, operand counts, attribute names and FLOP count. It
 * calls nothing. */
#ifndef DEVICE_OPS_H
#define DEVICE_OPS_H
#include <stddef.h>

/* ---- the kernel instruction set ----
 * Every op the device can run is one line of ops.def: its name, its named
 * operands, the member of union kattr below that holds its attributes, and
 * its FLOP count. From that line gen/gen.c (make gen) writes the op's
 * number (enum kop) and its operand indices into device/ops_gen.h, and its
 * row of the op table into device/ops_gen.c: the builders (graph.c), the
 * passes (fuse.c) and dispatch (device/exec_gen.c) read LAYERNORM_IN_X,
 * LAYERNORM_OUT_MEAN, ..., never by a bare position. For
 * OP(LAYERNORM, ..., 3, (X, W, B), 3, (Y, MEAN, RSTD)):
 *   enum { LAYERNORM_IN_X, LAYERNORM_IN_W, LAYERNORM_IN_B, LAYERNORM_NIN };
 *   enum { LAYERNORM_OUT_Y, LAYERNORM_OUT_MEAN, LAYERNORM_OUT_RSTD, LAYERNORM_NOUT }; */
#include "device/ops_gen.h"

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
struct xent_attr { long n, v, seg; }; /* seg: the loss's leaves */
struct fill_attr { long n; float value; };
/* adam_shard's (--shard-optimizer, ZeRO-1): shard_cores (the board's
 * cores) and the parameter's place, floats [at, at + n) of a flat layout
 * of `total`, the step's gradients in table order then its loss, split
 * over the pod's ordinals by shard_lo (device/allreduce.h); a core updates
 * only its own part, its moments M, V holding its shard alone. */
struct adam_attr {
    long n;
    long bf16_state; /* p, m, v stored as bf16 (XLA_USE_BF16) */
    float beta1, beta2, eps; /* the rate is an input: it may change every step */
    long shard_cores, at, total;
};
/* micro: micro-batches summed into x (--grad-accum), 1 without. With
 * shard (a reduce-scatter; all_gather's always), x is the floats [at, at +
 * n) of the flat layout of `total` that adam_attr describes, and each core
 * receives only its own shard of it. */
struct all_reduce_attr { long n, cores, micro, shard, at, total; };
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

#define KMAX_IN 7
#define KMAX_OUT 3
/* The output generic code (autodiff, dumps) speaks of: an op's first, its
 * only one unless ops.def names more (layernorm's mean and rstd, ...). */
#define KOUT_FIRST 0

/* An instruction at the device: op, attributes, and its operands as
 * pointers (level 4 of 4; graph.c's head comment shows the other three). */
struct kinstr {
    int op;   /* enum kop */
    int core; /* the board's core that runs it (a sharded Adam's shard) */
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
    int nin, nout;               /* operand counts (add_n: up to nin) */
    const struct kop_attr *attr; /* its attributes; a NULL name ends the list */
    double (*flops)(const struct kinstr *k); /* floating-point ops one call performs */
    unsigned written;            /* the inputs it writes in place: 1u << NAME_IN_X, ... */
};
/* The table, a row per op (device/ops_gen.c, generated from ops.def). */
extern const struct kop_info kop_table[KOP_COUNT];
const struct kop_info *kop_info(int op);
/* Prints "name=value, ..." of k's attributes into buf. */
void kop_format_attrs(char *buf, size_t n, int op, const union kattr *a);

const char *kop_name(int op);
/* The inputs op writes in place (ops.def's WRITES rows), a bit per input
 * index; 0 for an op that writes only its outputs. */
unsigned kop_writes(int op);
/* Floating-point operations one instruction performs (for GFLOP/s). */
double kop_flops(const struct kinstr *k);

#endif
