/*
 * delivery/image_delivery.h — saved images as the tools deliver them
 * (images.md; spec/tools.md §3.6 step 9, §3.7): selector resolution with its
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
 *                                    original is already verified on the host;
 *                                    image_delivery_publish_answer()
 *   step downloads (download_job.c)  image_delivery_publish_step()
 *                                    (image_publish.h)
 *   all of them                      image_delivery_display_image()
 *                                    (image_identity.h), the identity of one
 *                                    snapshot descriptor
 *
 * This header gathers the public parts: the answer (image_result.h),
 * identities (image_identity.h) and publication (image_publish.h); the
 * files behind relay_image are listed in delivery.h. Identities, the
 * catalog and publication themselves are in image_catalog.h (host files
 * only).
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

#include "delivery/image_identity.h"
#include "delivery/image_publish.h"
#include "delivery/image_result.h"
#include "guestio/receiver_api.h"
#include "relay/status.h"
#include "session/manager_internal.h"

/*
 * relay_image (spec/tools.md §3.7, spec/images.md §7). `target` is the validated
 * target object; `started_mono_ms` the clock_monotonic_ms() at the start of
 * the call (the 90 s deadline counts from it). Fills *out (zeroed first)
 * with exactly one status. Never replays input, never captures, never
 * exports a folder, never acquires. Runs on the guest's queue; a closed
 * guest is allowed and answers stale-reference.
 */
void image_delivery_retrieve(session_manager *m, guest *g, const json_object *target, relay_call *call,
                             int64_t started_mono_ms, image_delivery_result *out);

/*
 * The imageDelivery of a recorded run's result (spec/images.md §8.1, spec/tools.md
 * §3.6 step 9). `request` is the run's request (spec/guest.md §6; its
 * snapshots.group and capture decide the plan; NULL: a standalone run with
 * snapshots on), `receipt` the receipt the host pulled and validated, as
 * runs/ read it (NULL when it did not come home), `recording` the run's evidence folder (NULL:
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
void image_delivery_for_run(session_manager *m, guest *g, const json_object *request,
                            const gio_receipt *receipt, const char *recording, image_delivery_result *out);

#endif
