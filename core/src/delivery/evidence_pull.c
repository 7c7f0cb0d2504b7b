/*
 * Verified pulls of guest evidence (evidence_pull.h).
 */
#include "delivery/evidence_pull.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evidence/archive.h"
#include "evidence/fswalk.h"
#include "evidence/package.h"
#include "guestio/receiver_api.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

bool epull_transient(relay_status status, const char *message)
{
	switch (status) {
	case RELAY_E_INDETERMINATE:
	case RELAY_E_UNAVAILABLE: return true;
	/* What the receiver or the host's reader refused is lasting, whatever
	 * words the guest put in its message. */
	case RELAY_E_REFUSED:
	case RELAY_E_INVALID_ARGUMENT:
	case RELAY_E_PROTOCOL:
	case RELAY_E_INTEGRITY:
	case RELAY_E_UNSAFE_PATH:
	case RELAY_E_NO_SPACE:
	case RELAY_E_NOT_FOUND:
	case RELAY_E_CANCELLED: return false;
	default: return gio_transient(status, message ? message : "");
	}
}

bool epull_guest_space(const relay_error *err)
{
	return err && strstr(err->message, "Not enough guest space") != NULL;
}

relay_status epull_file(guest_io *io, const char *remote, const char *local, const char *sha256,
                        uint64_t bytes, relay_error *err)
{
	relay_status st = gio_pull(io, remote, local, 0, "evidence", err);
	if (st != RELAY_OK)
		return st;
	char hex[65];
	uint64_t got = 0;
	st = sha256_file_hex(local, hex, &got, err);
	if (st != RELAY_OK) {
		unlink(local);
		return st;
	}
	if (got != bytes || strcmp(hex, sha256) != 0) {
		unlink(local);
		return relay_error_set(
		    err, RELAY_E_INTEGRITY, 0,
		    "checksum mismatch: %s arrived with %llu bytes and SHA-256 %.12s...; the "
		    "guest reported %llu bytes and %.12s...",
		    remote, (unsigned long long)got, hex, (unsigned long long)bytes, sha256);
	}
	return RELAY_OK;
}

relay_status epull_files(guest_io *io, const json_object *files, const char *remote_base,
                         const char *local_base, relay_error *err)
{
	relay_status st = RELAY_OK;
	size_t n = json_object_array_length((json_object *)files);
	for (size_t i = 0; st == RELAY_OK && i < n; i++) {
		json_object *f = json_object_array_get_idx((json_object *)files, i);
		const char *rel = jsonx_get_str(f, "path");
		int64_t bytes = 0;
		jsonx_get_int(f, "bytes", &bytes);
		strbuf remote = STRBUF_INIT, local = STRBUF_INIT;
		strbuf_printf(&remote, "%s/%s", remote_base, rel);
		strbuf_printf(&local, "%s/%s", local_base, rel);
		char *parent = fs_dirname(strbuf_str(&local));
		st = parent ? fs_mkdir_p(parent, 0700, err)
		            : relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		free(parent);
		if (st == RELAY_OK)
			st = epull_file(io, strbuf_str(&remote), strbuf_str(&local),
			                jsonx_get_str(f, "sha256"), (uint64_t)bytes, err);
		strbuf_free(&remote);
		strbuf_free(&local);
	}
	return st;
}

relay_status epull_check_facts(const json_object *facts, const char *prefix, bool allow_single,
                               relay_error *err)
{
	size_t n = facts ? json_object_array_length((json_object *)facts) : 0;
	const char *prev = NULL;
	for (size_t i = 0; i < n; i++) {
		const char *p = jsonx_get_str(json_object_array_get_idx((json_object *)facts, i), "path");
		if (p == NULL)
			return relay_error_set(err, RELAY_E_PROTOCOL, 0,
			                       "a guest inventory entry has no path");
		if (p[0] == '\0' && allow_single && n == 1)
			return RELAY_OK;
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "%s%s", prefix ? prefix : "", p);
		bool ok = strbuf_ok(&sb) && evidence_package_path_ok(strbuf_str(&sb));
		strbuf_free(&sb);
		if (!ok)
			return relay_error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "file name not allowed in an evidence package: %s (rename it in the "
			    "guest with a diagnostic shell script and try again)",
			    p);
		if (prev && strcmp(prev, p) >= 0)
			return relay_error_set(err, RELAY_E_PROTOCOL, 0,
			                       "the guest inventory is not sorted or names %s twice", p);
		prev = p;
	}
	return RELAY_OK;
}

uint64_t epull_facts_bytes(const json_object *facts)
{
	uint64_t total = 0;
	size_t n = facts ? json_object_array_length((json_object *)facts) : 0;
	for (size_t i = 0; i < n; i++) {
		int64_t b = 0;
		if (jsonx_get_int(json_object_array_get_idx((json_object *)facts, i), "bytes", &b) && b > 0)
			total += (uint64_t)b;
	}
	return total;
}

bool epull_facts_equal(const json_object *a, const json_object *b)
{
	size_t n = a ? json_object_array_length((json_object *)a) : 0;
	size_t m = b ? json_object_array_length((json_object *)b) : 0;
	if (n != m)
		return false;
	for (size_t i = 0; i < n; i++) {
		json_object *x = json_object_array_get_idx((json_object *)a, i);
		json_object *y = json_object_array_get_idx((json_object *)b, i);
		const char *px = jsonx_get_str(x, "path"), *py = jsonx_get_str(y, "path");
		const char *sx = jsonx_get_str(x, "sha256"), *sy = jsonx_get_str(y, "sha256");
		int64_t bx = -1, by = -2;
		jsonx_get_int(x, "bytes", &bx);
		jsonx_get_int(y, "bytes", &by);
		if (!px || !py || !sx || !sy || strcmp(px, py) != 0 || strcmp(sx, sy) != 0 || bx != by)
			return false;
	}
	return true;
}

/* Removes the files named by `facts` below dest_dir (what earlier chunks
 * placed), then the folders they leave empty. */
static void remove_placed(const char *dest_dir, json_object *facts)
{
	int root = fw_open_root(dest_dir);
	if (root < 0)
		return;
	size_t n = facts ? json_object_array_length(facts) : 0;
	for (size_t i = n; i-- > 0;) {
		const char *p = jsonx_get_str(json_object_array_get_idx(facts, i), "path");
		if (p == NULL)
			continue;
		fw_unlink_at(root, p, NULL);
		char *dir = strdup(p);
		for (char *slash = dir ? strrchr(dir, '/') : NULL; slash; slash = strrchr(dir, '/')) {
			*slash = '\0';
			fw_rmdir_at(root, dir);
		}
		free(dir);
	}
	close(root);
}

/* The name of the archive directly in R that `path` names, or NULL. */
static const char *archive_name(const guest_io *io, const char *path)
{
	size_t rl = strlen(io->root);
	if (path == NULL || strncmp(path, io->root, rl) != 0 || path[rl] != '/')
		return NULL;
	const char *name = path + rl + 1;
	if (strncmp(name, ".archive-", 9) != 0 || strchr(name, '/') != NULL)
		return NULL;
	return name;
}

/* One `receiver archive` of the entries [from, to) of `expected`. */
static relay_status archive_chunk(guest_io *io, const char *base, const json_object *expected, size_t from,
                                  size_t to, bool present, const evidence_extract_options *opts,
                                  const char *dest_dir, json_object *all_facts, relay_error *err)
{
	relay_status st = RELAY_OK;
	const char **paths = calloc(to - from + 1, sizeof *paths);
	json_object *chunk = json_object_new_array(), *facts = NULL;
	char *local = NULL, *facts_text = NULL, *expected_text = NULL;
	gio_file_frame archive = {0};
	strbuf out = STRBUF_INIT;
	if (paths == NULL || chunk == NULL) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	char rnd[17];
	random_hex(rnd, 16);
	strbuf_printf(&out, "%s/.archive-%s.tar", io->root, rnd);
	uint64_t data_bytes = 0;
	for (size_t i = from; i < to; i++) {
		json_object *e = json_object_array_get_idx((json_object *)expected, i);
		paths[i - from] = jsonx_get_str(e, "path");
		int64_t b = 0;
		if (jsonx_get_int(e, "bytes", &b) && b > 0)
			data_bytes += (uint64_t)b;
		json_object_array_add(chunk, json_object_get(e));
	}
	/* A partial archive is removed by the receiver itself; a complete one
	 * is removed with the guest_io's transients. */
	st = gio_rcv_archive(io, base, present, strbuf_str(&out), paths, to - from,
	                     gio_scan_timeout_ms(2 * data_bytes), &archive, err);
	if (st != RELAY_OK)
		goto cleanup;
	const char *path = archive.path;
	const char *name = archive_name(io, path);
	const char *sha = archive.sha256;
	int64_t bytes = (int64_t)archive.bytes;
	if (name == NULL) {
		st = relay_error_set(err, RELAY_E_PROTOCOL, 0,
		                     "receiver archive answered a frame that names another archive than %s",
		                     strbuf_str(&out));
		goto cleanup;
	}
	gio_add_transient(io, name);
	local = gio_scratch_path(io, "archive-", ".tar", err);
	if (local == NULL) {
		st = err->code;
		goto cleanup;
	}
	/* §5.4 item 1: the pulled archive's size and SHA-256 equal the frame. */
	st = epull_file(io, path, local, sha, (uint64_t)bytes, err);
	if (st != RELAY_OK)
		goto cleanup;
	expected_text = jsonx_to_string(chunk, 0);
	if (expected_text == NULL) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	st = evidence_archive_extract_ex(local, dest_dir, expected_text, present ? RELAY_ARCHIVE_PRESENT : 0,
	                                 opts, &facts_text, err);
	if (st != RELAY_OK)
		goto cleanup;
	facts = facts_text ? jsonx_parse_str(facts_text, NULL, 0) : NULL;
	if (!json_object_is_type(facts, json_type_array)) {
		st = relay_error_set(err, RELAY_E_INTERNAL, 0, "the archive reader returned no facts");
		goto cleanup;
	}
	for (size_t i = 0; i < json_object_array_length(facts); i++)
		json_object_array_add(all_facts, json_object_get(json_object_array_get_idx(facts, i)));
cleanup:
	if (local)
		unlink(local);
	free(local);
	free(facts_text);
	free(expected_text);
	free(paths);
	strbuf_free(&out);
	json_object_put(chunk);
	gio_file_frame_free(&archive);
	json_object_put(facts);
	return st;
}

relay_status epull_archive(guest_io *io, const char *base, const json_object *expected, bool present,
                           const char *dest_dir, json_object **facts_out, relay_error *err)
{
	return epull_archive_ex(io, base, expected, present, NULL, dest_dir, facts_out, err);
}

relay_status epull_archive_ex(guest_io *io, const char *base, const json_object *expected, bool present,
                              const evidence_extract_options *opts, const char *dest_dir,
                              json_object **facts_out, relay_error *err)
{
	if (facts_out)
		*facts_out = NULL;
	json_object *all = json_object_new_array();
	if (all == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	size_t n = expected ? json_object_array_length((json_object *)expected) : 0;
	relay_status st = RELAY_OK;
	size_t from = 0;
	while (from < n && st == RELAY_OK) {
		size_t to = from, used = 0;
		while (to < n) {
			const char *p =
			    jsonx_get_str(json_object_array_get_idx((json_object *)expected, to), "path");
			if (p == NULL || !evidence_archive_path_ok(p)) {
				st = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
				                     "not a safe archive path: %s", p ? p : "(none)");
				break;
			}
			size_t cost = strlen(p) + 1;
			if (to > from && used + cost > EPULL_ARCHIVE_ARG_BYTES)
				break;
			used += cost;
			to++;
		}
		if (st == RELAY_OK)
			st = archive_chunk(io, base, expected, from, to, present, opts, dest_dir, all, err);
		from = to;
	}
	if (st != RELAY_OK) {
		remove_placed(dest_dir, all);
		json_object_put(all);
		return st;
	}
	if (facts_out)
		*facts_out = all;
	else
		json_object_put(all);
	return RELAY_OK;
}
