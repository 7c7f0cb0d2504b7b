/*
 * lease/acquire.h — relay_acquire's lease (tools.md §3.4 steps 4-14).
 *
 * Writes, on the reserved guest: the identities (purpose, evidence_path,
 * guest_root, acquired_at_ms, deadline_ms, binding), the lease group
 * (lease, registry_row, phase, acquisition_in_flight, the capacity wait),
 * the renewal state it starts, last_error, and the console observation of a
 * vnc acquisition. A guest that got no lease is closed (not-acquired).
 */
#ifndef RELAY_LEASE_ACQUIRE_H
#define RELAY_LEASE_ACQUIRE_H

#include "session/manager_internal.h"

/* Leases the guest manager_reserve_guest() reserved. 0 with relay_acquire's
 * facts in o->facts (guest, task, image, purpose, vm, lease_id, network,
 * ttlHours, acquiredAt, deadline, expiresAt, waitedForCapacityMs,
 * guestRoot, workspace, declarations, fullWorkspace, console, evidencePath,
 * guestsHeld, maxGuests); else -1 with the failure in `o` (the tools.md
 * §3.4 codes: shutting-down, backend-unavailable, environment-mismatch,
 * image-unavailable, console-unavailable, path-refused, registry-conflict,
 * capacity-timeout, backend-refused, outcome-unknown). A guest refused
 * before its lease request is closed as not-acquired; one whose outcome is
 * unknown is kept in acquisition-uncertain. Call on the guest's queue,
 * without the lock. */
int lease_acquire(manager *m, guest *g, relay_call *call, relay_outcome *o);

#endif
