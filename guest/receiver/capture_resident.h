/*
 * receiver/capture_resident.h — the capture program kept running by
 * `receiver serve` (spec/guest.md §17 item 5): relay-x11shot --serve holds
 * one X connection (and its shared-memory segment) for every shot of every
 * run on the channel, so a shot starts no process, opens no connection, and
 * a display without other clients is not reset by the X server between
 * shots (which costs more than the shot itself).
 *
 * serve calls capture_resident_prepare before it forks a run's worker: the
 * capture command of the request decides whether a resident program fits
 * (capture-x11's relay-x11shot with check "png-file" and "--out @OUT@")
 * and which (its argv); one that is running with the same argv is kept.
 * The worker inherits the pipes (close-on-exec: no script sees them) and
 * capture_take asks capture_resident_take first. Every resident shot is
 * checked as §11 says of one-shot captures (the answer reports exactly the
 * output path, the file is a regular PNG of 1 byte to 64 MiB); anything
 * else — no resident, a failure answer, a broken or stale answer — is
 * taken again the one-shot way, which decides the shot. A resident that
 * does not answer within the capture's limit is killed and the shot fails
 * as a timed-out capture would.
 *
 * One thread; a worker is the resident's only user while it runs (serve
 * waits for it). The state is process-global for that reason.
 */
#ifndef RECEIVER_CAPTURE_RESIDENT_H
#define RECEIVER_CAPTURE_RESIDENT_H

#include <stddef.h>
#include <stdint.h>

#include "capture.h"

/* serve, before each run: request_json is the run's request (its
 * "capture" object, if any, names the program). Never fails: without a
 * resident program the captures are one-shot. */
void capture_resident_prepare(const char *request_json, size_t len);

/* serve, when it ends: the resident program's standard input is closed and
 * it is waited for (killed after RESIDENT_STOP_WAIT_MS). */
void capture_resident_stop(void);

/* One shot by the resident program, if there is one for this capture
 * command: 0 with *res filled (ok, or the failure to report), 1 when the
 * caller must take the shot the one-shot way. */
int capture_resident_take(const capture_spec *spec, const char *out_path, int64_t timeout_ms,
                          capture_outcome *res);

#endif
