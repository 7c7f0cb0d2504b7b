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

/* The slice's facts in the ownership record (spec/lifecycle.md §9), but
 * snapshots (unknown, off or on); the platform in the status entry too. */
#define F(key, kind, field) RECORD_FIELD(run_state, key, kind, field)
/* clang-format off */
static const record_field record_fields[] = {
    F("platform", RECORD_STR, platform), F("nodePath", RECORD_STR, node_path),
    F("cuaDriver", RECORD_STR, cua_driver), F("capturePlan", RECORD_JSON, capture_plan),
    F("runSeq", RECORD_INT64, run_seq), F("usedStepIds", RECORD_JSON, used_step_ids),
    F("pendingReset", RECORD_JSON, pending_reset)};
/* clang-format on */
#undef F

static void slice_reset(void *slice)
{
	run_state *r = slice;
	r->snapshots = -1;
	if (r->used_step_ids == NULL)
		r->used_step_ids = json_object_new_array();
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
	add_snapshots(out, g->run->snapshots);
}

static void slice_from_record(guest *g, const json_object *in)
{
	bool snapshots = false;
	if (jsonx_get_bool(in, "snapshots", &snapshots))
		g->run->snapshots = snapshots ? 1 : 0;
}

static void slice_to_status(const guest *g, json_object *out)
{
	const run_state *r = g->run;
	add_snapshots(out, r->snapshots);
	jsonx_add_bool(out, "recordingResetPending", r->pending_reset != NULL);
	jsonx_add_int(out, "runs", r->run_seq);
}

const guest_slice_ops run_slice_ops = {
    .size = sizeof(run_state),
    GUEST_SLICE_RECORD(record_fields),
    .status = record_fields, /* platform */
    .status_count = 1,
    .reset = slice_reset,
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
