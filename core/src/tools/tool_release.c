/* relay_release (tools.md §3.10). The nothing-held refusal is answered at
 * dispatch (manager.c); the release path itself is lifecycle_release(). */
#include "tools/tools.h"
#include "lease/lifecycle.h"

tool_result *tool_release(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	return lifecycle_release(m, g, call, false);
}
