/*
 * Pass 1 of the review derivation: the package read into its state
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
#include "util/array.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/timefmt.h"

/* ---- small helpers --------------------------------------------------------- */

bool rv_str_eq(const char *a, const char *b)
{
	return a != NULL && b != NULL && strcmp(a, b) == 0;
}

bool rv_has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

bool rv_has_suffix(const char *s, const char *x)
{
	size_t n = strlen(s), m = strlen(x);
	return n >= m && strcmp(s + n - m, x) == 0;
}

bool rv_list_has(const fw_strlist *l, const char *s)
{
	for (size_t i = 0; i < l->count; i++)
		if (strcmp(l->items[i], s) == 0)
			return true;
	return false;
}

void rv_list_add_unique(fw_strlist *l, const char *s)
{
	if (!rv_list_has(l, s))
		fw_strlist_push(l, s);
}

const char *rv_get_str_path(const json_object *o, const char *k1, const char *k2)
{
	json_object *mid = jsonx_get_obj(o, k1);
	return mid ? jsonx_get_str(mid, k2) : NULL;
}

void rv_hard(rv *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *text = evidence_verify_failure(fmt, ap);
	va_end(ap);
	if (text)
		rv_list_add_unique(&r->hard, text);
	free(text);
}

void rv_add_finding(rv *r, fw_strlist *cls, const char *text)
{
	rv_list_add_unique(cls, text);
	rv_list_add_unique(&r->findings, text);
}

rv_action *rv_find_action(rv *r, const char *action_id)
{
	for (size_t i = 0; i < r->n_actions; i++)
		if (strcmp(r->actions[i].action_id, action_id) == 0)
			return &r->actions[i];
	return NULL;
}

static rv_action *add_action(rv *r, const char *action_id, const char *execution_id, size_t idx)
{
	rv_action *grown = array_grow(r->actions, &r->cap_actions, r->n_actions, sizeof *grown, 32);
	if (grown == NULL)
		return NULL;
	r->actions = grown;
	rv_action *a = &r->actions[r->n_actions++];
	memset(a, 0, sizeof *a);
	a->action_id = action_id;
	a->execution_id = execution_id;
	a->first_idx = idx;
	return a;
}

/* Loads every "<dir>/<stem><suffix>" file directly in `dir` into map[stem]. */
void rv_load_json_dir(rv *r, const char *dir, const char *suffix, json_object *map)
{
	size_t dl = strlen(dir);
	for (size_t i = 0; i < r->files.count; i++) {
		const fw_entry *e = &r->files.items[i];
		if (e->kind != FW_FILE || strncmp(e->path, dir, dl) != 0 || e->path[dl] != '/')
			continue;
		const char *name = e->path + dl + 1;
		if (strchr(name, '/') != NULL || !rv_has_suffix(name, suffix))
			continue;
		char *stem = strndup(name, strlen(name) - strlen(suffix));
		char *text = NULL;
		size_t len = 0;
		relay_error err = {0};
		if (stem == NULL)
			continue;
		if (evidence_read_rel(r->root, e->path, MAX_JSON_FILE_BYTES, &text, &len, &err) != RELAY_OK) {
			rv_hard(r, "%s: %s", e->path, err.message);
		} else {
			json_object *obj = evidence_parse_guest_json(text, len, NULL, 0);
			if (obj == NULL || !json_object_is_type(obj, json_type_object)) {
				rv_hard(r, "%s: not a JSON object", e->path);
				json_object_put(obj);
			} else {
				json_object_object_add(map, stem, obj);
			}
		}
		free(text);
		free(stem);
	}
}

json_object *rv_map_get(json_object *map, const char *key)
{
	json_object *v = NULL;
	if (key != NULL && json_object_object_get_ex(map, key, &v))
		return v;
	return NULL;
}

static void map_put_ref(json_object *map, const char *key, json_object *value)
{
	json_object_object_add(map, key, json_object_get(value));
}

/* ---- receipts ------------------------------------------------------------------ */

/* "refused", "failed", "uncertain" or "completed" for a receipt or outcome. */
const char *rv_outcome_status(const json_object *outcome)
{
	const char *kind = jsonx_get_str(outcome, "kind");
	if (rv_str_eq(kind, "refused"))
		return "refused";
	if (rv_str_eq(kind, "uncertain"))
		return "uncertain";
	if (rv_str_eq(kind, "completed")) {
		json_object *es = jsonx_get_obj(outcome, "exitStatus");
		int64_t code = 0;
		bool has_code = jsonx_get_int(es, "code", &code);
		const char *sig = jsonx_get_str(es, "signal");
		if ((has_code && code != 0) || sig != NULL)
			return "failed";
		if (!has_code)
			return "uncertain";
		return "completed";
	}
	return "uncertain";
}

const char *rv_receipt_status(const json_object *receipt)
{
	json_object *outcome = jsonx_get_obj(receipt, "outcome");
	return outcome ? rv_outcome_status(outcome) : "uncertain";
}

const char *rv_receipt_diagnostic(const json_object *receipt)
{
	return rv_get_str_path(receipt, "outcome", "diagnostic");
}

/* The guest's receipt for an execution: the pulled state's, else the copy
 * pulled right after the run. */
json_object *rv_guest_receipt(rv *r, const char *id)
{
	json_object *g = rv_map_get(r->guest_receipts, id);
	return g ? g : rv_map_get(r->pulled_receipts, id);
}

/* Statuses of every receipt of one execution after superseding (§12.4):
 * fills seen[0..3] = refused, failed, uncertain, completed. */
void rv_receipts_of(rv *r, const char *id, bool seen[4], const char **diag)
{
	memset(seen, 0, 4 * sizeof *seen);
	json_object *sources[4] = {rv_map_get(r->guest_receipts, id), rv_map_get(r->pulled_receipts, id),
	                           rv_map_get(r->host_receipts, id), NULL};
	json_object *completion = rv_map_get(r->exec_completions, id);
	bool has_guest = sources[0] != NULL || sources[1] != NULL || completion != NULL;
	for (int i = 0; i < 4; i++) {
		const char *st = NULL;
		const char *d = NULL;
		if (i < 3 && sources[i] != NULL) {
			st = rv_receipt_status(sources[i]);
			d = rv_receipt_diagnostic(sources[i]);
			/* A host receipt that is uncertain because the host lost the
			 * guest's answer is superseded by the guest's receipt. */
			if (i == 2 && rv_str_eq(st, "uncertain") && has_guest)
				continue;
		} else if (i == 3 && completion != NULL) {
			json_object *oc = jsonx_get_obj(completion, "outcome");
			if (oc == NULL)
				continue;
			st = rv_outcome_status(oc);
			d = jsonx_get_str(oc, "diagnostic");
		}
		if (st == NULL)
			continue;
		int k = rv_str_eq(st, "refused")     ? 0
		        : rv_str_eq(st, "failed")    ? 1
		        : rv_str_eq(st, "uncertain") ? 2
		                                     : 3;
		seen[k] = true;
		if (d != NULL && diag != NULL && *diag == NULL && k < 3)
			*diag = d;
	}
}

/* ---- snapshot checks ----------------------------------------------------------- */

static bool file_name_ok(const char *name)
{
	if (name == NULL || name[0] == '\0' || strlen(name) > 255 || name[0] == '.')
		return false;
	for (const char *p = name; *p; p++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return rv_has_suffix(name, ".png");
}

static bool check_snapshot_file(rv *r, json_object *line)
{
	const char *name = jsonx_get_str(line, "fileName");
	const char *sha = jsonx_get_str(line, "sha256");
	int64_t bytes = -1;
	jsonx_get_int(line, "bytes", &bytes);
	if (!file_name_ok(name)) {
		rv_hard(r, "journal: snapshot-captured line has an invalid fileName");
		return false;
	}
	char rel[512];
	snprintf(rel, sizeof rel, "state/snapshots/%s/%s", r->session_id, name);
	char hex[65];
	uint64_t got = 0;
	relay_error err = {0};
	if (evidence_hash_rel(r->root, rel, hex, &got, &err) != RELAY_OK) {
		rv_hard(r, "%s: named by a snapshot-captured line but %s", rel,
		        err.code == RELAY_E_NOT_FOUND ? "missing from the package" : err.message);
		return false;
	}
	if ((int64_t)got != bytes || !rv_str_eq(hex, sha)) {
		rv_hard(r, "%s: size or SHA-256 differs from its snapshot-captured line", rel);
		return false;
	}
	return true;
}

char *rv_snapshot_path(const rv *r, const json_object *line)
{
	if (line == NULL)
		return NULL;
	const char *name = jsonx_get_str(line, "fileName");
	if (name == NULL)
		return NULL;
	size_t n = strlen(r->session_id) + strlen(name) + 32;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "state/snapshots/%s/%s", r->session_id, name);
	return p;
}

/* ---- pass 1: the journal -------------------------------------------------------- */

static void read_plan(rv_action *a)
{
	json_object *plan = jsonx_get_obj(a->start, "snapshotPlan");
	if (plan == NULL)
		return;
	a->has_plan = true;
	jsonx_get_bool(plan, "capturesBefore", &a->captures_before);
	json_object *after = jsonx_get_obj(plan, "capturesAfter");
	if (after != NULL) {
		a->captures_after = true;
		a->has_after_interval = jsonx_get_int(after, "afterIntervalMs", &a->after_interval_ms);
	}
	jsonx_get_bool(plan, "captureOff", &a->capture_off);
	json_object *group = jsonx_get_obj(plan, "group");
	if (group != NULL) {
		a->group_id = jsonx_get_str(group, "groupId");
		a->group_phase = jsonx_get_str(group, "phase");
	}
}

void rv_scan_journal(rv *r)
{
	size_t n = json_object_array_length(r->journal);
	for (size_t i = 0; i < n; i++) {
		json_object *line = json_object_array_get_idx(r->journal, i);
		const char *type = jsonx_get_str(line, "type");
		const char *sid = jsonx_get_str(line, "sessionId");
		if (!rv_str_eq(sid, r->session_id)) {
			rv_hard(
			    r,
			    "state/journal/events.jsonl: line %zu belongs to another recording session (%s)",
			    i + 1, sid ? sid : "none");
			continue;
		}
		if (type == NULL)
			continue;
		const char *exec = jsonx_get_str(line, "executionId");
		const char *act = jsonx_get_str(line, "actionId");
		if (rv_str_eq(type, "execution-start") && exec) {
			map_put_ref(r->exec_starts, exec, line);
		} else if (rv_str_eq(type, "execution-completion") && exec) {
			map_put_ref(r->exec_completions, exec, line);
		} else if (rv_str_eq(type, "action-start") && act) {
			rv_action *a = rv_find_action(r, act);
			if (a != NULL && (a->start != NULL || a->refusal != NULL)) {
				rv_hard(r, "journal: duplicate action start for %s", act);
				continue;
			}
			if (a == NULL)
				a = add_action(r, act, exec, i);
			if (a == NULL)
				continue;
			a->start = line;
			a->start_idx = i;
			read_plan(a);
		} else if (rv_str_eq(type, "action-refusal")) {
			char fallback[200];
			if (act == NULL && exec != NULL) {
				snprintf(fallback, sizeof fallback, "action-%s", exec);
				/* the line outlives the action table */
				json_object_object_add(line, "actionId", json_object_new_string(fallback));
				act = jsonx_get_str(line, "actionId");
			}
			if (act == NULL)
				continue;
			rv_action *a = rv_find_action(r, act);
			if (a != NULL && a->refusal != NULL) {
				rv_hard(r, "journal: duplicate action refusal for %s", act);
				continue;
			}
			if (a == NULL)
				a = add_action(r, act, exec, i);
			if (a != NULL)
				a->refusal = line;
		} else if (rv_str_eq(type, "action-completion") && act) {
			rv_action *a = rv_find_action(r, act);
			if (a == NULL || a->start == NULL) {
				rv_hard(r, "journal: action completion for %s without a start", act);
				continue;
			}
			if (a->completion != NULL) {
				rv_hard(r, "journal: duplicate action completion for %s", act);
				continue;
			}
			a->completion = line;
			a->completion_idx = i;
		} else if (rv_str_eq(type, "snapshot-captured") && act) {
			rv_action *a = rv_find_action(r, act);
			const char *phase = jsonx_get_str(line, "phase");
			const char *name = jsonx_get_str(line, "fileName");
			if (a == NULL || a->start == NULL || a->completion != NULL) {
				rv_hard(r,
				        "journal: snapshot %s was captured outside the interval of action %s",
				        name ? name : "?", act);
				continue;
			}
			if (!rv_str_eq(phase, "before") && !rv_str_eq(phase, "after")) {
				rv_hard(r, "journal: snapshot %s has no valid phase", name ? name : "?");
				continue;
			}
			bool is_before = rv_str_eq(phase, "before");
			if ((is_before ? a->before : a->after) != NULL) {
				rv_hard(r, "journal: two %s snapshots for action %s", phase, act);
				continue;
			}
			/* The plan and the group decide which phases may exist. */
			const char *gp = a->group_phase;
			bool contradicts =
			    is_before
			        ? (!a->captures_before || rv_str_eq(gp, "member") || rv_str_eq(gp, "last"))
			        : (!a->captures_after || rv_str_eq(gp, "first") || rv_str_eq(gp, "member"));
			if (a->capture_off)
				contradicts = true;
			if (contradicts) {
				rv_hard(r, "journal: %s snapshot %s contradicts the plan of action %s", phase,
				        name ? name : "?", act);
				continue;
			}
			if (is_before) {
				a->before = line;
				a->before_ok = check_snapshot_file(r, line);
			} else {
				a->after = line;
				a->after_ok = check_snapshot_file(r, line);
			}
		} else if (rv_str_eq(type, "evidence-failure") || rv_str_eq(type, "resource-stop")) {
			r->evidence_failure = true;
			if (exec)
				rv_list_add_unique(&r->failure_exec_ids, exec);
		} else if (rv_str_eq(type, "annotation")) {
			const char *name = jsonx_get_str(line, "name");
			json_object *details = jsonx_get_obj(line, "details");
			const char *g = jsonx_get_str(details, "groupId");
			if (rv_str_eq(name, "group-close") && g)
				json_object_object_add(r->closed_groups, g, json_object_new_boolean(1));
		}
	}
	/* An after captured before its before. */
	for (size_t i = 0; i < r->n_actions; i++) {
		rv_action *a = &r->actions[i];
		int64_t b = 0, f = 0;
		if (a->before && a->after && time_parse_iso(jsonx_get_str(a->before, "capturedAt"), &b) &&
		    time_parse_iso(jsonx_get_str(a->after, "capturedAt"), &f) && f < b)
			rv_hard(r, "journal: the after snapshot of action %s was captured before its before",
			        a->action_id);
	}
}

/* Every file under state/snapshots/ must be a snapshot of this recording
 * named by a snapshot-captured line, or a .partial-* leftover. */
void rv_scan_snapshot_files(rv *r)
{
	const char *prefix = "state/snapshots/";
	for (size_t i = 0; i < r->files.count; i++) {
		const fw_entry *e = &r->files.items[i];
		if (!rv_has_prefix(e->path, prefix) || e->kind == FW_DIR)
			continue;
		const char *rest = e->path + strlen(prefix);
		const char *slash = strchr(rest, '/');
		const char *name = slash ? slash + 1 : rest;
		if (rv_has_prefix(name, ".partial-")) {
			r->partial_files = true;
			continue;
		}
		if (slash == NULL || strchr(name, '/') != NULL) {
			rv_hard(r,
			        "%s: not a snapshot original of the form state/snapshots/<sessionId>/<file>",
			        e->path);
			continue;
		}
		if (strncmp(rest, r->session_id, (size_t)(slash - rest)) != 0 ||
		    strlen(r->session_id) != (size_t)(slash - rest)) {
			rv_hard(r, "%s: a snapshot of another recording session", e->path);
			continue;
		}
		bool named = false;
		for (size_t k = 0; k < r->n_actions && !named; k++) {
			const rv_action *a = &r->actions[k];
			named = (a->before && rv_str_eq(jsonx_get_str(a->before, "fileName"), name)) ||
			        (a->after && rv_str_eq(jsonx_get_str(a->after, "fileName"), name));
		}
		if (!named)
			rv_hard(r, "%s: a snapshot file without a snapshot-captured line", e->path);
	}
}

void rv_check_records_and_receipts(rv *r)
{
	json_object_object_foreach(r->action_records, aid, rec)
	{
		if (!rv_str_eq(jsonx_get_str(rec, "sessionId"), r->session_id))
			rv_hard(r, "state/records/action/%s.json: a record of another recording session",
			        aid);
	}
	json_object_object_foreach(r->exec_records, eid, erec)
	{
		if (!rv_str_eq(jsonx_get_str(erec, "sessionId"), r->session_id))
			rv_hard(r, "state/records/execution/%s.json: a record of another recording session",
			        eid);
		if (!rv_str_eq(jsonx_get_str(erec, "executionId"), eid))
			rv_hard(r,
			        "state/records/execution/%s.json: its executionId differs from its file name",
			        eid);
	}
	struct {
		json_object *map;
		const char *dir;
		const char *suffix;
		bool guest;
	} sources[] = {{r->guest_receipts, "state/receiver/receipts", ".json", true},
	               {r->pulled_receipts, "host/receiver-receipts", ".json", true},
	               {r->host_receipts, "host/receipts", ".json", false},
	               {r->diag_receipts, "host/diagnostics", ".receipt.json", false}};
	for (size_t s = 0; s < sizeof sources / sizeof sources[0]; s++) {
		json_object_object_foreach(sources[s].map, id, rc)
		{
			const char *rid = jsonx_get_str(rc, "executionId");
			if (!rv_str_eq(rid, id)) {
				rv_hard(r, "%s/%s%s: its executionId differs from its file name",
				        sources[s].dir, id, sources[s].suffix);
				continue;
			}
			json_object *req = rv_map_get(r->requests, id);
			if (req != NULL && !rv_str_eq(jsonx_get_str(req, "executionId"), id))
				rv_hard(r, "host/requests/%s.json: its executionId differs from its receipt",
				        id);
			const char *rsid = jsonx_get_str(rc, "sessionId");
			if (sources[s].guest && rsid != NULL && !rv_str_eq(rsid, r->session_id))
				rv_hard(r, "%s/%s%s: a receipt of another recording session", sources[s].dir,
				        id, sources[s].suffix);
		}
	}
	json_object_object_foreach(r->requests, qid, q)
	{
		if (!rv_str_eq(jsonx_get_str(q, "executionId"), qid))
			rv_hard(r, "host/requests/%s.json: its executionId differs from its file name", qid);
	}
}
