/* relay_stage: the result's facts, and a staged guest's corrected
 * executable paths (spec/tools.md §3.5, spec/guest.md §3.6); see stage_internal.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/delivery_state.h"
#include "delivery/image_delivery.h"
#include "guestio/receiver_api.h"
#include "runs/capture_plan.h"
#include "runs/run_state.h"
#include "runs/stage_internal.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

#define STAGE_PROBE_TIMEOUT_MS 10000 /* <path> --version */

/* ---- the result --------------------------------------------------------------------- */

int stage_result(stage_ctx *s, json_object *files, json_object *updated, json_object *reset)
{
	session_manager *m = s->m;
	guest *g = s->g;
	const char *plugin_name = capture_plugin_name(m);
	json_object *r = json_object_new_object();
	session_lock(m);
	slice_lock(g->run);
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_bool(r, "staged", g->staged);
	json_object *rec = json_object_new_object();
	jsonx_add_str(rec, "platform", g->run->platform);
	jsonx_add_str(rec, "version", s->receiver_version ? s->receiver_version : RELAY_VERSION);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/receiver", g->guest_root);
	jsonx_add_str(rec, "remote", strbuf_str(&sb));
	strbuf_reset(&sb);
	if (s->receiver_sha[0]) {
		jsonx_add_str(rec, "sha256", s->receiver_sha);
		jsonx_add_int(rec, "bytes", (int64_t)s->receiver_bytes);
	} else {
		jsonx_add_null(rec, "sha256");
		jsonx_add_null(rec, "bytes");
	}
	jsonx_add(r, "receiver", rec);
	strbuf_printf(&sb, "%s/workspace", g->guest_root);
	jsonx_add_str(r, "workspace", strbuf_str(&sb));
	strbuf_free(&sb);
	if (s->in.has_workspace) {
		json_object *wf = json_object_new_object();
		jsonx_add_int(wf, "count", (int64_t)s->in.tree.count);
		jsonx_add_int(wf, "bytes", (int64_t)s->in.tree.total_bytes);
		jsonx_add(r, "workspaceFiles", wf);
	} else {
		jsonx_add_null(r, "workspaceFiles");
	}
	jsonx_add(r, "files", files);
	jsonx_add(r, "updated", updated);
	jsonx_add_str(r, "nodePath", g->run->node_path ? g->run->node_path : "node");
	jsonx_add_str(r, "cuaDriver", g->run->snapshots == 1 ? g->run->cua_driver : NULL);
	jsonx_add_str(r, "recordingSessionId", g->recording_session_id);
	jsonx_add(r, "reset", reset);
	jsonx_add_str(r, "evidencePath", g->evidence_path);
	jsonx_add(r, "extractions", json_object_get(g->delivery->extractions));
	json_object *caps = json_object_new_object();
	jsonx_add(caps, "image", image_delivery_capability_json());
	json_object *snap = json_object_new_object();
	jsonx_add_bool(snap, "enabled", g->run->snapshots == 1);
	json_object *cap = jsonx_get_obj(g->run->capture_plan, "capture");
	jsonx_add_str(snap, "capture",
	              cap && jsonx_get_str(cap, "plugin") ? jsonx_get_str(cap, "plugin") : plugin_name);
	const char *because = jsonx_get_str(g->run->capture_plan, "because");
	jsonx_add_str(snap, "because", because ? because : "no capture plan");
	jsonx_add(caps, "snapshots", snap);
	jsonx_add(r, "capabilities", caps);
	slice_unlock(g->run);
	session_unlock(m);
	json_object_put(s->o->facts);
	s->o->facts = r;
	return 0;
}

/* ---- already staged: corrected executable paths only (spec/guest.md §3.6) ---------------- */

static json_object *check_executable(stage_ctx *s, const char *field, const char *path)
{
	json_object *u = json_object_new_object();
	jsonx_add_str(u, "field", field);
	jsonx_add_str(u, "value", path);
	const char *argv[] = {path, "--version", NULL};
	relay_exec_result res;
	relay_error err;
	json_object *check = json_object_new_object();
	jsonx_add_str(check, "command", "--version");
	relay_status st = gio_exec(&s->io, argv, NULL, STAGE_PROBE_TIMEOUT_MS, 1 << 16, 0, &res, &err);
	if (st == RELAY_OK && !res.timed_out && res.exit_code == 0) {
		jsonx_add_bool(check, "ready", true);
		size_t len = res.out_len;
		while (len && (res.out[len - 1] == '\n' || res.out[len - 1] == '\r'))
			len--;
		size_t clean = 0;
		char *text = utf8_sanitize(res.out ? res.out : "", len > 200 ? 200 : len, &clean);
		jsonx_add_strn(check, "version", text ? text : "", text ? clean : 0);
		free(text);
	} else {
		jsonx_add_bool(check, "ready", false);
		char diag[RELAY_ERROR_MESSAGE_BYTES];
		if (st != RELAY_OK)
			snprintf(diag, sizeof diag, "%s", err.message);
		else
			snprintf(diag, sizeof diag, "%s --version %s (exit %d)", path,
			         res.timed_out ? "timed out" : "failed", res.exit_code);
		jsonx_add_str(check, "diagnostic", diag);
	}
	gio_exec_result_free(&res);
	jsonx_add(u, "check", check);
	return u;
}

int stage_correct_paths(stage_ctx *s, json_object *reset)
{
	const char *node = jsonx_get_str(s->args, "nodePath");
	const char *cua = jsonx_get_str(s->args, "cuaDriver");
	json_object *updated = json_object_new_array();
	if (node)
		json_object_array_add(updated, check_executable(s, "nodePath", node));
	if (cua)
		json_object_array_add(updated, check_executable(s, "cuaDriver", cua));
	/* Reattach the recording session: `receiver init` with the same id
	 * answers created: false and refuses another session's state. */
	session_lock(s->m);
	char *session = s->g->recording_session_id ? strdup(s->g->recording_session_id) : NULL;
	session_unlock(s->m);
	relay_error err;
	memset(&err, 0, sizeof err);
	s->io.receiver_ready = true;
	relay_status st = session ? gio_rcv_init(&s->io, session, &err) : RELAY_E_INTERNAL;
	free(session);
	if (st != RELAY_OK) {
		json_object_put(updated);
		json_object_put(reset);
		return stage_fail(
		    s, "integrity-failed",
		    "the recording session could not be reattached: %s; repair with a diagnostic shell "
		    "script or reset the recording (resetRecording: true)",
		    session ? err.message : "the guest has no recording session");
	}
	json_object *plan = NULL;
	if (cua) {
		json_object *apps = capture_catalog_applications(s->m, s->g, s->call, NULL, 0);
		plan = capture_plan_for(s->m, s->g, apps, s->platform, cua);
		json_object_put(apps);
	}
	slice_lock(s->g->run);
	if (node) {
		free(s->g->run->node_path);
		s->g->run->node_path = strdup(node);
	}
	if (cua) {
		free(s->g->run->cua_driver);
		s->g->run->cua_driver = strdup(cua);
		/* The snapshot verdict of the stage stands; only the command
		 * follows the corrected driver path. */
		if (plan && s->g->run->capture_plan && jsonx_get_obj(plan, "capture") &&
		    s->g->run->snapshots == 1) {
			jsonx_add(s->g->run->capture_plan, "capture",
			          json_object_get(jsonx_get_obj(plan, "capture")));
			jsonx_add_str(s->g->run->capture_plan, "cuaDriver", cua);
		}
	}
	slice_unlock(s->g->run);
	guest_persist(s->m, s->g);
	json_object_put(plan);
	if (node || cua) {
		json_object *d = json_object_new_object();
		jsonx_add(d, "updated", json_object_get(updated));
		guest_event(s->m, s->g, "stage", "relay_stage corrected executable paths", d);
	}
	return stage_result(s, json_object_new_array(), updated, reset);
}
