/* relay_stage steps 5-8 and 11: the platform probe, the receiver and the
 * capture programs pushed and verified by running them, the capture wait
 * (spec/guest.md §3.4, §11.3); see stage_internal.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "guestio/receiver_api.h"
#include "receiver_protocol.h"
#include "runs/receiver_builds.h"
#include "runs/stage_internal.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

#define STAGE_PROBE_TIMEOUT_MS 10000 /* uname -sm */
#define CAPTURE_WAIT_MS        120000
#define CAPTURE_EVERY_MS       5000
#define CAPTURE_EXEC_LIMIT_MS  180000
#define CAPTURE_PROGRESS_MS    5000

/* ---- guest commands --------------------------------------------------------------- */

/* Runs a short command; RELAY_OK only when it exited 0. *out_text gets stdout. */
relay_status stage_run_short(stage_ctx *s, const char *const *argv, uint64_t timeout_ms, char **out_text,
                             relay_error *err)
{
	relay_exec_result res;
	if (out_text)
		*out_text = NULL;
	relay_status st = gio_exec(&s->io, argv, NULL, timeout_ms, 1 << 16, 0, &res, err);
	if (st == RELAY_OK && (res.timed_out || res.exit_code != 0)) {
		char tail[300] = "";
		if (res.err && res.err_len)
			snprintf(tail, sizeof tail, "%.*s", (int)(res.err_len > 280 ? 280 : res.err_len),
			         res.err + (res.err_len > 280 ? res.err_len - 280 : 0));
		for (char *p = tail; *p; p++)
			if (*p == '\n' || *p == '\r')
				*p = ' ';
		st = relay_error_set(err, RELAY_E_REFUSED, 0, "%s %s (exit %d)%s%s", argv[0],
		                     res.timed_out ? "timed out" : "failed", res.exit_code,
		                     tail[0] ? ": " : "", tail);
	}
	if (st == RELAY_OK && out_text) {
		*out_text = res.out ? res.out : strdup("");
		res.out = NULL;
	}
	gio_exec_result_free(&res);
	return st;
}

relay_status stage_probe_platform(stage_ctx *s, relay_error *err)
{
	const char *argv[] = {"uname", "-sm", NULL};
	char *out = NULL;
	relay_status st = stage_run_short(s, argv, STAGE_PROBE_TIMEOUT_MS, &out, err);
	if (st != RELAY_OK)
		return st;
	size_t len = strlen(out);
	while (len && (out[len - 1] == '\n' || out[len - 1] == '\r' || out[len - 1] == ' '))
		out[--len] = '\0';
	s->uname = out;
	s->platform = receiver_platform_key(out);
	return RELAY_OK;
}

/* `R/receiver hash <remote>` must print `sha` and `bytes`. */
/* The one guest command after a program's push: make it 0700 and have the
 * receiver hash it; for the receiver itself also its version frame and the
 * guest's own sha256sum or shasum. One round trip instead of four. */
static const char program_check_script[] =
    "chmod 0700 \"$2\" || exit 90\n"
    "\"$1\" hash \"$2\" || exit 91\n"
    "[ \"$3\" = receiver ] || exit 0\n"
    "\"$1\" version || exit 92\n"
    "if command -v sha256sum >/dev/null 2>&1; then sha256sum -- \"$2\"; "
    "elif command -v shasum >/dev/null 2>&1; then shasum -a 256 -- \"$2\"; "
    "else echo relay-no-sha256; fi\n";

/* Pushes a program to R/<rel> and checks it by running the receiver
 * (spec/guest.md §3.4 "The receiver itself"): `receiver hash` must print the
 * host's SHA-256 and size. With `is_receiver`, *version_out (new reference)
 * receives the `receiver version` frame and *sum_out (malloc'd) the guest's
 * sha256sum line or "relay-no-sha256". */
static relay_status push_program(stage_ctx *s, const char *local, const char *rel, const char *what,
                                 bool is_receiver, char sha[65], uint64_t *bytes, json_object **version_out,
                                 char **sum_out, relay_error *err)
{
	if (version_out)
		*version_out = NULL;
	if (sum_out)
		*sum_out = NULL;
	relay_status st = sha256_file_hex(local, sha, bytes, err);
	if (st != RELAY_OK)
		return st;
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s", s->io.root, rel);
	char *remote = strbuf_detach(&sb, NULL);
	relay_exec_result res;
	memset(&res, 0, sizeof res);
	json_object *facts = NULL;
	st = gio_push(&s->io, local, remote, 0, what,
	              (s->io.traits & RELAY_TRANSPORT_GUEST_FACTS) ? &facts : NULL, err);
	if (st == RELAY_OK) {
		char again[65];
		uint64_t again_bytes = 0;
		if (sha256_file_hex(local, again, &again_bytes, err) != RELAY_OK || strcmp(again, sha) != 0 ||
		    again_bytes != *bytes)
			st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "staging source changed: %s", local);
	}
	/* What the transport says arrived must be what was sent (a source that
	 * changed is the integrity failure above). */
	if (st == RELAY_OK && facts) {
		json_object *sent = json_object_new_array();
		json_object_array_add(sent, gio_fact_new("", *bytes, sha));
		st = gio_facts_compare(facts, sent, what, err);
		json_object_put(sent);
	}
	json_object_put(facts);
	if (st == RELAY_OK) {
		const char *argv[] = {"/bin/sh",
		                      "-c",
		                      program_check_script,
		                      "relay-stage",
		                      s->io.receiver,
		                      remote,
		                      is_receiver ? "receiver" : "program",
		                      NULL};
		st = gio_exec(&s->io, argv, NULL, gio_scan_timeout_ms(*bytes), 1 << 16, 0, &res, err);
	}
	if (st == RELAY_OK && (res.timed_out || res.exit_code != 0)) {
		char tail[300] = "";
		if (res.err && res.err_len) {
			size_t from = res.err_len > 280 ? res.err_len - 280 : 0;
			snprintf(tail, sizeof tail, "%.*s", (int)(res.err_len - from), res.err + from);
			for (char *p = tail; *p; p++)
				if (*p == '\n' || *p == '\r')
					*p = ' ';
		}
		const char *step = res.exit_code == 90   ? "chmod 0700"
		                   : res.exit_code == 92 ? "receiver version"
		                   : res.exit_code == 91 ? "receiver hash"
		                                         : "the program check";
		/* A program that does not run as built is an integrity failure. */
		st = relay_error_set(err, res.exit_code == 90 ? RELAY_E_IO : RELAY_E_INTEGRITY, 0,
		                     "%s of %s %s (exit %d)%s%s", step, remote,
		                     res.timed_out ? "timed out" : "failed", res.exit_code,
		                     tail[0] ? ": " : "", tail);
	}
	if (st == RELAY_OK) {
		/* stdout: the hash frame, then (receiver) the version frame and the sum line. */
		json_object *frames[2] = {NULL, NULL};
		size_t nframes = 0;
		const char *p = res.out ? res.out : "", *end = p + res.out_len;
		const char *last_line = NULL;
		size_t last_len = 0;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
			if (len && p[0] == '{' && nframes < 2)
				frames[nframes++] = jsonx_parse(p, len, NULL, NULL, 0);
			else if (len) {
				last_line = p;
				last_len = len;
			}
			p += len + 1;
		}
		int64_t b = -1;
		const char *h = jsonx_get_str(frames[0], "sha256");
		if (!jsonx_get_int(frames[0], "bytes", &b) || (uint64_t)b != *bytes || h == NULL ||
		    strcmp(h, sha) != 0)
			st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "staging checksum mismatch: %s",
			                     remote);
		if (st == RELAY_OK && version_out)
			*version_out = json_object_get(frames[1]);
		if (st == RELAY_OK && sum_out && last_line)
			*sum_out = strndup(last_line, last_len);
		json_object_put(frames[0]);
		json_object_put(frames[1]);
	}
	if (st == RELAY_OK)
		gio_note_transfer(&s->io, "push", what, local, remote, *bytes, sha, 1, "transport");
	gio_exec_result_free(&res);
	free(remote);
	return st;
}

/* Steps 6-7: the guest root and the receiver, verified by running it. */
int stage_receiver(stage_ctx *s)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	/* A fresh root (the first mkdir succeeds) holds nothing to compare
	 * with, so the pre-scans of support/ and workspace/ are skipped. */
	const char *mk_fresh[] = {"/bin/mkdir", "-m", "0700", s->io.root, NULL};
	const char *mk[] = {"/bin/mkdir", "-p", "-m", "0700", s->io.root, NULL};
	relay_status st = stage_run_short(s, mk_fresh, GIO_SHORT_TIMEOUT_MS, NULL, &err);
	s->fresh_root = st == RELAY_OK;
	if (st != RELAY_OK)
		st = stage_run_short(s, mk, GIO_SHORT_TIMEOUT_MS, NULL, &err);
	if (st != RELAY_OK)
		return stage_fail(s, "transfer-failed", "cannot create the guest root %s: %s", s->io.root,
		                  err.message);
	char *local = receiver_build_path(s->platform);
	if (local == NULL) {
		char *msg = receiver_unsupported_message(s->uname);
		stage_fail(s, "unsupported-platform", "%s", msg ? msg : "no receiver build");
		free(msg);
		return -1;
	}
	json_object *frame = NULL;
	char *sum = NULL;
	st = push_program(s, local, "receiver", "the receiver", true, s->receiver_sha, &s->receiver_bytes,
	                  &frame, &sum, &err);
	free(local);
	if (st != RELAY_OK) {
		json_object_put(frame);
		free(sum);
		return stage_fail(s, gio_tool_code(st), "the receiver could not be staged: %s", err.message);
	}
	s->io.receiver_ready = true;
	int64_t protocol = 0;
	const char *name = jsonx_get_str(frame, "receiver");
	const char *version = jsonx_get_str(frame, "version");
	const char *platform = jsonx_get_str(frame, "platform");
	if (!jsonx_get_int(frame, RECEIVER_FRAME_PROTOCOL, &protocol) ||
	    protocol != RECEIVER_PROTOCOL_VERSION || name == NULL ||
	    strcmp(name, RECEIVER_PROGRAM_NAME) != 0 || version == NULL ||
	    strcmp(version, RELAY_VERSION) != 0 || platform == NULL || strcmp(platform, s->platform) != 0)
		st = relay_error_set(&err, RELAY_E_INTEGRITY, 0,
		                     "the staged receiver reports %s %s, protocol %lld, for %s; expected "
		                     "mcp-relay-receiver %s, protocol 1, for %s",
		                     name ? name : "?", version ? version : "?", (long long)protocol,
		                     platform ? platform : "?", RELAY_VERSION, s->platform);
	if (st == RELAY_OK)
		s->receiver_version = strdup(version);
	json_object_put(frame);
	if (st != RELAY_OK) {
		free(sum);
		return stage_fail(s, "integrity-failed", "the staged receiver does not run as built: %s",
		                  err.message);
	}
	/* The guest's own sha256sum or shasum agrees too, when it has one. */
	bool disagrees = sum && strncmp(sum, "relay-no-sha256", 15) != 0 &&
	                 (strlen(sum) < 64 || strncmp(sum, s->receiver_sha, 64) != 0);
	free(sum);
	if (disagrees)
		return stage_fail(s, "integrity-failed",
		                  "staging checksum mismatch: the guest's sha256sum disagrees "
		                  "about the receiver");
	stage_progress(s, "receiver staged");
	return 0;
}

/* ---- capture (spec/guest.md §11.3) ------------------------------------------------------- */

int stage_capture_programs(stage_ctx *s, json_object *plan)
{
	json_object *stage = jsonx_get_array(plan, "stage");
	size_t n = stage ? json_object_array_length(stage) : 0;
	if (n == 0)
		return 0;
	relay_error err;
	memset(&err, 0, sizeof err);
	/* Parent folders first, with the receiver's path check. */
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_array_get_idx(stage, i);
		const char *local = jsonx_get_str(e, "local"), *remote = jsonx_get_str(e, "remote");
		char *parent = fs_dirname(remote);
		if (parent && strcmp(parent, ".") != 0) {
			const char *dirs[] = {parent};
			relay_status st = gio_rcv_prepare(&s->io, dirs, 1, &err);
			if (st != RELAY_OK) {
				stage_fail(s, "transfer-failed", "cannot prepare %s for %s: %s", parent,
				           remote, err.message);
				free(parent);
				return -1;
			}
		}
		free(parent);
		char sha[65];
		uint64_t bytes = 0;
		relay_status st =
		    push_program(s, local, remote, remote, false, sha, &bytes, NULL, NULL, &err);
		if (st != RELAY_OK)
			return stage_fail(s, gio_tool_code(st),
			                  "the capture program %s could not be staged: %s", remote,
			                  err.message);
	}
	return 0;
}

/* Runs `receiver capture-test`; NULL on success with *after_ms_out. */
int stage_capture_wait(stage_ctx *s, json_object *plan, int64_t *after_ms_out)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	char *capture = jsonx_to_string(jsonx_get_obj(plan, "capture"), 0);
	gio_supervision sv;
	memset(&sv, 0, sizeof sv);
	sv.tick_ms = CAPTURE_PROGRESS_MS;
	sv.tick_what = "capture test";
	sv.limit_ms = CAPTURE_WAIT_MS;
	gio_capture_test test;
	relay_status st = gio_rcv_capture_test(&s->io, &sv, capture, CAPTURE_WAIT_MS, CAPTURE_EVERY_MS,
	                                       CAPTURE_EXEC_LIMIT_MS, &test, &err);
	free(capture);
	int r = 0;
	if (sv.cancelled) {
		r = stage_cancelled(s);
	} else if (st != RELAY_OK) {
		r = stage_fail(s, "transfer-failed", "the capture wait could not run: %s", err.message);
	} else if (!test.answered) {
		r = stage_fail(s, "capture-unavailable", "the capture wait failed (receiver exit %d): %s",
		               test.exit_code, test.error ? test.error : "no frame");
	} else if (!test.ok) {
		r = stage_fail(
		    s, "capture-unavailable",
		    "the image lists capture software but no test screenshot arrived within 120 s; the "
		    "capture command's last diagnostic: %s",
		    test.diagnostic ? test.diagnostic : "none");
	} else {
		*after_ms_out = test.after_ms;
	}
	gio_capture_test_free(&test);
	return r;
}
