/*
 * receiver/run.c — see run.h. The order of files and journal lines follows
 * spec/guest.md §7.3 and §9 exactly.
 */
#include "run_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "failpoint.h"

extern char **environ;

/* ---- process hooks: the lock records every operation's group ------------ */

static int hook_before_fork(void *c, rerr *err)
{
	run_ctx *ctx = c;
	ctx->lock.pending_spawn = 1;
	ctx->lock.phase = ctx->phase_name;
	/* Commit point: the request, script, started marker, journal and
	 * records so far are durable before anything is started. */
	if (lock_write_owner(&ctx->lock, err) != 0)
		return -1;
	return fsx_commit(err);
}

static int hook_after_fork(void *c, pid_t pid, rerr *err)
{
	run_ctx *ctx = c;
	/* Commit point: the pid is durable before the child may exec. */
	if (lock_add_group(&ctx->lock, pid, err) != 0)
		return -1;
	return fsx_commit(err);
}

static int hook_after_end(void *c, pid_t pgid, int confirmed, rerr *err)
{
	run_ctx *ctx = c;
	if (pgid <= 0) {
		ctx->lock.pending_spawn = 0;
		return lock_write_owner(&ctx->lock, err);
	}
	if (confirmed)
		return lock_drop_group(&ctx->lock, pgid, err);
	{
		jv *f = jv_object();
		char *diag = xasprintf("process group %d could not be confirmed stopped within %d ms",
		                       (int)pgid, CONFIRM_WAIT_MS);
		jv_set_str(f, "executionId", ctx->execution_id);
		jv_set_int(f, "pgid", pgid);
		jv_set_str(f, "diagnostic", diag);
		free(diag);
		run_journal_note(ctx, "resource-stop", f);
	}
	return lock_write_owner(&ctx->lock, err);
}

static int hook_cancelled(void *c)
{
	run_ctx *ctx = c;
	return lock_cancel_requested(&ctx->lock);
}

void run_make_hooks(run_ctx *ctx, spawn_hooks *hooks, int with_cancel)
{
	memset(hooks, 0, sizeof(*hooks));
	hooks->before_fork = hook_before_fork;
	hooks->after_fork = hook_after_fork;
	hooks->after_end = hook_after_end;
	hooks->cancelled = with_cancel ? hook_cancelled : NULL;
	hooks->ctx = ctx;
}

/* ---- the run ------------------------------------------------------------- */

/* What a kill's diagnostic adds when termination was not confirmed. */
static const char *unconfirmed_note(const run_ctx *ctx)
{
	return ctx->proc.termination_confirmed ? "" : ", but its termination was not confirmed";
}

/* Step 6: the routing-decision annotation. */
static int journal_routing_decision(run_ctx *ctx, rerr *err)
{
	jv *f = jv_object();
	jv *d = jv_object();
	jv *because = jv_get(ctx->req, "because");
	jv *step = jv_get(ctx->req, "step");
	jv *mode = jv_get(ctx->req, "evidenceMode");
	jv *tmo = jv_get(ctx->req, "timeoutMs");
	jv_set_str(f, "name", "routing-decision");
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set(d, "because", jv_is(because, JV_STRING) ? jv_copy(because) : jv_null());
	jv_set(d, "step", jv_is(step, JV_OBJECT) ? jv_copy(step) : jv_null());
	jv_set(d, "evidenceMode", jv_is(mode, JV_STRING) ? jv_copy(mode) : jv_null());
	jv_set(d, "timeoutMs", jv_is(tmo, JV_NUMBER) ? jv_copy(tmo) : jv_null());
	jv_set(f, "details", d);
	return journal_append(&ctx->jr, "annotation", f, err);
}

/* Step 10: the execution-start line. */
static int journal_execution_start(run_ctx *ctx, rerr *err)
{
	jv *f = jv_object();
	jv *ident = jv_object();
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set(f, "argv", run_argv_json(ctx->argv));
	jv_set_str(f, "cwd", ctx->cwd);
	jv_set(f, "step", jv_copy(jv_get(ctx->req, "step")));
	jv_set_str(f, "evidenceMode", "recorded");
	jv_set_int(f, "timeoutMs", ctx->timeout_ms);
	jv_set_str(ident, "sha256", ctx->script_sha);
	jv_set_str(ident, "language", ctx->language);
	jv_set_str(ident, "remotePath", ctx->script_path);
	jv_set(f, "scriptIdentity", ident);
	return journal_append(&ctx->jr, "execution-start", f, err);
}

/* Step 10: the action-start line with the snapshot plan, and the pending
 * action record. */
static int journal_action_start(run_ctx *ctx, rerr *err)
{
	jv *f = jv_object();
	jv *plan = jv_object();
	int standalone = ctx->group_phase == NULL;
	int first = !standalone && strcmp(ctx->group_phase, "first") == 0;
	int last = !standalone && strcmp(ctx->group_phase, "last") == 0;
	jv_set_str(f, "actionId", ctx->action_id);
	jv_set_str(f, "attemptId", ctx->attempt_id);
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set_str(f, "stepId", ctx->step_id);
	jv_set_str(f, "title", ctx->title);
	jv_set_str(f, "inputMode", ctx->input_mode);
	jv_set_bool(plan, "capturesBefore", ctx->capture_on && (standalone || first));
	if (ctx->capture_on && (standalone || last)) {
		jv *after = jv_object();
		jv_set_int(after, "afterIntervalMs", ctx->after_ms);
		jv_set(plan, "capturesAfter", after);
	} else {
		jv_set_bool(plan, "capturesAfter", 0);
	}
	if (ctx->group_id) {
		jv *g = jv_object();
		jv_set_str(g, "groupId", ctx->group_id);
		jv_set_str(g, "phase", ctx->group_phase);
		jv_set(plan, "group", g);
	} else {
		jv_set_null(plan, "group");
	}
	jv_set_str(plan, "role", run_role_name(ctx));
	jv_set_bool(plan, "captureOff", !ctx->capture_on);
	jv_set(f, "snapshotPlan", plan);
	if (journal_append(&ctx->jr, "action-start", f, err) != 0)
		return -1;
	return run_write_action_record(ctx, "pending", err);
}

/* Steps 13-14: why the script's end leaves the outcome uncertain (the text
 * in diag_buf or a constant), or NULL when it ended on its own. */
static const char *script_end_uncertain(const run_ctx *ctx, char *diag_buf, size_t diag_len)
{
	if (ctx->proc.spawn_failed) {
		text_format(diag_buf, diag_len, "spawn failed: %s", ctx->proc.spawn_error);
		return diag_buf;
	} else if (ctx->proc.cancelled) {
		return DIAG_CANCELLED;
	} else if (ctx->proc.timed_out) {
		text_format(diag_buf, diag_len, "timed out after %lld ms; the process group was killed%s",
		            (long long)ctx->timeout_ms, unconfirmed_note(ctx));
		return diag_buf;
	} else if (ctx->proc.output_truncated) {
		text_format(diag_buf, diag_len, "output exceeded %u bytes; the process group was killed%s",
		            OUTPUT_BUDGET_BYTES, unconfirmed_note(ctx));
		return diag_buf;
	} else if (!ctx->proc.termination_confirmed) {
		text_format(diag_buf, diag_len, "termination of process group %d was not confirmed",
		            (int)ctx->proc.pgid);
		return diag_buf;
	}
	return NULL;
}

/* Step 16: the execution and action records, the snapshot-evidence and
 * action-completion lines and the receipt; *success_out: the script
 * completed and exited 0. */
static int record_outcome(run_ctx *ctx, const char *kind, const jv *exit_status, jv *outcome, char sha[65],
                          uint64_t *bytes, int *success_out, rerr *err)
{
	receipt_info ri;
	const char *image_status;
	int member = ctx->group_phase && strcmp(ctx->group_phase, "member") == 0;
	if (!ctx->capture_on || member)
		image_status = "not-requested";
	else if (ctx->captures_unknown)
		image_status = "capture-unknown";
	else if (ctx->captures_failed || ctx->descriptors->count == 0)
		image_status = "capture-failed";
	else
		image_status = "available";
	*success_out = strcmp(kind, "completed") == 0 && ctx->have_proc && ctx->proc.exited &&
	               !ctx->proc.signal_no && ctx->proc.exit_code == 0;
	if (run_write_execution_record(ctx, kind, ctx->argv, exit_status ? jv_copy(exit_status) : NULL,
	                               err) != 0)
		return -1;
	if (run_write_action_record(ctx, strcmp(kind, "completed") == 0 ? "recorded" : "uncertain", err) != 0)
		return -1;
	{
		jv *f = jv_object();
		jv_set_str(f, "executionId", ctx->execution_id);
		jv_set_str(f, "actionId", ctx->action_id);
		jv_set_str(f, "status", image_status);
		jv_set(f, "fileNames", jv_copy(ctx->file_names));
		if (journal_append(&ctx->jr, "snapshot-evidence", f, err) != 0)
			return -1;
	}
	{
		jv *f = jv_object();
		jv *tool = jv_object();
		jv *value = jv_object();
		int confirmed = ctx->have_proc ? ctx->proc.termination_confirmed : 1;
		jv_set_str(f, "executionId", ctx->execution_id);
		jv_set_str(f, "actionId", ctx->action_id);
		jv_set_str(f, "state", strcmp(kind, "completed") == 0 ? "recorded" : "uncertain");
		jv_set_str(tool, "kind", *success_out ? "success" : "failure");
		jv_set(value, "exitStatus", exit_status ? jv_copy(exit_status) : jv_null());
		jv_set_bool(value, "timedOut", ctx->have_proc && ctx->proc.timed_out);
		jv_set_bool(value, "outputTruncated", ctx->have_proc && ctx->proc.output_truncated);
		jv_set_bool(value, "terminationConfirmed", confirmed);
		jv_set(tool, "value", value);
		jv_set(f, "toolOutcome", tool);
		if (journal_append(&ctx->jr, "action-completion", f, err) != 0)
			return -1;
	}
	memset(&ri, 0, sizeof(ri));
	ri.outcome = outcome;
	ri.image_status = image_status;
	ri.timed_out = ctx->have_proc && ctx->proc.timed_out;
	ri.output_truncated = ctx->have_proc && ctx->proc.output_truncated;
	ri.termination_confirmed =
	    (ctx->have_proc ? ctx->proc.termination_confirmed : 1) && ctx->lock.group_count == 0;
	ri.argv = ctx->argv;
	if (ctx->have_proc) {
		ri.stdout_v = run_output_json(&ctx->proc.out, ctx->proc.output_truncated);
		ri.stderr_v = run_output_json(&ctx->proc.err, ctx->proc.output_truncated);
	}
	int r = run_write_receipt(ctx, &ri, sha, bytes, err);
	jv_free(ri.stdout_v);
	jv_free(ri.stderr_v);
	return r;
}

/* A first event's group opens: it becomes the active group and a used
 * id, written back, and the action notes it. */
static int open_group(run_ctx *ctx, jv *groups, rerr *err)
{
	jv *active = jv_object();
	jv *details = jv_object();
	jv_set_str(active, "groupId", ctx->group_id);
	jv_set_str(active, "sessionId", ctx->session_id);
	jv_set_str(active, "attemptId", ctx->attempt_id);
	jv_set_str(active, "openedBy", ctx->execution_id);
	jv_set(groups, "active", active);
	jv_push(jv_get(groups, "used"), jv_str(ctx->group_id));
	if (run_groups_write(ctx, groups, err) != 0) {
		jv_free(details);
		return -1;
	}
	jv_set_str(details, "groupId", ctx->group_id);
	run_group_annotation(ctx, "group-open", details);
	return 0;
}

/* A last event's group closes when the event succeeded (with its one
 * snapshot when capturing); else the action notes it left incomplete. */
static int close_group(run_ctx *ctx, jv *groups, int success, const char *kind, rerr *err)
{
	jv *details = jv_object();
	jv_set_str(details, "groupId", ctx->group_id);
	if (success && (!ctx->capture_on || ctx->descriptors->count == 1)) {
		jv_set(groups, "active", jv_null());
		if (run_groups_write(ctx, groups, err) != 0) {
			jv_free(details);
			return -1;
		}
		run_group_annotation(ctx, "group-close", details);
	} else {
		jv_set_str(details, "outcome", kind);
		run_group_annotation(ctx, "group-incomplete", details);
	}
	return 0;
}

/* How many snapshots the event retains: before and after alone, one as
 * the first or last of a group, none as a member (or without capture). */
static size_t snapshots_planned(const run_ctx *ctx)
{
	if (!ctx->capture_on)
		return 0;
	if (!ctx->group_phase)
		return 2;
	if (strcmp(ctx->group_phase, "member") == 0)
		return 0;
	return 1;
}

static int execute(run_ctx *ctx, char sha[65], uint64_t *bytes, rerr *err)
{
	const char *diag;
	jv *groups = NULL;
	capture_outcome co;
	int internal = 0, r, rc = -1;
	const char *kind = "completed";
	const char *uncertain_diag = NULL;
	char diag_buf[1200];
	jv *exit_status = NULL;
	jv *outcome = NULL;
	int success = 0;

	/* 6. routing decision */
	if (journal_routing_decision(ctx, err) != 0)
		goto cleanup;
	/* 7. validation */
	diag = run_validate_request(ctx);
	if (diag) {
		rc = run_refuse(ctx, diag, "not-requested", sha, bytes, err);
		goto cleanup;
	}
	/* 8. group rules */
	groups = run_groups_read(ctx, err);
	if (!groups)
		goto cleanup;
	diag = run_group_rules(ctx, groups);
	if (diag) {
		rc = run_refuse(ctx, diag, "not-requested", sha, bytes, err);
		goto cleanup;
	}
	/* 9. runtime */
	diag = run_resolve_runtime(ctx, err, &internal);
	if (internal)
		goto cleanup;
	if (diag) {
		rc = run_refuse(ctx, diag, "not-requested", sha, bytes, err);
		goto cleanup;
	}
	/* The recorder starts now, so that its start overlaps steps 10-12. */
	if (ctx->capture_on)
		record_begin(ctx);
	/* 10. execution-start, action-start, pending action record */
	if (journal_execution_start(ctx, err) != 0 || journal_action_start(ctx, err) != 0)
		goto cleanup;
	/* 11. capture gate */
	if (ctx->capture_on && ctx->group_phase && strcmp(ctx->group_phase, "first") != 0) {
		r = run_capture_gate(ctx, &co, err);
		if (r < 0)
			goto cleanup;
		if (r > 0) {
			text_format(diag_buf, sizeof(diag_buf), "capture gate probe failed: %s",
			            co.diagnostic);
			rc = run_refuse(ctx, diag_buf, co.unknown ? "capture-unknown" : "capture-failed", sha,
			                bytes, err);
			goto cleanup;
		}
	}
	/* 12. before-snapshot */
	if (ctx->capture_on && (!ctx->group_phase || strcmp(ctx->group_phase, "first") == 0)) {
		r = run_take_snapshot(ctx, "before", &co, err);
		if (r < 0)
			goto cleanup;
		if (r > 0) {
			text_format(diag_buf, sizeof(diag_buf), "before-snapshot failed: %s", co.diagnostic);
			rc = run_refuse(ctx, diag_buf, co.unknown ? "capture-unknown" : "capture-failed", sha,
			                bytes, err);
			goto cleanup;
		}
	}
	/* A first event opens its group once it is admitted. */
	if (ctx->group_phase && strcmp(ctx->group_phase, "first") == 0 && open_group(ctx, groups, err) != 0)
		goto cleanup;
	/* 13-14. the script, recorded from just before it (record.h) */
	record_await(ctx);
	if (lock_cancel_requested(&ctx->lock)) {
		kind = "uncertain";
		uncertain_diag = DIAG_CANCELLED;
	} else {
		if (run_dispatch(ctx, err) != 0)
			goto cleanup;
		exit_status = run_exit_status_json(&ctx->proc);
		uncertain_diag = script_end_uncertain(ctx, diag_buf, sizeof diag_buf);
		if (uncertain_diag)
			kind = "uncertain";
	}
	/* 15. after-snapshot */
	if (ctx->capture_on && (!ctx->group_phase || strcmp(ctx->group_phase, "last") == 0)) {
		sleep_ms(ctx->after_ms);
		r = run_take_snapshot(ctx, "after", &co, err);
		if (r < 0)
			goto cleanup;
		if (r > 0 && !uncertain_diag) {
			text_format(diag_buf, sizeof(diag_buf), "after-snapshot failed: %s", co.diagnostic);
			kind = "uncertain";
			uncertain_diag = diag_buf;
		}
	}
	record_stop(ctx);
	run_note_left_running(ctx);
	/* 16. outcome */
	{
		size_t expected = snapshots_planned(ctx);
		if (!uncertain_diag && ctx->descriptors->count != expected) {
			text_format(diag_buf, sizeof(diag_buf),
			            "wrong number of snapshots: %zu planned, %zu retained", expected,
			            ctx->descriptors->count);
			kind = "uncertain";
			uncertain_diag = diag_buf;
		}
	}
	outcome = run_outcome_json(kind, uncertain_diag, exit_status ? jv_copy(exit_status) : NULL);
	if (record_outcome(ctx, kind, exit_status, outcome, sha, bytes, &success, err) != 0)
		goto cleanup;
	/* A successful last closes its group; any other outcome leaves it open. */
	if (ctx->group_phase && strcmp(ctx->group_phase, "last") == 0 &&
	    close_group(ctx, groups, success, kind, err) != 0)
		goto cleanup;
	rc = 0;
cleanup:
	jv_free(groups);
	jv_free(exit_status);
	jv_free(outcome);
	return rc;
}

/* Step 1: reads the request (from standard input's parts, or a file
 * below the guest root) into *text and parses it into ctx. -1 after a
 * refusal frame, which the caller answers with EXIT_USAGE. */
static int read_request(run_ctx *ctx, const char *request_path, int from_stdin, stdin_parts *preread,
                        buf *text)
{
	const char *root = ctx->root;
	const char *req_rel;
	int too_large = 0;
	rerr err;
	if (root_check(root, &err) != 0) {
		run_emit_outcome_frame("unknown", "refused", err.msg, NULL);
		return -1;
	}
	fsx_defer_syncs(root);
	if (preread) {
		ctx->stdio_parts = 1;
		ctx->parts = *preread; /* taken */
		memset(preread, 0, sizeof(*preread));
		buf_append(text, ctx->parts.request.data ? ctx->parts.request.data : "",
		           ctx->parts.request.len);
	} else if (from_stdin) {
		ctx->stdio_parts = 1;
		if (stdin_parts_read(STDIN_FILENO, &ctx->parts, &err) != 0) {
			run_emit_outcome_frame("unknown", "refused", err.msg, NULL);
			return -1;
		}
		buf_append(text, ctx->parts.request.data ? ctx->parts.request.data : "",
		           ctx->parts.request.len);
	} else if (path_below_root(root, request_path, &req_rel) != 0 || !*req_rel ||
	           path_walk_check(root, req_rel, 0, NULL, &err) != 0) {
		run_emit_outcome_frame("unknown", "refused", "request must be a file below the guest root",
		                       NULL);
		return -1;
	} else if (read_file_limited(request_path, REQUEST_MAX_BYTES, text, NULL, &too_large, &err) != 0) {
		run_emit_outcome_frame("unknown", "refused",
		                       too_large ? "request file exceeds 1 MiB (1048576 bytes)" : err.msg,
		                       NULL);
		return -1;
	}
	sha256_hex_of(text->data, text->len, ctx->request_sha);
	ctx->req = jv_parse(text->data, text->len, &err);
	if (!ctx->req || ctx->req->type != JV_OBJECT) {
		run_emit_outcome_frame("unknown", "refused",
		                       ctx->req ? "request is not a JSON object" : err.msg, NULL);
		return -1;
	}
	ctx->execution_id = jv_get_str(ctx->req, "executionId");
	if (!execution_id_valid(ctx->execution_id)) {
		ctx->execution_id = NULL;
		run_emit_outcome_frame("unknown", "refused", "request has no valid executionId", NULL);
		return -1;
	}
	if (ctx->stdio_parts && stdin_parts_match(&ctx->parts, root, ctx->req, &err) != 0) {
		run_emit_outcome_frame(ctx->execution_id, "refused", err.msg, NULL);
		return -1;
	}
	return 0;
}

/* Step 5: the started marker; from here the id counts as seen. */
static int write_started_marker(run_ctx *ctx, rerr *err)
{
	jv *m = jv_object();
	char *name = xasprintf("%s.json", ctx->execution_id);
	int ok;
	jv_set_str(m, "executionId", ctx->execution_id);
	jv_set_str(m, "requestSha256", ctx->request_sha);
	jv_set_str(m, "startedAt", ctx->started_at);
	ok = RECEIVER_FAILPOINT_ERROR("receiver.run.before-started", err);
	if (ok == 0)
		ok = state_write_json(ctx->root, STARTED_DIR, name, m, NULL, NULL, err);
	free(name);
	jv_free(m);
	return ok;
}

/* An internal failure (`why`) after the started marker: settles the id
 * with an uncertain receipt if the disk still allows it, else answers
 * with an uncertain outcome frame. */
static void settle_internal_failure(run_ctx *ctx, const char *why)
{
	receipt_info ri;
	rerr err2;
	char sha[65];
	uint64_t bytes = 0;
	char *diag = xasprintf("receiver internal failure: %s", why);
	memset(&ri, 0, sizeof(ri));
	ri.outcome =
	    run_outcome_json("uncertain", diag, ctx->have_proc ? run_exit_status_json(&ctx->proc) : NULL);
	ri.image_status = ctx->capture_on ? "capture-unknown" : "not-requested";
	ri.termination_confirmed = ctx->lock.group_count == 0;
	ri.argv = ctx->argv;
	if (!run_receipt_exists(ctx) && run_write_receipt(ctx, &ri, sha, &bytes, &err2) == 0) {
		/* The receiver exits EXIT_INTERNAL: its standard error is what a
		 * host reading the exit status sees of the reason. */
		fprintf(stderr, "receiver: run %s: uncertain: %s\n", ctx->execution_id, why);
		run_emit_receipt_frame(ctx, sha, bytes, 0, 0);
	} else
		run_emit_outcome_frame(ctx->execution_id, "uncertain", diag, why);
	jv_free(ri.outcome);
	free(diag);
}

static int run_with(const char *root, const char *request_path, int from_stdin, stdin_parts *preread)
{
	run_ctx ctx;
	rerr err;
	buf text;
	int damaged = 0;
	int status = EXIT_DONE;
	char sha[65];
	uint64_t bytes = 0;
	lock_outcome lo;
	memset(&ctx, 0, sizeof(ctx));
	lock_init(&ctx.lock);
	durable_file_init(&ctx.action_file);
	buf_init(&text);
	ctx.root = root;
	ctx.descriptors = jv_array();
	ctx.action_snaps = jv_array();
	ctx.file_names = jv_array();
	timestamp_now(ctx.started_at);
	/* 1. read and parse the request */
	if (read_request(&ctx, request_path, from_stdin, preread, &text) != 0) {
		status = EXIT_USAGE;
		goto cleanup;
	}
	ctx.action_id = xasprintf("action-%s", ctx.execution_id);
	ctx.session_id = state_session_id(root, &err);
	/* 2. a receipt exists: answer it */
	if (run_receipt_exists(&ctx)) {
		status = run_answer_duplicate(&ctx);
		goto cleanup;
	}
	if (!ctx.session_id) {
		run_emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, NULL);
		goto cleanup;
	}
	/* 3. the lock */
	lo = lock_acquire(&ctx.lock, root, ctx.execution_id, &err);
	if (lo == LOCK_IN_PROGRESS) {
		run_emit_outcome_frame(ctx.execution_id, "uncertain", DIAG_IN_PROGRESS, NULL);
		goto cleanup;
	}
	if (lo == LOCK_UNCONFIRMED) {
		run_emit_outcome_frame(ctx.execution_id, "uncertain", DIAG_UNCONFIRMED, NULL);
		goto cleanup;
	}
	if (lo == LOCK_ERROR) {
		run_emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
		status = EXIT_INTERNAL;
		goto cleanup;
	}
	if (run_receipt_exists(&ctx)) {
		status = run_answer_duplicate(&ctx);
		goto cleanup;
	}
	/* 4. the journal */
	if (journal_open(&ctx.jr, root, ctx.session_id, &damaged, &err) != 0) {
		if (damaged) {
			fprintf(stderr, "receiver: %s\n", err.msg);
			run_emit_outcome_frame(ctx.execution_id, "uncertain", DIAG_DAMAGED, NULL);
		} else {
			run_emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
			status = EXIT_INTERNAL;
		}
		goto cleanup;
	}
	ctx.journal_ready = 1;
	if (run_started_exists(&ctx)) {
		if (run_answer_already_started(&ctx, &err) != 0) {
			run_emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
			status = EXIT_INTERNAL;
		}
		goto cleanup;
	}
	/* The parts that came on standard input go where §9 puts them, only
	 * for an id never seen before. */
	if (ctx.stdio_parts && stdin_parts_write(root, &ctx.parts, &err) != 0) {
		run_emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
		status = EXIT_INTERNAL;
		goto cleanup;
	}
	/* 5. the started marker: from here the id counts as seen */
	if (write_started_marker(&ctx, &err) != 0) {
		run_emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
		status = EXIT_INTERNAL;
		goto cleanup;
	}
	RECEIVER_FAILPOINT("receiver.run.after-started");
	ctx.lock.phase = "started";
	if (lock_write_owner(&ctx.lock, &err) != 0 || execute(&ctx, sha, &bytes, &err) != 0) {
		/* An internal failure after the marker: settle the id with an
		 * uncertain receipt if the disk still allows it. */
		settle_internal_failure(&ctx, err.msg);
		status = EXIT_INTERNAL;
		goto cleanup;
	}
	RECEIVER_FAILPOINT("receiver.run.after-receipt");
	run_emit_receipt_frame(&ctx, sha, bytes, 0, 0);
cleanup:
	if (ctx.lock.held) {
		rerr e;
		ctx.lock.active = 0;
		if (lock_release(&ctx.lock, &e) != 0)
			fprintf(stderr, "receiver: %s\n", e.msg);
	}
	if (ctx.journal_ready)
		journal_close(&ctx.jr);
	lock_dispose(&ctx.lock);
	durable_file_close(&ctx.action_file);
	if (ctx.have_proc)
		spawn_result_free(&ctx.proc);
	free(ctx.spared);
	jv_free(ctx.left_running);
	stdin_parts_free(&ctx.parts);
	capture_spec_free(&ctx.capture);
	record_free(&ctx);
	run_free_argv(ctx.argv);
	free(ctx.script_id);
	free(ctx.action_id);
	free(ctx.session_id);
	jv_free(ctx.req);
	jv_free(ctx.descriptors);
	jv_free(ctx.action_snaps);
	jv_free(ctx.file_names);
	buf_free(&text);
	return status;
}

int run_command(const char *root, const char *request_path, int from_stdin)
{
	return run_with(root, request_path, from_stdin, NULL);
}

int run_command_parts(const char *root, stdin_parts *parts)
{
	return run_with(root, NULL, 1, parts);
}
