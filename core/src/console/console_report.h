/*
 * console/console_report.h — what the console tools share: normalising the
 * backend's acquisition capabilities (spec/tools.md §3.3) and console reports
 * (spec/machine-service.md §9.4) into the relay's observations, the identity
 * checks, the attempt bookkeeping, and the VNC check of relay_acquire step 6.
 *
 * Tokens must match ^[a-zA-Z0-9_.-]{1,120}$ or become "unknown" (a reason
 * becomes null); Unix-second times become ISO 8601 whole seconds. Nothing a
 * backend says about pixels, authentication or a person's confirmation is
 * ever upgraded by the relay.
 *
 * The console room writes its slice of the guest (guest->console,
 * console_state.h): the observation and the attempts. Failures are
 * relay_outcome (util/outcome.h); the console tools build the results.
 */
#ifndef RELAY_CONSOLE_CONSOLE_REPORT_H
#define RELAY_CONSOLE_CONSOLE_REPORT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "session/manager_internal.h"

/* spec/tools.md §3.3 step 2: {"schemaVersion": 1, "options": {"vnc": {"default":
 * false, "backends": {"linux": {...}, "macos": {...}}}}}, a new reference;
 * NULL when the report breaks the schema (schemaVersion 1, vnc.default
 * false, boolean `available` for both OSes). */
json_object *console_capabilities_normalise(const json_object *raw);
/* Step 3: both OSes unavailable with status "unconfigured". */
json_object *console_capabilities_unconfigured(void);
/* relay_acquisition_capabilities (spec/tools.md §3.3 steps 1-3): with a
 * selected environment the machine backend's identity first, then the
 * console plugin's report normalised (or "unconfigured" without one). 0
 * with the capabilities in o->facts; -1 with backend-unavailable or
 * console-unavailable. Waits for the backends. */
int console_acquisition_capabilities(session_manager *m, relay_call *call, relay_outcome *o);

/* spec/machine-service.md §9.4: the allow-listed observation of a console
 * report, a new reference; NULL when schemaVersion is not 1. */
json_object *console_observation(const json_object *report);

/* The identity checks of spec/tools.md §3.11 step 4. NULL when the observation
 * names this guest's vm, lease, console and an acceptable environment
 * fingerprint; otherwise the message ("Console lease identity mismatch:
 * ..."). `lease_fp` is the fingerprint recorded with the lease (may be NULL). */
const char *console_identity_problem(const json_object *obs, const char *vm, const char *lease_id,
                                     const char *console_id, const char *selected_fp, const char *lease_fp,
                                     char *buf, size_t len);

/* True for the terminal attempt states: cancelled, closed, failed, expired. */
bool console_attempt_terminal(const char *status);

/* What the console tools know about a guest's console, copied under the
 * manager's lock (all strings owned; free with console_guest_facts_free). */
typedef struct console_guest_facts {
	char *lease_text; /* the lease document, compact JSON */
	char *vm;
	char *lease_id;
	char *console_id; /* the console acquired with the lease */
	char *lease_fp;   /* the environment fingerprint recorded with the lease, or NULL */
	char *attempt_id; /* the current attempt, or NULL */
	char *attempt_status;
	int attempts_used; /* distinct attempt ids used on this guest */
} console_guest_facts;

void console_guest_facts_free(console_guest_facts *facts);

/* spec/tools.md §3.11 steps 1-5 for guest `g`: the console-unavailable check,
 * the console plugin's resolve, the schema and identity checks, and the
 * stored observation (its status becomes "unknown" on any failure). 0 on
 * success with *obs_out (a new reference) and *facts_out filled; else -1
 * with the failure in `o` (console-unavailable, backend-unavailable,
 * console-identity-mismatch; facts freed). Call without the lock, on g's
 * queue. */
int console_resolve_guest(session_manager *m, guest *g, relay_call *call, json_object **obs_out,
                          console_guest_facts *facts_out, relay_outcome *o);

/* Marks the stored observation's status "unknown" (a failed console call). */
void console_mark_unknown(session_manager *m, guest *g);

/* The console status result of spec/tools.md §3.11: {"guest", the observation's
 * fields, "screenshotEvidence": false, "leaseReleased": false}; `attempt`
 * replaces the observation's attempt when not NULL (taken). A new object. */
json_object *console_status_result(const char *guest_name, const json_object *obs, json_object *attempt);

/* console_resolve_guest, then the check that the console the call names
 * is the one the resolved observation names (spec/tools.md §3.12 step 2,
 * §3.13; console-identity-mismatch otherwise): 0 with *obs_out and
 * *facts_out filled, or -1 with the failure in `o` (and nothing to free). */
int console_resolve_named(session_manager *m, guest *g, relay_call *call, const char *console_id,
                          json_object **obs_out, console_guest_facts *facts_out, relay_outcome *o);

typedef enum console_operation { CONSOLE_OPEN, CONSOLE_CANCEL } console_operation;

/* spec/tools.md §3.12 steps 9-10 and §3.13, after the intent event: asks the
 * console plugin to open or cancel `attempt_id` and checks that the report
 * names this guest's vm, lease, console, environment and this attempt. On
 * success stores the report as g's console observation and the attempt's
 * new status, records console-open / console-cancel, and returns the
 * observation (a new reference). Otherwise records console-open-uncertain /
 * console-cancel-uncertain, marks the console unknown, and returns NULL
 * with outcome-unknown in `o` (facts: {attempt_id}). Call without the
 * lock, on g's queue. */
json_object *console_attempt_request(session_manager *m, guest *g, relay_call *call,
                                     const console_guest_facts *facts, console_operation operation,
                                     const char *console_id, const char *attempt_id, relay_outcome *o);

/* The relay-side view of an attempt whose backend state is unknown. */
json_object *console_uncertain_attempt(const char *attempt_id);

/* relay_acquire step 6: with vnc: true the backend for the image's OS must
 * be available. 0 when it is; -1 with the refusal's code and message. */
int console_vnc_check(session_manager *m, const char *image, relay_call *call, const char **code_out,
                      char *msg, size_t len);

#endif
