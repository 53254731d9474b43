/* cmd/ckpt.c: the model to and from checkpoints. The reference's state_dict
 * names, so PyTorch loads our files and we load its, plus our training
 * state under _gpt.*. The file format is
 * safetensors.c's; this is the model's side of it. */
#include "cmd/ckpt.h"
#include "util/util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reference's buffers, so load_state_dict(strict=True) accepts the file. */
static void put_buffers(StWriter *w, const Config *c)
{
    int V = c->vocab, T = c->context;
    float *eye = xcalloc((size_t)V * V, sizeof(float));  /* [V,V] */
    float *mask = xcalloc((size_t)T * T, sizeof(float)); /* [T,T] */
    for (int i = 0; i < V; i++)
        eye[i * V + i] = 1;
    for (int i = 0; i < T; i++)
        for (int j = i + 1; j < T; j++)
            mask[i * T + j] = -INFINITY;
    st_add(w, "onehot", ST_F32, 2, (int64_t[]){V, V}, eye, sizeof(float) * V * V);
    for (int l = 0; l < c->layers; l++) {
        char name[96];
        snprintf(name, sizeof name, "decode_transformer.blocks.%d.attention.causal_mask", l);
        st_add(w, name, ST_F32, 2, (int64_t[]){T, T}, mask, sizeof(float) * T * T);
    }
    free(eye);
    free(mask);
}

static void put_params(StWriter *w, const Model *m, const float *base, const char *prefix)
{
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        char name[128];
        int64_t shape[2] = {p->rows, p->cols};
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        st_add(w, name, ST_F32, p->ndim, p->ndim == 1 ? shape + 1 : shape, base + p->off,
               sizeof(float) * p->rows * p->cols);
    }
}

/* --shard-optimizer: a file holds the whole state, so that a run resumes
 * with any number of cores and hosts, sharded or not; its bytes are an
 * unsharded run's. */
float *ckpt_gather_moments(const Model *m)
{
    if (m->shards <= 1)
        return NULL;
    float *mv = xcalloc(2 * m->nw, sizeof(float));
    model_full_moments(m, mv, mv + m->nw);
    return mv;
}

void ckpt_put_moments(StWriter *w, const Model *m, const float *moments)
{
    if (m->shards > 1 && !moments) {
        fprintf(stderr, "gpt: internal error: a sharded model saved without its moments\n");
        abort();
    }
    put_params(w, m, m->w, "");
    put_buffers(w, &m->cfg);
    put_params(w, m, moments ? moments : m->m, "_gpt.adam_m.");
    put_params(w, m, moments ? moments + m->nw : m->v, "_gpt.adam_v.");
}

void ckpt_put(StWriter *w, const Model *m) { ckpt_put_moments(w, m, NULL); }

int ckpt_save(const Model *m, const char *path, const char *const *mkey,
              const char *const *mval, int nmeta, char *err, size_t elen)
{
    StWriter w = {{0}, {0}};
    ckpt_put(&w, m);
    return st_write(&w, path, mkey, mval, nmeta, err, elen);
}
/* Copies one parameter from the file after checking dtype and shape. */
static int load_param(const StFile *f, const Param *p, const char *name,
                      float *dst, char *err, size_t elen)
{
    const StEntry *e = st_find(f, name);
    if (!e)
        return snprintf(err, elen, "missing tensor '%s'", name), -1;
    int ok = e->dtype == ST_F32 && e->ndim == p->ndim &&
             (p->ndim == 1 ? e->shape[0] == p->cols
                           : e->shape[0] == p->rows && e->shape[1] == p->cols);
    if (!ok) {
        char want[48];
        if (p->ndim == 1)
            snprintf(want, sizeof want, "[%d]", p->cols);
        else
            snprintf(want, sizeof want, "[%d,%d]", p->rows, p->cols);
        snprintf(err, elen, "tensor '%s' is %s with %d dims (first %lld), expected F32 %s",
                 name, st_dtype_name(e->dtype), e->ndim, e->ndim ? (long long)e->shape[0] : 0LL, want);
        return -1;
    }
    memcpy(dst, st_data(f, e), sizeof(float) * p->rows * p->cols);
    return 0;
}

/* Names the model knows: parameters, the reference's buffers, and our
 * training state. Anything else means the file is not one of ours. */
static int known_name(const Model *m, const char *name)
{
    if (!strcmp(name, "onehot") || !strncmp(name, "_gpt.adam_", 10) ||
        !strcmp(name, "_gpt.loader"))
        return 1;
    if (strstr(name, ".attention.causal_mask"))
        return 1;
    for (int i = 0; i < m->np; i++)
        if (!strcmp(m->p[i].name, name))
            return 1;
    return 0;
}

int ckpt_load_weights(Model *m, const StFile *f, int with_state, char *err, size_t elen)
{
    char name[160]; /* st_load has checked the checksum */
    for (int i = 0; i < f->n; i++)
        if (!known_name(m, f->e[i].name))
            return snprintf(err, elen, "unexpected tensor '%s'", f->e[i].name), -1;
    for (int i = 0; i < m->np; i++) {
        const Param *p = &m->p[i];
        if (load_param(f, p, p->name, m->w + p->off, err, elen))
            return -1;
        if (!with_state)
            continue;
        snprintf(name, sizeof name, "_gpt.adam_m.%s", p->name);
        if (load_param(f, p, name, m->m + p->off, err, elen))
            return -1;
        snprintf(name, sizeof name, "_gpt.adam_v.%s", p->name);
        if (load_param(f, p, name, m->v + p->off, err, elen))
            return -1;
    }
    return 0;
}

static int meta_int(const StFile *f, const char *key, int fallback)
{
    const char *v = st_meta(f, key);
    char *end;
    long x = v ? strtol(v, &end, 10) : fallback;
    return v && (*end || x < 1 || x > 1 << 20) ? -1 : (int)x;
}

/* The config a file describes, read off its tensor shapes (heads cannot
 * be, so it comes from the metadata or the argument). Metadata that
 * disagrees with the shapes makes the file invalid. Deriving the config
 * from the tensors bounds the model we allocate by the file's own size. */
int ckpt_config(const StFile *f, Config *c, int heads)
{
    const StEntry *tok = st_find(f, "decode_transformer.token_embedding.weight");
    const StEntry *pos = st_find(f, "decode_transformer.postn_embedding.weight");
    const StEntry *fc = st_find(f, "decode_transformer.blocks.0.compute.0.weight");
    const StEntry *qkv = st_find(f, "decode_transformer.blocks.0.attention.attention.weight");
    const char *residual = st_meta(f, "residual");
    const char *act = st_meta(f, "activation"); /* absent: relu, as before the key */
    char name[96];
    if (!tok || !pos || !qkv || tok->ndim != 2 || pos->ndim != 2 || (fc && fc->ndim != 2))
        return -1;
    int64_t C = tok->shape[0], T = pos->shape[1], M = fc ? fc->shape[0] : 0; /* no MLP: 0 */
    if ((tok->shape[1] != 128 && tok->shape[1] != 256) || C < 1 || C > 4096 || pos->shape[0] != C || T < 2 ||
        T > 1024 || (fc && (fc->shape[1] != C || M < 1 || M > 16384)))
        return -1;
    if ((residual && strcmp(residual, "once") && strcmp(residual, "twice")) ||
        (act && activation_find(act) < 0))
        return -1;
    *c = (Config){.vocab = (int)tok->shape[1], .context = (int)T, .embed = (int)C, .mlp = (int)M,
                  .heads = meta_int(f, "heads", heads)};
    c->no_mlp = !fc;
    c->residual_once = residual && !strcmp(residual, "once");
    c->activation = act ? activation_find(act) : 0;
    do /* every block has its attention weight, with or without an MLP */
        snprintf(name, sizeof name, "decode_transformer.blocks.%d.attention.attention.weight",
                 c->layers);
    while (st_find(f, name) && ++c->layers < MAX_LAYERS);
    const char *keys[] = {"vocab", "context", "embed", "mlp", "layers"};
    const int vals[] = {c->vocab, c->context, c->embed, c->mlp, c->layers};
    for (int i = 0; i < 5; i++)
        if (!(c->no_mlp && i == 3) && meta_int(f, keys[i], vals[i]) != vals[i])
            return -1;
    return c->heads > 0 && c->embed % c->heads == 0 ? 0 : -1;
}
