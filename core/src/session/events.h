/*
 * session/events.h — lifecycle events in a guest's evidence folder
 * (spec/evidence.md §2.3): host/events/<ms>-<random>.json = {kind, because, at,
 * details}. After the package is sealed, events go to the sibling
 * <evidence folder>.lifecycle-events/ instead.
 */
#ifndef RELAY_SESSION_EVENTS_H
#define RELAY_SESSION_EVENTS_H

#include <json-c/json.h>
#include <stdbool.h>

#include "session/manager_internal.h"

/* Writes one event; `details` (may be NULL) is taken. Never fails the
 * caller: a write failure is logged. Call without the manager's lock. */
void guest_event(session_manager *m, guest *g, const char *kind, const char *because, json_object *details);

/* Creates the evidence folder (0700, no symlinked component below the
 * project folder). 0, or -1 with a reason. */
int guest_ensure_evidence_dir(session_manager *m, guest *g, char *errbuf, size_t errlen);

/* Records an `operation-cancelled` event for `operation` ("relay_acquire",
 * ...). `uncertain` says the operation had started and its effect is not
 * known (never replayed). Used by every room whose operations can be
 * cancelled (lease/, runs/, tools/). */
void lifecycle_record_cancelled(session_manager *m, guest *g, const char *operation, bool uncertain,
                                const char *why);

#endif
