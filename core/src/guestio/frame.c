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

/* Part i of an answer whose bytes start at *at (*left of them): its
 * fact's name and size, and whether its bytes match its sha256. False
 * when it is not whole (the walk stops). */
static bool answer_part(json_object *parts, size_t i, const char **at, size_t *left, const char **name_out,
                        const char **data_out, size_t *len_out, bool *sha_ok_out)
{
	json_object *part = json_object_array_get_idx(parts, i);
	const char *name = jsonx_get_str(part, RECEIVER_PART_KEY_NAME);
	const char *sha = jsonx_get_str(part, RECEIVER_PART_KEY_SHA256);
	int64_t bytes = -1;
	*name_out = name;
	if (!jsonx_get_int(part, RECEIVER_PART_KEY_BYTES, &bytes) || bytes < 0 || (uint64_t)bytes > *left ||
	    name == NULL || sha == NULL)
		return false;
	char hex[SHA256_HEX_LEN + 1];
	sha256_buffer_hex(*at, (size_t)bytes, hex);
	*sha_ok_out = strcmp(hex, sha) == 0;
	*data_out = *at;
	*len_out = (size_t)bytes;
	*at += bytes;
	*left -= (size_t)bytes;
	return true;
}

/* The frame line of an answer (a new reference, or NULL) and where its parts begin. */
static json_object *answer_frame(const char *out, size_t len, const char **parts_at, size_t *left)
{
	const char *nl = out ? memchr(out, '\n', len) : NULL;
	if (nl == NULL)
		return NULL;
	json_object *frame = jsonx_parse(out, (size_t)(nl - out), NULL, NULL, 0);
	if (!json_object_is_type(frame, json_type_object)) {
		json_object_put(frame);
		return NULL;
	}
	*parts_at = nl + 1;
	*left = len - (size_t)(*parts_at - out);
	return frame;
}

void gio_run_answer_parse(const char *out, size_t len, gio_run_answer *a)
{
	memset(a, 0, sizeof *a);
	const char *at = NULL;
	size_t left = 0;
	a->frame = answer_frame(out, len, &at, &left);
	json_object *parts = jsonx_get_array(a->frame, RECEIVER_FRAME_PARTS);
	size_t n = parts ? json_object_array_length(parts) : 0;
	for (size_t i = 0; i < n; i++) {
		const char *name = NULL, *data = NULL;
		size_t bytes = 0;
		bool sha_ok = false;
		if (!answer_part(parts, i, &at, &left, &name, &data, &bytes, &sha_ok)) {
			snprintf(a->dropped, sizeof a->dropped, "the part %s is not whole",
			         name ? name : "(unnamed)");
			return;
		}
		if (!sha_ok) {
			snprintf(a->dropped, sizeof a->dropped, "the part %s does not match its sha256",
			         name);
		} else if (strcmp(name, RECEIVER_PART_RECEIPT) == 0) {
			a->receipt = data;
			a->receipt_len = bytes;
		} else if (strcmp(name, RECEIVER_PART_AFTER_IMAGE) == 0) {
			a->image = data;
			a->image_len = bytes;
			a->image_part = json_object_array_get_idx(parts, i);
		}
	}
}

json_object *gio_answer_parts(const char *out, size_t len, const char *const *names, const char **data_out,
                              size_t *len_out)
{
	size_t want = 0;
	while (names[want]) {
		data_out[want] = NULL;
		len_out[want] = 0;
		want++;
	}
	const char *at = NULL;
	size_t left = 0;
	json_object *frame = answer_frame(out, len, &at, &left);
	json_object *parts = jsonx_get_array(frame, RECEIVER_FRAME_PARTS);
	size_t n = parts ? json_object_array_length(parts) : 0;
	for (size_t i = 0; i < n; i++) {
		const char *name = NULL, *data = NULL;
		size_t bytes = 0;
		bool sha_ok = false;
		if (!answer_part(parts, i, &at, &left, &name, &data, &bytes, &sha_ok) || !sha_ok)
			break;
		for (size_t k = 0; k < want; k++)
			if (strcmp(name, names[k]) == 0) {
				data_out[k] = data;
				len_out[k] = bytes;
			}
	}
	return frame;
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
