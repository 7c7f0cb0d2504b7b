#include "ssh_push.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "relay/transport.h"
#include "relay_kit/buf.h"
#include "relay_kit/sha256.h"
#include "relay_kit/xfer.h"
#include "ssh_facts.h"
#include "ssh_paths.h"
#include "ssh_scripts.h"
#include "ssh_session.h"
#include "ssh_spawn.h"

#define PUSH_MAX_DEPTH       256
#define PUSH_MAX_FACTS_BYTES ((size_t)64 << 20)
#define PUSH_ERR_KEEP        8192
#define PUSH_READ_CHUNK      ((size_t)256 << 10)
#define PUSH_DRAIN_MS        600000
/* Trees of at least this many bytes are hashed in the guest while tar
 * unpacks them (the guest polls for finished files every 50 ms); smaller
 * pushes are hashed once tar has ended, which never waits. */
#define PUSH_OVERLAP_MIN_BYTES ((uint64_t)8 << 20)

typedef struct push_item {
	char *rel;  /* path inside the tree; owned */
	char *full; /* host path; owned */
	bool is_dir;
	struct stat st;
} push_item;

typedef struct push_list {
	push_item *items;
	size_t count;
	size_t capacity;
	uint64_t total_bytes;
} push_list;

static void push_list_free(push_list *l)
{
	for (size_t i = 0; i < l->count; i++) {
		free(l->items[i].rel);
		free(l->items[i].full);
	}
	free(l->items);
	*l = (push_list){0};
}

static bool push_list_add(push_list *l, const char *rel, const char *full, bool is_dir, const struct stat *st)
{
	if (l->count == l->capacity) {
		size_t cap = l->capacity ? l->capacity * 2 : 64;
		push_item *grown = realloc(l->items, cap * sizeof *grown);
		if (grown == NULL)
			return false;
		l->items = grown;
		l->capacity = cap;
	}
	push_item *it = &l->items[l->count];
	it->rel = strdup(rel);
	it->full = strdup(full);
	if (it->rel == NULL || it->full == NULL) {
		free(it->rel);
		free(it->full);
		return false;
	}
	it->is_dir = is_dir;
	it->st = *st;
	l->count++;
	if (!is_dir)
		l->total_bytes += (uint64_t)st->st_size;
	return true;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *out = malloc(la + lb + 2);
	if (out == NULL)
		return NULL;
	memcpy(out, a, la);
	size_t j = la;
	if (la > 0)
		out[j++] = '/';
	memcpy(out + j, b, lb + 1);
	return out;
}

/* Sorted walk of a host folder; refuses links and special files. */
static relay_status walk(const relay_host *host, const char *full, const char *rel, int depth,
                         push_list *list, relay_error *err)
{
	relay_status status = RELAY_OK;
	char **names = NULL;
	size_t count = 0, cap = 0;
	DIR *d = NULL;
	if (depth > PUSH_MAX_DEPTH)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "the host tree %.120s is nested too deeply", full);
	int fd = open(full, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || (d = fdopendir(fd)) == NULL) {
		status = host->error_set(err, errno == ELOOP ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
		                         "cannot read the host folder %.120s: %s", full, strerror(errno));
		if (fd >= 0)
			close(fd);
		goto cleanup;
	}
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (count == cap) {
			cap = cap ? cap * 2 : 32;
			char **grown = realloc(names, cap * sizeof *grown);
			if (grown == NULL) {
				status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
				goto cleanup;
			}
			names = grown;
		}
		if ((names[count] = strdup(de->d_name)) == NULL) {
			status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
			goto cleanup;
		}
		count++;
	}
	if (count > 1)
		qsort(names, count, sizeof *names, name_cmp);
	for (size_t i = 0; i < count && status == RELAY_OK; i++) {
		char *child_full = join(full, names[i]);
		char *child_rel = join(rel, names[i]);
		struct stat st;
		if (child_full == NULL || child_rel == NULL) {
			status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		} else if (!ssh_name_ok(names[i])) {
			status = host->error_set(
			    err, RELAY_E_UNSAFE_PATH, 0,
			    "the host file %.120s has a control character or backslash in its "
			    "name, which the guest's hash listing cannot carry; rename it",
			    child_full);
		} else if (fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW) != 0) {
			status = host->error_set(err, RELAY_E_IO, errno, "cannot inspect %.120s: %s",
			                         child_full, strerror(errno));
		} else if (S_ISDIR(st.st_mode)) {
			if (!push_list_add(list, child_rel, child_full, true, &st))
				status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
			else
				status = walk(host, child_full, child_rel, depth + 1, list, err);
		} else if (S_ISREG(st.st_mode)) {
			if (!push_list_add(list, child_rel, child_full, false, &st))
				status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		} else {
			status = host->error_set(
			    err, RELAY_E_UNSAFE_PATH, 0,
			    "the host tree holds %.120s, which is %s; only regular files and "
			    "folders are pushed",
			    child_full, S_ISLNK(st.st_mode) ? "a symbolic link" : "a special file");
		}
		free(child_full);
		free(child_rel);
	}
cleanup:
	if (d)
		closedir(d);
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
	return status;
}

typedef struct push_ctx {
	const ssh_conn *conn;
	const relay_host *host;
	relay_call *call;
	ssh_child child;
	ssh_io io;
	rk_buf out;
	rk_buf err_tail;
	bool out_too_big;
	bool cancelled;
	bool write_failed;
	uint64_t sent_bytes;
	uint64_t total_bytes;
	uint64_t next_progress;
	relay_error step_err;
	bool step_failed;
	rk_buf expected; /* "<sha256> ./<member>" per file: the stream's last member */
	bool unchecked;  /* RELAY_XFER_CALLER_VERIFIES: no hashing on either side */
} push_ctx;

static void push_on_out(void *ctx, const char *data, size_t len)
{
	push_ctx *pc = ctx;
	if (pc->out.len + len > PUSH_MAX_FACTS_BYTES) {
		pc->out_too_big = true;
		return;
	}
	rk_buf_append(&pc->out, data, len);
}

static void push_on_err(void *ctx, const char *data, size_t len)
{
	push_ctx *pc = ctx;
	rk_buf_append(&pc->err_tail, data, len);
	if (pc->err_tail.len > 2 * PUSH_ERR_KEEP)
		rk_buf_drop_front(&pc->err_tail, pc->err_tail.len - PUSH_ERR_KEEP);
}

/* libarchive's write callback: hands one block to ssh, servicing ssh's
 * output meanwhile. */
static la_ssize_t push_write_cb(struct archive *a, void *ctx, const void *buffer, size_t length)
{
	push_ctx *pc = ctx;
	pc->io.in_data = buffer;
	pc->io.in_len = length;
	while (pc->io.in_len > 0) {
		if (ssh_child_try_send(&pc->child, &pc->io))
			continue;
		if (pc->host->call_cancelled(pc->call)) {
			pc->cancelled = true;
			archive_set_error(a, ECANCELED, "cancelled");
			return -1;
		}
		if (pc->io.in_broken || pc->child.in_fd < 0 || pc->child.exited) {
			pc->write_failed = true;
			archive_set_error(a, EPIPE, "the guest stopped reading the stream");
			return -1;
		}
		if (ssh_child_step(pc->host, &pc->child, &pc->io, 200, &pc->step_err) != RELAY_OK) {
			pc->step_failed = true;
			archive_set_error(a, EIO, "cannot talk to ssh");
			return -1;
		}
	}
	return (la_ssize_t)length;
}

/* Streams one host file into the archive, hashing it. */
static relay_status push_file(push_ctx *pc, struct archive *a, const push_item *it, const char *entry_name,
                              ssh_facts *sent, const char *fact_path, relay_error *err)
{
	const relay_host *host = pc->host;
	relay_status status = RELAY_OK;
	struct archive_entry *e = NULL;
	rk_sha256 h = {0};
	char *chunk = NULL;
	int fd = open(it->full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		status = host->error_set(err, errno == ELOOP ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
		                         "cannot open the host file %.120s: %s", it->full, strerror(errno));
		goto cleanup;
	}
	if (!S_ISREG(st.st_mode) || st.st_ino != it->st.st_ino || st.st_dev != it->st.st_dev) {
		status = host->error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                         "the host file %.120s was replaced while pushing", it->full);
		goto cleanup;
	}
	chunk = malloc(PUSH_READ_CHUNK);
	e = archive_entry_new();
	if (chunk == NULL || e == NULL || (!pc->unchecked && !rk_sha256_begin(&h))) {
		status =
		    host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory pushing %.120s", it->full);
		goto cleanup;
	}
	uint64_t size = (uint64_t)st.st_size;
	archive_entry_set_pathname(e, entry_name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, (st.st_mode & S_IXUSR) ? 0700 : 0600);
	archive_entry_set_size(e, (la_int64_t)size);
	archive_entry_set_mtime(e, st.st_mtime, 0);
	if (archive_write_header(a, e) != ARCHIVE_OK)
		goto archive_failed;
	uint64_t done = 0;
	while (done < size) {
		size_t want = size - done < PUSH_READ_CHUNK ? (size_t)(size - done) : PUSH_READ_CHUNK;
		ssize_t r = read(fd, chunk, want);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			status = host->error_set(
			    err, RELAY_E_INTEGRITY, r < 0 ? errno : 0,
			    "the host file %.120s shrank while it was pushed; push it again", it->full);
			goto cleanup;
		}
		if (host->call_cancelled(pc->call)) {
			pc->cancelled = true;
			status = host->error_set(err, RELAY_E_CANCELLED, 0, "push cancelled");
			goto cleanup;
		}
		if (!pc->unchecked)
			rk_sha256_update(&h, chunk, (size_t)r);
		if (archive_write_data(a, chunk, (size_t)r) != r)
			goto archive_failed;
		done += (uint64_t)r;
		pc->sent_bytes += (uint64_t)r;
		if (pc->call && pc->sent_bytes >= pc->next_progress) {
			host->call_progress(pc->call, (double)pc->sent_bytes, (double)pc->total_bytes,
			                    "pushing files to the guest");
			pc->next_progress = pc->sent_bytes + ((uint64_t)8 << 20);
		}
	}
	if (pc->unchecked)
		goto cleanup; /* the caller checks the copy (RELAY_XFER_CALLER_VERIFIES) */
	char hex[65];
	rk_sha256_end(&h, hex);
	rk_buf_printf(&pc->expected, "%s ./%s\n", hex, entry_name);
	if (!ssh_facts_add(sent, fact_path, size, hex) || pc->expected.failed)
		status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	goto cleanup;
archive_failed:
	/* The reason is in the context (cancel, broken stream) or libarchive. */
	status = RELAY_E_IO;
	host->error_set(err, RELAY_E_IO, 0, "writing the tar stream failed: %.160s", archive_error_string(a));
cleanup:
	rk_sha256_discard(&h);
	archive_entry_free(e);
	free(chunk);
	if (fd >= 0)
		close(fd);
	return status;
}

/* Writes a small regular member holding `data`. */
static relay_status push_small_member(const relay_host *host, struct archive *a, const char *name,
                                      const char *data, size_t len, relay_error *err)
{
	struct archive_entry *e = archive_entry_new();
	if (e == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	relay_status status = RELAY_OK;
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0600);
	archive_entry_set_size(e, (la_int64_t)len);
	archive_entry_set_mtime(e, 0, 0);
	if (archive_write_header(a, e) != ARCHIVE_OK ||
	    (len > 0 && archive_write_data(a, data, len) != (la_ssize_t)len))
		status = host->error_set(err, RELAY_E_IO, 0, "writing the tar stream failed: %.160s",
		                         archive_error_string(a));
	archive_entry_free(e);
	return status;
}

/* Waits for ssh to end, servicing its output: the guest unpacks, checks
 * and hashes after the stream ended, allowed 120 s plus 125 ms per MiB
 * (the receiver's scan allowance, spec/guest.md §3.4). */
static relay_status push_drain(push_ctx *pc, relay_error *err)
{
	int64_t limit_ms = 120000 + (int64_t)((pc->total_bytes >> 20) * 125);
	int64_t deadline = ssh_now_ms() + limit_ms;
	pc->io.in_len = 0;
	while (!ssh_child_done(&pc->child)) {
		if (pc->host->call_cancelled(pc->call)) {
			pc->cancelled = true;
			return pc->host->error_set(err, RELAY_E_CANCELLED, 0, "push cancelled");
		}
		if (ssh_now_ms() > deadline)
			return pc->host->error_set(
			    err, RELAY_E_TIMEOUT, 0,
			    "the guest did not finish unpacking and hashing within %lld s",
			    (long long)(limit_ms / 1000));
		relay_status s = ssh_child_step(pc->host, &pc->child, &pc->io, 200, err);
		if (s != RELAY_OK)
			return s;
	}
	return RELAY_OK;
}

static void push_abort(const ssh_conn *conn, const char *token, const char *remote)
{
	const relay_host *host = conn->plugin->host;
	const char *args[] = {token, remote, NULL};
	relay_process_result res = {.struct_size = sizeof res};
	relay_error ignored;
	if (ssh_run_script(conn, ssh_script_push_abort, args, 30000, 4096, NULL, &res, &ignored) ==
	    RELAY_OK) {
		host->free(res.out);
		host->free(res.err);
	}
}

/* Lists what a push of local_path sends: the folder's walk for a tree,
 * the one regular file otherwise. */
static relay_status push_inventory(const relay_host *host, const char *local_path, bool tree, push_list *list,
                                   relay_error *err)
{
	struct stat st;
	if (lstat(local_path, &st) != 0)
		return host->error_set(err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, errno,
		                       "cannot read the host path %.120s: %s", local_path, strerror(errno));
	if (tree) {
		if (!S_ISDIR(st.st_mode))
			return host->error_set(
			    err, S_ISLNK(st.st_mode) ? RELAY_E_UNSAFE_PATH : RELAY_E_INVALID_ARGUMENT, 0,
			    "the host path %.120s is not a folder", local_path);
		return walk(host, local_path, "", 0, list, err);
	}
	if (!S_ISREG(st.st_mode))
		return host->error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                       "the host path %.120s is not a regular file (links and special files "
		                       "are refused)",
		                       local_path);
	if (!push_list_add(list, "f", local_path, false, &st))
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	return RELAY_OK;
}

/* First members: the files in stream order, then a marker that the list
 * is complete, so the guest can hash each file while tar unpacks the next
 * ones. */
static relay_status push_write_order(const relay_host *host, struct archive *a, const push_list *list,
                                     const char *token, relay_error *err)
{
	relay_status status;
	rk_buf order = RK_BUF_INIT;
	for (size_t i = 0; i < list->count; i++)
		if (!list->items[i].is_dir)
			rk_buf_printf(&order, "./%s\n", list->items[i].rel);
	char name[64];
	snprintf(name, sizeof name, ".relay-order-%s", token);
	if (order.failed)
		status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	else
		status = push_small_member(host, a, name, order.data, order.len, err);
	snprintf(name, sizeof name, ".relay-order-%s.done", token);
	if (status == RELAY_OK)
		status = push_small_member(host, a, name, "", 0, err);
	rk_buf_free(&order);
	return status;
}

/* Writes the whole tar stream: first the files in stream order, then
 * every entry, last what the guest must find; then closes the archive.
 * What is sent is added to *sent. */
static relay_status push_write_members(push_ctx *pc, struct archive *a, const push_list *list,
                                       const char *token, bool tree, ssh_facts *sent, relay_error *err)
{
	const relay_host *host = pc->host;
	relay_status status = push_write_order(host, a, list, token, err);
	for (size_t i = 0; i < list->count && status == RELAY_OK; i++) {
		const push_item *it = &list->items[i];
		if (it->is_dir) {
			struct archive_entry *e = archive_entry_new();
			if (e == NULL) {
				status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
				break;
			}
			archive_entry_set_pathname(e, it->rel);
			archive_entry_set_filetype(e, AE_IFDIR);
			archive_entry_set_perm(e, 0700);
			archive_entry_set_mtime(e, it->st.st_mtime, 0);
			if (archive_write_header(a, e) != ARCHIVE_OK)
				status = host->error_set(err, RELAY_E_IO, 0,
				                         "writing the tar stream failed: %.160s",
				                         archive_error_string(a));
			archive_entry_free(e);
		} else {
			status = push_file(pc, a, it, it->rel, sent, tree ? it->rel : "", err);
		}
	}
	if (status == RELAY_OK) {
		/* Last member: what the guest must find before it replaces anything. */
		char name[64];
		snprintf(name, sizeof name, ".relay-expected-%s", token);
		status = push_small_member(host, a, name, pc->expected.data, pc->expected.len, err);
	}
	if (status == RELAY_OK && archive_write_close(a) != ARCHIVE_OK)
		status = host->error_set(err, RELAY_E_IO, 0, "finishing the tar stream failed: %.160s",
		                         archive_error_string(a));
	return status;
}

/* Reads the facts the guest reported after its commit into *arrived and
 * compares them with *sent (the guest compared too; this guards against a
 * guest that lies). A guest without a sha256 tool sets *no_hash. */
static relay_status push_check_arrived(push_ctx *pc, const char *what, const char *remote, bool tree,
                                       ssh_facts *sent, ssh_facts *arrived, bool *no_hash, relay_error *err)
{
	const relay_host *host = pc->host;
	ssh_facts_sort(sent);
	relay_status status =
	    ssh_facts_parse(host, rk_buf_str(&pc->out), pc->out.len, !tree, arrived, no_hash, err);
	if (status != RELAY_OK)
		return status;
	if (*no_hash) {
		host->log(RELAY_LOG_WARNING, SSH_PLUGIN_NAME,
		          "the guest %s has no sha256 tool (openssl, sha256sum, shasum); %s is not "
		          "verified in the guest",
		          pc->conn->host, remote);
		return RELAY_OK;
	}
	return ssh_facts_compare(host, what, sent, arrived, err);
}

/* The guest refused to replace anything: names the first difference,
 * else says how ssh ended. */
static relay_status push_explain_refusal(push_ctx *pc, const char *what, bool tree, int code, ssh_facts *sent,
                                         ssh_facts *arrived, relay_error *err)
{
	const relay_host *host = pc->host;
	bool no_hash = false;
	if (!pc->unchecked &&
	    ssh_facts_parse(host, rk_buf_str(&pc->out), pc->out.len, !tree, arrived, &no_hash, err) ==
	        RELAY_OK &&
	    !no_hash) {
		ssh_facts_sort(sent);
		relay_status status = ssh_facts_compare(host, what, sent, arrived, err);
		if (status != RELAY_OK)
			return status;
	}
	return ssh_failure(pc->conn, what, code, rk_buf_str(&pc->err_tail), pc->err_tail.len, err);
}

/* One push in one session. *retry_cold is set when the session was a
 * spare found dead only now, or the guest refused it while spares held
 * sessions (they are gone now): ssh failed before the guest said anything
 * of the push, whose leftovers push_abort has removed; the caller tries
 * once more in a new session. */
static relay_status push_attempt(const ssh_conn *conn, const char *local_path, const char *remote_path,
                                 relay_call *call, unsigned flags, bool may_use_spare, bool *retry_cold,
                                 char **facts_json_out, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	relay_status status = RELAY_OK;
	char *remote = NULL;
	push_list list = {0};
	ssh_facts sent = SSH_FACTS_INIT, arrived = SSH_FACTS_INIT;
	struct archive *a = NULL;
	push_ctx pc = {.conn = conn, .host = host, .call = call};
	pc.child = (ssh_child){.pid = -1, .in_fd = -1, .out_fd = -1, .err_fd = -1};
	bool tree = (flags & RELAY_XFER_TREE) != 0;
	pc.unchecked = (flags & RELAY_XFER_CALLER_VERIFIES) != 0;
	bool guest_dirty = false;
	char token[33];
	char what[200];

	*retry_cold = false;
	status = rk_xfer_begin(host, "push", flags, RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES, local_path,
	                       remote_path, facts_json_out, err);
	if (status != RELAY_OK)
		return status;
	status = ssh_guest_path(host, remote_path, &remote, err);
	if (status != RELAY_OK)
		return status;
	snprintf(what, sizeof what, "pushing to %.150s", remote);

	/* Inventory the host side before anything is sent. */
	status = push_inventory(host, local_path, tree, &list, err);
	if (status != RELAY_OK)
		goto cleanup;
	pc.total_bytes = list.total_bytes;
	int64_t t_start = ssh_now_ms(), t_streamed = 0, t_verified = 0;

	status = ssh_token(host, token, err);
	if (status != RELAY_OK)
		goto cleanup;
	const char *mode = pc.unchecked                                         ? "unchecked"
	                   : tree && list.total_bytes >= PUSH_OVERLAP_MIN_BYTES ? "overlap"
	                                                                        : "after";
	const char *args[] = {token, remote, tree ? "tree" : "file", mode, NULL};
	bool was_spare = false;
	status = ssh_session_start(conn, "push", args, may_use_spare, &pc.child, &was_spare, err);
	if (status != RELAY_OK)
		goto cleanup;
	guest_dirty = true;
	pc.io = (ssh_io){.on_out = push_on_out, .on_err = push_on_err, .ctx = &pc};

	a = archive_write_new();
	if (a == NULL || archive_write_set_format_gnutar(a) != ARCHIVE_OK ||
	    archive_write_add_filter_none(a) != ARCHIVE_OK ||
	    archive_write_open(a, &pc, NULL, push_write_cb, NULL) != ARCHIVE_OK) {
		status = host->error_set(err, RELAY_E_INTERNAL, 0, "cannot start the tar stream: %.160s",
		                         a ? archive_error_string(a) : "out of memory");
		goto cleanup;
	}
	status = push_write_members(&pc, a, &list, token, tree, &sent, err);
	if (pc.cancelled) {
		status = host->error_set(err, RELAY_E_CANCELLED, 0, "push to %.150s cancelled", remote);
		goto cleanup;
	}
	if (pc.step_failed) {
		status =
		    host->error_set(err, pc.step_err.code, pc.step_err.sys_errno, "%s", pc.step_err.message);
		goto cleanup;
	}
	/* A host-side failure (a source file changed, out of memory) keeps its
	 * own message; a broken stream is explained by how ssh ended. */
	if (status != RELAY_OK && !pc.write_failed)
		goto cleanup;
	ssh_child_close_stdin(&pc.child);
	t_streamed = ssh_now_ms();
	{
		relay_status ds = push_drain(&pc, err);
		if (ds != RELAY_OK) {
			status = ds;
			goto cleanup;
		}
	}
	int code = ssh_child_exit_code(&pc.child);
	t_verified = ssh_now_ms();
	if (code == SSH_SCRIPT_EXIT_INTEGRITY) {
		status = push_explain_refusal(&pc, what, tree, code, &sent, &arrived, err);
		goto cleanup;
	}
	if (code != 0) {
		bool freed = ssh_spares_note_failure(conn, rk_buf_str(&pc.err_tail), pc.err_tail.len);
		*retry_cold = (was_spare || freed) && (code == 255 || code < 0) && !pc.cancelled &&
		              strstr(rk_buf_str(&pc.out), "\036relay-") == NULL;
		status = ssh_failure(conn, what, code, rk_buf_str(&pc.err_tail), pc.err_tail.len, err);
		goto cleanup;
	}
	if (status != RELAY_OK)
		goto cleanup;
	if (pc.out_too_big || pc.out.failed) {
		status =
		    host->error_set(err, RELAY_E_TOO_LARGE, 0, "%s: the guest's file facts passed %zu MiB",
		                    what, PUSH_MAX_FACTS_BYTES >> 20);
		goto cleanup;
	}
	if (strstr(rk_buf_str(&pc.out), "\036relay-committed\n") == NULL) {
		status = host->error_set(
		    err, RELAY_E_INDETERMINATE, 0,
		    "%s: the guest ended without saying whether the copy was moved into place", what);
		goto cleanup;
	}
	guest_dirty = false;
	/* Unchecked: no facts either way; the caller scans the copy itself. */
	bool no_hash = pc.unchecked;
	if (!pc.unchecked) {
		status = push_check_arrived(&pc, what, remote, tree, &sent, &arrived, &no_hash, err);
		if (status != RELAY_OK)
			goto cleanup;
	}
	host->log(RELAY_LOG_DEBUG, SSH_PLUGIN_NAME,
	          "pushed %zu entries, %llu bytes to %s (%s session): stream %lld ms, then guest unpack, "
	          "hash and commit %lld ms",
	          list.count, (unsigned long long)list.total_bytes, remote, was_spare ? "spare" : "new",
	          (long long)(t_streamed - t_start), (long long)(t_verified - t_streamed));
	status = ssh_facts_answer(host, &arrived, no_hash, facts_json_out, err);
cleanup:
	/* ssh first: freeing an unclosed archive flushes through the write
	 * callback, which must then fail fast instead of finishing the stream. */
	ssh_child_destroy(&pc.child);
	if (a)
		archive_write_free(a);
	if (status != RELAY_OK && guest_dirty)
		push_abort(conn, token, remote);
	rk_buf_free(&pc.out);
	rk_buf_free(&pc.expected);
	rk_buf_free(&pc.err_tail);
	ssh_facts_free(&sent);
	ssh_facts_free(&arrived);
	push_list_free(&list);
	free(remote);
	return status;
}

relay_status ssh_push(const ssh_conn *conn, const char *local_path, const char *remote_path, relay_call *call,
                      unsigned flags, char **facts_json_out, relay_error *err)
{
	return ssh_session_transfer(push_attempt, conn, local_path, remote_path, call, flags, facts_json_out,
	                            err);
}
