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

#endif
