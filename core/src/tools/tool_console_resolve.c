/* relay_console_resolve (spec/tools.md §3.11): the current, non-secret console
 * status of a guest. It only reads and never takes or changes ownership. */
#include <stdlib.h>
#include <string.h>

#include "console/console_report.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/jsonx.h"

tool_result *tool_console_resolve(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	json_object *obs = NULL;
	console_guest_facts facts;
	relay_outcome o = OUTCOME_INIT;
	if (console_resolve_guest(m, g, call, &obs, &facts, &o) != 0)
		return tools_failure(m, g, &o);
	/* An attempt the relay holds as uncertain, which the backend's report
	 * does not speak of, is shown as the relay sees it. */
	json_object *attempt = NULL;
	const char *report_attempt = jsonx_get_str(jsonx_get_obj(obs, "attempt"), "attempt_id");
	if (facts.attempt_id && facts.attempt_status && strcmp(facts.attempt_status, "uncertain") == 0 &&
	    (report_attempt == NULL || strcmp(report_attempt, facts.attempt_id) != 0))
		attempt = console_uncertain_attempt(facts.attempt_id);
	json_object *result = console_status_result(g->name, obs, attempt);
	json_object *shown = jsonx_get_obj(result, "attempt");
	const char *status = jsonx_get_str(result, "status");
	const char *reason = jsonx_get_str(result, "reason");
	tool_result *r;
	if (shown)
		r = tool_result_ok(
		    result, "Console of %s: %s (%s); attempt %s %s", g->name, status ? status : "unknown",
		    reason ? reason : "no reason given",
		    jsonx_get_str(shown, "attempt_id") ? jsonx_get_str(shown, "attempt_id") : "unknown",
		    jsonx_get_str(shown, "status") ? jsonx_get_str(shown, "status") : "unknown");
	else
		r = tool_result_ok(result, "Console of %s: %s (%s)", g->name, status ? status : "unknown",
		                   reason ? reason : "no reason given");
	json_object_put(obs);
	console_guest_facts_free(&facts);
	return r;
}
