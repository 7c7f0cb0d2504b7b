/*
 * evidence/download.h — the guest-free parts of background step downloads
 * and of state pulls (spec spec/evidence.md §5.2, §5.4 item 4, §5.5, §5.6 item 6):
 * a step's file set derived from its receipt, the expected list handed to
 * evidence_archive_extract, placing an accepted staging tree under
 * host/steps/<executionId>/, the job record, and host candidates.
 *
 * The queue, its worker and every guest call belong to the manager; these
 * functions touch only the host's file system. Paths are relative to the
 * guest root R ("state/..."). JSON in and out is json-c; returned objects
 * are owned by the caller (json_object_put), arguments are borrowed.
 */
#ifndef RELAY_EVIDENCE_DOWNLOAD_H
#define RELAY_EVIDENCE_DOWNLOAD_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "relay/status.h"

/* The step's file set (§5.2) as the expected list for
 * evidence_archive_extract: a JSON array of {path[, bytes, sha256]}, in this
 * order: started marker, receipt, execution record, the action record of each
 * action named in imageEvidence.snapshots, then each snapshot
 * (state/snapshots/<sessionId>/<fileName>) with the descriptor's bytes and
 * sha256. `receipt` may be NULL (the host has none): then the first four with
 * actionId "action-<executionId>", to be archived in present mode.
 * `receipt_sha256`/`receipt_bytes` (optional: NULL / -1) pin the receipt's
 * bytes to the copy pulled after the run. NULL on a malformed receipt, with
 * the reason in err (RELAY_E_PROTOCOL). */
json_object *evidence_step_expected(const char *execution_id, const json_object *receipt,
                                    const char *receipt_sha256, int64_t receipt_bytes, relay_error *err);

/* The same as a NULL-terminated array of paths for `receiver archive`
 * arguments (owned by caller: free each, then the array). */
char **evidence_step_paths(const json_object *expected);
void evidence_free_paths(char **paths);

/* Moves the files of an accepted extraction (facts_json: the array returned
 * by evidence_archive_extract) from `staging_dir` to
 * <package_dir>/host/steps/<execution_id>/<path> by rename (same volume). A
 * file already there with the same bytes is kept and the staged copy dropped;
 * one with other bytes is RELAY_E_INTEGRITY and nothing more is moved. When
 * host/steps/<execution_id> does not exist yet and `staging_dir` holds exactly
 * the facts' files, `staging_dir` itself is renamed to it (gone afterwards). */
relay_status evidence_step_place(const char *package_dir, const char *execution_id, const char *staging_dir,
                                 const char *facts_json, relay_error *err);

/* Writes host/evidence-downloads/<executionId>.json durably (§5.5) from
 * `record` (must hold executionId). */
relay_status evidence_write_download_record(const char *package_dir, const json_object *record,
                                            relay_error *err);

/* Host candidates (§5.6 item 6). Looks for a host file that can stand in for
 * the guest file `rel` (relative to R) of `bytes`/`sha256`: <package>/<rel>,
 * <package>/host/steps/<any>/<rel>, host/receiver-receipts/<id>.json for
 * state/receiver/receipts/<id>.json, and host/images/<any>/original.* for
 * snapshots. A candidate is COPIED (never linked) to <incoming_root>/<rel>
 * and hashed again; one whose copy differs is discarded and the search goes
 * on. Returns RELAY_OK with *used true when a verified copy is in place,
 * RELAY_OK with *used false when no candidate fits (the file must be
 * pulled), another status on a local failure. */
relay_status evidence_copy_candidate(const char *package_dir, const char *rel, uint64_t bytes,
                                     const char *sha256, const char *incoming_root, bool *used,
                                     relay_error *err);

#endif
