/*
 * util/process.h — running a program to completion with captured output,
 * a timeout that kills its whole process group, and cancellation. Backs
 * relay_host.process_run (relay/host.h documents the contract).
 */
#ifndef RELAY_UTIL_PROCESS_H
#define RELAY_UTIL_PROCESS_H

#include "relay/host.h"

/* Polled about every 100 ms while the program runs; returning non-zero
 * kills the group and makes process_run return RELAY_E_CANCELLED. */
typedef int (*process_cancel_fn)(const void *ctx);

relay_status process_run(const relay_process_request *req, process_cancel_fn cancelled,
                         const void *cancel_ctx, unsigned flags, relay_process_result *res, relay_error *err);

/* Frees the buffers of a result filled by process_run (not the struct). */
void process_result_release(relay_process_result *res);

/* Polls kill(-pgid, 0) every 20 ms for up to wait_ms; true when the group
 * is gone (ESRCH). */
int process_group_gone(pid_t pgid, int wait_ms);

#endif
