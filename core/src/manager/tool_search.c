/* relay_search: placeholder until its module lands; refuses honestly. */
#include "manager/manager_internal.h"

tool_result *tool_search(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	(void)call;
	return guest_error(m, g, NULL, "internal", "relay_search needs the application catalog of the machine backend, which this build does not query yet; nothing was done");
}
