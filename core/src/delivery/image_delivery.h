/*
 * delivery/image_delivery.h — saved images as the tools deliver them
 * (images.md; tools.md §3.6 step 9, §3.7): selector resolution with its
 * cross-checks, the lookup of an original on the host and then in the
 * guest within one 90-second deadline and a shared budget of three
 * byte-transfer attempts, publication, presentation and delivery receipts,
 * and the imageDelivery object of run results.
 *
 * Users:
 *   relay_image (tool_image.c)       image_delivery_retrieve()
 *   relay_script (run_request.c)     image_delivery_for_run(): the
 *                                    after-image of a recorded run: pending
 *                                    with its identity, or attached when the
 *                                    original is already verified on the host
 *   step downloads (downloads.c)     image_delivery_publish_step()
 *   all of them                      image_delivery_display_image(), the
 *                                    identity of one snapshot descriptor
 *
 * Identities, the catalog and publication themselves are in
 * image_catalog.h (host files only).
 *
 * Every function is called WITHOUT the manager's lock; it copies what it
 * needs from the guest under the lock. Returned JSON objects are new
 * references owned by the caller.
 */
#ifndef RELAY_DELIVERY_IMAGE_DELIVERY_H
#define RELAY_DELIVERY_IMAGE_DELIVERY_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "session/manager_internal.h"
#include "relay/status.h"

/* images.md §4, §6. */
#define IMAGE_DELIVERY_DEADLINE_MS    90000
#define IMAGE_DELIVERY_ATTEMPTS       3
#define IMAGE_DELIVERY_METADATA_BYTES (4 * 1024 * 1024)
#define IMAGE_DELIVERY_RECOVERY_CALLS 2

/* The statuses of images.md §3 (static strings; compare with strcmp). */
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

/* The fixed diagnostics of images.md §3. */
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
	json_object *presentation; /* the presentation receipt (images.md §9.5), or NULL */
	char *diagnostic;          /* what happened, or NULL */
	char *preview_base64;      /* the image block's data (no data: prefix), or NULL */
	const char *preview_mime;  /* its MIME type (static), with preview_base64 */
} image_delivery_result;

void image_delivery_result_clear(image_delivery_result *r);

/* The imageDelivery object {status, image?, diagnostic?, presentation?}. */
json_object *image_delivery_json(const image_delivery_result *r);

/* False for attached, pending and not-requested; true for every failure
 * status (images.md §3, §8.2). */
bool image_delivery_status_is_error(const char *status);

/* The headline of relay_script and relay_image (images.md §8.2): the compact
 * one-line JSON {"imageDelivery":{…},"executionFailed":<bool>} (malloc'd). */
char *image_delivery_headline(const json_object *image_delivery, bool execution_failed);

/* Moves the preview into a tool result's image block (tools.md §2.3);
 * no-op without a preview. */
void image_delivery_attach(image_delivery_result *r, tool_result *result);

/* The image's part of a result's lead sentence (tools.md §2.3):
 * "<what> attached (image-3b8f0a5c…)", "<what> pending (…)", "no <what>
 * (not requested)", "<what> capture-failed". malloc'd, or NULL. */
char *image_delivery_phrase(const json_object *image_delivery, const char *what);

/* The capability object relay_probe and relay_stage return (images.md §6.4). */
json_object *image_delivery_capability_json(void);

/*
 * relay_image (tools.md §3.7, images.md §7). `target` is the validated
 * target object; `started_mono_ms` the clock_monotonic_ms() at the start of
 * the call (the 90 s deadline counts from it). Fills *out (zeroed first)
 * with exactly one status. Never replays input, never captures, never
 * exports a folder, never acquires. Runs on the guest's queue; a closed
 * guest is allowed and answers stale-reference.
 */
void image_delivery_retrieve(manager *m, guest *g, const json_object *target, relay_call *call,
                             int64_t started_mono_ms, image_delivery_result *out);

/*
 * The imageDelivery of a recorded run's result (images.md §8.1, tools.md
 * §3.6 step 9). `request` is the run's request (guest.md §6; its
 * snapshots.group and capture decide the plan; NULL: a standalone run with
 * snapshots on), `receipt` the receipt the host pulled and validated (NULL
 * when it did not come home), `recording` the run's evidence folder (NULL:
 * the guest's current one). Gives:
 *   not-requested     snapshots off, or a first/member group event, or
 *                     imageEvidence not-requested
 *   pending           without image when the receipt is missing; with the
 *                     after-image's identity (originalPath where the
 *                     background download publishes it) otherwise; its
 *                     catalog entry is recorded
 *   attached          the original is already published and verified on
 *                     the host: the preview is in *out (never waited for)
 *   capture-failed / capture-unknown   from the receipt
 *   integrity-failed  a malformed after descriptor or a catalog conflict
 * Never talks to the guest.
 */
void image_delivery_for_run(manager *m, guest *g, const json_object *request, const json_object *receipt,
                            const char *recording, image_delivery_result *out);

/*
 * The display image of one snapshot descriptor of a receipt
 * (imageEvidence.snapshots[i], guest.md §7.7) of guest `g`, recorded in the
 * recording `recording` (NULL: the current one): the descriptor of
 * images.md §2.1 with imageId and originalPath
 * (<recording>/host/images/<imageId>/original.png), keys in the order of
 * tools.md §3.6. With `catalog` true the catalog entry is recorded (or an
 * existing one verified). NULL with err on a malformed descriptor
 * (RELAY_E_PROTOCOL) or a catalog conflict (RELAY_E_INTEGRITY).
 * *file_name_out (may be NULL) receives the snapshot's fileName (malloc'd).
 */
json_object *image_delivery_display_image(manager *m, guest *g, const char *recording,
                                          const json_object *snapshot, bool catalog, char **file_name_out,
                                          relay_error *err);

/*
 * For the background step download (evidence.md §5.2, last paragraph):
 * after the step's files were placed under
 * <recording>/host/steps/<executionId>/, publishes each display original of
 * `receipt` (both phases) to <recording>/host/images/<imageId>/original.png
 * with a delivery receipt {image, at, status: "downloaded"}, recording the
 * catalog entries. *published_out (may be NULL) receives
 * [{imageId, phase}] of what was published. A failure of one image stops
 * (RELAY_E_INTEGRITY for a conflicting original or catalog entry).
 */
relay_status image_delivery_publish_step(manager *m, guest *g, const char *recording,
                                         const json_object *receipt, json_object **published_out,
                                         relay_error *err);

/*
 * guest.md §16.3: the after-snapshot original that came on the run's own
 * answer (`data`, `len`; borrowed), described by the answer's part fact
 * `part` ({path, bytes, sha256}), is checked against the receipt's after
 * descriptor (path, size, SHA-256, PNG container) and published exactly as
 * image_delivery_publish_step() publishes a downloaded one (original,
 * delivery receipt, catalog entry), so that image_delivery_for_run() then
 * attaches it. A later step download finds it published and keeps it.
 * RELAY_E_INTEGRITY when it is not the after-snapshot's bytes.
 */
relay_status image_delivery_publish_answer(manager *m, guest *g, const char *recording,
                                           const json_object *receipt, const json_object *part,
                                           const void *data, size_t len, relay_error *err);

#endif
