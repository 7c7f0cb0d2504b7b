/*
 * xfer.c — transport push and pull for machine-local guests.
 *
 * Both directions are pax tar streams (libarchive) between two threads of
 * the relay, through a queue in memory (stream_queue: the sender's read
 * buffers are lent to the receiver, not copied). SHA-256 is checked on both
 * sides and the two lists of {path, bytes, sha256} must be equal
 * (RELAY_E_INTEGRITY otherwise):
 *   push: the host hashes each file as it reads it; the guest side reads
 *         each file it wrote back through the guest's own view (the
 *         overlay) and hashes it, in a verifier thread beside the writing;
 *   pull: the guest side hashes each file as it reads it; the host hashes
 *         what it writes; on any failure nothing is left at local_path.
 *
 * Guest paths are opened relative to the guest's root (/proc/<init>/root),
 * one component at a time with O_NOFOLLOW: a path through a symbolic link,
 * "." or "..", or into anything but the guest's overlay or tmpfs is
 * refused, so nothing is ever read or written outside the guest; a pull
 * also refuses links, devices, FIFOs and sockets anywhere in the tree.
 * A tree pushed into a new folder is written straight into the upper layer
 * (see direct_upper_dir).
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "local.h"

#define XFER_CHUNK      (256 * 1024)
#define OVERLAYFS_MAGIC 0x794c7630
#define TMPFS_MAGIC_    0x01021994

/* ---- facts ---------------------------------------------------------------- */

typedef struct fact {
	char *path;
	uint64_t bytes;
	char sha256[65];
} fact;

typedef struct fact_list {
	fact *items;
	size_t count, cap;
} fact_list;

static int facts_add(fact_list *l, const char *path, uint64_t bytes, const char *sha)
{
	if (l->count == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		fact *p = realloc(l->items, cap * sizeof *p);
		if (p == NULL)
			return -1;
		l->items = p;
		l->cap = cap;
	}
	fact *f = &l->items[l->count];
	f->path = strdup(path);
	if (f->path == NULL)
		return -1;
	f->bytes = bytes;
	memcpy(f->sha256, sha, 65);
	l->count++;
	return 0;
}

static void facts_free(fact_list *l)
{
	for (size_t i = 0; i < l->count; i++)
		free(l->items[i].path);
	free(l->items);
	memset(l, 0, sizeof *l);
}

static int fact_cmp(const void *a, const void *b)
{
	return strcmp(((const fact *)a)->path, ((const fact *)b)->path);
}

static void facts_sort(fact_list *l)
{
	if (l->count > 1)
		qsort(l->items, l->count, sizeof *l->items, fact_cmp);
}

/* Compares two sorted lists; on a difference writes the first one to why. */
static bool facts_equal(const fact_list *a, const fact_list *b, char *why, size_t why_size)
{
	size_t i = 0;
	for (; i < a->count && i < b->count; i++) {
		const fact *x = &a->items[i], *y = &b->items[i];
		if (strcmp(x->path, y->path) != 0) {
			snprintf(why, why_size, "file lists differ at %s / %s", x->path, y->path);
			return false;
		}
		if (x->bytes != y->bytes || strcmp(x->sha256, y->sha256) != 0) {
			snprintf(why, why_size,
			         "%s: %llu bytes sha256 %.12s... against %llu bytes sha256 %.12s...",
			         x->path[0] ? x->path : "(the file)", (unsigned long long)x->bytes, x->sha256,
			         (unsigned long long)y->bytes, y->sha256);
			return false;
		}
	}
	if (a->count != b->count) {
		snprintf(why, why_size, "%zu files against %zu", a->count, b->count);
		return false;
	}
	return true;
}

static char *facts_json(local_state *st, const fact_list *l)
{
	json_object *arr = json_object_new_array();
	for (size_t i = 0; i < l->count; i++) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "path", json_object_new_string(l->items[i].path));
		json_object_object_add(o, "bytes", json_object_new_int64((int64_t)l->items[i].bytes));
		json_object_object_add(o, "sha256", json_object_new_string(l->items[i].sha256));
		json_object_array_add(arr, o);
	}
	char *text = lu_json_out(st, arr);
	json_object_put(arr);
	return text;
}

static void hex_digest(EVP_MD_CTX *ctx, char out[65])
{
	unsigned char md[32];
	unsigned int len = 0;
	EVP_DigestFinal_ex(ctx, md, &len);
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = digits[md[i] >> 4];
		out[2 * i + 1] = digits[md[i] & 15];
	}
	out[64] = '\0';
}

/* SHA-256 of what remains readable from fd (from offset 0). */
static int hash_fd(int fd, char *buf, size_t bufsize, char out[65], uint64_t *bytes)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (ctx == NULL)
		return ENOMEM;
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	uint64_t total = 0;
	off_t off = 0;
	int rc = 0;
	for (;;) {
		ssize_t n = pread(fd, buf, bufsize, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = errno;
			break;
		}
		if (n == 0)
			break;
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		total += (uint64_t)n;
		off += n;
	}
	if (rc == 0)
		hex_digest(ctx, out);
	EVP_MD_CTX_free(ctx);
	*bytes = total;
	return rc;
}

/* ---- guest paths ------------------------------------------------------------ */

/* Splits an absolute guest path into components; refuses ".", "..", empty
 * components other than a trailing slash, and NUL-free checks. */
static int split_guest_path(const char *path, char *buf, size_t size, char **comps, int max, int *count)
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

static bool relative_path_ok(const char *rel)
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

static bool writable_fs(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) != 0)
		return false;
	return sf.f_type == OVERLAYFS_MAGIC || sf.f_type == TMPFS_MAGIC_;
}

typedef struct guest_ctx {
	local_state *st;
	local_conn *conn;
	int root_fd;
	bool chown_files;
} guest_ctx;

/* Opens folder comps[0..n) under dir_fd, creating missing ones (0700, the
 * guest user's) when `create`. Returns an O_RDONLY|O_DIRECTORY fd or -1 with
 * errno (ELOOP/ENOTDIR for a link or a non-folder on the way). */
static int open_dirs(guest_ctx *g, int dir_fd, char **comps, int n, bool create)
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

static relay_status path_error(guest_ctx *g, relay_error *err, int e, const char *what, const char *path)
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

/* ---- the tar stream -------------------------------------------------------------- */

/* The stream between the two threads: a queue of segments in memory. The
 * sender's file data is lent, not copied: libarchive hands the sender's own
 * read buffer to the write callback (no blocking), the segment points into
 * it, and the sender reads into that buffer again only once the receiver
 * has moved past it. Headers and padding (libarchive's own memory) are
 * copied. So a file's bytes are copied once into memory (the read) and once
 * out of it (the write), as `tar c | tar x` does through its pipe twice. */
#define SEND_BUFFERS 32
#define QUEUE_SLOTS  1024

typedef struct q_segment {
	const char *ptr;
	size_t len;
	int lent;    /* index of the sender buffer it points into, or -1 */
	char *owned; /* a copy, freed when released */
} q_segment;

typedef struct stream_queue {
	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t cond;
	q_segment seg[QUEUE_SLOTS];
	size_t head, count;
	bool closed;  /* the sender is done */
	bool aborted; /* the receiver is done (finished or failed) */
	int lent[SEND_BUFFERS];
	char *bufs[SEND_BUFFERS];
	size_t bufsize;
	q_segment current; /* handed to libarchive until its next read */
	bool holding;
	int waiting; /* threads blocked in pthread_cond_wait: wake-ups only when someone waits */
} stream_queue;

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

static la_ssize_t queue_read_cb(struct archive *a, void *ctx, const void **out)
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
static void queue_abort(stream_queue *q)
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

/* Sender: one thread that walks a tree (host for push, guest for pull). */
typedef struct sender {
	local_state *st;
	stream_queue *q;
	int next_buf;                 /* the send buffer to read into next */
	int base_fd;                  /* the folder being sent (tree), or the folder holding the file */
	const char *leaf;             /* the single file's name, or NULL for a tree */
	bool refuse_links_are_unsafe; /* pull: links/devices are RELAY_E_UNSAFE_PATH */
	relay_call *call;
	fact_list facts;
	relay_status status;
	char message[256];
	bool pipe_broken; /* the sender stopped because the receiver closed the stream */
} sender;

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
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	uint64_t total = 0;
	int result = 0;
	while (total < (uint64_t)sb.st_size) {
		size_t want = XFER_CHUNK;
		if ((uint64_t)want > (uint64_t)sb.st_size - total)
			want = (size_t)((uint64_t)sb.st_size - total);
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
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		if (archive_write_data(a, buf, (size_t)n) != n) {
			sender_fail(s, RELAY_E_IO, "cannot write %s into the stream: %s", rel,
			            archive_error_string(a));
			result = -1;
			break;
		}
		total += (uint64_t)n;
	}
	char hex[65];
	hex_digest(ctx, hex);
	EVP_MD_CTX_free(ctx);
	close(fd);
	if (result == 0 && facts_add(&s->facts, rel, total, hex) != 0) {
		sender_fail(s, RELAY_E_NO_MEMORY, "out of memory");
		result = -1;
	}
	return result;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
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
	int dfd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (d == NULL) {
		if (dfd >= 0)
			close(dfd);
		sender_fail(s, RELAY_E_IO, "cannot list %s: %s", prefix[0] ? prefix : ".", strerror(errno));
		return -1;
	}
	rewinddir(d);
	char **names = NULL;
	size_t count = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (count == cap) {
			cap = cap ? cap * 2 : 64;
			char **p = realloc(names, cap * sizeof *p);
			if (p == NULL)
				break;
			names = p;
		}
		names[count] = strdup(de->d_name);
		if (names[count])
			count++;
	}
	if (count > 1)
		qsort(names, count, sizeof *names, name_cmp);
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
		if (fstatat(dirfd(d), names[i], &sb, AT_SYMLINK_NOFOLLOW) != 0) {
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
				int sub = openat(dirfd(d), names[i],
				                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
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
			rc = send_file(s, a, dirfd(d), names[i], rel);
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
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return rc;
}

static void *sender_main(void *arg)
{
	sender *s = arg;
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
	return NULL;
}

/* ---- receiving ------------------------------------------------------------------- */

/* The folder the last entries went to, kept open: a tree's files arrive
 * folder by folder. */
typedef struct dir_cache {
	char path[PATH_MAX]; /* relative to the root it was opened from; "" = the root */
	int fd;
} dir_cache;

typedef struct receiver {
	local_state *st;
	guest_ctx *g;            /* push: writing into the guest; NULL for pull (host) */
	int base_fd;             /* where files are created */
	bool direct;             /* push: base_fd is in the upper layer (see xfer_push) */
	const char *single_name; /* single file: the name to create in base_fd */
	const char *dest_label;
	fact_list facts; /* what was written (pull) or read back through the guest (push) */
	relay_call *call;
	dir_cache wcache, vcache;
	struct verifier *verifier; /* push: reads every written file back through the guest's view */
} receiver;

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

/* The guest side of a push: every file written is read back through the
 * guest's own view (the overlay) and hashed, in a thread of its own beside
 * the writing. The receiver queues each file it finished. */
typedef struct verify_item {
	char *fact_path; /* relative to the pushed root ("" for a single file) */
	char *open_path; /* relative to the folder being verified */
} verify_item;

typedef struct verifier {
	receiver *r;
	int root_fd; /* the folder as the guest sees it */
	pthread_t thread;
	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t cond;
	verify_item *queue;
	size_t head, count, cap;
	bool done, stop;
	relay_status status;
	char message[256];
	fact_list facts;
	dir_cache cache;
	char *buf;
} verifier;

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

static int verifier_start(verifier *v, receiver *r, int root_fd)
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
static void verifier_finish(verifier *v, bool abort)
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
	 * overwrites it (tools.md §3.5). */
	if (push && r->g->chown_files && fchown(fd, r->g->conn->uid, r->g->conn->gid) != 0) {
		int e = errno;
		close(fd);
		unlinkat(dir_fd, name, 0);
		return lu_err(r->st, err, RELAY_E_IO, e, "cannot hand %s to the guest user",
		              rel[0] ? rel : name);
	}
	relay_status status = RELAY_OK;
	EVP_MD_CTX *ctx = push ? NULL : EVP_MD_CTX_new();
	if (!push && ctx == NULL) {
		close(fd);
		unlinkat(dir_fd, name, 0);
		return lu_err(r->st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	if (ctx)
		EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
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
		if (ctx)
			EVP_DigestUpdate(ctx, block, size);
		total += size;
	}
	char hex[65] = "";
	struct stat written;
	memset(&written, 0, sizeof written);
	if (status == RELAY_OK) {
		if (ctx)
			hex_digest(ctx, hex);
		if (fstat(fd, &written) != 0 || (uint64_t)written.st_size != total)
			status = lu_err(r->st, err, RELAY_E_INTEGRITY, errno,
			                "%s holds %lld bytes after writing %llu", rel[0] ? rel : name,
			                (long long)written.st_size, (unsigned long long)total);
	}
	if (ctx)
		EVP_MD_CTX_free(ctx);
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
static relay_status run_transfer(sender *s, receiver *r, relay_error *err)
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
	relay_status rs = receive_stream(r, q, &rerr);
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

/* ---- push -------------------------------------------------------------------- */

/* When a tree goes into a folder that did not exist (it was just made
 * through the guest's overlay), its files are written straight into the
 * upper layer's copy of that folder: the overlay has never looked inside
 * it, so it finds them there as it would have made them, and the tree is
 * written at the speed of the underlying file system. The verifier reads
 * every file back through the overlay (the guest's view). Returns the upper
 * folder's fd, or -1 to write through the overlay.
 * Both folders must be the same inode (same-file-system layers report the
 * real inode number). */
static int direct_upper_dir(guest_ctx *g, int over_fd, char **comps, int ncomp)
{
	const char *upper = lu_get_string(lu_get_object(g->conn->record, "paths"), "upper");
	struct statfs sf;
	if (upper == NULL || fstatfs(over_fd, &sf) != 0 || sf.f_type != OVERLAYFS_MAGIC)
		return -1;
	int root = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0)
		return -1;
	guest_ctx plain = {g->st, g->conn, -1, false};
	int fd = open_dirs(&plain, root, comps, ncomp, false);
	close(root);
	if (fd < 0)
		return -1;
	struct stat a, b;
	struct statfs uf;
	if (fstat(fd, &a) != 0 || fstat(over_fd, &b) != 0 || a.st_ino != b.st_ino || fstatfs(fd, &uf) != 0 ||
	    uf.f_type == OVERLAYFS_MAGIC) {
		close(fd);
		return -1;
	}
	return fd;
}

relay_status xfer_push(local_state *st, local_conn *conn, const char *local_path, const char *remote_path,
                       relay_call *call, unsigned flags, char **facts_out, relay_error *err)
{
	if (facts_out)
		*facts_out = NULL;
	/* RELAY_XFER_CALLER_VERIFIES is accepted and changes nothing: both
	 * sides are hashed anyway (the direct copy's check is cheap next to
	 * the file creation it guards). */
	if (flags & ~(RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES))
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown push flags 0x%x", flags);
	if (local_path == NULL || remote_path == NULL)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "push needs a local and a remote path");
	const bool tree = (flags & RELAY_XFER_TREE) != 0;
	relay_status status = RELAY_OK;
	guest_ctx g = {st, conn, -1, !st->rootless};
	sender s;
	receiver r;
	memset(&s, 0, sizeof s);
	memset(&r, 0, sizeof r);
	int src_fd = -1, parent_fd = -1, dest_fd = -1, upper_fd = -1;
	char pathbuf[PATH_MAX];
	char *comps[PATH_MAX / 2];
	int ncomp = 0;
	char *src_copy = NULL;

	int e = split_guest_path(remote_path, pathbuf, sizeof pathbuf, comps, PATH_MAX / 2, &ncomp);
	if (e != 0 || ncomp == 0) {
		status = lu_err(
		    st, err, RELAY_E_UNSAFE_PATH, e ? e : EINVAL,
		    "push destination %s refused: it must be an absolute guest path below / without \".\" "
		    "or \"..\"",
		    remote_path);
		goto cleanup;
	}
	/* The host side: a regular file, or a folder for a tree. */
	if (tree) {
		src_fd = open(local_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (src_fd < 0) {
			status = lu_err(st, err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_UNSAFE_PATH,
			                errno, "push source %s is not a folder (or is a symbolic link): %s",
			                local_path, strerror(errno));
			goto cleanup;
		}
		s.leaf = NULL;
		s.base_fd = src_fd;
	} else {
		src_copy = strdup(local_path);
		char *slash = src_copy ? strrchr(src_copy, '/') : NULL;
		const char *dir = ".";
		if (slash == src_copy)
			dir = "/";
		else if (slash) {
			*slash = '\0';
			dir = src_copy;
		}
		src_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		s.leaf = slash ? slash + 1 : src_copy;
		struct stat sb;
		if (src_fd < 0 || s.leaf == NULL || fstatat(src_fd, s.leaf, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			status = lu_err(st, err, RELAY_E_NOT_FOUND, errno,
			                "push source %s cannot be read: %s", local_path, strerror(errno));
			goto cleanup;
		}
		if (!S_ISREG(sb.st_mode)) {
			status =
			    lu_err(st, err, RELAY_E_UNSAFE_PATH, 0,
			           "push source %s is not a regular file (use RELAY_XFER_TREE for folders)",
			           local_path);
			goto cleanup;
		}
		s.base_fd = src_fd;
	}
	/* The guest side: the folder holding the destination, made as needed. */
	g.root_fd = sandbox_root_fd(conn->record);
	if (g.root_fd < 0) {
		status = lu_err(st, err, RELAY_E_TRANSIENT, errno,
		                "guest %s is not running (its init is gone)", conn->vm);
		goto cleanup;
	}
	parent_fd = open_dirs(&g, g.root_fd, comps, ncomp - 1, true);
	if (parent_fd < 0) {
		status = path_error(&g, err, errno, "push destination", remote_path);
		goto cleanup;
	}
	if (!writable_fs(parent_fd)) {
		status = lu_err(
		    st, err, RELAY_E_UNSAFE_PATH, 0,
		    "push destination %s refused: only the guest's own files (overlay or tmpfs) are written",
		    remote_path);
		goto cleanup;
	}
	const char *leaf = comps[ncomp - 1];
	if (tree) {
		bool fresh = mkdirat(parent_fd, leaf, 0700) == 0;
		if (fresh && g.chown_files)
			fchownat(parent_fd, leaf, conn->uid, conn->gid, AT_SYMLINK_NOFOLLOW);
		dest_fd = openat(parent_fd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dest_fd < 0) {
			status = path_error(&g, err, errno == ELOOP ? ELOOP : errno, "push destination",
			                    remote_path);
			goto cleanup;
		}
		if (!writable_fs(dest_fd)) {
			status = lu_err(
			    st, err, RELAY_E_UNSAFE_PATH, 0,
			    "push destination %s refused: only the guest's own files (overlay or tmpfs) are "
			    "written",
			    remote_path);
			goto cleanup;
		}
		upper_fd = fresh ? direct_upper_dir(&g, dest_fd, comps, ncomp) : -1;
		r.direct = upper_fd >= 0;
		st->host->log(RELAY_LOG_DEBUG, LOCAL_PLUGIN_NAME, "push of %s into %s: %s", local_path,
		              remote_path,
		              r.direct ? "a new folder, written into the upper layer directly"
		                       : "an existing folder, written through the overlay");
		r.base_fd = r.direct ? upper_fd : dest_fd;
		r.single_name = NULL;
	} else {
		r.base_fd = parent_fd;
		r.single_name = leaf;
	}
	s.st = st;
	s.call = call;
	r.st = st;
	r.g = &g;
	r.dest_label = conn->vm;
	r.call = call;
	verifier v;
	int vrc = verifier_start(&v, &r, tree ? dest_fd : parent_fd);
	if (vrc != 0) {
		status = lu_err(st, err, RELAY_E_IO, vrc, "cannot start the read-back thread");
		goto cleanup;
	}
	r.verifier = &v;
	status = run_transfer(&s, &r, err);
	verifier_finish(&v, status != RELAY_OK);
	if (status == RELAY_OK && v.status != RELAY_OK)
		status = lu_err(st, err, v.status, 0, "%s", v.message);
	/* The guest side's facts are the verifier's. */
	facts_free(&r.facts);
	r.facts = v.facts;
	if (status != RELAY_OK)
		goto cleanup;
	facts_sort(&s.facts);
	facts_sort(&r.facts);
	char why[256];
	if (!facts_equal(&s.facts, &r.facts, why, sizeof why)) {
		status =
		    lu_err(st, err, RELAY_E_INTEGRITY, 0, "push of %s to %s failed its SHA-256 check: %s",
		           local_path, remote_path, why);
		goto cleanup;
	}
	if (facts_out) {
		*facts_out = facts_json(st, &r.facts);
		if (*facts_out == NULL)
			status = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
cleanup:
	facts_free(&s.facts);
	facts_free(&r.facts);
	free(src_copy);
	if (src_fd >= 0)
		close(src_fd);
	if (parent_fd >= 0)
		close(parent_fd);
	if (dest_fd >= 0)
		close(dest_fd);
	if (upper_fd >= 0)
		close(upper_fd);
	if (g.root_fd >= 0)
		close(g.root_fd);
	return status;
}

/* ---- pull -------------------------------------------------------------------- */

relay_status xfer_pull(local_state *st, local_conn *conn, const char *remote_path, const char *local_path,
                       relay_call *call, unsigned flags, char **facts_out, relay_error *err)
{
	if (facts_out)
		*facts_out = NULL;
	if (flags & ~RELAY_XFER_TREE)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown pull flags 0x%x", flags);
	if (local_path == NULL || remote_path == NULL || local_path[0] == '\0')
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "pull needs a remote and a local path");
	const bool tree = (flags & RELAY_XFER_TREE) != 0;
	relay_status status = RELAY_OK;
	guest_ctx g = {st, conn, -1, false};
	sender s;
	receiver r;
	memset(&s, 0, sizeof s);
	memset(&r, 0, sizeof r);
	int parent_fd = -1, src_fd = -1, host_parent = -1, dest_fd = -1;
	bool created = false;
	char pathbuf[PATH_MAX];
	char *comps[PATH_MAX / 2];
	int ncomp = 0;
	char *local_copy = strdup(local_path);
	const char *local_leaf = NULL;

	int e = split_guest_path(remote_path, pathbuf, sizeof pathbuf, comps, PATH_MAX / 2, &ncomp);
	if (e != 0 || ncomp == 0 || local_copy == NULL) {
		status = lu_err(
		    st, err, RELAY_E_UNSAFE_PATH, e ? e : EINVAL,
		    "pull source %s refused: it must be an absolute guest path without \".\" or \"..\"",
		    remote_path);
		goto cleanup;
	}
	g.root_fd = sandbox_root_fd(conn->record);
	if (g.root_fd < 0) {
		status = lu_err(st, err, RELAY_E_TRANSIENT, errno,
		                "guest %s is not running (its init is gone)", conn->vm);
		goto cleanup;
	}
	parent_fd = open_dirs(&g, g.root_fd, comps, ncomp - 1, false);
	if (parent_fd < 0) {
		status = path_error(&g, err, errno, "pull source", remote_path);
		goto cleanup;
	}
	if (!writable_fs(parent_fd)) {
		status =
		    lu_err(st, err, RELAY_E_UNSAFE_PATH, 0,
		           "pull source %s refused: only the guest's own files (overlay or tmpfs) are read",
		           remote_path);
		goto cleanup;
	}
	struct stat sb;
	if (fstatat(parent_fd, comps[ncomp - 1], &sb, AT_SYMLINK_NOFOLLOW) != 0) {
		status = path_error(&g, err, errno, "pull source", remote_path);
		goto cleanup;
	}
	if (S_ISLNK(sb.st_mode) || !(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode))) {
		status = lu_err(st, err, RELAY_E_UNSAFE_PATH, 0,
		                "pull source %s is %s; only regular files and folders are pulled",
		                remote_path, S_ISLNK(sb.st_mode) ? "a symbolic link" : "a special file");
		goto cleanup;
	}
	if (tree != S_ISDIR(sb.st_mode)) {
		status = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "pull source %s is a %s; pull it %s",
		                remote_path, S_ISDIR(sb.st_mode) ? "folder" : "file",
		                S_ISDIR(sb.st_mode) ? "with RELAY_XFER_TREE" : "without RELAY_XFER_TREE");
		goto cleanup;
	}
	/* The host side: local_path must not exist. */
	char *slash = strrchr(local_copy, '/');
	const char *hdir = ".";
	if (slash == local_copy)
		hdir = "/";
	else if (slash) {
		*slash = '\0';
		hdir = local_copy;
	}
	local_leaf = slash ? slash + 1 : local_copy;
	host_parent = open(hdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (host_parent < 0 || local_leaf[0] == '\0' || strcmp(local_leaf, ".") == 0 ||
	    strcmp(local_leaf, "..") == 0) {
		status = lu_err(st, err, RELAY_E_NOT_FOUND, errno,
		                "pull destination %s: its folder cannot be opened", local_path);
		goto cleanup;
	}
	if (tree) {
		if (mkdirat(host_parent, local_leaf, 0700) != 0) {
			status =
			    lu_err(st, err, errno == EEXIST ? RELAY_E_INVALID_ARGUMENT : RELAY_E_IO, errno,
			           "pull destination %s %s", local_path,
			           errno == EEXIST ? "already exists; it must not" : "cannot be created");
			goto cleanup;
		}
		created = true;
		dest_fd = openat(host_parent, local_leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		src_fd = openat(parent_fd, comps[ncomp - 1], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dest_fd < 0 || src_fd < 0) {
			status = lu_err(st, err, RELAY_E_IO, errno,
			                "cannot open the folders of the pull of %s", remote_path);
			goto cleanup;
		}
		s.base_fd = src_fd;
		s.leaf = NULL;
		r.base_fd = dest_fd;
		r.single_name = NULL;
	} else {
		struct stat hs;
		if (fstatat(host_parent, local_leaf, &hs, AT_SYMLINK_NOFOLLOW) == 0) {
			status = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, EEXIST,
			                "pull destination %s already exists; it must not", local_path);
			goto cleanup;
		}
		s.base_fd = parent_fd;
		s.leaf = comps[ncomp - 1];
		r.base_fd = host_parent;
		r.single_name = local_leaf;
		created = true; /* receive_file creates it O_EXCL */
	}
	s.st = st;
	s.call = call;
	s.refuse_links_are_unsafe = true;
	r.st = st;
	r.g = NULL;
	r.dest_label = local_path;
	r.call = call;
	status = run_transfer(&s, &r, err);
	if (status != RELAY_OK)
		goto cleanup;
	facts_sort(&s.facts);
	facts_sort(&r.facts);
	char why[256];
	if (!facts_equal(&s.facts, &r.facts, why, sizeof why)) {
		status = lu_err(st, err, RELAY_E_INTEGRITY, 0, "pull of %s failed its SHA-256 check: %s",
		                remote_path, why);
		goto cleanup;
	}
	if (facts_out) {
		*facts_out = facts_json(st, &s.facts);
		if (*facts_out == NULL)
			status = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
cleanup:
	if (status != RELAY_OK && created && host_parent >= 0 && local_leaf) {
		char full[PATH_MAX];
		if (local_path[0] == '/' || strcmp(local_copy, local_path) != 0)
			snprintf(full, sizeof full, "%s", local_path);
		else
			snprintf(full, sizeof full, "./%s", local_path);
		lu_remove_tree(full);
	}
	facts_free(&s.facts);
	facts_free(&r.facts);
	free(local_copy);
	if (parent_fd >= 0)
		close(parent_fd);
	if (src_fd >= 0)
		close(src_fd);
	if (host_parent >= 0)
		close(host_parent);
	if (dest_fd >= 0)
		close(dest_fd);
	if (g.root_fd >= 0)
		close(g.root_fd);
	return status;
}
