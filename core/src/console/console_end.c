/*
 * console/console_end.c — a console attempt's end and its take-overs
 * (console_end.h).
 */
#include "console/console_end.h"

#include <stdlib.h>
#include <string.h>

#include "console/console_report.h"
#include "console/console_state.h"
#include "session/events.h"
#include "util/jsonx.h"
#include "util/outcome.h"

#define CONSOLE_END_TIMEOUT_MS 30000

void console_record_take_overs(session_manager *m, guest *g, const json_object *obs, const char *console_id,
                               const char *attempt_id)
{
	json_object *takes = jsonx_get_array(jsonx_get_obj(obs, "live_view"), "take_overs");
	for (size_t i = 0; takes && i < json_object_array_length(takes); i++) {
		json_object *t = json_object_array_get_idx(takes, i), *d = json_object_new_object();
		jsonx_add_str(d, "console_id", console_id);
		jsonx_add_str(d, "attempt_id", attempt_id);
		jsonx_add_str(d, "start", jsonx_get_str(t, "start"));
		jsonx_add_str(d, "end", jsonx_get_str(t, "end"));
		guest_event(m, g, "console-take-over", "a person took control in the live view", d);
	}
}

/* The attempt to end, copied under the locks (the session's for the lease,
 * then the slice's); NULL when none is active. */
static char *active_attempt(session_manager *m, guest *g)
{
	session_lock(m);
	slice_lock(g->console);
	const char *id = jsonx_get_str(g->console->attempt, "attempt_id");
	const char *status = jsonx_get_str(g->console->attempt, "status");
	char *attempt_id = g->console->vnc && g->lease_document && id && !console_attempt_terminal(status)
	                       ? strdup(id)
	                       : NULL;
	if (attempt_id)
		jsonx_add_str(g->console->attempt, "status", "uncertain"); /* until the cancel answers */
	slice_unlock(g->console);
	if (attempt_id)
		guest_save(g);
	session_unlock(m);
	return attempt_id;
}

void console_end_with_guest(session_manager *m, guest *g, relay_call *call, const char *why)
{
	char *attempt_id = active_attempt(m, g);
	if (attempt_id == NULL)
		return;
	relay_call *own = call ? call : session_internal_call(m, CONSOLE_END_TIMEOUT_MS);
	json_object *obs = NULL;
	console_guest_facts facts;
	relay_outcome o = OUTCOME_INIT;
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "attempt_id", attempt_id);
	jsonx_add_str(d, "reason", why);
	if (console_resolve_guest(m, g, own, &obs, &facts, &o) != 0) {
		jsonx_add_str(d, "error", o.message);
		guest_event(m, g, "console-cancel-uncertain", o.message, d);
		goto done;
	}
	jsonx_add_str(d, "console_id", facts.console_id);
	guest_event(m, g, "console-cancel-intent", why, d);
	json_object *cancelled =
	    console_attempt_request(m, g, own, &facts, CONSOLE_CANCEL, facts.console_id, attempt_id, &o);
	if (cancelled)
		console_record_take_overs(m, g, cancelled, facts.console_id, attempt_id);
	json_object_put(cancelled);
	json_object_put(obs);
	console_guest_facts_free(&facts);
done:
	outcome_free(&o);
	if (call == NULL && own)
		session_internal_call_done(m, own);
	free(attempt_id);
}
