/*
 * xfer_paths.c — guest paths: split, checked, and opened one component at a time
 * with O_NOFOLLOW under the guest's root.
 * Part of the transfers of xfer.c (see there).
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "local.h"
#include "xfer_int.h"

/* ---- guest paths ------------------------------------------------------------ */

/* Splits an absolute guest path into components; refuses ".", "..", empty
 * components other than a trailing slash, and NUL-free checks. */
int split_guest_path(const char *path, char *buf, size_t size, char **comps, int max, int *count)
{
	if (path == NULL || path[0] != '/')
		return EINVAL;
	if (strlen(path) >= size)
		return ENAMETOOLONG;
	snprintf(buf, size, "%s", path + 1);
	int n = 0;
	char *save = NULL;
	for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (strcmp(c, ".") == 0 || strcmp(c, "..") == 0 || n >= max)
			return EINVAL;
		comps[n++] = c;
	}
	*count = n;
	return 0;
}

bool relative_path_ok(const char *rel)
{
	if (rel == NULL || rel[0] == '\0' || rel[0] == '/')
		return false;
	const char *p = rel;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (!slash)
			break;
		p = slash + 1;
	}
	return true;
}

bool writable_fs(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) != 0)
		return false;
	return sf.f_type == OVERLAYFS_MAGIC || sf.f_type == TMPFS_MAGIC_;
}

/* Opens folder comps[0..n) under dir_fd, creating missing ones (0700, the
 * guest user's) when `create`. Returns an O_RDONLY|O_DIRECTORY fd or -1 with
 * errno (ELOOP/ENOTDIR for a link or a non-folder on the way). */
int open_dirs(guest_ctx *g, int dir_fd, char **comps, int n, bool create)
{
	int cur = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
	if (cur < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		int next = openat(cur, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT && create) {
			if (mkdirat(cur, comps[i], 0700) != 0 && errno != EEXIST) {
				int e = errno;
				close(cur);
				errno = e;
				return -1;
			}
			if (g->chown_files)
				fchownat(cur, comps[i], g->conn->uid, g->conn->gid, AT_SYMLINK_NOFOLLOW);
			next = openat(cur, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		int e = errno;
		close(cur);
		if (next < 0) {
			errno = e == ELOOP ? ELOOP : e;
			return -1;
		}
		cur = next;
	}
	return cur;
}

relay_status path_error(guest_ctx *g, relay_error *err, int e, const char *what, const char *path)
{
	if (e == ELOOP || e == ENOTDIR || e == EINVAL)
		return lu_err(
		    g->st, err, RELAY_E_UNSAFE_PATH, e,
		    "%s %s in guest %s refused: it passes through a symbolic link, a non-folder, \".\" or "
		    "\"..\"",
		    what, path, g->conn->vm);
	if (e == ENOENT)
		return lu_err(g->st, err, RELAY_E_NOT_FOUND, e, "%s %s does not exist in guest %s", what,
		              path, g->conn->vm);
	return lu_err(g->st, err, RELAY_E_IO, e, "%s %s in guest %s: %s", what, path, g->conn->vm,
	              strerror(e));
}
