/*
 * delivery/image_publish.h — display originals that came home outside a
 * relay_image: with a step's background download (downloads.h) or on a
 * recorded run's own answer (runs/). Each is checked against the run's
 * receipt, published to <recording>/host/images/<imageId>/original.png
 * with a delivery receipt {image, at, status: "downloaded"}, and its
 * catalog entry recorded, so that a later delivery attaches it.
 *
 * Never talks to the guest; needs nothing of the download queue (which
 * calls it), so the queue and image delivery depend on each other one way
 * only: image_guest.c -> downloads.h -> image_publish.h.
 *
 * Called WITHOUT the manager's lock.
 */
#ifndef RELAY_DELIVERY_IMAGE_PUBLISH_H
#define RELAY_DELIVERY_IMAGE_PUBLISH_H

#include <json-c/json.h>
#include <stddef.h>

#include "guestio/receiver_api.h"
#include "relay/status.h"
#include "session/manager_internal.h"
#include "util/error.h"

/*
 * For the background step download (spec/evidence.md §5.2, last paragraph):
 * after the step's files were placed under
 * <recording>/host/steps/<executionId>/, publishes each display original of
 * `receipt` (both phases) to <recording>/host/images/<imageId>/original.png
 * with a delivery receipt {image, at, status: "downloaded"}, recording the
 * catalog entries. *published_out (may be NULL) receives
 * [{imageId, phase}] of what was published. A failure of one image stops
 * (RELAY_E_INTEGRITY for a conflicting original or catalog entry).
 */
relay_status image_delivery_publish_step(session_manager *m, guest *g, const char *recording,
                                         const gio_receipt *receipt, json_object **published_out,
                                         relay_error *err);

/*
 * spec/guest.md §16.3: the after-snapshot original that came on the run's own
 * answer (`data`, `len`; borrowed), described by the answer's part fact
 * `part` ({path, bytes, sha256}), is checked against the receipt's after
 * descriptor (path, size, SHA-256, PNG container) and published exactly as
 * image_delivery_publish_step() publishes a downloaded one (original,
 * delivery receipt, catalog entry), so that image_delivery_for_run() then
 * attaches it. A later step download finds it published and keeps it.
 * RELAY_E_INTEGRITY when it is not the after-snapshot's bytes.
 */
relay_status image_delivery_publish_answer(session_manager *m, guest *g, const char *recording,
                                           const gio_receipt *receipt, const json_object *part,
                                           const void *data, size_t len, relay_error *err);

#endif
