/*
 * relay_kit/random.h — random identifiers for plugins: lowercase hex and
 * short passwords, from the host's random source (relay_host.random_bytes),
 * or the kernel's (getrandom) when the host's fails.
 */
#ifndef RELAY_KIT_RANDOM_H
#define RELAY_KIT_RANDOM_H

#include <stddef.h>

#include "relay/host.h"

/* Writes `digits` lowercase hex digits and a NUL into out (digits + 1
 * bytes); at most 128 digits. host may be NULL (the kernel's source). */
void rk_random_hex(const relay_host *host, char *out, size_t digits);
/* Writes `len` characters of letters and digits without look-alikes (no
 * 0/O, 1/l/I) and a NUL into out (len + 1 bytes); at most 64 characters:
 * x11vnc's one-time passwords. */
void rk_random_password(const relay_host *host, char *out, size_t len);

#endif
