/*
 * profile/backends.h — which plugin fills each slot (the MCP_RELAY_BACKEND
 * row of docs/hosts.md, Settings), loading them through the loader, and picking the transport
 * for a lease.
 *
 *   local            machine-local (machine + transport), capture-x11, console-vnc
 *   machine-service  machine-service (machine + its own transport),
 *                    transfer-ssh (for leases with an SSH endpoint),
 *                    capture-cua, console-vnc
 *   /abs/path.so     that plugin in every slot it provides
 *   environment      relayPlugins of the profile, else the machine-service set
 */
#ifndef RELAY_PROFILE_BACKENDS_H
#define RELAY_PROFILE_BACKENDS_H

#include <pthread.h>
#include <stdbool.h>

#include "loader/loader.h"
#include "profile/settings.h"

typedef enum backend_slot {
	SLOT_MACHINE = 0,
	SLOT_TRANSPORT,
	SLOT_CAPTURE,
	SLOT_CONSOLE,
	SLOT_COUNT
} backend_slot;

typedef struct relay_backends {
	char *names[SLOT_COUNT];              /* plugin name or .so path per slot; NULL = empty slot */
	loaded_plugin *plugins[SLOT_COUNT];   /* after backends_load(); NULL when empty or failed */
	char *load_errors[SLOT_COUNT];        /* the loader's message when loading failed */
	relay_status load_status[SLOT_COUNT]; /* RELAY_OK, or the loader's code when loading failed
	                                       * (RELAY_E_NOT_FOUND: no such plugin installed) */
	plugin_registry registry;
	relay_machine_link machine_link; /* lent to the console plugin */

	/* Loading runs once, in the background; `loaded` is set under `lock`
	 * and waiters are woken through `ready`. */
	pthread_mutex_t lock;
	pthread_cond_t ready;
	bool loading;
	bool loaded;
} relay_backends;

const char *backends_slot_name(backend_slot slot);

/* Fills names[] from the settings; loads nothing. */
void backends_select(relay_backends *backends, const relay_settings *settings);

/* Loads every named plugin through the loader (plugin state folders under
 * <state root>/plugins/<name>/), records failures in load_errors[] and logs
 * them, then marks the set loaded. Safe to call from a background thread. */
void backends_load(relay_backends *backends, const relay_settings *settings);

/* Loads the backends once, on first need: the first caller loads, later
 * and concurrent callers wait until that load finished. A session that
 * never needs a backend (relay_status only) never maps any plugin. */
void backends_ensure_loaded(relay_backends *backends, const relay_settings *settings);

/* Blocks until backends_load() finished. */
void backends_wait(relay_backends *backends);

/* The plugin that serves exec/push/pull for a lease (borrowed), or NULL:
 * transfer-ssh (the transport slot) when the lease carries "ssh" and the
 * machine plugin is not itself the transport slot, else the machine plugin
 * when it provides the transport kind, else the transport slot. A lease
 * with "ssh" falls back to the machine plugin only when the transport slot
 * is empty or its plugin is not installed; when it is installed and failed
 * to load (bad options, another ABI), NULL: the caller reports
 * load_errors[SLOT_TRANSPORT] instead of quietly using another transport. */
loaded_plugin *backends_transport_for(relay_backends *backends, const char *lease_json);

/* The plugin's name for status ("machine-local"), or the slot's configured
 * name when it did not load, or NULL for an empty slot. */
const char *backends_display_name(const relay_backends *backends, backend_slot slot);

/* True when the slot's plugin works through the machine service at the
 * relay's MCP_RELAY_URL (status names the service; the registry's Machine
 * cell names the service and environment). A property of the slot known
 * from the selection, without loading anything. */
bool backends_uses_service(const relay_backends *backends, backend_slot slot);

void backends_free(relay_backends *backends);

#endif
