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

enum { HASH_CHUNK = 4 << 20, MAX_MANIFEST_BYTES = 256 << 20 };

static bool str_eq(const char *a, const char *b)
{
	return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

bool evidence_package_path_ok(const char *rel)
{
	/* A strict archive path that also has no ':', '#' or '?'. */
	return evidence_archive_path_ok(rel) && strpbrk(rel, ":#?") == NULL;
}

/* ---- hashing with worker threads -------------------------------------------
 *
 * Each worker takes the next file index from an atomic counter, opens the file
 * link-safely below the root and hashes it in 4 MiB reads. The counter is the
 * only shared mutable state; items[i] is written by exactly one worker. */

typedef struct hash_pool {
	int root_fd;
	evidence_file_hash *items;
	size_t count;
	atomic_size_t next;
} hash_pool;

static void hash_one(int root_fd, evidence_file_hash *item, unsigned char *buf)
{
	relay_error err = {0};
	item->status = RELAY_OK;
	item->error[0] = '\0';
	int fd = fw_open_file_read_at(root_fd, item->path, &err);
	if (fd < 0) {
		item->status = err.code ? err.code : RELAY_E_IO;
		size_t cut = utf8_cut(err.message, strlen(err.message), sizeof item->error - 1);
		memcpy(item->error, err.message, cut);
		item->error[cut] = '\0';
		return;
	}
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	sha256_ctx *ctx = sha256_new();
	uint64_t total = 0;
	if (ctx == NULL) {
		item->status = RELAY_E_NO_MEMORY;
		snprintf(item->error, sizeof item->error, "out of memory");
		goto cleanup;
	}
	for (;;) {
		ssize_t n = read(fd, buf, HASH_CHUNK);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			item->status = RELAY_E_IO;
			snprintf(item->error, sizeof item->error, "cannot read: %s", strerror(errno));
			goto cleanup;
		}
		if (n == 0)
			break;
		sha256_update(ctx, buf, (size_t)n);
		total += (uint64_t)n;
	}
	sha256_final(ctx, item->sha256);
	ctx = NULL;
	item->bytes = total;
cleanup:
	sha256_abort(ctx);
	close(fd);
}

static void *hash_worker(void *arg)
{
	hash_pool *pool = arg;
	unsigned char *buf = malloc(HASH_CHUNK);
	for (;;) {
		size_t i = atomic_fetch_add(&pool->next, 1);
		if (i >= pool->count)
			break;
		if (buf == NULL) {
			pool->items[i].status = RELAY_E_NO_MEMORY;
			snprintf(pool->items[i].error, sizeof pool->items[i].error, "out of memory");
			continue;
		}
		hash_one(pool->root_fd, &pool->items[i], buf);
	}
	free(buf);
	return NULL;
}

relay_status evidence_hash_files(const char *root_dir, evidence_file_hash *items, size_t count,
                                 unsigned threads, relay_error *err)
{
	if (threads == 0)
		threads = 2;
	if (threads > 16)
		threads = 16;
	if ((size_t)threads > count)
		threads = count ? (unsigned)count : 1;
	hash_pool pool = {.root_fd = fw_open_root(root_dir), .items = items, .count = count};
	atomic_init(&pool.next, 0);
	if (pool.root_fd < 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot open %s: %s", root_dir,
		                       strerror(errno));
	pthread_t tids[16];
	unsigned started = 0;
	for (unsigned t = 1; t < threads; t++) {
		if (pthread_create(&tids[started], NULL, hash_worker, &pool) != 0)
			break;
		started++;
	}
	hash_worker(&pool); /* the calling thread works too */
	for (unsigned t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	close(pool.root_fd);
	return RELAY_OK;
}

/* ---- snapshot lines from the journal -------------------------------------- */

/* Map fileName -> snapshot-captured line (references taken), plus the
 * action-start plans for groupId. */
static json_object *snapshot_lines(json_object *journal, const char *session_id)
{
	json_object *map = json_object_new_object();
	size_t n = journal ? json_object_array_length(journal) : 0;
	for (size_t i = 0; i < n && map; i++) {
		json_object *line = json_object_array_get_idx(journal, i);
		if (!str_eq(jsonx_get_str(line, "type"), "snapshot-captured") ||
		    !str_eq(jsonx_get_str(line, "sessionId"), session_id))
			continue;
		const char *name = jsonx_get_str(line, "fileName");
		if (name && !json_object_object_get_ex(map, name, NULL))
			json_object_object_add(map, name, json_object_get(line));
	}
	return map;
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

/* The snapshot entry's extra fields, from its snapshot-captured line and the
 * group of its action. */
static void snapshot_fields(json_object *entry, json_object *line)
{
	jsonx_add_str(entry, "actionId", jsonx_get_str(line, "actionId"));
	jsonx_add_str(entry, "role", jsonx_get_str(line, "phase"));
	jsonx_add_str(entry, "capturedAt", jsonx_get_str(line, "capturedAt"));
	jsonx_add_str(entry, "provenance", "dispatch-captured");
	const char *g = jsonx_get_str(line, "groupId");
	if (g)
		jsonx_add_str(entry, "groupId", g);
	int64_t ms = 0;
	if (jsonx_get_int(line, "declaredAfterIntervalMs", &ms))
		jsonx_add_int(entry, "declaredAfterIntervalMs", ms);
}

static bool is_snapshot_path(const char *path)
{
	if (!has_prefix(path, "state/snapshots/"))
		return false;
	const char *base = strrchr(path, '/') + 1;
	return !has_prefix(base, ".partial-");
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
	lines = snapshot_lines(journal, sid);
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
		if (is_snapshot_path(items[i].path)) {
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
			snapshot_fields(e, line);
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

/* ---- verification ------------------------------------------------------------- */

static void verr(fw_strlist *errors, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verr(fw_strlist *errors, const char *fmt, ...)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "package verification failed: ");
	va_list ap;
	va_start(ap, fmt);
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	if (strbuf_ok(&sb))
		fw_strlist_push(errors, strbuf_str(&sb));
	strbuf_free(&sb);
}

/* §11 item 1: the package root and every folder from the project folder down
 * are real folders. */
static void check_ancestors(const char *package_dir, const char *project_dir, fw_strlist *errors)
{
	struct stat st;
	if (lstat(package_dir, &st) != 0) {
		verr(errors, "%s: cannot be read: %s", package_dir, strerror(errno));
		return;
	}
	if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
		verr(errors, "%s: the package root is a symbolic link or not a folder", package_dir);
		return;
	}
	if (project_dir == NULL)
		return;
	size_t pl = strlen(project_dir);
	while (pl > 1 && project_dir[pl - 1] == '/')
		pl--;
	if (strncmp(package_dir, project_dir, pl) != 0 ||
	    (package_dir[pl] != '/' && package_dir[pl] != '\0')) {
		verr(errors, "%s: the package is not inside the project folder %s", package_dir, project_dir);
		return;
	}
	char *copy = strdup(package_dir);
	if (copy == NULL)
		return;
	for (char *p = copy + pl + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (lstat(copy, &st) != 0 || S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode))
			verr(errors,
			     "%s: a folder on the way to the package is a symbolic link or not a folder",
			     copy);
		*p = '/';
	}
	free(copy);
}

/* fw_walk sorts by strcmp, so the tree can be searched. */
static int entry_path_cmp(const void *a, const void *b)
{
	return strcmp(((const fw_entry *)a)->path, ((const fw_entry *)b)->path);
}

static bool same_opt_str(json_object *a, json_object *b, const char *key)
{
	const char *x = jsonx_get_str(a, key), *y = jsonx_get_str(b, key);
	return (x == NULL && y == NULL) || str_eq(x, y);
}

static bool same_opt_int(json_object *a, json_object *b, const char *key)
{
	int64_t x = 0, y = 0;
	bool hx = jsonx_get_int(a, key, &x), hy = jsonx_get_int(b, key, &y);
	return hx == hy && x == y;
}

relay_status evidence_package_verify_files(const char *package_dir, const char *project_dir,
                                           fw_strlist *errors, json_object **manifest_out, relay_error *err)
{
	relay_status status = RELAY_OK;
	fw_tree tree = {0};
	json_object *m = NULL, *journal = NULL, *lines = NULL;
	evidence_file_hash *items = NULL;
	if (manifest_out)
		*manifest_out = NULL;
	check_ancestors(package_dir, project_dir, errors);
	relay_error werr = {0};
	if (fw_walk(package_dir, false, NULL, &tree, &werr) != RELAY_OK) {
		verr(errors, "%s", werr.message);
		goto cleanup;
	}
	/* Items 2 and 3: kinds and names. */
	for (size_t i = 0; i < tree.count; i++) {
		const fw_entry *e = &tree.items[i];
		if (!evidence_package_path_ok(e->path))
			verr(errors, "%s: name not allowed in an evidence package", e->path);
		if (e->kind == FW_LINK)
			verr(errors, "%s: a symbolic link", e->path);
		else if (e->kind == FW_OTHER)
			verr(errors, "%s: not a regular file or folder", e->path);
		else if (e->kind == FW_FILE && e->nlink > 1)
			verr(errors, "%s: a hard link (link count %llu)", e->path,
			     (unsigned long long)e->nlink);
	}
	/* Item 4: the manifest. */
	char *mp = fs_path_join(package_dir, "manifest.json");
	relay_error merr = {0};
	if (mp == NULL || fs_read_json(mp, MAX_MANIFEST_BYTES, &m, &merr) != RELAY_OK || m == NULL ||
	    !json_object_is_type(m, json_type_object)) {
		verr(errors, "manifest.json: %s", merr.message[0] ? merr.message : "not a JSON object");
		free(mp);
		goto cleanup;
	}
	free(mp);
	int64_t version = 0;
	if (!jsonx_get_int(m, "manifestVersion", &version) || version != EVIDENCE_MANIFEST_VERSION)
		verr(errors, "manifest.json: unknown manifestVersion (this relay reads version %d)",
		     EVIDENCE_MANIFEST_VERSION);
	const char *idf[] = {"packageId", "taskId", "sessionId", "guest", "createdAt", "hashAlgorithm"};
	for (size_t i = 0; i < sizeof idf / sizeof idf[0]; i++)
		if (jsonx_get_str(m, idf[i]) == NULL)
			verr(errors, "manifest.json: %s is missing", idf[i]);
	if (jsonx_get_str(m, "hashAlgorithm") && !str_eq(jsonx_get_str(m, "hashAlgorithm"), "sha256"))
		verr(errors, "manifest.json: hashAlgorithm is not sha256");
	const char *arrays[] = {"records", "snapshots", "attachments", "media", "segments", "attempts"};
	for (size_t i = 0; i < 6; i++) {
		json_object *a = jsonx_get_array(m, arrays[i]);
		if (a == NULL)
			verr(errors, "manifest.json: %s is not an array", arrays[i]);
		else if (i >= 3 && json_object_array_length(a) > 0)
			verr(errors,
			     "manifest.json: cannot claim video attempts or segments (%s is not empty)",
			     arrays[i]);
	}
	/* Collect every entry; check shape, duplicates, manifest.json itself. */
	size_t total = 0;
	for (size_t k = 0; k < 3; k++) {
		json_object *a = jsonx_get_array(m, arrays[k]);
		total += a ? json_object_array_length(a) : 0;
	}
	items = calloc(total ? total : 1, sizeof *items);
	if (items == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	size_t n = 0;
	json_object *seen = json_object_new_object();
	for (size_t k = 0; k < 3; k++) {
		json_object *a = jsonx_get_array(m, arrays[k]);
		size_t len = a ? json_object_array_length(a) : 0;
		for (size_t i = 0; i < len; i++) {
			json_object *e = json_object_array_get_idx(a, i);
			const char *path = jsonx_get_str(e, "path");
			const char *sha = jsonx_get_str(e, "sha256");
			int64_t bytes = -1;
			if (path == NULL || !sha256_hex_valid(sha) || !jsonx_get_int(e, "bytes", &bytes) ||
			    bytes < 0) {
				verr(errors,
				     "manifest.json: %s entry %zu lacks a valid path, sha256 or bytes",
				     arrays[k], i);
				continue;
			}
			if (!evidence_package_path_ok(path)) {
				verr(errors, "manifest.json: %s: path not allowed", path);
				continue;
			}
			if (strcmp(path, "manifest.json") == 0) {
				verr(errors, "manifest.json: lists itself");
				continue;
			}
			if (json_object_object_get_ex(seen, path, NULL)) {
				verr(errors, "manifest.json: %s is listed twice", path);
				continue;
			}
			json_object_object_add(seen, path, json_object_new_int((int)k));
			bool snap = is_snapshot_path(path), att = has_prefix(path, "extractions/");
			if ((k == 1 && !snap) || (k == 2 && !att) || (k == 0 && (snap || att)))
				verr(errors, "%s: listed under %s, where it does not belong", path,
				     arrays[k]);
			items[n].path = path;
			items[n].bytes = (uint64_t)bytes;
			memcpy(items[n].sha256, sha, 65);
			n++;
		}
	}
	/* Items 5 and 6: listed files exist and match; nothing unmanifested. */
	evidence_file_hash *got = calloc(n ? n : 1, sizeof *got);
	size_t hn = 0;
	for (size_t i = 0; i < n && got; i++) {
		fw_entry key = {.path = (char *)items[i].path};
		const fw_entry *hit =
		    bsearch(&key, tree.items, tree.count, sizeof *tree.items, entry_path_cmp);
		bool present = hit != NULL && hit->kind == FW_FILE;
		if (!present) {
			verr(errors, "%s: listed in the manifest but missing", items[i].path);
			continue;
		}
		got[hn++].path = items[i].path;
	}
	if (got)
		evidence_hash_files(package_dir, got, hn, 0, NULL);
	for (size_t i = 0, j = 0; i < n && got; i++) {
		if (j >= hn || strcmp(got[j].path, items[i].path) != 0)
			continue;
		const evidence_file_hash *h = &got[j++];
		if (h->status != RELAY_OK)
			verr(errors, "%s: cannot be read: %s", h->path, h->error);
		else if (h->bytes != items[i].bytes)
			verr(errors, "%s: size differs from the manifest (%llu bytes, manifest says %llu)",
			     h->path, (unsigned long long)h->bytes, (unsigned long long)items[i].bytes);
		else if (strcmp(h->sha256, items[i].sha256) != 0)
			verr(errors, "%s: SHA-256 differs from the manifest (the file was changed)", h->path);
	}
	free(got);
	bool opening = false;
	for (size_t t = 0; t < tree.count; t++) {
		const fw_entry *e = &tree.items[t];
		if (e->kind == FW_DIR || strcmp(e->path, "manifest.json") == 0)
			continue;
		if (strcmp(e->path, "OPENING.txt") == 0)
			opening = true;
		json_object *k = NULL;
		if (!json_object_object_get_ex(seen, e->path, &k))
			verr(errors, "%s: not listed in the manifest (unmanifested file)", e->path);
	}
	if (!opening)
		verr(errors, "OPENING.txt: missing (every package starts with it)");
	json_object_put(seen);
	/* Item 7: snapshots agree with the journal. */
	relay_error jerr = {0};
	const char *sid = jsonx_get_str(m, "sessionId");
	if (evidence_journal_load(package_dir, &journal, &jerr) != RELAY_OK) {
		verr(errors, "%s",
		     jerr.code == RELAY_E_NOT_FOUND ? "state/journal/events.jsonl: missing" : jerr.message);
	} else if (sid != NULL) {
		lines = snapshot_lines(journal, sid);
		json_object *snaps = jsonx_get_array(m, "snapshots");
		size_t sn = snaps ? json_object_array_length(snaps) : 0;
		for (size_t i = 0; i < sn; i++) {
			json_object *e = json_object_array_get_idx(snaps, i);
			const char *path = jsonx_get_str(e, "path");
			if (path == NULL || !is_snapshot_path(path))
				continue;
			const char *base = strrchr(path, '/') + 1;
			json_object *line = NULL;
			if (!json_object_object_get_ex(lines, base, &line)) {
				verr(errors, "%s: a snapshot without a snapshot-captured line in the journal",
				     path);
				continue;
			}
			json_object *want = json_object_new_object();
			jsonx_add_str(want, "sha256", jsonx_get_str(line, "sha256"));
			int64_t b = 0;
			if (jsonx_get_int(line, "bytes", &b))
				jsonx_add_int(want, "bytes", b);
			snapshot_fields(want, line);
			const char *keys[] = {"actionId",   "role",    "capturedAt",
			                      "provenance", "groupId", "sha256"};
			bool agree = same_opt_int(e, want, "bytes") &&
			             same_opt_int(e, want, "declaredAfterIntervalMs");
			for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
				agree = agree && same_opt_str(e, want, keys[k]);
			if (!agree)
				verr(errors,
				     "%s: its manifest entry disagrees with its snapshot-captured line",
				     path);
			json_object_put(want);
		}
	}
cleanup:
	if (manifest_out && m) {
		*manifest_out = m;
		m = NULL;
	}
	json_object_put(m);
	json_object_put(lines);
	json_object_put(journal);
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
	if ((status = RELAY_FAILPOINT_ERROR("finish.before-manifest", err)) != RELAY_OK)
		goto cleanup;
	status = write_new(root, "manifest.json", text.data, text.len, err);
	if (status != RELAY_OK)
		goto cleanup;
	made[2] = true;
	RELAY_FAILPOINT("finish.after-manifest");
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
