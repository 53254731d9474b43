/* tests/plain_path_step.c: linked into make plain-path's coverage build
 * only (with -Wl,--wrap=model_train_step), so that the counts gcov reads
 * are the training step's alone: zeroed as the step starts, written out
 * as it ends. What runs before it (flags, data, the model's setup) and
 * after it (eval, sampling, checkpoints, printing) leaves no count. The
 * coverage data is written once: the exit's own dump then does nothing,
 * and a second run (the eager step after the lazy one) adds its counts to
 * the first's. */
#include "gpt.h"

/* libgcov's, there in every --coverage build (gcc's gcov.h declares them) */
void __gcov_reset(void);
void __gcov_dump(void);

float __real_model_train_step(Model *m, Graph *g, const Batch *b, float lr);
float __wrap_model_train_step(Model *m, Graph *g, const Batch *b, float lr);

float __wrap_model_train_step(Model *m, Graph *g, const Batch *b, float lr)
{
    __gcov_reset();
    float loss = __real_model_train_step(m, g, b, lr);
    __gcov_dump();
    return loss;
}
