/*
 * receiver/run_validate.c — request validation (spec/guest.md §6.1, §7.4) (run_internal.h).
 */
#include "run_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- validation (spec/guest.md §6.1, §7.4) ----------------------------------- */

static int keys_exactly(const jv *obj, const char *const *keys, size_t n, const char *prefix, char *diag,
                        size_t diag_len)
{
	size_t i, k;
	for (i = 0; i < obj->count; i++) {
		/* the one optional key: the screen recording (record.h) */
		int known = prefix[0] == '\0' && strcmp(obj->keys[i], RECEIVER_REQ_VIDEO) == 0;
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
	size_t n = rs_utf8_length(s, strlen(s));
	return n >= lo && n <= hi;
}

/* Structure and types: "unsupported request: <field>". */
static int check_structure(run_ctx *ctx)
{
	/* The request's keys (spec/guest.md §6.1), named by the protocol header the
	 * host builds the request with. */
	static const char *const top[] = {
	    RECEIVER_REQ_PROTOCOL,      RECEIVER_REQ_EXECUTION_ID, RECEIVER_REQ_SESSION_ID,
	    RECEIVER_REQ_ATTEMPT_ID,    RECEIVER_REQ_GUEST,        RECEIVER_REQ_BECAUSE,
	    RECEIVER_REQ_EVIDENCE_MODE, RECEIVER_REQ_LANGUAGE,     RECEIVER_REQ_SCRIPT,
	    RECEIVER_REQ_RUNTIME,       RECEIVER_REQ_CWD,          RECEIVER_REQ_TIMEOUT_MS,
	    RECEIVER_REQ_STEP,          RECEIVER_REQ_SNAPSHOTS,    RECEIVER_REQ_CAPTURE};
	static const char *const script_keys[] = {RECEIVER_SCRIPT_PATH, RECEIVER_SCRIPT_SHA256,
	                                          RECEIVER_SCRIPT_BYTES, RECEIVER_SCRIPT_ORIGIN,
	                                          RECEIVER_SCRIPT_LOCAL_NAME};
	static const char *const runtime_keys[] = {RECEIVER_RUNTIME_NODE_PATH};
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
	if (!jv_get_int(r, RECEIVER_REQ_PROTOCOL, &protocol) || protocol != RECEIVER_PROTOCOL)
		BAD(RECEIVER_REQ_PROTOCOL);
	{
		static const char *const strings[] = {RECEIVER_REQ_EXECUTION_ID, RECEIVER_REQ_SESSION_ID,
		                                      RECEIVER_REQ_ATTEMPT_ID,   RECEIVER_REQ_GUEST,
		                                      RECEIVER_REQ_BECAUSE,      RECEIVER_REQ_EVIDENCE_MODE,
		                                      RECEIVER_REQ_LANGUAGE,     RECEIVER_REQ_CWD};
		for (i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
			if (!is_str(jv_get(r, strings[i])))
				BAD(strings[i]);
	}
	if (strcmp(jv_get_str(r, RECEIVER_REQ_EVIDENCE_MODE), RECEIVER_EVIDENCE_RECORDED) != 0)
		BAD(RECEIVER_REQ_EVIDENCE_MODE);
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
const char *run_validate_request(run_ctx *ctx)
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
		if (is_blank(because) || rs_utf8_length(because, strlen(because)) > BECAUSE_MAX_CHARS)
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
	return record_parse(ctx);
}
