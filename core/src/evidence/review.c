/*
 * The review derivation (review.h; spec/evidence.md §12): the package read
 * (review_scan.c), its verdicts derived (review_verdicts.c) and the review
 * data built (review_output.c).
 */
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

#include "evidence/journal.h"
#include "evidence/review_state.h"
#include "evidence/verify.h"
#include "evidence/viewer.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/timefmt.h"

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
	                       r->reasons_def,    r->network};
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
		if (e->kind != FW_FILE || !rv_has_prefix(e->path, "host/events/") ||
		    !rv_has_suffix(e->path, ".json"))
			continue;
		char *text = NULL;
		size_t len = 0;
		if (evidence_read_rel(r->root, e->path, MAX_JSON_FILE_BYTES, &text, &len, NULL) != RELAY_OK)
			continue;
		json_object *ev = jsonx_parse(text, len, NULL, NULL, 0);
		free(text);
		if (ev && rv_str_eq(jsonx_get_str(ev, "kind"), "acquire")) {
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

/* Opens the package, runs the file checks (opts->verify) or reads the
 * manifest, walks the files and creates the maps of the state. */
static relay_status review_open(rv *r, const char *package_dir, const evidence_review_options *opts,
                                fw_strlist *verify_errors, relay_error *err)
{
	relay_status status = RELAY_OK;
	r->dir = package_dir;
	r->root = fw_open_root(package_dir);
	if (r->root < 0) {
		status = relay_error_set(err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, errno,
		                         "cannot open evidence package %s: %s", package_dir, strerror(errno));
		return status;
	}
	if (opts->verify) {
		status = evidence_package_verify_files(package_dir, opts->project_dir, verify_errors,
		                                       &r->manifest, err);
		if (status != RELAY_OK)
			return status;
	} else {
		json_object *m = NULL;
		char *text = NULL;
		size_t len = 0;
		if (evidence_read_rel(r->root, "manifest.json", MAX_JSON_FILE_BYTES, &text, &len, NULL) ==
		    RELAY_OK)
			m = jsonx_parse(text, len, NULL, NULL, 0);
		free(text);
		r->manifest = m;
	}
	char *net_text = NULL;
	size_t net_len = 0;
	if (evidence_read_rel(r->root, "network.json", MAX_JSON_FILE_BYTES, &net_text, &net_len, NULL) ==
	    RELAY_OK)
		r->network = jsonx_parse(net_text, net_len, NULL, NULL, 0);
	free(net_text);
	status = fw_walk(package_dir, false, NULL, &r->files, err);
	if (status != RELAY_OK)
		return status;
	r->exec_starts = json_object_new_object();
	r->exec_completions = json_object_new_object();
	r->action_records = json_object_new_object();
	r->exec_records = json_object_new_object();
	r->guest_receipts = json_object_new_object();
	r->pulled_receipts = json_object_new_object();
	r->host_receipts = json_object_new_object();
	r->diag_receipts = json_object_new_object();
	r->diag_requests = json_object_new_object();
	r->requests = json_object_new_object();
	r->submissions = json_object_new_object();
	r->closed_groups = json_object_new_object();
	r->reasons_snap = json_object_new_array();
	r->reasons_exec = json_object_new_array();
	r->reasons_def = json_object_new_array();
	return status;
}

/* The recording's session (state/session.json, the identity, the manifest
 * or the journal) and the journal itself. */
static void review_session(rv *r, const evidence_identity *id, json_object *keep)
{
	const char *man_sid = jsonx_get_str(r->manifest, "sessionId");
	char *text = NULL;
	size_t len = 0;
	json_object *session = NULL;
	if (evidence_read_rel(r->root, "state/session.json", MAX_JSON_FILE_BYTES, &text, &len, NULL) ==
	    RELAY_OK)
		session = jsonx_parse(text, len, NULL, NULL, 0);
	free(text);
	if (session)
		json_object_array_add(keep, session);
	relay_error jerr = {0};
	if (evidence_journal_load(r->dir, &r->journal, &jerr) != RELAY_OK) {
		rv_hard(r, "%s",
		        jerr.code == RELAY_E_NOT_FOUND
		            ? "state/journal/events.jsonl: missing (the journal is required)"
		            : jerr.message);
		r->journal = json_object_new_array();
	}
	const char *sid = jsonx_get_str(session, "sessionId");
	if (sid == NULL)
		sid = id->session_id;
	if (sid == NULL)
		sid = man_sid;
	for (size_t i = 0; sid == NULL && i < json_object_array_length(r->journal); i++)
		sid = jsonx_get_str(json_object_array_get_idx(r->journal, i), "sessionId");
	r->session_id = strdup(sid ? sid : "");
	if (man_sid && !rv_str_eq(man_sid, r->session_id))
		rv_hard(r, "manifest.json: sessionId %s differs from the recording's %s", man_sid,
		        r->session_id);
}

/* The identity keys of the review data. */
static void add_identity(json_object *review, rv *r, const evidence_identity *id, const char *package_dir,
                         const char *derived, json_object *keep)
{
	const char *folder = strrchr(package_dir, '/');
	folder = folder && folder[1] ? folder + 1 : package_dir;
	char pkg_default[300];
	snprintf(pkg_default, sizeof pkg_default, "pkg-%s", folder);
	const char *package_id = jsonx_get_str(r->manifest, "packageId");
	const char *task_id = jsonx_get_str(r->manifest, "taskId");
	const char *guest = jsonx_get_str(r->manifest, "guest");
	const char *delivered_at = jsonx_get_str(r->manifest, "createdAt");
	const char *acquired_at = id->acquired_at, *image = id->image;
	if (acquired_at == NULL || image == NULL) {
		const char *ea = NULL, *ei = NULL;
		acquire_facts(r, &ea, &ei, keep);
		if (acquired_at == NULL)
			acquired_at = ea;
		if (image == NULL)
			image = ei;
	}
	jsonx_add_int(review, "reviewVersion", EVIDENCE_REVIEW_VERSION);
	jsonx_add_str(review, "derivedAt", derived);
	jsonx_add_str(review, "relayVersion", RELAY_VERSION);
	jsonx_add_str(review, "packageId",
	              package_id       ? package_id
	              : id->package_id ? id->package_id
	                               : pkg_default);
	jsonx_add_str(review, "sessionId", r->session_id);
	jsonx_add_str(review, "taskId", task_id ? task_id : id->task_id ? id->task_id : folder);
	jsonx_add_str(review, "guest", guest ? guest : id->guest);
	jsonx_add_str(review, "image", image);
	jsonx_add_str(review, "acquiredAt", acquired_at);
	jsonx_add_str(review, "deliveredAt", delivered_at ? delivered_at : id->delivered_at);
}

/* outputs and files of the review data. */
static void add_files(json_object *review, const rv *r)
{
	json_object *outputs = json_object_new_array(), *files = json_object_new_array();
	for (size_t i = 0; i < r->files.count; i++) {
		const fw_entry *e = &r->files.items[i];
		if (e->kind != FW_FILE)
			continue;
		json_object *f = json_object_new_object();
		jsonx_add_str(f, "path", e->path);
		jsonx_add_int(f, "bytes", (int64_t)e->bytes);
		json_object_array_add(files, f);
		if (rv_has_prefix(e->path, "extractions/")) {
			json_object *o = json_object_new_object();
			jsonx_add_str(o, "path", e->path);
			jsonx_add_int(o, "bytes", (int64_t)e->bytes);
			json_object_array_add(outputs, o);
		}
	}
	jsonx_add(review, "outputs", outputs);
	jsonx_add(review, "files", files);
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
	relay_status status = RELAY_OK;
	json_object *review = NULL, *keep = json_object_new_array();
	fw_strlist verify_errors = {0}, lost = {0};
	status = review_open(&r, package_dir, &opts, &verify_errors, err);
	if (status != RELAY_OK)
		goto cleanup;

	review_session(&r, &id, keep);

	rv_load_json_dir(&r, "state/records/action", ".json", r.action_records);
	rv_load_json_dir(&r, "state/records/execution", ".json", r.exec_records);
	rv_load_json_dir(&r, "state/receiver/receipts", ".json", r.guest_receipts);
	rv_load_json_dir(&r, "host/receiver-receipts", ".json", r.pulled_receipts);
	rv_load_json_dir(&r, "host/receipts", ".json", r.host_receipts);
	rv_load_json_dir(&r, "host/diagnostics", ".receipt.json", r.diag_receipts);
	rv_load_json_dir(&r, "host/diagnostics", ".request.json", r.diag_requests);
	rv_load_json_dir(&r, "host/requests", ".json", r.requests);
	rv_load_json_dir(&r, "host/submissions", ".json", r.submissions);

	rv_scan_journal(&r);
	rv_scan_snapshot_files(&r);
	rv_check_records_and_receipts(&r);
	rv_derive_pairs_and_defects(&r);
	rv_derive_groups(&r);
	if (r.evidence_failure)
		rv_add_finding(&r, &r.snap_findings,
		               "journal records incomplete evidence or a resource stop");
	if (r.partial_files)
		rv_add_finding(&r, &r.snap_findings, "unfinished snapshot originals retained");
	for (size_t i = 0; i < r.n_actions; i++)
		rv_derive_execution(&r, &r.actions[i]);
	bool receipt_failed = false, receipt_uncertain = false;
	rv_receipt_findings(&r, &receipt_failed, &receipt_uncertain);
	rv_lost_requests(&r, &lost);

	json_object *details = json_object_new_object();
	size_t recorded_steps = 0;
	bool any_not_completed = false, any_failed = false;
	json_object *steps = rv_build_steps(&r, details, &recorded_steps, &any_not_completed, &any_failed);

	const char *completeness = r.snap_findings.count > 0 ? "incomplete" : "complete";
	const char *execution = "passed";
	if (receipt_failed || any_failed)
		execution = "failed";
	else if (receipt_uncertain || recorded_steps == 0 || r.exec_findings.count > 0 || any_not_completed)
		execution = "uncertain";
	rv_build_reasons(&r, completeness, execution, steps, &lost, recorded_steps);

	/* Assemble. */
	review = json_object_new_object();
	char derived[25];
	time_format_iso_millis(opts.now_ms ? opts.now_ms : clock_now_ms(), derived);
	add_identity(review, &r, &id, package_dir, derived, keep);
	json_object *ver = json_object_new_object();
	fw_strlist all_errors = {0};
	for (size_t i = 0; i < verify_errors.count; i++)
		rv_list_add_unique(&all_errors, verify_errors.items[i]);
	for (size_t i = 0; i < r.hard.count; i++)
		rv_list_add_unique(&all_errors, r.hard.items[i]);
	jsonx_add_bool(ver, "ok", all_errors.count == 0);
	jsonx_add(ver, "errors", rv_list_to_json(&all_errors));
	fw_strlist_free(&all_errors);
	jsonx_add(review, "verification", ver);
	jsonx_add_str(review, "completeness", completeness);
	jsonx_add_str(review, "execution", execution);
	jsonx_add(review, "findings", rv_list_to_json(&r.findings));
	json_object *reasons = json_object_new_object();
	jsonx_add(reasons, "snapshots", json_object_get(r.reasons_snap));
	jsonx_add(reasons, "execution", json_object_get(r.reasons_exec));
	jsonx_add(reasons, "defects", json_object_get(r.reasons_def));
	jsonx_add(review, "reasons", reasons);
	jsonx_add(review, "steps", steps);
	jsonx_add(review, "takeOvers", rv_take_overs(&r));
	jsonx_add(review, "details", details);
	add_files(review, &r);
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
