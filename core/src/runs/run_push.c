/* The files of a run pushed and checked (spec/guest.md §3.4, §15 step 3); see
 * run_internal.h. */
#include "runs/run_request.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runs/run_internal.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

static relay_status write_plain(const char *path, const void *data, size_t len, relay_error *err)
{
	return fs_write_exclusive(path, data, len, 0600, err);
}

/* Checks that transport facts list `rel` with the given sha256 and bytes. */
static bool facts_match(json_object *facts, const char *rel, const char *sha, uint64_t bytes)
{
	json_object *f = gio_fact_find(facts, rel);
	int64_t b = -1;
	return f && jsonx_get_int(f, "bytes", &b) && (uint64_t)b == bytes && jsonx_get_str(f, "sha256") &&
	       strcmp(jsonx_get_str(f, "sha256"), sha) == 0;
}

/* Verifies one pushed file with `receiver scan` (spec/guest.md §3.4 step 5). */
static relay_status scan_check(guest_io *io, const char *rel, const char *sha, uint64_t bytes,
                               const char *what, relay_error *err)
{
	json_object *facts = NULL;
	relay_status st = gio_scan(io, io->root, rel, false, bytes, &facts, err);
	if (st != RELAY_OK)
		return st;
	if (json_object_array_length(facts) != 1 || !facts_match(facts, "", sha, bytes))
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "staging checksum mismatch: %s", what);
	json_object_put(facts);
	return st;
}

/* Pushes one file of a run to R/<rel> and checks it: against the
 * transport's guest-side facts when it computes them (one round trip; a
 * contradiction is transfer-failed: gio_facts_compare), else with
 * `receiver scan` (spec/guest.md §3.4 step 5) unless `receiver_checks` says the
 * receiver checks the file's SHA-256 and size itself before it uses it
 * (the script: a mismatch refuses the run, nothing runs), which saves a
 * round trip where every exec is an HTTP call. */
static relay_status push_checked(guest_io *io, const char *local, const char *rel, const char *sha,
                                 uint64_t bytes, const char *what, bool receiver_checks, relay_error *err)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s", io->root, rel);
	char *remote = strbuf_detach(&sb, NULL);
	bool checked = false;
	relay_status st = gio_push_checked_facts(io, local, remote, sha, bytes, what, &checked, err);
	free(remote);
	if (st != RELAY_OK || checked)
		return st;
	return receiver_checks ? RELAY_OK : scan_check(io, rel, sha, bytes, what, err);
}

typedef struct side_push {
	guest_io *io;
	const char *local, *rel, *sha, *what;
	uint64_t bytes;
	relay_status status;
	relay_error err;
} side_push;

static void *side_push_main(void *arg)
{
	side_push *p = arg;
	memset(&p->err, 0, sizeof p->err);
	p->status = push_checked(p->io, p->local, p->rel, p->sha, p->bytes, p->what, true, &p->err);
	return NULL;
}

/* The script and the request (spec/guest.md §15 step 3), each hash-checked; side by side when the transport
 * runs operations concurrently and reports guest-side facts (no receiver scan), else the script first. The
 * receiver checks the script's SHA-256 and size again before running it, and its receipt carries the
 * request's SHA-256. */
relay_status run_push_files(guest_io *io, const char *script_rel, const char *script, size_t script_len,
                            const char *script_sha, const char *request_rel, const char *request,
                            size_t request_len, const char *request_sha, relay_error *err)
{
	relay_status st = RELAY_OK;
	char *script_local = gio_scratch_path(io, "script-", NULL, err);
	char *request_local = script_local ? gio_scratch_path(io, "request-", ".json", err) : NULL;
	if (script_local == NULL || request_local == NULL) {
		st = err->code;
		goto cleanup;
	}
	st = write_plain(script_local, script, script_len, err);
	if (st == RELAY_OK)
		st = write_plain(request_local, request, request_len, err);
	if (st != RELAY_OK)
		goto cleanup;
	if ((io->traits & RELAY_TRANSPORT_CONCURRENT) && (io->traits & RELAY_TRANSPORT_GUEST_FACTS)) {
		side_push side = {io,           script_local, script_rel, script_sha,
		                  "the script", script_len,   RELAY_OK,   {0}};
		pthread_t thread;
		bool threaded = pthread_create(&thread, NULL, side_push_main, &side) == 0;
		if (!threaded)
			side_push_main(&side);
		st = push_checked(io, request_local, request_rel, request_sha, request_len, "the request",
		                  false, err);
		if (threaded)
			pthread_join(thread, NULL);
		if (side.status != RELAY_OK) {
			*err = side.err;
			st = side.status;
		}
	} else {
		st = push_checked(io, script_local, script_rel, script_sha, script_len, "the script", true,
		                  err);
		if (st == RELAY_OK)
			st = push_checked(io, request_local, request_rel, request_sha, request_len,
			                  "the request", false, err);
	}
cleanup:
	if (script_local)
		unlink(script_local);
	if (request_local)
		unlink(request_local);
	free(script_local);
	free(request_local);
	return st;
}
