/* device/board.h: the simulated board: which TPU (device/board.c's table of
 * public figures), how many cores and how much HBM each, and the pod's
 * hosts. Below xla_sim.c and metrics.c; it calls only pod/comm.c. */
#ifndef DEVICE_BOARD_H
#define DEVICE_BOARD_H
#include <stddef.h>

/* ---- the simulated TPU ----
 * A board is a number of cores (devices xla:0..n-1) and the HBM of each.
 * Programs are checked against the HBM when they are compiled. */
#define XS_MAX_CORES 64
struct tpu_spec {
    const char *name;
    int cores;
    double hbm_gib;    /* per core (per device) */
    const char *about; /* where the figures come from */
};
/* The board named name, or NULL. */
const struct tpu_spec *xs_tpu(const char *name);
/* The names of the table, comma separated, for error messages. */
const char *xs_tpu_names(void);
void xs_set_device(const char *name, int cores, size_t hbm_bytes);
int xs_cores(void);
size_t xs_hbm(void);
const char *xs_device_name(void);
/* A pod: xs_hosts() processes (comm.h), each running a board of xs_cores()
 * cores; host h's core c is the pod's ordinal h * xs_cores() + c, and an
 * all-reduce spans every ordinal. */
int xs_hosts(void);
int xs_host(void);

#endif
