/*
 * evidence/review_video.c — a step's screen recording in the review
 * (MCP_RELAY_RECORD=video; the receipt's videoEvidence, receiver_records.h):
 * the file named by the receipt must be in the package with the receipt's
 * size and SHA-256, else the derivation meets a hard error and the package
 * fails verification.
 */
#include <stdio.h>
#include <string.h>

#include "evidence/journal.h"
#include "evidence/review_state.h"
#include "receiver_records.h"
#include "util/jsonx.h"

static bool name_ok(const char *s)
{
	if (s == NULL || s[0] == '\0' || s[0] == '.' || strlen(s) > 200)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '-' || *p == '_' || *p == '.'))
			return false;
	return true;
}

json_object *rv_recording(rv *r, const json_object *receipt)
{
	json_object *v = jsonx_get_obj(receipt, RECEIVER_RECEIPT_VIDEO);
	const char *status = jsonx_get_str(v, "status");
	if (status == NULL)
		return NULL;
	json_object *out = json_object_new_object();
	if (strcmp(status, "recorded") != 0) {
		jsonx_add_str(out, "status", "off");
		jsonx_add_str(out, "reason", jsonx_get_str(v, "reason"));
		return out;
	}
	const char *sid = jsonx_get_str(v, "sessionId");
	const char *name = jsonx_get_str(v, "fileName");
	const char *sha = jsonx_get_str(v, "sha256");
	int64_t bytes = -1, ms = 0;
	jsonx_get_int(v, "bytes", &bytes);
	jsonx_get_int(v, "durationMs", &ms);
	if (!name_ok(sid) || !name_ok(name) || sha == NULL) {
		rv_hard(r, "receipt of %s: malformed videoEvidence", jsonx_get_str(receipt, "executionId"));
		json_object_put(out);
		return NULL;
	}
	char rel[512], hex[65];
	uint64_t got = 0;
	relay_error err = {0};
	snprintf(rel, sizeof rel, "%s/%s/%s", RECEIVER_VIDEOS_DIR, sid, name);
	bool present = evidence_hash_rel(r->root, rel, hex, &got, &err) == RELAY_OK;
	if (!present)
		rv_hard(r, "%s: named by the receipt's videoEvidence but %s", rel,
		        err.code == RELAY_E_NOT_FOUND ? "missing from the package" : err.message);
	else if ((int64_t)got != bytes || !rv_str_eq(hex, sha))
		rv_hard(r,
		        "%s: size or SHA-256 differs from the receipt's videoEvidence (the recording was "
		        "changed)",
		        rel);
	jsonx_add_str(out, "status", "recorded");
	jsonx_add_str(out, "path", rel);
	jsonx_add_str(out, "mimeType", jsonx_get_str(v, "mimeType"));
	jsonx_add_int(out, "durationMs", ms);
	jsonx_add_int(out, "bytes", bytes);
	jsonx_add_str(out, "sha256", sha);
	jsonx_add_str(out, "startedAt", jsonx_get_str(v, "startedAt"));
	jsonx_add_str(out, "stoppedAt", jsonx_get_str(v, "stoppedAt"));
	return out;
}
