/* The receiver's subcommands as typed functions (see receiver_api.h). */
#include "guestio/receiver_api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guestio/gio_internal.h"
#include "receiver_protocol.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

_Static_assert(GIO_RECEIVER_REQUEST_MAX_BYTES == RECEIVER_REQUEST_MAX_BYTES,
               "guestio's request limit is the protocol's");

#define PREPARE_BATCH 512

void gio_file_frame_free(gio_file_frame *f)
{
	free(f->path);
	memset(f, 0, sizeof *f);
}

/* The {path, sha256, bytes} of a frame into *out; false when one is
 * missing or malformed. */
static bool file_frame_read(json_object *frame, gio_file_frame *out)
{
	const char *path = jsonx_get_str(frame, RECEIVER_FRAME_PATH);
	const char *sha = jsonx_get_str(frame, RECEIVER_FRAME_SHA256);
	int64_t bytes = -1;
	if (path == NULL || sha == NULL || !sha256_hex_valid(sha) ||
	    !jsonx_get_int(frame, RECEIVER_FRAME_BYTES, &bytes) || bytes < 0)
		return false;
	out->path = strdup(path);
	if (out->path == NULL)
		return false;
	snprintf(out->sha256, sizeof out->sha256, "%s", sha);
	out->bytes = (uint64_t)bytes;
	return true;
}

/* Runs args and drops the frame. */
static relay_status run_plain(guest_io *io, const char *const *args, uint64_t timeout_ms, relay_error *err)
{
	json_object *frame = NULL;
	relay_status st = gio_receiver(io, args, timeout_ms, &frame, err);
	json_object_put(frame);
	return st;
}

relay_status gio_rcv_hash(guest_io *io, const char *path, gio_file_frame *out, relay_error *err)
{
	memset(out, 0, sizeof *out);
	const char *args[] = {RECEIVER_CMD_HASH, path, NULL};
	json_object *frame = NULL;
	relay_status st = gio_receiver(io, args, GIO_SHORT_TIMEOUT_MS, &frame, err);
	if (st == RELAY_OK && !file_frame_read(frame, out))
		st = relay_error_set(err, RELAY_E_PROTOCOL, EBADMSG,
		                     "receiver hash of %s answered no file facts", path);
	json_object_put(frame);
	return st;
}

relay_status gio_rcv_prepare(guest_io *io, const char *const *dirs, size_t count, relay_error *err)
{
	relay_status st = RELAY_OK;
	for (size_t done = 0; done < count && st == RELAY_OK;) {
		size_t chunk = count - done > PREPARE_BATCH ? PREPARE_BATCH : count - done;
		const char **args = calloc(chunk + 4, sizeof *args);
		if (args == NULL)
			return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM,
			                       "out of memory preparing the guest root");
		args[0] = RECEIVER_CMD_PREPARE;
		args[1] = RECEIVER_OPT_ROOT;
		args[2] = io->root;
		for (size_t k = 0; k < chunk; k++)
			args[3 + k] = dirs[done + k];
		st = run_plain(io, args, GIO_SHORT_TIMEOUT_MS, err);
		free(args);
		done += chunk;
	}
	return st;
}

relay_status gio_rcv_init(guest_io *io, const char *session_id, relay_error *err)
{
	const char *args[] = {RECEIVER_CMD_INIT,    RECEIVER_OPT_ROOT, io->root,
	                      RECEIVER_OPT_SESSION, session_id,        NULL};
	return run_plain(io, args, GIO_SHORT_TIMEOUT_MS, err);
}

relay_status gio_rcv_reset(guest_io *io, const char *reset_id, bool *locked_out, relay_error *err)
{
	*locked_out = false;
	const char *args[] = {RECEIVER_CMD_RESET, RECEIVER_OPT_ROOT, io->root,
	                      RECEIVER_OPT_ID,    reset_id,          NULL};
	json_object *frame = NULL;
	relay_status st = gio_receiver(io, args, GIO_SHORT_TIMEOUT_MS, &frame, err);
	if (st != RELAY_OK) {
		const char *code = jsonx_get_str(frame, "code");
		*locked_out = code && strcmp(code, "receiver-locked") == 0;
	}
	json_object_put(frame);
	return st;
}

relay_status gio_rcv_scan(guest_io *io, const char *base, const char *rel, gio_scan_mode mode,
                          uint64_t timeout_ms, gio_file_frame *inventory_out, relay_error *err)
{
	memset(inventory_out, 0, sizeof *inventory_out);
	const char *args[9];
	size_t k = 0;
	args[k++] = RECEIVER_CMD_SCAN;
	args[k++] = RECEIVER_OPT_ROOT;
	args[k++] = io->root;
	args[k++] = RECEIVER_OPT_BASE;
	args[k++] = base;
	if (mode == GIO_SCAN_PRESENT)
		args[k++] = RECEIVER_OPT_PRESENT;
	else if (mode == GIO_SCAN_IMAGE)
		args[k++] = RECEIVER_OPT_IMAGE;
	args[k++] = rel;
	args[k] = NULL;
	json_object *frame = NULL;
	relay_status st = gio_receiver(io, args, timeout_ms, &frame, err);
	if (st == RELAY_OK && !file_frame_read(frame, inventory_out))
		st = relay_error_set(
		    err, RELAY_E_PROTOCOL, EBADMSG,
		    "receiver scan of %s/%s answered a frame that names no inventory of the guest "
		    "root",
		    base, rel);
	json_object_put(frame);
	return st;
}

relay_status gio_rcv_archive(guest_io *io, const char *base, bool present, const char *out_path,
                             const char *const *paths, size_t count, uint64_t timeout_ms,
                             gio_file_frame *archive_out, relay_error *err)
{
	memset(archive_out, 0, sizeof *archive_out);
	const char **args = calloc(count + 11, sizeof *args);
	if (args == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	size_t k = 0;
	args[k++] = RECEIVER_CMD_ARCHIVE;
	args[k++] = RECEIVER_OPT_ROOT;
	args[k++] = io->root;
	args[k++] = RECEIVER_OPT_BASE;
	args[k++] = base;
	if (present)
		args[k++] = RECEIVER_OPT_PRESENT;
	args[k++] = RECEIVER_OPT_OUT;
	args[k++] = out_path;
	args[k++] = "--";
	for (size_t i = 0; i < count; i++)
		args[k++] = paths[i];
	args[k] = NULL;
	json_object *frame = NULL;
	relay_status st = gio_receiver(io, args, timeout_ms, &frame, err);
	if (st == RELAY_OK &&
	    (!file_frame_read(frame, archive_out) || strcmp(archive_out->path, out_path) != 0)) {
		gio_file_frame_free(archive_out);
		st = relay_error_set(err, RELAY_E_PROTOCOL, EBADMSG,
		                     "receiver archive answered a frame that names another archive than %s",
		                     out_path);
	}
	json_object_put(frame);
	free(args);
	return st;
}

relay_status gio_rcv_unpack(guest_io *io, const char *dest, const char *archive, uint64_t timeout_ms,
                            int64_t *unpacked_out, relay_error *err)
{
	*unpacked_out = -1;
	const char *args[] = {
	    RECEIVER_CMD_UNPACK, RECEIVER_OPT_ROOT, io->root, RECEIVER_OPT_BASE, dest, archive, NULL};
	json_object *frame = NULL;
	relay_status st = gio_receiver(io, args, timeout_ms, &frame, err);
	if (st == RELAY_OK)
		jsonx_get_int(frame, "unpacked", unpacked_out);
	json_object_put(frame);
	return st;
}

relay_status gio_rcv_remove(guest_io *io, const char *const *names, size_t count, relay_error *err)
{
	const char **args = calloc(count + 4, sizeof *args);
	if (args == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	args[0] = RECEIVER_CMD_REMOVE;
	args[1] = RECEIVER_OPT_ROOT;
	args[2] = io->root;
	for (size_t k = 0; k < count; k++)
		args[3 + k] = names[k];
	relay_status st = run_plain(io, args, GIO_SHORT_TIMEOUT_MS, err);
	free(args);
	return st;
}

void gio_capture_test_free(gio_capture_test *t)
{
	free(t->error);
	free(t->diagnostic);
	memset(t, 0, sizeof *t);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

relay_status gio_rcv_capture_test(guest_io *io, gio_supervision *sv, const char *capture_json,
                                  int64_t wait_ms, int64_t every_ms, uint64_t limit_ms, gio_capture_test *out,
                                  relay_error *err)
{
	memset(out, 0, sizeof *out);
	char wait[24], every[24];
	snprintf(wait, sizeof wait, "%lld", (long long)wait_ms);
	snprintf(every, sizeof every, "%lld", (long long)every_ms);
	const char *argv[] = {io->receiver,
	                      RECEIVER_CMD_CAPTURE_TEST,
	                      RECEIVER_OPT_ROOT,
	                      io->root,
	                      RECEIVER_OPT_CAPTURE,
	                      capture_json,
	                      RECEIVER_OPT_WAIT_MS,
	                      wait,
	                      RECEIVER_OPT_EVERY_MS,
	                      every,
	                      NULL};
	relay_exec_result res;
	relay_status st = gio_exec_supervised(io, sv, argv, NULL, limit_ms, 1 << 20, 0, &res, err);
	if (st == RELAY_OK) {
		json_object *frame = gio_parse_frame(res.out, res.out_len);
		out->exit_code = res.exit_code;
		out->answered = res.exit_code == 0 && frame != NULL;
		out->error = dup_or_null(jsonx_get_str(frame, RECEIVER_FRAME_ERROR));
		if (out->answered) {
			jsonx_get_bool(frame, RECEIVER_FRAME_OK, &out->ok);
			jsonx_get_int(frame, RECEIVER_FRAME_AFTER_MS, &out->after_ms);
			out->diagnostic = dup_or_null(jsonx_get_str(frame, RECEIVER_FRAME_DIAGNOSTIC));
		}
		json_object_put(frame);
	}
	gio_exec_result_free(&res);
	return st;
}

relay_status gio_rcv_run(guest_io *io, gio_supervision *sv, const char *request_path, uint64_t limit_ms,
                         size_t max_output_bytes, relay_exec_result *res, relay_error *err)
{
	const char *argv[] = {io->receiver,
	                      RECEIVER_CMD_RUN,
	                      RECEIVER_OPT_ROOT,
	                      io->root,
	                      request_path ? request_path : RECEIVER_RUN_STDIN_OPTION,
	                      NULL};
	return gio_exec_supervised(io, sv, argv, NULL, limit_ms, max_output_bytes,
	                           request_path ? 0 : RELAY_EXEC_STDIO_BYTES, res, err);
}

bool gio_rcv_run_stdin_refused(const relay_exec_result *res)
{
	return !res->timed_out && res->exit_code == RECEIVER_EXIT_USAGE &&
	       gio_run_answer_refused(res->out, res->out_len);
}

char *gio_receipt_rel(const char *execution_id)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s.json", RECEIVER_RECEIPTS_DIR, execution_id);
	return strbuf_detach(&sb, NULL);
}

void gio_receipt_read(const json_object *receipt, gio_receipt *out)
{
	memset(out, 0, sizeof *out);
	out->json = (json_object *)receipt;
	out->execution_id = jsonx_get_str(receipt, RECEIVER_RCPT_EXECUTION_ID);
	out->session_id = jsonx_get_str(receipt, RECEIVER_RCPT_SESSION_ID);
	out->request_sha256 = jsonx_get_str(receipt, RECEIVER_RCPT_REQUEST_SHA256);
	out->outcome_json = jsonx_get_obj(receipt, RECEIVER_RCPT_OUTCOME);
	gio_outcome_read(out->outcome_json, &out->outcome);
	out->image_evidence = jsonx_get_obj(receipt, RECEIVER_RCPT_IMAGE_EVIDENCE);
	out->snapshots = jsonx_get_array(out->image_evidence, RECEIVER_RCPT_SNAPSHOTS);
}

void gio_outcome_read(const json_object *outcome, gio_outcome *out)
{
	memset(out, 0, sizeof *out);
	const char *kind = jsonx_get_str(outcome, RECEIVER_OUTCOME_KIND);
	out->kind = kind == NULL                                 ? GIO_OUTCOME_UNKNOWN
	            : strcmp(kind, RECEIVER_KIND_COMPLETED) == 0 ? GIO_OUTCOME_COMPLETED
	            : strcmp(kind, RECEIVER_KIND_REFUSED) == 0   ? GIO_OUTCOME_REFUSED
	            : strcmp(kind, RECEIVER_KIND_UNCERTAIN) == 0 ? GIO_OUTCOME_UNCERTAIN
	                                                         : GIO_OUTCOME_UNKNOWN;
	out->diagnostic = jsonx_get_str(outcome, RECEIVER_OUTCOME_DIAGNOSTIC);
	json_object *status = jsonx_get_obj(outcome, RECEIVER_OUTCOME_EXIT_STATUS);
	out->signal_name = jsonx_get_str(status, RECEIVER_FRAME_SIGNAL);
	out->has_code = jsonx_get_int(status, RECEIVER_FRAME_CODE, &out->code);
}
