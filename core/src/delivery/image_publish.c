/*
 * Publication of display originals a download or a run's own answer
 * brought home (image_publish.h; spec/images.md §5).
 */
#include "delivery/image_publish.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delivery/image_catalog.h"
#include "delivery/image_context.h"
#include "delivery/image_identity.h"
#include "guestio/receiver_api.h"
#include "image/container.h"
#include "image/image.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/timefmt.h"

/* ---- step downloads ------------------------------------------------------------------ */

/* The delivery receipt of an original a download (or a run's own answer)
 * brought home: {image, at, status: "downloaded"} (spec/images.md §5). */
static relay_status write_downloaded_receipt(const char *image_dir, json_object *image, relay_error *err)
{
	char at[25];
	time_format_iso_millis(clock_now_ms(), at);
	json_object *r = json_object_new_object();
	jsonx_add(r, "image", json_object_get(image));
	jsonx_add_str(r, "at", at);
	jsonx_add_str(r, "status", IMAGE_STATUS_DOWNLOADED);
	relay_status st = image_catalog_receipt_write(image_dir, r, NULL, err);
	json_object_put(r);
	return st;
}

relay_status image_delivery_publish_answer(session_manager *m, guest *g, const char *recording,
                                           const gio_receipt *rc, const json_object *part, const void *data,
                                           size_t len, relay_error *err)
{
	image_delivery_result unused;
	memset(&unused, 0, sizeof unused);
	dctx c;
	relay_status st = RELAY_OK;
	json_object *image = NULL, *entry = NULL;
	char *image_dir = NULL, *want_path = NULL;
	image_catalog_staging staging;
	memset(&staging, 0, sizeof staging);
	if (!dctx_init(&c, m, g, NULL, clock_monotonic_ms() + IMAGE_DELIVERY_DEADLINE_MS, &unused, err)) {
		st = err->code ? err->code : RELAY_E_INTERNAL;
		goto cleanup;
	}
	json_object *ev = rc->image_evidence;
	char why[256];
	if (ev == NULL || !idl_image_evidence_valid(ev, rc->session_id, rc->execution_id, why, sizeof why)) {
		st = relay_error_set(err, RELAY_E_PROTOCOL, 0, "%s",
		                     ev ? why : "the receipt has no imageEvidence");
		goto cleanup;
	}
	json_object *snap = idl_snapshot_for_phase(ev, "after");
	if (snap == NULL) {
		st = relay_error_set(err, RELAY_E_PROTOCOL, 0, "the receipt lists no after-snapshot");
		goto cleanup;
	}
	image = idl_display_identity(&c, recording ? recording : c.evidence, snap, true, &entry, err);
	if (image == NULL) {
		st = err->code ? err->code : RELAY_E_INTERNAL;
		goto cleanup;
	}
	json_object *d = jsonx_get_obj(entry, "descriptor");
	int64_t bytes = -1;
	jsonx_get_int(d, "bytes", &bytes);
	want_path = idl_pathf("state/snapshots/%s/%s", jsonx_get_str(d, "sessionId"),
	                      jsonx_get_str(entry, "fileName"));
	char hex[SHA256_HEX_LEN + 1];
	sha256_buffer_hex(data, len, hex);
	if (want_path == NULL || !idl_str_eq(jsonx_get_str(part, "path"), want_path)) {
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                     "the image on the answer is not the after-snapshot %s",
		                     want_path ? want_path : "");
		goto cleanup;
	}
	if ((int64_t)len != bytes || !idl_str_eq(hex, jsonx_get_str(d, "sha256"))) {
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                     "the image on the answer holds %zu bytes with SHA-256 %.12s…, not the "
		                     "receipt's %lld bytes",
		                     len, hex, (long long)bytes);
		goto cleanup;
	}
	image_info info;
	st = container_check_png(data, len, &info, err);
	if (st != RELAY_OK)
		goto cleanup;
	image_dir = fs_dirname(jsonx_get_str(entry, "local"));
	st = image_dir ? image_catalog_staging_open(image_dir, "png", &staging, err)
	               : relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	if (st == RELAY_OK)
		st = fs_write_exclusive(staging.file, data, len, 0600, err);
	if (st == RELAY_OK)
		st = image_catalog_staging_publish(&staging, hex, (uint64_t)len, NULL, err);
	image_catalog_staging_close(&staging);
	if (st == RELAY_OK)
		st = write_downloaded_receipt(image_dir, image, err);
cleanup:
	dctx_free(&c);
	image_delivery_result_clear(&unused);
	json_object_put(image);
	json_object_put(entry);
	free(image_dir);
	free(want_path);
	return st;
}

relay_status image_delivery_publish_step(session_manager *m, guest *g, const char *recording,
                                         const gio_receipt *rc, json_object **published_out, relay_error *err)
{
	if (published_out)
		*published_out = NULL;
	image_delivery_result unused;
	memset(&unused, 0, sizeof unused);
	dctx c;
	relay_status st = RELAY_OK;
	json_object *published = json_object_new_array();
	if (!dctx_init(&c, m, g, NULL, clock_monotonic_ms() + IMAGE_DELIVERY_DEADLINE_MS, &unused, err)) {
		st = err->code ? err->code : RELAY_E_INTERNAL;
		goto cleanup;
	}
	const char *rec = recording ? recording : c.evidence;
	json_object *ev = rc->image_evidence;
	const char *eid = rc->execution_id;
	char why[256];
	if (ev == NULL || !idl_image_evidence_valid(ev, rc->session_id, eid, why, sizeof why)) {
		st = relay_error_set(err, RELAY_E_PROTOCOL, 0, "%s",
		                     ev ? why : "the receipt has no imageEvidence");
		goto cleanup;
	}
	json_object *snaps = jsonx_get_array(ev, "snapshots");
	size_t n = snaps ? json_object_array_length(snaps) : 0;
	for (size_t i = 0; i < n && st == RELAY_OK; i++) {
		json_object *snap = json_object_array_get_idx(snaps, i);
		json_object *entry = NULL;
		json_object *image = idl_display_identity(&c, rec, snap, true, &entry, err);
		if (image == NULL) {
			st = err->code ? err->code : RELAY_E_INTERNAL;
			break;
		}
		json_object *d = jsonx_get_obj(entry, "descriptor");
		const char *local = jsonx_get_str(entry, "local");
		char *image_dir = fs_dirname(local);
		char *src = idl_pathf("%s/host/steps/%s/state/snapshots/%s/%s", rec, eid,
		                      jsonx_get_str(d, "sessionId"), jsonx_get_str(entry, "fileName"));
		int64_t bytes = 0;
		jsonx_get_int(d, "bytes", &bytes);
		image_catalog_staging staging;
		memset(&staging, 0, sizeof staging);
		if (image_dir == NULL || src == NULL)
			st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		if (st == RELAY_OK)
			st = image_catalog_staging_open(image_dir, "png", &staging, err);
		if (st == RELAY_OK)
			st = fs_copy_file(src, staging.file, 0600, err);
		if (st == RELAY_OK)
			st = image_catalog_staging_publish(&staging, jsonx_get_str(d, "sha256"),
			                                   (uint64_t)bytes, NULL, err);
		image_catalog_staging_close(&staging);
		if (st == RELAY_OK)
			st = write_downloaded_receipt(image_dir, image, err);
		if (st == RELAY_OK) {
			json_object *p = json_object_new_object();
			jsonx_add_str(p, "imageId", jsonx_get_str(d, "imageId"));
			jsonx_add_str(p, "phase", jsonx_get_str(d, "phase"));
			json_object_array_add(published, p);
		}
		free(image_dir);
		free(src);
		json_object_put(image);
		json_object_put(entry);
	}
cleanup:
	dctx_free(&c);
	image_delivery_result_clear(&unused);
	if (st == RELAY_OK && published_out)
		*published_out = json_object_get(published);
	json_object_put(published);
	return st;
}
