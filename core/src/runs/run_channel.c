/*
 * A recorded run on the guest's resident channel (spec/guest.md §17 items 3, 4):
 * the framed request sent on `receiver serve`'s stream, the answer read as
 * the one-shot exec's standard output would be, and the guest's own record
 * asked when the channel broke after the request went in whole.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guestio/receiver_api.h"
#include "guestio/resident.h"
#include "receiver_protocol.h"
#include "runs/run_internal.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/strbuf.h"

/* The frame line an answer begins with (guest/receiver_protocol.h), or
 * NULL. New reference. */
static json_object *first_frame(const char *answer, size_t len)
{
	const char *nl = answer && len ? memchr(answer, '\n', len) : NULL;
	json_object *frame = nl ? jsonx_parse(answer, (size_t)(nl - answer), NULL, NULL, 0) : NULL;
	if (frame && !json_object_is_type(frame, json_type_object)) {
		json_object_put(frame);
		frame = NULL;
	}
	return frame;
}

/* serve's answer for a worker that ended without its own (a crash, a
 * signal; guest/receiver_protocol.h RECEIVER_FRAME_WORKER_EXIT) becomes
 * what the one-shot exec of that receiver would have returned: its exit
 * status and its standard error's tail, no standard output. */
static void take_worker_exit(relay_exec_result *res)
{
	json_object *frame = first_frame(res->out, res->out_len);
	json_object *ex = jsonx_get_obj(frame, RECEIVER_FRAME_WORKER_EXIT);
	if (ex == NULL) {
		json_object_put(frame);
		return;
	}
	int64_t code = -1, sig = 0;
	jsonx_get_int(ex, RECEIVER_FRAME_CODE, &code);
	jsonx_get_int(ex, RECEIVER_FRAME_SIGNAL, &sig);
	const char *tail = jsonx_get_str(frame, RECEIVER_FRAME_STDERR);
	gio_exec_result_free(res);
	res->exit_code = sig > 0 ? -1 : (int)code;
	res->signal = (int)sig;
	res->termination_confirmed = 0;
	res->err = strdup(tail ? tail : "");
	res->err_len = res->err ? strlen(res->err) : 0;
	json_object_put(frame);
}

/* True for the {"error"} frame of a receiver that could not start serve
 * (no such subcommand, an unusable root): it names no execution. */
static bool serve_unusable(const char *answer, size_t len)
{
	json_object *frame = first_frame(answer, len);
	bool unusable = frame && jsonx_get_str(frame, RECEIVER_FRAME_ERROR) &&
	                !jsonx_get_str(frame, RECEIVER_FRAME_EXECUTION_ID);
	json_object_put(frame);
	return unusable;
}

run_channel_end run_channel_send(guest_io *io, const char *execution_id, const char *text, size_t len,
                                 uint64_t limit_ms, gio_supervision *sv, relay_status *st_out,
                                 relay_exec_result *res, relay_error *err)
{
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	*st_out = RELAY_OK;
	/* A channel that is gone, or that takes no byte, is opened once more
	 * before the run falls back (§17 item 3). */
	for (int attempt = 0; attempt < 2; attempt++) {
		relay_error oerr;
		relay_error_clear(&oerr);
		if (gio_resident_ensure(io, &oerr) != RELAY_OK) {
			log_warning(
			    "relay_script %s: no channel to receiver serve (%s); the run goes one-shot",
			    execution_id, oerr.message);
			return RUN_CHANNEL_UNSENT;
		}
		char *answer = NULL;
		size_t answer_len = 0;
		relay_error_clear(err);
		gio_resident_end end =
		    gio_resident_request(io, sv, text, len, limit_ms, &answer, &answer_len, err);
		switch (end) {
		case GIO_RESIDENT_NOT_SENT:
			log_warning("relay_script %s: the request did not go into the channel (%s)",
			            execution_id, err->message);
			continue;
		case GIO_RESIDENT_ANSWERED:
			if (serve_unusable(answer, answer_len)) {
				/* A receiver that has no serve (staged by an older relay)
				 * or cannot use R answers {"error"} at once: nothing ran. */
				log_warning(
				    "relay_script %s: receiver serve is not usable in this guest (%.*s); the "
				    "run goes one-shot",
				    execution_id, (int)(answer_len > 200 ? 200 : answer_len), answer);
				free(answer);
				gio_resident_close(io->m, io->g);
				return RUN_CHANNEL_UNSENT;
			}
			res->exit_code = 0;
			res->termination_confirmed = 1;
			res->out = answer;
			res->out_len = answer_len;
			take_worker_exit(res);
			return RUN_CHANNEL_ANSWERED;
		case GIO_RESIDENT_TIMED_OUT: res->timed_out = 1; return RUN_CHANNEL_ANSWERED;
		case GIO_RESIDENT_CANCELLED: *st_out = RELAY_E_CANCELLED; return RUN_CHANNEL_ANSWERED;
		case GIO_RESIDENT_BROKEN: *st_out = RELAY_E_INDETERMINATE; return RUN_CHANNEL_BROKEN;
		}
	}
	return RUN_CHANNEL_UNSENT;
}

json_object *run_channel_ask(guest_io *io, const char *execution_id, bool *asked_out)
{
	char *rel = gio_receipt_rel(execution_id);
	strbuf path = STRBUF_INIT;
	strbuf_printf(&path, "%s/%s", io->root, rel ? rel : "");
	gio_file_frame hashed;
	json_object *fact = NULL;
	relay_error err;
	relay_error_clear(&err);
	relay_status st = rel ? gio_rcv_hash(io, strbuf_str(&path), &hashed, &err)
	                      : relay_error_set(&err, RELAY_E_NO_MEMORY, 0, "out of memory");
	/* exit 3: the receiver looked and found no receipt file */
	*asked_out = st == RELAY_OK || st == RELAY_E_REFUSED;
	if (st == RELAY_OK) {
		fact = json_object_new_object();
		jsonx_add_str(fact, "path", rel);
		jsonx_add_str(fact, "sha256", hashed.sha256);
		jsonx_add_int(fact, "bytes", (int64_t)hashed.bytes);
		gio_file_frame_free(&hashed);
	} else if (!*asked_out) {
		log_warning("relay_script %s: the guest's record could not be asked: %s", execution_id,
		            err.message);
	}
	free(rel);
	strbuf_free(&path);
	return fact;
}

/* The diagnostic's request on the channel (guest/receiver_protocol.h,
 * RECEIVER_REQ_DIAGNOSTIC): the header line, then the script. */
static char *diagnostic_text(const char *execution_id, const char *const *argv, const char *script,
                             size_t script_len, uint64_t limit_ms, size_t *len_out)
{
	char sha[65];
	sha256_buffer_hex(script, script_len, sha);
	json_object *h = json_object_new_object();
	jsonx_add_int(h, RECEIVER_FRAME_PROTOCOL, RECEIVER_PROTOCOL_VERSION);
	json_object *d = json_object_new_object();
	jsonx_add_str(d, RECEIVER_FRAME_EXECUTION_ID, execution_id);
	json_object *av = json_object_new_array();
	for (size_t i = 0; argv[i] && argv[i] != script; i++)
		json_object_array_add(av, json_object_new_string(argv[i]));
	jsonx_add(d, RECEIVER_DIAG_ARGV, av);
	jsonx_add_int(d, RECEIVER_DIAG_LIMIT_MS, (int64_t)limit_ms);
	jsonx_add(h, RECEIVER_REQ_DIAGNOSTIC, d);
	const run_part script_part = {RECEIVER_PART_SCRIPT, NULL, sha, script, script_len};
	return run_parts_text(h, &script_part, 1, len_out);
}

/* serve's answer to a diagnostic into *res as the exec would have filled
 * it; false when it is no diagnostic's answer (a refusal: nothing ran). */
static bool take_diagnostic_answer(relay_exec_result *res, const char *execution_id)
{
	json_object *frame = first_frame(res->out, res->out_len);
	json_object *ex = jsonx_get_obj(frame, RECEIVER_FRAME_DIAGNOSTIC_EXIT);
	json_object *parts = jsonx_get_array(frame, RECEIVER_FRAME_PARTS);
	json_object *part =
	    parts && json_object_array_length(parts) == 1 ? json_object_array_get_idx(parts, 0) : NULL;
	const char *id = jsonx_get_str(frame, RECEIVER_FRAME_EXECUTION_ID);
	const char *sha = jsonx_get_str(part, RECEIVER_PART_KEY_SHA256);
	int64_t bytes = -1, code = -1, sig = -1;
	bool ok = ex && id && strcmp(id, execution_id) == 0 && sha &&
	          jsonx_get_int(part, RECEIVER_PART_KEY_BYTES, &bytes) && bytes >= 0;
	const char *nl = ok ? memchr(res->out, '\n', res->out_len) : NULL;
	size_t at = nl ? (size_t)(nl - res->out) + 1 : 0;
	char hex[65];
	if (ok && (nl == NULL || res->out_len - at != (size_t)bytes))
		ok = false;
	if (ok) {
		sha256_buffer_hex(res->out + at, (size_t)bytes, hex);
		ok = strcmp(hex, sha) == 0;
	}
	if (ok) {
		bool has_code = jsonx_get_int(ex, RECEIVER_FRAME_CODE, &code);
		bool has_sig = jsonx_get_int(ex, RECEIVER_FRAME_SIGNAL, &sig);
		res->exit_code = has_code ? (int)code : -1;
		res->signal = has_sig ? (int)sig : 0;
		bool timed_out = false, truncated = false;
		jsonx_get_bool(ex, RECEIVER_FRAME_TIMED_OUT, &timed_out);
		jsonx_get_bool(ex, RECEIVER_FRAME_OUTPUT_TRUNCATED, &truncated);
		res->timed_out = timed_out;
		res->output_truncated = truncated;
		res->termination_confirmed = 1;
		memmove(res->out, res->out + at, (size_t)bytes);
		res->out_len = (size_t)bytes;
	}
	json_object_put(frame);
	return ok;
}

run_channel_end run_channel_diagnostic(guest_io *io, const char *execution_id, const char *const *argv,
                                       const char *script, size_t script_len, uint64_t limit_ms,
                                       gio_supervision *sv, relay_status *st_out, relay_exec_result *res,
                                       relay_error *err)
{
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	*st_out = RELAY_OK;
	size_t len = 0;
	char *text = diagnostic_text(execution_id, argv, script, script_len, limit_ms, &len);
	if (text == NULL)
		return RUN_CHANNEL_UNSENT;
	/* serve kills the script at limit_ms; the host waits a little longer for that answer */
	run_channel_end end = run_channel_send(io, execution_id, text, len,
	                                       limit_ms + RUN_DIAG_CHANNEL_MARGIN_MS, sv, st_out, res, err);
	free(text);
	if (end != RUN_CHANNEL_ANSWERED || *st_out != RELAY_OK || res->timed_out)
		return end;
	if (!take_diagnostic_answer(res, execution_id)) {
		/* A refusal (an older serve that reads no diagnostic; a script that
		 * failed its hash): nothing ran, the exec takes it (§13). */
		log_warning("diagnostic %s: receiver serve did not take it (%.*s); it goes through the exec",
		            execution_id, (int)(res->out_len > 200 ? 200 : res->out_len),
		            res->out ? res->out : "");
		gio_exec_result_free(res);
		memset(res, 0, sizeof *res);
		res->struct_size = sizeof *res;
		gio_resident_close(io->m, io->g);
		return RUN_CHANNEL_UNSENT;
	}
	return RUN_CHANNEL_ANSWERED;
}
