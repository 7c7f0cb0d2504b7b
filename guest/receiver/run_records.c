/*
 * receiver/run_records.c — records, the receipt, refusals and coalescing groups (run_internal.h).
 */
#include "run_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "failpoint.h"

/* ---- records, receipt, refusals ----------------------------------------- */

const char *run_role_name(const run_ctx *ctx)
{
	return ctx->group_phase ? ctx->group_phase : "single";
}

int run_write_execution_record(run_ctx *ctx, const char *state, char **argv, jv *exit_status, rerr *err)
{
	jv *o = jv_object();
	char now[32];
	char *name = xasprintf("%s.json", ctx->execution_id);
	int rc;
	timestamp_now(now);
	jv_set_str(o, "executionId", ctx->execution_id);
	jv_set_str(o, "sessionId", ctx->session_id);
	jv_set_str(o, "attemptId",
	           ctx->attempt_id ? ctx->attempt_id : run_str_or_null(ctx->req, "attemptId"));
	jv_set_str(o, "state", state);
	jv_set(o, "argv", run_argv_json(argv));
	jv_set_str(o, "scriptId", ctx->script_id);
	jv_set(o, "exitStatus", exit_status ? exit_status : jv_null());
	jv_set_str(o, "startedAt", ctx->dispatched ? ctx->dispatch_at : ctx->started_at);
	jv_set_str(o, "endedAt", now);
	jv_set(o, "leftRunning", ctx->left_running ? jv_copy(ctx->left_running) : jv_null());
	rc = state_write_json(ctx->root, EXEC_REC_DIR, name, o, NULL, NULL, err);
	free(name);
	jv_free(o);
	return rc;
}

int run_write_action_record(run_ctx *ctx, const char *state, rerr *err)
{
	jv *o = jv_object();
	jv *step = jv_get(ctx->req, "step");
	char *name = xasprintf("%s.json", ctx->action_id);
	int rc;
	jv_set_str(o, "actionId", ctx->action_id);
	jv_set_str(o, "executionId", ctx->execution_id);
	jv_set_str(o, "sessionId", ctx->session_id);
	jv_set_str(o, "attemptId",
	           ctx->attempt_id ? ctx->attempt_id : run_str_or_null(ctx->req, "attemptId"));
	jv_set_str(o, "stepId", run_str_or_null(step, "id"));
	jv_set_str(o, "title", run_str_or_null(step, "title"));
	jv_set_str(o, "expected", run_str_or_null(step, "expected"));
	jv_set_str(o, "inputMode", run_str_or_null(step, "inputMode"));
	jv_set_str(o, "snapshotRole", run_role_name(ctx));
	jv_set_str(o, "groupId", ctx->group_id);
	jv_set_str(o, "state", state);
	jv_set(o, "snapshots", jv_copy(ctx->action_snaps));
	rc = state_rewrite_json(ctx->root, ACT_REC_DIR, name, o, &ctx->action_file, err);
	free(name);
	jv_free(o);
	return rc;
}

/* Writes the receipt durably, then journals execution-completion. */
int run_write_receipt(run_ctx *ctx, const receipt_info *ri, char sha_out[65], uint64_t *bytes_out, rerr *err)
{
	jv *o = jv_object();
	jv *recv = jv_object();
	jv *img = jv_object();
	char now[32];
	char *name = xasprintf("%s.json", ctx->execution_id);
	const jv *tmo = jv_get(ctx->req, "timeoutMs");
	int rc;
	timestamp_now(now);
	jv_set_int(o, "receiptVersion", 1);
	jv_set_str(o, "executionId", ctx->execution_id);
	jv_set_str(o, "sessionId", ctx->session_id);
	jv_set_str(o, "attemptId",
	           ctx->attempt_id ? ctx->attempt_id : run_str_or_null(ctx->req, "attemptId"));
	jv_set_str(o, "requestSha256", ctx->request_sha);
	jv_set_str(recv, "version", RECEIVER_VERSION);
	jv_set_str(recv, "platform", RECEIVER_PLATFORM);
	jv_set(o, "receiver", recv);
	jv_set_str(o, "startedAt", ctx->started_at);
	jv_set_str(o, "endedAt", now);
	jv_set_str(o, "evidenceMode", "recorded");
	jv_set_str(o, "language", ctx->language ? ctx->language : run_str_or_null(ctx->req, "language"));
	jv_set(o, "argv", run_argv_json(ri->argv));
	jv_set_str(o, "cwd", ctx->cwd ? ctx->cwd : run_str_or_null(ctx->req, "cwd"));
	if (jv_is(tmo, JV_NUMBER) && tmo->number_is_int)
		jv_set_int(o, "timeoutMs", tmo->number_int);
	else
		jv_set_null(o, "timeoutMs");
	jv_set(o, "outcome", jv_copy(ri->outcome));
	jv_set_bool(o, "timedOut", ri->timed_out);
	jv_set_bool(o, "outputTruncated", ri->output_truncated);
	jv_set_bool(o, "terminationConfirmed", ri->termination_confirmed);
	jv_set(o, "stdout", ri->stdout_v ? jv_copy(ri->stdout_v) : jv_str(""));
	jv_set(o, "stderr", ri->stderr_v ? jv_copy(ri->stderr_v) : jv_str(""));
	jv_set(o, "leftRunning", ctx->left_running ? jv_copy(ctx->left_running) : jv_null());
	jv_set_str(img, "status", ri->image_status);
	jv_set(img, "snapshots", jv_copy(ctx->descriptors));
	jv_set(o, "imageEvidence", img);
	record_finish(ctx);
	{
		jv *video = record_receipt_json(ctx);
		if (video)
			jv_set(o, RECEIVER_RECEIPT_VIDEO, video);
	}
	rc = RECEIVER_FAILPOINT_ERROR("receiver.run.before-receipt", err);
	if (rc == 0)
		rc = state_write_json(ctx->root, RECEIPTS_DIR, name, o, sha_out, bytes_out, err);
	free(name);
	jv_free(o);
	if (rc != 0)
		return -1;
	{
		jv *f = jv_object();
		jv *r = jv_object();
		char *path = xasprintf("%s/%s.json", RECEIPTS_DIR, ctx->execution_id);
		jv_set_str(f, "executionId", ctx->execution_id);
		jv_set(f, "outcome", jv_copy(ri->outcome));
		jv_set_str(r, "path", path);
		jv_set_str(r, "sha256", sha_out);
		jv_set_int(r, "bytes", (int64_t)*bytes_out);
		jv_set(f, "receipt", r);
		free(path);
		rc = journal_append(&ctx->jr, "execution-completion", f, err);
	}
	return rc;
}

/* A refusal: proven not started. Journals action-refusal, writes the
 * records and a refused receipt. */
int run_refuse(run_ctx *ctx, const char *diagnostic, const char *image_status, char sha_out[65],
               uint64_t *bytes_out, rerr *err)
{
	jv *step = jv_get(ctx->req, "step");
	jv *f = jv_object();
	receipt_info ri;
	int rc = -1;
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set_str(f, "actionId", ctx->action_id);
	jv_set_str(f, "stepId", run_str_or_null(step, "id"));
	jv_set_str(f, "title", run_str_or_null(step, "title"));
	jv_set_str(f, "diagnostic", diagnostic);
	if (journal_append(&ctx->jr, "action-refusal", f, err) != 0)
		return -1;
	if (run_write_execution_record(ctx, "refused", NULL, NULL, err) != 0 ||
	    run_write_action_record(ctx, "refused", err) != 0)
		return -1;
	memset(&ri, 0, sizeof(ri));
	ri.outcome = run_outcome_json("refused", diagnostic, NULL);
	ri.image_status = image_status;
	ri.termination_confirmed = 1; /* a refusal: the script never ran */
	rc = run_write_receipt(ctx, &ri, sha_out, bytes_out, err);
	jv_free(ri.outcome);
	return rc;
}

/* ---- groups ------------------------------------------------------------- */

jv *run_groups_read(run_ctx *ctx, rerr *err)
{
	int missing = 0;
	jv *g = state_read_json(ctx->root, GROUPS_REL, 4u * 1024 * 1024, &missing, err);
	if (!g && missing) {
		g = jv_object();
		jv_set_null(g, "active");
		jv_set(g, "used", jv_array());
	}
	if (g && (!jv_is(g, JV_OBJECT) || !jv_is(jv_get(g, "used"), JV_ARRAY) ||
	          !(jv_is(jv_get(g, "active"), JV_NULL) || jv_is(jv_get(g, "active"), JV_OBJECT)))) {
		err_set(err, "%s is damaged", GROUPS_REL);
		jv_free(g);
		g = NULL;
	}
	return g;
}

static int group_used(const jv *groups, const char *group_id)
{
	jv *used = jv_get(groups, "used");
	size_t i;
	for (i = 0; i < used->count; i++)
		if (jv_is(used->items[i], JV_STRING) && strcmp(used->items[i]->str, group_id) == 0)
			return 1;
	return 0;
}

/* Returns NULL when the group rules (spec/guest.md §10.2) admit the request. */
const char *run_group_rules(run_ctx *ctx, const jv *groups)
{
	jv *active = jv_get(groups, "active");
	const char *open_id = jv_is(active, JV_OBJECT) ? jv_get_str(active, "groupId") : NULL;
	if (!ctx->group_phase)
		return open_id ? DIAG_GROUP_OPEN : NULL;
	if (strcmp(ctx->group_phase, "first") == 0) {
		if (open_id && strcmp(open_id, ctx->group_id) == 0)
			return DIAG_GROUP_REUSED;
		if (open_id)
			return DIAG_GROUP_OPEN;
		if (group_used(groups, ctx->group_id))
			return DIAG_GROUP_REUSED;
		return NULL;
	}
	if (open_id && strcmp(open_id, ctx->group_id) == 0)
		return NULL;
	if (open_id)
		return DIAG_GROUP_OPEN;
	text_format(ctx->diag, sizeof(ctx->diag), "no open group %s", ctx->group_id);
	return ctx->diag;
}

int run_groups_write(run_ctx *ctx, jv *groups, rerr *err)
{
	return state_write_json(ctx->root, "state/receiver", "groups.json", groups, NULL, NULL, err);
}

void run_group_annotation(run_ctx *ctx, const char *name, jv *details)
{
	jv *f = jv_object();
	jv_set_str(f, "name", name);
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set(f, "details", details);
	run_journal_note(ctx, "annotation", f);
}
