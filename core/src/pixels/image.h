/*
 * pixels/image.h — validation and previews of saved images (spec/images.md §4, §9).
 *
 * The part of relay_image's presentation that needs no manager: given the
 * bytes of an original and its MIME type, check the container, read its
 * stored dimensions, apply the limits from the header before any decoding,
 * and produce the preview the agent sees with its presentation receipt.
 *
 *   image_inspect()  container validation and header facts (§9.2, §4)
 *   image_present()  the preview, its base64 and the receipt (§9.3–§9.5)
 *
 * Statuses. Every function returns RELAY_OK or fills `err`:
 *   RELAY_E_UNSUPPORTED  the image cannot be presented: a container rule
 *                        failed, the type is not PNG/JPEG/WebP, the data is
 *                        damaged, or it does not fit the preview bounds.
 *   RELAY_E_TOO_LARGE    the original is over a limit of §4 (64 MiB, 40,000,000
 *                        pixels, 32,768 pixels per side).
 *   RELAY_E_NO_MEMORY, RELAY_E_INTERNAL, RELAY_E_INVALID_ARGUMENT
 *                        unexpected failures.
 * image_delivery_status() maps a code to the delivery status of spec/images.md
 * §3: the first two are `presentation-unavailable` and err->message is the
 * diagnostic (it names the rule that failed); the others are
 * `transfer-failed`.
 *
 * Units: sizes in bytes, dimensions in pixels. Nothing here keeps global
 * mutable state except a CRC table filled once under pthread_once; every
 * function may be called from several threads at once.
 */
#ifndef RELAY_PIXELS_IMAGE_H
#define RELAY_PIXELS_IMAGE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/status.h"
#include "util/sha256.h"

/* The limits of spec/images.md §4 and the policy of §9.1. */
#define IMAGE_MAX_ORIGINAL_BYTES    67108864u /* 64 MiB */
#define IMAGE_MAX_PIXELS            40000000u /* width x height */
#define IMAGE_MAX_DIMENSION         32768u    /* per side */
#define IMAGE_PREVIEW_MAX_SIDE      2000u     /* preview width and height */
#define IMAGE_PREVIEW_MAX_BASE64    4194304u  /* base64 characters of the preview */
#define IMAGE_MAX_CONTAINER_RECORDS 10000u    /* PNG chunks, JPEG markers, WebP chunks */

#define IMAGE_MIME_PNG  "image/png"
#define IMAGE_MIME_JPEG "image/jpeg"
#define IMAGE_MIME_WEBP "image/webp"

/* The fixed diagnostic of a JPEG or WebP over the preview bounds (§9.3). */
#define IMAGE_DIAGNOSTIC_NOT_RESAMPLED                                                                       \
	"The image exceeds the preview bounds, and only PNG originals are resampled here."

typedef enum image_format {
	IMAGE_FORMAT_PNG = 1,
	IMAGE_FORMAT_JPEG = 2,
	IMAGE_FORMAT_WEBP = 3,
} image_format;

/* What the container says, read from the header as stored (no EXIF
 * orientation is applied). */
typedef struct image_info {
	image_format format;
	const char *mime_type; /* IMAGE_MIME_*, static */
	uint32_t width;        /* pixels */
	uint32_t height;       /* pixels */
	unsigned records;      /* chunks (PNG, WebP) or markers (JPEG) walked */
	bool has_alpha;        /* PNG: colour type 4/6 or tRNS; WebP: alpha flag or VP8L alpha hint */
	/* PNG */
	unsigned bit_depth;  /* 1, 2, 4, 8 or 16 */
	unsigned color_type; /* 0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA */
	bool interlaced;     /* Adam7 */
	/* JPEG */
	bool progressive;    /* SOF2 (else SOF0 baseline) */
	unsigned components; /* 1, 3 or 4 */
	/* WebP */
	bool lossless; /* VP8L (else VP8) */
	bool extended; /* a VP8X chunk is present */
} image_info;

/* Validates the container of bytes[0..len) (borrowed) and fills *info.
 * `mime_type` is the type the original is expected to have (from its
 * descriptor or extension); NULL takes the type from the signature. A
 * signature of another type is refused. Checks, in order: the 64 MiB size,
 * the signature, the container rules of spec/images.md §9.2 (every PNG chunk
 * CRC included), with the dimension and pixel limits applied as soon as the
 * header gives the dimensions and before anything else is read. No pixel
 * data is decoded and nothing proportional to the image's dimensions is
 * allocated (nothing at all, in fact). */
relay_status image_inspect(const void *bytes, size_t len, const char *mime_type, image_info *info,
                           relay_error *err);

/* The preview of one original. Every pointer is owned by the presentation
 * and released by image_presentation_free(). */
typedef struct image_presentation {
	unsigned char *bytes;            /* the preview's bytes (a copy when it is the original) */
	size_t len;                      /* bytes */
	char *base64;                    /* base64 of bytes, NUL-terminated, no "data:" prefix */
	size_t base64_len;               /* characters, without the NUL */
	const char *mime_type;           /* of the preview: IMAGE_MIME_*, static */
	uint32_t original_width;         /* pixels, as stored */
	uint32_t original_height;        /* pixels, as stored */
	uint32_t width;                  /* of the preview, pixels */
	uint32_t height;                 /* of the preview, pixels */
	bool transformed;                /* bytes differ from the original's */
	unsigned shrink_steps;           /* how many times the 0.75 step was taken (0 when not resampled) */
	char sha256[SHA256_HEX_LEN + 1]; /* of the preview's bytes, lowercase hex */
	json_object *receipt;            /* the presentation receipt of §9.5 (one reference, owned) */
} image_presentation;

/* Builds the preview of bytes[0..len) (borrowed) per spec/images.md §9.3:
 * validates the container for `mime_type` (NULL: from the signature);
 * decodes a PNG in full (so damaged data is caught even when it fits);
 * passes an original within 2000 x 2000 pixels and 4 MiB of base64 on
 * unchanged; resamples a larger PNG by area averaging into the 2000 x 2000
 * box (never enlarging) and shrinks it by 0.75 steps until its base64 fits;
 * refuses a JPEG or WebP that does not fit; validates the preview again.
 * On success *out is filled (zeroed first); on failure it holds nothing to
 * free. The original is never modified. */
relay_status image_present(const void *bytes, size_t len, const char *mime_type, image_presentation *out,
                           relay_error *err);

/* Releases what image_present() filled and zeroes *p. NULL is a no-op. */
void image_presentation_free(image_presentation *p);

/* A new policy object of §9.1 (one reference, owned by the caller), with
 * keys in the order the specification shows. NULL on allocation failure. */
json_object *image_policy_new(void);

/* The delivery status (spec/images.md §3) for a code returned here:
 * "presentation-unavailable" or "transfer-failed". Static string. */
const char *image_delivery_status(relay_status code);

/* The MIME type an application image gets from its file name (§1.2): ".png",
 * ".jpg", ".jpeg", ".webp" (case-insensitive), else NULL. Static string. */
const char *image_mime_for_path(const char *path);

/* The MIME type whose signature starts bytes[0..len): PNG, JPEG or WebP;
 * "image/gif" for a GIF (which is evidence but never presented); else NULL. */
const char *image_mime_from_signature(const void *bytes, size_t len);

/* Characters of the base64 of `len` bytes (with padding), without a NUL. */
size_t image_base64_len(size_t len);

/* Returns the base64 (standard alphabet, padded) of data[0..len) as a
 * malloc'd NUL-terminated string (free()), its length in *len_out (may be
 * NULL); NULL on allocation failure. */
char *image_base64_encode(const void *data, size_t len, size_t *len_out);

#endif
