/*
 * Saved images as the tools deliver them (image_delivery.h; spec/images.md §1,
 * §3, §5-§8): relay_image through its three selectors, and the
 * imageDelivery of a recorded run.
 */
#include "delivery/image_delivery.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "call/call.h"
#include "delivery/image_catalog.h"
#include "delivery/image_context.h"
#include "delivery/image_identity.h"
#include "delivery/image_original.h"
#include "delivery/image_selectors.h"
#include "guestio/receiver_api.h"
#include "image/image.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

/* ---- relay_image --------------------------------------------------------------------- */

void image_delivery_retrieve(session_manager *m, guest *g, const json_object *target, relay_call *call,
                             int64_t started_mono_ms, image_delivery_result *out)
{
	memset(out, 0, sizeof *out);
	dctx c;
	relay_error err;
	memset(&err, 0, sizeof err);
	bool ready = dctx_init(&c, m, g, call, started_mono_ms + IMAGE_DELIVERY_DEADLINE_MS, out, &err);
	const char *source = jsonx_get_str(target, "source");
	if (relay_call_is_cancelled(call) || clock_monotonic_ms() >= c.deadline_mono_ms) {
		dctx_status(&c, IMAGE_STATUS_TRANSFER_FAILED, IMAGE_DIAG_NOT_STARTED);
		goto done;
	}
	if (!ready) {
		if (err.code == RELAY_E_NOT_FOUND)
			dctx_status(&c, IMAGE_STATUS_IMAGE_MISSING, "%s", err.message);
		else
			dctx_status(&c, IMAGE_STATUS_TRANSFER_FAILED, "%s", IMAGE_DIAG_UNEXPECTED);
		goto done;
	}
	if (c.closed) {
		/* spec/images.md §7 step 2; a reference still names its original. */
		if (idl_str_eq(source, "reference")) {
			json_object *entry = idl_reference_entry(&c, jsonx_get_str(target, "imageId"));
			if (entry) {
				json_object *d = jsonx_get_obj(entry, "descriptor");
				c.out->image = idl_result_image(d, jsonx_get_str(entry, "local"), NULL);
				json_object_put(entry);
			} else {
				/* only the closed guest's answer counts */
				json_object_put(c.out->image);
				c.out->image = NULL;
				free(c.out->diagnostic);
				c.out->diagnostic = NULL;
				c.out->status = NULL;
			}
		}
		dctx_status(&c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_CLOSED);
		goto done;
	}
	if (idl_str_eq(source, "display"))
		idl_resolve_display(&c, target);
	else if (idl_str_eq(source, "application"))
		idl_resolve_application(&c, target);
	else if (idl_str_eq(source, "reference"))
		idl_resolve_reference(&c, target);
	else
		dctx_status(&c, IMAGE_STATUS_IMAGE_MISSING,
		            "target.source must be display, application or reference");
done:
	if (out->status == NULL)
		dctx_status(&c, IMAGE_STATUS_TRANSFER_FAILED, IMAGE_DIAG_UNEXPECTED);
	if (strcmp(out->status, IMAGE_STATUS_ATTACHED) != 0 && out->preview_base64 == NULL) {
		json_object_put(out->presentation);
		out->presentation = NULL;
	}
	dctx_free(&c);
}

/* ---- relay_script -------------------------------------------------------------------- */

void image_delivery_for_run(session_manager *m, guest *g, const json_object *request, const gio_receipt *rc,
                            const char *recording, image_delivery_result *out)
{
	memset(out, 0, sizeof *out);
	dctx c;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (!dctx_init(&c, m, g, NULL, clock_monotonic_ms() + IMAGE_DELIVERY_DEADLINE_MS, out, &err)) {
		dctx_status(&c, IMAGE_STATUS_TRANSFER_FAILED, "%s", err.message);
		dctx_free(&c);
		return;
	}
	const char *rec = recording ? recording : c.evidence;
	if (!idl_plan_captures(&c, request, "after"))
		goto done;
	if (rc == NULL) {
		dctx_status(&c, IMAGE_STATUS_PENDING, NULL);
		goto done;
	}
	json_object *ev = rc->image_evidence;
	char why[256];
	if (ev == NULL || !idl_image_evidence_valid(ev, rc->session_id, rc->execution_id, why, sizeof why)) {
		dctx_status(&c, IMAGE_STATUS_INTEGRITY_FAILED, "%s",
		            ev ? why : "the run's receipt has no imageEvidence");
		goto done;
	}
	json_object *snap = idl_snapshot_for_phase(ev, "after");
	if (snap == NULL) {
		const char *st = jsonx_get_str(ev, "status");
		const char *diag = rc->outcome.diagnostic;
		if (idl_str_eq(st, "capture-failed"))
			dctx_status(&c, IMAGE_STATUS_CAPTURE_FAILED,
			            "the after-snapshot capture failed in the guest%s%s", diag ? ": " : "",
			            diag ? diag : "");
		else if (idl_str_eq(st, "capture-unknown"))
			dctx_status(&c, IMAGE_STATUS_CAPTURE_UNKNOWN,
			            "the after-snapshot's result cannot be decided%s%s", diag ? ": " : "",
			            diag ? diag : "");
		else if (rc->outcome.kind == GIO_OUTCOME_REFUSED)
			dctx_status(
			    &c, IMAGE_STATUS_NOT_REQUESTED,
			    "the run was refused before its script started; no after-image was taken");
		else if (idl_str_eq(st, "not-requested"))
			dctx_status(&c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_SNAPSHOTS_OFF);
		else
			dctx_status(
			    &c, IMAGE_STATUS_INTEGRITY_FAILED,
			    "the receipt says the run's images are available but lists no after-snapshot");
		goto done;
	}
	json_object *entry = NULL;
	json_object *image = idl_display_identity(&c, rec, snap, true, &entry, &err);
	if (image == NULL) {
		dctx_status(&c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
		goto done;
	}
	out->image = image;
	/* Attached only when the original is already published and verified
	 * on the host; never waited for. */
	const char *local = jsonx_get_str(entry, "local");
	char *image_dir = local ? fs_dirname(local) : NULL;
	json_object *d = jsonx_get_obj(entry, "descriptor");
	int64_t bytes = 0;
	jsonx_get_int(d, "bytes", &bytes);
	bool present = false;
	if (image_dir && image_catalog_original_check(image_dir, "png", jsonx_get_str(d, "sha256"),
	                                              (uint64_t)bytes, &present, &err) != RELAY_OK) {
		dctx_status(&c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
	} else if (present) {
		original_spec spec = {.local = local,
		                      .sha256 = jsonx_get_str(d, "sha256"),
		                      .bytes = (uint64_t)bytes,
		                      .mime = IMAGE_MIME_PNG,
		                      .what = "the after-snapshot"};
		unsigned char *data = NULL;
		size_t len = 0;
		if (idl_read_verified(&c, local, &spec, &data, &len)) {
			idl_present_and_record(&c, image_dir, data, len, IMAGE_MIME_PNG);
			if (!idl_str_eq(out->status, IMAGE_STATUS_ATTACHED) && out->preview_base64 == NULL) {
				/* It cannot be shown here: the run still names it. */
				out->status = NULL;
				free(out->diagnostic);
				out->diagnostic = NULL;
				json_object_put(out->presentation);
				out->presentation = NULL;
			}
			free(data);
		}
	}
	dctx_status(&c, IMAGE_STATUS_PENDING, NULL);
	free(image_dir);
	json_object_put(entry);
done:
	dctx_free(&c);
}
