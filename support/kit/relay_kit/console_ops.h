/*
 * relay_kit/console_ops.h — a machine plugin's typed console
 * (relay_machine_console_ops of relay/machine.h, ABI 1.7) written once:
 * RK_CONSOLE_DEFINE_OPS(table, route) defines the table, whose four slots
 * each clear the out-parameter, refuse an unknown flag first (R1; none is
 * defined) and hand one rk_console_request to the plugin's `route`. A
 * route over x11vnc calls rk_console_ledger (relay_kit/console.h);
 * machine-service's speaks HTTP. Header-only: it needs the ABI headers and
 * nothing else.
 */
#ifndef RELAY_KIT_CONSOLE_OPS_H
#define RELAY_KIT_CONSOLE_OPS_H

#include <stdio.h>

#include "relay/machine.h"
#include "relay/status.h"

typedef enum rk_console_kind {
	RK_CONSOLE_CAPABILITIES, /* no lease, no ids */
	RK_CONSOLE_RESOLVE,      /* the lease; no ids */
	RK_CONSOLE_OPEN,         /* the lease, console_id, attempt_id */
	RK_CONSOLE_CANCEL        /* the lease, console_id, attempt_id */
} rk_console_kind;

/* One call of the typed console; every pointer borrowed for the call. */
typedef struct rk_console_request {
	rk_console_kind kind;
	const char *name;       /* "capabilities", "resolve", "open", "cancel": for messages */
	const char *lease_json; /* the lease document; NULL for capabilities */
	const char *console_id; /* open and cancel; NULL otherwise */
	const char *attempt_id; /* open and cancel; NULL otherwise */
} rk_console_request;

/* Answers one request: RELAY_OK with *out (host->alloc'd), or a failure
 * with err filled and *out NULL. */
typedef relay_status (*rk_console_route_fn)(relay_plugin_state *state, const rk_console_request *q,
                                            relay_call *call, char **out, relay_error *err);

static inline relay_status rk_console_dispatch(rk_console_route_fn route, relay_plugin_state *state,
                                               const rk_console_request *q, relay_call *call, unsigned flags,
                                               char **out, relay_error *err)
{
	*out = NULL;
	if (flags != 0) { /* no host table before the route: relay/status.h's writer */
		char text[96];
		snprintf(text, sizeof text, "unknown console %s flags 0x%x", q->name, flags);
		return relay_error_put(err, RELAY_E_UNSUPPORTED_FLAGS, 0, text);
	}
	return route(state, q, call, out, err);
}

/* open and cancel: the request of an attempt. */
static inline relay_status rk_console_dispatch_attempt(rk_console_route_fn route, rk_console_kind kind,
                                                       const char *name, relay_plugin_state *state,
                                                       const char *lease_json, const char *console_id,
                                                       const char *attempt_id, relay_call *call,
                                                       unsigned flags, char **out, relay_error *err)
{
	const rk_console_request q = {kind, name, lease_json, console_id, attempt_id};
	return rk_console_dispatch(route, state, &q, call, flags, out, err);
}

/* Defines `const relay_machine_console_ops table` over `route`, once per
 * plugin at file scope (as RELAY_PLUGIN_DEFINE_ENTRY is). The table has the
 * linkage of its declaration in the plugin's header (`extern const ...`,
 * hidden like every symbol of a plugin but its entry), so the plugin's
 * static const machine table can point at it. */
#define RK_CONSOLE_DEFINE_OPS(table, route)                                                                  \
	static relay_status table##_capabilities(relay_plugin_state *state, relay_call *call,                \
	                                         unsigned flags, char **out, relay_error *err)               \
	{                                                                                                    \
		const rk_console_request q = {RK_CONSOLE_CAPABILITIES, "capabilities", NULL, NULL, NULL};    \
		return rk_console_dispatch((route), state, &q, call, flags, out, err);                       \
	}                                                                                                    \
	static relay_status table##_resolve(relay_plugin_state *state, const char *lease_json,               \
	                                    relay_call *call, unsigned flags, char **out, relay_error *err)  \
	{                                                                                                    \
		const rk_console_request q = {RK_CONSOLE_RESOLVE, "resolve", lease_json, NULL, NULL};        \
		return rk_console_dispatch((route), state, &q, call, flags, out, err);                       \
	}                                                                                                    \
	static relay_status table##_open(relay_plugin_state *state, const char *lease_json,                  \
	                                 const char *console_id, const char *attempt_id, relay_call *call,   \
	                                 unsigned flags, char **out, relay_error *err)                       \
	{                                                                                                    \
		return rk_console_dispatch_attempt((route), RK_CONSOLE_OPEN, "open", state, lease_json,      \
		                                   console_id, attempt_id, call, flags, out, err);           \
	}                                                                                                    \
	static relay_status table##_cancel(relay_plugin_state *state, const char *lease_json,                \
	                                   const char *console_id, const char *attempt_id, relay_call *call, \
	                                   unsigned flags, char **out, relay_error *err)                     \
	{                                                                                                    \
		return rk_console_dispatch_attempt((route), RK_CONSOLE_CANCEL, "cancel", state, lease_json,  \
		                                   console_id, attempt_id, call, flags, out, err);           \
	}                                                                                                    \
	const relay_machine_console_ops table = {                                                            \
	    .struct_size = sizeof(relay_machine_console_ops),                                                \
	    .capabilities = table##_capabilities,                                                            \
	    .resolve = table##_resolve,                                                                      \
	    .open = table##_open,                                                                            \
	    .cancel = table##_cancel,                                                                        \
	}

#endif
