/*
 * relay_finish (tools.md §3.9, evidence.md §9.1): close the download
 * queue, pull every declared output, pull and merge the recording, deliver
 * and verify the package, and only then destroy the machine.
 *
 * Every failure before the destroy request keeps the guest, leased and
 * owned, for a corrected retry; a failed delivery removes only the derived
 * files it created (OPENING.txt, index.html, manifest.json) and records
 * <evidence>.delivery-error.json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evidence/package.h"
#include "evidence/review.h"
#include "manager/downloads.h"
#include "manager/events.h"
#include "manager/extraction.h"
#include "manager/lifecycle.h"
#include "manager/manager_internal.h"
#include "manager/packaging.h"
#include "mcp/call.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"

#define FINISH_STEPS 6

typedef struct finish_state {
	char *evidence;
	json_object *extractions; /* [{name, destination, files, bytes}] */
	json_object *incomplete;  /* [{name, path, error}] */
	json_object *review;      /* review data of the delivered package */
	const char *completeness;
	const char *execution;
	bool delivered;
} finish_state;

static void progress(relay_call *call, int step, const char *what)
{
	relay_call_progress(call, step, FINISH_STEPS, what, true);
}

/* Back to staged after a failure before delivery: the queue reopens,
 * lastError and an operation-failed event say what happened. */
static tool_result *fail_kept(manager *m, guest *g, finish_state *fs, const char *code, const char *message)
{
	manager_lock(m);
	if (g->phase == PHASE_FINISHING)
		g->phase = PHASE_STAGED;
	guest_save(g);
	manager_unlock(m);
	downloads_reopen(m, g);
	guest_set_last_error(m, g, "relay_finish failed: %s", message);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "operation", "relay_finish");
	jsonx_add_str(details, "code", code);
	jsonx_add_str(details, "error", message);
	guest_event(m, g, "operation-failed", "relay_finish failed; the guest is kept", details);
	json_object *s = json_object_new_object();
	jsonx_add_str(s, "guest", g->name);
	jsonx_add_bool(s, "delivered", false);
	jsonx_add_bool(s, "deliveryVerified", false);
	jsonx_add_str(s, "evidencePath", fs->evidence);
	jsonx_add(s, "incompleteExtractions",
	          fs->incomplete ? json_object_get(fs->incomplete) : json_object_new_array());
	jsonx_add(s, "extractions",
	          fs->extractions ? json_object_get(fs->extractions) : json_object_new_array());
	jsonx_add_bool(s, "released", false);
	return guest_error(m, g, s, code, "%s; the guest %s is kept for a corrected retry", message, g->name);
}

static char *path_in(const char *dir, const char *leaf)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s", dir, leaf);
	return strbuf_detach(&sb, NULL);
}

/* Whether the package already holds its manifest: a finish cut short after writing it and
 * before recording the delivery (crash matrix: finish.after-manifest). */
static bool manifest_written(const char *evidence)
{
	char *manifest = evidence ? path_in(evidence, "manifest.json") : NULL;
	bool present = manifest && fs_exists_nofollow(manifest);
	free(manifest);
	return present;
}

/* The finish result's delivery facts (tools.md §3.9). */
static json_object *finish_json(manager *m, guest *g, finish_state *fs, bool released)
{
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_bool(r, "delivered", fs->delivered);
	jsonx_add_bool(r, "deliveryVerified", fs->delivered);
	jsonx_add_str(r, "evidencePath", fs->evidence);
	char *p = path_in(fs->evidence, "manifest.json");
	jsonx_add_str(r, "manifestPath", p);
	free(p);
	p = path_in(fs->evidence, "OPENING.txt");
	jsonx_add_str(r, "openingPath", p);
	free(p);
	p = path_in(fs->evidence, "index.html");
	jsonx_add_str(r, "viewer", p);
	free(p);
	jsonx_add_str(r, "snapshots", fs->completeness ? fs->completeness : "incomplete");
	jsonx_add_str(r, "execution", fs->execution ? fs->execution : "uncertain");
	jsonx_add_str(r, "humanReview", "not-performed");
	json_object *findings = jsonx_get_array(fs->review, "findings");
	jsonx_add(r, "findings", findings ? json_object_get(findings) : json_object_new_array());
	jsonx_add(r, "incompleteExtractions",
	          fs->incomplete ? json_object_get(fs->incomplete) : json_object_new_array());
	jsonx_add(r, "extractions",
	          fs->extractions ? json_object_get(fs->extractions) : json_object_new_array());
	jsonx_add_bool(r, "released", released);
	jsonx_add_bool(r, "destructionVerified", released);
	manager_lock(m);
	jsonx_add(r, "guestsHeld", manager_open_guest_names_json(m));
	manager_unlock(m);
	return r;
}

/* The verdicts of an already delivered package (a retry after a failed
 * destruction): re-verified, not rewritten. */
static relay_status reverify(manager *m, guest *g, finish_state *fs, relay_error *err)
{
	evidence_delivery_result res;
	relay_status st = packaging_deliver(m, g, &res, err);
	if (st == RELAY_OK && res.verified) {
		fs->review = res.review;
		res.review = NULL;
		fs->completeness = jsonx_get_str(fs->review, "completeness");
		fs->execution = jsonx_get_str(fs->review, "execution");
		fs->delivered = true;
	} else if (st == RELAY_OK) {
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "the delivered package no longer verifies");
	}
	evidence_delivery_result_free(&res);
	return st;
}

static void finish_state_free(finish_state *fs)
{
	free(fs->evidence);
	json_object_put(fs->extractions);
	json_object_put(fs->incomplete);
	json_object_put(fs->review);
}

/* Steps 4-7: downloads, outputs, recording, package, verification. NULL
 * when the package is delivered and verified; otherwise the error result
 * (the guest kept). */
static tool_result *deliver(manager *m, guest *g, finish_state *fs, relay_call *call)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	tool_result *failed = NULL;

	/* 4. The download in flight ends; queued steps are coalesced. */
	progress(call, 1, "downloads");
	downloads_close(m, g, "finish", call);
	if (relay_call_is_cancelled(call))
		return fail_kept(m, g, fs, "transfer-failed", "relay_finish was cancelled before any pull");

	guest_io io;
	if (gio_begin(&io, m, g, call, &err) != RELAY_OK)
		return fail_kept(m, g, fs, "transfer-failed", err.message);
	io.receiver_ready = true;

	/* 5. Every declared output; a never-produced one is only recorded. */
	progress(call, 2, "outputs");
	extraction_failure xf =
	    extraction_pull_all(&io, true, "finish", &fs->extractions, &fs->incomplete, &err);
	if (xf != EXTRACTION_OK) {
		gio_write_transfers(&io, "finish");
		gio_end(&io);
		return fail_kept(m, g, fs, extraction_failure_code(xf), err.message);
	}

	/* 6. The recording. */
	progress(call, 3, "recording");
	strbuf attempts = STRBUF_INIT;
	strbuf_printf(&attempts, "%s.finalization-attempts", fs->evidence);
	relay_status st = packaging_pull_state(&io, fs->evidence, strbuf_str(&attempts), "finish",
	                                       "the guest is kept", NULL, &err);
	strbuf_free(&attempts);
	gio_write_transfers(&io, "finish");
	gio_end(&io);
	if (st != RELAY_OK)
		return fail_kept(m, g, fs, gio_tool_code(st), err.message);
	if (relay_call_is_cancelled(call))
		return fail_kept(m, g, fs, "transfer-failed", "relay_finish was cancelled before delivery");

	/* 7. Earlier recordings, then this package, written and verified. */
	progress(call, 4, "package");
	st = packaging_deliver_previous(m, g, &err);
	if (st == RELAY_OK) {
		evidence_delivery_result res;
		st = packaging_deliver(m, g, &res, &err);
		if (st == RELAY_OK && !res.verified)
			st = relay_error_set(&err, RELAY_E_INTEGRITY, 0, "package verification failed");
		if (st == RELAY_OK) {
			fs->review = res.review;
			res.review = NULL;
			fs->completeness = jsonx_get_str(fs->review, "completeness");
			fs->execution = jsonx_get_str(fs->review, "execution");
			fs->delivered = true;
		}
		evidence_delivery_result_free(&res);
	}
	progress(call, 5, "verification");
	if (st != RELAY_OK) {
		packaging_record_delivery_error(m, g, err.message);
		return fail_kept(m, g, fs, "delivery-failed", err.message);
	}
	if (relay_call_is_cancelled(call)) {
		/* Before the destroy request: the derived files go, the guest stays. */
		evidence_package_remove_derived(fs->evidence, &err);
		fs->delivered = false;
		return fail_kept(
		    m, g, fs, "transfer-failed",
		    "relay_finish was cancelled before the destroy request; the derived files of "
		    "this attempt were removed");
	}
	manager_lock(m);
	g->delivered = true; /* sealed: later events go beside the package */
	free(g->last_error);
	g->last_error = NULL;
	guest_save(g);
	manager_unlock(m);
	RELAY_FAILPOINT("finish.after-seal");
	return failed;
}

tool_result *tool_finish(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)args;
	finish_state fs;
	memset(&fs, 0, sizeof fs);
	tool_result *result = NULL;
	manager_lock(m);
	bool staged = g->staged, delivered = g->delivered;
	guest_phase phase = g->phase;
	fs.evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	manager_unlock(m);

	/* 1. Nothing recorded, nothing to package. */
	if (!staged && !delivered) {
		result = guest_error(
		    m, g, NULL, "not-staged",
		    "nothing was recorded on guest %s (it was never staged); use relay_release", g->name);
		goto cleanup;
	}
	if (phase != PHASE_STAGED && phase != PHASE_READY && phase != PHASE_FINISHING &&
	    phase != PHASE_RELEASING) {
		result = guest_error(m, g, NULL, "internal", "guest %s is %s; relay_finish cannot run now",
		                     g->name, guest_phase_name(phase));
		goto cleanup;
	}

	/* 2. */
	manager_lock(m);
	g->phase = PHASE_FINISHING;
	guest_save(g);
	manager_unlock(m);
	guest_event(m, g, "finish", "relay_finish", NULL);

	/* 3. An earlier finish delivered and verified: straight to step 8. One cut short after
	 * its manifest re-verifies that package the same way, and seals it. */
	if (delivered || manifest_written(fs.evidence)) {
		relay_error err;
		memset(&err, 0, sizeof err);
		if (!delivered)
			downloads_close(m, g, "finish", call); /* nothing more goes into the package */
		if (reverify(m, g, &fs, &err) != RELAY_OK) {
			result = guest_error(
			    m, g, NULL, "delivery-failed",
			    "the package of %s was delivered earlier but does not verify now: %s; "
			    "the guest is kept",
			    g->name, err.message);
			goto cleanup;
		}
		manager_lock(m);
		g->delivered = true;
		guest_save(g);
		manager_unlock(m);
	} else {
		result = deliver(m, g, &fs, call);
		if (result)
			goto cleanup;
	}

	/* 8. Destruction, verified exactly as relay_release does it. */
	progress(call, 6, "destruction");
	tool_result *destroyed = lifecycle_release_finished(m, g, call);
	if (destroyed == NULL || destroyed->is_error) {
		json_object *e = destroyed ? jsonx_get_obj(destroyed->structured, "error") : NULL;
		const char *code =
		    jsonx_get_str(e, "code") ? jsonx_get_str(e, "code") : "destruction-unverified";
		const char *msg = jsonx_get_str(e, "message")
		                      ? jsonx_get_str(e, "message")
		                      : "the machine's destruction could not be verified";
		/* 9. The package stands; the guest stays held with delivered: true. */
		result = guest_error(m, g, finish_json(m, g, &fs, false), code,
		                     "evidence delivered and verified at %s, but %s", fs.evidence, msg);
		tool_result_free(destroyed);
		goto cleanup;
	}
	tool_result_free(destroyed);
	result = tool_result_ok(finish_json(m, g, &fs, true),
	                        "Finished guest %s: evidence delivered and verified at %s; snapshots %s; "
	                        "execution %s; not reviewed by a person; machine destroyed",
	                        g->name, fs.evidence, fs.completeness ? fs.completeness : "incomplete",
	                        fs.execution ? fs.execution : "uncertain");
cleanup:
	finish_state_free(&fs);
	return result;
}
