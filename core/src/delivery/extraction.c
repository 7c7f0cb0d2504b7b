/*
 * The verified pull of a declared output (extraction.h).
 */
#include "delivery/extraction.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "call/call.h"
#include "delivery/delivery_state.h"
#include "delivery/evidence_pull.h"
#include "evidence/fswalk.h"
#include "evidence/package.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define FULL_WORKSPACE "full-workspace"

const char *extraction_failure_code(extraction_failure failure)
{
	switch (failure) {
	case EXTRACTION_OK: return NULL;
	case EXTRACTION_MISSING: return "output-missing";
	case EXTRACTION_SPACE: return "space-shortfall";
	case EXTRACTION_INTEGRITY: return "integrity-failed";
	case EXTRACTION_CANCELLED:
	case EXTRACTION_TRANSFER: break;
	}
	return "transfer-failed";
}

json_object *extraction_declarations(session_manager *m, guest *g, bool *full_workspace_out)
{
	(void)m;
	slice_lock(g->delivery);
	json_object *decl =
	    g->delivery->extractions ? json_object_get(g->delivery->extractions) : json_object_new_array();
	if (full_workspace_out)
		*full_workspace_out = g->delivery->full_workspace;
	slice_unlock(g->delivery);
	return decl;
}

/* The class of a failed scan: a missing path, an unsafe tree, or a
 * transfer problem. */
static extraction_failure scan_failure(relay_status st, const relay_error *err)
{
	if (st == RELAY_E_CANCELLED)
		return EXTRACTION_CANCELLED;
	if (strstr(err->message, ": missing ") != NULL)
		return EXTRACTION_MISSING;
	if (strstr(err->message, "symlink ") || strstr(err->message, "special file ") ||
	    strstr(err->message, "symbolic link") || strstr(err->message, "source changed") ||
	    st == RELAY_E_INTEGRITY || st == RELAY_E_UNSAFE_PATH)
		return EXTRACTION_INTEGRITY;
	return EXTRACTION_TRANSFER;
}

static extraction_failure failure_of(relay_status st)
{
	switch (st) {
	case RELAY_E_CANCELLED: return EXTRACTION_CANCELLED;
	case RELAY_E_NO_SPACE: return EXTRACTION_SPACE;
	case RELAY_E_INTEGRITY:
	case RELAY_E_UNSAFE_PATH:
	case RELAY_E_PROTOCOL: return EXTRACTION_INTEGRITY;
	default: return EXTRACTION_TRANSFER;
	}
}

/* Copies an earlier extraction's copy of `rel` (same output name, same
 * size and SHA-256) into dest and re-hashes it. *used when it fits. */
static relay_status copy_earlier(const char *evidence, const char *name, const char *uuid, const char *rel,
                                 uint64_t bytes, const char *sha, const char *dest, bool *used,
                                 relay_error *err)
{
	*used = false;
	strbuf dir = STRBUF_INIT;
	strbuf_printf(&dir, "%s/extractions/%s", evidence, name);
	fw_tree tree = {0};
	relay_status st = fw_walk(strbuf_str(&dir), true, NULL, &tree, err);
	int src_root = st == RELAY_OK ? fw_open_root(strbuf_str(&dir)) : -1;
	int dst_root = st == RELAY_OK ? fw_open_root(dest) : -1;
	for (size_t i = 0; st == RELAY_OK && !*used && i < tree.count; i++) {
		const fw_entry *e = &tree.items[i];
		if (e->kind != FW_DIR || strchr(e->path, '/') != NULL || strcmp(e->path, uuid) == 0)
			continue;
		if (src_root < 0 || dst_root < 0)
			break;
		strbuf src = STRBUF_INIT;
		strbuf_printf(&src, "%s/%s", e->path, rel);
		relay_error probe = {0};
		int in = fw_open_file_read_at(src_root, strbuf_str(&src), &probe);
		strbuf_free(&src);
		if (in < 0)
			continue;
		struct stat sb;
		if (fstat(in, &sb) != 0 || (uint64_t)sb.st_size != bytes) {
			close(in);
			continue;
		}
		int out = fw_create_file_at(dst_root, rel, 0600, NULL, err);
		if (out < 0) {
			close(in);
			st = err->code;
			break;
		}
		sha256_ctx *ctx = sha256_new();
		unsigned char *buf = malloc(1 << 20);
		uint64_t total = 0;
		if (ctx == NULL || buf == NULL)
			st = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		while (st == RELAY_OK) {
			ssize_t n = read(in, buf, 1 << 20);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				st = relay_error_set(err, RELAY_E_IO, errno,
				                     "cannot read an earlier extraction");
				break;
			}
			if (n == 0)
				break;
			sha256_update(ctx, buf, (size_t)n);
			total += (uint64_t)n;
			st = fs_write_all(out, buf, (size_t)n, rel, err);
		}
		char hex[65] = "";
		if (ctx && st == RELAY_OK) {
			sha256_final(ctx, hex);
			ctx = NULL;
		}
		sha256_abort(ctx);
		free(buf);
		close(in);
		if (st == RELAY_OK && fsync(out) != 0)
			st = relay_error_set(err, errno == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO, errno,
			                     "cannot sync %s", rel);
		close(out);
		*used = st == RELAY_OK && total == bytes && strcmp(hex, sha) == 0;
		if (!*used)
			fw_unlink_at(dst_root, rel, NULL); /* a differing copy is never used */
	}
	if (src_root >= 0)
		close(src_root);
	if (dst_root >= 0)
		close(dst_root);
	fw_tree_free(&tree);
	strbuf_free(&dir);
	return st;
}

/* The host files below dest as facts, sorted by path; unsafe entries
 * (links, special files, hard links) are refused. */
static relay_status host_facts(const char *dest, json_object **facts_out, relay_error *err)
{
	*facts_out = NULL;
	fw_tree tree = {0};
	relay_status st = fw_walk(dest, false, NULL, &tree, err);
	if (st != RELAY_OK)
		return st;
	size_t files = 0;
	for (size_t i = 0; i < tree.count; i++) {
		if (tree.items[i].kind == FW_FILE && tree.items[i].nlink == 1)
			files++;
		else if (tree.items[i].kind != FW_DIR) {
			st = relay_error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "extraction inventory mismatch: %s is not a plain file on the host",
			    tree.items[i].path);
			fw_tree_free(&tree);
			return st;
		}
	}
	evidence_file_hash *items = calloc(files ? files : 1, sizeof *items);
	if (items == NULL) {
		fw_tree_free(&tree);
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	size_t k = 0;
	for (size_t i = 0; i < tree.count; i++)
		if (tree.items[i].kind == FW_FILE)
			items[k++].path = tree.items[i].path;
	st = evidence_hash_files(dest, items, files, 0, err);
	json_object *facts = json_object_new_array();
	for (size_t i = 0; st == RELAY_OK && i < files; i++) {
		if (items[i].status != RELAY_OK) {
			st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                     "extraction inventory mismatch: %s: %s", items[i].path,
			                     items[i].error);
			break;
		}
		json_object *f = json_object_new_object();
		jsonx_add_str(f, "path", items[i].path);
		jsonx_add_str(f, "sha256", items[i].sha256);
		jsonx_add_int(f, "bytes", (int64_t)items[i].bytes);
		json_object_array_add(facts, f);
	}
	free(items);
	fw_tree_free(&tree);
	if (st != RELAY_OK) {
		json_object_put(facts);
		return st;
	}
	*facts_out = facts;
	return RELAY_OK;
}

/* Writes host/extractions/<uuid>.json and the `extract` event. */
static void record_extraction(guest_io *io, const char *uuid, json_object *entry)
{
	json_object *rec = json_object_new_object();
	json_object *list = json_object_new_array();
	json_object_array_add(list, json_object_get(entry));
	jsonx_add(rec, "extractions", list);
	char at[25];
	time_format_iso_millis(clock_now_ms(), at);
	jsonx_add_str(rec, "at", at);
	strbuf dir = STRBUF_INIT, path = STRBUF_INIT;
	strbuf_printf(&dir, "%s/host/extractions", io->evidence);
	strbuf_printf(&path, "%s/%s.json", strbuf_str(&dir), uuid);
	relay_error err;
	if (fs_mkdir_p(strbuf_str(&dir), 0700, &err) != RELAY_OK ||
	    fs_write_json_durable(strbuf_str(&path), rec, &err) != RELAY_OK)
		log_warning("guest %s: cannot record extraction %s: %s", io->g->name, uuid, err.message);
	json_object_put(rec);
	strbuf_free(&dir);
	strbuf_free(&path);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "name", jsonx_get_str(entry, "name"));
	jsonx_add_str(details, "path", jsonx_get_str(entry, "path"));
	jsonx_add_str(details, "destination", jsonx_get_str(entry, "destination"));
	jsonx_add(details, "files", json_object_get(jsonx_get_obj(entry, "files")));
	jsonx_add(details, "bytes", json_object_get(jsonx_get_obj(entry, "bytes")));
	guest_event(io->m, io->g, "extract", "a declared output was brought home", details);
}

/* Pulls the files of a directory output: earlier copies first, the rest as
 * one archive, one by one when the archive fails. */
static relay_status pull_tree(guest_io *io, const char *name, const char *uuid, const char *base,
                              json_object *facts, const char *dest, relay_error *err)
{
	json_object *rest = json_object_new_array();
	relay_status st = RELAY_OK;
	size_t n = json_object_array_length(facts);
	for (size_t i = 0; st == RELAY_OK && i < n; i++) {
		json_object *f = json_object_array_get_idx(facts, i);
		int64_t bytes = 0;
		jsonx_get_int(f, "bytes", &bytes);
		bool used = false;
		st = copy_earlier(io->evidence, name, uuid, jsonx_get_str(f, "path"), (uint64_t)bytes,
		                  jsonx_get_str(f, "sha256"), dest, &used, err);
		if (st == RELAY_OK && !used)
			json_object_array_add(rest, json_object_get(f));
	}
	if (st != RELAY_OK || json_object_array_length(rest) == 0)
		goto cleanup;
	relay_error aerr;
	memset(&aerr, 0, sizeof aerr);
	st = epull_archive(io, base, rest, false, dest, NULL, &aerr);
	if (st == RELAY_OK || st == RELAY_E_CANCELLED || relay_call_is_cancelled(io->call)) {
		if (st != RELAY_OK)
			*err = aerr;
		goto cleanup;
	}
	/* The archive could not be made or read: one file at a time. */
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "operation", "extract");
	jsonx_add_str(details, "name", name);
	jsonx_add_str(details, "error", aerr.message);
	jsonx_add_int(details, "files", (int64_t)json_object_array_length(rest));
	guest_event(io->m, io->g, "archive-fallback", "the archive could not be made or read", details);
	st = epull_files(io, rest, base, dest, err);
cleanup:
	json_object_put(rest);
	return st;
}

/* Step 5 of a pull: the host files under `dest` equal the guest's
 * inventory `facts` (a single file `leaf`, or a tree when leaf is NULL),
 * and a second scan of the guest equals the first. *rel_facts_out receives
 * the facts relative to the destination. */
static extraction_failure verify_pull(guest_io *io, const char *name, const char *path, const char *workspace,
                                      const char *rel, json_object *facts, const char *leaf, const char *dest,
                                      uint64_t total, json_object **rel_facts_out, relay_error *err)
{
	extraction_failure failure = EXTRACTION_OK;
	json_object *again = NULL, *host = NULL, *rel_facts = NULL;
	relay_status st = host_facts(dest, &host, err);
	if (st != RELAY_OK) {
		failure = failure_of(st);
		goto cleanup;
	}
	if (leaf) {
		rel_facts = json_object_new_array();
		json_object *f = json_object_new_object();
		json_object *g0 = json_object_array_get_idx(facts, 0);
		jsonx_add_str(f, "path", leaf);
		jsonx_add_str(f, "sha256", jsonx_get_str(g0, "sha256"));
		json_object *b = NULL;
		json_object_object_get_ex(g0, "bytes", &b);
		jsonx_add(f, "bytes", json_object_get(b));
		json_object_array_add(rel_facts, f);
	} else {
		rel_facts = json_object_get(facts);
	}
	if (!epull_facts_equal(host, rel_facts)) {
		failure = EXTRACTION_INTEGRITY;
		relay_error_set(
		    err, RELAY_E_INTEGRITY, 0,
		    "extraction inventory mismatch: the files brought home for %s differ from the "
		    "guest's inventory",
		    name);
		goto cleanup;
	}
	st = gio_scan(io, workspace, rel, false, total, &again, err);
	if (st != RELAY_OK) {
		failure = st == RELAY_E_CANCELLED ? EXTRACTION_CANCELLED : EXTRACTION_INTEGRITY;
		if (failure == EXTRACTION_INTEGRITY)
			relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                "source changed during extraction: %s (%s)", path, err->message);
		goto cleanup;
	}
	if (!epull_facts_equal(facts, again)) {
		failure = EXTRACTION_INTEGRITY;
		relay_error_set(err, RELAY_E_INTEGRITY, 0, "source changed during extraction: %s", path);
		goto cleanup;
	}
	*rel_facts_out = rel_facts;
	rel_facts = NULL;
cleanup:
	json_object_put(again);
	json_object_put(host);
	json_object_put(rel_facts);
	return failure;
}

extraction_failure extraction_pull(guest_io *io, const char *name, const char *path, bool full_workspace,
                                   const char *operation, json_object **entry_out, relay_error *err)
{
	*entry_out = NULL;
	extraction_failure failure = EXTRACTION_OK;
	json_object *facts = NULL, *rel_facts = NULL;
	strbuf base = STRBUF_INIT, workspace = STRBUF_INIT, dest = STRBUF_INIT, prefix = STRBUF_INIT;
	bool dest_made = false;
	char uuid[37];
	random_uuid(uuid);
	if (full_workspace) {
		name = FULL_WORKSPACE;
		path = "";
	}
	strbuf_printf(&workspace, "%s/workspace", io->root);
	const char *rel = full_workspace ? "." : path;

	if (RELAY_FAILPOINT_ERROR("extract.before-pull", err) != RELAY_OK)
		goto cleanup;
	/* 1. The guest's inventory. */
	relay_status st = gio_scan(io, strbuf_str(&workspace), rel, false, 0, &facts, err);
	if (st != RELAY_OK) {
		failure = scan_failure(st, err);
		if (failure == EXTRACTION_MISSING)
			relay_error_set(err, RELAY_E_NOT_FOUND, 0,
			                "not produced: %s does not exist in the guest workspace", path);
		goto cleanup;
	}
	size_t n = json_object_array_length(facts);
	bool single = n == 1 && strcmp(jsonx_get_str(json_object_array_get_idx(facts, 0), "path"), "") == 0;
	if (single && full_workspace) {
		failure = EXTRACTION_INTEGRITY;
		relay_error_set(err, RELAY_E_INTEGRITY, 0, "the guest workspace is not a folder");
		goto cleanup;
	}
	const char *leaf = single ? fs_basename(path) : NULL;
	strbuf_printf(&prefix, "extractions/%s/%s/", name, uuid);
	if (single) {
		strbuf p = STRBUF_INIT;
		strbuf_printf(&p, "%s%s", strbuf_str(&prefix), leaf);
		bool ok = evidence_package_path_ok(strbuf_str(&p));
		strbuf_free(&p);
		if (!ok) {
			failure = EXTRACTION_INTEGRITY;
			relay_error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "file name not allowed in an evidence package: %s (rename it in the guest "
			    "with a diagnostic shell script and extract again)",
			    leaf);
			goto cleanup;
		}
	} else {
		st = epull_check_facts(facts, strbuf_str(&prefix), false, err);
		if (st != RELAY_OK) {
			failure = EXTRACTION_INTEGRITY;
			goto cleanup;
		}
	}
	uint64_t total = epull_facts_bytes(facts);

	/* 2. Room on the evidence volume. */
	evidence_space space;
	st = evidence_space_check(io->evidence, total, operation, "the guest is kept", &space, err);
	if (st != RELAY_OK) {
		failure = st == RELAY_E_NO_SPACE ? EXTRACTION_SPACE : EXTRACTION_TRANSFER;
		goto cleanup;
	}

	/* 3. The destination. */
	strbuf_printf(&dest, "%s/extractions/%s/%s", io->evidence, name, uuid);
	char errbuf[256];
	if (guest_ensure_evidence_dir(io->m, io->g, errbuf, sizeof errbuf) != 0) {
		failure = EXTRACTION_TRANSFER;
		relay_error_set(err, RELAY_E_IO, 0, "%s", errbuf);
		goto cleanup;
	}
	st = fs_mkdir_p(strbuf_str(&dest), 0700, err);
	if (st != RELAY_OK) {
		failure = failure_of(st);
		goto cleanup;
	}
	dest_made = true;

	/* 4. The bytes. */
	if (single) {
		json_object *f = json_object_array_get_idx(facts, 0);
		int64_t bytes = 0;
		jsonx_get_int(f, "bytes", &bytes);
		strbuf remote = STRBUF_INIT, local = STRBUF_INIT;
		strbuf_printf(&remote, "%s/%s", strbuf_str(&workspace), path);
		strbuf_printf(&local, "%s/%s", strbuf_str(&dest), leaf);
		st = epull_file(io, strbuf_str(&remote), strbuf_str(&local), jsonx_get_str(f, "sha256"),
		                (uint64_t)bytes, err);
		strbuf_free(&remote);
		strbuf_free(&local);
	} else {
		if (full_workspace)
			strbuf_puts(&base, strbuf_str(&workspace));
		else
			strbuf_printf(&base, "%s/%s", strbuf_str(&workspace), path);
		st = pull_tree(io, name, uuid, strbuf_str(&base), facts, strbuf_str(&dest), err);
	}
	if (st != RELAY_OK) {
		failure = failure_of(st);
		goto cleanup;
	}

	/* 5. Host equals guest, and the guest did not change. */
	failure = verify_pull(io, name, path, strbuf_str(&workspace), rel, facts, single ? leaf : NULL,
	                      strbuf_str(&dest), total, &rel_facts, err);
	if (failure != EXTRACTION_OK)
		goto cleanup;

	RELAY_FAILPOINT("extract.after-pull");
	/* 6. The record. */
	json_object *entry = json_object_new_object();
	jsonx_add_str(entry, "name", name);
	jsonx_add_str(entry, "path", path);
	jsonx_add_str(entry, "kind", single ? "file" : "directory");
	jsonx_add_str(entry, "destination", strbuf_str(&dest));
	jsonx_add_int(entry, "files", (int64_t)json_object_array_length(rel_facts));
	jsonx_add_int(entry, "bytes", (int64_t)total);
	jsonx_add(entry, "facts", json_object_get(rel_facts));
	record_extraction(io, uuid, entry);
	*entry_out = entry;
	dest_made = false;
cleanup:
	if (failure == EXTRACTION_OK && *entry_out == NULL)
		failure = EXTRACTION_TRANSFER;
	if (dest_made) {
		relay_error ignored;
		fs_remove_tree(strbuf_str(&dest), &ignored);
		/* The output's folder too, when this pull was its only one. */
		strbuf parent = STRBUF_INIT;
		strbuf_printf(&parent, "%s/extractions/%s", io->evidence, name);
		rmdir(strbuf_str(&parent));
		strbuf_free(&parent);
	}
	if (failure == EXTRACTION_CANCELLED && err->message[0] == '\0')
		relay_error_set(err, RELAY_E_CANCELLED, 0, "the extraction of %s was cancelled", name);
	json_object_put(facts);
	json_object_put(rel_facts);
	strbuf_free(&base);
	strbuf_free(&workspace);
	strbuf_free(&dest);
	strbuf_free(&prefix);
	return failure;
}

static json_object *incomplete_entry(const char *name, const char *path, const char *error)
{
	json_object *e = json_object_new_object();
	jsonx_add_str(e, "name", name);
	jsonx_add_str(e, "path", path);
	jsonx_add_str(e, "error", error);
	return e;
}

static json_object *done_entry(const json_object *entry)
{
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "name", jsonx_get_str(entry, "name"));
	jsonx_add_str(d, "destination", jsonx_get_str(entry, "destination"));
	int64_t v = 0;
	jsonx_get_int(entry, "files", &v);
	jsonx_add_int(d, "files", v);
	jsonx_get_int(entry, "bytes", &v);
	jsonx_add_int(d, "bytes", v);
	return d;
}

extraction_failure extraction_pull_all(guest_io *io, bool strict_other, const char *operation,
                                       json_object **done_out, json_object **incomplete_out, relay_error *err)
{
	bool full = false;
	json_object *decl = extraction_declarations(io->m, io->g, &full);
	json_object *done = json_object_new_array(), *incomplete = json_object_new_array();
	extraction_failure result = EXTRACTION_OK;
	size_t n = decl ? json_object_array_length(decl) : 0;
	size_t total = n + (full ? 1 : 0);
	for (size_t i = 0; i < total; i++) {
		bool whole = i == n;
		json_object *d = whole ? NULL : json_object_array_get_idx(decl, i);
		const char *name = whole ? FULL_WORKSPACE : jsonx_get_str(d, "name");
		const char *path = whole ? "" : jsonx_get_str(d, "path");
		if (name == NULL || path == NULL)
			continue;
		if (relay_call_is_cancelled(io->call)) {
			result = EXTRACTION_CANCELLED;
			relay_error_set(err, RELAY_E_CANCELLED, 0,
			                "the call was cancelled before %s was pulled", name);
			break;
		}
		json_object *entry = NULL;
		relay_error e;
		memset(&e, 0, sizeof e);
		extraction_failure f = extraction_pull(io, name, path, whole, operation, &entry, &e);
		if (f == EXTRACTION_OK) {
			json_object_array_add(done, done_entry(entry));
			json_object_put(entry);
			continue;
		}
		bool recorded_only = f == EXTRACTION_MISSING && !whole;
		if (!strict_other && f != EXTRACTION_CANCELLED)
			recorded_only = true;
		if (!recorded_only) {
			result = f;
			*err = e;
			break;
		}
		json_object_array_add(incomplete, incomplete_entry(name, path, e.message));
		json_object *details = json_object_new_object();
		jsonx_add_str(details, "name", name);
		jsonx_add_str(details, "path", path);
		jsonx_add_str(details, "error", e.message);
		guest_event(io->m, io->g, whole ? "workspace-incomplete" : "extraction-incomplete",
		            f == EXTRACTION_MISSING ? "the declared output was never produced"
		                                    : "the declared output could not be pulled",
		            details);
	}
	json_object_put(decl);
	*done_out = done;
	*incomplete_out = incomplete;
	return result;
}

json_object *extraction_declaration(const json_object *decl, const char *name)
{
	size_t n = decl ? json_object_array_length((json_object *)decl) : 0;
	for (size_t i = 0; name && i < n; i++) {
		json_object *d = json_object_array_get_idx((json_object *)decl, i);
		const char *dn = jsonx_get_str(d, "name");
		if (dn && strcmp(dn, name) == 0)
			return d;
	}
	return NULL;
}

/* A failed pull of relay_extract: lastError, the operation-failed event,
 * and the outcome (facts already hold what was pulled). Returns -1. */
static int extract_failed(session_manager *m, guest *g, const char *name, const char *path,
                          extraction_failure f, const relay_error *err, relay_outcome *o)
{
	guest_set_last_error(m, g, "relay_extract of %s failed: %s", name, err->message);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "operation", "relay_extract");
	jsonx_add_str(details, "name", name);
	jsonx_add_str(details, "error", err->message);
	guest_event(m, g, "operation-failed", "relay_extract failed; the guest is kept", details);
	if (f == EXTRACTION_MISSING)
		return outcome_fail(o, "output-missing",
		                    "no file or directory at %s for output %s in guest %s; nothing "
		                    "was pulled for it",
		                    path, name, g->name);
	return outcome_fail(o, extraction_failure_code(f), "extraction of %s failed: %s; the guest is kept",
	                    name, err->message);
}

int extraction_pull_named(session_manager *m, guest *g, const json_object *names, const json_object *decl,
                          relay_call *call, relay_outcome *o)
{
	json_object *facts = outcome_facts(o);
	json_object *pulled = json_object_new_array();
	if (facts == NULL || pulled == NULL) {
		json_object_put(pulled);
		return outcome_fail(o, "internal", "out of memory extracting from guest %s", g->name);
	}
	jsonx_add_str(facts, "guest", g->name);
	jsonx_add(facts, "extractions", pulled); /* borrowed below, owned by the facts */
	guest_io io;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (gio_begin(&io, m, g, call, &err) != RELAY_OK) {
		json_object_object_del(facts, "guest");
		json_object_object_del(facts, "extractions");
		return outcome_fail(o, "transfer-failed", "cannot reach guest %s: %s", g->name, err.message);
	}
	io.receiver_ready = true;
	size_t n = names ? json_object_array_length((json_object *)names) : 0;
	for (size_t i = 0; i < n; i++) {
		const char *name = json_object_get_string(json_object_array_get_idx((json_object *)names, i));
		const char *path = jsonx_get_str(extraction_declaration(decl, name), "path");
		relay_call_progress(call, (double)i, (double)n, name, true);
		json_object *entry = NULL;
		memset(&err, 0, sizeof err);
		extraction_failure f = extraction_pull(&io, name, path, false, "extract", &entry, &err);
		if (f != EXTRACTION_OK) {
			gio_write_transfers(&io, "extract");
			gio_end(&io);
			return extract_failed(m, g, name, path, f, &err, o);
		}
		json_object_array_add(pulled, entry);
	}
	relay_call_progress(call, (double)n, (double)n, "done", true);
	gio_write_transfers(&io, "extract");
	gio_end(&io);
	return 0;
}
