/* The recording reset of relay_stage (guest.md §4); see recording_reset.h. */
#include "manager/recording_reset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evidence/archive.h"
#include "evidence/download.h"
#include "evidence/package.h"
#include "manager/events.h"
#include "manager/step_downloads.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

#define ARCHIVE_PATH_BYTES 65536 /* path bytes per `receiver archive` (evidence.md §5.3) */

/* Brings the facts of `facts` (relative to the guest folder `source`) home
 * into <attempt>/state: host candidates first, the rest through evidence
 * archives of at most ARCHIVE_PATH_BYTES of names each. */
static relay_status pull_recording(guest_io *io, const char *from, const char *source, json_object *facts,
                                   const char *attempt, relay_error *err)
{
	relay_status st = RELAY_OK;
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/state", attempt);
	char *incoming = strbuf_detach(&sb, NULL);
	if (mkdir(incoming, 0700) != 0 && errno != EEXIST) {
		st = relay_error_set(err, RELAY_E_IO, errno, "cannot create %s: %s", incoming,
		                     strerror(errno));
		free(incoming);
		return st;
	}
	size_t n = json_object_array_length(facts);
	json_object *rest = json_object_new_array();
	for (size_t i = 0; i < n; i++) {
		json_object *f = json_object_array_get_idx(facts, i);
		const char *path = jsonx_get_str(f, "path");
		int64_t bytes = 0;
		jsonx_get_int(f, "bytes", &bytes);
		if (!evidence_archive_path_ok(path)) {
			st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                     "the guest's recording lists an unsafe path: %s", path);
			goto cleanup;
		}
		strbuf_printf(&sb, "state/%s", path);
		bool used = false;
		st = evidence_copy_candidate(from, strbuf_str(&sb), (uint64_t)bytes,
		                             jsonx_get_str(f, "sha256"), attempt, &used, err);
		strbuf_reset(&sb);
		if (st != RELAY_OK)
			goto cleanup;
		if (!used)
			json_object_array_add(rest, json_object_get(f));
	}
	size_t total = json_object_array_length(rest), i = 0;
	while (i < total && st == RELAY_OK) {
		size_t start = i, path_bytes = 0;
		json_object *chunk = json_object_new_array();
		while (i < total) {
			const char *p = jsonx_get_str(json_object_array_get_idx(rest, i), "path");
			if (i > start && path_bytes + strlen(p) + 1 > ARCHIVE_PATH_BYTES)
				break;
			path_bytes += strlen(p) + 1;
			json_object_array_add(chunk, json_object_get(json_object_array_get_idx(rest, i)));
			i++;
		}
		size_t count = i - start;
		const char **args = calloc(count + 10, sizeof *args);
		char hex[17];
		random_hex(hex, 16);
		strbuf_printf(&sb, "%s/.archive-%s.tar", io->root, hex);
		char *remote = strbuf_detach(&sb, NULL);
		char *local = gio_scratch_path(io, "reset-", ".tar", err);
		json_object *frame = NULL;
		uint64_t data_bytes = 0;
		if (args == NULL || remote == NULL || local == NULL) {
			st = err->code ? err->code
			               : relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		} else {
			size_t k = 0;
			args[k++] = "archive";
			args[k++] = "--root";
			args[k++] = io->root;
			args[k++] = "--base";
			args[k++] = source;
			args[k++] = "--out";
			args[k++] = remote;
			args[k++] = "--";
			for (size_t j = 0; j < count; j++) {
				json_object *f = json_object_array_get_idx(chunk, j);
				int64_t b = 0;
				jsonx_get_int(f, "bytes", &b);
				data_bytes += (uint64_t)b;
				args[k++] = jsonx_get_str(f, "path");
			}
			args[k] = NULL;
			gio_add_transient(io, fs_basename(remote));
			st = gio_receiver(io, args, gio_scan_timeout_ms(2 * data_bytes), &frame, err);
		}
		int64_t abytes = -1;
		const char *asha = jsonx_get_str(frame, "sha256");
		if (st == RELAY_OK && (!jsonx_get_int(frame, "bytes", &abytes) || asha == NULL ||
		                       jsonx_get_str(frame, "path") == NULL ||
		                       strcmp(jsonx_get_str(frame, "path"), remote) != 0))
			st = relay_error_set(err, RELAY_E_PROTOCOL, 0,
			                     "receiver archive answered an unusable frame");
		if (st == RELAY_OK)
			st = gio_pull(io, remote, local, 0, "the recording archive", err);
		if (st == RELAY_OK) {
			char got[65];
			uint64_t got_bytes = 0;
			st = sha256_file_hex(local, got, &got_bytes, err);
			if (st == RELAY_OK && (got_bytes != (uint64_t)abytes || strcmp(got, asha) != 0))
				st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                     "the recording archive did not arrive intact");
		}
		if (st == RELAY_OK) {
			char *expected = jsonx_to_string(chunk, 0);
			st = evidence_archive_extract(local, incoming, expected, 0, NULL, err);
			free(expected);
			if (st == RELAY_OK)
				gio_note_transfer(io, "pull", "recording archive", local, remote,
				                  (uint64_t)abytes, asha, 1, "archive");
		}
		if (local)
			unlink(local);
		free(local);
		free(remote);
		free(args);
		json_object_put(frame);
		json_object_put(chunk);
	}
cleanup:
	json_object_put(rest);
	free(incoming);
	strbuf_free(&sb);
	return st;
}

/* True when two fact lists are equal (same paths, bytes and hashes, same order). */
static bool facts_equal(json_object *a, json_object *b)
{
	size_t n = json_object_array_length(a);
	if (n != json_object_array_length(b))
		return false;
	for (size_t i = 0; i < n; i++) {
		json_object *x = json_object_array_get_idx(a, i), *y = json_object_array_get_idx(b, i);
		int64_t bx = -1, by = -2;
		jsonx_get_int(x, "bytes", &bx);
		jsonx_get_int(y, "bytes", &by);
		if (bx != by || strcmp(jsonx_get_str(x, "path"), jsonx_get_str(y, "path")) != 0 ||
		    strcmp(jsonx_get_str(x, "sha256"), jsonx_get_str(y, "sha256")) != 0)
			return false;
	}
	return true;
}

static uint64_t facts_bytes(json_object *facts)
{
	uint64_t total = 0;
	size_t n = json_object_array_length(facts);
	for (size_t i = 0; i < n; i++) {
		int64_t b = 0;
		jsonx_get_int(json_object_array_get_idx(facts, i), "bytes", &b);
		total += (uint64_t)(b > 0 ? b : 0);
	}
	return total;
}

tool_result *recording_reset(manager *m, guest *g, guest_io *io, json_object **reset_out)
{
	*reset_out = NULL;
	tool_result *refusal = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	char errbuf[512];

	/* Steps 1 and 3: a staged recording, and the pending reset persisted. */
	manager_lock(m);
	if (g->pending_reset == NULL) {
		if (!g->staged || g->recording_session_id == NULL) {
			manager_unlock(m);
			return guest_error(
			    m, g, NULL, "not-staged",
			    "a recording reset needs a staged recording; %s has none (use relay_stage "
			    "without resetRecording)",
			    g->name);
		}
		char uuid[37];
		random_uuid(uuid);
		json_object *p = json_object_new_object();
		jsonx_add_str(p, "id", uuid);
		jsonx_add_str(p, "from", g->evidence_path);
		jsonx_add_str(p, "fromSession", g->recording_session_id);
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "%s-recording-%.8s", g->evidence_path, uuid);
		jsonx_add_str(p, "to", strbuf_str(&sb));
		strbuf_free(&sb);
		g->pending_reset = p;
		guest_save(g);
	}
	json_object *pending = json_object_get(g->pending_reset);
	manager_unlock(m);
	const char *id = jsonx_get_str(pending, "id");
	const char *from = jsonx_get_str(pending, "from");
	const char *from_session = jsonx_get_str(pending, "fromSession");
	const char *to = jsonx_get_str(pending, "to");
	char *attempts = NULL, *attempt = NULL, *source = NULL;
	json_object *facts = NULL, *again = NULL, *frame = NULL;
	strbuf sb = STRBUF_INIT;
	if (id == NULL || from == NULL || to == NULL) {
		refusal =
		    guest_error(m, g, NULL, "reset-pending",
		                "the pending recording reset of %s is unreadable; repair with a diagnostic "
		                "shell script",
		                g->name);
		goto cleanup;
	}

	/* Step 2: the download queue closes. */
	downloads_close_for_reset(m, g);

	/* Step 4: pull the recording, verified, and merge it. */
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "id", id);
	jsonx_add_str(d, "from", from);
	jsonx_add_str(d, "to", to);
	guest_event(m, g, "recording-reset-intent", "relay_stage resetRecording", d);
	strbuf_printf(&sb, "recordings/%s", id);
	char *archived_rel = strbuf_detach(&sb, NULL);
	relay_status st = gio_scan(io, io->root, archived_rel, true, 0, &facts, &err);
	if (st == RELAY_OK && json_object_array_length(facts) > 0) {
		strbuf_printf(&sb, "%s/%s", io->root, archived_rel);
	} else if (st == RELAY_OK) {
		json_object_put(facts);
		facts = NULL;
		st = gio_scan(io, io->root, "state", true, 0, &facts, &err);
		strbuf_printf(&sb, "%s/state", io->root);
	}
	free(archived_rel);
	source = strbuf_detach(&sb, NULL);
	if (st != RELAY_OK) {
		refusal =
		    guest_error(m, g, NULL, gio_tool_code(st),
		                "the recording of %s could not be inventoried: %s", g->name, err.message);
		goto cleanup;
	}
	evidence_space space;
	st = evidence_space_check(from, facts_bytes(facts), "recording reset", "the guest is kept", &space,
	                          &err);
	if (st != RELAY_OK) {
		refusal = guest_error(m, g, NULL, st == RELAY_E_NO_SPACE ? "space-shortfall" : "internal",
		                      "%s", err.message);
		goto cleanup;
	}
	strbuf_printf(&sb, "%s.reset-attempts", from);
	attempts = strbuf_detach(&sb, NULL);
	char hex[17];
	random_hex(hex, 16);
	strbuf_printf(&sb, "%s/%s", attempts, hex);
	attempt = strbuf_detach(&sb, NULL);
	if (fs_mkdir_p(attempt, 0700, &err) != RELAY_OK) {
		refusal = guest_error(m, g, NULL, "internal", "cannot create %s: %s", attempt, err.message);
		goto cleanup;
	}
	st = pull_recording(io, from, source, facts, attempt, &err);
	if (st == RELAY_OK) {
		const char *rel = fs_basename(source);
		char *base = fs_dirname(source);
		st = gio_scan(io, base, rel, true, facts_bytes(facts), &again, &err);
		free(base);
		if (st == RELAY_OK && !facts_equal(facts, again))
			st = relay_error_set(&err, RELAY_E_INTEGRITY, 0, "source changed during state pull");
	}
	if (st == RELAY_OK) {
		strbuf_printf(&sb, "%s/state", attempt);
		st = evidence_state_merge(from, strbuf_str(&sb), attempts, &err);
		strbuf_reset(&sb);
	}
	if (st != RELAY_OK) {
		refusal = guest_error(
		    m, g, NULL, st == RELAY_E_NO_SPACE ? "space-shortfall" : gio_tool_code(st),
		    "the recording of %s could not be brought home before the reset: %s; the reset "
		    "stays pending, call relay_stage with resetRecording again",
		    g->name, err.message);
		goto cleanup;
	}

	/* Step 5: the guest step. */
	const char *args[] = {"reset", "--root", io->root, "--id", id, NULL};
	st = gio_receiver(io, args, GIO_SHORT_TIMEOUT_MS, &frame, &err);
	if (st != RELAY_OK) {
		const char *code = jsonx_get_str(frame, "code");
		if (code && strcmp(code, "receiver-locked") == 0)
			refusal = guest_error(
			    m, g, NULL, "receiver-locked",
			    "the receiver lock exists; diagnose the active execution before resetting "
			    "the recording (%s)",
			    err.message);
		else
			refusal = guest_error(
			    m, g, NULL, "reset-pending",
			    "the guest step of the recording reset failed: %s; the reset stays pending",
			    err.message);
		goto cleanup;
	}

	/* Step 6: the host's bookkeeping. */
	manager_lock(m);
	json_object *prev = json_object_new_object();
	jsonx_add_str(prev, "path", from);
	jsonx_add_str(prev, "sessionId", from_session);
	strbuf_printf(&sb, "recordings/%s", id);
	jsonx_add_str(prev, "guestState", strbuf_str(&sb));
	strbuf_reset(&sb);
	json_object_array_add(g->previous_evidence, prev);
	free(g->evidence_path);
	g->evidence_path = strdup(to);
	g->staged = false;
	if (g->phase == PHASE_STAGED)
		g->phase = PHASE_READY;
	free(g->recording_session_id);
	g->recording_session_id = NULL;
	json_object_put(g->pending_reset);
	g->pending_reset = NULL;
	guest_save(g);
	manager_unlock(m);
	free(io->evidence);
	io->evidence = strdup(to);
	if (guest_ensure_evidence_dir(m, g, errbuf, sizeof errbuf) != 0)
		log_error("cannot create the new evidence folder of %s: %s", g->name, errbuf);
	json_object *d2 = json_object_new_object();
	jsonx_add_str(d2, "id", id);
	jsonx_add_str(d2, "archivedTo", from);
	jsonx_add_str(d2, "previousSession", from_session);
	guest_event(m, g, "recording-resumed", "relay_stage resetRecording", d2);
	*reset_out = json_object_new_object();
	jsonx_add_str(*reset_out, "archivedTo", from);
	strbuf_printf(&sb, "%s/recordings/%s", io->root, id);
	jsonx_add_str(*reset_out, "recording", strbuf_str(&sb));
	strbuf_reset(&sb);
	downloads_reopen(m, g);
cleanup:
	if (refusal)
		guest_set_last_error(m, g, "recording reset: %s",
		                     jsonx_get_str(jsonx_get_obj(refusal->structured, "error"), "message"));
	if (refusal)
		downloads_reopen(m, g);
	strbuf_free(&sb);
	free(attempts);
	free(attempt);
	free(source);
	json_object_put(facts);
	json_object_put(again);
	json_object_put(frame);
	json_object_put(pending);
	return refusal;
}
