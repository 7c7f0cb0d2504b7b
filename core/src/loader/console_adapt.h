/*
 * loader/console_adapt.h — the typed console (relay_machine_console_ops,
 * ABI 1.7) of a machine plugin built against 1.0-1.6 that fills only the
 * string slot `console` (relay/machine.h): the one place the core turns
 * the typed calls into that slot's "capabilities" / "resolve" / "open" /
 * "cancel" with the body {"lease_id", "console_id", "attempt_id"}, so a
 * console plugin only ever calls the typed table.
 */
#ifndef RELAY_LOADER_CONSOLE_ADAPT_H
#define RELAY_LOADER_CONSOLE_ADAPT_H

#include "relay/machine.h"

/* What the adapter calls: the plugin's string slot and its state. The
 * adapter's slots take a pointer to this as their relay_plugin_state. */
typedef struct console_adapter {
	relay_status (*console)(relay_plugin_state *state, const char *lease_json, const char *op,
	                        const char *request_json, relay_call *call, unsigned flags,
	                        char **response_json_out, relay_error *err);
	relay_plugin_state *state;
} console_adapter;

/* The typed table whose slots call a console_adapter (static storage). */
extern const relay_machine_console_ops console_adapter_ops;

#endif
