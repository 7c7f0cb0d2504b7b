/* The receiver's frames and parts, read by the host; see frame.h. */
#include "guestio/frame.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "receiver_protocol.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

json_object *gio_parse_frame(const char *out, size_t len)
{
	if (out == NULL)
		return NULL;
	size_t end = len;
	while (end > 0) {
		size_t start = end;
		while (start > 0 && out[start - 1] != '\n')
			start--;
		size_t a = start, b = end;
		while (a < b && isspace((unsigned char)out[a]))
			a++;
		while (b > a && isspace((unsigned char)out[b - 1]))
			b--;
		if (b > a && out[a] == '{') {
			json_object *obj = jsonx_parse(out + a, b - a, NULL, NULL, 0);
			if (obj && json_object_is_type(obj, json_type_object))
				return obj;
			json_object_put(obj);
		}
		end = start > 0 ? start - 1 : 0;
	}
	return NULL;
}

relay_status gio_frame_exit_status(int exit_code)
{
	if (exit_code == RECEIVER_EXIT_DONE)
		return RELAY_OK;
	if (exit_code == RECEIVER_EXIT_USAGE)
		return RELAY_E_INVALID_ARGUMENT;
	if (exit_code == RECEIVER_EXIT_INTERNAL)
		return RELAY_E_REFUSED;
	return RELAY_E_PROTOCOL;
}

void gio_run_answer_parse(const char *out, size_t len, gio_run_answer *a)
{
	memset(a, 0, sizeof *a);
	const char *nl = out ? memchr(out, '\n', len) : NULL;
	if (nl == NULL)
		return;
	a->frame = jsonx_parse(out, (size_t)(nl - out), NULL, NULL, 0);
	if (!json_object_is_type(a->frame, json_type_object)) {
		json_object_put(a->frame);
		a->frame = NULL;
		return;
	}
	const char *at = nl + 1;
	size_t left = len - (size_t)(at - out);
	json_object *parts = jsonx_get_array(a->frame, RECEIVER_FRAME_PARTS);
	size_t n = parts ? json_object_array_length(parts) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *part = json_object_array_get_idx(parts, i);
		const char *name = jsonx_get_str(part, RECEIVER_PART_KEY_NAME);
		const char *sha = jsonx_get_str(part, RECEIVER_PART_KEY_SHA256);
		int64_t bytes = -1;
		if (!jsonx_get_int(part, RECEIVER_PART_KEY_BYTES, &bytes) || bytes < 0 ||
		    (uint64_t)bytes > left || name == NULL || sha == NULL) {
			snprintf(a->dropped, sizeof a->dropped, "the part %s is not whole",
			         name ? name : "(unnamed)");
			return;
		}
		char hex[SHA256_HEX_LEN + 1];
		sha256_buffer_hex(at, (size_t)bytes, hex);
		if (strcmp(hex, sha) != 0) {
			snprintf(a->dropped, sizeof a->dropped, "the part %s does not match its sha256",
			         name);
		} else if (strcmp(name, RECEIVER_PART_RECEIPT) == 0) {
			a->receipt = at;
			a->receipt_len = (size_t)bytes;
		} else if (strcmp(name, RECEIVER_PART_AFTER_IMAGE) == 0) {
			a->image = at;
			a->image_len = (size_t)bytes;
			a->image_part = part;
		}
		at += bytes;
		left -= (size_t)bytes;
	}
}

bool gio_run_answer_refused(const char *out, size_t len)
{
	gio_run_answer a;
	gio_run_answer_parse(out, len, &a);
	json_object *outcome = jsonx_get_obj(a.frame, RECEIVER_FRAME_OUTCOME);
	const char *kind = jsonx_get_str(outcome, RECEIVER_OUTCOME_KIND);
	bool refused = a.frame != NULL && jsonx_get_obj(a.frame, RECEIVER_FRAME_RECEIPT) == NULL && kind &&
	               strcmp(kind, RECEIVER_KIND_REFUSED) == 0;
	json_object_put(a.frame);
	return refused;
}

bool gio_frame_receipt_fact(json_object *frame_receipt, const char *execution_id, const char **sha_out,
                            int64_t *bytes_out)
{
	const char *path = jsonx_get_str(frame_receipt, RECEIVER_FRAME_PATH);
	const char *sha = jsonx_get_str(frame_receipt, RECEIVER_FRAME_SHA256);
	int64_t bytes = -1;
	strbuf expect = STRBUF_INIT;
	strbuf_printf(&expect, "%s/%s.json", RECEIVER_RECEIPTS_DIR, execution_id);
	bool ok = path && strbuf_ok(&expect) && strcmp(path, strbuf_str(&expect)) == 0 && sha &&
	          sha256_hex_valid(sha) && jsonx_get_int(frame_receipt, RECEIVER_FRAME_BYTES, &bytes) &&
	          bytes > 0 && (uint64_t)bytes <= RECEIVER_RECEIPT_MAX_BYTES;
	strbuf_free(&expect);
	*sha_out = sha;
	*bytes_out = bytes;
	return ok;
}
