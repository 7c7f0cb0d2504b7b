/* Pushes and pulls with the transient-retry rule, transfer facts (spec/guest.md §3.5); see guest_io.h. */
#include "guestio/guest_io.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "guestio/gio_internal.h"
#include "guestio/resident_calls.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

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
		} else {
			/* A file below R comes on the resident channel when it is idle (resident_calls.h). */
			st = (flags & RELAY_XFER_TREE) ? RELAY_E_UNAVAILABLE
			                               : gio_resident_pull(io, remote, local, err);
			if (st == RELAY_OK) {
				gio_note_transfer(io, op, what, local, remote, 0, NULL, attempt, "channel");
				return RELAY_OK;
			}
			if (st == RELAY_E_UNAVAILABLE) {
				relay_error_clear(err);
				st = io->plugin->transport.pull(io->plugin->state, io->conn, remote, local,
				                                io->call, flags, NULL, err);
			}
		}
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
			gio_sleep_ms_checked(io->call, (int64_t)attempt * GIO_RETRY_WAIT_MS);
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

/* ---- the transport's facts against what was sent ------------------------------------ */

json_object *gio_fact_new(const char *path, uint64_t bytes, const char *sha256)
{
	json_object *f = json_object_new_object();
	jsonx_add_str(f, "path", path);
	jsonx_add_int(f, "bytes", (int64_t)bytes);
	jsonx_add_str(f, "sha256", sha256);
	return f;
}

static int fact_path_cmp(const void *a, const void *b)
{
	const char *x = jsonx_get_str(*(json_object *const *)a, "path");
	const char *y = jsonx_get_str(*(json_object *const *)b, "path");
	return strcmp(x ? x : "", y ? y : "");
}

/* The facts of `array` sorted by path (borrowed entries), or NULL. */
static json_object **sorted_facts(json_object *array, size_t n)
{
	json_object **v = calloc(n ? n : 1, sizeof *v);
	if (v == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		v[i] = json_object_array_get_idx(array, i);
	qsort(v, n, sizeof *v, fact_path_cmp);
	return v;
}

/* The first difference between two facts of one path, or NULL. */
static const char *fact_difference(json_object *got, json_object *sent)
{
	int64_t gb = -1, sb = -1;
	const char *gs = jsonx_get_str(got, "sha256"), *ss = jsonx_get_str(sent, "sha256");
	if (!jsonx_get_int(got, "bytes", &gb) || !jsonx_get_int(sent, "bytes", &sb) || gb != sb)
		return "its size";
	if (gs == NULL || ss == NULL || strcmp(gs, ss) != 0)
		return "its SHA-256";
	return NULL;
}

/* A path on one side only: reported but not sent (`reported`), or sent but
 * not reported; `next` is the other side's path at that place, if any. */
static relay_status one_side_only(bool reported, const char *path, const char *next, const char *what,
                                  size_t sent_count, size_t reported_count, relay_error *err)
{
	return relay_error_set(err, RELAY_E_PROTOCOL, 0,
	                       "the transport reports %s\"%s\" for %s, %s (%zu sent, %zu reported%s%s%s); "
	                       "the copy is not trusted",
	                       reported ? "" : "no ", path ? path : "?", what,
	                       reported ? "a file the core did not send" : "which the core sent", sent_count,
	                       reported_count,
	                       next ? (reported ? "; next sent: \"" : "; next reported: \"") : "",
	                       next ? next : "", next ? "\"" : "");
}

relay_status gio_facts_compare(json_object *got, json_object *sent, const char *what, relay_error *err)
{
	if (!json_object_is_type(got, json_type_array) || !json_object_is_type(sent, json_type_array))
		return relay_error_set(err, RELAY_E_PROTOCOL, 0,
		                       "the transport's facts for %s are not a list of files", what);
	size_t ng = json_object_array_length(got), ns = json_object_array_length(sent);
	json_object **g = sorted_facts(got, ng), **s = sorted_facts(sent, ns);
	relay_status st = RELAY_OK;
	if (g == NULL || s == NULL) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory comparing facts");
		goto cleanup;
	}
	for (size_t i = 0; i < ng || i < ns; i++) {
		int c = i >= ng ? 1 : i >= ns ? -1 : fact_path_cmp(&g[i], &s[i]);
		const char *gp = i < ng ? jsonx_get_str(g[i], "path") : NULL;
		const char *sp = i < ns ? jsonx_get_str(s[i], "path") : NULL;
		const char *diff = c == 0 ? fact_difference(g[i], s[i]) : NULL;
		if (c != 0)
			st = one_side_only(c < 0, c < 0 ? gp : sp, c < 0 ? sp : gp, what, ns, ng, err);
		else if (diff)
			st = relay_error_set(err, RELAY_E_PROTOCOL, 0,
			                     "the transport's facts for %s contradict what the core sent: "
			                     "\"%s\" differs in %s; the copy is not trusted",
			                     what, sp ? sp : "?", diff);
		if (st != RELAY_OK)
			break;
	}
cleanup:
	free(g);
	free(s);
	return st;
}

relay_status gio_push_checked_facts(guest_io *io, const char *local, const char *remote, const char *sha256,
                                    uint64_t bytes, const char *what, bool *checked_out, relay_error *err)
{
	*checked_out = false;
	bool want = (io->traits & RELAY_TRANSPORT_GUEST_FACTS) != 0;
	json_object *facts = NULL;
	relay_status st = gio_push(io, local, remote, 0, what, want ? &facts : NULL, err);
	if (st == RELAY_OK && facts) {
		json_object *sent = json_object_new_array();
		json_object_array_add(sent, gio_fact_new("", bytes, sha256));
		st = gio_facts_compare(facts, sent, what, err);
		json_object_put(sent);
		*checked_out = true;
	}
	json_object_put(facts);
	return st;
}
