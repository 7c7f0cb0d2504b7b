/*
 * runs/stage_internal.h — what the files of relay_stage's host side share
 * (see stage.h): the context of one stage and the steps each file does.
 * Every step returns 0, or -1 with s->o failed (stage_fail). Not for other
 * rooms.
 */
#ifndef RELAY_RUNS_STAGE_INTERNAL_H
#define RELAY_RUNS_STAGE_INTERNAL_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "guestio/guest_io.h"
#include "runs/host_paths.h"
#include "runs/stage.h"
#include "runs/stage_inputs.h"
#include "session/manager_internal.h"
#include "util/outcome.h"

#define STAGE_PROBE_TIMEOUT_MS 10000 /* uname -sm, <path> --version */
#define CAPTURE_WAIT_MS        120000
#define CAPTURE_EVERY_MS       5000
#define CAPTURE_EXEC_LIMIT_MS  180000
#define CAPTURE_PROGRESS_MS    5000
#define RM_BATCH_BYTES         65536

typedef struct stage_ctx {
	session_manager *m;
	guest *g;
	relay_call *call;
	json_object *args;
	const char *project;
	stage_inputs in; /* the host inputs (stage_inputs.h) */
	uint64_t pushed_bytes;
	/* guest */
	guest_io io;
	bool io_open;
	char *uname;
	const char *platform;
	char receiver_sha[65];
	uint64_t receiver_bytes;
	char *receiver_version;
	int64_t mark_ms;  /* clock_monotonic_ms() of the last phase_mark() */
	bool fresh_root;  /* this stage created R: nothing of an earlier attempt is in it */
	relay_outcome *o; /* the answer (borrowed from the caller) */
	/* the host hashes, computed on hash_thread (hash_start/hash_join) */
	pthread_t hash_thread;
	bool hashing;
	int hash_rc;
	stage_hash_failure hash_failure;
} stage_ctx;

/* ---- stage.c: failures and progress ---- */

/* Records the failure (lastError, event operation-failed) and fails s->o
 * with `code` and the sentence, facts {guest, staged: false}. Returns -1. */
int stage_fail(stage_ctx *s, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The cancelled stage (recorded, transfer-failed). Returns -1. */
int stage_cancelled(stage_ctx *s);
/* True when a guest file fact (gio_scan) says `bytes` bytes with SHA-256 `sha256`. */
bool stage_fact_matches(json_object *fact, uint64_t bytes, const char *sha256);
/* After a push of `what`: 0 when it went through, else the cancellation
 * or the push failure (-1). */
int stage_push_problem(stage_ctx *s, relay_status st, const char *what, const relay_error *err);
/* Debug timing of the staging phases (MCP_RELAY_DEBUG=1). */
void stage_phase_mark(stage_ctx *s, const char *phase);
void stage_progress(stage_ctx *s, const char *message);

/* ---- stage_inputs.c: step 2, host inputs and limits ---- */

/* stage_inputs_check() into s->in; a failure other than a refused input
 * is recorded as the guest's (stage_fail). */
int stage_check_inputs(stage_ctx *s);
/* The host's SHA-256 of every input on a thread of its own (spec/guest.md §3.4
 * step 1); stage_hash_join waits for it (0, or the failure). */
void stage_hash_start(stage_ctx *s);
int stage_hash_join(stage_ctx *s);

/* ---- stage_programs.c: the platform, the receiver, capture programs ---- */

/* Runs a short command; RELAY_OK only when it exited 0. *out_text gets stdout. */
relay_status stage_run_short(stage_ctx *s, const char *const *argv, uint64_t timeout_ms, char **out_text,
                             relay_error *err);
/* `uname -sm`: s->uname, s->platform. */
relay_status stage_probe_platform(stage_ctx *s, relay_error *err);
/* Steps 6-7: the guest root and the receiver, verified by running it. */
int stage_receiver(stage_ctx *s);
/* Step 8: the capture programs of the plan, each verified. */
int stage_capture_programs(stage_ctx *s, json_object *plan);
/* Step 11: `receiver capture-test`; 0 with *after_ms_out. */
int stage_capture_wait(stage_ctx *s, json_object *plan, int64_t *after_ms_out);

/* ---- stage_push.c: step 10, support files and the workspace ---- */

/* Support files, appended to `result_files` as {local, remote, sha256, bytes}. */
int stage_support(stage_ctx *s, json_object *result_files);
int stage_workspace(stage_ctx *s);

/* ---- stage_result.c: the result's facts, corrected paths ---- */

/* Fills s->o's facts with the stage's result (spec/tools.md §3.5). Takes
 * `files`, `updated` and `reset`. Returns 0. */
int stage_result(stage_ctx *s, json_object *files, json_object *updated, json_object *reset);
/* Step 6: already staged, corrected executable paths only (spec/guest.md §3.6). Takes `reset`. */
int stage_correct_paths(stage_ctx *s, json_object *reset);

#endif
