/*
 * Reaching the guest for an image delivery (image_guest.h).
 */
#include "delivery/image_guest.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "call/call.h"
#include "delivery/downloads.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"

#define CONFIRM_TIMEOUT_MS 10000 /* each identity check of the machine */

/* ---- the guest ----------------------------------------------------------------------- */

/* spec/images.md §5 last item: before a guest pull, the guest must still be the
 * one the image belongs to. Then the transport is opened. */
bool idl_confirm_guest(dctx *c)
{
	if (c->guest_confirmed)
		return true;
	if (dctx_out_of_time(c, "confirming the guest"))
		return false;
	session_wait_startup(c->m);
	loaded_plugin *machine = c->m->backends->plugins[SLOT_MACHINE];
	char *lease = guest_lease_text(c->m, c->g);
	relay_error err;
	memset(&err, 0, sizeof err);
	if (lease == NULL) {
		dctx_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_GUEST_GONE);
		return false;
	}
	bool ok = true;
	if (machine && machine->machine.inspect) {
		int64_t limit =
		    dctx_remaining_ms(c) < CONFIRM_TIMEOUT_MS ? dctx_remaining_ms(c) : CONFIRM_TIMEOUT_MS;
		relay_call *sub = session_internal_call(c->m, limit);
		char *answer = NULL;
		relay_status st = machine->machine.inspect(machine->state, lease, sub, 0, &answer, &err);
		session_internal_call_done(c->m, sub);
		json_object *doc = answer ? jsonx_parse_str(answer, NULL, 0) : NULL;
		free(answer);
		if (st == RELAY_E_NOT_FOUND) {
			dctx_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_GUEST_GONE);
			ok = false;
		} else if (st != RELAY_OK) {
			dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
			            "cannot confirm that guest %s still exists before pulling its image: %s",
			            c->name, err.message[0] ? err.message : relay_status_str(st));
			ok = false;
		} else if (doc && jsonx_get_str(doc, "purpose") &&
		           !idl_str_eq(jsonx_get_str(doc, "purpose"), c->purpose)) {
			dctx_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
			            "the machine behind guest %s now holds lease purpose %s, not %s; the "
			            "image belongs to "
			            "another lease",
			            c->name, jsonx_get_str(doc, "purpose"), c->purpose);
			ok = false;
		}
		json_object_put(doc);
	}
	if (ok && machine && machine->machine.health) {
		int64_t limit =
		    dctx_remaining_ms(c) < CONFIRM_TIMEOUT_MS ? dctx_remaining_ms(c) : CONFIRM_TIMEOUT_MS;
		relay_call *sub = session_internal_call(c->m, limit);
		memset(&err, 0, sizeof err);
		relay_status st = machine->machine.health(machine->state, sub, 0, NULL, &err);
		session_internal_call_done(c->m, sub);
		if (st != RELAY_OK) {
			dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
			            "the machine backend of guest %s failed its identity check: %s", c->name,
			            err.message[0] ? err.message : relay_status_str(st));
			ok = false;
		}
	}
	free(lease);
	if (!ok)
		return false;
	memset(&err, 0, sizeof err);
	if (gio_begin(&c->io, c->m, c->g, c->call, &err) != RELAY_OK) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		            "cannot reach guest %s through its transport: %s", c->name, err.message);
		return false;
	}
	c->io_open = true;
	c->guest_confirmed = true;
	downloads_guest_reached(c->m, c->g);
	return true;
}

static bool transient_failure(relay_status st, const relay_error *err)
{
	if (st == RELAY_E_TRANSIENT || st == RELAY_E_TIMEOUT || st == RELAY_E_INDETERMINATE ||
	    st == RELAY_E_UNAVAILABLE)
		return true;
	if (st == RELAY_E_IO && (err->sys_errno == ECONNRESET || err->sys_errno == EPIPE ||
	                         err->sys_errno == ECONNREFUSED || err->sys_errno == ETIMEDOUT))
		return true;
	if (st == RELAY_E_IO || st == RELAY_E_PROTOCOL)
		return gio_transient(st, err->message);
	return false;
}

/* One byte transfer from the guest within the budget and the deadline
 * (spec/images.md §6): transient failures are tried again at once while
 * attempts are left; lasting ones end the delivery with their status.
 * `local` must not exist; on failure nothing is left there. */
bool idl_guest_pull(dctx *c, const char *remote, const char *local, const char *what, uint64_t max_bytes)
{
	if (!idl_confirm_guest(c))
		return false;
	for (;;) {
		if (dctx_out_of_time(c, what))
			return false;
		if (c->attempts_left <= 0) {
			dctx_status(
			    c, IMAGE_STATUS_TRANSFER_FAILED,
			    "the %d transfer attempts of this delivery are used up (last failure, %s: %s); "
			    "ask "
			    "relay_image again by the same imageId or selector, never by repeating the input",
			    IMAGE_DELIVERY_ATTEMPTS, what,
			    c->last_transfer_error[0] ? c->last_transfer_error : "none recorded");
			return false;
		}
		c->attempts_left--;
		relay_call *sub = session_internal_call(c->m, dctx_remaining_ms(c));
		relay_error err;
		memset(&err, 0, sizeof err);
		char *facts = NULL;
		relay_status st = c->io.plugin->transport.pull(c->io.plugin->state, c->io.conn, remote, local,
		                                               sub, 0, &facts, &err);
		bool sub_cancelled = relay_call_is_cancelled(sub);
		session_internal_call_done(c->m, sub);
		free(facts);
		if (st == RELAY_OK) {
			struct stat sb;
			if (lstat(local, &sb) != 0 || !S_ISREG(sb.st_mode)) {
				dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
				            "the transport reported %s pulled, but no regular file arrived",
				            what);
				return false;
			}
			if ((uint64_t)sb.st_size > max_bytes) {
				unlink(local);
				dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
				            "%s is %lld bytes, more than the %" PRIu64
				            " bytes allowed; it was discarded",
				            what, (long long)sb.st_size, max_bytes);
				return false;
			}
			return true;
		}
		relay_error ignored;
		fs_remove_tree(local, &ignored);
		snprintf(c->last_transfer_error, sizeof c->last_transfer_error, "%s",
		         err.message[0] ? err.message : relay_status_str(st));
		if (st == RELAY_E_CANCELLED || sub_cancelled) {
			dctx_out_of_time(c, what);
			dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "pulling %s was cancelled: %s", what,
			            c->last_transfer_error);
			return false;
		}
		if (transient_failure(st, &err)) {
			log_info("relay_image: transient failure pulling %s from %s (%d attempt%s left): %s",
			         what, c->name, c->attempts_left, c->attempts_left == 1 ? "" : "s",
			         c->last_transfer_error);
			continue;
		}
		switch (st) {
		case RELAY_E_UNSAFE_PATH:
			dctx_status(c, IMAGE_STATUS_UNSAFE_PATH,
			            "the guest answered an unsafe path for %s: %s", what,
			            c->last_transfer_error);
			break;
		case RELAY_E_NOT_FOUND:
			dctx_status(c, IMAGE_STATUS_IMAGE_MISSING, "%s is not in the guest: %s", what,
			            c->last_transfer_error);
			break;
		case RELAY_E_INTEGRITY:
			dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s failed its transfer check: %s",
			            what, c->last_transfer_error);
			break;
		default:
			dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
			            "%s could not be pulled (not retried: %s)", what, c->last_transfer_error);
			break;
		}
		return false;
	}
}

/* A scratch path for pulled metadata (malloc'd). */
char *idl_scratch_path(dctx *c, const char *prefix, const char *suffix)
{
	relay_error err;
	char *p = gio_scratch_path(&c->io, prefix, suffix, &err);
	if (p == NULL)
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "no host scratch space for the delivery: %s",
		            err.message);
	return p;
}

/* Pulls a guest metadata file (receipt, action record, journal) of at most
 * 4 MiB and parses it (`jsonl`: returns the raw text in *text_out instead). */
bool idl_guest_metadata(dctx *c, const char *remote, const char *what, json_object **obj_out, char **text_out)
{
	if (obj_out)
		*obj_out = NULL;
	if (text_out)
		*text_out = NULL;
	if (!idl_confirm_guest(c))
		return false;
	char *local = idl_scratch_path(c, "meta-", ".json");
	if (local == NULL)
		return false;
	bool ok = idl_guest_pull(c, remote, local, what, IMAGE_DELIVERY_METADATA_BYTES);
	if (ok) {
		relay_error err;
		char *data = NULL;
		size_t len = 0;
		if (fs_read_file(local, IMAGE_DELIVERY_METADATA_BYTES, &data, &len, &err) != RELAY_OK) {
			dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot read %s after pulling it: %s",
			            what, err.message);
			ok = false;
		} else if (text_out) {
			*text_out = data;
			data = NULL;
		} else {
			char why[128];
			json_object *obj = jsonx_parse(data, len, NULL, why, sizeof why);
			if (!json_object_is_type(obj, json_type_object)) {
				json_object_put(obj);
				dctx_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
				            "%s pulled from the guest is not a JSON object (%s)", what, why);
				ok = false;
			} else {
				*obj_out = obj;
			}
		}
		free(data);
	}
	relay_error ignored;
	fs_remove_tree(local, &ignored);
	free(local);
	return ok;
}

/* Waits for the execution's step download when it is queued or running
 * (spec/images.md §7 step 4). False (status set) when the deadline passed or the
 * call was cancelled first. */
bool idl_wait_for_step(dctx *c, const char *execution_id)
{
	if (c->closed)
		return true;
	downloads_wait_result w = downloads_expedite(c->m, c->g, execution_id, c->deadline_mono_ms, c->call);
	if (w == DOWNLOADS_WAIT_DEADLINE || w == DOWNLOADS_WAIT_CANCELLED) {
		dctx_out_of_time(c, "waiting for the step's background download");
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		            "the background download of %s did not finish within the delivery's deadline",
		            execution_id);
		return false;
	}
	return true;
}
