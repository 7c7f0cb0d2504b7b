/* The receipt of a run, from the receiver's frame or answer to
 * host/receiver-receipts (spec/guest.md §15 step 5, §16.2); see run_internal.h. */
#include "runs/run_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "receiver_protocol.h"
#include "runs/run_internal.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

const char *run_receipt_problem(const json_object *receipt, const char *execution_id, const char *request_sha)
{
	if (!json_object_is_type((json_object *)receipt, json_type_object))
		return "it is not a JSON object";
	const char *id = jsonx_get_str(receipt, RECEIVER_RCPT_EXECUTION_ID);
	if (id == NULL || strcmp(id, execution_id) != 0)
		return "its executionId is not this run's";
	const char *sha = jsonx_get_str(receipt, RECEIVER_RCPT_REQUEST_SHA256);
	if (request_sha && (sha == NULL || strcmp(sha, request_sha) != 0))
		return "its requestSha256 is not the SHA-256 of the request the host sent";
	json_object *outcome = jsonx_get_obj(receipt, RECEIVER_RCPT_OUTCOME);
	const char *kind = jsonx_get_str(outcome, RECEIVER_OUTCOME_KIND);
	if (kind == NULL)
		return "it has no outcome kind";
	if (strcmp(kind, RECEIVER_KIND_COMPLETED) == 0) {
		if (!json_object_is_type(jsonx_get_obj(outcome, RECEIVER_OUTCOME_EXIT_STATUS),
		                         json_type_object))
			return "a completed outcome carries no exitStatus";
	} else if (strcmp(kind, RECEIVER_KIND_REFUSED) == 0 || strcmp(kind, RECEIVER_KIND_UNCERTAIN) == 0) {
		if (jsonx_get_str(outcome, RECEIVER_OUTCOME_DIAGNOSTIC) == NULL)
			return "a refused or uncertain outcome carries no diagnostic";
	} else {
		return "its outcome kind is none of completed, refused, uncertain";
	}
	json_object *ev = jsonx_get_obj(receipt, RECEIVER_RCPT_IMAGE_EVIDENCE);
	if (ev && !json_object_is_type(jsonx_get_array(ev, RECEIVER_RCPT_SNAPSHOTS), json_type_array))
		return "its imageEvidence has no snapshots list";
	return NULL;
}

/* Checks the receipt bytes that came home (against the frame's fact, then
 * as a receipt) and writes them durably to host/receiver-receipts/<id>.json.
 * RELAY_OK with *receipt_out; otherwise the reason in err. */
relay_status run_place_receipt(guest_io *io, json_object *frame_receipt, const char *execution_id,
                               const char *request_sha, const char *data, size_t len, const char *how,
                               json_object **receipt_out, char sha_out[65], int64_t *bytes_out,
                               relay_error *err)
{
	*receipt_out = NULL;
	const char *sha = NULL;
	int64_t bytes = -1;
	if (!gio_frame_receipt_fact(frame_receipt, execution_id, &sha, &bytes))
		return relay_error_set(err, RELAY_E_PROTOCOL, 0,
		                       "the receiver's frame names no valid receipt fact");
	sha256_buffer_hex(data, len, sha_out);
	if ((int64_t)len != bytes || strcmp(sha_out, sha) != 0)
		return relay_error_set(
		    err, RELAY_E_INTEGRITY, 0,
		    "the receipt did not arrive intact (frame: %lld bytes, host: %zu bytes)",
		    (long long)bytes, len);
	char why[160];
	json_object *receipt = jsonx_parse(data, len, NULL, why, sizeof why);
	const char *problem = receipt ? run_receipt_problem(receipt, execution_id, request_sha) : why;
	if (problem) {
		json_object_put(receipt);
		return relay_error_set(err, RELAY_E_PROTOCOL, 0, "the receipt is not valid: %s", problem);
	}
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/host/receiver-receipts", io->evidence);
	char *dir = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s.json", dir, execution_id);
	char *final = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s", io->root, jsonx_get_str(frame_receipt, RECEIVER_FRAME_PATH));
	char *remote = strbuf_detach(&sb, NULL);
	relay_status st = fs_mkdir_p(dir, 0700, err);
	if (st == RELAY_OK)
		st = fs_write_durable(final, data, len, 0600, err);
	if (st == RELAY_OK) {
		gio_note_transfer(io, "pull", "receipt", final, remote, (uint64_t)len, sha_out, 1, how);
		*bytes_out = (int64_t)len;
		*receipt_out = receipt;
	} else {
		json_object_put(receipt);
	}
	free(dir);
	free(final);
	free(remote);
	return st;
}

/* Pulls the receipt named by the frame and places it (place_receipt). */
relay_status run_pull_receipt(guest_io *io, json_object *frame_receipt, const char *execution_id,
                              const char *request_sha, json_object **receipt_out, char sha_out[65],
                              int64_t *bytes_out, relay_error *err)
{
	*receipt_out = NULL;
	const char *sha = NULL;
	int64_t bytes = -1;
	if (!gio_frame_receipt_fact(frame_receipt, execution_id, &sha, &bytes))
		return relay_error_set(err, RELAY_E_PROTOCOL, 0,
		                       "the receiver's frame names no valid receipt fact");
	char *tmp = gio_scratch_path(io, "receipt-", ".json", err);
	if (tmp == NULL)
		return err->code;
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s", io->root, jsonx_get_str(frame_receipt, RECEIVER_FRAME_PATH));
	char *remote = strbuf_detach(&sb, NULL);
	char *data = NULL;
	size_t len = 0;
	relay_status st = gio_pull(io, remote, tmp, 0, "the run's receipt", err);
	if (st == RELAY_OK)
		st = fs_read_file(tmp, (size_t)RECEIVER_RECEIPT_MAX_BYTES, &data, &len, err);
	if (st == RELAY_OK)
		st = run_place_receipt(io, frame_receipt, execution_id, request_sha, data, len, "transport",
		                       receipt_out, sha_out, bytes_out, err);
	unlink(tmp);
	free(tmp);
	free(remote);
	free(data);
	return st;
}
