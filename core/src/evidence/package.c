/*
 * Delivery of an evidence package (package.h; spec/evidence.md §3, §4, §6, §7,
 * §9.1 step 7): the manifest written, OPENING.txt and the viewer, the
 * merge of pulled state, the space precheck and the sibling records. The
 * file checks are verify.h; the review derivation review.h.
 */
#include "evidence/package.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "evidence/archive.h"
#include "evidence/viewer.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/timefmt.h"

enum { MAX_MANIFEST_BYTES = 256 << 20 };

static bool str_eq(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

static char *read_session_id(const char *package_dir)
{
	char *p = fs_path_join(package_dir, "state/session.json");
	json_object *s = NULL;
	char *sid = NULL;
	if (p && fs_read_json(p, 1 << 20, &s, NULL) == RELAY_OK && jsonx_get_str(s, "sessionId"))
		sid = strdup(jsonx_get_str(s, "sessionId"));
	json_object_put(s);
	free(p);
	return sid;
}

static const char *folder_name(const char *dir, char *buf, size_t n)
{
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	size_t start = len;
	while (start > 0 && dir[start - 1] != '/')
		start--;
	snprintf(buf, n, "%.*s", (int)(len - start), dir + start);
	return buf;
}

relay_status evidence_manifest_build(const char *package_dir, const evidence_delivery_options *opts,
                                     json_object **manifest_out, relay_error *err)
{
	*manifest_out = NULL;
	relay_status status = RELAY_OK;
	fw_tree tree = {0};
	evidence_file_hash *items = NULL;
	json_object *journal = NULL, *lines = NULL, *m = NULL;
	char *sid_file = NULL;
	const char *skip[] = {"manifest.json", NULL};
	status = fw_walk(package_dir, false, skip, &tree, err);
	if (status != RELAY_OK)
		goto cleanup;
	items = calloc(tree.count ? tree.count : 1, sizeof *items);
	if (items == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	size_t n = 0;
	for (size_t i = 0; i < tree.count; i++) {
		const fw_entry *e = &tree.items[i];
		if (!evidence_package_path_ok(e->path)) {
			status = relay_error_set(
			    err, RELAY_E_UNSAFE_PATH, 0,
			    "package verification failed: %s: name not allowed in an evidence package",
			    e->path);
			goto cleanup;
		}
		if (e->kind == FW_DIR)
			continue;
		if (e->kind != FW_FILE || e->nlink > 1) {
			status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
			                         "package verification failed: %s: %s", e->path,
			                         e->kind == FW_LINK    ? "a symbolic link"
			                         : e->kind == FW_OTHER ? "not a regular file"
			                                               : "a hard link (more than one link)");
			goto cleanup;
		}
		items[n++].path = e->path;
	}
	status = evidence_hash_files(package_dir, items, n, opts ? opts->hash_threads : 0, err);
	if (status != RELAY_OK)
		goto cleanup;
	for (size_t i = 0; i < n; i++)
		if (items[i].status != RELAY_OK) {
			status = relay_error_set(err, items[i].status, 0, "cannot hash %s: %s", items[i].path,
			                         items[i].error);
			goto cleanup;
		}
	const char *sid = opts ? opts->identity.session_id : NULL;
	if (sid == NULL)
		sid = sid_file = read_session_id(package_dir);
	relay_error jerr = {0};
	if (evidence_journal_load(package_dir, &journal, &jerr) != RELAY_OK) {
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0, "package verification failed: %s",
		                         jerr.message);
		goto cleanup;
	}
	if (sid == NULL && json_object_array_length(journal) > 0)
		sid = jsonx_get_str(json_object_array_get_idx(journal, 0), "sessionId");
	if (sid == NULL) {
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                         "package verification failed: state/session.json: no sessionId");
		goto cleanup;
	}
	lines = evidence_snapshot_lines(journal, sid);
	char folder[256], pkg[300];
	folder_name(package_dir, folder, sizeof folder);
	snprintf(pkg, sizeof pkg, "pkg-%s", folder);
	char created[25];
	time_format_iso_millis(opts && opts->now_ms ? opts->now_ms : clock_now_ms(), created);
	m = json_object_new_object();
	jsonx_add_int(m, "manifestVersion", EVIDENCE_MANIFEST_VERSION);
	jsonx_add_str(m, "packageId", opts && opts->identity.package_id ? opts->identity.package_id : pkg);
	jsonx_add_str(m, "taskId", opts && opts->identity.task_id ? opts->identity.task_id : folder);
	jsonx_add_str(m, "sessionId", sid);
	jsonx_add_str(m, "guest", opts && opts->identity.guest ? opts->identity.guest : "");
	jsonx_add_str(m, "createdAt",
	              opts && opts->identity.delivered_at ? opts->identity.delivered_at : created);
	json_object *gen = json_object_new_object();
	jsonx_add_str(gen, "name", "mcp-relay");
	jsonx_add_str(gen, "version", opts && opts->relay_version ? opts->relay_version : RELAY_VERSION);
	jsonx_add(m, "generator", gen);
	jsonx_add_str(m, "hashAlgorithm", "sha256");
	json_object *records = json_object_new_array(), *snaps = json_object_new_array(),
	            *atts = json_object_new_array();
	/* tree is sorted by path in byte order, so each array is too. */
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_new_object();
		jsonx_add_str(e, "path", items[i].path);
		jsonx_add_str(e, "sha256", items[i].sha256);
		jsonx_add_int(e, "bytes", (int64_t)items[i].bytes);
		if (evidence_is_snapshot_path(items[i].path)) {
			const char *base = strrchr(items[i].path, '/') + 1;
			json_object *line = NULL;
			if (!json_object_object_get_ex(lines, base, &line)) {
				json_object_put(e);
				json_object_put(records);
				json_object_put(snaps);
				json_object_put(atts);
				status = relay_error_set(
				    err, RELAY_E_INTEGRITY, 0,
				    "package verification failed: %s: a snapshot file without a "
				    "snapshot-captured line",
				    items[i].path);
				goto cleanup;
			}
			evidence_snapshot_fields(e, line);
			json_object_array_add(snaps, e);
		} else if (has_prefix(items[i].path, "extractions/")) {
			jsonx_add_str(e, "declaredType", "declared-extraction");
			const char *name = items[i].path + strlen("extractions/");
			const char *slash = strchr(name, '/');
			jsonx_add_strn(e, "name", name, slash ? (size_t)(slash - name) : strlen(name));
			json_object_array_add(atts, e);
		} else {
			json_object_array_add(records, e);
		}
	}
	jsonx_add(m, "records", records);
	jsonx_add(m, "snapshots", snaps);
	jsonx_add(m, "attachments", atts);
	jsonx_add(m, "media", json_object_new_array());
	jsonx_add(m, "segments", json_object_new_array());
	jsonx_add(m, "attempts", json_object_new_array());
	*manifest_out = m;
	m = NULL;
cleanup:
	json_object_put(m);
	json_object_put(lines);
	json_object_put(journal);
	free(sid_file);
	free(items);
	fw_tree_free(&tree);
	return status;
}

relay_status evidence_package_verify(const char *package_dir, const char *project_dir, fw_strlist *errors_out,
                                     relay_error *err)
{
	evidence_review_options ro = {.verify = true, .project_dir = project_dir};
	json_object *review = NULL;
	relay_status status = evidence_review_derive(package_dir, &ro, &review, err);
	if (status != RELAY_OK)
		return status;
	json_object *errs = jsonx_get_array(jsonx_get_obj(review, "verification"), "errors");
	size_t n = errs ? json_object_array_length(errs) : 0;
	for (size_t i = 0; i < n && errors_out; i++)
		fw_strlist_push(errors_out, json_object_get_string(json_object_array_get_idx(errs, i)));
	if (n > 0)
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0, "%s%s",
		                         json_object_get_string(json_object_array_get_idx(errs, 0)),
		                         n > 1 ? " (and more)" : "");
	json_object_put(review);
	return status;
}

/* ---- OPENING.txt ----------------------------------------------------------------- */

void evidence_render_opening(const json_object *review, const evidence_identity *identity,
                             const char *relay_version, strbuf *out)
{
	evidence_identity id = {0};
	if (identity)
		id = *identity;
	const char *task = id.task_id ? id.task_id : jsonx_get_str(review, "taskId");
	const char *guest = id.guest ? id.guest : jsonx_get_str(review, "guest");
	const char *image = id.image ? id.image : jsonx_get_str(review, "image");
	const char *acq = id.acquired_at ? id.acquired_at : jsonx_get_str(review, "acquiredAt");
	const char *del = id.delivered_at ? id.delivered_at : jsonx_get_str(review, "deliveredAt");
	json_object *steps = jsonx_get_array(review, "steps");
	json_object *findings = jsonx_get_array(review, "findings");
	strbuf_printf(
	    out,
	    "mcp-relay evidence package\n"
	    "\n"
	    "Task       %s   (guest %s, image %s)\n"
	    "Recording  %s\n"
	    "Acquired   %s\n"
	    "Delivered  %s\n"
	    "Relay      mcp-relay %s\n"
	    "\n"
	    "Start here\n"
	    "- Open index.html in a browser. It shows every step with its reason, its before and\n"
	    "  after screenshots and its output. It needs no network and runs no scripts.\n"
	    "- For the verdicts under the current rules, run:  mcp-relay review <this folder>\n"
	    "  It checks every file against manifest.json first, then derives the steps.\n"
	    "\n"
	    "Two verdicts, read separately\n"
	    "- Snapshots: complete or incomplete. Incomplete means some step lacks a screenshot it\n"
	    "  planned; judge that step from its output.\n"
	    "- Execution: passed, failed or uncertain. Uncertain means the relay cannot tell whether\n"
	    "  a step ran or how it ended.\n"
	    "A package that verifies proves the evidence is intact. It does not prove the task\n"
	    "succeeded; a person still has to look.\n"
	    "\n"
	    "At delivery the verdicts were: snapshots %s, execution\n"
	    "%s, %zu steps, %zu findings. A later review may differ if the\n"
	    "rules have changed; the review is authoritative.\n"
	    "\n"
	    "What is where\n"
	    "- state/        the guest's recording as pulled: journal, records, receipts, screenshots\n"
	    "- host/         what the relay did and saw: reasons, submissions, requests, receipts,\n"
	    "                transfers, diagnostics, image deliveries, lifecycle events\n"
	    "- extractions/  the declared outputs, one folder per declared name\n"
	    "- manifest.json SHA-256 and size of every file except itself\n",
	    task ? task : "(unknown)", guest ? guest : "(unknown)", image ? image : "(unknown)",
	    jsonx_get_str(review, "sessionId") ? jsonx_get_str(review, "sessionId") : "(unknown)",
	    acq ? acq : "(not recorded)", del ? del : "(not recorded)",
	    relay_version ? relay_version : RELAY_VERSION,
	    jsonx_get_str(review, "completeness") ? jsonx_get_str(review, "completeness") : "incomplete",
	    jsonx_get_str(review, "execution") ? jsonx_get_str(review, "execution") : "uncertain",
	    steps ? json_object_array_length(steps) : 0, findings ? json_object_array_length(findings) : 0);
}

/* ---- delivery ---------------------------------------------------------------------- */

static relay_status write_new(int root_fd, const char *rel, const void *data, size_t len, relay_error *err)
{
	int fd = openat(root_fd, rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot create %s: %s", rel, strerror(errno));
	relay_status status = fs_write_all(fd, data, len, rel, err);
	if (status == RELAY_OK && fsync(fd) != 0)
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s: %s", rel, strerror(errno));
	close(fd);
	if (status != RELAY_OK)
		unlinkat(root_fd, rel, 0);
	return status;
}

/* host/steps/<executionId>/<rel> -> <rel>, then host/steps/ is removed. */
static relay_status merge_steps(const char *package_dir, int root_fd, relay_error *err)
{
	char *steps_dir = fs_path_join(package_dir, "host/steps");
	fw_tree tree = {0};
	relay_status status = RELAY_OK;
	if (steps_dir == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	status = fw_walk(steps_dir, true, NULL, &tree, err);
	if (status != RELAY_OK)
		goto cleanup;
	for (size_t i = 0; i < tree.count; i++) {
		const fw_entry *e = &tree.items[i];
		if (e->kind == FW_DIR)
			continue;
		const char *slash = strchr(e->path, '/');
		if (e->kind != FW_FILE || slash == NULL || !evidence_package_path_ok(slash + 1)) {
			status =
			    relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
			                    "host/steps/%s: not a regular file of a step download", e->path);
			goto cleanup;
		}
		const char *rel = slash + 1;
		char src[PATH_MAX];
		snprintf(src, sizeof src, "host/steps/%s", e->path);
		relay_error ignored;
		int probe = fw_open_file_read_at(root_fd, rel, &ignored);
		if (probe >= 0) {
			char a[65], b[65];
			uint64_t an = 0, bn = 0;
			relay_status s1 = sha256_fd_hex(probe, a, &an, err);
			close(probe);
			int in = s1 == RELAY_OK ? fw_open_file_read_at(root_fd, src, err) : -1;
			if (in < 0) {
				status = err ? err->code : RELAY_E_IO;
				goto cleanup;
			}
			relay_status s2 = sha256_fd_hex(in, b, &bn, err);
			close(in);
			if (s2 != RELAY_OK) {
				status = s2;
				goto cleanup;
			}
			if (an != bn || strcmp(a, b) != 0) {
				status = relay_error_set(
				    err, RELAY_E_INTEGRITY, 0,
				    "%s differs from its step download %s; both are kept, delivery "
				    "stopped",
				    rel, src);
				goto cleanup;
			}
			continue;
		}
		if (ignored.code != RELAY_E_NOT_FOUND) {
			status = relay_error_set(err, ignored.code, 0, "%s", ignored.message);
			goto cleanup;
		}
		status = evidence_copy_rel(root_fd, src, root_fd, rel, err);
		if (status != RELAY_OK)
			goto cleanup;
	}
	status = fs_remove_tree(steps_dir, err);
cleanup:
	fw_tree_free(&tree);
	free(steps_dir);
	return status;
}

void evidence_delivery_result_free(evidence_delivery_result *result)
{
	if (result == NULL)
		return;
	json_object_put(result->review);
	memset(result, 0, sizeof *result);
}

relay_status evidence_package_remove_derived(const char *package_dir, relay_error *err)
{
	int root = fw_open_root(package_dir);
	if (root < 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot open %s: %s", package_dir,
		                       strerror(errno));
	const char *names[] = {"manifest.json", "index.html", "OPENING.txt"};
	relay_status status = RELAY_OK;
	for (size_t i = 0; i < 3; i++)
		if (unlinkat(root, names[i], 0) != 0 && errno != ENOENT)
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot remove %s/%s: %s",
			                         package_dir, names[i], strerror(errno));
	close(root);
	return status;
}

/* Step 4 of a delivery: derives the review (into *review_out) and writes
 * OPENING.txt, index.html and manifest.json, marking in made[] each file
 * written. */
static relay_status write_derived(const char *package_dir, int root, const evidence_delivery_options *opts,
                                  json_object **review_out, bool made[3], relay_error *err)
{
	relay_status status = RELAY_OK;
	json_object *manifest = NULL;
	strbuf text = STRBUF_INIT;
	evidence_review_options ro = {
	    .verify = false, .project_dir = opts->project_dir, .identity = &opts->identity};
	status = evidence_review_derive(package_dir, &ro, review_out, err);
	if (status != RELAY_OK)
		goto done;
	if (!evidence_review_verified(*review_out)) {
		json_object *errs = jsonx_get_array(jsonx_get_obj(*review_out, "verification"), "errors");
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0, "%s",
		                         errs && json_object_array_length(errs)
		                             ? json_object_get_string(json_object_array_get_idx(errs, 0))
		                             : "package verification failed: the derivation failed");
		goto done;
	}
	evidence_render_opening(*review_out, &opts->identity, opts->relay_version, &text);
	if (!strbuf_ok(&text)) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto done;
	}
	status = write_new(root, "OPENING.txt", text.data, text.len, err);
	if (status != RELAY_OK)
		goto done;
	made[0] = true;
	strbuf_reset(&text);
	evidence_viewer_render(*review_out, &text);
	if (!strbuf_ok(&text)) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto done;
	}
	status = write_new(root, "index.html", text.data, text.len, err);
	if (status != RELAY_OK)
		goto done;
	made[1] = true;
	status = evidence_manifest_build(package_dir, opts, &manifest, err);
	if (status != RELAY_OK)
		goto done;
	strbuf_reset(&text);
	jsonx_write(&text, manifest, JSONX_PRETTY);
	strbuf_putc(&text, '\n');
	if (!strbuf_ok(&text)) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto done;
	}
	if ((status = RELAY_FAILPOINT_ERROR("finish.before-manifest", err)) != RELAY_OK)
		goto done;
	status = write_new(root, "manifest.json", text.data, text.len, err);
	if (status != RELAY_OK)
		goto done;
	made[2] = true;
	RELAY_FAILPOINT("finish.after-manifest");
done:
	json_object_put(manifest);
	strbuf_free(&text);
	return status;
}

relay_status evidence_package_deliver(const char *package_dir, const evidence_delivery_options *opts_in,
                                      evidence_delivery_result *result, relay_error *err)
{
	evidence_delivery_options opts = {0};
	if (opts_in)
		opts = *opts_in;
	memset(result, 0, sizeof *result);
	relay_status status = RELAY_OK;
	int root = fw_open_root(package_dir);
	bool made[3] = {false, false, false}; /* OPENING.txt, index.html, manifest.json */
	json_object *existing = NULL, *review = NULL;
	char *sid_file = NULL;
	char folder[256], pkg[300], created[25];
	if (root < 0)
		return relay_error_set(
		    err, errno == ELOOP || errno == ENOTDIR ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
		    "cannot open evidence folder %s: %s", package_dir, strerror(errno));
	folder_name(package_dir, folder, sizeof folder);
	snprintf(pkg, sizeof pkg, "pkg-%s", folder);
	if (opts.identity.package_id == NULL)
		opts.identity.package_id = pkg;
	if (opts.identity.task_id == NULL)
		opts.identity.task_id = folder;
	if (opts.identity.session_id == NULL)
		opts.identity.session_id = sid_file = read_session_id(package_dir);
	time_format_iso_millis(opts.now_ms ? opts.now_ms : clock_now_ms(), created);
	if (opts.identity.delivered_at == NULL)
		opts.identity.delivered_at = created;
	if (opts.relay_version == NULL)
		opts.relay_version = RELAY_VERSION;

	/* 1. An existing manifest: same identity re-verifies, another is sealed. */
	char *mp = fs_path_join(package_dir, "manifest.json");
	if (mp != NULL && fs_exists_nofollow(mp)) {
		relay_error rerr = {0};
		if (fs_read_json(mp, MAX_MANIFEST_BYTES, &existing, &rerr) == RELAY_OK &&
		    str_eq(jsonx_get_str(existing, "packageId"), opts.identity.package_id) &&
		    str_eq(jsonx_get_str(existing, "taskId"), opts.identity.task_id) &&
		    str_eq(jsonx_get_str(existing, "sessionId"), opts.identity.session_id)) {
			free(mp);
			result->delivered = true;
			result->reverified_only = true;
			goto verify;
		}
		free(mp);
		status = relay_error_set(
		    err, RELAY_E_REFUSED, 0,
		    "sealed: %s already has a manifest of another identity; it is never rewritten",
		    package_dir);
		goto cleanup;
	}
	free(mp);

	/* 2. Step downloads into place. 3. Stale derived files. */
	status = merge_steps(package_dir, root, err);
	if (status != RELAY_OK)
		goto cleanup;
	unlinkat(root, "OPENING.txt", 0);
	unlinkat(root, "index.html", 0);

	/* 4. Derive, then write OPENING.txt, index.html, manifest.json. */
	status = write_derived(package_dir, root, &opts, &review, made, err);
	if (status != RELAY_OK)
		goto cleanup;
	result->delivered = true;
	if (fsync(root) != 0 && errno != EINVAL) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s: %s", package_dir,
		                         strerror(errno));
		goto cleanup;
	}

verify:
	/* 5. Verify (§11). */
	json_object_put(review);
	review = NULL;
	{
		evidence_review_options vo = {.verify = true, .project_dir = opts.project_dir};
		status = evidence_review_derive(package_dir, &vo, &review, err);
		if (status != RELAY_OK)
			goto cleanup;
		if (!evidence_review_verified(review)) {
			json_object *errs = jsonx_get_array(jsonx_get_obj(review, "verification"), "errors");
			size_t n = errs ? json_object_array_length(errs) : 0;
			status =
			    relay_error_set(err, RELAY_E_INTEGRITY, 0, "%s%s",
			                    n ? json_object_get_string(json_object_array_get_idx(errs, 0))
			                      : "package verification failed",
			                    n > 1 ? " (and more)" : "");
			goto cleanup;
		}
	}
	result->verified = true;
cleanup:
	if (status != RELAY_OK) {
		/* Remove only the derived files this attempt created. */
		const char *names[] = {"OPENING.txt", "index.html", "manifest.json"};
		for (int i = 2; i >= 0; i--)
			if (made[i])
				unlinkat(root, names[i], 0);
		if (made[2])
			result->delivered = false;
	}
	result->review = review;
	if (review) {
		result->completeness = jsonx_get_str(review, "completeness");
		result->execution = jsonx_get_str(review, "execution");
	}
	json_object_put(existing);
	free(sid_file);
	close(root);
	return status;
}
