/*
 * The merge of pulled state, the space precheck and the sibling records of
 * an evidence package (merge.h; spec/evidence.md §1, §6, §7).
 */
#include "evidence/merge.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "evidence/fswalk.h"
#include "evidence/verify.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/timefmt.h"

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
relay_status evidence_copy_rel(int src_root, const char *src_rel, int dst_root, const char *dst_rel,
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

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
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
			status = evidence_copy_rel(s, tree.items[i].path, d, tree.items[i].path, err);
cleanup:
	if (s >= 0)
		close(s);
	if (d >= 0)
		close(d);
	fw_tree_free(&tree);
	return status;
}

/* A snapshot the package already holds must come in with the same bytes:
 * RELAY_E_INTEGRITY when one differs. */
static relay_status snapshots_agree(int in_fd, int old_fd, const fw_tree *incoming, const fw_tree *old,
                                    relay_error *err)
{
	relay_status status = RELAY_OK;
	for (size_t i = 0; i < incoming->count && old_fd >= 0; i++) {
		const fw_entry *e = &incoming->items[i];
		if (e->kind != FW_FILE || !has_prefix(e->path, "snapshots/"))
			continue;
		for (size_t k = 0; k < old->count; k++) {
			if (old->items[k].kind != FW_FILE || strcmp(old->items[k].path, e->path) != 0)
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
				return status;
			}
		}
	}
	return status;
}

/* Moves the package's state/ to <prev_root>/attempt-NNNN/state (copied when
 * on another volume); *out receives that path. */
static relay_status set_aside(const char *state, const char *prev_root, char *out, size_t len,
                              relay_error *err)
{
	relay_status status = RELAY_OK;
	status = fs_mkdir_p(prev_root, 0700, err);
	if (status != RELAY_OK)
		return status;
	for (unsigned n = 1; n < 100000; n++) {
		snprintf(out, len, "%s/attempt-%04u", prev_root, n);
		if (mkdir(out, 0700) == 0)
			break;
		if (errno != EEXIST) {
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot create %s: %s", out,
			                         strerror(errno));
			return status;
		}
	}
	strncat(out, "/state", len - strlen(out) - 1);
	if (rename(state, out) != 0) {
		if (errno != EXDEV) {
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot set %s aside: %s", state,
			                         strerror(errno));
			return status;
		}
		status = copy_tree(state, out, err);
		if (status == RELAY_OK)
			status = fs_remove_tree(state, err);
		if (status != RELAY_OK)
			return status;
	}
	return status;
}

relay_status evidence_state_merge(const char *package_dir, const char *incoming_state,
                                  const char *attempts_dir, relay_error *err)
{
	relay_status status = RELAY_OK;
	char *state = fs_path_join(package_dir, "state");
	char *manifest = fs_path_join(package_dir, "manifest.json");
	char *prev_root = fs_path_join(attempts_dir, "previous");
	char real_in[PATH_MAX], real_pkg[PATH_MAX], aside_path[PATH_MAX] = "";
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
	status = snapshots_agree(in_fd, old_fd, &incoming, &old, err);
	if (status != RELAY_OK)
		goto cleanup;
	/* Set the current state aside. */
	if (old_fd >= 0 || fs_is_dir(state)) {
		status = set_aside(state, prev_root, aside_path, sizeof aside_path, err);
		if (status != RELAY_OK)
			goto cleanup;
		moved_old = true;
	}
	/* The incoming tree takes its place. */
	if (rename(incoming_state, state) != 0) {
		if (errno != EXDEV) {
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot move %s into place: %s",
			                         incoming_state, strerror(errno));
			if (moved_old)
				rename(aside_path, state);
			goto cleanup;
		}
		status = copy_tree(incoming_state, state, err);
		if (status != RELAY_OK) {
			fs_remove_tree(state, NULL);
			if (moved_old)
				rename(aside_path, state);
			goto cleanup;
		}
		fs_remove_tree(incoming_state, NULL);
	}
	/* Snapshots the old state had and the incoming tree lacks come back. */
	if (moved_old) {
		int aside_fd = fw_open_root(aside_path);
		new_fd = fw_open_root(state);
		for (size_t k = 0; k < old.count && aside_fd >= 0 && new_fd >= 0 && status == RELAY_OK; k++) {
			const fw_entry *e = &old.items[k];
			if (e->kind != FW_FILE || !has_prefix(e->path, "snapshots/"))
				continue;
			bool present = false;
			for (size_t i = 0; i < incoming.count && !present; i++)
				present = strcmp(incoming.items[i].path, e->path) == 0;
			if (!present)
				status = evidence_copy_rel(aside_fd, e->path, new_fd, e->path, err);
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
