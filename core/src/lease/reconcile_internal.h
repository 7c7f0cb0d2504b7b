/*
 * lease/reconcile_internal.h — what reconcile.c and reconcile_legacy.c
 * share.
 */
#ifndef RELAY_LEASE_RECONCILE_INTERNAL_H
#define RELAY_LEASE_RECONCILE_INTERNAL_H

#include <stdbool.h>

#include "lease/lease_state.h"
#include "session/manager_internal.h"

/* The largest ownership record read back. */
#define RECONCILE_RECORD_MAX_BYTES (16u << 20)

/* A guest (or task) name as relay_acquire makes them: [a-z0-9][a-z0-9-]*,
 * at most 48 bytes. */
bool lease_reconcile_valid_guest_name(const char *name);

/* Keeps a restored name's number from ever being handed out again. Under
 * lock. Returns true when the counter moved. */
bool lease_reconcile_counter_past(session_manager *m, const char *task, const char *name);

#endif
