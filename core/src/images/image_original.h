/*
 * images/image_original.h — the original of a resolved image: found on
 * the host first (published, then host copies), else pulled from the guest
 * (image_guest.h), published in the catalog's image folder, read back
 * verified, presented (spec/images.md §9) and its delivery receipt written.
 */
#ifndef RELAY_IMAGES_IMAGE_ORIGINAL_H
#define RELAY_IMAGES_IMAGE_ORIGINAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "images/image_context.h"

/* What is known of one original and where it may be found. */
typedef struct original_spec {
	const char *local;             /* where it is published (the catalog's "local") */
	const char *sha256;            /* the identity's */
	uint64_t bytes;                /* the identity's */
	const char *mime;              /* the identity's */
	const char *const *candidates; /* host copies to try, NULL-terminated (may be NULL) */
	const char *remote;            /* the guest path, or NULL when the guest must not be asked */
	const char *no_guest_status;   /* when remote is NULL and no copy is on the host */
	const char *no_guest_diag;
	bool check_signature; /* the bytes must carry the signature of `mime` (application images) */
	const char *what;     /* "the image x.png", for messages */
} original_spec;

/* The original of an application image (a declared output's file, spec/images.md
 * §1.2): asked of the guest at `remote`, no host copies besides `local`, its
 * signature checked, stale-reference once the guest is gone. Borrows every
 * string. */
original_spec idl_application_original(const char *local, const char *sha256, int64_t bytes, const char *mime,
                                       const char *remote, const char *what);

/* Reads a published original into memory and checks its bytes once more. */
bool idl_read_verified(dctx *c, const char *path, const original_spec *spec, unsigned char **data_out,
                       size_t *len_out);

/* Finds the original on the host (published, then the candidates), else
 * pulls it from the guest; publishes it; returns its verified bytes. */
bool idl_obtain_original(dctx *c, const original_spec *spec, unsigned char **data_out, size_t *len_out);

/* Presents verified bytes (spec/images.md §9) and writes the delivery receipt.
 * The preview stays in the answer even when the receipt cannot be written
 * (spec/mcp.md §7: an image that was produced stays beside isError). */
void idl_present_and_record(dctx *c, const char *image_dir, const unsigned char *data, size_t len,
                            const char *mime);

/* Obtains, publishes and presents the original of a resolved image. */
void idl_deliver(dctx *c, const original_spec *spec);

#endif
