/* relay_console_cancel (tools.md §3.13): stops an open or uncertain
 * console-viewing attempt. The guest's lease is never touched. */
#include <stdlib.h>
#include <string.h>

#include "manager/console_report.h"
#include "manager/events.h"
#include "manager/manager_internal.h"
#include "profile/environment.h"
#include "util/jsonx.h"

tool_result *tool_console_cancel(manager *m, guest *g, json_object *args, relay_call *call)
{
	const char *console_id = jsonx_get_str(args, "console_id");
	const char *attempt_id = jsonx_get_str(args, "attempt_id");
	json_object *obs = NULL;
	console_guest_facts facts;
	tool_result *refusal = console_resolve_guest(m, g, call, &obs, &facts);
	if (refusal)
		return refusal;
	tool_result *r = NULL;
	const char *resolved_console = jsonx_get_str(obs, "console_id");
	if (resolved_console == NULL || strcmp(resolved_console, console_id) != 0) {
		r = guest_error(m, g, NULL, "console-identity-mismatch",
		                "Console instance identity mismatch: the call names console %s, the guest's "
		                "console is %s",
		                console_id, resolved_console ? resolved_console : "unknown");
		goto done;
	}
	if (facts.attempt_id == NULL || strcmp(facts.attempt_id, attempt_id) != 0 ||
	    console_attempt_terminal(facts.attempt_status)) {
		r = guest_error(m, g, NULL, "console-attempt-active",
		                "cancel must identify the active or uncertain attempt this guest owns (%s)",
		                facts.attempt_id ? facts.attempt_id : "there is none");
		goto done;
	}
	manager_lock(m);
	jsonx_add_str(g->console_attempt, "status", "uncertain");
	guest_save(g);
	manager_unlock(m);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "console_id", console_id);
	jsonx_add_str(details, "attempt_id", attempt_id);
	guest_event(m, g, "console-cancel-intent", "relay_console_cancel", details);

	loaded_plugin *console = m->backends->plugins[SLOT_CONSOLE];
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st =
	    console->console.cancel(console->state, &m->backends->machine_link, facts.lease_text, console_id,
	                            attempt_id, call, 0, &text, &err);
	json_object *report = st == RELAY_OK && text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	json_object *cancelled = st == RELAY_OK ? console_observation(report) : NULL;
	json_object_put(report);
	char why[512] = "";
	const char *selected_fp =
	    m->settings->environment ? environment_fingerprint(m->settings->environment) : NULL;
	const char *problem = NULL;
	if (st != RELAY_OK)
		problem = err.message[0] ? err.message : relay_status_str(st);
	else if (cancelled == NULL)
		problem = "unsupported or malformed console report schema";
	else if (console_identity_problem(cancelled, facts.vm, facts.lease_id, facts.console_id, selected_fp,
	                                  facts.lease_fp, why, sizeof why))
		problem = why;
	else if (jsonx_get_str(jsonx_get_obj(cancelled, "attempt"), "attempt_id") == NULL ||
	         strcmp(jsonx_get_str(jsonx_get_obj(cancelled, "attempt"), "attempt_id"), attempt_id) != 0)
		problem = "the report does not name this attempt";
	if (problem) {
		json_object *d = json_object_new_object();
		jsonx_add_str(d, "attempt_id", attempt_id);
		jsonx_add_str(d, "error", problem);
		guest_event(m, g, "console-cancel-uncertain", problem, d);
		console_mark_unknown(m, g);
		json_object *s = json_object_new_object();
		jsonx_add_str(s, "attempt_id", attempt_id);
		r = guest_error(
		    m, g, s, "outcome-unknown",
		    "console cancel outcome unknown; ownership kept; resolve attempt %s before another open; "
		    "the guest was not released (%s)",
		    attempt_id, problem);
		json_object_put(cancelled);
		goto done;
	}
	const char *attempt_status = jsonx_get_str(jsonx_get_obj(cancelled, "attempt"), "status");
	manager_lock(m);
	json_object_put(g->console);
	g->console = json_object_get(cancelled);
	jsonx_add_str(g->console_attempt, "status", attempt_status);
	guest_save(g);
	manager_unlock(m);
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "attempt_id", attempt_id);
	jsonx_add_str(d, "status", attempt_status);
	guest_event(m, g, "console-cancel", attempt_status, d);
	json_object *result = console_status_result(g->name, cancelled, NULL);
	r = tool_result_ok(result, "Console viewing attempt %s on %s: %s", attempt_id, g->name,
	                   attempt_status ? attempt_status : "unknown");
	json_object_put(cancelled);
done:
	json_object_put(obs);
	console_guest_facts_free(&facts);
	return r;
}
