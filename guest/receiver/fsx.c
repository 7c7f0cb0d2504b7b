/*
 * receiver/fsx.c — see fsx.h.
 */
#include "fsx.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "relay_support/fds.h"
#include "relay_support/tree.h"
#include "sha256.h"

#define HASH_CHUNK_BYTES (8u * 1024u * 1024u)

int rel_path_ok(const char *rel)
{
	const char *seg = rel;
	if (!rel || !*rel || rel[0] == '/')
		return 0;
	for (;;) {
		const char *end = strchr(seg, '/');
		size_t n = end ? (size_t)(end - seg) : strlen(seg);
		size_t i;
		if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return 0;
		for (i = 0; i < n; i++) {
			unsigned char c = (unsigned char)seg[i];
			if (c == '\\' || c < 0x20 || c == 0x7f)
				return 0;
		}
		if (!end)
			return 1;
		seg = end + 1;
	}
}

static int abs_path_normal(const char *path)
{
	return path && path[0] == '/' && path[1] != '\0' && rel_path_ok(path + 1);
}

int root_check(const char *root, rerr *err)
{
	struct stat st;
	if (!abs_path_normal(root)) {
		err_set(err,
		        "guest root '%s' must be an absolute path without '.', '..', empty segments or a "
		        "trailing '/'",
		        root ? root : "");
		return -1;
	}
	if (lstat(root, &st) != 0) {
		err_set(err, "guest root %s: %s (stage the guest first)", root, strerror(errno));
		return -1;
	}
	if (S_ISLNK(st.st_mode)) {
		err_set(err, "guest root %s is a symbolic link; the guest root must be a real directory",
		        root);
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		err_set(err, "guest root %s is not a directory", root);
		return -1;
	}
	return 0;
}

int path_below_root(const char *root, const char *abs, const char **rel_out)
{
	size_t n = strlen(root);
	if (!abs || strncmp(abs, root, n) != 0)
		return -1;
	if (abs[n] == '\0') {
		*rel_out = abs + n;
		return 0;
	}
	if (abs[n] != '/' || !rel_path_ok(abs + n + 1))
		return -1;
	*rel_out = abs + n + 1;
	return 0;
}

/* Deferred syncs (spec/guest.md §16.2 item 4). The receiver is one thread, so
 * this state needs no lock: while `defer_root_fd` is open, fsx_fsync and
 * fsync_dir only note that something is to be synced, and fsx_commit makes
 * all of it durable with one syncfs of the guest root's filesystem. */
static int defer_root_fd = -1;
static int defer_pending;

int fsx_defer_syncs(const char *root)
{
#if defined(__linux__) && defined(SYS_syncfs)
	if (defer_root_fd >= 0)
		return 0;
	defer_root_fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return defer_root_fd >= 0 ? 0 : -1;
#else
	(void)root;
	return -1;
#endif
}

int fsx_commit(rerr *err)
{
	if (defer_root_fd < 0 || !defer_pending)
		return 0;
#if defined(__linux__) && defined(SYS_syncfs)
	if (syscall(SYS_syncfs, defer_root_fd) != 0) {
		err_set(err, "cannot sync the guest root's filesystem: %s", strerror(errno));
		return -1;
	}
#endif
	defer_pending = 0;
	return 0;
}

int fsx_fsync(int fd)
{
	if (defer_root_fd >= 0) {
		defer_pending = 1;
		return 0;
	}
	return fsync(fd);
}

int fsync_dir(const char *dir, rerr *err)
{
	int fd;
	if (defer_root_fd >= 0) {
		defer_pending = 1;
		return 0;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		err_set(err, "cannot open directory %s to sync it: %s", dir, strerror(errno));
		return -1;
	}
	if (fsync(fd) != 0 && errno != EINVAL) {
		err_set(err, "cannot sync directory %s: %s", dir, strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* Walks rel below root (in path, root already in it) one component at a
 * time: none may be a symbolic link, each a directory but the last when
 * file_ok. A missing component ends the walk with *exists_out 0 when
 * allow_missing, is created (0700, its parent synced) when create, and is an
 * error otherwise. 0, or -1 with err. */
static int walk_components(buf *path, const char *rel, int file_ok, int allow_missing, int create,
                           int *exists_out, rerr *err)
{
	const char *seg = rel;
	struct stat st;
	while (*seg) {
		const char *end = strchr(seg, '/');
		size_t n = end ? (size_t)(end - seg) : strlen(seg);
		size_t parent_len = path->len;
		buf_putc(path, '/');
		buf_append(path, seg, n);
		if (lstat(path->data, &st) != 0) {
			if (errno == ENOENT && allow_missing) {
				if (exists_out)
					*exists_out = 0;
				return 0;
			}
			if (errno != ENOENT || !create) {
				err_set(err, "%s: %s", path->data, strerror(errno));
				return -1;
			}
			if (mkdir(path->data, 0700) != 0 && errno != EEXIST) {
				err_set(err, "cannot create directory %s: %s", path->data, strerror(errno));
				return -1;
			}
			if (lstat(path->data, &st) != 0) {
				err_set(err, "%s: %s", path->data, strerror(errno));
				return -1;
			}
			char saved = path->data[parent_len];
			path->data[parent_len] = '\0';
			if (fsync_dir(path->data, err) != 0)
				return -1;
			path->data[parent_len] = saved;
		}
		if (S_ISLNK(st.st_mode)) {
			err_set(err, "symlink %s: symbolic links are refused at and below the guest root",
			        path->data);
			return -1;
		}
		if ((end || !file_ok) && !S_ISDIR(st.st_mode)) {
			err_set(err, "%s %s", path->data,
			        create ? "exists and is not a directory" : "is not a directory");
			return -1;
		}
		if (!end)
			break;
		seg = end + 1;
	}
	return 0;
}

int path_walk_check(const char *root, const char *rel, int allow_missing, int *exists_out, rerr *err)
{
	buf path;
	struct stat st;
	int rc = -1;
	buf_init(&path);
	buf_puts(&path, root);
	if (exists_out)
		*exists_out = 1;
	if (lstat(root, &st) != 0 || S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode))
		err_set(err, "guest root %s is not a real directory", root);
	else
		rc = walk_components(&path, rel, 1, allow_missing, 0, exists_out, err);
	buf_free(&path);
	return rc;
}

int dir_ensure(const char *root, const char *rel, rerr *err)
{
	buf path;
	int rc = -1;
	buf_init(&path);
	buf_puts(&path, root);
	if (*rel && !rel_path_ok(rel))
		err_set(err, "invalid relative path '%s'", rel);
	else
		rc = walk_components(&path, rel, 0, 0, 1, NULL, err);
	buf_free(&path);
	return rc;
}

/* Writes dir/<name>.tmp-<random>; returns its malloc'd path or NULL. */
static char *write_temp(const char *dir, const char *name, const void *data, size_t len, rerr *err)
{
	char rnd[17];
	char *tmp;
	int fd;
	if (random_hex(rnd, 8, err) != 0)
		return NULL;
	tmp = xasprintf("%s/%s.tmp-%s", dir, name, rnd);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		err_set(err, "cannot create %s: %s", tmp, strerror(errno));
		free(tmp);
		return NULL;
	}
	if (rs_write_all(fd, data, len) != 0 || fsx_fsync(fd) != 0) {
		err_set(err, "cannot write %s: %s", tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		free(tmp);
		return NULL;
	}
	if (close(fd) != 0) {
		err_set(err, "cannot write %s: %s", tmp, strerror(errno));
		unlink(tmp);
		free(tmp);
		return NULL;
	}
	return tmp;
}

int durable_write(const char *dir, const char *name, const void *data, size_t len, rerr *err)
{
	char *tmp = write_temp(dir, name, data, len, err);
	char *target;
	int rc = -1;
	if (!tmp)
		return -1;
	target = path_join(dir, name);
	if (rename(tmp, target) != 0) {
		err_set(err, "cannot rename %s to %s: %s", tmp, target, strerror(errno));
		unlink(tmp);
		goto cleanup;
	}
	rc = fsync_dir(dir, err);
cleanup:
	free(tmp);
	free(target);
	return rc;
}

int durable_write_new(const char *dir, const char *name, const void *data, size_t len, int *exists_out,
                      rerr *err)
{
	char *tmp = write_temp(dir, name, data, len, err);
	char *target;
	int rc = -1;
	if (exists_out)
		*exists_out = 0;
	if (!tmp)
		return -1;
	target = path_join(dir, name);
	if (link(tmp, target) != 0) {
		int e = errno;
		if (e == EEXIST) {
			if (exists_out)
				*exists_out = 1;
			err_set(err, "%s already exists", target);
			unlink(tmp);
			goto cleanup;
		}
		/* A filesystem without hard links: fall back to a checked rename. */
		if (!path_exists(target) && rename(tmp, target) == 0) {
			rc = fsync_dir(dir, err);
			goto cleanup;
		}
		err_set(err, "cannot create %s: %s", target, strerror(e));
		unlink(tmp);
		goto cleanup;
	}
	unlink(tmp);
	rc = fsync_dir(dir, err);
cleanup:
	free(tmp);
	free(target);
	return rc;
}

int read_file_limited(const char *path, size_t max_bytes, buf *out, int *missing_out, int *too_large_out,
                      rerr *err)
{
	int fd;
	struct stat st;
	char chunk[65536];
	if (missing_out)
		*missing_out = 0;
	if (too_large_out)
		*too_large_out = 0;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT && missing_out)
			*missing_out = 1;
		if (errno == ELOOP)
			err_set(err, "symlink %s: symbolic links are refused", path);
		else
			err_set(err, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		err_set(err, "%s is not a regular file", path);
		close(fd);
		return -1;
	}
	if ((uint64_t)st.st_size > max_bytes) {
		if (too_large_out)
			*too_large_out = 1;
		err_set(err, "%s is larger than %zu bytes", path, max_bytes);
		close(fd);
		return -1;
	}
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err_set(err, "cannot read %s: %s", path, strerror(errno));
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		buf_append(out, chunk, (size_t)n);
		if (out->len > max_bytes) {
			if (too_large_out)
				*too_large_out = 1;
			err_set(err, "%s is larger than %zu bytes", path, max_bytes);
			close(fd);
			return -1;
		}
	}
	if (!out->data)
		buf_append(out, "", 0);
	close(fd);
	return 0;
}

int hash_fd(int fd, char hex[65], uint64_t *bytes_out, rerr *err)
{
	return hash_fd_prefix(fd, UINT64_MAX, hex, bytes_out, err);
}

int hash_fd_prefix(int fd, uint64_t max_bytes, char hex[65], uint64_t *bytes_out, rerr *err)
{
	sha256_state st;
	char *chunk = xmalloc(HASH_CHUNK_BYTES);
	uint64_t total = 0;
	int rc = -1;
	sha256_begin(&st);
	while (total < max_bytes) {
		size_t want =
		    max_bytes - total < HASH_CHUNK_BYTES ? (size_t)(max_bytes - total) : HASH_CHUNK_BYTES;
		ssize_t n = read(fd, chunk, want);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err_set(err, "read failed: %s", strerror(errno));
			goto cleanup;
		}
		if (n == 0)
			break;
		sha256_feed(&st, chunk, (size_t)n);
		total += (uint64_t)n;
	}
	sha256_end_hex(&st, hex);
	*bytes_out = total;
	rc = 0;
cleanup:
	free(chunk);
	return rc;
}

int path_is_append_only_log(const char *path)
{
	const char *dir = strstr(path, "/state/background/");
	size_t len = strlen(path);
	return dir && len > 4 && strcmp(path + len - 4, ".log") == 0 &&
	       strchr(dir + strlen("/state/background/"), '/') == NULL;
}

char *path_join(const char *a, const char *b)
{
	if (!b || !*b)
		return xstrdup(a);
	return xasprintf("%s/%s", a, b);
}

int path_exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

int remove_tree(const char *path, rerr *err)
{
	rs_error why;
	if (rs_remove_tree(path, &why) == 0)
		return 0;
	err_set(err, "%s", why.message);
	return -1;
}
