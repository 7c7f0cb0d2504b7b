/*
 * delivery/packaging.h — bringing a guest's recording home and sealing its
 * package: the state pull with coalescing (spec/evidence.md §5.6), the
 * disk-space precheck (§6), display originals materialised and the merge
 * (§7), the delivery of earlier recordings and of the package itself
 * (§9.1 steps 6-7, §11), and the packaging step of relay_release (§9.2,
 * spec/tools.md §3.10 step 3).
 *
 * Call on the guest's queue, without the manager's lock.
 */
#ifndef RELAY_DELIVERY_PACKAGING_H
#define RELAY_DELIVERY_PACKAGING_H

#include <json-c/json.h>
#include <stdbool.h>

#include "evidence/package.h"
#include "guestio/guest_io.h"

/* Pulls R/state into <attempts_dir>/<random>/state and merges it into
 * <package_dir>/state:
 *   - one `receiver scan` of R/state (names that could never verify are
 *     refused: integrity-failed);
 *   - the space precheck for the scan's total ("<operation> needs N bytes;
 *     F free; S short; <consequence>", RELAY_E_NO_SPACE) before anything
 *     is pulled;
 *   - host candidates (the package's state/, host/steps/<id>/, receipts pulled
 *     after runs, published image originals) are copied and re-hashed; the
 *     rest arrives in one evidence archive (chunked), or one file at a time
 *     when the archive cannot be made or read (`archive-fallback` event);
 *   - a second scan must equal the first ("source changed during state
 *     pull", RELAY_E_INTEGRITY);
 *   - display originals verified under host/images/ fill snapshots the
 *     incoming tree lacks;
 *   - evidence_state_merge (the earlier state/ set aside under
 *     <attempts_dir>/previous/attempt-NNNN/state).
 * *stats_out (may be NULL) receives {files, bytes, pulled, copied}. */
relay_status packaging_pull_state(guest_io *io, const char *package_dir, const char *attempts_dir,
                                  const char *operation, const char *consequence, json_object **stats_out,
                                  relay_error *err);

/* The same for the recording in the guest folder R/<source_rel> ("state",
 * or "recordings/<id>" once a recording reset has moved it): its files land
 * at <package_dir>/state/<path> whatever their folder in the guest. A
 * recording reset can use it with `package_dir` the folder being archived
 * and `attempts_dir` <that folder>.reset-attempts. */
relay_status packaging_pull_recording(guest_io *io, const char *source_rel, const char *package_dir,
                                      const char *attempts_dir, const char *operation,
                                      const char *consequence, json_object **stats_out, relay_error *err);

/* The identity of the guest's packages for OPENING.txt, the viewer and the
 * manifest (guest name, image, acquire time, taskId = the purpose). The
 * strings are copied into `storage` and live as long as it. */
typedef struct packaging_identity {
	evidence_identity identity;
	char *guest, *image, *purpose;
	char acquired_at[25];
} packaging_identity;
void packaging_identity_init(session_manager *m, guest *g, packaging_identity *out);
void packaging_identity_free(packaging_identity *id);

/* Delivers each earlier recording of the guest (previousEvidence) that has
 * no manifest yet, as its own package (no guest I/O). RELAY_OK, or the
 * first failure ("package verification failed: ..."). */
relay_status packaging_deliver_previous(session_manager *m, guest *g, relay_error *err);

/* Writes and verifies the guest's current package (evidence_package_deliver
 * with the guest's identity). On failure the derived files this attempt
 * created are already removed; the caller records the delivery error. */
relay_status packaging_deliver(session_manager *m, guest *g, evidence_delivery_result *result,
                               relay_error *err);

/* Records a failed delivery: <evidence>.delivery-error.json {error, at} and
 * a `delivery-failed` event. */
void packaging_record_delivery_error(session_manager *m, guest *g, const char *error_text);

/* relay_release step 3 (the release path, lease/release.c, calls it): for
 * a staged guest not delivered, closes the download queue (coalescedBy
 * "release"), pulls every declared output it can (each failure recorded
 * as extraction-incomplete or
 * workspace-incomplete), pulls and merges the state and delivers the
 * package. A packaging failure (the precheck included) is written to
 * <evidence>.delivery-error.json and returned in deliveryError; it never
 * stops the release. Returns {delivered, deliveryVerified, manifestPath,
 * deliveryError, incompleteExtractions}. */
json_object *release_package(session_manager *m, guest *g, relay_call *call);

#endif
