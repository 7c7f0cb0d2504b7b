/*
 * The delivery room's slice of a guest (downloads.h, downloads_slice): its
 * life and its part of the ownership record and of the status entry. The
 * queue itself is downloads.c.
 */
#include <stdlib.h>

#include "delivery/downloads.h"
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
	downloads_slice *d = calloc(1, sizeof *d);
	if (d)
		d->counters = new_counters();
	return d;
}

static void slice_destroy(void *slice)
{
	downloads_slice *d = slice;
	if (d == NULL)
		return;
	json_object_put(d->counters);
	free(d);
}

static void slice_to_record(const guest *g, json_object *r)
{
	jsonx_add(r, "downloads", json_object_get(g->downloads->counters));
}

static void slice_from_record(guest *g, const json_object *r)
{
	downloads_slice *d = g->downloads;
	json_object_put(d->counters);
	json_object *counters = NULL;
	if (json_object_object_get_ex(r, "downloads", &counters) && counters)
		d->counters = json_object_get(counters);
	else
		d->counters = new_counters();
}

static void slice_to_status(const guest *g, json_object *s)
{
	jsonx_add(s, "downloads", json_object_get(g->downloads->counters));
}

const guest_slice_ops downloads_slice_ops = {
    .create = slice_create,
    .destroy = slice_destroy,
    .to_record = slice_to_record,
    .from_record = slice_from_record,
    .to_status = slice_to_status,
};
