/*
 * runs/run_request.h — the host side of relay_script (spec/tools.md §3.6,
 * spec/guest.md §6, §13-§15), the room's one header for tools/. Files of the
 * job: run_request.c (the call checked and the receiver request built next
 * to it), run_step.c (step derivation), run_push.c (the run's files
 * pushed), run_receipt.c (the receipt pulled and validated), run_result.c
 * (host files, the result's facts, what a run records), run_recorded.c (a
 * recorded run), run_diagnostic.c (a diagnostic script); run_internal.h is
 * what they share.
 *
 * Guest fields written (session/guest.h): used_step_ids, run_seq (under the
 * lock, saved); last_error through guest_set_last_error(). Everything else
 * is read. The answer is a run_outcome (util/outcome.h embedded): only
 * tools/tool_script.c turns it into the MCP result.
 *
 *   run_call_parse()    the call's semantic checks the contract layer
 *                       cannot make: localPath under the project-folder
 *                       rules (path-refused) and its size (8 MiB, 96 KiB for
 *                       a diagnostic), the step id not used before;
 *   run_derive_*()      step derivation (spec/guest.md §14);
 *   run_recorded()      a recorded run: host/submissions, host/scripts,
 *                       host/requests, script and request pushed, `receiver
 *                       run` with the exec limit timeoutMs + 180,000 +
 *                       afterIntervalMs, the frame, the receipt pulled into
 *                       host/receiver-receipts and validated, the result
 *                       with its imageDelivery, host/receipts, the step
 *                       download queued (step_downloads.h);
 *   run_diagnostic()    a diagnostic shell script through the transport's
 *                       exec, host/diagnostics/<id>.request.json and
 *                       <id>.receipt.json.
 *
 * Everything runs on the guest's queue, without the manager's lock.
 * Progress: one notification every RUN_PROGRESS_MS while a run lasts.
 * Cancellation (notifications/cancelled): the exec is aborted (after
 * `receiver cancel` where the transport runs commands concurrently), the run
 * is recorded uncertain, never sent again; the result returned is dropped
 * by the MCP layer (no response).
 */
#ifndef RELAY_RUNS_RUN_REQUEST_H
#define RELAY_RUNS_RUN_REQUEST_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "delivery/image_delivery.h"
#include "session/manager_internal.h"
#include "util/outcome.h"

#define RUN_SCRIPT_FILE_MAX_BYTES  (8u << 20) /* localPath: 8 MiB (spec/tools.md §5.4) */
#define RUN_DIAGNOSTIC_MAX_BYTES   98304u     /* a diagnostic script: 96 KiB */
#define RUN_DEFAULT_TIMEOUT_MS     120000
#define RUN_DEFAULT_AFTER_MS       500
#define RUN_CAPTURE_ALLOWANCE_MS   180000 /* two 60 s captures and a minute's margin (spec/guest.md §15) */
#define RUN_PROGRESS_MS            15000
#define RUN_CANCEL_GRACE_MS        5000  /* how long a cancelled run may end on its own */
#define RUN_DIAGNOSTIC_OUTPUT_KEEP 64000 /* bytes of diagnostic output kept (spec/guest.md §13) */
#define RUN_TITLE_MAX_CHARS        500
#define RUN_BECAUSE_MAX_CHARS      4000

/* A relay_script call after its semantic checks. */
typedef struct run_call {
	char language[16]; /* shell | javascript | typescript | python */
	const char *ext;   /* sh | js | ts | py (static) */
	bool is_inline;
	bool diagnostic;
	char *script;           /* the script bytes, NUL-terminated; owned */
	size_t script_len;      /* bytes */
	char *local_path;       /* localPath as given, or NULL; owned */
	char *local_abs;        /* its absolute path under the project, or NULL; owned */
	int64_t timeout_ms;     /* 1..3,600,000, default 120,000 */
	char *reason;           /* the caller's reason, or NULL; owned */
	json_object *step;      /* the caller's step object, or NULL; a reference */
	json_object *snapshots; /* the caller's snapshots object, or NULL; a reference */
	json_object *args;      /* the call as validated; a reference */
} run_call;

/* Checks what the schema cannot and reads the script. 0 on success (the
 * caller frees *out with run_call_free), else -1 with `o` failed
 * (invalid-input or path-refused), with nothing sent anywhere. *out is
 * filled as far as it got in both cases. */
int run_call_parse(session_manager *m, guest *g, json_object *args, run_call *out, relay_outcome *o);
void run_call_free(run_call *c);

/* The derived step title (spec/guest.md §14), malloc'd. */
char *run_derive_title(const run_call *c);
/* `reason`, else "Relay <title> (no reason given)", cut to 4,000 characters. */
char *run_derive_because(const run_call *c, const char *title);

/* What a run answers. `base.facts` is the result's structured content
 * (spec/tools.md §3.6: outcome, step, imageDelivery, executionFailed, ...);
 * `base.code`/`base.message` are set when the result is an error (a failed
 * execution, an after-image that cannot be delivered, a run not sent).
 * `image` holds the after-image preview the result attaches. */
typedef struct run_outcome {
	relay_outcome base;
	image_delivery_result image;
	/* true: the facts are a run's result (headline {imageDelivery,
	 * executionFailed}, the lead sentence); false: a run that was not sent
	 * (the error alone). */
	bool is_run_result;
} run_outcome;

/* Frees what the outcome owns and clears it (a zeroed run_outcome is empty). */
void run_outcome_free(run_outcome *o);

/* A recorded run, from step derivation to the result (the caller made the
 * shared refusals and sealed / reset-pending / not-staged). Fills `out`
 * (zeroed by the caller); 0 when the result is a success, -1 when it is an
 * error. What the run recorded (host/receipts, events, the step download)
 * is done either way. */
int run_recorded(session_manager *m, guest *g, run_call *c, relay_call *call, run_outcome *out);

/* A diagnostic shell script (spec/guest.md §13); as run_recorded. */
int run_diagnostic(session_manager *m, guest *g, run_call *c, relay_call *call, run_outcome *out);

#endif
