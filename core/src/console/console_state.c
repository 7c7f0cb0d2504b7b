/*
 * The console room's slice of a guest (console_state.h): its life and its
 * part of the ownership record and of the status entry.
 */
#include "console/console_state.h"

#include <stddef.h>
#include <stdlib.h>

#include "console/console_report.h"
#include "session/slice.h"
#include "util/jsonx.h"
#include "util/record.h"

/* The slice's facts in the ownership record (spec/lifecycle.md §9), and
 * the observation and attempt in the status entry. */
#define F(key, kind, field) RECORD_FIELD(console_state, key, kind, field)
/* clang-format off */
static const record_field record_fields[] = {
    F("vnc", RECORD_BOOL, vnc), F("console", RECORD_JSON, observation),
    F("consoleAttempt", RECORD_JSON, attempt), F("consoleAttemptIds", RECORD_JSON, attempt_ids)};
/* clang-format on */
#undef F

static void slice_reset(void *slice)
{
	console_state *c = slice;
	if (c->attempt_ids == NULL)
		c->attempt_ids = json_object_new_array();
}

static void slice_reserve(guest *g, const json_object *args)
{
	jsonx_get_bool(args, "vnc", &g->console->vnc);
}

const guest_slice_ops console_slice_ops = {
    .size = sizeof(console_state),
    GUEST_SLICE_RECORD(record_fields),
    .status = record_fields + 1, /* console, consoleAttempt */
    .status_count = 2,
    .reset = slice_reset,
    .reserve = slice_reserve,
};

bool console_vnc_wanted(const guest *g)
{
	return g->console->vnc;
}

void console_store_acquired(guest *g, const json_object *report)
{
	console_state *c = g->console;
	json_object *observation = console_observation(report);
	if (observation == NULL)
		observation = json_object_get((json_object *)report);
	slice_lock(c);
	json_object_put(c->observation);
	c->observation = observation;
	slice_unlock(c);
}

json_object *console_observation_of(const guest *g)
{
	slice_lock(g->console);
	json_object *observation = g->console->observation ? json_object_get(g->console->observation) : NULL;
	slice_unlock(g->console);
	return observation;
}
