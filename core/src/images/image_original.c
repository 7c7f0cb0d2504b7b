/*
 * The original of a resolved image: host first, then the guest; publication and presentation
 * (image_original.h).
 */
#include "images/image_original.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "images/image_catalog.h"
#include "images/image_guest.h"
#include "pixels/image.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/timefmt.h"

/* ---- the original -------------------------------------------------------------------- */

/* Reads a published original into memory and checks its bytes once more. */
original_spec idl_application_original(const char *local, const char *sha256, int64_t bytes, const char *mime,
                                       const char *remote, const char *what)
{
	original_spec spec = {
	    .local = local,
	    .sha256 = sha256,
	    .bytes = (uint64_t)bytes,
	    .mime = mime,
	    .candidates = NULL,
	    .remote = remote,
	    .no_guest_status = IMAGE_STATUS_STALE_REFERENCE,
	    .no_guest_diag = IMAGE_DIAG_GUEST_GONE,
	    .check_signature = true,
	    .what = what,
	};
	return spec;
}

bool idl_read_verified(dctx *c, const char *path, const original_spec *spec, unsigned char **data_out,
                       size_t *len_out)
{
	relay_error err;
	char *data = NULL;
	size_t len = 0;
	relay_status st = fs_read_file(path, (size_t)spec->bytes + 1, &data, &len, &err);
	if (st != RELAY_OK) {
		dctx_status(c,
		            st == RELAY_E_TOO_LARGE || st == RELAY_E_UNSAFE_PATH
		                ? IMAGE_STATUS_INTEGRITY_FAILED
		                : IMAGE_STATUS_TRANSFER_FAILED,
		            "cannot read the published original %s: %s", path, err.message);
		return false;
	}
	char hex[SHA256_HEX_LEN + 1];
	sha256_buffer_hex(data, len, hex);
	if (len != spec->bytes || strcmp(hex, spec->sha256) != 0) {
		free(data);
		dctx_status(
		    c, IMAGE_STATUS_INTEGRITY_FAILED,
		    "the published original %s changed: it holds %zu bytes with SHA-256 %.12s…, not the "
		    "image's %" PRIu64 " bytes",
		    path, len, hex, spec->bytes);
		return false;
	}
	*data_out = (unsigned char *)data;
	*len_out = len;
	return true;
}

/* The signature check of spec/images.md §1.2 on a staged copy. */
static bool signature_matches(dctx *c, const char *path, const original_spec *spec)
{
	unsigned char head[32];
	FILE *f = fopen(path, "rb");
	size_t n = f ? fread(head, 1, sizeof head, f) : 0;
	if (f)
		fclose(f);
	const char *found = image_mime_from_signature(head, n);
	if (found == NULL || strcmp(found, spec->mime) != 0) {
		dctx_status(c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		            "the image's bytes do not match its extension (%s "
		            "holds %s, the extension says %s)",
		            spec->what, found ? found : "no PNG, JPEG or WebP signature", spec->mime);
		return false;
	}
	return true;
}

/* Publishes a staged copy (verify, link) and reads it back. */
static bool publish_staged(dctx *c, image_catalog_staging *staging, const original_spec *spec,
                           unsigned char **data_out, size_t *len_out)
{
	if (spec->check_signature && !signature_matches(c, staging->file, spec))
		return false;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_catalog_staging_publish(staging, spec->sha256, spec->bytes, NULL, &err);
	if (st != RELAY_OK) {
		dctx_status(
		    c, st == RELAY_E_INTEGRITY ? IMAGE_STATUS_INTEGRITY_FAILED : IMAGE_STATUS_TRANSFER_FAILED,
		    "%s: %s", spec->what, err.message);
		return false;
	}
	return idl_read_verified(c, staging->published, spec, data_out, len_out);
}

/* Finds the original on the host (published, then the candidates), else
 * pulls it from the guest; publishes it; returns its verified bytes. */
bool idl_obtain_original(dctx *c, const original_spec *spec, unsigned char **data_out, size_t *len_out)
{
	*data_out = NULL;
	*len_out = 0;
	bool ok = false;
	char *image_dir = fs_dirname(spec->local);
	const char *dot = strrchr(spec->local, '.');
	const char *ext = dot ? dot + 1 : "png";
	image_catalog_staging staging;
	memset(&staging, 0, sizeof staging);
	relay_error err;
	memset(&err, 0, sizeof err);
	if (image_dir == NULL) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	/* 1. the published original */
	bool present = false;
	relay_status st =
	    image_catalog_original_check(image_dir, ext, spec->sha256, spec->bytes, &present, &err);
	if (st != RELAY_OK) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
		goto cleanup;
	}
	if (present) {
		ok = idl_read_verified(c, spec->local, spec, data_out, len_out);
		goto cleanup;
	}
	/* 2. host copies: the recording's canonical snapshot, the step folder */
	for (size_t i = 0; spec->candidates && spec->candidates[i]; i++) {
		const char *cand = spec->candidates[i];
		if (!idl_regular_file(cand))
			continue;
		char hex[SHA256_HEX_LEN + 1];
		uint64_t got = 0;
		if (sha256_file_hex(cand, hex, &got, &err) != RELAY_OK) {
			dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot read the host copy %s: %s", cand,
			            err.message);
			goto cleanup;
		}
		if (got != spec->bytes || strcmp(hex, spec->sha256) != 0) {
			dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
			            "the host copy %s holds %" PRIu64
			            " bytes with SHA-256 %.12s…, not the image's %" PRIu64
			            " bytes with %.12s…",
			            cand, got, hex, spec->bytes, spec->sha256);
			goto cleanup;
		}
		if (image_catalog_staging_open(image_dir, ext, &staging, &err) != RELAY_OK ||
		    fs_copy_file(cand, staging.file, 0600, &err) != RELAY_OK) {
			dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot stage %s for publication: %s",
			            cand, err.message);
			goto cleanup;
		}
		ok = publish_staged(c, &staging, spec, data_out, len_out);
		goto cleanup;
	}
	/* 3. the guest */
	if (spec->remote == NULL) {
		dctx_status(c, spec->no_guest_status, "%s", spec->no_guest_diag);
		goto cleanup;
	}
	if (!idl_confirm_guest(c))
		goto cleanup;
	if (image_catalog_staging_open(image_dir, ext, &staging, &err) != RELAY_OK) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot prepare publication of %s: %s",
		            spec->what, err.message);
		goto cleanup;
	}
	RELAY_FAILPOINT("image.before-pull");
	if (!idl_guest_pull(c, spec->remote, staging.file, spec->what, IMAGE_MAX_ORIGINAL_BYTES))
		goto cleanup;
	ok = publish_staged(c, &staging, spec, data_out, len_out);
cleanup:
	image_catalog_staging_close(&staging);
	free(image_dir);
	return ok;
}

/* Presents verified bytes (spec/images.md §9) and writes the delivery receipt.
 * The preview stays in the answer even when the receipt cannot be written
 * (spec/mcp.md §7: an image that was produced stays beside isError). */
void idl_present_and_record(dctx *c, const char *image_dir, const unsigned char *data, size_t len,
                            const char *mime)
{
	RELAY_FAILPOINT("image.after-publish");
	image_presentation p;
	memset(&p, 0, sizeof p);
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_present(data, len, mime, &p, &err);
	if (st != RELAY_OK) {
		const char *status = image_delivery_status(st);
		dctx_status(c, status, "%s", err.message[0] ? err.message : relay_status_str(st));
		return;
	}
	c->out->presentation = json_object_get(p.receipt);
	c->out->preview_base64 = p.base64;
	c->out->preview_mime = p.mime_type;
	p.base64 = NULL;
	image_presentation_free(&p);

	char at[25];
	time_format_iso_millis(clock_now_ms(), at);
	json_object *receipt = json_object_new_object();
	jsonx_add(receipt, "image", json_object_get(c->out->image));
	jsonx_add(receipt, "presentation", json_object_get(c->out->presentation));
	jsonx_add_str(receipt, "at", at);
	jsonx_add_str(receipt, "status", IMAGE_STATUS_ATTACHED);
	memset(&err, 0, sizeof err);
	st = receipt ? image_catalog_receipt_write(image_dir, receipt, NULL, &err)
	             : relay_error_set(&err, RELAY_E_NO_MEMORY, 0, "out of memory");
	json_object_put(receipt);
	if (st != RELAY_OK) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		            "the preview was produced and is attached, but its delivery receipt could not be "
		            "written in "
		            "%s: %s",
		            image_dir, err.message);
		return;
	}
	dctx_status(c, IMAGE_STATUS_ATTACHED, NULL);
}

/* Obtains, publishes and presents the original of a resolved image. */
void idl_deliver(dctx *c, const original_spec *spec)
{
	unsigned char *data = NULL;
	size_t len = 0;
	if (!idl_obtain_original(c, spec, &data, &len))
		return;
	char *image_dir = fs_dirname(spec->local);
	if (image_dir)
		idl_present_and_record(c, image_dir, data, len, spec->mime);
	else
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
	free(image_dir);
	free(data);
}
