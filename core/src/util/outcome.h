/*
 * util/outcome.h — what a domain operation (a lease, a run, a delivery)
 * answers, before a tool handler turns it into an MCP result.
 *
 * The convention of the core (docs/development.md, "Errors"):
 *  - a plugin call and a low-level helper return relay_status and fill a
 *    caller-provided relay_error (relay/status.h, util/error.h);
 *  - a domain operation of a room (session/, lease/, runs/, delivery/,
 *    console/, catalog/) returns 0 or -1 and fills a caller-provided
 *    relay_outcome: on failure a spec/tools.md §2.4 code and one sentence, and in
 *    both cases the facts it found (the structured content);
 *  - only tools/ builds tool_result (mcp/tool_result.h) from an outcome:
 *    headline, lead, the "error" object, "guestState" (scripts/layers
 *    refuses mcp/tool_result.h elsewhere).
 *
 * An outcome starts as OUTCOME_INIT; every field is owned by it and freed
 * by outcome_free(). After outcome_fail() `facts` is still an object (what
 * was known when it failed), never NULL.
 */
#ifndef RELAY_UTIL_OUTCOME_H
#define RELAY_UTIL_OUTCOME_H

#include <json-c/json.h>
#include <stdbool.h>

typedef struct relay_outcome {
	/* NULL: the operation succeeded. Otherwise a spec/tools.md §2.4 code
	 * ("transfer-failed", "invalid-input", ...): static storage. */
	const char *code;
	/* Failure: one sentence naming what is wrong and how to fix it (UTF-8,
	 * owned). Success: NULL, or a sentence the handler may use. */
	char *message;
	/* Owned; NULL until outcome_facts() or outcome_fail() creates it. */
	json_object *facts;
} relay_outcome;

#define OUTCOME_INIT                                                                                         \
	{                                                                                                    \
		NULL, NULL, NULL                                                                             \
	}

/* The facts object, created empty on first use. NULL only when out of memory. */
json_object *outcome_facts(relay_outcome *o);

/* Records a failure: `code` (static), the formatted sentence (replacing an
 * earlier one). Returns -1, so `return outcome_fail(o, ...)` ends a domain
 * function. */
int outcome_fail(relay_outcome *o, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True when outcome_fail() was called. */
bool outcome_failed(const relay_outcome *o);

/* Hands the facts to the caller (owned; the outcome keeps none). Never NULL
 * unless out of memory. */
json_object *outcome_take_facts(relay_outcome *o);

/* Frees what the outcome owns and resets it to OUTCOME_INIT. */
void outcome_free(relay_outcome *o);

#endif
