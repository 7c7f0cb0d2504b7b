/* The recording reset of relay_stage (spec/guest.md §4); see recording_reset.h. */
#include "runs/recording_reset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/packaging.h"
#include "delivery/step_downloads.h"
#include "guestio/receiver_api.h"
#include "runs/run_state.h"
#include "session/events.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/strbuf.h"

/* Steps 1 and 3: a staged recording, and the pending reset persisted.
 * The pending reset (new reference), or NULL with `o` failed. */
static json_object *pending_begin(session_manager *m, guest *g, relay_outcome *o)
{
	session_lock(m);
	slice_lock(g->run);
	json_object *pending = g->run->pending_reset ? json_object_get(g->run->pending_reset) : NULL;
	slice_unlock(g->run);
	if (pending == NULL) {
		if (!g->staged || g->recording_session_id == NULL) {
			session_unlock(m);
			outcome_fail(
			    o, "not-staged",
			    "a recording reset needs a staged recording; %s has none (use relay_stage "
			    "without resetRecording)",
			    g->name);
			return NULL;
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
		slice_lock(g->run);
		g->run->pending_reset = json_object_get(p);
		slice_unlock(g->run);
		pending = p;
		guest_save(g);
	}
	session_unlock(m);
	return pending;
}

/* Step 6: the host's bookkeeping once the guest step is done. */
static void reset_finish(session_manager *m, guest *g, guest_io *io, json_object *pending,
                         json_object **reset_out)
{
	const char *id = jsonx_get_str(pending, "id");
	const char *from = jsonx_get_str(pending, "from");
	const char *from_session = jsonx_get_str(pending, "fromSession");
	const char *to = jsonx_get_str(pending, "to");
	char errbuf[512];
	strbuf sb = STRBUF_INIT;
	session_lock(m);
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
	slice_lock(g->run);
	json_object_put(g->run->pending_reset);
	g->run->pending_reset = NULL;
	slice_unlock(g->run);
	guest_save(g);
	session_unlock(m);
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
	strbuf_free(&sb);
}

int recording_reset(session_manager *m, guest *g, guest_io *io, json_object **reset_out, relay_outcome *o)
{
	*reset_out = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	json_object *pending = pending_begin(m, g, o);
	if (pending == NULL)
		return -1;
	const char *id = jsonx_get_str(pending, "id");
	const char *from = jsonx_get_str(pending, "from");
	const char *to = jsonx_get_str(pending, "to");
	char *attempts = NULL;
	json_object *facts = NULL, *frame = NULL;
	strbuf sb = STRBUF_INIT;
	if (id == NULL || from == NULL || to == NULL) {
		outcome_fail(o, "reset-pending",
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
	/* From R/recordings/<id> when an earlier attempt's guest step moved the
	 * recording there, else from R/state. */
	strbuf_printf(&sb, "recordings/%s", id);
	char *source_rel = strbuf_detach(&sb, NULL);
	relay_status st = gio_scan(io, io->root, source_rel, true, 0, &facts, &err);
	if (st == RELAY_OK && json_object_array_length(facts) == 0) {
		free(source_rel);
		source_rel = strdup("state");
	}
	if (st != RELAY_OK) {
		outcome_fail(o, gio_tool_code(st), "the recording of %s could not be inventoried: %s",
		             g->name, err.message);
		free(source_rel);
		goto cleanup;
	}
	/* The same verified pull as finish (spec/evidence.md §5.6, §7): free space
	 * first, host copies reused, one archive with the file-at-a-time
	 * fallback, the guest rescanned, display originals, the merge. */
	strbuf_printf(&sb, "%s.reset-attempts", from);
	attempts = strbuf_detach(&sb, NULL);
	st = source_rel && attempts
	         ? packaging_pull_recording(io, source_rel, from, attempts, "recording reset",
	                                    "the guest is kept", NULL, &err)
	         : relay_error_set(&err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	free(source_rel);
	if (st != RELAY_OK) {
		outcome_fail(o, st == RELAY_E_NO_SPACE ? "space-shortfall" : gio_tool_code(st),
		             "the recording of %s could not be brought home before the reset: %s; the reset "
		             "stays pending, call relay_stage with resetRecording again",
		             g->name, err.message);
		goto cleanup;
	}

	/* Step 5: the guest step. */
	bool locked = false;
	st = gio_rcv_reset(io, id, &locked, &err);
	if (st != RELAY_OK) {
		if (locked)
			outcome_fail(
			    o, "receiver-locked",
			    "the receiver lock exists; diagnose the active execution before resetting "
			    "the recording (%s)",
			    err.message);
		else
			outcome_fail(
			    o, "reset-pending",
			    "the guest step of the recording reset failed: %s; the reset stays pending",
			    err.message);
		goto cleanup;
	}

	reset_finish(m, g, io, pending, reset_out);
cleanup:
	if (outcome_failed(o)) {
		guest_set_last_error(m, g, "recording reset: %s", o->message ? o->message : "failed");
		downloads_reopen(m, g);
	}
	strbuf_free(&sb);
	free(attempts);
	json_object_put(facts);
	json_object_put(frame);
	json_object_put(pending);
	return outcome_failed(o) ? -1 : 0;
}
