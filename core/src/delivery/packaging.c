/*
 * Bringing a recording home and sealing its package (packaging.h).
 */
#include "delivery/packaging.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "call/call.h"
#include "delivery/downloads.h"
#include "delivery/evidence_pull.h"
#include "delivery/extraction.h"
#include "evidence/download.h"
#include "evidence/fswalk.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define RECEIPT_MAX_BYTES (4u << 20)

/* ---- display originals (spec/evidence.md §7) -------------------------------------------------- */

/* The recording session of a pulled state tree (state/session.json). */
static char *incoming_session(const char *incoming_root)
{
	strbuf path = STRBUF_INIT;
	strbuf_printf(&path, "%s/state/session.json", incoming_root);
	json_object *s = NULL;
	relay_error err;
	char *sid = NULL;
	if (fs_read_json(strbuf_str(&path), 1u << 20, &s, &err) == RELAY_OK && jsonx_get_str(s, "sessionId"))
		sid = strdup(jsonx_get_str(s, "sessionId"));
	json_object_put(s);
	strbuf_free(&path);
	return sid;
}

/* Copies every display original verified under host/images/ (named by a
 * delivery receipt of this recording session) to its canonical
 * state/snapshots/<sessionId>/<fileName> path when the incoming tree lacks
 * it. Returns how many were materialised. */
static int materialise_originals(const char *package_dir, const char *incoming_root, relay_error *err)
{
	char *sid = incoming_session(incoming_root);
	if (sid == NULL)
		return 0;
	strbuf images = STRBUF_INIT;
	strbuf_printf(&images, "%s/host/images", package_dir);
	fw_tree tree = {0};
	int count = 0;
	if (fw_walk(strbuf_str(&images), true, NULL, &tree, err) != RELAY_OK)
		goto cleanup;
	for (size_t i = 0; i < tree.count; i++) {
		const fw_entry *e = &tree.items[i];
		const char *slash = strchr(e->path, '/');
		if (e->kind != FW_FILE || slash == NULL || strncmp(slash + 1, "delivery-", 9) != 0 ||
		    strchr(slash + 1, '/') != NULL)
			continue;
		strbuf rp = STRBUF_INIT;
		strbuf_printf(&rp, "%s/%s", strbuf_str(&images), e->path);
		json_object *receipt = NULL;
		relay_error rerr;
		if (fs_read_json(strbuf_str(&rp), RECEIPT_MAX_BYTES, &receipt, &rerr) == RELAY_OK) {
			json_object *image = jsonx_get_obj(receipt, "image");
			const char *source = jsonx_get_str(image, "source");
			const char *isid = jsonx_get_str(image, "sessionId");
			const char *exec = jsonx_get_str(image, "executionId");
			const char *phase = jsonx_get_str(image, "phase");
			const char *sha = jsonx_get_str(image, "sha256");
			int64_t bytes = -1;
			jsonx_get_int(image, "bytes", &bytes);
			if (source && strcmp(source, "display") == 0 && isid && strcmp(isid, sid) == 0 &&
			    exec && phase && sha && bytes > 0) {
				/* fileName is <executionId>-<phase>.png (spec/guest.md §7.7). */
				strbuf rel = STRBUF_INIT, have = STRBUF_INIT;
				strbuf_printf(&rel, "state/snapshots/%s/%s-%s.png", isid, exec, phase);
				strbuf_printf(&have, "%s/%s", incoming_root, strbuf_str(&rel));
				bool used = false;
				relay_error cerr;
				if (evidence_package_path_ok(strbuf_str(&rel)) &&
				    !fs_exists_nofollow(strbuf_str(&have)) &&
				    evidence_copy_candidate(package_dir, strbuf_str(&rel), (uint64_t)bytes,
				                            sha, incoming_root, &used, &cerr) == RELAY_OK &&
				    used)
					count++;
				strbuf_free(&rel);
				strbuf_free(&have);
			}
		}
		json_object_put(receipt);
		strbuf_free(&rp);
	}
cleanup:
	fw_tree_free(&tree);
	strbuf_free(&images);
	free(sid);
	return count;
}

/* ---- the state pull (spec/evidence.md §5.6, §6, §7) ------------------------------------------- */

relay_status packaging_pull_state(guest_io *io, const char *package_dir, const char *attempts_dir,
                                  const char *operation, const char *consequence, json_object **stats_out,
                                  relay_error *err)
{
	return packaging_pull_recording(io, "state", package_dir, attempts_dir, operation, consequence,
	                                stats_out, err);
}

relay_status packaging_pull_recording(guest_io *io, const char *source_rel, const char *package_dir,
                                      const char *attempts_dir, const char *operation,
                                      const char *consequence, json_object **stats_out, relay_error *err)
{
	if (stats_out)
		*stats_out = NULL;
	json_object *facts = NULL, *again = NULL, *rest = NULL;
	strbuf incoming = STRBUF_INIT, incoming_state = STRBUF_INIT, source = STRBUF_INIT;
	bool made = false;
	int64_t copied = 0;

	/* 4. One scan of the recording (R/state, or R/recordings/<id>). */
	strbuf_printf(&source, "%s/%s", io->root, source_rel);
	relay_status st = gio_scan(io, io->root, source_rel, false, 0, &facts, err);
	if (st != RELAY_OK)
		goto cleanup;
	st = epull_check_facts(facts, "state/", false, err);
	if (st != RELAY_OK)
		goto cleanup;
	uint64_t total = epull_facts_bytes(facts);

	/* 5. Room for all of it, copies included, before anything is pulled. */
	evidence_space space;
	st = evidence_space_check(package_dir, total, operation, consequence, &space, err);
	if (st != RELAY_OK)
		goto cleanup;

	char rnd[17];
	random_hex(rnd, 16);
	strbuf_printf(&incoming, "%s/%s", attempts_dir, rnd);
	strbuf_printf(&incoming_state, "%s/state", strbuf_str(&incoming));
	st = fs_mkdir_p(strbuf_str(&incoming_state), 0700, err);
	if (st != RELAY_OK)
		goto cleanup;
	made = true;

	/* 6. Host candidates, copied and re-hashed. */
	rest = json_object_new_array();
	size_t n = json_object_array_length(facts);
	for (size_t i = 0; i < n && st == RELAY_OK; i++) {
		json_object *f = json_object_array_get_idx(facts, i);
		int64_t bytes = 0;
		jsonx_get_int(f, "bytes", &bytes);
		strbuf rel = STRBUF_INIT;
		strbuf_printf(&rel, "state/%s", jsonx_get_str(f, "path"));
		bool used = false;
		st = evidence_copy_candidate(package_dir, strbuf_str(&rel), (uint64_t)bytes,
		                             jsonx_get_str(f, "sha256"), strbuf_str(&incoming), &used, err);
		if (st == RELAY_OK && used) {
			copied++;
		} else if (st == RELAY_OK) {
			json_object *e = json_object_new_object();
			jsonx_add_str(e, "path", jsonx_get_str(f, "path"));
			jsonx_add_int(e, "bytes", bytes);
			jsonx_add_str(e, "sha256", jsonx_get_str(f, "sha256"));
			json_object_array_add(rest, e);
		}
		strbuf_free(&rel);
	}
	if (st != RELAY_OK)
		goto cleanup;

	/* 7. The rest in one archive; 9. one by one when it fails. */
	if (json_object_array_length(rest) > 0) {
		relay_error aerr;
		memset(&aerr, 0, sizeof aerr);
		/* Relative to the recording, so snapshots are "snapshots/..." here. */
		evidence_extract_options opts = {0, EVIDENCE_SNAPSHOT_MAX_BYTES, "snapshots/", false};
		st = epull_archive_ex(io, strbuf_str(&source), rest, false, &opts,
		                      strbuf_str(&incoming_state), NULL, &aerr);
		if (st != RELAY_OK && st != RELAY_E_CANCELLED && !relay_call_is_cancelled(io->call)) {
			json_object *details = json_object_new_object();
			jsonx_add_str(details, "operation", operation);
			jsonx_add_str(details, "error", aerr.message);
			jsonx_add_int(details, "files", (int64_t)json_object_array_length(rest));
			guest_event(io->m, io->g, "archive-fallback",
			            "the state archive could not be made or read", details);
			log_info("guest %s: %s pulls the state one file at a time: %s", io->g->name,
			         operation, aerr.message);
			st = epull_files(io, rest, strbuf_str(&source), strbuf_str(&incoming_state), err);
		} else if (st != RELAY_OK) {
			*err = aerr;
		}
		if (st != RELAY_OK)
			goto cleanup;
	}

	/* 8. The guest state must not have changed meanwhile. */
	st = gio_scan(io, io->root, source_rel, false, total, &again, err);
	if (st != RELAY_OK)
		goto cleanup;
	if (!epull_facts_equal(facts, again)) {
		st = relay_error_set(
		    err, RELAY_E_INTEGRITY, 0,
		    "source changed during state pull: the guest's recording changed while it "
		    "was brought home; nothing was merged");
		goto cleanup;
	}

	/* §7: display originals, then the merge. */
	int materialised = materialise_originals(package_dir, strbuf_str(&incoming), err);
	st = evidence_state_merge(package_dir, strbuf_str(&incoming_state), attempts_dir, err);
	if (st != RELAY_OK)
		goto cleanup;
	if (stats_out) {
		json_object *s = json_object_new_object();
		jsonx_add_int(s, "files", (int64_t)n);
		jsonx_add_int(s, "bytes", (int64_t)total);
		jsonx_add_int(s, "copied", copied);
		jsonx_add_int(s, "pulled", (int64_t)json_object_array_length(rest));
		jsonx_add_int(s, "materialised", materialised);
		*stats_out = s;
	}
cleanup:
	if (made) {
		relay_error ignored;
		fs_remove_tree(strbuf_str(&incoming), &ignored);
		rmdir(attempts_dir); /* only when nothing else (no set-aside state) is in it */
	}
	json_object_put(facts);
	json_object_put(again);
	json_object_put(rest);
	strbuf_free(&incoming);
	strbuf_free(&incoming_state);
	strbuf_free(&source);
	return st;
}

/* ---- delivery ------------------------------------------------------------------------------- */

void packaging_identity_init(session_manager *m, guest *g, packaging_identity *out)
{
	memset(out, 0, sizeof *out);
	session_lock(m);
	out->guest = g->name ? strdup(g->name) : NULL;
	out->image = g->image ? strdup(g->image) : NULL;
	out->purpose = g->purpose ? strdup(g->purpose) : NULL;
	if (g->acquired_at_ms > 0)
		time_format_iso_millis(g->acquired_at_ms, out->acquired_at);
	session_unlock(m);
	out->identity.guest = out->guest;
	out->identity.image = out->image;
	out->identity.task_id = out->purpose;
	out->identity.acquired_at = out->acquired_at[0] ? out->acquired_at : NULL;
}

void packaging_identity_free(packaging_identity *id)
{
	free(id->guest);
	free(id->image);
	free(id->purpose);
	memset(id, 0, sizeof *id);
}

static relay_status deliver_folder(session_manager *m, const char *folder, const packaging_identity *id,
                                   const char *session_id, evidence_delivery_result *result, relay_error *err)
{
	evidence_delivery_options opts;
	memset(&opts, 0, sizeof opts);
	opts.project_dir = m->settings->project;
	opts.identity = id->identity;
	if (session_id)
		opts.identity.session_id = session_id;
	return evidence_package_deliver(folder, &opts, result, err);
}

relay_status packaging_deliver_previous(session_manager *m, guest *g, relay_error *err)
{
	session_lock(m);
	json_object *prev = g->previous_evidence ? json_object_get(g->previous_evidence) : NULL;
	session_unlock(m);
	packaging_identity id;
	packaging_identity_init(m, g, &id);
	relay_status st = RELAY_OK;
	size_t n = prev ? json_object_array_length(prev) : 0;
	for (size_t i = 0; i < n && st == RELAY_OK; i++) {
		json_object *e = json_object_array_get_idx(prev, i);
		const char *path = jsonx_get_str(e, "path");
		if (path == NULL)
			continue;
		strbuf manifest = STRBUF_INIT;
		strbuf_printf(&manifest, "%s/manifest.json", path);
		bool sealed = fs_exists_nofollow(strbuf_str(&manifest));
		strbuf_free(&manifest);
		if (sealed || !fs_is_dir(path))
			continue;
		evidence_delivery_result res;
		st = deliver_folder(m, path, &id, jsonx_get_str(e, "sessionId"), &res, err);
		evidence_delivery_result_free(&res);
		if (st != RELAY_OK) {
			char saved[sizeof err->message];
			snprintf(saved, sizeof saved, "%s", err->message);
			relay_error_set(err, st, 0, "the earlier recording %s could not be delivered: %s",
			                path, saved);
		}
	}
	packaging_identity_free(&id);
	json_object_put(prev);
	return st;
}

relay_status packaging_deliver(session_manager *m, guest *g, evidence_delivery_result *result,
                               relay_error *err)
{
	session_lock(m);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	if (evidence == NULL) {
		memset(result, 0, sizeof *result);
		return relay_error_set(err, RELAY_E_NOT_FOUND, 0, "guest %s has no evidence folder", g->name);
	}
	packaging_identity id;
	packaging_identity_init(m, g, &id);
	relay_status st = deliver_folder(m, evidence, &id, NULL, result, err);
	packaging_identity_free(&id);
	free(evidence);
	return st;
}

void packaging_record_delivery_error(session_manager *m, guest *g, const char *error_text)
{
	session_lock(m);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	if (evidence) {
		relay_error err;
		if (evidence_write_delivery_error(evidence, error_text, clock_now_ms(), &err) != RELAY_OK)
			log_error("guest %s: cannot record the delivery error: %s", g->name, err.message);
	}
	free(evidence);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "error", error_text);
	guest_event(m, g, "delivery-failed", "the evidence package could not be delivered", details);
}

/* ---- relay_release step 3 ---------------------------------------------------------------- */

static json_object *delivery_error_json(const char *text)
{
	json_object *e = json_object_new_object();
	char at[25];
	time_format_iso_millis(clock_now_ms(), at);
	jsonx_add_str(e, "error", text);
	jsonx_add_str(e, "at", at);
	return e;
}

json_object *release_package(session_manager *m, guest *g, relay_call *call)
{
	json_object *out = json_object_new_object();
	json_object *incomplete = NULL, *done = NULL;
	char *failure = NULL;
	bool delivered = false;
	session_lock(m);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	guest_io io;
	bool io_open = false;
	relay_error err;
	memset(&err, 0, sizeof err);

	downloads_close(m, g, "release", call);
	if (gio_begin(&io, m, g, call, &err) != RELAY_OK) {
		failure = strdup(err.message);
		goto done;
	}
	io_open = true;
	io.receiver_ready = true;
	/* Every declared output that can be pulled; failures only recorded. */
	extraction_pull_all(&io, false, "release", &done, &incomplete, &err);
	if (relay_call_is_cancelled(call)) {
		failure = strdup("the release was cancelled while packaging");
		goto done;
	}
	strbuf attempts = STRBUF_INIT;
	strbuf_printf(&attempts, "%s.finalization-attempts", evidence);
	memset(&err, 0, sizeof err);
	relay_status st =
	    packaging_pull_state(&io, evidence, strbuf_str(&attempts), "release",
	                         "the package is not written; the guest is released", NULL, &err);
	strbuf_free(&attempts);
	gio_write_transfers(&io, "release");
	if (st != RELAY_OK) {
		failure = strdup(err.message);
		goto done;
	}
	memset(&err, 0, sizeof err);
	if (packaging_deliver_previous(m, g, &err) != RELAY_OK) {
		failure = strdup(err.message);
		goto done;
	}
	evidence_delivery_result res;
	memset(&err, 0, sizeof err);
	st = packaging_deliver(m, g, &res, &err);
	delivered = st == RELAY_OK && res.delivered && res.verified;
	evidence_delivery_result_free(&res);
	if (!delivered) {
		failure = strdup(err.message[0] ? err.message : "package verification failed");
		goto done;
	}
	session_lock(m);
	g->delivered = true;
	guest_save(g);
	session_unlock(m);
done:
	if (io_open)
		gio_end(&io);
	if (failure)
		packaging_record_delivery_error(m, g, failure);
	jsonx_add_bool(out, "delivered", delivered);
	jsonx_add_bool(out, "deliveryVerified", delivered);
	if (delivered) {
		strbuf mp = STRBUF_INIT;
		strbuf_printf(&mp, "%s/manifest.json", evidence);
		jsonx_add_str(out, "manifestPath", strbuf_str(&mp));
		strbuf_free(&mp);
	} else {
		jsonx_add_null(out, "manifestPath");
	}
	jsonx_add(out, "deliveryError", failure ? delivery_error_json(failure) : NULL);
	jsonx_add(out, "incompleteExtractions", incomplete ? incomplete : json_object_new_array());
	json_object_put(done);
	free(failure);
	free(evidence);
	return out;
}
