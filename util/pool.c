/* util/pool.c: the shared free list (pool.h). A mutex, not a lock-free
 * stack: an item changes hands once an attempt, against thousands of
 * kernels in between. */
#include "util/pool.h"

void *pool_take(Pool *p)
{
    void *item = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->n > 0)
        item = p->item[--p->n];
    pthread_mutex_unlock(&p->lock);
    return item;
}

int pool_give(Pool *p, void *item)
{
    pthread_mutex_lock(&p->lock);
    int kept = p->n < p->cap;
    if (kept)
        p->item[p->n++] = item;
    pthread_mutex_unlock(&p->lock);
    return kept;
}
