/*
 * Pass 2 of the review derivation: executions, groups, pairs and defects
 * (review_state.h; spec/evidence.md §12).
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

#include "evidence/journal.h"
#include "evidence/review_state.h"
#include "evidence/verify.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/timefmt.h"

/* ---- pass 2: steps ---------------------------------------------------------------- */

static void set_why(rv_action *a, const char *text)
{
	if (a->why == NULL && text != NULL)
		a->why = strdup(text);
}

void rv_derive_execution(rv *r, rv_action *a)
{
	const char *ex;
	json_object *to = a->completion ? jsonx_get_obj(a->completion, "toolOutcome") : NULL;
	json_object *val = to ? jsonx_get_obj(to, "value") : NULL;
	json_object *es = val ? jsonx_get_obj(val, "exitStatus") : NULL;
	int64_t code = 0;
	bool has_code = es && jsonx_get_int(es, "code", &code);
	bool timed_out = false, truncated = false;
	jsonx_get_bool(val, "timedOut", &timed_out);
	jsonx_get_bool(val, "outputTruncated", &truncated);
	const char *sig = es ? jsonx_get_str(es, "signal") : NULL;
	if (a->refusal != NULL) {
		ex = "refused";
		set_why(a, jsonx_get_str(a->refusal, "diagnostic"));
	} else if (a->completion == NULL) {
		ex = "incomplete";
		set_why(a, "the journal records no completion for it");
	} else if (rv_str_eq(jsonx_get_str(a->completion, "state"), "uncertain") || to == NULL) {
		ex = "uncertain";
	} else if (rv_str_eq(jsonx_get_str(to, "kind"), "failure") &&
	           (timed_out || truncated || sig || (has_code && code != 0))) {
		ex = "failed";
	} else if (!has_code) {
		ex = "uncertain";
		set_why(a, "no exit code was recorded");
	} else {
		ex = "completed";
	}
	/* Downgrade: planned pair missing, or action record missing or not recorded. */
	const char *rec_state = a->record ? jsonx_get_str(a->record, "state") : NULL;
	bool pair_missing = a->lacks_before || a->lacks_after || a->group_incomplete;
	if (!rv_str_eq(ex, "refused") && !rv_str_eq(ex, "failed") &&
	    (pair_missing || a->record == NULL || !rv_str_eq(rec_state, "recorded"))) {
		if (!rv_str_eq(ex, "uncertain") && !rv_str_eq(ex, "incomplete"))
			set_why(a, pair_missing        ? "its planned screenshots are missing"
			           : a->record == NULL ? "its action record is missing"
			                               : "its action record is not recorded");
		ex = "uncertain";
	}
	/* Receipts, by precedence refused, failed, uncertain. */
	bool seen[4];
	const char *diag = NULL;
	if (a->execution_id)
		rv_receipts_of(r, a->execution_id, seen, &diag);
	else
		memset(seen, 0, sizeof seen);
	if (seen[0])
		ex = "refused";
	else if (seen[1] && !rv_str_eq(ex, "refused"))
		ex = "failed";
	else if (seen[2] && !rv_str_eq(ex, "refused") && !rv_str_eq(ex, "failed"))
		ex = "uncertain";
	if (diag)
		set_why(a, diag);
	a->execution = ex;
}

/* The one snapshot finding of an incomplete coalescing group, whichever way
 * it is incomplete (rv_add_finding keeps one copy). */
static void group_incomplete_finding(rv *r, const char *group_id)
{
	char text[300];
	snprintf(text, sizeof text,
	         "coalescing group %s lacks a complete consecutive first/member/last causal pair", group_id);
	rv_add_finding(r, &r->snap_findings, text);
}

/* Group analysis: a group is complete when its first has a before, its last
 * an after, it was closed, and no unrelated action started inside it. */
void rv_derive_groups(rv *r)
{
	for (size_t i = 0; i < r->n_actions; i++) {
		rv_action *first = &r->actions[i];
		if (first->group_id == NULL || !rv_str_eq(first->group_phase, "first"))
			continue;
		const char *g = first->group_id;
		rv_action *last = NULL;
		for (size_t k = 0; k < r->n_actions; k++)
			if (rv_str_eq(r->actions[k].group_id, g) &&
			    rv_str_eq(r->actions[k].group_phase, "last"))
				last = &r->actions[k];
		bool closed = rv_map_get(r->closed_groups, g) != NULL ||
		              (last && last->completion &&
		               rv_str_eq(jsonx_get_str(last->completion, "state"), "recorded"));
		bool complete = first->before_ok && last != NULL && last->after_ok && closed;
		if (complete) {
			size_t end = last->completion ? last->completion_idx : last->start_idx;
			for (size_t k = 0; k < r->n_actions; k++) {
				rv_action *o = &r->actions[k];
				if (o->start && o->start_idx > first->start_idx && o->start_idx < end &&
				    !rv_str_eq(o->group_id, g))
					complete = false;
			}
		}
		if (!complete) {
			for (size_t k = 0; k < r->n_actions; k++)
				if (rv_str_eq(r->actions[k].group_id, g))
					r->actions[k].group_incomplete = true;
			group_incomplete_finding(r, g);
		}
	}
	/* Members or lasts whose first never appeared. */
	for (size_t i = 0; i < r->n_actions; i++) {
		rv_action *a = &r->actions[i];
		if (a->group_id == NULL || rv_str_eq(a->group_phase, "first"))
			continue;
		bool has_first = false;
		for (size_t k = 0; k < r->n_actions; k++)
			if (rv_str_eq(r->actions[k].group_id, a->group_id) &&
			    rv_str_eq(r->actions[k].group_phase, "first"))
				has_first = true;
		if (!has_first) {
			a->group_incomplete = true;
			group_incomplete_finding(r, a->group_id);
		}
	}
}

void rv_derive_pairs_and_defects(rv *r)
{
	for (size_t i = 0; i < r->n_actions; i++) {
		rv_action *a = &r->actions[i];
		a->record = rv_map_get(r->action_records, a->action_id);
		if (a->start != NULL && a->group_id == NULL && !a->capture_off && a->captures_before &&
		    a->captures_after && (!a->before_ok || !a->after_ok)) {
			a->lacks_before = !a->before_ok;
			a->lacks_after = !a->after_ok;
			char text[300];
			snprintf(text, sizeof text, "action %s lacks its declared causal pair", a->action_id);
			rv_add_finding(r, &r->snap_findings, text);
		}
		/* Defects: the relay's own records disagreeing. */
		char text[600];
		if (a->record == NULL && a->start != NULL) {
			snprintf(text, sizeof text, "action %s has no materialized action record",
			         a->action_id);
			rv_add_finding(r, &r->defect_findings, text);
		}
		if (a->record != NULL && (a->before || a->after)) {
			json_object *refs = jsonx_get_array(a->record, "snapshots");
			if (refs == NULL) {
				snprintf(text, sizeof text,
				         "action %s lacks durable reverse snapshot references", a->action_id);
				rv_add_finding(r, &r->defect_findings, text);
			} else {
				json_object *caps[2] = {a->before, a->after};
				for (int c = 0; c < 2; c++) {
					char *p = rv_snapshot_path(r, caps[c]);
					if (p == NULL)
						continue;
					bool listed = false;
					for (size_t k = 0; k < json_object_array_length(refs); k++)
						if (rv_str_eq(jsonx_get_str(
						                  json_object_array_get_idx(refs, k), "path"),
						              p))
							listed = true;
					if (!listed) {
						snprintf(text, sizeof text,
						         "action %s is missing reverse snapshot reference %s",
						         a->action_id, p);
						rv_add_finding(r, &r->defect_findings, text);
					}
					free(p);
				}
			}
		}
	}
	json_object_object_foreach(r->action_records, aid, rec)
	{
		(void)rec;
		rv_action *a = rv_find_action(r, aid);
		if (a == NULL || (a->start == NULL && a->refusal == NULL)) {
			char text[300];
			snprintf(text, sizeof text, "action %s has no retained start or refusal", aid);
			rv_add_finding(r, &r->defect_findings, text);
		}
	}
}
