/*
 * session/guest.h — one guest of the session: its identities, folders,
 * phase and outcomes, its queue, one opaque slice per room above the
 * session (guest_slice_ops: lease/, runs/, console/, delivery/, guestio/),
 * and its ownership record on disk (spec/lifecycle.md §3, §7, §9).
 *
 * Locking (after libvirt's per-object lock): the guest's own fields and
 * the session's list are guarded by the session's lock (session_lock());
 * each room's slice by its own (session/slice.h), which that room's
 * accessors take; `queue` has its own. The order, to stay deadlock-free:
 *
 *   a download queue's lock (delivery/downloads.c)
 *     before the session's lock (session_lock)
 *       before one slice's lock (slice_lock; a leaf)
 *
 * A slice's lock is a leaf: holding it, code takes no other lock (not the
 * session's, not another slice's, not a queue's) and does no I/O, so a
 * reader that needs a guest's fields and a slice's takes the session's
 * lock first. The session calls the slice operations below with both held
 * (or on a guest no other thread sees yet). The lease slice's fields change
 * with the guest's phase and lease document, so lease/ writes them with
 * both locks held and reads them under either (lease_state.h). Long
 * operations hold no lock: they copy what they need, unlock, work, and lock
 * again to publish results.
 *
 * Writers: each group below names the rooms that may write its fields
 * ("writes: ..."); every room may read them all. A slice's fields are its
 * room's: its header says who else reads them. session/guest.c itself
 * loads and frees every field (records) and calls the slices' operations,
 * and guest_set_last_error() / guest_close() (session/) write last_error
 * and closed for any room.
 */
#ifndef RELAY_SESSION_GUEST_H
#define RELAY_SESSION_GUEST_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "relay/transport.h"
#include "session/queue.h"
#include "util/record.h"

typedef enum guest_phase {
	PHASE_ACQUIRING = 0,
	PHASE_WAITING_FOR_CAPACITY,
	PHASE_ACQUISITION_UNCERTAIN,
	PHASE_READY,
	PHASE_STAGED,
	PHASE_FINISHING,
	PHASE_RELEASING,
	PHASE_RECONCILING,
	PHASE_UNAVAILABLE,
	PHASE_CLOSED,
} guest_phase;

struct loaded_plugin;
struct delivery_state;
struct egress_proxy;
struct lease_state;
struct run_state;
struct console_state;
struct gio_link;
struct guest;

/* One room's slice of a guest, after libvirt's per-object private data: the
 * room above the session defines the slice's type and describes it here,
 * the guest holds the pointer, and the session makes, records, reads back,
 * reports and frees it without looking inside (session/guest.c does it
 * once for every slice). The callbacks may be NULL (nothing to do); they
 * run under the session's lock and the slice's own, or on a guest no other
 * thread sees yet. */
typedef struct guest_slice_ops {
	/* sizeof the room's struct, which starts with a slice_head
	 * (session/slice.h). */
	size_t size;
	/* The slice's facts in the ownership record (spec/lifecycle.md §9),
	 * written and read back in this order and freed with the slice; and
	 * those in the status entry (spec/lifecycle.md §7). */
	const record_field *record;
	size_t record_count;
	const record_field *status;
	size_t status_count;
	/* Sets the empty values that are not zero (-1, [], a default): on a new
	 * slice, and before a record is read into it. */
	void (*reset)(void *slice);
	/* Frees what the slice owns outside its record table. */
	void (*release)(void *slice);
	/* relay_acquire's validated arguments, when the session reserves the guest. */
	void (*reserve)(struct guest *g, const json_object *args);
	/* What the tables cannot say, after them: the slice's record facts,
	 * read back facts (runtime facts, not in the record, are kept), status. */
	void (*to_record)(const struct guest *g, json_object *record);
	void (*from_record)(struct guest *g, const json_object *record);
	void (*to_status)(const struct guest *g, json_object *status);
	/* The guest is being closed (phase closed is set). */
	void (*close)(struct guest *g);
} guest_slice_ops;

/* A slice's record and status tables in its guest_slice_ops initialiser. */
#define GUEST_SLICE_RECORD(table) .record = (table), .record_count = sizeof(table) / sizeof((table)[0])
#define GUEST_SLICE_STATUS(table) .status = (table), .status_count = sizeof(table) / sizeof((table)[0])

/* The slices of the rooms above the session, in the order the session calls
 * them (tools/dispatch.c fills the table the relay uses; static storage).
 * `size` is sizeof(guest_rooms). */
typedef struct guest_rooms {
	size_t size;
	const guest_slice_ops *lease;    /* lease/lease_state.h */
	const guest_slice_ops *run;      /* runs/run_state.h */
	const guest_slice_ops *console;  /* console/console_state.h */
	const guest_slice_ops *delivery; /* delivery/delivery_state.h */
	const guest_slice_ops *link;     /* guestio/link.h */
} guest_rooms;

typedef struct guest {
	/* identities. writes: session/ (reserve.c: name, task, image),
	 * lease/ (acquire.c: purpose, binding; reconcile.c: binding) */
	char *name;           /* login-test-1 */
	char *task;           /* login-test */
	char *image;          /* ubuntu2404 */
	char *purpose;        /* relay-login-test-3f9a1c2e */
	json_object *binding; /* {machine, endpoint, store, environmentFingerprint} */

	/* folders. writes: session/ (reserve.c: dir, owner_lock_fd; guest_close),
	 * lease/ (acquire.c: evidence_path, guest_root; reconcile.c:
	 * owner_lock_fd), runs/ (recording_reset.c: evidence_path) */
	char *dir;           /* <session dir>/guests/<name> */
	char *evidence_path; /* <project>/relay-evidence/<purpose> (current recording) */
	char *guest_root;    /* /var/tmp/<stamp>-mcp-relay-<purpose> */
	int owner_lock_fd;   /* flock on <dir>/owner.lock, held while owned; -1 when not */

	/* acquisition facts. writes: session/ (reserve.c, from the arguments),
	 * lease/ (acquire.c: acquired_at_ms) */
	int64_t acquired_at_ms;
	char *network; /* nat | internet | allow */

	/* the lease as the backend answered it and the phase. writes: lease/
	 * (acquire, release, reconcile), runs/ and tools/ (phase: staged and
	 * finishing); last_error: any room through guest_set_last_error() */
	json_object *lease_document; /* the lease document (relay/machine.h), or NULL */
	guest_phase phase;
	char *last_error;

	/* staging and recording, read by delivery/ and lease/. writes: runs/
	 * and tools/tool_stage.c */
	bool staged;
	char *recording_session_id;
	json_object *previous_evidence; /* [{path, sessionId, guestState}] */

	/* outcomes. writes: delivery/ and tools/tool_finish.c (delivered),
	 * lease/ (released), session/ (closed, through guest_close) */
	bool delivered;
	bool released;
	json_object *closed; /* NULL, or {at, reason, evidencePath} */

	/* restart (spec/lifecycle.md §8). writes: lease/ (reconcile.c) */
	bool record_readonly; /* never rewrite lease.json (unreadable, foreign or another owner's) */

	/* runtime only. writes: session/ */
	guest_queue queue; /* the guest's ordered operations */
	struct guest *next;
	/* egress (docs/egress.md). writes: lease/ (egress.c: started after the
	 * lease, under `allow` or `internet`), session/ (guest_close stops it) */
	struct egress_proxy *egress;

	/* the rooms' slices (guest_slice_ops): the session holds them and never
	 * looks inside; each room's header says who may touch its fields. */
	const guest_rooms *rooms;        /* borrowed: static storage */
	struct lease_state *lease;       /* lease/lease_state.h: acquisition, renewal, restart */
	struct run_state *run;           /* runs/run_state.h: staging facts, the recording's runs */
	struct console_state *console;   /* console/console_state.h: observation, attempts */
	struct delivery_state *delivery; /* delivery/delivery_state.h: declarations, step downloads */
	struct gio_link *link;           /* guestio/link.h: the transport connection, the resident channel */
} guest;

const char *guest_phase_name(guest_phase phase);
/* The phase of that name, or -1. */
int guest_phase_from_name(const char *name);

/* Allocates a guest with empty facts, the rooms' empty slices and an
 * initialised queue; NULL when out of memory. */
guest *guest_new(const guest_rooms *rooms);
/* Frees the guest's facts, slices and queue. The download queue's worker
 * must be stopped first (session_hooks's guest_release_rooms); a guest that
 * never queued a download has none. */
void guest_free(guest *g);

/* A slice of that type with empty facts and its lock made, or NULL when
 * out of memory; and freeing one (NULL: nothing). The session makes and
 * frees the guest's; a room's unit test may make one without a session. */
void *guest_slice_new(const guest_slice_ops *ops);
void guest_slice_free(const guest_slice_ops *ops, void *slice);

/* Hands relay_acquire's validated arguments to the rooms' slices (reserve). */
void guest_slices_reserve(guest *g, const json_object *args);
/* Tells the rooms' slices the guest is being closed (close). */
void guest_slices_close(guest *g);

/* The ownership record (spec/lifecycle.md §9) as a new JSON object. */
json_object *guest_record_json(const guest *g);
/* Loads a record written by guest_record_json (schemaVersion 1) into a new
 * guest; NULL with a reason when the record is unreadable or of another
 * format. */
guest *guest_from_record(const guest_rooms *rooms, const json_object *record, char *errbuf, size_t errlen);
/* Replaces the facts of `g` (identities, lease, staging, outcomes; not the
 * queue or other runtime fields) with those of a record. 0, or -1 with a
 * reason (then `g` is unchanged). */
int guest_reload(guest *g, const json_object *record, char *errbuf, size_t errlen);
/* Writes <dir>/lease.json durably. Only a guest whose owner lock is held
 * and whose record is not read-only is written; otherwise nothing happens
 * and -1 is returned. 0, or -1 (a write failure is logged). */
int guest_save(const guest *g);

/* The status entry of spec/lifecycle.md §7 as a new JSON object. */
json_object *guest_status_json(const guest *g);

#endif
