/* relay_probe: scope "host" is answered here; scope "guest" by tool_probe_guest(). */
#include <string.h>

#include "manager/manager_internal.h"
#include "util/jsonx.h"

tool_result *tool_probe(manager *m, guest *g, json_object *args, relay_call *call)
{
	const char *scope = jsonx_get_str(args, "scope");
	if (scope && strcmp(scope, "guest") == 0)
		return tool_probe_guest(m, g, args, call);
	return guest_error(m, NULL, NULL, "internal",
			   "relay_probe with scope host is not available in this build yet; nothing was done");
}
