/* The project-folder rules for host paths (spec/lifecycle.md §12); see host_paths.h. */
#include "runs/host_paths.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/sha256.h"
#include "util/strbuf.h"

#define TREE_MAX_DEPTH 256
#define HASH_CHUNK     (8u << 20)

void host_path_free(host_path *p)
{
	if (p == NULL)
		return;
	free(p->given);
	free(p->path);
	free(p->rel);
	memset(p, 0, sizeof *p);
}

/* Rule 1 and the normalisation: collapses "." and repeated slashes of a
 * relative remainder into a malloc'd "a/b/c" ("" for none). NULL with the
 * reason for a ".." segment. */
static char *normalise_rel(const char *rest, const char *given, char *why, size_t why_len)
{
	strbuf sb = STRBUF_INIT;
	const char *p = rest;
	while (*p) {
		while (*p == '/')
			p++;
		if (*p == '\0')
			break;
		const char *end = strchr(p, '/');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n == 2 && p[0] == '.' && p[1] == '.') {
			snprintf(why, why_len, "path must not contain a .. segment: %s", given);
			strbuf_free(&sb);
			return NULL;
		}
		if (!(n == 1 && p[0] == '.')) {
			if (sb.len)
				strbuf_putc(&sb, '/');
			strbuf_append(&sb, p, n);
		}
		p += n;
	}
	char *out = strbuf_detach(&sb, NULL);
	if (out == NULL)
		snprintf(why, why_len, "out of memory checking %s", given);
	return out;
}

/* The remainder of `path` after `prefix` when prefix is a component-wise
 * prefix of it, else NULL. */
static const char *after_prefix(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);
	while (n > 1 && prefix[n - 1] == '/')
		n--;
	if (strncmp(path, prefix, n) != 0)
		return NULL;
	if (path[n] == '\0' || path[n] == '/')
		return path + n;
	if (n == 1 && prefix[0] == '/')
		return path + 1;
	return NULL;
}

/* Opens `rel` below `root_fd` one component at a time with O_NOFOLLOW.
 * Intermediate components must be folders; the last is opened O_PATH and
 * described in *st_out. `shown_root` prefixes component names in messages.
 * Returns the descriptor, or -1 with the reason (and *missing set when a
 * component does not exist). */
static int walk_open(int root_fd, const char *shown_root, const char *rel, struct stat *st_out, bool *missing,
                     char *why, size_t why_len)
{
	*missing = false;
	int fd = dup(root_fd);
	if (fd < 0) {
		snprintf(why, why_len, "cannot open %s: %s", shown_root, strerror(errno));
		return -1;
	}
	if (fstat(fd, st_out) != 0) {
		snprintf(why, why_len, "cannot read %s: %s", shown_root, strerror(errno));
		close(fd);
		return -1;
	}
	strbuf shown = STRBUF_INIT;
	strbuf_puts(&shown, shown_root);
	const char *p = rel;
	while (*p) {
		const char *end = strchr(p, '/');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char comp[NAME_MAX + 1];
		if (n == 0 || n > NAME_MAX) {
			snprintf(why, why_len, "path component too long in %s/%s", shown_root, rel);
			goto fail;
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		strbuf_putc(&shown, '/');
		strbuf_puts(&shown, comp);
		if (!S_ISDIR(st_out->st_mode)) {
			snprintf(why, why_len, "path passes through something that is not a folder: %s",
			         strbuf_str(&shown));
			goto fail;
		}
		int next = openat(fd, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			if (errno == ENOENT)
				*missing = true;
			snprintf(why, why_len, "%s: %s",
			         errno == ENOENT ? "path does not exist" : strerror(errno),
			         strbuf_str(&shown));
			goto fail;
		}
		close(fd);
		fd = next;
		if (fstat(fd, st_out) != 0) {
			snprintf(why, why_len, "cannot read %s: %s", strbuf_str(&shown), strerror(errno));
			goto fail;
		}
		if (S_ISLNK(st_out->st_mode)) {
			snprintf(why, why_len, "path passes through a symlink: %s", strbuf_str(&shown));
			goto fail;
		}
		p += n;
		while (*p == '/')
			p++;
	}
	strbuf_free(&shown);
	return fd;
fail:
	strbuf_free(&shown);
	close(fd);
	return -1;
}

int host_path_resolve(const char *project_real, const char *project_given, const char *given,
                      host_path_kind kind, host_path *out, char *why, size_t why_len)
{
	memset(out, 0, sizeof *out);
	size_t len = given ? strlen(given) : 0;
	if (given == NULL || len == 0) {
		snprintf(why, why_len, "path must not be empty");
		return -1;
	}
	if (len > HOST_PATH_MAX_BYTES) {
		snprintf(why, why_len, "path is %zu bytes; at most %d are accepted", len,
		         HOST_PATH_MAX_BYTES);
		return -1;
	}
	const char *rest = given;
	if (given[0] == '/') {
		rest = after_prefix(given, project_real);
		if (rest == NULL && project_given)
			rest = after_prefix(given, project_given);
		if (rest == NULL) {
			snprintf(why, why_len, "path must be inside the project folder %s: %s",
			         project_given ? project_given : project_real, given);
			return -1;
		}
	}
	char *rel = normalise_rel(rest, given, why, why_len);
	if (rel == NULL)
		return -1;
	int rc = -1;
	int root = open(project_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		snprintf(why, why_len, "cannot open the project folder %s: %s", project_real,
		         strerror(errno));
		free(rel);
		return -1;
	}
	struct stat st;
	bool missing = false;
	int fd = walk_open(root, project_real, rel, &st, &missing, why, why_len);
	close(root);
	if (fd < 0)
		goto cleanup;
	close(fd);
	if (kind == HOST_PATH_FILE && !S_ISREG(st.st_mode)) {
		snprintf(why, why_len, "%s is not a regular file", given);
		goto cleanup;
	}
	if (kind == HOST_PATH_DIR && !S_ISDIR(st.st_mode)) {
		snprintf(why, why_len, "%s is not a folder", given);
		goto cleanup;
	}
	strbuf full = STRBUF_INIT;
	strbuf_puts(&full, project_real);
	if (rel[0]) {
		strbuf_putc(&full, '/');
		strbuf_puts(&full, rel);
	}
	out->path = strbuf_detach(&full, NULL);
	out->given = strdup(given);
	out->rel = rel;
	rel = NULL;
	out->dev = st.st_dev;
	out->ino = st.st_ino;
	out->bytes = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
	if (out->path == NULL || out->given == NULL) {
		host_path_free(out);
		snprintf(why, why_len, "out of memory checking %s", given);
		goto cleanup;
	}
	rc = 0;
cleanup:
	free(rel);
	return rc;
}

/* Opens the regular file `rel` below root_fd for reading (every component
 * O_NOFOLLOW), checking device and inode. -1 with *changed when it moved. */
static int open_file_below(int root_fd, const char *shown_root, const char *rel, dev_t dev, ino_t ino,
                           bool *changed, char *why, size_t why_len)
{
	struct stat st;
	bool missing = false;
	*changed = false;
	int pfd = walk_open(root_fd, shown_root, rel, &st, &missing, why, why_len);
	if (pfd < 0) {
		*changed = missing;
		return -1;
	}
	if (!S_ISREG(st.st_mode) || st.st_dev != dev || st.st_ino != ino) {
		snprintf(why, why_len, "%s/%s was replaced after it was checked", shown_root, rel);
		*changed = true;
		close(pfd);
		return -1;
	}
	/* Reopen the same inode for reading through /proc/self/fd, which never
	 * follows a path again: the O_PATH descriptor pins the inode. */
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
	int fd = open(proc, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	close(pfd);
	if (fd < 0) {
		snprintf(why, why_len, "cannot open %s/%s: %s", shown_root, rel, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != dev || st.st_ino != ino) {
		snprintf(why, why_len, "%s/%s was replaced after it was checked", shown_root, rel);
		*changed = true;
		close(fd);
		return -1;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

int host_path_open(const char *project_real, const host_path *p, char *why, size_t why_len)
{
	int root = open(project_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		snprintf(why, why_len, "cannot open the project folder %s: %s", project_real,
		         strerror(errno));
		return -1;
	}
	bool changed = false;
	int fd = open_file_below(root, project_real, p->rel, p->dev, p->ino, &changed, why, why_len);
	close(root);
	return fd;
}

int host_path_read(const char *project_real, const host_path *p, size_t max_bytes, char **data_out,
                   size_t *len_out, bool *too_large, char *why, size_t why_len)
{
	*data_out = NULL;
	*len_out = 0;
	*too_large = false;
	int fd = host_path_open(project_real, p, why, why_len);
	if (fd < 0)
		return -1;
	int rc = -1;
	struct stat st;
	char *buf = NULL;
	if (fstat(fd, &st) != 0) {
		snprintf(why, why_len, "cannot read %s: %s", p->given, strerror(errno));
		goto cleanup;
	}
	if ((uint64_t)st.st_size > max_bytes) {
		*too_large = true;
		snprintf(why, why_len, "%s is %lld bytes; at most %zu are accepted", p->given,
		         (long long)st.st_size, max_bytes);
		goto cleanup;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		snprintf(why, why_len, "out of memory reading %s", p->given);
		goto cleanup;
	}
	size_t got = 0;
	for (;;) {
		if (got > max_bytes) {
			*too_large = true;
			snprintf(why, why_len, "%s grew past %zu bytes while it was read", p->given,
			         max_bytes);
			goto cleanup;
		}
		size_t room = (size_t)st.st_size + 1 - got;
		if (room == 0) {
			*too_large = got >= max_bytes;
			snprintf(why, why_len, "%s changed while it was read", p->given);
			goto cleanup;
		}
		ssize_t n = read(fd, buf + got, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(why, why_len, "cannot read %s: %s", p->given, strerror(errno));
			goto cleanup;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got != (size_t)st.st_size) {
		snprintf(why, why_len, "%s changed while it was read", p->given);
		goto cleanup;
	}
	buf[got] = '\0';
	*data_out = buf;
	*len_out = got;
	buf = NULL;
	rc = 0;
cleanup:
	free(buf);
	close(fd);
	return rc;
}

/* ---- trees ------------------------------------------------------------------ */

static int tree_add(host_tree *t, const char *rel, const struct stat *st)
{
	if (t->count == t->capacity) {
		size_t cap = t->capacity ? t->capacity * 2 : 64;
		host_tree_file *grown = realloc(t->files, cap * sizeof *grown);
		if (grown == NULL)
			return -1;
		t->files = grown;
		t->capacity = cap;
	}
	host_tree_file *f = &t->files[t->count];
	memset(f, 0, sizeof *f);
	f->rel = strdup(rel);
	if (f->rel == NULL)
		return -1;
	f->bytes = (uint64_t)st->st_size;
	f->dev = st->st_dev;
	f->ino = st->st_ino;
	t->count++;
	t->total_bytes += f->bytes;
	return 0;
}

static int walk_dir(int dfd, const char *shown, const char *prefix, const char *label, int depth,
                    host_tree *out, char *why, size_t why_len)
{
	if (depth > TREE_MAX_DEPTH) {
		snprintf(why, why_len, "%s is nested deeper than %d folders at %s", label, TREE_MAX_DEPTH,
		         shown);
		return -1;
	}
	int lfd = dup(dfd);
	DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (d == NULL) {
		if (lfd >= 0)
			close(lfd);
		snprintf(why, why_len, "cannot list %s: %s", shown, strerror(errno));
		return -1;
	}
	int rc = 0;
	struct dirent *e;
	strbuf rel = STRBUF_INIT;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		strbuf_reset(&rel);
		if (prefix[0]) {
			strbuf_puts(&rel, prefix);
			strbuf_putc(&rel, '/');
		}
		strbuf_puts(&rel, e->d_name);
		struct stat st;
		if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			snprintf(why, why_len, "cannot read %s/%s: %s", shown, e->d_name, strerror(errno));
			rc = -1;
			break;
		}
		if (S_ISLNK(st.st_mode)) {
			snprintf(why, why_len, "%s holds a symbolic link: %s/%s", label, shown, e->d_name);
			rc = -1;
			break;
		}
		if (S_ISREG(st.st_mode)) {
			if (tree_add(out, strbuf_str(&rel), &st) != 0) {
				snprintf(why, why_len, "out of memory listing %s", label);
				rc = -1;
				break;
			}
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			snprintf(why, why_len, "%s holds a special file: %s/%s", label, shown, e->d_name);
			rc = -1;
			break;
		}
		int sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			snprintf(why, why_len, "cannot open %s/%s: %s", shown, e->d_name, strerror(errno));
			rc = -1;
			break;
		}
		strbuf sub_shown = STRBUF_INIT;
		strbuf_printf(&sub_shown, "%s/%s", shown, e->d_name);
		rc = walk_dir(sub, strbuf_str(&sub_shown), strbuf_str(&rel), label, depth + 1, out, why,
		              why_len);
		strbuf_free(&sub_shown);
		close(sub);
		if (rc != 0)
			break;
	}
	strbuf_free(&rel);
	closedir(d);
	return rc;
}

static int file_cmp(const void *a, const void *b)
{
	return strcmp(((const host_tree_file *)a)->rel, ((const host_tree_file *)b)->rel);
}

/* Opens a resolved folder (every component O_NOFOLLOW) for listing. */
static int open_dir(const char *project_real, const host_path *dir, char *why, size_t why_len)
{
	int root = open(project_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		snprintf(why, why_len, "cannot open the project folder %s: %s", project_real,
		         strerror(errno));
		return -1;
	}
	struct stat st;
	bool missing = false;
	int pfd = walk_open(root, project_real, dir->rel, &st, &missing, why, why_len);
	close(root);
	if (pfd < 0)
		return -1;
	if (!S_ISDIR(st.st_mode) || st.st_dev != dir->dev || st.st_ino != dir->ino) {
		snprintf(why, why_len, "%s was replaced after it was checked", dir->given);
		close(pfd);
		return -1;
	}
	int fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	close(pfd);
	if (fd < 0)
		snprintf(why, why_len, "cannot open %s: %s", dir->given, strerror(errno));
	return fd;
}

int host_tree_walk(const char *project_real, const host_path *dir, const char *label, host_tree *out,
                   char *why, size_t why_len)
{
	memset(out, 0, sizeof *out);
	int fd = open_dir(project_real, dir, why, why_len);
	if (fd < 0)
		return -1;
	int rc = walk_dir(fd, dir->path, "", label, 0, out, why, why_len);
	close(fd);
	if (rc != 0) {
		host_tree_free(out);
		return -1;
	}
	if (out->count > 1)
		qsort(out->files, out->count, sizeof out->files[0], file_cmp);
	return 0;
}

/* Hashes an open regular file of expected size; -1 with *changed when the
 * size moved. */
static int hash_fd(int fd, const char *shown, uint64_t expected_bytes, char sha_out[65], bool *changed,
                   char *why, size_t why_len)
{
	uint64_t bytes = 0;
	relay_error err;
	relay_status st = sha256_fd_hex(fd, sha_out, &bytes, &err);
	if (st != RELAY_OK) {
		*changed = st == RELAY_E_INTEGRITY;
		snprintf(why, why_len, "cannot hash %s: %s", shown, err.message);
		return -1;
	}
	if (bytes != expected_bytes) {
		*changed = true;
		snprintf(why, why_len, "%s changed size (%llu bytes, then %llu) while it was staged", shown,
		         (unsigned long long)expected_bytes, (unsigned long long)bytes);
		return -1;
	}
	return 0;
}

/* One host_tree_hash() shared by its threads. Each thread takes the next
 * file index under `lock`; a failure keeps the lowest failing index, so the
 * reported file and reason do not depend on how the threads were scheduled,
 * and indexes above it are not started. */
typedef struct tree_hash_job {
	const host_path *dir;
	host_tree *tree;
	int root_fd; /* the tree's root, opened once; borrowed by the threads */
	pthread_mutex_t lock;
	size_t next_index;
	size_t failed_index; /* SIZE_MAX while nothing failed */
	bool failed_changed;
	char *failed_why; /* why_len bytes */
	size_t why_len;
} tree_hash_job;

/* A tree smaller than this is hashed on the calling thread alone: starting
 * threads costs more than they save. */
#define TREE_HASH_PARALLEL_MIN_BYTES (8u << 20)
/* Read and SHA-256 saturate a core each; beyond four, the disk or page
 * cache is what limits. */
#define TREE_HASH_MAX_THREADS 4

static void *tree_hash_worker(void *arg)
{
	tree_hash_job *job = arg;
	char *why = malloc(job->why_len);
	for (;;) {
		pthread_mutex_lock(&job->lock);
		size_t i = job->next_index++;
		bool stop = i >= job->tree->count || i > job->failed_index;
		pthread_mutex_unlock(&job->lock);
		if (stop)
			break;
		host_tree_file *f = &job->tree->files[i];
		bool changed = false;
		int rc = -1;
		if (why != NULL) {
			why[0] = '\0';
			int fd = open_file_below(job->root_fd, job->dir->path, f->rel, f->dev, f->ino,
			                         &changed, why, job->why_len);
			if (fd >= 0) {
				strbuf shown = STRBUF_INIT;
				strbuf_printf(&shown, "%s/%s", job->dir->path, f->rel);
				rc = hash_fd(fd, strbuf_str(&shown), f->bytes, f->sha256, &changed, why,
				             job->why_len);
				strbuf_free(&shown);
				close(fd);
			}
		}
		if (rc == 0)
			continue;
		pthread_mutex_lock(&job->lock);
		if (i < job->failed_index) {
			job->failed_index = i;
			job->failed_changed = changed;
			snprintf(job->failed_why, job->why_len, "%s",
			         why ? why : "out of memory hashing the tree");
		}
		pthread_mutex_unlock(&job->lock);
	}
	free(why);
	return NULL;
}

int host_tree_hash(const char *project_real, const host_path *dir, host_tree *tree, bool *changed, char *why,
                   size_t why_len)
{
	*changed = false;
	int root = open_dir(project_real, dir, why, why_len);
	if (root < 0) {
		*changed = true;
		return -1;
	}
	tree_hash_job job = {.dir = dir,
	                     .tree = tree,
	                     .root_fd = root,
	                     .failed_index = SIZE_MAX,
	                     .failed_why = why,
	                     .why_len = why_len};
	pthread_mutex_init(&job.lock, NULL);
	size_t threads = 1;
	if (tree->total_bytes >= TREE_HASH_PARALLEL_MIN_BYTES) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		threads = cpus > 1 ? (size_t)cpus : 1;
		if (threads > TREE_HASH_MAX_THREADS)
			threads = TREE_HASH_MAX_THREADS;
		if (threads > tree->count)
			threads = tree->count ? tree->count : 1;
	}
	/* The calling thread is one of them; a thread that cannot be started
	 * leaves its share to the others. */
	pthread_t helpers[TREE_HASH_MAX_THREADS];
	size_t started = 0;
	for (size_t t = 1; t < threads; t++)
		if (pthread_create(&helpers[started], NULL, tree_hash_worker, &job) == 0)
			started++;
	tree_hash_worker(&job);
	for (size_t t = 0; t < started; t++)
		pthread_join(helpers[t], NULL);
	pthread_mutex_destroy(&job.lock);
	close(root);
	if (job.failed_index == SIZE_MAX)
		return 0;
	*changed = job.failed_changed;
	return -1;
}

int host_path_hash(const char *project_real, const host_path *p, char sha256_out[65], uint64_t *bytes_out,
                   bool *changed, char *why, size_t why_len)
{
	*changed = false;
	int root = open(project_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		snprintf(why, why_len, "cannot open the project folder %s: %s", project_real,
		         strerror(errno));
		return -1;
	}
	int fd = open_file_below(root, project_real, p->rel, p->dev, p->ino, changed, why, why_len);
	close(root);
	if (fd < 0)
		return -1;
	struct stat st;
	int rc = -1;
	if (fstat(fd, &st) == 0) {
		rc = hash_fd(fd, p->path, (uint64_t)st.st_size, sha256_out, changed, why, why_len);
		if (rc == 0)
			*bytes_out = (uint64_t)st.st_size;
	} else {
		snprintf(why, why_len, "cannot read %s: %s", p->path, strerror(errno));
	}
	close(fd);
	return rc;
}

void host_tree_free(host_tree *tree)
{
	if (tree == NULL)
		return;
	for (size_t i = 0; i < tree->count; i++)
		free(tree->files[i].rel);
	free(tree->files);
	memset(tree, 0, sizeof *tree);
}
