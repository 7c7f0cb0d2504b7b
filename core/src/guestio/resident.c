/* The resident receiver's channel of one guest (spec/guest.md §17); see
 * resident.h. */
#include "guestio/resident.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "guestio/frame.h"
#include "guestio/link.h"
#include "loader/loader.h"
#include "receiver_protocol.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"

/* The frame line of an answer is at most this long (as RUN_FRAME_MAX_OUTPUT_BYTES). */
#define RESIDENT_FRAME_MAX_BYTES ((size_t)1 << 20)
/* How long one read waits before the cancellation and progress are looked at. */
#define RESIDENT_READ_SLICE_MS 100
#define RESIDENT_OPEN_MS       30000

struct gio_resident {
	loaded_plugin *plugin;          /* the guest's transport plugin; borrowed */
	relay_transport_stream *stream; /* owned */
	int64_t last_used_ms;           /* relay clock of the last answer (or the open) */
};

bool gio_resident_possible(const guest_io *io)
{
	const relay_transport_ops *t = &io->plugin->transport;
	/* MCP_RELAY_RESIDENT=off keeps runs one-shot (benchmarks compare the paths). */
	const char *knob = getenv(GIO_RESIDENT_ENV);
	if (knob && strcmp(knob, "off") == 0)
		return false;
	return (io->traits & RELAY_TRANSPORT_STREAM) && t->stream_open && t->stream_write && t->stream_read &&
	       t->stream_close;
}

static void resident_free(gio_resident *r)
{
	if (r == NULL)
		return;
	if (r->stream)
		r->plugin->transport.stream_close(r->plugin->state, r->stream, 0);
	free(r);
}

/* Takes the guest's channel out of its record (NULL when it has none),
 * once a step download that has it for one request gives it back. */
static gio_resident *resident_take(session_manager *m, guest *g)
{
	(void)m;
	slice_lock(g->link);
	while (g->link->resident_lent)
		slice_wait(g->link);
	gio_resident *r = g->link->resident;
	g->link->resident = NULL;
	slice_unlock(g->link);
	return r;
}

void gio_resident_close(session_manager *m, guest *g)
{
	resident_free(resident_take(m, g));
}

/* True when the open channel can take a request: nothing unread, not at
 * end of file, not idle long enough to race serve's own idle end. */
static bool resident_alive(gio_resident *r)
{
	if (clock_monotonic_ms() - r->last_used_ms > GIO_RESIDENT_REOPEN_IDLE_MS)
		return false;
	char byte;
	size_t got = 0;
	relay_error err;
	relay_status st =
	    r->plugin->transport.stream_read(r->plugin->state, r->stream, &byte, 1, 0, 0, &got, &err);
	return st == RELAY_E_TIMEOUT;
}

/* The environment of `serve`: the receiver's failpoints (test builds) and
 * a shorter idle limit when the relay's own environment sets one. */
static void serve_env(char **fp, char **idle, const char **envp)
{
	size_t n = 0;
	*fp = NULL;
	*idle = NULL;
#ifdef RELAY_FAILPOINTS
	*fp = gio_receiver_failpoints_env();
	if (*fp)
		envp[n++] = *fp;
#endif
	const char *idle_ms = getenv(RECEIVER_SERVE_IDLE_ENV);
	if (idle_ms && *idle_ms) {
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "%s=%s", RECEIVER_SERVE_IDLE_ENV, idle_ms);
		*idle = strbuf_detach(&sb, NULL);
		if (*idle)
			envp[n++] = *idle;
	}
	envp[n] = NULL;
}

relay_status gio_resident_ensure(guest_io *io, relay_error *err)
{
	gio_resident *r = resident_take(io->m, io->g);
	if (r && resident_alive(r)) {
		slice_lock(io->g->link);
		io->g->link->resident = r;
		slice_unlock(io->g->link);
		return RELAY_OK;
	}
	resident_free(r);
	if (!gio_resident_possible(io))
		return relay_error_set(err, RELAY_E_UNSUPPORTED, 0,
		                       "the transport %s has no long-lived stream",
		                       io->plugin->descriptor.name);
	const char *argv[] = {io->receiver, RECEIVER_CMD_SERVE, RECEIVER_OPT_ROOT, io->root, NULL};
	const char *envp[3];
	char *fp_env, *idle_env;
	serve_env(&fp_env, &idle_env, envp);
	relay_exec_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = argv;
	req.envp = envp[0] ? envp : NULL;
	req.timeout_ms = RESIDENT_OPEN_MS;
	relay_transport_stream *stream = NULL;
	relay_error_clear(err);
	relay_status st =
	    io->plugin->transport.stream_open(io->plugin->state, io->conn, &req, io->call, 0, &stream, err);
	free(fp_env);
	free(idle_env);
	if (st == RELAY_OK && (r = calloc(1, sizeof *r)) == NULL) {
		io->plugin->transport.stream_close(io->plugin->state, stream, 0);
		st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory keeping the channel");
	}
	if (st != RELAY_OK) {
		if (err->message[0] == '\0')
			relay_error_set(err, st, 0, "the transport could not start receiver serve: %s",
			                relay_status_str(st));
		return st;
	}
	r->plugin = io->plugin;
	r->stream = stream;
	r->last_used_ms = clock_monotonic_ms();
	slice_lock(io->g->link);
	io->g->link->resident = r;
	slice_unlock(io->g->link);
	log_debug("guest %s: receiver serve started on a %s stream", io->g->name,
	          io->plugin->descriptor.name);
	return RELAY_OK;
}

/* How many bytes the answer in `b` needs in all, once its frame line is
 * there: 0 while the line is incomplete, (size_t)-1 when it is no frame
 * (the channel is out of step). */
static size_t answer_size(const strbuf *b)
{
	const char *nl = b->len ? memchr(b->data, '\n', b->len) : NULL;
	if (nl == NULL)
		return b->len > RESIDENT_FRAME_MAX_BYTES ? (size_t)-1 : 0;
	size_t line = (size_t)(nl - b->data) + 1;
	json_object *frame = jsonx_parse(b->data, line - 1, NULL, NULL, 0);
	if (!json_object_is_type(frame, json_type_object)) {
		json_object_put(frame);
		return (size_t)-1;
	}
	size_t need = line;
	json_object *parts = jsonx_get_array(frame, RECEIVER_FRAME_PARTS);
	size_t n = parts ? json_object_array_length(parts) : 0;
	for (size_t i = 0; i < n; i++) {
		int64_t bytes = -1;
		if (!jsonx_get_int(json_object_array_get_idx(parts, i), RECEIVER_PART_KEY_BYTES, &bytes) ||
		    bytes < 0 ||
		    (uint64_t)bytes > RECEIVER_RECEIPT_MAX_BYTES + RECEIVER_ATTACH_IMAGE_MAX_BYTES) {
			need = (size_t)-1;
			break;
		}
		need += (size_t)bytes;
	}
	json_object_put(frame);
	return need;
}

/* While an answer is awaited: progress, and a cancellation's `receiver
 * cancel`. False when the grace after a cancellation has run out. */
static bool resident_watch(guest_io *io, gio_supervision *sv, int64_t start, int64_t *next_tick,
                           int64_t *abort_at, int64_t *next_cancel_try)
{
	int64_t now = clock_monotonic_ms();
	if (sv->tick_ms > 0 && now >= *next_tick && !sv->cancelled) {
		char msg[200];
		snprintf(msg, sizeof msg, "%s running for %lld s of its %lld s limit", sv->tick_what,
		         (long long)((now - start) / 1000), (long long)((sv->limit_ms + 999) / 1000));
		relay_call_progress(io->call, (double)(now - start) / 1000.0, (double)sv->limit_ms / 1000.0,
		                    msg, true);
		*next_tick += sv->tick_ms;
	}
	if (!sv->cancelled && relay_call_is_cancelled(io->call)) {
		sv->cancelled = true;
		*abort_at = now + sv->cancel_grace_ms;
		*next_cancel_try = now;
	}
	if (!sv->cancelled)
		return true;
	if (sv->cancel_execution && !sv->receiver_cancel_signalled && now >= *next_cancel_try) {
		sv->receiver_cancel_signalled = gio_receiver_cancel(io, sv->cancel_execution);
		*next_cancel_try = clock_monotonic_ms() + 500;
	}
	return clock_monotonic_ms() < *abort_at;
}

/* Reads one whole answer into `b`; *extra_out tells whether more than
 * the answer arrived (the channel is then out of step). */
static gio_resident_end resident_read_answer(guest_io *io, gio_resident *r, gio_supervision *sv,
                                             uint64_t limit_ms, strbuf *b, bool *extra_out, relay_error *err)
{
	int64_t start = clock_monotonic_ms();
	int64_t deadline = start + (int64_t)limit_ms;
	int64_t next_tick = start + sv->tick_ms, abort_at = 0, next_cancel_try = 0;
	size_t need = 0;
	char chunk[65536];
	for (;;) {
		if (need == 0)
			need = answer_size(b);
		if (need == (size_t)-1) {
			relay_error_set(err, RELAY_E_PROTOCOL, 0,
			                "receiver serve answered something that is no frame");
			return GIO_RESIDENT_BROKEN;
		}
		if (need && b->len >= need) {
			*extra_out = b->len > need;
			b->len = need;
			if (*extra_out)
				log_warning("guest %s: receiver serve wrote %zu bytes past its answer; the "
				            "channel is "
				            "closed",
				            io->g->name, b->len - need);
			return GIO_RESIDENT_ANSWERED;
		}
		if (!resident_watch(io, sv, start, &next_tick, &abort_at, &next_cancel_try)) {
			relay_error_set(err, RELAY_E_CANCELLED, 0,
			                "cancelled; receiver serve did not answer in the grace");
			return GIO_RESIDENT_CANCELLED;
		}
		if (clock_monotonic_ms() >= deadline) {
			relay_error_set(err, RELAY_E_TIMEOUT, 0,
			                "receiver serve did not answer within %llu ms",
			                (unsigned long long)limit_ms);
			return GIO_RESIDENT_TIMED_OUT;
		}
		size_t got = 0;
		relay_status st = r->plugin->transport.stream_read(
		    r->plugin->state, r->stream, chunk, sizeof chunk, RESIDENT_READ_SLICE_MS, 0, &got, err);
		if (st == RELAY_E_TIMEOUT)
			continue;
		if (st != RELAY_OK || got == 0) {
			if (st == RELAY_OK)
				relay_error_set(err, RELAY_E_INDETERMINATE, 0,
				                "the channel to receiver serve closed before its answer");
			return GIO_RESIDENT_BROKEN;
		}
		strbuf_append(b, chunk, got);
		if (!strbuf_ok(b)) {
			relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory reading the answer");
			return GIO_RESIDENT_BROKEN;
		}
	}
}

/* One request on r and its whole answer; *keep_out is false when the
 * channel can take no further request (not sent whole, broken, out of
 * step). A run's request passes the run's failpoints (docs/reliability.md);
 * a step download's does not. */
static gio_resident_end resident_exchange(guest_io *io, gio_resident *r, gio_supervision *sv,
                                          const void *request, size_t len, uint64_t limit_ms, bool is_run,
                                          char **answer_out, size_t *answer_len, bool *keep_out,
                                          relay_error *err)
{
	*answer_out = NULL;
	*answer_len = 0;
	*keep_out = false;
	sv->cancelled = false;
	sv->receiver_cancel_signalled = false;
	if (is_run)
		RELAY_FAILPOINT("run.resident.before-send");
	relay_status st = r->plugin->transport.stream_write(r->plugin->state, r->stream, request, len,
	                                                    GIO_RESIDENT_WRITE_MS, 0, err);
	if (st != RELAY_OK)
		return GIO_RESIDENT_NOT_SENT;
	if (is_run)
		RELAY_FAILPOINT("run.resident.after-send");
	strbuf b = STRBUF_INIT;
	bool extra = false;
	gio_resident_end end = resident_read_answer(io, r, sv, limit_ms, &b, &extra, err);
	if (end == GIO_RESIDENT_ANSWERED) {
		*keep_out = !extra;
		*answer_len = b.len;
		*answer_out = strbuf_detach(&b, NULL);
		r->last_used_ms = clock_monotonic_ms();
		if (is_run)
			RELAY_FAILPOINT("run.resident.after-answer");
	}
	strbuf_free(&b);
	return end;
}

gio_resident_end gio_resident_request(guest_io *io, gio_supervision *sv, const void *request, size_t len,
                                      uint64_t limit_ms, char **answer_out, size_t *answer_len,
                                      relay_error *err)
{
	*answer_out = NULL;
	*answer_len = 0;
	gio_resident *r = resident_take(io->m, io->g);
	if (r == NULL) {
		relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "guest %s has no open channel", io->g->name);
		return GIO_RESIDENT_NOT_SENT;
	}
	bool keep = false;
	gio_resident_end end =
	    resident_exchange(io, r, sv, request, len, limit_ms, true, answer_out, answer_len, &keep, err);
	if (!keep) {
		resident_free(r);
		return end;
	}
	slice_lock(io->g->link);
	io->g->link->resident = r; /* the guest's queue lets no other call open one meanwhile */
	slice_unlock(io->g->link);
	return end;
}

gio_resident_end gio_resident_lend(guest_io *io, const void *request, size_t len, uint64_t limit_ms,
                                   char **answer_out, size_t *answer_len, relay_error *err)
{
	*answer_out = NULL;
	*answer_len = 0;
	gio_link *link = io->g ? io->g->link : NULL;
	if (link == NULL) { /* no guest record (a guest_io made for one command) */
		relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "no guest channel");
		return GIO_RESIDENT_NOT_SENT;
	}
	slice_lock(link);
	gio_resident *r = link->resident;
	bool idle = r && !link->resident_lent && !link->resident_no_commands &&
	            clock_monotonic_ms() - r->last_used_ms <= GIO_RESIDENT_REOPEN_IDLE_MS;
	if (idle)
		link->resident_lent = true;
	slice_unlock(link);
	if (!idle) {
		relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "guest %s has no idle channel", io->g->name);
		return GIO_RESIDENT_NOT_SENT;
	}
	gio_supervision sv;
	memset(&sv, 0, sizeof sv);
	bool keep = false;
	gio_resident_end end =
	    resident_exchange(io, r, &sv, request, len, limit_ms, false, answer_out, answer_len, &keep, err);
	bool refused = end == GIO_RESIDENT_ANSWERED && gio_run_answer_refused(*answer_out, *answer_len);
	slice_lock(link);
	link->resident_lent = false;
	if (refused)
		link->resident_no_commands = true;
	if (!keep)
		link->resident = NULL;
	slice_broadcast(link);
	slice_unlock(link);
	if (!keep)
		resident_free(r);
	if (refused) {
		log_info(
		    "guest %s: receiver serve refused a step download's request (%.*s); its downloads use "
		    "the transport",
		    io->g->name, (int)(*answer_len > 200 ? 200 : *answer_len), *answer_out);
		free(*answer_out);
		*answer_out = NULL;
		*answer_len = 0;
		relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "receiver serve refused the request");
		return GIO_RESIDENT_NOT_SENT;
	}
	return end;
}
