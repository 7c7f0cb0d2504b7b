/*
 * call/call.h — one call in flight (the relay_call of relay/host.h): a
 * tools/call request, or work the session starts by itself.
 *
 * The MCP layer creates a call for each tools/call request with a sink
 * (below) that writes its progress and its answer; the tools layer
 * completes it on whatever thread finishes the work. Plugins and rooms only
 * poll it (relay_call_is_cancelled) and report progress through it. All
 * functions are thread-safe; a NULL call is allowed everywhere and does
 * nothing (background work such as renewal has no call).
 *
 * A leaf: it knows nothing of JSON-RPC; the sink does.
 */
#ifndef RELAY_CALL_CALL_H
#define RELAY_CALL_CALL_H

#include <stdbool.h>

#include "relay/host.h"

/* The answer a call ends with (call/tool_result.h, which only the tool handlers,
 * the MCP layer and the command line include: scripts/layers). */
typedef struct tool_result tool_result;

/* Where a call's progress and answer go. Every function receives the
 * `request` pointer given to relay_call_new (owned by the sink). */
typedef struct relay_call_sink {
	/* Writes one progress notification now: `total` < 0 means none,
	 * `message` (borrowed) may be NULL. Called under the call's lock, so a
	 * notification always precedes the answer. False when nothing could be
	 * written (the stream failed): the call then counts nothing as sent. */
	bool (*progress)(void *request, double progress, double total, const char *message);
	/* The call is about to complete: stop routing cancellations to it.
	 * Called before the call's lock is taken. May be NULL. */
	void (*detach)(void *request);
	/* Writes the answer of a call that was not cancelled, under the call's
	 * lock. `result` is borrowed; NULL means "no answer could be formed"
	 * (the sink answers an internal error). */
	void (*answer)(void *request, const tool_result *result);
	/* The call is done (after its lock is released, answered or not): the
	 * sink frees `request`. */
	void (*finished)(void *request);
} relay_call_sink;

/* A call whose progress and answer go to `sink` (borrowed, static storage)
 * with `request` (handed over: the sink's finished() frees it). With
 * `reports_progress` false, relay_call_progress sends nothing. NULL when
 * out of memory (then `request` is still the caller's). */
relay_call *relay_call_new(const relay_call_sink *sink, void *request, bool reports_progress);

/* A call that belongs to no request: work the session starts by itself (the
 * release of every guest at the end of the session, a bounded direct
 * release) and must be able to cancel through the same flag plugins poll.
 * It sends no progress and no answer; relay_call_complete(call, NULL)
 * frees it. NULL when out of memory. */
relay_call *relay_call_new_internal(void);

/* True once the call was cancelled (notifications/cancelled named its
 * request, or the session's grace period ran out). */
bool relay_call_is_cancelled(const relay_call *call);

/* Marks the call cancelled (used at the end of the grace period). */
void relay_call_cancel(relay_call *call);

/* Marks the call cancelled unless it is already completing; true when it
 * was marked (then no answer will be written). The MCP layer's
 * notifications/cancelled. */
bool relay_call_cancel_unanswered(relay_call *call);

/* Sends a progress notification when the call reports progress: `progress`
 * must grow (the call enforces it), `total` < 0 omits it, `message`
 * (borrowed, may be NULL) is one sentence. At most one per second, except
 * the first and any with `force` (the last of a phase). */
void relay_call_progress(relay_call *call, double progress, double total, const char *message, bool force);

/* The progress counter the call last sent (for callers that continue a
 * sequence). */
double relay_call_last_progress(const relay_call *call);

/* Completes the call exactly once, from any thread: the answer is written
 * through the sink unless the call was cancelled. Takes ownership of
 * `result` (may be NULL) and frees the call. */
void relay_call_complete(relay_call *call, tool_result *result);

#endif
