/*
 * relay/console.h — the console kind: acquisition capabilities and
 * console viewing (resolve, open on explicit user request, cancel).
 *
 * Shipped implementation: console-vnc. It reaches the machine backend
 * through the machine's typed console (relay_machine_console_ops of
 * relay/machine.h, lent as relay_machine_link.console), so one console
 * plugin serves machine-service (HTTP), machine-local and machine-docker
 * (x11vnc on the guest's own display) alike.
 *
 * Reports are JSON objects (UTF-8, owned by caller, free with host->free)
 * with schemaVersion 1 and the fields of spec/machine-service.md §9.2. The
 * core normalises tokens and checks identities; a plugin reports what the
 * backend said and never claims pixels, authentication or a person's
 * confirmation that it did not observe.
 */
#ifndef RELAY_CONSOLE_H
#define RELAY_CONSOLE_H

#include <stdint.h>

#include "relay/host.h"
#include "relay/machine.h"
#include "relay/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The machine plugin of the same profile, lent to the console plugin. */
typedef struct relay_machine_link {
	uint32_t struct_size;         /* sizeof(relay_machine_link) as the core compiled it */
	const char *name;             /* machine plugin name; borrowed */
	const relay_machine_ops *ops; /* borrowed */
	relay_plugin_state *state;    /* the machine plugin's state; borrowed */
	/* ABI 1.7. The machine's console, typed; NULL when it has none. Call
	 * its slots with `console_state`, never with `state`: for a machine
	 * plugin of 1.0-1.6 that fills only the string slot `console` this is
	 * the core's adapter (loader/console_adapt.c) and `console_state` the
	 * adapter's own; for a 1.7 one, its console_ops and its state. Read
	 * both only when RELAY_SIZED_HAS(link, console_state): a 1.0-1.6 host's
	 * link ends at `state` (console-vnc refuses such hosts in its entry). */
	const relay_machine_console_ops *console;
	relay_plugin_state *console_state;
} relay_machine_link;

typedef struct relay_console_ops {
	uint32_t struct_size; /* sizeof(relay_console_ops) as compiled by the plugin */

	/* Acquisition capabilities: {"schemaVersion": 1, "options": {"vnc":
	 * {"default": false, "backends": {"linux": {...}, "macos": {...}}}}}. */
	relay_status (*capabilities)(relay_plugin_state *state, const relay_machine_link *machine,
	                             relay_call *call, unsigned flags, char **capabilities_json_out,
	                             relay_error *err);

	/* The console report of a lease (`lease_json` borrowed). No side effect. */
	relay_status (*resolve)(relay_plugin_state *state, const relay_machine_link *machine,
	                        const char *lease_json, relay_call *call, unsigned flags,
	                        char **report_json_out, relay_error *err);

	/* Opens viewing for attempt `attempt_id` of console `console_id` (both
	 * borrowed). Called only on an explicit user request. An attempt id seen
	 * before answers its existing report and launches nothing.
	 * RELAY_E_INDETERMINATE when the outcome is unknown. */
	relay_status (*open)(relay_plugin_state *state, const relay_machine_link *machine,
	                     const char *lease_json, const char *console_id, const char *attempt_id,
	                     relay_call *call, unsigned flags, char **report_json_out, relay_error *err);

	/* Stops what attempt `attempt_id` started. Never releases the guest. */
	relay_status (*cancel)(relay_plugin_state *state, const relay_machine_link *machine,
	                       const char *lease_json, const char *console_id, const char *attempt_id,
	                       relay_call *call, unsigned flags, char **report_json_out, relay_error *err);
} relay_console_ops;

#define RELAY_CONSOLE_OPS_MIN_SIZE (offsetof(relay_console_ops, cancel) + sizeof(void *))

#ifdef __cplusplus
}
#endif

#endif /* RELAY_CONSOLE_H */
