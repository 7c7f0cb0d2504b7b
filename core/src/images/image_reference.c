/*
 * The reference selector of relay_image (image_selectors.h; spec/images.md §2.3, §7).
 */
#include "images/image_selectors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
#include <dirent.h>

/* ---- reference ----------------------------------------------------------------------- */

/* Looks an imageId up in the catalogs of the session's other guests:
 * the name of the guest it belongs to (malloc'd), or NULL. */
static char *reference_elsewhere(dctx *c, const char *image_id)
{
	char *catalog = strbuf_format("%s/image-catalog", c->session_dir);
	char *owner = NULL;
	if (catalog == NULL)
		return NULL;
	DIR *dir = opendir(catalog);
	struct dirent *e;
	while (dir && owner == NULL && (e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.' || idl_str_eq(e->d_name, c->purpose))
			continue;
		char *p = strbuf_format("%s/%s/%s.json", catalog, e->d_name, image_id);
		if (p && idl_regular_file(p)) {
			owner = idl_guest_of_purpose(c, e->d_name);
			if (owner == NULL)
				owner = strbuf_format("(lease %s)", e->d_name);
		}
		free(p);
	}
	if (dir)
		closedir(dir);
	free(catalog);
	return owner;
}

/* True when `inner` lies strictly inside `outer` (string prefix at a
 * component boundary, no ".." segment). */
static bool path_inside(const char *inner, const char *outer)
{
	size_t n = outer ? strlen(outer) : 0;
	if (inner == NULL || n == 0 || strncmp(inner, outer, n) != 0 || inner[n] != '/' ||
	    inner[n + 1] == '\0')
		return false;
	size_t len = strlen(inner);
	return strstr(inner, "/../") == NULL && strstr(inner, "/./") == NULL && strstr(inner, "//") == NULL &&
	       !(len >= 3 && strcmp(inner + len - 3, "/..") == 0) &&
	       !(len >= 2 && strcmp(inner + len - 2, "/.") == 0);
}

/* Reads and checks this guest's catalog entry for `image_id`: sets the
 * status and returns NULL when it is missing, foreign or damaged. */
json_object *idl_reference_entry(dctx *c, const char *image_id)
{
	json_object *entry = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_catalog_get(c->catalog_dir, image_id, &entry, &err);
	if (st == RELAY_E_NOT_FOUND) {
		if (!idl_refuse_owned_elsewhere(c, "", image_id, reference_elsewhere(c, image_id)))
			dctx_status(c, IMAGE_STATUS_IMAGE_MISSING,
			            "%s is not in this session's image catalog for guest %s; use an imageId "
			            "from a run result "
			            "or an earlier delivery on this guest",
			            image_id, c->name);
		return NULL;
	}
	if (st != RELAY_OK) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
		return NULL;
	}
	if (!idl_str_eq(jsonx_get_str(entry, "binding"), c->binding_hex)) {
		dctx_status(
		    c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
		    "%s was issued for another session, guest or backend than guest %s of this session",
		    image_id, c->name);
		json_object_put(entry);
		return NULL;
	}
	return entry;
}

void idl_resolve_reference(dctx *c, const json_object *target)
{
	const char *image_id = jsonx_get_str(target, "imageId");
	json_object *entry = idl_reference_entry(c, image_id);
	if (entry == NULL)
		return;
	json_object *d = jsonx_get_obj(entry, "descriptor");
	const char *recording = jsonx_get_str(entry, "recording");
	const char *local = jsonx_get_str(entry, "local");
	const char *remote = jsonx_get_str(entry, "remote");
	const char *approved = jsonx_get_str(entry, "approvedRoot");
	const char *source = jsonx_get_str(d, "source");
	const char *mime = jsonx_get_str(d, "mimeType");
	const char *ext = image_catalog_ext(mime);
	bool current = false;
	char *expected_local = NULL;
	if (recording == NULL || !idl_own_recording(c, recording, &current)) {
		dctx_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
		            "%s was recorded for a recording (%s) guest %s does not own", image_id,
		            recording ? recording : "none", c->name);
		goto cleanup;
	}
	expected_local = ext ? idl_original_path(recording, image_id, ext) : NULL;
	if (!idl_str_eq(local, expected_local)) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		            "catalog entry %s names an original outside its recording", image_id);
		goto cleanup;
	}
	bool application = idl_str_eq(source, "application");
	c->out->image = idl_result_image(d, local, NULL);
	if (application) {
		char at[25];
		time_format_iso_millis(clock_now_ms(), at);
		jsonx_add_str(c->out->image, "retrievedAt", at);
	}
	if (c->closed) {
		dctx_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_CLOSED);
		goto cleanup;
	}
	if (remote && (!path_inside(remote, approved) || !path_inside(approved, c->guest_root))) {
		dctx_status(c, IMAGE_STATUS_UNSAFE_PATH,
		            "catalog entry %s names a guest path outside its approved root", image_id);
		goto cleanup;
	}
	if (idl_str_eq(source, "display")) {
		if (current && !idl_wait_for_step(c, jsonx_get_str(d, "executionId")))
			goto cleanup;
		idl_deliver_display_image(c, recording, current, entry);
		goto cleanup;
	}
	if (!application) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "catalog entry %s has an unknown source",
		            image_id);
		goto cleanup;
	}
	int64_t bytes = 0;
	jsonx_get_int(d, "bytes", &bytes);
	char *what = strbuf_format("the image %s of output %s", jsonx_get_str(entry, "fileName"),
	                           jsonx_get_str(d, "name"));
	original_spec spec = idl_application_original(local, jsonx_get_str(d, "sha256"), bytes, mime, remote,
	                                              what ? what : "the image");
	idl_deliver(c, &spec);
	free(what);
cleanup:
	free(expected_local);
	json_object_put(entry);
}
