/*
 * The delivery room's slice of a guest (delivery_state.h): its life and its
 * part of the ownership record and of the status entry. The queue itself is
 * downloads.c.
 */
#include "delivery/delivery_state.h"

#include <stdlib.h>

#include "util/jsonx.h"

static json_object *new_counters(void)
{
	json_object *d = json_object_new_object();
	jsonx_add_int(d, "queued", 0);
	jsonx_add_int(d, "inFlight", 0);
	jsonx_add_int(d, "downloaded", 0);
	jsonx_add_int(d, "failed", 0);
	jsonx_add_int(d, "cancelled", 0);
	jsonx_add_int(d, "coalesced", 0);
	jsonx_add_bool(d, "paused", false);
	jsonx_add_str(d, "state", "open");
	return d;
}

static void *slice_create(void)
{
	delivery_state *d = calloc(1, sizeof *d);
	if (d == NULL)
		return NULL;
	d->extractions = json_object_new_array();
	d->counters = new_counters();
	return d;
}

static void slice_destroy(void *slice)
{
	delivery_state *d = slice;
	if (d == NULL)
		return;
	json_object_put(d->extractions);
	json_object_put(d->counters);
	free(d);
}

static void slice_reserve(guest *g, const json_object *args)
{
	delivery_state *d = g->delivery;
	jsonx_get_bool(args, "fullWorkspace", &d->full_workspace);
	json_object *extractions = jsonx_get_array(args, "extractions");
	if (extractions) {
		json_object_put(d->extractions);
		d->extractions = json_object_get(extractions);
	}
}

static void slice_to_record(const guest *g, json_object *r)
{
	const delivery_state *d = g->delivery;
	jsonx_add(r, "extractions", d->extractions ? json_object_get(d->extractions) : NULL);
	jsonx_add_bool(r, "fullWorkspace", d->full_workspace);
	jsonx_add(r, "downloads", json_object_get(d->counters));
}

static void slice_from_record(guest *g, const json_object *r)
{
	delivery_state *d = g->delivery;
	json_object_put(d->extractions);
	json_object *extractions = NULL;
	if (json_object_object_get_ex(r, "extractions", &extractions) && extractions)
		d->extractions = json_object_get(extractions);
	else
		d->extractions = json_object_new_array();
	d->full_workspace = false;
	jsonx_get_bool(r, "fullWorkspace", &d->full_workspace);
	json_object_put(d->counters);
	json_object *counters = NULL;
	if (json_object_object_get_ex(r, "downloads", &counters) && counters)
		d->counters = json_object_get(counters);
	else
		d->counters = new_counters();
}

static void slice_to_status(const guest *g, json_object *s)
{
	const delivery_state *d = g->delivery;
	jsonx_add(s, "declarations", d->extractions ? json_object_get(d->extractions) : NULL);
	jsonx_add_bool(s, "fullWorkspace", d->full_workspace);
	jsonx_add(s, "downloads", json_object_get(d->counters));
}

const guest_slice_ops delivery_slice_ops = {
    .create = slice_create,
    .destroy = slice_destroy,
    .reserve = slice_reserve,
    .to_record = slice_to_record,
    .from_record = slice_from_record,
    .to_status = slice_to_status,
};
