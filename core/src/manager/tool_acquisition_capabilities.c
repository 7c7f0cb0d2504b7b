/* relay_acquisition_capabilities: placeholder until its module lands; refuses honestly. */
#include "manager/manager_internal.h"

tool_result *tool_acquisition_capabilities(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	(void)call;
	return guest_error(m, g, NULL, "internal", "relay_acquisition_capabilities needs the console plugin's capability query, which this build does not provide yet; nothing was done");
}
