/* bench/comm_bench.c: what a step's cross-host all-reduce costs here.
 * Run under mpirun (make bench-mpi does, over TCP on loopback and over
 * shared memory): for message sizes from 4 bytes to 16 MiB, the median
 * time of comm_all_reduce (the pod's deterministic all-reduce: reduce-
 * scatter of shards each summed in the fixed tree, then all-gather), of
 * the all-reduce it replaced (every rank gathers every buffer, then adds
 * them in the tree), run alternately with it, the bytes each moves per
 * rank, and a two-rank ping-pong, from which latency and bandwidth follow.
 * Rank 0 prints; medians of many repeats. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pod/comm.h"
#include "tensor.h"
#include "util/util.h"


/* The all-reduce before the reduce-scatter, as it was: MPI's all-gather
 * of every buffer to every rank ((N - 1) x 4 len bytes in and out of
 * each), then the tree; the same bits. */
static void gather_all_reduce(float *buf, size_t len, float *all /* [size][len] */)
{
    const float *parts[COMM_MAX_RANKS];
    MPI_Allgather(buf, (int)(sizeof(float) * len), MPI_BYTE, all, (int)(sizeof(float) * len),
                  MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 0; r < comm_size(); r++)
        parts[r] = all + (size_t)r * len;
    k_tree_sum(buf, parts, comm_size(), len);
}

/* Median seconds of one all-reduce of len floats, both kinds, alternating:
 * t_new, t_old; moved: bytes comm_all_reduce sent from this rank. */
static void time_all_reduces(float *buf, size_t len, float *all, int reps, double *t_new,
                             double *t_old, size_t *moved)
{
    double t[2][200];
    for (int r = 0; r < reps; r++) {
        struct comm_traffic traffic = {0, 0};
        comm_barrier();
        double t0 = MPI_Wtime();
        comm_all_reduce(buf, len, &traffic);
        t[0][r] = MPI_Wtime() - t0;
        comm_barrier();
        t0 = MPI_Wtime();
        gather_all_reduce(buf, len, all);
        t[1][r] = MPI_Wtime() - t0;
        *moved = traffic.sent;
    }
    *t_new = median_of(t[0], reps);
    *t_old = median_of(t[1], reps);
}

/* Median seconds of a round trip of bytes between ranks 0 and 1. */
static double time_ping_pong(char *buf, int bytes, int reps)
{
    double t[200];
    int rank = comm_rank();
    for (int r = 0; r < reps; r++) {
        comm_barrier();
        double t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
        t[r] = MPI_Wtime() - t0;
    }
    return median_of(t, reps);
}

int main(int argc, char **argv)
{
    comm_init(&argc, &argv);
    const char *label = argc > 1 ? argv[1] : "";
    size_t max = (size_t)16 << 20;
    float *buf = calloc(max / sizeof(float), sizeof(float));
    float *all = calloc(max / sizeof(float) * (size_t)comm_size(), sizeof(float));
    if (comm_rank() == 0)
        printf("%s, %d ranks\n  %10s %12s %12s %12s %12s %12s %12s\n", label, comm_size(),
               "bytes", "all-reduce", "sent/rank", "gather+tree", "sent/rank", "round trip",
               "one-way");
    if (comm_rank() == 0)
        printf("  %10s %12s %12s %12s %12s %12s %12s\n", "", "us", "bytes", "us", "bytes", "us",
               "MB/s");
    for (size_t bytes = 4; bytes <= max; bytes *= 4) {
        int reps = bytes < (1 << 20) ? 200 : 21;
        double t_new, t_old;
        size_t moved;
        time_all_reduces(buf, bytes / sizeof(float), all, reps, &t_new, &t_old, &moved);
        double rt = comm_size() >= 2 ? time_ping_pong((char *)buf, (int)bytes, reps) : 0;
        if (comm_rank() == 0)
            printf("  %10zu %12.1f %12zu %12.1f %12zu %12.1f %12.1f\n", bytes, t_new * 1e6,
                   moved, t_old * 1e6, (size_t)(comm_size() - 1) * bytes, rt * 1e6,
                   rt > 0 ? 2.0 * (double)bytes / rt * 1e-6 : 0.0);
    }
    free(all);
    free(buf);
    comm_finalize();
    return 0;
}
