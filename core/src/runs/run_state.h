/*
 * runs/run_state.h — the runs room's slice of a guest (session/guest.h,
 * guest_slice_ops): what staging learnt of the guest (platform, node, the
 * cua driver, snapshots, the capture plan) and the runs of the current
 * recording (their count, the step ids used, a pending recording reset).
 * The session holds the pointer (guest->run) and never looks inside.
 *
 * Locking: the fields are read and written under the slice's own lock
 * (head, session/slice.h; a leaf: after the session's lock where a reader
 * needs the guest's fields too, and released before the record is saved).
 * Only runs/ writes them; tools/ asks run_reset_pending().
 */
#ifndef RELAY_RUNS_RUN_STATE_H
#define RELAY_RUNS_RUN_STATE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "session/manager_internal.h"
#include "session/slice.h"

typedef struct run_state {
	slice_head head; /* the slice's lock */

	/* staging (stage*.c) */
	char *platform; /* linux-x86_64 */
	char *node_path;
	char *cua_driver;
	int snapshots;             /* -1 unknown (before staging), 0 off, 1 on */
	json_object *capture_plan; /* the capture plugin's plan, or NULL */

	/* the runs of the current recording (run_*.c, recording_reset.c) */
	int64_t run_seq;
	json_object *used_step_ids; /* [stepId] */
	json_object *pending_reset; /* {id, from, fromSession, to} or NULL */
} run_state;

/* The slice operations the session calls (tools/dispatch.c puts them in
 * the relay's guest_rooms). */
extern const guest_slice_ops run_slice_ops;

/* Whether a recording reset is pending (relay_stage, relay_script). Takes
 * the slice's lock (callers may hold the session's). */
bool run_reset_pending(const guest *g);

#endif
