/*
 * xfer_send.c — the tar stream between the two threads of a transfer (the
 * queue) and its sending side (a file or a tree, host or guest).
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "local.h"
#include "relay_kit/dir.h"
#include "relay_support/utf8_locale.h"
#include "xfer_int.h"

/* ---- the tar stream -------------------------------------------------------------- */

static void q_wait(stream_queue *q)
{
	q->waiting++;
	pthread_cond_wait(&q->cond, &q->lock);
	q->waiting--;
}

static void q_wake(stream_queue *q)
{
	if (q->waiting)
		pthread_cond_broadcast(&q->cond);
}

static void q_release(stream_queue *q, q_segment *sg)
{
	if (sg->lent >= 0)
		q->lent[sg->lent]--;
	free(sg->owned);
	sg->owned = NULL;
}

static la_ssize_t queue_write_cb(struct archive *a, void *ctx, const void *buf, size_t len)
{
	stream_queue *q = ctx;
	const char *p = buf;
	int lent = -1;
	for (int i = 0; i < SEND_BUFFERS; i++)
		if (p >= q->bufs[i] && p + len <= q->bufs[i] + q->bufsize)
			lent = i;
	char *copy = NULL;
	if (lent < 0) {
		copy = malloc(len ? len : 1);
		if (copy == NULL) {
			archive_set_error(a, ENOMEM, "out of memory");
			return -1;
		}
		memcpy(copy, buf, len);
	}
	pthread_mutex_lock(&q->lock);
	while (q->count == QUEUE_SLOTS && !q->aborted)
		q_wait(q);
	if (q->aborted) {
		pthread_mutex_unlock(&q->lock);
		free(copy);
		archive_set_error(a, EPIPE, "the receiving side closed the stream");
		return -1;
	}
	q_segment *sg = &q->seg[(q->head + q->count) % QUEUE_SLOTS];
	sg->ptr = copy ? copy : p;
	sg->len = len;
	sg->lent = lent;
	sg->owned = copy;
	if (lent >= 0)
		q->lent[lent]++;
	q->count++;
	q_wake(q);
	pthread_mutex_unlock(&q->lock);
	return (la_ssize_t)len;
}

la_ssize_t queue_read_cb(struct archive *a, void *ctx, const void **out)
{
	(void)a;
	stream_queue *q = ctx;
	pthread_mutex_lock(&q->lock);
	if (q->holding) {
		q_release(q, &q->current);
		q->holding = false;
	}
	while (q->count == 0 && !q->closed && !q->aborted) {
		q_wake(q);
		q_wait(q);
	}
	if (q->count == 0 || q->aborted) {
		pthread_mutex_unlock(&q->lock);
		*out = NULL;
		return 0;
	}
	q->current = q->seg[q->head];
	q->head = (q->head + 1) % QUEUE_SLOTS;
	q->count--;
	q->holding = true;
	q_wake(q);
	pthread_mutex_unlock(&q->lock);
	*out = q->current.ptr;
	return (la_ssize_t)q->current.len;
}

/* The sender waits before it reuses buffer k; false when the receiver is gone. */
static bool queue_buffer_free(stream_queue *q, int k)
{
	pthread_mutex_lock(&q->lock);
	while (q->lent[k] > 0 && !q->aborted)
		q_wait(q);
	bool ok = !q->aborted;
	pthread_mutex_unlock(&q->lock);
	return ok;
}

static void queue_close(stream_queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->closed = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

/* The receiver is done: everything queued or held is dropped. */
void queue_abort(stream_queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->aborted = true;
	if (q->holding) {
		q_release(q, &q->current);
		q->holding = false;
	}
	while (q->count > 0) {
		q_release(q, &q->seg[q->head]);
		q->head = (q->head + 1) % QUEUE_SLOTS;
		q->count--;
	}
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

static struct archive *new_writer(stream_queue *q)
{
	struct archive *a = archive_write_new();
	if (a == NULL)
		return NULL;
	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_per_block(a, 0); /* no blocking: data reaches the callback as given */
	if (archive_write_open(a, q, NULL, queue_write_cb, NULL) != ARCHIVE_OK) {
		archive_write_free(a);
		return NULL;
	}
	return a;
}

static void sender_fail(sender *s, relay_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sender_fail(sender *s, relay_status code, const char *fmt, ...)
{
	if (s->status != RELAY_OK)
		return;
	s->status = code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->message, sizeof s->message, fmt, ap);
	va_end(ap);
}

static int send_file(sender *s, struct archive *a, int dir_fd, const char *name, const char *rel)
{
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		sender_fail(s, e == ELOOP ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, "cannot open %s: %s",
		            rel[0] ? rel : name, e == ELOOP ? "it is a symbolic link" : strerror(e));
		return -1;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		sender_fail(s, RELAY_E_UNSAFE_PATH, "%s is not a regular file", rel[0] ? rel : name);
		return -1;
	}
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, rel[0] ? rel : name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, (sb.st_mode & 0100) ? 0700 : 0600);
	archive_entry_set_size(e, sb.st_size);
	/* whole seconds: a sub-second time would cost a pax header per file */
	archive_entry_set_mtime(e, sb.st_mtim.tv_sec, 0);
	int rc = archive_write_header(a, e);
	archive_entry_free(e);
	if (rc != ARCHIVE_OK) {
		close(fd);
		sender_fail(s, RELAY_E_IO, "cannot write the archive header of %s: %s", rel,
		            archive_error_string(a));
		return -1;
	}
	rk_sha256 hash;
	uint64_t total = 0;
	int result = rk_sha256_begin(&hash) ? 0 : -1;
	if (result != 0)
		sender_fail(s, RELAY_E_NO_MEMORY, "out of memory");
	while (result == 0 && total < (uint64_t)sb.st_size) {
		size_t want = XFER_CHUNK;
		if ((uint64_t)want > (uint64_t)sb.st_size - total)
			want = (size_t)((uint64_t)sb.st_size - total);
		if (s->st->host->call_cancelled(s->call)) { /* per chunk (plugin-test 68, 69) */
			sender_fail(s, RELAY_E_CANCELLED, "transfer cancelled inside %s",
			            rel[0] ? rel : name);
			result = -1;
			break;
		}
		int k = s->next_buf;
		if (!queue_buffer_free(s->q, k)) {
			sender_fail(s, RELAY_E_IO, "the receiving side closed the stream");
			s->pipe_broken = true;
			result = -1;
			break;
		}
		char *buf = s->q->bufs[k];
		s->next_buf = (k + 1) % SEND_BUFFERS;
		ssize_t n = read(fd, buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			sender_fail(s, RELAY_E_INTEGRITY, "%s changed while it was sent (it shrank)", rel);
			result = -1;
			break;
		}
		rk_sha256_update(&hash, buf, (size_t)n);
		if (archive_write_data(a, buf, (size_t)n) != n) {
			sender_fail(s, RELAY_E_IO, "cannot write %s into the stream: %s", rel,
			            archive_error_string(a));
			result = -1;
			break;
		}
		total += (uint64_t)n;
	}
	char hex[65];
	rk_sha256_end(&hash, hex);
	close(fd);
	if (result == 0 && facts_add(&s->facts, rel, total, hex) != 0) {
		sender_fail(s, RELAY_E_NO_MEMORY, "out of memory");
		result = -1;
	}
	return result;
}

static int send_tree(sender *s, struct archive *a, int dir_fd, const char *prefix, int depth)
{
	if (s->refuse_links_are_unsafe && !writable_fs(dir_fd)) {
		sender_fail(s, RELAY_E_UNSAFE_PATH,
		            "%s is not on the guest's own file system (overlay or tmpfs); it is not pulled",
		            prefix[0] ? prefix : "the source folder");
		return -1;
	}
	if (depth > 256) {
		sender_fail(s, RELAY_E_TOO_LARGE, "the tree is deeper than 256 folders at %s", prefix);
		return -1;
	}
	size_t count = 0;
	char **names = rk_dir_names_sorted(dir_fd, &count);
	if (names == NULL) {
		sender_fail(s, errno == ENOMEM ? RELAY_E_NO_MEMORY : RELAY_E_IO, "cannot list %s: %s",
		            prefix[0] ? prefix : ".", strerror(errno));
		return -1;
	}
	int rc = 0;
	for (size_t i = 0; i < count && rc == 0; i++) {
		if (s->st->host->call_cancelled(s->call)) {
			sender_fail(s, RELAY_E_CANCELLED, "transfer cancelled");
			rc = -1;
			break;
		}
		char rel[PATH_MAX];
		if (snprintf(rel, sizeof rel, "%s%s%s", prefix, prefix[0] ? "/" : "", names[i]) >=
		    (int)sizeof rel) {
			sender_fail(s, RELAY_E_TOO_LARGE, "a path under %s is too long", prefix);
			rc = -1;
			break;
		}
		struct stat sb;
		if (fstatat(dir_fd, names[i], &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			sender_fail(s, RELAY_E_IO, "cannot stat %s: %s", rel, strerror(errno));
			rc = -1;
		} else if (S_ISDIR(sb.st_mode)) {
			struct archive_entry *e = archive_entry_new();
			archive_entry_set_pathname(e, rel);
			archive_entry_set_filetype(e, AE_IFDIR);
			archive_entry_set_perm(e, 0700);
			if (archive_write_header(a, e) != ARCHIVE_OK) {
				sender_fail(s, RELAY_E_IO, "cannot write %s into the stream: %s", rel,
				            archive_error_string(a));
				rc = -1;
			}
			archive_entry_free(e);
			if (rc == 0) {
				int sub =
				    openat(dir_fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (sub < 0) {
					sender_fail(s, RELAY_E_IO, "cannot open %s: %s", rel,
					            strerror(errno));
					rc = -1;
				} else {
					rc = send_tree(s, a, sub, rel, depth + 1);
					close(sub);
				}
			}
		} else if (S_ISREG(sb.st_mode)) {
			rc = send_file(s, a, dir_fd, names[i], rel);
		} else {
			const char *kind = S_ISLNK(sb.st_mode)    ? "a symbolic link"
			                   : S_ISFIFO(sb.st_mode) ? "a FIFO"
			                   : S_ISSOCK(sb.st_mode) ? "a socket"
			                                          : "a device";
			sender_fail(s, RELAY_E_UNSAFE_PATH,
			            "%s is %s; only regular files and folders are transferred", rel, kind);
			rc = -1;
		}
	}
	rk_dir_names_free(names, count);
	return rc;
}

void *sender_main(void *arg)
{
	sender *s = arg;
	rs_utf8_locale_scope utf8; /* names are UTF-8 whatever the relay's locale */
	rs_utf8_locale_enter(&utf8);
	struct archive *a = new_writer(s->q);
	if (a == NULL) {
		sender_fail(s, RELAY_E_NO_MEMORY, "cannot start the archive stream");
	} else {
		if (s->leaf)
			send_file(s, a, s->base_fd, s->leaf, "");
		else
			send_tree(s, a, s->base_fd, "", 0);
		if (archive_write_close(a) != ARCHIVE_OK && s->status == RELAY_OK)
			sender_fail(s, RELAY_E_IO, "cannot finish the archive stream: %s",
			            archive_error_string(a));
		archive_write_free(a);
		pthread_mutex_lock(&s->q->lock);
		if (s->q->aborted)
			s->pipe_broken = true;
		pthread_mutex_unlock(&s->q->lock);
	}
	queue_close(s->q);
	rs_utf8_locale_leave(&utf8);
	return NULL;
}
