/* relay_console_cancel (spec/tools.md §3.13): stops an open or uncertain
 * console-viewing attempt. The guest's lease is never touched. */
#include <string.h>

#include "console/console_end.h"
#include "console/console_report.h"
#include "console/console_state.h"
#include "session/events.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/jsonx.h"

tool_result *tool_console_cancel(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	const char *console_id = jsonx_get_str(args, "console_id");
	const char *attempt_id = jsonx_get_str(args, "attempt_id");
	json_object *obs = NULL;
	console_guest_facts facts;
	relay_outcome o = OUTCOME_INIT;
	if (console_resolve_named(m, g, call, console_id, &obs, &facts, &o) != 0)
		return tools_failure(m, g, &o);
	tool_result *r = NULL;
	if (facts.attempt_id == NULL || strcmp(facts.attempt_id, attempt_id) != 0 ||
	    console_attempt_terminal(facts.attempt_status)) {
		r = guest_error(m, g, NULL, "console-attempt-active",
		                "cancel must identify the active or uncertain attempt this guest owns (%s)",
		                facts.attempt_id ? facts.attempt_id : "there is none");
		goto done;
	}
	slice_lock(g->console);
	jsonx_add_str(g->console->attempt, "status", "uncertain");
	slice_unlock(g->console);
	guest_persist(m, g);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "console_id", console_id);
	jsonx_add_str(details, "attempt_id", attempt_id);
	guest_event(m, g, "console-cancel-intent", "relay_console_cancel", details);

	json_object *cancelled =
	    console_attempt_request(m, g, call, &facts, CONSOLE_CANCEL, console_id, attempt_id, &o);
	if (cancelled == NULL) {
		r = tools_failure(m, g, &o);
		goto done;
	}
	/* A person's take-overs of the live view go into the guest's event
	 * journal: input not made by any step. */
	console_record_take_overs(m, g, cancelled, console_id, attempt_id);
	const char *attempt_status = jsonx_get_str(jsonx_get_obj(cancelled, "attempt"), "status");
	json_object *result = console_status_result(g->name, cancelled, NULL);
	r = tool_result_ok(result, "Console viewing attempt %s on %s: %s", attempt_id, g->name,
	                   attempt_status ? attempt_status : "unknown");
	json_object_put(cancelled);
done:
	json_object_put(obs);
	console_guest_facts_free(&facts);
	return r;
}
