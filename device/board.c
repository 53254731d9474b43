/* device/board.c: the simulated board: the TPU table, the board in use
 * (--tpu, --cores, --hbm) and the pod's hosts (pod/comm.c's ranks). */
#include "device/board.h"
#include "pod/comm.h"
#include <stdio.h>
#include <string.h>

/* Public figures (Google Cloud TPU documentation, system architecture
 * pages): HBM per chip divided among the devices PyTorch/XLA sees on it.
 * v2 and v3 chips hold two TensorCores, each its own device; v4 and v5p
 * fuse theirs into one "megacore" device per chip; v5e and v6e chips have
 * one core. */
static const struct tpu_spec tpus[] = {
    {"v2-8", 8, 8, "4 chips x 2 cores, 16 GiB HBM per chip"},
    {"v3-8", 8, 16, "4 chips x 2 cores, 32 GiB HBM per chip"},
    {"v4-8", 4, 32, "4 chips, one megacore device each, 32 GiB HBM per chip"},
    {"v5e-8", 8, 16, "8 chips x 1 core, 16 GiB HBM per chip"},
    {"v5p-8", 4, 95, "4 chips, one megacore device each, 95 GiB HBM per chip"},
    {"v6e-8", 8, 32, "8 chips x 1 core, 32 GiB HBM per chip"},
};
#define NTPUS (int)(sizeof tpus / sizeof *tpus)

const struct tpu_spec *xs_tpu(const char *name)
{
    for (int i = 0; i < NTPUS; i++)
        if (!strcmp(tpus[i].name, name))
            return &tpus[i];
    return NULL;
}

const char *xs_tpu_names(void)
{
    static char buf[256];
    if (!buf[0])
        for (int i = 0; i < NTPUS; i++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "",
                     tpus[i].name);
    return buf;
}

static struct {
    char name[64];
    int cores;
    size_t hbm;
} board = {"xla", 1, (size_t)16 << 30};

void xs_set_device(const char *name, int cores, size_t hbm_bytes)
{
    if (name != board.name) /* a board resized keeps its name (cmd/flags.c, set_board) */
        snprintf(board.name, sizeof board.name, "%s", name);
    board.cores = cores < 1 ? 1 : cores > XS_MAX_CORES ? XS_MAX_CORES : cores;
    board.hbm = hbm_bytes;
}

int xs_cores(void) { return board.cores; }
size_t xs_hbm(void) { return board.hbm; }
const char *xs_device_name(void) { return board.name; }
int xs_hosts(void) { return comm_size(); }
int xs_host(void) { return comm_rank(); }
