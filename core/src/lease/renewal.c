/*
 * Lease renewal (spec/lifecycle.md §6) and the pause at the end of the session
 * (§11.2 step 5). See renewal.h.
 */
#include "lease/renewal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease/lifecycle.h"
#include "lease/watch.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

int64_t renewal_ttl_ms(int64_t deadline_ms, int64_t now_ms)
{
	int64_t remaining = deadline_ms - now_ms;
	if (remaining < LIFECYCLE_BACKEND_MIN_RENEWAL_MS)
		return 0;
	return remaining < LIFECYCLE_RENEWAL_WINDOW_MS ? remaining : LIFECYCLE_RENEWAL_WINDOW_MS;
}

int64_t renewal_final_ttl_ms(int64_t deadline_ms, int64_t now_ms)
{
	int64_t remaining = deadline_ms - now_ms;
	return remaining < LIFECYCLE_BACKEND_MIN_RENEWAL_MS ? 0 : remaining;
}

static bool renewing(const guest *g)
{
	return g->phase != PHASE_CLOSED &&
	       (g->lease->renewal == RENEWAL_RENEWING || g->lease->renewal == RENEWAL_FAILING);
}

void lease_renewal_store_confirmed(guest *g, json_object *doc, int64_t now)
{
	if (doc == NULL)
		return;
	int64_t expires = 0;
	if (jsonx_get_int(doc, "expiresAtMs", &expires) && expires > 0)
		g->lease->expires_at_ms = expires;
	const char *state = jsonx_get_str(doc, "state");
	if (state) {
		lease_set_guest_state(g, state);
	}
	json_object_put(g->lease_document);
	g->lease_document = doc;
	(void)now;
}

/* ---- the lookup after a failed beat ----------------------------------------------- */

/* Runs in the guest's queue: is the lease still there, and in what state?
 * If the backend no longer knows it and destruction is verified, the guest
 * is closed as absent; a lease the backend reports lost is recorded so
 * (lease/watch.c); otherwise nothing changes and the next beat tries again. */
static void lookup_after_failed_beat(session_manager *m, guest *g, relay_call *call, void *ctx)
{
	(void)ctx;
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	session_lock(m);
	g->lease->lookup_queued = false;
	bool open = g->phase != PHASE_CLOSED && g->phase != PHASE_UNAVAILABLE && g->lease_document != NULL;
	char *lease = open ? jsonx_to_string(g->lease_document, 0) : NULL;
	session_unlock(m);
	if (lease == NULL || machine == NULL) {
		free(lease);
		return;
	}
	char *found = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = machine->machine.inspect(machine->state, lease, call, 0, &found, &err);
	if (st == RELAY_OK) {
		lease_watch_store_observed(m, g, found ? jsonx_parse_str(found, NULL, 0) : NULL);
	} else if (st == RELAY_E_NOT_FOUND) {
		char *check = NULL;
		relay_error verr;
		memset(&verr, 0, sizeof verr);
		if (machine->machine.verify_destroyed(machine->state, lease, call, 0, &check, &verr) ==
		    RELAY_OK)
			lease_close_absent(m, g, "backend lease absent and destruction verified");
		else
			guest_set_last_error(
			    m, g,
			    "Heartbeat lost: the backend no longer knows the lease of %s, but its "
			    "destruction could not be verified (%s)",
			    g->name, verr.message);
		free(check);
	}
	free(found);
	free(lease);
}

/* Queues the lookup whose lookup_queued the caller set. */
static void queue_lookup_work(session_manager *m, guest *g)
{
	if (!session_queue_internal(m, g, lookup_after_failed_beat, NULL, NULL,
	                            LIFECYCLE_LOOKUP_TIMEOUT_MS)) {
		session_lock(m);
		g->lease->lookup_queued = false;
		session_unlock(m);
	}
}

/* ---- one beat ------------------------------------------------------------------------------ */

typedef struct beat_arg {
	session_manager *m;
	guest *g;
} beat_arg;

static void beat(session_manager *m, guest *g)
{
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	int64_t now = clock_now_ms();
	session_lock(m);
	if (!renewing(g)) {
		session_unlock(m);
		return;
	}
	int64_t ttl = renewal_ttl_ms(g->lease->deadline_ms, now);
	g->lease->next_beat_ms = now + LIFECYCLE_BEAT_INTERVAL_MS;
	if (ttl == 0) {
		/* Never past the deadline: the lease lapses at its last confirmed
		 * expiry. Nothing is destroyed. */
		g->lease->renewal = RENEWAL_STOPPED;
		guest_save(g);
		json_object *details = json_object_new_object();
		char when[21];
		time_format_iso_seconds(g->lease->deadline_ms, when);
		jsonx_add_str(details, "deadline", when);
		if (g->lease->expires_at_ms > 0) {
			time_format_iso_seconds(g->lease->expires_at_ms, when);
			jsonx_add_str(details, "expiresAt", when);
		} else {
			jsonx_add_null(details, "expiresAt");
		}
		pthread_cond_broadcast(&m->changed);
		session_unlock(m);
		guest_event(m, g, "renewal-stopped",
		            "the lease deadline is less than the backend's minimum renewal away", details);
		log_info("renewal of %s stopped: its deadline is near; the lease lapses at its last "
		         "confirmed expiry",
		         g->name);
		return;
	}
	char *lease = g->lease_document ? jsonx_to_string(g->lease_document, 0) : NULL;
	session_unlock(m);
	if (lease == NULL || machine == NULL) {
		free(lease);
		return;
	}
	char *renewed = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_call *call = session_internal_call(m, LIFECYCLE_LOOKUP_TIMEOUT_MS);
	relay_status st =
	    machine->machine.renew(machine->state, lease, (uint64_t)ttl, call, 0, &renewed, &err);
	session_internal_call_done(m, call);
	free(lease);
	json_object *doc = renewed ? jsonx_parse_str(renewed, NULL, 0) : NULL;
	free(renewed);
	bool queue_lookup = false;
	session_lock(m);
	if (!renewing(g)) {
		/* A release or the pause began while the beat was in flight. */
		session_unlock(m);
		json_object_put(doc);
		return;
	}
	if (st == RELAY_OK) {
		lease_renewal_store_confirmed(g, doc, now);
		doc = NULL;
		g->lease->last_renewed_at_ms = clock_now_ms();
		g->lease->renewal = RENEWAL_RENEWING;
		guest_save(g);
		session_unlock(m);
		return;
	}
	free(g->last_error);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "Heartbeat lost: %s", err.message[0] ? err.message : relay_status_str(st));
	g->last_error = strbuf_detach(&sb, NULL);
	lease_set_guest_state(g, NULL);
	g->lease->renewal = RENEWAL_FAILING;
	guest_save(g);
	if (!g->lease->lookup_queued && !m->ending) {
		g->lease->lookup_queued = true;
		queue_lookup = true;
	}
	session_unlock(m);
	json_object_put(doc);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "error", err.message);
	guest_event(m, g, "heartbeat-uncertain", err.message[0] ? err.message : "the renewal failed",
	            details);
	log_warning("renewal of %s failed: %s; the lease will be looked up and renewal tried again", g->name,
	            err.message);
	if (queue_lookup)
		queue_lookup_work(m, g);
}

void lease_renewal_queue_lookup(session_manager *m, guest *g)
{
	session_lock(m);
	bool queue = !g->lease->lookup_queued && !m->ending && g->phase != PHASE_CLOSED;
	if (queue)
		g->lease->lookup_queued = true;
	session_unlock(m);
	if (queue)
		queue_lookup_work(m, g);
}

static void *beat_main(void *arg)
{
	beat_arg *b = arg;
	session_manager *m = b->m;
	guest *g = b->g;
	free(b);
	beat(m, g);
	session_lock(m);
	g->lease->beat_in_flight = false;
	m->beats_running--;
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	return NULL;
}

/* ---- the scheduler ------------------------------------------------------------------------ */

/* Starts due beats, each on its own thread. One thread per manager; it
 * ends when the session ends. */
static void *scheduler_main(void *arg)
{
	session_manager *m = arg;
	session_lock(m);
	while (!m->renewal_halted) {
		int64_t now = clock_now_ms();
		int64_t next = now + LIFECYCLE_BEAT_INTERVAL_MS;
		for (guest *g = m->guests; g; g = g->next) {
			if (!renewing(g) || g->lease->beat_in_flight)
				continue;
			if (g->lease->next_beat_ms > now) {
				if (g->lease->next_beat_ms < next)
					next = g->lease->next_beat_ms;
				continue;
			}
			beat_arg *b = malloc(sizeof *b);
			pthread_t thread;
			if (b == NULL)
				continue;
			b->m = m;
			b->g = g;
			g->lease->beat_in_flight = true;
			m->beats_running++;
			if (pthread_create(&thread, NULL, beat_main, b) == 0) {
				pthread_detach(thread);
			} else {
				/* No thread: beat here, without the lock. */
				session_unlock(m);
				beat_main(b);
				session_lock(m);
			}
		}
		clock_wait_until_ms(&m->changed, &m->lock, next, 1000);
	}
	m->renewal_started = false;
	session_unlock(m);
	return NULL;
}

/* Under lock. */
static void ensure_scheduler(session_manager *m)
{
	if (m->renewal_started || m->renewal_halted)
		return;
	pthread_t thread;
	if (pthread_create(&thread, NULL, scheduler_main, m) == 0) {
		pthread_detach(thread);
		m->renewal_started = true;
	} else {
		log_error("cannot start the renewal thread; leases will lapse at their current expiry");
	}
}

void lease_renewal_start(session_manager *m, guest *g, bool beat_now)
{
	session_lock(m);
	g->lease->renewal = RENEWAL_RENEWING;
	g->lease->next_beat_ms = clock_now_ms() + (beat_now ? 0 : LIFECYCLE_BEAT_INTERVAL_MS);
	guest_save(g);
	ensure_scheduler(m);
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	lease_watch_start(m); /* the backend may say a lease changed between beats */
}

void lease_renewal_stop(session_manager *m, guest *g)
{
	session_lock(m);
	if (g->lease->renewal != RENEWAL_NONE)
		g->lease->renewal = RENEWAL_STOPPED;
	guest_save(g);
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
}

void lease_renewal_halt(session_manager *m)
{
	lease_watch_stop(); /* before the lock: a call in flight takes it */
	session_lock(m);
	m->renewal_halted = true;
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
}

void lease_renewal_wait_beat(session_manager *m, guest *g)
{
	session_lock(m);
	while (g->lease->beat_in_flight)
		pthread_cond_wait(&m->changed, &m->lock);
	session_unlock(m);
}

/* ---- the pause --------------------------------------------------------------------------- */

int lease_renewal_pause(session_manager *m, guest *g, const char *reason)
{
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	lease_renewal_wait_beat(m, g);
	session_lock(m);
	if (!renewing(g)) {
		session_unlock(m);
		return 0;
	}
	int64_t remaining = renewal_final_ttl_ms(g->lease->deadline_ms, clock_now_ms());
	char *lease = g->lease_document ? jsonx_to_string(g->lease_document, 0) : NULL;
	session_unlock(m);
	int status = 0;
	char failure[RELAY_ERROR_MESSAGE_BYTES] = "";
	if (lease && machine && remaining > 0) {
		/* The last renewal carries the lease to its deadline, and no
		 * further: the backend reclaims it there unless a restarted
		 * server with this session finishes or releases it first. */
		char *renewed = NULL;
		relay_error err;
		memset(&err, 0, sizeof err);
		relay_call *call = session_internal_call(m, LIFECYCLE_LOOKUP_TIMEOUT_MS);
		relay_status st = machine->machine.renew(machine->state, lease, (uint64_t)remaining, call, 0,
		                                         &renewed, &err);
		session_internal_call_done(m, call);
		json_object *doc = renewed ? jsonx_parse_str(renewed, NULL, 0) : NULL;
		free(renewed);
		if (st == RELAY_OK) {
			session_lock(m);
			lease_renewal_store_confirmed(g, doc, clock_now_ms());
			g->lease->last_renewed_at_ms = clock_now_ms();
			session_unlock(m);
		} else {
			json_object_put(doc);
			snprintf(failure, sizeof failure, "%s",
			         err.message[0] ? err.message : relay_status_str(st));
			status = 1;
		}
	} else if (lease && machine) {
		snprintf(failure, sizeof failure,
		         "the deadline is less than the backend's minimum renewal away");
	}
	free(lease);
	session_lock(m);
	g->lease->renewal = RENEWAL_PAUSED;
	guest_save(g);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "reason", reason);
	char when[21];
	if (g->lease->expires_at_ms > 0) {
		time_format_iso_seconds(g->lease->expires_at_ms, when);
		jsonx_add_str(details, "expiresAt", when);
	} else {
		jsonx_add_null(details, "expiresAt");
	}
	time_format_iso_seconds(g->lease->deadline_ms, when);
	jsonx_add_str(details, "deadline", when);
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	if (status != 0) {
		json_object *fd = json_object_new_object();
		jsonx_add_str(fd, "error", failure);
		guest_event(m, g, "final-renewal-failed", failure, fd);
		log_error(
		    "the final renewal of %s failed: %s; it is paused anyway and its lease lapses within its "
		    "current window",
		    g->name, failure);
	}
	guest_event(m, g, "renewal-paused", reason, details);
	return status;
}
