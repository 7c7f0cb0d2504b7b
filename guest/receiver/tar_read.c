/*
 * receiver/tar_read.c — reading and unpacking archives (tar_unpack, tar.h).
 */
#include "tar.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "fsx.h"
#include "json.h"
#include "relay_support/ustar.h"
#include "relay_support/utf8.h"
#include "scan.h"
#include "sha256.h"
#include "tar_block.h"

/* ---- reader ------------------------------------------------------------ */

typedef struct in_stream {
	int fd;
	uint64_t offset;
} in_stream;

/* Reads exactly len bytes; 1 when the archive ended first, -1 on error. */
static int in_read(in_stream *is, void *data, size_t len, rerr *err)
{
	char *p = data;
	while (len) {
		ssize_t n = read(is->fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err_set(err, "cannot read the archive: %s", strerror(errno));
			return -1;
		}
		if (n == 0) {
			err_set(err, "truncated archive: it ends inside a member at byte %llu",
			        (unsigned long long)is->offset);
			return 1;
		}
		p += n;
		len -= (size_t)n;
		is->offset += (uint64_t)n;
	}
	return 0;
}

static char *field_string(const unsigned char *field, size_t width)
{
	size_t n = 0;
	while (n < width && field[n])
		n++;
	return xstrndup((const char *)field, n);
}

/* Parses pax records; only `path` is allowed. */
static int parse_pax(const char *data, size_t len, char **path_out, rerr *err)
{
	const char *path, *key = NULL;
	size_t path_len, key_len = 0;
	int r = rs_tar_pax_path(data, len, &path, &path_len, &key, &key_len);
	if (r == RS_TAR_PAX_KEY) {
		err_set(err, "pax header sets '%.*s'; only 'path' is accepted", (int)key_len, key);
		return -1;
	}
	if (r == RS_TAR_PAX_NUL) {
		err_set(err, "pax path holds a NUL byte");
		return -1;
	}
	if (r != RS_TAR_PAX_OK) {
		err_set(err, "malformed pax extended header");
		return -1;
	}
	if (path != NULL) {
		free(*path_out);
		*path_out = xstrndup(path, path_len);
	}
	return 0;
}

/* Reads the next member header; *end_out set at the end-of-archive marker.
 * Returns the member's path (malloc'd) and size. */
static int next_member(in_stream *is, char **path_out, uint64_t *size_out, int *end_out, rerr *err)
{
	unsigned char h[BLOCK];
	char *pax_path = NULL;
	int rc = -1;
	*end_out = 0;
	*path_out = NULL;
	for (;;) {
		uint64_t size;
		char type;
		int r = in_read(is, h, BLOCK, err);
		if (r != 0) {
			if (r > 0)
				err_set(err, "truncated archive: no end-of-archive blocks");
			goto cleanup;
		}
		if (rs_tar_zero(h, BLOCK)) {
			if (pax_path) {
				err_set(err, "pax extended header without a member");
				goto cleanup;
			}
			*end_out = 1;
			rc = 0;
			goto cleanup;
		}
		if (!rs_tar_checksum_ok(h)) {
			err_set(err, "damaged archive: header checksum mismatch at byte %llu",
			        (unsigned long long)(is->offset - BLOCK));
			goto cleanup;
		}
		if (!rs_tar_is_ustar(h)) {
			err_set(err,
			        "member at byte %llu is not a POSIX ustar header (GNU or old tar extension)",
			        (unsigned long long)(is->offset - BLOCK));
			goto cleanup;
		}
		if (rs_tar_octal(h + 124, 12, &size) != 0) {
			err_set(err, "member at byte %llu has an unsupported size field",
			        (unsigned long long)(is->offset - BLOCK));
			goto cleanup;
		}
		type = (char)h[156];
		if (type == 'x') {
			char *data;
			if (pax_path) {
				err_set(err, "two pax extended headers in a row");
				goto cleanup;
			}
			if (size > PAX_MAX_BYTES) {
				err_set(err, "pax extended header of %llu bytes is too large",
				        (unsigned long long)size);
				goto cleanup;
			}
			data = xmalloc((size_t)pad512(size) + 1);
			r = in_read(is, data, (size_t)pad512(size), err);
			if (r == 0)
				r = parse_pax(data, (size_t)size, &pax_path, err);
			free(data);
			if (r != 0)
				goto cleanup;
			if (!pax_path) {
				err_set(err, "pax extended header without a path");
				goto cleanup;
			}
			continue;
		}
		if (type != '0' && type != '\0') {
			char *name = field_string(h, 100);
			const char *what;
			switch (type) {
			case '1': what = "hard link"; break;
			case '2': what = "symbolic link"; break;
			case '3': what = "character device"; break;
			case '4': what = "block device"; break;
			case '5': what = "directory"; break;
			case '6': what = "FIFO"; break;
			case 'g': what = "pax global header"; break;
			default: what = "unsupported (GNU or sparse) member"; break;
			}
			err_set(err, "%s entry '%s' refused: only regular files are accepted", what, name);
			free(name);
			goto cleanup;
		}
		if (pax_path) {
			*path_out = pax_path;
			pax_path = NULL;
		} else {
			char *name = field_string(h, 100);
			char *prefix = field_string(h + 345, 155);
			*path_out = *prefix ? xasprintf("%s/%s", prefix, name) : xstrdup(name);
			free(name);
			free(prefix);
		}
		*size_out = size;
		rc = 0;
		goto cleanup;
	}
cleanup:
	free(pax_path);
	return rc;
}

static int member_path_ok(const char *path, rerr *err)
{
	if (!rs_utf8_valid(path, strlen(path))) {
		err_set(err, "entry path is not UTF-8");
		return 0;
	}
	if (path[0] == '/') {
		err_set(err, "absolute path '%s' refused", path);
		return 0;
	}
	if (!rel_path_ok(path)) {
		err_set(
		    err,
		    "unsafe path '%s' refused: empty, '.' or '..' segment, backslash or control character",
		    path);
		return 0;
	}
	return 1;
}

typedef struct index_entry {
	char *path;
	uint64_t bytes;
	char sha256[65];
	char *staged;
	int keep_existing;
} index_entry;

static int parse_index(const char *text, size_t len, index_entry **out, size_t *count_out, rerr *err)
{
	jv *arr = jv_parse(text, len, err);
	index_entry *entries = NULL;
	size_t i, n;
	int rc = -1;
	if (!arr) {
		err_prefix(err, "unreadable %s", TAR_INDEX_NAME);
		return -1;
	}
	if (arr->type != JV_ARRAY) {
		err_set(err, "%s is not a JSON array", TAR_INDEX_NAME);
		goto cleanup;
	}
	n = arr->count;
	entries = xcalloc(n ? n : 1, sizeof(*entries));
	for (i = 0; i < n; i++) {
		jv *o = arr->items[i];
		const char *path = jv_get_str(o, "path");
		const char *sha = jv_get_str(o, "sha256");
		int64_t bytes;
		size_t j;
		if (!jv_is(o, JV_OBJECT) || o->count != 3 || !path || !sha ||
		    !jv_get_int(o, "bytes", &bytes) || bytes < 0 || !sha256_hex_ok(sha)) {
			err_set(err, "%s entry %zu is not {path, bytes, sha256}", TAR_INDEX_NAME, i);
			goto cleanup;
		}
		if (!member_path_ok(path, err))
			goto cleanup;
		for (j = 0; j < i; j++) {
			if (strcmp(entries[j].path, path) == 0) {
				err_set(err, "path '%s' appears twice in %s", path, TAR_INDEX_NAME);
				goto cleanup;
			}
		}
		entries[i].path = xstrdup(path);
		entries[i].bytes = (uint64_t)bytes;
		memcpy(entries[i].sha256, sha, 65);
	}
	*out = entries;
	*count_out = n;
	entries = NULL;
	rc = 0;
cleanup:
	if (entries) {
		for (i = 0; i < n; i++)
			free(entries[i].path);
		free(entries);
	}
	jv_free(arr);
	return rc;
}

/* Orders paths segment by segment, so "a" is directly followed by "a/…". */
static int seg_cmp(const void *a, const void *b)
{
	const unsigned char *x = *(const unsigned char *const *)a;
	const unsigned char *y = *(const unsigned char *const *)b;
	for (;; x++, y++) {
		unsigned cx = *x == '/' ? 1 : *x;
		unsigned cy = *y == '/' ? 1 : *y;
		if (cx != cy)
			return cx < cy ? -1 : 1;
		if (!cx)
			return 0;
	}
}

static int paths_conflict(index_entry *entries, size_t n, rerr *err)
{
	const char **paths = xcalloc(n ? n : 1, sizeof(*paths));
	size_t i;
	int rc = 0;
	for (i = 0; i < n; i++)
		paths[i] = entries[i].path;
	qsort(paths, n, sizeof(*paths), seg_cmp);
	for (i = 0; i + 1 < n; i++) {
		size_t len = strlen(paths[i]);
		if (strncmp(paths[i], paths[i + 1], len) == 0 && paths[i + 1][len] == '/') {
			err_set(err, "'%s' is both a file and a directory in the archive", paths[i]);
			rc = -1;
			break;
		}
	}
	free(paths);
	return rc;
}

static int stage_member(in_stream *is, const char *staged_path, index_entry *e, rerr *err)
{
	int fd = open(staged_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	char *chunk = NULL;
	uint64_t left = e->bytes;
	sha256_state hs;
	char hex[65];
	int rc = -1;
	if (fd < 0) {
		err_set(err, "cannot create %s: %s", staged_path, strerror(errno));
		return -1;
	}
	chunk = xmalloc(COPY_CHUNK);
	sha256_begin(&hs);
	while (left) {
		size_t n = left > COPY_CHUNK ? COPY_CHUNK : (size_t)left;
		const char *p = chunk;
		size_t w = n;
		if (in_read(is, chunk, n, err) != 0)
			goto cleanup;
		sha256_feed(&hs, chunk, n);
		while (w) {
			ssize_t k = write(fd, p, w);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0) {
				err_set(err, "cannot write %s: %s", staged_path, strerror(errno));
				goto cleanup;
			}
			p += k;
			w -= (size_t)k;
		}
		left -= n;
	}
	if (pad512(e->bytes) > e->bytes) {
		char pad[BLOCK];
		if (in_read(is, pad, (size_t)(pad512(e->bytes) - e->bytes), err) != 0)
			goto cleanup;
	}
	sha256_end_hex(&hs, hex);
	if (strcmp(hex, e->sha256) != 0) {
		err_set(err, "SHA-256 of '%s' differs from the index (corrupted archive)", e->path);
		goto cleanup;
	}
	if (fsync(fd) != 0) {
		err_set(err, "cannot sync %s: %s", staged_path, strerror(errno));
		goto cleanup;
	}
	rc = 0;
cleanup:
	free(chunk);
	if (close(fd) != 0 && rc == 0) {
		err_set(err, "cannot write %s: %s", staged_path, strerror(errno));
		rc = -1;
	}
	return rc;
}

int tar_unpack(const char *root, const char *base_abs, const char *archive_abs, unpack_result *res,
               int *usage_out, rerr *err)
{
	const char *base_rel, *archive_rel;
	in_stream is;
	index_entry *entries = NULL;
	size_t count = 0, i;
	char *path = NULL;
	char *staging = NULL;
	char *index_text = NULL;
	char rnd[17];
	uint64_t size, total = 0;
	int end = 0, rc = -1;
	struct stat st;
	is.fd = -1;
	is.offset = 0;
	*usage_out = 0;
	if (path_below_root(root, archive_abs, &archive_rel) != 0 || !*archive_rel) {
		err_set(err, "archive %s must lie below the guest root %s", archive_abs, root);
		*usage_out = 1;
		goto cleanup;
	}
	if (path_below_root(root, base_abs, &base_rel) != 0) {
		err_set(err, "--base %s must be the guest root or lie below it", base_abs);
		*usage_out = 1;
		goto cleanup;
	}
	if (path_walk_check(root, archive_rel, 0, NULL, err) != 0 || dir_ensure(root, base_rel, err) != 0)
		goto cleanup;
	is.fd = open(archive_abs, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (is.fd < 0 || fstat(is.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		err_set(err, "cannot open archive %s as a regular file: %s", archive_abs,
		        is.fd < 0 ? strerror(errno) : "not a regular file");
		goto cleanup;
	}
	/* The index. */
	if (next_member(&is, &path, &size, &end, err) != 0)
		goto cleanup;
	if (end || strcmp(path, TAR_INDEX_NAME) != 0) {
		err_set(err, "the first member is not %s", TAR_INDEX_NAME);
		goto cleanup;
	}
	if (size > INDEX_MAX_BYTES) {
		err_set(err, "%s of %llu bytes is too large", TAR_INDEX_NAME, (unsigned long long)size);
		goto cleanup;
	}
	index_text = xmalloc((size_t)pad512(size) + 1);
	if (in_read(&is, index_text, (size_t)pad512(size), err) != 0)
		goto cleanup;
	if (parse_index(index_text, (size_t)size, &entries, &count, err) != 0)
		goto cleanup;
	if (paths_conflict(entries, count, err) != 0)
		goto cleanup;
	if (random_hex(rnd, 8, err) != 0)
		goto cleanup;
	{
		char *name = xasprintf(".relay-unpack-%s", rnd);
		staging = path_join(base_abs, name);
		free(name);
	}
	if (mkdir(staging, 0700) != 0) {
		err_set(err, "cannot create %s: %s", staging, strerror(errno));
		free(staging);
		staging = NULL;
		goto cleanup;
	}
	/* The members, in index order. */
	for (i = 0; i < count; i++) {
		free(path);
		path = NULL;
		if (next_member(&is, &path, &size, &end, err) != 0)
			goto cleanup;
		if (end) {
			err_set(err, "the archive ends before index entry '%s'", entries[i].path);
			goto cleanup;
		}
		if (!member_path_ok(path, err))
			goto cleanup;
		if (strcmp(path, entries[i].path) != 0) {
			err_set(err, "member '%s' is not next in the index (expected '%s')", path,
			        entries[i].path);
			goto cleanup;
		}
		if (size != entries[i].bytes) {
			err_set(err, "member '%s' has %llu bytes; the index says %llu", path,
			        (unsigned long long)size, (unsigned long long)entries[i].bytes);
			goto cleanup;
		}
		if (is.offset + pad512(size) > (uint64_t)st.st_size) {
			err_set(err, "truncated archive: member '%s' is larger than the bytes left", path);
			goto cleanup;
		}
		entries[i].staged = xasprintf("%s/%zu", staging, i);
		if (stage_member(&is, entries[i].staged, &entries[i], err) != 0)
			goto cleanup;
		total += size;
	}
	free(path);
	path = NULL;
	if (next_member(&is, &path, &size, &end, err) != 0)
		goto cleanup;
	if (!end) {
		err_set(err, "member '%s' is not in the index", path);
		goto cleanup;
	}
	{
		unsigned char block[BLOCK];
		ssize_t n;
		int r = in_read(&is, block, BLOCK, err);
		if (r != 0) {
			if (r > 0)
				err_set(err, "truncated archive: only one end-of-archive block");
			goto cleanup;
		}
		if (!rs_tar_zero(block, BLOCK)) {
			err_set(err, "trailing data after the end of the archive");
			goto cleanup;
		}
		while ((n = read(is.fd, block, BLOCK)) != 0) {
			ssize_t k;
			if (n < 0) {
				if (errno == EINTR)
					continue;
				err_set(err, "cannot read the archive: %s", strerror(errno));
				goto cleanup;
			}
			for (k = 0; k < n; k++) {
				if (block[k]) {
					err_set(err, "trailing data after the end of the archive");
					goto cleanup;
				}
			}
		}
	}
	/* Check every target before placing anything. */
	for (i = 0; i < count; i++) {
		char *target_rel =
		    *base_rel ? xasprintf("%s/%s", base_rel, entries[i].path) : xstrdup(entries[i].path);
		int exists = 0;
		int ok = path_walk_check(root, target_rel, 1, &exists, err);
		if (ok == 0 && exists) {
			char *target = path_join(root, target_rel);
			struct stat tst;
			char hex[65];
			uint64_t bytes = 0;
			if (lstat(target, &tst) != 0 || !S_ISREG(tst.st_mode) ||
			    hash_regular_file(target, &tst, hex, &bytes, err) != 0 ||
			    bytes != entries[i].bytes || strcmp(hex, entries[i].sha256) != 0) {
				err_set(err,
				        "'%s' already exists in the destination with other content; remove "
				        "it first",
				        entries[i].path);
				ok = -1;
			} else {
				entries[i].keep_existing = 1;
			}
			free(target);
		}
		free(target_rel);
		if (ok != 0)
			goto cleanup;
	}
	/* Place. */
	{
		char *last_parent = NULL;
		for (i = 0; i < count; i++) {
			char *target_rel, *target, *parent_rel, *slash;
			int ok = 0;
			if (entries[i].keep_existing)
				continue;
			target_rel = *base_rel ? xasprintf("%s/%s", base_rel, entries[i].path)
			                       : xstrdup(entries[i].path);
			target = path_join(root, target_rel);
			parent_rel = xstrdup(target_rel);
			slash = strrchr(parent_rel, '/');
			if (slash)
				*slash = '\0';
			else
				parent_rel[0] = '\0';
			if (dir_ensure(root, parent_rel, err) != 0) {
				ok = -1;
			} else if (link(entries[i].staged, target) != 0) {
				if (errno == EEXIST || path_exists(target) ||
				    rename(entries[i].staged, target) != 0) {
					err_set(err, "cannot place %s: %s", entries[i].path, strerror(errno));
					ok = -1;
				}
			}
			if (ok == 0 && last_parent && strcmp(last_parent, parent_rel) != 0) {
				char *dir = path_join(root, last_parent);
				ok = fsync_dir(dir, err);
				free(dir);
			}
			free(last_parent);
			last_parent = parent_rel;
			free(target_rel);
			free(target);
			if (ok != 0) {
				free(last_parent);
				goto cleanup;
			}
		}
		if (last_parent) {
			char *dir = path_join(root, last_parent);
			int ok = fsync_dir(dir, err);
			free(dir);
			free(last_parent);
			if (ok != 0)
				goto cleanup;
		}
	}
	res->unpacked = count;
	res->bytes = total;
	rc = 0;
cleanup:
	if (staging) {
		rerr ignored;
		remove_tree(staging, &ignored);
		fsync_dir(base_abs, &ignored);
	}
	if (is.fd >= 0)
		close(is.fd);
	for (i = 0; i < count; i++) {
		free(entries[i].path);
		free(entries[i].staged);
	}
	free(entries);
	free(path);
	free(staging);
	free(index_text);
	return rc;
}
