/*
 * delivery/delivery_state.h — the delivery room's slice of a guest
 * (session/guest.h, guest_slice_ops): what relay_acquire declared for
 * extraction (spec/evidence.md §4), and the step downloads' counters (status,
 * lease.json) and queue (downloads.h). The session holds the pointer
 * (guest->delivery) and never looks inside.
 *
 * Locking (session/guest.h): the slice has its own lock (head,
 * session/slice.h; a leaf, after the session's lock). The declarations are
 * written only by the slice operations, which run with both locks held, so
 * they are read under either: lease/ and runs/ read them for their results
 * under the session's, extraction_declarations() under the slice's. The
 * counters and the queue pointer are the slice's alone: the download queue
 * publishes its counters under it from inside its own lock, and downloads.c
 * creates the queue under the session's lock (it reads the phase) and the
 * slice's.
 */
#ifndef RELAY_DELIVERY_DELIVERY_STATE_H
#define RELAY_DELIVERY_DELIVERY_STATE_H

#include <json-c/json.h>
#include <stdbool.h>

#include "session/manager_internal.h"
#include "session/slice.h"

struct downloads_queue;

typedef struct delivery_state {
	slice_head head;          /* the slice's lock */
	json_object *extractions; /* [{name, path}], from relay_acquire */
	bool full_workspace;      /* relay_acquire's fullWorkspace */
	json_object
	    *counters; /* {queued, inFlight, downloaded, failed, cancelled, coalesced, paused, state} */
	struct downloads_queue *queue; /* created with the first job, or NULL */
} delivery_state;

/* The slice operations the session calls (tools/dispatch.c puts them in
 * the relay's guest_rooms). The queue is freed by downloads_free() first. */
extern const guest_slice_ops delivery_slice_ops;

#endif
