/*
 * Recordings and the cross-check of a display image (image_crosscheck.h).
 */
#include "images/image_crosscheck.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "images/image_guest.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* ---- recordings ---------------------------------------------------------------------- */

/* The evidence folder of recording `session_id` of this guest (current or
 * previous), malloc'd, or NULL. *current says which. */
char *idl_recording_of(dctx *c, const char *session_id, bool *current)
{
	*current = false;
	if (idl_str_eq(c->recording_session_id, session_id)) {
		*current = true;
		return idl_dup(c->evidence);
	}
	size_t n =
	    json_object_is_type(c->previous, json_type_array) ? json_object_array_length(c->previous) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *p = json_object_array_get_idx(c->previous, i);
		if (idl_str_eq(jsonx_get_str(p, "sessionId"), session_id))
			return idl_dup(jsonx_get_str(p, "path"));
	}
	return NULL;
}

/* True when `path` is one of this guest's recordings; *current says which. */
bool idl_own_recording(dctx *c, const char *path, bool *current)
{
	*current = idl_str_eq(path, c->evidence);
	if (*current)
		return true;
	size_t n =
	    json_object_is_type(c->previous, json_type_array) ? json_object_array_length(c->previous) : 0;
	for (size_t i = 0; i < n; i++)
		if (idl_str_eq(jsonx_get_str(json_object_array_get_idx(c->previous, i), "path"), path))
			return true;
	return false;
}

/* The other guest of this session that owns recording `session_id`
 * (malloc'd name), or NULL. */
char *idl_recording_owner_elsewhere(dctx *c, const char *session_id)
{
	char *owner = NULL;
	session_lock(c->m);
	for (guest *o = c->m->guests; o && owner == NULL; o = o->next) {
		if (o == c->g)
			continue;
		if (idl_str_eq(o->recording_session_id, session_id)) {
			owner = idl_dup(o->name);
			break;
		}
		size_t n = json_object_is_type(o->previous_evidence, json_type_array)
		               ? json_object_array_length(o->previous_evidence)
		               : 0;
		for (size_t i = 0; i < n && owner == NULL; i++)
			if (idl_str_eq(jsonx_get_str(json_object_array_get_idx(o->previous_evidence, i),
			                             "sessionId"),
			               session_id))
				owner = idl_dup(o->name);
	}
	session_unlock(c->m);
	return owner;
}

bool idl_refuse_owned_elsewhere(dctx *c, const char *prefix, const char *id, char *owner)
{
	if (owner == NULL)
		return false;
	dctx_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
	            "%s%s belongs to guest %s of this session, not to %s", prefix, id, owner, c->name);
	free(owner);
	return true;
}

/* The guest of this session whose purpose is `purpose` (malloc'd name). */
char *idl_guest_of_purpose(dctx *c, const char *purpose)
{
	char *name = NULL;
	session_lock(c->m);
	for (guest *o = c->m->guests; o && name == NULL; o = o->next)
		if (idl_str_eq(o->purpose, purpose))
			name = idl_dup(o->name);
	session_unlock(c->m);
	return name;
}

/* Reads the first existing candidate as a JSON object. NULL when none
 * exists; on a damaged one the status is set and *failed true. */
json_object *idl_host_json(dctx *c, const char *const *paths, const char *what, bool *failed)
{
	*failed = false;
	for (size_t i = 0; paths[i]; i++) {
		if (!idl_regular_file(paths[i]))
			continue;
		json_object *obj = NULL;
		relay_error err;
		if (fs_read_json(paths[i], IMAGE_DELIVERY_METADATA_BYTES, &obj, &err) != RELAY_OK ||
		    !json_object_is_type(obj, json_type_object)) {
			json_object_put(obj);
			dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
			            "%s on the host (%s) cannot be read: %s", what, paths[i], err.message);
			*failed = true;
			return NULL;
		}
		return obj;
	}
	return NULL;
}

/* Does the journal (text of events.jsonl) record this snapshot? */
static bool journal_names(const char *text, const json_object *snap)
{
	const char *line = text;
	while (line && *line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		json_object *ev = jsonx_parse(line, len, NULL, NULL, 0);
		int64_t bytes = -1, want = -2;
		jsonx_get_int(ev, "bytes", &bytes);
		jsonx_get_int(snap, "bytes", &want);
		bool match =
		    ev && idl_str_eq(jsonx_get_str(ev, "type"), "snapshot-captured") &&
		    idl_str_eq(jsonx_get_str(ev, "executionId"), jsonx_get_str(snap, "executionId")) &&
		    idl_str_eq(jsonx_get_str(ev, "phase"), jsonx_get_str(snap, "phase")) &&
		    idl_str_eq(jsonx_get_str(ev, "fileName"), jsonx_get_str(snap, "fileName")) &&
		    idl_str_eq(jsonx_get_str(ev, "sha256"), jsonx_get_str(snap, "sha256")) && bytes == want;
		json_object_put(ev);
		if (match)
			return true;
		line = end ? end + 1 : NULL;
	}
	return false;
}

/* spec/images.md §1.1: the action record must match the receipt's descriptor in
 * identity, group and step, with snapshotRole the group's phase (or
 * single), and its reverse references (or else the journal) must name the
 * same image. */
bool idl_cross_check(dctx *c, const char *recording, bool live, const json_object *snap,
                     const char *group_phase)
{
	const char *eid = jsonx_get_str(snap, "executionId");
	const char *sid = jsonx_get_str(snap, "sessionId");
	const char *aid = jsonx_get_str(snap, "actionId");
	bool ok = false, failed = false;
	json_object *action = NULL;
	char *journal_text = NULL;
	char *p1 = strbuf_format("%s/state/records/action/%s.json", recording, aid);
	char *p2 = strbuf_format("%s/host/steps/%s/state/records/action/%s.json", recording, eid, aid);
	char *remote =
	    strbuf_format("%s/state/records/action/%s.json", c->guest_root ? c->guest_root : "", aid);
	char *expected_path = strbuf_format("state/snapshots/%s/%s", sid, jsonx_get_str(snap, "fileName"));
	if (p1 == NULL || p2 == NULL || remote == NULL || expected_path == NULL) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	if (strchr(aid, '/') || strcmp(aid, "..") == 0) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "the receipt names an unusable actionId %s",
		            aid);
		goto cleanup;
	}
	const char *const host[] = {p1, p2, NULL};
	action = idl_host_json(c, host, "the action record", &failed);
	if (failed)
		goto cleanup;
	if (action == NULL) {
		if (!live) {
			dctx_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_STATE_GONE);
			goto cleanup;
		}
		if (!idl_guest_metadata(c, remote, "the action record", &action, NULL)) {
			if (idl_str_eq(c->out->status, IMAGE_STATUS_IMAGE_MISSING)) {
				c->out->status = NULL;
				dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
				            "the guest holds no action record %s for execution %s, so the "
				            "image cannot be "
				            "trusted",
				            aid, eid);
			}
			goto cleanup;
		}
	}
	const char *role = group_phase ? group_phase : "single";
	const char *why = NULL;
	if (!idl_str_eq(jsonx_get_str(action, "actionId"), aid))
		why = "actionId";
	else if (!idl_str_eq(jsonx_get_str(action, "executionId"), eid))
		why = "executionId";
	else if (!idl_str_eq(jsonx_get_str(action, "sessionId"), sid))
		why = "sessionId";
	else if (jsonx_get_str(snap, "stepId") &&
	         !idl_str_eq(jsonx_get_str(action, "stepId"), jsonx_get_str(snap, "stepId")))
		why = "stepId";
	else if (!(jsonx_get_str(action, "groupId") == NULL && jsonx_get_str(snap, "groupId") == NULL) &&
	         !idl_str_eq(jsonx_get_str(action, "groupId"), jsonx_get_str(snap, "groupId")))
		why = "groupId";
	else if (!idl_str_eq(jsonx_get_str(action, "snapshotRole"), role))
		why = "snapshotRole";
	if (why) {
		dctx_status(
		    c, IMAGE_STATUS_INTEGRITY_FAILED,
		    "the action record %s disagrees with the run's receipt in %s, so the image cannot "
		    "be trusted",
		    aid, why);
		goto cleanup;
	}
	/* reverse references */
	json_object *refs = jsonx_get_array(action, "snapshots");
	size_t n = refs ? json_object_array_length(refs) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *r = json_object_array_get_idx(refs, i);
		if (!idl_str_eq(jsonx_get_str(r, "phase"), jsonx_get_str(snap, "phase")))
			continue;
		int64_t rb = -1, sb = -2;
		jsonx_get_int(r, "bytes", &rb);
		jsonx_get_int(snap, "bytes", &sb);
		if (!idl_str_eq(jsonx_get_str(r, "path"), expected_path) ||
		    !idl_str_eq(jsonx_get_str(r, "sha256"), jsonx_get_str(snap, "sha256")) || rb != sb) {
			dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
			            "the action record %s names another %s image than the run's receipt", aid,
			            jsonx_get_str(snap, "phase"));
			goto cleanup;
		}
		ok = true;
		goto cleanup;
	}
	/* no reverse reference: the journal must name it */
	char *jpath = strbuf_format("%s/state/journal/events.jsonl", recording);
	if (jpath && idl_regular_file(jpath)) {
		relay_error err;
		size_t len = 0;
		if (fs_read_file(jpath, 64u * 1024 * 1024, &journal_text, &len, &err) != RELAY_OK)
			journal_text = NULL;
	}
	free(jpath);
	if (journal_text == NULL && live) {
		char *jremote =
		    strbuf_format("%s/state/journal/events.jsonl", c->guest_root ? c->guest_root : "");
		bool got =
		    jremote && idl_guest_metadata(c, jremote, "the recording's journal", NULL, &journal_text);
		free(jremote);
		if (!got)
			goto cleanup;
	}
	if (journal_text && journal_names(journal_text, snap)) {
		ok = true;
		goto cleanup;
	}
	dctx_status(
	    c, IMAGE_STATUS_INTEGRITY_FAILED,
	    "neither the action record %s nor the journal names the %s image of %s, so it cannot be trusted",
	    aid, jsonx_get_str(snap, "phase"), eid);
cleanup:
	json_object_put(action);
	free(journal_text);
	free(p1);
	free(p2);
	free(remote);
	free(expected_path);
	return ok;
}
