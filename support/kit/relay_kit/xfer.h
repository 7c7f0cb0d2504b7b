/*
 * relay_kit/xfer.h — what every transport's push and pull (relay/transport.h)
 * check first and say, in one wording, and the facts they answer: the JSON
 * array of {"path", "bytes", "sha256"} objects.
 */
#ifndef RELAY_KIT_XFER_H
#define RELAY_KIT_XFER_H

#include <stdint.h>

#include <json-c/json.h>

#include "relay/host.h"

/* A push's or pull's first checks: *facts_out (facts_out may be NULL)
 * cleared, then flags outside `accepted` refused (RELAY_E_UNSUPPORTED_FLAGS
 * "unknown <op> flags 0x<flags>"), then a host or guest path that is NULL
 * or empty (RELAY_E_INVALID_ARGUMENT "<op> needs a host path and a guest
 * path"). RELAY_OK otherwise; what a path must be beyond that is the
 * backend's to check. */
relay_status rk_xfer_begin(const relay_host *host, const char *op, unsigned flags, unsigned accepted,
                           const char *host_path, const char *guest_path, char **facts_out, relay_error *err);

/* Appends one fact, {"path": path, "bytes": bytes, "sha256": sha256}, to
 * the facts array. 0, or -1 when out of memory (the array is unchanged). */
int rk_xfer_fact_add(json_object *facts, const char *path, uint64_t bytes, const char *sha256);

#endif
