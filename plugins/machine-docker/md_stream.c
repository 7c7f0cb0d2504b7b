/*
 * md_stream.c — the transport's long-lived stream (relay/transport.h,
 * RELAY_TRANSPORT_STREAM; spec/guest.md §17): one attached exec through the
 * exec API (POST /containers/{id}/exec with AttachStdin, then the hijacked
 * POST /exec/{id}/start), kept open. Bytes written go up the connection;
 * what comes down is demultiplexed (8-byte headers: stream, 0, 0, 0, size
 * big-endian): stream 1 is the command's standard output, handed to the
 * caller; stream 2 its standard error, logged a line at a time. Closing
 * half-closes the connection (end of input), waits for the command to end
 * and frees the connection; nothing is killed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md.h"
#include "relay_kit/stream.h"

#define STREAM_OPEN_MS       30000
#define STREAM_CLOSE_WAIT_MS 2000

typedef struct md_tstream {
	md_stream *s;
	unsigned char hdr[8];
	size_t hdr_have;
	size_t frame_left; /* bytes of the current frame still to come */
	int frame_kind;    /* 1 stdout, 2 stderr */
	char err_line[512];
	size_t err_len;
	bool eof;
} md_tstream;

relay_status md_tstream_open(md_state *st, md_conn *conn, const relay_exec_request *req_in, relay_call *call,
                             unsigned flags, relay_transport_stream **out, relay_error *err)
{
	*out = NULL;
	relay_exec_request req;
	relay_status checked = rk_stream_open_request(st->host, req_in, flags, &req, err);
	if (checked != RELAY_OK)
		return checked;
	if (req.cwd && req.cwd[0] && req.cwd[0] != '/')
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "stream_open needs an absolute cwd");
	/* Under the guest program's "run", which only sets no-new-privileges
	 * and execs: a Swarm service cannot ask the engine for it, and the
	 * stream's bytes must not pass through a copying wrapper. */
	size_t argc = 0;
	while (req.argv[argc])
		argc++;
	const char **argv = calloc(argc + 3, sizeof *argv);
	if (argv == NULL)
		return md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	argv[0] = MD_GUEST_INIT;
	argv[1] = "run";
	memcpy(argv + 2, req.argv, argc * sizeof *argv);
	exec_plan p = {.container = conn->container,
	               .user = conn->user,
	               .argv = argv,
	               .envp = req.envp,
	               .cwd = req.cwd,
	               .attach_stdin = true};
	char id[128], path[256];
	relay_status s = exec_create(st, &p, NULL, call, id, sizeof id, err);
	free(argv);
	if (s != RELAY_OK)
		return s;
	md_tstream *t = calloc(1, sizeof *t);
	if (t == NULL)
		return md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	snprintf(path, sizeof path, MD_API_PREFIX "/exec/%s/start", id);
	s = md_stream_open(st, path, "{\"Detach\":false,\"Tty\":false}", STREAM_OPEN_MS, &t->s, err);
	if (s != RELAY_OK) {
		free(t);
		return s == RELAY_E_NOT_FOUND ? RELAY_E_TRANSIENT : s;
	}
	*out = t;
	return RELAY_OK;
}

relay_status md_tstream_write(relay_plugin_state *state, relay_transport_stream *stream, const void *data,
                              size_t len, uint64_t timeout_ms, unsigned flags, relay_error *err)
{
	md_state *st = state;
	md_tstream *t = stream;
	relay_status s = rk_stream_write_check(st->host, t != NULL, data, len, timeout_ms, flags, err);
	if (s != RELAY_OK)
		return s;
	int64_t deadline = md_monotonic_ms() + (int64_t)timeout_ms;
	size_t off = 0;
	while (off < len) {
		ssize_t w = md_stream_send(t->s, (const char *)data + off, len - off);
		if (w == -1)
			return md_err(st, err, RELAY_E_INDETERMINATE, 0,
			              "the exec stream broke while sending");
		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		if (md_monotonic_ms() >= deadline)
			return rk_stream_write_timeout(st->host, "the exec stream", len, timeout_ms, err);
		md_stream_wait(t->s, true, 50);
	}
	return RELAY_OK;
}

/* Standard error of the command: logged a line at a time. */
static void stderr_bytes(md_state *st, md_tstream *t, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		bool end = p[i] == '\n' || t->err_len + 1 >= sizeof t->err_line;
		if (p[i] != '\n')
			t->err_line[t->err_len++] = p[i];
		if (end && t->err_len) {
			t->err_line[t->err_len] = '\0';
			st->host->log(RELAY_LOG_DEBUG, MD_PLUGIN_NAME, "stream: %s", t->err_line);
			t->err_len = 0;
		}
	}
}

/* Takes raw[0..n) of the connection (n at most the caller's room in
 * `out`): the standard output bytes into out, standard error to the log.
 * Returns the standard output bytes stored. */
static size_t demux(md_state *st, md_tstream *t, const char *raw, size_t n, char *out)
{
	size_t off = 0, got = 0;
	while (off < n) {
		if (t->frame_left == 0) {
			size_t take = 8 - t->hdr_have < n - off ? 8 - t->hdr_have : n - off;
			memcpy(t->hdr + t->hdr_have, raw + off, take);
			t->hdr_have += take;
			off += take;
			if (t->hdr_have == 8) {
				t->frame_kind = t->hdr[0];
				t->frame_left = ((size_t)t->hdr[4] << 24) | ((size_t)t->hdr[5] << 16) |
				                ((size_t)t->hdr[6] << 8) | (size_t)t->hdr[7];
				t->hdr_have = 0;
			}
			continue;
		}
		size_t m = t->frame_left < n - off ? t->frame_left : n - off;
		if (t->frame_kind == 1) {
			memcpy(out + got, raw + off, m);
			got += m;
		} else {
			stderr_bytes(st, t, raw + off, m);
		}
		off += m;
		t->frame_left -= m;
	}
	return got;
}

relay_status md_tstream_read(relay_plugin_state *state, relay_transport_stream *stream, void *buf, size_t cap,
                             uint64_t timeout_ms, unsigned flags, size_t *got_out, relay_error *err)
{
	md_state *st = state;
	md_tstream *t = stream;
	*got_out = 0;
	relay_status s = rk_stream_read_check(st->host, t != NULL, buf, cap, flags, err);
	if (s != RELAY_OK || t->eof)
		return s;
	int64_t deadline = md_monotonic_ms() + (int64_t)timeout_ms;
	for (;;) {
		/* Never more than fits: a frame's payload goes to `buf` whole,
		 * so at most cap bytes are asked of the connection. */
		char raw[65536];
		size_t ask = cap < sizeof raw ? cap : sizeof raw;
		ssize_t n = md_stream_recv(t->s, raw, ask);
		if (n == 0) {
			t->eof = true;
			return RELAY_OK;
		}
		if (n == -1)
			return md_err(st, err, RELAY_E_INDETERMINATE, 0,
			              "the exec stream broke while reading");
		if (n > 0) {
			size_t got = demux(st, t, raw, (size_t)n, buf);
			if (got) {
				*got_out = got;
				return RELAY_OK;
			}
			continue;
		}
		int64_t left = deadline - md_monotonic_ms();
		if (left <= 0)
			return rk_stream_read_timeout(st->host, timeout_ms, err);
		if (md_stream_wait(t->s, false, (int)(left < 1000 ? left : 1000)) < 0)
			return md_err(st, err, RELAY_E_INDETERMINATE, errno,
			              "the exec stream broke while waiting");
	}
}

void md_tstream_close(relay_plugin_state *state, relay_transport_stream *stream, unsigned flags)
{
	md_state *st = state;
	(void)flags;
	md_tstream *t = stream;
	if (t == NULL)
		return;
	md_stream_close_write(t->s);
	int64_t deadline = md_monotonic_ms() + STREAM_CLOSE_WAIT_MS;
	char sink[4096];
	while (!t->eof && md_monotonic_ms() < deadline) {
		size_t got = 0;
		relay_error e;
		if (md_tstream_read(st, t, sink, sizeof sink, 200, 0, &got, &e) != RELAY_OK &&
		    e.code != RELAY_E_TIMEOUT)
			break;
	}
	md_stream_free(t->s);
	free(t);
}
