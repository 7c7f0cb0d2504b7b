/*
 * relay_stage (spec/tools.md §3.5, spec/guest.md §3): the order of the steps, the
 * failures and progress every step shares; see stage.h. The steps:
 * stage_inputs.c, stage_programs.c, stage_push.c, stage_result.c.
 */
#include "runs/stage.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "guestio/receiver_api.h"
#include "guestio/resident.h"
#include "receiver_protocol.h"
#include "runs/capture_plan.h"
#include "runs/receiver_builds.h"
#include "runs/recording_reset.h"
#include "runs/run_internal.h"
#include "runs/run_state.h"
#include "runs/stage_internal.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/strbuf.h"

/* ---- failures ------------------------------------------------------------------- */

int stage_fail(stage_ctx *s, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	guest_set_last_error(s->m, s->g, "relay_stage: %s", strbuf_str(&sb));
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "operation", "relay_stage");
	jsonx_add_str(d, "code", code);
	jsonx_add_str(d, "message", strbuf_str(&sb));
	guest_event(s->m, s->g, "operation-failed", "relay_stage failed; the guest is kept", d);
	json_object *st = outcome_facts(s->o);
	jsonx_add_str(st, "guest", s->g->name);
	jsonx_add_bool(st, "staged", false);
	outcome_fail(s->o, code, "%s", strbuf_str(&sb));
	strbuf_free(&sb);
	return -1;
}

int stage_cancelled(stage_ctx *s)
{
	lifecycle_record_cancelled(
	    s->m, s->g, "relay_stage", false,
	    "staging was cancelled; the guest is not staged and a retry overwrites what arrived");
	return stage_fail(s, "transfer-failed", "staging was cancelled; the guest is not staged");
}

bool stage_fact_matches(json_object *fact, uint64_t bytes, const char *sha256)
{
	int64_t fact_bytes = -1;
	const char *fact_sha256 = jsonx_get_str(fact, "sha256");
	return fact != NULL && jsonx_get_int(fact, "bytes", &fact_bytes) && (uint64_t)fact_bytes == bytes &&
	       fact_sha256 != NULL && strcmp(fact_sha256, sha256) == 0;
}

int stage_push_problem(stage_ctx *s, relay_status st, const char *what, const relay_error *err)
{
	if (st == RELAY_E_CANCELLED || relay_call_is_cancelled(s->call))
		return stage_cancelled(s);
	if (st != RELAY_OK)
		return stage_fail(s, gio_tool_code(st), "%s could not be pushed: %s", what, err->message);
	return 0;
}

void stage_phase_mark(stage_ctx *s, const char *phase)
{
	int64_t now = clock_monotonic_ms();
	log_debug("relay_stage %s: %s took %lld ms", s->g->name, phase, (long long)(now - s->mark_ms));
	s->mark_ms = now;
}

void stage_progress(stage_ctx *s, const char *message)
{
	double total = s->in.total_bytes ? (double)s->in.total_bytes : -1;
	relay_call_progress(s->call, (double)s->pushed_bytes + 1, total, message, false);
}

/* ---- relay_stage ------------------------------------------------------------------ */

static void stage_ctx_free(stage_ctx *s)
{
	if (s->hashing)
		pthread_join(s->hash_thread, NULL);
	if (s->io_open) {
		gio_write_transfers(&s->io, "relay_stage");
		gio_end(&s->io);
	}
	stage_inputs_free(&s->in);
	free(s->uname);
	free(s->receiver_version);
}

/* Step 9: the guest root's folders, with the receiver's path check. */
static int stage_prepare_root(stage_ctx *s)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	fw_strlist dirs = {0};
	static const char *const base[] = {"workspace",           "support",
	                                   RECEIVER_REQUESTS_DIR, RECEIVER_STREAMED_DIR,
	                                   RECEIVER_SCRIPTS_DIR,  "recordings"};
	for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
		fw_strlist_push(&dirs, base[i]);
	for (size_t i = 0; i < s->in.file_count; i++) {
		char *parent = fs_dirname(s->in.files[i].path);
		if (parent && strcmp(parent, ".") != 0) {
			strbuf sb = STRBUF_INIT;
			strbuf_printf(&sb, "support/%s", parent);
			bool dup = false;
			for (size_t k = 0; k < dirs.count && !dup; k++)
				dup = strcmp(dirs.items[k], strbuf_str(&sb)) == 0;
			if (!dup)
				fw_strlist_push(&dirs, strbuf_str(&sb));
			strbuf_free(&sb);
		}
		free(parent);
	}
	int r = 0;
	relay_status st = gio_rcv_prepare(&s->io, (const char *const *)dirs.items, dirs.count, &err);
	if (st == RELAY_E_NO_MEMORY)
		r = stage_fail(s, "internal", "out of memory preparing the guest root");
	else if (st != RELAY_OK)
		r = stage_fail(s, "transfer-failed", "the guest root's folders could not be prepared: %s",
		               err.message);
	fw_strlist_free(&dirs);
	return r;
}

/* Step 12: the recording session, and the guest staged. */
static int stage_start_recording(stage_ctx *s, json_object *plan, bool enabled)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	session_manager *m = s->m;
	guest *g = s->g;
	RELAY_FAILPOINT("stage.before-init");
	char hex[17], session[24];
	random_hex(hex, 16);
	snprintf(session, sizeof session, "rec-%s", hex);
	/* The session is kept before the receiver's init, so a stage cut short
	 * after it (a crash, failpoint stage.after-init) is retried with the
	 * session the guest's state/ holds. */
	session_lock(m);
	if (g->recording_session_id && strlen(g->recording_session_id) < sizeof session)
		snprintf(session, sizeof session, "%s", g->recording_session_id);
	else {
		free(g->recording_session_id);
		g->recording_session_id = strdup(session);
		guest_save(g);
	}
	session_unlock(m);
	relay_status st = gio_rcv_init(&s->io, session, &err);
	if (st != RELAY_OK)
		return stage_fail(
		    s, "transfer-failed",
		    "the recording could not start: %s; if the guest's state/ belongs to an earlier "
		    "recording, reset it (resetRecording: true) or inspect it with a diagnostic "
		    "shell script",
		    err.message);
	RELAY_FAILPOINT("stage.after-init");
	const char *node_given = jsonx_get_str(s->args, "nodePath");
	const char *cua_given = jsonx_get_str(s->args, "cuaDriver");
	const char *plan_cua = jsonx_get_str(plan, "cuaDriver");
	session_lock(m);
	g->staged = true;
	g->phase = PHASE_STAGED;
	slice_lock(g->run);
	free(g->run->platform);
	g->run->platform = strdup(s->platform);
	if (node_given) {
		free(g->run->node_path);
		g->run->node_path = strdup(node_given);
	}
	if (cua_given || plan_cua) {
		free(g->run->cua_driver);
		g->run->cua_driver = strdup(cua_given ? cua_given : plan_cua);
	}
	g->run->snapshots = enabled ? 1 : 0;
	json_object_put(g->run->capture_plan);
	g->run->capture_plan = json_object_get(plan);
	slice_unlock(g->run);
	free(g->recording_session_id);
	g->recording_session_id = strdup(session);
	guest_save(g);
	session_unlock(m);
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "platform", s->platform);
	jsonx_add_str(d, "recordingSessionId", session);
	jsonx_add_int(d, "supportFiles", (int64_t)s->in.file_count);
	jsonx_add_int(d, "workspaceFiles", (int64_t)s->in.tree.count);
	jsonx_add_int(d, "bytes", (int64_t)s->in.total_bytes);
	jsonx_add_bool(d, "snapshots", enabled);
	guest_event(m, g, "stage", "relay_stage", d);
	return 0;
}

/* Steps 7-12 of a fresh stage. Takes `reset`. */
static int stage_fresh(stage_ctx *s, json_object *reset)
{
	json_object *plan = NULL, *apps = NULL, *files = NULL;
	RELAY_FAILPOINT("stage.before-receiver");
	gio_resident_close(s->m, s->g); /* a channel of an earlier stage runs the receiver being replaced */
	int r = stage_receiver(s);
	if (r)
		goto cleanup;
	stage_phase_mark(s, "receiver");
	const char *cua_given = jsonx_get_str(s->args, "cuaDriver");
	slice_lock(s->g->run);
	char *cua_stored = s->g->run->cua_driver ? strdup(s->g->run->cua_driver) : NULL;
	slice_unlock(s->g->run);
	apps = capture_catalog_applications(s->m, s->g, s->call, NULL, 0);
	plan = capture_plan_for(s->m, s->g, apps, s->platform, cua_given ? cua_given : cua_stored);
	free(cua_stored);
	r = stage_capture_programs(s, plan);
	if (r == 0)
		r = stage_prepare_root(s);
	/* Step 10: support files and the workspace. */
	if (r == 0)
		r = stage_hash_join(s);
	relay_error fp_err;
	if (r == 0 && RELAY_FAILPOINT_ERROR("stage.before-push", &fp_err) != RELAY_OK)
		r = stage_fail(s, "transfer-failed", "%s", fp_err.message);
	if (r)
		goto cleanup;
	stage_phase_mark(s, "host hashes (waited for)");
	files = json_object_new_array();
	r = stage_support(s, files);
	if (r == 0)
		r = stage_workspace(s);
	if (r == 0)
		RELAY_FAILPOINT("stage.after-push");
	if (r == 0 && relay_call_is_cancelled(s->call))
		r = stage_cancelled(s);
	if (r)
		goto cleanup;
	/* Step 11: the capture wait. */
	bool enabled = false;
	jsonx_get_bool(plan, "enabled", &enabled);
	if (enabled) {
		int64_t after_ms = 0;
		r = stage_capture_wait(s, plan, &after_ms);
		if (r)
			goto cleanup;
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "%s; a test screenshot arrived after %lld s",
		              jsonx_get_str(plan, "because"), (long long)((after_ms + 999) / 1000));
		jsonx_add_str(plan, "because", strbuf_str(&sb));
		strbuf_free(&sb);
	}
	r = stage_start_recording(s, plan, enabled);
	if (r)
		goto cleanup;
	/* The resident receiver's channel (spec/guest.md §17 item 3); without it
	 * the runs go one-shot, so a failure here fails nothing. */
	relay_error ch_err;
	relay_error_clear(&ch_err);
	if (gio_resident_possible(&s->io) && gio_resident_ensure(&s->io, &ch_err) != RELAY_OK)
		log_warning("guest %s: receiver serve did not start (%s); runs go one-shot", s->g->name,
		            ch_err.message);
	stage_phase_mark(s, "resident channel");
	relay_call_progress(s->call, (double)s->in.total_bytes + 2,
	                    s->in.total_bytes ? (double)s->in.total_bytes + 2 : -1, "staged", true);
	r = stage_result(s, files, json_object_new_array(), reset);
	files = NULL;
	reset = NULL;
cleanup:
	json_object_put(reset);
	json_object_put(plan);
	json_object_put(apps);
	json_object_put(files);
	return r;
}

int stage_guest(session_manager *m, guest *g, json_object *args, relay_call *call, relay_outcome *o)
{
	stage_ctx s;
	memset(&s, 0, sizeof s);
	s.m = m;
	s.g = g;
	s.call = call;
	s.args = args;
	s.o = o;
	s.project = m->settings->project;
	s.mark_ms = clock_monotonic_ms();
	json_object *reset = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	bool want_reset = false;
	jsonx_get_bool(args, "resetRecording", &want_reset);
	bool gives_content = jsonx_has(args, "workspace") || jsonx_has(args, "files");
	session_lock(m);
	bool pending = run_reset_pending(g), staged = g->staged;
	session_unlock(m);
	/* Step 2: host inputs and limits, before anything is sent. */
	int r = stage_check_inputs(&s);
	if (r)
		goto cleanup;
	stage_phase_mark(&s, "host inputs (walk)");
	stage_hash_start(&s);
	/* Step 3: a requested or pending recording reset. */
	if (relay_call_is_cancelled(call)) {
		r = stage_cancelled(&s);
		goto cleanup;
	}
	if (gio_begin(&s.io, m, g, call, &err) != RELAY_OK) {
		r = stage_fail(&s, "transfer-failed", "the guest's transport is not available: %s",
		               err.message);
		goto cleanup;
	}
	s.io_open = true;
	if (want_reset || pending) {
		s.io.receiver_ready = true;
		r = recording_reset(m, g, &s.io, &reset, o);
		if (r)
			goto cleanup;
		staged = false;
	}
	/* Step 4: already staged. */
	if (staged && gives_content) {
		r = stage_fail(
		    &s, "already-staged",
		    "runtime already staged; resubmit only corrected nodePath or cuaDriver, and repair "
		    "with a diagnostic shell script");
		goto cleanup;
	}
	/* Step 5: the platform. */
	if (stage_probe_platform(&s, &err) != RELAY_OK) {
		r = stage_fail(&s, "transfer-failed",
		               "the guest's platform could not be read (uname -sm): %s", err.message);
		goto cleanup;
	}
	char *build = receiver_build_path(s.platform);
	if (build == NULL) {
		char *msg = receiver_unsupported_message(s.uname);
		r = stage_fail(&s, "unsupported-platform", "%s",
		               msg ? msg : "no receiver build for this platform");
		free(msg);
		goto cleanup;
	}
	free(build);
	/* Step 6: corrected paths only; step 7 on: a fresh stage. */
	if (staged) {
		r = stage_correct_paths(&s, reset);
	} else {
		stage_phase_mark(&s, "platform probe");
		r = stage_fresh(&s, reset);
	}
	reset = NULL;
cleanup:
	json_object_put(reset);
	stage_ctx_free(&s);
	return r;
}
