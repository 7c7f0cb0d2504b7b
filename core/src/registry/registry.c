/*
 * The task registry (spec/lifecycle.md §10): choosing the file, and row updates
 * under an flock(2) with atomic replace. The VM table itself is table.c.
 */
#include "registry/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/fsutil.h"
#include "util/randx.h"

const char registry_managed_template[] = "# mcp-relay task registry\n"
                                         "\n"
                                         "## Using VMs\n"
                                         "\n"
                                         "| Machine | OS | Task Name | Agent | Project | Start Date |\n"
                                         "| ------- | -- | --------- | ----- | ------- | ---------- |\n";

/* ---- choosing the file --------------------------------------------------------------- */

void registry_resolve(const char *configured, bool configured_managed, const char *home,
                      const char *state_root, registry_target *out)
{
	memset(out, 0, sizeof *out);
	if (configured) {
		out->path = strdup(configured);
		out->managed = configured_managed;
		return;
	}
	if (home && home[0] == '/') {
		char *agents = fs_path_join(home, "AGENTS.md");
		char why[512];
		if (agents && registry_check_file(agents, why, sizeof why) == 0) {
			out->path = agents;
			out->managed = false;
			return;
		}
		free(agents);
	}
	out->path = fs_path_join(state_root, "registry.md");
	out->managed = true;
}

void registry_target_free(registry_target *target)
{
	free(target->path);
	target->path = NULL;
}

/* ---- the locked read-modify-write ---------------------------------------------------- */

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* Takes the sidecar lock; returns its fd, or -1 with errbuf filled and
 * *outcome set. */
static int take_lock(const char *lock_path, registry_outcome *outcome, char *errbuf, size_t errlen)
{
	int fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(errbuf, errlen, "cannot open the registry lock %s: %s", lock_path,
		         fd < 0 ? strerror(errno) : "it is not a regular file");
		if (fd >= 0)
			close(fd);
		*outcome = REGISTRY_IO;
		return -1;
	}
	int64_t give_up = clock_monotonic_ms() + REGISTRY_LOCK_TIMEOUT_MS;
	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return fd;
		if (errno != EWOULDBLOCK && errno != EINTR) {
			snprintf(errbuf, errlen, "cannot lock the registry lock %s: %s", lock_path,
			         strerror(errno));
			close(fd);
			*outcome = REGISTRY_IO;
			return -1;
		}
		if (clock_monotonic_ms() >= give_up)
			break;
		sleep_ms(REGISTRY_LOCK_RETRY_MS);
	}
	snprintf(errbuf, errlen, "registry lock timeout: %s", lock_path);
	close(fd);
	*outcome = REGISTRY_LOCK_TIMEOUT;
	return -1;
}

/* Reads the whole regular file at `path` (no links). */
static int read_registry(const char *path, char **data_out, size_t *len_out, struct stat *st_out,
                         char *errbuf, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(errbuf, errlen, "cannot read the registry %s: %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(errbuf, errlen, "the registry %s must be a regular file", path);
		close(fd);
		return -1;
	}
	if ((uint64_t)st.st_size > REGISTRY_MAX_BYTES) {
		snprintf(errbuf, errlen, "the registry %s is larger than %u bytes", path, REGISTRY_MAX_BYTES);
		close(fd);
		return -1;
	}
	size_t cap = (size_t)st.st_size + 1, len = 0;
	char *data = malloc(cap + 1);
	if (data == NULL) {
		snprintf(errbuf, errlen, "out of memory reading the registry");
		close(fd);
		return -1;
	}
	for (;;) {
		if (len == cap) {
			if (cap >= REGISTRY_MAX_BYTES) {
				snprintf(errbuf, errlen, "the registry %s grew past %u bytes", path,
				         REGISTRY_MAX_BYTES);
				free(data);
				close(fd);
				return -1;
			}
			char *more = realloc(data, cap * 2 + 1);
			if (more == NULL) {
				free(data);
				close(fd);
				snprintf(errbuf, errlen, "out of memory reading the registry");
				return -1;
			}
			data = more;
			cap *= 2;
		}
		ssize_t n = read(fd, data + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(errbuf, errlen, "cannot read the registry %s: %s", path, strerror(errno));
			free(data);
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	data[len] = '\0';
	close(fd);
	*data_out = data;
	*len_out = len;
	if (st_out)
		*st_out = st;
	return 0;
}

static int write_all_fd(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, data, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Writes `data` to a fresh temporary file in `dir` named .<base>.<hex>.tmp
 * with `mode`, fsynced. Returns the malloc'd path, or NULL. */
static char *write_temporary(const char *dir, const char *base, const char *data, size_t len, mode_t mode,
                             char *errbuf, size_t errlen)
{
	char hex[17];
	random_hex(hex, 16);
	size_t need = strlen(dir) + strlen(base) + 32;
	char *path = malloc(need);
	if (path == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	snprintf(path, need, "%s/.%s.%s.tmp", dir, base, hex);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0) {
		snprintf(errbuf, errlen, "cannot create %s: %s", path, strerror(errno));
		free(path);
		return NULL;
	}
	if (fchmod(fd, mode) != 0 || write_all_fd(fd, data, len) != 0 || fsync(fd) != 0) {
		snprintf(errbuf, errlen, "cannot write %s: %s", path, strerror(errno));
		close(fd);
		unlink(path);
		free(path);
		return NULL;
	}
	close(fd);
	return path;
}

/* Publishes the managed template at `target` without replacing anything
 * (link(2) fails when the name exists). Called under the lock. */
static int initialise_managed(const char *dir, const char *target, char *errbuf, size_t errlen)
{
	struct stat st;
	if (lstat(target, &st) == 0)
		return 0;
	if (errno != ENOENT) {
		snprintf(errbuf, errlen, "cannot inspect the registry %s: %s", target, strerror(errno));
		return -1;
	}
	char *tmp = write_temporary(dir, "registry", registry_managed_template,
	                            strlen(registry_managed_template), 0600, errbuf, errlen);
	if (tmp == NULL)
		return -1;
	int rc = 0;
	if (link(tmp, target) != 0 && errno != EEXIST) {
		snprintf(errbuf, errlen, "cannot create the registry %s: %s", target, strerror(errno));
		rc = -1;
	}
	unlink(tmp);
	free(tmp);
	relay_error err;
	if (rc == 0)
		fs_fsync_dir(dir, &err);
	return rc;
}

/* The real path of the file to update, and its folder. */
static int locate_target(const registry_target *target, char **real_out, char **dir_out, char *errbuf,
                         size_t errlen)
{
	*real_out = NULL;
	*dir_out = NULL;
	if (target->managed) {
		char *parent = fs_dirname(target->path);
		relay_error err;
		if (parent == NULL || fs_mkdir_p(parent, 0700, &err) != RELAY_OK) {
			snprintf(errbuf, errlen, "cannot create the registry folder %s: %s",
			         parent ? parent : "", parent ? err.message : "out of memory");
			free(parent);
			return -1;
		}
		struct stat st;
		if (lstat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
			snprintf(errbuf, errlen,
			         "the managed registry folder %s must be a folder, not a link", parent);
			free(parent);
			return -1;
		}
		/* The same rule as the state folder's (spec/lifecycle.md §14): nobody
		 * else may write there. */
		if ((st.st_mode & 022) != 0) {
			snprintf(
			    errbuf, errlen,
			    "the managed registry folder %s must not be writable by group or others (0700 is "
			    "best); choose a private state folder (its permissions are not changed "
			    "automatically)",
			    parent);
			free(parent);
			return -1;
		}
		char *real_parent = realpath(parent, NULL);
		free(parent);
		if (real_parent == NULL) {
			snprintf(errbuf, errlen, "cannot resolve the registry folder: %s", strerror(errno));
			return -1;
		}
		*real_out = fs_path_join(real_parent, "registry.md");
		*dir_out = real_parent;
	} else {
		char *real = realpath(target->path, NULL);
		if (real == NULL) {
			snprintf(errbuf, errlen, "cannot resolve the registry %s: %s", target->path,
			         strerror(errno));
			return -1;
		}
		*real_out = real;
		*dir_out = fs_dirname(real);
	}
	if (*real_out == NULL || *dir_out == NULL) {
		free(*real_out);
		free(*dir_out);
		*real_out = *dir_out = NULL;
		snprintf(errbuf, errlen, "out of memory");
		return -1;
	}
	return 0;
}

static bool same_stat(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

registry_outcome registry_update(const registry_target *target, registry_transform transform, void *ctx,
                                 char *errbuf, size_t errlen)
{
	registry_outcome outcome = REGISTRY_IO;
	char *real = NULL, *dir = NULL, *lock_path = NULL, *original = NULL, *tmp = NULL;
	int lock_fd = -1;
	strbuf updated = STRBUF_INIT;
	if (locate_target(target, &real, &dir, errbuf, errlen) != 0)
		goto cleanup;
	size_t lock_len = strlen(real) + sizeof ".mcp-relay.lock";
	lock_path = malloc(lock_len);
	if (lock_path == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		goto cleanup;
	}
	snprintf(lock_path, lock_len, "%s.mcp-relay.lock", real);
	lock_fd = take_lock(lock_path, &outcome, errbuf, errlen);
	if (lock_fd < 0)
		goto cleanup;
	outcome = REGISTRY_IO;
	if (target->managed && initialise_managed(dir, real, errbuf, errlen) != 0)
		goto cleanup;
	size_t len = 0;
	struct stat before;
	if (read_registry(real, &original, &len, &before, errbuf, errlen) != 0)
		goto cleanup;
	outcome = transform(original, len, &updated, ctx, errbuf, errlen);
	if (outcome != REGISTRY_CHANGED)
		goto cleanup;
	if (!strbuf_ok(&updated)) {
		snprintf(errbuf, errlen, "out of memory updating the registry");
		outcome = REGISTRY_IO;
		goto cleanup;
	}
	outcome = REGISTRY_IO;
	tmp = write_temporary(dir, fs_basename(real), strbuf_str(&updated), updated.len,
	                      before.st_mode & 0777, errbuf, errlen);
	if (tmp == NULL)
		goto cleanup;
	/* Editors that do not take our lock: never knowingly overwrite them. */
	struct stat now;
	char *current = NULL;
	size_t current_len = 0;
	if (lstat(real, &now) != 0 || !same_stat(&before, &now) ||
	    read_registry(real, &current, &current_len, NULL, errbuf, errlen) != 0 || current_len != len ||
	    memcmp(current, original, len) != 0) {
		free(current);
		snprintf(errbuf, errlen,
		         "the registry %s changed outside its lock; retry without overwriting those changes",
		         real);
		outcome = REGISTRY_OUTSIDE_CHANGE;
		goto cleanup;
	}
	free(current);
	if (rename(tmp, real) != 0) {
		snprintf(errbuf, errlen, "cannot replace the registry %s: %s", real, strerror(errno));
		goto cleanup;
	}
	free(tmp);
	tmp = NULL;
	relay_error err;
	fs_fsync_dir(dir, &err);
	outcome = REGISTRY_CHANGED;
cleanup:
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	if (lock_fd >= 0)
		close(lock_fd); /* releases the flock; the sidecar is never removed */
	strbuf_free(&updated);
	free(original);
	free(lock_path);
	free(real);
	free(dir);
	return outcome;
}
