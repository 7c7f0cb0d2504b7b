/*
 * session/guest.h — one guest of the session: its identities, phase, lease,
 * staging and recording facts, and its ownership record on disk
 * (spec/lifecycle.md §3, §7, §9).
 *
 * Locking: every field is read and written under the manager's lock
 * (manager_lock()/manager_unlock()), except `queue`, which has its own.
 * Long operations never hold the manager's lock: they copy what they need,
 * unlock, work, and lock again to publish results.
 *
 * Writers: each group below names the rooms that may write its fields
 * ("writes: ..."); every room may read them all. session/guest.c itself
 * loads and frees every field (records), and guest_set_last_error() /
 * guest_close() (session/) write last_error and closed for any room.
 */
#ifndef RELAY_SESSION_GUEST_H
#define RELAY_SESSION_GUEST_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "relay/transport.h"
#include "session/queue.h"

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

typedef enum renewal_state {
	RENEWAL_NONE = 0,
	RENEWAL_RENEWING,
	RENEWAL_FAILING,
	RENEWAL_STOPPED,
	RENEWAL_PAUSED,
} renewal_state;

struct loaded_plugin;
struct downloads_queue;
struct egress_proxy;

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
	 * lease/ (acquire.c: acquired_at_ms, deadline_ms) */
	int64_t acquired_at_ms;
	int64_t deadline_ms;
	double ttl_hours;
	char *network;  /* nat | internet | allow */
	char *env_pack; /* credential pack name, or "none" */
	bool vnc;
	json_object *extractions; /* [{name, path}] */
	bool full_workspace;

	/* lease. writes: lease/ (acquire, release, reconcile), runs/ and tools/
	 * (phase: staged and finishing) */
	json_object *lease;        /* the lease document (relay/machine.h), or NULL */
	json_object *registry_row; /* the six registry cells, or NULL */
	guest_phase phase;
	bool acquisition_in_flight;
	int64_t waited_for_capacity_ms;
	int64_t waiting_since_ms; /* 0 when not waiting */
	char *capacity_reason;

	/* renewal. writes: lease/ (renewal.c, acquire.c, reconcile.c);
	 * last_error: any room through guest_set_last_error() */
	renewal_state renewal;
	int64_t expires_at_ms; /* last confirmed expiry; 0 = unknown */
	int64_t last_renewed_at_ms;
	char *guest_state; /* pending | provisioning | running | releasing | unknown */
	char *last_error;

	/* staging and recording. writes: runs/ and tools/tool_stage.c */
	bool staged;
	char *platform; /* linux-x86_64 */
	char *node_path;
	char *cua_driver;
	int snapshots;             /* -1 unknown (before staging), 0 off, 1 on */
	json_object *capture_plan; /* the capture plugin's plan, or NULL */
	char *recording_session_id;
	int64_t run_seq;
	json_object *used_step_ids;     /* [stepId] */
	json_object *pending_reset;     /* {id, from, fromSession, to} or NULL */
	json_object *previous_evidence; /* [{path, sessionId, guestState}] */

	/* console. writes: console/, tools/tool_console_open.c (console_attempt),
	 * lease/acquire.c (the first observation) */
	json_object *console;             /* last console observation, or NULL */
	json_object *console_attempt;     /* {console_id, attempt_id, status} or NULL */
	json_object *console_attempt_ids; /* [attempt ids used] */

	/* outcomes. writes: delivery/ and tools/tool_finish.c (delivered),
	 * lease/ (released), session/ (closed, through guest_close) */
	bool delivered;
	bool released;
	json_object *closed; /* NULL, or {at, reason, evidencePath} */

	/* downloads (spec/evidence.md §5), reported by status. writes: delivery/ */
	json_object
	    *downloads; /* {queued, inFlight, downloaded, failed, cancelled, coalesced, paused, state} */

	/* restart (spec/lifecycle.md §8). writes: lease/ (reconcile.c) */
	guest_phase restored_phase;     /* the phase on disk while `phase` is PHASE_RECONCILING */
	renewal_state restored_renewal; /* the renewal state on disk while reconciling */
	bool record_readonly; /* never rewrite lease.json (unreadable, foreign or another owner's) */

	/* runtime only. writes: session/ (queue, transport_* in
	 * guest_transport(), acquisition_order), lease/ (beat_in_flight,
	 * lookup_queued, next_beat_ms; reconcile.c: acquisition_order;
	 * release.c: closes the transport), delivery/ (dl) */
	guest_queue queue;                      /* the guest's ordered operations */
	bool beat_in_flight;                    /* a renewal beat is running (one at a time) */
	bool lookup_queued;                     /* a lease lookup after a failed beat is queued */
	struct loaded_plugin *transport_plugin; /* chosen at first use */
	relay_transport_conn *transport_conn;   /* open connection, or NULL */
	bool transport_opening; /* a thread is in transport.open for this guest; others wait on m->changed */
	struct downloads_queue *dl;    /* background step downloads (downloads.h), or NULL */
	struct gio_resident *resident; /* the resident receiver's channel (guestio/resident.h), or NULL */
	uint64_t acquisition_order;    /* for status ordering */
	int64_t next_beat_ms;          /* relay time of the next renewal beat */
	struct guest *next;
	/* egress (docs/egress.md). writes: lease/ (egress.c: started after the
	 * lease, under `allow` or `internet`), session/ (guest_close stops it) */
	struct egress_proxy *egress;
} guest;

const char *guest_phase_name(guest_phase phase);
const char *renewal_state_name(renewal_state state);

/* Allocates a guest with empty facts and an initialised queue. */
guest *guest_new(void);
/* Frees the guest's facts and queue. What the rooms above keep for it (the
 * download queue `dl`) must be freed first (manager_hooks's
 * guest_release_rooms); a guest that never reached them has none. */
void guest_free(guest *g);

/* The ownership record (spec/lifecycle.md §9) as a new JSON object. */
json_object *guest_record_json(const guest *g);
/* Loads a record written by guest_record_json (schemaVersion 1) into a new
 * guest; NULL with a reason when the record is unreadable or of another
 * format. */
guest *guest_from_record(const json_object *record, char *errbuf, size_t errlen);
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
