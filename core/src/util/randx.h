/*
 * util/randx.h — random identities from getrandom(2).
 */
#ifndef RELAY_UTIL_RANDX_H
#define RELAY_UTIL_RANDX_H

#include <stddef.h>

#include "relay/status.h"

/* Fills out with len random bytes (getrandom, retried on EINTR). */
relay_status random_fill(void *out, size_t len, relay_error *err);
/* Writes `digits` random lowercase hex digits plus NUL (out must hold digits+1). */
void random_hex(char *out, size_t digits);
/* Writes a lowercase version-4 UUID (36 characters plus NUL). */
void random_uuid(char out[37]);

#endif
