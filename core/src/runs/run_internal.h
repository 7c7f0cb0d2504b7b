/*
 * runs/run_internal.h — what the files of relay_script's host side share
 * (see run_request.h for the job and its files). Not for other rooms; the
 * unit tests of runs/ (tests/unit/runs/test_runs_request.c) reach it to test a
 * run's pieces without a guest.
 */
#ifndef RELAY_RUNS_RUN_INTERNAL_H
#define RELAY_RUNS_RUN_INTERNAL_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "guestio/guest_io.h"
#include "runs/run_request.h"
#include "util/error.h"

#define RUN_FRAME_MAX_OUTPUT_BYTES ((size_t)1 << 20)
#define RUN_STDERR_TAIL_BYTES      600

/* ---- step derivation (run_step.c, spec/guest.md §10, §14) ---- */

/* The step of a recorded run: the caller's fields over the derived ones.
 * Takes the run number under the lock (a derived id that was used before
 * moves on to the next number). New reference; *run_seq_out the number. */
json_object *run_derive_step(session_manager *m, guest *g, const run_call *c, const char *title,
                             int64_t *run_seq_out);
/* The request's snapshots block (spec/guest.md §6.1, §10): {afterIntervalMs,
 * group}. *after_ms_out is the interval the exec limit adds (0 when none);
 * *phase_out the group's phase (borrowed from the call) or NULL. */
json_object *run_snapshot_block(const run_call *c, int64_t *after_ms_out, const char **phase_out);

/* ---- the request (run_request.c, spec/guest.md §6) ---- */

/* What the receiver request of a recorded run is made of (all borrowed). */
typedef struct run_request_in {
	const char *execution_id, *attempt_id, *session_id, *guest_name, *because;
	const run_call *call;
	const char *script_remote; /* R/streamed/... or R/scripts/... */
	const char *script_sha256;
	const char *node_path;                   /* or NULL */
	const char *root;                        /* R */
	json_object *step, *snapshots, *capture; /* capture may be NULL */
	json_object *video;                      /* {fps, display} or NULL (MCP_RELAY_RECORD) */
} run_request_in;

/* The request's "video" object for a run with snapshots when the deployment
 * records video (MCP_RELAY_RECORD=video), else NULL; new reference. The
 * display is the capture command's --display, when it names one. */
json_object *run_video_request(int fps, const json_object *capture);

/* The result's "recording" fact (run_request.c): {status: "recorded",
 * path (in the evidence package), durationMs, bytes, sha256} or {status:
 * "off", reason} when the request asked for a recording, else NULL; new
 * reference. */
json_object *run_recording_fact(const json_object *receipt, const json_object *request);

/* The request object (spec/guest.md §6.1), every key of receiver_protocol.h;
 * new reference. */
json_object *run_request_build(const run_request_in *in);

/* The standard input of `receiver run --stdin` (guest/receiver_protocol.h):
 * the header line naming both parts, then the request and the script.
 * malloc'd with *len_out bytes, or NULL when out of memory. */
char *run_stdin_parts_text(const char *request_rel, const char *request, size_t request_len,
                           const char *request_sha, const char *script_rel, const char *script,
                           size_t script_len, const char *script_sha, size_t *len_out);

/* ---- the run's files (run_push.c, spec/guest.md §15 step 3) ---- */

/* Pushes the script and the request, each checked against the transport's
 * facts (gio_facts_compare: a contradiction is transfer-failed) or, for
 * the request, `receiver scan`. */
relay_status run_push_files(guest_io *io, const char *script_rel, const char *script, size_t script_len,
                            const char *script_sha, const char *request_rel, const char *request,
                            size_t request_len, const char *request_sha, relay_error *err);

/* ---- the resident channel (run_channel.c, spec/guest.md §17) ---- */

/* The `channel` a run's record names (§17 item 3): the resident channel,
 * one exec with standard input (§16.2; a diagnostic's exec, §13), or the
 * pushes (§7). */
#define RUN_CHANNEL_NAME_RESIDENT "resident"
#define RUN_CHANNEL_NAME_ONE_SHOT "one-shot"
#define RUN_CHANNEL_NAME_PUSHED   "pushed"

typedef enum run_channel_end {
	RUN_CHANNEL_UNSENT,   /* no receiver can have the request: take the one-shot path */
	RUN_CHANNEL_ANSWERED, /* *st_out and *res hold what the one-shot exec would have (the answer,
	                         a timeout, a cancellation) */
	RUN_CHANNEL_BROKEN,   /* the request went in whole and the channel broke before a whole
	                         answer: the run may have happened; ask (run_channel_ask), never resend */
} run_channel_end;

/* Sends the framed request `text` (len bytes) of execution_id on the
 * guest's channel, opening it (again, once, when it takes no byte) as
 * needed, and reads its answer within limit_ms under `sv` (progress,
 * cancellation: gio_resident_request). *res is filled as
 * gio_exec_supervised fills it for `receiver run --stdin` (res->out the
 * answer, owned by the caller: gio_exec_result_free). */
run_channel_end run_channel_send(guest_io *io, const char *execution_id, const char *text, size_t len,
                                 uint64_t limit_ms, gio_supervision *sv, relay_status *st_out,
                                 relay_exec_result *res, relay_error *err);

/* Runs the diagnostic script execution_id (argv as for the exec, its last
 * element `script`) on the guest's channel (spec/guest.md §17 item 3): serve
 * starts it, kills it at limit_ms and answers its exit and output's tail.
 * RUN_CHANNEL_UNSENT when no channel took it (nothing ran: exec it, §13);
 * RUN_CHANNEL_ANSWERED with *st_out and *res as gio_exec_supervised with
 * RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL fills them; BROKEN when it
 * may have run (never sent again: uncertain). */
#define RUN_DIAG_CHANNEL_MARGIN_MS 5000
run_channel_end run_channel_diagnostic(guest_io *io, const char *execution_id, const char *const *argv,
                                       const char *script, size_t script_len, uint64_t limit_ms,
                                       gio_supervision *sv, relay_status *st_out, relay_exec_result *res,
                                       relay_error *err);

/* Asks the guest's own record for execution_id's receipt (`receiver hash`
 * of R/state/receiver/receipts/<id>.json, §17 item 4): the frame's receipt
 * fact {path, sha256, bytes} (new reference) to pull, or NULL when the
 * guest holds none (*asked_out true) or could not be asked (false). */
json_object *run_channel_ask(guest_io *io, const char *execution_id, bool *asked_out);

/* ---- the receipt (run_receipt.c, spec/guest.md §15 step 5) ---- */

/* NULL when the receipt is well formed for this run, else the reason. */
const char *run_receipt_problem(const json_object *receipt, const char *execution_id,
                                const char *request_sha);
/* Checks receipt bytes that came home (against the frame's fact, then as
 * a receipt) and writes them durably to host/receiver-receipts/<id>.json.
 * RELAY_OK with *receipt_out; otherwise the reason in err. */
relay_status run_place_receipt(guest_io *io, json_object *frame_receipt, const char *execution_id,
                               const char *request_sha, const char *data, size_t len, const char *how,
                               json_object **receipt_out, char sha_out[65], int64_t *bytes_out,
                               relay_error *err);
/* Pulls the receipt named by the frame and places it (run_place_receipt). */
relay_status run_pull_receipt(guest_io *io, json_object *frame_receipt, const char *execution_id,
                              const char *request_sha, json_object **receipt_out, char sha_out[65],
                              int64_t *bytes_out, relay_error *err);

/* ---- host files, outcomes, the result (run_result.c) ---- */

/* Writes <evidence>/host/<sub>/<name> durably (0600, folders 0700). */
relay_status run_write_host_file(session_manager *m, guest *g, const char *evidence, const char *sub,
                                 const char *name, const void *data, size_t len, relay_error *err);
/* The same with a JSON object, pretty, with a final newline. */
relay_status run_write_host_json(session_manager *m, guest *g, const char *evidence, const char *sub,
                                 const char *name, const json_object *obj, relay_error *err);
void run_now_iso_millis(char out[25]);

/* An outcome {kind: "uncertain", diagnostic}; new reference. */
json_object *run_outcome_uncertain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "SIG<abbrev>" or the number. */
const char *run_signal_name(int sig, char buf[32]);
/* executionFailed (spec/images.md §8.2): not completed, or a nonzero code, or a signal. */
bool run_execution_failed(const json_object *outcome);
/* The tool error code of a failed execution's outcome. */
const char *run_error_code_for(const json_object *outcome);
/* The error message of a failed execution (malloc'd). */
char *run_failure_message(const json_object *outcome, const char *execution_id);

/* Finishes a run's facts (executionFailed, evidencePath, leaseReleased)
 * and, when the execution failed or its after-image cannot be delivered,
 * the failure (code, sentence, the guest's lastError). Takes `facts`.
 * Returns 0 or -1 as the outcome. */
int run_finish(session_manager *m, guest *g, json_object *facts, const char *execution_id, run_outcome *out);

/* The result as the host receipt records it (host/receipts, diagnostics):
 * the facts, and for a failure "error" {code, message} and, with
 * `guest_state`, the guest's status entry as the result shows it. New
 * reference. */
json_object *run_result_record(session_manager *m, guest *g, const run_outcome *out, bool guest_state);

/* What a recorded run records after it: host/receipts, events, the
 * cancellation. */
void run_record_end(session_manager *m, guest *g, const char *evidence, const char *execution_id,
                    const run_outcome *out, const json_object *step, bool cancelled);

/* A run stopped before its request reached the guest: nothing ran. The
 * host receipt, lastError and (cancelled) the record; fails `out`. */
int run_not_dispatched(session_manager *m, guest *g, const char *evidence, const char *execution_id,
                       const char *code, bool cancelled, run_outcome *out, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

/* Marks a step id used once its request is dispatched. */
void run_use_step_id(session_manager *m, guest *g, const char *id);

#endif
