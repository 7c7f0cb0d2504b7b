/*
 * The end of the session (spec/lifecycle.md §11.2): stop taking work, let running
 * operations finish within MCP_RELAY_SHUTDOWN_GRACE_MS, cancel what still
 * runs, then pause or release every guest still held.
 *
 * The MCP layer calls session_end() once, on the first trigger; the
 * session hands over here through its end_guests hook (tools/dispatch.c),
 * which blocks until the guests are dealt with and returns the exit status.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/downloads.h"
#include "lease/lifecycle.h"
#include "lease/renewal.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/log.h"

#define CANCEL_WAIT_MS 5000

static guest_phase phase_of(session_manager *m, guest *g)
{
	session_lock(m);
	guest_phase phase = g->phase;
	session_unlock(m);
	return phase;
}

/* A guest the end of the session acts on: held, and neither unavailable
 * nor still waiting to be taken back. */
static bool acted_on(guest_phase phase)
{
	return phase != PHASE_CLOSED && phase != PHASE_UNAVAILABLE && phase != PHASE_RECONCILING;
}

/* Step 3: the release of one guest through the normal path, queued after
 * the operation it may be running. */
static void release_at_end(session_manager *m, guest *g, relay_call *call, void *ctx)
{
	(void)ctx;
	if (!acted_on(phase_of(m, g)))
		return;
	relay_outcome o = OUTCOME_INIT;
	if (lease_release_guest(m, g, call, false, &o) != 0)
		log_warning("the release of %s at the end of the session did not complete: %s", g->name,
		            o.message ? o.message : "");
	outcome_free(&o);
}

/* Waits until nothing runs or `until_mono_ms` passes (or a second signal
 * asks to hurry, when `honour_hurry`). True when idle. */
static bool wait_idle(session_manager *m, int64_t until_mono_ms, bool honour_hurry)
{
	for (;;) {
		if (!session_busy(m))
			return true;
		session_lock(m);
		bool hurry = m->hurry;
		session_unlock(m);
		if ((honour_hurry && hurry) || clock_monotonic_ms() >= until_mono_ms)
			return false;
		session_lock(m);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&m->changed, &m->lock, &ts);
		session_unlock(m);
	}
}

static void release_failed(session_manager *m, guest *g, const char *why)
{
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "error", why);
	guest_event(m, g, "release-failed", why, details);
	log_error("could not release %s at the end of the session: %s; it keeps its record and registry row, "
	          "renewal is stopped and its lease lapses within its current window",
	          g->name, why);
}

int lease_end_guests(session_manager *m, const char *reason)
{
	const relay_settings *s = m->settings;
	int64_t started = clock_monotonic_ms();
	int64_t grace_end = started + s->shutdown_grace_ms;
	const char *why = reason ? reason : "ended";
	size_t n = 0;
	guest **list = session_snapshot_guests(m, &n);

	/* Step 1: no new work; calls queued behind another call are answered
	 * shutting-down; renewal beats stop being scheduled. */
	lease_renewal_halt(m);
	char dropped[128];
	snprintf(dropped, sizeof dropped, "the session is ending (%s)", why);
	for (size_t i = 0; i < n; i++)
		queue_drop_waiting(&list[i]->queue, dropped);

	bool held = false;
	for (size_t i = 0; i < n && !held; i++)
		held = phase_of(m, list[i]) != PHASE_CLOSED;
	if (!held && !session_busy(m)) {
		free(list);
		return 0; /* nothing held, nothing running: exit at once */
	}
	if (held)
		backends_ensure_loaded(m->backends, m->settings);

	/* Step 3: with release, every guest is released through the normal
	 * path, in parallel (one queue each), right after what it runs now. */
	if (s->on_exit == ON_EXIT_RELEASE) {
		for (size_t i = 0; i < n; i++) {
			guest_phase phase = phase_of(m, list[i]);
			if (phase != PHASE_CLOSED && phase != PHASE_UNAVAILABLE)
				session_queue_internal(m, list[i], release_at_end, NULL, NULL, 0);
		}
	}

	/* Steps 2 and 4: running work gets the grace period, then is cancelled
	 * (recorded as uncertain by each operation, never replayed). */
	if (!wait_idle(m, grace_end, true)) {
		log_error("an operation was still running %lld ms after the session ended; cancelling it",
		          (long long)(clock_monotonic_ms() - started));
		session_cancel_tracked(m);
		if (!wait_idle(m, clock_monotonic_ms() + CANCEL_WAIT_MS, false))
			log_error("the cancelled operation did not stop; continuing without it");
	}

	/* Step 5: each guest still held. */
	int status = 0;
	free(list);
	list = session_snapshot_guests(m, &n);
	for (size_t i = 0; i < n; i++) {
		guest *g = list[i];
		guest_phase phase = phase_of(m, g);
		if (!acted_on(phase))
			continue;
		if (s->on_exit == ON_EXIT_PAUSE) {
			/* An uncertain acquisition keeps its record for a restart. */
			if (phase == PHASE_ACQUISITION_UNCERTAIN)
				continue;
			status |= lease_renewal_pause(m, g, why);
			recording_detach(m, g);
			continue;
		}
		if (queue_active(&g->queue)) {
			/* Its operation did not stop when cancelled: a second
			 * release beside it could race it. */
			lease_renewal_stop(m, g);
			release_failed(m, g, "an operation on the guest did not stop after the grace period");
			status = 1;
			continue;
		}
		relay_outcome o = OUTCOME_INIT;
		if (lease_release_guest(m, g, NULL, true, &o) != 0) {
			release_failed(m, g, o.message ? o.message : "the direct release failed");
			status = 1;
		}
		outcome_free(&o);
	}
	free(list);
	return status;
}
