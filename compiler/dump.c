/* dump.c: a trace, and the program made of it, as text or as DOT
 * (GPT_SAVE_GRAPHS; docs/examples shows both). */
#include "compiler/compiler.h"
#include <stdlib.h>
#include <string.h>

static void ref_name(char *buf, size_t n, struct ref r)
{
    if (r.kind == REF_NONE)
        snprintf(buf, n, "-");
    else if (r.kind == REF_SLOT)
        snprintf(buf, n, "in%d", r.at);
    else
        snprintf(buf, n, "%%%d.%d", r.at, r.out);
}

/* Kernel index, output offset and last use of live node i. */
static void node_plan(const struct trace *tr, const Program *p, int i, int *k, long *off, int *last)
{
    *k = 0;
    for (int j = 0; j < i; j++)
        *k += !tr->nodes[j].dead;
    *off = p && *k < p->n ? p->ins[*k].out[KOUT_FIRST].at : -1;
    *last = *k;
    for (int j = i + 1, kj = *k + 1; j < tr->n; j++) {
        if (tr->nodes[j].dead)
            continue;
        for (int q = 0; q < KMAX_IN; q++)
            if (same_ref(tr->nodes[j].in[q], out_ref(i, KOUT_FIRST)))
                *last = kj;
        kj++;
    }
}

static void dump_text_node(const struct trace *tr, FILE *f, int i, const Program *p)
{
    const struct tnode *t = &tr->nodes[i];
    char b[32], attrs[256];
    fprintf(f, "%%%d = %s(", i, kop_name(t->op));
    for (int k = 0; k < t->nin; k++) {
        ref_name(b, sizeof b, t->in[k]);
        fprintf(f, "%s%s", k ? ", " : "", b);
    }
    kop_format_attrs(attrs, sizeof attrs, t->op, &t->attr);
    fprintf(f, ") -> [%d,%d]  {%s}", t->rows[0], t->cols[0], attrs);
    if (p) {
        int k, last;
        long off;
        node_plan(tr, p, i, &k, &off, &last);
        fprintf(f, "  kernel %d, arena +%ld, %ld bytes, live %d..%d", k, off,
                (long)t->rows[0] * t->cols[0] * 4, k, last);
    }
    fputc('\n', f);
}

/* A kernel the passes made from several ops (fuse.c). */
static int is_fused(const struct tnode *t)
{
    return t->op == KOP_MATMUL_EX || t->op == KOP_ADD_N || t->op == KOP_XENT_GRAD ||
           (t->op == KOP_LAYERNORM_BWD && t->in[LAYERNORM_BWD_IN_R1].kind != REF_NONE);
}

static void dump_dot_node(const struct trace *tr, FILE *f, int i, const Program *p)
{
    const struct tnode *t = &tr->nodes[i];
    fprintf(f, "  n%d [label=\"%%%d %s\\n[%d,%d]", i, i, kop_name(t->op), t->rows[0], t->cols[0]);
    if (p) {
        int k, last;
        long off;
        node_plan(tr, p, i, &k, &off, &last);
        fprintf(f, "\\nbuf @%ld +%ld B\\nlive %d..%d", off, (long)t->rows[0] * t->cols[0] * 4, k, last);
    }
    fprintf(f, "\"%s];\n", is_fused(t) ? ", style=filled, fillcolor=lightblue" : "");
    for (int k = 0; k < t->nin; k++) {
        if (t->in[k].kind == REF_SLOT)
            fprintf(f, "  s%d -> n%d;\n", t->in[k].at, i);
        else if (is_out(t->in[k]))
            fprintf(f, "  n%d -> n%d;\n", t->in[k].at, i);
    }
}

void dump_trace(const struct trace *tr, FILE *f, int dot, const Program *p)
{
    if (dot) {
        fprintf(f, "digraph xla {\n  node [shape=box, fontname=monospace];\n");
        for (int s = 0; s < tr->nslots; s++)
            fprintf(f, "  s%d [label=\"in%d [%d,%d]\", shape=ellipse];\n", s, s,
                    tr->slot[s]->rows, tr->slot[s]->cols);
    }
    for (int i = 0; i < tr->n; i++) {
        if (tr->nodes[i].dead)
            continue;
        if (dot)
            dump_dot_node(tr, f, i, p);
        else
            dump_text_node(tr, f, i, p);
    }
    if (dot)
        fprintf(f, "}\n");
}

void save_graph(int index, const struct trace *tr, const char *stage, const Program *p)
{
    const char *prefix = getenv("GPT_SAVE_GRAPHS"), *fmt = getenv("GPT_SAVE_GRAPHS_FMT");
    if (!prefix || !*prefix || xs_host() != 0) /* in a pod, host 0 alone writes them */
        return;
    int dot = fmt && !strcmp(fmt, "dot");
    char path[4096];
    snprintf(path, sizeof path, "%s-%03d-%s.%s", prefix, index, stage, dot ? "dot" : "txt");
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gpt: GPT_SAVE_GRAPHS: cannot write %s\n", path);
        return;
    }
    dump_trace(tr, f, dot, p);
    fclose(f);
}
