/* fuse.c: the compiler's passes over a trace, in the order of compile.c's
 * table: cse, dce, fuse_matmul, fuse_adds, fuse_layernorm_bwd, fuse_xent.
 * A pass marks nodes dead and rewrites operands, each by name; none
 * changes a bit of any result: every fusion keeps the order of
 * floating-point operations. An optimization: skip it on a first read. */
#include "compiler/compiler.h"
#include <stdlib.h>
#include <string.h>

/* A recomputed node (--remat) is never the same as a node recorded
 * otherwise, however equal: merging the recompute back into the forward
 * would undo rematerialization (the barrier XLA needed for PyTorch/XLA's
 * gradient checkpointing). */
static int recomputed(const struct tnode *t) { return t->phase == PHASE_RECOMPUTE; }

static int same_node(const struct tnode *a, const struct tnode *b)
{
    return a->op == b->op && a->nin == b->nin && a->nout == b->nout &&
           recomputed(a) == recomputed(b) &&
           !memcmp(&a->attr, &b->attr, sizeof a->attr) && !memcmp(a->in, b->in, sizeof a->in);
}

/* r, or what CSE replaced it with. */
static struct ref follow(const struct ref *fwd, struct ref r)
{
    return is_out(r) ? fwd[out_index(r)] : r;
}

/* Common subexpressions: a node equal to an earlier one (same op,
 * attributes and operands) reuses the earlier one's outputs. */
void cse(struct trace *tr)
{
    struct ref *fwd = xcalloc((size_t)tr->n * KMAX_OUT, sizeof *fwd);
    for (int i = 0; i < tr->n; i++) {
        struct tnode *t = &tr->nodes[i];
        for (int k = 0; k < KMAX_IN; k++)
            t->in[k] = follow(fwd, t->in[k]);
        for (int k = 0; k < KMAX_OUT; k++)
            fwd[out_index(out_ref(i, k))] = out_ref(i, k);
        for (int j = 0; j < i && !kop_writes(t->op); j++) {
            if (!tr->nodes[j].dead && same_node(&tr->nodes[j], t)) {
                for (int k = 0; k < KMAX_OUT; k++)
                    fwd[out_index(out_ref(i, k))] = out_ref(j, k);
                t->dead = 1;
                break;
            }
        }
    }
    for (int r = 0; r < tr->nroots; r++)
        tr->roots[r] = follow(fwd, tr->roots[r]);
    free(fwd);
}

/* Consumers of every node output among live nodes (the roots not counted:
 * see is_root). */
static int *count_uses(const struct trace *tr)
{
    int *uses = xcalloc((size_t)tr->n * KMAX_OUT, sizeof(int));
    for (int i = 0; i < tr->n; i++)
        for (int k = 0; k < KMAX_IN && !tr->nodes[i].dead; k++)
            if (is_out(tr->nodes[i].in[k]))
                uses[out_index(tr->nodes[i].in[k])]++;
    return uses;
}

/* A value the host reads after the run: it must stay a buffer of its own,
 * so it is never fused into its consumer. */
static int is_root(const struct trace *tr, struct ref r)
{
    for (int k = 0; k < tr->nroots; k++)
        if (same_ref(tr->roots[k], r))
            return 1;
    return 0;
}

/* Dead code: nodes no root and no side effect depends on. */
void dce(struct trace *tr)
{
    char *need = xcalloc((size_t)tr->n, 1);
    for (int r = 0; r < tr->nroots; r++)
        if (is_out(tr->roots[r]))
            need[tr->roots[r].at] = 1;
    for (int i = tr->n - 1; i >= 0; i--) {
        struct tnode *t = &tr->nodes[i];
        if (t->dead || !(need[i] || kop_writes(t->op))) {
            t->dead = 1;
            continue;
        }
        for (int k = 0; k < KMAX_IN; k++)
            if (is_out(t->in[k]))
                need[t->in[k].at] = 1;
    }
    free(need);
}

/* The single consumer of node i's output 0 that may take it over. */
static int only_consumer(const struct trace *tr, int i)
{
    int *uses = count_uses(tr);
    int one = uses[out_index(out_ref(i, 0))] == 1;
    free(uses);
    if (!one || is_root(tr, out_ref(i, 0)))
        return -1;
    for (int j = i + 1; j < tr->n; j++) {
        if (tr->nodes[j].dead)
            continue;
        if (kop_writes(tr->nodes[j].op))
            return -1; /* never move a read past an in-place write */
        for (int k = 0; k < KMAX_IN; k++)
            if (same_ref(tr->nodes[j].in[k], out_ref(i, 0)))
                return j;
    }
    return -1;
}

/* Node j, the only consumer of node i's result, takes over i: j becomes op
 * with the operands in[] (each set by name by the fusion) and i's
 * attributes, keeps its own outputs, and i is gone. */
static void merge_into(struct trace *tr, int i, int j, int op, int nin, const struct ref *in)
{
    struct tnode *dst = &tr->nodes[j];
    dst->op = op;
    dst->nin = nin;
    dst->attr = tr->nodes[i].attr;
    for (int k = 0; k < KMAX_IN; k++)
        dst->in[k] = in[k];
    tr->nodes[i].dead = 1;
}

/* The matmul_ex operands of matmul (or matmul_ex) node t: A, B, BIAS and
 * any residuals it already has; the rest absent. */
static void matmul_ex_operands(const struct tnode *t, struct ref *in)
{
    int ex = t->op == KOP_MATMUL_EX;
    for (int k = 0; k < KMAX_IN; k++)
        in[k] = no_ref();
    in[MATMUL_EX_IN_A] = t->in[ex ? MATMUL_EX_IN_A : MATMUL_IN_A];
    in[MATMUL_EX_IN_B] = t->in[ex ? MATMUL_EX_IN_B : MATMUL_IN_B];
    in[MATMUL_EX_IN_BIAS] = t->in[ex ? MATMUL_EX_IN_BIAS : MATMUL_IN_BIAS];
    if (ex) {
        in[MATMUL_EX_IN_R1] = t->in[MATMUL_EX_IN_R1];
        in[MATMUL_EX_IN_R2] = t->in[MATMUL_EX_IN_R2];
    }
}

/* The operand of two-operand node c other than node i's result. */
static struct ref other_operand(const struct tnode *c, int a, int b, int i)
{
    return same_ref(c->in[a], out_ref(i, 0)) ? c->in[b] : c->in[a];
}

/* Fuses matmul node i into its consumer, if it can: 1 when it did. The
 * consumer becomes a matmul_ex: a ReLU only onto a plain matmul, and at
 * most two residual adds (R1, then R2), after any ReLU; or, onto a plain
 * matmul without bias, the relu_bwd that takes its result as dy (GATE: the
 * ReLU's output), and nothing after that. */
static int fuse_matmul_into_consumer(struct trace *tr, int i)
{
    struct tnode *t = &tr->nodes[i];
    int j = only_consumer(tr, i);
    if (j < 0)
        return 0;
    struct tnode *c = &tr->nodes[j];
    int ex = t->op == KOP_MATMUL_EX, relu = ex && t->attr.matmul.relu;
    int residuals = ex ? is_set(t->in[MATMUL_EX_IN_R1]) + is_set(t->in[MATMUL_EX_IN_R2]) : 0;
    struct ref in[KMAX_IN];
    if (ex && is_set(t->in[MATMUL_EX_IN_GATE]))
        return 0; /* gated: nothing more */
    matmul_ex_operands(t, in);
    if (c->op == KOP_RELU_BWD && !ex && !is_set(t->in[MATMUL_IN_BIAS]) &&
        same_ref(c->in[RELU_BWD_IN_DY], out_ref(i, 0))) {
        in[MATMUL_EX_IN_GATE] = c->in[RELU_BWD_IN_Y];
        merge_into(tr, i, j, KOP_MATMUL_EX, MATMUL_EX_NIN, in);
        return 1;
    }
    if (c->op == KOP_RELU && !residuals && !relu) {
        merge_into(tr, i, j, KOP_MATMUL_EX, MATMUL_EX_IN_R1, in);
        c->attr.matmul.relu = 1;
        return 1;
    }
    if (c->op == KOP_ADD && !relu && residuals < 2 &&
        !same_ref(c->in[ADD_IN_A], c->in[ADD_IN_B])) {
        int r = residuals ? MATMUL_EX_IN_R2 : MATMUL_EX_IN_R1; /* the next residual */
        in[r] = other_operand(c, ADD_IN_A, ADD_IN_B, i);
        merge_into(tr, i, j, KOP_MATMUL_EX, r + 1, in);
        return 1;
    }
    return 0;
}

/* The earliest matmul that can fuse does: 1 when one did. */
static int fuse_first_matmul(struct trace *tr)
{
    for (int i = 0; i < tr->n; i++) {
        const struct tnode *t = &tr->nodes[i];
        if (!t->dead && (t->op == KOP_MATMUL || t->op == KOP_MATMUL_EX) &&
            fuse_matmul_into_consumer(tr, i))
            return 1;
    }
    return 0;
}

/* Epilogues folded into a matmul: ReLU, residual adds, a ReLU's backward
 * gate. All are exact: the kernel computes the same matmul and then the
 * same additions in the same order (a + b == b + a in IEEE arithmetic), or
 * the same choice between the result and 0. One fusion at a time,
 * the earliest first, until none is left: a fused node may fuse again, and
 * when two matmuls feed one add the earlier one takes it. */
void fuse_matmul(struct trace *tr)
{
    while (fuse_first_matmul(tr))
        ;
}

/* Fuses add (or add_n) node i into the add that consumes it: 1 when it
 * did. The consumer becomes add_n: i's terms in order, then the add's
 * other operand, so the sum keeps its order (the add's two operands may
 * come either way, as addition commutes). */
static int fuse_add_into_consumer(struct trace *tr, int i)
{
    const struct tnode *t = &tr->nodes[i];
    int j = only_consumer(tr, i);
    if (j < 0 || tr->nodes[j].op != KOP_ADD || t->nin >= ADD_N_NIN)
        return 0;
    const struct tnode *c = &tr->nodes[j];
    if (same_ref(c->in[ADD_IN_A], c->in[ADD_IN_B]))
        return 0;
    struct ref in[KMAX_IN];
    int n = 0;
    for (int k = 0; k < KMAX_IN; k++)
        in[k] = no_ref();
    if (t->op == KOP_ADD) {
        in[ADD_N_IN_X0] = t->in[ADD_IN_A];
        in[ADD_N_IN_X1] = t->in[ADD_IN_B];
        n = 2;
    } else {
        for (; n < t->nin; n++)
            in[ADD_N_IN_X0 + n] = t->in[ADD_N_IN_X0 + n];
    }
    in[ADD_N_IN_X0 + n] = other_operand(c, ADD_IN_A, ADD_IN_B, i);
    merge_into(tr, i, j, KOP_ADD_N, n + 1, in);
    return 1;
}

/* The earliest add that can fuse does: 1 when one did. */
static int fuse_first_add(struct trace *tr)
{
    for (int i = 0; i < tr->n; i++) {
        const struct tnode *t = &tr->nodes[i];
        if (!t->dead && (t->op == KOP_ADD || t->op == KOP_ADD_N) &&
            fuse_add_into_consumer(tr, i))
            return 1;
    }
    return 0;
}

/* Chains of adds become one pass over memory (add_n). Only a left-leaning
 * chain keeps the order of additions; one fusion at a time, the earliest
 * first, as fuse_matmul. */
void fuse_adds(struct trace *tr)
{
    while (fuse_first_add(tr))
        ;
}

/* Every use of `from` by the nodes after node `after`, and by the roots,
 * becomes a use of `to`: the node that made `from` is gone. */
static void redirect(struct trace *tr, struct ref from, struct ref to, int after)
{
    for (int k = after + 1; k < tr->n; k++)
        for (int q = 0; q < KMAX_IN; q++)
            if (same_ref(tr->nodes[k].in[q], from))
                tr->nodes[k].in[q] = to;
    for (int r = 0; r < tr->nroots; r++)
        if (same_ref(tr->roots[r], from))
            tr->roots[r] = to;
}

/* Folds the add (or add_n) that consumes layernorm_bwd node i's dx into
 * i, if it can: 1 when it did. The sum must take dx last (an add either
 * way, as addition commutes), so that i computes (r1 + r2) + dx in the
 * sum's own order; its other terms (two at most) must exist before i, as
 * i takes the sum's place in the program. */
static int fuse_sum_into_layernorm_bwd(struct trace *tr, int i)
{
    struct tnode *t = &tr->nodes[i];
    int j = only_consumer(tr, i);
    if (j < 0 || is_set(t->in[LAYERNORM_BWD_IN_R1]))
        return 0;
    const struct tnode *s = &tr->nodes[j];
    struct ref dx = out_ref(i, LAYERNORM_BWD_OUT_DX), rest[KMAX_IN];
    int n = 0, last = -1;
    if (s->op != KOP_ADD && s->op != KOP_ADD_N)
        return 0;
    for (int k = 0; k < s->nin && s->in[k].kind != REF_NONE; k++) {
        if (same_ref(s->in[k], dx))
            last = k;
        else
            rest[n++] = s->in[k];
    }
    if (n < 1 || n > 2 || (s->op == KOP_ADD_N && last != n))
        return 0; /* dx not last: add_n's order would change */
    for (int k = 0; k < n; k++)
        if (is_out(rest[k]) && rest[k].at >= i)
            return 0;
    t->in[LAYERNORM_BWD_IN_R1] = rest[0];
    if (n == 2)
        t->in[LAYERNORM_BWD_IN_R2] = rest[1];
    tr->nodes[j].dead = 1;
    redirect(tr, out_ref(j, 0), dx, j);
    return 1;
}

/* The residual stream's gradient: each block's layernorm_bwd output is
 * added to the gradient flowing past it; the layernorm's backward kernel
 * does that add as it writes dx, one pass over memory instead of two. Runs
 * after fuse_adds, so a chain is already one add_n. */
void fuse_layernorm_bwd(struct trace *tr)
{
    for (int i = 0; i < tr->n; i++)
        if (!tr->nodes[i].dead && tr->nodes[i].op == KOP_LAYERNORM_BWD)
            fuse_sum_into_layernorm_bwd(tr, i);
}

/* Folds xent node i into the xent_bwd of the same logits and targets, if
 * there is one, nothing reads the loss before it (the xent_bwd included)
 * and nothing writes in place between them: 1 when it did. The xent_bwd
 * becomes xent_grad, the loss its second output. */
static int fuse_xent_into_bwd(struct trace *tr, int i)
{
    const struct tnode *t = &tr->nodes[i];
    struct ref loss = out_ref(i, XENT_OUT_LOSS);
    for (int j = i + 1; j < tr->n; j++) {
        struct tnode *b = &tr->nodes[j];
        if (b->dead)
            continue;
        if (kop_writes(b->op))
            return 0; /* never move a read past an in-place write */
        if (b->op == KOP_XENT_BWD &&
            same_ref(b->in[XENT_BWD_IN_LOGITS], t->in[XENT_IN_LOGITS]) &&
            same_ref(b->in[XENT_BWD_IN_TARGETS], t->in[XENT_IN_TARGETS]) &&
            !same_ref(b->in[XENT_BWD_IN_DLOSS], loss)) {
            b->op = KOP_XENT_GRAD;
            b->nout = XENT_GRAD_NOUT;
            b->rows[XENT_GRAD_OUT_LOSS] = t->rows[XENT_OUT_LOSS];
            b->cols[XENT_GRAD_OUT_LOSS] = t->cols[XENT_OUT_LOSS];
            tr->nodes[i].dead = 1;
            redirect(tr, loss, out_ref(j, XENT_GRAD_OUT_LOSS), j);
            return 1;
        }
        for (int k = 0; k < KMAX_IN; k++)
            if (same_ref(b->in[k], loss))
                return 0; /* the loss is read before the gradient is made */
    }
    return 0;
}

/* Cross-entropy's forward and backward read the same logits and compute
 * the same softmax statistics: one kernel does both (one pass over the
 * logits, one exponential per logit) in the backward's place. */
void fuse_xent(struct trace *tr)
{
    for (int i = 0; i < tr->n; i++)
        if (!tr->nodes[i].dead && tr->nodes[i].op == KOP_XENT)
            fuse_xent_into_bwd(tr, i);
}
