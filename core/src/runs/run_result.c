/* Host files, outcomes and the result's facts of a run, and what a run
 * records (spec/evidence.md §3, spec/guest.md §15 steps 2, 7); see run_internal.h. */
#include "runs/run_request.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runs/run_internal.h"
#include "runs/run_state.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

/* ---- host files ------------------------------------------------------------------ */

relay_status run_write_host_file(session_manager *m, guest *g, const char *evidence, const char *sub,
                                 const char *name, const void *data, size_t len, relay_error *err)
{
	char errbuf[512];
	if (guest_ensure_evidence_dir(m, g, errbuf, sizeof errbuf) != 0)
		return relay_error_set(err, RELAY_E_IO, 0, "%s", errbuf);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/host/%s", evidence, sub);
	relay_status st = fs_mkdir_p(strbuf_str(&sb), 0700, err);
	if (st == RELAY_OK) {
		strbuf_printf(&sb, "/%s", name);
		st = fs_write_durable(strbuf_str(&sb), data, len, 0600, err);
	}
	strbuf_free(&sb);
	return st;
}

relay_status run_write_host_json(session_manager *m, guest *g, const char *evidence, const char *sub,
                                 const char *name, const json_object *obj, relay_error *err)
{
	char *text = jsonx_to_string(obj, JSONX_PRETTY);
	if (text == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, text);
	strbuf_putc(&sb, '\n');
	free(text);
	relay_status st = run_write_host_file(m, g, evidence, sub, name, sb.data, sb.len, err);
	strbuf_free(&sb);
	return st;
}

void run_now_iso_millis(char out[25])
{
	time_format_iso_millis(clock_now_ms(), out);
}

/* ---- outcomes --------------------------------------------------------------------- */

json_object *run_outcome_uncertain(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	json_object *o = json_object_new_object();
	jsonx_add_str(o, "kind", "uncertain");
	jsonx_add_str(o, "diagnostic", strbuf_str(&sb));
	strbuf_free(&sb);
	return o;
}

const char *run_signal_name(int sig, char buf[32])
{
	const char *abbrev = sigabbrev_np(sig);
	if (abbrev)
		snprintf(buf, 32, "SIG%s", abbrev);
	else
		snprintf(buf, 32, "%d", sig);
	return buf;
}

bool run_execution_failed(const json_object *outcome)
{
	const char *kind = jsonx_get_str(outcome, "kind");
	if (kind == NULL || strcmp(kind, "completed") != 0)
		return true;
	json_object *status = jsonx_get_obj(outcome, "exitStatus");
	int64_t code = -1;
	json_object *sig = NULL;
	json_object_object_get_ex(status, "signal", &sig);
	if (!jsonx_get_int(status, "code", &code) || code != 0)
		return true;
	return sig != NULL && !json_object_is_type(sig, json_type_null);
}

const char *run_error_code_for(const json_object *outcome)
{
	const char *kind = jsonx_get_str(outcome, "kind");
	if (kind && strcmp(kind, "refused") == 0)
		return "execution-refused";
	if (kind && strcmp(kind, "completed") == 0)
		return "execution-failed";
	return "execution-uncertain";
}

char *run_failure_message(const json_object *outcome, const char *execution_id)
{
	strbuf sb = STRBUF_INIT;
	const char *kind = jsonx_get_str(outcome, "kind");
	const char *diag = jsonx_get_str(outcome, "diagnostic");
	if (kind && strcmp(kind, "refused") == 0) {
		strbuf_printf(
		    &sb,
		    "The receiver refused run %s before it started: %s. Nothing ran; fix the cause and "
		    "submit a new run.",
		    execution_id, diag ? diag : "no diagnostic");
	} else if (kind && strcmp(kind, "completed") == 0) {
		json_object *status = jsonx_get_obj(outcome, "exitStatus");
		int64_t code = 0;
		const char *sig = jsonx_get_str(status, "signal");
		if (sig)
			strbuf_printf(&sb, "Run %s ended by signal %s; the guest is kept.", execution_id,
			              sig);
		else if (jsonx_get_int(status, "code", &code))
			strbuf_printf(&sb, "Run %s exited with status %lld; the guest is kept.", execution_id,
			              (long long)code);
		else
			strbuf_printf(&sb, "Run %s ended without an exit status; the guest is kept.",
			              execution_id);
	} else {
		strbuf_printf(
		    &sb,
		    "The outcome of run %s is uncertain: %s. It is never replayed; inspect the guest "
		    "(a diagnostic shell script) and submit a new operation.",
		    execution_id, diag ? diag : "no diagnostic");
	}
	return strbuf_detach(&sb, NULL);
}

/* ---- the result ------------------------------------------------------------------- */

void run_outcome_free(run_outcome *o)
{
	if (o == NULL)
		return;
	outcome_free(&o->base);
	image_delivery_result_clear(&o->image);
	memset(o, 0, sizeof *o);
}

/* "delivery-<status>" of an after-image that cannot be delivered, as
 * static storage (relay_outcome.code). */
static const char *delivery_code(const char *status)
{
	static const char *const codes[] = {
	    "delivery-" IMAGE_STATUS_DOWNLOADED,      "delivery-" IMAGE_STATUS_CAPTURE_FAILED,
	    "delivery-" IMAGE_STATUS_CAPTURE_UNKNOWN, "delivery-" IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
	    "delivery-" IMAGE_STATUS_UNSAFE_PATH,     "delivery-" IMAGE_STATUS_IMAGE_MISSING,
	    "delivery-" IMAGE_STATUS_STALE_REFERENCE, "delivery-" IMAGE_STATUS_INTEGRITY_FAILED,
	    "delivery-" IMAGE_STATUS_TRANSFER_FAILED, "delivery-" IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
	};
	for (size_t i = 0; status && i < sizeof codes / sizeof codes[0]; i++)
		if (strcmp(codes[i] + 9, status) == 0)
			return codes[i];
	return status ? "delivery-failed" : "delivery-(null)";
}

int run_finish(session_manager *m, guest *g, json_object *facts, const char *execution_id, run_outcome *out)
{
	out->is_run_result = true;
	json_object_put(out->base.facts);
	out->base.facts = facts;
	json_object *outcome = jsonx_get_obj(facts, "outcome");
	json_object *d = jsonx_get_obj(facts, "imageDelivery");
	bool failed = run_execution_failed(outcome);
	jsonx_add_bool(facts, "executionFailed", failed);
	session_lock(m);
	jsonx_add_str(facts, "evidencePath", g->evidence_path);
	session_unlock(m);
	jsonx_add_bool(facts, "leaseReleased", false);
	if (!failed && !image_delivery_status_is_error(jsonx_get_str(d, "status")))
		return 0;
	char *message = NULL;
	const char *code = NULL;
	if (failed) {
		code = run_error_code_for(outcome);
		message = run_failure_message(outcome, execution_id);
	} else {
		code = delivery_code(jsonx_get_str(d, "status"));
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "Run %s completed, but its after-image cannot be delivered (%s): %s",
		              execution_id, jsonx_get_str(d, "status"),
		              jsonx_get_str(d, "diagnostic") ? jsonx_get_str(d, "diagnostic")
		                                             : "no diagnostic");
		message = strbuf_detach(&sb, NULL);
	}
	/* lastError first, so that the result's guestState shows it. */
	guest_set_last_error(m, g, "relay_script: %s", message ? message : "the run failed");
	outcome_fail(&out->base, code, "%s", message ? message : "the run failed");
	free(message);
	return -1;
}

json_object *run_result_record(session_manager *m, guest *g, const run_outcome *out, bool guest_state)
{
	json_object *rec = json_object_new_object();
	json_object_object_foreach(out->base.facts, key, value)
	{
		jsonx_add(rec, key, json_object_get(value));
	}
	if (!outcome_failed(&out->base))
		return rec;
	json_object *error = json_object_new_object();
	jsonx_add_str(error, "code", out->base.code);
	jsonx_add_str(error, "message", out->base.message ? out->base.message : "");
	jsonx_add(rec, "error", error);
	if (guest_state) {
		session_lock(m);
		jsonx_add(rec, "guestState", guest_status_json(g));
		session_unlock(m);
	}
	return rec;
}

void run_record_end(session_manager *m, guest *g, const char *evidence, const char *execution_id,
                    const run_outcome *out, const json_object *step, bool cancelled)
{
	relay_error err;
	strbuf name = STRBUF_INIT;
	strbuf_printf(&name, "%s.json", execution_id);
	json_object *rec = run_result_record(m, g, out, true);
	if (run_write_host_json(m, g, evidence, "receipts", strbuf_str(&name), rec, &err) != RELAY_OK)
		log_error("cannot write the host receipt of %s: %s", execution_id, err.message);
	json_object_put(rec);
	strbuf_free(&name);
	json_object *outcome = jsonx_get_obj(out->base.facts, "outcome");
	bool failed = run_execution_failed(outcome);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "executionId", execution_id);
	jsonx_add_str(details, "stepId", jsonx_get_str(step, "id"));
	jsonx_add(details, "outcome", outcome ? json_object_get(outcome) : NULL);
	guest_event(m, g, "run", jsonx_get_str(step, "title"), details);
	if (failed) {
		json_object *d2 = json_object_new_object();
		jsonx_add_str(d2, "executionId", execution_id);
		jsonx_add(d2, "outcome", outcome ? json_object_get(outcome) : NULL);
		guest_event(m, g, "execution-failed", jsonx_get_str(step, "title"), d2);
	}
	if (cancelled)
		lifecycle_record_cancelled(
		    m, g, "relay_script", true,
		    "the run was cancelled while the receiver ran it; recorded uncertain, "
		    "never replayed");
}

int run_not_dispatched(session_manager *m, guest *g, const char *evidence, const char *execution_id,
                       const char *code, bool cancelled, run_outcome *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	json_object *rec = json_object_new_object();
	jsonx_add_str(rec, "guest", g->name);
	jsonx_add_str(rec, "executionId", execution_id);
	json_object *o = json_object_new_object();
	jsonx_add_str(o, "kind", "refused");
	jsonx_add_str(o, "diagnostic", strbuf_str(&sb));
	jsonx_add(rec, "outcome", o);
	jsonx_add_bool(rec, "dispatched", false);
	relay_error err;
	strbuf name = STRBUF_INIT;
	strbuf_printf(&name, "%s.json", execution_id);
	if (evidence &&
	    run_write_host_json(m, g, evidence, "receipts", strbuf_str(&name), rec, &err) != RELAY_OK)
		log_error("cannot write the host receipt of %s: %s", execution_id, err.message);
	strbuf_free(&name);
	json_object_put(rec);
	guest_set_last_error(m, g, "relay_script %s was not sent: %s", execution_id, strbuf_str(&sb));
	if (cancelled)
		lifecycle_record_cancelled(m, g, "relay_script", false,
		                           "cancelled before the request reached the guest; nothing ran");
	out->is_run_result = false;
	json_object *s = outcome_facts(&out->base);
	jsonx_add_str(s, "guest", g->name);
	jsonx_add_str(s, "executionId", execution_id);
	jsonx_add_bool(s, "dispatched", false);
	outcome_fail(&out->base, code, "Run %s was not started: %s; nothing ran in the guest", execution_id,
	             strbuf_str(&sb));
	strbuf_free(&sb);
	return -1;
}

void run_use_step_id(session_manager *m, guest *g, const char *id)
{
	slice_lock(g->run);
	json_object_array_add(g->run->used_step_ids, json_object_new_string(id));
	slice_unlock(g->run);
	guest_persist(m, g);
}
