/*
 * receiver/scan.c — see scan.h.
 */
#include "scan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsx.h"
#include "relay_support/utf8.h"

void fact_list_free(fact_list *list)
{
	size_t i;
	for (i = 0; i < list->count; i++)
		free(list->items[i].path);
	free(list->items);
	list->items = NULL;
	list->count = list->cap = 0;
}

static fact *fact_add(fact_list *list)
{
	fact *f;
	if (list->count == list->cap) {
		list->cap = list->cap ? list->cap * 2 : 16;
		list->items = xrealloc(list->items, list->cap * sizeof(*list->items));
	}
	f = &list->items[list->count++];
	memset(f, 0, sizeof(*f));
	return f;
}

int png_signature_ok(const unsigned char *head, size_t n)
{
	static const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	return n >= 8 && memcmp(head, png, 8) == 0;
}

int image_signature_ok(const unsigned char *head, size_t n)
{
	if (png_signature_ok(head, n))
		return 1;
	if (n >= 3 && head[0] == 0xFF && head[1] == 0xD8 && head[2] == 0xFF)
		return 1;
	if (n >= 6 && (memcmp(head, "GIF87a", 6) == 0 || memcmp(head, "GIF89a", 6) == 0))
		return 1;
	if (n >= 12 && memcmp(head, "RIFF", 4) == 0 && memcmp(head + 8, "WEBP", 4) == 0)
		return 1;
	return 0;
}

static int64_t stat_mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static int64_t stat_ctime_ns(const struct stat *st)
{
	return (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

int hash_regular_file(const char *path, const struct stat *expected, char hex[65], uint64_t *bytes_out,
                      rerr *err)
{
	struct stat before, after;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int rc = -1;
	if (fd < 0) {
		if (errno == ELOOP)
			err_set(err, "symlink %s", path);
		else
			err_set(err, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &before) != 0) {
		err_set(err, "cannot stat %s: %s", path, strerror(errno));
		goto cleanup;
	}
	if (!S_ISREG(before.st_mode)) {
		err_set(err, "special file %s", path);
		goto cleanup;
	}
	const int growing = path_is_append_only_log(path);
	if (expected &&
	    (expected->st_dev != before.st_dev || expected->st_ino != before.st_ino ||
	     (growing ? expected->st_size > before.st_size : expected->st_size != before.st_size))) {
		err_set(err, "source changed during inventory: %s", path);
		goto cleanup;
	}
	if (growing)
		before.st_size = expected ? expected->st_size : before.st_size;
	if (hash_fd_prefix(fd, growing ? (uint64_t)before.st_size : UINT64_MAX, hex, bytes_out, err) != 0) {
		err_prefix(err, "%s", path);
		goto cleanup;
	}
	if (fstat(fd, &after) != 0 ||
	    (growing ? after.st_size < before.st_size : after.st_size != before.st_size) ||
	    *bytes_out != (uint64_t)before.st_size) {
		err_set(err, "source changed during inventory: %s", path);
		goto cleanup;
	}
	rc = 0;
cleanup:
	close(fd);
	return rc;
}

static int fact_cmp(const void *a, const void *b)
{
	return strcmp(((const fact *)a)->path, ((const fact *)b)->path);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Walks abs (shown as shown) adding facts with paths prefix + name. */
static int walk_dir(const char *abs, const char *shown, const char *prefix, fact_list *out, rerr *err)
{
	DIR *dir = opendir(abs);
	struct dirent *de;
	char **names = NULL;
	size_t count = 0, cap = 0, i;
	int rc = -1;
	if (!dir) {
		err_set(err, "cannot open directory %s: %s", shown, strerror(errno));
		return -1;
	}
	while ((de = readdir(dir)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (count == cap) {
			cap = cap ? cap * 2 : 32;
			names = xrealloc(names, cap * sizeof(*names));
		}
		names[count++] = xstrdup(de->d_name);
	}
	closedir(dir);
	if (count > 1)
		qsort(names, count, sizeof(*names), name_cmp);
	for (i = 0; i < count; i++) {
		char *child_abs = path_join(abs, names[i]);
		char *child_rel = *prefix ? xasprintf("%s/%s", prefix, names[i]) : xstrdup(names[i]);
		char *child_shown = *shown ? xasprintf("%s/%s", shown, names[i]) : xstrdup(names[i]);
		struct stat st;
		int ok = -1;
		if (!rs_utf8_valid(names[i], strlen(names[i]))) {
			err_set(err, "file name is not UTF-8: %s", child_shown);
		} else if (lstat(child_abs, &st) != 0) {
			err_set(err, "source changed during inventory: %s: %s", child_shown, strerror(errno));
		} else if (S_ISLNK(st.st_mode)) {
			err_set(err, "symlink %s", child_shown);
		} else if (S_ISDIR(st.st_mode)) {
			ok = walk_dir(child_abs, child_shown, child_rel, out, err);
		} else if (S_ISREG(st.st_mode)) {
			fact *f = fact_add(out);
			f->path = child_rel;
			child_rel = NULL;
			ok = hash_regular_file(child_abs, &st, f->sha256, &f->bytes, err);
		} else {
			err_set(err, "special file %s", child_shown);
		}
		free(child_abs);
		free(child_rel);
		free(child_shown);
		if (ok != 0)
			goto cleanup;
	}
	rc = 0;
cleanup:
	for (i = 0; i < count; i++)
		free(names[i]);
	free(names);
	return rc;
}

static int scan_image(const char *abs, const char *shown, const struct stat *st, fact_list *out, rerr *err)
{
	unsigned char head[16];
	ssize_t n;
	struct stat after;
	fact *f;
	int fd;
	if ((uint64_t)st->st_size > IMAGE_MAX_BYTES) {
		err_set(err, "image %s is larger than 64 MiB", shown);
		return -1;
	}
	fd = open(abs, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		err_set(err, "cannot open %s: %s", shown, strerror(errno));
		return -1;
	}
	n = read(fd, head, sizeof(head));
	close(fd);
	if (n < 0 || !image_signature_ok(head, (size_t)n)) {
		err_set(err, "%s is not a PNG, JPEG, GIF or WebP image", shown);
		return -1;
	}
	f = fact_add(out);
	f->path = xstrdup("");
	if (hash_regular_file(abs, st, f->sha256, &f->bytes, err) != 0)
		return -1;
	if (lstat(abs, &after) != 0 || after.st_dev != st->st_dev || after.st_ino != st->st_ino ||
	    after.st_size != st->st_size || stat_mtime_ns(&after) != stat_mtime_ns(st) ||
	    stat_ctime_ns(&after) != stat_ctime_ns(st)) {
		err_set(err, "source changed during inventory: %s", shown);
		return -1;
	}
	f->has_identity = 1;
	f->dev = (uint64_t)st->st_dev;
	f->ino = (uint64_t)st->st_ino;
	f->mtime_ns = stat_mtime_ns(st);
	f->ctime_ns = stat_ctime_ns(st);
	return 0;
}

int scan_collect(const char *root, const char *base_abs, const char *rel, int present, int image,
                 fact_list *out, rerr *err)
{
	const char *base_rel;
	char *target_rel = NULL;
	char *target_abs = NULL;
	int exists = 0;
	int rc = -1;
	struct stat st;
	if (path_below_root(root, base_abs, &base_rel) != 0) {
		err_set(err, "--base %s must be the guest root or lie below it", base_abs);
		goto cleanup;
	}
	if (path_walk_check(root, base_rel, 0, NULL, err) != 0)
		goto cleanup;
	if (strcmp(rel, ".") != 0 && !rel_path_ok(rel)) {
		err_set(err, "invalid relative path '%s': no absolute path, empty, '.' or '..' segment", rel);
		goto cleanup;
	}
	if (strcmp(rel, ".") == 0)
		target_rel = xstrdup(base_rel);
	else
		target_rel = *base_rel ? xasprintf("%s/%s", base_rel, rel) : xstrdup(rel);
	if (path_walk_check(root, target_rel, 1, &exists, err) != 0)
		goto cleanup;
	if (!exists) {
		if (present) {
			rc = 0;
			goto cleanup;
		}
		err_set(err, "missing %s", rel);
		goto cleanup;
	}
	target_abs = path_join(root, target_rel);
	if (lstat(target_abs, &st) != 0) {
		err_set(err, "cannot stat %s: %s", rel, strerror(errno));
		goto cleanup;
	}
	if (image) {
		if (!S_ISREG(st.st_mode)) {
			err_set(err, "--image needs a single regular file; %s is not one", rel);
			goto cleanup;
		}
		rc = scan_image(target_abs, rel, &st, out, err);
		goto cleanup;
	}
	if (S_ISREG(st.st_mode)) {
		fact *f = fact_add(out);
		f->path = xstrdup("");
		rc = hash_regular_file(target_abs, &st, f->sha256, &f->bytes, err);
		goto cleanup;
	}
	if (!S_ISDIR(st.st_mode)) {
		err_set(err, "special file %s", rel);
		goto cleanup;
	}
	rc = walk_dir(target_abs, strcmp(rel, ".") == 0 ? "" : rel, "", out, err);
	if (rc == 0)
		if (out->count > 1)
			qsort(out->items, out->count, sizeof(*out->items), fact_cmp);
cleanup:
	free(target_rel);
	free(target_abs);
	return rc;
}

jv *facts_to_json(const fact_list *list)
{
	jv *arr = jv_array();
	size_t i;
	for (i = 0; i < list->count; i++) {
		const fact *f = &list->items[i];
		jv *o = jv_object();
		jv_set_str(o, "path", f->path);
		jv_set_str(o, "sha256", f->sha256);
		jv_set_int(o, "bytes", (int64_t)f->bytes);
		if (f->has_identity) {
			jv *id = jv_object();
			char ts[32];
			jv_set_int(id, "dev", (int64_t)f->dev);
			jv_set_int(id, "ino", (int64_t)f->ino);
			jv_set_int(id, "size", (int64_t)f->bytes);
			timestamp_from_ms(f->mtime_ns / 1000000, ts);
			jv_set_str(id, "mtime", ts);
			timestamp_from_ms(f->ctime_ns / 1000000, ts);
			jv_set_str(id, "ctime", ts);
			jv_set_int(id, "mtimeNs", f->mtime_ns);
			jv_set_int(id, "ctimeNs", f->ctime_ns);
			jv_set(o, "identity", id);
		}
		jv_push(arr, o);
	}
	return arr;
}
