#include "ssh_pull.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "relay/transport.h"
#include "relay_kit/buf.h"
#include "relay_kit/sha256.h"
#include "relay_kit/xfer.h"
#include "relay_support/tree.h"
#include "ssh_facts.h"
#include "ssh_paths.h"
#include "ssh_scripts.h"
#include "ssh_session.h"
#include "ssh_spawn.h"

#define PULL_MAX_FACTS_BYTES  ((size_t)64 << 20)
#define PULL_CHECK_TIMEOUT_MS 3600000u
#define PULL_ERR_KEEP         8192
#define PULL_BUF              ((size_t)256 << 10)
#define PULL_DRAIN_MS         60000

typedef struct pull_ctx {
	const ssh_conn *conn;
	const relay_host *host;
	relay_call *call;
	ssh_child child;
	ssh_io io;
	char *buf;
	rk_buf err_tail;
	bool cancelled;
	bool step_failed;
	relay_error step_err;
	uint64_t got_bytes;
	uint64_t total_bytes;
	uint64_t next_progress;
	rk_buf head;      /* standard output up to the stream: chatter, the facts block, the marker */
	size_t head_used; /* bytes of `head` before the stream (through the marker line) */
	bool head_too_big;
	const char *pending; /* stream bytes that arrived with the head, handed to libarchive first */
	size_t pending_len;
} pull_ctx;

static void pull_on_out(void *ctx, const char *data, size_t len)
{
	pull_ctx *pc = ctx;
	if (pc->head.len + len > PULL_MAX_FACTS_BYTES + PULL_BUF) {
		pc->head_too_big = true;
		return;
	}
	rk_buf_append(&pc->head, data, len);
}

/* The end of the line "\036relay-stream <token>" in head (a line of its
 * own), or 0 while it has not arrived. */
static size_t stream_marker_end(const rk_buf *head, const char *token, size_t *search_from)
{
	char marker[64];
	int mlen = snprintf(marker, sizeof marker, "\036relay-stream %s\n", token);
	for (size_t i = *search_from; i + (size_t)mlen <= head->len; i++) {
		if ((i == 0 || head->data[i - 1] == '\n') &&
		    memcmp(head->data + i, marker, (size_t)mlen) == 0)
			return i + (size_t)mlen;
	}
	/* Resume where a marker could still start. */
	*search_from = head->len > (size_t)mlen ? head->len - (size_t)mlen : 0;
	return 0;
}

static void pull_on_err(void *ctx, const char *data, size_t len)
{
	pull_ctx *pc = ctx;
	rk_buf_append(&pc->err_tail, data, len);
	if (pc->err_tail.len > 2 * PULL_ERR_KEEP)
		rk_buf_drop_front(&pc->err_tail, pc->err_tail.len - PULL_ERR_KEEP);
}

/* libarchive's read callback: the next bytes of ssh's standard output. */
static la_ssize_t pull_read_cb(struct archive *a, void *ctx, const void **buffer)
{
	pull_ctx *pc = ctx;
	if (pc->pending_len > 0) {
		*buffer = pc->pending;
		la_ssize_t n = (la_ssize_t)pc->pending_len;
		pc->pending_len = 0;
		return n;
	}
	pc->io.out_buf = pc->buf;
	pc->io.out_cap = PULL_BUF;
	pc->io.out_got = 0;
	for (;;) {
		if (pc->io.out_got > 0) {
			*buffer = pc->buf;
			return (la_ssize_t)pc->io.out_got;
		}
		if (pc->child.out_fd < 0)
			return 0;
		if (pc->host->call_cancelled(pc->call)) {
			pc->cancelled = true;
			archive_set_error(a, ECANCELED, "cancelled");
			return -1;
		}
		if (ssh_child_step(pc->host, &pc->child, &pc->io, 200, &pc->step_err) != RELAY_OK) {
			pc->step_failed = true;
			archive_set_error(a, EIO, "cannot talk to ssh");
			return -1;
		}
	}
}

/* The member name as a path relative to the pulled root ("" for the root
 * itself), or an error naming why it is refused. */
static relay_status member_path(const relay_host *host, const char *name, char **rel_out, relay_error *err)
{
	*rel_out = NULL;
	if (name == NULL || name[0] == '/')
		return host->error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                       "the guest's stream holds an absolute member name; nothing was kept");
	while (name[0] == '.' && name[1] == '/')
		name += 2;
	if (strcmp(name, ".") == 0)
		name += 1;
	char *rel = strdup(name);
	if (rel == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	size_t len = strlen(rel);
	while (len > 0 && rel[len - 1] == '/')
		rel[--len] = '\0';
	if (len > 0) {
		char *copy = strdup(rel);
		if (copy == NULL) {
			free(rel);
			return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		}
		char *save = NULL;
		bool ok = true;
		size_t segs = 0;
		for (char *seg = strtok_r(copy, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
			segs++;
			if (!ssh_name_ok(seg))
				ok = false;
		}
		/* strtok_r skips empty segments: "a//b" has fewer separators' worth of segments. */
		size_t slashes = 0;
		for (size_t i = 0; i < len; i++)
			slashes += rel[i] == '/';
		free(copy);
		if (!ok || segs != slashes + 1) {
			free(rel);
			return host->error_set(
			    err, RELAY_E_UNSAFE_PATH, 0,
			    "the guest's stream holds a member name with '..', an empty segment or "
			    "a control character; nothing was kept");
		}
	}
	*rel_out = rel;
	return RELAY_OK;
}

/* Opens (creating 0700 folders as needed) the folder holding `rel` under
 * rootfd; *last_out points into rel at the final segment. */
static int open_parent(int rootfd, char *rel, const char **last_out)
{
	int cur = dup(rootfd);
	char *seg = rel;
	for (char *slash = strchr(seg, '/'); cur >= 0 && slash; slash = strchr(seg, '/')) {
		*slash = '\0';
		int next = openat(cur, seg, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT && mkdirat(cur, seg, 0700) == 0)
			next = openat(cur, seg, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int saved = errno;
		*slash = '/';
		close(cur);
		cur = next;
		errno = saved;
		seg = slash + 1;
	}
	*last_out = seg;
	return cur;
}

static relay_status write_all(const relay_host *host, int fd, const void *data, size_t len, const char *shown,
                              relay_error *err)
{
	const char *p = data;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return host->error_set(err, errno == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO, errno,
			                       "cannot write the pulled file %.120s: %s", shown,
			                       strerror(errno));
		p += w;
		len -= (size_t)w;
	}
	return RELAY_OK;
}

/* Copies one member's data into fd, hashing it. */
static relay_status copy_data(pull_ctx *pc, struct archive *a, struct archive_entry *e, int fd,
                              const char *shown, const char *fact_path, ssh_facts *received, relay_error *err)
{
	const relay_host *host = pc->host;
	relay_status status = RELAY_OK;
	rk_sha256 h = {0};
	static const char zeros[4096];
	if (!rk_sha256_begin(&h))
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	uint64_t pos = 0;
	for (;;) {
		const void *block;
		size_t size;
		la_int64_t offset;
		int r = archive_read_data_block(a, &block, &size, &offset);
		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
			status =
			    host->error_set(err, RELAY_E_IO, 0, "reading the guest's stream failed: %.160s",
			                    archive_error_string(a));
			goto cleanup;
		}
		if (offset < 0 || (uint64_t)offset < pos) {
			status = host->error_set(err, RELAY_E_PROTOCOL, 0,
			                         "the guest's stream is malformed at %.120s", shown);
			goto cleanup;
		}
		while (pos < (uint64_t)offset) { /* a sparse hole */
			size_t n = (uint64_t)offset - pos < sizeof zeros ? (size_t)((uint64_t)offset - pos)
			                                                 : sizeof zeros;
			status = write_all(host, fd, zeros, n, shown, err);
			if (status != RELAY_OK)
				goto cleanup;
			rk_sha256_update(&h, zeros, n);
			pos += n;
		}
		status = write_all(host, fd, block, size, shown, err);
		if (status != RELAY_OK)
			goto cleanup;
		rk_sha256_update(&h, block, size);
		pos += size;
		pc->got_bytes += size;
		if (pc->call && pc->got_bytes >= pc->next_progress) {
			host->call_progress(pc->call, (double)pc->got_bytes, (double)pc->total_bytes,
			                    "pulling files from the guest");
			pc->next_progress = pc->got_bytes + ((uint64_t)8 << 20);
		}
	}
	if (archive_entry_size_is_set(e) && (uint64_t)archive_entry_size(e) > pos) {
		size_t left = (size_t)((uint64_t)archive_entry_size(e) - pos);
		while (left > 0) { /* a trailing hole */
			size_t n = left < sizeof zeros ? left : sizeof zeros;
			status = write_all(host, fd, zeros, n, shown, err);
			if (status != RELAY_OK)
				goto cleanup;
			rk_sha256_update(&h, zeros, n);
			pos += n;
			left -= n;
		}
	}
	char hex[65];
	rk_sha256_end(&h, hex);
	if (!ssh_facts_add(received, fact_path, pos, hex))
		status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
cleanup:
	rk_sha256_discard(&h);
	return status;
}

/* Why a member type is refused, or NULL when it is a file or folder. */
static const char *refused_type(struct archive_entry *e)
{
	if (archive_entry_hardlink(e) != NULL)
		return "a hard link";
	switch (archive_entry_filetype(e)) {
	case AE_IFREG: return NULL;
	case AE_IFDIR: return NULL;
	case AE_IFLNK: return "a symbolic link";
	case AE_IFIFO: return "a FIFO";
	case AE_IFCHR:
	case AE_IFBLK: return "a device";
	case AE_IFSOCK: return "a socket";
	default: return "of an unknown type";
	}
}

/* Unpacks the whole stream. Tree mode: under rootfd. File mode: the one
 * member named `single_name` into file_fd. */
static relay_status unpack(pull_ctx *pc, struct archive *a, int rootfd, int file_fd, const char *single_name,
                           ssh_facts *received, relay_error *err)
{
	const relay_host *host = pc->host;
	relay_status status = RELAY_OK;
	bool single_done = false;
	for (;;) {
		struct archive_entry *e = NULL;
		int r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
			return host->error_set(err, RELAY_E_IO, 0,
			                       "reading the guest's stream failed: %.160s",
			                       archive_error_string(a));
		char *rel = NULL;
		status = member_path(host, archive_entry_pathname(e), &rel, err);
		if (status != RELAY_OK)
			return status;
		const char *why = refused_type(e);
		if (why) {
			status = host->error_set(
			    err, RELAY_E_UNSAFE_PATH, 0,
			    "the guest's stream holds %.100s, which is %s; pulls take only regular "
			    "files and folders, and nothing was kept",
			    rel[0] ? rel : "the root", why);
			free(rel);
			return status;
		}
		bool is_dir = archive_entry_filetype(e) == AE_IFDIR;
		if (single_name) {
			if (is_dir || single_done || strcmp(rel, single_name) != 0)
				status =
				    host->error_set(err, RELAY_E_PROTOCOL, 0,
				                    "the guest's stream for one file held another member");
			else
				status = copy_data(pc, a, e, file_fd, single_name, "", received, err);
			single_done = true;
			free(rel);
			if (status != RELAY_OK)
				return status;
			continue;
		}
		if (rel[0] == '\0') {
			free(rel);
			if (!is_dir)
				return host->error_set(err, RELAY_E_PROTOCOL, 0,
				                       "the guest's stream names a file as the root folder");
			continue;
		}
		char *shown = strdup(rel);
		const char *last = NULL;
		int parent = shown ? open_parent(rootfd, rel, &last) : -1;
		if (shown == NULL) {
			status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		} else if (parent < 0) {
			status = host->error_set(
			    err, errno == ELOOP || errno == ENOTDIR ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
			    "cannot create the folder of %.120s: %s", shown, strerror(errno));
		} else if (is_dir) {
			struct stat st;
			if (mkdirat(parent, last, 0700) != 0 &&
			    !(errno == EEXIST && fstatat(parent, last, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			      S_ISDIR(st.st_mode)))
				status = host->error_set(err, RELAY_E_IO, errno,
				                         "cannot create the folder %.120s: %s", shown,
				                         strerror(errno));
		} else {
			int fd =
			    openat(parent, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
			if (fd < 0) {
				status = host->error_set(
				    err, errno == EEXIST ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
				    errno == EEXIST ? "the guest's stream holds %.120s twice"
				                    : "cannot create %.120s: %s",
				    shown, strerror(errno));
			} else {
				status = copy_data(pc, a, e, fd, shown, shown, received, err);
				if (close(fd) != 0 && status == RELAY_OK)
					status =
					    host->error_set(err, RELAY_E_IO, errno, "cannot write %.120s: %s",
					                    shown, strerror(errno));
			}
		}
		if (parent >= 0)
			close(parent);
		free(shown);
		free(rel);
		if (status != RELAY_OK)
			return status;
	}
	if (single_name && !single_done)
		return host->error_set(err, RELAY_E_PROTOCOL, 0, "the guest's stream for one file was empty");
	return RELAY_OK;
}

/* Renames tmp to dest without replacing anything that appeared there. */
static int rename_noreplace(const char *tmp, const char *dest, bool is_dir)
{
#ifdef __linux__
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dest, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -1;
#endif
	if (!is_dir) {
		if (link(tmp, dest) != 0)
			return -1;
		unlink(tmp);
		return 0;
	}
	struct stat st;
	if (lstat(dest, &st) == 0) {
		errno = EEXIST;
		return -1;
	}
	return rename(tmp, dest);
}

/* The host path must not exist and its folder must: *parent_out is that
 * folder (allocated), *base_out and *base_len_out the name in local_path. */
static relay_status pull_check_destination(const relay_host *host, const char *local_path, char **parent_out,
                                           const char **base_out, size_t *base_len_out, relay_error *err)
{
	struct stat st;
	int lst = lstat(local_path, &st);
	if (lst == 0 || errno != ENOENT) {
		int e = lst == 0 ? EEXIST : errno;
		return host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, e,
		    lst == 0 ? "the host path %.120s already exists; pulls never replace anything"
		             : "cannot inspect the host path %.120s",
		    local_path);
	}
	size_t llen = strlen(local_path);
	while (llen > 1 && local_path[llen - 1] == '/')
		llen--;
	const char *slash = NULL;
	for (size_t i = 0; i < llen; i++)
		if (local_path[i] == '/')
			slash = local_path + i;
	char *parent = slash == NULL         ? strdup(".")
	               : slash == local_path ? strdup("/")
	                                     : strndup(local_path, (size_t)(slash - local_path));
	*parent_out = parent;
	const char *base_start = slash ? slash + 1 : local_path;
	size_t base_len = (size_t)(local_path + llen - base_start);
	*base_out = base_start;
	*base_len_out = base_len;
	if (parent == NULL || base_len == 0)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "the host path %.120s has no file name", local_path);
	if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, errno,
		                       "the folder of the host path %.120s does not exist", local_path);
	return RELAY_OK;
}

/* Reads the session's output up to the stream marker: pc->head holds the
 * facts block, pc->pending the stream bytes that came with it. */
static relay_status pull_read_head(pull_ctx *pc, const char *token, const char *remote, const char *what,
                                   bool was_spare, bool *retry_cold, relay_error *err)
{
	const relay_host *host = pc->host;
	relay_status status = RELAY_OK;
	size_t search_from = 0, end = 0;
	int64_t deadline = ssh_now_ms() + PULL_CHECK_TIMEOUT_MS;
	while ((end = stream_marker_end(&pc->head, token, &search_from)) == 0 &&
	       !ssh_child_done(&pc->child) && !pc->head_too_big) {
		if (host->call_cancelled(pc->call))
			return host->error_set(err, RELAY_E_CANCELLED, 0, "pull of %.150s cancelled", remote);
		if (ssh_now_ms() > deadline)
			return host->error_set(err, RELAY_E_TIMEOUT, 0,
			                       "%s: hashing in the guest took over %u s", what,
			                       PULL_CHECK_TIMEOUT_MS / 1000);
		status = ssh_child_step(host, &pc->child, &pc->io, 200, err);
		if (status != RELAY_OK)
			return status;
	}
	if (end == 0 && pc->head_too_big)
		return host->error_set(err, RELAY_E_TOO_LARGE, 0, "%s: the guest's file facts passed %zu MiB",
		                       what, PULL_MAX_FACTS_BYTES >> 20);
	if (end == 0) {
		int code = ssh_child_exit_code(&pc->child);
		bool freed = ssh_spares_note_failure(pc->conn, rk_buf_str(&pc->err_tail), pc->err_tail.len);
		*retry_cold = (was_spare || freed) && (code == 255 || code < 0) &&
		              strstr(rk_buf_str(&pc->head), "\036relay-") == NULL;
		if (code != 0)
			return ssh_failure(pc->conn, what, code, rk_buf_str(&pc->err_tail), pc->err_tail.len,
			                   err);
		return host->error_set(err, RELAY_E_PROTOCOL, 0,
		                       "%s: the guest ended without sending the stream", what);
	}
	pc->head_used = end;
	pc->pending = pc->head.data + end;
	pc->pending_len = pc->head.len - end;
	return RELAY_OK;
}

/* A fresh temporary sibling of local_path: a folder (*rootfd_out) for a
 * tree, a file (*file_fd_out) otherwise. *tmp_out is its path, allocated
 * even when creating it failed; *made_out says whether it exists. */
static relay_status pull_make_temp(const relay_host *host, const char *parent, const char *base_start,
                                   size_t base_len, const char *local_path, bool tree, char **tmp_out,
                                   int *rootfd_out, int *file_fd_out, bool *made_out, relay_error *err)
{
	rk_buf t = RK_BUF_INIT;
	rk_buf_printf(&t, "%s/.%.*s.relay-pull-XXXXXX", parent, (int)base_len, base_start);
	if (t.failed)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	char *tmp = t.data;
	*tmp_out = tmp;
	if (tree) {
		if (mkdtemp(tmp) == NULL ||
		    (*rootfd_out = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
			return host->error_set(err, RELAY_E_IO, errno,
			                       "cannot create a folder beside %.120s: %s", local_path,
			                       strerror(errno));
	} else {
		*file_fd_out = mkstemp(tmp);
		if (*file_fd_out < 0)
			return host->error_set(err, RELAY_E_IO, errno,
			                       "cannot create a file beside %.120s: %s", local_path,
			                       strerror(errno));
		fcntl(*file_fd_out, F_SETFD, FD_CLOEXEC);
	}
	*made_out = true;
	return RELAY_OK;
}

/* Reads on until ssh ends or timeout_ms passes, dropping what arrives;
 * stops at the first failed step and stores its error in *err. */
static void pull_drain(pull_ctx *pc, int64_t timeout_ms, int step_ms, relay_error *err)
{
	for (int64_t deadline = ssh_now_ms() + timeout_ms;
	     !ssh_child_done(&pc->child) && ssh_now_ms() < deadline;) {
		pc->io.out_buf = pc->buf;
		pc->io.out_cap = PULL_BUF;
		pc->io.out_got = 0;
		if (ssh_child_step(pc->host, &pc->child, &pc->io, step_ms, err) != RELAY_OK)
			break;
	}
}

/* Opens the tar stream on the session's standard output. An empty or
 * broken stream fails here as RELAY_E_IO, so that how ssh ended explains
 * it. *a_out is the archive to free, even after a failure. */
static relay_status pull_open_stream(pull_ctx *pc, const char *what, struct archive **a_out, relay_error *err)
{
	struct archive *a = archive_read_new();
	*a_out = a;
	if (a == NULL || archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    archive_read_support_filter_none(a) != ARCHIVE_OK ||
	    archive_read_open(a, pc, NULL, pull_read_cb, NULL) != ARCHIVE_OK) {
		relay_error open_err;
		pc->host->error_set(&open_err, RELAY_E_IO, 0, "%s: the guest sent no tar stream (%.120s)",
		                    what, a ? archive_error_string(a) : "out of memory");
		*err = open_err;
		return open_err.code;
	}
	return RELAY_OK;
}

/* Unpacks the stream into the folder rootfd (a tree) or the file
 * file_fd (named after remote's last part), then drains whatever follows
 * the archive so that ssh's exit decides. */
static relay_status pull_unpack_stream(pull_ctx *pc, struct archive *a, const char *remote, bool tree,
                                       int rootfd, int file_fd, ssh_facts *received, relay_error *err)
{
	const char *single = NULL;
	char single_name[NAME_MAX + 1];
	if (!tree) {
		const char *rb = strrchr(remote, '/');
		snprintf(single_name, sizeof single_name, "%s", rb ? rb + 1 : remote);
		single = single_name;
	}
	relay_status status = unpack(pc, a, rootfd, file_fd, single, received, err);
	if (status != RELAY_OK)
		return status;
	pull_drain(pc, PULL_DRAIN_MS, 200, err);
	return RELAY_OK;
}

/* Compares what arrived with what the guest measured (unless it could
 * not hash), closes the file (*file_fd, set to -1) and moves tmp to
 * local_path without replacing anything. */
static relay_status pull_commit(const relay_host *host, const char *what, const ssh_facts *guest,
                                ssh_facts *received, bool no_hash, const char *tmp, const char *local_path,
                                bool tree, int *file_fd, relay_error *err)
{
	ssh_facts_sort(received);
	if (!no_hash) {
		relay_status status = ssh_facts_compare(host, what, guest, received, err);
		if (status != RELAY_OK)
			return status;
	}
	if (*file_fd >= 0) {
		int fd = *file_fd;
		*file_fd = -1;
		if (close(fd) != 0)
			return host->error_set(err, RELAY_E_IO, errno, "cannot write %.120s: %s", tmp,
			                       strerror(errno));
	}
	if (rename_noreplace(tmp, local_path, tree) != 0)
		return host->error_set(err, errno == EEXIST ? RELAY_E_INVALID_ARGUMENT : RELAY_E_IO, errno,
		                       "cannot move the pulled copy to %.120s: %s", local_path,
		                       strerror(errno));
	return RELAY_OK;
}

/* One pull in one session. *retry_cold is set when the session was a
 * spare found dead only now, or the guest refused it while spares held
 * sessions (they are gone now): ssh failed before the guest said anything
 * of the pull; the caller tries once more in a new session. */
static relay_status pull_attempt(const ssh_conn *conn, const char *remote_path, const char *local_path,
                                 relay_call *call, unsigned flags, bool may_use_spare, bool *retry_cold,
                                 char **facts_json_out, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	relay_status status = RELAY_OK;
	bool tree = (flags & RELAY_XFER_TREE) != 0;
	char *remote = NULL, *tmp = NULL, *parent = NULL;
	ssh_facts guest = SSH_FACTS_INIT, received = SSH_FACTS_INIT;
	bool tmp_made = false;
	struct archive *a = NULL;
	int rootfd = -1, file_fd = -1;
	pull_ctx pc = {.conn = conn, .host = host, .call = call};
	pc.child = (ssh_child){.pid = -1, .in_fd = -1, .out_fd = -1, .err_fd = -1};
	char what[200];

	*retry_cold = false;
	status =
	    rk_xfer_begin(host, "pull", flags, RELAY_XFER_TREE, local_path, remote_path, facts_json_out, err);
	if (status != RELAY_OK)
		return status;
	status = ssh_guest_path(host, remote_path, &remote, err);
	if (status != RELAY_OK)
		return status;
	snprintf(what, sizeof what, "pulling %.150s", remote);

	const char *base_start = NULL;
	size_t base_len = 0;
	status = pull_check_destination(host, local_path, &parent, &base_start, &base_len, err);
	if (status != RELAY_OK)
		goto cleanup;

	/* 1. One session: guest-side refusals, the facts, then the stream. */
	char token[33];
	status = ssh_token(host, token, err);
	if (status != RELAY_OK)
		goto cleanup;
	const char *args[] = {token, remote, tree ? "tree" : "file", NULL};
	pc.buf = malloc(PULL_BUF);
	if (pc.buf == NULL) {
		status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	bool was_spare = false;
	status = ssh_session_start(conn, "pull", args, may_use_spare, &pc.child, &was_spare, err);
	if (status != RELAY_OK)
		goto cleanup;
	ssh_child_close_stdin(&pc.child);
	pc.io = (ssh_io){.on_out = pull_on_out, .on_err = pull_on_err, .ctx = &pc};
	status = pull_read_head(&pc, token, remote, what, was_spare, retry_cold, err);
	if (status != RELAY_OK)
		goto cleanup;
	bool no_hash = false;
	status = ssh_facts_parse(host, pc.head.data, pc.head_used, !tree, &guest, &no_hash, err);
	if (status != RELAY_OK)
		goto cleanup;
	if (no_hash)
		host->log(
		    RELAY_LOG_WARNING, SSH_PLUGIN_NAME,
		    "the guest %s has neither sha256sum nor shasum; %s arrives without guest-side facts",
		    conn->host, remote);
	for (size_t i = 0; i < guest.count; i++)
		pc.total_bytes += guest.items[i].bytes;

	/* 2. A fresh temporary sibling of local_path. */
	status = pull_make_temp(host, parent, base_start, base_len, local_path, tree, &tmp, &rootfd, &file_fd,
	                        &tmp_made, err);
	if (status != RELAY_OK)
		goto cleanup;

	/* 3. The stream, read on from the same session. */
	pc.io = (ssh_io){.on_err = pull_on_err, .ctx = &pc};
	status = pull_open_stream(&pc, what, &a, err);
	if (status == RELAY_OK)
		status = pull_unpack_stream(&pc, a, remote, tree, rootfd, file_fd, &received, err);
	if (pc.cancelled) {
		status = host->error_set(err, RELAY_E_CANCELLED, 0, "pull of %.150s cancelled", remote);
		goto cleanup;
	}
	if (pc.step_failed) {
		status =
		    host->error_set(err, pc.step_err.code, pc.step_err.sys_errno, "%s", pc.step_err.message);
		goto cleanup;
	}
	if (status != RELAY_OK && status != RELAY_E_IO)
		goto cleanup; /* a refusal or integrity problem found on the host: its own message */
	/* Let ssh finish so its exit explains a broken stream. */
	relay_error ignored;
	pull_drain(&pc, 5000, 100, &ignored);
	if (!pc.child.exited) {
		if (status == RELAY_OK)
			status = host->error_set(err, RELAY_E_TIMEOUT, 0,
			                         "%s: ssh did not end after the stream", what);
		goto cleanup;
	}
	int code = ssh_child_exit_code(&pc.child);
	if (code != 0) {
		status = ssh_failure(conn, what, code, rk_buf_str(&pc.err_tail), pc.err_tail.len, err);
		goto cleanup;
	}
	if (status != RELAY_OK)
		goto cleanup;

	/* 4. What arrived must be what the guest measured. */
	status = pull_commit(host, what, &guest, &received, no_hash, tmp, local_path, tree, &file_fd, err);
	if (status != RELAY_OK)
		goto cleanup;
	tmp_made = false;
	status = ssh_facts_answer(host, &guest, no_hash, facts_json_out, err);
cleanup:
	ssh_child_destroy(&pc.child);
	if (a)
		archive_read_free(a);
	if (rootfd >= 0)
		close(rootfd);
	if (file_fd >= 0)
		close(file_fd);
	if (tmp_made)
		(void)rs_remove_tree(tmp, NULL); /* best effort */
	free(pc.buf);
	rk_buf_free(&pc.head);
	rk_buf_free(&pc.err_tail);
	ssh_facts_free(&guest);
	ssh_facts_free(&received);
	free(tmp);
	free(parent);
	free(remote);
	return status;
}

relay_status ssh_pull(const ssh_conn *conn, const char *remote_path, const char *local_path, relay_call *call,
                      unsigned flags, char **facts_json_out, relay_error *err)
{
	return ssh_session_transfer(pull_attempt, conn, remote_path, local_path, call, flags, facts_json_out,
	                            err);
}
