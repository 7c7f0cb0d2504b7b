/*
 * The delivery room's slice of a guest (delivery_state.h): its life and its
 * part of the ownership record and of the status entry. The queue itself is
 * downloads.c.
 */
#include "delivery/delivery_state.h"

#include <stddef.h>
#include <stdlib.h>

#include "session/slice.h"
#include "util/jsonx.h"
#include "util/record.h"

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

/* The slice's facts in the ownership record (spec/lifecycle.md §9) and,
 * with the declarations under their status name, in the status entry. */
#define F(key, kind, field) RECORD_FIELD(delivery_state, key, kind, field)
/* clang-format off */
static const record_field record_fields[] = {
    F("extractions", RECORD_JSON, extractions), F("fullWorkspace", RECORD_BOOL, full_workspace),
    F("downloads", RECORD_JSON, counters)};
static const record_field status_fields[] = {
    F("declarations", RECORD_JSON, extractions), F("fullWorkspace", RECORD_BOOL, full_workspace),
    F("downloads", RECORD_JSON, counters)};
/* clang-format on */
#undef F

static void slice_reset(void *slice)
{
	delivery_state *d = slice;
	if (d->extractions == NULL)
		d->extractions = json_object_new_array();
	if (d->counters == NULL)
		d->counters = new_counters();
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

const guest_slice_ops delivery_slice_ops = {
    .size = sizeof(delivery_state),
    GUEST_SLICE_RECORD(record_fields),
    GUEST_SLICE_STATUS(status_fields),
    .reset = slice_reset,
    .reserve = slice_reserve,
};
