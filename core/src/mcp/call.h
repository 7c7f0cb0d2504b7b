/*
 * mcp/call.h — one tools/call in flight (the relay_call of relay/host.h).
 *
 * The MCP layer creates a call for each tools/call request, hands it to the
 * manager (session/manager.h), and writes the response when the manager
 * completes it. Progress and cancellation flow through it. All functions are
 * thread-safe; a NULL call is allowed everywhere and does nothing (background
 * work such as renewal has no call).
 */
#ifndef RELAY_MCP_CALL_H
#define RELAY_MCP_CALL_H

#include <stdbool.h>

#include "mcp/tool_result.h"
#include "relay/host.h"

/* True once notifications/cancelled named the request, or the session's
 * grace period ran out. */
bool relay_call_is_cancelled(const relay_call *call);

/* Sends notifications/progress when the request carried a progressToken:
 * `progress` must grow (the call enforces it), `total` < 0 omits it,
 * `message` (borrowed, may be NULL) is one sentence. At most one per second,
 * except the first and any with `force` (the last of a phase). */
void relay_call_progress(relay_call *call, double progress, double total, const char *message, bool force);

/* Completes the call exactly once, from any thread: the result is rendered
 * (text block, bounds, spill file) and written unless the call was
 * cancelled, in which case nothing is written. Takes ownership of `result`. */
void relay_call_complete(relay_call *call, tool_result *result);

/* Marks the call cancelled (used at the end of the grace period). */
void relay_call_cancel(relay_call *call);

/* A call that belongs to no request: work the session starts by itself (the
 * release of every guest at the end of the session, a bounded direct
 * release) and must be able to cancel through the same flag plugins poll.
 * It sends no progress and no response; relay_call_complete(call, NULL)
 * frees it. NULL when out of memory. */
relay_call *relay_call_new_internal(void);

/* The progress counter the call last sent (for callers that continue a
 * sequence). */
double relay_call_last_progress(const relay_call *call);

#endif
