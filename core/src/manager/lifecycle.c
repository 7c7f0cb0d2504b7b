/*
 * Leases over time: binding, registry hooks, renewal, the release path and
 * the end of the session (lifecycle.md §5-§11).
 */
#include "manager/lifecycle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "manager/events.h"
#include "profile/environment.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define RENEWAL_WINDOW_MS (15 * 60 * 1000)
#define BEAT_INTERVAL_MS (60 * 1000)
#define BACKEND_MIN_RENEWAL_MS (6 * 60 * 1000)
#define RELEASE_ATTEMPTS 3

json_object *lifecycle_binding_json(manager *m)
{
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	if (machine && machine->machine.binding) {
		char *text = NULL;
		relay_error err;
		if (machine->machine.binding(machine->state, 0, &text, &err) == RELAY_OK && text) {
			json_object *binding = jsonx_parse_str(text, NULL, 0);
			free(text);
			if (binding)
				return binding;
		} else {
			free(text);
		}
	}
	json_object *binding = json_object_new_object();
	jsonx_add_str(binding, "machine", backends_display_name(m->backends, SLOT_MACHINE));
	jsonx_add_null(binding, "endpoint");
	jsonx_add_null(binding, "store");
	jsonx_add_str(binding, "environmentFingerprint",
		      m->settings->environment ? environment_fingerprint(m->settings->environment) : NULL);
	return binding;
}

tool_result *lifecycle_registry_add(manager *m, guest *g)
{
	(void)m;
	(void)g;
	return NULL;
}

void lifecycle_registry_remove(manager *m, guest *g)
{
	(void)m;
	(void)g;
}

void lifecycle_copy_probes(manager *m, guest *g)
{
	(void)m;
	(void)g;
}

/* ---- renewal ------------------------------------------------------------- */

/* One renewal thread for the session, started with the first lease; it
 * beats each renewing guest every BEAT_INTERVAL_MS of relay time. */
static pthread_t renewal_thread;
static bool renewal_thread_started; /* under the manager's lock */

static void beat(manager *m, guest *g)
{
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	int64_t now = clock_now_ms();
	manager_lock(m);
	int64_t remaining = g->deadline_ms - now;
	g->next_beat_ms = now + BEAT_INTERVAL_MS;
	if (remaining < BACKEND_MIN_RENEWAL_MS) {
		g->renewal = RENEWAL_STOPPED;
		guest_save(g);
		manager_unlock(m);
		guest_event(m, g, "renewal-stopped", "the lease deadline is near", NULL);
		return;
	}
	char *lease = g->lease ? jsonx_to_string(g->lease, 0) : NULL;
	manager_unlock(m);
	if (lease == NULL || machine == NULL) {
		free(lease);
		return;
	}
	int64_t ttl = remaining < RENEWAL_WINDOW_MS ? remaining : RENEWAL_WINDOW_MS;
	char *renewed = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = machine->machine.renew(machine->state, lease, (uint64_t)ttl, NULL, 0, &renewed, &err);
	free(lease);
	json_object *doc = renewed ? jsonx_parse_str(renewed, NULL, 0) : NULL;
	free(renewed);
	manager_lock(m);
	if (g->renewal != RENEWAL_RENEWING && g->renewal != RENEWAL_FAILING) {
		/* Release began while the beat was in flight. */
		manager_unlock(m);
		json_object_put(doc);
		return;
	}
	if (st == RELAY_OK) {
		int64_t expires = 0;
		if (doc && jsonx_get_int(doc, "expiresAtMs", &expires))
			g->expires_at_ms = expires;
		const char *state = doc ? jsonx_get_str(doc, "state") : NULL;
		if (state) {
			free(g->guest_state);
			g->guest_state = strdup(state);
		}
		if (doc) {
			json_object_put(g->lease);
			g->lease = json_object_get(doc);
		}
		g->last_renewed_at_ms = clock_now_ms();
		g->renewal = RENEWAL_RENEWING;
		guest_save(g);
		manager_unlock(m);
	} else {
		free(g->last_error);
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "Heartbeat lost: %s", err.message[0] ? err.message : relay_status_str(st));
		g->last_error = strbuf_detach(&sb, NULL);
		free(g->guest_state);
		g->guest_state = strdup("unknown");
		g->renewal = RENEWAL_FAILING;
		guest_save(g);
		manager_unlock(m);
		guest_event(m, g, "heartbeat-uncertain", err.message, NULL);
	}
	json_object_put(doc);
}

static void *renewal_main(void *arg)
{
	manager *m = arg;
	manager_lock(m);
	while (!m->ending) {
		int64_t now = clock_now_ms();
		int64_t next = now + BEAT_INTERVAL_MS;
		guest *due = NULL;
		for (guest *g = m->guests; g; g = g->next) {
			if (g->phase == PHASE_CLOSED || (g->renewal != RENEWAL_RENEWING && g->renewal != RENEWAL_FAILING))
				continue;
			if (g->next_beat_ms <= now) {
				due = g;
				break;
			}
			if (g->next_beat_ms < next)
				next = g->next_beat_ms;
		}
		if (due) {
			manager_unlock(m);
			beat(m, due);
			manager_lock(m);
			continue;
		}
		clock_wait_until_ms(&m->changed, &m->lock, next, 1000);
	}
	manager_unlock(m);
	return NULL;
}

void lifecycle_renewal_start(manager *m, guest *g)
{
	manager_lock(m);
	g->renewal = RENEWAL_RENEWING;
	g->next_beat_ms = clock_now_ms() + BEAT_INTERVAL_MS;
	if (!renewal_thread_started && pthread_create(&renewal_thread, NULL, renewal_main, m) == 0) {
		pthread_detach(renewal_thread);
		renewal_thread_started = true;
	}
	pthread_cond_broadcast(&m->changed);
	manager_unlock(m);
}

void lifecycle_renewal_stop(manager *m, guest *g)
{
	manager_lock(m);
	if (g->renewal != RENEWAL_NONE)
		g->renewal = RENEWAL_STOPPED;
	guest_save(g);
	manager_unlock(m);
}

int lifecycle_wait_until(manager *m, relay_call *call, int64_t deadline_ms)
{
	manager_lock(m);
	for (;;) {
		if (m->ending || relay_call_is_cancelled(call)) {
			manager_unlock(m);
			return -1;
		}
		if (clock_wait_until_ms(&m->changed, &m->lock, deadline_ms, 500))
			break;
	}
	manager_unlock(m);
	return 0;
}

/* ---- release ---------------------------------------------------------------- */

static json_object *parse_owned(char *text)
{
	json_object *obj = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	return obj;
}

static void write_lifecycle_record(manager *m, guest *g, const char *reason)
{
	manager_lock(m);
	json_object *record = json_object_new_object();
	jsonx_add_str(record, "purpose", g->purpose);
	jsonx_add_str(record, "vm", g->lease ? jsonx_get_str(g->lease, "vm") : NULL);
	jsonx_add_bool(record, "released", true);
	jsonx_add_str(record, "reason", reason);
	jsonx_add_bool(record, "failed", false);
	jsonx_add_bool(record, "delivered", g->delivered);
	char at[21];
	time_format_iso_seconds(clock_now_ms(), at);
	jsonx_add_str(record, "finishedAt", at);
	strbuf path = STRBUF_INIT;
	strbuf_printf(&path, "%s.lifecycle.json", g->evidence_path ? g->evidence_path : "");
	bool has_evidence = g->evidence_path != NULL;
	manager_unlock(m);
	relay_error err;
	if (has_evidence && fs_write_json_durable(strbuf_str(&path), record, &err) != RELAY_OK)
		log_error("cannot write %s: %s", strbuf_str(&path), err.message);
	strbuf_free(&path);
	json_object_put(record);
}

static void close_transport(manager *m, guest *g)
{
	manager_lock(m);
	loaded_plugin *plugin = g->transport_plugin;
	relay_transport_conn *conn = g->transport_conn;
	g->transport_conn = NULL;
	g->transport_plugin = NULL;
	manager_unlock(m);
	if (plugin && conn)
		plugin->transport.close(plugin->state, conn, 0);
}

static tool_result *release_result(manager *m, guest *g, const char *reason)
{
	manager_lock(m);
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_bool(r, "released", true);
	jsonx_add_str(r, "reason", reason);
	jsonx_add_bool(r, "delivered", g->delivered);
	jsonx_add_bool(r, "deliveryVerified", g->delivered);
	if (g->delivered) {
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "%s/manifest.json", g->evidence_path);
		jsonx_add_str(r, "manifestPath", strbuf_str(&sb));
		strbuf_free(&sb);
	} else {
		jsonx_add_null(r, "manifestPath");
	}
	jsonx_add_null(r, "deliveryError");
	jsonx_add(r, "incompleteExtractions", json_object_new_array());
	jsonx_add_str(r, "evidencePath", g->evidence_path);
	jsonx_add_bool(r, "destructionVerified", true);
	jsonx_add(r, "guestsHeld", manager_open_guest_names_json(m));
	manager_unlock(m);
	return tool_result_ok(r, "Released guest %s: machine destroyed; evidence kept at %s", g->name,
			      g->evidence_path ? g->evidence_path : "(no evidence folder)");
}

tool_result *lifecycle_release(manager *m, guest *g, relay_call *call, bool direct)
{
	manager_wait_startup(m);
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	if (machine == NULL)
		return guest_error(m, g, NULL, "backend-unavailable", "the machine backend is not available: %s",
				   m->backends->load_errors[SLOT_MACHINE] ? m->backends->load_errors[SLOT_MACHINE]
									   : "no machine plugin is configured");
	manager_lock(m);
	guest_phase prior = g->phase;
	g->phase = PHASE_RELEASING;
	if (g->renewal != RENEWAL_NONE)
		g->renewal = RENEWAL_STOPPED;
	guest_save(g);
	manager_unlock(m);
	guest_event(m, g, "release", direct ? "the session ended" : "relay_release", NULL);
	relay_call_progress(call, 1, 3, "packaging", true);

	relay_error err;
	memset(&err, 0, sizeof err);
	/* Step 4: an uncertain acquisition is looked up by purpose first. */
	if (prior == PHASE_ACQUISITION_UNCERTAIN || g->lease == NULL) {
		char *found_text = NULL;
		relay_status st = machine->machine.find_by_purpose
					  ? machine->machine.find_by_purpose(machine->state, g->purpose, call, 0,
									     &found_text, &err)
					  : RELAY_E_UNSUPPORTED;
		json_object *found = st == RELAY_OK ? parse_owned(found_text) : (free(found_text), NULL);
		size_t n = json_object_is_type(found, json_type_array) ? json_object_array_length(found) : 0;
		if (st == RELAY_OK && n == 0) {
			json_object_put(found);
			lifecycle_registry_remove(m, g);
			guest_close(m, g, "not-acquired");
			return release_result(m, g, "not-acquired");
		}
		if (st != RELAY_OK || n != 1) {
			json_object_put(found);
			manager_lock(m);
			g->phase = prior;
			guest_save(g);
			manager_unlock(m);
			if (st == RELAY_OK)
				return guest_error(m, g, NULL, "outcome-unknown",
						   "ambiguous acquisition: %zu leases carry purpose %s; the ownership "
						   "record is kept",
						   n, g->purpose);
			return guest_error(m, g, NULL, "outcome-unknown",
					   "the acquisition of purpose %s cannot be looked up (%s); the ownership record "
					   "is kept",
					   g->purpose, err.message);
		}
		manager_lock(m);
		json_object_put(g->lease);
		g->lease = json_object_get(json_object_array_get_idx(found, 0));
		guest_save(g);
		manager_unlock(m);
		json_object_put(found);
	}

	/* Steps 5-6: destroy, then verify independently. */
	close_transport(m, g);
	relay_call_progress(call, 2, 3, "destruction", true);
	char *lease = guest_lease_text(m, g);
	bool released = false;
	int attempts = direct ? 1 : RELEASE_ATTEMPTS;
	for (int attempt = 1; attempt <= attempts && !released; attempt++) {
		memset(&err, 0, sizeof err);
		relay_status st = machine->machine.release(machine->state, lease, "released", direct ? NULL : call, 0, &err);
		if (st == RELAY_OK || st == RELAY_E_NOT_FOUND) {
			released = true;
			break;
		}
		json_object *details = json_object_new_object();
		jsonx_add_int(details, "attempt", attempt);
		jsonx_add_str(details, "error", err.message);
		guest_event(m, g, "release-error", err.message, details);
		relay_error inspect_err;
		char *snapshot = NULL;
		if (machine->machine.inspect(machine->state, lease, NULL, 0, &snapshot, &inspect_err) == RELAY_E_NOT_FOUND)
			released = true;
		free(snapshot);
	}
	if (!released) {
		free(lease);
		guest_set_last_error(m, g, "release failed: %s", err.message);
		return guest_error(m, g, NULL, "destruction-unverified",
				   "The backend did not confirm destroying %s (%s); ownership is kept; call "
				   "relay_release again",
				   g->name, err.message[0] ? err.message : "no answer");
	}
	relay_call_progress(call, 3, 3, "verification", true);
	char *check = NULL;
	memset(&err, 0, sizeof err);
	relay_status verified = machine->machine.verify_destroyed(machine->state, lease, NULL, 0, &check, &err);
	free(check);
	free(lease);
	if (verified != RELAY_OK) {
		guest_set_last_error(m, g, "destruction unverified: %s", err.message);
		return guest_error(m, g, NULL, "destruction-unverified",
				   "Destruction of %s could not be verified (%s); ownership, record and registry row "
				   "are kept; call relay_release again",
				   g->name, err.message[0] ? err.message : relay_status_str(verified));
	}
	manager_lock(m);
	g->released = true;
	manager_unlock(m);
	lifecycle_registry_remove(m, g);
	write_lifecycle_record(m, g, "released");
	guest_close(m, g, "released");
	return release_result(m, g, "released");
}

/* ---- the end of the session ----------------------------------------------------- */

static int pause_guest(manager *m, guest *g)
{
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	manager_lock(m);
	bool renewing = g->renewal == RENEWAL_RENEWING || g->renewal == RENEWAL_FAILING;
	int64_t remaining = g->deadline_ms - clock_now_ms();
	char *lease = g->lease ? jsonx_to_string(g->lease, 0) : NULL;
	manager_unlock(m);
	int status = 0;
	if (renewing && lease && machine && remaining >= BACKEND_MIN_RENEWAL_MS) {
		char *renewed = NULL;
		relay_error err;
		memset(&err, 0, sizeof err);
		relay_status st = machine->machine.renew(machine->state, lease, (uint64_t)remaining, NULL, 0, &renewed, &err);
		json_object *doc = renewed ? jsonx_parse_str(renewed, NULL, 0) : NULL;
		free(renewed);
		if (st == RELAY_OK) {
			manager_lock(m);
			int64_t expires = 0;
			if (doc && jsonx_get_int(doc, "expiresAtMs", &expires))
				g->expires_at_ms = expires;
			g->last_renewed_at_ms = clock_now_ms();
			manager_unlock(m);
		} else {
			guest_event(m, g, "final-renewal-failed", err.message, NULL);
			log_error("the final renewal of %s failed: %s", g->name, err.message);
			status = 1;
		}
		json_object_put(doc);
	}
	free(lease);
	manager_lock(m);
	if (renewing)
		g->renewal = RENEWAL_PAUSED;
	guest_save(g);
	manager_unlock(m);
	if (renewing)
		guest_event(m, g, "renewal-paused", "the session ended", NULL);
	return status;
}

int manager_end_guests(manager *m, const char *reason)
{
	(void)reason;
	const relay_settings *s = m->settings;
	manager_lock(m);
	bool startup_done = m->startup_done;
	manager_unlock(m);
	if (startup_done)
		backends_wait(m->backends);
	int64_t give_up = clock_monotonic_ms() + s->shutdown_grace_ms;
	/* Let running operations finish within the grace period. */
	for (;;) {
		manager_lock(m);
		bool busy = m->detached_running > 0;
		for (guest *g = m->guests; g && !busy; g = g->next)
			busy = queue_active(&g->queue);
		bool hurry = m->hurry;
		manager_unlock(m);
		if (!busy)
			break;
		if (hurry || clock_monotonic_ms() >= give_up) {
			log_error("an operation was still running %lld ms after the session ended; cancelling it",
				  (long long)s->shutdown_grace_ms);
			break;
		}
		usleep(20000);
	}
	int status = 0;
	manager_lock(m);
	guest *list[64];
	size_t n = 0;
	for (guest *g = m->guests; g && n < 64; g = g->next)
		if (g->phase != PHASE_CLOSED && g->phase != PHASE_UNAVAILABLE)
			list[n++] = g;
	manager_unlock(m);
	for (size_t i = 0; i < n; i++) {
		guest *g = list[i];
		if (s->on_exit == ON_EXIT_RELEASE && g->lease != NULL) {
			tool_result *r = lifecycle_release(m, g, NULL, clock_monotonic_ms() >= give_up);
			if (r && r->is_error) {
				status = 1;
				guest_event(m, g, "release-failed", r->headline, NULL);
				log_error("could not release %s at the end of the session: %s", g->name,
					  r->headline ? r->headline : "");
			}
			tool_result_free(r);
		} else {
			status |= pause_guest(m, g);
		}
	}
	return status;
}
