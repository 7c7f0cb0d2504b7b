/* relay_acquisition_capabilities (spec/tools.md §3.3): the backend's acquisition
 * options, today VNC console sharing per guest OS. It only reads; the
 * reading is console_acquisition_capabilities() (console/console_report.c). */
#include "console/console_report.h"
#include "tools/tools.h"
#include "util/jsonx.h"

static bool os_available(json_object *caps, const char *os)
{
	bool available = false;
	jsonx_get_bool(
	    jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(caps, "options"), "vnc"), "backends"),
	                  os),
	    "available", &available);
	return available;
}

tool_result *tool_acquisition_capabilities(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)g;
	(void)args;
	relay_outcome o = OUTCOME_INIT;
	if (console_acquisition_capabilities(m, call, &o) != 0)
		return tools_failure(m, NULL, &o);
	json_object *caps = outcome_take_facts(&o);
	outcome_free(&o);
	bool linux_ok = os_available(caps, "linux"), macos_ok = os_available(caps, "macos");
	return tool_result_ok(caps, "VNC console sharing: linux %s, macos %s",
	                      linux_ok ? "available" : "unavailable", macos_ok ? "available" : "unavailable");
}
