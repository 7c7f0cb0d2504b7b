/*
 * The packaging half of relay_finish (finish.h; spec/tools.md §3.9, spec/evidence.md
 * §9.1).
 *
 * Every failure before the destroy request keeps the guest, leased and
 * owned, for a corrected retry; a failed delivery removes only the derived
 * files it created (OPENING.txt, index.html, manifest.json) and records
 * <evidence>.delivery-error.json.
 */
#include "delivery/finish.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "delivery/downloads.h"
#include "delivery/extraction.h"
#include "delivery/network_evidence.h"
#include "delivery/packaging.h"
#include "evidence/package.h"
#include "session/events.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

void finish_report_free(finish_report *r)
{
	free(r->evidence);
	json_object_put(r->extractions);
	json_object_put(r->incomplete);
	json_object_put(r->review);
	memset(r, 0, sizeof *r);
}

static void progress(relay_call *call, int step, const char *what)
{
	relay_call_progress(call, step, FINISH_STEPS, what, true);
}

/* Back to staged after a failure before delivery: the queue reopens,
 * lastError and an operation-failed event say what happened. Returns -1. */
static int fail_kept(session_manager *m, guest *g, const finish_report *r, const char *code,
                     const char *message, relay_outcome *o)
{
	session_lock(m);
	if (g->phase == PHASE_FINISHING)
		g->phase = PHASE_STAGED;
	guest_save(g);
	session_unlock(m);
	downloads_reopen(m, g);
	guest_set_last_error(m, g, "relay_finish failed: %s", message);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "operation", "relay_finish");
	jsonx_add_str(details, "code", code);
	jsonx_add_str(details, "error", message);
	guest_event(m, g, "operation-failed", "relay_finish failed; the guest is kept", details);
	json_object *s = outcome_facts(o);
	jsonx_add_str(s, "guest", g->name);
	jsonx_add_bool(s, "delivered", false);
	jsonx_add_bool(s, "deliveryVerified", false);
	jsonx_add_str(s, "evidencePath", r->evidence);
	jsonx_add(s, "incompleteExtractions",
	          r->incomplete ? json_object_get(r->incomplete) : json_object_new_array());
	jsonx_add(s, "extractions",
	          r->extractions ? json_object_get(r->extractions) : json_object_new_array());
	jsonx_add_bool(s, "released", false);
	return outcome_fail(o, code, "%s; the guest %s is kept for a corrected retry", message, g->name);
}

static char *path_in(const char *dir, const char *leaf)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s", dir, leaf);
	return strbuf_detach(&sb, NULL);
}

json_object *finish_facts(session_manager *m, guest *g, const finish_report *report, bool released)
{
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_bool(r, "delivered", report->delivered);
	jsonx_add_bool(r, "deliveryVerified", report->delivered);
	jsonx_add_str(r, "evidencePath", report->evidence);
	char *p = path_in(report->evidence, "manifest.json");
	jsonx_add_str(r, "manifestPath", p);
	free(p);
	p = path_in(report->evidence, "OPENING.txt");
	jsonx_add_str(r, "openingPath", p);
	free(p);
	p = path_in(report->evidence, "index.html");
	jsonx_add_str(r, "viewer", p);
	free(p);
	jsonx_add_str(r, "snapshots", report->completeness ? report->completeness : "incomplete");
	jsonx_add_str(r, "execution", report->execution ? report->execution : "uncertain");
	jsonx_add_str(r, "humanReview", "not-performed");
	json_object *findings = jsonx_get_array(report->review, "findings");
	jsonx_add(r, "findings", findings ? json_object_get(findings) : json_object_new_array());
	jsonx_add(r, "incompleteExtractions",
	          report->incomplete ? json_object_get(report->incomplete) : json_object_new_array());
	jsonx_add(r, "extractions",
	          report->extractions ? json_object_get(report->extractions) : json_object_new_array());
	jsonx_add_bool(r, "released", released);
	jsonx_add_bool(r, "destructionVerified", released);
	session_lock(m);
	jsonx_add(r, "guestsHeld", session_open_guest_names_json(m));
	session_unlock(m);
	return r;
}

/* Whether the package already holds its manifest: a finish cut short after
 * writing it and before recording the delivery (crash matrix:
 * finish.after-manifest). */
static bool manifest_written(const char *evidence)
{
	char *manifest = evidence ? path_in(evidence, "manifest.json") : NULL;
	bool present = manifest && fs_exists_nofollow(manifest);
	free(manifest);
	return present;
}

/* Takes the verdicts of a delivered package into the report. */
static void take_review(finish_report *r, evidence_delivery_result *res)
{
	r->review = res->review;
	res->review = NULL;
	r->completeness = jsonx_get_str(r->review, "completeness");
	r->execution = jsonx_get_str(r->review, "execution");
	r->delivered = true;
}

/* The verdicts of an already delivered package (a retry after a failed
 * destruction): re-verified, not rewritten. */
static relay_status reverify(session_manager *m, guest *g, finish_report *r, relay_error *err)
{
	evidence_delivery_result res;
	relay_status st = packaging_deliver(m, g, &res, err);
	if (st == RELAY_OK && res.verified)
		take_review(r, &res);
	else if (st == RELAY_OK)
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "the delivered package no longer verifies");
	evidence_delivery_result_free(&res);
	return st;
}

/* Steps 5-6: every declared output (a never-produced one is only
 * recorded), then the recording. */
static int pull_outputs_and_recording(session_manager *m, guest *g, finish_report *r, relay_call *call,
                                      relay_outcome *o)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	guest_io io;
	if (gio_begin(&io, m, g, call, &err) != RELAY_OK)
		return fail_kept(m, g, r, "transfer-failed", err.message, o);
	io.receiver_ready = true;

	progress(call, 2, "outputs");
	extraction_failure xf =
	    extraction_pull_all(&io, true, "finish", &r->extractions, &r->incomplete, &err);
	if (xf != EXTRACTION_OK) {
		gio_write_transfers(&io, "finish");
		gio_end(&io);
		return fail_kept(m, g, r, extraction_failure_code(xf), err.message, o);
	}

	progress(call, 3, "recording");
	strbuf attempts = STRBUF_INIT;
	strbuf_printf(&attempts, "%s.finalization-attempts", r->evidence);
	relay_status st = packaging_pull_state(&io, r->evidence, strbuf_str(&attempts), "finish",
	                                       "the guest is kept", NULL, &err);
	strbuf_free(&attempts);
	gio_write_transfers(&io, "finish");
	gio_end(&io);
	if (st != RELAY_OK)
		return fail_kept(m, g, r, gio_tool_code(st), err.message, o);
	return 0;
}

/* Steps 4-7: downloads, outputs, recording, package, verification; the
 * guest sealed. */
static int deliver(session_manager *m, guest *g, finish_report *r, relay_call *call, relay_outcome *o)
{
	relay_error err;
	memset(&err, 0, sizeof err);

	/* 4. The download in flight ends; queued steps are coalesced. */
	progress(call, 1, "downloads");
	downloads_close(m, g, "finish", call);
	if (relay_call_is_cancelled(call))
		return fail_kept(m, g, r, "transfer-failed", "relay_finish was cancelled before any pull", o);
	if (pull_outputs_and_recording(m, g, r, call, o) != 0)
		return -1;
	if (relay_call_is_cancelled(call))
		return fail_kept(m, g, r, "transfer-failed", "relay_finish was cancelled before delivery", o);

	/* 7. Earlier recordings, then this package, written and verified. */
	progress(call, 4, "package");
	relay_status st = packaging_deliver_previous(m, g, &err);
	if (st == RELAY_OK)
		st = network_evidence_write(m, g, r->evidence, &err);
	if (st == RELAY_OK) {
		evidence_delivery_result res;
		st = packaging_deliver(m, g, &res, &err);
		if (st == RELAY_OK && !res.verified)
			st = relay_error_set(&err, RELAY_E_INTEGRITY, 0, "package verification failed");
		if (st == RELAY_OK)
			take_review(r, &res);
		evidence_delivery_result_free(&res);
	}
	progress(call, 5, "verification");
	if (st != RELAY_OK) {
		packaging_record_delivery_error(m, g, err.message);
		return fail_kept(m, g, r, "delivery-failed", err.message, o);
	}
	if (relay_call_is_cancelled(call)) {
		/* Before the destroy request: the derived files go, the guest stays. */
		evidence_package_remove_derived(r->evidence, &err);
		r->delivered = false;
		return fail_kept(
		    m, g, r, "transfer-failed",
		    "relay_finish was cancelled before the destroy request; the derived files of "
		    "this attempt were removed",
		    o);
	}
	session_lock(m);
	g->delivered = true; /* sealed: later events go beside the package */
	free(g->last_error);
	g->last_error = NULL;
	guest_save(g);
	session_unlock(m);
	RELAY_FAILPOINT("finish.after-seal");
	return 0;
}

int finish_package(session_manager *m, guest *g, relay_call *call, finish_report *report, relay_outcome *o)
{
	memset(report, 0, sizeof *report);
	session_lock(m);
	bool delivered = g->delivered;
	report->evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	g->phase = PHASE_FINISHING;
	guest_save(g);
	session_unlock(m);
	guest_event(m, g, "finish", "relay_finish", NULL);

	/* 3. An earlier finish delivered and verified: straight to step 8. One
	 * cut short after its manifest re-verifies that package the same way,
	 * and seals it. */
	if (!delivered && !manifest_written(report->evidence))
		return deliver(m, g, report, call, o);
	relay_error err;
	memset(&err, 0, sizeof err);
	if (!delivered)
		downloads_close(m, g, "finish", call); /* nothing more goes into the package */
	if (reverify(m, g, report, &err) != RELAY_OK)
		return outcome_fail(o, "delivery-failed",
		                    "the package of %s was delivered earlier but does not verify now: %s; "
		                    "the guest is kept",
		                    g->name, err.message);
	session_lock(m);
	g->delivered = true;
	guest_save(g);
	session_unlock(m);
	return 0;
}
