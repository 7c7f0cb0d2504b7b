/*
 * runs/recording_reset.h — relay_stage's recording reset (spec/guest.md §4,
 * spec/tools.md §3.5 "Recording reset", spec/evidence.md §5.6-§7).
 *
 *   1. needs a staged recording (not-staged), unless a reset is pending;
 *   2. the guest's download queue closes (step_downloads.h);
 *   3. pendingReset {id, from, fromSession, to} is persisted first, so a
 *      retry completes the same reset;
 *   4. the recording (R/recordings/<id> if the guest already moved it, else
 *      R/state) is scanned, checked against free space (space-shortfall),
 *      brought home into <from>.reset-attempts/<random>/state (host
 *      candidates copied, the rest pulled as evidence archives and
 *      extracted as hostile input), scanned again (unchanged), and merged
 *      into <from>/state (evidence_state_merge); event
 *      `recording-reset-intent`;
 *   5. `receiver reset --root R --id <id>` (receiver-locked when the lock
 *      exists);
 *   6. previousEvidence gains {path: from, sessionId, guestState:
 *      "recordings/<id>"}, the evidence folder becomes `to`, the guest is
 *      unstaged, pendingReset cleared; event `recording-resumed`.
 *
 * Not done here (left to the evidence integration): the one-by-one
 * fallback pull when an archive cannot be made (`archive-fallback`), and
 * materialising display originals from host/images/ into the incoming
 * tree before the merge.
 */
#ifndef RELAY_RUNS_RECORDING_RESET_H
#define RELAY_RUNS_RECORDING_RESET_H

#include <json-c/json.h>

#include "guestio/guest_io.h"
#include "session/manager_internal.h"
#include "util/outcome.h"

/* Runs or completes the reset on the guest's queue through `io` (begun on
 * the guest). 0 on success with *reset_out = {"archivedTo": <from>,
 * "recording": "<R>/recordings/<id>"} (new reference); otherwise -1 with
 * `o` failed (not-staged, space-shortfall, integrity-failed,
 * transfer-failed, receiver-locked, reset-pending), the pending reset kept
 * for a retry.
 *
 * Guest fields written (session/guest.h): pending_reset, previous_evidence,
 * evidence_path, staged, phase, recording_session_id, last_error. */
int recording_reset(session_manager *m, guest *g, guest_io *io, json_object **reset_out, relay_outcome *o);

#endif
