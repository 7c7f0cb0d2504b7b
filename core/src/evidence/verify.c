/*
 * The file checks of a package and the hashing behind its manifest
 * (verify.h; spec/evidence.md §3, §11).
 */
#include "evidence/verify.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evidence/archive.h"
#include "evidence/journal.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

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
json_object *evidence_snapshot_lines(json_object *journal, const char *session_id)
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

/* The snapshot entry's extra fields, from its snapshot-captured line and the
 * group of its action. */
void evidence_snapshot_fields(json_object *entry, json_object *line)
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

bool evidence_is_snapshot_path(const char *path)
{
	if (!has_prefix(path, "state/snapshots/"))
		return false;
	const char *base = strrchr(path, '/') + 1;
	return !has_prefix(base, ".partial-");
}

/* ---- verification ------------------------------------------------------------- */

static void verr(fw_strlist *errors, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *evidence_verify_failure(const char *fmt, va_list ap)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "package verification failed: ");
	strbuf_vprintf(&sb, fmt, ap);
	return strbuf_detach(&sb, NULL);
}

static void verr(fw_strlist *errors, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *text = evidence_verify_failure(fmt, ap);
	va_end(ap);
	if (text)
		fw_strlist_push(errors, text);
	free(text);
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

/* §11 items 2 and 3: file kinds and names. */
static void check_kinds(const fw_tree *tree, fw_strlist *errors)
{
	for (size_t i = 0; i < tree->count; i++) {
		const fw_entry *e = &tree->items[i];
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
}

/* §11 item 4: the manifest's version, identity and arrays. */
static void check_manifest_shape(json_object *m, fw_strlist *errors)
{
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
}

/* §11 items 5 and 6: every listed file exists with its size and SHA-256. */
static void check_listed_files(const char *package_dir, const fw_tree *tree, const evidence_file_hash *items,
                               size_t n, fw_strlist *errors)
{
	evidence_file_hash *got = calloc(n ? n : 1, sizeof *got);
	size_t hn = 0;
	for (size_t i = 0; i < n && got; i++) {
		fw_entry key = {.path = (char *)items[i].path};
		const fw_entry *hit =
		    bsearch(&key, tree->items, tree->count, sizeof *tree->items, entry_path_cmp);
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
}

/* §11 item 6: nothing unmanifested, OPENING.txt present. */
static void check_unmanifested(const fw_tree *tree, json_object *seen, fw_strlist *errors)
{
	bool opening = false;
	for (size_t t = 0; t < tree->count; t++) {
		const fw_entry *e = &tree->items[t];
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
}

/* §11 item 7: snapshots agree with the journal. */
static void check_snapshots(const char *package_dir, json_object *m, fw_strlist *errors)
{
	json_object *journal = NULL, *lines = NULL;
	relay_error jerr = {0};
	const char *sid = jsonx_get_str(m, "sessionId");
	if (evidence_journal_load(package_dir, &journal, &jerr) != RELAY_OK) {
		verr(errors, "%s",
		     jerr.code == RELAY_E_NOT_FOUND ? "state/journal/events.jsonl: missing" : jerr.message);
	} else if (sid != NULL) {
		lines = evidence_snapshot_lines(journal, sid);
		json_object *snaps = jsonx_get_array(m, "snapshots");
		size_t sn = snaps ? json_object_array_length(snaps) : 0;
		for (size_t i = 0; i < sn; i++) {
			json_object *e = json_object_array_get_idx(snaps, i);
			const char *path = jsonx_get_str(e, "path");
			if (path == NULL || !evidence_is_snapshot_path(path))
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
			evidence_snapshot_fields(want, line);
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
	json_object_put(lines);
	json_object_put(journal);
}

relay_status evidence_package_verify_files(const char *package_dir, const char *project_dir,
                                           fw_strlist *errors, json_object **manifest_out, relay_error *err)
{
	relay_status status = RELAY_OK;
	fw_tree tree = {0};
	json_object *m = NULL;
	evidence_file_hash *items = NULL;
	if (manifest_out)
		*manifest_out = NULL;
	check_ancestors(package_dir, project_dir, errors);
	relay_error werr = {0};
	if (fw_walk(package_dir, false, NULL, &tree, &werr) != RELAY_OK) {
		verr(errors, "%s", werr.message);
		goto cleanup;
	}
	check_kinds(&tree, errors);
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
	check_manifest_shape(m, errors);
	const char *arrays[] = {"records", "snapshots", "attachments"};
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
			bool snap = evidence_is_snapshot_path(path), att = has_prefix(path, "extractions/");
			if ((k == 1 && !snap) || (k == 2 && !att) || (k == 0 && (snap || att)))
				verr(errors, "%s: listed under %s, where it does not belong", path,
				     arrays[k]);
			items[n].path = path;
			items[n].bytes = (uint64_t)bytes;
			memcpy(items[n].sha256, sha, 65);
			n++;
		}
	}
	check_listed_files(package_dir, &tree, items, n, errors);
	check_unmanifested(&tree, seen, errors);
	json_object_put(seen);
	check_snapshots(package_dir, m, errors);
cleanup:
	if (manifest_out && m) {
		*manifest_out = m;
		m = NULL;
	}
	json_object_put(m);
	free(items);
	fw_tree_free(&tree);
	return status;
}
