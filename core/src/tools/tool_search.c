/* relay_search (spec/tools.md §3.1): the search is catalog_search()
 * (catalog/search.c); this builds the result. */
#include "catalog/search.h"
#include "tools/tools.h"
#include "util/jsonx.h"

tool_result *tool_search(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)g;
	const char *os = jsonx_get_str(args, "os");
	catalog_found found;
	if (catalog_search(m, jsonx_get_str(args, "name"), os, call, &found) != 0) {
		tool_result *refused = tools_failure(m, NULL, &found.outcome);
		catalog_found_free(&found);
		return refused;
	}
	json_object *result = outcome_take_facts(&found.outcome);
	tool_result *r;
	if (found.applications == 0 && !found.truncated)
		r = tool_result_ok(result, "No installed application matches \"%s\"", found.shown);
	else
		r = tool_result_ok(result,
		                   "Found %zu application(s) with %zu installation(s) matching \"%s\"%s%s%s",
		                   found.applications, found.installations, found.shown, os ? " on " : "",
		                   os ? os : "", found.truncated ? "; more were left out" : "");
	catalog_found_free(&found);
	return r;
}
