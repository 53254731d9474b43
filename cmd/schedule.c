/* schedule.c: the learning-rate schedule of a training run (schedule.h):
 * the rate train.c gives each update. */
#include "cmd/schedule.h"
#include "util/fmath.h"
#include <math.h>
#include <string.h>

/* The rate of update number `step` (0-based) of a run of `steps`: linear
 * warm-up over the first --warmup updates, then --decay from --lr to
 * --min-lr at the last; none keeps --lr, the reference's constant rate. */
double rate_at(const struct settings *s, int step)
{
    if (step < s->warmup)
        return s->lr * (step + 1) / s->warmup;
    if (!strcmp(s->decay, "none") || s->steps - s->warmup <= 1)
        return s->lr;
    double done = (double)(step - s->warmup) / (s->steps - s->warmup - 1); /* 0 .. 1 */
    double shape = !strcmp(s->decay, "cosine") ? 0.5 * (1 + fm_cos(M_PI * done)) : 1 - done;
    return s->min_lr + (s->lr - s->min_lr) * shape;
}
