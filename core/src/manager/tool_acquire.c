/* relay_acquire (tools.md §3.4): reserve a name, check the backend and the
 * image, lease, wait for capacity, reconcile an unknown outcome. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "manager/console_report.h"
#include "manager/events.h"
#include "manager/lifecycle.h"
#include "manager/manager_internal.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define CAPACITY_RETRY_MS LIFECYCLE_CAPACITY_RETRY_MS
#define RENEWAL_WINDOW_MS LIFECYCLE_RENEWAL_WINDOW_MS

guest *manager_reserve_guest(manager *m, json_object *args, tool_result **refusal_out)
{
	const relay_settings *s = m->settings;
	*refusal_out = NULL;
	if (m->session_locked_elsewhere) {
		*refusal_out =
		    tool_result_error(NULL, "session-locked",
		                      "Another mcp-relay process, pid %ld, holds session %s; no guest can be "
		                      "acquired under this session identity until it exits",
		                      m->session_lock_holder_pid, s->session_id);
		return NULL;
	}
	int open = manager_open_guest_count(m);
	if (open >= s->max_guests) {
		char *names = manager_open_guest_names(m);
		*refusal_out = tool_result_error(
		    NULL, "guest-limit",
		    "This session already holds %d guest%s (%s), the most "
		    "MCP_RELAY_MAX_GUESTS allows; finish or release one before acquiring another.",
		    open, open == 1 ? "" : "s", names ? names : "");
		free(names);
		return NULL;
	}
	const char *task = jsonx_get_str(args, "task");
	int64_t n = 1;
	jsonx_get_int(m->counters, task, &n);
	char name[64];
	snprintf(name, sizeof name, "%s-%lld", task, (long long)n);
	jsonx_add_int(m->counters, task, n + 1);
	if (manager_save_session(m) != 0) {
		*refusal_out = tool_result_error(
		    NULL, "internal",
		    "cannot record the guest counter in %s/session.json; nothing was acquired",
		    s->session_dir);
		return NULL;
	}

	guest *g = guest_new();
	if (g == NULL) {
		*refusal_out = tool_result_error(NULL, "internal", "out of memory reserving a guest");
		return NULL;
	}
	g->name = strdup(name);
	g->task = strdup(task);
	g->image = strdup(jsonx_get_str(args, "image"));
	g->ttl_hours = 4;
	jsonx_get_double(args, "ttlHours", &g->ttl_hours);
	g->network = strdup(settings_guest_network_name(s->guest_network));
	const char *env = jsonx_get_str(args, "env");
	g->env_pack = strdup(env ? env : "none");
	jsonx_get_bool(args, "vnc", &g->vnc);
	jsonx_get_bool(args, "fullWorkspace", &g->full_workspace);
	json_object *extractions = jsonx_get_array(args, "extractions");
	if (extractions) {
		json_object_put(g->extractions);
		g->extractions = json_object_get(extractions);
	}
	g->phase = PHASE_ACQUIRING;
	g->acquisition_order = m->next_order++;

	char guests_dir[4096];
	snprintf(guests_dir, sizeof guests_dir, "%s/guests/%s", s->session_dir, name);
	g->dir = strdup(guests_dir);
	relay_error err;
	char lock_path[4200];
	snprintf(lock_path, sizeof lock_path, "%s/owner.lock", guests_dir);
	if (fs_mkdir_p(guests_dir, 0700, &err) != RELAY_OK ||
	    (g->owner_lock_fd = lock_file_take(lock_path, NULL)) < 0) {
		*refusal_out = tool_result_error(
		    NULL, "internal", "cannot create the ownership record of %s in %s", name, guests_dir);
		guest_free(g);
		return NULL;
	}
	guest_save(g);
	guest **tail = &m->guests;
	while (*tail)
		tail = &(*tail)->next;
	*tail = g;
	pthread_cond_broadcast(&m->changed);
	return g;
}

static bool session_ending(manager *m)
{
	manager_lock(m);
	bool ending = m->ending;
	manager_unlock(m);
	return ending;
}

/* Fills the identities of step 7 under the lock. */
static void fix_identities(manager *m, guest *g)
{
	char hex[9], stamp[22];
	random_hex(hex, 8);
	int64_t now = clock_now_ms();
	time_format_stamp(now, stamp);
	manager_lock(m);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "relay-%s-%s", g->task, hex);
	g->purpose = strbuf_detach(&sb, NULL);
	g->acquired_at_ms = now;
	g->deadline_ms = now + (int64_t)llround(g->ttl_hours * 3600000.0);
	strbuf_printf(&sb, "%s/relay-evidence/%s", m->settings->project, g->purpose);
	g->evidence_path = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "/var/tmp/%s-mcp-relay-%s", stamp, g->purpose);
	g->guest_root = strbuf_detach(&sb, NULL);
	g->acquisition_in_flight = true;
	json_object_put(g->binding);
	g->binding = lifecycle_binding_json(m);
	guest_save(g);
	manager_unlock(m);
}

/* Closes a guest that got no lease (steps 11-12). */
static tool_result *not_acquired(manager *m, guest *g, const char *code, const char *message)
{
	lifecycle_registry_remove(m, g);
	guest_close(m, g, "not-acquired");
	return guest_error(m, g, NULL, code, "%s", message);
}

static json_object *parse_owned(char *text)
{
	json_object *obj = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	return obj;
}

/* Step 5: the image must be offered and its base available. */
static tool_result *check_image(manager *m, guest *g, loaded_plugin *machine, relay_call *call)
{
	char *images_text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = machine->machine.images(machine->state, call, 0, &images_text, &err);
	if (st != RELAY_OK) {
		free(images_text);
		return not_acquired(m, g, "backend-unavailable",
		                    err.message[0] ? err.message : relay_status_str(st));
	}
	json_object *inventory = parse_owned(images_text);
	json_object *images = jsonx_get_obj(inventory, "images");
	json_object *entry = jsonx_get_obj(images, g->image);
	bool available = false;
	if (entry)
		jsonx_get_bool(entry, "base_available", &available);
	tool_result *refusal = NULL;
	if (!available) {
		strbuf keys = STRBUF_INIT;
		if (images) {
			json_object_object_foreach(images, key, value)
			{
				(void)value;
				if (keys.len)
					strbuf_puts(&keys, ", ");
				strbuf_puts(&keys, key);
			}
		}
		char message[1024];
		snprintf(message, sizeof message, "Image unavailable: %s%s. Images offered: %s", g->image,
		         entry ? " (its base image is not available now)" : " is not offered by this backend",
		         keys.len ? strbuf_str(&keys) : "none");
		strbuf_free(&keys);
		refusal = not_acquired(m, g, "image-unavailable", message);
	}
	json_object_put(inventory);
	return refusal;
}

static char *acquire_spec(manager *m, guest *g)
{
	manager_lock(m);
	json_object *spec = json_object_new_object();
	jsonx_add_str(spec, "guest", g->name);
	jsonx_add_str(spec, "task", g->task);
	jsonx_add_str(spec, "purpose", g->purpose);
	jsonx_add_str(spec, "image", g->image);
	jsonx_add_str(spec, "env", g->env_pack);
	jsonx_add_str(spec, "network", g->network);
	jsonx_add_bool(spec, "vnc", g->vnc);
	int64_t ttl_ms = (int64_t)llround(g->ttl_hours * 3600000.0);
	jsonx_add_int(spec, "ttlMs", ttl_ms < RENEWAL_WINDOW_MS ? ttl_ms : RENEWAL_WINDOW_MS);
	jsonx_add_int(spec, "deadlineMs", g->deadline_ms);
	manager_unlock(m);
	char *text = jsonx_to_string(spec, 0);
	json_object_put(spec);
	return text;
}

/* Stores an arrived lease (step 14). Under no lock. */
static void adopt_lease(manager *m, guest *g, json_object *lease)
{
	manager_lock(m);
	json_object_put(g->lease);
	g->lease = lease;
	g->acquisition_in_flight = false;
	int64_t expires = 0;
	if (jsonx_get_int(lease, "expiresAtMs", &expires))
		g->expires_at_ms = expires;
	const char *state = jsonx_get_str(lease, "state");
	free(g->guest_state);
	g->guest_state = strdup(state ? state : "unknown");
	g->last_renewed_at_ms = clock_now_ms();
	g->phase = PHASE_READY;
	g->renewal = RENEWAL_RENEWING;
	g->waiting_since_ms = 0;
	free(g->capacity_reason);
	g->capacity_reason = NULL;
	guest_save(g);
	manager_unlock(m);
	lifecycle_renewal_start(m, g);
}

/* Step 13: an unknown outcome is reconciled by purpose, once (10 s), on a
 * call of its own so that a cancelled acquisition can still be settled. */
static tool_result *reconcile_unknown(manager *m, guest *g, loaded_plugin *machine, const char *why)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	char *found_text = NULL;
	relay_call *lookup = manager_internal_call(m, LIFECYCLE_LOOKUP_TIMEOUT_MS);
	relay_status st =
	    machine->machine.find_by_purpose
	        ? machine->machine.find_by_purpose(machine->state, g->purpose, lookup, 0, &found_text, &err)
	        : RELAY_E_UNSUPPORTED;
	manager_internal_call_done(m, lookup);
	if (st == RELAY_OK) {
		json_object *found = parse_owned(found_text);
		if (json_object_is_type(found, json_type_array) && json_object_array_length(found) == 1) {
			json_object *lease = json_object_get(json_object_array_get_idx(found, 0));
			json_object_put(found);
			adopt_lease(m, g, lease);
			return NULL;
		}
		json_object_put(found);
	} else {
		free(found_text);
	}
	manager_lock(m);
	g->phase = PHASE_ACQUISITION_UNCERTAIN;
	free(g->last_error);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "acquisition outcome unknown for purpose %s (%s)", g->purpose, why);
	g->last_error = strbuf_detach(&sb, NULL);
	guest_save(g);
	manager_unlock(m);
	json_object *structured = json_object_new_object();
	jsonx_add_str(structured, "guest", g->name);
	return guest_error(
	    m, g, structured, "outcome-unknown",
	    "acquisition outcome unknown for purpose %s; ownership is kept as %s; reconcile with "
	    "relay_status or relay_release; never acquire again blindly (%s)",
	    g->purpose, g->name, why);
}

static json_object *acquire_result(manager *m, guest *g)
{
	manager_lock(m);
	json_object *r = json_object_new_object();
	char when[21];
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_str(r, "task", g->task);
	jsonx_add_str(r, "image", g->image);
	jsonx_add_str(r, "purpose", g->purpose);
	jsonx_add_str(r, "vm", jsonx_get_str(g->lease, "vm"));
	jsonx_add_str(r, "lease_id", jsonx_get_str(g->lease, "lease_id"));
	jsonx_add_str(r, "network", g->network);
	jsonx_add_double(r, "ttlHours", g->ttl_hours);
	time_format_iso_seconds(g->acquired_at_ms, when);
	jsonx_add_str(r, "acquiredAt", when);
	time_format_iso_seconds(g->deadline_ms, when);
	jsonx_add_str(r, "deadline", when);
	if (g->expires_at_ms > 0) {
		time_format_iso_seconds(g->expires_at_ms, when);
		jsonx_add_str(r, "expiresAt", when);
	} else {
		jsonx_add_null(r, "expiresAt");
	}
	jsonx_add_int(r, "waitedForCapacityMs", g->waited_for_capacity_ms);
	jsonx_add_str(r, "guestRoot", g->guest_root);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/workspace", g->guest_root);
	jsonx_add_str(r, "workspace", strbuf_str(&sb));
	strbuf_free(&sb);
	jsonx_add(r, "declarations", json_object_get(g->extractions));
	jsonx_add_bool(r, "fullWorkspace", g->full_workspace);
	jsonx_add(r, "console", g->console ? json_object_get(g->console) : NULL);
	jsonx_add_str(r, "evidencePath", g->evidence_path);
	jsonx_add(r, "guestsHeld", manager_open_guest_names_json(m));
	jsonx_add_int(r, "maxGuests", m->settings->max_guests);
	manager_unlock(m);
	return r;
}

tool_result *tool_acquire(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	char errbuf[512];
	manager_wait_startup(m);
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	if (relay_call_is_cancelled(call))
		return not_acquired(m, g, "shutting-down",
		                    "the acquisition was cancelled before any request");
	if (session_ending(m))
		return not_acquired(
		    m, g, "shutting-down",
		    "The session is ending; the acquisition stopped before its lease request and nothing "
		    "was leased");
	if (machine == NULL) {
		snprintf(errbuf, sizeof errbuf, "the machine backend is not available: %s",
		         m->backends->load_errors[SLOT_MACHINE] ? m->backends->load_errors[SLOT_MACHINE]
		                                                : "no machine plugin is configured");
		return not_acquired(m, g, "backend-unavailable", errbuf);
	}
	relay_error err;
	memset(&err, 0, sizeof err);
	/* Step 4: backend identity. */
	if (machine->machine.health) {
		char *health = NULL;
		relay_status st = machine->machine.health(machine->state, call, 0, &health, &err);
		free(health);
		if (st != RELAY_OK)
			return not_acquired(m, g,
			                    st == RELAY_E_ENVIRONMENT_MISMATCH ? "environment-mismatch"
			                                                       : "backend-unavailable",
			                    err.message[0] ? err.message : relay_status_str(st));
	}
	/* Step 5: the image. */
	tool_result *refusal = check_image(m, g, machine, call);
	if (refusal)
		return refusal;
	/* Step 6: with vnc, the console backend of the image's OS must be
	 * available (console_vnc_check reads the acquisition capabilities
	 * through the console plugin; manager/console_report.c). */
	if (g->vnc) {
		const char *vnc_code = NULL;
		char vnc_message[512];
		if (console_vnc_check(m, g->image, call, &vnc_code, vnc_message, sizeof vnc_message) != 0)
			return not_acquired(m, g, vnc_code, vnc_message);
	}
	/* Steps 7-8: identities, the record, the registry row, the intent. */
	fix_identities(m, g);
	if (guest_ensure_evidence_dir(m, g, errbuf, sizeof errbuf) != 0)
		return not_acquired(m, g, "path-refused", errbuf);
	tool_result *conflict = lifecycle_registry_add(m, g);
	if (conflict) {
		guest_close(m, g, "not-acquired");
		return conflict;
	}
	guest_event(m, g, "acquire-intent", "relay_acquire", NULL);
	RELAY_FAILPOINT("acquire.after-intent");
	lifecycle_copy_probes(m, g);

	/* Steps 9-11: the lease request, waiting for capacity. */
	char *spec = acquire_spec(m, g);
	int64_t first_capacity_ms = 0;
	double progress = 0;
	relay_call_progress(call, ++progress, -1, "lease requested", true);
	for (;;) {
		char *lease_text = NULL;
		memset(&err, 0, sizeof err);
		/* Not yet sent: the end of the session or a cancellation stops
		 * the acquisition here, with nothing leased. */
		if (session_ending(m) || relay_call_is_cancelled(call)) {
			free(spec);
			bool cancelled = relay_call_is_cancelled(call);
			if (cancelled)
				lifecycle_record_cancelled(
				    m, g, "relay_acquire", false,
				    "cancelled before the lease request; nothing was leased");
			return not_acquired(
			    m, g, "shutting-down",
			    cancelled ? "the acquisition was cancelled before its lease request; nothing "
			                "was leased"
			              : "The session is ending; the acquisition stopped before its "
			                "lease request and nothing was leased");
		}
		int64_t attempt_started_ms = clock_now_ms();
		RELAY_FAILPOINT("acquire.before-request");
		relay_status st = machine->machine.acquire(machine->state, spec, call, 0, &lease_text, &err);
		if (st == RELAY_OK) {
			RELAY_FAILPOINT("acquire.after-request");
			json_object *lease = parse_owned(lease_text);
			if (lease == NULL || jsonx_get_str(lease, "vm") == NULL) {
				json_object_put(lease);
				free(spec);
				spec = NULL;
				tool_result *unknown = reconcile_unknown(
				    m, g, machine, "the backend answered a malformed lease");
				if (unknown)
					return unknown;
				break;
			}
			manager_lock(m);
			g->waited_for_capacity_ms =
			    first_capacity_ms ? attempt_started_ms - first_capacity_ms : 0;
			manager_unlock(m);
			adopt_lease(m, g, lease);
			RELAY_FAILPOINT("acquire.after-adopt");
			break;
		}
		free(lease_text);
		if (st == RELAY_E_CAPACITY) {
			int64_t now = clock_now_ms();
			if (first_capacity_ms == 0)
				first_capacity_ms = now;
			int64_t waited = now - first_capacity_ms;
			int64_t next_attempt = now + CAPACITY_RETRY_MS;
			int64_t budget_ms = m->settings->capacity_wait_s * 1000;
			json_object *details = json_object_new_object();
			jsonx_add_str(details, "reason", err.message);
			jsonx_add_int(details, "waitedMs", waited);
			guest_event(m, g, "capacity-wait", err.message, details);
			manager_lock(m);
			g->phase = PHASE_WAITING_FOR_CAPACITY;
			if (g->waiting_since_ms == 0)
				g->waiting_since_ms = first_capacity_ms;
			g->waited_for_capacity_ms = waited;
			free(g->capacity_reason);
			g->capacity_reason = strdup(err.message);
			guest_save(g);
			manager_unlock(m);
			if (next_attempt - first_capacity_ms > budget_ms) {
				free(spec);
				lifecycle_registry_remove(m, g);
				guest_close(m, g, "not-acquired");
				json_object *s = json_object_new_object();
				jsonx_add_int(s, "waitedForCapacityMs", waited);
				jsonx_add_int(s, "capacityWaitSeconds", m->settings->capacity_wait_s);
				return guest_error(
				    m, g, s, "capacity-timeout",
				    "The host stayed at capacity: %s; waited %lld s of the %lld s "
				    "MCP_RELAY_CAPACITY_WAIT allows; nothing was leased",
				    err.message, (long long)(waited / 1000),
				    (long long)m->settings->capacity_wait_s);
			}
			char message[RELAY_ERROR_MESSAGE_BYTES + 600];
			snprintf(message, sizeof message,
			         "host at capacity: %s; asking again in 15 s; waited %lld s of %lld s",
			         err.message, (long long)(waited / 1000),
			         (long long)m->settings->capacity_wait_s);
			relay_call_progress(call, ++progress, -1, message, true);
			if (lifecycle_wait_until(m, call, next_attempt) != 0) {
				free(spec);
				if (relay_call_is_cancelled(call))
					lifecycle_record_cancelled(
					    m, g, "relay_acquire", false,
					    "cancelled while waiting for capacity; nothing was "
					    "leased");
				return not_acquired(
				    m, g, "shutting-down",
				    "the capacity wait was stopped (the call was cancelled or the session is "
				    "ending); nothing was leased");
			}
			continue;
		}
		if (st == RELAY_E_CANCELLED) {
			/* Cancelled after the request was sent: its effect is not
			 * known. It is settled by purpose, never sent again. */
			free(spec);
			lifecycle_record_cancelled(
			    m, g, "relay_acquire", true,
			    "cancelled after the lease request was sent; its outcome is uncertain");
			tool_result *unknown = reconcile_unknown(
			    m, g, machine, "the acquisition was cancelled after its lease request was sent");
			if (unknown)
				return unknown;
			guest_set_last_error(
			    m, g,
			    "the acquisition was cancelled after the lease request was sent; the lease "
			    "arrived and is kept: finish or release %s",
			    g->name);
			guest_event(m, g, "acquire",
			            "relay_acquire (cancelled after dispatch; the lease is kept)", NULL);
			return guest_error(
			    m, g, NULL, "shutting-down",
			    "the acquisition of %s was cancelled after its lease request; the lease that "
			    "arrived is kept and renewed: finish or release it",
			    g->name);
		}
		free(spec);
		spec = NULL;
		bool adopted = false;
		switch (st) {
		case RELAY_E_IMAGE_UNAVAILABLE: return not_acquired(m, g, "image-unavailable", err.message);
		case RELAY_E_REFUSED: return not_acquired(m, g, "backend-refused", err.message);
		case RELAY_E_UNAVAILABLE: return not_acquired(m, g, "backend-unavailable", err.message);
		case RELAY_E_ENVIRONMENT_MISMATCH:
			return not_acquired(m, g, "environment-mismatch", err.message);
		case RELAY_E_INVALID_ARGUMENT:
		case RELAY_E_UNSUPPORTED:
		case RELAY_E_UNSUPPORTED_FLAGS: return not_acquired(m, g, "backend-refused", err.message);
		default: {
			/* Step 13: NULL when exactly one lease was found and adopted. */
			tool_result *unknown = reconcile_unknown(
			    m, g, machine, err.message[0] ? err.message : relay_status_str(st));
			if (unknown)
				return unknown;
			adopted = true;
			break;
		}
		}
		if (adopted)
			break;
	}
	free(spec);

	/* Step 14: with vnc, the lease must carry its identity and a ready console. */
	if (g->vnc) {
		manager_lock(m);
		json_object *console = jsonx_get_obj(g->lease, "console");
		const char *status = jsonx_get_str(console, "status");
		bool ok = jsonx_get_str(g->lease, "lease_id") && jsonx_get_str(console, "console_id") &&
		          status && strcmp(status, "ready") == 0;
		if (ok) {
			/* Stored as the relay's observation (console_report.h). */
			json_object *observation = console_observation(console);
			json_object_put(g->console);
			g->console = observation ? observation : json_object_get(console);
		}
		manager_unlock(m);
		if (!ok) {
			guest_set_last_error(
			    m, g, "VNC acquisition did not return a ready console and lease identity");
			return guest_error(
			    m, g, NULL, "outcome-unknown",
			    "VNC acquisition did not return a ready console and lease identity; ownership "
			    "kept for reconciliation");
		}
	}
	relay_call_progress(call, ++progress, -1, "lease granted", true);
	if (relay_call_is_cancelled(call))
		guest_set_last_error(
		    m, g,
		    "the acquisition was cancelled after the lease request was sent; the lease "
		    "arrived and is kept: finish or release %s",
		    g->name);
	json_object *acquired = json_object_new_object();
	manager_lock(m);
	jsonx_add_str(acquired, "guest", g->name);
	jsonx_add_str(acquired, "task", g->task);
	jsonx_add_str(acquired, "image", g->image);
	jsonx_add_str(acquired, "purpose", g->purpose);
	jsonx_add_str(acquired, "vm", g->lease ? jsonx_get_str(g->lease, "vm") : NULL);
	jsonx_add_str(acquired, "network", g->network);
	manager_unlock(m);
	guest_event(m, g, "acquire", "relay_acquire", acquired);
	json_object *result = acquire_result(m, g);
	int64_t waited = g->waited_for_capacity_ms;
	char deadline[21];
	time_format_iso_seconds(g->deadline_ms, deadline);
	if (waited > 0)
		return tool_result_ok(
		    result,
		    "Acquired guest %s (%s) for task %s; lease deadline %s; waited %lld s for "
		    "capacity; next: relay_stage",
		    g->name, g->image, g->task, deadline, (long long)(waited / 1000));
	return tool_result_ok(result,
	                      "Acquired guest %s (%s) for task %s; lease deadline %s; next: relay_stage",
	                      g->name, g->image, g->task, deadline);
}
