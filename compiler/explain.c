/* explain.c: GPT_XLA_DEBUG's explanations, as PyTorch/XLA's PT_XLA_DEBUG
 * gives them: why a trace missed the cache, what a compile made, and the
 * warnings when compiles or host reads come too often; the error of a
 * program too big for HBM; and the record of each new program that the
 * debug line and the tests read. compile.c and graph.c call them; nothing
 * here changes what is compiled. */
#include "compiler/compiler.h"
#include <stdlib.h>
#include <string.h>

/* Why a trace missed the cache: the cached key sharing the longest prefix
 * with it, and what the first difference is about (see the key's layout). */
void explain_miss(const struct compiler *cc, const struct key *k, const char *why)
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
void explain_compile(const struct compiler *cc, const Program *p, uint64_t hash,
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

static void fmt_bytes(char *buf, size_t n, double b)
{
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.1f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, n, "%.1f KiB", b / 1024.0);
}

/* "op f32[r,c] 1.5 MiB" for a value of the plan. */
static void value_name(char *buf, size_t n, const struct plan *e, const struct value *v)
{
    char sz[32];
    fmt_bytes(sz, sizeof sz, (double)v->bytes);
    if (v->ref.kind == REF_SLOT) {
        const Tensor *t = e->tr->slot[v->ref.at];
        snprintf(buf, n, "input %s[%d,%d] %s", t->dtype == DT_I32 ? "s32" : "f32", t->rows,
                 t->cols, sz);
        return;
    }
    const struct tnode *t = &e->tr->nodes[v->ref.at];
    snprintf(buf, n, "%s f32[%d,%d] %s", kop_name(t->op), t->rows[v->ref.out],
             t->cols[v->ref.out], sz);
}

/* What to try, for refuse_hbm: --remat when its estimated arena (remat.c's
 * remat_estimate) fits, else a smaller --batch with --grad-accum, whose
 * micro-batches shrink the activations in proportion. */
static void hbm_advice(char *buf, size_t n, size_t resident, size_t remat_arena)
{
    char est[32];
    fmt_bytes(est, sizeof est, (double)(remat_arena + resident));
    if (!remat_arena)
        snprintf(buf, n, "a smaller --batch (with --grad-accum to keep the step's size) or "
                 "--eval-batch would need less");
    else if (remat_arena + resident <= xs_hbm())
        snprintf(buf, n, "with --remat it would fit (an estimated %s per core)", est);
    else
        snprintf(buf, n, "with --remat it would still not fit (an estimated %s per core); "
                 "a smaller --batch with --grad-accum would need less", est);
}

/* The RESOURCE_EXHAUSTED error of a program that does not fit a core's
 * HBM (plan.c's check_hbm), naming the biggest buffers as XLA's does, and
 * what would fit (hbm_advice). */
void refuse_hbm(const struct plan *e, const struct value *by_size, size_t arena, size_t resident)
{
    size_t hbm = xs_hbm(), remat_arena = remat_estimate(e), state = 0;
    for (int s = 0; s < e->tr->nslots; s++) /* Adam's moments (the shard alone, sharded), step, sums */
        if (e->tr->slot[s]->kind == TK_STATE)
            state += (size_t)e->tr->slot[s]->numel * 4;
    char need[32], a[32], r[32], have[32], big[3][96] = {"", "", ""}, advice[160];
    hbm_advice(advice, sizeof advice, resident, remat_arena);
    fmt_bytes(need, sizeof need, (double)(arena + resident));
    fmt_bytes(a, sizeof a, (double)arena);
    fmt_bytes(r, sizeof r, (double)(resident - state));
    fmt_bytes(have, sizeof have, (double)hbm);
    for (int i = 0; i < 3 && i < e->nval; i++)
        value_name(big[i], sizeof big[i], e, &by_size[i]);
    fprintf(stderr, "gpt: RESOURCE_EXHAUSTED: compiling a program of %d kernels: it needs "
            "%s of HBM per core (%s arena + %s weights + %zu bytes optimizer state), %s has "
            "%s per core (--hbm); largest buffers: %s; %s; %s; %s\n", e->nk, need, a, r, state,
            xs_device_name(), have, big[0], big[1], big[2], advice);
    exit(1);
}

/* What the new program is, for tests and the debug line (g_compile_stats,
 * g_plan, g_kernel_count). */
void record_compile(struct compiler *cc, const struct plan *pl)
{
    free(cc->plan);
    cc->plan = xcalloc((size_t)pl->nval, sizeof *cc->plan);
    cc->nplan = pl->nval;
    cc->last.buffers = 0;
    for (int i = 0; i < pl->nval; i++) {
        const struct value *v = &pl->by_size[i];
        cc->plan[i] = (struct plan_buf){v->off, v->bytes, v->first, v->last};
        cc->last.buffers += (size_t)v->bytes;
    }
    memset(cc->kernels, 0, sizeof cc->kernels);
    for (int k = 0; k < pl->nk; k++)
        cc->kernels[pl->tr->nodes[pl->order[k]].op]++;
    cc->last.kernels = pl->nk;
    cc->last.arena = pl->arena;
    cc->last.remat_arena = remat_estimate(pl);
    if (pl->arena > cc->last.peak_arena) {
        cc->last.peak_arena = pl->arena;
        cc->last.peak_remat_arena = cc->last.remat_arena;
    }
}

/* A compile's progress: the hook the program sets (compiler.h), told
 * the trace's live nodes as each stage begins and when the compile ends. */
void (*compile_progress_hook)(const struct compile_progress *p);

void tell_stage(const char *stage, int at, int stages, const struct trace *tr, double t0)
{
    int live = 0;
    if (!compile_progress_hook)
        return;
    for (int i = 0; i < tr->n; i++)
        live += !tr->nodes[i].dead;
    compile_progress_hook(&(struct compile_progress){stage, at, stages, live,
                                                     now_seconds() - t0});
}
