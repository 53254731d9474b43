/* compiler/precision.c: how the graph stores values under each precision
 * (--precision; read second: fp32, the default, stores every value as it
 * is computed). graph.c's builders call these; they record a rounding op
 * through record.c. */
#include "compiler/record.h"

static Tensor *build_round_bf16(Graph *g, Tensor *x)
{
    Node *n = new_node(g, KOP_ROUND_BF16, IN(x));
    n->attr.elementwise.n = x->numel;
    Tensor *y = add_out(g, n, DT_F32, x->rows, x->cols, 1);
    run_if_eager(g, n);
    return y;
}

/* y as the device stores it: bf16-pure stores every float tensor as bf16,
 * so each op's result is rounded as it is written. */
Tensor *as_stored(Graph *g, Tensor *y)
{
    return g->prec == PREC_BF16_PURE ? build_round_bf16(g, y) : y;
}

/* A matrix-unit operand: rounded to bf16 under --precision bf16 (under
 * bf16-pure it already is). */
Tensor *mxu_operand(Graph *g, Tensor *x)
{
    return g->prec == PREC_BF16 ? build_round_bf16(g, x) : x;
}

/* A batch reduction's result: in training (per-example rows set) it is a
 * core's partial sum, kept in fp32 until the all-reduce has summed the
 * cores' parts, so that bf16-pure gradients do not depend on the layout. */
Tensor *as_stored_partial(Graph *g, Tensor *y)
{
    return g->seg > 0 ? y : as_stored(g, y);
}

int is_rounded(const Graph *g, const Tensor *x)
{
    return x->node >= 0 && g->nodes[x->node].op == KOP_ROUND_BF16;
}
