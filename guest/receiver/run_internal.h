/*
 * receiver/run_internal.h — what the files of `receiver run` share (run.h is
 * the command; this is its inside): the run context, the limits and
 * diagnostics of spec/guest.md §7 and §12, and the steps each file provides.
 *
 *   run.c           the run itself: hooks, execute, run_command
 *   run_frames.c    JSON pieces and the frames printed on standard output
 *   run_validate.c  request validation (spec/guest.md §6.1, §7.4)
 *   run_records.c   records, the receipt, refusals, coalescing groups
 *   run_steps.c     runtimes, snapshots, dispatch of the script
 *   run_answers.c   the duplicate and already-started answers
 */
#ifndef RECEIVER_RUN_INTERNAL_H
#define RECEIVER_RUN_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>

#include "../receiver_protocol.h"
#include "capture.h"
#include "frame.h"
#include "fsx.h"
#include "journal.h"
#include "lock.h"
#include "proc.h"
#include "record.h"
#include "relay_support/utf8.h"
#include "run.h"
#include "scan.h"
#include "sha256.h"
#include "state.h"
#include "stdio_parts.h"
#include "survivors.h"

#define REQUEST_MAX_BYTES       RECEIVER_REQUEST_MAX_BYTES
#define SCRIPT_MAX_BYTES        ((unsigned long long)RECEIVER_SCRIPT_MAX_BYTES)
#define TIMEOUT_MAX_MS          RECEIVER_TIMEOUT_MAX_MS
#define AFTER_INTERVAL_MAX_MS   300000
#define BECAUSE_MAX_CHARS       RECEIVER_BECAUSE_MAX_CHARS
#define NODE_VERSION_TIMEOUT_MS 10000

#define DIAG_IN_PROGRESS "execution is in progress; it will not be replayed"
#define DIAG_UNCONFIRMED "receiver lock ownership or active operation is unconfirmed; input is not replayed"
#define DIAG_DAMAGED                                                                                         \
	"damaged journal; execution requires recording recovery (relay_stage resetRecording: true)"
#define DIAG_ALREADY      "execution was already started; it will not be replayed"
#define DIAG_CANCELLED    "cancelled by the host"
#define DIAG_GROUP_OPEN   "coalescing group is open; unrelated input is forbidden until its last member"
#define DIAG_GROUP_REUSED "group IDs cannot be reused"

typedef struct run_ctx {
	const char *root;
	char *session_id;
	jv *req;
	char request_sha[65];
	const char *execution_id;
	char *action_id;
	durable_file action_file; /* the action record, pending then final (fsx.h) */
	receiver_lock lock;
	journal jr;
	int journal_ready;
	char started_at[32];
	char dispatch_at[32];
	int dispatched;
	char diag[1200];
	/* validated request */
	const char *attempt_id;
	const char *language;
	const char *cwd;
	int64_t timeout_ms;
	const char *step_id, *title, *expected, *input_mode;
	const char *group_id, *group_phase;
	int has_after;
	int64_t after_ms;
	int capture_on;
	capture_spec capture;
	const char *script_path, *script_sha;
	char *script_id;
	char **argv;
	/* evidence */
	jv *descriptors;
	jv *action_snaps;
	jv *file_names;
	int captures_failed, captures_unknown;
	/* the script */
	spawn_result proc;
	int have_proc;
	const char *phase_name;
	/* what the script left running (spec/guest.md §16.1) */
	pid_t *spared; /* children of the receiver the captures after it must not kill */
	size_t spared_count;
	pid_t drainer_pid;
	jv *left_running; /* {"count","processes"} after a normal exit, else NULL */
	/* a run in one round trip (spec/guest.md §16.2): request and script came on
	 * standard input; the receipt and after-image go out on standard output */
	int stdio_parts;
	stdin_parts parts;
	/* the run's screen recording (record.h), never NULL after validation */
	run_video *video;
} run_ctx;

typedef struct receipt_info {
	const char *outcome_kind;
	jv *outcome; /* owned by the caller */
	const char *image_status;
	int timed_out, output_truncated, termination_confirmed;
	jv *stdout_v, *stderr_v; /* owned by the caller */
	char **argv;
} receipt_info;

/* run_frames.c */
const char *run_str_or_null(const jv *obj, const char *key);
void run_free_argv(char **argv);
char **run_argv_make(const char *a, const char *b, const char *c);
jv *run_argv_json(char **argv);
jv *run_exit_status_json(const spawn_result *r);
jv *run_output_json(const buf *raw, int truncated);
jv *run_outcome_json(const char *kind, const char *diagnostic, jv *exit_status);
void run_emit_outcome_frame(const char *execution_id, const char *kind, const char *diagnostic,
                            const char *error);
void run_emit_receipt_frame(const run_ctx *ctx, const char *sha, uint64_t bytes, int duplicate,
                            int request_matches);
void run_journal_note(run_ctx *ctx, const char *type, jv *fields);

/* run_validate.c */
const char *run_validate_request(run_ctx *ctx);

/* run_records.c */
const char *run_role_name(const run_ctx *ctx);
int run_write_execution_record(run_ctx *ctx, const char *state, char **argv, jv *exit_status, rerr *err);
int run_write_action_record(run_ctx *ctx, const char *state, rerr *err);
int run_write_receipt(run_ctx *ctx, const receipt_info *ri, char sha_out[65], uint64_t *bytes_out, rerr *err);
int run_refuse(run_ctx *ctx, const char *diagnostic, const char *image_status, char sha_out[65],
               uint64_t *bytes_out, rerr *err);
jv *run_groups_read(run_ctx *ctx, rerr *err);
const char *run_group_rules(run_ctx *ctx, const jv *groups);
int run_groups_write(run_ctx *ctx, jv *groups, rerr *err);
void run_group_annotation(run_ctx *ctx, const char *name, jv *details);

/* run_steps.c */
const char *run_resolve_runtime(run_ctx *ctx, rerr *err, int *internal);
int run_take_snapshot(run_ctx *ctx, const char *phase, capture_outcome *co, rerr *err);
int run_capture_gate(run_ctx *ctx, capture_outcome *co, rerr *err);
void run_note_left_running(run_ctx *ctx);
int run_dispatch(run_ctx *ctx, rerr *err);

/* run_answers.c */
int run_receipt_exists(run_ctx *ctx);
int run_started_exists(run_ctx *ctx);
int run_answer_duplicate(run_ctx *ctx);
int run_answer_already_started(run_ctx *ctx, rerr *err);

/* run.c */
void run_make_hooks(run_ctx *ctx, spawn_hooks *hooks, int with_cancel);

#endif
