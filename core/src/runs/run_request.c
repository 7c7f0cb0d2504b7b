/*
 * The call of relay_script checked, and the receiver request it becomes
 * (spec/guest.md §6, §16.2), side by side; see run_request.h.
 */
#include "runs/run_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receiver_protocol.h"
#include "runs/host_paths.h"
#include "runs/run_internal.h"
#include "runs/run_state.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* ---- parsing the call ------------------------------------------------------------ */

static const char *language_ext(const char *language)
{
	if (strcmp(language, "shell") == 0)
		return "sh";
	if (strcmp(language, "javascript") == 0)
		return "js";
	if (strcmp(language, "typescript") == 0)
		return "ts";
	return "py";
}

void run_call_free(run_call *c)
{
	if (c == NULL)
		return;
	free(c->script);
	free(c->local_path);
	free(c->local_abs);
	free(c->reason);
	json_object_put(c->step);
	json_object_put(c->snapshots);
	json_object_put(c->args);
	memset(c, 0, sizeof *c);
}

static bool step_id_used(session_manager *m, guest *g, const char *id)
{
	bool used = false;
	(void)m;
	slice_lock(g->run);
	size_t n = g->run->used_step_ids ? json_object_array_length(g->run->used_step_ids) : 0;
	for (size_t i = 0; i < n && !used; i++) {
		const char *s = json_object_get_string(json_object_array_get_idx(g->run->used_step_ids, i));
		used = s && strcmp(s, id) == 0;
	}
	slice_unlock(g->run);
	return used;
}

int run_call_parse(session_manager *m, guest *g, json_object *args, run_call *out, relay_outcome *o)
{
	memset(out, 0, sizeof *out);
	const char *language = jsonx_get_str(args, "language");
	snprintf(out->language, sizeof out->language, "%s", language ? language : "shell");
	out->ext = language_ext(out->language);
	jsonx_get_bool(args, "inline", &out->is_inline);
	jsonx_get_bool(args, "diagnostic", &out->diagnostic);
	out->timeout_ms = RUN_DEFAULT_TIMEOUT_MS;
	jsonx_get_int(args, "timeoutMs", &out->timeout_ms);
	const char *reason = jsonx_get_str(args, "reason");
	out->reason = reason ? strdup(reason) : NULL;
	json_object *step = jsonx_get_obj(args, "step");
	out->step = step ? json_object_get(step) : NULL;
	json_object *snapshots = jsonx_get_obj(args, "snapshots");
	out->snapshots = snapshots ? json_object_get(snapshots) : NULL;
	out->args = json_object_get(args);
	if (out->is_inline) {
		json_object *code = NULL;
		json_object_object_get_ex(args, "code", &code);
		size_t len = (size_t)json_object_get_string_len(code);
		out->script = malloc(len + 1);
		if (out->script == NULL)
			return outcome_fail(o, "internal",
			                    "out of memory reading the script; nothing was sent");
		memcpy(out->script, json_object_get_string(code), len);
		out->script[len] = '\0';
		out->script_len = len;
	} else {
		const char *given = jsonx_get_str(args, "localPath");
		host_path p;
		char why[1024];
		if (host_path_resolve(m->settings->project, m->settings->project_given, given, HOST_PATH_FILE,
		                      &p, why, sizeof why) != 0)
			return outcome_fail(
			    o, "path-refused",
			    "relay_script localPath refused: %s; nothing was sent to the guest", why);
		size_t max = out->diagnostic ? RUN_DIAGNOSTIC_MAX_BYTES : RUN_SCRIPT_FILE_MAX_BYTES;
		bool too_large = false;
		int rc = host_path_read(m->settings->project, &p, max, &out->script, &out->script_len,
		                        &too_large, why, sizeof why);
		out->local_path = strdup(given);
		out->local_abs = strdup(p.path);
		uint64_t bytes = p.bytes;
		host_path_free(&p);
		if (rc != 0 && too_large)
			return outcome_fail(
			    o, "invalid-input",
			    "Invalid relay_script input: /localPath is %llu bytes; %s at most %zu bytes",
			    (unsigned long long)bytes,
			    out->diagnostic ? "a diagnostic script travels as one argument and may have"
			                    : "a script file may have",
			    max);
		if (rc != 0)
			return outcome_fail(
			    o, "path-refused",
			    "relay_script localPath refused: %s; nothing was sent to the guest", why);
	}
	if (!out->diagnostic && out->step) {
		const char *id = jsonx_get_str(out->step, "id");
		if (id && step_id_used(m, g, id))
			return outcome_fail(
			    o, "invalid-input",
			    "Invalid relay_script input: /step/id %s was already used by an earlier run "
			    "on %s; step ids are never reused, choose another",
			    id, g->name);
	}
	return 0;
}

/* ---- the request (spec/guest.md §6) ---------------------------------------------------- */

json_object *run_request_build(const run_request_in *in)
{
	const run_call *c = in->call;
	json_object *request = json_object_new_object();
	jsonx_add_int(request, RECEIVER_REQ_PROTOCOL, RECEIVER_PROTOCOL_VERSION);
	jsonx_add_str(request, RECEIVER_REQ_EXECUTION_ID, in->execution_id);
	jsonx_add_str(request, RECEIVER_REQ_SESSION_ID, in->session_id);
	jsonx_add_str(request, RECEIVER_REQ_ATTEMPT_ID, in->attempt_id);
	jsonx_add_str(request, RECEIVER_REQ_GUEST, in->guest_name);
	jsonx_add_str(request, RECEIVER_REQ_BECAUSE, in->because);
	jsonx_add_str(request, RECEIVER_REQ_EVIDENCE_MODE, RECEIVER_EVIDENCE_RECORDED);
	jsonx_add_str(request, RECEIVER_REQ_LANGUAGE, c->language);
	json_object *script = json_object_new_object();
	jsonx_add_str(script, RECEIVER_SCRIPT_PATH, in->script_remote);
	jsonx_add_str(script, RECEIVER_SCRIPT_SHA256, in->script_sha256);
	jsonx_add_int(script, RECEIVER_SCRIPT_BYTES, (int64_t)c->script_len);
	jsonx_add_str(script, RECEIVER_SCRIPT_ORIGIN, c->is_inline ? "inline" : "file");
	jsonx_add_str(script, RECEIVER_SCRIPT_LOCAL_NAME, c->local_path);
	jsonx_add(request, RECEIVER_REQ_SCRIPT, script);
	json_object *runtime = json_object_new_object();
	jsonx_add_str(runtime, RECEIVER_RUNTIME_NODE_PATH, in->node_path);
	jsonx_add(request, RECEIVER_REQ_RUNTIME, runtime);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/workspace", in->root);
	jsonx_add_str(request, RECEIVER_REQ_CWD, strbuf_str(&sb));
	strbuf_free(&sb);
	jsonx_add_int(request, RECEIVER_REQ_TIMEOUT_MS, c->timeout_ms);
	jsonx_add(request, RECEIVER_REQ_STEP, json_object_get(in->step));
	jsonx_add(request, RECEIVER_REQ_SNAPSHOTS, json_object_get(in->snapshots));
	jsonx_add(request, RECEIVER_REQ_CAPTURE, in->capture ? json_object_get(in->capture) : NULL);
	if (in->video)
		jsonx_add(request, RECEIVER_REQ_VIDEO, json_object_get(in->video));
	return request;
}

json_object *run_recording_fact(const json_object *receipt, const json_object *request)
{
	if (jsonx_get_obj(request, RECEIVER_REQ_VIDEO) == NULL)
		return NULL;
	json_object *v = receipt ? jsonx_get_obj(receipt, RECEIVER_RECEIPT_VIDEO) : NULL;
	json_object *fact = json_object_new_object();
	const char *status = jsonx_get_str(v, "status");
	if (status && strcmp(status, "recorded") == 0) {
		int64_t ms = 0, bytes = 0;
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "%s/%s/%s", RECEIVER_VIDEOS_DIR, jsonx_get_str(v, "sessionId"),
		              jsonx_get_str(v, "fileName"));
		jsonx_get_int(v, "durationMs", &ms);
		jsonx_get_int(v, "bytes", &bytes);
		jsonx_add_str(fact, "status", "recorded");
		jsonx_add_str(fact, "path", strbuf_str(&sb));
		jsonx_add_int(fact, "durationMs", ms);
		jsonx_add_int(fact, "bytes", bytes);
		jsonx_add_str(fact, "sha256", jsonx_get_str(v, "sha256"));
		strbuf_free(&sb);
	} else {
		const char *reason = jsonx_get_str(v, "reason");
		jsonx_add_str(fact, "status", "off");
		jsonx_add_str(fact, "reason",
		              reason ? reason : "the receiver recorded no video for this run");
	}
	return fact;
}

json_object *run_video_request(int fps, const json_object *capture)
{
	if (fps <= 0 || capture == NULL)
		return NULL;
	json_object *video = json_object_new_object();
	jsonx_add_int(video, "fps", fps);
	json_object *argv = jsonx_get_array(capture, "argv");
	size_t n = argv ? json_object_array_length(argv) : 0;
	for (size_t i = 0; i + 1 < n; i++) {
		const char *a = json_object_get_string(json_object_array_get_idx(argv, i));
		if (a && strcmp(a, "--display") == 0) {
			jsonx_add_str(video, "display",
			              json_object_get_string(json_object_array_get_idx(argv, i + 1)));
			break;
		}
	}
	return video;
}

/* ---- a run in one round trip (spec/guest.md §16.2) --------------------------------------- */

/* The standard input of `receiver run --stdin` (guest/receiver_protocol.h):
 * the header line naming both parts, then the request and the script. */
char *run_stdin_parts_text(const char *request_rel, const char *request, size_t request_len,
                           const char *request_sha, const char *script_rel, const char *script,
                           size_t script_len, const char *script_sha, size_t *len_out)
{
	json_object *header = json_object_new_object();
	json_object *parts = json_object_new_array();
	jsonx_add_int(header, RECEIVER_FRAME_PROTOCOL, RECEIVER_PROTOCOL_VERSION);
	const struct {
		const char *name, *rel, *sha;
		size_t len;
	} each[] = {{RECEIVER_PART_REQUEST, request_rel, request_sha, request_len},
	            {RECEIVER_PART_SCRIPT, script_rel, script_sha, script_len}};
	for (size_t i = 0; i < 2; i++) {
		json_object *part = json_object_new_object();
		jsonx_add_str(part, RECEIVER_PART_KEY_NAME, each[i].name);
		jsonx_add_str(part, RECEIVER_PART_KEY_PATH, each[i].rel);
		jsonx_add_int(part, RECEIVER_PART_KEY_BYTES, (int64_t)each[i].len);
		jsonx_add_str(part, RECEIVER_PART_KEY_SHA256, each[i].sha);
		json_object_array_add(parts, part);
	}
	jsonx_add(header, RECEIVER_FRAME_PARTS, parts);
	char *line = jsonx_to_string(header, 0);
	json_object_put(header);
	strbuf sb = STRBUF_INIT;
	if (line) {
		strbuf_printf(&sb, "%s\n", line);
		strbuf_append(&sb, request, request_len);
		strbuf_append(&sb, script, script_len);
	}
	free(line);
	*len_out = sb.len;
	return strbuf_ok(&sb) && line ? strbuf_detach(&sb, NULL) : (strbuf_free(&sb), NULL);
}
