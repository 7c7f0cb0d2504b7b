/* Receiver commands and guest inventories (spec/guest.md §3.4, §5.2); see guest_io.h. */
#include "guestio/guest_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "call/call.h"
#include "guestio/gio_internal.h"
#include "guestio/receiver_api.h"
#include "guestio/resident_calls.h"
#include "receiver_protocol.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/strbuf.h"

#define INVENTORY_MAX_BYTES ((size_t)256 << 20)
#define STDERR_TAIL_BYTES   600

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

void gio_sleep_ms_checked(relay_call *call, int64_t ms)
{
	int64_t until = clock_monotonic_ms() + ms;
	while (clock_monotonic_ms() < until && !relay_call_is_cancelled(call)) {
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
}

/* The receiver command through the transport, a transient failure retried. */
static relay_status exec_with_retries(guest_io *io, const char **argv, uint64_t timeout_ms,
                                      relay_exec_result *res, relay_error *err)
{
	for (int attempt = 1;; attempt++) {
		relay_error_clear(err);
		relay_status st = gio_exec(io, argv, NULL, timeout_ms, 1 << 20, 0, res, err);
		if (st != RELAY_E_TRANSIENT || attempt >= GIO_TRANSFER_ATTEMPTS ||
		    relay_call_is_cancelled(io->call))
			return st;
		gio_exec_result_free(res);
		gio_sleep_ms_checked(io->call, attempt * GIO_RETRY_WAIT_MS);
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
	/* On the resident channel when it is idle (resident_calls.h), else a
	 * transport exec. */
	st = gio_resident_command(io, args, timeout_ms, &res, err);
	if (st == RELAY_E_UNAVAILABLE)
		st = exec_with_retries(io, argv, timeout_ms, &res, err);
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
		relay_error err;
		/* Removal must work even after the call was cancelled. */
		relay_call *saved = io->call;
		io->call = NULL;
		if (gio_rcv_remove(io, (const char *const *)io->transients.items + start, i - start, &err) !=
		    RELAY_OK)
			log_warning("guest %s: cannot remove transient files: %s", io->g->name, err.message);
		io->call = saved;
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
	gio_file_frame inventory;
	char *local = NULL, *data = NULL;
	json_object *facts = NULL;
	relay_status st = gio_rcv_scan(io, base, rel, present ? GIO_SCAN_PRESENT : GIO_SCAN_ALL,
	                               gio_scan_timeout_ms(expected_bytes), &inventory, err);
	if (st != RELAY_OK)
		goto cleanup;
	const char *path = inventory.path;
	const char *sha = inventory.sha256;
	int64_t bytes = (int64_t)inventory.bytes;
	const char *name = transient_name(io, path, RECEIVER_TRANSIENT_INVENTORY);
	if (name == NULL) {
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
	gio_file_frame_free(&inventory);
	return st;
}
