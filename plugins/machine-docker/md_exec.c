/*
 * md_exec.c — transport exec through the exec API (relay/transport.h).
 *
 *   1. POST /containers/{id}/exec creates the exec: the command runs under
 *      the guest program (`/.mcp-relay/init exec PIDFILE argv...`), which
 *      puts it in a session and process group of its own and writes the
 *      group id to PIDFILE, so a timeout can kill the whole group;
 *   2. POST /exec/{id}/start, hijacked: standard input goes up the same
 *      connection (then a half-close for end of file), standard output and
 *      error come down multiplexed (8-byte headers: stream, 0, 0, 0, size
 *      big-endian);
 *   3. GET /exec/{id}/json gives the exit code once it stops running.
 * The step ends with the main process (spec/guest.md §16.1): when the exec no
 * longer runs, what is left of the stream is read for at most 250 ms, and
 * what the command left running keeps running.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md.h"
#include "md_console.h"
#include "md_lease.h"

#define EXEC_KNOWN_FLAGS (RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL | RELAY_EXEC_STDIO_BYTES)
#define DRAIN_MS         250

typedef struct outbuf {
	char *data;
	size_t len, cap;
	bool failed;
} outbuf;

static void ob_add(outbuf *b, const char *p, size_t n)
{
	if (b->failed || n == 0)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *q = realloc(b->data, cap);
		if (q == NULL) {
			b->failed = true;
			return;
		}
		b->data = q;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

/* Keeps the last `keep` bytes. */
static void ob_keep_tail(outbuf *b, size_t keep)
{
	if (b->len <= keep)
		return;
	memmove(b->data, b->data + (b->len - keep), keep);
	b->len = keep;
	b->data[b->len] = '\0';
}

static char *host_copy(md_state *st, const outbuf *b, size_t *len_out)
{
	char *p = st->host->alloc(b->len + 1);
	if (p == NULL)
		return NULL;
	if (b->len)
		memcpy(p, b->data, b->len);
	p[b->len] = '\0';
	*len_out = b->len;
	return p;
}

void exec_result_free(md_state *st, relay_exec_result *res)
{
	st->host->free(res->out);
	st->host->free(res->err);
	res->out = res->err = NULL;
	res->out_len = res->err_len = 0;
}

relay_status exec_create(md_state *st, const exec_plan *p, const char *pidfile, relay_call *call,
                         char *id_out, size_t id_size, relay_error *err)
{
	json_object *body = json_object_new_object();
	json_object *cmd = json_object_new_array();
	if (p->wrap) {
		json_object_array_add(cmd, json_object_new_string(MD_GUEST_INIT));
		json_object_array_add(cmd, json_object_new_string("exec"));
		json_object_array_add(cmd, json_object_new_string(pidfile));
	}
	for (size_t i = 0; p->argv[i]; i++)
		json_object_array_add(cmd, json_object_new_string(p->argv[i]));
	json_object_object_add(body, "Cmd", cmd);
	json_object_object_add(body, "AttachStdin", json_object_new_boolean(p->attach_stdin));
	json_object_object_add(body, "AttachStdout", json_object_new_boolean(true));
	json_object_object_add(body, "AttachStderr", json_object_new_boolean(true));
	json_object_object_add(body, "Tty", json_object_new_boolean(false));
	json_object_object_add(body, "User", json_object_new_string(p->user));
	if (p->cwd && p->cwd[0])
		json_object_object_add(body, "WorkingDir", json_object_new_string(p->cwd));
	if (p->envp) {
		json_object *env = json_object_new_array();
		for (size_t i = 0; p->envp[i]; i++)
			json_object_array_add(env, json_object_new_string(p->envp[i]));
		json_object_object_add(body, "Env", env);
	}
	char path[512] = MD_API_PREFIX "/containers/";
	md_url_encode(path, sizeof path, p->container);
	strcat(path, "/exec");
	md_reply r;
	relay_status s = md_api(st, "POST", path, body, -1, -1, 30000, call, &r, err);
	json_object_put(body);
	if (s != RELAY_OK) {
		/* Nothing ran: an exec that was created but never started does nothing. */
		if (s == RELAY_E_INDETERMINATE || s == RELAY_E_TIMEOUT || s == RELAY_E_UNAVAILABLE)
			s = RELAY_E_TRANSIENT;
		return s;
	}
	const char *id = md_str(r.json, "Id");
	if (r.status == 404 || r.status == 409) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, 0, "container %s cannot run commands: %s",
		           p->container, md_reply_message(&r));
	} else if (r.status != 201 || id == NULL || strlen(id) >= id_size) {
		s = md_err(st, err, RELAY_E_TRANSIENT, 0,
		           "the engine refused to create the exec (HTTP %ld): %s", r.status,
		           md_reply_message(&r));
	} else {
		snprintf(id_out, id_size, "%s", id);
	}
	md_reply_free(&r);
	return s;
}

/* 1 running, 0 stopped (exit code in *code), -1 unknown. */
static int exec_state(md_state *st, const char *id, int *code)
{
	char path[256];
	snprintf(path, sizeof path, MD_API_PREFIX "/exec/%s/json", id);
	md_reply r;
	relay_error e;
	if (md_api(st, "GET", path, NULL, -1, -1, 10000, NULL, &r, &e) != RELAY_OK)
		return -1;
	int out = -1;
	json_object *running = NULL;
	if (r.status == 200 && json_object_object_get_ex(r.json, "Running", &running)) {
		out = json_object_get_boolean(running) ? 1 : 0;
		*code = (int)md_int(r.json, "ExitCode", -1);
	}
	md_reply_free(&r);
	return out;
}

/* Kills the group named by the pidfile; 1 when confirmed gone. */
static int kill_group(md_state *st, const exec_plan *p, const char *pidfile)
{
	const char *argv[] = {MD_GUEST_INIT, "kill", pidfile, NULL};
	relay_exec_result kr = {.struct_size = sizeof kr};
	relay_error e;
	relay_status s = exec_simple(st, p->container, p->user, argv, 15000, NULL, &kr, &e);
	int gone = s == RELAY_OK && kr.exit_code == 0;
	exec_result_free(st, &kr);
	return gone;
}

/* The demultiplexing of the engine's exec stream (8-byte frame headers:
 * kind, 3 zero bytes, big-endian length) into stdout and stderr. */
typedef struct exec_demux {
	outbuf out, errb;
	unsigned char hdr[8];
	size_t hdr_have, frame_left;
	int frame_kind;
	bool overflow; /* the output went over its cap */
} exec_demux;

/* Takes buf[0..got) of the stream, within the caps of p. */
static void demux_feed(exec_demux *d, const exec_plan *p, relay_exec_result *res, const char *buf, size_t got,
                       bool killed)
{
	size_t off = 0;
	while (off < got) {
		if (d->frame_left == 0) {
			size_t take = 8 - d->hdr_have;
			if (take > got - off)
				take = got - off;
			memcpy(d->hdr + d->hdr_have, buf + off, take);
			d->hdr_have += take;
			off += take;
			if (d->hdr_have == 8) {
				d->frame_kind = d->hdr[0];
				d->frame_left = ((size_t)d->hdr[4] << 24) | ((size_t)d->hdr[5] << 16) |
				                ((size_t)d->hdr[6] << 8) | (size_t)d->hdr[7];
				d->hdr_have = 0;
			}
			continue;
		}
		size_t n = d->frame_left < got - off ? d->frame_left : got - off;
		const char *data = buf + off;
		off += n;
		d->frame_left -= n;
		if (killed && !p->keep_tail)
			continue;
		bool to_err = d->frame_kind == 2 && !p->merge;
		outbuf *dst = to_err ? &d->errb : &d->out;
		size_t cap, used;
		if (p->stdio_bytes) {
			cap = to_err ? p->max_output : p->max_stdout;
			used = dst->len;
		} else {
			cap = p->max_output;
			used = d->out.len + d->errb.len;
		}
		if (used + n > cap) {
			res->output_truncated = 1;
			d->overflow = true;
			if (p->keep_tail && !p->stdio_bytes) {
				ob_add(dst, data, n);
				ob_keep_tail(dst, cap > (to_err ? d->out.len : d->errb.len)
				                      ? cap - (to_err ? d->out.len : d->errb.len)
				                      : 0);
			} else if (cap > used) {
				ob_add(dst, data, cap - used);
			}
			continue;
		}
		ob_add(dst, data, n);
	}
}

/* After the stream: waits for the engine to say the exec ended and fills in
 * the result from what d collected. */
static relay_status exec_conclude(md_state *st, const exec_plan *p, const char *id, exec_demux *d,
                                  bool killed, bool eof, bool cancelled, relay_exec_result *res,
                                  relay_error *err)
{
	relay_status s = RELAY_OK;
	int code = -1;
	int state = -1;
	for (int i = 0; i < 100; i++) {
		state = exec_state(st, id, &code);
		if (state != 1)
			break;
		if (!killed && !eof)
			break;
		md_sleep_ms(50);
	}
	if (d->out.failed || d->errb.failed) {
		s = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory collecting the output");
		goto done;
	}
	if (cancelled) {
		s = md_err(st, err, RELAY_E_CANCELLED, 0,
		           "cancelled; the command's process group was killed");
		goto done;
	}
	if (state != 0 && !killed) {
		s = md_err(
		    st, err, RELAY_E_INDETERMINATE, 0,
		    "the exec stream of container %s ended but the engine does not say the command ended",
		    p->container);
		goto done;
	}
	if (killed) {
		res->exit_code = -1;
		res->signal = 9;
		res->termination_confirmed = state == 0 ? 1 : 0;
	} else {
		res->exit_code = code;
		res->signal = 0;
		res->termination_confirmed = 1;
	}
	res->out = host_copy(st, &d->out, &res->out_len);
	if (!p->merge)
		res->err = host_copy(st, &d->errb, &res->err_len);
	if (res->out == NULL || (!p->merge && res->err == NULL)) {
		exec_result_free(st, res);
		s = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
done:
	free(d->out.data);
	free(d->errb.data);
	return s;
}

static relay_status exec_core(md_state *st, const exec_plan *p, relay_call *call, relay_exec_result *res,
                              relay_error *err)
{
	char token[17], pidfile[96], id[128];
	md_random_hex(st, token, 16);
	snprintf(pidfile, sizeof pidfile, MD_GUEST_RUN_DIR "/exec-%s", token);
	relay_status s = exec_create(st, p, pidfile, call, id, sizeof id, err);
	if (s != RELAY_OK)
		return s;
	char path[256];
	snprintf(path, sizeof path, MD_API_PREFIX "/exec/%s/start", id);
	md_stream *stream = NULL;
	s = md_stream_open(st, path, "{\"Detach\":false,\"Tty\":false}", 30000, &stream, err);
	if (s != RELAY_OK)
		return s == RELAY_E_NOT_FOUND ? RELAY_E_TRANSIENT : s;

	exec_demux d = {0};
	size_t in_off = 0;
	bool in_done = !p->attach_stdin;
	if (in_done == false && p->stdin_len == 0) {
		md_stream_close_write(stream);
		in_done = true;
	}
	char buf[65536];
	int64_t start = md_monotonic_ms();
	int64_t deadline = start + (int64_t)(p->timeout_ms > (uint64_t)INT32_MAX ? INT32_MAX : p->timeout_ms);
	int64_t drain_until = 0, next_check = start + 50;
	bool eof = false, killed = false, cancelled = false, kill_sent = false;
	while (!eof) {
		int64_t now = md_monotonic_ms();
		if (!killed && now >= deadline) {
			res->timed_out = 1;
			killed = true;
		} else if (!killed && call && st->host->call_cancelled(call)) {
			cancelled = true;
			killed = true;
		} else if (!killed && d.overflow && !p->keep_tail) {
			killed = true;
		}
		if (killed && !kill_sent) {
			/* One attempt; the exec's state afterwards says whether it ended.
			 * A command not run under the guest program has no group file. */
			kill_sent = true;
			if (p->wrap)
				kill_group(st, p, pidfile);
			if (drain_until == 0 || drain_until > md_monotonic_ms() + 2000)
				drain_until = md_monotonic_ms() + 2000;
		}
		if (drain_until && md_monotonic_ms() > drain_until)
			break;
		/* Has the main process ended? Then the step ends too, whatever it left
		 * running and writing (spec/guest.md §16.1). */
		if (drain_until == 0 && md_monotonic_ms() >= next_check) {
			int code = 0;
			if (exec_state(st, id, &code) == 0)
				drain_until = md_monotonic_ms() + DRAIN_MS;
			next_check = md_monotonic_ms() + 200;
		}
		int r = md_stream_wait(stream, !in_done, 50);
		if (r < 0)
			break;
		if (!in_done) {
			ssize_t w = md_stream_send(stream, (const char *)p->stdin_data + in_off,
			                           p->stdin_len - in_off);
			if (w > 0)
				in_off += (size_t)w;
			if (w == -1 || in_off >= p->stdin_len) {
				md_stream_close_write(stream);
				in_done = true;
			}
		}
		ssize_t got = r > 0 ? md_stream_recv(stream, buf, sizeof buf) : -2;
		if (got == 0 || got == -1) {
			eof = true;
			break;
		}
		if (got == -2)
			continue;
		demux_feed(&d, p, res, buf, (size_t)got, killed);
	}
	md_stream_free(stream);
	return exec_conclude(st, p, id, &d, killed, eof, cancelled, res, err);
}

relay_status exec_simple(md_state *st, const char *container, const char *user, const char *const *argv,
                         uint64_t timeout_ms, relay_call *call, relay_exec_result *res, relay_error *err)
{
	exec_plan p = {.container = container,
	               .user = user,
	               .argv = argv,
	               .timeout_ms = timeout_ms,
	               .wrap = false,
	               .max_output = 65536};
	return exec_core(st, &p, call, res, err);
}

relay_status exec_run(md_state *st, md_conn *conn, const relay_exec_request *req_in, relay_call *call,
                      unsigned flags, relay_exec_result *res, relay_error *err)
{
	if (flags & ~EXEC_KNOWN_FLAGS)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown exec flags 0x%x", flags);
	relay_exec_request req;
	memset(&req, 0, sizeof req);
	if (req_in == NULL)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "exec needs a request");
	memcpy(&req, req_in, req_in->struct_size < sizeof req ? req_in->struct_size : sizeof req);
	bool stdio = (flags & RELAY_EXEC_STDIO_BYTES) != 0;
	if (stdio && (flags & RELAY_EXEC_MERGE_OUTPUT))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "RELAY_EXEC_STDIO_BYTES cannot be combined with RELAY_EXEC_MERGE_OUTPUT");
	if (req.argv == NULL || req.argv[0] == NULL || req.timeout_ms == 0)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "exec needs argv and a positive timeout");
	if (req.cwd && req.cwd[0] != '/')
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "exec's cwd must be absolute");
	res->exit_code = -1;
	res->signal = 0;
	res->timed_out = res->output_truncated = res->termination_confirmed = 0;
	res->out = res->err = NULL;
	res->out_len = res->err_len = 0;
	exec_plan p = {.container = conn->container,
	               .user = conn->user,
	               .argv = req.argv,
	               .envp = req.envp,
	               .cwd = req.cwd,
	               .timeout_ms = req.timeout_ms,
	               .wrap = true,
	               .merge = (flags & RELAY_EXEC_MERGE_OUTPUT) != 0,
	               .keep_tail = (flags & RELAY_EXEC_KEEP_TAIL) != 0,
	               .stdio_bytes = stdio,
	               .max_output = req.max_output_bytes ? req.max_output_bytes : 65536};
	if (stdio) {
		p.attach_stdin = true;
		p.stdin_data = req.stdin_data;
		p.stdin_len = req.stdin_data ? req.stdin_len : 0;
		p.max_stdout = req.max_stdout_bytes ? req.max_stdout_bytes : (64u << 20);
	}
	return exec_core(st, &p, call, res, err);
}

/* A program started in the container through the exec API, detached (the
 * console's x11vnc; md_console.h). */
bool md_exec_detached(md_state *st, const char *vm, const char *user, const char *const *argv,
                      relay_call *call)
{
	json_object *body = json_object_new_object();
	json_object_object_add(body, "Cmd", md_str_array(argv));
	json_object_object_add(body, "User", json_object_new_string(user));
	json_object_object_add(body, "AttachStdout", json_object_new_boolean(false));
	json_object_object_add(body, "AttachStderr", json_object_new_boolean(false));
	md_reply r;
	relay_error e;
	relay_status s = md_container_api(st, "POST", vm, "/exec", body, 20000, call, &r, &e);
	json_object_put(body);
	if (s != RELAY_OK)
		return false;
	char start[256] = "";
	const char *id = md_str(r.json, "Id");
	if (r.status == 201 && id && strlen(id) < 128)
		snprintf(start, sizeof start, MD_API_PREFIX "/exec/%s/start", id);
	md_reply_free(&r);
	if (start[0] == '\0')
		return false;
	json_object *sb = json_object_new_object();
	json_object_object_add(sb, "Detach", json_object_new_boolean(true));
	json_object_object_add(sb, "Tty", json_object_new_boolean(false));
	s = md_api(st, "POST", start, sb, -1, -1, 20000, call, &r, &e);
	json_object_put(sb);
	bool started = s == RELAY_OK && (r.status == 200 || r.status == 204);
	md_reply_free(&r);
	return started;
}
