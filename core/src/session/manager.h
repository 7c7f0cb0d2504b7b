/*
 * session/manager.h — the relay's state and the tools' behaviour: guests,
 * leases, per-guest queues, renewal, the end of the session.
 *
 * The MCP layer hands every validated tools/call to manager_dispatch(); the
 * manager completes it (relay_call_complete) on whatever thread finishes the
 * work. Calls naming the same guest run one after another in arrival order;
 * calls on different guests run concurrently; relay_status answers at once
 * from memory (tools.md §2.5).
 */
#ifndef RELAY_SESSION_MANAGER_H
#define RELAY_SESSION_MANAGER_H

#include <json-c/json.h>

#include "contract/contract.h"
#include "call/call.h"

typedef struct manager manager;
struct relay_settings;
struct relay_backends;

/* Creates the manager over loaded settings and backends (both borrowed for
 * the manager's life) and starts its background work (reconciliation of an
 * earlier process's guests, reaping); never blocks on the backend. It may
 * give the settings a fresh session identity (settings_use_fresh_identity,
 * lifecycle.md §2) when another live process holds the project's, waiting
 * up to 2 s to tell a live holder from an ending one; the settings are not
 * changed after it returns. NULL with a reason on failure. */
manager *manager_create(struct relay_settings *settings, const struct relay_backends *backends, char *errbuf,
			size_t errlen);

/* Takes a validated call. Takes ownership of `args` (a reference). Called on
 * the reader thread in arrival order; must not block on guest work. */
void manager_dispatch(manager *mgr, relay_tool tool, json_object *args, relay_call *call);

/* Ends the session (lifecycle.md §11): stops taking work, lets running
 * operations finish within the grace period, pauses or releases guests.
 * `reason` is "stdin-closed", "stdout-failed", "signal-SIGTERM", ... Blocks
 * until done; returns the process exit status (0 clean, 1 a cleanup step
 * failed). */
int manager_end_session(manager *mgr, const char *reason);

/* A second SIGTERM/SIGINT during the end of the session: skip the rest of
 * the grace period and cancel what still runs. */
void manager_hurry_end(manager *mgr);

void manager_destroy(manager *mgr);

#endif
