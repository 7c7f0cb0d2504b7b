/* Guest I/O through the transport (guest.md §3.4-§3.5, §5.2); see guest_io.h. */
#include "guestio/guest_io.h"

#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "evidence/archive.h"
#include "session/events.h"
#include "mcp/call.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define INVENTORY_MAX_BYTES ((size_t)256 << 20)
#define COPY_CHUNK          ((size_t)1 << 20)
#define STDERR_TAIL_BYTES   600

relay_status gio_begin(guest_io *io, manager *m, guest *g, relay_call *call, relay_error *err)
{
	memset(io, 0, sizeof *io);
	loaded_plugin *plugin = NULL;
	relay_transport_conn *conn = NULL;
	relay_status st = guest_transport(m, g, &plugin, &conn, err);
	if (st != RELAY_OK)
		return st;
	io->m = m;
	io->g = g;
	io->call = call;
	io->plugin = plugin;
	io->conn = conn;
	io->traits = plugin->transport.traits;
	manager_lock(m);
	io->root = g->guest_root ? strdup(g->guest_root) : NULL;
	io->evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	manager_unlock(m);
	io->receiver = io->root ? fs_path_join(io->root, "receiver") : NULL;
	io->transfers = json_object_new_array();
	pthread_mutex_init(&io->transfers_lock, NULL);
	if (io->root == NULL || io->receiver == NULL || io->transfers == NULL) {
		gio_end(io);
		return relay_error_set(err, RELAY_E_INTERNAL, 0, "guest %s has no guest root yet", g->name);
	}
	return RELAY_OK;
}

void gio_end(guest_io *io)
{
	if (io == NULL)
		return;
	if (io->m != NULL)
		gio_remove_transients(io);
	if (io->scratch) {
		relay_error err;
		if (fs_remove_tree(io->scratch, &err) != RELAY_OK)
			log_warning("cannot remove the scratch folder %s: %s", io->scratch, err.message);
	}
	free(io->root);
	free(io->receiver);
	free(io->evidence);
	free(io->scratch);
	fw_strlist_free(&io->transients);
	if (io->transfers) {
		json_object_put(io->transfers);
		pthread_mutex_destroy(&io->transfers_lock);
	}
	memset(io, 0, sizeof *io);
}

const char *gio_scratch(guest_io *io, relay_error *err)
{
	if (io->scratch)
		return io->scratch;
	char hex[17];
	random_hex(hex, 16);
	manager_lock(io->m);
	char *dir = io->g->dir ? strdup(io->g->dir) : NULL;
	manager_unlock(io->m);
	if (dir == NULL) {
		relay_error_set(err, RELAY_E_INTERNAL, 0, "guest %s has no state folder", io->g->name);
		return NULL;
	}
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/io-%s", dir, hex);
	free(dir);
	char *path = strbuf_detach(&sb, NULL);
	if (path == NULL || mkdir(path, 0700) != 0) {
		relay_error_set(err, RELAY_E_IO, errno, "cannot create the scratch folder %s: %s",
		                path ? path : "(out of memory)", strerror(errno));
		free(path);
		return NULL;
	}
	io->scratch = path;
	return path;
}

char *gio_scratch_path(guest_io *io, const char *prefix, const char *suffix, relay_error *err)
{
	const char *dir = gio_scratch(io, err);
	if (dir == NULL)
		return NULL;
	char hex[17];
	random_hex(hex, 16);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s%s%s", dir, prefix, hex, suffix ? suffix : "");
	char *path = strbuf_detach(&sb, NULL);
	if (path == NULL)
		relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	return path;
}

/* ---- exec ----------------------------------------------------------------------- */

/* gio_exec_call with the standard input of `sv` (NULL: none). */
static relay_status exec_with_input(guest_io *io, relay_call *call, const char *const *argv, const char *cwd,
                                    uint64_t timeout_ms, size_t max_output_bytes, unsigned flags,
                                    const gio_supervision *sv, relay_exec_result *res, relay_error *err)
{
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	relay_exec_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = argv;
	req.cwd = cwd;
	req.timeout_ms = timeout_ms ? timeout_ms : GIO_SHORT_TIMEOUT_MS;
	req.max_output_bytes = max_output_bytes;
	relay_error_clear(err);
	if (flags & RELAY_EXEC_STDIO_BYTES) {
		if (!(io->traits & RELAY_TRANSPORT_STDIO_BYTES))
			return relay_error_set(err, RELAY_E_UNSUPPORTED, 0,
			                       "the transport %s cannot send standard input bytes",
			                       io->plugin->descriptor.name);
		req.stdin_data = sv ? sv->stdin_data : NULL;
		req.stdin_len = sv ? sv->stdin_len : 0;
		req.max_stdout_bytes = sv ? sv->max_stdout_bytes : 0;
	}
	relay_status st =
	    io->plugin->transport.exec(io->plugin->state, io->conn, &req, call, flags, res, err);
	if (st != RELAY_OK && err->message[0] == '\0')
		relay_error_set(err, st, 0, "the transport could not run %s: %s", argv[0],
		                relay_status_str(st));
	return st;
}

relay_status gio_exec_call(guest_io *io, relay_call *call, const char *const *argv, const char *cwd,
                           uint64_t timeout_ms, size_t max_output_bytes, unsigned flags,
                           relay_exec_result *res, relay_error *err)
{
	return exec_with_input(io, call, argv, cwd, timeout_ms, max_output_bytes, flags, NULL, res, err);
}

relay_status gio_exec(guest_io *io, const char *const *argv, const char *cwd, uint64_t timeout_ms,
                      size_t max_output_bytes, unsigned flags, relay_exec_result *res, relay_error *err)
{
	return gio_exec_call(io, io->call, argv, cwd, timeout_ms, max_output_bytes, flags, res, err);
}

void gio_exec_result_free(relay_exec_result *res)
{
	if (res == NULL)
		return;
	free(res->out);
	free(res->err);
	res->out = res->err = NULL;
	res->out_len = res->err_len = 0;
}

/* The last bytes of a stream for a message, as one line. */
static void tail_line(const char *text, size_t len, char *out, size_t out_len)
{
	out[0] = '\0';
	if (text == NULL || len == 0)
		return;
	size_t from = len > STDERR_TAIL_BYTES ? len - STDERR_TAIL_BYTES : 0;
	from = utf8_cut_forward(text, len, from);
	size_t j = 0;
	for (size_t i = from; i < len && j + 1 < out_len; i++) {
		char c = text[i];
		out[j++] = (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
	}
	while (j > 0 && out[j - 1] == ' ')
		j--;
	out[j] = '\0';
}

static void sleep_ms_checked(relay_call *call, int64_t ms)
{
	int64_t until = clock_monotonic_ms() + ms;
	while (clock_monotonic_ms() < until && !relay_call_is_cancelled(call)) {
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
}

relay_status gio_receiver(guest_io *io, const char *const *args, uint64_t timeout_ms, json_object **frame_out,
                          relay_error *err)
{
	*frame_out = NULL;
	size_t n = 0;
	while (args[n])
		n++;
	const char **argv = calloc(n + 2, sizeof *argv);
	if (argv == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	argv[0] = io->receiver;
	for (size_t i = 0; i < n; i++)
		argv[i + 1] = args[i];
	const char *cmd = n ? args[0] : "";
	relay_status st = RELAY_OK;
	relay_exec_result res;
	memset(&res, 0, sizeof res);
	for (int attempt = 1;; attempt++) {
		st = gio_exec(io, argv, NULL, timeout_ms, 1 << 20, 0, &res, err);
		if (st == RELAY_E_TRANSIENT && attempt < GIO_TRANSFER_ATTEMPTS &&
		    !relay_call_is_cancelled(io->call)) {
			gio_exec_result_free(&res);
			sleep_ms_checked(io->call, attempt * GIO_RETRY_WAIT_MS);
			continue;
		}
		break;
	}
	if (st != RELAY_OK) {
		char saved[sizeof err->message];
		snprintf(saved, sizeof saved, "%s", err->message);
		relay_error_set(err, st, err->sys_errno, "receiver %s could not run: %s", cmd, saved);
		goto cleanup;
	}
	json_object *frame = gio_parse_frame(res.out, res.out_len);
	char tail[STDERR_TAIL_BYTES + 1];
	tail_line(res.err, res.err_len, tail, sizeof tail);
	if (res.timed_out) {
		json_object_put(frame);
		st = relay_error_set(err, RELAY_E_TIMEOUT, 0, "receiver %s did not finish within %llu s", cmd,
		                     (unsigned long long)((timeout_ms + 999) / 1000));
		goto cleanup;
	}
	if (res.exit_code != 0) {
		const char *why = jsonx_get_str(frame, "error");
		st = gio_frame_exit_status(res.exit_code);
		if (res.exit_code < 0 && res.signal > 0)
			relay_error_set(err, st, 0, "receiver %s was killed by signal %d: %s", cmd,
			                res.signal, why ? why : (tail[0] ? tail : "no diagnostic"));
		else
			relay_error_set(err, st, 0, "receiver %s failed (exit %d): %s", cmd, res.exit_code,
			                why ? why : (tail[0] ? tail : "no diagnostic"));
		*frame_out = frame;
		goto cleanup;
	}
	if (frame == NULL) {
		st = relay_error_set(err, RELAY_E_PROTOCOL, 0, "receiver %s printed no frame%s%s", cmd,
		                     tail[0] ? ": " : "", tail);
		goto cleanup;
	}
	*frame_out = frame;
cleanup:
	gio_exec_result_free(&res);
	free(argv);
	return st;
}

/* ---- transfers ------------------------------------------------------------------ */

static bool contains_ci(const char *hay, const char *needle)
{
	size_t n = strlen(needle);
	for (const char *p = hay; *p; p++)
		if (strncasecmp(p, needle, n) == 0)
			return true;
	return false;
}

bool gio_transient(relay_status status, const char *message)
{
	if (status == RELAY_E_TRANSIENT || status == RELAY_E_TIMEOUT)
		return true;
	if (status == RELAY_E_CANCELLED || status == RELAY_E_INTEGRITY || status == RELAY_E_UNSAFE_PATH)
		return false;
	if (message == NULL)
		return false;
	static const char *const words[] = {"scp",       "ssh",       "connection",
	                                    "timed out", "no answer", "no response"};
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
		if (contains_ci(message, words[i]))
			return true;
	/* An HTTP 5xx: "HTTP 5dd" or "status 5dd". */
	for (const char *p = message; *p; p++) {
		if ((strncasecmp(p, "http ", 5) == 0 || strncasecmp(p, "status ", 7) == 0)) {
			const char *d = p + (p[0] == 'h' || p[0] == 'H' ? 5 : 7);
			if (d[0] == '5' && isdigit((unsigned char)d[1]) && isdigit((unsigned char)d[2]))
				return true;
		}
	}
	return false;
}

static void retry_event(guest_io *io, const char *op, const char *what, const char *path, int attempt,
                        const char *error)
{
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "operation", op);
	jsonx_add_str(d, "what", what);
	jsonx_add_str(d, "path", path);
	jsonx_add_int(d, "attempt", attempt);
	jsonx_add_int(d, "waitMs", (int64_t)attempt * GIO_RETRY_WAIT_MS);
	jsonx_add_str(d, "error", error);
	guest_event(io->m, io->g, "transfer-retry", "a transient transfer failure is retried", d);
}

void gio_note_transfer(guest_io *io, const char *op, const char *what, const char *local, const char *remote,
                       uint64_t bytes, const char *sha256, int attempts, const char *method)
{
	if (io->transfers == NULL)
		return;
	json_object *t = json_object_new_object();
	jsonx_add_str(t, "op", op);
	jsonx_add_str(t, "what", what);
	jsonx_add_str(t, "local", local);
	jsonx_add_str(t, "remote", remote);
	jsonx_add_int(t, "bytes", (int64_t)bytes);
	jsonx_add_str(t, "sha256", sha256);
	jsonx_add_int(t, "attempts", attempts);
	jsonx_add_str(t, "method", method);
	pthread_mutex_lock(&io->transfers_lock);
	json_object_array_add(io->transfers, t);
	pthread_mutex_unlock(&io->transfers_lock);
}

static relay_status transfer(guest_io *io, bool push, const char *local, const char *remote, unsigned flags,
                             const char *what, json_object **facts_out, relay_error *err)
{
	if (facts_out)
		*facts_out = NULL;
	const char *op = push ? "push" : "pull";
	relay_status st = RELAY_OK;
	for (int attempt = 1;; attempt++) {
		if (relay_call_is_cancelled(io->call))
			return relay_error_set(err, RELAY_E_CANCELLED, 0,
			                       "the call was cancelled before %s %s", op, what);
		char *facts_text = NULL;
		relay_error_clear(err);
		if (push) {
			st = io->plugin->transport.push(io->plugin->state, io->conn, local, remote, io->call,
			                                flags, facts_out ? &facts_text : NULL, err);
			if (st == RELAY_E_UNSUPPORTED_FLAGS && (flags & RELAY_XFER_CALLER_VERIFIES)) {
				/* A transport built before the flag: it verifies itself. */
				flags &= ~RELAY_XFER_CALLER_VERIFIES;
				relay_error_clear(err);
				st = io->plugin->transport.push(io->plugin->state, io->conn, local, remote,
				                                io->call, flags,
				                                facts_out ? &facts_text : NULL, err);
			}
		} else
			st = io->plugin->transport.pull(io->plugin->state, io->conn, remote, local, io->call,
			                                flags, NULL, err);
		if (st == RELAY_OK) {
			if (facts_out && facts_text) {
				json_object *facts = jsonx_parse_str(facts_text, NULL, 0);
				if (facts && json_object_is_type(facts, json_type_array))
					*facts_out = facts;
				else
					json_object_put(facts);
			}
			free(facts_text);
			gio_note_transfer(io, op, what, local, remote, 0, NULL, attempt, "transport");
			return RELAY_OK;
		}
		free(facts_text);
		char msg[sizeof err->message];
		snprintf(msg, sizeof msg, "%s", err->message[0] ? err->message : relay_status_str(st));
		if (st != RELAY_E_CANCELLED && attempt < GIO_TRANSFER_ATTEMPTS && gio_transient(st, msg) &&
		    !relay_call_is_cancelled(io->call)) {
			retry_event(io, op, what, push ? remote : local, attempt, msg);
			sleep_ms_checked(io->call, (int64_t)attempt * GIO_RETRY_WAIT_MS);
			continue;
		}
		relay_status code = st;
		if (st == RELAY_E_TRANSIENT || st == RELAY_E_TIMEOUT)
			code = RELAY_E_TRANSIENT;
		if (attempt > 1)
			return relay_error_set(err, code, 0, "%s of %s (%s) failed after %d attempts: %s",
			                       push ? "pushing" : "pulling", what, remote, attempt, msg);
		return relay_error_set(err, code, 0, "%s of %s (%s) failed: %s", push ? "pushing" : "pulling",
		                       what, remote, msg);
	}
}

relay_status gio_push(guest_io *io, const char *local, const char *remote, unsigned xfer_flags,
                      const char *what, json_object **facts_out, relay_error *err)
{
	return transfer(io, true, local, remote, xfer_flags, what, facts_out, err);
}

relay_status gio_pull(guest_io *io, const char *remote, const char *local, unsigned xfer_flags,
                      const char *what, relay_error *err)
{
	return transfer(io, false, local, remote, xfer_flags, what, NULL, err);
}

/* ---- scans ---------------------------------------------------------------------- */

uint64_t gio_scan_timeout_ms(uint64_t bytes)
{
	uint64_t mib = (bytes + (1u << 20) - 1) >> 20;
	return GIO_SCAN_BASE_MS + mib * GIO_SCAN_MS_PER_MIB;
}

void gio_add_transient(guest_io *io, const char *name)
{
	pthread_mutex_lock(&io->transfers_lock);
	fw_strlist_push(&io->transients, name);
	pthread_mutex_unlock(&io->transfers_lock);
}

void gio_remove_transients(guest_io *io)
{
	if (io->transients.count == 0 || !io->receiver_ready)
		return;
	size_t i = 0;
	while (i < io->transients.count) {
		size_t start = i, bytes = 0;
		while (
		    i < io->transients.count &&
		    (i == start || bytes + strlen(io->transients.items[i]) + 1 <= GIO_REMOVE_BATCH_BYTES)) {
			bytes += strlen(io->transients.items[i]) + 1;
			i++;
		}
		size_t n = i - start;
		const char **args = calloc(n + 4, sizeof *args);
		if (args == NULL)
			break;
		args[0] = "remove";
		args[1] = "--root";
		args[2] = io->root;
		for (size_t k = 0; k < n; k++)
			args[3 + k] = io->transients.items[start + k];
		json_object *frame = NULL;
		relay_error err;
		/* Removal must work even after the call was cancelled. */
		relay_call *saved = io->call;
		io->call = NULL;
		if (gio_receiver(io, args, GIO_SHORT_TIMEOUT_MS, &frame, &err) != RELAY_OK)
			log_warning("guest %s: cannot remove transient files: %s", io->g->name, err.message);
		io->call = saved;
		json_object_put(frame);
		free(args);
	}
	fw_strlist_free(&io->transients);
}

json_object *gio_fact_find(json_object *facts, const char *path)
{
	size_t n = json_object_is_type(facts, json_type_array) ? json_object_array_length(facts) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *f = json_object_array_get_idx(facts, i);
		const char *p = jsonx_get_str(f, "path");
		if (p && strcmp(p, path) == 0)
			return f;
	}
	return NULL;
}

/* Checks that the frame names a transient of R with the given prefix and
 * returns its base name (borrowed from the frame's string). */
static const char *transient_name(guest_io *io, const char *path, const char *prefix)
{
	size_t rl = strlen(io->root);
	if (path == NULL || strncmp(path, io->root, rl) != 0 || path[rl] != '/')
		return NULL;
	const char *name = path + rl + 1;
	if (strncmp(name, prefix, strlen(prefix)) != 0 || strchr(name, '/') != NULL)
		return NULL;
	return name;
}

static bool valid_facts(json_object *facts)
{
	if (!json_object_is_type(facts, json_type_array))
		return false;
	size_t n = json_object_array_length(facts);
	for (size_t i = 0; i < n; i++) {
		json_object *f = json_object_array_get_idx(facts, i);
		int64_t bytes = -1;
		const char *sha = jsonx_get_str(f, "sha256");
		if (!json_object_is_type(f, json_type_object) || jsonx_get_str(f, "path") == NULL ||
		    sha == NULL || !sha256_hex_valid(sha) || !jsonx_get_int(f, "bytes", &bytes) || bytes < 0)
			return false;
	}
	return true;
}

relay_status gio_scan(guest_io *io, const char *base, const char *rel, bool present, uint64_t expected_bytes,
                      json_object **facts_out, relay_error *err)
{
	*facts_out = NULL;
	const char *args[9];
	size_t k = 0;
	args[k++] = "scan";
	args[k++] = "--root";
	args[k++] = io->root;
	args[k++] = "--base";
	args[k++] = base;
	if (present)
		args[k++] = "--present";
	args[k++] = rel;
	args[k] = NULL;
	json_object *frame = NULL;
	char *local = NULL, *data = NULL;
	json_object *facts = NULL;
	relay_status st = gio_receiver(io, args, gio_scan_timeout_ms(expected_bytes), &frame, err);
	if (st != RELAY_OK)
		goto cleanup;
	const char *path = jsonx_get_str(frame, "path");
	const char *sha = jsonx_get_str(frame, "sha256");
	int64_t bytes = -1;
	const char *name = transient_name(io, path, ".inventory-");
	if (name == NULL || sha == NULL || !sha256_hex_valid(sha) || !jsonx_get_int(frame, "bytes", &bytes) ||
	    bytes < 0) {
		st = relay_error_set(
		    err, RELAY_E_PROTOCOL, 0,
		    "receiver scan of %s/%s answered a frame that names no inventory of the guest "
		    "root",
		    base, rel);
		goto cleanup;
	}
	gio_add_transient(io, name);
	local = gio_scratch_path(io, "inventory-", ".json", err);
	if (local == NULL) {
		st = err->code;
		goto cleanup;
	}
	st = gio_pull(io, path, local, 0, "a guest inventory", err);
	if (st != RELAY_OK)
		goto cleanup;
	char got[65];
	uint64_t got_bytes = 0;
	st = sha256_file_hex(local, got, &got_bytes, err);
	if (st != RELAY_OK)
		goto cleanup;
	if (got_bytes != (uint64_t)bytes || strcmp(got, sha) != 0) {
		st = relay_error_set(
		    err, RELAY_E_INTEGRITY, 0,
		    "the inventory of %s/%s did not arrive intact (guest said %lld bytes, host got %llu)",
		    base, rel, (long long)bytes, (unsigned long long)got_bytes);
		goto cleanup;
	}
	size_t len = 0;
	st = fs_read_file(local, INVENTORY_MAX_BYTES, &data, &len, err);
	if (st != RELAY_OK)
		goto cleanup;
	char why[160];
	facts = jsonx_parse(data, len, NULL, why, sizeof why);
	if (!valid_facts(facts)) {
		st = relay_error_set(err, RELAY_E_PROTOCOL, 0,
		                     "the inventory of %s/%s is not a list of facts%s%s", base, rel,
		                     facts ? "" : ": ", facts ? "" : why);
		goto cleanup;
	}
	*facts_out = facts;
	facts = NULL;
cleanup:
	if (local)
		unlink(local);
	free(local);
	free(data);
	json_object_put(facts);
	json_object_put(frame);
	return st;
}

/* ---- archive pushes ------------------------------------------------------------- */

static relay_status archive_failure(struct archive *a, relay_error *err, const char *what)
{
	const char *msg = archive_error_string(a);
	int e = archive_errno(a);
	return relay_error_set(err, e == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO, e > 0 ? e : 0,
	                       "cannot write the staging archive (%s): %s", what,
	                       msg ? msg : "libarchive error");
}

static relay_status archive_header(struct archive *a, const char *name, uint64_t bytes, relay_error *err)
{
	struct archive_entry *entry = archive_entry_new();
	if (entry == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	archive_entry_update_pathname_utf8(entry, name);
	archive_entry_set_filetype(entry, AE_IFREG);
	archive_entry_set_perm(entry, 0600);
	archive_entry_set_uid(entry, 0);
	archive_entry_set_gid(entry, 0);
	archive_entry_set_size(entry, (la_int64_t)bytes);
	archive_entry_set_mtime(entry, time(NULL), 0);
	relay_status st = RELAY_OK;
	if (archive_write_header(a, entry) != ARCHIVE_OK)
		st = archive_failure(a, err, name);
	archive_entry_free(entry);
	return st;
}

/* Copies one member's bytes into the archive, hashing as it goes. */
static relay_status archive_member(struct archive *a, const gio_member *mb, int fd, unsigned char *buf,
                                   relay_error *err)
{
	sha256_ctx *ctx = sha256_new();
	if (ctx == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	relay_status st = RELAY_OK;
	uint64_t total = 0;
	for (;;) {
		ssize_t n = read(fd, buf, COPY_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			st = relay_error_set(err, RELAY_E_IO, errno, "cannot read %s: %s", mb->name,
			                     strerror(errno));
			goto cleanup;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		if (total > mb->bytes) {
			st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "staging source changed: %s",
			                     mb->name);
			goto cleanup;
		}
		sha256_update(ctx, buf, (size_t)n);
		if (archive_write_data(a, buf, (size_t)n) != n) {
			st = archive_failure(a, err, mb->name);
			goto cleanup;
		}
	}
	char hex[65];
	sha256_final(ctx, hex);
	ctx = NULL;
	if (total != mb->bytes || strcmp(hex, mb->sha256) != 0)
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "staging source changed: %s", mb->name);
cleanup:
	sha256_abort(ctx);
	return st;
}

static relay_status write_archive(const char *path, const gio_member *members, size_t count,
                                  gio_member_open_fn open_fn, void *open_ctx, uint64_t *archive_bytes,
                                  relay_error *err)
{
	relay_status st = RELAY_OK;
	struct archive *a = NULL;
	unsigned char *buf = malloc(COPY_CHUNK);
	json_object *index = json_object_new_array();
	char *index_text = NULL;
	int out = -1;
	bool created = false;
	if (buf == NULL || index == NULL) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	for (size_t i = 0; i < count; i++) {
		if (!evidence_archive_path_ok(members[i].name)) {
			st = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "not a safe archive name: %s",
			                     members[i].name);
			goto cleanup;
		}
		json_object *f = json_object_new_object();
		jsonx_add_str(f, "path", members[i].name);
		jsonx_add_int(f, "bytes", (int64_t)members[i].bytes);
		jsonx_add_str(f, "sha256", members[i].sha256);
		json_object_array_add(index, f);
	}
	index_text = jsonx_to_string(index, 0);
	out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (index_text == NULL || out < 0) {
		st = relay_error_set(err, RELAY_E_IO, errno, "cannot create the staging archive %s: %s", path,
		                     strerror(errno));
		goto cleanup;
	}
	created = true;
	a = archive_write_new();
	if (a == NULL || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_add_filter_none(a) != ARCHIVE_OK ||
	    archive_write_set_bytes_per_block(a, 10240) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
	    archive_write_open_fd(a, out) != ARCHIVE_OK) {
		st = a ? archive_failure(a, err, "setup")
		       : relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	size_t index_len = strlen(index_text);
	st = archive_header(a, EVIDENCE_ARCHIVE_INDEX_NAME, index_len, err);
	if (st != RELAY_OK)
		goto cleanup;
	if (archive_write_data(a, index_text, index_len) != (la_ssize_t)index_len) {
		st = archive_failure(a, err, EVIDENCE_ARCHIVE_INDEX_NAME);
		goto cleanup;
	}
	for (size_t i = 0; i < count; i++) {
		bool changed = false;
		char why[256];
		int fd = open_fn(open_ctx, i, &changed, why, sizeof why);
		if (fd < 0) {
			st = relay_error_set(err, changed ? RELAY_E_INTEGRITY : RELAY_E_IO, 0, "%s", why);
			goto cleanup;
		}
		st = archive_header(a, members[i].name, members[i].bytes, err);
		if (st == RELAY_OK)
			st = archive_member(a, &members[i], fd, buf, err);
		close(fd);
		if (st != RELAY_OK)
			goto cleanup;
	}
	if (archive_write_close(a) != ARCHIVE_OK) {
		st = archive_failure(a, err, "close");
		goto cleanup;
	}
	struct stat sb;
	if (fstat(out, &sb) == 0)
		*archive_bytes = (uint64_t)sb.st_size;
cleanup:
	if (a)
		archive_write_free(a);
	if (out >= 0)
		close(out);
	if (st != RELAY_OK && created)
		unlink(path);
	free(index_text);
	json_object_put(index);
	free(buf);
	return st;
}

relay_status gio_push_archive(guest_io *io, const gio_member *members, size_t count,
                              gio_member_open_fn open_fn, void *open_ctx, const char *dest, relay_error *err)
{
	relay_status st = RELAY_OK;
	char *local = gio_scratch_path(io, "push-", ".tar", err);
	char *remote = NULL;
	json_object *frame = NULL;
	if (local == NULL)
		return err->code;
	uint64_t archive_bytes = 0, data_bytes = 0;
	for (size_t i = 0; i < count; i++)
		data_bytes += members[i].bytes;
	st = write_archive(local, members, count, open_fn, open_ctx, &archive_bytes, err);
	if (st != RELAY_OK)
		goto cleanup;
	char hex[17];
	random_hex(hex, 16);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/.push-%s.tar", io->root, hex);
	remote = strbuf_detach(&sb, NULL);
	gio_add_transient(io, fs_basename(remote));
	st = gio_push(io, local, remote, 0, "a staging archive", NULL, err);
	if (st != RELAY_OK)
		goto cleanup;
	gio_note_transfer(io, "push", "staging archive", local, remote, archive_bytes, NULL, 1, "archive");
	const char *args[] = {"unpack", "--root", io->root, "--base", dest, remote, NULL};
	st = gio_receiver(io, args, gio_scan_timeout_ms(2 * data_bytes), &frame, err);
	if (st != RELAY_OK) {
		if (st == RELAY_E_REFUSED || st == RELAY_E_INVALID_ARGUMENT)
			st = RELAY_E_INTEGRITY;
		err->code = st;
		goto cleanup;
	}
	int64_t unpacked = -1;
	if (!jsonx_get_int(frame, "unpacked", &unpacked) || unpacked != (int64_t)count)
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                     "receiver unpack placed %lld of %zu files in %s", (long long)unpacked,
		                     count, dest);
cleanup:
	json_object_put(frame);
	if (local)
		unlink(local);
	free(local);
	free(remote);
	return st;
}

void gio_write_transfers(guest_io *io, const char *operation)
{
	if (io->transfers == NULL || json_object_array_length(io->transfers) == 0 || io->evidence == NULL)
		return;
	char errbuf[256];
	if (guest_ensure_evidence_dir(io->m, io->g, errbuf, sizeof errbuf) != 0)
		return;
	int64_t now = clock_now_ms();
	char at[25], hex[17];
	time_format_iso_millis(now, at);
	random_hex(hex, 16);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/host/transfers", io->evidence);
	relay_error err;
	if (fs_mkdir_p(strbuf_str(&sb), 0700, &err) != RELAY_OK) {
		log_warning("cannot record transfers of %s: %s", io->g->name, err.message);
		strbuf_free(&sb);
		return;
	}
	strbuf_printf(&sb, "/%lld-%s.json", (long long)now, hex);
	json_object *rec = json_object_new_object();
	jsonx_add_str(rec, "operation", operation);
	jsonx_add_str(rec, "guest", io->g->name);
	jsonx_add_str(rec, "at", at);
	jsonx_add(rec, "transfers", json_object_get(io->transfers));
	if (fs_write_json_durable(strbuf_str(&sb), rec, &err) != RELAY_OK)
		log_warning("cannot record transfers of %s: %s", io->g->name, err.message);
	json_object_put(rec);
	strbuf_free(&sb);
}

const char *gio_tool_code(relay_status status)
{
	switch (status) {
	case RELAY_E_INTEGRITY: return "integrity-failed";
	case RELAY_E_NO_SPACE: return "space-shortfall";
	default: return "transfer-failed";
	}
}

/* ---- supervised exec ------------------------------------------------------------ */

typedef struct watch {
	guest_io *io;
	gio_supervision *sv;
	relay_call *exec_call;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
} watch;

/* Runs `receiver cancel` once; true when it signalled the execution. */
static bool receiver_cancel(guest_io *io, const char *execution_id)
{
	const char *argv[] = {io->receiver, "cancel", "--root", io->root, "--execution", execution_id, NULL};
	relay_exec_result res;
	relay_error err;
	bool signalled = false;
	if (gio_exec_call(io, NULL, argv, NULL, 15000, 1 << 16, 0, &res, &err) == RELAY_OK &&
	    res.exit_code == 0) {
		json_object *frame = gio_parse_frame(res.out, res.out_len);
		jsonx_get_bool(frame, "signalled", &signalled);
		json_object_put(frame);
	} else {
		log_warning("guest %s: receiver cancel of %s did not run: %s", io->g->name, execution_id,
		            err.message[0] ? err.message : "nonzero exit");
	}
	gio_exec_result_free(&res);
	return signalled;
}

static void *watch_main(void *arg)
{
	watch *w = arg;
	gio_supervision *sv = w->sv;
	int64_t start = clock_monotonic_ms();
	int64_t next_tick = sv->tick_ms > 0 ? start + sv->tick_ms : 0;
	int64_t abort_at = 0, next_cancel_try = 0;
	bool concurrent = (w->io->traits & RELAY_TRANSPORT_CONCURRENT) != 0;
	pthread_mutex_lock(&w->lock);
	while (!w->done) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&w->cond, &w->lock, &ts);
		if (w->done)
			break;
		pthread_mutex_unlock(&w->lock);
		int64_t now = clock_monotonic_ms();
		if (next_tick && now >= next_tick && !sv->cancelled) {
			char msg[200];
			snprintf(msg, sizeof msg, "%s running for %lld s of its %lld s limit", sv->tick_what,
			         (long long)((now - start) / 1000), (long long)((sv->limit_ms + 999) / 1000));
			relay_call_progress(w->io->call, (double)(now - start) / 1000.0,
			                    (double)sv->limit_ms / 1000.0, msg, true);
			next_tick += sv->tick_ms;
		}
		if (!sv->cancelled && relay_call_is_cancelled(w->io->call)) {
			sv->cancelled = true;
			if (sv->cancel_execution && concurrent) {
				abort_at = now + sv->cancel_grace_ms;
				next_cancel_try = now;
			} else {
				relay_call_cancel(w->exec_call);
			}
		}
		if (sv->cancelled && abort_at) {
			if (!sv->receiver_cancel_signalled && now >= next_cancel_try) {
				sv->receiver_cancel_signalled = receiver_cancel(w->io, sv->cancel_execution);
				next_cancel_try = clock_monotonic_ms() + 500;
			}
			if (clock_monotonic_ms() >= abort_at) {
				relay_call_cancel(w->exec_call);
				abort_at = 0;
			}
		}
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

relay_status gio_exec_supervised(guest_io *io, gio_supervision *sv, const char *const *argv, const char *cwd,
                                 uint64_t timeout_ms, size_t max_output_bytes, unsigned flags,
                                 relay_exec_result *res, relay_error *err)
{
	sv->cancelled = false;
	sv->receiver_cancel_signalled = false;
	watch w;
	memset(&w, 0, sizeof w);
	w.io = io;
	w.sv = sv;
	w.exec_call = manager_internal_call(io->m, 0);
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	pthread_t thread;
	bool started = w.exec_call != NULL && pthread_create(&thread, NULL, watch_main, &w) == 0;
	relay_status st = exec_with_input(io, started ? w.exec_call : io->call, argv, cwd, timeout_ms,
	                                  max_output_bytes, flags, sv, res, err);
	if (started) {
		pthread_mutex_lock(&w.lock);
		w.done = true;
		pthread_cond_signal(&w.cond);
		pthread_mutex_unlock(&w.lock);
		pthread_join(thread, NULL);
	}
	if (!sv->cancelled && relay_call_is_cancelled(io->call))
		sv->cancelled = true;
	manager_internal_call_done(io->m, w.exec_call);
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);
	return st;
}
