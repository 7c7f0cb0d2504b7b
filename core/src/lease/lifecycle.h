/*
 * lease/lifecycle.h — the lease room: leases over time (spec/lifecycle.md
 * §5-§11), as the tools use them: the binding a lease is recorded with, the
 * guest's registry row, renewal, waiting in relay time, the release path and
 * the end of the session.
 *
 * The work itself lives in:
 *   acquire.c       relay_acquire's lease (acquire.h)
 *   probe.c         relay_probe of the host: what an acquisition would meet
 *                   (probe.h), kept as the probe records copied below
 *   renewal.c       the renewal scheduler and beats, the final renewal (pause)
 *   release.c       the release path shared by relay_release, relay_finish's
 *                   destruction step and the end of the session
 *   reconcile.c     taking back an earlier process's guests (reconcile.h)
 *   session_end.c   the end of the session (lease_end_guests)
 *   lifecycle.c     binding, registry glue, probes, waiting, records
 * The task registry file itself is registry/ (below the profile).
 *
 * What this room writes: its slice of the guest (guest->lease,
 * lease_state.h: acquisition, capacity waiting, registry row, renewal and
 * beats, the restart facts), and of struct guest (session/guest.h) the
 * acquisition facts, the lease document, phase, released and closed
 * (through guest_close); it closes the transport at release
 * (gio_link_close).
 * Failures are relay_outcome (util/outcome.h); nothing here builds an MCP
 * result.
 *
 * Every function here is called without the manager's lock unless it says
 * otherwise.
 */
#ifndef RELAY_LEASE_LIFECYCLE_H
#define RELAY_LEASE_LIFECYCLE_H

#include "lease/lease_state.h"
#include "session/manager_internal.h"

/* Constants of spec/lifecycle.md §6. */
#define LIFECYCLE_RENEWAL_WINDOW_MS      (15 * 60 * 1000) /* W */
#define LIFECYCLE_BEAT_INTERVAL_MS       (60 * 1000)      /* min(60 s, W/3) */
#define LIFECYCLE_BACKEND_MIN_RENEWAL_MS (6 * 60 * 1000)  /* m: the service refuses below 0.1 h */
#define LIFECYCLE_CAPACITY_RETRY_MS      15000
#define LIFECYCLE_LOOKUP_TIMEOUT_MS      10000 /* lease lookups, find-by-purpose, beats */

/* The JSON of a plugin's answer, which it takes and frees (may be NULL):
 * a new reference, or NULL when absent or not JSON. */
json_object *lease_parse_taken(char *text);

/* {machine, endpoint, store, environmentFingerprint} for new leases: the
 * machine plugin's binding() when it has one. A new reference. */
json_object *lease_binding_json(session_manager *m);
/* True when two bindings name the same machine plugin, endpoint, store and
 * environment fingerprint. */
bool lease_binding_equal(const json_object *a, const json_object *b);

/* Builds the guest's six registry cells (spec/lifecycle.md §10) into
 * g->lease->registry_row, saves the record, then adds the row. 0, or -1 with the
 * failure in `o` (registry-conflict for a conflicting row or a lock
 * timeout, else internal); then no row of ours is in the file. */
int lease_registry_add(session_manager *m, guest *g, relay_outcome *o);
/* Removes the guest's row if it wrote one. 0, or -1 (logged) when the row
 * could not be removed (it then stays, naming this session). */
int lease_registry_remove(session_manager *m, guest *g);

/* Copies the JSON records of <session>/probes/ into <evidence>/host/probes/. */
void lease_copy_probes(session_manager *m, guest *g);

/* Starts renewal of a freshly leased guest: state renewing, first beat one
 * interval from now. */
void lease_renewal_begin(session_manager *m, guest *g);
/* Stops renewal of the guest's lease for good (a release or the
 * destruction step of a finish begins): state stopped. */
void lease_renewal_end(session_manager *m, guest *g);

/* Waits until relay time reaches deadline_ms. Returns 0 when reached, -1
 * when the call was cancelled or the session began to end. */
int lease_wait_until(session_manager *m, relay_call *call, int64_t deadline_ms);

/* Writes <evidence>.lifecycle.json: {purpose, vm, released, reason, failed,
 * delivered, finishedAt}. */
void lease_write_record(session_manager *m, guest *g, const char *reason, bool failed);

/* Closes a guest whose lease the backend no longer knows and whose
 * destruction was verified: registry row removed, lifecycle record with
 * `why`, closed as `absent`. */
void lease_close_absent(session_manager *m, guest *g, const char *why);

/* The release path (spec/tools.md §3.10 steps 2-7). Regular: packaging through
 * release_package() (delivery/packaging.h) when staged and not delivered,
 * up to 3 destroy attempts of 120 s with a lookup after each failure,
 * verification (15 s). Direct (the end of the session after the grace
 * period): no packaging, one destroy request (30 s) and one check (15 s).
 * `call` may be NULL. Returns 0 with relay_release's facts in o->facts
 * (guest, released, reason, delivered, deliveryVerified, manifestPath,
 * deliveryError, incompleteExtractions, evidencePath, destructionVerified,
 * guestsHeld) and its headline in o->message; or -1 with the failure in `o`
 * (backend-unavailable, outcome-unknown, shutting-down,
 * destruction-unverified). Call from the guest's queue or the end of the
 * session. */
int lease_release_guest(session_manager *m, guest *g, relay_call *call, bool direct, relay_outcome *o);

/* relay_finish step 8 (spec/tools.md §3.9): the same destruction and
 * verification as lease_release_guest (steps 2 and 4-7, no packaging: the
 * guest is delivered), recorded and closed with reason "finished". The
 * same answers as lease_release_guest. */
int lease_release_finished(session_manager *m, guest *g, relay_call *call, relay_outcome *o);

/* The end of the session for every guest (spec/lifecycle.md §11.2 steps 1-5;
 * session_end.c), the session's end_guests hook: lets running work finish
 * within the grace period, then pauses or releases each guest. Returns 0,
 * or 1 when a guest's final renewal or release failed. */
int lease_end_guests(session_manager *m, const char *reason);

#endif
