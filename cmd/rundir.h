/* rundir.h: a run's directory and its checkpoints (rundir.c). */
#ifndef RUNDIR_H
#define RUNDIR_H
#include <stddef.h>

#define MAX_CKPTS 4096 /* checkpoints of one directory that list_ckpts sees */

/* The steps of dir's ckpt-*.safetensors, newest first; returns the count. */
int list_ckpts(const char *dir, int *steps, int max);
void ckpt_name(char *path, size_t n, const char *dir, int step); /* dir/ckpt-<step>... */
void prune_ckpts(const char *dir, int keep, int newest); /* keeps the newest keep */
#define LOCK_FILE ".lock" /* in a run's directory: who writes there (rundir.c) */

void make_out_dir(const char *dir); /* makes it if need be and locks it, or dies */
/* One process writes a directory: its lock, held until this process ends,
 * or an exit 1 naming the holder; -1 (errno) when dir is not there. */
int lock_out_dir(const char *dir);
int wait_out_dir(const char *dir); /* until no process holds it; -1 on a signal */
/* A checkpoint file, or a directory standing for its newest, into path. */
void resolve_ckpt(const char *arg, char *path, size_t n);

#endif
