/* relay_console_open (spec/tools.md §3.12): starts console viewing on the
 * service host, only on an explicit user request. A failed or uncertain
 * open keeps the attempt as uncertain and is never replayed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console/console_report.h"
#include "console/console_state.h"
#include "lease/lease_state.h"
#include "session/events.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/clock.h"
#include "util/jsonx.h"

#define CONSOLE_ATTEMPT_LIMIT 64

static bool attempt_used(guest *g, const char *attempt_id)
{
	slice_lock(g->console);
	bool used = false;
	size_t n = g->console->attempt_ids ? json_object_array_length(g->console->attempt_ids) : 0;
	for (size_t i = 0; i < n && !used; i++) {
		const char *id =
		    json_object_get_string(json_object_array_get_idx(g->console->attempt_ids, i));
		used = id && strcmp(id, attempt_id) == 0;
	}
	slice_unlock(g->console);
	return used;
}

static tool_result *open_result(guest *g, json_object *obs, json_object *attempt, bool replayed)
{
	json_object *result = console_status_result(g->name, obs, attempt);
	if (replayed)
		jsonx_add_bool(result, "replayed", false);
	json_object *shown = jsonx_get_obj(result, "attempt");
	const char *status = jsonx_get_str(shown, "status");
	/* MCP_RELAY_VNC_VIEWER=browser: say whether the person's browser got the link. */
	json_object *live = jsonx_get_obj(result, "live_view");
	bool opened = false;
	jsonx_get_bool(live, "browser_opened", &opened);
	const char *origin = jsonx_get_str(live, "origin");
	char live_text[400] = "";
	if (live && opened)
		snprintf(live_text, sizeof live_text, "; the live view %s was opened with %s (one-time link)",
		         origin ? origin : "",
		         jsonx_get_str(live, "launcher") ? jsonx_get_str(live, "launcher") : "the browser");
	else if (live)
		snprintf(live_text, sizeof live_text,
		         "; the live view %s was not opened (%s): its one-time link is on the relay's "
		         "standard error",
		         origin ? origin : "",
		         jsonx_get_str(live, "browser_reason") ? jsonx_get_str(live, "browser_reason")
		                                               : "no browser");
	return tool_result_ok(result, "Console viewing attempt %s on %s: %s%s",
	                      jsonx_get_str(shown, "attempt_id") ? jsonx_get_str(shown, "attempt_id")
	                                                         : "unknown",
	                      g->name, status ? status : "unknown", live_text);
}

tool_result *tool_console_open(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	const char *console_id = jsonx_get_str(args, "console_id");
	const char *attempt_id = jsonx_get_str(args, "attempt_id");
	const char *reason = jsonx_get_str(args, "reason");
	const char *expected = jsonx_get_str(args, "expected");
	json_object *obs = NULL;
	console_guest_facts facts;
	/* Step 2: resolve first. */
	relay_outcome o = OUTCOME_INIT;
	if (console_resolve_named(m, g, call, console_id, &obs, &facts, &o) != 0)
		return tools_failure(m, g, &o);
	tool_result *r = NULL;
	const char *report_attempt_id = jsonx_get_str(jsonx_get_obj(obs, "attempt"), "attempt_id");
	const char *report_attempt_status = jsonx_get_str(jsonx_get_obj(obs, "attempt"), "status");
	/* Step 3: the viewer appears on the service host only. */
	const char *location = jsonx_get_str(obs, "viewer_location");
	if (location == NULL || strcmp(location, "service-host") != 0) {
		r = guest_error(
		    m, g, NULL, "console-unavailable",
		    "only a viewer on the declared service host is supported; there is no remote-client "
		    "fallback (the backend reports viewer_location %s)",
		    location ? location : "unknown");
		goto done;
	}
	/* Step 4. */
	const char *status = jsonx_get_str(obs, "status");
	if (!lease_is_live(m, g) || status == NULL || strcmp(status, "ready") != 0) {
		char *lease = lease_guest_state_copy(m, g);
		r = guest_error(
		    m, g, NULL, "console-not-ready",
		    "the console is not ready or access was revoked; no automatic recovery (console %s, "
		    "lease %s)",
		    status ? status : "unknown", lease ? lease : "unknown");
		free(lease);
		goto done;
	}
	/* Step 5: the current attempt is answered as it stands. */
	if (facts.attempt_id && strcmp(facts.attempt_id, attempt_id) == 0) {
		json_object *attempt = NULL;
		if (report_attempt_id == NULL || strcmp(report_attempt_id, attempt_id) != 0)
			attempt = console_uncertain_attempt(attempt_id);
		r = open_result(g, obs, attempt, true);
		goto done;
	}
	/* Step 6. */
	if (attempt_used(g, attempt_id)) {
		r = guest_error(m, g, NULL, "console-attempt-reused",
		                "attempt %s was used before on %s; historical launches are never replayed; "
		                "choose a fresh "
		                "attempt_id",
		                attempt_id, g->name);
		goto done;
	}
	if (facts.attempts_used >= CONSOLE_ATTEMPT_LIMIT) {
		r = guest_error(m, g, NULL, "console-attempt-limit",
		                "%s has used its %d console attempt ids; no further attempts on this guest",
		                g->name, CONSOLE_ATTEMPT_LIMIT);
		goto done;
	}
	/* Step 7: nothing else may be active, on either side. */
	bool relay_active = facts.attempt_id && !console_attempt_terminal(facts.attempt_status);
	bool backend_active = report_attempt_id && !console_attempt_terminal(report_attempt_status);
	if (relay_active || backend_active) {
		r = guest_error(m, g, NULL, "console-attempt-active",
		                "attempt %s is still %s; resolve or cancel it before a new attempt",
		                relay_active ? facts.attempt_id : report_attempt_id,
		                relay_active ? (facts.attempt_status ? facts.attempt_status : "active")
		                             : (report_attempt_status ? report_attempt_status : "active"));
		goto done;
	}
	/* Step 8: stored as uncertain before the request. */
	slice_lock(g->console);
	json_object_put(g->console->attempt);
	g->console->attempt = json_object_new_object();
	jsonx_add_str(g->console->attempt, "console_id", console_id);
	jsonx_add_str(g->console->attempt, "attempt_id", attempt_id);
	jsonx_add_str(g->console->attempt, "status", "uncertain");
	json_object_array_add(g->console->attempt_ids, json_object_new_string(attempt_id));
	slice_unlock(g->console);
	guest_persist(m, g);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "console_id", console_id);
	jsonx_add_str(details, "attempt_id", attempt_id);
	jsonx_add_str(details, "reason", reason);
	jsonx_add_str(details, "expected", expected);
	jsonx_add_bool(details, "userRequested", true);
	guest_event(m, g, "console-open-intent", reason, details);

	/* Steps 9-10. */
	json_object *opened =
	    console_attempt_request(m, g, call, &facts, CONSOLE_OPEN, console_id, attempt_id, &o);
	if (opened == NULL) {
		r = tools_failure(m, g, &o);
		goto done;
	}
	r = open_result(g, opened, NULL, false);
	json_object_put(opened);
done:
	json_object_put(obs);
	console_guest_facts_free(&facts);
	return r;
}
