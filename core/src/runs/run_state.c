/*
 * The runs room's slice of a guest (run_state.h): its life, its part of
 * the ownership record and of the status entry.
 */
#include "runs/run_state.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "session/slice.h"
#include "util/jsonx.h"
#include "util/record.h"

/* The slice's facts in the ownership record (spec/lifecycle.md §9), around
 * snapshots (unknown, off or on). */
#define F(key, kind, field) {key, kind, offsetof(run_state, field)}
static const record_field staging_fields[] = {
    F("platform", RECORD_STR, platform),
    F("nodePath", RECORD_STR, node_path),
    F("cuaDriver", RECORD_STR, cua_driver),
};
static const record_field run_fields[] = {
    F("capturePlan", RECORD_JSON, capture_plan),
    F("runSeq", RECORD_INT64, run_seq),
    F("usedStepIds", RECORD_ARRAY, used_step_ids),
    F("pendingReset", RECORD_JSON, pending_reset),
};
#undef F

/* Frees the recorded facts and resets them to their empty values. */
static void reset_recorded(run_state *r)
{
	record_clear(r, RECORD_FIELDS(staging_fields));
	record_clear(r, RECORD_FIELDS(run_fields));
	r->snapshots = -1;
}

static void *slice_create(void)
{
	run_state *r = slice_alloc(sizeof *r);
	if (r == NULL)
		return NULL;
	r->snapshots = -1;
	r->used_step_ids = json_object_new_array();
	return r;
}

static void slice_destroy(void *slice)
{
	run_state *r = slice;
	if (r == NULL)
		return;
	reset_recorded(r);
	slice_free(r);
}

static void add_snapshots(json_object *obj, int snapshots)
{
	if (snapshots < 0)
		jsonx_add_null(obj, "snapshots");
	else
		jsonx_add_bool(obj, "snapshots", snapshots == 1);
}

static void slice_to_record(const guest *g, json_object *out)
{
	const run_state *r = g->run;
	record_write(r, RECORD_FIELDS(staging_fields), out);
	add_snapshots(out, r->snapshots);
	record_write(r, RECORD_FIELDS(run_fields), out);
}

static void slice_from_record(guest *g, const json_object *in)
{
	run_state *r = g->run;
	reset_recorded(r);
	record_read(r, RECORD_FIELDS(staging_fields), in);
	bool snapshots = false;
	if (jsonx_get_bool(in, "snapshots", &snapshots))
		r->snapshots = snapshots ? 1 : 0;
	record_read(r, RECORD_FIELDS(run_fields), in);
}

static void slice_to_status(const guest *g, json_object *out)
{
	const run_state *r = g->run;
	jsonx_add_str(out, "platform", r->platform);
	add_snapshots(out, r->snapshots);
	jsonx_add_bool(out, "recordingResetPending", r->pending_reset != NULL);
	jsonx_add_int(out, "runs", r->run_seq);
}

const guest_slice_ops run_slice_ops = {
    .create = slice_create,
    .destroy = slice_destroy,
    .to_record = slice_to_record,
    .from_record = slice_from_record,
    .to_status = slice_to_status,
};

bool run_reset_pending(const guest *g)
{
	slice_lock(g->run);
	bool pending = g->run->pending_reset != NULL;
	slice_unlock(g->run);
	return pending;
}
