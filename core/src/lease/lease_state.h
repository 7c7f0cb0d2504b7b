/*
 * lease/lease_state.h — the lease room's slice of a guest (session/guest.h,
 * guest_slice_ops): the acquisition in flight, waiting for capacity, the
 * guest's registry row, renewal and its beats, and what a restart found on
 * disk. The session holds the pointer (guest->lease) and never looks inside.
 *
 * Locking (session/guest.h): the slice has its own lock (head,
 * session/slice.h), but its facts change together with the guest's phase
 * and lease document, so lease/ reads and writes them under the session's
 * lock. A fact read under the slice's lock alone is written with both held
 * (the session's first): the guest's state, through lease_set_guest_state()
 * and read by lease_guest_state_copy(). The session's slice operations run
 * with both held. The rooms above read the slice through the accessors
 * below, which take the lock they need: lease_is_live() the session's (it
 * reads the phase), lease_guest_state_copy() the slice's.
 */
#ifndef RELAY_LEASE_LEASE_STATE_H
#define RELAY_LEASE_LEASE_STATE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "session/manager_internal.h"
#include "session/slice.h"

typedef enum lease_renewal_state {
	RENEWAL_NONE = 0,
	RENEWAL_RENEWING,
	RENEWAL_FAILING,
	RENEWAL_STOPPED,
	RENEWAL_PAUSED,
} lease_renewal_state;

typedef struct lease_state {
	slice_head head; /* the slice's lock (session/slice.h) */

	/* acquisition (acquire.c, from relay_acquire's arguments at reserve) */
	int64_t deadline_ms; /* the lease's end: acquired_at + ttl */
	double ttl_hours;
	char *env_pack; /* credential pack name, or "none" */
	bool acquisition_in_flight;
	json_object *registry_row; /* the six registry cells, or NULL */

	/* waiting for capacity (acquire.c) */
	int64_t waited_for_capacity_ms;
	int64_t waiting_since_ms; /* 0 when not waiting */
	char *capacity_reason;

	/* renewal (renewal.c, acquire.c, reconcile.c) */
	lease_renewal_state renewal;
	int64_t expires_at_ms; /* last confirmed expiry; 0 = unknown */
	int64_t last_renewed_at_ms;
	char *guest_state; /* pending | provisioning | running | releasing | unknown */

	/* restart (spec/lifecycle.md §8, reconcile.c) */
	guest_phase restored_phase;           /* the phase on disk while the guest's is PHASE_RECONCILING */
	lease_renewal_state restored_renewal; /* the renewal state on disk while reconciling */

	/* runtime only (renewal.c): not in the record */
	bool beat_in_flight;  /* a renewal beat is running (one at a time) */
	bool lookup_queued;   /* a lease lookup after a failed beat is queued */
	int64_t next_beat_ms; /* relay time of the next renewal beat */
} lease_state;

/* The slice operations the session calls (tools/dispatch.c puts them in
 * the relay's guest_rooms). */
extern const guest_slice_ops lease_slice_ops;

const char *lease_renewal_state_name(lease_renewal_state state);

/* Whether the lease of `g` is running and unexpired, and the guest neither
 * releasing nor finishing (console_open step 4). Takes the manager's lock. */
bool lease_is_live(session_manager *m, guest *g);
/* The guest's state as the backend last reported it ("unknown" when none),
 * copied under the slice's lock (malloc'd; NULL when out of memory). */
char *lease_guest_state_copy(session_manager *m, guest *g);
/* Records the guest's state as the backend reported it (NULL: "unknown").
 * lease/ only, under the session's lock; takes the slice's. */
void lease_set_guest_state(guest *g, const char *state);

#endif
