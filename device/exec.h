/* device/exec.h: dispatch (device/exec.c): one instruction, on the
 * calling thread, as the tensor.c call its op names. */
#ifndef DEVICE_EXEC_H
#define DEVICE_EXEC_H
#include "device/ops.h"

void xs_dispatch(const struct kinstr *k);

#endif
