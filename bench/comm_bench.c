/* bench/comm_bench.c: what a step's cross-host all-reduce costs here.
 * Run under mpirun (make bench-mpi does, over TCP on loopback and over
 * shared memory): for message sizes from 4 bytes to 16 MiB, the median
 * time of comm_all_reduce (the pod's deterministic all-reduce: all-gather,
 * then the fixed tree) and of a two-rank ping-pong, from which latency and
 * bandwidth follow. Rank 0 prints; medians of many repeats. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* Median seconds of one comm_all_reduce of len floats. */
static double time_all_reduce(float *buf, size_t len, int reps)
{
    double t[200];
    for (int r = 0; r < reps; r++) {
        comm_barrier();
        double t0 = MPI_Wtime();
        comm_all_reduce(buf, len);
        t[r] = MPI_Wtime() - t0;
    }
    return median(t, reps);
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
    return median(t, reps);
}

int main(int argc, char **argv)
{
    comm_init(&argc, &argv);
    const char *label = argc > 1 ? argv[1] : "";
    size_t max = (size_t)16 << 20;
    float *buf = calloc(max / sizeof(float), sizeof(float));
    if (comm_rank() == 0)
        printf("%s, %d ranks\n  %12s %14s %14s %14s\n", label, comm_size(), "bytes",
               "all-reduce us", "round trip us", "one-way MB/s");
    for (size_t bytes = 4; bytes <= max; bytes *= 4) {
        int reps = bytes < (1 << 20) ? 200 : 21;
        double ar = time_all_reduce(buf, bytes / sizeof(float), reps);
        double rt = comm_size() >= 2 ? time_ping_pong((char *)buf, (int)bytes, reps) : 0;
        if (comm_rank() == 0)
            printf("  %12zu %14.1f %14.1f %14.1f\n", bytes, ar * 1e6, rt * 1e6,
                   rt > 0 ? 2.0 * (double)bytes / rt * 1e-6 : 0.0);
    }
    free(buf);
    comm_finalize();
    return 0;
}
