/* A diagnostic shell script through the transport's exec (spec/guest.md §13):
 * host/diagnostics/<id>.request.json and <id>.receipt.json; see
 * run_request.h. */
#include "runs/run_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/image_delivery.h"
#include "guestio/resident.h"
#include "runs/run_internal.h"
#include "session/events.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

/* The script's output as kept (spec/guest.md §13): stdout and stderr combined,
 * the last RUN_DIAGNOSTIC_OUTPUT_KEEP bytes, valid UTF-8; malloc'd. */
static char *combined_output(const relay_exec_result *res, size_t *len_out, bool *truncated)
{
	strbuf all = STRBUF_INIT;
	if (res->out)
		strbuf_append(&all, res->out, res->out_len);
	if (res->err)
		strbuf_append(&all, res->err, res->err_len);
	size_t len = all.len, from = 0;
	/* A transport that keeps only a tail (the machine service) cannot say
	 * whether it dropped anything: a full tail counts as cut. */
	if (len >= RUN_DIAGNOSTIC_OUTPUT_KEEP)
		*truncated = true;
	if (len > RUN_DIAGNOSTIC_OUTPUT_KEEP) {
		from = utf8_cut_forward(all.data, len, len - RUN_DIAGNOSTIC_OUTPUT_KEEP);
		*truncated = true;
	}
	/* A tail the transport cut may start inside a character. */
	if (res->output_truncated) {
		*truncated = true;
		size_t skip = 0;
		while (from + skip < len && skip < 3 && ((unsigned char)all.data[from + skip] & 0xC0) == 0x80)
			skip++;
		from += skip;
	}
	char *output = utf8_sanitize(all.data ? all.data + from : "", len - from, len_out);
	strbuf_free(&all);
	return output;
}

/* The outcome of the exec (spec/guest.md §7.5); new reference. */
static json_object *diagnostic_outcome(relay_status st, bool cancelled, const relay_exec_result *res,
                                       const relay_error *err, uint64_t limit_ms)
{
	json_object *outcome = NULL;
	if (cancelled)
		return run_outcome_uncertain(
		    "cancelled by the client; the diagnostic script is never sent again");
	if (st != RELAY_OK)
		return run_outcome_uncertain("the transport failed: %s", err->message);
	json_object *status = json_object_new_object();
	if (res->timed_out) {
		outcome = run_outcome_uncertain(
		    "the diagnostic script did not end within %llu s; its process group was killed",
		    (unsigned long long)(limit_ms / 1000));
		jsonx_add_null(status, "code");
		jsonx_add_str(status, "signal", "SIGKILL");
	} else {
		outcome = json_object_new_object();
		jsonx_add_str(outcome, "kind", "completed");
		char sigbuf[32];
		if (res->exit_code < 0 && res->signal > 0) {
			jsonx_add_null(status, "code");
			jsonx_add_str(status, "signal", run_signal_name(res->signal, sigbuf));
		} else {
			jsonx_add_int(status, "code", res->exit_code);
			jsonx_add_null(status, "signal");
		}
	}
	jsonx_add(outcome, "exitStatus", status);
	return outcome;
}

int run_diagnostic(session_manager *m, guest *g, run_call *c, relay_call *call, run_outcome *result)
{
	char exec_id[48], hex32[33];
	random_hex(hex32, 32);
	snprintf(exec_id, sizeof exec_id, "diagnostic-%s", hex32);
	session_lock(m);
	bool staged = g->staged;
	char *root = g->guest_root ? strdup(g->guest_root) : NULL;
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	relay_error err;
	memset(&err, 0, sizeof err);
	strbuf sb = STRBUF_INIT;
	char *workspace = NULL;
	if (staged && root) {
		strbuf_printf(&sb, "%s/workspace", root);
		workspace = strbuf_detach(&sb, NULL);
	}
	const char *argv_staged[] = {
	    "/bin/sh", "-c", "cd \"$1\" || exit 125; shift; eval \"$1\"", "relay-diagnostic", workspace,
	    c->script, NULL};
	const char *argv_plain[] = {"/bin/sh", "-c", c->script, NULL};
	const char *const *argv = workspace ? argv_staged : argv_plain;
	uint64_t limit_ms = ((uint64_t)c->timeout_ms + 999) / 1000 * 1000;
	char script_sha[65], at[25];
	sha256_buffer_hex(c->script, c->script_len, script_sha);
	run_now_iso_millis(at);

	json_object *req = json_object_new_object();
	jsonx_add_str(req, "executionId", exec_id);
	jsonx_add_str(req, "guest", g->name);
	jsonx_add_str(req, "evidenceMode", "diagnostic");
	jsonx_add_str(req, "language", "shell");
	jsonx_add_bool(req, "inline", c->is_inline);
	jsonx_add_str(req, "localPath", c->local_path);
	jsonx_add_str(req, "reason", c->reason);
	jsonx_add_int(req, "timeoutMs", c->timeout_ms);
	jsonx_add_int(req, "execLimitSeconds", (int64_t)(limit_ms / 1000));
	jsonx_add_bool(req, "staged", staged);
	jsonx_add_str(req, "cwd", workspace);
	json_object *script = json_object_new_object();
	jsonx_add_str(script, "sha256", script_sha);
	jsonx_add_int(script, "bytes", (int64_t)c->script_len);
	jsonx_add_strn(script, "text", c->script, c->script_len);
	jsonx_add(req, "script", script);
	json_object *argv_json = json_object_new_array();
	for (size_t i = 0; argv[i] && argv[i] != c->script; i++)
		json_object_array_add(argv_json, json_object_new_string(argv[i]));
	json_object_array_add(argv_json, json_object_new_string("<script>"));
	jsonx_add(req, "argv", argv_json);
	jsonx_add_str(req, "requestedAt", at);
	strbuf_printf(&sb, "%s.request.json", exec_id);
	char *req_name = strbuf_detach(&sb, NULL);
	if (evidence)
		run_write_host_json(m, g, evidence, "diagnostics", req_name, req, &err);
	json_object_put(req);
	free(req_name);

	json_object *outcome = NULL;
	char *output = NULL;
	size_t output_len = 0;
	bool truncated = false, cancelled = false;
	const char *channel = RUN_CHANNEL_NAME_ONE_SHOT;
	guest_io io;
	relay_status st = gio_begin(&io, m, g, call, &err);
	if (st != RELAY_OK) {
		outcome = run_outcome_uncertain("the guest's transport is not available: %s", err.message);
	} else {
		gio_supervision sv;
		memset(&sv, 0, sizeof sv);
		sv.tick_ms = RUN_PROGRESS_MS;
		sv.tick_what = "diagnostic script";
		sv.limit_ms = c->timeout_ms;
		relay_exec_result res;
		/* Once staged, the guest's channel takes it (§17 item 3); a channel
		 * that cannot, or a guest not staged, leaves it to the exec (§13). */
		run_channel_end end = RUN_CHANNEL_UNSENT;
		if (workspace && gio_resident_possible(&io)) {
			io.receiver_ready = true;
			end = run_channel_diagnostic(&io, exec_id, argv, c->script, c->script_len, limit_ms,
			                             &sv, &st, &res, &err);
		}
		channel = end == RUN_CHANNEL_UNSENT ? RUN_CHANNEL_NAME_ONE_SHOT : RUN_CHANNEL_NAME_RESIDENT;
		if (end == RUN_CHANNEL_UNSENT)
			st = gio_exec_supervised(&io, &sv, argv, NULL, limit_ms, RUN_DIAGNOSTIC_OUTPUT_KEEP,
			                         RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL, &res, &err);
		else if (end == RUN_CHANNEL_BROKEN)
			relay_error_set(
			    &err, RELAY_E_INDETERMINATE, 0,
			    "the channel to receiver serve broke before the diagnostic's answer; it "
			    "may have run and is never sent again");
		cancelled = sv.cancelled;
		if (st == RELAY_OK)
			output = combined_output(&res, &output_len, &truncated);
		outcome = diagnostic_outcome(st, cancelled, &res, &err, limit_ms);
		gio_exec_result_free(&res);
		gio_end(&io);
	}

	json_object *out = json_object_new_object();
	jsonx_add_str(out, "guest", g->name);
	jsonx_add_str(out, "executionId", exec_id);
	jsonx_add_str(out, "evidenceMode", "diagnostic");
	jsonx_add(out, "outcome", json_object_get(outcome));
	jsonx_add_strn(out, "output", output ? output : "", output ? output_len : 0);
	jsonx_add_str(out, "outputStreams", "stdout and stderr combined");
	jsonx_add_bool(out, "outputTruncated", truncated);
	jsonx_add_str(out, "channel", channel);
	jsonx_add_int(out, "timeoutMs", c->timeout_ms);
	jsonx_add_bool(out, "screenshotEvidence", false);
	json_object *nd = json_object_new_object();
	jsonx_add_str(nd, "status", IMAGE_STATUS_NOT_REQUESTED);
	jsonx_add_str(nd, "diagnostic", IMAGE_DIAG_DIAGNOSTIC);
	jsonx_add(out, "imageDelivery", nd);
	int rc = run_finish(m, g, out, exec_id, result);

	if (evidence) {
		char end[25];
		run_now_iso_millis(end);
		json_object *rec = run_result_record(m, g, result, false);
		jsonx_add_str(rec, "startedAt", at);
		jsonx_add_str(rec, "endedAt", end);
		strbuf_printf(&sb, "%s.receipt.json", exec_id);
		char *name = strbuf_detach(&sb, NULL);
		if (run_write_host_json(m, g, evidence, "diagnostics", name, rec, &err) != RELAY_OK)
			log_error("cannot write the diagnostic receipt of %s: %s", exec_id, err.message);
		free(name);
		json_object_put(rec);
	}
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "executionId", exec_id);
	jsonx_add(details, "outcome", json_object_get(outcome));
	guest_event(m, g, "diagnostic", c->reason ? c->reason : "diagnostic shell script", details);
	if (cancelled)
		lifecycle_record_cancelled(
		    m, g, "relay_script", true,
		    "a diagnostic script was cancelled while it ran; recorded uncertain");
	strbuf_free(&sb);
	free(output);
	free(workspace);
	free(root);
	free(evidence);
	json_object_put(outcome);
	return rc;
}
