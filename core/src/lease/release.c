/*
 * The release path (spec/tools.md §3.10 steps 2-7, spec/lifecycle.md §11.2 step 5):
 * shared by relay_release, the end of the session in release mode and its
 * direct release after the grace period.
 *
 * A release failure keeps ownership until destruction is verified: the
 * record, the owner lock and the registry row stay, renewal stays stopped,
 * and relay_release may be called again (spec/lifecycle.md §13.2 rule 3).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/downloads.h"
#include "delivery/packaging.h"
#include "guestio/link.h"
#include "guestio/resident.h"
#include "lease/lifecycle.h"
#include "lease/renewal.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"

#define RELEASE_ATTEMPTS   3
#define RELEASE_ATTEMPT_MS 120000
#define RELEASE_LOOKUP_MS  5000
#define DIRECT_RELEASE_MS  30000
#define VERIFY_MS          15000

/* A call for one backend request: the caller's, bounded by a watcher, or
 * an internal one when there is no caller. The returned call is tracked
 * with `timeout_ms`; end it with request_done(). */
typedef struct request_call {
	relay_call *call;
	bool internal;
} request_call;

static request_call request_begin(session_manager *m, relay_call *caller, int64_t timeout_ms)
{
	request_call rc = {NULL, false};
	if (caller == NULL) {
		rc.call = session_internal_call(m, timeout_ms);
		rc.internal = true;
	} else {
		/* The caller's call carries cancellation and progress; a
		 * per-request limit is enforced by the plugin's own timeouts. */
		rc.call = caller;
	}
	return rc;
}

static void request_done(session_manager *m, request_call *rc)
{
	if (rc->internal)
		session_internal_call_done(m, rc->call);
	rc->call = NULL;
}

/* The relay_release facts and headline of a guest released for `reason`,
 * into `o`. Returns 0. */
static int release_result(session_manager *m, guest *g, const char *reason, json_object *package,
                          relay_outcome *o)
{
	session_lock(m);
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_bool(r, "released", true);
	jsonx_add_str(r, "reason", reason);
	bool delivered = g->delivered, verified = g->delivered;
	if (package) {
		jsonx_get_bool(package, "delivered", &delivered);
		jsonx_get_bool(package, "deliveryVerified", &verified);
	}
	jsonx_add_bool(r, "delivered", delivered);
	jsonx_add_bool(r, "deliveryVerified", verified);
	const char *manifest = package ? jsonx_get_str(package, "manifestPath") : NULL;
	if (manifest) {
		jsonx_add_str(r, "manifestPath", manifest);
	} else if (g->delivered) {
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "%s/manifest.json", g->evidence_path);
		jsonx_add_str(r, "manifestPath", strbuf_str(&sb));
		strbuf_free(&sb);
	} else {
		jsonx_add_null(r, "manifestPath");
	}
	json_object *delivery_error = package ? jsonx_get_obj(package, "deliveryError") : NULL;
	jsonx_add(r, "deliveryError", delivery_error ? json_object_get(delivery_error) : NULL);
	json_object *incomplete = package ? jsonx_get_array(package, "incompleteExtractions") : NULL;
	jsonx_add(r, "incompleteExtractions",
	          incomplete ? json_object_get(incomplete) : json_object_new_array());
	jsonx_add_str(r, "evidencePath", g->evidence_path);
	jsonx_add_bool(r, "destructionVerified", strcmp(reason, "not-acquired") != 0);
	jsonx_add(r, "guestsHeld", session_open_guest_names_json(m));
	char *name = strdup(g->name);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	strbuf headline = STRBUF_INIT;
	strbuf_printf(&headline, "Released guest %s: %s; evidence kept at %s", name,
	              strcmp(reason, "not-acquired") == 0 ? "nothing was ever leased for it"
	                                                  : "machine destroyed",
	              evidence ? evidence : "(no evidence folder)");
	outcome_free(o);
	o->facts = r;
	o->message = strbuf_detach(&headline, NULL);
	free(name);
	free(evidence);
	return 0;
}

static void close_transport(session_manager *m, guest *g)
{
	downloads_shutdown(m, g); /* no step download may use the connection any more */
	gio_resident_close(m, g); /* `receiver serve` sees end of input and exits */
	gio_link_close(m, g);
}

/* Step 4: an acquisition whose outcome is unknown is looked up by purpose.
 * Returns 0 to go on (g->lease_document set); 1 when nothing was leased (the
 * release is done, `o` filled); -1 with the failure in `o`. */
static int settle_uncertain(session_manager *m, guest *g, loaded_plugin *machine, relay_call *call,
                            guest_phase prior, relay_outcome *o)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	char *found_text = NULL;
	request_call rc = request_begin(m, call, LIFECYCLE_LOOKUP_TIMEOUT_MS);
	relay_status st =
	    machine->machine.find_by_purpose
	        ? machine->machine.find_by_purpose(machine->state, g->purpose, rc.call, 0, &found_text, &err)
	        : relay_error_set(&err, RELAY_E_UNSUPPORTED, 0,
	                          "the machine plugin cannot look leases up by purpose");
	request_done(m, &rc);
	json_object *found =
	    st == RELAY_OK ? lease_parse_taken(found_text) : (free(found_text), (json_object *)NULL);
	size_t n = json_object_is_type(found, json_type_array) ? json_object_array_length(found) : 0;
	if (st == RELAY_OK && n == 0) {
		json_object_put(found);
		lease_registry_remove(m, g);
		guest_event(m, g, "release", "nothing was leased for this purpose", NULL);
		guest_close(m, g, "not-acquired");
		release_result(m, g, "not-acquired", NULL, o);
		return 1;
	}
	if (st != RELAY_OK || n != 1) {
		json_object_put(found);
		session_lock(m);
		g->phase = prior;
		guest_save(g);
		session_unlock(m);
		if (st == RELAY_OK)
			return outcome_fail(
			    o, "outcome-unknown",
			    "ambiguous acquisition: %zu leases carry purpose %s; the ownership record is "
			    "kept",
			    n, g->purpose);
		return outcome_fail(
		    o, "outcome-unknown",
		    "the acquisition of purpose %s cannot be looked up (%s); the ownership record is "
		    "kept; call relay_release again later",
		    g->purpose, err.message[0] ? err.message : relay_status_str(st));
	}
	session_lock(m);
	json_object_put(g->lease_document);
	g->lease_document = json_object_get(json_object_array_get_idx(found, 0));
	g->lease->acquisition_in_flight = false;
	guest_save(g);
	session_unlock(m);
	json_object_put(found);
	return 0;
}

/* Step 5: the destroy request, up to RELEASE_ATTEMPTS times (once when
 * `direct`), with a lookup after each failure. 0 when the backend
 * destroyed it or no longer knows it; -1 with outcome-unknown (cancelled
 * after the request) or destruction-unverified in `o`. */
static int destroy(session_manager *m, guest *g, loaded_plugin *machine, relay_call *call, const char *lease,
                   bool direct, relay_outcome *o)
{
	bool released = false, cancelled = false;
	relay_error err;
	memset(&err, 0, sizeof err);
	int attempts = direct ? 1 : RELEASE_ATTEMPTS;
	for (int attempt = 1; attempt <= attempts && !released && !cancelled; attempt++) {
		memset(&err, 0, sizeof err);
		request_call rc = request_begin(m, call, direct ? DIRECT_RELEASE_MS : RELEASE_ATTEMPT_MS);
		relay_status st =
		    machine->machine.release(machine->state, lease, "released", rc.call, 0, &err);
		bool request_cancelled = relay_call_is_cancelled(rc.call);
		request_done(m, &rc);
		if (st == RELAY_OK || st == RELAY_E_NOT_FOUND) {
			released = true;
			break;
		}
		if (st == RELAY_E_CANCELLED || (request_cancelled && relay_call_is_cancelled(call))) {
			cancelled = true;
			break;
		}
		json_object *details = json_object_new_object();
		jsonx_add_int(details, "attempt", attempt);
		jsonx_add_str(details, "error", err.message);
		guest_event(m, g, "release-error", err.message, details);
		if (direct)
			break;
		relay_error inspect_err;
		memset(&inspect_err, 0, sizeof inspect_err);
		char *snapshot = NULL;
		request_call lc = request_begin(m, NULL, RELEASE_LOOKUP_MS);
		if (machine->machine.inspect(machine->state, lease, lc.call, 0, &snapshot, &inspect_err) ==
		    RELAY_E_NOT_FOUND)
			released = true;
		request_done(m, &lc);
		free(snapshot);
	}
	if (cancelled) {
		lifecycle_record_cancelled(
		    m, g, "relay_release", true,
		    "cancelled after the destroy request; destruction is uncertain and ownership is "
		    "kept until a later release verifies it");
		guest_set_last_error(
		    m, g,
		    "the release of %s was cancelled after the destroy request; whether the machine "
		    "is gone is unknown; ownership is kept: call relay_release again",
		    g->name);
		return outcome_fail(
		    o, "outcome-unknown",
		    "the release of %s was cancelled after the destroy request; ownership is kept until "
		    "a later relay_release verifies destruction",
		    g->name);
	}
	if (!released) {
		guest_set_last_error(m, g, "release failed: %s", err.message[0] ? err.message : "no answer");
		return outcome_fail(
		    o, "destruction-unverified",
		    "The backend did not confirm destroying %s (%s); ownership, record and registry row "
		    "are kept; call relay_release again",
		    g->name, err.message[0] ? err.message : "no answer");
	}
	return 0;
}

static int release_path(session_manager *m, guest *g, relay_call *call, bool direct, const char *reason,
                        relay_outcome *o);

int lease_release_guest(session_manager *m, guest *g, relay_call *call, bool direct, relay_outcome *o)
{
	return release_path(m, g, call, direct, "released", o);
}

int lease_release_finished(session_manager *m, guest *g, relay_call *call, relay_outcome *o)
{
	return release_path(m, g, call, false, "finished", o);
}

/* `reason` is "released", or "finished" for relay_finish's destruction step
 * (the package is delivered, so nothing is packaged). */
static int release_path(session_manager *m, guest *g, relay_call *call, bool direct, const char *reason,
                        relay_outcome *o)
{
	session_wait_startup(m);
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	if (machine == NULL)
		return outcome_fail(o, "backend-unavailable", "the machine backend is not available: %s",
		                    m->backends->load_errors[SLOT_MACHINE]
		                        ? m->backends->load_errors[SLOT_MACHINE]
		                        : "no machine plugin is configured");
	session_lock(m);
	if (g->phase == PHASE_CLOSED) {
		session_unlock(m);
		return release_result(m, g,
		                      jsonx_get_str(g->closed, "reason") ? jsonx_get_str(g->closed, "reason")
		                                                         : "released",
		                      NULL, o);
	}
	guest_phase prior = g->phase;
	bool uncertain = prior == PHASE_ACQUISITION_UNCERTAIN || g->lease_document == NULL;
	bool package = !direct && g->staged && !g->delivered;
	g->phase = PHASE_RELEASING;
	session_unlock(m);
	/* Step 2: renewal stops; the lease lapses within its current window if
	 * the release cannot complete. */
	lease_renewal_stop(m, g);
	guest_event(m, g, "release",
	            direct                            ? "the session ended; direct release"
	            : strcmp(reason, "finished") == 0 ? "relay_finish: the package is delivered and verified"
	                                              : "relay_release",
	            NULL);
	/* relay_finish reports its own six steps; its destruction is the last. */
	relay_call *progress = strcmp(reason, "finished") == 0 ? NULL : call;
	relay_call_progress(progress, 1, 3, "packaging", true);

	/* An open console attempt ends before the evidence is kept (its
	 * take-overs are recorded); the destroy below stops its viewer anyway. */
	m->hooks->guest_ending(m, g, call, reason);
	/* Step 3: keep what evidence exists. */
	json_object *packaged = NULL;
	if (package)
		packaged = release_package(m, g, call);

	/* Step 4. */
	if (uncertain) {
		int settled = settle_uncertain(m, g, machine, call, prior, o);
		if (settled != 0) {
			json_object_put(packaged);
			return settled < 0 ? -1 : 0;
		}
	}
	if (relay_call_is_cancelled(call)) {
		lifecycle_record_cancelled(
		    m, g, "relay_release", false,
		    "cancelled before the destroy request; the guest stays held with renewal stopped");
		guest_set_last_error(
		    m, g,
		    "the release was cancelled before the destroy request; the guest is still held and "
		    "its renewal is stopped: call relay_release again");
		json_object_put(packaged);
		return outcome_fail(o, "shutting-down",
		                    "the release of %s was cancelled before the destroy request", g->name);
	}

	/* Steps 5-6: destroy, then verify independently. */
	RELAY_FAILPOINT("release.before-destroy");
	close_transport(m, g);
	relay_call_progress(progress, 2, 3, "destruction", true);
	char *lease = guest_lease_text(m, g);
	if (destroy(m, g, machine, call, lease, direct, o) != 0) {
		free(lease);
		json_object_put(packaged);
		return -1;
	}
	relay_error err;
	RELAY_FAILPOINT("release.after-destroy");
	relay_call_progress(progress, 3, 3, "verification", true);
	char *check = NULL;
	memset(&err, 0, sizeof err);
	request_call vc = request_begin(m, direct ? NULL : call, VERIFY_MS);
	relay_status verified =
	    machine->machine.verify_destroyed(machine->state, lease, vc.call, 0, &check, &err);
	request_done(m, &vc);
	free(check);
	free(lease);
	if (verified != RELAY_OK) {
		json_object_put(packaged);
		guest_set_last_error(m, g, "destruction unverified: %s",
		                     err.message[0] ? err.message : relay_status_str(verified));
		return outcome_fail(
		    o, "destruction-unverified",
		    "Destruction of %s could not be verified (%s); ownership, record and registry row "
		    "are kept; call relay_release again",
		    g->name, err.message[0] ? err.message : relay_status_str(verified));
	}

	RELAY_FAILPOINT("release.after-verify");
	RELAY_FAILPOINT("release.after-verify");
	/* Step 7. */
	session_lock(m);
	g->released = true;
	session_unlock(m);
	lease_registry_remove(m, g);
	lease_write_record(m, g, reason, false);
	recording_detach(m, g);
	guest_close(m, g, reason);
	release_result(m, g, reason, packaged, o);
	json_object_put(packaged);
	return 0;
}
