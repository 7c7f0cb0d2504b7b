#include "evidence/fswalk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/array.h"
#include "util/error.h"

bool fw_strlist_push(fw_strlist *list, const char *text)
{
	char **items = array_grow(list->items, &list->capacity, list->count, sizeof *items, 16);
	if (items == NULL)
		return false;
	list->items = items;
	char *copy = strdup(text);
	if (copy == NULL)
		return false;
	list->items[list->count++] = copy;
	return true;
}

void fw_strlist_free(fw_strlist *list)
{
	for (size_t i = 0; i < list->count; i++)
		free(list->items[i]);
	free(list->items);
	list->items = NULL;
	list->count = list->capacity = 0;
}

int fw_open_root(const char *path)
{
	return open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static relay_status open_failure(relay_error *err, const char *what, const char *rel, int e)
{
	if (e == ELOOP || e == ENOTDIR)
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, e,
		                       "%s: a symbolic link or a non-folder is on the way to %s", what, rel);
	if (e == ENOENT)
		return relay_error_set(err, RELAY_E_NOT_FOUND, e, "%s: %s does not exist", what, rel);
	return relay_error_set(err, e == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO, e, "%s %s: %s", what, rel,
	                       strerror(e));
}

int fw_open_dir_at(int root_fd, const char *rel_dir, bool create, fw_strlist *created, relay_error *err)
{
	int fd = fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0) {
		open_failure(err, "cannot open folder", rel_dir, errno);
		return -1;
	}
	size_t len = strlen(rel_dir);
	char *copy = malloc(len + 1);
	if (copy == NULL) {
		close(fd);
		relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		return -1;
	}
	memcpy(copy, rel_dir, len + 1);
	size_t start = 0;
	while (start < len) {
		size_t end = start;
		while (end < len && copy[end] != '/')
			end++;
		copy[end] = '\0';
		const char *comp = copy + start;
		if (comp[0] == '\0' || strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0) {
			relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "path %s has an empty, . or .. segment",
			                rel_dir);
			goto fail;
		}
		if (create) {
			if (mkdirat(fd, comp, 0700) == 0) {
				if (created != NULL && !fw_strlist_push(created, copy)) {
					relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
					goto fail;
				}
			} else if (errno != EEXIST) {
				open_failure(err, "cannot create folder", copy, errno);
				goto fail;
			}
		}
		int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			open_failure(err, "cannot open folder", copy, errno);
			goto fail;
		}
		close(fd);
		fd = next;
		if (end < len)
			copy[end] = '/';
		start = end + 1;
	}
	free(copy);
	return fd;
fail:
	free(copy);
	close(fd);
	return -1;
}

int fw_open_parent_at(int root_fd, const char *rel, bool create, fw_strlist *created, const char **leaf_out,
                      relay_error *err)
{
	const char *slash = strrchr(rel, '/');
	*leaf_out = slash ? slash + 1 : rel;
	if (slash == NULL)
		return fw_open_dir_at(root_fd, "", create, created, err);
	size_t dir_len = (size_t)(slash - rel);
	char *dir = strndup(rel, dir_len);
	if (dir == NULL) {
		relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		return -1;
	}
	int fd = fw_open_dir_at(root_fd, dir, create, created, err);
	free(dir);
	return fd;
}

int fw_open_file_read_at(int root_fd, const char *rel, relay_error *err)
{
	const char *leaf;
	int dir = fw_open_parent_at(root_fd, rel, false, NULL, &leaf, err);
	if (dir < 0)
		return -1;
	int fd = openat(dir, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int e = errno;
	close(dir);
	if (fd < 0) {
		open_failure(err, "cannot open", rel, e);
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                "special file %s: only regular files are allowed", rel);
		return -1;
	}
	/* Back to blocking reads now that it is known to be a regular file. */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

int fw_create_file_at(int root_fd, const char *rel, mode_t mode, fw_strlist *created_dirs, relay_error *err)
{
	const char *leaf;
	int dir = fw_open_parent_at(root_fd, rel, true, created_dirs, &leaf, err);
	if (dir < 0)
		return -1;
	int fd = openat(dir, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	int e = errno;
	close(dir);
	if (fd < 0) {
		if (e == EEXIST)
			relay_error_set(err, RELAY_E_IO, e, "cannot create %s: it already exists", rel);
		else
			open_failure(err, "cannot create", rel, e);
		return -1;
	}
	return fd;
}

relay_status fw_unlink_at(int root_fd, const char *rel, relay_error *err)
{
	const char *leaf;
	relay_error ignored;
	int dir = fw_open_parent_at(root_fd, rel, false, NULL, &leaf, &ignored);
	if (dir < 0)
		return RELAY_OK;
	relay_status status = RELAY_OK;
	if (unlinkat(dir, leaf, 0) != 0 && errno != ENOENT)
		status =
		    relay_error_set(err, RELAY_E_IO, errno, "cannot remove %s: %s", rel, strerror(errno));
	close(dir);
	return status;
}

void fw_rmdir_at(int root_fd, const char *rel)
{
	const char *leaf;
	relay_error ignored;
	int dir = fw_open_parent_at(root_fd, rel, false, NULL, &leaf, &ignored);
	if (dir < 0)
		return;
	(void)unlinkat(dir, leaf, AT_REMOVEDIR);
	close(dir);
}

void fw_tree_free(fw_tree *tree)
{
	for (size_t i = 0; i < tree->count; i++)
		free(tree->items[i].path);
	free(tree->items);
	memset(tree, 0, sizeof *tree);
}

static bool tree_push(fw_tree *tree, const char *path, fw_kind kind, const struct stat *st)
{
	fw_entry *items = array_grow(tree->items, &tree->capacity, tree->count, sizeof *items, 256);
	if (items == NULL)
		return false;
	tree->items = items;
	fw_entry *e = &tree->items[tree->count];
	e->path = strdup(path);
	if (e->path == NULL)
		return false;
	e->kind = kind;
	e->bytes = (uint64_t)st->st_size;
	e->nlink = (uint64_t)st->st_nlink;
	tree->count++;
	return true;
}

static bool skipped(const char *rel, const char *const *skip)
{
	for (size_t i = 0; skip != NULL && skip[i] != NULL; i++) {
		size_t n = strlen(skip[i]);
		if (strncmp(rel, skip[i], n) == 0 && (rel[n] == '\0' || rel[n] == '/'))
			return true;
	}
	return false;
}

static relay_status walk_dir(int dir_fd, const char *prefix, const char *const *skip, fw_tree *out, int depth,
                             relay_error *err)
{
	if (depth > 256)
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "folder tree too deep at %s", prefix);
	int fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot read folder %s: %s", prefix,
		                       strerror(errno));
	DIR *d = fdopendir(fd);
	if (d == NULL) {
		close(fd);
		return relay_error_set(err, RELAY_E_IO, errno, "cannot read folder %s: %s", prefix,
		                       strerror(errno));
	}
	rewinddir(d);
	relay_status status = RELAY_OK;
	struct dirent *de;
	char *rel = NULL;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		free(rel);
		size_t n = strlen(prefix) + strlen(de->d_name) + 2;
		rel = malloc(n);
		if (rel == NULL) {
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
			break;
		}
		snprintf(rel, n, "%s%s%s", prefix, prefix[0] ? "/" : "", de->d_name);
		if (skipped(rel, skip))
			continue;
		struct stat st;
		if (fstatat(dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot stat %s: %s", rel,
			                         strerror(errno));
			break;
		}
		fw_kind kind = S_ISREG(st.st_mode)   ? FW_FILE
		               : S_ISDIR(st.st_mode) ? FW_DIR
		               : S_ISLNK(st.st_mode) ? FW_LINK
		                                     : FW_OTHER;
		if (!tree_push(out, rel, kind, &st)) {
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
			break;
		}
		if (kind == FW_DIR) {
			int sub = openat(dir_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				status = relay_error_set(err, RELAY_E_IO, errno, "cannot open folder %s: %s",
				                         rel, strerror(errno));
				break;
			}
			status = walk_dir(sub, rel, skip, out, depth + 1, err);
			close(sub);
			if (status != RELAY_OK)
				break;
		}
	}
	free(rel);
	closedir(d);
	return status;
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const fw_entry *)a)->path, ((const fw_entry *)b)->path);
}

relay_status fw_walk(const char *root, bool missing_ok, const char *const *skip, fw_tree *out,
                     relay_error *err)
{
	memset(out, 0, sizeof *out);
	int fd = fw_open_root(root);
	if (fd < 0) {
		if (errno == ENOENT && missing_ok)
			return RELAY_OK;
		return relay_error_set(err,
		                       errno == ENOENT                      ? RELAY_E_NOT_FOUND
		                       : errno == ELOOP || errno == ENOTDIR ? RELAY_E_UNSAFE_PATH
		                                                            : RELAY_E_IO,
		                       errno, "cannot open folder %s: %s", root, strerror(errno));
	}
	relay_status status = walk_dir(fd, "", skip, out, 0, err);
	close(fd);
	if (status != RELAY_OK) {
		fw_tree_free(out);
		return status;
	}
	if (out->count > 1) /* an empty tree has no array: qsort takes no NULL */
		qsort(out->items, out->count, sizeof *out->items, entry_cmp);
	return RELAY_OK;
}
