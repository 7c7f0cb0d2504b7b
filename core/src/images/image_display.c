/*
 * The display selector of relay_image (image_selectors.h; spec/images.md §7).
 */
#include "images/image_selectors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guestio/receiver_api.h"
#include "images/image_catalog.h"
#include "images/image_crosscheck.h"
#include "images/image_guest.h"
#include "images/image_identity.h"
#include "images/image_original.h"
#include "pixels/image.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define REQUEST_MAX_BYTES GIO_RECEIVER_REQUEST_MAX_BYTES /* a run's request record */

/* ---- display ------------------------------------------------------------------------- */

/* Keeps a receipt's validated imageEvidence fetched from the guest at
 * <recording>/host/image-evidence/<executionId>.json (spec/evidence.md §2.2), so
 * a later delivery finds it on the host. Best effort: a failure only costs
 * another fetch. */
static void cache_image_evidence(const char *session_id, const char *execution_id, const json_object *ev,
                                 const char *path)
{
	if (path == NULL || fs_exists_nofollow(path))
		return;
	json_object *cache = json_object_new_object();
	jsonx_add_str(cache, "executionId", execution_id);
	jsonx_add_str(cache, "sessionId", session_id);
	jsonx_add(cache, "imageEvidence", idl_json_copy(ev));
	char *dir = fs_dirname(path);
	relay_error err;
	if (cache == NULL || dir == NULL || fs_mkdir_p(dir, 0700, &err) != RELAY_OK ||
	    fs_write_json_durable(path, cache, &err) != RELAY_OK)
		log_warning("relay_image: cannot cache the image evidence of %s at %s", execution_id, path);
	free(dir);
	json_object_put(cache);
}

/* The evidence folder of recording `sid` of this guest (malloc'd), or NULL
 * with the status set when the recording is another guest's or unknown. */
static char *display_recording(dctx *c, const char *sid, bool *current)
{
	char *recording = idl_recording_of(c, sid, current);
	if (recording)
		return recording;
	if (!idl_refuse_owned_elsewhere(c, "recording session ", sid, idl_recording_owner_elsewhere(c, sid)))
		dctx_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
		            "recording session %s is not one of guest %s's recordings (its current "
		            "one is %s)",
		            sid, c->name,
		            c->recording_session_id ? c->recording_session_id : "none: it is not staged");
	return NULL;
}

/* The request record of execution `eid` in `recording` (a new reference),
 * or NULL with the status set: a diagnostic run, no record, or a record of
 * another execution. */
static json_object *display_request(dctx *c, const char *recording, const char *sid, const char *eid)
{
	json_object *request = NULL;
	char *req_path = strbuf_format("%s/host/requests/%s.json", recording, eid);
	char *diag_path = strbuf_format("%s/host/diagnostics/%s.request.json", recording, eid);
	if (req_path == NULL || diag_path == NULL) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	if (!idl_regular_file(req_path)) {
		if (idl_regular_file(diag_path))
			dctx_status(c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_DIAGNOSTIC);
		else
			dctx_status(c, IMAGE_STATUS_IMAGE_MISSING,
			            "execution %s has no request record in recording %s (%s/host/requests/)",
			            eid, sid, recording);
		goto cleanup;
	}
	relay_error err;
	if (fs_read_json(req_path, REQUEST_MAX_BYTES, &request, &err) != RELAY_OK ||
	    !json_object_is_type(request, json_type_object)) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "the request record %s cannot be read: %s",
		            req_path, err.message);
		json_object_put(request);
		request = NULL;
		goto cleanup;
	}
	if (!idl_str_eq(jsonx_get_str(request, "executionId"), eid) ||
	    (jsonx_get_str(request, "sessionId") && !idl_str_eq(jsonx_get_str(request, "sessionId"), sid))) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		            "the request record %s names another execution or recording", req_path);
		json_object_put(request);
		request = NULL;
	}
cleanup:
	free(req_path);
	free(diag_path);
	return request;
}

/* The run's receipt: host first (spec/images.md §1.1), then the guest when
 * `live` (cached then under host/image-evidence/). A new reference, or
 * NULL with the status set. */
static json_object *display_receipt(dctx *c, const char *recording, bool live, const char *eid,
                                    bool *from_guest, char **cache_path_out)
{
	json_object *receipt = NULL;
	bool failed = false;
	*from_guest = false;
	char *p[5] = {NULL, NULL, NULL, NULL, NULL};
	p[0] = strbuf_format("%s/host/receiver-receipts/%s.json", recording, eid);
	p[1] = strbuf_format("%s/host/steps/%s/state/receiver/receipts/%s.json", recording, eid, eid);
	p[2] = strbuf_format("%s/state/receiver/receipts/%s.json", recording, eid);
	p[3] = strbuf_format("%s/host/image-evidence/%s.json", recording, eid);
	if (!p[0] || !p[1] || !p[2] || !p[3]) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	receipt = idl_host_json(c, (const char *const *)p, "the run's receipt", &failed);
	if (failed || receipt)
		goto cleanup;
	if (!live) {
		dctx_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_STATE_GONE);
		goto cleanup;
	}
	char *remote =
	    strbuf_format("%s/state/receiver/receipts/%s.json", c->guest_root ? c->guest_root : "", eid);
	bool got = remote && idl_guest_metadata(c, remote, "the run's receipt", &receipt, NULL);
	free(remote);
	*from_guest = got;
	if (!got && idl_str_eq(c->out->status, IMAGE_STATUS_IMAGE_MISSING)) {
		c->out->status = NULL;
		dctx_status(c, IMAGE_STATUS_IMAGE_MISSING,
		            "execution %s has no receipt on the host or in the guest: the run "
		            "may still be "
		            "running, or it was refused before the receiver recorded it",
		            eid);
	}
cleanup:
	*cache_path_out = p[3];
	p[3] = NULL;
	for (size_t i = 0; i < 5; i++)
		free(p[i]);
	return receipt;
}

/* The status of a phase the receipt lists no snapshot for. */
static void snapshot_absent(dctx *c, const json_object *ev, const char *phase, const char *eid)
{
	const char *st = jsonx_get_str(ev, "status");
	if (idl_str_eq(st, "capture-failed"))
		dctx_status(c, IMAGE_STATUS_CAPTURE_FAILED,
		            "the planned %s capture of %s failed in the guest", phase, eid);
	else if (idl_str_eq(st, "capture-unknown"))
		dctx_status(c, IMAGE_STATUS_CAPTURE_UNKNOWN,
		            "the result of the planned %s capture of %s cannot be decided", phase, eid);
	else if (idl_str_eq(st, "not-requested"))
		dctx_status(c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_SNAPSHOTS_OFF);
	else
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		            "the receipt of %s says its images are available but lists no %s snapshot", eid,
		            phase);
}

void idl_resolve_display(dctx *c, const json_object *target)
{
	const char *sid = jsonx_get_str(target, "sessionId");
	const char *eid = jsonx_get_str(target, "executionId");
	const char *phase = jsonx_get_str(target, "phase");
	bool current = false, from_guest = false;
	char *recording = NULL, *cache_path = NULL;
	json_object *request = NULL, *receipt = NULL, *entry = NULL;
	if (!idl_id_ok(sid, 120) || !idl_id_ok(eid, 160) || phase == NULL) {
		dctx_status(c, IMAGE_STATUS_IMAGE_MISSING,
		            "the display target needs sessionId, executionId and phase");
		goto cleanup;
	}
	recording = display_recording(c, sid, &current);
	if (recording == NULL)
		goto cleanup;
	bool live = current && !c->closed;
	request = display_request(c, recording, sid, eid);
	if (request == NULL || !idl_plan_captures(c, request, phase))
		goto cleanup;
	const char *group_phase =
	    jsonx_get_str(jsonx_get_obj(jsonx_get_obj(request, "snapshots"), "group"), "phase");

	if (live && !idl_wait_for_step(c, eid))
		goto cleanup;

	receipt = display_receipt(c, recording, live, eid, &from_guest, &cache_path);
	if (receipt == NULL)
		goto cleanup;
	gio_receipt rc;
	gio_receipt_read(receipt, &rc);
	json_object *ev = rc.image_evidence;
	if (ev == NULL && jsonx_get_str(receipt, "status"))
		ev = receipt; /* the host/image-evidence cache holds the imageEvidence itself */
	if (rc.execution_id && !idl_str_eq(rc.execution_id, eid)) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "the receipt found for %s names execution %s",
		            eid, rc.execution_id);
		goto cleanup;
	}
	char why[256];
	if (!idl_image_evidence_valid(ev, sid, eid, why, sizeof why)) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", why);
		goto cleanup;
	}
	if (from_guest)
		cache_image_evidence(sid, eid, ev, cache_path);
	json_object *snap = idl_snapshot_for_phase(ev, phase);
	if (snap == NULL) {
		snapshot_absent(c, ev, phase, eid);
		goto cleanup;
	}
	if (!idl_cross_check(c, recording, live, snap, group_phase))
		goto cleanup;
	relay_error ierr;
	memset(&ierr, 0, sizeof ierr);
	json_object *image = idl_display_identity(c, recording, snap, true, &entry, &ierr);
	if (image == NULL) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", ierr.message);
		goto cleanup;
	}
	c->out->image = image;
	idl_deliver_display_image(c, recording, live, entry);
cleanup:
	json_object_put(request);
	json_object_put(receipt);
	json_object_put(entry);
	free(recording);
	free(cache_path);
}

/* Obtains and presents a display image whose catalog entry is `entry`. */
void idl_deliver_display_image(dctx *c, const char *recording, bool live, const json_object *entry)
{
	json_object *d = jsonx_get_obj(entry, "descriptor");
	const char *sid = jsonx_get_str(d, "sessionId");
	const char *eid = jsonx_get_str(d, "executionId");
	const char *file_name = jsonx_get_str(entry, "fileName");
	char *cand0 = strbuf_format("%s/state/snapshots/%s/%s", recording, sid, file_name);
	char *cand1 = strbuf_format("%s/host/steps/%s/state/snapshots/%s/%s", recording, eid, sid, file_name);
	char *what = strbuf_format("the %s snapshot %s", jsonx_get_str(d, "phase"), file_name);
	int64_t bytes = 0;
	jsonx_get_int(d, "bytes", &bytes);
	if (cand0 && cand1 && what) {
		const char *const candidates[] = {cand0, cand1, NULL};
		original_spec spec = {
		    .local = jsonx_get_str(entry, "local"),
		    .sha256 = jsonx_get_str(d, "sha256"),
		    .bytes = (uint64_t)bytes,
		    .mime = IMAGE_MIME_PNG,
		    .candidates = candidates,
		    .remote = live ? jsonx_get_str(entry, "remote") : NULL,
		    .no_guest_status = IMAGE_STATUS_STALE_REFERENCE,
		    .no_guest_diag = IMAGE_DIAG_STATE_GONE,
		    .check_signature = false,
		    .what = what,
		};
		idl_deliver(c, &spec);
	} else {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
	}
	free(cand0);
	free(cand1);
	free(what);
}
