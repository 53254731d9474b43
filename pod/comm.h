/* comm.h: the transport between the processes of a multi-process run (the
 * hosts of a pod), below the all-reduce. One small interface; two builds:
 * `make` links the single-process version (no MPI: one process, rank 0 of
 * 1, every call trivial), `make mpi` links Open MPI's (gpt-mpi). Nothing
 * above this header knows which one it is in.
 *
 * Every collective waits at most comm_set_timeout's seconds; past that, or
 * when MPI reports a failed peer, the process prints one line naming its
 * rank and what it was waiting for (in the all-reduce: the peer and its
 * host), and the whole job is aborted: a run never hangs because one of
 * its processes died or its network went away. */
#ifndef COMM_H
#define COMM_H
#include <stddef.h>

/* The most processes a run may have. */
#define COMM_MAX_RANKS 64

/* Starts the transport; call once, first. Returns the number of processes. */
int comm_init(int *argc, char ***argv);
/* Ends it; call once before a normal exit of a multi-process run. */
void comm_finalize(void);
int comm_rank(void);   /* this process, 0..size-1; 0 is the master */
int comm_size(void);   /* processes in the run */
int comm_ranks_on_host(void); /* processes of the run on this host, this one included */
const char *comm_name(void); /* "single process" or the transport's name */

/* Seconds a collective may wait for the other processes (default 300). */
void comm_set_timeout(double seconds);

/* all[r * bytes ...] = rank r's mine[0..bytes), on every rank. */
void comm_allgather(const void *mine, void *all, size_t bytes);
/* Bytes one all-reduce moved from and to this process. */
struct comm_traffic {
    size_t sent, received;
};
/* buf[len] = the sum over ranks of every rank's buf, added in the fixed
 * tree of tensor.h over the ranks in rank order, so every rank holds the
 * same bits and they do not depend on timing or on MPI's reduction order.
 * Bandwidth-optimal: a reduce-scatter (rank j sums shard j of every rank's
 * buf) then an all-gather of the sums, 2(N - 1)/N x 4 len bytes each way
 * on each of N ranks; below 32 KiB, where latency rules, and with 2 ranks,
 * one all-gather of the whole buffers, (N - 1) x 4 len bytes. Adds what it
 * moved to *moved (may be NULL). */
void comm_all_reduce(float *buf, size_t len, struct comm_traffic *moved);
/* The all-reduce's two halves apart (--shard-optimizer), each rank r
 * owning [bound[r], bound[r + 1]) of buf, bound[size] its length. The
 * reduce-scatter leaves rank r's own part the sum over ranks, in the same
 * fixed tree as comm_all_reduce (so the same bits); the gather sends each
 * rank's part to every rank. Together they move what one all-reduce of
 * the large path moves. Each adds what it moved to *moved (may be NULL). */
void comm_reduce_scatter(float *buf, const size_t *bound, struct comm_traffic *moved);
void comm_gather_shards(float *buf, const size_t *bound, struct comm_traffic *moved);
/* Root's buf[0..bytes) on every rank. */
void comm_broadcast(void *buf, size_t bytes, int root);
void comm_barrier(void);
/* Ends every process of the run with exit code `code`. */
_Noreturn void comm_abort(int code);

#endif
