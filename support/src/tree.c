#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "relay_support/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One removal: the first failure is kept (errno and message), later ones
 * only keep it failed. */
typedef struct tree_walk {
	int failed;
	int first_errno;
	rs_error *err;
} tree_walk;

static void walk_fail(tree_walk *w, int errnum, const char *what, const char *name)
{
	if (w->failed)
		return;
	w->failed = 1;
	w->first_errno = errnum;
	if (errnum == ELOOP && strcmp(what, "enter") == 0)
		rs_error_set(w->err, errnum, "cannot remove %s: folders nested deeper than %d", name,
		             RS_TREE_MAX_DEPTH);
	else
		rs_error_set(w->err, errnum, "cannot %s %s: %s", what, name, strerror(errnum));
}

static void remove_entry(tree_walk *w, int parent_fd, const char *name, unsigned depth);

/* Removes what folder fd (opened from parent_fd/name) holds; closes fd. */
static void remove_children(tree_walk *w, int fd, const char *name, unsigned depth)
{
	DIR *dir = fdopendir(fd);
	struct dirent *entry;
	if (dir == NULL) {
		walk_fail(w, errno, "list", name);
		close(fd);
		return;
	}
	while ((entry = readdir(dir)) != NULL) {
		if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
			continue;
		remove_entry(w, dirfd(dir), entry->d_name, depth + 1);
	}
	closedir(dir);
}

static void remove_entry(tree_walk *w, int parent_fd, const char *name, unsigned depth)
{
	struct stat st;
	int fd;
	if (fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		if (errno != ENOENT)
			walk_fail(w, errno, "inspect", name);
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		if (unlinkat(parent_fd, name, 0) != 0 && errno != ENOENT)
			walk_fail(w, errno, "remove", name);
		return;
	}
	if (depth >= RS_TREE_MAX_DEPTH) {
		walk_fail(w, ELOOP, "enter", name);
		return;
	}
	fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == EACCES) {
		/* A folder its owner may not read (overlayfs leaves work/work as
		 * d---------): it is being removed, so open it up first. */
		if (fchmodat(parent_fd, name, 0700, AT_SYMLINK_NOFOLLOW) == 0)
			fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		else
			errno = EACCES;
	}
	if (fd < 0) {
		if (errno != ENOENT)
			walk_fail(w, errno, "open", name);
		return;
	}
	remove_children(w, fd, name, depth);
	if (unlinkat(parent_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
		walk_fail(w, errno, "remove folder", name);
}

int rs_remove_tree_at(int dir_fd, const char *name, rs_error *err)
{
	tree_walk w;
	w.failed = 0;
	w.first_errno = 0;
	w.err = err;
	if (name == NULL || name[0] == '\0')
		return rs_error_set(err, EINVAL, "cannot remove a tree: empty path");
	remove_entry(&w, dir_fd, name, 0);
	if (w.failed) {
		errno = w.first_errno;
		return -1;
	}
	return 0;
}

int rs_remove_tree(const char *path, rs_error *err)
{
	return rs_remove_tree_at(AT_FDCWD, path, err);
}

int rs_mkdir_p(const char *path, mode_t mode, unsigned flags, rs_error *err)
{
	size_t len;
	char *copy;
	char *p;
	struct stat st;
	int rc = 0;
	if (flags & ~(unsigned)RS_MKDIR_NO_LINK_LEAF)
		return rs_error_set(err, EINVAL, "cannot create folder %s: unknown flags 0x%x",
		                    path ? path : "", flags);
	len = path ? strlen(path) : 0;
	if (len == 0)
		return rs_error_set(err, EINVAL, "cannot create a folder: empty path");
	copy = malloc(len + 1);
	if (copy == NULL)
		return rs_error_set(err, ENOMEM, "cannot create folder %s: out of memory", path);
	memcpy(copy, path, len + 1);
	for (p = copy + 1;; p++) {
		int end = *p == '\0';
		char saved;
		if (*p != '/' && !end)
			continue;
		saved = *p;
		*p = '\0';
		if (mkdir(copy, mode) != 0 && errno != EEXIST) {
			rc = rs_error_set(err, errno, "cannot create folder %s: %s", copy, strerror(errno));
			goto cleanup;
		}
		*p = saved;
		if (end)
			break;
	}
	if (((flags & RS_MKDIR_NO_LINK_LEAF) ? lstat(path, &st) : stat(path, &st)) != 0)
		rc = rs_error_set(err, errno, "cannot create folder %s: %s", path, strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		rc = rs_error_set(err, ENOTDIR, "cannot create folder %s: %s", path,
		                  S_ISLNK(st.st_mode) ? "it is a symbolic link"
		                                      : "it exists and is not a folder");
cleanup:
	free(copy);
	return rc;
}
