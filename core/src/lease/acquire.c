/*
 * relay_acquire's lease (spec/tools.md §3.4 steps 4-14): the backend and image
 * checks, the identities and record, the registry row, the lease request
 * with its capacity wait, the reconciliation of an unknown outcome, and the
 * console a vnc acquisition must carry. The name was reserved at dispatch
 * (session_reserve_guest); the result is built by tools/tool_acquire.c.
 */
#include "lease/acquire.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/delivery_state.h"
#include "lease/egress.h"
#include "lease/lifecycle.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/jsonx.h"
#include "util/randx.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

static bool session_ending(session_manager *m)
{
	session_lock(m);
	bool ending = m->ending;
	session_unlock(m);
	return ending;
}

/* Fills the identities of step 7 under the lock. */
static void fix_identities(session_manager *m, guest *g)
{
	char hex[9], stamp[22];
	random_hex(hex, 8);
	int64_t now = clock_now_ms();
	time_format_stamp(now, stamp);
	session_lock(m);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "relay-%s-%s", g->task, hex);
	g->purpose = strbuf_detach(&sb, NULL);
	g->acquired_at_ms = now;
	g->lease->deadline_ms = now + (int64_t)llround(g->lease->ttl_hours * 3600000.0);
	strbuf_printf(&sb, "%s/relay-evidence/%s", m->settings->project, g->purpose);
	g->evidence_path = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "/var/tmp/%s-mcp-relay-%s", stamp, g->purpose);
	g->guest_root = strbuf_detach(&sb, NULL);
	g->lease->acquisition_in_flight = true;
	json_object_put(g->binding);
	g->binding = lease_binding_json(m);
	guest_save(g);
	session_unlock(m);
}

/* Closes a guest that got no lease (steps 11-12). Returns -1. */
static int not_acquired(session_manager *m, guest *g, relay_outcome *o, const char *code, const char *message)
{
	lease_registry_remove(m, g);
	guest_close(m, g, "not-acquired");
	return outcome_fail(o, code, "%s", message);
}

/* Step 5: the image must be offered and its base available. */
static int check_image(session_manager *m, guest *g, loaded_plugin *machine, relay_call *call,
                       relay_outcome *o)
{
	char *images_text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = machine->machine.images(machine->state, call, 0, &images_text, &err);
	if (st != RELAY_OK) {
		free(images_text);
		return not_acquired(m, g, o, "backend-unavailable",
		                    err.message[0] ? err.message : relay_status_str(st));
	}
	json_object *inventory = lease_parse_taken(images_text);
	json_object *images = jsonx_get_obj(inventory, "images");
	json_object *entry = jsonx_get_obj(images, g->image);
	bool available = false, fetchable = false;
	if (entry) {
		jsonx_get_bool(entry, "base_available", &available);
		/* A base the backend fetches at acquire (an engine's pull) is
		 * asked for: the backend's refusal then says why it is missing. */
		jsonx_get_bool(entry, "base_fetchable", &fetchable);
		available = available || fetchable;
	}
	int rc = 0;
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
		rc = not_acquired(m, g, o, "image-unavailable", message);
	}
	json_object_put(inventory);
	return rc;
}

static char *acquire_spec(session_manager *m, guest *g, bool vnc)
{
	session_lock(m);
	json_object *spec = json_object_new_object();
	jsonx_add_str(spec, "guest", g->name);
	jsonx_add_str(spec, "task", g->task);
	jsonx_add_str(spec, "purpose", g->purpose);
	jsonx_add_str(spec, "image", g->image);
	jsonx_add_str(spec, "env", g->lease->env_pack);
	jsonx_add_str(spec, "network", g->network);
	jsonx_add_bool(spec, "vnc", vnc);
	int64_t ttl_ms = (int64_t)llround(g->lease->ttl_hours * 3600000.0);
	jsonx_add_int(spec, "ttlMs",
	              ttl_ms < LIFECYCLE_RENEWAL_WINDOW_MS ? ttl_ms : LIFECYCLE_RENEWAL_WINDOW_MS);
	jsonx_add_int(spec, "deadlineMs", g->lease->deadline_ms);
	session_unlock(m);
	char *text = jsonx_to_string(spec, 0);
	json_object_put(spec);
	return text;
}

/* Stores an arrived lease (step 14). Under no lock. */
static void adopt_lease(session_manager *m, guest *g, json_object *lease)
{
	session_lock(m);
	json_object_put(g->lease_document);
	g->lease_document = lease;
	g->lease->acquisition_in_flight = false;
	int64_t expires = 0;
	if (jsonx_get_int(lease, "expiresAtMs", &expires))
		g->lease->expires_at_ms = expires;
	const char *state = jsonx_get_str(lease, "state");
	lease_set_guest_state(g, state);
	g->lease->last_renewed_at_ms = clock_now_ms();
	g->phase = PHASE_READY;
	g->lease->renewal = RENEWAL_RENEWING;
	g->lease->waiting_since_ms = 0;
	free(g->lease->capacity_reason);
	g->lease->capacity_reason = NULL;
	guest_save(g);
	session_unlock(m);
	lease_renewal_begin(m, g);
}

/* Step 13: an unknown outcome is reconciled by purpose, once (10 s), on a
 * call of its own so that a cancelled acquisition can still be settled.
 * 0 when exactly one lease was found and adopted; else -1 with
 * outcome-unknown in `o` (the guest kept, phase acquisition-uncertain). */
static int reconcile_unknown(session_manager *m, guest *g, loaded_plugin *machine, const char *why,
                             relay_outcome *o)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	char *found_text = NULL;
	relay_call *lookup = session_internal_call(m, LIFECYCLE_LOOKUP_TIMEOUT_MS);
	relay_status st =
	    machine->machine.find_by_purpose
	        ? machine->machine.find_by_purpose(machine->state, g->purpose, lookup, 0, &found_text, &err)
	        : RELAY_E_UNSUPPORTED;
	session_internal_call_done(m, lookup);
	if (st == RELAY_OK) {
		json_object *found = lease_parse_taken(found_text);
		if (json_object_is_type(found, json_type_array) && json_object_array_length(found) == 1) {
			json_object *lease = json_object_get(json_object_array_get_idx(found, 0));
			json_object_put(found);
			adopt_lease(m, g, lease);
			return 0;
		}
		json_object_put(found);
	} else {
		free(found_text);
	}
	session_lock(m);
	g->phase = PHASE_ACQUISITION_UNCERTAIN;
	free(g->last_error);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "acquisition outcome unknown for purpose %s (%s)", g->purpose, why);
	g->last_error = strbuf_detach(&sb, NULL);
	guest_save(g);
	session_unlock(m);
	jsonx_add_str(outcome_facts(o), "guest", g->name);
	return outcome_fail(
	    o, "outcome-unknown",
	    "acquisition outcome unknown for purpose %s; ownership is kept as %s; reconcile with "
	    "relay_status or relay_release; never acquire again blindly (%s)",
	    g->purpose, g->name, why);
}

static json_object *acquire_result(session_manager *m, guest *g, const lease_acquire_console *console_room)
{
	session_lock(m);
	json_object *r = json_object_new_object();
	char when[21];
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_str(r, "task", g->task);
	jsonx_add_str(r, "image", g->image);
	jsonx_add_str(r, "purpose", g->purpose);
	jsonx_add_str(r, "vm", jsonx_get_str(g->lease_document, "vm"));
	jsonx_add_str(r, "lease_id", jsonx_get_str(g->lease_document, "lease_id"));
	jsonx_add_str(r, "network", g->network);
	jsonx_add_double(r, "ttlHours", g->lease->ttl_hours);
	time_format_iso_seconds(g->acquired_at_ms, when);
	jsonx_add_str(r, "acquiredAt", when);
	time_format_iso_seconds(g->lease->deadline_ms, when);
	jsonx_add_str(r, "deadline", when);
	if (g->lease->expires_at_ms > 0) {
		time_format_iso_seconds(g->lease->expires_at_ms, when);
		jsonx_add_str(r, "expiresAt", when);
	} else {
		jsonx_add_null(r, "expiresAt");
	}
	jsonx_add_int(r, "waitedForCapacityMs", g->lease->waited_for_capacity_ms);
	jsonx_add_str(r, "guestRoot", g->guest_root);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/workspace", g->guest_root);
	jsonx_add_str(r, "workspace", strbuf_str(&sb));
	strbuf_free(&sb);
	jsonx_add(r, "declarations", json_object_get(g->delivery->extractions));
	jsonx_add_bool(r, "fullWorkspace", g->delivery->full_workspace);
	jsonx_add(r, "console", console_room->observation_of(g));
	jsonx_add_str(r, "evidencePath", g->evidence_path);
	jsonx_add(r, "guestsHeld", session_open_guest_names_json(m));
	jsonx_add_int(r, "maxGuests", m->settings->max_guests);
	session_unlock(m);
	return r;
}

/* Steps 4-6, before anything is recorded: the session still takes work, the
 * backend answers for its identity, the image is offered, and with vnc the
 * console backend of the image's OS is available. 0, or -1 (closed). */
static int acquire_checks(session_manager *m, guest *g, loaded_plugin *machine, relay_call *call,
                          const lease_acquire_console *console, relay_outcome *o)
{
	char errbuf[512];
	if (relay_call_is_cancelled(call))
		return not_acquired(m, g, o, "shutting-down",
		                    "the acquisition was cancelled before any request");
	if (session_ending(m))
		return not_acquired(
		    m, g, o, "shutting-down",
		    "The session is ending; the acquisition stopped before its lease request and nothing "
		    "was leased");
	if (machine == NULL) {
		snprintf(errbuf, sizeof errbuf, "the machine backend is not available: %s",
		         m->backends->load_errors[SLOT_MACHINE] ? m->backends->load_errors[SLOT_MACHINE]
		                                                : "no machine plugin is configured");
		return not_acquired(m, g, o, "backend-unavailable", errbuf);
	}
	relay_error err;
	memset(&err, 0, sizeof err);
	/* Step 4: backend identity. */
	if (machine->machine.health) {
		char *health = NULL;
		relay_status st = machine->machine.health(machine->state, call, 0, &health, &err);
		free(health);
		if (st != RELAY_OK)
			return not_acquired(m, g, o,
			                    st == RELAY_E_ENVIRONMENT_MISMATCH ? "environment-mismatch"
			                                                       : "backend-unavailable",
			                    err.message[0] ? err.message : relay_status_str(st));
	}
	/* The network: a plugin that cannot serve the egress proxy cannot give
	 * allow or internet (spec/lifecycle.md §14: never a fallback to nat). */
	char egress_msg[512];
	if (lease_egress_check(machine, g->network, egress_msg, sizeof egress_msg) != 0)
		return not_acquired(m, g, o, "backend-refused", egress_msg);
	/* Step 5: the image. */
	if (check_image(m, g, machine, call, o) != 0)
		return -1;
	/* Step 6: with vnc, the console backend of the image's OS must be
	 * available (the console room reads the acquisition capabilities
	 * through the console plugin). */
	if (console->vnc_wanted(g)) {
		const char *vnc_code = NULL;
		char vnc_message[512];
		if (console->vnc_check(m, g->image, call, &vnc_code, vnc_message, sizeof vnc_message) != 0)
			return not_acquired(m, g, o, vnc_code, vnc_message);
	}
	return 0;
}

/* Steps 7-8: identities, the record, the registry row, the intent. 0, or
 * -1 (closed). */
static int acquire_record(session_manager *m, guest *g, relay_outcome *o)
{
	char errbuf[512];
	fix_identities(m, g);
	if (guest_ensure_evidence_dir(m, g, errbuf, sizeof errbuf) != 0)
		return not_acquired(m, g, o, "path-refused", errbuf);
	if (lease_registry_add(m, g, o) != 0) {
		/* The result shows the guest as it was when the row was refused. */
		session_lock(m);
		jsonx_add(outcome_facts(o), "guestState", guest_status_json(g));
		session_unlock(m);
		guest_close(m, g, "not-acquired");
		return -1;
	}
	guest_event(m, g, "acquire-intent", "relay_acquire", NULL);
	RELAY_FAILPOINT("acquire.after-intent");
	lease_copy_probes(m, g);
	return 0;
}

/* The capacity wait of one lease request (steps 9-10). */
typedef struct capacity_wait {
	int64_t first_ms; /* relay time of the first capacity answer; 0: none yet */
	double progress;  /* the call's progress counter */
} capacity_wait;

/* A capacity answer (`reason`): records the wait, and either waits for the
 * next attempt (0) or ends the acquisition when the budget is spent or
 * the wait is stopped (-1, closed). */
static int wait_for_capacity(session_manager *m, guest *g, relay_call *call, capacity_wait *w,
                             const char *reason, relay_outcome *o)
{
	int64_t now = clock_now_ms();
	if (w->first_ms == 0)
		w->first_ms = now;
	int64_t waited = now - w->first_ms;
	int64_t next_attempt = now + LIFECYCLE_CAPACITY_RETRY_MS;
	int64_t budget_ms = m->settings->capacity_wait_s * 1000;
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "reason", reason);
	jsonx_add_int(details, "waitedMs", waited);
	guest_event(m, g, "capacity-wait", reason, details);
	session_lock(m);
	g->phase = PHASE_WAITING_FOR_CAPACITY;
	if (g->lease->waiting_since_ms == 0)
		g->lease->waiting_since_ms = w->first_ms;
	g->lease->waited_for_capacity_ms = waited;
	free(g->lease->capacity_reason);
	g->lease->capacity_reason = strdup(reason);
	guest_save(g);
	session_unlock(m);
	if (next_attempt - w->first_ms > budget_ms) {
		lease_registry_remove(m, g);
		guest_close(m, g, "not-acquired");
		jsonx_add_int(outcome_facts(o), "waitedForCapacityMs", waited);
		jsonx_add_int(outcome_facts(o), "capacityWaitSeconds", m->settings->capacity_wait_s);
		return outcome_fail(o, "capacity-timeout",
		                    "The host stayed at capacity: %s; waited %lld s of the %lld s "
		                    "MCP_RELAY_CAPACITY_WAIT allows; nothing was leased",
		                    reason, (long long)(waited / 1000),
		                    (long long)m->settings->capacity_wait_s);
	}
	char message[RELAY_ERROR_MESSAGE_BYTES + 600];
	snprintf(message, sizeof message,
	         "host at capacity: %s; asking again in 15 s; waited %lld s of %lld s", reason,
	         (long long)(waited / 1000), (long long)m->settings->capacity_wait_s);
	relay_call_progress(call, ++w->progress, -1, message, true);
	if (lease_wait_until(m, call, next_attempt) != 0) {
		if (relay_call_is_cancelled(call))
			lifecycle_record_cancelled(m, g, "relay_acquire", false,
			                           "cancelled while waiting for capacity; nothing was "
			                           "leased");
		return not_acquired(m, g, o, "shutting-down",
		                    "the capacity wait was stopped (the call was cancelled or the session is "
		                    "ending); nothing was leased");
	}
	return 0;
}

/* Cancelled after the request was sent: its effect is not known. It is
 * settled by purpose, never sent again. Returns -1 (shutting-down when the
 * lease arrived and is kept, outcome-unknown otherwise). */
static int cancelled_after_request(session_manager *m, guest *g, loaded_plugin *machine, relay_outcome *o)
{
	lifecycle_record_cancelled(m, g, "relay_acquire", true,
	                           "cancelled after the lease request was sent; its outcome is uncertain");
	if (reconcile_unknown(m, g, machine, "the acquisition was cancelled after its lease request was sent",
	                      o) != 0)
		return -1;
	guest_set_last_error(m, g,
	                     "the acquisition was cancelled after the lease request was sent; the lease "
	                     "arrived and is kept: finish or release %s",
	                     g->name);
	guest_event(m, g, "acquire", "relay_acquire (cancelled after dispatch; the lease is kept)", NULL);
	return outcome_fail(o, "shutting-down",
	                    "the acquisition of %s was cancelled after its lease request; the lease that "
	                    "arrived is kept and renewed: finish or release it",
	                    g->name);
}

/* A refusal of the lease request (step 11-12), or an unknown outcome
 * (step 13). 0 when a lease was found and adopted; else -1. */
static int request_failed(session_manager *m, guest *g, loaded_plugin *machine, relay_status st,
                          const relay_error *err, relay_outcome *o)
{
	switch (st) {
	case RELAY_E_IMAGE_UNAVAILABLE: return not_acquired(m, g, o, "image-unavailable", err->message);
	case RELAY_E_REFUSED: return not_acquired(m, g, o, "backend-refused", err->message);
	case RELAY_E_UNAVAILABLE: return not_acquired(m, g, o, "backend-unavailable", err->message);
	case RELAY_E_ENVIRONMENT_MISMATCH: return not_acquired(m, g, o, "environment-mismatch", err->message);
	case RELAY_E_INVALID_ARGUMENT:
	case RELAY_E_UNSUPPORTED:
	case RELAY_E_UNSUPPORTED_FLAGS: return not_acquired(m, g, o, "backend-refused", err->message);
	default:
		return reconcile_unknown(m, g, machine, err->message[0] ? err->message : relay_status_str(st),
		                         o);
	}
}

/* Steps 9-13: the lease request, waiting for capacity. 0 with the lease
 * adopted (renewal started); else -1. */
static int request_lease(session_manager *m, guest *g, loaded_plugin *machine, relay_call *call, bool vnc,
                         capacity_wait *w, relay_outcome *o)
{
	char *spec = acquire_spec(m, g, vnc);
	int rc = -1;
	relay_call_progress(call, ++w->progress, -1, "lease requested", true);
	for (;;) {
		char *lease_text = NULL;
		relay_error err;
		memset(&err, 0, sizeof err);
		/* Not yet sent: the end of the session or a cancellation stops
		 * the acquisition here, with nothing leased. */
		if (session_ending(m) || relay_call_is_cancelled(call)) {
			bool cancelled = relay_call_is_cancelled(call);
			if (cancelled)
				lifecycle_record_cancelled(
				    m, g, "relay_acquire", false,
				    "cancelled before the lease request; nothing was leased");
			rc = not_acquired(
			    m, g, o, "shutting-down",
			    cancelled ? "the acquisition was cancelled before its lease request; nothing "
			                "was leased"
			              : "The session is ending; the acquisition stopped before its "
			                "lease request and nothing was leased");
			break;
		}
		int64_t attempt_started_ms = clock_now_ms();
		RELAY_FAILPOINT("acquire.before-request");
		relay_status st = machine->machine.acquire(machine->state, spec, call, 0, &lease_text, &err);
		if (st == RELAY_OK) {
			RELAY_FAILPOINT("acquire.after-request");
			json_object *lease = lease_parse_taken(lease_text);
			if (lease == NULL || jsonx_get_str(lease, "vm") == NULL) {
				json_object_put(lease);
				rc = reconcile_unknown(m, g, machine,
				                       "the backend answered a malformed lease", o);
				break;
			}
			session_lock(m);
			g->lease->waited_for_capacity_ms = w->first_ms ? attempt_started_ms - w->first_ms : 0;
			session_unlock(m);
			adopt_lease(m, g, lease);
			RELAY_FAILPOINT("acquire.after-adopt");
			rc = 0;
			break;
		}
		free(lease_text);
		if (st == RELAY_E_CAPACITY) {
			if (wait_for_capacity(m, g, call, w, err.message, o) != 0)
				break;
			continue;
		}
		rc = st == RELAY_E_CANCELLED ? cancelled_after_request(m, g, machine, o)
		                             : request_failed(m, g, machine, st, &err, o);
		break;
	}
	free(spec);
	return rc;
}

/* Step 14: with vnc, the lease must carry its identity and a ready
 * console, stored as the relay's observation (the console room's). 0, or -1
 * with outcome-unknown (ownership kept). */
static int check_console(session_manager *m, guest *g, const lease_acquire_console *console_room,
                         relay_outcome *o)
{
	if (!console_room->vnc_wanted(g))
		return 0;
	session_lock(m);
	json_object *console = jsonx_get_obj(g->lease_document, "console");
	const char *status = jsonx_get_str(console, "status");
	bool ok = jsonx_get_str(g->lease_document, "lease_id") && jsonx_get_str(console, "console_id") &&
	          status && strcmp(status, "ready") == 0;
	if (ok)
		console_room->store_observation(g, console);
	session_unlock(m);
	if (ok)
		return 0;
	guest_set_last_error(m, g, "VNC acquisition did not return a ready console and lease identity");
	return outcome_fail(o, "outcome-unknown",
	                    "VNC acquisition did not return a ready console and lease identity; ownership "
	                    "kept for reconciliation");
}

int lease_acquire(session_manager *m, guest *g, relay_call *call, const lease_acquire_console *console,
                  relay_outcome *o)
{
	session_wait_startup(m);
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	capacity_wait wait = {0, 0};
	if (acquire_checks(m, g, machine, call, console, o) != 0 || acquire_record(m, g, o) != 0 ||
	    request_lease(m, g, machine, call, console->vnc_wanted(g), &wait, o) != 0)
		return -1;
	lease_egress_start(m, g, machine);
	if (check_console(m, g, console, o) != 0)
		return -1;
	relay_call_progress(call, ++wait.progress, -1, "lease granted", true);
	if (relay_call_is_cancelled(call))
		guest_set_last_error(
		    m, g,
		    "the acquisition was cancelled after the lease request was sent; the lease "
		    "arrived and is kept: finish or release %s",
		    g->name);
	json_object *acquired = json_object_new_object();
	session_lock(m);
	jsonx_add_str(acquired, "guest", g->name);
	jsonx_add_str(acquired, "task", g->task);
	jsonx_add_str(acquired, "image", g->image);
	jsonx_add_str(acquired, "purpose", g->purpose);
	jsonx_add_str(acquired, "vm", g->lease_document ? jsonx_get_str(g->lease_document, "vm") : NULL);
	jsonx_add_str(acquired, "network", g->network);
	session_unlock(m);
	guest_event(m, g, "acquire", "relay_acquire", acquired);
	outcome_free(o);
	o->facts = acquire_result(m, g, console);
	return 0;
}
