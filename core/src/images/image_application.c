/*
 * The application selector of relay_image (image_selectors.h; spec/images.md §1.2, §7).
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

#define SCAN_TIMEOUT_MS 60000 /* receiver scan --image */

/* ---- application --------------------------------------------------------------------- */

/* The relative path rules of spec/evidence.md §8.1 for a path inside a
 * declaration. NULL when fine, else what is wrong. */
static const char *relative_path_problem(const json_object *value)
{
	const char *p = json_object_get_string((json_object *)value);
	size_t len = (size_t)json_object_get_string_len(value);
	if (len == 0)
		return "it is empty";
	if (strlen(p) != len)
		return "it contains a NUL character";
	if (p[0] == '/')
		return "it is absolute";
	if (strchr(p, '\\'))
		return "it contains a backslash";
	const char *seg = p;
	for (;;) {
		const char *end = strchr(seg, '/');
		size_t n = end ? (size_t)(end - seg) : strlen(seg);
		if (n == 0)
			return "it has an empty segment";
		if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return "it has a '.' or '..' segment";
		if (!end)
			break;
		seg = end + 1;
	}
	return NULL;
}

/* Maps a failed `receiver scan --image` to a status (spec/images.md §1.2). */
static void scan_failed(dctx *c, relay_status st, const char *message, const char *rel, bool has_path,
                        const char *decl_name)
{
	if (strstr(message, "missing "))
		dctx_status(c, IMAGE_STATUS_IMAGE_MISSING, "no file %s in the guest workspace (output %s)",
		            rel, decl_name);
	else if (strstr(message, "symlink"))
		dctx_status(c, IMAGE_STATUS_UNSAFE_PATH, "%s crosses a symbolic link in the guest: %s", rel,
		            message);
	else if (strstr(message, "is not a directory"))
		dctx_status(c, IMAGE_STATUS_UNSAFE_PATH,
		            "output %s is a file, so it takes no path; omit path for a file declaration",
		            decl_name);
	else if (strstr(message, "needs a single regular file"))
		dctx_status(
		    c, has_path ? IMAGE_STATUS_IMAGE_MISSING : IMAGE_STATUS_UNSAFE_PATH,
		    has_path
		        ? "%s is not a file in the guest workspace (output %s)"
		        : "output %2$s is a directory, so it needs a path to one image file inside it (%1$s)",
		    rel, decl_name);
	else if (strstr(message, "larger than 64 MiB"))
		dctx_status(
		    c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		    "%s is larger than 64 MiB, the limit for an image original; it stays evidence for "
		    "relay_finish",
		    rel);
	else if (strstr(message, "is not a PNG, JPEG, GIF or WebP image"))
		dctx_status(
		    c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		    "the image's bytes do not match its extension (%s has no PNG, JPEG or WebP signature)",
		    rel);
	else if (strstr(message, "source changed"))
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		            "%s changed while the guest hashed it; ask again once it is "
		            "written",
		            rel);
	else if (st == RELAY_E_TIMEOUT || st == RELAY_E_CANCELLED)
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		            "hashing %s in the guest did not finish in time: %s", rel, message);
	else
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "the guest could not hash %s: %s", rel, message);
}

/* The guest path of the target, relative to the workspace (malloc'd): the
 * declaration's path, with `path` inside it when given. NULL with the
 * status set for an undeclared output or an unsafe path. */
static char *application_rel(dctx *c, const char *name, const json_object *path_value)
{
	const char *decl_path = NULL;
	char *rel = NULL;
	strbuf declared = STRBUF_INIT;
	size_t n = json_object_is_type(c->extractions, json_type_array)
	               ? json_object_array_length(c->extractions)
	               : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *d = json_object_array_get_idx(c->extractions, i);
		if (declared.len)
			strbuf_puts(&declared, ", ");
		strbuf_puts(&declared, jsonx_get_str(d, "name") ? jsonx_get_str(d, "name") : "?");
		if (idl_str_eq(jsonx_get_str(d, "name"), name))
			decl_path = jsonx_get_str(d, "path");
	}
	if (decl_path == NULL) {
		dctx_status(
		    c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
		    "output %s was not declared at relay_acquire for %s (declared: %s); only declared "
		    "outputs can "
		    "be read",
		    name ? name : "(none)", c->name, declared.len ? strbuf_str(&declared) : "none");
		goto cleanup;
	}
	if (path_value) {
		const char *problem = relative_path_problem(path_value);
		if (problem) {
			dctx_status(c, IMAGE_STATUS_UNSAFE_PATH,
			            "path must be a relative path inside output %s, but %s; nothing was read",
			            name, problem);
			goto cleanup;
		}
		rel = strbuf_format("%s/%s", decl_path, json_object_get_string((json_object *)path_value));
	} else {
		rel = strdup(decl_path);
	}
	if (rel == NULL)
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
cleanup:
	strbuf_free(&declared);
	return rel;
}

/* The guest's image fact of workspace path `rel` (receiver scan --image):
 * the one fact {path: "", sha256, bytes, identity}, a new reference, or
 * NULL with the status set. */
static json_object *application_fact(dctx *c, const char *rel, bool has_path, const char *name)
{
	json_object *facts = NULL, *fact = NULL;
	gio_file_frame scanned = {0};
	char *inventory = NULL;
	char *base = strbuf_format("%s/workspace", c->guest_root);
	if (base == NULL) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	int64_t left = dctx_remaining_ms(c);
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st =
	    gio_rcv_scan(&c->io, base, rel, GIO_SCAN_IMAGE,
	                 (uint64_t)(left < SCAN_TIMEOUT_MS ? left : SCAN_TIMEOUT_MS), &scanned, &err);
	free(base);
	if (st == RELAY_E_PROTOCOL && err.sys_errno == EBADMSG) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		            "the guest's scan of %s answered a malformed frame", rel);
		goto cleanup;
	}
	if (st != RELAY_OK) {
		scan_failed(c, st, err.message, rel, has_path, name);
		goto cleanup;
	}
	const char *inv_path = scanned.path;
	const char *inv_sha = scanned.sha256;
	int64_t inv_bytes = (int64_t)scanned.bytes;
	c->io.receiver_ready = true; /* it answered: its transients can be removed */
	gio_add_transient(&c->io, fs_basename(inv_path));
	inventory = idl_scratch_path(c, "image-fact-", ".json");
	if (inventory == NULL ||
	    !idl_guest_pull(c, inv_path, inventory, "the image fact", IMAGE_DELIVERY_METADATA_BYTES))
		goto cleanup;
	char hex[SHA256_HEX_LEN + 1];
	uint64_t got = 0;
	if (sha256_file_hex(inventory, hex, &got, &err) != RELAY_OK || got != (uint64_t)inv_bytes ||
	    strcmp(hex, inv_sha) != 0) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		            "the image fact of %s does not match the guest's frame", rel);
		goto cleanup;
	}
	json_object *arr = NULL;
	relay_error perr;
	if (fs_read_json(inventory, IMAGE_DELIVERY_METADATA_BYTES, &arr, &perr) == RELAY_OK &&
	    json_object_is_type(arr, json_type_array))
		facts = arr;
	else
		json_object_put(arr);
	json_object *one =
	    facts && json_object_array_length(facts) == 1 ? json_object_array_get_idx(facts, 0) : NULL;
	int64_t bytes = -1;
	if (one == NULL || !idl_str_eq(jsonx_get_str(one, "path"), "") ||
	    !sha256_hex_valid(jsonx_get_str(one, "sha256")) || !jsonx_get_int(one, "bytes", &bytes) ||
	    bytes < 0 || jsonx_get_obj(one, "identity") == NULL) {
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "the guest's image fact for %s is malformed",
		            rel);
		goto cleanup;
	}
	fact = json_object_get(one);
cleanup:
	gio_file_frame_free(&scanned);
	json_object_put(facts);
	if (inventory) {
		relay_error ignored;
		fs_remove_tree(inventory, &ignored);
	}
	free(inventory);
	return fact;
}

/* The application descriptor (spec/images.md §2.1) with its imageId, or NULL
 * with the status set. */
static json_object *application_descriptor(dctx *c, const char *name, const char *path, const char *sha256,
                                           int64_t bytes, const char *mime, const char *file_name)
{
	json_object *descriptor = json_object_new_object();
	if (descriptor == NULL) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		return NULL;
	}
	jsonx_add_str(descriptor, "imageId", "");
	jsonx_add_str(descriptor, "source", "application");
	jsonx_add_str(descriptor, "enclosure", c->purpose);
	jsonx_add_str(descriptor, "name", name);
	if (path)
		jsonx_add_str(descriptor, "path", path);
	jsonx_add_str(descriptor, "sha256", sha256);
	jsonx_add_int(descriptor, "bytes", bytes);
	jsonx_add_str(descriptor, "mimeType", mime);
	char id[IMAGE_CATALOG_ID_LEN + 1];
	relay_error err;
	memset(&err, 0, sizeof err);
	if (image_catalog_image_id(c->binding_hex, descriptor, file_name, id, &err) != RELAY_OK) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot compute the image's identity: %s",
		            err.message);
		json_object_put(descriptor);
		return NULL;
	}
	jsonx_add_str(descriptor, "imageId", id);
	return descriptor;
}

/* Obtains the original of a resolved application image, records its
 * catalog entry once the bytes proved to be an image of the declared type,
 * and presents it. */
static void application_deliver(dctx *c, const json_object *entry, const original_spec *spec)
{
	unsigned char *data = NULL;
	size_t len = 0;
	json_object *stored = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (!idl_obtain_original(c, spec, &data, &len))
		return;
	if (image_catalog_put(c->catalog_dir, entry, &stored, &err) != RELAY_OK) {
		free(data);
		dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
		return;
	}
	json_object_put(stored);
	char *image_dir = fs_dirname(spec->local);
	if (image_dir)
		idl_present_and_record(c, image_dir, data, len, spec->mime);
	free(image_dir);
	free(data);
}

void idl_resolve_application(dctx *c, const json_object *target)
{
	const char *name = jsonx_get_str(target, "name");
	json_object *path_value = NULL;
	if (!json_object_object_get_ex(target, "path", &path_value) ||
	    !json_object_is_type(path_value, json_type_string))
		path_value = NULL;
	const char *path = path_value ? json_object_get_string(path_value) : NULL;
	char *rel = NULL, *remote = NULL, *approved = NULL, *what = NULL, *local = NULL;
	json_object *fact = NULL, *entry = NULL, *descriptor = NULL;
	rel = application_rel(c, name, path_value);
	if (rel == NULL)
		goto cleanup;
	const char *file_name = fs_basename(rel);
	/* The type comes from the extension; an unsupported one is answered
	 * after the guest's scan, so that a declaration used the wrong way round
	 * (a folder without path) is reported as such. */
	const char *mime = image_mime_for_path(file_name);
	if (c->closed) {
		dctx_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_CLOSED);
		goto cleanup;
	}
	if (!c->staged || c->guest_root == NULL) {
		dctx_status(
		    c, IMAGE_STATUS_IMAGE_MISSING,
		    "guest %s is not staged, so its workspace holds no outputs yet; call relay_stage first",
		    c->name);
		goto cleanup;
	}
	if (!idl_confirm_guest(c))
		goto cleanup;
	fact = application_fact(c, rel, path_value != NULL, name);
	if (fact == NULL)
		goto cleanup;
	int64_t bytes = -1;
	jsonx_get_int(fact, "bytes", &bytes);
	if (mime == NULL) {
		dctx_status(
		    c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		    "only PNG, JPEG and WebP images are supported (%s has no .png, .jpg, .jpeg or .webp "
		    "extension)",
		    file_name);
		goto cleanup;
	}
	if (bytes > (int64_t)IMAGE_MAX_ORIGINAL_BYTES) {
		dctx_status(c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		            "%s is larger than 64 MiB, the limit for an image "
		            "original",
		            rel);
		goto cleanup;
	}
	descriptor =
	    application_descriptor(c, name, path, jsonx_get_str(fact, "sha256"), bytes, mime, file_name);
	if (descriptor == NULL)
		goto cleanup;
	const char *id = jsonx_get_str(descriptor, "imageId");
	remote = strbuf_format("%s/workspace/%s", c->guest_root, rel);
	/* Declarations are confined to the workspace (spec/evidence.md §8.1). */
	approved = strbuf_format("%s/workspace", c->guest_root);
	local = idl_original_path(c->evidence, id, image_catalog_ext(mime));
	what = strbuf_format("the image %s of output %s", rel, name);
	entry =
	    idl_catalog_entry(c->binding_hex, descriptor, file_name, c->evidence, remote, approved, local);
	if (remote == NULL || approved == NULL || local == NULL || what == NULL || entry == NULL) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	char at[25];
	time_format_iso_millis(clock_now_ms(), at);
	c->out->image = idl_result_image(descriptor, local, at);
	original_spec spec =
	    idl_application_original(local, jsonx_get_str(fact, "sha256"), bytes, mime, remote, what);
	application_deliver(c, entry, &spec);
cleanup:
	json_object_put(fact);
	json_object_put(entry);
	json_object_put(descriptor);
	free(rel);
	free(remote);
	free(approved);
	free(local);
	free(what);
}
