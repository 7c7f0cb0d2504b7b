/* A guest_io session (begin, end, the scratch folder) and archive pushes
 * (evidence.md §5.3, guest.md §3.4); see guest_io.h. The other jobs of the
 * room: exec.c, receiver_cmd.c, transfer.c, frame.c. */
#include "guestio/guest_io.h"

#include <archive.h>
#include <archive_entry.h>
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
#include "mcp/call.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define COPY_CHUNK ((size_t)1 << 20)

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
