/* schedule.h: the learning rate of each update of a training run, from
 * --lr, --warmup, --decay, --min-lr and --steps (schedule.c). */
#ifndef SCHEDULE_H
#define SCHEDULE_H
#include "cmd/flags.h"

/* The learning rate of update number step (0-based). */
double rate_at(const struct settings *s, int step);

#endif
