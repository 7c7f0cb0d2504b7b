/* A guest_io session (begin, end, the scratch folder) and archive pushes
 * (spec/evidence.md §5.3, spec/guest.md §3.4); see guest_io.h. The other jobs of the
 * room: exec.c, receiver_cmd.c, transfer.c, frame.c. */
#include "guestio/guest_io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "call/call.h"
#include "evidence/archive.h"
#include "guestio/link.h"
#include "guestio/receiver_api.h"
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

relay_status gio_begin(guest_io *io, session_manager *m, guest *g, relay_call *call, relay_error *err)
{
	memset(io, 0, sizeof *io);
	loaded_plugin *plugin = NULL;
	relay_transport_conn *conn = NULL;
	relay_status st = gio_link_transport(m, g, &plugin, &conn, err);
	if (st != RELAY_OK)
		return st;
	io->m = m;
	io->g = g;
	io->call = call;
	io->plugin = plugin;
	io->conn = conn;
	io->traits = plugin->transport.traits;
	session_lock(m);
	io->root = g->guest_root ? strdup(g->guest_root) : NULL;
	io->evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
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
	session_lock(io->m);
	char *dir = io->g->dir ? strdup(io->g->dir) : NULL;
	session_unlock(io->m);
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

/* The caller's opener, in the form evidence_archive_write_members takes. */
typedef struct member_opener {
	gio_member_open_fn open_fn;
	void *open_ctx;
} member_opener;

static int open_member(void *ctx, size_t index, relay_error *err)
{
	const member_opener *o = ctx;
	bool changed = false;
	char why[256];
	int fd = o->open_fn(o->open_ctx, index, &changed, why, sizeof why);
	if (fd < 0)
		relay_error_set(err, changed ? RELAY_E_INTEGRITY : RELAY_E_IO, 0, "%s", why);
	return fd;
}

static relay_status write_archive(const char *path, const gio_member *members, size_t count,
                                  gio_member_open_fn open_fn, void *open_ctx, uint64_t *archive_bytes,
                                  relay_error *err)
{
	static const evidence_archive_write_options staging = {
	    .what = "the staging archive", .changed_reason = "staging source changed", .sync = false};
	evidence_archive_member *list = calloc(count ? count : 1, sizeof *list);
	if (list == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	for (size_t i = 0; i < count; i++)
		list[i] = (evidence_archive_member){members[i].name, members[i].bytes, members[i].sha256, -1};
	member_opener opener = {open_fn, open_ctx};
	relay_status st = evidence_archive_write_members(path, list, count, open_member, &opener, &staging,
	                                                 archive_bytes, NULL, err);
	free(list);
	return st;
}

relay_status gio_push_archive(guest_io *io, const gio_member *members, size_t count,
                              gio_member_open_fn open_fn, void *open_ctx, const char *dest, relay_error *err)
{
	relay_status st = RELAY_OK;
	char *local = gio_scratch_path(io, "push-", ".tar", err);
	char *remote = NULL;
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
	int64_t unpacked = -1;
	st = gio_rcv_unpack(io, dest, remote, gio_scan_timeout_ms(2 * data_bytes), &unpacked, err);
	if (st != RELAY_OK) {
		if (st == RELAY_E_REFUSED || st == RELAY_E_INVALID_ARGUMENT)
			st = RELAY_E_INTEGRITY;
		err->code = st;
		goto cleanup;
	}
	if (unpacked != (int64_t)count)
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                     "receiver unpack placed %lld of %zu files in %s", (long long)unpacked,
		                     count, dest);
cleanup:
	if (local)
		unlink(local);
	free(local);
	free(remote);
	return st;
}
