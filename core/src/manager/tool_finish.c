/* relay_finish: placeholder until its module lands; refuses honestly. */
#include "manager/manager_internal.h"

tool_result *tool_finish(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	(void)call;
	return guest_error(m, g, NULL, "internal", "relay_finish needs the evidence package writer, which this build does not provide yet; use relay_release; nothing was done");
}
