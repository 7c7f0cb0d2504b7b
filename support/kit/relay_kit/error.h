/*
 * relay_kit/error.h — a plugin's error, worded once and handed to the
 * host (host->error_set), so every refusal of a plugin reads alike.
 */
#ifndef RELAY_KIT_ERROR_H
#define RELAY_KIT_ERROR_H

#include "relay/host.h"

/* rk_err flag: a sys_errno > 0 is named after the message, " (<strerror>)",
 * unless the message names it already. */
#define RK_ERR_NAME_ERRNO 0x1u

/* Fills err (may be NULL) with code, sys_errno and the message fmt words
 * (cut to RELAY_ERROR_MESSAGE_BYTES); returns code. */
relay_status rk_err(const relay_host *host, relay_error *err, relay_status code, int sys_errno,
                    unsigned flags, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
