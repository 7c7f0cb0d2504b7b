/*
 * console/console_state.h — the console room's slice of a guest
 * (session/guest.h, guest_slice_ops): the relay's last observation of the
 * guest's console and the open attempts (one current attempt,
 * every attempt id used once). The session holds the pointer
 * (guest->console) and never looks inside.
 *
 * Locking: the fields are read and written under the slice's own lock
 * (head, session/slice.h; a leaf: taken after the session's lock when both
 * are needed, and nothing is saved while holding it). console/ and the
 * console tools write them; lease/ (a peer) stores the first observation
 * through the lease_acquire_console hooks the relay_acquire handler passes
 * (lease/acquire.h), console_store_acquired().
 */
#ifndef RELAY_CONSOLE_CONSOLE_STATE_H
#define RELAY_CONSOLE_CONSOLE_STATE_H

#include <json-c/json.h>

#include "session/manager_internal.h"
#include "session/slice.h"

typedef struct console_state {
	slice_head head;          /* the slice's lock */
	json_object *observation; /* the last console observation, or NULL */
	json_object *attempt;     /* {console_id, attempt_id, status} or NULL */
	json_object *attempt_ids; /* [attempt ids used] */
	bool vnc; /* relay_acquire asked for a console; fixed at reserve (read without the lock) */
} console_state;

/* The slice operations the session calls (tools/dispatch.c puts them in
 * the relay's guest_rooms). */
extern const guest_slice_ops console_slice_ops;

/* Whether relay_acquire asked for a console (lease_acquire_console.vnc_wanted). */
bool console_vnc_wanted(const guest *g);
/* relay_acquire step 14: stores the relay's observation of the lease's
 * console report (console_observation(), or a copy of the report when its
 * schema is not known) as the guest's. Takes the slice's lock. */
void console_store_acquired(guest *g, const json_object *report);
/* The guest's console observation (a new reference), or NULL. Takes the
 * slice's lock. */
json_object *console_observation_of(const guest *g);

#endif
