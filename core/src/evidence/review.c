#include "evidence/review.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evidence/fswalk.h"
#include "evidence/journal.h"
#include "evidence/verify.h"
#include "evidence/viewer.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/timefmt.h"

enum { MAX_JSON_FILE_BYTES = 32 << 20 };

#define NO_SCREENSHOT_DIAGNOSTIC                                                                             \
	"No screenshot evidence. This diagnostic shell script ran without the receiver."

/* ---- small helpers --------------------------------------------------------- */

static bool str_eq(const char *a, const char *b)
{
	return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

static bool has_suffix(const char *s, const char *x)
{
	size_t n = strlen(s), m = strlen(x);
	return n >= m && strcmp(s + n - m, x) == 0;
}

static bool list_has(const fw_strlist *l, const char *s)
{
	for (size_t i = 0; i < l->count; i++)
		if (strcmp(l->items[i], s) == 0)
			return true;
	return false;
}

static void list_add_unique(fw_strlist *l, const char *s)
{
	if (!list_has(l, s))
		fw_strlist_push(l, s);
}

static const char *get_str_path(const json_object *o, const char *k1, const char *k2)
{
	json_object *mid = jsonx_get_obj(o, k1);
	return mid ? jsonx_get_str(mid, k2) : NULL;
}

/* ---- the derivation state ---------------------------------------------------- */

typedef struct rv_action {
	const char *action_id;
	const char *execution_id;
	json_object *start, *refusal, *completion; /* journal lines (borrowed from the journal) */
	size_t start_idx, completion_idx, first_idx;
	json_object *before, *after; /* snapshot-captured lines */
	bool before_ok, after_ok;    /* the file is present and matches */
	json_object *record;         /* action record (borrowed from the map) */
	const char *group_id, *group_phase;
	bool captures_before, captures_after, capture_off, has_plan;
	int64_t after_interval_ms;
	bool has_after_interval;
	/* derived */
	const char *execution;
	char *why;                      /* diagnostic for the reasons; owned */
	bool lacks_before, lacks_after; /* standalone planned pair missing */
	bool group_incomplete;
} rv_action;

typedef struct rv {
	const char *dir;
	int root;
	char *session_id;
	json_object *manifest, *journal;
	json_object *exec_starts, *exec_completions; /* id -> line (references taken) */
	json_object *action_records, *exec_records;  /* id -> record */
	json_object *guest_receipts, *pulled_receipts, *host_receipts, *diag_receipts, *diag_requests;
	json_object *requests, *submissions;
	json_object *closed_groups;
	rv_action *actions;
	size_t n_actions, cap_actions;
	fw_strlist hard;     /* hard errors */
	fw_strlist findings; /* all findings, in order */
	fw_strlist snap_findings, exec_findings, defect_findings;
	json_object *reasons_snap, *reasons_exec, *reasons_def;
	fw_strlist failure_exec_ids; /* evidence-failure / resource-stop */
	bool evidence_failure, partial_files;
	fw_tree files;
} rv;

static void hard(rv *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hard(rv *r, const char *fmt, ...)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "package verification failed: ");
	va_list ap;
	va_start(ap, fmt);
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	if (strbuf_ok(&sb))
		list_add_unique(&r->hard, strbuf_str(&sb));
	strbuf_free(&sb);
}

static void add_finding(rv *r, fw_strlist *cls, const char *text)
{
	list_add_unique(cls, text);
	list_add_unique(&r->findings, text);
}

static rv_action *find_action(rv *r, const char *action_id)
{
	for (size_t i = 0; i < r->n_actions; i++)
		if (strcmp(r->actions[i].action_id, action_id) == 0)
			return &r->actions[i];
	return NULL;
}

static rv_action *add_action(rv *r, const char *action_id, const char *execution_id, size_t idx)
{
	if (r->n_actions == r->cap_actions) {
		size_t cap = r->cap_actions ? r->cap_actions * 2 : 32;
		rv_action *a = realloc(r->actions, cap * sizeof *a);
		if (a == NULL)
			return NULL;
		r->actions = a;
		r->cap_actions = cap;
	}
	rv_action *a = &r->actions[r->n_actions++];
	memset(a, 0, sizeof *a);
	a->action_id = action_id;
	a->execution_id = execution_id;
	a->first_idx = idx;
	return a;
}

/* Loads every "<dir>/<stem><suffix>" file directly in `dir` into map[stem]. */
static void load_json_dir(rv *r, const char *dir, const char *suffix, json_object *map)
{
	size_t dl = strlen(dir);
	for (size_t i = 0; i < r->files.count; i++) {
		const fw_entry *e = &r->files.items[i];
		if (e->kind != FW_FILE || strncmp(e->path, dir, dl) != 0 || e->path[dl] != '/')
			continue;
		const char *name = e->path + dl + 1;
		if (strchr(name, '/') != NULL || !has_suffix(name, suffix))
			continue;
		char *stem = strndup(name, strlen(name) - strlen(suffix));
		char *text = NULL;
		size_t len = 0;
		relay_error err = {0};
		if (stem == NULL)
			continue;
		if (evidence_read_rel(r->root, e->path, MAX_JSON_FILE_BYTES, &text, &len, &err) != RELAY_OK) {
			hard(r, "%s: %s", e->path, err.message);
		} else {
			json_object *obj = evidence_parse_guest_json(text, len, NULL, 0);
			if (obj == NULL || !json_object_is_type(obj, json_type_object)) {
				hard(r, "%s: not a JSON object", e->path);
				json_object_put(obj);
			} else {
				json_object_object_add(map, stem, obj);
			}
		}
		free(text);
		free(stem);
	}
}

static json_object *map_get(json_object *map, const char *key)
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
static const char *outcome_status(const json_object *outcome)
{
	const char *kind = jsonx_get_str(outcome, "kind");
	if (str_eq(kind, "refused"))
		return "refused";
	if (str_eq(kind, "uncertain"))
		return "uncertain";
	if (str_eq(kind, "completed")) {
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

static const char *receipt_status(const json_object *receipt)
{
	json_object *outcome = jsonx_get_obj(receipt, "outcome");
	return outcome ? outcome_status(outcome) : "uncertain";
}

static const char *receipt_diagnostic(const json_object *receipt)
{
	return get_str_path(receipt, "outcome", "diagnostic");
}

/* The guest's receipt for an execution: the pulled state's, else the copy
 * pulled right after the run. */
static json_object *guest_receipt(rv *r, const char *id)
{
	json_object *g = map_get(r->guest_receipts, id);
	return g ? g : map_get(r->pulled_receipts, id);
}

/* Statuses of every receipt of one execution after superseding (§12.4):
 * fills seen[0..3] = refused, failed, uncertain, completed. */
static void receipts_of(rv *r, const char *id, bool seen[4], const char **diag)
{
	memset(seen, 0, 4 * sizeof *seen);
	json_object *sources[4] = {map_get(r->guest_receipts, id), map_get(r->pulled_receipts, id),
	                           map_get(r->host_receipts, id), NULL};
	json_object *completion = map_get(r->exec_completions, id);
	bool has_guest = sources[0] != NULL || sources[1] != NULL || completion != NULL;
	for (int i = 0; i < 4; i++) {
		const char *st = NULL;
		const char *d = NULL;
		if (i < 3 && sources[i] != NULL) {
			st = receipt_status(sources[i]);
			d = receipt_diagnostic(sources[i]);
			/* A host receipt that is uncertain because the host lost the
			 * guest's answer is superseded by the guest's receipt. */
			if (i == 2 && str_eq(st, "uncertain") && has_guest)
				continue;
		} else if (i == 3 && completion != NULL) {
			json_object *oc = jsonx_get_obj(completion, "outcome");
			if (oc == NULL)
				continue;
			st = outcome_status(oc);
			d = jsonx_get_str(oc, "diagnostic");
		}
		if (st == NULL)
			continue;
		int k = str_eq(st, "refused")     ? 0
		        : str_eq(st, "failed")    ? 1
		        : str_eq(st, "uncertain") ? 2
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
	return has_suffix(name, ".png");
}

static bool check_snapshot_file(rv *r, json_object *line)
{
	const char *name = jsonx_get_str(line, "fileName");
	const char *sha = jsonx_get_str(line, "sha256");
	int64_t bytes = -1;
	jsonx_get_int(line, "bytes", &bytes);
	if (!file_name_ok(name)) {
		hard(r, "journal: snapshot-captured line has an invalid fileName");
		return false;
	}
	char rel[512];
	snprintf(rel, sizeof rel, "state/snapshots/%s/%s", r->session_id, name);
	char hex[65];
	uint64_t got = 0;
	relay_error err = {0};
	if (evidence_hash_rel(r->root, rel, hex, &got, &err) != RELAY_OK) {
		hard(r, "%s: named by a snapshot-captured line but %s", rel,
		     err.code == RELAY_E_NOT_FOUND ? "missing from the package" : err.message);
		return false;
	}
	if ((int64_t)got != bytes || !str_eq(hex, sha)) {
		hard(r, "%s: size or SHA-256 differs from its snapshot-captured line", rel);
		return false;
	}
	return true;
}

static char *snapshot_path(const rv *r, const json_object *line)
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

static void scan_journal(rv *r)
{
	size_t n = json_object_array_length(r->journal);
	for (size_t i = 0; i < n; i++) {
		json_object *line = json_object_array_get_idx(r->journal, i);
		const char *type = jsonx_get_str(line, "type");
		const char *sid = jsonx_get_str(line, "sessionId");
		if (!str_eq(sid, r->session_id)) {
			hard(r,
			     "state/journal/events.jsonl: line %zu belongs to another recording session (%s)",
			     i + 1, sid ? sid : "none");
			continue;
		}
		if (type == NULL)
			continue;
		const char *exec = jsonx_get_str(line, "executionId");
		const char *act = jsonx_get_str(line, "actionId");
		if (str_eq(type, "execution-start") && exec) {
			map_put_ref(r->exec_starts, exec, line);
		} else if (str_eq(type, "execution-completion") && exec) {
			map_put_ref(r->exec_completions, exec, line);
		} else if (str_eq(type, "action-start") && act) {
			rv_action *a = find_action(r, act);
			if (a != NULL && (a->start != NULL || a->refusal != NULL)) {
				hard(r, "journal: duplicate action start for %s", act);
				continue;
			}
			if (a == NULL)
				a = add_action(r, act, exec, i);
			if (a == NULL)
				continue;
			a->start = line;
			a->start_idx = i;
			read_plan(a);
		} else if (str_eq(type, "action-refusal")) {
			char fallback[200];
			if (act == NULL && exec != NULL) {
				snprintf(fallback, sizeof fallback, "action-%s", exec);
				/* the line outlives the action table */
				json_object_object_add(line, "actionId", json_object_new_string(fallback));
				act = jsonx_get_str(line, "actionId");
			}
			if (act == NULL)
				continue;
			rv_action *a = find_action(r, act);
			if (a != NULL && a->refusal != NULL) {
				hard(r, "journal: duplicate action refusal for %s", act);
				continue;
			}
			if (a == NULL)
				a = add_action(r, act, exec, i);
			if (a != NULL)
				a->refusal = line;
		} else if (str_eq(type, "action-completion") && act) {
			rv_action *a = find_action(r, act);
			if (a == NULL || a->start == NULL) {
				hard(r, "journal: action completion for %s without a start", act);
				continue;
			}
			if (a->completion != NULL) {
				hard(r, "journal: duplicate action completion for %s", act);
				continue;
			}
			a->completion = line;
			a->completion_idx = i;
		} else if (str_eq(type, "snapshot-captured") && act) {
			rv_action *a = find_action(r, act);
			const char *phase = jsonx_get_str(line, "phase");
			const char *name = jsonx_get_str(line, "fileName");
			if (a == NULL || a->start == NULL || a->completion != NULL) {
				hard(r, "journal: snapshot %s was captured outside the interval of action %s",
				     name ? name : "?", act);
				continue;
			}
			if (!str_eq(phase, "before") && !str_eq(phase, "after")) {
				hard(r, "journal: snapshot %s has no valid phase", name ? name : "?");
				continue;
			}
			bool is_before = str_eq(phase, "before");
			if ((is_before ? a->before : a->after) != NULL) {
				hard(r, "journal: two %s snapshots for action %s", phase, act);
				continue;
			}
			/* The plan and the group decide which phases may exist. */
			const char *gp = a->group_phase;
			bool contradicts =
			    is_before ? (!a->captures_before || str_eq(gp, "member") || str_eq(gp, "last"))
			              : (!a->captures_after || str_eq(gp, "first") || str_eq(gp, "member"));
			if (a->capture_off)
				contradicts = true;
			if (contradicts) {
				hard(r, "journal: %s snapshot %s contradicts the plan of action %s", phase,
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
		} else if (str_eq(type, "evidence-failure") || str_eq(type, "resource-stop")) {
			r->evidence_failure = true;
			if (exec)
				list_add_unique(&r->failure_exec_ids, exec);
		} else if (str_eq(type, "annotation")) {
			const char *name = jsonx_get_str(line, "name");
			json_object *details = jsonx_get_obj(line, "details");
			const char *g = jsonx_get_str(details, "groupId");
			if (str_eq(name, "group-close") && g)
				json_object_object_add(r->closed_groups, g, json_object_new_boolean(1));
		}
	}
	/* An after captured before its before. */
	for (size_t i = 0; i < r->n_actions; i++) {
		rv_action *a = &r->actions[i];
		int64_t b = 0, f = 0;
		if (a->before && a->after && time_parse_iso(jsonx_get_str(a->before, "capturedAt"), &b) &&
		    time_parse_iso(jsonx_get_str(a->after, "capturedAt"), &f) && f < b)
			hard(r, "journal: the after snapshot of action %s was captured before its before",
			     a->action_id);
	}
}

/* Every file under state/snapshots/ must be a snapshot of this recording
 * named by a snapshot-captured line, or a .partial-* leftover. */
static void scan_snapshot_files(rv *r)
{
	const char *prefix = "state/snapshots/";
	for (size_t i = 0; i < r->files.count; i++) {
		const fw_entry *e = &r->files.items[i];
		if (!has_prefix(e->path, prefix) || e->kind == FW_DIR)
			continue;
		const char *rest = e->path + strlen(prefix);
		const char *slash = strchr(rest, '/');
		const char *name = slash ? slash + 1 : rest;
		if (has_prefix(name, ".partial-")) {
			r->partial_files = true;
			continue;
		}
		if (slash == NULL || strchr(name, '/') != NULL) {
			hard(r, "%s: not a snapshot original of the form state/snapshots/<sessionId>/<file>",
			     e->path);
			continue;
		}
		if (strncmp(rest, r->session_id, (size_t)(slash - rest)) != 0 ||
		    strlen(r->session_id) != (size_t)(slash - rest)) {
			hard(r, "%s: a snapshot of another recording session", e->path);
			continue;
		}
		bool named = false;
		for (size_t k = 0; k < r->n_actions && !named; k++) {
			const rv_action *a = &r->actions[k];
			named = (a->before && str_eq(jsonx_get_str(a->before, "fileName"), name)) ||
			        (a->after && str_eq(jsonx_get_str(a->after, "fileName"), name));
		}
		if (!named)
			hard(r, "%s: a snapshot file without a snapshot-captured line", e->path);
	}
}

static void check_records_and_receipts(rv *r)
{
	json_object_object_foreach(r->action_records, aid, rec)
	{
		if (!str_eq(jsonx_get_str(rec, "sessionId"), r->session_id))
			hard(r, "state/records/action/%s.json: a record of another recording session", aid);
	}
	json_object_object_foreach(r->exec_records, eid, erec)
	{
		if (!str_eq(jsonx_get_str(erec, "sessionId"), r->session_id))
			hard(r, "state/records/execution/%s.json: a record of another recording session",
			     eid);
		if (!str_eq(jsonx_get_str(erec, "executionId"), eid))
			hard(r, "state/records/execution/%s.json: its executionId differs from its file name",
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
			if (!str_eq(rid, id)) {
				hard(r, "%s/%s%s: its executionId differs from its file name", sources[s].dir,
				     id, sources[s].suffix);
				continue;
			}
			json_object *req = map_get(r->requests, id);
			if (req != NULL && !str_eq(jsonx_get_str(req, "executionId"), id))
				hard(r, "host/requests/%s.json: its executionId differs from its receipt",
				     id);
			const char *rsid = jsonx_get_str(rc, "sessionId");
			if (sources[s].guest && rsid != NULL && !str_eq(rsid, r->session_id))
				hard(r, "%s/%s%s: a receipt of another recording session", sources[s].dir, id,
				     sources[s].suffix);
		}
	}
	json_object_object_foreach(r->requests, qid, q)
	{
		if (!str_eq(jsonx_get_str(q, "executionId"), qid))
			hard(r, "host/requests/%s.json: its executionId differs from its file name", qid);
	}
}

/* ---- pass 2: steps ---------------------------------------------------------------- */

static void set_why(rv_action *a, const char *text)
{
	if (a->why == NULL && text != NULL)
		a->why = strdup(text);
}

static void derive_execution(rv *r, rv_action *a)
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
	} else if (str_eq(jsonx_get_str(a->completion, "state"), "uncertain") || to == NULL) {
		ex = "uncertain";
	} else if (str_eq(jsonx_get_str(to, "kind"), "failure") &&
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
	if (!str_eq(ex, "refused") && !str_eq(ex, "failed") &&
	    (pair_missing || a->record == NULL || !str_eq(rec_state, "recorded"))) {
		if (!str_eq(ex, "uncertain") && !str_eq(ex, "incomplete"))
			set_why(a, pair_missing        ? "its planned screenshots are missing"
			           : a->record == NULL ? "its action record is missing"
			                               : "its action record is not recorded");
		ex = "uncertain";
	}
	/* Receipts, by precedence refused, failed, uncertain. */
	bool seen[4];
	const char *diag = NULL;
	if (a->execution_id)
		receipts_of(r, a->execution_id, seen, &diag);
	else
		memset(seen, 0, sizeof seen);
	if (seen[0])
		ex = "refused";
	else if (seen[1] && !str_eq(ex, "refused"))
		ex = "failed";
	else if (seen[2] && !str_eq(ex, "refused") && !str_eq(ex, "failed"))
		ex = "uncertain";
	if (diag)
		set_why(a, diag);
	a->execution = ex;
}

/* Group analysis: a group is complete when its first has a before, its last
 * an after, it was closed, and no unrelated action started inside it. */
static void derive_groups(rv *r)
{
	for (size_t i = 0; i < r->n_actions; i++) {
		rv_action *first = &r->actions[i];
		if (first->group_id == NULL || !str_eq(first->group_phase, "first"))
			continue;
		const char *g = first->group_id;
		rv_action *last = NULL;
		for (size_t k = 0; k < r->n_actions; k++)
			if (str_eq(r->actions[k].group_id, g) && str_eq(r->actions[k].group_phase, "last"))
				last = &r->actions[k];
		bool closed = map_get(r->closed_groups, g) != NULL ||
		              (last && last->completion &&
		               str_eq(jsonx_get_str(last->completion, "state"), "recorded"));
		bool complete = first->before_ok && last != NULL && last->after_ok && closed;
		if (complete) {
			size_t end = last->completion ? last->completion_idx : last->start_idx;
			for (size_t k = 0; k < r->n_actions; k++) {
				rv_action *o = &r->actions[k];
				if (o->start && o->start_idx > first->start_idx && o->start_idx < end &&
				    !str_eq(o->group_id, g))
					complete = false;
			}
		}
		if (!complete) {
			char text[300];
			snprintf(
			    text, sizeof text,
			    "coalescing group %s lacks a complete consecutive first/member/last causal pair",
			    g);
			for (size_t k = 0; k < r->n_actions; k++)
				if (str_eq(r->actions[k].group_id, g))
					r->actions[k].group_incomplete = true;
			if (!list_has(&r->snap_findings, text))
				add_finding(r, &r->snap_findings, text);
		}
	}
	/* Members or lasts whose first never appeared. */
	for (size_t i = 0; i < r->n_actions; i++) {
		rv_action *a = &r->actions[i];
		if (a->group_id == NULL || str_eq(a->group_phase, "first"))
			continue;
		bool has_first = false;
		for (size_t k = 0; k < r->n_actions; k++)
			if (str_eq(r->actions[k].group_id, a->group_id) &&
			    str_eq(r->actions[k].group_phase, "first"))
				has_first = true;
		if (!has_first) {
			char text[300];
			snprintf(
			    text, sizeof text,
			    "coalescing group %s lacks a complete consecutive first/member/last causal pair",
			    a->group_id);
			a->group_incomplete = true;
			add_finding(r, &r->snap_findings, text);
		}
	}
}

static void derive_pairs_and_defects(rv *r)
{
	for (size_t i = 0; i < r->n_actions; i++) {
		rv_action *a = &r->actions[i];
		a->record = map_get(r->action_records, a->action_id);
		if (a->start != NULL && a->group_id == NULL && !a->capture_off && a->captures_before &&
		    a->captures_after && (!a->before_ok || !a->after_ok)) {
			a->lacks_before = !a->before_ok;
			a->lacks_after = !a->after_ok;
			char text[300];
			snprintf(text, sizeof text, "action %s lacks its declared causal pair", a->action_id);
			add_finding(r, &r->snap_findings, text);
		}
		/* Defects: the relay's own records disagreeing. */
		char text[600];
		if (a->record == NULL && a->start != NULL) {
			snprintf(text, sizeof text, "action %s has no materialized action record",
			         a->action_id);
			add_finding(r, &r->defect_findings, text);
		}
		if (a->record != NULL && (a->before || a->after)) {
			json_object *refs = jsonx_get_array(a->record, "snapshots");
			if (refs == NULL) {
				snprintf(text, sizeof text,
				         "action %s lacks durable reverse snapshot references", a->action_id);
				add_finding(r, &r->defect_findings, text);
			} else {
				json_object *caps[2] = {a->before, a->after};
				for (int c = 0; c < 2; c++) {
					char *p = snapshot_path(r, caps[c]);
					if (p == NULL)
						continue;
					bool listed = false;
					for (size_t k = 0; k < json_object_array_length(refs); k++)
						if (str_eq(jsonx_get_str(json_object_array_get_idx(refs, k),
						                         "path"),
						           p))
							listed = true;
					if (!listed) {
						snprintf(text, sizeof text,
						         "action %s is missing reverse snapshot reference %s",
						         a->action_id, p);
						add_finding(r, &r->defect_findings, text);
					}
					free(p);
				}
			}
		}
	}
	json_object_object_foreach(r->action_records, aid, rec)
	{
		(void)rec;
		rv_action *a = find_action(r, aid);
		if (a == NULL || (a->start == NULL && a->refusal == NULL)) {
			char text[300];
			snprintf(text, sizeof text, "action %s has no retained start or refusal", aid);
			add_finding(r, &r->defect_findings, text);
		}
	}
}

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
	json_object *rc = a->execution_id ? guest_receipt(r, a->execution_id) : NULL;
	if (rc == NULL && a->execution_id)
		rc = map_get(r->host_receipts, a->execution_id);
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
	/* What the step left running (guest.md §16.1 item 8). */
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

/* "shell <first line that is neither blank nor #!>" (guest.md §14). */
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

static json_object *build_steps(rv *r, json_object *details, size_t *recorded_steps, bool *any_not_completed,
                                bool *any_failed)
{
	size_t cap = r->n_actions + (size_t)json_object_object_length(r->diag_receipts) + 1;
	step_out *outs = calloc(cap, sizeof *outs);
	size_t n = 0;
	*recorded_steps = 0;
	for (size_t i = 0; i < r->n_actions && outs; i++) {
		rv_action *a = &r->actions[i];
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
		json_object *req = map_get(r->requests, a->execution_id);
		json_object *sub = map_get(r->submissions, a->execution_id);
		const char *because = jsonx_get_str(req, "because");
		if (because == NULL)
			because = jsonx_get_str(sub, "because");
		if (because == NULL)
			because = jsonx_get_str(sub, "reason");
		jsonx_add_str(step, "because", because);
		const char *expected = get_str_path(req, "step", "expected");
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
				if (!str_eq(o->group_id, a->group_id))
					continue;
				if (str_eq(o->group_phase, "first") && o->before_ok)
					before_line = o->before;
				if (str_eq(o->group_phase, "last") && o->after_ok) {
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
		char *bp = snapshot_path(r, before_line), *ap = snapshot_path(r, after_line);
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
			              a->capture_off
			                  ? "No screenshot evidence. Snapshots were off for this guest."
			                  : "No screenshot evidence was retained for this step.");
		}
		/* Details. */
		json_object *d = json_object_new_object();
		jsonx_add_str(d, "executionId", a->execution_id);
		const char *at = jsonx_get_str(a->start ? a->start : a->refusal, "at");
		jsonx_add_str(d, "at", at);
		jsonx_add_str(d, "beforeAt", before_line ? jsonx_get_str(before_line, "capturedAt") : NULL);
		jsonx_add_str(d, "afterAt", after_line ? jsonx_get_str(after_line, "capturedAt") : NULL);
		json_object *erec = map_get(r->exec_records, a->execution_id);
		json_object *argv = jsonx_get_array(erec, "argv");
		if (argv == NULL)
			argv = jsonx_get_array(map_get(r->exec_starts, a->execution_id), "argv");
		json_object *rc = a->execution_id ? guest_receipt(r, a->execution_id) : NULL;
		if (rc == NULL && a->execution_id)
			rc = map_get(r->host_receipts, a->execution_id);
		if (argv == NULL && rc)
			argv = jsonx_get_array(rc, "argv");
		jsonx_add(d, "argv", argv ? json_object_get(argv) : json_object_new_array());
		jsonx_add(d, "output", rc ? output_of(rc, false) : NULL);
		if (a->why)
			jsonx_add_str(d, "diagnostic", a->why);
		int64_t ms = 0;
		time_parse_iso(at, &ms);
		outs[n++] = (step_out){step, d, sid, ms, a->first_idx, false};
		(*recorded_steps)++;
		free(bp);
		free(ap);
	}
	/* Diagnostic steps. */
	size_t order = r->n_actions + 1;
	json_object_object_foreach(r->diag_receipts, did, drc)
	{
		if (outs == NULL)
			break;
		json_object *dreq = map_get(r->diag_requests, did);
		const char *script = jsonx_get_str(dreq, "code");
		if (script == NULL)
			script = jsonx_get_str(dreq, "script");
		char *title = shell_title(script);
		const char *st = receipt_status(drc);
		json_object *step = json_object_new_object();
		jsonx_add_str(step, "id", did);
		jsonx_add_str(step, "title", title);
		jsonx_add_str(step, "execution", str_eq(st, "completed") ? "completed" : st);
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
		const char *dd = receipt_diagnostic(drc);
		if (dd)
			jsonx_add_str(d, "diagnostic", dd);
		int64_t ms = INT64_MAX;
		if (at)
			time_parse_iso(at, &ms);
		outs[n++] = (step_out){step, d, did, ms, order++, true};
		free(title);
	}
	json_object *steps = json_object_new_array();
	if (outs == NULL)
		return steps;
	qsort(outs, n, sizeof *outs, step_cmp);
	*any_not_completed = false;
	*any_failed = false;
	for (size_t i = 0; i < n; i++) {
		const char *ex = jsonx_get_str(outs[i].step, "execution");
		if (!str_eq(ex, "completed"))
			*any_not_completed = true;
		if (str_eq(ex, "failed") || str_eq(ex, "refused"))
			*any_failed = true;
		json_object_object_add(details, jsonx_get_str(outs[i].step, "id"), outs[i].detail);
		json_object_array_add(steps, outs[i].step);
	}
	free(outs);
	return steps;
}

/* Findings from receipts and requests (execution class). */
static void receipt_findings(rv *r, bool *receipt_failed, bool *receipt_uncertain)
{
	*receipt_failed = *receipt_uncertain = false;
	json_object *maps[] = {r->guest_receipts, r->pulled_receipts, r->host_receipts, r->diag_receipts};
	for (size_t m = 0; m < 4; m++) {
		json_object_object_foreach(maps[m], id, rc)
		{
			const char *st = receipt_status(rc);
			if (m == 2 && str_eq(st, "uncertain") &&
			    (guest_receipt(r, id) != NULL || map_get(r->exec_completions, id) != NULL))
				continue; /* superseded */
			if (str_eq(st, "refused") || str_eq(st, "failed"))
				*receipt_failed = true;
			if (str_eq(st, "uncertain"))
				*receipt_uncertain = true;
		}
	}
	json_object_object_foreach(r->exec_completions, cid, line)
	{
		(void)cid;
		json_object *oc = jsonx_get_obj(line, "outcome");
		const char *st = oc ? outcome_status(oc) : "uncertain";
		if (str_eq(st, "refused") || str_eq(st, "failed"))
			*receipt_failed = true;
		if (str_eq(st, "uncertain"))
			*receipt_uncertain = true;
	}
	if (*receipt_failed)
		add_finding(r, &r->exec_findings, "retained execution receipt reports refusal or failure");
	if (*receipt_uncertain)
		add_finding(r, &r->exec_findings, "retained execution receipt reports uncertainty");
}

static void lost_requests(rv *r, fw_strlist *lost)
{
	json_object_object_foreach(r->requests, qid, q)
	{
		(void)q;
		bool started = map_get(r->exec_starts, qid) != NULL || guest_receipt(r, qid) != NULL;
		for (size_t i = 0; i < r->n_actions && !started; i++)
			if (r->actions[i].refusal && str_eq(r->actions[i].execution_id, qid))
				started = true;
		if (!started) {
			char text[300];
			snprintf(text, sizeof text, "request %s has no retained guest execution", qid);
			add_finding(r, &r->exec_findings, text);
			fw_strlist_push(lost, qid);
		}
	}
}

static json_object *list_to_json(const fw_strlist *l)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < l->count; i++)
		json_object_array_add(a, json_object_new_string(l->items[i]));
	return a;
}

static const char *step_id_for_exec(rv *r, const char *exec)
{
	for (size_t i = 0; i < r->n_actions; i++)
		if (str_eq(r->actions[i].execution_id, exec))
			return step_id_of(&r->actions[i]);
	return exec;
}

static void build_reasons(rv *r, const char *completeness, const char *execution, json_object *steps,
                          const fw_strlist *lost, size_t recorded_steps)
{
	char text[1200];
	if (str_eq(completeness, "incomplete")) {
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
				list_add_unique(&groups, r->actions[i].group_id);
		for (size_t g = 0; g < groups.count; g++) {
			json_object *ids = json_object_new_array();
			for (size_t i = 0; i < r->n_actions; i++)
				if (str_eq(r->actions[i].group_id, groups.items[g]))
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
	if (!str_eq(execution, "passed")) {
		size_t n = json_object_array_length(steps);
		for (size_t i = 0; i < n; i++) {
			json_object *s = json_object_array_get_idx(steps, i);
			const char *id = jsonx_get_str(s, "id");
			const char *ex = jsonx_get_str(s, "execution");
			rv_action *a = NULL;
			for (size_t k = 0; k < r->n_actions; k++)
				if (str_eq(step_id_of(&r->actions[k]), id))
					a = &r->actions[k];
			const char *why = a ? a->why : NULL;
			if (a == NULL) { /* diagnostic step */
				json_object *drc = map_get(r->diag_receipts, id);
				why = receipt_diagnostic(drc);
			}
			if (str_eq(ex, "refused")) {
				snprintf(text, sizeof text, "Step %s was refused before it ran: %s.", id,
				         why ? why : "no diagnostic was recorded");
				json_object_array_add(
				    r->reasons_exec,
				    reason(text, ids1(id), "Nothing ran; check why it was refused."));
			} else if (str_eq(ex, "failed")) {
				char words[128];
				if (a)
					failure_words(r, a, words, sizeof words);
				else {
					json_object *drc = map_get(r->diag_receipts, id);
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
			} else if (!str_eq(ex, "completed")) {
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
		if (has_prefix(f, "action ")) {
			const char *s = f + 7;
			const char *e = strchr(s, ' ');
			char *aid = e ? strndup(s, (size_t)(e - s)) : NULL;
			rv_action *a = aid ? find_action(r, aid) : NULL;
			if (a)
				json_object_array_add(ids, json_object_new_string(step_id_of(a)));
			free(aid);
		}
		json_object_array_add(r->reasons_def,
		                      reason(text, ids, "Report it; the verdicts do not depend on it."));
	}
}

static void rv_free(rv *r)
{
	for (size_t i = 0; i < r->n_actions; i++)
		free(r->actions[i].why);
	free(r->actions);
	free(r->session_id);
	json_object *objs[] = {r->manifest,       r->journal,       r->exec_starts,    r->exec_completions,
	                       r->action_records, r->exec_records,  r->guest_receipts, r->pulled_receipts,
	                       r->host_receipts,  r->diag_receipts, r->diag_requests,  r->requests,
	                       r->submissions,    r->closed_groups, r->reasons_snap,   r->reasons_exec,
	                       r->reasons_def};
	for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
		json_object_put(objs[i]);
	fw_strlist_free(&r->hard);
	fw_strlist_free(&r->findings);
	fw_strlist_free(&r->snap_findings);
	fw_strlist_free(&r->exec_findings);
	fw_strlist_free(&r->defect_findings);
	fw_strlist_free(&r->failure_exec_ids);
	fw_tree_free(&r->files);
	if (r->root >= 0)
		close(r->root);
}

/* Extra identity from host/events: the acquire event's time and image. */
static void acquire_facts(rv *r, const char **acquired_at, const char **image, json_object *keep)
{
	for (size_t i = 0; i < r->files.count; i++) {
		const fw_entry *e = &r->files.items[i];
		if (e->kind != FW_FILE || !has_prefix(e->path, "host/events/") ||
		    !has_suffix(e->path, ".json"))
			continue;
		char *text = NULL;
		size_t len = 0;
		if (evidence_read_rel(r->root, e->path, MAX_JSON_FILE_BYTES, &text, &len, NULL) != RELAY_OK)
			continue;
		json_object *ev = jsonx_parse(text, len, NULL, NULL, 0);
		free(text);
		if (ev && str_eq(jsonx_get_str(ev, "kind"), "acquire")) {
			json_object_array_add(keep, ev);
			*acquired_at = jsonx_get_str(ev, "at");
			json_object *d = jsonx_get_obj(ev, "details");
			*image = jsonx_get_str(d, "image");
			if (*image == NULL)
				*image = jsonx_get_str(d, "imageName");
			return;
		}
		json_object_put(ev);
	}
}

relay_status evidence_review_derive(const char *package_dir, const evidence_review_options *opts_in,
                                    json_object **review_out, relay_error *err)
{
	evidence_review_options opts = {0};
	if (opts_in)
		opts = *opts_in;
	evidence_identity id = {0};
	if (opts.identity)
		id = *opts.identity;
	*review_out = NULL;
	rv r;
	memset(&r, 0, sizeof r);
	r.dir = package_dir;
	r.root = fw_open_root(package_dir);
	relay_status status = RELAY_OK;
	json_object *review = NULL, *keep = json_object_new_array();
	fw_strlist verify_errors = {0}, lost = {0};
	if (r.root < 0) {
		status = relay_error_set(err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, errno,
		                         "cannot open evidence package %s: %s", package_dir, strerror(errno));
		goto cleanup;
	}
	if (opts.verify) {
		status = evidence_package_verify_files(package_dir, opts.project_dir, &verify_errors,
		                                       &r.manifest, err);
		if (status != RELAY_OK)
			goto cleanup;
	} else {
		json_object *m = NULL;
		char *text = NULL;
		size_t len = 0;
		if (evidence_read_rel(r.root, "manifest.json", MAX_JSON_FILE_BYTES, &text, &len, NULL) ==
		    RELAY_OK)
			m = jsonx_parse(text, len, NULL, NULL, 0);
		free(text);
		r.manifest = m;
	}
	status = fw_walk(package_dir, false, NULL, &r.files, err);
	if (status != RELAY_OK)
		goto cleanup;
	r.exec_starts = json_object_new_object();
	r.exec_completions = json_object_new_object();
	r.action_records = json_object_new_object();
	r.exec_records = json_object_new_object();
	r.guest_receipts = json_object_new_object();
	r.pulled_receipts = json_object_new_object();
	r.host_receipts = json_object_new_object();
	r.diag_receipts = json_object_new_object();
	r.diag_requests = json_object_new_object();
	r.requests = json_object_new_object();
	r.submissions = json_object_new_object();
	r.closed_groups = json_object_new_object();
	r.reasons_snap = json_object_new_array();
	r.reasons_exec = json_object_new_array();
	r.reasons_def = json_object_new_array();

	/* Identity. */
	const char *man_sid = jsonx_get_str(r.manifest, "sessionId");
	char *text = NULL;
	size_t len = 0;
	json_object *session = NULL;
	if (evidence_read_rel(r.root, "state/session.json", MAX_JSON_FILE_BYTES, &text, &len, NULL) ==
	    RELAY_OK)
		session = jsonx_parse(text, len, NULL, NULL, 0);
	free(text);
	if (session)
		json_object_array_add(keep, session);
	relay_error jerr = {0};
	if (evidence_journal_load(package_dir, &r.journal, &jerr) != RELAY_OK) {
		hard(&r, "%s",
		     jerr.code == RELAY_E_NOT_FOUND
		         ? "state/journal/events.jsonl: missing (the journal is required)"
		         : jerr.message);
		r.journal = json_object_new_array();
	}
	const char *sid = jsonx_get_str(session, "sessionId");
	if (sid == NULL)
		sid = id.session_id;
	if (sid == NULL)
		sid = man_sid;
	for (size_t i = 0; sid == NULL && i < json_object_array_length(r.journal); i++)
		sid = jsonx_get_str(json_object_array_get_idx(r.journal, i), "sessionId");
	r.session_id = strdup(sid ? sid : "");
	if (man_sid && !str_eq(man_sid, r.session_id))
		hard(&r, "manifest.json: sessionId %s differs from the recording's %s", man_sid,
		     r.session_id);

	load_json_dir(&r, "state/records/action", ".json", r.action_records);
	load_json_dir(&r, "state/records/execution", ".json", r.exec_records);
	load_json_dir(&r, "state/receiver/receipts", ".json", r.guest_receipts);
	load_json_dir(&r, "host/receiver-receipts", ".json", r.pulled_receipts);
	load_json_dir(&r, "host/receipts", ".json", r.host_receipts);
	load_json_dir(&r, "host/diagnostics", ".receipt.json", r.diag_receipts);
	load_json_dir(&r, "host/diagnostics", ".request.json", r.diag_requests);
	load_json_dir(&r, "host/requests", ".json", r.requests);
	load_json_dir(&r, "host/submissions", ".json", r.submissions);

	scan_journal(&r);
	scan_snapshot_files(&r);
	check_records_and_receipts(&r);
	derive_pairs_and_defects(&r);
	derive_groups(&r);
	if (r.evidence_failure)
		add_finding(&r, &r.snap_findings, "journal records incomplete evidence or a resource stop");
	if (r.partial_files)
		add_finding(&r, &r.snap_findings, "unfinished snapshot originals retained");
	for (size_t i = 0; i < r.n_actions; i++)
		derive_execution(&r, &r.actions[i]);
	bool receipt_failed = false, receipt_uncertain = false;
	receipt_findings(&r, &receipt_failed, &receipt_uncertain);
	lost_requests(&r, &lost);

	json_object *details = json_object_new_object();
	size_t recorded_steps = 0;
	bool any_not_completed = false, any_failed = false;
	json_object *steps = build_steps(&r, details, &recorded_steps, &any_not_completed, &any_failed);

	const char *completeness = r.snap_findings.count > 0 ? "incomplete" : "complete";
	const char *execution = "passed";
	if (receipt_failed || any_failed)
		execution = "failed";
	else if (receipt_uncertain || recorded_steps == 0 || r.exec_findings.count > 0 || any_not_completed)
		execution = "uncertain";
	build_reasons(&r, completeness, execution, steps, &lost, recorded_steps);

	/* Assemble. */
	review = json_object_new_object();
	char derived[25];
	time_format_iso_millis(opts.now_ms ? opts.now_ms : clock_now_ms(), derived);
	const char *folder = strrchr(package_dir, '/');
	folder = folder && folder[1] ? folder + 1 : package_dir;
	char pkg_default[300];
	snprintf(pkg_default, sizeof pkg_default, "pkg-%s", folder);
	const char *package_id = jsonx_get_str(r.manifest, "packageId");
	const char *task_id = jsonx_get_str(r.manifest, "taskId");
	const char *guest = jsonx_get_str(r.manifest, "guest");
	const char *delivered_at = jsonx_get_str(r.manifest, "createdAt");
	const char *acquired_at = id.acquired_at, *image = id.image;
	if (acquired_at == NULL || image == NULL) {
		const char *ea = NULL, *ei = NULL;
		acquire_facts(&r, &ea, &ei, keep);
		if (acquired_at == NULL)
			acquired_at = ea;
		if (image == NULL)
			image = ei;
	}
	jsonx_add_int(review, "reviewVersion", EVIDENCE_REVIEW_VERSION);
	jsonx_add_str(review, "derivedAt", derived);
	jsonx_add_str(review, "relayVersion", RELAY_VERSION);
	jsonx_add_str(review, "packageId",
	              package_id      ? package_id
	              : id.package_id ? id.package_id
	                              : pkg_default);
	jsonx_add_str(review, "sessionId", r.session_id);
	jsonx_add_str(review, "taskId", task_id ? task_id : id.task_id ? id.task_id : folder);
	jsonx_add_str(review, "guest", guest ? guest : id.guest);
	jsonx_add_str(review, "image", image);
	jsonx_add_str(review, "acquiredAt", acquired_at);
	jsonx_add_str(review, "deliveredAt", delivered_at ? delivered_at : id.delivered_at);
	json_object *ver = json_object_new_object();
	fw_strlist all_errors = {0};
	for (size_t i = 0; i < verify_errors.count; i++)
		list_add_unique(&all_errors, verify_errors.items[i]);
	for (size_t i = 0; i < r.hard.count; i++)
		list_add_unique(&all_errors, r.hard.items[i]);
	jsonx_add_bool(ver, "ok", all_errors.count == 0);
	jsonx_add(ver, "errors", list_to_json(&all_errors));
	fw_strlist_free(&all_errors);
	jsonx_add(review, "verification", ver);
	jsonx_add_str(review, "completeness", completeness);
	jsonx_add_str(review, "execution", execution);
	jsonx_add(review, "findings", list_to_json(&r.findings));
	json_object *reasons = json_object_new_object();
	jsonx_add(reasons, "snapshots", json_object_get(r.reasons_snap));
	jsonx_add(reasons, "execution", json_object_get(r.reasons_exec));
	jsonx_add(reasons, "defects", json_object_get(r.reasons_def));
	jsonx_add(review, "reasons", reasons);
	jsonx_add(review, "steps", steps);
	jsonx_add(review, "details", details);
	json_object *outputs = json_object_new_array(), *files = json_object_new_array();
	for (size_t i = 0; i < r.files.count; i++) {
		const fw_entry *e = &r.files.items[i];
		if (e->kind != FW_FILE)
			continue;
		json_object *f = json_object_new_object();
		jsonx_add_str(f, "path", e->path);
		jsonx_add_int(f, "bytes", (int64_t)e->bytes);
		json_object_array_add(files, f);
		if (has_prefix(e->path, "extractions/")) {
			json_object *o = json_object_new_object();
			jsonx_add_str(o, "path", e->path);
			jsonx_add_int(o, "bytes", (int64_t)e->bytes);
			json_object_array_add(outputs, o);
		}
	}
	jsonx_add(review, "outputs", outputs);
	jsonx_add(review, "files", files);
	*review_out = review;
	review = NULL;
cleanup:
	json_object_put(review);
	json_object_put(keep);
	fw_strlist_free(&verify_errors);
	fw_strlist_free(&lost);
	rv_free(&r);
	return status;
}

bool evidence_review_verified(const json_object *review)
{
	bool ok = false;
	return jsonx_get_bool(jsonx_get_obj(review, "verification"), "ok", &ok) && ok;
}

/* ---- mcp-relay review --------------------------------------------------------------- */
