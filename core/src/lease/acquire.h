/*
 * lease/acquire.h — relay_acquire's lease (spec/tools.md §3.4 steps 4-14).
 *
 * Writes, on the reserved guest: the identities (purpose, evidence_path,
 * guest_root, acquired_at_ms, binding), the lease document and phase, and
 * in the lease slice (lease_state.h) deadline_ms, registry_row,
 * acquisition_in_flight, the capacity wait and the renewal state it
 * starts; last_error, and through lease_acquire_console the console observation
 * of a vnc acquisition. A guest that got no lease is closed (not-acquired).
 */
#ifndef RELAY_LEASE_ACQUIRE_H
#define RELAY_LEASE_ACQUIRE_H

#include "session/manager_internal.h"

/* What relay_acquire needs of the console room (console/console_report.h;
 * lease/ and console/ are peers, so the handler passes them). */
typedef struct lease_acquire_console {
	/* Whether relay_acquire asked for a console (its `vnc`, fixed when the
	 * guest was reserved: read without the lock). */
	bool (*vnc_wanted)(const guest *g);
	/* Step 6, with vnc: 0 when the console backend of `image`'s OS is
	 * available; -1 with the refusal's code and message. */
	int (*vnc_check)(session_manager *m, const char *image, relay_call *call, const char **code_out,
	                 char *msg, size_t len);
	/* Step 14: stores the relay's observation of the lease's console
	 * report as the guest's (the console room's slice). Under the lock. */
	void (*store_observation)(guest *g, const json_object *report);
	/* The guest's console observation (a new reference), or NULL. Under
	 * the lock. */
	json_object *(*observation_of)(const guest *g);
} lease_acquire_console;

/* Leases the guest session_reserve_guest() reserved. 0 with relay_acquire's
 * facts in o->facts (guest, task, image, purpose, vm, lease_id, network,
 * ttlHours, acquiredAt, deadline, expiresAt, waitedForCapacityMs,
 * guestRoot, workspace, declarations, fullWorkspace, console, evidencePath,
 * guestsHeld, maxGuests); else -1 with the failure in `o` (the spec/tools.md
 * §3.4 codes: shutting-down, backend-unavailable, environment-mismatch,
 * image-unavailable, console-unavailable, path-refused, registry-conflict,
 * capacity-timeout, backend-refused, outcome-unknown). A guest refused
 * before its lease request is closed as not-acquired; one whose outcome is
 * unknown is kept in acquisition-uncertain. Call on the guest's queue,
 * without the lock. */
int lease_acquire(session_manager *m, guest *g, relay_call *call, const lease_acquire_console *console,
                  relay_outcome *o);

#endif
