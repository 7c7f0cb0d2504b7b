/*
 * md_xfer.c — transport push and pull as tar streams through the archive
 * API (PUT and GET /containers/{id}/archive), never the `docker cp` program.
 *
 * push: the tree is checked first (regular files and folders only; a link
 *   or special file is refused before anything is sent), then a thread
 *   writes the tar into a pipe while libcurl sends it (chunked), named
 *   relative to the deepest folder of the destination that already exists
 *   in the container (found with HEAD), so missing parents are created 0700
 *   and owned by the guest user; files keep only their owner's execute bit
 *   (0700 or 0600). The engine unpacks it in place; HEAD checks it landed.
 * pull: the engine's tar of the path is spooled to an unlinked temporary
 *   file, its stat header checked (a link is refused), and unpacked with
 *   libarchive: regular files and folders only, names without "..",
 *   O_EXCL | O_NOFOLLOW, files 0600 and folders 0700; on failure nothing
 *   is left at the destination.
 * Neither computes guest-side facts (the trait is not declared): the core
 * checks every file's SHA-256 through the guest receiver.
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
#include <unistd.h>

#include "md.h"
#include "relay_kit/dir.h"
#include "relay_support/tree.h"
#include "relay_support/utf8_locale.h"

#define XFER_TIMEOUT_MS 3600000u

static bool clean_abs_path(const char *p)
{
	if (p == NULL || p[0] != '/' || strlen(p) >= 1024)
		return false;
	for (const char *c = p; *c; c++) {
		if (*c == '\n' || *c == '\r')
			return false;
		if (c[0] == '/' && c[1] == '.' && c[2] == '.' && (c[3] == '/' || c[3] == '\0'))
			return false;
		if (c[0] == '/' && c[1] == '/')
			return false;
	}
	return true;
}

int md_tmp_file(md_state *st)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/tmp", st->kit.state_dir);
	mkdir(dir, 0700);
	return open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

static relay_status uid_gid_of(md_conn *conn, int64_t *uid, int64_t *gid)
{
	long u = 0, g = 0;
	if (sscanf(conn->user, "%ld:%ld", &u, &g) != 2)
		return RELAY_E_INTERNAL;
	*uid = u;
	*gid = g;
	return RELAY_OK;
}

typedef struct tar_out {
	md_state *st;
	struct archive *a;
	int64_t uid, gid;
	relay_call *call;
} tar_out;

static relay_status add_dir(tar_out *t, const char *name, relay_error *err)
{
	if (t->a == NULL)
		return RELAY_OK; /* a scan: nothing is written */
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFDIR);
	archive_entry_set_perm(e, 0700);
	archive_entry_set_uid(e, t->uid);
	archive_entry_set_gid(e, t->gid);
	archive_entry_set_mtime(e, (time_t)(t->st->host->now_ms() / 1000), 0);
	int rc = archive_write_header(t->a, e);
	archive_entry_free(e);
	if (rc != ARCHIVE_OK)
		return md_err(t->st, err, RELAY_E_IO, archive_errno(t->a),
		              "cannot write the push archive: %s", archive_error_string(t->a));
	return RELAY_OK;
}

static relay_status add_file(tar_out *t, int dir_fd, const char *leaf, const char *name, relay_error *err)
{
	int fd = openat(dir_fd, leaf, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return md_err(t->st, err, fd < 0 && e != ELOOP ? RELAY_E_IO : RELAY_E_UNSAFE_PATH, e,
		              "cannot push %s: it is not a readable regular file", name);
	}
	if (t->a == NULL) {
		close(fd);
		return RELAY_OK; /* a scan: nothing is written */
	}
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, (sb.st_mode & 0100) ? 0700 : 0600);
	archive_entry_set_size(e, sb.st_size);
	archive_entry_set_uid(e, t->uid);
	archive_entry_set_gid(e, t->gid);
	archive_entry_set_mtime(e, sb.st_mtim.tv_sec, 0);
	relay_status s = RELAY_OK;
	if (archive_write_header(t->a, e) != ARCHIVE_OK) {
		s = md_err(t->st, err, RELAY_E_IO, archive_errno(t->a), "cannot write the push archive: %s",
		           archive_error_string(t->a));
		goto done;
	}
	char buf[1 << 16];
	off_t left = sb.st_size;
	while (left > 0) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			s = md_err(t->st, err, RELAY_E_IO, errno,
			           "cannot read %s (did it shrink while pushed?)", name);
			goto done;
		}
		if (n > left)
			n = (ssize_t)left;
		if (archive_write_data(t->a, buf, (size_t)n) != n) {
			s = md_err(t->st, err, RELAY_E_IO, archive_errno(t->a),
			           "cannot write the push archive: %s", archive_error_string(t->a));
			goto done;
		}
		left -= n;
	}
done:
	archive_entry_free(e);
	close(fd);
	return s;
}

static relay_status add_tree(tar_out *t, int dir_fd, const char *prefix, int depth, relay_error *err)
{
	if (depth > 256)
		return md_err(t->st, err, RELAY_E_TOO_LARGE, 0, "the pushed tree is deeper than 256 folders");
	if (t->call && t->st->host->call_cancelled(t->call))
		return md_err(t->st, err, RELAY_E_CANCELLED, 0, "cancelled");
	/* Sorted, so the archive is the same for the same tree. */
	size_t count = 0;
	char **names = rk_dir_names_sorted(dir_fd, &count);
	if (names == NULL)
		return md_err(t->st, err, errno == ENOMEM ? RELAY_E_NO_MEMORY : RELAY_E_IO, errno,
		              "cannot list %s", prefix[0] ? prefix : "the tree");
	relay_status s = RELAY_OK;
	for (size_t i = 0; i < count && s == RELAY_OK; i++) {
		char rel[PATH_MAX];
		if (snprintf(rel, sizeof rel, "%s%s%s", prefix, prefix[0] ? "/" : "", names[i]) >=
		    (int)sizeof rel) {
			s = md_err(t->st, err, RELAY_E_TOO_LARGE, 0, "a pushed path is too long");
			break;
		}
		struct stat sb;
		if (fstatat(dir_fd, names[i], &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			s = md_err(t->st, err, RELAY_E_IO, errno, "cannot read %s", rel);
		} else if (S_ISDIR(sb.st_mode)) {
			int sub = openat(dir_fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				s = md_err(t->st, err, RELAY_E_IO, errno, "cannot open %s", rel);
			} else {
				s = add_dir(t, rel, err);
				if (s == RELAY_OK)
					s = add_tree(t, sub, rel, depth + 1, err);
				close(sub);
			}
		} else if (S_ISREG(sb.st_mode)) {
			s = add_file(t, dir_fd, names[i], rel, err);
		} else {
			s = md_err(t->st, err, RELAY_E_UNSAFE_PATH, 0,
			           "cannot push %s: it is %s; only regular files and folders are pushed", rel,
			           S_ISLNK(sb.st_mode) ? "a symbolic link" : "a special file");
		}
	}
	rk_dir_names_free(names, count);
	return s;
}

ssize_t md_tar_write_cb(struct archive *a, void *user, const void *buf, size_t len)
{
	(void)a;
	int fd = *(int *)user;
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, (const char *)buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return (ssize_t)len;
}

static char *archive_path_query(const char *container, const char *path)
{
	char *out = malloc(4096);
	if (out == NULL)
		return NULL;
	snprintf(out, 4096, MD_API_PREFIX "/containers/");
	if (!md_url_encode(out, 4096, container) || strlen(out) + 16 >= 4096) {
		free(out);
		return NULL;
	}
	strcat(out, "/archive?path=");
	if (!md_url_encode(out, 4096, path)) {
		free(out);
		return NULL;
	}
	return out;
}

typedef struct push_job {
	md_state *st;
	const char *local_path;
	const char *remote_path;
	const char *rest; /* the missing folders, relative to the archive's base */
	bool tree;
	int64_t uid, gid;
	relay_call *call;
	/* the writer thread's answer */
	int fd;
	relay_status status;
	relay_error err;
} push_job;

/* Writes the push's tar to `fd`, or with fd < 0 only checks the tree
 * (links and special files refused). */
static relay_status write_push_tar(push_job *job, int fd, relay_error *err)
{
	md_state *st = job->st;
	relay_status s = RELAY_OK;
	struct archive *a = NULL;
	int dir_fd = -1;
	if (fd >= 0) {
		a = archive_write_new();
		archive_write_set_format_pax_restricted(a);
		archive_write_set_bytes_in_last_block(a, 1);
		if (archive_write_open(a, &fd, NULL, md_tar_write_cb, NULL) != ARCHIVE_OK) {
			s = md_err(st, err, RELAY_E_IO, archive_errno(a), "cannot start the push archive");
			goto done;
		}
	}
	tar_out t = {.st = st, .a = a, .uid = job->uid, .gid = job->gid, .call = job->call};
	/* The missing folders, each created 0700 for the guest user. */
	char prefix[1024] = "";
	for (const char *p = job->rest; *p && s == RELAY_OK;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		size_t used = strlen(prefix);
		snprintf(prefix + used, sizeof prefix - used, "%s%.*s", used ? "/" : "", (int)n, p);
		s = add_dir(&t, prefix, err);
		p += n;
		while (*p == '/')
			p++;
	}
	if (s != RELAY_OK)
		goto done;
	if (job->tree) {
		dir_fd = open(job->local_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dir_fd < 0) {
			s = md_err(st, err, RELAY_E_IO, errno, "cannot open %s", job->local_path);
			goto done;
		}
		s = add_tree(&t, dir_fd, prefix, 0, err);
	} else {
		char name[1100];
		const char *leaf = strrchr(job->remote_path, '/') + 1;
		snprintf(name, sizeof name, "%s%s%s", prefix, prefix[0] ? "/" : "", leaf);
		s = add_file(&t, AT_FDCWD, job->local_path, name, err);
	}
	if (s == RELAY_OK && a && archive_write_close(a) != ARCHIVE_OK)
		s = md_err(st, err, RELAY_E_IO, archive_errno(a), "cannot finish the push archive (%s)",
		           archive_error_string(a));
done:
	if (dir_fd >= 0)
		close(dir_fd);
	if (a)
		archive_write_free(a);
	return s;
}

static void *push_writer(void *arg)
{
	push_job *job = arg;
	/* The engine may stop reading (a refusal): the write then fails with
	 * EPIPE instead of a SIGPIPE for the whole relay. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	memset(&job->err, 0, sizeof job->err);
	rs_utf8_locale_scope utf8; /* names are UTF-8 whatever the relay's locale */
	rs_utf8_locale_enter(&utf8);
	job->status = write_push_tar(job, job->fd, &job->err);
	rs_utf8_locale_leave(&utf8);
	close(job->fd);
	return NULL;
}

/* One PUT of the archive, written by a thread into a pipe while libcurl
 * sends it (chunked), so building and sending overlap. */
static relay_status put_stream(push_job *job, const char *path, relay_error *err)
{
	md_state *st = job->st;
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return md_err(st, err, RELAY_E_IO, errno, "cannot make a pipe for the push");
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	job->fd = p[1];
	pthread_t writer;
	if (pthread_create(&writer, NULL, push_writer, job) != 0) {
		close(p[0]);
		close(p[1]);
		return md_err(st, err, RELAY_E_IO, EAGAIN, "cannot start the push writer");
	}
	md_reply r;
	relay_status s = md_api(st, "PUT", path, NULL, p[0], -1, XFER_TIMEOUT_MS, job->call, &r, err);
	close(p[0]); /* a writer still writing gets EPIPE and stops */
	pthread_join(writer, NULL);
	if (s == RELAY_E_INDETERMINATE || s == RELAY_E_UNAVAILABLE || s == RELAY_E_TIMEOUT)
		s = md_err(st, err, RELAY_E_TRANSIENT, 0, "%s", err->message);
	if (s == RELAY_OK && job->status != RELAY_OK)
		s = md_err(st, err, job->status, job->err.sys_errno, "%s", job->err.message);
	if (s == RELAY_OK && r.status != 200)
		s = md_err(st, err, r.status == 404 ? RELAY_E_NOT_FOUND : RELAY_E_REFUSED, 0,
		           "the engine refused the push to %s (HTTP %ld): %s", job->remote_path, r.status,
		           md_reply_message(&r));
	md_reply_free(&r);
	return s;
}

/* True when the engine's archive API no longer sees the container's own
 * files (the guest program every guest image has): the engine lost its
 * mount of the container's root while the container runs, so whatever it
 * reads or writes is not the guest's (docs/machine-docker.md, "Known
 * problems"). */
static bool view_lost(md_state *st, const char *container)
{
	return lease_path_exists(st, container, MD_GUEST_INIT, NULL) == 0;
}

static relay_status view_lost_error(md_state *st, const char *container, relay_error *err)
{
	return md_err(st, err, RELAY_E_UNAVAILABLE, 0,
	              "the engine at %s no longer sees the files of the running container %s (its mount "
	              "of the container's root is gone, so its archive API reads and writes an empty "
	              "folder); on Docker this happens when the daemon's mounts are shared with other "
	              "mount namespaces: run dockerd in a mount namespace of its own "
	              "(docs/machine-docker.md, \"Known problems\")",
	              st->endpoint, container);
}

relay_status xfer_push(md_state *st, md_conn *conn, const char *local_path, const char *remote_path,
                       relay_call *call, unsigned flags, relay_error *err)
{
	if (!clean_abs_path(remote_path) || strcmp(remote_path, "/") == 0)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "push needs an absolute guest path without \"..\", not %.200s", remote_path);
	bool tree = (flags & RELAY_XFER_TREE) != 0;
	struct stat sb;
	if (lstat(local_path, &sb) != 0)
		return md_err(st, err, RELAY_E_NOT_FOUND, errno, "cannot push %s: it does not exist",
		              local_path);
	if (tree ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode))
		return md_err(st, err, S_ISLNK(sb.st_mode) ? RELAY_E_UNSAFE_PATH : RELAY_E_INVALID_ARGUMENT,
		              0, "cannot push %s: it is not a %s", local_path,
		              tree ? "folder" : "regular file");
	int64_t uid = 0, gid = 0;
	if (uid_gid_of(conn, &uid, &gid) != RELAY_OK)
		return md_err(st, err, RELAY_E_INTERNAL, 0, "the connection has no guest user");

	/* The deepest folder of the destination that exists already. */
	char target[1024], base[1024];
	snprintf(target, sizeof target, "%s", remote_path);
	if (!tree) {
		char *slash = strrchr(target, '/');
		*slash = '\0';
		if (target[0] == '\0')
			snprintf(target, sizeof target, "/");
	}
	snprintf(base, sizeof base, "%s", target);
	for (;;) {
		uint32_t mode = 0;
		int ex = lease_path_exists(st, conn->container, base, &mode);
		if (ex < 0)
			return md_err(st, err, RELAY_E_TRANSIENT, 0, "cannot look up %s in container %s",
			              base, conn->container);
		if (ex == 1) {
			if (!(mode & 0x80000000u))
				return md_err(
				    st, err, RELAY_E_INVALID_ARGUMENT, 0,
				    "cannot push into %s: %s exists in the guest and is not a folder",
				    remote_path, base);
			break;
		}
		char *slash = strrchr(base, '/');
		if (slash == base) {
			snprintf(base, sizeof base, "/");
			break;
		}
		*slash = '\0';
	}
	/* Names in the archive are relative to `base`. */
	const char *rest = target + strlen(base);
	while (*rest == '/')
		rest++;

	push_job job = {.st = st,
	                .local_path = local_path,
	                .remote_path = remote_path,
	                .rest = rest,
	                .tree = tree,
	                .uid = uid,
	                .gid = gid,
	                .call = call};
	/* Links and special files are refused before anything is sent, so a
	 * refusal never leaves half a tree in the guest. */
	relay_status s = write_push_tar(&job, -1, err);
	if (s != RELAY_OK)
		return s;
	char *path = archive_path_query(conn->container, base);
	if (path == NULL)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the guest path is too long");
	s = put_stream(&job, path, err);
	/* The engine said 200: the destination must be there now. */
	if (s == RELAY_OK && lease_path_exists(st, conn->container, remote_path, NULL) != 1)
		s = view_lost(st, conn->container)
		        ? view_lost_error(st, conn->container, err)
		        : md_err(st, err, RELAY_E_TRANSIENT, 0,
		                 "the engine accepted the push to %s but the guest does not have it",
		                 remote_path);
	free(path);
	return s;
}

/* ---- pull ------------------------------------------------------------------- */

static bool safe_rel(const char *rel)
{
	if (rel[0] == '/' || rel[0] == '\0')
		return false;
	const char *p = rel;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if ((n == 2 && p[0] == '.' && p[1] == '.') || (n == 1 && p[0] == '.'))
			return false;
		p += n;
		while (*p == '/')
			p++;
	}
	return true;
}

static relay_status write_entry_file(md_state *st, struct archive *a, const char *dest, relay_error *err)
{
	int fd = open(dest, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return md_err(st, err, errno == EEXIST ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
		              "cannot create %s", dest);
	relay_status s = RELAY_OK;
	const void *buf;
	size_t len;
	la_int64_t off;
	int rc;
	while ((rc = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
		if (pwrite(fd, buf, len, (off_t)off) != (ssize_t)len) {
			s = md_err(st, err, errno == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO, errno,
			           "cannot write %s", dest);
			break;
		}
	}
	if (s == RELAY_OK && rc != ARCHIVE_EOF)
		s = md_err(st, err, RELAY_E_TRANSIENT, 0, "the engine's archive broke off: %s",
		           archive_error_string(a));
	if (close(fd) != 0 && s == RELAY_OK)
		s = md_err(st, err, RELAY_E_IO, errno, "cannot write %s", dest);
	return s;
}

/* Checks the engine's stat of the pulled path (X-Docker-Container-Path-Stat,
 * base64 JSON): no link, and a folder exactly when tree. */
static relay_status check_pulled_stat(md_state *st, const char *path_stat, const char *remote_path, bool tree,
                                      relay_error *err)
{
	relay_status s = RELAY_OK;
	char *stat_json = path_stat ? md_b64_decode(path_stat) : NULL;
	json_object *stat_obj = stat_json ? json_tokener_parse(stat_json) : NULL;
	/* Go's FileMode bits (ModeDir 1<<31, ModeSymlink 1<<27). Podman fills
	 * linkTarget with the path itself for every file, so only the mode bit
	 * says "link"; the tar entry's type is checked again below. */
	uint32_t mode = (uint32_t)md_int(stat_obj, "mode", 0);
	if (stat_obj == NULL) {
		s = md_err(st, err, RELAY_E_PROTOCOL, 0, "the engine sent no stat of %s", remote_path);
		goto cleanup;
	}
	if (mode & 0x08000000u) {
		s = md_err(st, err, RELAY_E_UNSAFE_PATH, 0,
		           "%s is a symbolic link in the guest; it is not pulled", remote_path);
		goto cleanup;
	}
	bool is_dir = (mode & 0x80000000u) != 0;
	if (is_dir != tree) {
		s = md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "%s is a %s in the guest; pull it %s",
		           remote_path, is_dir ? "folder" : "file",
		           is_dir ? "with RELAY_XFER_TREE" : "without RELAY_XFER_TREE");
		goto cleanup;
	}
cleanup:
	json_object_put(stat_obj);
	free(stat_json);
	return s;
}

/* Writes one entry (rel below the pulled folder, shown as `shown`) of the
 * engine's archive under local_path: a folder or a regular file. */
static relay_status write_tree_entry(md_state *st, struct archive *a, const char *local_path, const char *rel,
                                     const char *shown, mode_t type, relay_error *err)
{
	if (!safe_rel(rel))
		return md_err(st, err, RELAY_E_UNSAFE_PATH, 0, "the archive names %s, outside the folder",
		              shown);
	char dest[PATH_MAX];
	if (snprintf(dest, sizeof dest, "%s/%s", local_path, rel) >= (int)sizeof dest)
		return md_err(st, err, RELAY_E_TOO_LARGE, 0, "%s is too long a path here", shown);
	size_t dl = strlen(dest);
	while (dl > 1 && dest[dl - 1] == '/')
		dest[--dl] = '\0';
	if (type != AE_IFDIR)
		return write_entry_file(st, a, dest, err);
	if (mkdir(dest, 0700) != 0 && errno != EEXIST)
		return md_err(st, err, RELAY_E_IO, errno, "cannot create %s", dest);
	struct stat dsb;
	if (lstat(dest, &dsb) != 0 || !S_ISDIR(dsb.st_mode))
		return md_err(st, err, RELAY_E_UNSAFE_PATH, 0, "%s is not a folder here", dest);
	return RELAY_OK;
}

relay_status xfer_pull(md_state *st, md_conn *conn, const char *remote_path, const char *local_path,
                       relay_call *call, unsigned flags, relay_error *err)
{
	if (!clean_abs_path(remote_path) || strcmp(remote_path, "/") == 0)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "pull needs an absolute guest path without \"..\", not %.200s", remote_path);
	bool tree = (flags & RELAY_XFER_TREE) != 0;
	struct stat lsb;
	if (lstat(local_path, &lsb) == 0)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "cannot pull into %s: it exists",
		              local_path);
	char *path = archive_path_query(conn->container, remote_path);
	if (path == NULL)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the guest path is too long");
	relay_status s = RELAY_OK;
	struct archive *a = NULL;
	rs_utf8_locale_scope utf8 = {0}; /* names are UTF-8 whatever the relay's locale */
	bool created = false;
	int tar_fd = md_tmp_file(st);
	md_reply r = {0};
	if (tar_fd < 0) {
		s = md_err(st, err, RELAY_E_IO, errno, "cannot create a temporary archive under %s",
		           st->kit.state_dir);
		goto done;
	}
	s = md_check_pull_path(st, conn->container, remote_path, err);
	if (s == RELAY_E_NOT_FOUND && view_lost(st, conn->container))
		s = view_lost_error(st, conn->container,
		                    err); /* a folder "missing": the engine's view is gone */
	if (s != RELAY_OK)
		goto done;
	s = md_api(st, "GET", path, NULL, -1, tar_fd, XFER_TIMEOUT_MS, call, &r, err);
	if (s == RELAY_E_INDETERMINATE || s == RELAY_E_UNAVAILABLE || s == RELAY_E_TIMEOUT)
		s = md_err(st, err, RELAY_E_TRANSIENT, 0, "%s", err->message);
	if (s != RELAY_OK)
		goto done;
	if (r.status == 404) {
		s = view_lost(st, conn->container) ? view_lost_error(st, conn->container, err)
		                                   : md_err(st, err, RELAY_E_NOT_FOUND, 0,
		                                            "%s does not exist in the guest", remote_path);
		goto done;
	}
	if (r.status != 200) {
		s = md_err(st, err, RELAY_E_TRANSIENT, 0, "the engine refused to send %s (HTTP %ld)",
		           remote_path, r.status);
		goto done;
	}
	s = check_pulled_stat(st, r.path_stat, remote_path, tree, err);
	if (s == RELAY_OK)
		s = md_check_pull_path(st, conn->container, remote_path, err);
	if (s != RELAY_OK)
		goto done;
	lseek(tar_fd, 0, SEEK_SET);
	rs_utf8_locale_enter(&utf8);
	a = archive_read_new();
	archive_read_support_format_tar(a);
	if (archive_read_open_fd(a, tar_fd, 1 << 16) != ARCHIVE_OK) {
		s = md_err(st, err, RELAY_E_PROTOCOL, 0, "the engine's archive of %s is not a tar",
		           remote_path);
		goto done;
	}
	const char *leaf = strrchr(remote_path, '/') + 1;
	size_t leaf_len = strlen(leaf);
	if (tree) {
		if (mkdir(local_path, 0700) != 0) {
			s = md_err(st, err, RELAY_E_IO, errno, "cannot create %s", local_path);
			goto done;
		}
		created = true;
	}
	struct archive_entry *e;
	int rc;
	size_t entries = 0;
	while ((rc = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		if (call && st->host->call_cancelled(call)) {
			s = md_err(st, err, RELAY_E_CANCELLED, 0, "cancelled");
			break;
		}
		const char *name = archive_entry_pathname(e);
		mode_t type = archive_entry_filetype(e);
		if (name == NULL || strncmp(name, leaf, leaf_len) != 0 ||
		    (name[leaf_len] != '\0' && name[leaf_len] != '/')) {
			s = md_err(st, err, RELAY_E_PROTOCOL, 0,
			           "the engine's archive has an entry outside %s", remote_path);
			break;
		}
		const char *rel = name + leaf_len;
		while (*rel == '/')
			rel++;
		char shown[PATH_MAX];
		md_textf(shown, sizeof shown, "%s%s%s", remote_path, rel[0] ? "/" : "", rel);
		if (type != AE_IFREG && type != AE_IFDIR) {
			s = md_err(st, err, RELAY_E_UNSAFE_PATH, 0,
			           "%s is %s in the guest; only regular files and folders are pulled", shown,
			           type == AE_IFLNK ? "a symbolic link" : "a special file");
			break;
		}
		if (archive_entry_hardlink(e) != NULL) {
			s = md_err(st, err, RELAY_E_UNSAFE_PATH, 0,
			           "%s is a hard link in the archive; refused", shown);
			break;
		}
		entries++;
		if (!tree) {
			if (type != AE_IFREG || rel[0] != '\0' || entries > 1) {
				s = md_err(st, err, RELAY_E_PROTOCOL, 0,
				           "the engine's archive of the file %s is not one file",
				           remote_path);
				break;
			}
			s = write_entry_file(st, a, local_path, err);
			created = true;
			if (s != RELAY_OK)
				break;
			continue;
		}
		if (rel[0] == '\0')
			continue; /* the folder itself */
		s = write_tree_entry(st, a, local_path, rel, shown, type, err);
		if (s != RELAY_OK)
			break;
	}
	if (s == RELAY_OK && rc != ARCHIVE_EOF)
		s = md_err(st, err, RELAY_E_TRANSIENT, 0, "the engine's archive of %s broke off: %s",
		           remote_path, archive_error_string(a));
	if (s == RELAY_OK && !tree && entries != 1)
		s = md_err(st, err, RELAY_E_PROTOCOL, 0, "the engine's archive of %s holds no file",
		           remote_path);
done:
	if (s != RELAY_OK && created)
		rs_remove_tree(local_path, NULL);
	if (a)
		archive_read_free(a);
	rs_utf8_locale_leave(&utf8);
	if (tar_fd >= 0)
		close(tar_fd);
	md_reply_free(&r);
	free(path);
	return s;
}
