/* relay_acquisition_capabilities (tools.md §3.3): the backend's acquisition
 * options, today VNC console sharing per guest OS. It only reads. */
#include <stdlib.h>
#include <string.h>

#include "console/console_report.h"
#include "session/manager_internal.h"
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

static tool_result *answer(json_object *caps)
{
	bool linux_ok = os_available(caps, "linux"), macos_ok = os_available(caps, "macos");
	return tool_result_ok(caps, "VNC console sharing: linux %s, macos %s",
	                      linux_ok ? "available" : "unavailable", macos_ok ? "available" : "unavailable");
}

tool_result *tool_acquisition_capabilities(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)g;
	(void)args;
	manager_wait_startup(m);
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	loaded_plugin *console = m->backends->plugins[SLOT_CONSOLE];
	relay_error err;
	memset(&err, 0, sizeof err);
	/* Step 1: a selected environment's identity is checked first. */
	if (m->settings->environment != NULL) {
		if (machine == NULL)
			return tool_result_error(
			    NULL, "backend-unavailable", "the machine backend is not available: %s",
			    m->backends->load_errors[SLOT_MACHINE] ? m->backends->load_errors[SLOT_MACHINE]
			                                           : "no machine plugin is loaded");
		if (machine->machine.health) {
			char *health = NULL;
			relay_status st = machine->machine.health(machine->state, call, 0, &health, &err);
			free(health);
			if (st != RELAY_OK)
				return tool_result_error(NULL, "backend-unavailable", "%s",
				                         err.message[0] ? err.message : relay_status_str(st));
		}
	}
	/* Step 3: no console plugin configured. */
	if (console == NULL)
		return answer(console_capabilities_unconfigured());
	/* Step 2: the console plugin reads the backend's options. */
	char *text = NULL;
	memset(&err, 0, sizeof err);
	relay_status st =
	    console->console.capabilities(console->state, &m->backends->machine_link, call, 0, &text, &err);
	if (st != RELAY_OK) {
		free(text);
		if (st == RELAY_E_UNSUPPORTED)
			return tool_result_error(
			    NULL, "console-unavailable",
			    "backend lacks acquisition capabilities; upgrade the machine service for VNC");
		if (st == RELAY_E_PROTOCOL)
			return tool_result_error(NULL, "backend-unavailable",
			                         "unsupported or malformed acquisition-capabilities schema");
		return tool_result_error(NULL, "backend-unavailable", "%s",
		                         err.message[0] ? err.message : relay_status_str(st));
	}
	json_object *raw = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	json_object *caps = console_capabilities_normalise(raw);
	json_object_put(raw);
	if (caps == NULL)
		return tool_result_error(NULL, "backend-unavailable",
		                         "unsupported or malformed acquisition-capabilities schema");
	return answer(caps);
}
