/*
 * evidence/review_takeovers.c — a person's take-overs of the live view in the
 * review (MCP_RELAY_CONSOLE_CONTROL=allow): the guest's console-take-over
 * events (host/events/), which the relay records when the console attempt
 * ends (cancel, release or finish; console/console_end.h). Input made during
 * one was the person's, not a step's, so the review lists them beside the
 * steps and the viewer page shows them.
 */
#include <stdlib.h>
#include <string.h>

#include "evidence/review_state.h"
#include "util/jsonx.h"

static int by_start(const void *x, const void *y)
{
	const char *a = jsonx_get_str(*(json_object *const *)x, "start");
	const char *b = jsonx_get_str(*(json_object *const *)y, "start");
	return strcmp(a ? a : "", b ? b : "");
}

json_object *rv_take_overs(rv *r)
{
	json_object *events = json_object_new_object();
	rv_load_json_dir(r, "host/events", ".json", events);
	json_object *list = json_object_new_array();
	json_object_object_foreach(events, name, ev)
	{
		(void)name;
		if (!rv_str_eq(jsonx_get_str(ev, "kind"), "console-take-over"))
			continue;
		json_object *d = jsonx_get_obj(ev, "details"), *t = json_object_new_object();
		jsonx_add_str(t, "attemptId", jsonx_get_str(d, "attempt_id"));
		jsonx_add_str(t, "start", jsonx_get_str(d, "start"));
		jsonx_add_str(t, "end", jsonx_get_str(d, "end"));
		json_object_array_add(list, t);
	}
	json_object_put(events);
	json_object_array_sort(list, by_start);
	return list;
}
