/*
 * relay_stage (spec/tools.md §3.5): the tool's refusals (sealed, no lease, a
 * reset without a staged recording), one call into runs/stage.h, and the
 * result with its headline.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "runs/run_state.h"
#include "runs/stage.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* "Staged guest <g> (<platform>): N support file(s), workspace N file(s);
 * snapshots on|off (<because>); updated <fields>", from the facts. */
static char *stage_headline(const json_object *facts)
{
	const char *platform = jsonx_get_str(jsonx_get_obj(facts, "receiver"), "platform");
	json_object *files = jsonx_get_array(facts, "files");
	json_object *updated = jsonx_get_array(facts, "updated");
	json_object *ws = jsonx_get_obj(facts, "workspaceFiles");
	json_object *snap = jsonx_get_obj(jsonx_get_obj(facts, "capabilities"), "snapshots");
	bool on = false;
	jsonx_get_bool(snap, "enabled", &on);
	const char *because = jsonx_get_str(snap, "because");
	strbuf head = STRBUF_INIT;
	strbuf_printf(&head, "Staged guest %s (%s): %zu support file(s), ", jsonx_get_str(facts, "guest"),
	              platform ? platform : "unknown", files ? json_object_array_length(files) : 0);
	int64_t count = 0;
	if (ws && jsonx_get_int(ws, "count", &count))
		strbuf_printf(&head, "workspace %lld file(s)", (long long)count);
	else
		strbuf_puts(&head, "no workspace");
	if (on)
		strbuf_puts(&head, "; snapshots on");
	else
		strbuf_printf(&head, "; snapshots off (%s)", because ? because : "no capture plan");
	size_t nupdated = updated ? json_object_array_length(updated) : 0;
	for (size_t i = 0; i < nupdated; i++)
		strbuf_printf(&head, "%s%s", i ? ", " : "; updated ",
		              jsonx_get_str(json_object_array_get_idx(updated, i), "field"));
	return strbuf_detach(&head, NULL);
}

tool_result *tool_stage(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	bool want_reset = false;
	jsonx_get_bool(args, "resetRecording", &want_reset);
	session_lock(m);
	bool sealed = g->delivered, leased = g->lease_document != NULL && g->guest_root != NULL;
	bool pending = run_reset_pending(g), staged = g->staged;
	session_unlock(m);
	if (sealed)
		return guest_error(
		    m, g, NULL, "sealed",
		    "The evidence of %s is already delivered; only relay_release (or a relay_finish "
		    "retry) is possible",
		    g->name);
	if (!leased)
		return guest_error(m, g, NULL, "not-staged", "Guest %s holds no lease to stage", g->name);
	if (want_reset && !staged && !pending)
		return guest_error(m, g, NULL, "not-staged",
		                   "a recording reset needs a staged recording; %s has none (use relay_stage "
		                   "without resetRecording)",
		                   g->name);
	relay_outcome o = OUTCOME_INIT;
	if (stage_guest(m, g, args, call, &o) != 0)
		return tools_failure(m, g, &o);
	json_object *facts = outcome_take_facts(&o);
	outcome_free(&o);
	char *headline = stage_headline(facts);
	tool_result *r = tool_result_ok(facts, "%s", headline ? headline : "Staged");
	free(headline);
	return r;
}
