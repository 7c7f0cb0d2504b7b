/* relay_console_cancel: placeholder until its module lands; refuses honestly. */
#include "manager/manager_internal.h"

tool_result *tool_console_cancel(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	(void)call;
	return guest_error(m, g, NULL, "internal", "relay_console_cancel needs console support, which this build does not provide yet; nothing was done");
}
