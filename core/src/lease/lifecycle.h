/*
 * lease/lifecycle.h — leases over time (lifecycle.md §5-§11), as the tools
 * use them: the binding a lease is recorded with, the guest's registry row,
 * renewal, waiting in relay time, the release path, events about
 * cancellation, and the hooks other modules provide.
 *
 * The work itself lives in:
 *   renewal.c    the renewal scheduler and beats, the final renewal (pause)
 *   registry.c   the task registry file (registry.h)
 *   release.c    the release path shared by relay_release, relay_finish's
 *                destruction step and the end of the session
 *   reconcile.c  taking back an earlier process's guests (reconcile.h)
 *   shutdown.c   the end of the session (manager_end_guests)
 *   lifecycle.c  binding, registry glue, probes, waiting, records
 *
 * Every function here is called without the manager's lock unless it says
 * otherwise.
 */
#ifndef RELAY_LEASE_LIFECYCLE_H
#define RELAY_LEASE_LIFECYCLE_H

#include "session/manager_internal.h"

/* Constants of lifecycle.md §6. */
#define LIFECYCLE_RENEWAL_WINDOW_MS      (15 * 60 * 1000) /* W */
#define LIFECYCLE_BEAT_INTERVAL_MS       (60 * 1000)      /* min(60 s, W/3) */
#define LIFECYCLE_BACKEND_MIN_RENEWAL_MS (6 * 60 * 1000)  /* m: the service refuses below 0.1 h */
#define LIFECYCLE_CAPACITY_RETRY_MS      15000
#define LIFECYCLE_LOOKUP_TIMEOUT_MS      10000 /* lease lookups, find-by-purpose, beats */

/* {machine, endpoint, store, environmentFingerprint} for new leases: the
 * machine plugin's binding() when it has one. A new reference. */
json_object *lifecycle_binding_json(manager *m);
/* True when two bindings name the same machine plugin, endpoint, store and
 * environment fingerprint. */
bool lifecycle_binding_equal(const json_object *a, const json_object *b);

/* Builds the guest's six registry cells (lifecycle.md §10) into
 * g->registry_row, saves the record, then adds the row. NULL on success, or
 * the error result (registry-conflict for a conflicting row or a lock
 * timeout). */
tool_result *lifecycle_registry_add(manager *m, guest *g);
/* Removes the guest's row if it wrote one. 0, or -1 (logged) when the row
 * could not be removed (it then stays, naming this session). */
int lifecycle_registry_remove(manager *m, guest *g);

/* Copies the JSON records of <session>/probes/ into <evidence>/host/probes/. */
void lifecycle_copy_probes(manager *m, guest *g);

/* Starts renewal of a freshly leased guest: state renewing, first beat one
 * interval from now. */
void lifecycle_renewal_start(manager *m, guest *g);
/* Stops renewal of the guest's lease for good (a release or the
 * destruction step of a finish begins): state stopped. */
void lifecycle_renewal_stop(manager *m, guest *g);

/* Waits until relay time reaches deadline_ms. Returns 0 when reached, -1
 * when the call was cancelled or the session began to end. */
int lifecycle_wait_until(manager *m, relay_call *call, int64_t deadline_ms);

/* Records an `operation-cancelled` event for `operation` ("relay_acquire",
 * ...). `uncertain` says the operation had started and its effect is not
 * known (never replayed). */
void lifecycle_record_cancelled(manager *m, guest *g, const char *operation, bool uncertain, const char *why);

/* Writes <evidence>.lifecycle.json: {purpose, vm, released, reason, failed,
 * delivered, finishedAt}. */
void lifecycle_write_record(manager *m, guest *g, const char *reason, bool failed);

/* Closes a guest whose lease the backend no longer knows and whose
 * destruction was verified: registry row removed, lifecycle record with
 * `why`, closed as `absent`. */
void lifecycle_close_absent(manager *m, guest *g, const char *why);

/* The release path (tools.md §3.10 steps 2-7). Regular: packaging through
 * release_package() when staged and not delivered, up to 3 destroy attempts
 * of 120 s with a lookup after each failure, verification (15 s). Direct
 * (the end of the session after the grace period): no packaging, one
 * destroy request (30 s) and one check (15 s). `call` may be NULL. Returns
 * the relay_release result, success or error. Call from the guest's queue
 * or the end of the session. */
tool_result *lifecycle_release(manager *m, guest *g, relay_call *call, bool direct);

/* relay_finish step 8 (tools.md §3.9): the same destruction and
 * verification as lifecycle_release (steps 2 and 4-7, no packaging: the
 * guest is delivered), recorded and closed with reason "finished". Returns
 * the release-shaped result (success, or the error that kept the guest). */
tool_result *lifecycle_release_finished(manager *m, guest *g, relay_call *call);

/*
 * Hooks provided by other modules. They are declared weak where they are
 * called, so the core links and works (without them) before those modules
 * land:
 *
 *   int recording_reattach(manager *m, guest *g, char *errbuf, size_t errlen);
 *       At restart, for a staged guest not delivered: reattach its recording
 *       from the evidence folder and the guest's state/ without replaying
 *       anything. 0, or -1 with the reason ("a recording made by a different
 *       receiver implementation ...").
 *
 *   void recording_detach(manager *m, guest *g);
 *       At the end of the session in pause mode: close the recording on the
 *       host side without sealing, abort the step download in flight, keep
 *       queued steps in the record.
 *
 *   json_object *release_package(manager *m, guest *g, relay_call *call);
 *       relay_release step 3 for a staged guest not delivered: close the
 *       download queue, pull what can be pulled, write and verify the
 *       package. Returns a new object {delivered, deliveryVerified,
 *       manifestPath, deliveryError, incompleteExtractions}, or NULL when
 *       nothing was done.
 */
int recording_reattach(manager *m, guest *g, char *errbuf, size_t errlen);
void recording_detach(manager *m, guest *g);
json_object *release_package(manager *m, guest *g, relay_call *call);

#endif
