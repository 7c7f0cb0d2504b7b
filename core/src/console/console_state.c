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

/* The slice's facts in the ownership record (spec/lifecycle.md §9). */
#define F(key, kind, field) {key, kind, offsetof(console_state, field)}
static const record_field record_fields[] = {
    F("vnc", RECORD_BOOL, vnc),
    F("console", RECORD_JSON, observation),
    F("consoleAttempt", RECORD_JSON, attempt),
    F("consoleAttemptIds", RECORD_ARRAY, attempt_ids),
};
#undef F

static void *slice_create(void)
{
	console_state *c = slice_alloc(sizeof *c);
	if (c == NULL)
		return NULL;
	c->attempt_ids = json_object_new_array();
	return c;
}

static void slice_destroy(void *slice)
{
	console_state *c = slice;
	if (c == NULL)
		return;
	record_clear(c, RECORD_FIELDS(record_fields));
	slice_free(c);
}

static void slice_reserve(guest *g, const json_object *args)
{
	jsonx_get_bool(args, "vnc", &g->console->vnc);
}

static void slice_to_record(const guest *g, json_object *r)
{
	record_write(g->console, RECORD_FIELDS(record_fields), r);
}

static void slice_from_record(guest *g, const json_object *r)
{
	console_state *c = g->console;
	record_clear(c, RECORD_FIELDS(record_fields));
	record_read(c, RECORD_FIELDS(record_fields), r);
}

static void slice_to_status(const guest *g, json_object *s)
{
	record_write(g->console, record_fields + 1, 2, s); /* console, consoleAttempt */
}

const guest_slice_ops console_slice_ops = {
    .create = slice_create,
    .destroy = slice_destroy,
    .reserve = slice_reserve,
    .to_record = slice_to_record,
    .from_record = slice_from_record,
    .to_status = slice_to_status,
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
