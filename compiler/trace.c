/* trace.c: a cut's pending work becomes a trace (struct tnode, level 2);
 * the trace's structure becomes a key; the key finds a compiled program in
 * the cache, or compile() (lower.c) makes one.
 *
 * A cut (mark_step or a host read) gathers the pending nodes the wanted
 * values depend on, plus every pending node with a side effect (Adam, KV
 * cache writes): that is the trace. Its structure (ops, shapes, attributes,
 * which operand comes from where) is serialised into a key. The key's hash
 * finds a cached program; the full key confirms it. */
#include "compiler/compiler.h"
#include <stdlib.h>
#include <string.h>

uint64_t g_hash_mask = ~(uint64_t)0;

/* ---- gathering the trace ---- */

static void mark_live(const Node *nodes, char *live, int i)
{
    if (live[i])
        return;
    live[i] = 1;
    const Node *n = &nodes[i];
    for (int k = 0; k < n->nin; k++)
        if (n->in[k] && !n->in[k]->data && n->in[k]->node >= 0)
            mark_live(nodes, live, n->in[k]->node);
}

static struct ref slot_of(struct trace *tr, Tensor *t, int *slot_by_id)
{
    if (slot_by_id[t->id] < 0) {
        slot_by_id[t->id] = tr->nslots;
        tr->slot[tr->nslots++] = t;
    }
    return slot_ref(slot_by_id[t->id]);
}

/* A tensor with data is an external buffer (a slot); one without is the
 * output of a pending node, traced as local[node]. */
static struct ref ref_of(struct trace *tr, Tensor *t, const int *local, int *slot_by_id,
                         const Node *nodes)
{
    if (!t)
        return no_ref();
    if (t->data)
        return slot_of(tr, t, slot_by_id);
    const Node *p = &nodes[t->node];
    int k = 0;
    while (p->out[k] != t)
        k++;
    return out_ref(local[t->node], k);
}

static void trace_node(struct trace *tr, const Node *n, const int *local, int *slot_by_id,
                       const Node *nodes)
{
    struct tnode *tn = &tr->nodes[tr->n++];
    memset(tn, 0, sizeof *tn);
    tn->op = n->op;
    tn->nin = n->nin;
    tn->nout = n->nout;
    tn->attr = n->attr;
    for (int k = 0; k < KMAX_IN; k++)
        tn->in[k] = k < n->nin ? ref_of(tr, n->in[k], local, slot_by_id, nodes) : no_ref();
    for (int k = 0; k < n->nout; k++) {
        tn->rows[k] = n->out[k]->rows;
        tn->cols[k] = n->out[k]->cols;
    }
}

static void add_roots(struct trace *tr, Tensor *const *roots, int nroots, const int *local,
                      int *slot_by_id, const Node *nodes)
{
    for (int r = 0; r < nroots; r++) {
        int dup = 0;
        for (int q = 0; q < tr->nroots; q++)
            dup |= tr->root_t[q] == roots[r];
        if (roots[r]->data || dup)
            continue;
        tr->root_t[tr->nroots] = roots[r];
        tr->roots[tr->nroots++] = ref_of(tr, roots[r], local, slot_by_id, nodes);
    }
}

/* The pending work the roots need, plus pending side effects. */
void trace_build(Node *nodes, int n_nodes, int n_tensors, Tensor *const *roots, int nroots,
                 struct trace *tr)
{
    char *live = xcalloc((size_t)n_nodes, 1);
    int *local = xcalloc((size_t)n_nodes, sizeof(int));
    int *slot_by_id = xcalloc((size_t)n_tensors, sizeof(int));
    memset(slot_by_id, -1, sizeof(int) * (size_t)n_tensors);
    for (int r = 0; r < nroots; r++)
        if (!roots[r]->data)
            mark_live(nodes, live, roots[r]->node);
    for (int i = 0; i < n_nodes; i++)
        if (!nodes[i].done && side_effect(nodes[i].op))
            mark_live(nodes, live, i);
    memset(tr, 0, sizeof *tr);
    tr->nodes = xcalloc((size_t)n_nodes, sizeof *tr->nodes);
    tr->slot = xcalloc((size_t)n_tensors, sizeof *tr->slot);
    tr->roots = xcalloc((size_t)nroots, sizeof *tr->roots);
    tr->root_t = xcalloc((size_t)nroots, sizeof *tr->root_t);
    for (int i = 0; i < n_nodes; i++) {
        if (!live[i])
            continue;
        local[i] = tr->n;
        trace_node(tr, &nodes[i], local, slot_by_id, nodes);
        nodes[i].done = 1;
    }
    add_roots(tr, roots, nroots, local, slot_by_id, nodes);
    free(live);
    free(local);
    free(slot_by_id);
}

void trace_free(struct trace *tr)
{
    free(tr->nodes);
    free(tr->slot);
    free(tr->roots);
    free(tr->root_t);
}

/* ---- the cache key: structure only, never pointers or data ----
 * Layout: node count, slot count, root count; 4 words per slot; then per
 * node its op, operand counts, attributes and operand references, and the
 * shapes of its outputs; last, the roots. */

struct key {
    int64_t *v;
    long n, cap;
};

static void key_put(struct key *k, int64_t x)
{
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 1024;
        k->v = realloc(k->v, sizeof *k->v * (size_t)k->cap);
        if (!k->v) {
            fprintf(stderr, "gpt: out of memory (cache key)\n");
            exit(1);
        }
    }
    k->v[k->n++] = x;
}

static void key_ref(struct key *k, struct ref r)
{
    key_put(k, r.kind);
    key_put(k, r.at);
    key_put(k, r.out);
}

_Static_assert(sizeof(union kattr) % sizeof(int64_t) == 0, "attributes hash as whole words");

static void key_node(struct key *k, const struct tnode *t)
{
    int64_t words[sizeof(union kattr) / sizeof(int64_t)];
    memcpy(words, &t->attr, sizeof words);
    key_put(k, t->op);
    key_put(k, t->nin);
    key_put(k, t->nout);
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        key_put(k, words[i]);
    for (int i = 0; i < KMAX_IN; i++)
        key_ref(k, t->in[i]);
    for (int i = 0; i < t->nout; i++) {
        key_put(k, t->rows[i]);
        key_put(k, t->cols[i]);
    }
}

static struct key key_build(const struct trace *tr)
{
    struct key k = {0};
    key_put(&k, tr->n);
    key_put(&k, tr->nslots);
    key_put(&k, tr->nroots);
    for (int s = 0; s < tr->nslots; s++) {
        const Tensor *t = tr->slot[s];
        key_put(&k, t->kind == TK_INPUT); /* transferred, or bound in place */
        key_put(&k, t->dtype);
        key_put(&k, t->rows);
        key_put(&k, t->cols);
    }
    for (int i = 0; i < tr->n; i++)
        key_node(&k, &tr->nodes[i]);
    for (int r = 0; r < tr->nroots; r++)
        key_ref(&k, tr->roots[r]);
    return k;
}

static uint64_t key_hash(const struct key *k)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (long i = 0; i < k->n; i++)
        h = (h ^ (uint64_t)k->v[i]) * 0x100000001b3ull;
    return h & g_hash_mask;
}

void cache_free(struct compiler *cc)
{
    for (int i = 0; i < cc->ncache; i++) {
        free(cc->cache[i].key);
        program_free(cc->cache[i].prog);
    }
    free(cc->cache);
    free(cc->plan);
}

/* ---- the cache and the cut ---- */

static Program *lookup(const struct compiler *cc, const struct key *k, uint64_t h)
{
    for (int i = 0; i < cc->ncache; i++) {
        const struct cache_entry *c = &cc->cache[i];
        /* the hash only narrows the search; the full key decides */
        if (c->hash == h && c->keylen == k->n && !memcmp(c->key, k->v, sizeof *k->v * (size_t)k->n))
            return c->prog;
    }
    return NULL;
}

static void insert(struct compiler *cc, struct key *k, uint64_t h, Program *p)
{
    if (cc->ncache == cc->capcache) {
        cc->capcache = cc->capcache ? 2 * cc->capcache : 16;
        cc->cache = realloc(cc->cache, sizeof *cc->cache * (size_t)cc->capcache);
        if (!cc->cache) {
            fprintf(stderr, "gpt: out of memory (compile cache)\n");
            exit(1);
        }
    }
    cc->cache[cc->ncache++] = (struct cache_entry){h, k->v, k->n, p};
    k->v = NULL;
}

/* Why a trace missed the cache: the cached key sharing the longest prefix
 * with it, and what the first difference is about (see the key's layout). */
static void explain_miss(const struct compiler *cc, const struct key *k, const char *why)
{
    int best = -1;
    long best_len = -1;
    for (int i = 0; i < cc->ncache; i++) {
        const struct cache_entry *c = &cc->cache[i];
        long j = 0;
        while (j < c->keylen && j < k->n && c->key[j] == k->v[j])
            j++;
        if (j > best_len) {
            best_len = j;
            best = i;
        }
    }
    const char *what = best_len < 3 ? "node or input count"
                       : best_len < 3 + 4 * k->v[1] ? "an input's shape or kind"
                       : "an op, shape or attribute";
    fprintf(stderr, "xla: new graph after %s; nearest cached graph #%d differs in %s "
            "(key word %ld: %lld vs %lld)\n", why, best, what, best_len,
            best_len < cc->cache[best].keylen ? (long long)cc->cache[best].key[best_len] : -1LL,
            best_len < k->n ? (long long)k->v[best_len] : -1LL);
}

int debug_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("GPT_XLA_DEBUG");
        on = v && *v && strcmp(v, "0") && xs_host() == 0; /* in a pod, host 0 alone */
    }
    return on;
}

/* GPT_XLA_DEBUG's block for one compilation, as PyTorch/XLA's
 * PT_XLA_DEBUG gives it: the cause, the graph's hash, what goes in and
 * out, and what the compiler made of it. */
static void explain_compile(const struct compiler *cc, const Program *p, uint64_t hash,
                            const char *why)
{
    size_t in = 0, out = 0;
    for (int i = 0; i < p->nin; i++)
        in += (size_t)p->tin[i].bytes;
    for (int i = 0; i < p->nout; i++)
        out += (size_t)p->tout[i].bytes;
    fprintf(stderr, "xla: compile #%d, cause: %s\n"
            "xla:   graph hash %016llx; %d nodes -> %d kernels; %d inputs (%zu bytes), %d "
            "outputs (%zu bytes); arena %zu bytes vs %zu in all buffers; %.2f ms\n",
            cc->ncache, why, (unsigned long long)hash, cc->last.nodes, cc->last.kernels,
            p->nin, in, p->nout, out, cc->last.arena, cc->last.buffers, cc->last.ms);
}

/* PyTorch/XLA's automatic warnings: after 10 warm-up steps (mark_steps),
 * more than 0.5 compiles, or host reads that cut the graph, a step. Judged
 * once 10 steps have passed the warm-up, and said once each. */
void check_rates(struct compiler *cc)
{
    long steps = xs_counter(C_MARK_STEP) - 10;
    long compiles = xs_counter(C_UNCACHED), reads = xs_counter(C_HOST_READ);
    if (steps == 0) {
        cc->warm_compiles = compiles;
        cc->warm_reads = reads;
    }
    if (steps < 10)
        return;
    if (!cc->warned_compiles && compiles - cc->warm_compiles > 0.5 * steps) {
        cc->warned_compiles = 1;
        fprintf(stderr, "xla: warning: CompileTime too frequent: %ld compiles in the %ld steps "
                "after 10 warm-up steps (more than 0.5 a step); the graph's shapes change from "
                "step to step (see each compile's cause)\n", compiles - cc->warm_compiles, steps);
    }
    if (!cc->warned_reads && reads - cc->warm_reads > 0.5 * steps) {
        cc->warned_reads = 1;
        fprintf(stderr, "xla: warning: TransferFromDeviceTime too frequent: %ld host reads cut "
                "the graph in the %ld steps after 10 warm-up steps (more than 0.5 a step); read "
                "values after mark_step, or less often\n", reads - cc->warm_reads, steps);
    }
}

/* The cached program for this trace's structure, compiled on a miss. */
Program *get_program(struct compiler *cc, struct trace *tr, const char *why)
{
    struct key k = key_build(tr);
    uint64_t h = key_hash(&k);
    Program *p = lookup(cc, &k, h);
    if (p) {
        xs_counter_add(C_CACHED, 1);
        free(k.v);
        return p;
    }
    if (debug_on() && cc->ncache)
        explain_miss(cc, &k, why);
    p = compile(cc, tr);
    xs_metric_add(M_COMPILE, cc->last.ms * 1e-3);
    xs_counter_add(C_UNCACHED, 1);
    insert(cc, &k, h, p);
    if (debug_on())
        explain_compile(cc, p, h, why);
    return p;
}
