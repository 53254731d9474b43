/* util/pool.h: a small free list that threads share under a lock (a
 * leaf: it includes no other header of gpt's).
 *
 * The redo team's attempts take scratch memory as they start and give it
 * back when they finish or give up, on any thread: xla_sim.c keeps its
 * attempts' arenas here, model/eager_board.c its passes' graphs. Memory
 * given back is kept for the next attempt, up to the pool's size; the
 * owner frees what does not fit. */
#ifndef UTIL_POOL_H
#define UTIL_POOL_H
#include <pthread.h>

typedef struct Pool {
    pthread_mutex_t lock;
    int n;       /* items kept */
    int cap;     /* the length of item */
    void **item; /* [cap] */
} Pool;

/* A pool that keeps its items in the array `slots` (static storage). */
#define POOL_OF(slots) {PTHREAD_MUTEX_INITIALIZER, 0, (int)(sizeof(slots) / sizeof *(slots)), (slots)}

/* An item given back earlier, or NULL when none is kept. */
void *pool_take(Pool *p);
/* Keeps item for a later pool_take; 0 if the pool is full, the item then
 * still the caller's to free. */
int pool_give(Pool *p, void *item);

#endif
