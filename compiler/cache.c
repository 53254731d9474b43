/* cache.c: the compiler's cache (compile.c runs the stages): a trace's
 * structure becomes a key, and the key finds a compiled program. The
 * key's hash narrows the search; the full key confirms it, so a program
 * is reused only for a trace of the same structure: every training step
 * after the first. */
#include "compiler/compiler.h"
#include "util/util.h"
#include <stdlib.h>
#include <string.h>

/* ---- the cache key: structure only, never pointers or data ----
 * Layout: node count, slot count, root count; 4 words per slot; then per
 * node its op, operand counts, attributes and operand references, and the
 * shapes of its outputs; last, the roots. */

static void key_put(struct key *k, int64_t x)
{
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 1024;
        k->v = xrealloc(k->v, sizeof *k->v * (size_t)k->cap);
    }
    k->v[k->n++] = x;
    k->hash = (k->hash ^ (uint64_t)x) * FNV1A64_PRIME; /* FNV-1a by words; key_build mixes it */
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
    key_put(k, t->phase == PHASE_RECOMPUTE); /* --remat's recompute: another program */
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

uint64_t g_hash_mask = ~(uint64_t)0;

struct key key_build(const struct trace *tr)
{
    struct key k = {.hash = FNV1A64_START};
    key_put(&k, tr->n);
    key_put(&k, tr->nslots);
    key_put(&k, tr->nroots);
    key_put(&k, kernels_reading_mode()); /* unfused (GPT_ISA=ref): another program */
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
    k.hash = mix64(k.hash) & g_hash_mask; /* the mask: tests force collisions */
    return k;
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

/* ---- the cache ---- */

Program *cache_lookup(const struct compiler *cc, const struct key *k)
{
    for (int i = 0; i < cc->ncache; i++) {
        const struct cache_entry *c = &cc->cache[i];
        /* the hash only narrows the search; the full key decides */
        if (c->hash == k->hash && c->keylen == k->n &&
            !memcmp(c->key, k->v, sizeof *k->v * (size_t)k->n))
            return c->prog;
    }
    return NULL;
}

void cache_insert(struct compiler *cc, struct key *k, Program *p)
{
    if (cc->ncache == cc->capcache) {
        cc->capcache = cc->capcache ? 2 * cc->capcache : 16;
        cc->cache = xrealloc(cc->cache, sizeof *cc->cache * (size_t)cc->capcache);
    }
    cc->cache[cc->ncache++] = (struct cache_entry){k->hash, k->v, k->n, p};
    k->v = NULL;
}
