/*
 * receiver/run_frames.c — JSON pieces and the frames of standard output (run_internal.h).
 */
#include "run_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers ------------------------------------------------------ */

const char *run_str_or_null(const jv *obj, const char *key)
{
	return jv_get_str(obj, key);
}

void run_free_argv(char **argv)
{
	size_t i;
	for (i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
}

char **run_argv_make(const char *a, const char *b, const char *c)
{
	char **argv = xcalloc(4, sizeof(char *));
	size_t n = 0;
	if (a)
		argv[n++] = xstrdup(a);
	if (b)
		argv[n++] = xstrdup(b);
	if (c)
		argv[n++] = xstrdup(c);
	return argv;
}

jv *run_argv_json(char **argv)
{
	jv *arr = jv_array();
	size_t i;
	for (i = 0; argv && argv[i]; i++)
		jv_push(arr, jv_str(argv[i]));
	return arr;
}

jv *run_exit_status_json(const spawn_result *r)
{
	jv *o;
	char scratch[16];
	if (!r || !r->exited || r->spawn_failed)
		return NULL;
	o = jv_object();
	if (r->signal_no) {
		jv_set_null(o, "code");
		jv_set_str(o, "signal", signal_name(r->signal_no, scratch));
	} else {
		jv_set_int(o, "code", r->exit_code);
		jv_set_null(o, "signal");
	}
	return o;
}

/* Output as received, invalid UTF-8 replaced by U+FFFD, cut to the budget
 * at a character boundary (spec/guest.md §12.3). */
jv *run_output_json(const buf *raw, int truncated)
{
	buf clean;
	size_t n;
	jv *v;
	buf_init(&clean);
	utf8_sanitize(&clean, raw->data ? raw->data : "", raw->len, truncated);
	n = rs_utf8_cut(clean.data ? clean.data : "", clean.len, OUTPUT_BUDGET_BYTES);
	v = jv_strn(clean.data ? clean.data : "", n);
	buf_free(&clean);
	return v;
}

jv *run_outcome_json(const char *kind, const char *diagnostic, jv *exit_status)
{
	jv *o = jv_object();
	jv_set_str(o, "kind", kind);
	if (strcmp(kind, "completed") == 0) {
		jv_set(o, "exitStatus", exit_status ? exit_status : jv_null());
	} else {
		jv_set_str(o, "diagnostic", diagnostic);
		if (exit_status)
			jv_set(o, "exitStatus", exit_status);
	}
	return o;
}

/* Every frame is preceded by the commit point that makes what the run
 * wrote durable (spec/guest.md §16.2 item 4). */
static void commit_before_frame(void)
{
	rerr err;
	if (fsx_commit(&err) != 0)
		fprintf(stderr, "receiver: %s\n", err.msg);
}

void run_emit_outcome_frame(const char *execution_id, const char *kind, const char *diagnostic,
                            const char *error)
{
	jv *f = jv_object();
	jv_set_str(f, "executionId", execution_id);
	jv_set_null(f, "receipt");
	jv_set(f, "outcome", run_outcome_json(kind, diagnostic, NULL));
	if (error)
		jv_set_str(f, "error", error);
	fprintf(stderr, "receiver: run %s: %s: %s\n", execution_id, kind, error ? error : diagnostic);
	commit_before_frame();
	frame_emit(f);
}

void run_emit_receipt_frame(const run_ctx *ctx, const char *sha, uint64_t bytes, int duplicate,
                            int request_matches)
{
	jv *f = jv_object();
	jv *r = jv_object();
	char *path = xasprintf("%s/%s.json", RECEIPTS_DIR, ctx->execution_id);
	jv_set_str(r, "path", path);
	jv_set_str(r, "sha256", sha);
	jv_set_int(r, "bytes", (int64_t)bytes);
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set(f, "receipt", r);
	jv_set_bool(f, "duplicate", duplicate);
	if (duplicate)
		jv_set_bool(f, "requestMatches", request_matches);
	commit_before_frame();
	if (ctx->stdio_parts)
		stdout_parts_emit(ctx->root, f, path);
	else
		frame_emit(f);
	free(path);
}

void run_journal_note(run_ctx *ctx, const char *type, jv *fields)
{
	rerr err;
	if (!ctx->journal_ready) {
		jv_free(fields);
		return;
	}
	if (journal_append(&ctx->jr, type, fields, &err) != 0)
		fprintf(stderr, "receiver: %s\n", err.msg);
}
