/* relay_probe, scope "guest": placeholder until staging lands; refuses honestly. */
#include "manager/manager_internal.h"

tool_result *tool_probe_guest(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	(void)call;
	return guest_error(m, g, NULL, "internal",
			   "relay_probe with scope guest needs the guest runtime checks, which this build does not "
			   "provide yet; nothing was done");
}
