#include "ssh_exec.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_kit/buf.h"
#include "ssh_scripts.h"
#include "ssh_session.h"
#include "ssh_spawn.h"

#define EXEC_KNOWN_FLAGS         (RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL | RELAY_EXEC_STDIO_BYTES)
#define EXEC_NOISE_KEEP          4096
#define EXEC_KILL_TIMEOUT_MS     30000
#define EXEC_DRAIN_AFTER_KILL_MS 10000
/* After the end line, output of what the command left running is read this
 * long at most (spec/guest.md §16.1 item 2). */
#define EXEC_DRAIN_AFTER_END_MS 250
#define EXEC_STDOUT_DEFAULT     ((size_t)64 << 20)

/* Everything read from one exec's ssh. */
typedef struct exec_state {
	char marker[48]; /* "\036relay <token> " */
	size_t marker_len;
	size_t matched; /* bytes of the marker matched at the end of stdout so far */
	bool in_event;  /* reading the rest of a marker line */
	char event[64];
	size_t event_len;

	bool started;
	long pgid;
	bool ended;
	int end_rc;
	int end_sweep;
	bool nocwd;

	/* Output in arrival order with a tag per byte (1 stdout, 2 stderr). */
	char *bytes;
	unsigned char *tags;
	size_t len;
	size_t alloc;
	size_t limit;
	bool keep_tail;
	bool overflowed;
	bool oom;

	rk_buf noise; /* stderr before the wrapper started (ssh's own messages) */
} exec_state;

static void capture_compact(exec_state *st)
{
	if (st->len <= st->limit)
		return;
	size_t drop = st->len - st->limit;
	memmove(st->bytes, st->bytes + drop, st->limit);
	memmove(st->tags, st->tags + drop, st->limit);
	st->len = st->limit;
	st->overflowed = true;
}

static void capture_add(exec_state *st, const char *data, size_t n, unsigned char tag)
{
	if (st->oom || n == 0)
		return;
	if (!st->keep_tail) {
		size_t room = st->limit - st->len;
		if (n > room) {
			n = room;
			st->overflowed = true;
		}
		if (n == 0)
			return;
	}
	if (st->len + n > st->alloc) {
		size_t want = st->alloc ? st->alloc : 4096;
		while (want < st->len + n)
			want *= 2;
		char *b = realloc(st->bytes, want);
		if (b)
			st->bytes = b;
		unsigned char *t = realloc(st->tags, want);
		if (t)
			st->tags = t;
		if (!b || !t) {
			st->oom = true;
			return;
		}
		st->alloc = want;
	}
	memcpy(st->bytes + st->len, data, n);
	memset(st->tags + st->len, tag, n);
	st->len += n;
	/* With KEEP_TAIL the buffer holds at most twice the limit. */
	if (st->keep_tail && st->len > 2 * st->limit + 65536)
		capture_compact(st);
}

static void emit_out(exec_state *st, const char *data, size_t n)
{
	if (st->started && !st->ended)
		capture_add(st, data, n, 1);
	/* Before the start line: the login shell's chatter; after the end
	 * line: a process that escaped the group. Neither is the command's. */
}

static void handle_event(exec_state *st)
{
	st->event[st->event_len] = '\0';
	long a = 0, b = 0;
	if (!st->started && sscanf(st->event, "start %ld", &a) == 1) {
		st->started = true;
		st->pgid = a;
	} else if (st->started && !st->ended && sscanf(st->event, "end %ld %ld", &a, &b) == 2) {
		st->ended = true;
		st->end_rc = (int)a;
		st->end_sweep = (int)b;
	} else if (st->started && strcmp(st->event, "nocwd") == 0) {
		st->nocwd = true;
	}
}

static void on_out(void *ctx, const char *data, size_t len)
{
	exec_state *st = ctx;
	size_t i = 0;
	while (i < len) {
		if (st->in_event) {
			char c = data[i++];
			if (c == '\n') {
				st->in_event = false;
				handle_event(st);
			} else if (st->event_len + 1 < sizeof st->event) {
				st->event[st->event_len++] = c;
			}
			continue;
		}
		if (st->matched == 0) {
			const char *p = memchr(data + i, st->marker[0], len - i);
			size_t n = p ? (size_t)(p - (data + i)) : len - i;
			emit_out(st, data + i, n);
			i += n;
			if (p == NULL)
				break;
			st->matched = 1;
			i++;
			continue;
		}
		if (data[i] == st->marker[st->matched]) {
			st->matched++;
			i++;
			if (st->matched == st->marker_len) {
				st->matched = 0;
				st->in_event = true;
				st->event_len = 0;
			}
		} else {
			/* Not our marker after all: the held bytes were output. */
			emit_out(st, st->marker, st->matched);
			st->matched = 0;
		}
	}
}

static void on_err(void *ctx, const char *data, size_t len)
{
	exec_state *st = ctx;
	if (st->started) {
		capture_add(st, data, len, 2);
		return;
	}
	rk_buf_append(&st->noise, data, len);
	if (st->noise.len > 2 * EXEC_NOISE_KEEP)
		rk_buf_drop_front(&st->noise, st->noise.len - EXEC_NOISE_KEEP);
}

static bool valid_env_entry(const char *kv)
{
	const char *eq = strchr(kv, '=');
	if (eq == NULL || eq == kv)
		return false;
	for (const char *p = kv; p < eq; p++) {
		bool alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_';
		if (!alpha && !(p > kv && *p >= '0' && *p <= '9'))
			return false;
	}
	return true;
}

/* The text the wrapper evaluates: cwd, exports, argv, the go line; with
 * standard input bytes, a newline after the go line and then those bytes.
 * *len_out receives the length (the bytes may hold NULs). */
static char *command_text(const relay_exec_request *req, const char *token, bool with_stdin, size_t *len_out)
{
	rk_buf b = RK_BUF_INIT;
	if (req->cwd) {
		rk_buf_puts(&b, "cd -- ");
		rk_buf_quote(&b, req->cwd);
		rk_buf_puts(&b, " 2>/dev/null || relay_nocwd\n");
	}
	for (size_t i = 0; req->envp && req->envp[i]; i++) {
		rk_buf_puts(&b, "export ");
		rk_buf_quote(&b, req->envp[i]);
		rk_buf_puts(&b, "\n");
	}
	rk_buf_puts(&b, "set --");
	for (size_t i = 0; req->argv[i]; i++) {
		rk_buf_puts(&b, " ");
		rk_buf_quote(&b, req->argv[i]);
	}
	rk_buf_printf(&b, "\nrelay_go=%s", token);
	if (with_stdin) {
		rk_buf_puts(&b, "\n");
		if (req->stdin_data && req->stdin_len)
			rk_buf_append(&b, req->stdin_data, req->stdin_len);
	}
	if (b.failed) {
		rk_buf_free(&b);
		return NULL;
	}
	*len_out = b.len;
	return b.data;
}

/* Runs the kill script for the group; true when the guest confirmed that
 * no live member is left. */
static bool kill_group(const ssh_conn *conn, long pgid)
{
	const relay_host *host = conn->plugin->host;
	if (pgid <= 1)
		return false;
	char pg[32];
	snprintf(pg, sizeof pg, "%ld", pgid);
	const char *args[] = {pg, NULL};
	relay_process_result res = {.struct_size = sizeof res};
	relay_error ignored;
	relay_status status =
	    ssh_run_script(conn, ssh_script_kill, args, EXEC_KILL_TIMEOUT_MS, 4096, NULL, &res, &ignored);
	bool confirmed = status == RELAY_OK && !res.timed_out && res.exit_code == 0;
	if (status == RELAY_OK) {
		if (!confirmed)
			host->log(RELAY_LOG_WARNING, SSH_PLUGIN_NAME,
			          "could not confirm that guest process group %ld on %s is gone (kill script "
			          "exit %d)",
			          pgid, conn->host, res.exit_code);
		host->free(res.out);
		host->free(res.err);
	}
	return confirmed;
}

/* Moves the captured bytes into res (host-allocated). */
static bool fill_output(const relay_host *host, exec_state *st, bool merge, relay_exec_result *res)
{
	if (st->keep_tail)
		capture_compact(st);
	size_t out_len = 0, err_len = 0;
	for (size_t i = 0; i < st->len; i++) {
		if (merge || st->tags[i] == 1)
			out_len++;
		else
			err_len++;
	}
	res->out = host->alloc(out_len + 1);
	res->err = merge ? NULL : host->alloc(err_len + 1);
	if (res->out == NULL || (!merge && res->err == NULL)) {
		host->free(res->out);
		host->free(res->err);
		res->out = res->err = NULL;
		return false;
	}
	size_t o = 0, e = 0;
	for (size_t i = 0; i < st->len; i++) {
		if (merge || st->tags[i] == 1)
			res->out[o++] = st->bytes[i];
		else
			res->err[e++] = st->bytes[i];
	}
	res->out[o] = '\0';
	res->out_len = o;
	if (!merge) {
		res->err[e] = '\0';
		res->err_len = e;
	}
	return true;
}

typedef enum kill_reason { KILL_NONE, KILL_TIMEOUT, KILL_OVERFLOW, KILL_CANCEL } kill_reason;

/* How the session of an exec ended, for exec_attempt to explain. */
typedef struct exec_outcome {
	kill_reason killed;  /* why the relay killed it, or KILL_NONE */
	bool text_sent;      /* the whole command text and EOF reached ssh */
	bool kill_confirmed; /* a kill was confirmed by the guest */
} exec_outcome;

/* Runs the session: hands the command text over once the wrapper has
 * started, reads its output into *st and kills the guest process group on
 * cancel, timeout or overflow. Fails only when a step of ssh fails. */
static relay_status exec_pump(const ssh_conn *conn, ssh_child *child, exec_state *st, relay_call *call,
                              const char *text, size_t text_len, int64_t deadline_ms, exec_outcome *out,
                              relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	relay_status status = RELAY_OK;
	ssh_io io = {.on_out = on_out, .on_err = on_err, .ctx = st};
	int64_t ended_ms = 0, killed_ms = 0;
	bool text_queued = false;
	for (;;) {
		if (st->started && !text_queued && out->killed == KILL_NONE) {
			io.in_data = text;
			io.in_len = text_len;
			text_queued = true;
		}
		if (text_queued && !out->text_sent && io.in_len == 0 && !io.in_broken) {
			ssh_child_close_stdin(child);
			out->text_sent = true;
		}
		if (ssh_child_done(child))
			break;
		int64_t now = ssh_now_ms();
		if (st->ended && ended_ms == 0)
			ended_ms = now;
		if (ended_ms && now - ended_ms > EXEC_DRAIN_AFTER_END_MS)
			break; /* a process outside the group holds the output open */
		if (out->killed != KILL_NONE && now - killed_ms > EXEC_DRAIN_AFTER_KILL_MS)
			break;
		if (out->killed == KILL_NONE && !st->ended) {
			if (host->call_cancelled(call))
				out->killed = KILL_CANCEL;
			else if (now >= deadline_ms)
				out->killed = KILL_TIMEOUT;
			else if (st->overflowed && !st->keep_tail)
				out->killed = KILL_OVERFLOW;
			if (out->killed != KILL_NONE) {
				killed_ms = now;
				if (st->started && out->text_sent) {
					out->kill_confirmed = kill_group(conn, st->pgid);
				} else {
					/* Nothing ran in the guest: the wrapper runs the
					 * command only after the whole text and EOF. */
					if (st->started)
						kill_group(conn, st->pgid);
					break;
				}
				continue;
			}
		}
		int64_t wait = deadline_ms - now;
		status = ssh_child_step(host, child, &io, wait < 0 ? 50 : wait > 100 ? 100 : (int)wait, err);
		if (status != RELAY_OK)
			return status;
	}
	return RELAY_OK;
}

/* One session of an exec. *retry_cold is set (and nothing else happens)
 * when the session ended before the command was handed over and it was a
 * spare (found dead only now) or the guest refused it while spares held
 * sessions (they are gone now): the caller then tries once more in a new
 * session. Nothing ran either way. */
static relay_status exec_attempt(const ssh_conn *conn, const relay_exec_request *req, relay_call *call,
                                 unsigned flags, const char *token, const char *text, size_t text_len,
                                 int64_t deadline_ms, bool may_use_spare, bool *retry_cold,
                                 relay_exec_result *res, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	relay_status status = RELAY_OK;
	exec_state st = {0};
	ssh_child child = {.pid = -1, .in_fd = -1, .out_fd = -1, .err_fd = -1};
	bool was_spare = false;
	*retry_cold = false;

	st.marker_len = (size_t)snprintf(st.marker, sizeof st.marker, "\036relay %s ", token);
	st.limit = req->max_output_bytes ? req->max_output_bytes : 65536;
	bool stdio_bytes = (flags & RELAY_EXEC_STDIO_BYTES) != 0;
	/* With standard input bytes both caps apply to both streams together. */
	if (stdio_bytes)
		st.limit += req->max_stdout_bytes ? req->max_stdout_bytes : EXEC_STDOUT_DEFAULT;
	st.keep_tail = (flags & RELAY_EXEC_KEEP_TAIL) != 0;
	bool merge = (flags & RELAY_EXEC_MERGE_OUTPUT) != 0;

	const char *args[] = {token, stdio_bytes ? "stdin" : NULL, NULL};
	status = ssh_session_start(conn, "exec", args, may_use_spare, &child, &was_spare, err);
	if (status != RELAY_OK)
		goto cleanup;

	exec_outcome out = {.killed = KILL_NONE};
	status = exec_pump(conn, &child, &st, call, text, text_len, deadline_ms, &out, err);
	if (status != RELAY_OK)
		goto cleanup;
	ssh_child_destroy(&child);
	kill_reason killed = out.killed;
	bool text_sent = out.text_sent, kill_confirmed = out.kill_confirmed;

	if (st.oom) {
		status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM,
		                         "out of memory capturing the command's output");
		goto cleanup;
	}
	if (killed != KILL_NONE && !(st.started && text_sent)) {
		if (killed == KILL_CANCEL)
			status = host->error_set(err, RELAY_E_CANCELLED, 0,
			                         "cancelled before %.80s started in the guest", req->argv[0]);
		else
			status = host->error_set(
			    err, RELAY_E_TRANSIENT, 0,
			    "the ssh session to %s:%u did not start within %llu ms; %.80s never "
			    "ran",
			    conn->host, conn->port, (unsigned long long)req->timeout_ms, req->argv[0]);
		goto cleanup;
	}
	if (!st.started) {
		bool freed = ssh_spares_note_failure(conn, rk_buf_str(&st.noise), st.noise.len);
		if ((was_spare || freed) && killed == KILL_NONE) {
			*retry_cold = true;
			goto cleanup;
		}
		status = ssh_failure(conn, "running a command in the guest", ssh_child_exit_code(&child),
		                     rk_buf_str(&st.noise), st.noise.len, err);
		if (status == RELAY_E_IO || status == RELAY_E_UNAVAILABLE)
			status = host->error_set(
			    err, status, 0,
			    "the guest's login shell did not start the relay's /bin/sh wrapper "
			    "(ssh exit %d); the guest needs /bin/sh",
			    ssh_child_exit_code(&child));
		goto cleanup;
	}
	if (!text_sent) {
		status = host->error_set(
		    err, RELAY_E_TRANSIENT, 0,
		    "the ssh session to %s:%u ended before the command was handed over; %.80s "
		    "never ran",
		    conn->host, conn->port, req->argv[0]);
		goto cleanup;
	}
	if (!fill_output(host, &st, merge, res)) {
		status =
		    host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory returning the output");
		goto cleanup;
	}
	res->output_truncated = st.overflowed;
	if (killed != KILL_NONE) {
		res->exit_code = -1;
		res->signal = SIGKILL;
		res->timed_out = killed == KILL_TIMEOUT;
		res->termination_confirmed = kill_confirmed;
		if (killed == KILL_CANCEL)
			status = host->error_set(
			    err, RELAY_E_CANCELLED, 0, "cancelled; the guest process group was killed%s",
			    kill_confirmed ? " and is gone" : " but could not be confirmed gone");
		goto cleanup;
	}
	if (st.nocwd) {
		res->exit_code = 125;
		res->termination_confirmed = 1;
		status =
		    host->error_set(err, RELAY_E_NOT_FOUND, 0,
		                    "the guest working folder %.120s does not exist (or cannot be entered)",
		                    req->cwd ? req->cwd : "");
		goto cleanup;
	}
	if (!st.ended) {
		/* The command was handed over but its end never arrived: the
		 * connection broke or its shell was killed. Stop what may be left. */
		bool gone = kill_group(conn, st.pgid);
		res->termination_confirmed = gone;
		status = host->error_set(
		    err, RELAY_E_INDETERMINATE, 0,
		    "the ssh session to %s:%u ended before %.80s reported its end (ssh exit %d); "
		    "it may have run in part; its process group %s",
		    conn->host, conn->port, req->argv[0], ssh_child_exit_code(&child),
		    gone ? "is now confirmed gone" : "could not be confirmed gone");
		goto cleanup;
	}
	res->exit_code = st.end_rc;
	res->signal = 0;
	res->termination_confirmed = st.end_sweep == 0;
cleanup:
	ssh_child_destroy(&child);
	free(st.bytes);
	free(st.tags);
	rk_buf_free(&st.noise);
	return status;
}

relay_status ssh_exec(const ssh_conn *conn, const relay_exec_request *req_in, relay_call *call,
                      unsigned flags, relay_exec_result *res, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	relay_status status = RELAY_OK;
	char token[33];

	if (flags & ~EXEC_KNOWN_FLAGS)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown exec flags 0x%x", flags);
	if ((flags & RELAY_EXEC_STDIO_BYTES) && (flags & RELAY_EXEC_MERGE_OUTPUT))
		return host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "exec: RELAY_EXEC_STDIO_BYTES returns standard output alone; it cannot "
		    "be merged with standard error");
	if (req_in == NULL || req_in->struct_size < RELAY_EXEC_REQUEST_V1_0_SIZE)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "exec needs a request");
	relay_exec_request rq;
	memset(&rq, 0, sizeof rq);
	memcpy(&rq, req_in, req_in->struct_size < sizeof rq ? req_in->struct_size : sizeof rq);
	const relay_exec_request *req = &rq;
	if (res == NULL || req->argv == NULL || req->argv[0] == NULL || req->argv[0][0] == '\0')
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "exec needs a non-empty argv and a result");
	if (strchr(req->argv[0], '=') != NULL)
		return host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "exec: the program name %.80s holds '=', which env would take for a variable",
		    req->argv[0]);
	if (req->timeout_ms == 0)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "exec needs a timeout above 0 ms");
	if (req->cwd && req->cwd[0] != '/')
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "exec: the guest working folder %.80s is not an absolute path",
		                       req->cwd);
	for (size_t i = 0; req->envp && req->envp[i]; i++)
		if (!valid_env_entry(req->envp[i]))
			return host->error_set(
			    err, RELAY_E_INVALID_ARGUMENT, 0,
			    "exec: environment entry %zu is not NAME=value with a shell-safe name", i);
	uint32_t res_size = res->struct_size;
	memset(res, 0, res_size < sizeof *res ? res_size : sizeof *res);
	res->struct_size = res_size;
	res->exit_code = -1;

	status = ssh_token(host, token, err);
	if (status != RELAY_OK)
		return status;
	size_t text_len = 0;
	char *text = command_text(req, token, (flags & RELAY_EXEC_STDIO_BYTES) != 0, &text_len);
	if (text == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM,
		                       "out of memory building an ssh command");
	int64_t deadline_ms =
	    ssh_now_ms() + (int64_t)(req->timeout_ms > INT64_MAX / 4 ? INT64_MAX / 4 : req->timeout_ms);
	bool retry_cold = false;
	status = exec_attempt(conn, req, call, flags, token, text, text_len, deadline_ms, true, &retry_cold,
	                      res, err);
	if (retry_cold)
		status = exec_attempt(conn, req, call, flags, token, text, text_len, deadline_ms, false,
		                      &retry_cold, res, err);
	free(text);
	return status;
}
