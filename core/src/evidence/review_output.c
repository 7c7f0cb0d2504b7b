/*
 * The review data of a derivation: steps, findings and reasons
 * (review_state.h; spec/evidence.md §12, docs/evidence-format.md "Review").
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egress/records.h"
#include "evidence/journal.h"
#include "evidence/review_state.h"
#include "evidence/verify.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define NO_SCREENSHOT_DIAGNOSTIC                                                                             \
	"No screenshot evidence. This diagnostic shell script ran without the receiver."

/* ---- output ------------------------------------------------------------------------ */

static json_object *reason(const char *text, json_object *step_ids, const char *action)
{
	json_object *o = json_object_new_object();
	jsonx_add_str(o, "text", text);
	jsonx_add(o, "stepIds", step_ids ? step_ids : json_object_new_array());
	jsonx_add_str(o, "action", action);
	return o;
}

static json_object *ids1(const char *id)
{
	json_object *a = json_object_new_array();
	json_object_array_add(a, json_object_new_string(id ? id : ""));
	return a;
}

static const char *step_id_of(const rv_action *a)
{
	const char *id = a->start ? jsonx_get_str(a->start, "stepId") : NULL;
	if (id == NULL && a->refusal)
		id = jsonx_get_str(a->refusal, "stepId");
	if (id == NULL && a->record)
		id = jsonx_get_str(a->record, "stepId");
	return id ? id : a->action_id;
}

static const char *title_of(const rv_action *a)
{
	const char *t = a->start ? jsonx_get_str(a->start, "title") : NULL;
	if (t == NULL && a->refusal)
		t = jsonx_get_str(a->refusal, "title");
	if (t == NULL && a->record)
		t = jsonx_get_str(a->record, "title");
	return t ? t : "(untitled step)";
}

/* "exit status n" | "signal s" | "a timeout" | "too much output". */
static void failure_words(rv *r, const rv_action *a, char *out, size_t n)
{
	json_object *val =
	    a->completion ? jsonx_get_obj(jsonx_get_obj(a->completion, "toolOutcome"), "value") : NULL;
	json_object *es = val ? jsonx_get_obj(val, "exitStatus") : NULL;
	json_object *rc = a->execution_id ? rv_guest_receipt(r, a->execution_id) : NULL;
	if (rc == NULL && a->execution_id)
		rc = rv_map_get(r->host_receipts, a->execution_id);
	if (es == NULL && rc != NULL)
		es = jsonx_get_obj(jsonx_get_obj(rc, "outcome"), "exitStatus");
	bool timed_out = false, truncated = false;
	if (!jsonx_get_bool(val, "timedOut", &timed_out))
		jsonx_get_bool(rc, "timedOut", &timed_out);
	if (!jsonx_get_bool(val, "outputTruncated", &truncated))
		jsonx_get_bool(rc, "outputTruncated", &truncated);
	int64_t code = 0;
	const char *sig = jsonx_get_str(es, "signal");
	if (timed_out)
		snprintf(out, n, "a timeout");
	else if (truncated)
		snprintf(out, n, "too much output");
	else if (sig)
		snprintf(out, n, "signal %s", sig);
	else if (jsonx_get_int(es, "code", &code))
		snprintf(out, n, "exit status %lld", (long long)code);
	else
		snprintf(out, n, "a failure");
}

static json_object *output_of(const json_object *rc, bool diagnostic)
{
	json_object *o = json_object_new_object();
	json_object *es = jsonx_get_obj(jsonx_get_obj(rc, "outcome"), "exitStatus");
	int64_t code = 0;
	if (jsonx_get_int(es, "code", &code))
		jsonx_add_int(o, "exit", code);
	else
		jsonx_add_null(o, "exit");
	jsonx_add_str(o, "signal", jsonx_get_str(es, "signal"));
	bool t = false;
	jsonx_get_bool(rc, "timedOut", &t);
	jsonx_add_bool(o, "timedOut", t);
	if (diagnostic) {
		const char *out = jsonx_get_str(rc, "output");
		jsonx_add_str(o, "stdout", out ? out : "");
		jsonx_add_str(o, "stderr", "");
	} else {
		const char *so = jsonx_get_str(rc, "stdout"), *se = jsonx_get_str(rc, "stderr");
		jsonx_add_str(o, "stdout", so ? so : "");
		jsonx_add_str(o, "stderr", se ? se : "");
	}
	bool tr = false;
	if (jsonx_get_bool(rc, "outputTruncated", &tr))
		jsonx_add_bool(o, "outputTruncated", tr);
	/* What the step left running (spec/guest.md §16.1 item 8). */
	json_object *left = jsonx_get_obj(rc, "leftRunning");
	if (json_object_is_type(left, json_type_object))
		jsonx_add(o, "leftRunning", json_object_get(left));
	return o;
}

typedef struct step_out {
	json_object *step, *detail;
	const char *id;
	int64_t sort_ms;
	size_t order;
	bool diagnostic;
} step_out;

static int step_cmp(const void *x, const void *y)
{
	const step_out *a = x, *b = y;
	if (a->sort_ms != b->sort_ms)
		return a->sort_ms < b->sort_ms ? -1 : 1;
	return a->order < b->order ? -1 : a->order > b->order;
}

/* "shell <first line that is neither blank nor #!>" (spec/guest.md §14). */
static char *shell_title(const char *script)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "shell");
	const char *p = script ? script : "";
	while (*p) {
		const char *e = strchr(p, '\n');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		size_t s = 0;
		while (s < n && (p[s] == ' ' || p[s] == '\t' || p[s] == '\r'))
			s++;
		size_t t = n;
		while (t > s && (p[t - 1] == ' ' || p[t - 1] == '\t' || p[t - 1] == '\r'))
			t--;
		if (t > s && !(t - s >= 2 && p[s] == '#' && p[s + 1] == '!')) {
			strbuf_putc(&sb, ' ');
			size_t cut = utf8_cut(p + s, t - s, 494);
			strbuf_append(&sb, p + s, cut);
			break;
		}
		if (e == NULL)
			break;
		p = e + 1;
	}
	return strbuf_detach(&sb, NULL);
}

/* One recorded action's step and its details. */
/* The step's connections through the egress proxy (network.json):
 * {"allowed", "refused", "summary": "3 allowed, 1 refused (pypi.org:443)"}. */
static json_object *step_network(const json_object *network, const char *execution_id)
{
	egress_tally t;
	egress_tally_of(network, execution_id, &t);
	json_object *n = json_object_new_object();
	jsonx_add_int(n, "allowed", t.allowed);
	jsonx_add_int(n, "refused", t.refused);
	jsonx_add_int(n, "cut", t.cut);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%lld allowed, %lld refused", (long long)t.allowed, (long long)t.refused);
	for (size_t i = 0; i < t.dest_count; i++)
		strbuf_printf(&sb, "%s%s", i ? ", " : " (", t.dests[i]);
	if (t.dest_count)
		strbuf_puts(&sb, (int64_t)t.dest_count < t.refused ? ", …)" : ")");
	if (t.cut)
		strbuf_printf(&sb, "; %lld cut when the egress proxy stopped", (long long)t.cut);
	jsonx_add_str(n, "summary", strbuf_str(&sb));
	strbuf_free(&sb);
	egress_tally_free(&t);
	return n;
}

static step_out action_step(rv *r, rv_action *a)
{
	const char *sid = step_id_of(a);
	json_object *step = json_object_new_object();
	jsonx_add_str(step, "id", sid);
	jsonx_add_str(step, "title", title_of(a));
	jsonx_add_str(step, "execution", a->execution);
	const char *rec_state = a->record ? jsonx_get_str(a->record, "state") : NULL;
	jsonx_add_str(step, "state", a->record ? (rec_state ? rec_state : "missing") : "missing");
	const char *mode = a->start ? jsonx_get_str(a->start, "inputMode") : NULL;
	if (mode == NULL && a->record)
		mode = jsonx_get_str(a->record, "inputMode");
	jsonx_add_str(step, "inputMode", mode ? mode : "ordinary");
	json_object *req = rv_map_get(r->requests, a->execution_id);
	json_object *sub = rv_map_get(r->submissions, a->execution_id);
	const char *because = jsonx_get_str(req, "because");
	if (because == NULL)
		because = jsonx_get_str(sub, "because");
	if (because == NULL)
		because = jsonx_get_str(sub, "reason");
	jsonx_add_str(step, "because", because);
	const char *expected = rv_get_str_path(req, "step", "expected");
	if (expected == NULL && a->record)
		expected = jsonx_get_str(a->record, "expected");
	jsonx_add_str(step, "expected", expected);
	/* Snapshots: standalone its own pair; a group member the group's
	 * shared pair (the first's before, the last's after). */
	json_object *before_line = a->before_ok ? a->before : NULL;
	json_object *after_line = a->after_ok ? a->after : NULL;
	int64_t interval = a->after_interval_ms;
	bool has_interval = a->has_after_interval;
	if (a->group_id != NULL) {
		before_line = after_line = NULL;
		for (size_t k = 0; k < r->n_actions; k++) {
			rv_action *o = &r->actions[k];
			if (!rv_str_eq(o->group_id, a->group_id))
				continue;
			if (rv_str_eq(o->group_phase, "first") && o->before_ok)
				before_line = o->before;
			if (rv_str_eq(o->group_phase, "last") && o->after_ok) {
				after_line = o->after;
				interval = o->after_interval_ms;
				has_interval = o->has_after_interval;
			}
		}
	}
	int64_t decl = 0;
	if (after_line && jsonx_get_int(after_line, "declaredAfterIntervalMs", &decl)) {
		interval = decl;
		has_interval = true;
	}
	char *bp = rv_snapshot_path(r, before_line), *ap = rv_snapshot_path(r, after_line);
	if (bp || ap) {
		json_object *snaps = json_object_new_object();
		jsonx_add_str(snaps, "before", bp);
		jsonx_add_str(snaps, "after", ap);
		jsonx_add_str(snaps, "groupId", a->group_id);
		if (has_interval)
			jsonx_add_int(snaps, "declaredAfterIntervalMs", interval);
		else
			jsonx_add_null(snaps, "declaredAfterIntervalMs");
		jsonx_add(step, "snapshots", snaps);
	} else {
		jsonx_add(step, "snapshots", NULL);
		jsonx_add_str(step, "observed",
		              a->capture_off ? "No screenshot evidence. Snapshots were off for this guest."
		                             : "No screenshot evidence was retained for this step.");
	}
	/* Details. */
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "executionId", a->execution_id);
	const char *at = jsonx_get_str(a->start ? a->start : a->refusal, "at");
	jsonx_add_str(d, "at", at);
	jsonx_add_str(d, "beforeAt", before_line ? jsonx_get_str(before_line, "capturedAt") : NULL);
	jsonx_add_str(d, "afterAt", after_line ? jsonx_get_str(after_line, "capturedAt") : NULL);
	json_object *erec = rv_map_get(r->exec_records, a->execution_id);
	json_object *argv = jsonx_get_array(erec, "argv");
	if (argv == NULL)
		argv = jsonx_get_array(rv_map_get(r->exec_starts, a->execution_id), "argv");
	json_object *rc = a->execution_id ? rv_guest_receipt(r, a->execution_id) : NULL;
	if (rc == NULL && a->execution_id)
		rc = rv_map_get(r->host_receipts, a->execution_id);
	if (argv == NULL && rc)
		argv = jsonx_get_array(rc, "argv");
	jsonx_add(d, "argv", argv ? json_object_get(argv) : json_object_new_array());
	jsonx_add(d, "output", rc ? output_of(rc, false) : NULL);
	json_object *recording = rc ? rv_recording(r, rc) : NULL;
	if (recording)
		jsonx_add(d, "recording", recording);
	if (a->why)
		jsonx_add_str(d, "diagnostic", a->why);
	if (r->network && a->execution_id)
		jsonx_add(d, "network", step_network(r->network, a->execution_id));
	int64_t ms = 0;
	time_parse_iso(at, &ms);
	step_out out = {step, d, sid, ms, a->first_idx, false};
	free(bp);
	free(ap);
	return out;
}

/* One diagnostic shell script's step and its details. */
static step_out diagnostic_step(rv *r, const char *did, json_object *drc, size_t order)
{
	json_object *dreq = rv_map_get(r->diag_requests, did);
	const char *script = jsonx_get_str(dreq, "code");
	if (script == NULL)
		script = jsonx_get_str(dreq, "script");
	char *title = shell_title(script);
	const char *st = rv_receipt_status(drc);
	json_object *step = json_object_new_object();
	jsonx_add_str(step, "id", did);
	jsonx_add_str(step, "title", title);
	jsonx_add_str(step, "execution", rv_str_eq(st, "completed") ? "completed" : st);
	jsonx_add_str(step, "state", "recorded");
	jsonx_add_str(step, "inputMode", "diagnostic");
	const char *because = jsonx_get_str(dreq, "because");
	if (because == NULL)
		because = jsonx_get_str(dreq, "reason");
	if (because == NULL) {
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "Relay %s (no reason given)", title ? title : "shell");
		jsonx_add_str(step, "because", strbuf_str(&sb));
		strbuf_free(&sb);
	} else {
		jsonx_add_str(step, "because", because);
	}
	jsonx_add_str(step, "expected", "Exits with status 0");
	jsonx_add(step, "snapshots", NULL);
	jsonx_add_str(step, "observed", NO_SCREENSHOT_DIAGNOSTIC);
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "executionId", did);
	const char *at = jsonx_get_str(drc, "startedAt");
	if (at == NULL)
		at = jsonx_get_str(drc, "at");
	if (at == NULL)
		at = jsonx_get_str(dreq, "at");
	jsonx_add_str(d, "at", at);
	jsonx_add_null(d, "beforeAt");
	jsonx_add_null(d, "afterAt");
	json_object *argv = jsonx_get_array(drc, "argv");
	jsonx_add(d, "argv", argv ? json_object_get(argv) : json_object_new_array());
	jsonx_add(d, "output", output_of(drc, true));
	const char *dd = rv_receipt_diagnostic(drc);
	if (dd)
		jsonx_add_str(d, "diagnostic", dd);
	int64_t ms = INT64_MAX;
	if (at)
		time_parse_iso(at, &ms);
	step_out out = {step, d, did, ms, order, true};
	free(title);
	return out;
}

json_object *rv_build_steps(rv *r, json_object *details, size_t *recorded_steps, bool *any_not_completed,
                            bool *any_failed)
{
	size_t cap = r->n_actions + (size_t)json_object_object_length(r->diag_receipts) + 1;
	step_out *outs = calloc(cap, sizeof *outs);
	size_t n = 0;
	*recorded_steps = 0;
	for (size_t i = 0; i < r->n_actions && outs; i++) {
		outs[n++] = action_step(r, &r->actions[i]);
		(*recorded_steps)++;
	}
	/* Diagnostic steps. */
	size_t order = r->n_actions + 1;
	json_object_object_foreach(r->diag_receipts, did, drc)
	{
		if (outs == NULL)
			break;
		outs[n++] = diagnostic_step(r, did, drc, order++);
	}
	json_object *steps = json_object_new_array();
	if (outs == NULL)
		return steps;
	qsort(outs, n, sizeof *outs, step_cmp);
	*any_not_completed = false;
	*any_failed = false;
	for (size_t i = 0; i < n; i++) {
		const char *ex = jsonx_get_str(outs[i].step, "execution");
		if (!rv_str_eq(ex, "completed"))
			*any_not_completed = true;
		if (rv_str_eq(ex, "failed") || rv_str_eq(ex, "refused"))
			*any_failed = true;
		json_object_object_add(details, jsonx_get_str(outs[i].step, "id"), outs[i].detail);
		json_object_array_add(steps, outs[i].step);
	}
	free(outs);
	return steps;
}

/* Findings from receipts and requests (execution class). */
void rv_receipt_findings(rv *r, bool *receipt_failed, bool *receipt_uncertain)
{
	*receipt_failed = *receipt_uncertain = false;
	json_object *maps[] = {r->guest_receipts, r->pulled_receipts, r->host_receipts, r->diag_receipts};
	for (size_t m = 0; m < 4; m++) {
		json_object_object_foreach(maps[m], id, rc)
		{
			const char *st = rv_receipt_status(rc);
			if (m == 2 && rv_str_eq(st, "uncertain") &&
			    (rv_guest_receipt(r, id) != NULL || rv_map_get(r->exec_completions, id) != NULL))
				continue; /* superseded */
			if (rv_str_eq(st, "refused") || rv_str_eq(st, "failed"))
				*receipt_failed = true;
			if (rv_str_eq(st, "uncertain"))
				*receipt_uncertain = true;
		}
	}
	json_object_object_foreach(r->exec_completions, cid, line)
	{
		(void)cid;
		json_object *oc = jsonx_get_obj(line, "outcome");
		const char *st = oc ? rv_outcome_status(oc) : "uncertain";
		if (rv_str_eq(st, "refused") || rv_str_eq(st, "failed"))
			*receipt_failed = true;
		if (rv_str_eq(st, "uncertain"))
			*receipt_uncertain = true;
	}
	if (*receipt_failed)
		rv_add_finding(r, &r->exec_findings, "retained execution receipt reports refusal or failure");
	if (*receipt_uncertain)
		rv_add_finding(r, &r->exec_findings, "retained execution receipt reports uncertainty");
}

void rv_lost_requests(rv *r, fw_strlist *lost)
{
	json_object_object_foreach(r->requests, qid, q)
	{
		(void)q;
		bool started = rv_map_get(r->exec_starts, qid) != NULL || rv_guest_receipt(r, qid) != NULL;
		for (size_t i = 0; i < r->n_actions && !started; i++)
			if (r->actions[i].refusal && rv_str_eq(r->actions[i].execution_id, qid))
				started = true;
		if (!started) {
			char text[300];
			snprintf(text, sizeof text, "request %s has no retained guest execution", qid);
			rv_add_finding(r, &r->exec_findings, text);
			fw_strlist_push(lost, qid);
		}
	}
}

json_object *rv_list_to_json(const fw_strlist *l)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < l->count; i++)
		json_object_array_add(a, json_object_new_string(l->items[i]));
	return a;
}

static const char *step_id_for_exec(rv *r, const char *exec)
{
	for (size_t i = 0; i < r->n_actions; i++)
		if (rv_str_eq(r->actions[i].execution_id, exec))
			return step_id_of(&r->actions[i]);
	return exec;
}

void rv_build_reasons(rv *r, const char *completeness, const char *execution, json_object *steps,
                      const fw_strlist *lost, size_t recorded_steps)
{
	char text[1200];
	if (rv_str_eq(completeness, "incomplete")) {
		for (size_t i = 0; i < r->n_actions; i++) {
			rv_action *a = &r->actions[i];
			const char *phases[2] = {a->lacks_before ? "before" : NULL,
			                         a->lacks_after ? "after" : NULL};
			for (int p = 0; p < 2; p++) {
				if (phases[p] == NULL)
					continue;
				snprintf(text, sizeof text, "Step %s has no %s screenshot.", step_id_of(a),
				         phases[p]);
				json_object_array_add(
				    r->reasons_snap,
				    reason(text, ids1(step_id_of(a)),
				           "Judge the step from its output and the neighbouring "
				           "screenshots."));
			}
		}
		fw_strlist groups = {0};
		for (size_t i = 0; i < r->n_actions; i++)
			if (r->actions[i].group_incomplete)
				rv_list_add_unique(&groups, r->actions[i].group_id);
		for (size_t g = 0; g < groups.count; g++) {
			json_object *ids = json_object_new_array();
			for (size_t i = 0; i < r->n_actions; i++)
				if (rv_str_eq(r->actions[i].group_id, groups.items[g]))
					json_object_array_add(
					    ids, json_object_new_string(step_id_of(&r->actions[i])));
			snprintf(text, sizeof text,
			         "Group %s does not have both its first screenshot and its last.",
			         groups.items[g]);
			json_object_array_add(
			    r->reasons_snap, reason(text, ids, "Judge the group's steps from their output."));
		}
		fw_strlist_free(&groups);
		if (r->evidence_failure) {
			json_object *ids = json_object_new_array();
			for (size_t i = 0; i < r->failure_exec_ids.count; i++)
				json_object_array_add(ids, json_object_new_string(step_id_for_exec(
				                               r, r->failure_exec_ids.items[i])));
			json_object_array_add(
			    r->reasons_snap,
			    reason("The guest recorded a failed capture or a process it could not stop.", ids,
			           "Read the journal lines for the steps named."));
		}
		if (r->partial_files)
			json_object_array_add(
			    r->reasons_snap,
			    reason("The guest left an unfinished screenshot file under state/snapshots/.",
			           NULL, "Judge the affected steps from their output."));
	}
	if (!rv_str_eq(execution, "passed")) {
		size_t n = json_object_array_length(steps);
		for (size_t i = 0; i < n; i++) {
			json_object *s = json_object_array_get_idx(steps, i);
			const char *id = jsonx_get_str(s, "id");
			const char *ex = jsonx_get_str(s, "execution");
			rv_action *a = NULL;
			for (size_t k = 0; k < r->n_actions; k++)
				if (rv_str_eq(step_id_of(&r->actions[k]), id))
					a = &r->actions[k];
			const char *why = a ? a->why : NULL;
			if (a == NULL) { /* diagnostic step */
				json_object *drc = rv_map_get(r->diag_receipts, id);
				why = rv_receipt_diagnostic(drc);
			}
			if (rv_str_eq(ex, "refused")) {
				snprintf(text, sizeof text, "Step %s was refused before it ran: %s.", id,
				         why ? why : "no diagnostic was recorded");
				json_object_array_add(
				    r->reasons_exec,
				    reason(text, ids1(id), "Nothing ran; check why it was refused."));
			} else if (rv_str_eq(ex, "failed")) {
				char words[128];
				if (a)
					failure_words(r, a, words, sizeof words);
				else {
					json_object *drc = rv_map_get(r->diag_receipts, id);
					json_object *es =
					    jsonx_get_obj(jsonx_get_obj(drc, "outcome"), "exitStatus");
					int64_t code = 0;
					if (jsonx_get_str(es, "signal"))
						snprintf(words, sizeof words, "signal %s",
						         jsonx_get_str(es, "signal"));
					else if (jsonx_get_int(es, "code", &code))
						snprintf(words, sizeof words, "exit status %lld",
						         (long long)code);
					else
						snprintf(words, sizeof words, "a failure");
				}
				snprintf(text, sizeof text, "Step %s ended with %s.", id, words);
				json_object_array_add(r->reasons_exec,
				                      reason(text, ids1(id), "Read the step's output."));
			} else if (!rv_str_eq(ex, "completed")) {
				snprintf(text, sizeof text,
				         "The relay cannot tell whether step %s ran or how it ended: %s.", id,
				         why ? why : "its receipt reports uncertainty");
				json_object_array_add(
				    r->reasons_exec,
				    reason(text, ids1(id),
				           "Check the guest-side effects the step should have had."));
			}
		}
		for (size_t i = 0; i < lost->count; i++) {
			snprintf(text, sizeof text, "Request %s never reached the guest's recording.",
			         lost->items[i]);
			json_object_array_add(r->reasons_exec,
			                      reason(text, NULL, "Treat its effects as unknown."));
		}
		if (recorded_steps == 0)
			json_object_array_add(r->reasons_exec, reason("The recording has no steps.", NULL,
			                                              "Nothing was done under evidence."));
	}
	for (size_t i = 0; i < r->defect_findings.count; i++) {
		const char *f = r->defect_findings.items[i];
		snprintf(text, sizeof text, "The relay's own records disagree: %s.", f);
		json_object *ids = json_object_new_array();
		/* "action <id> ..." names the step's action. */
		if (rv_has_prefix(f, "action ")) {
			const char *s = f + 7;
			const char *e = strchr(s, ' ');
			char *aid = e ? strndup(s, (size_t)(e - s)) : NULL;
			rv_action *a = aid ? rv_find_action(r, aid) : NULL;
			if (a)
				json_object_array_add(ids, json_object_new_string(step_id_of(a)));
			free(aid);
		}
		json_object_array_add(r->reasons_def,
		                      reason(text, ids, "Report it; the verdicts do not depend on it."));
	}
}
