/*
 * delivery/downloads.h — background step downloads (spec/evidence.md §5,
 * spec/lifecycle.md §7): one queue per guest, one worker, at most 64 queued jobs,
 * 3 attempts per job (waiting 1 s, then 3 s) within 90 s from the job's
 * start, a pause after a transient failure until the next operation that
 * reaches the guest, states open → closing → closed, and coalescing by
 * finish, release and recording reset.
 *
 * A job brings one step's evidence home as one archive (`receiver archive`,
 * read on the host with libarchive as hostile input), places it under
 * <evidence>/host/steps/<executionId>/, publishes the step's display
 * originals to <evidence>/host/images/<imageId>/original.png with a delivery
 * receipt {image, at, status: "downloaded"}, and writes its record
 * <evidence>/host/evidence-downloads/<executionId>.json (§5.5).
 *
 * The job reads the step's receipt from host/receiver-receipts/<id>.json
 * (the copy relay_script pulled and checked right after the run); without
 * it the job archives the step's first four files in present mode.
 *
 * Counters are published in the delivery room's slice of the guest
 * (guest->delivery, delivery_state.h: status, lease.json) under the
 * manager's lock.
 * Every function is called WITHOUT the manager's lock.
 */
#ifndef RELAY_DELIVERY_DOWNLOADS_H
#define RELAY_DELIVERY_DOWNLOADS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "delivery/delivery_state.h"
#include "delivery/step_downloads.h"
#include "session/manager_internal.h"

#define DOWNLOADS_QUEUE_BOUND 64
#define DOWNLOADS_DEADLINE_MS 90000 /* one job, its attempts included */
/* The attempts of one job and the waits between them: download_job.h. */

typedef struct downloads_queue downloads_queue; /* guest->delivery->queue (delivery_state.h) */

/* downloads_enqueue_step(), downloads_close_for_reset() and
 * downloads_reopen() are declared in step_downloads.h (the hooks runs and
 * recording resets call) and implemented in downloads.c:
 *
 * downloads_enqueue_step() queues the step download of a recorded run
 * after its host files are written; the job's record says `queued` before
 * the call returns. When the queue holds more than DOWNLOADS_QUEUE_BOUND
 * jobs and is not paused, it waits until the oldest job is done (the run
 * holds back, spec/evidence.md §5.1). A closing or closed queue takes no job:
 * the step's files then come home with the lifecycle operation that closed
 * it. The receipt is deep-copied; without one the job reads
 * host/receiver-receipts/<id>.json, and without that it archives the
 * step's first four files in present mode.
 *
 * downloads_close_for_reset() is downloads_close(m, g, "reset", NULL). */

/* An operation reached the guest: lifts a pause. Called by the manager for
 * every guest transport use outside the download worker. */
void downloads_guest_reached(session_manager *m, guest *g);

/* Takes the queue over for a lifecycle operation (§5.6 items 1-3): state
 * `closing`, pause lifted, waits only for the download in flight (within
 * its own deadline, or until `call` is cancelled), marks every job not yet
 * started `coalesced` with coalescedBy `by` ("finish", "release" or
 * "reset"). Returns when nothing runs. */
void downloads_close(session_manager *m, guest *g, const char *by, relay_call *call);

/* The guest is gone (closed) or the session ends: aborts the download in
 * flight (it ends `cancelled` and writes nothing more: its record keeps
 * saying `queued`), keeps queued jobs and their records, state `closed`,
 * and stops the worker. Safe to call twice; downloads_reopen() starts it
 * again while the guest is held. */
void downloads_shutdown(session_manager *m, guest *g);

/* After a restart (recording reattached): queues again every step whose
 * record under host/evidence-downloads/ still says `queued`. Returns how
 * many were queued. */
int downloads_resume(session_manager *m, guest *g);

/* The recording hooks the lease room calls (lease/lifecycle.h describes
 * them; their bodies are here, below lease/, so lease includes this header
 * and delivery never includes lease/):
 *
 * recording_detach(): the end of the session in pause mode: the step
 * download in flight is aborted and writes nothing more; queued steps keep
 * their `queued` records for the next process (downloads_shutdown).
 *
 * recording_reattach(): at restart, for a staged guest not delivered: the
 * steps whose records still say `queued` are queued again
 * (downloads_resume). Nothing is replayed. Always 0 (errbuf untouched). */
void recording_detach(session_manager *m, guest *g);
int recording_reattach(session_manager *m, guest *g, char *errbuf, size_t errlen);

/* For relay_image (spec/images.md §7 step 4). */
typedef enum downloads_wait_result {
	DOWNLOADS_WAIT_NONE = 0,   /* no job for that execution is queued or running */
	DOWNLOADS_WAIT_DOWNLOADED, /* the job ended `downloaded` */
	DOWNLOADS_WAIT_FAILED,     /* the job ended `failed`, `cancelled` or `coalesced` */
	DOWNLOADS_WAIT_DEADLINE,   /* deadline_mono_ms passed first */
	DOWNLOADS_WAIT_CANCELLED,  /* the call was cancelled first */
} downloads_wait_result;

/* When the step download of `execution_id` is queued, moves it to the front
 * of its queue (lifting a pause: relay_image reaches the guest); when it is
 * queued or running, waits until it ends, `deadline_mono_ms`
 * (clock_monotonic_ms) passes or `call` is cancelled. Nothing else is waited
 * for. */
downloads_wait_result downloads_expedite(session_manager *m, guest *g, const char *execution_id,
                                         int64_t deadline_mono_ms, relay_call *call);

/* True while the step download of `execution_id` is queued or running. */
bool downloads_pending(session_manager *m, guest *g, const char *execution_id);

/* Frees the per-guest queue (worker stopped first). For session_destroy /
 * guest_free. */
void downloads_free(guest *g);

#endif
