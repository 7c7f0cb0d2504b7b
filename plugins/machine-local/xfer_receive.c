/*
 * xfer_receive.c — the receiving side of a transfer: files written (into the
 * guest or the host), the push verifier that reads them back through the
 * guest's view, and run_transfer, which runs both sides.
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
#include "relay_support/utf8_locale.h"
#include "xfer_int.h"

/* ---- receiving ------------------------------------------------------------------- */

static void dir_cache_reset(dir_cache *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->path[0] = '\0';
}

/* The folder `dir` (relative, "" for root_fd itself) under root_fd, from the
 * cache or opened (and created with `create`). Borrowed fd, or -1/errno. */
static int cached_dir(receiver *r, dir_cache *c, int root_fd, const char *dir, bool create)
{
	if (c->fd >= 0 && strcmp(c->path, dir) == 0)
		return c->fd;
	dir_cache_reset(c);
	char buf[PATH_MAX];
	if (strlen(dir) >= sizeof buf) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, dir, strlen(dir) + 1);
	char *comps[PATH_MAX / 2];
	int n = 0;
	char *save = NULL;
	for (char *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save))
		comps[n++] = t;
	guest_ctx host_ctx = {r->st, NULL, -1, false};
	int fd = open_dirs(r->g ? r->g : &host_ctx, root_fd, comps, n, create);
	if (fd < 0)
		return -1;
	if (r->g && !r->direct && !writable_fs(fd)) {
		close(fd);
		errno = EXDEV;
		return -1;
	}
	c->fd = fd;
	snprintf(c->path, sizeof c->path, "%s", dir);
	return fd;
}

static void split_rel(const char *rel, char *dir, size_t size, const char **leaf)
{
	const char *slash = strrchr(rel, '/');
	if (slash == NULL) {
		dir[0] = '\0';
		*leaf = rel;
		return;
	}
	size_t n = (size_t)(slash - rel);
	if (n >= size)
		n = size - 1;
	memcpy(dir, rel, n);
	dir[n] = '\0';
	*leaf = slash + 1;
}

static relay_status dir_error(receiver *r, relay_error *err, int e, const char *rel)
{
	if (e == EXDEV)
		return lu_err(r->st, err, RELAY_E_UNSAFE_PATH, 0,
		              "%s would be written outside the guest's own file system; refused", rel);
	return lu_err(r->st, err, e == ELOOP || e == ENOTDIR ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, e,
	              "cannot create the folder of %s in %s: %s", rel, r->dest_label, strerror(e));
}

static void *verifier_main(void *arg)
{
	verifier *v = arg;
	for (;;) {
		pthread_mutex_lock(&v->lock);
		while (v->count == 0 && !v->done && !v->stop)
			pthread_cond_wait(&v->cond, &v->lock);
		if (v->stop || (v->count == 0 && v->done)) {
			pthread_mutex_unlock(&v->lock);
			break;
		}
		verify_item it = v->queue[v->head];
		v->head = (v->head + 1) % v->cap;
		v->count--;
		pthread_cond_broadcast(&v->cond);
		pthread_mutex_unlock(&v->lock);

		char dir[PATH_MAX], hex[65];
		const char *leaf = NULL;
		split_rel(it.open_path, dir, sizeof dir, &leaf);
		int vdir = cached_dir(v->r, &v->cache, v->root_fd, dir, false);
		int fd = vdir >= 0 ? openat(vdir, leaf, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
		uint64_t bytes = 0;
		int e = fd >= 0 ? hash_fd(fd, v->buf, XFER_CHUNK, hex, &bytes) : errno;
		if (fd >= 0)
			close(fd);
		pthread_mutex_lock(&v->lock);
		if (e != 0 && v->status == RELAY_OK) {
			v->status = RELAY_E_INTEGRITY;
			lu_textf(v->message, sizeof v->message,
			         "the guest cannot read %s back after writing it (%s)", it.open_path,
			         strerror(e));
			v->stop = true;
		} else if (e == 0 && facts_add(&v->facts, it.fact_path, bytes, hex) != 0 &&
		           v->status == RELAY_OK) {
			v->status = RELAY_E_NO_MEMORY;
			lu_textf(v->message, sizeof v->message, "out of memory");
			v->stop = true;
		}
		pthread_cond_broadcast(&v->cond);
		pthread_mutex_unlock(&v->lock);
		free(it.fact_path);
		free(it.open_path);
	}
	dir_cache_reset(&v->cache);
	return NULL;
}

int verifier_start(verifier *v, receiver *r, int root_fd)
{
	memset(v, 0, sizeof *v);
	v->r = r;
	v->root_fd = root_fd;
	v->cap = 4096;
	v->cache.fd = -1;
	v->queue = calloc(v->cap, sizeof *v->queue);
	v->buf = malloc(XFER_CHUNK);
	if (v->queue == NULL || v->buf == NULL) {
		free(v->queue);
		free(v->buf);
		return ENOMEM;
	}
	pthread_mutex_init(&v->lock, NULL);
	pthread_cond_init(&v->cond, NULL);
	int rc = pthread_create(&v->thread, NULL, verifier_main, v);
	if (rc != 0) {
		pthread_mutex_destroy(&v->lock);
		pthread_cond_destroy(&v->cond);
		free(v->queue);
		free(v->buf);
	}
	return rc;
}

/* Queues a written file; false when the verifier has failed. */
static bool verifier_add(verifier *v, const char *fact_path, const char *open_path)
{
	verify_item it = {strdup(fact_path), strdup(open_path)};
	pthread_mutex_lock(&v->lock);
	while (v->count == v->cap && !v->stop)
		pthread_cond_wait(&v->cond, &v->lock);
	bool ok = !v->stop && it.fact_path && it.open_path;
	if (ok) {
		v->queue[(v->head + v->count) % v->cap] = it;
		v->count++;
		pthread_cond_broadcast(&v->cond);
	}
	pthread_mutex_unlock(&v->lock);
	if (!ok) {
		free(it.fact_path);
		free(it.open_path);
	}
	return ok;
}

/* Waits for the verifier (abort: drop what is queued) and frees its queue. */
void verifier_finish(verifier *v, bool abort)
{
	pthread_mutex_lock(&v->lock);
	v->done = true;
	if (abort)
		v->stop = true;
	pthread_cond_broadcast(&v->cond);
	pthread_mutex_unlock(&v->lock);
	pthread_join(v->thread, NULL);
	while (v->count > 0) {
		free(v->queue[v->head].fact_path);
		free(v->queue[v->head].open_path);
		v->head = (v->head + 1) % v->cap;
		v->count--;
	}
	free(v->queue);
	free(v->buf);
	pthread_mutex_destroy(&v->lock);
	pthread_cond_destroy(&v->cond);
}

/* Creates `name` in dir_fd and writes the entry's data into it. Push: an
 * existing regular file is replaced, and the file is queued for the
 * verifier, which reads it back through the guest's view. Pull: the file is
 * new (O_EXCL) and the bytes written are hashed (the host copy's facts). */
static relay_status receive_file(receiver *r, struct archive *a, int dir_fd, const char *name,
                                 const char *rel, mode_t mode, relay_error *err)
{
	bool push = r->g != NULL;
	int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(dir_fd, name, flags, mode);
	if (fd < 0 && errno == EEXIST && push && !r->direct) {
		struct stat sb;
		if (fstatat(dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(sb.st_mode))
			return lu_err(r->st, err, RELAY_E_UNSAFE_PATH, 0,
			              "%s exists in %s and is not a regular file; it is not replaced",
			              rel[0] ? rel : name, r->dest_label);
		if (unlinkat(dir_fd, name, 0) != 0 && errno != ENOENT)
			return lu_err(r->st, err, RELAY_E_IO, errno, "cannot replace %s in %s",
			              rel[0] ? rel : name, r->dest_label);
		fd = openat(dir_fd, name, flags, mode);
	}
	if (fd < 0)
		return lu_err(r->st, err, errno == EEXIST ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
		              "cannot create %s in %s: %s", rel[0] ? rel : name, r->dest_label,
		              strerror(errno));
	/* The guest user owns the file from its creation, not only once it is
	 * whole: a push cut short (the server killed) leaves a partial file the
	 * receiver can still read, so the retry's scan sees it and the retry
	 * overwrites it (spec/tools.md §3.5). */
	if (push && r->g->chown_files && fchown(fd, r->g->conn->uid, r->g->conn->gid) != 0) {
		int e = errno;
		close(fd);
		unlinkat(dir_fd, name, 0);
		return lu_err(r->st, err, RELAY_E_IO, e, "cannot hand %s to the guest user",
		              rel[0] ? rel : name);
	}
	relay_status status = RELAY_OK;
	rk_sha256 hash = {NULL}; /* a pull's files only: a push is hashed by its sender */
	if (!push && !rk_sha256_begin(&hash)) {
		close(fd);
		unlinkat(dir_fd, name, 0);
		return lu_err(r->st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	uint64_t total = 0;
	for (;;) {
		const void *block = NULL;
		size_t size = 0;
		la_int64_t offset = 0;
		int rc = archive_read_data_block(a, &block, &size, &offset);
		if (rc == ARCHIVE_EOF)
			break;
		if (rc != ARCHIVE_OK) {
			status = lu_err(r->st, err, RELAY_E_IO, 0, "the stream broke inside %s: %s", rel,
			                archive_error_string(a));
			break;
		}
		if ((uint64_t)offset != total) {
			status =
			    lu_err(r->st, err, RELAY_E_PROTOCOL, 0, "the stream held a sparse entry %s", rel);
			break;
		}
		/* Per block of a large file too, not only between files
		 * (plugin-test checks 68 and 69): the partial file is removed below. */
		if (r->st->host->call_cancelled(r->call)) {
			status = lu_err(r->st, err, RELAY_E_CANCELLED, 0, "transfer cancelled inside %s",
			                rel[0] ? rel : name);
			break;
		}
		const char *p = block;
		size_t left = size;
		while (left > 0) {
			ssize_t w = write(fd, p, left);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				status = lu_err(r->st, err, errno == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO,
				                errno, "cannot write %s in %s: %s", rel[0] ? rel : name,
				                r->dest_label, strerror(errno));
				break;
			}
			p += w;
			left -= (size_t)w;
		}
		if (status != RELAY_OK)
			break;
		rk_sha256_update(&hash, block, size);
		total += size;
	}
	char hex[65] = "";
	struct stat written;
	memset(&written, 0, sizeof written);
	if (status == RELAY_OK) {
		if (!push)
			rk_sha256_end(&hash, hex);
		if (fstat(fd, &written) != 0 || (uint64_t)written.st_size != total)
			status = lu_err(r->st, err, RELAY_E_INTEGRITY, errno,
			                "%s holds %lld bytes after writing %llu", rel[0] ? rel : name,
			                (long long)written.st_size, (unsigned long long)total);
	}
	rk_sha256_discard(&hash);
	if (close(fd) != 0 && status == RELAY_OK)
		status = lu_err(r->st, err, RELAY_E_IO, errno, "cannot close %s", rel);
	if (status == RELAY_OK && push) {
		/* The guest side's facts: read back through the guest's view. */
		char open_path[PATH_MAX];
		lu_textf(open_path, sizeof open_path, "%s", rel[0] ? rel : name);
		if (!verifier_add(r->verifier, rel, open_path))
			status = lu_err(r->st, err, RELAY_E_INTEGRITY, 0,
			                "the read-back through the guest's view failed");
		else
			return RELAY_OK;
	}
	if (status != RELAY_OK) {
		unlinkat(dir_fd, name, 0);
		return status;
	}
	if (facts_add(&r->facts, rel, total, hex) != 0)
		return lu_err(r->st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	return RELAY_OK;
}

static relay_status receive_stream(receiver *r, stream_queue *q, relay_error *err)
{
	struct archive *a = archive_read_new();
	if (a == NULL)
		return lu_err(r->st, err, RELAY_E_NO_MEMORY, ENOMEM, "cannot start reading the stream");
	archive_read_support_format_tar(a);
	relay_status status = RELAY_OK;
	r->wcache.fd = r->vcache.fd = -1;
	if (archive_read_open(a, q, NULL, queue_read_cb, NULL) != ARCHIVE_OK) {
		status =
		    lu_err(r->st, err, RELAY_E_IO, 0, "cannot read the stream: %s", archive_error_string(a));
		goto done;
	}
	struct archive_entry *e;
	bool single_done = false;
	for (;;) {
		int rc = archive_read_next_header(a, &e);
		if (rc == ARCHIVE_EOF)
			break;
		if (rc != ARCHIVE_OK) {
			status = lu_err(r->st, err, RELAY_E_IO, 0, "the stream broke: %s",
			                archive_error_string(a));
			break;
		}
		const char *rel = archive_entry_pathname(e);
		mode_t type = archive_entry_filetype(e);
		mode_t perm = (r->g && (archive_entry_perm(e) & 0100)) ? 0700 : 0600;
		if (r->single_name) {
			if (single_done || type != AE_IFREG) {
				status = lu_err(r->st, err, RELAY_E_PROTOCOL, 0,
				                "the stream held more than the single file expected");
				break;
			}
			status = receive_file(r, a, r->base_fd, r->single_name, "", perm, err);
			single_done = true;
			if (status != RELAY_OK)
				break;
			continue;
		}
		if (!relative_path_ok(rel)) {
			status = lu_err(r->st, err, RELAY_E_UNSAFE_PATH, 0,
			                "the stream named an unsafe path %s", rel ? rel : "(none)");
			break;
		}
		if (type == AE_IFDIR) {
			if (cached_dir(r, &r->wcache, r->base_fd, rel, true) < 0) {
				status = dir_error(r, err, errno, rel);
				break;
			}
			continue;
		}
		if (type != AE_IFREG) {
			status = lu_err(r->st, err, RELAY_E_UNSAFE_PATH, 0,
			                "the stream held %s, which is not a file", rel);
			break;
		}
		char dir[PATH_MAX];
		const char *leaf = NULL;
		split_rel(rel, dir, sizeof dir, &leaf);
		int dfd = cached_dir(r, &r->wcache, r->base_fd, dir, true);
		if (dfd < 0) {
			status = dir_error(r, err, errno, rel);
			break;
		}
		status = receive_file(r, a, dfd, leaf, rel, perm, err);
		if (status != RELAY_OK)
			break;
		if (r->st->host->call_cancelled(r->call)) {
			status = lu_err(r->st, err, RELAY_E_CANCELLED, 0, "transfer cancelled");
			break;
		}
	}
	if (status == RELAY_OK && r->single_name && !single_done)
		status = lu_err(r->st, err, RELAY_E_PROTOCOL, 0, "the stream held no file");
done:
	dir_cache_reset(&r->wcache);
	dir_cache_reset(&r->vcache);
	archive_read_free(a);
	return status;
}

/* Runs the sender in a thread of its own and the receiver in this one. */
relay_status run_transfer(sender *s, receiver *r, relay_error *err)
{
	stream_queue *q = calloc(1, sizeof *q);
	if (q == NULL)
		return lu_err(s->st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	q->bufsize = XFER_CHUNK;
	for (int i = 0; i < SEND_BUFFERS; i++) {
		q->bufs[i] = malloc(XFER_CHUNK);
		if (q->bufs[i] == NULL) {
			for (int k = 0; k < i; k++)
				free(q->bufs[k]);
			free(q);
			return lu_err(s->st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		}
	}
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	s->q = q;
	s->next_buf = 0;
	relay_status status = RELAY_OK;
	pthread_t t;
	int rc = pthread_create(&t, NULL, sender_main, s);
	if (rc != 0) {
		status = lu_err(s->st, err, RELAY_E_IO, rc, "cannot start the transfer thread");
		goto cleanup;
	}
	relay_error rerr;
	memset(&rerr, 0, sizeof rerr);
	rs_utf8_locale_scope utf8; /* names are UTF-8 whatever the relay's locale */
	rs_utf8_locale_enter(&utf8);
	relay_status rs = receive_stream(r, q, &rerr);
	rs_utf8_locale_leave(&utf8);
	queue_abort(q); /* a sender still sending stops */
	pthread_join(t, NULL);
	/* The cause is the receiver's failure when the sender only stopped
	 * because the receiver went away; otherwise the sender's. */
	if (s->status != RELAY_OK && !(rs != RELAY_OK && s->pipe_broken))
		status = lu_err(s->st, err, s->status, 0, "%s", s->message);
	else if (rs != RELAY_OK) {
		if (err)
			*err = rerr;
		status = rs;
	}
cleanup:
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	for (int i = 0; i < SEND_BUFFERS; i++)
		free(q->bufs[i]);
	free(q);
	s->q = NULL;
	return status;
}
