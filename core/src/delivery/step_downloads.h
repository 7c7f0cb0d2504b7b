/*
 * delivery/step_downloads.h — the hooks through which runs and recording
 * resets reach the background step downloads of spec/evidence.md §5.
 *
 * OWNERSHIP: the queue, its worker and the bodies of these functions belong
 * to the evidence integration (downloads.c, downloads.h). This header is
 * the narrow contract runs and recording resets rely on; they never depend
 * on what the hooks do beyond what is written below.
 *
 * All functions are called without the manager's lock, from the guest's
 * queue, and must not block on a download (except downloads_close_for_reset,
 * which waits only for the download in flight, spec/evidence.md §5.6 step 2).
 */
#ifndef RELAY_DELIVERY_STEP_DOWNLOADS_H
#define RELAY_DELIVERY_STEP_DOWNLOADS_H

#include <json-c/json.h>
#include <stdint.h>

#include "guestio/receiver_api.h"
#include "session/manager_internal.h"

/* Queues the step download of one recorded run (spec/evidence.md §5.1-§5.2).
 * `execution_id` is the run's id; `receipt` (borrowed, may be NULL when the
 * host holds no receipt: the job then archives the step's first files in
 * present mode) is the receipt pulled right after the run as runs/ read it
 * (the job keeps a copy of receipt->json), whose bytes are
 * pinned by `receipt_sha256` (may be NULL) and `receipt_bytes` (-1 when
 * unknown). Called once per run that reached the receiver, after the host
 * files of the run are written. */
void downloads_enqueue_step(session_manager *m, guest *g, const char *execution_id,
                            const gio_receipt *receipt, const char *receipt_sha256, int64_t receipt_bytes);

/* Closes the guest's queue before a recording reset pulls the state
 * (spec/evidence.md §5.6 steps 1-3): lifts a pause, waits only for the download
 * in flight, marks every job not started `coalesced` with coalescedBy
 * "reset". */
void downloads_close_for_reset(session_manager *m, guest *g);

/* Reopens the queue after the reset (spec/evidence.md §5.6, last paragraph). */
void downloads_reopen(session_manager *m, guest *g);

#endif
