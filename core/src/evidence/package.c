/*
 * Delivery of an evidence package (package.h; evidence.md §3, §4, §6, §7,
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

static relay_status copy_fd_to(int in, int out, const char *what, relay_error *err)
{
	unsigned char *buf = malloc(1 << 20);
	if (buf == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	relay_status status = RELAY_OK;
	for (;;) {
		ssize_t n = read(in, buf, 1 << 20);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot read %s: %s", what,
			                         strerror(errno));
			break;
		}
		if (n == 0)
			break;
		status = fs_write_all(out, buf, (size_t)n, what, err);
		if (status != RELAY_OK)
			break;
	}
	free(buf);
	if (status == RELAY_OK && fsync(out) != 0)
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s: %s", what, strerror(errno));
	return status;
}

/* Copies src_rel (below src_root) to dst_rel (below dst_root), link-safely,
 * O_EXCL, 0600, folders 0700. */
static relay_status copy_rel(int src_root, const char *src_rel, int dst_root, const char *dst_rel,
                             relay_error *err)
{
	int in = fw_open_file_read_at(src_root, src_rel, err);
	if (in < 0)
		return err ? err->code : RELAY_E_IO;
	int out = fw_create_file_at(dst_root, dst_rel, 0600, NULL, err);
	if (out < 0) {
		close(in);
		return err ? err->code : RELAY_E_IO;
	}
	relay_status status = copy_fd_to(in, out, dst_rel, err);
	close(in);
	close(out);
	if (status != RELAY_OK)
		fw_unlink_at(dst_root, dst_rel, NULL);
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
		status = copy_rel(root_fd, src, root_fd, rel, err);
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
	json_object *existing = NULL, *review = NULL, *manifest = NULL;
	strbuf text = STRBUF_INIT;
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
	evidence_review_options ro = {
	    .verify = false, .project_dir = opts.project_dir, .identity = &opts.identity};
	status = evidence_review_derive(package_dir, &ro, &review, err);
	if (status != RELAY_OK)
		goto cleanup;
	if (!evidence_review_verified(review)) {
		json_object *errs = jsonx_get_array(jsonx_get_obj(review, "verification"), "errors");
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0, "%s",
		                         errs && json_object_array_length(errs)
		                             ? json_object_get_string(json_object_array_get_idx(errs, 0))
		                             : "package verification failed: the derivation failed");
		goto cleanup;
	}
	evidence_render_opening(review, &opts.identity, opts.relay_version, &text);
	if (!strbuf_ok(&text)) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	status = write_new(root, "OPENING.txt", text.data, text.len, err);
	if (status != RELAY_OK)
		goto cleanup;
	made[0] = true;
	strbuf_reset(&text);
	evidence_viewer_render(review, &text);
	if (!strbuf_ok(&text)) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	status = write_new(root, "index.html", text.data, text.len, err);
	if (status != RELAY_OK)
		goto cleanup;
	made[1] = true;
	status = evidence_manifest_build(package_dir, &opts, &manifest, err);
	if (status != RELAY_OK)
		goto cleanup;
	strbuf_reset(&text);
	jsonx_write(&text, manifest, JSONX_PRETTY);
	strbuf_putc(&text, '\n');
	if (!strbuf_ok(&text)) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	status = write_new(root, "manifest.json", text.data, text.len, err);
	if (status != RELAY_OK)
		goto cleanup;
	made[2] = true;
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
	json_object_put(manifest);
	strbuf_free(&text);
	free(sid_file);
	close(root);
	return status;
}

/* ---- merge of pulled state (§7) ---------------------------------------------------- */

static relay_status copy_tree(const char *src, const char *dst, relay_error *err)
{
	fw_tree tree = {0};
	relay_status status = fw_walk(src, false, NULL, &tree, err);
	if (status != RELAY_OK)
		return status;
	if (mkdir(dst, 0700) != 0 && errno != EEXIST) {
		fw_tree_free(&tree);
		return relay_error_set(err, RELAY_E_IO, errno, "cannot create %s: %s", dst, strerror(errno));
	}
	int s = fw_open_root(src), d = fw_open_root(dst);
	if (s < 0 || d < 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot open %s or %s", src, dst);
		goto cleanup;
	}
	for (size_t i = 0; i < tree.count && status == RELAY_OK; i++)
		if (tree.items[i].kind == FW_FILE)
			status = copy_rel(s, tree.items[i].path, d, tree.items[i].path, err);
cleanup:
	if (s >= 0)
		close(s);
	if (d >= 0)
		close(d);
	fw_tree_free(&tree);
	return status;
}

relay_status evidence_state_merge(const char *package_dir, const char *incoming_state,
                                  const char *attempts_dir, relay_error *err)
{
	relay_status status = RELAY_OK;
	char *state = fs_path_join(package_dir, "state");
	char *manifest = fs_path_join(package_dir, "manifest.json");
	char *prev_root = fs_path_join(attempts_dir, "previous");
	char real_in[PATH_MAX], real_pkg[PATH_MAX], set_aside[PATH_MAX] = "";
	fw_tree incoming = {0}, old = {0};
	int in_fd = -1, old_fd = -1, new_fd = -1;
	bool moved_old = false;
	if (state == NULL || manifest == NULL || prev_root == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	if (fs_exists_nofollow(manifest)) {
		status =
		    relay_error_set(err, RELAY_E_REFUSED, 0,
		                    "sealed: %s has a manifest; its state is never changed", package_dir);
		goto cleanup;
	}
	if (realpath(incoming_state, real_in) == NULL || realpath(package_dir, real_pkg) == NULL) {
		status = relay_error_set(err, RELAY_E_NOT_FOUND, errno, "cannot resolve %s or %s: %s",
		                         incoming_state, package_dir, strerror(errno));
		goto cleanup;
	}
	size_t li = strlen(real_in), lp = strlen(real_pkg);
	if ((strncmp(real_in, real_pkg, lp) == 0 && (real_in[lp] == '/' || real_in[lp] == '\0')) ||
	    (strncmp(real_pkg, real_in, li) == 0 && (real_pkg[li] == '/' || real_pkg[li] == '\0'))) {
		status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                         "refused: the incoming state %s and the package %s overlap", real_in,
		                         real_pkg);
		goto cleanup;
	}
	status = fw_walk(incoming_state, false, NULL, &incoming, err);
	if (status != RELAY_OK)
		goto cleanup;
	for (size_t i = 0; i < incoming.count; i++) {
		const fw_entry *e = &incoming.items[i];
		char rel[PATH_MAX];
		snprintf(rel, sizeof rel, "state/%s", e->path);
		if (!evidence_package_path_ok(rel) || e->kind == FW_LINK || e->kind == FW_OTHER ||
		    (e->kind == FW_FILE && e->nlink > 1)) {
			status = relay_error_set(
			    err, RELAY_E_UNSAFE_PATH, 0,
			    "refused: incoming %s is a link, a special file or has an unsafe name", e->path);
			goto cleanup;
		}
	}
	/* A snapshot with other bytes than the package's copy stops the merge. */
	status = fw_walk(state, true, NULL, &old, err);
	if (status != RELAY_OK)
		goto cleanup;
	in_fd = fw_open_root(incoming_state);
	old_fd = old.count ? fw_open_root(state) : -1;
	for (size_t i = 0; i < incoming.count && old_fd >= 0; i++) {
		const fw_entry *e = &incoming.items[i];
		if (e->kind != FW_FILE || !has_prefix(e->path, "snapshots/"))
			continue;
		for (size_t k = 0; k < old.count; k++) {
			if (old.items[k].kind != FW_FILE || strcmp(old.items[k].path, e->path) != 0)
				continue;
			char a[65], b[65];
			uint64_t an = 0, bn = 0;
			int fa = fw_open_file_read_at(in_fd, e->path, err),
			    fb = fw_open_file_read_at(old_fd, e->path, err);
			relay_status sa = fa >= 0 ? sha256_fd_hex(fa, a, &an, err) : RELAY_E_IO;
			relay_status sb = fb >= 0 ? sha256_fd_hex(fb, b, &bn, err) : RELAY_E_IO;
			if (fa >= 0)
				close(fa);
			if (fb >= 0)
				close(fb);
			if (sa != RELAY_OK || sb != RELAY_OK || an != bn || strcmp(a, b) != 0) {
				status = relay_error_set(
				    err, RELAY_E_INTEGRITY, 0,
				    "state/%s: the pulled snapshot has other bytes than the one "
				    "already in the package; nothing was merged",
				    e->path);
				goto cleanup;
			}
		}
	}
	/* Set the current state aside. */
	if (old_fd >= 0 || fs_is_dir(state)) {
		status = fs_mkdir_p(prev_root, 0700, err);
		if (status != RELAY_OK)
			goto cleanup;
		for (unsigned n = 1; n < 100000; n++) {
			snprintf(set_aside, sizeof set_aside, "%s/attempt-%04u", prev_root, n);
			if (mkdir(set_aside, 0700) == 0)
				break;
			if (errno != EEXIST) {
				status = relay_error_set(err, RELAY_E_IO, errno, "cannot create %s: %s",
				                         set_aside, strerror(errno));
				goto cleanup;
			}
		}
		strncat(set_aside, "/state", sizeof set_aside - strlen(set_aside) - 1);
		if (rename(state, set_aside) != 0) {
			if (errno != EXDEV) {
				status = relay_error_set(err, RELAY_E_IO, errno, "cannot set %s aside: %s",
				                         state, strerror(errno));
				goto cleanup;
			}
			status = copy_tree(state, set_aside, err);
			if (status == RELAY_OK)
				status = fs_remove_tree(state, err);
			if (status != RELAY_OK)
				goto cleanup;
		}
		moved_old = true;
	}
	/* The incoming tree takes its place. */
	if (rename(incoming_state, state) != 0) {
		if (errno != EXDEV) {
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot move %s into place: %s",
			                         incoming_state, strerror(errno));
			if (moved_old)
				rename(set_aside, state);
			goto cleanup;
		}
		status = copy_tree(incoming_state, state, err);
		if (status != RELAY_OK) {
			fs_remove_tree(state, NULL);
			if (moved_old)
				rename(set_aside, state);
			goto cleanup;
		}
		fs_remove_tree(incoming_state, NULL);
	}
	/* Snapshots the old state had and the incoming tree lacks come back. */
	if (moved_old) {
		int aside_fd = fw_open_root(set_aside);
		new_fd = fw_open_root(state);
		for (size_t k = 0; k < old.count && aside_fd >= 0 && new_fd >= 0 && status == RELAY_OK; k++) {
			const fw_entry *e = &old.items[k];
			if (e->kind != FW_FILE || !has_prefix(e->path, "snapshots/"))
				continue;
			bool present = false;
			for (size_t i = 0; i < incoming.count && !present; i++)
				present = strcmp(incoming.items[i].path, e->path) == 0;
			if (!present)
				status = copy_rel(aside_fd, e->path, new_fd, e->path, err);
		}
		if (aside_fd >= 0)
			close(aside_fd);
	}
cleanup:
	if (in_fd >= 0)
		close(in_fd);
	if (old_fd >= 0)
		close(old_fd);
	if (new_fd >= 0)
		close(new_fd);
	fw_tree_free(&incoming);
	fw_tree_free(&old);
	free(state);
	free(manifest);
	free(prev_root);
	return status;
}

/* ---- space precheck (§6) ------------------------------------------------------------- */

relay_status evidence_space_check(const char *path, uint64_t needed_bytes, const char *operation,
                                  const char *consequence, evidence_space *out, relay_error *err)
{
	struct statvfs vfs;
	evidence_space s = {needed_bytes, 0, 0};
	if (statvfs(path, &vfs) != 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot read the free space of %s: %s", path,
		                       strerror(errno));
	s.free_bytes = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
	s.short_bytes = needed_bytes > s.free_bytes ? needed_bytes - s.free_bytes : 0;
	if (out)
		*out = s;
	if (s.short_bytes > 0)
		return relay_error_set(
		    err, RELAY_E_NO_SPACE, ENOSPC, "%s needs %llu bytes; %llu free; %llu short%s%s",
		    operation ? operation : "the operation", (unsigned long long)s.needed_bytes,
		    (unsigned long long)s.free_bytes, (unsigned long long)s.short_bytes,
		    consequence ? "; " : "", consequence ? consequence : "");
	return RELAY_OK;
}

/* ---- sibling records ----------------------------------------------------------------- */

static char *sibling(const char *package_dir, const char *suffix)
{
	size_t len = strlen(package_dir);
	while (len > 1 && package_dir[len - 1] == '/')
		len--;
	size_t n = len + strlen(suffix) + 1;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%.*s%s", (int)len, package_dir, suffix);
	return p;
}

/* Writes `record` (taken; NULL when it could not be made) durably beside
 * the package as <package_dir><suffix>. */
static relay_status write_sibling_record(const char *package_dir, const char *suffix, json_object *record,
                                         relay_error *err)
{
	char *path = sibling(package_dir, suffix);
	relay_status status = path != NULL && record != NULL
	                          ? fs_write_json_durable(path, record, err)
	                          : relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	json_object_put(record);
	free(path);
	return status;
}

relay_status evidence_write_lifecycle(const char *package_dir, const evidence_lifecycle_record *rec,
                                      relay_error *err)
{
	json_object *o = json_object_new_object();
	if (o != NULL) {
		char at[25];
		time_format_iso_millis(rec->finished_at_ms ? rec->finished_at_ms : clock_now_ms(), at);
		jsonx_add_str(o, "purpose", rec->purpose);
		jsonx_add_str(o, "vm", rec->vm);
		jsonx_add_bool(o, "released", rec->released);
		jsonx_add_str(o, "reason", rec->reason);
		jsonx_add_bool(o, "failed", rec->failed);
		jsonx_add_bool(o, "delivered", rec->delivered);
		jsonx_add_str(o, "finishedAt", at);
	}
	return write_sibling_record(package_dir, ".lifecycle.json", o, err);
}

relay_status evidence_write_delivery_error(const char *package_dir, const char *error_text, int64_t at_ms,
                                           relay_error *err)
{
	json_object *o = json_object_new_object();
	if (o != NULL) {
		char at[25];
		time_format_iso_millis(at_ms ? at_ms : clock_now_ms(), at);
		jsonx_add_str(o, "error", error_text ? error_text : "");
		jsonx_add_str(o, "at", at);
	}
	return write_sibling_record(package_dir, ".delivery-error.json", o, err);
}
