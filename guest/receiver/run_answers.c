/*
 * receiver/run_answers.c — the duplicate and already-started answers (run_internal.h).
 */
#include "run_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the duplicate and already-started answers -------------------------- */

static int read_receipt_fact(run_ctx *ctx, char sha[65], uint64_t *bytes, jv **receipt_out, rerr *err)
{
	char *path = xasprintf("%s/%s/%s.json", ctx->root, RECEIPTS_DIR, ctx->execution_id);
	buf text;
	int rc = -1;
	buf_init(&text);
	if (read_file_limited(path, 64u * 1024 * 1024, &text, NULL, NULL, err) == 0) {
		sha256_hex_of(text.data, text.len, sha);
		*bytes = text.len;
		if (receipt_out)
			*receipt_out = jv_parse(text.data, text.len, err);
		rc = 0;
	}
	buf_free(&text);
	free(path);
	return rc;
}

int run_receipt_exists(run_ctx *ctx)
{
	char *path = xasprintf("%s/%s/%s.json", ctx->root, RECEIPTS_DIR, ctx->execution_id);
	int e = path_exists(path);
	free(path);
	return e;
}

int run_started_exists(run_ctx *ctx)
{
	char *path = xasprintf("%s/%s/%s.json", ctx->root, STARTED_DIR, ctx->execution_id);
	int e = path_exists(path);
	free(path);
	return e;
}

int run_answer_duplicate(run_ctx *ctx)
{
	char sha[65];
	uint64_t bytes = 0;
	jv *receipt = NULL;
	int matches = 0;
	int took_lock = 0;
	rerr err;
	if (read_receipt_fact(ctx, sha, &bytes, &receipt, &err) != 0) {
		run_emit_outcome_frame(ctx->execution_id, "uncertain", err.msg, err.msg);
		return EXIT_INTERNAL;
	}
	{
		int missing = 0;
		char *rel = xasprintf("%s/%s.json", STARTED_DIR, ctx->execution_id);
		jv *marker = state_read_json(ctx->root, rel, 65536, &missing, &err);
		const char *req_sha = jv_get_str(marker, "requestSha256");
		matches = req_sha && strcmp(req_sha, ctx->request_sha) == 0;
		jv_free(marker);
		free(rel);
	}
	/* Append a missing execution-completion line, under the lock. */
	if (!ctx->lock.held && ctx->session_id) {
		lock_outcome lo = lock_acquire(&ctx->lock, ctx->root, ctx->execution_id, &err);
		took_lock = lo == LOCK_TAKEN;
	}
	if (ctx->lock.held && receipt && ctx->session_id) {
		int damaged = 0, found = 0;
		if (!ctx->journal_ready &&
		    journal_open(&ctx->jr, ctx->root, ctx->session_id, &damaged, &err) == 0)
			ctx->journal_ready = 1;
		if (ctx->journal_ready &&
		    journal_has_completion(&ctx->jr, ctx->execution_id, &found, &err) == 0 && !found) {
			jv *f = jv_object();
			jv *r = jv_object();
			char *path = xasprintf("%s/%s.json", RECEIPTS_DIR, ctx->execution_id);
			jv_set_str(f, "executionId", ctx->execution_id);
			jv_set(f, "outcome", jv_copy(jv_get(receipt, "outcome")));
			jv_set_str(r, "path", path);
			jv_set_str(r, "sha256", sha);
			jv_set_int(r, "bytes", (int64_t)bytes);
			jv_set(f, "receipt", r);
			free(path);
			run_journal_note(ctx, "execution-completion", f);
		}
	}
	(void)took_lock;
	jv_free(receipt);
	run_emit_receipt_frame(ctx, sha, bytes, 1, matches);
	return EXIT_DONE;
}

int run_answer_already_started(run_ctx *ctx, rerr *err)
{
	receipt_info ri;
	char sha[65];
	uint64_t bytes = 0;
	int rc;
	const char *language = run_str_or_null(ctx->req, "language");
	int capture_planned = jv_is(jv_get(ctx->req, "capture"), JV_OBJECT);
	{
		/* The started marker's request hash is the one the receipt answers. */
		int missing = 0;
		char *rel = xasprintf("%s/%s.json", STARTED_DIR, ctx->execution_id);
		jv *marker = state_read_json(ctx->root, rel, 65536, &missing, err);
		const char *req_sha = jv_get_str(marker, "requestSha256");
		const char *at = jv_get_str(marker, "startedAt");
		if (req_sha && sha256_hex_ok(req_sha))
			memcpy(ctx->request_sha, req_sha, 65);
		if (at && strlen(at) < sizeof(ctx->started_at))
			memcpy(ctx->started_at, at, strlen(at) + 1);
		jv_free(marker);
		free(rel);
	}
	{
		/* Settle the action record the earlier receiver left pending. */
		int missing = 0;
		char *rel = xasprintf("%s/%s.json", ACT_REC_DIR, ctx->action_id);
		jv *action = state_read_json(ctx->root, rel, 1u << 20, &missing, err);
		if (jv_is(action, JV_OBJECT)) {
			char *name = xasprintf("%s.json", ctx->action_id);
			jv_set_str(action, "state", "uncertain");
			state_write_json(ctx->root, ACT_REC_DIR, name, action, NULL, NULL, err);
			free(name);
		}
		jv_free(action);
		free(rel);
	}
	if (language && strcmp(language, "shell") && strcmp(language, "javascript") &&
	    strcmp(language, "typescript") && strcmp(language, "python"))
		language = NULL;
	ctx->language = language;
	if (run_write_execution_record(ctx, "uncertain", NULL, NULL, err) != 0)
		return -1;
	memset(&ri, 0, sizeof(ri));
	ri.outcome = run_outcome_json("uncertain", DIAG_ALREADY, NULL);
	ri.image_status = capture_planned ? "capture-unknown" : "not-requested";
	ri.termination_confirmed = 1;
	rc = run_write_receipt(ctx, &ri, sha, &bytes, err);
	jv_free(ri.outcome);
	if (rc == 0)
		run_emit_receipt_frame(ctx, sha, bytes, 0, 0);
	return rc;
}
