/*
 * tools/tools.h — the fourteen tools' handlers: each maps its arguments,
 * refuses what it must, calls its room once and alone builds the MCP
 * result. The dispatcher (tools/dispatch.c) runs them on the guest's queue
 * or a detached thread. Handlers write no field of struct guest themselves
 * beyond what the room they call documents.
 */
#ifndef RELAY_TOOLS_TOOLS_H
#define RELAY_TOOLS_TOOLS_H

#include "call/tool_result.h"
#include "session/manager_internal.h"
#include "util/outcome.h"

/* An error result of a per-guest tool: adds "guestState" (the guest's status
 * entry, read under the lock) beside "error" (spec/tools.md §2.3). Takes
 * ownership of `structured` (may be NULL). Call without the lock. */
tool_result *guest_error(session_manager *m, guest *g, json_object *structured, const char *code,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The "sealed" refusal of a tool that would change a guest whose evidence
 * is delivered (relay_stage, relay_script). Call without the lock. */
tool_result *tools_refuse_sealed(session_manager *m, guest *g);

/* The error result of a failed domain outcome (util/outcome.h): its code
 * and sentence, its facts as the structured content, and "guestState" when
 * `g` is not NULL (as guest_error) and the facts carry none already. Frees
 * the outcome. Call without the lock. */
tool_result *tools_failure(session_manager *m, guest *g, relay_outcome *o);

/* Tool handlers: run on the guest's queue (per-guest tools and acquire) or a
 * detached thread; `g` is NULL for tools without a guest. They return the
 * result; the caller completes the call. Each is declared with this one
 * function type, so the signature is written once. */
typedef tool_result *tool_handler_fn(session_manager *m, guest *g, json_object *args, relay_call *call);
typedef tool_handler_fn *tool_handler;

tool_handler_fn tool_status, tool_acquire, tool_release;
/* relay_finish step 8 (spec/tools.md §3.9): lease_release_finished() as a
 * release-shaped result (success, or the error that kept the guest). */
tool_result *tools_release_finished(session_manager *m, guest *g, relay_call *call);
tool_handler_fn tool_search, tool_probe;
/* relay_probe with scope "guest" (spec/tools.md §3.2); tool_probe() hands over. */
tool_handler_fn tool_probe_guest;
tool_handler_fn tool_acquisition_capabilities, tool_stage, tool_script, tool_image, tool_extract, tool_finish;
tool_handler_fn tool_console_resolve, tool_console_open, tool_console_cancel;

#endif
