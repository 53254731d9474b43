/* pod.h: one run over several processes (pod.c; gpt-mpi: with one
 * process all of it reduces to nothing). Its errors, said once, are
 * pod/error.h's. */
#ifndef POD_H
#define POD_H
#include <stddef.h>
#include <stdint.h>
#include "data/batch.h"
#include "safetensors/safetensors.h"

/* Joins the pod at the start of main; the other ranks keep quiet. */
void join_pod(int *argc, char ***argv);
int is_master(void); /* rank 0: it alone prints, logs and writes */
/* 1 when stdout reaches a terminal (under mpirun: mpirun's own stdout). */
int stdout_reaches_terminal(void);
/* Every host must train on the same bytes (hash: of its --data). */
void check_same_data(uint64_t hash, const char *path);
Batch host_share(const Batch *b); /* this host's share of a global batch */
float pod_mean(float x);          /* the mean over hosts */
/* st_load on the master, its bytes sent to every rank. */
int load_on_master(StFile *f, const char *path, char *err, size_t elen);
/* A file the master loaded (failed: st_load's result) sent to every rank. */
int share_from_master(StFile *f, int failed, char *err, size_t elen);

#endif
