/*
 * relay_finish (spec/tools.md §3.9, spec/evidence.md §9.1): the refusals, then the
 * packaging of delivery/finish.h (downloads closed, outputs, recording,
 * package delivered and verified), and only then the destruction of the
 * machine (lease/, verified exactly as relay_release does it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "console/console_end.h"
#include "delivery/finish.h"
#include "lease/lifecycle.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/jsonx.h"
#include "util/outcome.h"

/* Step 8: destruction, verified. The result of relay_finish either way:
 * on a failure the package stands and the guest stays held with
 * delivered: true (step 9). */
static tool_result *destroy(session_manager *m, guest *g, const finish_report *fr, relay_call *call)
{
	relay_call_progress(call, FINISH_STEPS, FINISH_STEPS, "destruction", true);
	tool_result *result = NULL;
	tool_result *destroyed = tools_release_finished(m, g, call);
	if (destroyed == NULL || destroyed->is_error) {
		json_object *e = destroyed ? jsonx_get_obj(destroyed->structured, "error") : NULL;
		const char *code =
		    jsonx_get_str(e, "code") ? jsonx_get_str(e, "code") : "destruction-unverified";
		const char *msg = jsonx_get_str(e, "message")
		                      ? jsonx_get_str(e, "message")
		                      : "the machine's destruction could not be verified";
		result = guest_error(m, g, finish_facts(m, g, fr, false), code,
		                     "evidence delivered and verified at %s, but %s", fr->evidence, msg);
		tool_result_free(destroyed);
		return result;
	}
	tool_result_free(destroyed);
	return tool_result_ok(finish_facts(m, g, fr, true),
	                      "Finished guest %s: evidence delivered and verified at %s; snapshots %s; "
	                      "execution %s; not reviewed by a person; machine destroyed",
	                      g->name, fr->evidence, fr->completeness ? fr->completeness : "incomplete",
	                      fr->execution ? fr->execution : "uncertain");
}

tool_result *tool_finish(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	session_lock(m);
	bool staged = g->staged, delivered = g->delivered;
	guest_phase phase = g->phase;
	session_unlock(m);

	/* 1. Nothing recorded, nothing to package. */
	if (!staged && !delivered)
		return guest_error(
		    m, g, NULL, "not-staged",
		    "nothing was recorded on guest %s (it was never staged); use relay_release", g->name);
	if (phase != PHASE_STAGED && phase != PHASE_READY && phase != PHASE_FINISHING &&
	    phase != PHASE_RELEASING)
		return guest_error(m, g, NULL, "internal", "guest %s is %s; relay_finish cannot run now",
		                   g->name, guest_phase_name(phase));

	/* 2-7. */
	finish_report fr = FINISH_REPORT_INIT;
	relay_outcome o = OUTCOME_INIT;
	tool_result *result = NULL;
	console_end_with_guest(m, g, call, "finished"); /* take-overs into the package */
	if (finish_package(m, g, call, &fr, &o) != 0)
		result = tools_failure(m, g, &o);
	else
		result = destroy(m, g, &fr, call);
	outcome_free(&o);
	finish_report_free(&fr);
	return result;
}
