/* relay_status (spec/tools.md §3.14): answers from memory, never contacts
 * anything. The status object itself is the session's (session/status.c). */
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

tool_result *tool_status(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)g;
	(void)args;
	(void)call;
	session_lock(m);
	json_object *status = session_status_json(m);
	session_unlock(m);
	json_object *guests = jsonx_get_array(status, "guests");
	size_t n = json_object_array_length(guests);
	bool active = false;
	jsonx_get_bool(status, "active", &active);
	if (n == 0)
		return tool_result_ok(status, "No guest held; renewal %s", active ? "active" : "inactive");
	strbuf names = STRBUF_INIT;
	for (size_t i = 0; i < n; i++) {
		if (i)
			strbuf_puts(&names, ", ");
		strbuf_puts(&names, jsonx_get_str(json_object_array_get_idx(guests, i), "guest"));
	}
	tool_result *r = tool_result_ok(status, "%zu guest(s) held (%s); renewal %s", n, strbuf_str(&names),
	                                active ? "active" : "inactive");
	strbuf_free(&names);
	return r;
}
