/*
 * util/error.h — filling a relay_error (relay/status.h).
 */
#ifndef RELAY_UTIL_ERROR_H
#define RELAY_UTIL_ERROR_H

#include <stdarg.h>

#include "relay/status.h"

/* Fills `err` (may be NULL) with code, errno and a formatted message
 * (truncated to fit); returns `code`. */
relay_status relay_error_set(relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
relay_status relay_error_setv(relay_error *err, relay_status code, int sys_errno, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Resets `err` to RELAY_OK with an empty message. */
void relay_error_clear(relay_error *err);

#endif
