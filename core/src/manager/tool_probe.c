/* relay_probe: placeholder until its module lands; refuses honestly. */
#include "manager/manager_internal.h"

tool_result *tool_probe(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	(void)call;
	return guest_error(m, g, NULL, "internal", "relay_probe is not available in this build yet; nothing was done");
}
