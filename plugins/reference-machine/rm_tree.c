/* reference-machine: the tree walk, copies and facts (rm.h); removal is the host's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rm.h"

relay_status rm_err(const rm_state *st, relay_error *err, relay_status code, int sys_errno, const char *fmt,
                    ...)
{
	char text[RELAY_ERROR_MESSAGE_BYTES];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	return st->host->error_set(err, code, sys_errno, "%s: %s", RM_NAME, text);
}

relay_status rm_check_path(const rm_state *st, const char *path, const char *what, relay_error *err)
{
	if (path == NULL || path[0] != '/')
		return rm_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the %s must be an absolute path", what);
	if (strlen(path) >= RM_PATH_MAX - 64)
		return rm_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the %s is too long", what);
	for (const char *c = path; (c = strstr(c, "..")) != NULL; c += 2)
		if (c[-1] == '/' && (c[2] == '/' || c[2] == '\0'))
			return rm_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "the %s %s has a \"..\" component", what, path);
	return RELAY_OK;
}

relay_status rm_mkdir_p(const rm_state *st, const char *path, relay_error *err)
{
	char buf[RM_PATH_MAX];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *slash = buf + 1;; slash++) {
		char saved = *slash;
		if (saved != '/' && saved != '\0')
			continue;
		*slash = '\0';
		struct stat sb;
		if (mkdir(buf, 0700) != 0 && errno != EEXIST)
			return rm_err(st, err, RELAY_E_IO, errno, "cannot create %s: %s", buf,
			              strerror(errno));
		if (lstat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
			return rm_err(st, err, RELAY_E_UNSAFE_PATH, 0, "%s is not a folder", buf);
		*slash = saved;
		if (saved == '\0')
			return RELAY_OK;
	}
}

static int grow(const rm_state *st, void **items, size_t *cap, size_t count, size_t item_size)
{
	if (count < *cap)
		return 0;
	size_t new_cap = *cap ? *cap * 2 : 16;
	void *bigger = st->host->alloc(new_cap * item_size);
	if (bigger == NULL)
		return -1;
	if (*items)
		memcpy(bigger, *items, count * item_size);
	st->host->free(*items);
	*items = bigger;
	*cap = new_cap;
	return 0;
}

static relay_status add_file(const rm_state *st, rm_list *list, const char *rel, relay_error *err)
{
	if (grow(st, (void **)&list->files, &list->cap, list->count, sizeof *list->files) != 0)
		return rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	rm_file *f = &list->files[list->count];
	memset(f, 0, sizeof *f);
	if ((f->rel = st->host->strdup(rel)) == NULL)
		return rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	list->count++;
	return RELAY_OK;
}

static relay_status add_dir(const rm_state *st, rm_list *list, const char *rel, relay_error *err)
{
	char *copy = NULL;
	if (grow(st, (void **)&list->dirs, &list->dir_cap, list->dir_count, sizeof *list->dirs) != 0 ||
	    (copy = st->host->strdup(rel)) == NULL)
		return rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	list->dirs[list->dir_count++] = copy;
	return RELAY_OK;
}

/* One folder level of rm_walk: `rel` is relative to `root` ("" at the top). */
static relay_status walk_dir(const rm_state *st, const char *root, const char *rel, rm_list *list, int depth,
                             relay_error *err)
{
	char path[RM_PATH_MAX];
	snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
	if (depth > 64)
		return rm_err(st, err, RELAY_E_TOO_LARGE, 0, "%s is nested more than 64 folders deep", path);
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	if (dir == NULL) {
		if (fd >= 0)
			close(fd);
		return rm_err(st, err, errno == ELOOP ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
		              "cannot open folder %s: %s", path, strerror(errno));
	}
	relay_status status = RELAY_OK;
	struct dirent *e;
	while (status == RELAY_OK && (e = readdir(dir)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char child[RM_PATH_MAX];
		int n = snprintf(child, sizeof child, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
		struct stat sb;
		if (n < 0 || (size_t)n >= sizeof child - 64)
			status = rm_err(st, err, RELAY_E_TOO_LARGE, 0, "a path below %s is too long", root);
		else if (fstatat(dirfd(dir), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
			status = rm_err(st, err, RELAY_E_IO, errno, "cannot read %s/%s", root, child);
		else if (S_ISDIR(sb.st_mode)) {
			status = add_dir(st, list, child, err);
			if (status == RELAY_OK)
				status = walk_dir(st, root, child, list, depth + 1, err);
		} else if (S_ISREG(sb.st_mode))
			status = add_file(st, list, child, err);
		else
			status = rm_err(st, err, RELAY_E_UNSAFE_PATH, 0,
			                "%s/%s is a %s, not a regular file or folder", root, child,
			                S_ISLNK(sb.st_mode) ? "symbolic link" : "special file");
	}
	closedir(dir);
	return status;
}

relay_status rm_walk(const rm_state *st, const char *root, int tree, rm_list *list, relay_error *err)
{
	struct stat sb;
	if (lstat(root, &sb) != 0)
		return rm_err(st, err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, errno,
		              "cannot read %s: %s", root, strerror(errno));
	if (S_ISLNK(sb.st_mode))
		return rm_err(st, err, RELAY_E_UNSAFE_PATH, 0, "%s is a symbolic link", root);
	if (tree && !S_ISDIR(sb.st_mode))
		return rm_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "%s is not a folder", root);
	if (!tree && !S_ISREG(sb.st_mode))
		return rm_err(st, err, S_ISDIR(sb.st_mode) ? RELAY_E_INVALID_ARGUMENT : RELAY_E_UNSAFE_PATH,
		              0, "%s is not a regular file", root);
	return tree ? walk_dir(st, root, "", list, 0, err) : add_file(st, list, "", err);
}

static int by_path(const void *a, const void *b)
{
	return strcmp(((const rm_file *)a)->rel, ((const rm_file *)b)->rel);
}

relay_status rm_hash(const rm_state *st, const char *root, rm_list *list, relay_error *err)
{
	for (size_t i = 0; i < list->count; i++) {
		char path[RM_PATH_MAX * 2];
		rm_file *f = &list->files[i];
		snprintf(path, sizeof path, "%s%s%s", root, f->rel[0] ? "/" : "", f->rel);
		relay_status status = st->host->sha256_file(path, 0, f->sha256, &f->bytes, err);
		if (status != RELAY_OK)
			return status;
	}
	qsort(list->files, list->count, sizeof *list->files, by_path);
	return RELAY_OK;
}

/* How many 64 KiB reads of a file copy go between two host->call_cancelled. */
#define RM_CANCEL_CHUNKS 16u

/* Copies one regular file; `exclusive` and `call` as for rm_copy. */
static relay_status copy_file(const rm_state *st, const char *from, const char *to, int exclusive,
                              relay_call *call, relay_error *err)
{
	char tmp[RM_PATH_MAX * 2 + 32];
	snprintf(tmp, sizeof tmp, "%s.rm-%ld", to, (long)getpid());
	const char *target = exclusive ? to : tmp;
	relay_status status = RELAY_OK;
	int in = open(from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	int out = in < 0 ? -1 : open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (in < 0 || out < 0) {
		status = rm_err(st, err, errno == ELOOP ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
		                "cannot copy %s to %s: %s", from, to, strerror(errno));
		goto cleanup;
	}
	char buf[65536];
	for (unsigned chunk = 0;; chunk++) {
		/* Asked every RM_CANCEL_CHUNKS reads (1 MiB), so a large file stops
		 * promptly too (plugin-test checks 68 and 69). */
		if (chunk % RM_CANCEL_CHUNKS == 0 && call != NULL && st->host->call_cancelled(call)) {
			status = rm_err(st, err, RELAY_E_CANCELLED, 0, "the copy of %s was cancelled", from);
			goto cleanup;
		}
		ssize_t n = read(in, buf, sizeof buf);
		if (n == 0)
			break;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || write(out, buf, (size_t)n) != n) {
			status = rm_err(st, err, RELAY_E_IO, errno, "cannot copy %s to %s: %s", from, to,
			                strerror(errno));
			goto cleanup;
		}
	}
	if (close(out) != 0) {
		out = -1;
		status = rm_err(st, err, RELAY_E_IO, errno, "cannot write %s: %s", to, strerror(errno));
		goto cleanup;
	}
	out = -1;
	if (!exclusive && rename(tmp, to) != 0)
		status = rm_err(st, err, RELAY_E_IO, errno, "cannot replace %s: %s", to, strerror(errno));
cleanup:
	if (out >= 0)
		close(out);
	if (in >= 0)
		close(in);
	if (status != RELAY_OK && (exclusive ? in >= 0 : 1))
		unlink(target);
	return status;
}

relay_status rm_copy(const rm_state *st, const char *src, const char *dst, const rm_list *list, int exclusive,
                     relay_call *call, relay_error *err)
{
	char from[RM_PATH_MAX * 2], to[RM_PATH_MAX * 2];
	for (size_t i = 0; i < list->dir_count; i++) {
		snprintf(to, sizeof to, "%s/%s", dst, list->dirs[i]);
		if (mkdir(to, 0700) != 0 && (exclusive || errno != EEXIST))
			return rm_err(st, err, RELAY_E_IO, errno, "cannot create folder %s: %s", to,
			              strerror(errno));
	}
	for (size_t i = 0; i < list->count; i++) {
		const char *rel = list->files[i].rel;
		snprintf(from, sizeof from, "%s%s%s", src, rel[0] ? "/" : "", rel);
		snprintf(to, sizeof to, "%s%s%s", dst, rel[0] ? "/" : "", rel);
		relay_status status = copy_file(st, from, to, exclusive, call, err);
		if (status != RELAY_OK)
			return status;
	}
	return RELAY_OK;
}

char *rm_owned_json(const rm_state *st, json_object *obj)
{
	const char *text =
	    json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	return text ? st->host->strdup(text) : NULL;
}

char *rm_facts_json(const rm_state *st, const rm_list *list)
{
	json_object *facts = json_object_new_array();
	for (size_t i = 0; i < list->count; i++) {
		json_object *f = json_object_new_object();
		json_object_object_add(f, "path", json_object_new_string(list->files[i].rel));
		json_object_object_add(f, "bytes", json_object_new_int64((int64_t)list->files[i].bytes));
		json_object_object_add(f, "sha256", json_object_new_string(list->files[i].sha256));
		json_object_array_add(facts, f);
	}
	char *text = rm_owned_json(st, facts);
	json_object_put(facts);
	return text;
}

void rm_list_free(const rm_state *st, rm_list *list)
{
	for (size_t i = 0; i < list->dir_count; i++)
		st->host->free(list->dirs[i]);
	st->host->free(list->dirs);
	for (size_t i = 0; i < list->count; i++)
		st->host->free(list->files[i].rel);
	st->host->free(list->files);
	memset(list, 0, sizeof *list);
}
