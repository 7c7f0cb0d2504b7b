/*
 * delivery/image_identity.h — what a display image is (spec/images.md §1.1,
 * §2): the checks of a receipt's imageEvidence and snapshot descriptors
 * (spec/guest.md §7.7), the snapshot plan of a request, the display descriptor
 * with its imageId, the catalog entry and the result image. Host files
 * only (the catalog); never the guest.
 */
#ifndef RELAY_DELIVERY_IMAGE_IDENTITY_H
#define RELAY_DELIVERY_IMAGE_IDENTITY_H

#include <json-c/json.h>
#include <stdbool.h>

#include "delivery/image_context.h"
#include "relay/status.h"
#include "session/manager_internal.h"

/* Validates one snapshot descriptor of a receipt (spec/guest.md §7.7). */
bool idl_snapshot_valid(const json_object *s, char *why, size_t why_len);

/* A catalog entry (spec/images.md §2.3); `descriptor` is copied. */
json_object *idl_catalog_entry(const char *binding_hex, const json_object *descriptor, const char *file_name,
                               const char *recording, const char *remote, const char *approved_root,
                               const char *local);

char *idl_original_path(const char *recording, const char *image_id, const char *ext);

/* The image object of a result: the catalog descriptor with originalPath
 * (and retrievedAt when given). */
json_object *idl_result_image(const json_object *descriptor, const char *original_path,
                              const char *retrieved_at);

/* Identity and catalog entry of a display snapshot of the recording
 * `recording` (sessionId's evidence folder). On success *entry_out is the
 * stored entry (new reference) and the return value the result image. */
json_object *idl_display_identity(dctx *c, const char *recording, const json_object *snap, bool record,
                                  json_object **entry_out, relay_error *err);

/* The snapshot plan of a request (spec/guest.md §6, §10): whether `phase` is
 * captured. Sets not-requested and returns false when it is not. */
bool idl_plan_captures(dctx *c, const json_object *request, const char *phase);

/* Validates a receipt's imageEvidence for (sessionId, executionId). */
bool idl_image_evidence_valid(const json_object *ev, const char *session_id, const char *execution_id,
                              char *why, size_t why_len);

json_object *idl_snapshot_for_phase(const json_object *ev, const char *phase);

/*
 * The display image of one snapshot descriptor of a receipt
 * (imageEvidence.snapshots[i], spec/guest.md §7.7) of guest `g`, recorded in the
 * recording `recording` (NULL: the current one): the descriptor of
 * spec/images.md §2.1 with imageId and originalPath
 * (<recording>/host/images/<imageId>/original.png), keys in the order of
 * spec/tools.md §3.6. With `catalog` true the catalog entry is recorded (or an
 * existing one verified). NULL with err on a malformed descriptor
 * (RELAY_E_PROTOCOL) or a catalog conflict (RELAY_E_INTEGRITY).
 * *file_name_out (may be NULL) receives the snapshot's fileName (malloc'd).
 */
json_object *image_delivery_display_image(session_manager *m, guest *g, const char *recording,
                                          const json_object *snapshot, bool catalog, char **file_name_out,
                                          relay_error *err);

#endif
