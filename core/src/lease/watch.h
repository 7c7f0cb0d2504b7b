/*
 * lease/watch.h — the backend's word that a lease changed between the
 * core's requests (relay/host.h lease_changed, ABI 1.5), and the "lost"
 * state (relay/machine.h): a guest gone with its node, which the backend
 * never re-creates.
 *
 * While renewal runs, host->lease_changed(vm) queues one lease lookup
 * (inspect) in that guest's queue (lease/renewal.c). What any lookup
 * confirms is stored here; a document that says "lost" makes the guest's
 * guestState "lost", its lastError say why and what to do, writes one
 * `guest-lost` event into its evidence and stops its renewal (there is
 * nothing left to keep alive; release still removes what is left).
 */
#ifndef RELAY_LEASE_WATCH_H
#define RELAY_LEASE_WATCH_H

#include <json-c/json.h>

#include "session/manager_internal.h"

/* Routes host->lease_changed to this manager's guests (idempotent). Call
 * without the manager's lock. */
void lease_watch_start(session_manager *m);
/* No call reaches the manager after it returns. Call without the lock. */
void lease_watch_stop(void);

/* Stores a lease document an inspect confirmed (takes `doc`, may be NULL;
 * nothing for a closed guest) and records the guest lost when the document
 * says so for the first time. Call without the lock. */
void lease_watch_store_observed(session_manager *m, guest *g, json_object *doc);

#endif
