/*
 * The runs room's slice of a guest (run_state.h): its life, its part of
 * the ownership record and of the status entry.
 */
#include "runs/run_state.h"

#include <stdlib.h>
#include <string.h>

#include "util/jsonx.h"

/* Frees the recorded facts and resets them to their empty values. */
static void reset_recorded(run_state *r)
{
	free(r->platform);
	free(r->node_path);
	free(r->cua_driver);
	r->platform = r->node_path = r->cua_driver = NULL;
	json_object_put(r->capture_plan);
	json_object_put(r->used_step_ids);
	json_object_put(r->pending_reset);
	r->capture_plan = r->used_step_ids = r->pending_reset = NULL;
	r->snapshots = -1;
	r->run_seq = 0;
}

static void *slice_create(void)
{
	run_state *r = calloc(1, sizeof *r);
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
	free(r);
}

static json_object *ref(json_object *obj)
{
	return obj ? json_object_get(obj) : NULL;
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
	jsonx_add_str(out, "platform", r->platform);
	jsonx_add_str(out, "nodePath", r->node_path);
	jsonx_add_str(out, "cuaDriver", r->cua_driver);
	add_snapshots(out, r->snapshots);
	jsonx_add(out, "capturePlan", ref(r->capture_plan));
	jsonx_add_int(out, "runSeq", r->run_seq);
	jsonx_add(out, "usedStepIds", ref(r->used_step_ids));
	jsonx_add(out, "pendingReset", ref(r->pending_reset));
}

static char *dup_str(const json_object *obj, const char *key)
{
	const char *s = jsonx_get_str(obj, key);
	return s ? strdup(s) : NULL;
}

static json_object *dup_ref(const json_object *obj, const char *key)
{
	json_object *value = NULL;
	if (!json_object_object_get_ex(obj, key, &value) || value == NULL)
		return NULL;
	return json_object_get(value);
}

static void slice_from_record(guest *g, const json_object *in)
{
	run_state *r = g->run;
	reset_recorded(r);
	r->platform = dup_str(in, "platform");
	r->node_path = dup_str(in, "nodePath");
	r->cua_driver = dup_str(in, "cuaDriver");
	bool snapshots = false;
	if (jsonx_get_bool(in, "snapshots", &snapshots))
		r->snapshots = snapshots ? 1 : 0;
	r->capture_plan = dup_ref(in, "capturePlan");
	jsonx_get_int(in, "runSeq", &r->run_seq);
	r->used_step_ids = dup_ref(in, "usedStepIds");
	if (r->used_step_ids == NULL)
		r->used_step_ids = json_object_new_array();
	r->pending_reset = dup_ref(in, "pendingReset");
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
