/*
 * receiver/tar_write.c — writing archives (tar_write_archive, tar.h).
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
#include "relay_support/utf8.h"
#include "scan.h"
#include "sha256.h"
#include "tar_block.h"

/* ---- writer ------------------------------------------------------------ */

typedef struct out_stream {
	int fd;
	sha256_state hash;
	uint64_t written;
} out_stream;

static int out_write(out_stream *os, const void *data, size_t len, rerr *err)
{
	const char *p = data;
	sha256_feed(&os->hash, data, len);
	os->written += len;
	while (len) {
		ssize_t n = write(os->fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err_set(err, "cannot write the archive: %s", strerror(errno));
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int out_zeros(out_stream *os, uint64_t count, rerr *err)
{
	static const char zeros[BLOCK];
	while (count) {
		size_t n = count > BLOCK ? BLOCK : (size_t)count;
		if (out_write(os, zeros, n, err) != 0)
			return -1;
		count -= n;
	}
	return 0;
}

static void octal_field(unsigned char *field, size_t width, uint64_t value)
{
	/* width-1 octal digits, then NUL */
	size_t i;
	for (i = width - 1; i > 0; i--) {
		field[i - 1] = (unsigned char)('0' + (value & 7));
		value >>= 3;
	}
	field[width - 1] = '\0';
}

/* Name placement for ustar: 0 and name/prefix lengths when it fits. */
static int ustar_split(const char *path, size_t *prefix_len)
{
	size_t len = strlen(path);
	size_t i;
	if (len <= 100) {
		*prefix_len = 0;
		return 0;
	}
	for (i = 0; i < len && i <= 155; i++) {
		if (path[i] == '/' && len - i - 1 <= 100 && len - i - 1 >= 1) {
			*prefix_len = i;
			return 0;
		}
	}
	return -1;
}

static void build_header(unsigned char h[BLOCK], const char *name, size_t name_len, const char *prefix,
                         size_t prefix_len, uint64_t size, int64_t mtime, char type)
{
	unsigned sum = 0;
	size_t i;
	memset(h, 0, BLOCK);
	memcpy(h, name, name_len > 100 ? 100 : name_len);
	octal_field(h + 100, 8, 0600);
	octal_field(h + 108, 8, 0);
	octal_field(h + 116, 8, 0);
	octal_field(h + 124, 12, size);
	octal_field(h + 136, 12, mtime > 0 ? (uint64_t)mtime : 0);
	memset(h + 148, ' ', 8);
	h[156] = (unsigned char)type;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	octal_field(h + 329, 8, 0);
	octal_field(h + 337, 8, 0);
	if (prefix_len)
		memcpy(h + 345, prefix, prefix_len > 155 ? 155 : prefix_len);
	for (i = 0; i < BLOCK; i++)
		sum += h[i];
	text_format((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

static size_t pax_record_len(size_t path_len)
{
	size_t body = strlen(" path=") + path_len + 1;
	size_t total = body + 1;
	for (;;) {
		char digits[32];
		size_t d = (size_t)snprintf(digits, sizeof(digits), "%zu", total);
		if (body + d == total)
			return total;
		total = body + d;
	}
}

/* Bytes an entry takes in the archive (headers, data, padding). */
static uint64_t entry_bytes(const char *path, uint64_t size)
{
	size_t prefix_len;
	uint64_t n = BLOCK + pad512(size);
	if (ustar_split(path, &prefix_len) != 0)
		n += BLOCK + pad512(pax_record_len(strlen(path)));
	return n;
}

static int write_entry_header(out_stream *os, const char *path, uint64_t size, int64_t mtime, rerr *err)
{
	unsigned char h[BLOCK];
	size_t prefix_len;
	if (ustar_split(path, &prefix_len) == 0) {
		if (prefix_len)
			build_header(h, path + prefix_len + 1, strlen(path + prefix_len + 1), path,
			             prefix_len, size, mtime, '0');
		else
			build_header(h, path, strlen(path), NULL, 0, size, mtime, '0');
		return out_write(os, h, BLOCK, err);
	} else {
		const char *base = strrchr(path, '/');
		size_t rec_len = pax_record_len(strlen(path));
		char *rec = xasprintf("%zu path=%s\n", rec_len, path);
		char pax_name[101];
		size_t base_len;
		int rc;
		base = base ? base + 1 : path;
		base_len = rs_utf8_cut(base, strlen(base), 88);
		text_format(pax_name, sizeof(pax_name), "PaxHeaders/%.*s", (int)base_len, base);
		build_header(h, pax_name, strlen(pax_name), NULL, 0, rec_len, mtime, 'x');
		rc = out_write(os, h, BLOCK, err);
		if (rc == 0)
			rc = out_write(os, rec, rec_len, err);
		if (rc == 0)
			rc = out_zeros(os, pad512(rec_len) - rec_len, err);
		free(rec);
		if (rc != 0)
			return -1;
		base_len = rs_utf8_cut(base, strlen(base), 100);
		build_header(h, base, base_len, NULL, 0, size, mtime, '0');
		return out_write(os, h, BLOCK, err);
	}
}

typedef struct arch_item {
	const char *rel;
	char *abs;
	struct stat st;
	char sha256[65];
	uint64_t bytes;
} arch_item;

static int archive_name_ok(const char *name)
{
	size_t len = strlen(name), i;
	const size_t pre = strlen(RECEIVER_TRANSIENT_ARCHIVE);
	if (len <= pre + 4 || strncmp(name, RECEIVER_TRANSIENT_ARCHIVE, pre) != 0 ||
	    strcmp(name + len - 4, ".tar") != 0)
		return 0;
	for (i = pre; i < len - 4; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_'))
			return 0;
	}
	return 1;
}

static int copy_member(out_stream *os, arch_item *it, rerr *err)
{
	int fd = open(it->abs, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	sha256_state hs;
	char hex[65];
	char *chunk = NULL;
	uint64_t copied = 0;
	int rc = -1;
	if (fd < 0) {
		err_set(err, "cannot open %s: %s", it->rel, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != it->st.st_dev ||
	    st.st_ino != it->st.st_ino ||
	    (path_is_append_only_log(it->abs) ? (uint64_t)st.st_size < it->bytes
	                                      : (uint64_t)st.st_size != it->bytes)) {
		err_set(err, "source changed during archive: %s", it->rel);
		goto cleanup;
	}
	if (write_entry_header(os, it->rel, it->bytes, (int64_t)it->st.st_mtime, err) != 0)
		goto cleanup;
	chunk = xmalloc(COPY_CHUNK);
	sha256_begin(&hs);
	while (copied < it->bytes) {
		size_t want = it->bytes - copied > COPY_CHUNK ? COPY_CHUNK : (size_t)(it->bytes - copied);
		ssize_t n = read(fd, chunk, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err_set(err, "source changed during archive: %s", it->rel);
			goto cleanup;
		}
		sha256_feed(&hs, chunk, (size_t)n);
		if (out_write(os, chunk, (size_t)n, err) != 0)
			goto cleanup;
		copied += (uint64_t)n;
	}
	sha256_end_hex(&hs, hex);
	if (strcmp(hex, it->sha256) != 0) {
		err_set(err, "source changed during archive: %s", it->rel);
		goto cleanup;
	}
	if (out_zeros(os, pad512(it->bytes) - it->bytes, err) != 0)
		goto cleanup;
	rc = 0;
cleanup:
	free(chunk);
	close(fd);
	return rc;
}

int tar_write_archive(const char *root, const char *base_abs, char *const *rels, size_t count, int present,
                      const char *out_abs, archive_result *res, int *usage_out, rerr *err)
{
	const char *base_rel, *out_rel;
	arch_item *items = xcalloc(count ? count : 1, sizeof(*items));
	size_t used = 0, i, j, path_bytes = 0;
	jv *index = jv_array();
	char *index_text = NULL;
	uint64_t total;
	struct statvfs vfs;
	out_stream os;
	int created = 0;
	int rc = -1;
	os.fd = -1;
	*usage_out = 0;
	if (path_below_root(root, out_abs, &out_rel) != 0 || strchr(out_rel, '/') ||
	    !archive_name_ok(out_rel)) {
		err_set(err, "--out %s must be %s/.archive-<random>.tar", out_abs, root);
		*usage_out = 1;
		goto cleanup;
	}
	if (path_below_root(root, base_abs, &base_rel) != 0) {
		err_set(err, "--base %s must be the guest root or lie below it", base_abs);
		*usage_out = 1;
		goto cleanup;
	}
	if (path_walk_check(root, base_rel, 0, NULL, err) != 0)
		goto cleanup;
	for (i = 0; i < count; i++) {
		path_bytes += strlen(rels[i]) + 1;
		if (!rel_path_ok(rels[i])) {
			err_set(err, "invalid archive path '%s': relative, no empty, '.' or '..' segment",
			        rels[i]);
			*usage_out = 1;
			goto cleanup;
		}
		for (j = 0; j < i; j++) {
			if (strcmp(rels[i], rels[j]) == 0) {
				err_set(err, "archive path '%s' is given twice", rels[i]);
				*usage_out = 1;
				goto cleanup;
			}
		}
	}
	if (path_bytes > ARCHIVE_PATHS_BYTES) {
		err_set(
		    err,
		    "the paths total %zu bytes (one extra per path); at most %u per command: split the list",
		    path_bytes, ARCHIVE_PATHS_BYTES);
		*usage_out = 1;
		goto cleanup;
	}
	for (i = 0; i < count; i++) {
		char *target_rel = *base_rel ? xasprintf("%s/%s", base_rel, rels[i]) : xstrdup(rels[i]);
		int exists = 0;
		arch_item *it = &items[used];
		int ok = path_walk_check(root, target_rel, 1, &exists, err);
		if (ok == 0 && !exists && !present) {
			err_set(err, "missing %s", rels[i]);
			ok = -1;
		}
		if (ok == 0 && exists) {
			it->rel = rels[i];
			it->abs = path_join(root, target_rel);
			if (lstat(it->abs, &it->st) != 0) {
				err_set(err, "cannot stat %s: %s", rels[i], strerror(errno));
				ok = -1;
			} else if (S_ISLNK(it->st.st_mode)) {
				err_set(err, "symlink %s", rels[i]);
				ok = -1;
			} else if (!S_ISREG(it->st.st_mode)) {
				err_set(err, "%s is not a regular file", rels[i]);
				ok = -1;
			} else {
				ok = hash_regular_file(it->abs, &it->st, it->sha256, &it->bytes, err);
			}
			used++;
		}
		free(target_rel);
		if (ok != 0)
			goto cleanup;
	}
	total = 0;
	for (i = 0; i < used; i++) {
		jv *o = jv_object();
		jv_set_str(o, "path", items[i].rel);
		jv_set_int(o, "bytes", (int64_t)items[i].bytes);
		jv_set_str(o, "sha256", items[i].sha256);
		jv_push(index, o);
		if (items[i].bytes > 077777777777ull) {
			err_set(err, "%s is larger than the 8 GiB a ustar member holds", items[i].rel);
			goto cleanup;
		}
		total += entry_bytes(items[i].rel, items[i].bytes);
	}
	index_text = jv_to_text(index, 0);
	total += entry_bytes(TAR_INDEX_NAME, strlen(index_text)) + 2 * BLOCK;
	if (statvfs(root, &vfs) == 0 && (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize < total) {
		err_set(err, "Not enough guest space for a %llu-byte archive", (unsigned long long)total);
		goto cleanup;
	}
	os.fd = open(out_abs, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (os.fd < 0) {
		err_set(err, "cannot create %s: %s", out_abs, strerror(errno));
		goto cleanup;
	}
	created = 1;
	os.written = 0;
	sha256_begin(&os.hash);
	if (write_entry_header(&os, TAR_INDEX_NAME, strlen(index_text), (int64_t)time(NULL), err) != 0 ||
	    out_write(&os, index_text, strlen(index_text), err) != 0 ||
	    out_zeros(&os, pad512(strlen(index_text)) - strlen(index_text), err) != 0)
		goto cleanup;
	for (i = 0; i < used; i++)
		if (copy_member(&os, &items[i], err) != 0)
			goto cleanup;
	if (out_zeros(&os, 2 * BLOCK, err) != 0)
		goto cleanup;
	if (fsync(os.fd) != 0) {
		err_set(err, "cannot sync %s: %s", out_abs, strerror(errno));
		goto cleanup;
	}
	if (close(os.fd) != 0) {
		os.fd = -1;
		err_set(err, "cannot write %s: %s", out_abs, strerror(errno));
		goto cleanup;
	}
	os.fd = -1;
	if (fsync_dir(root, err) != 0)
		goto cleanup;
	sha256_end_hex(&os.hash, res->sha256);
	res->bytes = os.written;
	res->entries = used;
	rc = 0;
cleanup:
	if (os.fd >= 0)
		close(os.fd);
	if (rc != 0 && created)
		unlink(out_abs);
	for (i = 0; i < count; i++)
		free(items[i].abs);
	free(items);
	jv_free(index);
	free(index_text);
	return rc;
}
