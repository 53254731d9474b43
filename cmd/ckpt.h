/* cmd/ckpt.h: checkpoints (ckpt.c): a model's weights, Adam state and
 * config in a safetensors file (safetensors.h), under the reference's
 * state_dict names. */
#ifndef CMD_CKPT_H
#define CMD_CKPT_H
#include "gpt.h"
#include "safetensors/safetensors.h"

/* The reference's state_dict names plus _gpt.* training state. */
int ckpt_save(const Model *m, const char *path, const char *const *mkey,
              const char *const *mval, int nmeta, char *err, size_t elen);
/* The config a file describes (metadata, else tensor shapes; heads then
 * comes from the argument). Returns 0, or -1 if it describes none. */
int ckpt_config(const StFile *f, Config *c, int heads);
/* Loads weights (and, when with_state, Adam state) for m's config. */
/* The model's tensors (weights, buffers, Adam state) into a writer, for a
 * caller that adds tensors of its own (train.c's data loader state). */
void ckpt_put(StWriter *w, const Model *m);
/* A sharded model's (--shard-optimizer) moments whole, m's then v's [2 nw],
 * gathered from every core and host: a collective, every process calls it;
 * NULL when the model holds them whole. ckpt_put_moments writes them in
 * place of the model's own (moments NULL: the model's). */
float *ckpt_gather_moments(const Model *m);
void ckpt_put_moments(StWriter *w, const Model *m, const float *moments);
int ckpt_load_weights(Model *m, const StFile *f, int with_state, char *err, size_t elen);

#endif
