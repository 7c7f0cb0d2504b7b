/*
 * The console room's slice of a guest (console_state.h): its life and its
 * part of the ownership record and of the status entry.
 */
#include "console/console_state.h"

#include <stdlib.h>

#include "console/console_report.h"
#include "util/jsonx.h"

static void *slice_create(void)
{
	console_state *c = calloc(1, sizeof *c);
	if (c == NULL)
		return NULL;
	c->attempt_ids = json_object_new_array();
	return c;
}

static void clear(console_state *c)
{
	json_object_put(c->observation);
	json_object_put(c->attempt);
	json_object_put(c->attempt_ids);
	c->observation = c->attempt = c->attempt_ids = NULL;
}

static void slice_destroy(void *slice)
{
	console_state *c = slice;
	if (c == NULL)
		return;
	clear(c);
	free(c);
}

static json_object *ref(json_object *obj)
{
	return obj ? json_object_get(obj) : NULL;
}

static json_object *dup_ref(const json_object *obj, const char *key)
{
	json_object *value = NULL;
	if (!json_object_object_get_ex(obj, key, &value) || value == NULL)
		return NULL;
	return json_object_get(value);
}

static void slice_reserve(guest *g, const json_object *args)
{
	jsonx_get_bool(args, "vnc", &g->console->vnc);
}

static void slice_to_record(const guest *g, json_object *r)
{
	const console_state *c = g->console;
	jsonx_add_bool(r, "vnc", c->vnc);
	jsonx_add(r, "console", ref(c->observation));
	jsonx_add(r, "consoleAttempt", ref(c->attempt));
	jsonx_add(r, "consoleAttemptIds", ref(c->attempt_ids));
}

static void slice_from_record(guest *g, const json_object *r)
{
	console_state *c = g->console;
	clear(c);
	c->vnc = false;
	jsonx_get_bool(r, "vnc", &c->vnc);
	c->observation = dup_ref(r, "console");
	c->attempt = dup_ref(r, "consoleAttempt");
	c->attempt_ids = dup_ref(r, "consoleAttemptIds");
	if (c->attempt_ids == NULL)
		c->attempt_ids = json_object_new_array();
}

static void slice_to_status(const guest *g, json_object *s)
{
	const console_state *c = g->console;
	jsonx_add(s, "console", ref(c->observation));
	jsonx_add(s, "consoleAttempt", ref(c->attempt));
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
	json_object_put(c->observation);
	c->observation = observation ? observation : json_object_get((json_object *)report);
}

json_object *console_observation_of(const guest *g)
{
	return ref(g->console->observation);
}
