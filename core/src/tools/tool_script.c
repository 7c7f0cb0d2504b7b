/*
 * relay_script (tools.md §3.6): the refusals of the tool, then a recorded
 * run or a diagnostic script (run_request.c does the work).
 */
#include <stdbool.h>

#include "session/manager_internal.h"
#include "tools/tools.h"
#include "runs/run_request.h"
#include "util/jsonx.h"

tool_result *tool_script(manager *m, guest *g, json_object *args, relay_call *call)
{
	bool diagnostic = false;
	jsonx_get_bool(args, "diagnostic", &diagnostic);
	manager_lock(m);
	bool sealed = g->delivered;
	bool reset_pending = g->pending_reset != NULL;
	bool staged = g->staged && g->phase == PHASE_STAGED;
	bool leased = g->lease != NULL && g->guest_root != NULL;
	manager_unlock(m);
	if (sealed)
		return guest_error(
		    m, g, NULL, "sealed",
		    "The evidence of %s is already delivered; only relay_release (or a relay_finish "
		    "retry) is possible",
		    g->name);
	if (!leased)
		return guest_error(m, g, NULL, "not-staged",
		                   "Guest %s holds no lease to run scripts in; acquire a guest first",
		                   g->name);
	if (!diagnostic && reset_pending)
		return guest_error(
		    m, g, NULL, "reset-pending",
		    "A recording reset of %s is half done; retry relay_stage to complete it, or use a "
		    "diagnostic shell script",
		    g->name);
	if (!diagnostic && !staged)
		return guest_error(
		    m, g, NULL, "not-staged",
		    "Guest %s is not staged; use relay_stage before a run, or a diagnostic shell script "
		    "for setup diagnosis and repair",
		    g->name);
	run_call c;
	tool_result *refusal = run_call_parse(m, g, args, &c);
	if (refusal) {
		run_call_free(&c);
		return refusal;
	}
	tool_result *r = diagnostic ? run_diagnostic(m, g, &c, call) : run_recorded(m, g, &c, call);
	run_call_free(&c);
	return r;
}
