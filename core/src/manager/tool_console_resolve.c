/* relay_console_resolve: placeholder until its module lands; refuses honestly. */
#include "manager/manager_internal.h"

tool_result *tool_console_resolve(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	(void)call;
	return guest_error(m, g, NULL, "internal", "relay_console_resolve needs console support, which this build does not provide yet; nothing was done");
}
