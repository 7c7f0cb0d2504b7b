/*
 * runs/stage.h — relay_stage's host side (spec/tools.md §3.5, spec/guest.md §3-§4,
 * §11.3): host inputs checked and inventoried, a recording reset when
 * asked or pending (recording_reset.h), the platform probe, the receiver
 * and capture programs pushed and verified by running them, support files
 * and the workspace pushed and compared with the receiver's scan (and with
 * the transport's facts where it returns them), the capture wait, and the
 * recording session. Files: stage.c (the order of the steps),
 * stage_inputs.c, stage_programs.c, stage_push.c, stage_result.c;
 * stage_internal.h is what they share.
 *
 * Guest fields written, under the lock and saved: staged, phase and
 * recording_session_id (session/guest.h), and of the run slice
 * (run_state.h) platform, node_path, cua_driver, snapshots, capture_plan; last_error through
 * guest_set_last_error(); and through recording_reset() what it lists.
 *
 * Runs on the guest's queue, without the lock.
 */
#ifndef RELAY_RUNS_STAGE_H
#define RELAY_RUNS_STAGE_H

#include <json-c/json.h>

#include "session/manager_internal.h"
#include "util/outcome.h"

/* Stages guest `g` with the call's arguments `args` (validated by the
 * contract) after the tool's refusals (sealed, no lease, a reset without a
 * staged recording). 0 with o->facts the result's structured content
 * (spec/tools.md §3.5: guest, staged, receiver, workspace, workspaceFiles,
 * files, updated, nodePath, cuaDriver, recordingSessionId, reset,
 * evidencePath, extractions, capabilities); -1 with `o` failed
 * (path-refused, invalid-input, staging-limit, transfer-failed,
 * integrity-failed, unsupported-platform, already-staged,
 * capture-unavailable, space-shortfall, receiver-locked, reset-pending,
 * not-staged), facts {guest, staged: false} where the step recorded one. */
int stage_guest(session_manager *m, guest *g, json_object *args, relay_call *call, relay_outcome *o);

#endif
