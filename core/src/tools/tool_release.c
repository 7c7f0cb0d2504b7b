/* relay_release (spec/tools.md §3.10). The nothing-held refusal is answered at
 * dispatch (tools/dispatch.c); the release path itself is lease_release_guest()
 * (lease/release.c), whose outcome becomes the result here. */
#include "lease/lifecycle.h"
#include "tools/tools.h"

/* The result of a release outcome: the facts and headline on success, the
 * error with the guest's state otherwise. */
static tool_result *release_answer(session_manager *m, guest *g, int rc, relay_outcome *o)
{
	if (rc != 0)
		return tools_failure(m, g, o);
	const char *headline = o->message ? o->message : "Released the guest";
	tool_result *r = tool_result_ok(outcome_take_facts(o), "%s", headline);
	outcome_free(o);
	return r;
}

tool_result *tool_release(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	relay_outcome o = OUTCOME_INIT;
	int rc = lease_release_guest(m, g, call, false, &o);
	return release_answer(m, g, rc, &o);
}

tool_result *tools_release_finished(session_manager *m, guest *g, relay_call *call)
{
	relay_outcome o = OUTCOME_INIT;
	int rc = lease_release_finished(m, g, call, &o);
	return release_answer(m, g, rc, &o);
}
