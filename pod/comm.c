/* comm.c: the transport between processes (see comm.h). The first half is
 * the single-process build; the second, compiled with -DGPT_MPI by mpicc,
 * is Open MPI's. The all-reduce is ours in both: MPI_Allreduce promises no
 * summation order, so each shard of the buffer is sent to the rank that
 * owns it, which adds every rank's copy in the fixed tree, and the summed
 * shards are then sent to every rank. */
#include "pod/comm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor.h"
#include "util/util.h"

static double timeout_s = 300;

void comm_set_timeout(double seconds) { timeout_s = seconds; }

#ifndef GPT_MPI

/* ---- one process ---- */

int comm_init(int *argc, char ***argv) { return 1; }
void comm_finalize(void) {}
int comm_rank(void) { return 0; }
int comm_size(void) { return 1; }
int comm_ranks_on_host(void) { return 1; }
const char *comm_name(void) { return "single process"; }
void comm_allgather(const void *mine, void *all, size_t bytes) { memmove(all, mine, bytes); }
void comm_all_reduce(float *buf, size_t len, struct comm_traffic *moved) {}
void comm_reduce_scatter(float *buf, const size_t *bound, struct comm_traffic *moved) {}
void comm_gather_shards(float *buf, const size_t *bound, struct comm_traffic *moved) {}
void comm_broadcast(void *buf, size_t bytes, int root) {}
void comm_barrier(void) {}
_Noreturn void comm_abort(int code) { exit(code); }

#else

/* ---- Open MPI ---- */
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <time.h>

static int rank, size = 1, on_host = 1;
/* each rank's host, for naming a peer that stops answering */
static char host[COMM_MAX_RANKS][MPI_MAX_PROCESSOR_NAME];

int comm_init(int *argc, char ***argv)
{
    int provided; /* only the main thread calls MPI; OpenMP threads never do */
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    /* errors come back to us, so that a lost peer is one clear line */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* the ranks that share this host's memory share its cores too */
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &on_host);
    MPI_Comm_free(&local);
    if (size <= COMM_MAX_RANKS) { /* larger pods are refused by the caller */
        char mine[MPI_MAX_PROCESSOR_NAME] = "";
        int len;
        MPI_Get_processor_name(mine, &len);
        MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, host, MPI_MAX_PROCESSOR_NAME,
                      MPI_CHAR, MPI_COMM_WORLD);
    }
    return size;
}

void comm_finalize(void) { MPI_Finalize(); }
int comm_rank(void) { return rank; }
int comm_size(void) { return size; }
int comm_ranks_on_host(void) { return on_host; }
const char *comm_name(void) { return "Open MPI"; }

/* Seconds MPI_Abort may take: it asks mpirun to end the job, and when the
 * network to mpirun is gone it would wait for ever. */
#define ABORT_GRACE_S 5

static volatile sig_atomic_t abort_code;
static void abort_overdue(int sig)
{
    (void)sig;
    _exit(abort_code);
}

_Noreturn void comm_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    abort_code = code;
    signal(SIGALRM, abort_overdue);
    alarm(ABORT_GRACE_S);
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code); /* not reached; never exit(), which may be running already */
}

static _Noreturn void lost(const char *what, const char *why)
{
    fprintf(stderr, "gpt: rank %d: %s in %s; another rank has died or hung, stopping the run\n",
            rank, why, what);
    comm_abort(1);
}

/* Seconds of a wait spent polling flat out: MPI moves a large message only
 * while it is polled, and an answer usually comes well within this. */
#define SPIN_S 1.0

/* Between polls, so that a dead or stuck peer ends the run after the
 * timeout instead of hanging it: for the first SPIN_S of a wait only yield
 * the core (a rank may share its core with others); then sleep. */
static void pause_poll(double waited)
{
    if (waited < SPIN_S)
        sched_yield();
    else
        nanosleep(&(struct timespec){0, 100000}, NULL);
}

/* Waits for a non-blocking collective (a broadcast, a barrier). */
static void finish(MPI_Request *req, int err, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0, done = 0;
    double t0 = now_seconds();
    while (!err) {
        err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done || err)
            break;
        double waited = now_seconds() - t0;
        if (waited > timeout_s) {
            snprintf(msg, sizeof msg, "no answer for %.0f s", timeout_s);
            lost(what, msg);
        }
        pause_poll(waited);
    }
    if (err) {
        MPI_Error_string(err, msg, &len);
        lost(what, msg);
    }
}

/* MPI counts are ints: larger messages go in pieces of this many bytes. */
#define PIECE ((size_t)1 << 28)

/* ---- point to point: the all-gather and the all-reduce ----
 * Their messages go straight between ranks and are waited for together,
 * so that one which never completes names its peer and the peer's host. */

enum { TAG_ALLGATHER = 1, TAG_SCATTER, TAG_GATHER }; /* one tag a kind of message */

/* The messages in flight: MPI requests and their peers. */
struct phase {
    const char *what; /* "an all-reduce", for the error line */
    MPI_Request *req;
    int *peer, n;
    size_t sent, received; /* bytes, over every exchange */
};

static void phase_alloc(struct phase *ph, const char *what, size_t bytes_per_peer)
{
    size_t messages = 2 * (size_t)(size - 1) * (1 + bytes_per_peer / PIECE);
    *ph = (struct phase){.what = what, .req = malloc(sizeof *ph->req * messages),
                         .peer = malloc(sizeof *ph->peer * messages)};
    if (!ph->req || !ph->peer)
        lost(what, "out of memory");
}

static void phase_free(struct phase *ph)
{
    free(ph->req);
    free(ph->peer);
}

static void post(struct phase *ph, void *buf, size_t bytes, int peer, int tag, int send)
{
    for (size_t off = 0; off < bytes; off += PIECE) {
        int count = (int)(bytes - off < PIECE ? bytes - off : PIECE);
        MPI_Request *r = &ph->req[ph->n];
        char *at = (char *)buf + off;
        int err = send ? MPI_Isend(at, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, r)
                       : MPI_Irecv(at, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, r);
        if (err)
            lost(ph->what, "MPI refused a message");
        ph->peer[ph->n++] = peer;
    }
    *(send ? &ph->sent : &ph->received) += bytes;
}

static _Noreturn void peer_lost(const struct phase *ph, int peer, const char *why)
{
    fprintf(stderr, "gpt: rank %d: %s from rank %d (host %s) in %s; stopping the run\n", rank,
            why, peer, host[peer], ph->what);
    comm_abort(1);
}

/* Tests every message still in flight; returns how many completed. */
static int test_all(struct phase *ph)
{
    int completed = 0;
    for (int i = 0; i < ph->n; i++) {
        int done = 0;
        if (ph->req[i] == MPI_REQUEST_NULL)
            continue;
        int err = MPI_Test(&ph->req[i], &done, MPI_STATUS_IGNORE);
        if (err) {
            char msg[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(err, msg, &len);
            peer_lost(ph, ph->peer[i], msg);
        }
        completed += done;
    }
    return completed;
}

/* Waits for every message posted; past the timeout, names the first peer
 * still owing one. Then the phase is empty again. */
static void wait_all(struct phase *ph)
{
    double t0 = now_seconds();
    for (long left = ph->n; (left -= test_all(ph)) > 0;) {
        double waited = now_seconds() - t0;
        if (waited > timeout_s) {
            char msg[64];
            snprintf(msg, sizeof msg, "no answer for %.0f s", timeout_s);
            for (int i = 0; i < ph->n; i++)
                if (ph->req[i] != MPI_REQUEST_NULL)
                    peer_lost(ph, ph->peer[i], msg);
        }
        pause_poll(waited);
    }
    ph->n = 0;
}

/* all[r] = rank r's mine, [size][bytes]: every rank sends its block to
 * every other, peers in ring order from the next rank. */
static void gather_blocks(struct phase *ph, const void *mine, void *all, size_t bytes)
{
    for (int k = 1; k < size; k++) {
        int r = (rank + k) % size;
        post(ph, (char *)all + (size_t)r * bytes, bytes, r, TAG_ALLGATHER, 0);
        post(ph, (void *)mine, bytes, r, TAG_ALLGATHER, 1);
    }
    wait_all(ph);
    memmove((char *)all + (size_t)rank * bytes, mine, bytes);
}

void comm_allgather(const void *mine, void *all, size_t bytes)
{
    struct phase ph;
    if (size == 1) {
        memmove(all, mine, bytes);
        return;
    }
    phase_alloc(&ph, "an all-gather", bytes);
    gather_blocks(&ph, mine, all, bytes);
    phase_free(&ph);
}

/* ---- the all-reduce ----
 * Below SMALL_ALL_REDUCE_BYTES it is latency-bound: every rank gathers
 * every buffer and adds them in the fixed tree, (N - 1) x the buffer each
 * way. Above, it is bandwidth-bound: shard j of the buffer, [shard_at(j),
 * shard_at(j + 1)), is rank j's; every rank sends rank j its copy of shard
 * j, rank j adds the N copies in the tree in rank order (element by
 * element what the whole buffers' tree gives: the same bits), then sends
 * its sum to every rank: 2(N - 1)/N x the buffer each way, less than
 * N - 1 times from N = 4 on (with 2 ranks both move it once, and one
 * exchange is faster than two). The crossover measured by
 * bench/comm_bench lies between 16 and 64 KiB for 4 and 8 ranks. */
#define SMALL_ALL_REDUCE_BYTES ((size_t)32 << 10)

static size_t shard_at(size_t len, int j) { return len * (size_t)j / (size_t)size; }

/* Scatter: rank r gets shard r of buf, [bound[r], bound[r + 1]); inbox
 * [size][mine] gets every rank's copy of ours. */
static void reduce_scatter(struct phase *ph, float *buf, const size_t *bound, float *inbox)
{
    size_t lo = bound[rank], mine = bound[rank + 1] - lo;
    const float *parts[COMM_MAX_RANKS];
    for (int k = 1; k < size; k++) {
        int r = (rank + k) % size;
        size_t at = bound[r], theirs = bound[r + 1] - at;
        post(ph, inbox + (size_t)r * mine, sizeof(float) * mine, r, TAG_SCATTER, 0);
        post(ph, buf + at, sizeof(float) * theirs, r, TAG_SCATTER, 1);
    }
    wait_all(ph);
    memcpy(inbox + (size_t)rank * mine, buf + lo, sizeof(float) * mine);
    for (int r = 0; r < size; r++)
        parts[r] = inbox + (size_t)r * mine;
    k_tree_sum(buf + lo, parts, size, mine); /* buf is none of the parts */
}

/* Every rank's shard [bound[r], bound[r + 1]) to every rank. */
static void send_shard_to_all(struct phase *ph, float *buf, const size_t *bound)
{
    size_t lo = bound[rank], mine = bound[rank + 1] - lo;
    for (int k = 1; k < size; k++) {
        int r = (rank + k) % size;
        size_t at = bound[r], theirs = bound[r + 1] - at;
        post(ph, buf + at, sizeof(float) * theirs, r, TAG_GATHER, 0);
        post(ph, buf + lo, sizeof(float) * mine, r, TAG_GATHER, 1);
    }
    wait_all(ph);
}

/* The all-reduce's receive buffer, kept from call to call: a step's
 * all-reduce is the same size every time, and fresh pages cost faults. */
static float *scratch_floats(size_t n)
{
    static float *scratch;
    static size_t have;
    if (!scratch || n > have) {
        free(scratch);
        scratch = malloc(sizeof(float) * (n + 1)); /* never NULL for n = 0 */
        have = scratch ? n : 0;
    }
    return scratch;
}

void comm_all_reduce(float *buf, size_t len, struct comm_traffic *moved)
{
    if (size == 1)
        return;
    size_t bytes = sizeof(float) * len, bound[COMM_MAX_RANKS + 1];
    for (int r = 0; r <= size; r++)
        bound[r] = shard_at(len, r);
    size_t mine = bound[rank + 1] - bound[rank];
    /* with 2 ranks both move the buffer once each way: one exchange is faster */
    int small = bytes < SMALL_ALL_REDUCE_BYTES || size == 2;
    float *scratch = scratch_floats((small ? len : mine) * (size_t)size);
    const float *parts[COMM_MAX_RANKS];
    struct phase ph;
    if (!scratch)
        lost("an all-reduce", "out of memory");
    phase_alloc(&ph, "an all-reduce", bytes);
    if (small) {
        gather_blocks(&ph, buf, scratch, bytes);
        for (int r = 0; r < size; r++)
            parts[r] = scratch + (size_t)r * len;
        k_tree_sum(buf, parts, size, len);
    } else {
        reduce_scatter(&ph, buf, bound, scratch);
        send_shard_to_all(&ph, buf, bound);
    }
    if (moved) {
        moved->sent += ph.sent;
        moved->received += ph.received;
    }
    phase_free(&ph);
}

/* The two halves of the all-reduce apart, for --shard-optimizer: rank r
 * owns [bound[r], bound[r + 1]) of buf (bound has size + 1 entries). */
void comm_reduce_scatter(float *buf, const size_t *bound, struct comm_traffic *moved)
{
    size_t most = 0;
    struct phase ph;
    if (size == 1)
        return;
    for (int r = 0; r < size; r++)
        most = bound[r + 1] - bound[r] > most ? bound[r + 1] - bound[r] : most;
    float *scratch = scratch_floats(most * (size_t)size);
    if (!scratch)
        lost("a reduce-scatter", "out of memory");
    phase_alloc(&ph, "a reduce-scatter", sizeof(float) * most);
    reduce_scatter(&ph, buf, bound, scratch);
    if (moved) {
        moved->sent += ph.sent;
        moved->received += ph.received;
    }
    phase_free(&ph);
}

void comm_gather_shards(float *buf, const size_t *bound, struct comm_traffic *moved)
{
    struct phase ph;
    if (size == 1)
        return;
    phase_alloc(&ph, "an all-gather", sizeof(float) * (bound[size] - bound[0]));
    send_shard_to_all(&ph, buf, bound);
    if (moved) {
        moved->sent += ph.sent;
        moved->received += ph.received;
    }
    phase_free(&ph);
}

/* ---- collectives ---- */

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
