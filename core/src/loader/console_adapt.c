/* console_adapt.c — the typed console over a 1.0-1.6 string slot (console_adapt.h). */
#include "loader/console_adapt.h"

#include <errno.h>
#include <stdlib.h>

#include "util/error.h"
#include "util/jsonx.h"

/* Calls the string slot with `op` and the body of exactly the fields
 * given: the lease document's "lease_id" (absent when it has none; the
 * backend then refuses with its own sentence), console_id, attempt_id
 * ({} for "capabilities", which has no lease). No flag is defined for the
 * typed slots: any bit is refused here (R1) and the slot gets 0. */
static relay_status call_string(relay_plugin_state *state, const char *lease_json, const char *op,
                                const char *console_id, const char *attempt_id, relay_call *call,
                                unsigned flags, char **report_out, relay_error *err)
{
	*report_out = NULL;
	if (flags != 0)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown console %s flags 0x%x", op,
		                       flags);
	const console_adapter *a = state;
	json_object *lease = lease_json ? jsonx_parse_str(lease_json, NULL, 0) : NULL;
	json_object *body = json_object_new_object();
	const char *lease_id = jsonx_get_str(lease, "lease_id");
	if (lease_id)
		json_object_object_add(body, "lease_id", json_object_new_string(lease_id));
	if (console_id)
		json_object_object_add(body, "console_id", json_object_new_string(console_id));
	if (attempt_id)
		json_object_object_add(body, "attempt_id", json_object_new_string(attempt_id));
	char *text = jsonx_to_string(body, 0);
	relay_status s = text ? a->console(a->state, lease_json, op, text, call, 0, report_out, err)
	                      : relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	free(text);
	json_object_put(body);
	json_object_put(lease);
	return s;
}

static relay_status adapt_capabilities(relay_plugin_state *state, relay_call *call, unsigned flags,
                                       char **capabilities_json_out, relay_error *err)
{
	return call_string(state, NULL, "capabilities", NULL, NULL, call, flags, capabilities_json_out, err);
}

static relay_status adapt_resolve(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                  unsigned flags, char **report_json_out, relay_error *err)
{
	return call_string(state, lease_json, "resolve", NULL, NULL, call, flags, report_json_out, err);
}

static relay_status adapt_open(relay_plugin_state *state, const char *lease_json, const char *console_id,
                               const char *attempt_id, relay_call *call, unsigned flags,
                               char **report_json_out, relay_error *err)
{
	return call_string(state, lease_json, "open", console_id, attempt_id, call, flags, report_json_out,
	                   err);
}

static relay_status adapt_cancel(relay_plugin_state *state, const char *lease_json, const char *console_id,
                                 const char *attempt_id, relay_call *call, unsigned flags,
                                 char **report_json_out, relay_error *err)
{
	return call_string(state, lease_json, "cancel", console_id, attempt_id, call, flags, report_json_out,
	                   err);
}

const relay_machine_console_ops console_adapter_ops = {
    .struct_size = sizeof(relay_machine_console_ops),
    .capabilities = adapt_capabilities,
    .resolve = adapt_resolve,
    .open = adapt_open,
    .cancel = adapt_cancel,
};
