/*
 * images/image_result.h — the answer of an image delivery (spec/images.md §3,
 * §8): its statuses and fixed diagnostics, the limits of spec/images.md §4 and
 * §6, the imageDelivery object, the headline and lead phrase, and the
 * capability object relay_probe and relay_stage return.
 *
 * No guest, no manager: pure data. The tool handlers turn a result into an
 * MCP result (tools/tool_image.c, the run result of runs/).
 */
#ifndef RELAY_IMAGES_IMAGE_RESULT_H
#define RELAY_IMAGES_IMAGE_RESULT_H

#include <json-c/json.h>
#include <stdbool.h>

/* spec/images.md §4, §6. */
#define IMAGE_DELIVERY_DEADLINE_MS    90000
#define IMAGE_DELIVERY_ATTEMPTS       3
#define IMAGE_DELIVERY_METADATA_BYTES (4 * 1024 * 1024)
#define IMAGE_DELIVERY_RECOVERY_CALLS 2

/* The statuses of spec/images.md §3 (static strings; compare with strcmp). */
#define IMAGE_STATUS_ATTACHED                 "attached"
#define IMAGE_STATUS_PENDING                  "pending"
#define IMAGE_STATUS_NOT_REQUESTED            "not-requested"
#define IMAGE_STATUS_DOWNLOADED               "downloaded"
#define IMAGE_STATUS_CAPTURE_FAILED           "capture-failed"
#define IMAGE_STATUS_CAPTURE_UNKNOWN          "capture-unknown"
#define IMAGE_STATUS_UNAUTHORIZED_REFERENCE   "unauthorized-reference"
#define IMAGE_STATUS_UNSAFE_PATH              "unsafe-path"
#define IMAGE_STATUS_IMAGE_MISSING            "image-missing"
#define IMAGE_STATUS_STALE_REFERENCE          "stale-reference"
#define IMAGE_STATUS_INTEGRITY_FAILED         "integrity-failed"
#define IMAGE_STATUS_TRANSFER_FAILED          "transfer-failed"
#define IMAGE_STATUS_PRESENTATION_UNAVAILABLE "presentation-unavailable"

/* The fixed diagnostics of spec/images.md §3. */
#define IMAGE_DIAG_UNEXPECTED  "image delivery could not complete; execution was not replayed"
#define IMAGE_DIAG_NOT_STARTED "image delivery was cancelled or its deadline passed before it started"
#define IMAGE_DIAG_CLOSED                                                                                    \
	"the guest is closed or its evidence sealed; read the delivered originals with host file tools"
#define IMAGE_DIAG_GUEST_GONE    "the saved image's guest is no longer available"
#define IMAGE_DIAG_STATE_GONE    "the saved image's original is not on the host and its guest state is gone"
#define IMAGE_DIAG_PLAN          "the declared snapshot plan does not capture this phase"
#define IMAGE_DIAG_DIAGNOSTIC    "Diagnostic execution has no screenshot evidence."
#define IMAGE_DIAG_SNAPSHOTS_OFF "snapshots are off for this image: its inventory lists no capture software"

/* One delivery's answer: {status, image?, diagnostic?, presentation?} and
 * the preview for the image block. Owned; release with
 * image_delivery_result_clear(). */
typedef struct image_delivery_result {
	const char *status;        /* IMAGE_STATUS_* (static) */
	json_object *image;        /* the image descriptor as results show it, or NULL */
	json_object *presentation; /* the presentation receipt (spec/images.md §9.5), or NULL */
	char *diagnostic;          /* what happened, or NULL */
	char *preview_base64;      /* the image block's data (no data: prefix), or NULL */
	const char *preview_mime;  /* its MIME type (static), with preview_base64 */
} image_delivery_result;

void image_delivery_result_clear(image_delivery_result *r);

/* The imageDelivery object {status, image?, diagnostic?, presentation?}. */
json_object *image_delivery_json(const image_delivery_result *r);

/* False for attached, pending and not-requested; true for every failure
 * status (spec/images.md §3, §8.2). */
bool image_delivery_status_is_error(const char *status);

/* The headline of relay_script and relay_image (spec/images.md §8.2): the compact
 * one-line JSON {"imageDelivery":{…},"executionFailed":<bool>} (malloc'd). */
char *image_delivery_headline(const json_object *image_delivery, bool execution_failed);

/* Hands the preview to the caller for the result's image block (spec/tools.md
 * §2.3): *base64_io and *mime_io (malloc'd, owned by the caller; earlier
 * values are freed) take the preview's data and MIME type, and the result
 * keeps no preview. No-op without a preview. False only when out of memory
 * (nothing is changed then). */
bool image_delivery_take_preview(image_delivery_result *r, char **base64_io, char **mime_io);

/* The image's part of a result's lead sentence (spec/tools.md §2.3):
 * "<what> attached (image-3b8f0a5c…)", "<what> pending (…)", "no <what>
 * (not requested)", "<what> capture-failed". malloc'd, or NULL. */
char *image_delivery_phrase(const json_object *image_delivery, const char *what);

/* The capability object relay_probe and relay_stage return (spec/images.md §6.4). */
json_object *image_delivery_capability_json(void);

#endif
