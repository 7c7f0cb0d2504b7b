/* relay_acquire (spec/tools.md §3.4): the name was reserved at dispatch
 * (session_reserve_guest); the lease is lease_acquire() (lease/acquire.c);
 * this builds the result. */
#include "console/console_report.h"
#include "console/console_state.h"
#include "lease/acquire.h"
#include "tools/tools.h"
#include "util/jsonx.h"

static const lease_acquire_console console_room = {
    .vnc_wanted = console_vnc_wanted,
    .vnc_check = console_vnc_check,
    .store_observation = console_store_acquired,
    .observation_of = console_observation_of,
};

tool_result *tool_acquire(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	relay_outcome o = OUTCOME_INIT;
	if (lease_acquire(m, g, call, &console_room, &o) != 0)
		return tools_failure(m, g, &o);
	json_object *result = outcome_take_facts(&o);
	outcome_free(&o);
	int64_t waited = 0;
	jsonx_get_int(result, "waitedForCapacityMs", &waited);
	const char *deadline = jsonx_get_str(result, "deadline");
	tool_result *r;
	if (waited > 0)
		r = tool_result_ok(result,
		                   "Acquired guest %s (%s) for task %s; lease deadline %s; waited %lld s for "
		                   "capacity; next: relay_stage",
		                   g->name, g->image, g->task, deadline, (long long)(waited / 1000));
	else
		r = tool_result_ok(result,
		                   "Acquired guest %s (%s) for task %s; lease deadline %s; next: relay_stage",
		                   g->name, g->image, g->task, deadline);
	return r;
}
