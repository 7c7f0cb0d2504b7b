/* relay_image: placeholder until its module lands; refuses honestly. */
#include "manager/manager_internal.h"

tool_result *tool_image(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	(void)call;
	return guest_error(m, g, NULL, "internal", "relay_image needs image delivery, which this build does not provide yet; nothing was done");
}
