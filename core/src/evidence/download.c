#include "evidence/download.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evidence/archive.h"
#include "evidence/fswalk.h"
#include "receiver_records.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

static bool id_ok(const char *id)
{
	if (id == NULL || id[0] == '\0' || strlen(id) > 160)
		return false;
	for (const char *p = id; *p; p++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return id[0] != '.' && id[0] != '-' && id[0] != '_';
}

static bool add_expected(json_object *arr, const char *path, int64_t bytes, const char *sha)
{
	for (size_t i = 0; i < json_object_array_length(arr); i++)
		if (strcmp(jsonx_get_str(json_object_array_get_idx(arr, i), "path"), path) == 0)
			return true;
	json_object *o = json_object_new_object();
	if (o == NULL || json_object_array_add(arr, o) != 0 || !jsonx_add_str(o, "path", path))
		return false;
	if (bytes >= 0)
		jsonx_add_int(o, "bytes", bytes);
	if (sha != NULL)
		jsonx_add_str(o, "sha256", sha);
	return true;
}

/* The step's screen recording (receipt key videoEvidence), pinned to the
 * receipt's size and SHA-256. false with err set on a malformed one. */
static bool add_video_expected(json_object *arr, const char *execution_id, const json_object *receipt,
                               relay_error *err)
{
	json_object *v = jsonx_get_obj(receipt, RECEIVER_RECEIPT_VIDEO);
	const char *status = jsonx_get_str(v, "status");
	if (status == NULL || strcmp(status, "recorded") != 0)
		return true;
	const char *sid = jsonx_get_str(v, "sessionId");
	const char *name = jsonx_get_str(v, "fileName");
	const char *sha = jsonx_get_str(v, "sha256");
	int64_t bytes = -1;
	if (!id_ok(sid) || !id_ok(name) || !sha256_hex_valid(sha) || !jsonx_get_int(v, "bytes", &bytes) ||
	    bytes < 1 || (uint64_t)bytes > RECEIVER_VIDEO_MAX_BYTES) {
		relay_error_set(err, RELAY_E_PROTOCOL, 0, "the receipt of %s has a malformed videoEvidence",
		                execution_id);
		return false;
	}
	char path[512];
	snprintf(path, sizeof path, "%s/%s/%s", RECEIVER_VIDEOS_DIR, sid, name);
	if (!add_expected(arr, path, bytes, sha)) {
		relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		return false;
	}
	return true;
}

json_object *evidence_step_expected(const char *execution_id, const json_object *receipt,
                                    const char *receipt_sha256, int64_t receipt_bytes, relay_error *err)
{
	char path[512];
	if (!id_ok(execution_id)) {
		relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "not an execution id: %s",
		                execution_id ? execution_id : "(null)");
		return NULL;
	}
	json_object *arr = json_object_new_array();
	if (arr == NULL)
		goto nomem;
	snprintf(path, sizeof path, "state/receiver/started/%s.json", execution_id);
	if (!add_expected(arr, path, -1, NULL))
		goto nomem;
	snprintf(path, sizeof path, "state/receiver/receipts/%s.json", execution_id);
	if (!add_expected(arr, path, receipt_sha256 ? receipt_bytes : -1,
	                  receipt_sha256 && sha256_hex_valid(receipt_sha256) ? receipt_sha256 : NULL))
		goto nomem;
	snprintf(path, sizeof path, "state/records/execution/%s.json", execution_id);
	if (!add_expected(arr, path, -1, NULL))
		goto nomem;
	if (receipt == NULL) {
		snprintf(path, sizeof path, "state/records/action/action-%s.json", execution_id);
		if (!add_expected(arr, path, -1, NULL))
			goto nomem;
		return arr;
	}
	if (!execution_id ||
	    strcmp(jsonx_get_str(receipt, "executionId") ? jsonx_get_str(receipt, "executionId") : "",
	           execution_id) != 0) {
		relay_error_set(err, RELAY_E_PROTOCOL, 0, "the receipt of %s names another execution",
		                execution_id);
		json_object_put(arr);
		return NULL;
	}
	json_object *snaps = jsonx_get_array(jsonx_get_obj(receipt, "imageEvidence"), "snapshots");
	size_t n = snaps ? json_object_array_length(snaps) : 0;
	for (size_t i = 0; i < n; i++) {
		const char *aid = jsonx_get_str(json_object_array_get_idx(snaps, i), "actionId");
		if (!id_ok(aid)) {
			relay_error_set(err, RELAY_E_PROTOCOL, 0,
			                "the receipt of %s has a snapshot without a valid actionId",
			                execution_id);
			json_object_put(arr);
			return NULL;
		}
		snprintf(path, sizeof path, "state/records/action/%s.json", aid);
		if (!add_expected(arr, path, -1, NULL))
			goto nomem;
	}
	for (size_t i = 0; i < n; i++) {
		json_object *d = json_object_array_get_idx(snaps, i);
		const char *sid = jsonx_get_str(d, "sessionId");
		const char *name = jsonx_get_str(d, "fileName");
		const char *sha = jsonx_get_str(d, "sha256");
		int64_t bytes = -1;
		if (!id_ok(sid) || !id_ok(name) || !sha256_hex_valid(sha) ||
		    !jsonx_get_int(d, "bytes", &bytes) || bytes < 1 ||
		    (uint64_t)bytes > EVIDENCE_SNAPSHOT_MAX_BYTES) {
			relay_error_set(err, RELAY_E_PROTOCOL, 0,
			                "the receipt of %s has a malformed snapshot descriptor (%s)",
			                execution_id, name ? name : "no fileName");
			json_object_put(arr);
			return NULL;
		}
		snprintf(path, sizeof path, "state/snapshots/%s/%s", sid, name);
		if (!add_expected(arr, path, bytes, sha))
			goto nomem;
	}
	if (!add_video_expected(arr, execution_id, receipt, err)) {
		json_object_put(arr);
		return NULL;
	}
	return arr;
nomem:
	json_object_put(arr);
	relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	return NULL;
}

char **evidence_step_paths(const json_object *expected)
{
	size_t n = expected ? json_object_array_length((json_object *)expected) : 0;
	char **paths = calloc(n + 1, sizeof *paths);
	for (size_t i = 0; paths && i < n; i++) {
		paths[i] =
		    strdup(jsonx_get_str(json_object_array_get_idx((json_object *)expected, i), "path"));
		if (paths[i] == NULL) {
			evidence_free_paths(paths);
			return NULL;
		}
	}
	return paths;
}

void evidence_free_paths(char **paths)
{
	for (size_t i = 0; paths && paths[i]; i++)
		free(paths[i]);
	free(paths);
}

static relay_status same_bytes(int a_root, const char *a, int b_root, const char *b, bool *same,
                               relay_error *err)
{
	char ha[65], hb[65];
	uint64_t na = 0, nb = 0;
	int fa = fw_open_file_read_at(a_root, a, err);
	if (fa < 0)
		return err ? err->code : RELAY_E_IO;
	relay_status st = sha256_fd_hex(fa, ha, &na, err);
	close(fa);
	if (st != RELAY_OK)
		return st;
	int fb = fw_open_file_read_at(b_root, b, err);
	if (fb < 0)
		return err ? err->code : RELAY_E_IO;
	st = sha256_fd_hex(fb, hb, &nb, err);
	close(fb);
	if (st == RELAY_OK)
		*same = na == nb && strcmp(ha, hb) == 0;
	return st;
}

relay_status evidence_step_place(const char *package_dir, const char *execution_id, const char *staging_dir,
                                 const char *facts_json, relay_error *err)
{
	relay_status status = RELAY_OK;
	json_object *facts = NULL;
	int pkg = -1, dst = -1, src = -1;
	char rel_dir[256];
	if (!id_ok(execution_id))
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "not an execution id");
	facts = facts_json ? jsonx_parse_str(facts_json, NULL, 0) : NULL;
	if (facts == NULL || !json_object_is_type(facts, json_type_array)) {
		status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "step facts are not a JSON array");
		goto cleanup;
	}
	pkg = fw_open_root(package_dir);
	src = fw_open_root(staging_dir);
	if (pkg < 0 || src < 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot open %s or %s: %s", package_dir,
		                         staging_dir, strerror(errno));
		goto cleanup;
	}
	snprintf(rel_dir, sizeof rel_dir, "host/steps/%s", execution_id);
	dst = fw_open_dir_at(pkg, rel_dir, true, NULL, err);
	if (dst < 0) {
		status = err ? err->code : RELAY_E_IO;
		goto cleanup;
	}
	for (size_t i = 0; i < json_object_array_length(facts); i++) {
		const char *rel = jsonx_get_str(json_object_array_get_idx(facts, i), "path");
		if (!evidence_archive_path_ok(rel)) {
			status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "unsafe step path");
			goto cleanup;
		}
		const char *from_leaf, *to_leaf;
		int from = fw_open_parent_at(src, rel, false, NULL, &from_leaf, err);
		if (from < 0) {
			status = err ? err->code : RELAY_E_IO;
			goto cleanup;
		}
		int to = fw_open_parent_at(dst, rel, true, NULL, &to_leaf, err);
		if (to < 0) {
			close(from);
			status = err ? err->code : RELAY_E_IO;
			goto cleanup;
		}
		struct stat st;
		if (fstatat(to, to_leaf, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			bool same = false;
			status = same_bytes(src, rel, dst, rel, &same, err);
			if (status == RELAY_OK && !same)
				status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                         "host/steps/%s/%s already holds other bytes",
				                         execution_id, rel);
			if (status == RELAY_OK)
				unlinkat(from, from_leaf, 0);
		} else if (renameat(from, from_leaf, to, to_leaf) != 0) {
			status =
			    relay_error_set(err, RELAY_E_IO, errno, "cannot move %s into host/steps/%s: %s",
			                    rel, execution_id, strerror(errno));
		}
		close(from);
		close(to);
		if (status != RELAY_OK)
			goto cleanup;
	}
	if (fs_fsync_fd(dst) != 0 && errno != EINVAL)
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync host/steps/%s", execution_id);
cleanup:
	if (pkg >= 0)
		close(pkg);
	if (src >= 0)
		close(src);
	if (dst >= 0)
		close(dst);
	json_object_put(facts);
	return status;
}

relay_status evidence_write_download_record(const char *package_dir, const json_object *record,
                                            relay_error *err)
{
	const char *id = jsonx_get_str(record, "executionId");
	if (!id_ok(id))
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "download record without a valid executionId");
	char dir[PATH_MAX], path[PATH_MAX + 200];
	snprintf(dir, sizeof dir, "%s/host/evidence-downloads", package_dir);
	relay_status st = fs_mkdir_p(dir, 0700, err);
	if (st != RELAY_OK)
		return st;
	snprintf(path, sizeof path, "%s/%s.json", dir, id);
	return fs_write_json_durable(path, record, err);
}

/* Copies src_rel below src_root to <incoming>/<rel>, re-hashes the copy and
 * keeps it only when it matches. */
static relay_status try_candidate(int src_root, const char *src_rel, int in_root, const char *rel,
                                  uint64_t bytes, const char *sha, bool *used, relay_error *err)
{
	relay_error ignored = {0};
	int in = fw_open_file_read_at(src_root, src_rel, &ignored);
	if (in < 0)
		return RELAY_OK; /* no such candidate */
	struct stat st;
	if (fstat(in, &st) != 0 || (uint64_t)st.st_size != bytes) {
		close(in);
		return RELAY_OK;
	}
	int out = fw_create_file_at(in_root, rel, 0600, NULL, err);
	if (out < 0) {
		close(in);
		return err ? err->code : RELAY_E_IO;
	}
	relay_status status = RELAY_OK;
	unsigned char *buf = malloc(1 << 20);
	sha256_ctx *ctx = sha256_new();
	uint64_t total = 0;
	if (buf == NULL || ctx == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	for (;;) {
		ssize_t n = read(in, buf, 1 << 20);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot read %s: %s", src_rel,
			                         strerror(errno));
			goto cleanup;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		sha256_update(ctx, buf, (size_t)n);
		status = fs_write_all(out, buf, (size_t)n, rel, err);
		if (status != RELAY_OK)
			goto cleanup;
	}
	char hex[65];
	sha256_final(ctx, hex);
	ctx = NULL;
	if (fs_fsync_fd(out) != 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s", rel);
		goto cleanup;
	}
	*used = total == bytes && strcmp(hex, sha) == 0;
cleanup:
	sha256_abort(ctx);
	free(buf);
	close(in);
	close(out);
	if (status != RELAY_OK || !*used)
		fw_unlink_at(in_root, rel, NULL); /* a differing copy is never used */
	return status;
}

relay_status evidence_copy_candidate(const char *package_dir, const char *rel, uint64_t bytes,
                                     const char *sha256, const char *incoming_root, bool *used,
                                     relay_error *err)
{
	*used = false;
	if (!evidence_archive_path_ok(rel) || !sha256_hex_valid(sha256))
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "candidate lookup needs a safe path and a hash");
	relay_status status = RELAY_OK;
	int pkg = fw_open_root(package_dir), in = fw_open_root(incoming_root);
	fw_tree steps = {0}, images = {0};
	char path[PATH_MAX];
	if (pkg < 0 || in < 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot open %s or %s: %s", package_dir,
		                         incoming_root, strerror(errno));
		goto cleanup;
	}
	/* 1. The same path in the package. */
	status = try_candidate(pkg, rel, in, rel, bytes, sha256, used, err);
	if (status != RELAY_OK || *used)
		goto cleanup;
	/* 2. Any step download. */
	snprintf(path, sizeof path, "%s/host/steps", package_dir);
	status = fw_walk(path, true, NULL, &steps, err);
	if (status != RELAY_OK)
		goto cleanup;
	for (size_t i = 0; i < steps.count && !*used && status == RELAY_OK; i++) {
		if (steps.items[i].kind != FW_DIR || strchr(steps.items[i].path, '/') != NULL)
			continue;
		snprintf(path, sizeof path, "host/steps/%s/%s", steps.items[i].path, rel);
		status = try_candidate(pkg, path, in, rel, bytes, sha256, used, err);
	}
	if (status != RELAY_OK || *used)
		goto cleanup;
	/* 3. A receipt pulled right after its run. */
	const char *rp = "state/receiver/receipts/";
	if (strncmp(rel, rp, strlen(rp)) == 0 && strchr(rel + strlen(rp), '/') == NULL) {
		snprintf(path, sizeof path, "host/receiver-receipts/%s", rel + strlen(rp));
		status = try_candidate(pkg, path, in, rel, bytes, sha256, used, err);
		if (status != RELAY_OK || *used)
			goto cleanup;
	}
	/* 4. A catalogued image original with the same hash and size. */
	if (strncmp(rel, "state/snapshots/", 16) == 0) {
		snprintf(path, sizeof path, "%s/host/images", package_dir);
		status = fw_walk(path, true, NULL, &images, err);
		for (size_t i = 0; i < images.count && !*used && status == RELAY_OK; i++) {
			const char *p = images.items[i].path;
			const char *slash = strchr(p, '/');
			if (images.items[i].kind != FW_FILE || slash == NULL ||
			    strncmp(slash + 1, "original.", 9) != 0 || images.items[i].bytes != bytes)
				continue;
			snprintf(path, sizeof path, "host/images/%s", p);
			status = try_candidate(pkg, path, in, rel, bytes, sha256, used, err);
		}
	}
cleanup:
	if (pkg >= 0)
		close(pkg);
	if (in >= 0)
		close(in);
	fw_tree_free(&steps);
	fw_tree_free(&images);
	return status;
}
