/*
 * loader/loader.h — finding, opening and checking plugins (relay/plugin.h).
 *
 * The checks run in the order relay/plugin.h lists, each failure with its
 * own message (docs/plugin-abi.md quotes them). A plugin that passed init()
 * is never dlclose()d; loader_shutdown() only calls fini().
 */
#ifndef RELAY_LOADER_LOADER_H
#define RELAY_LOADER_LOADER_H

#include <stdbool.h>

#include "relay/capture.h"
#include "relay/console.h"
#include "relay/host.h"
#include "relay/machine.h"
#include "relay/plugin.h"
#include "relay/transport.h"

#include "loader/console_adapt.h"

#define LOADER_MAX_PLUGINS 16

/* One loaded plugin. Descriptor and ops tables are zero-filled copies of
 * min(plugin size, our size) bytes, so fields a plugin does not know read as
 * NULL. */
typedef struct loaded_plugin {
	char *path;                         /* owned */
	void *handle;                       /* dlopen handle; never closed after init */
	relay_plugin_descriptor descriptor; /* copy */
	relay_machine_ops machine;          /* copy, zeroed when not provided */
	relay_transport_ops transport;
	relay_capture_ops capture;
	relay_console_ops console;
	relay_plugin_state *state; /* from init() */
	bool initialised;
	/* The machine's console, typed (ABI 1.7): a zero-filled copy of the
	 * plugin's console_ops, or console_adapter_ops over its 1.0-1.6 string
	 * slot (console_adapter); zeroed when it has neither.
	 * loader_machine_link() lends it with the state its slots take. */
	relay_machine_console_ops machine_console;
	console_adapter console_adapter;
} loaded_plugin;

typedef struct plugin_registry {
	loaded_plugin *plugins[LOADER_MAX_PLUGINS];
	size_t count;
	/* The services table init() receives; NULL = loader_host_table().
	 * `mcp-relay plugin-test` lends a counting one (cli/plugin_test.c). */
	const relay_host *host;
} plugin_registry;

/* Loads the plugin at `path` for profile slot `slot` (one relay_plugin_kind),
 * running every check, and init() with `config_json` (borrowed). A path
 * already loaded is reused after checking it also provides `slot`.
 * *out is borrowed from the registry. On failure err->message is the exact
 * loader message. */
relay_status loader_load(plugin_registry *registry, const char *path, relay_plugin_kind slot,
                         const char *config_json, loaded_plugin **out, relay_error *err);

/* The machine link a console plugin gets for the machine plugin `p`
 * (relay/console.h): its name, ops and state, and its typed console. */
void loader_machine_link(loaded_plugin *p, relay_machine_link *out);

/* Calls fini() of every initialised plugin, in reverse load order, and frees
 * the registry's records (handles stay open). */
void loader_shutdown(plugin_registry *registry);

/* The name of a kind for messages ("machine", ...). */
const char *loader_kind_name(relay_plugin_kind kind);

/* Resolves a plugin name ("machine-local") to a path: each folder of
 * MCP_RELAY_PLUGIN_PATH (colon-separated) first, then the build layout next
 * to the executable (<exe dir>/lib/mcp-relay/plugins, when that folder
 * exists), then the installed layout (<prefix>/<libdir>/mcp-relay/plugins,
 * with <prefix> the executable's folder less its <bindir>, so an installed
 * tree is relocatable). A value containing '/' is taken as a path.
 * Returns a malloc'd path, or NULL with the folders searched in err. */
char *loader_find_plugin(const char *name, relay_error *err);

/* Folder holding receiver builds: <exe dir>/libexec/mcp-relay/receivers or
 * the installed layout (<prefix>/<libexecdir>/mcp-relay/receivers, <prefix>
 * as above); MCP_RELAY_RECEIVER_DIR overrides. malloc'd. */
char *loader_receivers_dir(void);

/* Folder of the running executable (malloc'd). */
char *loader_exe_dir(void);

/* The services table lent to every plugin (loader/host.c). */
const relay_host *loader_host_table(void);

/* Where host->lease_changed (ABI 1.5) goes: `fn(ctx, vm)` for each call
 * until replaced (NULL: dropped). Setting waits for a call in flight, so
 * after loader_set_lease_changed(NULL, NULL) returns no call reaches the
 * old `ctx`. Never set it while holding a lock `fn` takes. */
typedef void (*loader_lease_changed_fn)(void *ctx, const char *vm);
void loader_set_lease_changed(loader_lease_changed_fn fn, void *ctx);
/* Drops the receiver when its ctx is `ctx` (a manager being destroyed). */
void loader_forget_lease_changed(void *ctx);

#endif
