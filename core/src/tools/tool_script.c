/*
 * relay_script (spec/tools.md §3.6): the refusals of the tool, then a recorded
 * run or a diagnostic script (run_request.c does the work).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/image_delivery.h"
#include "guestio/receiver_api.h"
#include "runs/run_request.h"
#include "runs/run_state.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* How the run ended, for the lead sentence: "exited with status 3",
 * "was ended by SIGKILL", "was refused before it started: …". */
static void outcome_phrase(strbuf *sb, const json_object *outcome)
{
	gio_outcome o;
	gio_outcome_read(outcome, &o);
	const char *diag = o.diagnostic;
	if (o.kind == GIO_OUTCOME_COMPLETED && o.signal_name)
		strbuf_printf(sb, "was ended by %s", o.signal_name);
	else if (o.kind == GIO_OUTCOME_COMPLETED && o.has_code)
		strbuf_printf(sb, "exited with status %lld", (long long)o.code);
	else if (o.kind == GIO_OUTCOME_REFUSED)
		strbuf_printf(sb, "was refused before it started: %.80s", diag ? diag : "no diagnostic");
	else
		strbuf_printf(sb, "ended uncertain: %.80s", diag ? diag : "no diagnostic");
}

/* What the egress policy did during the run (docs/egress.md): "; 2
 * connections refused by the egress policy (pypi.org:443, 203.0.113.9:22)",
 * and a proxy that stopped. Nothing under nat or without connections. */
static void network_phrase(strbuf *sb, const json_object *network)
{
	int64_t refused = 0, cut = 0;
	jsonx_get_int(network, "refused", &refused);
	jsonx_get_int(network, "cut", &cut);
	if (refused > 0) {
		strbuf_printf(sb, "; %lld connection%s refused by the egress policy (", (long long)refused,
		              refused == 1 ? "" : "s");
		json_object *dests = jsonx_get_array(network, "refusedDestinations");
		size_t n = dests ? json_object_array_length(dests) : 0;
		for (size_t i = 0; i < n; i++)
			strbuf_printf(sb, "%s%s", i ? ", " : "",
			              json_object_get_string(json_object_array_get_idx(dests, i)));
		strbuf_puts(sb, (int64_t)n < refused ? ", …)" : ")");
	}
	const char *stopped = jsonx_get_str(network, "proxyStopped");
	if (stopped)
		strbuf_printf(sb, "; %s during the step (%lld connection%s cut; it was started again)",
		              stopped, (long long)cut, cut == 1 ? "" : "s");
}

/* The lead sentence of a run's result (spec/tools.md §2.3): the step, how it
 * ended, what it left running, that the guest is kept, the after-image. */
static void set_run_lead(tool_result *r, const json_object *structured)
{
	strbuf sb = STRBUF_INIT;
	const char *mode = jsonx_get_str(structured, "evidenceMode");
	bool diagnostic = mode && strcmp(mode, "diagnostic") == 0;
	if (diagnostic)
		strbuf_puts(&sb, "Diagnostic script ");
	else
		strbuf_printf(&sb, "Step %s ", jsonx_get_str(jsonx_get_obj(structured, "step"), "id"));
	outcome_phrase(&sb, jsonx_get_obj(structured, "outcome"));
	json_object *left = jsonx_get_obj(structured, "leftRunning");
	int64_t count = 0;
	if (jsonx_get_int(left, "count", &count) && count > 0) {
		json_object *procs = jsonx_get_array(left, "processes");
		const char *first =
		    procs ? jsonx_get_str(json_object_array_get_idx(procs, 0), "command") : NULL;
		strbuf_printf(&sb, ", leaving %lld process%s running (%.32s%s)", (long long)count,
		              count == 1 ? "" : "es", first ? first : "?", count > 1 ? ", …" : "");
	}
	network_phrase(&sb, jsonx_get_obj(structured, "network"));
	char *phrase = diagnostic
	                   ? strdup("no screenshot (diagnostic)")
	                   : image_delivery_phrase(jsonx_get_obj(structured, "imageDelivery"), "after-image");
	strbuf_printf(&sb, "; the guest is kept; %s", phrase ? phrase : "after-image unknown");
	free(phrase);
	json_object *rec = jsonx_get_obj(structured, "recording");
	const char *rec_status = jsonx_get_str(rec, "status");
	int64_t rec_ms = 0;
	if (rec_status && strcmp(rec_status, "recorded") == 0 && jsonx_get_int(rec, "durationMs", &rec_ms))
		strbuf_printf(&sb, "; screen recording %lld.%01lld s (%s)", (long long)(rec_ms / 1000),
		              (long long)(rec_ms % 1000 / 100), jsonx_get_str(rec, "path"));
	else if (rec_status)
		strbuf_printf(&sb, "; recording off: %.160s", jsonx_get_str(rec, "reason"));
	strbuf_putc(&sb, '.');
	if (strbuf_ok(&sb))
		tool_result_set_lead(r, "%s", strbuf_str(&sb));
	strbuf_free(&sb);
}

/* The result of a run (spec/tools.md §2.3, §3.6): the error or the success of
 * its facts, the compact headline {imageDelivery, executionFailed}, the
 * lead sentence, the text without imageDelivery, the after-image's
 * preview. A run that was not sent is its error alone. Frees `o`. */
static tool_result *run_answer(session_manager *m, guest *g, run_outcome *o)
{
	if (!o->is_run_result) {
		tool_result *r = tools_failure(m, g, &o->base);
		run_outcome_free(o);
		return r;
	}
	json_object *facts = outcome_take_facts(&o->base);
	bool failed = false;
	jsonx_get_bool(facts, "executionFailed", &failed);
	char *headline = image_delivery_headline(jsonx_get_obj(facts, "imageDelivery"), failed);
	tool_result *r = o->base.code ? guest_error(m, g, facts, o->base.code, "%s",
	                                            o->base.message ? o->base.message : "the run failed")
	                              : tool_result_ok(facts, "%s", headline ? headline : "{}");
	if (r) {
		tool_result_set_headline(r, "%s", headline ? headline : "{}");
		set_run_lead(r, r->structured);
		r->text_omits_key = "imageDelivery";
		image_delivery_take_preview(&o->image, &r->image_base64, &r->image_mime);
	}
	free(headline);
	run_outcome_free(o);
	return r;
}

tool_result *tool_script(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	bool diagnostic = false;
	jsonx_get_bool(args, "diagnostic", &diagnostic);
	session_lock(m);
	bool sealed = g->delivered;
	bool reset_pending = run_reset_pending(g);
	bool staged = g->staged && g->phase == PHASE_STAGED;
	bool leased = g->lease_document != NULL && g->guest_root != NULL;
	session_unlock(m);
	if (sealed)
		return guest_error(
		    m, g, NULL, "sealed",
		    "The evidence of %s is already delivered; only relay_release (or a relay_finish "
		    "retry) is possible",
		    g->name);
	if (!leased)
		return guest_error(m, g, NULL, "not-staged",
		                   "Guest %s holds no lease to run scripts in; acquire a guest first",
		                   g->name);
	if (!diagnostic && reset_pending)
		return guest_error(
		    m, g, NULL, "reset-pending",
		    "A recording reset of %s is half done; retry relay_stage to complete it, or use a "
		    "diagnostic shell script",
		    g->name);
	if (!diagnostic && !staged)
		return guest_error(
		    m, g, NULL, "not-staged",
		    "Guest %s is not staged; use relay_stage before a run, or a diagnostic shell script "
		    "for setup diagnosis and repair",
		    g->name);
	run_call c;
	run_outcome o;
	memset(&o, 0, sizeof o);
	if (run_call_parse(m, g, args, &c, &o.base) != 0) {
		run_call_free(&c);
		return tools_failure(m, g, &o.base);
	}
	if (diagnostic)
		run_diagnostic(m, g, &c, call, &o);
	else
		run_recorded(m, g, &c, call, &o);
	run_call_free(&c);
	return run_answer(m, g, &o);
}
