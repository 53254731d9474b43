/* comm.c: the transport between processes (see comm.h). The first half is
 * the single-process build; the second, compiled with -DGPT_MPI by mpicc,
 * is Open MPI's. The all-reduce is ours in both: MPI_Allreduce promises no
 * summation order, so the ranks' buffers are gathered and every rank adds
 * them in the same fixed tree. */
#include "comm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor.h"
#include "util.h"

static double timeout_s = 300;

void comm_set_timeout(double seconds) { timeout_s = seconds; }

#ifndef GPT_MPI

/* ---- one process ---- */

int comm_init(int *argc, char ***argv) { return 1; }
void comm_finalize(void) {}
int comm_rank(void) { return 0; }
int comm_size(void) { return 1; }
const char *comm_name(void) { return "single process"; }
void comm_allgather(const void *mine, void *all, size_t bytes) { memmove(all, mine, bytes); }
void comm_all_reduce(float *buf, size_t len) {}
void comm_broadcast(void *buf, size_t bytes, int root) {}
void comm_barrier(void) {}
_Noreturn void comm_abort(int code) { exit(code); }

#else

/* ---- Open MPI ---- */
#include <mpi.h>
#include <sched.h>
#include <unistd.h>
#include <time.h>

static int rank, size = 1;

int comm_init(int *argc, char ***argv)
{
    int provided; /* only the main thread calls MPI; OpenMP threads never do */
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    /* errors come back to us, so that a lost peer is one clear line */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

void comm_finalize(void) { MPI_Finalize(); }
int comm_rank(void) { return rank; }
int comm_size(void) { return size; }
const char *comm_name(void) { return "Open MPI"; }

_Noreturn void comm_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code); /* not reached; never exit(), which may be running already */
}

static _Noreturn void lost(const char *what, const char *why)
{
    fprintf(stderr, "gpt: rank %d: %s in %s; another rank has died or hung, stopping the run\n",
            rank, why, what);
    comm_abort(1);
}

/* Waits for a non-blocking collective, polling, so that a dead or stuck
 * peer ends the run after the timeout instead of hanging it. The first
 * polls only yield the core (an answer usually comes within microseconds,
 * and a rank may share its core with others); later ones sleep. */
static void finish(MPI_Request *req, int err, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0, done = 0;
    double t0 = now_seconds();
    for (long polls = 0; !err; polls++) {
        err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done || err)
            break;
        if (now_seconds() - t0 > timeout_s) {
            snprintf(msg, sizeof msg, "no answer for %.0f s", timeout_s);
            lost(what, msg);
        }
        if (polls < 20000)
            sched_yield();
        else
            nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    if (err) {
        MPI_Error_string(err, msg, &len);
        lost(what, msg);
    }
}

/* MPI counts are ints: larger messages go in pieces of this many bytes. */
#define PIECE ((size_t)1 << 28)

static void allgather_piece(const char *mine, char *all, size_t bytes, size_t off, size_t len,
                            char *tmp /* [size,len] */)
{
    MPI_Request req;
    int err = MPI_Iallgather(mine + off, (int)len, MPI_BYTE, tmp, (int)len, MPI_BYTE,
                             MPI_COMM_WORLD, &req);
    finish(&req, err, "an all-gather");
    for (int r = 0; r < size; r++)
        memcpy(all + (size_t)r * bytes + off, tmp + (size_t)r * len, len);
}

void comm_allgather(const void *mine, void *all, size_t bytes)
{
    if (bytes <= PIECE) {
        MPI_Request req;
        int err = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE,
                                 MPI_COMM_WORLD, &req);
        finish(&req, err, "an all-gather");
        return;
    }
    char *tmp = malloc(PIECE * (size_t)size);
    if (!tmp)
        lost("an all-gather", "out of memory");
    for (size_t off = 0; off < bytes; off += PIECE)
        allgather_piece(mine, all, bytes, off, bytes - off < PIECE ? bytes - off : PIECE, tmp);
    free(tmp);
}

void comm_all_reduce(float *buf, size_t len)
{
    if (size == 1)
        return;
    float *all = malloc(sizeof(float) * len * (size_t)size + 1);
    const float *parts[COMM_MAX_RANKS];
    if (!all)
        lost("an all-reduce", "out of memory");
    comm_allgather(buf, all, sizeof(float) * len);
    for (int r = 0; r < size; r++)
        parts[r] = all + (size_t)r * len;
    k_tree_sum(buf, parts, size, len);
    free(all);
}

void comm_broadcast(void *buf, size_t bytes, int root)
{
    for (size_t off = 0; size > 1 && off < bytes; off += PIECE) {
        MPI_Request req;
        int len = (int)(bytes - off < PIECE ? bytes - off : PIECE);
        int err = MPI_Ibcast((char *)buf + off, len, MPI_BYTE, root, MPI_COMM_WORLD, &req);
        finish(&req, err, "a broadcast");
    }
}

void comm_barrier(void)
{
    MPI_Request req;
    if (size == 1)
        return;
    int err = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    finish(&req, err, "a barrier");
}

#endif
