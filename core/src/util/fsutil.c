#include "util/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "relay_support/tree.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/randx.h"

relay_status fs_mkdir_p(const char *path, mode_t mode, relay_error *err)
{
	rs_error why;
	if (rs_mkdir_p(path, mode, 0, &why) == 0)
		return RELAY_OK;
	relay_status code = why.errnum == EINVAL   ? RELAY_E_INVALID_ARGUMENT
	                    : why.errnum == ENOMEM ? RELAY_E_NO_MEMORY
	                                           : RELAY_E_IO;
	return relay_error_set(err, code, why.errnum, "%s", why.message);
}

relay_status fs_write_all(int fd, const void *data, size_t len, const char *what, relay_error *err)
{
	const char *p = data;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return relay_error_set(err, errno == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO, errno,
			                       "cannot write %s: %s", what, strerror(errno));
		}
		p += n;
		len -= (size_t)n;
	}
	return RELAY_OK;
}

/* The open sync group of this thread (fsutil.h). Thread-local rather than
 * global: each thread (a run, a background step download) has its own
 * commit points, so no lock is needed and one thread's group never delays
 * another's. `fds` hold one descriptor per file system noted, for syncfs. */
#define SYNC_GROUP_MAX_FS 4
typedef struct sync_group {
	bool open;
	int count;
	dev_t devs[SYNC_GROUP_MAX_FS];
	int fds[SYNC_GROUP_MAX_FS];
} sync_group;
static _Thread_local sync_group tl_group;

bool fs_sync_group_begin(void)
{
	if (tl_group.open)
		return false;
	memset(&tl_group, 0, sizeof tl_group);
	tl_group.open = true;
	return true;
}

relay_status fs_sync_group_commit(relay_error *err)
{
	relay_status status = RELAY_OK;
	for (int i = 0; i < tl_group.count; i++) {
		if (syncfs(tl_group.fds[i]) != 0 && status == RELAY_OK)
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync the file system: %s",
			                         strerror(errno));
		close(tl_group.fds[i]);
	}
	tl_group.count = 0;
	return status;
}

relay_status fs_sync_group_end(bool opened, relay_error *err)
{
	if (!opened)
		return RELAY_OK;
	relay_status status = fs_sync_group_commit(err);
	tl_group.open = false;
	return status;
}

/* Notes fd's file system in the open group. False when no group is open or
 * it cannot take another file system: the caller then syncs at once. */
static bool group_note(int fd)
{
	if (!tl_group.open)
		return false;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return false;
	for (int i = 0; i < tl_group.count; i++)
		if (tl_group.devs[i] == st.st_dev)
			return true;
	if (tl_group.count == SYNC_GROUP_MAX_FS)
		return false;
	int keep = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (keep < 0)
		return false;
	tl_group.devs[tl_group.count] = st.st_dev;
	tl_group.fds[tl_group.count++] = keep;
	return true;
}

int fs_fsync_fd(int fd)
{
	return group_note(fd) ? 0 : fsync(fd);
}

relay_status fs_fsync_dir(const char *path, relay_error *err)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot open folder %s: %s", path,
		                       strerror(errno));
	relay_status status = RELAY_OK;
	if (fs_fsync_fd(fd) != 0 && errno != EINVAL)
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync folder %s: %s", path,
		                         strerror(errno));
	close(fd);
	return status;
}

relay_status fs_fsync_parent(const char *path, relay_error *err)
{
	char *dir = fs_dirname(path);
	if (dir == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	relay_status status = fs_fsync_dir(dir, err);
	free(dir);
	return status;
}

relay_status fs_write_exclusive(const char *path, const void *data, size_t len, mode_t mode, relay_error *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot create %s: %s", path, strerror(errno));
	relay_status status = fs_write_all(fd, data, len, path, err);
	if (status == RELAY_OK && fs_fsync_fd(fd) != 0)
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s: %s", path, strerror(errno));
	close(fd);
	if (status != RELAY_OK)
		unlink(path);
	return status;
}

relay_status fs_write_durable(const char *path, const void *data, size_t len, mode_t mode, relay_error *err)
{
	char suffix[17];
	random_hex(suffix, 16);
	size_t tmp_len = strlen(path) + 32;
	char *tmp = malloc(tmp_len);
	if (tmp == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	snprintf(tmp, tmp_len, "%s.tmp-%s", path, suffix);
	relay_status status = fs_write_exclusive(tmp, data, len, mode, err);
	if (status != RELAY_OK)
		goto cleanup;
	if (rename(tmp, path) != 0) {
		status =
		    relay_error_set(err, RELAY_E_IO, errno, "cannot replace %s: %s", path, strerror(errno));
		unlink(tmp);
		goto cleanup;
	}
	status = fs_fsync_parent(path, err);
cleanup:
	free(tmp);
	return status;
}

relay_status fs_write_json_durable(const char *path, const json_object *obj, relay_error *err)
{
	strbuf sb = STRBUF_INIT;
	jsonx_write(&sb, obj, JSONX_PRETTY);
	strbuf_putc(&sb, '\n');
	if (!strbuf_ok(&sb)) {
		strbuf_free(&sb);
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	relay_status status = fs_write_durable(path, sb.data, sb.len, 0600, err);
	strbuf_free(&sb);
	return status;
}

relay_status fs_read_fd(int fd, const char *name, size_t max_bytes, char **data_out, size_t *len_out,
                        relay_error *err)
{
	*data_out = NULL;
	relay_status status = RELAY_OK;
	char *buf = NULL;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot stat %s", name);
		goto cleanup;
	}
	if (!S_ISREG(st.st_mode)) {
		status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "not a regular file: %s", name);
		goto cleanup;
	}
	if ((uint64_t)st.st_size > max_bytes) {
		status = relay_error_set(err, RELAY_E_TOO_LARGE, 0, "%s is larger than %zu bytes", name,
		                         max_bytes);
		goto cleanup;
	}
	size_t cap = (size_t)st.st_size + 1, len = 0;
	buf = malloc(cap);
	if (buf == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	for (;;) {
		if (len + 1 == cap) {
			if (cap - 1 >= max_bytes + 1) {
				status = relay_error_set(err, RELAY_E_TOO_LARGE, 0, "%s grew past %zu bytes",
				                         name, max_bytes);
				goto cleanup;
			}
			char *grown = realloc(buf, cap * 2);
			if (grown == NULL) {
				status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
				goto cleanup;
			}
			buf = grown;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot read %s: %s", name,
			                         strerror(errno));
			goto cleanup;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > max_bytes) {
		status = relay_error_set(err, RELAY_E_TOO_LARGE, 0, "%s is larger than %zu bytes", name,
		                         max_bytes);
		goto cleanup;
	}
	buf[len] = '\0';
	*data_out = buf;
	buf = NULL;
	if (len_out)
		*len_out = len;
cleanup:
	free(buf);
	return status;
}

relay_status fs_read_file(const char *path, size_t max_bytes, char **data_out, size_t *len_out,
                          relay_error *err)
{
	*data_out = NULL;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT)
			return relay_error_set(err, RELAY_E_NOT_FOUND, errno, "no such file: %s", path);
		if (errno == ELOOP)
			return relay_error_set(err, RELAY_E_UNSAFE_PATH, errno, "symlink %s", path);
		return relay_error_set(err, RELAY_E_IO, errno, "cannot open %s: %s", path, strerror(errno));
	}
	relay_status status = fs_read_fd(fd, path, max_bytes, data_out, len_out, err);
	close(fd);
	return status;
}

relay_status fs_read_json(const char *path, size_t max_bytes, json_object **obj_out, relay_error *err)
{
	char *data = NULL;
	size_t len = 0;
	*obj_out = NULL;
	relay_status status = fs_read_file(path, max_bytes, &data, &len, err);
	if (status != RELAY_OK)
		return status;
	char reason[128];
	bool is_null = false;
	json_object *obj = jsonx_parse(data, len, &is_null, reason, sizeof reason);
	free(data);
	if (obj == NULL && !is_null)
		return relay_error_set(err, RELAY_E_PROTOCOL, 0, "%s is not valid JSON: %s", path, reason);
	*obj_out = obj;
	return RELAY_OK;
}

relay_status fs_remove_tree(const char *path, relay_error *err)
{
	rs_error why;
	if (rs_remove_tree(path, &why) == 0)
		return RELAY_OK;
	return relay_error_set(err, why.errnum == EINVAL ? RELAY_E_INVALID_ARGUMENT : RELAY_E_IO, why.errnum,
	                       "%s", why.message);
}

char *fs_path_join(const char *a, const char *b)
{
	size_t la = strlen(a);
	while (la > 1 && a[la - 1] == '/')
		la--;
	while (*b == '/')
		b++;
	size_t lb = strlen(b);
	char *out = malloc(la + lb + 2);
	if (out == NULL)
		return NULL;
	memcpy(out, a, la);
	size_t n = la;
	if (lb > 0 && !(la == 1 && a[0] == '/'))
		out[n++] = '/';
	memcpy(out + n, b, lb);
	out[n + lb] = '\0';
	return out;
}

char *fs_dirname(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (slash == NULL)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

const char *fs_basename(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

bool fs_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool fs_exists_nofollow(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

relay_status fs_free_bytes(const char *path, uint64_t *free_out, relay_error *err)
{
	struct statvfs sv;
	if (statvfs(path, &sv) != 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot read free space of %s: %s", path,
		                       strerror(errno));
	*free_out = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
	return RELAY_OK;
}

relay_status fs_copy_file(const char *src, const char *dst, mode_t mode, relay_error *err)
{
	int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return relay_error_set(err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, errno,
		                       "cannot open %s: %s", src, strerror(errno));
	relay_status status = RELAY_OK;
	int out = -1;
	struct stat st;
	if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
		status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "not a regular file: %s", src);
		goto cleanup;
	}
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (out < 0) {
		status =
		    relay_error_set(err, RELAY_E_IO, errno, "cannot create %s: %s", dst, strerror(errno));
		goto cleanup;
	}
	char buf[1 << 16];
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot read %s", src);
			goto cleanup;
		}
		if (n == 0)
			break;
		status = fs_write_all(out, buf, (size_t)n, dst, err);
		if (status != RELAY_OK)
			goto cleanup;
	}
	if (fs_fsync_fd(out) != 0)
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s", dst);
cleanup:
	if (out >= 0) {
		close(out);
		if (status != RELAY_OK)
			unlink(dst);
	}
	close(in);
	return status;
}
