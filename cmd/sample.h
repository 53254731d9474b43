/* cmd/sample.h: the sampler (sample.c): passages from a model, with a KV
 * cache, temperature and top-k. It uses the model (gpt.h) from above. */
#ifndef CMD_SAMPLE_H
#define CMD_SAMPLE_H
#include "gpt.h"
#include "util/rng.h"
#include "watch/trial.h"

struct lent_board;

/* Sampling with a KV cache; each new byte is handed to emit (may be NULL).
 * text must hold total bytes; it starts with the prompt of n bytes.
 * temperature 0 is greedy; top_k 0 keeps all. */
typedef struct SampleOpts {
    float temperature;
    int top_k;
    void (*emit)(int byte, void *ctx);
    void *ctx;
    ThreadTrial *threads; /* each byte a unit of this thread trial (watch/trial.h); NULL: none */
    /* The window steps past the context on this board, lent to the redo
     * team while `threads` runs it (cmd/flags.h); NULL: one core */
    struct lent_board *board;
} SampleOpts;
void model_generate(Model *m, Graph *g, char *text, int n, int total,
                    const SampleOpts *o, Rng *r);
/* One byte drawn from one row of V logits: temperature 0 is the argmax
 * (the first of equal largest), else a draw from softmax(logits / T) over
 * the top_k largest; logits tied with the k-th largest are kept too, as
 * nanoGPT's `logits < v[-1]` keeps them. Public for tests/test_numbers.c,
 * which holds both to softmax computed on its own. */
int sample_byte(const float *logits, int V, const SampleOpts *o, Rng *r);
/* The weights sample_byte draws from (temperature > 0): p[i] =
 * exp((logits[i] - max) / T) for a kept logit, 0 for a dropped one;
 * returns their sum. */
double sample_weights(const float *logits, int V, const SampleOpts *o, double *p);
/* ns passages of the same prompt at once, text[s] and r[s] passage s's
 * (text[s][0..n) the prompt); one forward pass per byte serves them all.
 * o->emit, if set, streams passage 0. Passage s's bytes do not depend on
 * ns: model_generate(text[0], r[0]) writes passage 0's. */
void model_generate_many(Model *m, Graph *g, char *const *text, int ns, int n, int total,
                         const SampleOpts *o, Rng *r);
/* The reference's way: every byte re-reads the whole (growing) text, so on
 * the xla device every new length is a new graph shape. */
void model_generate_naive(Model *m, Graph *g, char *text, int n, int total,
                          const SampleOpts *o, Rng *r);

#endif
