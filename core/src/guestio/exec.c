/* Commands in the guest, plain and supervised (spec/guest.md §15); see guest_io.h. */
#include "guestio/guest_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "call/call.h"
#include "receiver_protocol.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"

/* ---- exec ----------------------------------------------------------------------- */

#ifdef RELAY_FAILPOINTS
/* "MCP_RELAY_FAILPOINTS=<the receiver entries of the relay's own setting>" for a
 * receiver command, or NULL when it names none: machine-local and ssh guests
 * start the receiver with a clean environment (docs/reliability.md §2). Test
 * builds only; the caller frees. */
char *gio_receiver_failpoints_env(void)
{
	const char *text = getenv("MCP_RELAY_FAILPOINTS");
	strbuf sb;
	strbuf_init(&sb);
	strbuf_puts(&sb, "MCP_RELAY_FAILPOINTS=");
	size_t prefix_len = sb.len;
	while (text && *text) {
		const char *end = strchr(text, ',');
		size_t len = end ? (size_t)(end - text) : strlen(text);
		if (len > 9 && strncmp(text, "receiver.", 9) == 0) {
			if (sb.len > prefix_len)
				strbuf_putc(&sb, ',');
			strbuf_append(&sb, text, len);
		}
		text = end ? end + 1 : NULL;
	}
	char *out = strbuf_ok(&sb) && sb.len > prefix_len ? strbuf_detach(&sb, NULL) : NULL;
	strbuf_free(&sb);
	return out;
}
#endif

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
#ifdef RELAY_FAILPOINTS
	char *fp_env =
	    io->receiver && strcmp(argv[0], io->receiver) == 0 ? gio_receiver_failpoints_env() : NULL;
	const char *fp_envp[] = {fp_env, NULL};
	req.envp = fp_env ? fp_envp : NULL;
#endif
	relay_status st =
	    io->plugin->transport.exec(io->plugin->state, io->conn, &req, call, flags, res, err);
#ifdef RELAY_FAILPOINTS
	free(fp_env);
#endif
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

/* ---- supervised exec ------------------------------------------------------------ */

typedef struct watch {
	guest_io *io;
	gio_supervision *sv;
	relay_call *exec_call;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
} watch;

bool gio_receiver_cancel(guest_io *io, const char *execution_id)
{
	const char *argv[] = {io->receiver, RECEIVER_CMD_CANCEL,    RECEIVER_OPT_ROOT,
	                      io->root,     RECEIVER_OPT_EXECUTION, execution_id,
	                      NULL};
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
				sv->receiver_cancel_signalled =
				    gio_receiver_cancel(w->io, sv->cancel_execution);
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
	w.exec_call = session_internal_call(io->m, 0);
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
	session_internal_call_done(io->m, w.exec_call);
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);
	return st;
}
