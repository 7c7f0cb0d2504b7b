/*
 * receiver/run.c — see run.h. The order of files and journal lines follows
 * guest.md §7.3 and §9 exactly.
 */
#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../receiver_protocol.h"
#include "capture.h"
#include "failpoint.h"
#include "frame.h"
#include "fsx.h"
#include "journal.h"
#include "lock.h"
#include "proc.h"
#include "scan.h"
#include "sha256.h"
#include "state.h"
#include "stdio_parts.h"
#include "survivors.h"

#define REQUEST_MAX_BYTES       RECEIVER_REQUEST_MAX_BYTES
#define SCRIPT_MAX_BYTES        ((unsigned long long)RECEIVER_SCRIPT_MAX_BYTES)
#define TIMEOUT_MAX_MS          3600000
#define AFTER_INTERVAL_MAX_MS   300000
#define BECAUSE_MAX_CHARS       16384
#define NODE_VERSION_TIMEOUT_MS 10000

#define DIAG_IN_PROGRESS "execution is in progress; it will not be replayed"
#define DIAG_UNCONFIRMED "receiver lock ownership or active operation is unconfirmed; input is not replayed"
#define DIAG_DAMAGED                                                                                         \
	"damaged journal; execution requires recording recovery (relay_stage resetRecording: true)"
#define DIAG_ALREADY      "execution was already started; it will not be replayed"
#define DIAG_CANCELLED    "cancelled by the host"
#define DIAG_GROUP_OPEN   "coalescing group is open; unrelated input is forbidden until its last member"
#define DIAG_GROUP_REUSED "group IDs cannot be reused"

extern char **environ;

typedef struct run_ctx {
	const char *root;
	char *session_id;
	jv *req;
	char request_sha[65];
	const char *execution_id;
	char *action_id;
	receiver_lock lock;
	journal jr;
	int journal_ready;
	char started_at[32];
	char dispatch_at[32];
	int dispatched;
	char diag[1200];
	/* validated request */
	const char *attempt_id;
	const char *language;
	const char *cwd;
	int64_t timeout_ms;
	const char *step_id, *title, *expected, *input_mode;
	const char *group_id, *group_phase;
	int has_after;
	int64_t after_ms;
	int capture_on;
	capture_spec capture;
	const char *script_path, *script_sha;
	char *script_id;
	char **argv;
	/* evidence */
	jv *descriptors;
	jv *action_snaps;
	jv *file_names;
	int captures_failed, captures_unknown;
	/* the script */
	spawn_result proc;
	int have_proc;
	const char *phase_name;
	/* what the script left running (guest.md §16.1) */
	pid_t *spared; /* children of the receiver the captures after it must not kill */
	size_t spared_count;
	pid_t drainer_pid;
	jv *left_running; /* {"count","processes"} after a normal exit, else NULL */
	/* a run in one round trip (guest.md §16.2): request and script came on
	 * standard input; the receipt and after-image go out on standard output */
	int stdio_parts;
	stdin_parts parts;
} run_ctx;

/* ---- small helpers ------------------------------------------------------ */

static const char *str_or_null(const jv *obj, const char *key)
{
	return jv_get_str(obj, key);
}

static void free_argv(char **argv)
{
	size_t i;
	for (i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
}

static char **argv_make(const char *a, const char *b, const char *c)
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

static jv *argv_json(char **argv)
{
	jv *arr = jv_array();
	size_t i;
	for (i = 0; argv && argv[i]; i++)
		jv_push(arr, jv_str(argv[i]));
	return arr;
}

static jv *exit_status_json(const spawn_result *r)
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
 * at a character boundary (guest.md §12.3). */
static jv *output_json(const buf *raw, int truncated)
{
	buf clean;
	size_t n;
	jv *v;
	buf_init(&clean);
	utf8_sanitize(&clean, raw->data ? raw->data : "", raw->len, truncated);
	n = utf8_cut_bytes(clean.data ? clean.data : "", clean.len, OUTPUT_BUDGET_BYTES);
	v = jv_strn(clean.data ? clean.data : "", n);
	buf_free(&clean);
	return v;
}

static jv *outcome_json(const char *kind, const char *diagnostic, jv *exit_status)
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
 * wrote durable (guest.md §16.2 item 4). */
static void commit_before_frame(void)
{
	rerr err;
	if (fsx_commit(&err) != 0)
		fprintf(stderr, "receiver: %s\n", err.msg);
}

static void emit_outcome_frame(const char *execution_id, const char *kind, const char *diagnostic,
                               const char *error)
{
	jv *f = jv_object();
	jv_set_str(f, "executionId", execution_id);
	jv_set_null(f, "receipt");
	jv_set(f, "outcome", outcome_json(kind, diagnostic, NULL));
	if (error)
		jv_set_str(f, "error", error);
	fprintf(stderr, "receiver: run %s: %s: %s\n", execution_id, kind, error ? error : diagnostic);
	commit_before_frame();
	frame_emit(f);
}

static void emit_receipt_frame(const run_ctx *ctx, const char *sha, uint64_t bytes, int duplicate,
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

static void journal_note(run_ctx *ctx, const char *type, jv *fields)
{
	rerr err;
	if (!ctx->journal_ready) {
		jv_free(fields);
		return;
	}
	if (journal_append(&ctx->jr, type, fields, &err) != 0)
		fprintf(stderr, "receiver: %s\n", err.msg);
}

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
		journal_note(ctx, "resource-stop", f);
	}
	return lock_write_owner(&ctx->lock, err);
}

static int hook_cancelled(void *c)
{
	run_ctx *ctx = c;
	return lock_cancel_requested(&ctx->lock);
}

static void make_hooks(run_ctx *ctx, spawn_hooks *hooks, int with_cancel)
{
	memset(hooks, 0, sizeof(*hooks));
	hooks->before_fork = hook_before_fork;
	hooks->after_fork = hook_after_fork;
	hooks->after_end = hook_after_end;
	hooks->cancelled = with_cancel ? hook_cancelled : NULL;
	hooks->ctx = ctx;
}

/* ---- validation (guest.md §6.1, §7.4) ----------------------------------- */

static int keys_exactly(const jv *obj, const char *const *keys, size_t n, const char *prefix, char *diag,
                        size_t diag_len)
{
	size_t i, k;
	for (i = 0; i < obj->count; i++) {
		int known = 0;
		for (k = 0; k < n; k++)
			if (strcmp(obj->keys[i], keys[k]) == 0)
				known = 1;
		if (!known) {
			text_format(diag, diag_len, "unsupported request: %s%s", prefix, obj->keys[i]);
			return -1;
		}
	}
	for (k = 0; k < n; k++) {
		if (!jv_get(obj, keys[k])) {
			text_format(diag, diag_len, "unsupported request: %s%s", prefix, keys[k]);
			return -1;
		}
	}
	return 0;
}

static int is_str(const jv *v)
{
	return jv_is(v, JV_STRING) && !memchr(v->str, '\0', v->str_len);
}

static int is_str_or_null(const jv *v)
{
	return jv_is(v, JV_NULL) || is_str(v);
}

static int is_blank(const char *s)
{
	for (; *s; s++)
		if (!(*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v'))
			return 0;
	return 1;
}

static int guest_name_ok(const char *s)
{
	size_t i, n = strlen(s);
	if (n < 1 || n > 48)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (i > 0 && c == '-');
		if (!ok)
			return 0;
	}
	return 1;
}

static int chars_between(const char *s, size_t lo, size_t hi)
{
	size_t n = utf8_chars(s, strlen(s));
	return n >= lo && n <= hi;
}

/* Structure and types: "unsupported request: <field>". */
static int check_structure(run_ctx *ctx)
{
	static const char *const top[] = {"protocol", "executionId",  "sessionId", "attemptId", "guest",
	                                  "because",  "evidenceMode", "language",  "script",    "runtime",
	                                  "cwd",      "timeoutMs",    "step",      "snapshots", "capture"};
	static const char *const script_keys[] = {"path", "sha256", "bytes", "origin", "localName"};
	static const char *const runtime_keys[] = {"nodePath"};
	static const char *const step_keys[] = {"id", "title", "expected", "inputMode"};
	static const char *const snap_keys[] = {"afterIntervalMs", "group"};
	const jv *r = ctx->req;
	char *d = ctx->diag;
	size_t dl = sizeof(ctx->diag);
	jv *v;
	int64_t protocol;
	size_t i;
	const char *origin;
	if (keys_exactly(r, top, sizeof(top) / sizeof(top[0]), "", d, dl) != 0)
		return -1;
#define BAD(field)                                                                                           \
	do {                                                                                                 \
		text_format(d, dl, "unsupported request: %s", field);                                        \
		return -1;                                                                                   \
	} while (0)
	if (!jv_get_int(r, "protocol", &protocol) || protocol != RECEIVER_PROTOCOL)
		BAD("protocol");
	{
		static const char *const strings[] = {"executionId", "sessionId",    "attemptId", "guest",
		                                      "because",     "evidenceMode", "language",  "cwd"};
		for (i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
			if (!is_str(jv_get(r, strings[i])))
				BAD(strings[i]);
	}
	if (strcmp(jv_get_str(r, "evidenceMode"), "recorded") != 0)
		BAD("evidenceMode");
	v = jv_get(r, "script");
	if (!jv_is(v, JV_OBJECT))
		BAD("script");
	if (keys_exactly(v, script_keys, 5, "script.", d, dl) != 0)
		return -1;
	if (!is_str(jv_get(v, "path")))
		BAD("script.path");
	if (!is_str(jv_get(v, "sha256")))
		BAD("script.sha256");
	{
		int64_t b;
		if (!jv_get_int(v, "bytes", &b) || b < 0)
			BAD("script.bytes");
	}
	origin = jv_get_str(v, "origin");
	if (!origin || (strcmp(origin, "inline") != 0 && strcmp(origin, "file") != 0))
		BAD("script.origin");
	if (!is_str_or_null(jv_get(v, "localName")))
		BAD("script.localName");
	v = jv_get(r, "runtime");
	if (!jv_is(v, JV_OBJECT))
		BAD("runtime");
	if (keys_exactly(v, runtime_keys, 1, "runtime.", d, dl) != 0)
		return -1;
	if (!is_str_or_null(jv_get(v, "nodePath")))
		BAD("runtime.nodePath");
	if (!jv_is(jv_get(r, "timeoutMs"), JV_NUMBER))
		BAD("timeoutMs");
	v = jv_get(r, "step");
	if (!jv_is(v, JV_OBJECT))
		BAD("step");
	if (keys_exactly(v, step_keys, 4, "step.", d, dl) != 0)
		return -1;
	for (i = 0; i < 4; i++) {
		if (!is_str(jv_get(v, step_keys[i]))) {
			text_format(d, dl, "unsupported request: step.%s", step_keys[i]);
			return -1;
		}
	}
	v = jv_get(r, "snapshots");
	if (!jv_is(v, JV_OBJECT))
		BAD("snapshots");
	if (keys_exactly(v, snap_keys, 2, "snapshots.", d, dl) != 0)
		return -1;
	if (!jv_is(jv_get(v, "afterIntervalMs"), JV_NULL) && !jv_is(jv_get(v, "afterIntervalMs"), JV_NUMBER))
		BAD("snapshots.afterIntervalMs");
	{
		jv *g = jv_get(v, "group");
		if (!jv_is(g, JV_NULL)) {
			if (!jv_is(g, JV_OBJECT))
				BAD("snapshots.group");
			for (i = 0; i < g->count; i++) {
				const char *k = g->keys[i];
				if (strcmp(k, "groupId") && strcmp(k, "phase") &&
				    strcmp(k, "afterIntervalMs")) {
					text_format(d, dl, "unsupported request: snapshots.group.%s", k);
					return -1;
				}
			}
			if (!is_str(jv_get(g, "groupId")))
				BAD("snapshots.group.groupId");
			if (!is_str(jv_get(g, "phase")))
				BAD("snapshots.group.phase");
			if (jv_get(g, "afterIntervalMs") && !jv_is(jv_get(g, "afterIntervalMs"), JV_NULL) &&
			    !jv_is(jv_get(g, "afterIntervalMs"), JV_NUMBER))
				BAD("snapshots.group.afterIntervalMs");
		}
	}
	v = jv_get(r, "capture");
	if (!jv_is(v, JV_NULL) && !jv_is(v, JV_OBJECT))
		BAD("capture");
#undef BAD
	return 0;
}

static int interval_ok(const jv *v, int64_t *out)
{
	if (!jv_is(v, JV_NUMBER) || !v->number_is_int || v->number_int < 0 ||
	    v->number_int > AFTER_INTERVAL_MAX_MS)
		return 0;
	*out = v->number_int;
	return 1;
}

/* Returns NULL when the request is valid, else the refusal diagnostic. */
static const char *validate_request(run_ctx *ctx)
{
	const jv *r = ctx->req;
	jv *step = jv_get(r, "step");
	jv *snaps = jv_get(r, "snapshots");
	jv *group = jv_get(snaps, "group");
	jv *script = jv_get(r, "script");
	jv *tmo = jv_get(r, "timeoutMs");
	const char *cwd_rel;
	if (check_structure(ctx) != 0)
		return ctx->diag;
	ctx->attempt_id = jv_get_str(r, "attemptId");
	if (!id_valid(ctx->attempt_id) || strcmp(jv_get_str(r, "sessionId"), ctx->session_id) != 0 ||
	    !guest_name_ok(jv_get_str(r, "guest")))
		return "request identity does not match this recording";
	{
		const char *because = jv_get_str(r, "because");
		if (is_blank(because) || utf8_chars(because, strlen(because)) > BECAUSE_MAX_CHARS)
			return "Run execution intent is required";
	}
	ctx->cwd = jv_get_str(r, "cwd");
	{
		struct stat st;
		int exists = 0;
		rerr err;
		char *abs;
		if (path_below_root(ctx->root, ctx->cwd, &cwd_rel) != 0 ||
		    path_walk_check(ctx->root, cwd_rel, 1, &exists, &err) != 0 || !exists)
			return "cwd must be an absolute directory inside the guest root";
		abs = path_join(ctx->root, cwd_rel);
		if (lstat(abs, &st) != 0 || !S_ISDIR(st.st_mode)) {
			free(abs);
			return "cwd must be an absolute directory inside the guest root";
		}
		free(abs);
	}
	if (!tmo->number_is_int || tmo->number_int < 1 || tmo->number_int > TIMEOUT_MAX_MS)
		return "timeoutMs must be an integer from 1 to 3600000";
	ctx->timeout_ms = tmo->number_int;
	ctx->step_id = jv_get_str(step, "id");
	ctx->title = jv_get_str(step, "title");
	ctx->expected = jv_get_str(step, "expected");
	ctx->input_mode = jv_get_str(step, "inputMode");
	if (!id_valid(ctx->step_id) || !chars_between(ctx->title, 1, 500) ||
	    !chars_between(ctx->expected, 1, 4000) ||
	    (strcmp(ctx->input_mode, "ordinary") != 0 && strcmp(ctx->input_mode, "accessibility") != 0))
		return "invalid step";
	{
		jv *top_after = jv_get(snaps, "afterIntervalMs");
		jv *group_after = group && group->type == JV_OBJECT ? jv_get(group, "afterIntervalMs") : NULL;
		int64_t ms;
		if (!jv_is(top_after, JV_NULL) && !interval_ok(top_after, &ms))
			return "invalid snapshot plan";
		if (group_after && !jv_is(group_after, JV_NULL) && !interval_ok(group_after, &ms))
			return "invalid snapshot plan";
		if (jv_is(group, JV_OBJECT)) {
			ctx->group_id = jv_get_str(group, "groupId");
			ctx->group_phase = jv_get_str(group, "phase");
			if (!id_valid(ctx->group_id) ||
			    (strcmp(ctx->group_phase, "first") && strcmp(ctx->group_phase, "member") &&
			     strcmp(ctx->group_phase, "last")))
				return "invalid snapshot plan";
			if (strcmp(ctx->group_phase, "last") != 0) {
				if (!jv_is(top_after, JV_NULL) ||
				    (group_after && !jv_is(group_after, JV_NULL)))
					return "invalid snapshot plan";
			}
		}
		if (!ctx->group_phase || strcmp(ctx->group_phase, "last") == 0) {
			if (interval_ok(top_after, &ms) || (group_after && interval_ok(group_after, &ms))) {
				ctx->has_after = 1;
				ctx->after_ms = ms;
			} else {
				return "after interval required";
			}
		}
	}
	{
		const char *path = jv_get_str(script, "path");
		const char *rel;
		int64_t bytes = 0;
		struct stat st;
		int exists = 0;
		rerr err;
		char hex[65];
		uint64_t got = 0;
		char *abs;
		jv_get_int(script, "bytes", &bytes);
		ctx->script_path = path;
		ctx->script_sha = jv_get_str(script, "sha256");
		if (path_below_root(ctx->root, path, &rel) != 0 ||
		    (strncmp(rel, "streamed/", 9) != 0 && strncmp(rel, "scripts/", 8) != 0) ||
		    path_walk_check(ctx->root, rel, 1, &exists, &err) != 0 || !exists) {
			fprintf(stderr, "receiver: script %s is not a file inside streamed/ or scripts/\n",
			        path);
			return "script hash mismatch";
		}
		abs = path_join(ctx->root, rel);
		if (lstat(abs, &st) != 0 || !S_ISREG(st.st_mode)) {
			free(abs);
			fprintf(stderr, "receiver: script %s is not a regular file\n", path);
			return "script hash mismatch";
		}
		if ((uint64_t)st.st_size > SCRIPT_MAX_BYTES) {
			free(abs);
			return "script too large";
		}
		if (hash_regular_file(abs, &st, hex, &got, &err) != 0 || got != (uint64_t)bytes ||
		    strcmp(hex, ctx->script_sha) != 0) {
			free(abs);
			return "script hash mismatch";
		}
		free(abs);
		{
			char *seed = xasprintf("%s%s", path, ctx->script_sha);
			char h[65];
			sha256_hex_of(seed, strlen(seed), h);
			free(seed);
			ctx->script_id = xasprintf("script-%.24s", h);
		}
	}
	ctx->language = jv_get_str(r, "language");
	if (strcmp(ctx->language, "shell") && strcmp(ctx->language, "javascript") &&
	    strcmp(ctx->language, "typescript") && strcmp(ctx->language, "python"))
		return "unknown language";
	{
		jv *cap = jv_get(r, "capture");
		if (jv_is(cap, JV_OBJECT)) {
			rerr err;
			if (capture_spec_parse(cap, &ctx->capture, &err) != 0) {
				fprintf(stderr, "receiver: %s\n", err.msg);
				return "invalid capture command";
			}
			ctx->capture_on = 1;
		}
	}
	return NULL;
}

/* ---- records, receipt, refusals ----------------------------------------- */

static const char *role_name(const run_ctx *ctx)
{
	return ctx->group_phase ? ctx->group_phase : "single";
}

static int write_execution_record(run_ctx *ctx, const char *state, char **argv, jv *exit_status, rerr *err)
{
	jv *o = jv_object();
	char now[32];
	char *name = xasprintf("%s.json", ctx->execution_id);
	int rc;
	timestamp_now(now);
	jv_set_str(o, "executionId", ctx->execution_id);
	jv_set_str(o, "sessionId", ctx->session_id);
	jv_set_str(o, "attemptId", ctx->attempt_id ? ctx->attempt_id : str_or_null(ctx->req, "attemptId"));
	jv_set_str(o, "state", state);
	jv_set(o, "argv", argv_json(argv));
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

static int write_action_record(run_ctx *ctx, const char *state, rerr *err)
{
	jv *o = jv_object();
	jv *step = jv_get(ctx->req, "step");
	char *name = xasprintf("%s.json", ctx->action_id);
	int rc;
	jv_set_str(o, "actionId", ctx->action_id);
	jv_set_str(o, "executionId", ctx->execution_id);
	jv_set_str(o, "sessionId", ctx->session_id);
	jv_set_str(o, "attemptId", ctx->attempt_id ? ctx->attempt_id : str_or_null(ctx->req, "attemptId"));
	jv_set_str(o, "stepId", str_or_null(step, "id"));
	jv_set_str(o, "title", str_or_null(step, "title"));
	jv_set_str(o, "expected", str_or_null(step, "expected"));
	jv_set_str(o, "inputMode", str_or_null(step, "inputMode"));
	jv_set_str(o, "snapshotRole", role_name(ctx));
	jv_set_str(o, "groupId", ctx->group_id);
	jv_set_str(o, "state", state);
	jv_set(o, "snapshots", jv_copy(ctx->action_snaps));
	rc = state_write_json(ctx->root, ACT_REC_DIR, name, o, NULL, NULL, err);
	free(name);
	jv_free(o);
	return rc;
}

typedef struct receipt_info {
	const char *outcome_kind;
	jv *outcome; /* owned by the caller */
	const char *image_status;
	int timed_out, output_truncated, termination_confirmed;
	jv *stdout_v, *stderr_v; /* owned by the caller */
	char **argv;
} receipt_info;

/* Writes the receipt durably, then journals execution-completion. */
static int write_receipt(run_ctx *ctx, const receipt_info *ri, char sha_out[65], uint64_t *bytes_out,
                         rerr *err)
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
	jv_set_str(o, "attemptId", ctx->attempt_id ? ctx->attempt_id : str_or_null(ctx->req, "attemptId"));
	jv_set_str(o, "requestSha256", ctx->request_sha);
	jv_set_str(recv, "version", RECEIVER_VERSION);
	jv_set_str(recv, "platform", RECEIVER_PLATFORM);
	jv_set(o, "receiver", recv);
	jv_set_str(o, "startedAt", ctx->started_at);
	jv_set_str(o, "endedAt", now);
	jv_set_str(o, "evidenceMode", "recorded");
	jv_set_str(o, "language", ctx->language ? ctx->language : str_or_null(ctx->req, "language"));
	jv_set(o, "argv", argv_json(ri->argv));
	jv_set_str(o, "cwd", ctx->cwd ? ctx->cwd : str_or_null(ctx->req, "cwd"));
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
static int refuse(run_ctx *ctx, const char *diagnostic, const char *image_status, char sha_out[65],
                  uint64_t *bytes_out, rerr *err)
{
	jv *step = jv_get(ctx->req, "step");
	jv *f = jv_object();
	receipt_info ri;
	int rc = -1;
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set_str(f, "actionId", ctx->action_id);
	jv_set_str(f, "stepId", str_or_null(step, "id"));
	jv_set_str(f, "title", str_or_null(step, "title"));
	jv_set_str(f, "diagnostic", diagnostic);
	if (journal_append(&ctx->jr, "action-refusal", f, err) != 0)
		return -1;
	if (write_execution_record(ctx, "refused", NULL, NULL, err) != 0 ||
	    write_action_record(ctx, "refused", err) != 0)
		return -1;
	memset(&ri, 0, sizeof(ri));
	ri.outcome = outcome_json("refused", diagnostic, NULL);
	ri.image_status = image_status;
	ri.termination_confirmed = 1; /* a refusal: the script never ran */
	rc = write_receipt(ctx, &ri, sha_out, bytes_out, err);
	jv_free(ri.outcome);
	return rc;
}

/* ---- groups ------------------------------------------------------------- */

static jv *groups_read(run_ctx *ctx, rerr *err)
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

/* Returns NULL when the group rules (guest.md §10.2) admit the request. */
static const char *group_rules(run_ctx *ctx, const jv *groups)
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

static int groups_write(run_ctx *ctx, jv *groups, rerr *err)
{
	return state_write_json(ctx->root, "state/receiver", "groups.json", groups, NULL, NULL, err);
}

static void group_annotation(run_ctx *ctx, const char *name, jv *details)
{
	jv *f = jv_object();
	jv_set_str(f, "name", name);
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set(f, "details", details);
	journal_note(ctx, "annotation", f);
}

/* ---- runtimes (guest.md §12.1) ------------------------------------------ */

static int parse_node_version(const char *text, int *major, int *minor)
{
	const char *p = text;
	char *end;
	long a, b;
	while (*p == ' ' || *p == '\n')
		p++;
	if (*p == 'v')
		p++;
	a = strtol(p, &end, 10);
	if (end == p || *end != '.')
		return -1;
	p = end + 1;
	b = strtol(p, &end, 10);
	if (end == p)
		return -1;
	*major = (int)a;
	*minor = (int)b;
	return 0;
}

static char *trim_dup(const buf *b)
{
	size_t s = 0, e = b->len;
	while (s < e && (b->data[s] == ' ' || b->data[s] == '\n' || b->data[s] == '\r'))
		s++;
	while (e > s && (b->data[e - 1] == ' ' || b->data[e - 1] == '\n' || b->data[e - 1] == '\r'))
		e--;
	return xstrndup(b->data ? b->data + s : "", e - s);
}

/* Returns NULL and sets ctx->argv, or the refusal diagnostic. */
static const char *resolve_runtime(run_ctx *ctx, rerr *err, int *internal)
{
	const char *node_name = str_or_null(jv_get(ctx->req, "runtime"), "nodePath");
	const char *script = ctx->script_path;
	char *prog = NULL;
	*internal = 0;
	if (!node_name)
		node_name = "node";
	if (strcmp(ctx->language, "shell") == 0) {
		prog = find_program("/bin/sh");
		if (!prog)
			return "no shell runtime in the guest: tried /bin/sh";
		ctx->argv = argv_make(prog, script, NULL);
	} else if (strcmp(ctx->language, "python") == 0) {
		prog = find_program("python3");
		if (!prog)
			return "no python runtime in the guest: tried python3";
		ctx->argv = argv_make(prog, script, NULL);
	} else if (strcmp(ctx->language, "javascript") == 0) {
		prog = find_program(node_name);
		if (!prog) {
			text_format(ctx->diag, sizeof(ctx->diag),
			            "no javascript runtime in the guest: tried %s", node_name);
			return ctx->diag;
		}
		ctx->argv = argv_make(prog, script, NULL);
	} else {
		char *tsx = find_program("tsx");
		spawn_request req;
		spawn_result res;
		spawn_hooks hooks;
		char *version;
		char *argv[3];
		int major = 0, minor = 0;
		if (tsx) {
			ctx->argv = argv_make(tsx, script, NULL);
			free(tsx);
			return NULL;
		}
		prog = find_program(node_name);
		if (!prog) {
			text_format(ctx->diag, sizeof(ctx->diag),
			            "no typescript runtime in the guest: tried tsx, %s", node_name);
			return ctx->diag;
		}
		argv[0] = prog;
		argv[1] = "--version";
		argv[2] = NULL;
		memset(&req, 0, sizeof(req));
		req.path = prog;
		req.argv = argv;
		req.timeout_ms = NODE_VERSION_TIMEOUT_MS;
		req.output_budget = OUTPUT_BUDGET_BYTES;
		make_hooks(ctx, &hooks, 0);
		ctx->phase_name = "runtime-probe";
		if (proc_run(&req, &hooks, &res, err) != 0) {
			free(prog);
			*internal = 1;
			return "runtime probe failed";
		}
		version = trim_dup(&res.out);
		if (res.spawn_failed || res.timed_out || res.signal_no || res.exit_code != 0 ||
		    parse_node_version(version, &major, &minor) != 0) {
			text_format(
			    ctx->diag, sizeof(ctx->diag),
			    "no typescript runtime in the guest: tsx not found and %s --version failed",
			    node_name);
			free(version);
			free(prog);
			spawn_result_free(&res);
			return ctx->diag;
		}
		spawn_result_free(&res);
		if (major < 22 || (major == 22 && minor < 6)) {
			text_format(ctx->diag, sizeof(ctx->diag),
			            "no typescript runtime in the guest: tsx not found and Node.js %s lacks "
			            "type stripping "
			            "(22.6 or later)",
			            version);
			free(version);
			free(prog);
			return ctx->diag;
		}
		free(version);
		if (major < 23 || (major == 23 && minor < 6))
			ctx->argv = argv_make(prog, "--experimental-strip-types", script);
		else
			ctx->argv = argv_make(prog, script, NULL);
	}
	free(prog);
	return NULL;
}

/* ---- snapshots ---------------------------------------------------------- */

static void note_capture_failure(run_ctx *ctx, const char *phase, const capture_outcome *co)
{
	jv *f = jv_object();
	if (co->unknown)
		ctx->captures_unknown++;
	else
		ctx->captures_failed++;
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set_str(f, "actionId", ctx->action_id);
	jv_set_str(f, "phase", phase);
	jv_set_str(f, "diagnostic", co->diagnostic);
	journal_note(ctx, "evidence-failure", f);
}

/* Takes one retained snapshot; 0 on success, 1 when it failed (diag in co),
 * -1 on an internal failure. */
static int take_snapshot(run_ctx *ctx, const char *phase, capture_outcome *co, rerr *err)
{
	char *dir_rel = xasprintf("state/snapshots/%s", ctx->session_id);
	char *dir_abs = path_join(ctx->root, dir_rel);
	char *file_name = xasprintf("%s-%s.png", ctx->execution_id, phase);
	char *partial = xasprintf("%s/.partial-%s-%s.png", dir_abs, ctx->execution_id, phase);
	char *final_path = path_join(dir_abs, file_name);
	spawn_hooks hooks;
	int rc = -1;
	if (dir_ensure(ctx->root, dir_rel, err) != 0)
		goto cleanup;
	make_hooks(ctx, &hooks, 0);
	ctx->phase_name = strcmp(phase, "before") == 0 ? "capture-before" : "capture-after";
	capture_take(&ctx->capture, partial, CAPTURE_TIMEOUT_MAX_MS, &hooks, ctx->spared, ctx->spared_count,
	             co);
	if (co->ok && rename(partial, final_path) != 0) {
		text_format(co->diagnostic, sizeof(co->diagnostic),
		            "cannot rename the capture into place: %s", strerror(errno));
		unlink(partial);
		co->ok = 0;
	}
	if (co->ok && fsync_dir(dir_abs, err) != 0)
		goto cleanup;
	if (!co->ok) {
		note_capture_failure(ctx, phase, co);
		rc = 1;
		goto cleanup;
	}
	{
		jv *d = jv_object();
		jv *a = jv_object();
		jv *f = jv_object();
		char *rel_path = xasprintf("%s/%s", dir_rel, file_name);
		int after = strcmp(phase, "after") == 0;
		jv_set_str(d, "sessionId", ctx->session_id);
		jv_set_str(d, "attemptId", ctx->attempt_id);
		jv_set_str(d, "executionId", ctx->execution_id);
		jv_set_str(d, "actionId", ctx->action_id);
		jv_set_str(d, "stepId", ctx->step_id);
		jv_set_str(d, "phase", phase);
		jv_set_str(d, "capturedAt", co->captured_at);
		jv_set_str(d, "sha256", co->sha256);
		jv_set_int(d, "bytes", (int64_t)co->bytes);
		jv_set_str(d, "mimeType", "image/png");
		if (after)
			jv_set_int(d, "declaredAfterIntervalMs", ctx->after_ms);
		jv_set_str(d, "fileName", file_name);
		if (ctx->group_id)
			jv_set_str(d, "groupId", ctx->group_id);
		jv_push(ctx->descriptors, d);
		jv_set_str(a, "phase", phase);
		jv_set_str(a, "path", rel_path);
		jv_set_str(a, "sha256", co->sha256);
		jv_set_int(a, "bytes", (int64_t)co->bytes);
		jv_push(ctx->action_snaps, a);
		jv_push(ctx->file_names, jv_str(file_name));
		jv_set_str(f, "executionId", ctx->execution_id);
		jv_set_str(f, "actionId", ctx->action_id);
		jv_set_str(f, "phase", phase);
		jv_set_str(f, "fileName", file_name);
		jv_set_str(f, "sha256", co->sha256);
		jv_set_int(f, "bytes", (int64_t)co->bytes);
		jv_set_str(f, "capturedAt", co->captured_at);
		jv_set_str(f, "mimeType", "image/png");
		if (ctx->group_id)
			jv_set_str(f, "groupId", ctx->group_id);
		if (after)
			jv_set_int(f, "declaredAfterIntervalMs", ctx->after_ms);
		free(rel_path);
		if (journal_append(&ctx->jr, "snapshot-captured", f, err) != 0)
			goto cleanup;
	}
	rc = 0;
cleanup:
	free(dir_rel);
	free(dir_abs);
	free(file_name);
	free(partial);
	free(final_path);
	return rc;
}

/* The capture gate probe of member and last events: 0 ok, 1 failed. */
static int capture_gate(run_ctx *ctx, capture_outcome *co, rerr *err)
{
	char rnd[17];
	char *probe;
	spawn_hooks hooks;
	jv *f;
	if (random_hex(rnd, 8, err) != 0)
		return -1;
	probe = xasprintf("%s/.capture-probe-%s.png", ctx->root, rnd);
	make_hooks(ctx, &hooks, 0);
	ctx->phase_name = "capture-gate";
	capture_take(&ctx->capture, probe, CAPTURE_TIMEOUT_MAX_MS, &hooks, ctx->spared, ctx->spared_count,
	             co);
	unlink(probe);
	free(probe);
	if (co->unknown)
		ctx->captures_unknown++;
	f = jv_object();
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set_str(f, "actionId", ctx->action_id);
	jv_set_bool(f, "ok", co->ok);
	if (!co->ok)
		jv_set_str(f, "diagnostic", co->diagnostic);
	if (journal_append(&ctx->jr, "capture-status", f, err) != 0)
		return -1;
	return co->ok ? 0 : 1;
}

/* ---- dispatch (guest.md §12.2) ------------------------------------------ */

static char **script_environment(run_ctx *ctx)
{
	static const char *const ours[] = {"RELAY_RUNTIME_ROOT=", "RELAY_WORKSPACE=", "RELAY_SUPPORT=",
	                                   "RELAY_EXECUTION_ID=", "RELAY_STEP_ID=",   "RELAY_CUA_DRIVER="};
	size_t n = 0, i, k, out = 0;
	char **env;
	while (environ && environ[n])
		n++;
	env = xcalloc(n + 8, sizeof(char *));
	for (i = 0; i < n; i++) {
		int skip = 0;
		for (k = 0; k < sizeof(ours) / sizeof(ours[0]); k++)
			if (strncmp(environ[i], ours[k], strlen(ours[k])) == 0)
				skip = 1;
		if (!skip)
			env[out++] = xstrdup(environ[i]);
	}
	env[out++] = xasprintf("RELAY_RUNTIME_ROOT=%s", ctx->root);
	env[out++] = xasprintf("RELAY_WORKSPACE=%s/workspace", ctx->root);
	env[out++] = xasprintf("RELAY_SUPPORT=%s/support", ctx->root);
	env[out++] = xasprintf("RELAY_EXECUTION_ID=%s", ctx->execution_id);
	env[out++] = xasprintf("RELAY_STEP_ID=%s", ctx->step_id);
	if (ctx->capture_on && strcmp(ctx->capture.plugin, "capture-cua") == 0)
		env[out++] = xasprintf("RELAY_CUA_DRIVER=%s", ctx->capture.argv[0]);
	env[out] = NULL;
	return env;
}

/* guest.md §16.1: the script exited and left processes running. The
 * receiver stops adopting orphans (what is adopted already is spared by the
 * captures' cleanup), and a drainer takes the pipes survivors still hold. */
static void keep_survivors(run_ctx *ctx)
{
	rerr derr;
	proc_stop_subreaping();
	ctx->spared = proc_children(&ctx->spared_count);
	if (survivors_start_drain(ctx->root, ctx->execution_id, ctx->proc.out_left_fd, ctx->proc.err_left_fd,
	                          &ctx->drainer_pid, &derr) != 0)
		fprintf(stderr, "receiver: %s; what the step left running may block on its output\n",
		        derr.msg);
	ctx->proc.out_left_fd = -1;
	ctx->proc.err_left_fd = -1;
	if (ctx->drainer_pid > 0) {
		ctx->spared = xrealloc(ctx->spared, (ctx->spared_count + 1) * sizeof(pid_t));
		ctx->spared[ctx->spared_count++] = ctx->drainer_pid;
	}
}

/* Records what the script left running after a normal exit: the object of
 * `leftRunning`, journaled as the annotation background-processes when any. */
static void note_left_running(run_ctx *ctx)
{
	const spawn_result *p = &ctx->proc;
	if (!ctx->have_proc || !p->exited || p->timed_out || p->output_truncated || p->cancelled ||
	    p->spawn_failed)
		return;
	/* Nothing was left behind (proc_run knows without walking /proc): an
	 * empty list. */
	if (!p->left_running) {
		ctx->left_running = jv_object();
		jv_set_int(ctx->left_running, "count", 0);
		jv_set(ctx->left_running, "processes", jv_array());
		return;
	}
	ctx->left_running = survivors_list(p->pgid, &ctx->drainer_pid, ctx->drainer_pid > 0 ? 1 : 0);
	if (jv_get(ctx->left_running, "count")->number_int > 0) {
		jv *f = jv_object();
		jv_set_str(f, "name", "background-processes");
		jv_set_str(f, "executionId", ctx->execution_id);
		jv_set(f, "details", jv_copy(ctx->left_running));
		journal_note(ctx, "annotation", f);
	}
}

static int dispatch(run_ctx *ctx, rerr *err)
{
	spawn_request req;
	spawn_hooks hooks;
	char **env = script_environment(ctx);
	int rc;
	memset(&req, 0, sizeof(req));
	req.path = ctx->argv[0];
	req.argv = ctx->argv;
	req.envp = env;
	req.cwd = ctx->cwd;
	req.timeout_ms = ctx->timeout_ms;
	req.output_budget = OUTPUT_BUDGET_BYTES;
	req.leave_survivors = 1;
	make_hooks(ctx, &hooks, 1);
	ctx->phase_name = "script";
	timestamp_now(ctx->dispatch_at);
	ctx->dispatched = 1;
	rc = proc_run(&req, &hooks, &ctx->proc, err);
	if (rc == 0) {
		ctx->have_proc = 1;
		if (ctx->proc.left_running)
			keep_survivors(ctx);
	}
	free_argv(env);
	return rc;
}

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

static int receipt_exists(run_ctx *ctx)
{
	char *path = xasprintf("%s/%s/%s.json", ctx->root, RECEIPTS_DIR, ctx->execution_id);
	int e = path_exists(path);
	free(path);
	return e;
}

static int started_exists(run_ctx *ctx)
{
	char *path = xasprintf("%s/%s/%s.json", ctx->root, STARTED_DIR, ctx->execution_id);
	int e = path_exists(path);
	free(path);
	return e;
}

static int answer_duplicate(run_ctx *ctx)
{
	char sha[65];
	uint64_t bytes = 0;
	jv *receipt = NULL;
	int matches = 0;
	int took_lock = 0;
	rerr err;
	if (read_receipt_fact(ctx, sha, &bytes, &receipt, &err) != 0) {
		emit_outcome_frame(ctx->execution_id, "uncertain", err.msg, err.msg);
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
			journal_note(ctx, "execution-completion", f);
		}
	}
	(void)took_lock;
	jv_free(receipt);
	emit_receipt_frame(ctx, sha, bytes, 1, matches);
	return EXIT_DONE;
}

static int answer_already_started(run_ctx *ctx, rerr *err)
{
	receipt_info ri;
	char sha[65];
	uint64_t bytes = 0;
	int rc;
	const char *language = str_or_null(ctx->req, "language");
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
	if (write_execution_record(ctx, "uncertain", NULL, NULL, err) != 0)
		return -1;
	memset(&ri, 0, sizeof(ri));
	ri.outcome = outcome_json("uncertain", DIAG_ALREADY, NULL);
	ri.image_status = capture_planned ? "capture-unknown" : "not-requested";
	ri.termination_confirmed = 1;
	rc = write_receipt(ctx, &ri, sha, &bytes, err);
	jv_free(ri.outcome);
	if (rc == 0)
		emit_receipt_frame(ctx, sha, bytes, 0, 0);
	return rc;
}

/* ---- the run ------------------------------------------------------------- */

/* What a kill's diagnostic adds when termination was not confirmed. */
static const char *unconfirmed_note(const run_ctx *ctx)
{
	return ctx->proc.termination_confirmed ? "" : ", but its termination was not confirmed";
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
	receipt_info ri;
	int success;

	/* 6. routing decision */
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
		if (journal_append(&ctx->jr, "annotation", f, err) != 0)
			goto cleanup;
	}
	/* 7. validation */
	diag = validate_request(ctx);
	if (diag) {
		rc = refuse(ctx, diag, "not-requested", sha, bytes, err);
		goto cleanup;
	}
	/* 8. group rules */
	groups = groups_read(ctx, err);
	if (!groups)
		goto cleanup;
	diag = group_rules(ctx, groups);
	if (diag) {
		rc = refuse(ctx, diag, "not-requested", sha, bytes, err);
		goto cleanup;
	}
	/* 9. runtime */
	diag = resolve_runtime(ctx, err, &internal);
	if (internal)
		goto cleanup;
	if (diag) {
		rc = refuse(ctx, diag, "not-requested", sha, bytes, err);
		goto cleanup;
	}
	/* 10. execution-start, action-start, pending action record */
	{
		jv *f = jv_object();
		jv *ident = jv_object();
		jv_set_str(f, "executionId", ctx->execution_id);
		jv_set(f, "argv", argv_json(ctx->argv));
		jv_set_str(f, "cwd", ctx->cwd);
		jv_set(f, "step", jv_copy(jv_get(ctx->req, "step")));
		jv_set_str(f, "evidenceMode", "recorded");
		jv_set_int(f, "timeoutMs", ctx->timeout_ms);
		jv_set_str(ident, "sha256", ctx->script_sha);
		jv_set_str(ident, "language", ctx->language);
		jv_set_str(ident, "remotePath", ctx->script_path);
		jv_set(f, "scriptIdentity", ident);
		if (journal_append(&ctx->jr, "execution-start", f, err) != 0)
			goto cleanup;
	}
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
		jv_set_str(plan, "role", role_name(ctx));
		jv_set_bool(plan, "captureOff", !ctx->capture_on);
		jv_set(f, "snapshotPlan", plan);
		if (journal_append(&ctx->jr, "action-start", f, err) != 0)
			goto cleanup;
		if (write_action_record(ctx, "pending", err) != 0)
			goto cleanup;
	}
	/* 11. capture gate */
	if (ctx->capture_on && ctx->group_phase && strcmp(ctx->group_phase, "first") != 0) {
		r = capture_gate(ctx, &co, err);
		if (r < 0)
			goto cleanup;
		if (r > 0) {
			text_format(diag_buf, sizeof(diag_buf), "capture gate probe failed: %s",
			            co.diagnostic);
			rc = refuse(ctx, diag_buf, co.unknown ? "capture-unknown" : "capture-failed", sha,
			            bytes, err);
			goto cleanup;
		}
	}
	/* 12. before-snapshot */
	if (ctx->capture_on && (!ctx->group_phase || strcmp(ctx->group_phase, "first") == 0)) {
		r = take_snapshot(ctx, "before", &co, err);
		if (r < 0)
			goto cleanup;
		if (r > 0) {
			text_format(diag_buf, sizeof(diag_buf), "before-snapshot failed: %s", co.diagnostic);
			rc = refuse(ctx, diag_buf, co.unknown ? "capture-unknown" : "capture-failed", sha,
			            bytes, err);
			goto cleanup;
		}
	}
	/* A first event opens its group once it is admitted. */
	if (ctx->group_phase && strcmp(ctx->group_phase, "first") == 0) {
		jv *active = jv_object();
		jv *details = jv_object();
		jv_set_str(active, "groupId", ctx->group_id);
		jv_set_str(active, "sessionId", ctx->session_id);
		jv_set_str(active, "attemptId", ctx->attempt_id);
		jv_set_str(active, "openedBy", ctx->execution_id);
		jv_set(groups, "active", active);
		jv_push(jv_get(groups, "used"), jv_str(ctx->group_id));
		if (groups_write(ctx, groups, err) != 0)
			goto cleanup;
		jv_set_str(details, "groupId", ctx->group_id);
		group_annotation(ctx, "group-open", details);
	}
	/* 13-14. the script */
	if (lock_cancel_requested(&ctx->lock)) {
		kind = "uncertain";
		uncertain_diag = DIAG_CANCELLED;
	} else {
		if (dispatch(ctx, err) != 0)
			goto cleanup;
		exit_status = exit_status_json(&ctx->proc);
		if (ctx->proc.spawn_failed) {
			text_format(diag_buf, sizeof(diag_buf), "spawn failed: %s", ctx->proc.spawn_error);
			kind = "uncertain";
			uncertain_diag = diag_buf;
		} else if (ctx->proc.cancelled) {
			kind = "uncertain";
			uncertain_diag = DIAG_CANCELLED;
		} else if (ctx->proc.timed_out) {
			text_format(diag_buf, sizeof(diag_buf),
			            "timed out after %lld ms; the process group was killed%s",
			            (long long)ctx->timeout_ms, unconfirmed_note(ctx));
			kind = "uncertain";
			uncertain_diag = diag_buf;
		} else if (ctx->proc.output_truncated) {
			text_format(diag_buf, sizeof(diag_buf),
			            "output exceeded %u bytes; the process group was killed%s",
			            OUTPUT_BUDGET_BYTES, unconfirmed_note(ctx));
			kind = "uncertain";
			uncertain_diag = diag_buf;
		} else if (!ctx->proc.termination_confirmed) {
			text_format(diag_buf, sizeof(diag_buf),
			            "termination of process group %d was not confirmed", (int)ctx->proc.pgid);
			kind = "uncertain";
			uncertain_diag = diag_buf;
		}
	}
	/* 15. after-snapshot */
	if (ctx->capture_on && (!ctx->group_phase || strcmp(ctx->group_phase, "last") == 0)) {
		sleep_ms(ctx->after_ms);
		r = take_snapshot(ctx, "after", &co, err);
		if (r < 0)
			goto cleanup;
		if (r > 0 && !uncertain_diag) {
			text_format(diag_buf, sizeof(diag_buf), "after-snapshot failed: %s", co.diagnostic);
			kind = "uncertain";
			uncertain_diag = diag_buf;
		}
	}
	note_left_running(ctx);
	/* 16. outcome */
	{
		size_t expected = 0;
		if (ctx->capture_on) {
			if (!ctx->group_phase)
				expected = 2;
			else if (strcmp(ctx->group_phase, "member") == 0)
				expected = 0;
			else
				expected = 1;
		}
		if (!uncertain_diag && ctx->descriptors->count != expected) {
			text_format(diag_buf, sizeof(diag_buf),
			            "wrong number of snapshots: %zu planned, %zu retained", expected,
			            ctx->descriptors->count);
			kind = "uncertain";
			uncertain_diag = diag_buf;
		}
	}
	outcome = outcome_json(kind, uncertain_diag, exit_status ? jv_copy(exit_status) : NULL);
	{
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
		success = strcmp(kind, "completed") == 0 && ctx->have_proc && ctx->proc.exited &&
		          !ctx->proc.signal_no && ctx->proc.exit_code == 0;
		if (write_execution_record(ctx, kind, ctx->argv, exit_status ? jv_copy(exit_status) : NULL,
		                           err) != 0)
			goto cleanup;
		if (write_action_record(ctx, strcmp(kind, "completed") == 0 ? "recorded" : "uncertain",
		                        err) != 0)
			goto cleanup;
		{
			jv *f = jv_object();
			jv_set_str(f, "executionId", ctx->execution_id);
			jv_set_str(f, "actionId", ctx->action_id);
			jv_set_str(f, "status", image_status);
			jv_set(f, "fileNames", jv_copy(ctx->file_names));
			if (journal_append(&ctx->jr, "snapshot-evidence", f, err) != 0)
				goto cleanup;
		}
		{
			jv *f = jv_object();
			jv *tool = jv_object();
			jv *value = jv_object();
			int confirmed = ctx->have_proc ? ctx->proc.termination_confirmed : 1;
			jv_set_str(f, "executionId", ctx->execution_id);
			jv_set_str(f, "actionId", ctx->action_id);
			jv_set_str(f, "state", strcmp(kind, "completed") == 0 ? "recorded" : "uncertain");
			jv_set_str(tool, "kind", success ? "success" : "failure");
			jv_set(value, "exitStatus", exit_status ? jv_copy(exit_status) : jv_null());
			jv_set_bool(value, "timedOut", ctx->have_proc && ctx->proc.timed_out);
			jv_set_bool(value, "outputTruncated", ctx->have_proc && ctx->proc.output_truncated);
			jv_set_bool(value, "terminationConfirmed", confirmed);
			jv_set(tool, "value", value);
			jv_set(f, "toolOutcome", tool);
			if (journal_append(&ctx->jr, "action-completion", f, err) != 0)
				goto cleanup;
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
			ri.stdout_v = output_json(&ctx->proc.out, ctx->proc.output_truncated);
			ri.stderr_v = output_json(&ctx->proc.err, ctx->proc.output_truncated);
		}
		r = write_receipt(ctx, &ri, sha, bytes, err);
		jv_free(ri.stdout_v);
		jv_free(ri.stderr_v);
		if (r != 0)
			goto cleanup;
	}
	/* A successful last closes its group; any other outcome leaves it open. */
	if (ctx->group_phase && strcmp(ctx->group_phase, "last") == 0) {
		jv *details = jv_object();
		jv_set_str(details, "groupId", ctx->group_id);
		if (success && (!ctx->capture_on || ctx->descriptors->count == 1)) {
			jv_set(groups, "active", jv_null());
			if (groups_write(ctx, groups, err) != 0) {
				jv_free(details);
				goto cleanup;
			}
			group_annotation(ctx, "group-close", details);
		} else {
			jv_set_str(details, "outcome", kind);
			group_annotation(ctx, "group-incomplete", details);
		}
	}
	rc = 0;
cleanup:
	jv_free(groups);
	jv_free(exit_status);
	jv_free(outcome);
	return rc;
}

int run_command(const char *root, const char *request_path, int from_stdin)
{
	run_ctx ctx;
	rerr err;
	buf text;
	const char *req_rel;
	int too_large = 0, damaged = 0;
	int status = EXIT_DONE;
	char sha[65];
	uint64_t bytes = 0;
	lock_outcome lo;
	memset(&ctx, 0, sizeof(ctx));
	lock_init(&ctx.lock);
	buf_init(&text);
	ctx.root = root;
	ctx.descriptors = jv_array();
	ctx.action_snaps = jv_array();
	ctx.file_names = jv_array();
	timestamp_now(ctx.started_at);
	/* 1. read and parse the request */
	if (root_check(root, &err) != 0) {
		emit_outcome_frame("unknown", "refused", err.msg, NULL);
		status = EXIT_USAGE;
		goto cleanup;
	}
	fsx_defer_syncs(root);
	if (from_stdin) {
		ctx.stdio_parts = 1;
		if (stdin_parts_read(STDIN_FILENO, &ctx.parts, &err) != 0) {
			emit_outcome_frame("unknown", "refused", err.msg, NULL);
			status = EXIT_USAGE;
			goto cleanup;
		}
		buf_append(&text, ctx.parts.request.data ? ctx.parts.request.data : "",
		           ctx.parts.request.len);
	} else if (path_below_root(root, request_path, &req_rel) != 0 || !*req_rel ||
	           path_walk_check(root, req_rel, 0, NULL, &err) != 0) {
		emit_outcome_frame("unknown", "refused", "request must be a file below the guest root", NULL);
		status = EXIT_USAGE;
		goto cleanup;
	} else if (read_file_limited(request_path, REQUEST_MAX_BYTES, &text, NULL, &too_large, &err) != 0) {
		emit_outcome_frame("unknown", "refused",
		                   too_large ? "request file exceeds 1 MiB (1048576 bytes)" : err.msg, NULL);
		status = EXIT_USAGE;
		goto cleanup;
	}
	sha256_hex_of(text.data, text.len, ctx.request_sha);
	ctx.req = jv_parse(text.data, text.len, &err);
	if (!ctx.req || ctx.req->type != JV_OBJECT) {
		emit_outcome_frame("unknown", "refused", ctx.req ? "request is not a JSON object" : err.msg,
		                   NULL);
		status = EXIT_USAGE;
		goto cleanup;
	}
	ctx.execution_id = jv_get_str(ctx.req, "executionId");
	if (!execution_id_valid(ctx.execution_id)) {
		ctx.execution_id = NULL;
		emit_outcome_frame("unknown", "refused", "request has no valid executionId", NULL);
		status = EXIT_USAGE;
		goto cleanup;
	}
	if (ctx.stdio_parts && stdin_parts_match(&ctx.parts, root, ctx.req, &err) != 0) {
		emit_outcome_frame(ctx.execution_id, "refused", err.msg, NULL);
		status = EXIT_USAGE;
		goto cleanup;
	}
	ctx.action_id = xasprintf("action-%s", ctx.execution_id);
	ctx.session_id = state_session_id(root, &err);
	/* 2. a receipt exists: answer it */
	if (receipt_exists(&ctx)) {
		status = answer_duplicate(&ctx);
		goto cleanup;
	}
	if (!ctx.session_id) {
		emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, NULL);
		goto cleanup;
	}
	/* 3. the lock */
	lo = lock_acquire(&ctx.lock, root, ctx.execution_id, &err);
	if (lo == LOCK_IN_PROGRESS) {
		emit_outcome_frame(ctx.execution_id, "uncertain", DIAG_IN_PROGRESS, NULL);
		goto cleanup;
	}
	if (lo == LOCK_UNCONFIRMED) {
		emit_outcome_frame(ctx.execution_id, "uncertain", DIAG_UNCONFIRMED, NULL);
		goto cleanup;
	}
	if (lo == LOCK_ERROR) {
		emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
		status = EXIT_INTERNAL;
		goto cleanup;
	}
	if (receipt_exists(&ctx)) {
		status = answer_duplicate(&ctx);
		goto cleanup;
	}
	/* 4. the journal */
	if (journal_open(&ctx.jr, root, ctx.session_id, &damaged, &err) != 0) {
		if (damaged) {
			fprintf(stderr, "receiver: %s\n", err.msg);
			emit_outcome_frame(ctx.execution_id, "uncertain", DIAG_DAMAGED, NULL);
		} else {
			emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
			status = EXIT_INTERNAL;
		}
		goto cleanup;
	}
	ctx.journal_ready = 1;
	if (started_exists(&ctx)) {
		if (answer_already_started(&ctx, &err) != 0) {
			emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
			status = EXIT_INTERNAL;
		}
		goto cleanup;
	}
	/* The parts that came on standard input go where §9 puts them, only
	 * for an id never seen before. */
	if (ctx.stdio_parts && stdin_parts_write(root, &ctx.parts, &err) != 0) {
		emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
		status = EXIT_INTERNAL;
		goto cleanup;
	}
	/* 5. the started marker: from here the id counts as seen */
	{
		jv *m = jv_object();
		char *name = xasprintf("%s.json", ctx.execution_id);
		int ok;
		jv_set_str(m, "executionId", ctx.execution_id);
		jv_set_str(m, "requestSha256", ctx.request_sha);
		jv_set_str(m, "startedAt", ctx.started_at);
		ok = RECEIVER_FAILPOINT_ERROR("receiver.run.before-started", &err);
		if (ok == 0)
			ok = state_write_json(root, STARTED_DIR, name, m, NULL, NULL, &err);
		free(name);
		jv_free(m);
		if (ok != 0) {
			emit_outcome_frame(ctx.execution_id, "uncertain", err.msg, err.msg);
			status = EXIT_INTERNAL;
			goto cleanup;
		}
	}
	RECEIVER_FAILPOINT("receiver.run.after-started");
	ctx.lock.phase = "started";
	if (lock_write_owner(&ctx.lock, &err) != 0 || execute(&ctx, sha, &bytes, &err) != 0) {
		/* An internal failure after the marker: settle the id with an
		 * uncertain receipt if the disk still allows it. */
		receipt_info ri;
		rerr err2;
		char *diag = xasprintf("receiver internal failure: %s", err.msg);
		memset(&ri, 0, sizeof(ri));
		ri.outcome =
		    outcome_json("uncertain", diag, ctx.have_proc ? exit_status_json(&ctx.proc) : NULL);
		ri.image_status = ctx.capture_on ? "capture-unknown" : "not-requested";
		ri.termination_confirmed = ctx.lock.group_count == 0;
		ri.argv = ctx.argv;
		if (!receipt_exists(&ctx) && write_receipt(&ctx, &ri, sha, &bytes, &err2) == 0)
			emit_receipt_frame(&ctx, sha, bytes, 0, 0);
		else
			emit_outcome_frame(ctx.execution_id, "uncertain", diag, err.msg);
		status = EXIT_INTERNAL;
		jv_free(ri.outcome);
		free(diag);
		goto cleanup;
	}
	RECEIVER_FAILPOINT("receiver.run.after-receipt");
	emit_receipt_frame(&ctx, sha, bytes, 0, 0);
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
	if (ctx.have_proc)
		spawn_result_free(&ctx.proc);
	free(ctx.spared);
	jv_free(ctx.left_running);
	stdin_parts_free(&ctx.parts);
	capture_spec_free(&ctx.capture);
	free_argv(ctx.argv);
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
