/*
 * Identities of display images (image_identity.h).
 */
#include "delivery/image_identity.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delivery/image_catalog.h"
#include "image/image.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

#define SNAPSHOT_NAME_MAX 255

/* ^[A-Za-z0-9][A-Za-z0-9_.-]*\.png$, at most 255 characters. */
static bool snapshot_name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	return n > 4 && n <= SNAPSHOT_NAME_MAX && idl_id_ok(s, SNAPSHOT_NAME_MAX) &&
	       strcmp(s + n - 4, ".png") == 0;
}

/* Validates one snapshot descriptor of a receipt (spec/guest.md §7.7). */
bool idl_snapshot_valid(const json_object *s, char *why, size_t why_len)
{
	const char *bad = NULL;
	int64_t bytes = 0;
	const char *phase = jsonx_get_str(s, "phase");
	if (!json_object_is_type(s, json_type_object))
		bad = "it is not an object";
	else if (!idl_id_ok(jsonx_get_str(s, "sessionId"), 120))
		bad = "sessionId";
	else if (!idl_id_ok(jsonx_get_str(s, "executionId"), 160))
		bad = "executionId";
	else if (jsonx_get_str(s, "actionId") == NULL || jsonx_get_str(s, "actionId")[0] == '\0')
		bad = "actionId";
	else if (jsonx_has(s, "stepId") && json_object_object_get((json_object *)s, "stepId") != NULL &&
	         !idl_id_ok(jsonx_get_str(s, "stepId"), 120))
		bad = "stepId";
	else if (jsonx_has(s, "groupId") && json_object_object_get((json_object *)s, "groupId") != NULL &&
	         !idl_id_ok(jsonx_get_str(s, "groupId"), 120))
		bad = "groupId";
	else if (phase == NULL || (strcmp(phase, "before") != 0 && strcmp(phase, "after") != 0))
		bad = "phase";
	else if (jsonx_get_str(s, "capturedAt") == NULL)
		bad = "capturedAt";
	else if (!sha256_hex_valid(jsonx_get_str(s, "sha256")))
		bad = "sha256";
	else if (!jsonx_get_int(s, "bytes", &bytes) || bytes < 1 || bytes > (int64_t)IMAGE_MAX_ORIGINAL_BYTES)
		bad = "bytes";
	else if (!idl_str_eq(jsonx_get_str(s, "mimeType"), IMAGE_MIME_PNG))
		bad = "mimeType";
	else if (!snapshot_name_ok(jsonx_get_str(s, "fileName")))
		bad = "fileName";
	if (bad) {
		snprintf(why, why_len, "a snapshot descriptor of the receipt is malformed (%s)", bad);
		return false;
	}
	return true;
}

/* ---- identities ---------------------------------------------------------------------- */

/* The display descriptor (spec/images.md §2.1) of a valid snapshot descriptor
 * with its imageId, without originalPath: keys in the order of spec/tools.md
 * §3.6. */
static json_object *display_descriptor(const char *binding_hex, const char *enclosure, const json_object *s,
                                       relay_error *err)
{
	json_object *d = json_object_new_object();
	if (d == NULL) {
		relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		return NULL;
	}
	int64_t bytes = 0;
	jsonx_get_int(s, "bytes", &bytes);
	jsonx_add_str(d, "imageId", "");
	jsonx_add_str(d, "source", "display");
	jsonx_add_str(d, "enclosure", enclosure);
	jsonx_add_str(d, "sessionId", jsonx_get_str(s, "sessionId"));
	jsonx_add_str(d, "executionId", jsonx_get_str(s, "executionId"));
	jsonx_add_str(d, "actionId", jsonx_get_str(s, "actionId"));
	if (jsonx_get_str(s, "stepId"))
		jsonx_add_str(d, "stepId", jsonx_get_str(s, "stepId"));
	if (jsonx_get_str(s, "groupId"))
		jsonx_add_str(d, "groupId", jsonx_get_str(s, "groupId"));
	jsonx_add_str(d, "phase", jsonx_get_str(s, "phase"));
	jsonx_add_str(d, "capturedAt", jsonx_get_str(s, "capturedAt"));
	jsonx_add_str(d, "sha256", jsonx_get_str(s, "sha256"));
	jsonx_add_int(d, "bytes", bytes);
	jsonx_add_str(d, "mimeType", jsonx_get_str(s, "mimeType"));
	char id[IMAGE_CATALOG_ID_LEN + 1];
	if (image_catalog_image_id(binding_hex, d, jsonx_get_str(s, "fileName"), id, err) != RELAY_OK) {
		json_object_put(d);
		return NULL;
	}
	jsonx_add_str(d, "imageId", id);
	return d;
}

/* A catalog entry (spec/images.md §2.3); `descriptor` is copied. */
json_object *idl_catalog_entry(const char *binding_hex, const json_object *descriptor, const char *file_name,
                               const char *recording, const char *remote, const char *approved_root,
                               const char *local)
{
	json_object *e = json_object_new_object();
	json_object *d = idl_json_copy(descriptor);
	if (e == NULL || d == NULL) {
		json_object_put(e);
		json_object_put(d);
		return NULL;
	}
	json_object_object_del(d, "originalPath");
	json_object_object_del(d, "retrievedAt");
	jsonx_add_str(e, "binding", binding_hex);
	jsonx_add(e, "descriptor", d);
	jsonx_add_str(e, "fileName", file_name);
	jsonx_add_str(e, "recording", recording);
	jsonx_add_str(e, "remote", remote);
	jsonx_add_str(e, "approvedRoot", approved_root);
	jsonx_add_str(e, "local", local);
	return e;
}

char *idl_original_path(const char *recording, const char *image_id, const char *ext)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/host/images/%s/original.%s", recording, image_id, ext);
	return strbuf_detach(&sb, NULL);
}

/* The image object of a result: the catalog descriptor with originalPath
 * (and retrievedAt when given). */
json_object *idl_result_image(const json_object *descriptor, const char *original_path,
                              const char *retrieved_at)
{
	json_object *img = idl_json_copy(descriptor);
	if (img == NULL)
		return NULL;
	json_object_object_del(img, "originalPath");
	json_object_object_del(img, "retrievedAt");
	jsonx_add_str(img, "originalPath", original_path);
	if (retrieved_at)
		jsonx_add_str(img, "retrievedAt", retrieved_at);
	return img;
}

/* Identity and catalog entry of a display snapshot of the recording
 * `recording` (sessionId's evidence folder). On success *entry_out is the
 * stored entry (new reference) and the return value the result image. */
json_object *idl_display_identity(dctx *c, const char *recording, const json_object *snap, bool record,
                                  json_object **entry_out, relay_error *err)
{
	json_object *entry = NULL, *stored = NULL, *image = NULL;
	char *remote = NULL, *approved = NULL, *local = NULL;
	if (entry_out)
		*entry_out = NULL;
	char why[200];
	if (!idl_snapshot_valid(snap, why, sizeof why)) {
		relay_error_set(err, RELAY_E_PROTOCOL, 0, "%s", why);
		return NULL;
	}
	json_object *d = display_descriptor(c->binding_hex, c->purpose, snap, err);
	if (d == NULL)
		return NULL;
	const char *id = jsonx_get_str(d, "imageId");
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/state/snapshots/%s", c->guest_root ? c->guest_root : "",
	              jsonx_get_str(snap, "sessionId"));
	approved = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s", approved ? approved : "", jsonx_get_str(snap, "fileName"));
	remote = strbuf_detach(&sb, NULL);
	local = idl_original_path(recording, id, "png");
	entry = idl_catalog_entry(c->binding_hex, d, jsonx_get_str(snap, "fileName"), recording, remote,
	                          approved, local);
	if (entry == NULL || remote == NULL || approved == NULL || local == NULL) {
		relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		goto cleanup;
	}
	if (record) {
		if (image_catalog_put(c->catalog_dir, entry, &stored, err) != RELAY_OK)
			goto cleanup;
	} else {
		stored = json_object_get(entry);
	}
	image = idl_result_image(jsonx_get_obj(stored, "descriptor"), jsonx_get_str(stored, "local"), NULL);
	if (image == NULL) {
		relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		goto cleanup;
	}
	if (entry_out) {
		*entry_out = stored;
		stored = NULL;
	}
cleanup:
	json_object_put(d);
	json_object_put(entry);
	json_object_put(stored);
	free(remote);
	free(approved);
	free(local);
	return image;
}

json_object *image_delivery_display_image(session_manager *m, guest *g, const char *recording,
                                          const json_object *snapshot, bool catalog, char **file_name_out,
                                          relay_error *err)
{
	image_delivery_result unused;
	memset(&unused, 0, sizeof unused);
	if (file_name_out)
		*file_name_out = NULL;
	dctx c;
	if (!dctx_init(&c, m, g, NULL, clock_monotonic_ms() + IMAGE_DELIVERY_DEADLINE_MS, &unused, err)) {
		dctx_free(&c);
		return NULL;
	}
	json_object *image =
	    idl_display_identity(&c, recording ? recording : c.evidence, snapshot, catalog, NULL, err);
	if (image && file_name_out) {
		*file_name_out = idl_dup(jsonx_get_str(snapshot, "fileName"));
		if (*file_name_out == NULL) {
			json_object_put(image);
			image = NULL;
			relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		}
	}
	dctx_free(&c);
	image_delivery_result_clear(&unused);
	return image;
}

/* The snapshot plan of a request (spec/guest.md §6, §10): whether `phase` is
 * captured. Sets not-requested and returns false when it is not. */
bool idl_plan_captures(dctx *c, const json_object *request, const char *phase)
{
	json_object *capture = NULL;
	if (request && json_object_object_get_ex((json_object *)request, "capture", &capture) &&
	    capture == NULL) {
		dctx_status(c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_SNAPSHOTS_OFF);
		return false;
	}
	const char *group_phase =
	    jsonx_get_str(jsonx_get_obj(jsonx_get_obj(request, "snapshots"), "group"), "phase");
	bool captured = true;
	if (group_phase) {
		if (strcmp(group_phase, "first") == 0)
			captured = strcmp(phase, "before") == 0;
		else if (strcmp(group_phase, "last") == 0)
			captured = strcmp(phase, "after") == 0;
		else
			captured = false;
	}
	if (!captured)
		dctx_status(c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_PLAN);
	return captured;
}

/* Validates a receipt's imageEvidence for (sessionId, executionId). */
bool idl_image_evidence_valid(const json_object *ev, const char *session_id, const char *execution_id,
                              char *why, size_t why_len)
{
	const char *status = jsonx_get_str(ev, "status");
	if (status == NULL ||
	    (strcmp(status, "available") != 0 && strcmp(status, "not-requested") != 0 &&
	     strcmp(status, "capture-failed") != 0 && strcmp(status, "capture-unknown") != 0)) {
		snprintf(why, why_len, "the receipt's imageEvidence has no valid status");
		return false;
	}
	json_object *snaps = NULL;
	if (json_object_object_get_ex((json_object *)ev, "snapshots", &snaps) && snaps != NULL &&
	    !json_object_is_type(snaps, json_type_array)) {
		snprintf(why, why_len, "the receipt's imageEvidence.snapshots is not an array");
		return false;
	}
	size_t n = snaps ? json_object_array_length(snaps) : 0;
	if (n > 2) {
		snprintf(why, why_len, "the receipt lists %zu snapshots; a run has at most two", n);
		return false;
	}
	const char *seen = NULL;
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_array_get_idx(snaps, i);
		if (!idl_snapshot_valid(s, why, why_len))
			return false;
		if (!idl_str_eq(jsonx_get_str(s, "executionId"), execution_id) ||
		    !idl_str_eq(jsonx_get_str(s, "sessionId"), session_id)) {
			snprintf(why, why_len,
			         "a snapshot descriptor of the receipt names another execution or recording");
			return false;
		}
		if (seen && idl_str_eq(seen, jsonx_get_str(s, "phase"))) {
			snprintf(why, why_len, "the receipt lists the %s snapshot twice", seen);
			return false;
		}
		seen = jsonx_get_str(s, "phase");
	}
	return true;
}

json_object *idl_snapshot_for_phase(const json_object *ev, const char *phase)
{
	json_object *snaps = jsonx_get_array(ev, "snapshots");
	size_t n = snaps ? json_object_array_length(snaps) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_array_get_idx(snaps, i);
		if (idl_str_eq(jsonx_get_str(s, "phase"), phase))
			return s;
	}
	return NULL;
}
