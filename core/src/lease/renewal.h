/*
 * lease/renewal.h — keeping leases alive (spec/lifecycle.md §6, §11.2 step 5).
 *
 * One scheduler thread per manager decides which guest is due; each beat
 * runs on a thread of its own, so a slow backend answer for one guest never
 * delays another, and at most one beat per guest is in flight. Beats read
 * relay time (util/clock.h), so tests drive them with the test clock.
 *
 * A beat with R = deadline - now below the backend minimum stops renewal for
 * good; otherwise it renews for min(window, R), never past the deadline.
 * A failed beat marks the guest failing and queues one lease lookup in the
 * guest's queue; it never destroys anything.
 */
#ifndef RELAY_LEASE_RENEWAL_H
#define RELAY_LEASE_RENEWAL_H

#include <stdint.h>

#include "session/manager_internal.h"

/* The decisions of a beat, in relay time (pure; tested on their own): the
 * length of the next renewal of a lease whose deadline is `deadline_ms` at
 * `now_ms`, min(window, remaining), or 0 when less than the backend
 * minimum remains (renewal then stops for good: never past the deadline). */
int64_t renewal_ttl_ms(int64_t deadline_ms, int64_t now_ms);
/* The final renewal of a pause: the whole remaining time up to the
 * deadline, or 0 when less than the backend minimum remains. */
int64_t renewal_final_ttl_ms(int64_t deadline_ms, int64_t now_ms);

/* Starts or resumes renewal: state renewing; the first beat one interval
 * from now, or at once with `beat_now` (a restart). */
void lease_renewal_start(session_manager *m, guest *g, bool beat_now);
/* Stops renewal for good (state stopped). A beat in flight lands without
 * effect. */
void lease_renewal_stop(session_manager *m, guest *g);
/* The end of the session: no new beats are started. */
void lease_renewal_halt(session_manager *m);
/* Queues one lease lookup (inspect) in the guest's queue unless one is
 * queued already (lookup_queued) or the guest is closed. Takes the lock. */
void lease_renewal_queue_lookup(session_manager *m, guest *g);
/* Stores what a successful renew or inspect confirmed: the expiry, the
 * state and the document. Under lock; takes `doc` (may be NULL). */
void lease_renewal_store_confirmed(guest *g, json_object *doc, int64_t now);
/* Waits until the guest has no beat in flight. */
void lease_renewal_wait_beat(session_manager *m, guest *g);
/* Pause at the end of the session (spec/lifecycle.md §11.2 step 5): lets a beat
 * in flight land, sends one last renewal carrying the lease to its deadline
 * (when at least the backend minimum is left), records the confirmed expiry,
 * sets the state paused and writes renewal-paused (or final-renewal-failed).
 * Does nothing for a guest that is not being renewed. Returns 0, or 1 when
 * the final renewal failed. */
int lease_renewal_pause(session_manager *m, guest *g, const char *reason);

#endif
