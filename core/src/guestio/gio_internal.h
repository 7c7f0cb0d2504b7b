/*
 * guestio/gio_internal.h — what the files of guestio/ share and nobody
 * else calls.
 */
#ifndef RELAY_GUESTIO_GIO_INTERNAL_H
#define RELAY_GUESTIO_GIO_INTERNAL_H

#include <stdint.h>

#include "guestio/guest_io.h"

/* Sleeps `ms` milliseconds, waking early when `call` is cancelled. */
void gio_sleep_ms_checked(relay_call *call, int64_t ms);

/* Runs `R/receiver <args...>` (args NULL-terminated, without the program)
 * and returns its frame in *frame_out (new reference, may be NULL on
 * failure). A transient transport failure before the command started is
 * retried (receiver commands other than run are idempotent). Exit 0 with a
 * frame is RELAY_OK; exit 2 is RELAY_E_INVALID_ARGUMENT, exit 3
 * RELAY_E_REFUSED, another exit RELAY_E_PROTOCOL, each with "receiver <cmd>
 * failed (exit N): <frame error or stderr tail>"; a timeout RELAY_E_TIMEOUT. */
relay_status gio_receiver(guest_io *io, const char *const *args, uint64_t timeout_ms, json_object **frame_out,
                          relay_error *err);

#endif
