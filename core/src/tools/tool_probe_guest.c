/*
 * relay_probe with scope "guest" (spec/tools.md §3.2): one call into
 * runs/probe_guest.h and the result's headline from its facts.
 */
#include <stdbool.h>

#include "runs/probe_guest.h"
#include "tools/tools.h"
#include "util/jsonx.h"

/* "yes" when facts.runtimes.<language>.ready is true. */
static const char *ready_word(json_object *runtimes, const char *language)
{
	bool ready = false;
	jsonx_get_bool(jsonx_get_obj(runtimes, language), "ready", &ready);
	return ready ? "yes" : "no";
}

tool_result *tool_probe_guest(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	relay_outcome o = OUTCOME_INIT;
	if (probe_guest(m, g, call, &o) != 0)
		return tools_failure(m, g, &o);
	json_object *r = outcome_take_facts(&o);
	outcome_free(&o);
	json_object *platform = jsonx_get_obj(r, "platform");
	const char *uname_text = jsonx_get_str(platform, "uname");
	bool receiver_available = false, enabled = false;
	jsonx_get_bool(platform, "receiverAvailable", &receiver_available);
	jsonx_get_bool(jsonx_get_obj(r, "snapshots"), "enabled", &enabled);
	json_object *rt = jsonx_get_obj(r, "runtimes");
	const char *shell = ready_word(rt, "shell"), *js = ready_word(rt, "javascript");
	const char *ts = ready_word(rt, "typescript"), *py = ready_word(rt, "python");
	return tool_result_ok(
	    r,
	    "Guest probe of %s (%s): receiver build %s; shell %s, javascript %s, typescript "
	    "%s, python %s; snapshots %s",
	    g->name, uname_text ? uname_text : "unknown platform",
	    receiver_available ? "available" : "missing", shell, js, ts, py, enabled ? "on" : "off");
}
