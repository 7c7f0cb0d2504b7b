/*
 * session/manager.h — the session: its guests, their queues, the session
 * folder and lock, calls being worked on, and the end of the session.
 *
 * The session is the lowest of the back rooms (scripts/layers): it knows
 * nothing of tools, leases or deliveries. What it needs from the rooms
 * above (dispatching a tool call, taking back an earlier process's guests,
 * ending the guests, a guest's download queue) it asks through the
 * session_hooks its creator passes to session_create().
 *
 * The MCP layer hands every validated tools/call to session_dispatch(); the
 * hooks' dispatcher completes it (relay_call_complete) on whatever thread
 * finishes the work. Calls naming the same guest run one after another in
 * arrival order; calls on different guests run concurrently; relay_status
 * answers at once from memory (spec/tools.md §2.5).
 */
#ifndef RELAY_SESSION_MANAGER_H
#define RELAY_SESSION_MANAGER_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "call/call.h"
#include "contract/contract.h"

typedef struct session_manager session_manager;
struct relay_settings;
struct relay_backends;
struct guest;

/* What the session asks of the rooms above it (tools/dispatch.c fills the
 * table the relay uses). Every slot must be set; the table is borrowed for
 * the manager's life. `size` is sizeof(session_hooks). */
typedef struct session_hooks {
	size_t size;
	/* Takes a validated call (and `args`, a reference) and completes it,
	 * at once or later on a guest's queue or a detached thread. Called on
	 * the reader thread in arrival order; must not block on guest work. */
	void (*dispatch)(session_manager *m, relay_tool tool, json_object *args, relay_call *call);
	/* Lists the guests an earlier process left under guests/ and queues
	 * their reconciliation; with `migrate_legacy` first moves a record of
	 * before several guests (the session lock is then held). Without the
	 * lock; at creation and when the startup takes the session lock late. */
	void (*take_back_guests)(session_manager *m, bool migrate_legacy);
	/* The end of the session for every guest (spec/lifecycle.md §11.2 steps
	 * 1-5), once the session stopped taking work. Returns 0, or 1 when a
	 * guest's final renewal or release failed. */
	int (*end_guests)(session_manager *m, const char *reason);
	/* An operation reaches the guest (a transport connection is used): may
	 * lift a paused background download. Without the lock. */
	void (*guest_reached)(session_manager *m, struct guest *g);
	/* The guest is being closed: background work writing for it stops.
	 * Without the lock. */
	void (*guest_closing)(session_manager *m, struct guest *g);
	/* Frees what the rooms above keep for a guest (its download queue)
	 * before the session frees the guest. */
	void (*guest_release_rooms)(struct guest *g);
	/* The guest is about to be released (`why`: "released", "finished"),
	 * before its evidence is packaged: the rooms above end what records
	 * into it (an open console attempt, whose live-view take-overs become
	 * events). `call` may be NULL. On g's queue, without the lock. */
	void (*guest_ending)(session_manager *m, struct guest *g, relay_call *call, const char *why);
	/* The rooms' slices of every guest (session/guest.h). */
	const struct guest_rooms *rooms;
} session_hooks;

/* Creates the manager over loaded settings and backends and the hooks of
 * the rooms above (all borrowed for the manager's life) and starts its
 * background work (reconciliation of an earlier process's guests, reaping);
 * never blocks on the backend. An incomplete hook table is refused. It may
 * give the settings a fresh session identity (settings_use_fresh_identity,
 * spec/lifecycle.md §2) when another live process holds the project's, waiting
 * up to 2 s to tell a live holder from an ending one; the settings are not
 * changed after it returns. NULL with a reason on failure. */
session_manager *session_create(struct relay_settings *settings, const struct relay_backends *backends,
                                const session_hooks *hooks, char *errbuf, size_t errlen);

/* Takes a validated call: hands it to hooks->dispatch. Takes ownership of
 * `args` (a reference). Called on the reader thread in arrival order; must
 * not block on guest work. */
void session_dispatch(session_manager *mgr, relay_tool tool, json_object *args, relay_call *call);

/* Ends the session (spec/lifecycle.md §11): stops taking work, then hands over
 * to hooks->end_guests, which lets running operations finish within the
 * grace period and pauses or releases guests.
 * `reason` is "stdin-closed", "stdout-failed", "signal-SIGTERM", ... Blocks
 * until done; returns the process exit status (0 clean, 1 a cleanup step
 * failed). */
int session_end(session_manager *mgr, const char *reason);

/* A second SIGTERM/SIGINT during the end of the session: skip the rest of
 * the grace period and cancel what still runs. */
void session_hurry_end(session_manager *mgr);

void session_destroy(session_manager *mgr);

#endif
