/* relay_probe (spec/tools.md §3.2): scope "guest" is tool_probe_guest(); scope
 * "host" is lease_probe_host() (lease/probe.c), whose result is built
 * here. */
#include <string.h>

#include "lease/probe.h"
#include "tools/tools.h"
#include "util/jsonx.h"

tool_result *tool_probe(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	const char *scope = jsonx_get_str(args, "scope");
	if (scope && strcmp(scope, "guest") == 0)
		return tool_probe_guest(m, g, args, call);
	relay_outcome o = OUTCOME_INIT;
	bool reachable = false;
	size_t held = 0;
	if (lease_probe_host(m, &o, &reachable, &held) != 0)
		return tools_failure(m, NULL, &o);
	tool_result *r = tool_result_ok(outcome_take_facts(&o), "Host probe: backend %s; %zu guest(s) held",
	                                reachable ? "reachable" : "unreachable", held);
	outcome_free(&o);
	return r;
}
