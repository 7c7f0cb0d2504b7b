/*
 * images/image_catalog.h — the host-only half of image delivery
 * (spec/images.md §2, §5): canonical JSON, image identities, the session's
 * private image catalog, publication of originals and delivery receipts.
 *
 * Nothing here talks to a guest or reads manager state: every function
 * takes the folders and identities it works on, so the step downloads
 * (downloads.c), relay_script and relay_image share one implementation and
 * unit tests can drive it directly. image_delivery.h builds on it.
 *
 *   image_catalog_canonical_json()   §2.2 canonical JSON (sorted keys, no spaces)
 *   image_catalog_binding()      sha256(canonical([owner, enclosure, backend]))
 *   image_catalog_image_id()       "image-" + sha256(canonical([binding, descriptor', fileName]))
 *   image_catalog_put()   the immutable catalog entry (§2.3), verified
 *                            when it exists, never replaced
 *   image_catalog_get()     an entry by imageId, checked against its id
 *   image_staging_*()        publication by hard link (§5)
 *   image_catalog_receipt_write()  host/images/<imageId>/delivery-<uuid>.json
 *
 * JSON arguments are borrowed; returned objects are new references owned by
 * the caller. Every function may run on several threads at once: files are
 * created with O_EXCL or link(), never overwritten.
 */
#ifndef RELAY_IMAGES_IMAGE_CATALOG_H
#define RELAY_IMAGES_IMAGE_CATALOG_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/status.h"
#include "util/sha256.h"

/* "image-" + 64 lowercase hex digits. */
#define IMAGE_CATALOG_ID_LEN 70

/* The canonical JSON of spec/images.md §2.2 (malloc'd, free()): object keys sorted
 * by their UTF-16 code units, no whitespace, integers in plain decimal,
 * strings escaped only for '"', '\\', \b \f \n \r \t and other control
 * characters as \u00xx (lowercase hex), everything else raw UTF-8.
 * RELAY_E_INVALID_ARGUMENT when the value holds a floating-point number or
 * a string that is not valid UTF-8; RELAY_E_NO_MEMORY. */
relay_status image_catalog_canonical_json(const json_object *value, char **out, relay_error *err);

/* binding = sha256_hex(canonical([owner, enclosure, backend])); `backend`
 * (may be NULL for JSON null) is the guest's binding object
 * {machine, endpoint, store, environmentFingerprint}. */
relay_status image_catalog_binding(const char *owner, const char *enclosure, const json_object *backend,
                                   char out[SHA256_HEX_LEN + 1], relay_error *err);

/* imageId = "image-" + sha256_hex(canonical([binding, descriptor', fileName]))
 * where descriptor' is `descriptor` without "imageId", "originalPath" and
 * "retrievedAt", and `file_name` NULL stands for JSON null. */
relay_status image_catalog_image_id(const char *binding_hex, const json_object *descriptor,
                                    const char *file_name, char out[IMAGE_CATALOG_ID_LEN + 1],
                                    relay_error *err);

/* True for "image-" followed by exactly 64 lowercase hex digits. */
bool image_catalog_id_valid(const char *text);

/* The file extension of an original for a MIME type: "png", "jpg",
 * "webp"; NULL for any other type. Static string. */
const char *image_catalog_ext(const char *mime_type);

/*
 * The catalog (spec/images.md §2.3). `catalog_dir` is
 * <state root>/<session key>/image-catalog/<purpose>; it is created (0700)
 * when missing. An entry is
 *   {"binding", "descriptor" (with imageId; without originalPath and
 *    retrievedAt), "fileName", "recording", "remote", "approvedRoot", "local"}
 *
 * image_catalog_put() writes the entry as <imageId>.json with link()
 * from a fsync'd temporary file, so it appears whole or not at all and an
 * existing one is never replaced. When the entry exists, its identity parts
 * (binding, descriptor, fileName, remote, approvedRoot) must equal the new
 * derivation, else RELAY_E_INTEGRITY; *stored_out then receives the existing
 * entry (whose recording and local are the ones the original was published
 * under). *stored_out (may be NULL) is a new reference.
 */
relay_status image_catalog_put(const char *catalog_dir, const json_object *entry, json_object **stored_out,
                               relay_error *err);

/* Reads <catalog_dir>/<image_id>.json and checks that it is a well-formed
 * entry whose identity recomputes to `image_id` (RELAY_E_INTEGRITY
 * otherwise). RELAY_E_NOT_FOUND when there is no such entry. */
relay_status image_catalog_get(const char *catalog_dir, const char *image_id, json_object **entry_out,
                               relay_error *err);

/* Recomputes an entry's imageId from its binding, descriptor and fileName
 * and compares it with `image_id` and descriptor.imageId. */
relay_status image_catalog_check(const json_object *entry, const char *image_id, relay_error *err);

/*
 * Publication (spec/images.md §5). The original of an image lives at
 * <image_dir>/original.<ext>, where image_dir is
 * <recording>/host/images/<imageId>. Bytes are first written into a fresh
 * staging folder <image_dir>/.relay-image-<random>/, verified against the
 * identity's SHA-256 and size, then hard-linked into place (link() never
 * overwrites); the staging folder is removed, so the published file ends
 * with one link. An existing original must hold the same bytes.
 */
typedef struct image_catalog_staging {
	char *image_dir; /* <recording>/host/images/<imageId> (owned) */
	char *dir;       /* the staging folder (owned) */
	char *file;      /* <dir>/original.<ext>: write or pull the bytes here (owned) */
	char *published; /* <image_dir>/original.<ext> (owned) */
} image_catalog_staging;

/* Creates image_dir (0700) and a fresh staging folder in it. */
relay_status image_catalog_staging_open(const char *image_dir, const char *ext, image_catalog_staging *out,
                                        relay_error *err);

/* Verifies staging->file against `sha256`/`bytes` and links it to the
 * published name. *already_out (may be NULL) says an identical original was
 * there before. RELAY_E_INTEGRITY when the staged bytes differ from the
 * identity, or an existing original holds other bytes. The staging folder
 * is removed whatever happens. */
relay_status image_catalog_staging_publish(image_catalog_staging *staging, const char *sha256, uint64_t bytes,
                                           bool *already_out, relay_error *err);

/* Removes the staging folder (if any) and frees the strings. */
void image_catalog_staging_close(image_catalog_staging *staging);

/* Hashes <image_dir>/original.<ext> when it exists. RELAY_OK with *present
 * false when there is none; RELAY_E_INTEGRITY when it exists with another
 * size or SHA-256 than given; RELAY_E_UNSAFE_PATH when it is not a regular
 * file (a link, a folder). */
relay_status image_catalog_original_check(const char *image_dir, const char *ext, const char *sha256,
                                          uint64_t bytes, bool *present, relay_error *err);

/* Writes <image_dir>/delivery-<uuid>.json durably (0600) from `receipt`:
 * {image, presentation, at, status: "attached"} or {image, at, status:
 * "downloaded"}. *path_out (may be NULL) receives the path (malloc'd). */
relay_status image_catalog_receipt_write(const char *image_dir, const json_object *receipt, char **path_out,
                                         relay_error *err);

#endif
