/*
 * JSON-RPC lines through the real server loop (mcp/server.c): framing,
 * batches, both protocol eras (initialize, _meta versions), ids, progress
 * tokens, cancellation, tools/list, tools/call with the real validation
 * (contract/) and the real result rendering (mcp/render.c).
 *
 * One server runs for the whole process on a pair of pipes, as in a real
 * session. Each input is written as lines, followed by a ping with a fresh
 * sentinel id; the harness reads until the sentinel's answer, so every
 * answer of the input has been written by then (tool calls complete on the
 * reader thread here).
 *
 * The manager is a stand-in, as in tests/unit/mcp/test_mcp_server.c: the server
 * reaches it only through its handler table (mcp_handler). It answers
 * every validated call at once with the call's arguments as its structured
 * result, so whatever a client sent comes back through the renderer, plus
 * the input's first bytes raw where a guest's bytes would be (a field, the
 * headline, an error message: spec/tools.md §5.3 says they leave as UTF-8).
 *
 * Invariants: every line the server writes is valid UTF-8 and one JSON
 * value the relay's own parser accepts; the sentinel is answered with its
 * id exactly.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call/call.h"
#include "call/tool_result.h"
#include "contract/contract.h"
#include "mcp/server.h"
#include "mcp/wire.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

#include "fuzz.h"

/* ---- the stand-in manager ------------------------------------------------- */

/* The current input, as bytes a guest controls (a file name, a program's
 * output): set by the fuzzing thread under input_lock before it writes the
 * input, read by the server's reader thread while the fuzzing thread waits
 * for the sentinel. */
static pthread_mutex_t input_lock = PTHREAD_MUTEX_INITIALIZER;
static const uint8_t *input_data;
static size_t input_size;

static void stub_dispatch(void *backend, relay_tool tool, json_object *args, relay_call *call)
{
	(void)backend;
	pthread_mutex_lock(&input_lock);
	size_t raw_len = input_size < 64 ? input_size : 64;
	char raw[64];
	if (raw_len)
		memcpy(raw, input_data, raw_len);
	pthread_mutex_unlock(&input_lock);
	/* The arguments come back as the result (owned by the result now),
	 * with raw input bytes where a guest's bytes would be: in a field, in
	 * the headline and in an error's message. */
	jsonx_add_strn(args, "guestBytes", raw, raw_len);
	relay_call_progress(call, 1, 2, contract_tool_name(tool), true);
	if (raw_len && raw[0] & 1)
		relay_call_complete(call,
		                    tool_result_error(args, "receiver-failed", "receiver: 1: %.*s: not found",
		                                      (int)raw_len, raw));
	else
		relay_call_complete(call, tool_result_ok(args, "%s answered %.*s", contract_tool_name(tool),
		                                         (int)raw_len, raw));
}

static int stub_end_session(void *backend, const char *reason)
{
	(void)backend;
	(void)reason;
	return 0;
}

static void stub_hurry_end(void *backend)
{
	(void)backend;
}

static const mcp_handler stub_handler = {
    .dispatch = stub_dispatch,
    .end_session = stub_end_session,
    .hurry_end = stub_hurry_end,
};

/* ---- the session ----------------------------------------------------------- */

/* Set up once by start_session (pthread_once), then used by the fuzzing
 * thread only. */
static pthread_once_t session_once = PTHREAD_ONCE_INIT;
static int to_server = -1;   /* write end of the server's standard input */
static int from_server = -1; /* read end of the server's standard output */
static unsigned long sentinel_counter;
static strbuf pending; /* output read but not yet split into lines */

static void *serve_thread(void *arg)
{
	mcp_server_config *config = arg;
	mcp_serve(config);
	return NULL;
}

static void start_session(void)
{
	static mcp_server_config config;
	static int fake_manager;
	char errbuf[256];
	int in_pipe[2], out_pipe[2];
	if (contract_init(errbuf, sizeof errbuf) != 0)
		fuzz_fail("contract_init: %s", errbuf);
	/* Spill files of large results go to the scratch folder. */
	setenv("TMPDIR", fuzz_scratch_dir(), 1);
	if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0)
		fuzz_fail("pipe2: %s", strerror(errno));
	fcntl(in_pipe[1], F_SETPIPE_SZ, 1 << 20);
	fcntl(out_pipe[1], F_SETPIPE_SZ, 1 << 20);
	fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
	fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
	config.in_fd = in_pipe[0];
	config.out_fd = out_pipe[1];
	config.handler = &stub_handler;
	config.backend = &fake_manager; /* never dereferenced by the stand-in */
	to_server = in_pipe[1];
	from_server = out_pipe[0];
	strbuf_init(&pending);
	pthread_t thread;
	if (pthread_create(&thread, NULL, serve_thread, &config) != 0)
		fuzz_fail("cannot start the server thread");
	pthread_detach(thread);
}

/* Checks one output line; true when it is the sentinel's answer. */
static bool check_line(const char *line, size_t len, const char *sentinel)
{
	if (!utf8_valid(line, len))
		fuzz_fail("the server wrote invalid UTF-8: %.*s", (int)(len > 300 ? 300 : len), line);
	json_object *msg = NULL;
	bool is_null = false;
	char why[160];
	if (wire_parse(line, len, &msg, &is_null, why, sizeof why) != WIRE_OK)
		fuzz_fail("the server wrote a line that is not JSON (%s): %.*s", why,
		          (int)(len > 300 ? 300 : len), line);
	bool is_sentinel = false;
	json_object *id = NULL;
	if (json_object_is_type(msg, json_type_object) && json_object_object_get_ex(msg, "id", &id) &&
	    json_object_is_type(id, json_type_string) && strcmp(json_object_get_string(id), sentinel) == 0)
		is_sentinel = true;
	json_object_put(msg);
	return is_sentinel;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	pthread_once(&session_once, start_session);
	pthread_mutex_lock(&input_lock);
	input_data = data;
	input_size = size;
	pthread_mutex_unlock(&input_lock);
	char sentinel[64];
	snprintf(sentinel, sizeof sentinel, "relay-fuzz-sentinel-%lu", ++sentinel_counter);
	strbuf in = STRBUF_INIT;
	strbuf_append(&in, data, size);
	strbuf_printf(&in, "\n{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"ping\"}\n", sentinel);
	if (!strbuf_ok(&in))
		fuzz_fail("no memory for the input");

	size_t written = 0;
	bool answered = false;
	int64_t deadline_ms = clock_monotonic_ms() + 30000;
	while (!answered) {
		struct pollfd pfd[2] = {{from_server, POLLIN, 0}, {to_server, POLLOUT, 0}};
		nfds_t n = written < in.len ? 2 : 1;
		/* libFuzzer's SIGALRM (its -timeout watch) may interrupt poll. */
		int ready = poll(pfd, n, 1000);
		if (ready < 0 && errno != EINTR)
			fuzz_fail("poll: %s", strerror(errno));
		if (ready <= 0) {
			if (clock_monotonic_ms() > deadline_ms)
				fuzz_fail("the server did not answer the sentinel within 30 s");
			continue;
		}
		if (n == 2 && (pfd[1].revents & POLLOUT)) {
			ssize_t w = write(to_server, in.data + written, in.len - written);
			if (w > 0)
				written += (size_t)w;
			else if (w < 0 && errno != EAGAIN && errno != EINTR)
				fuzz_fail("writing to the server: %s", strerror(errno));
		}
		if (pfd[0].revents & (POLLIN | POLLHUP)) {
			char chunk[65536];
			ssize_t r = read(from_server, chunk, sizeof chunk);
			if (r == 0)
				fuzz_fail("the server closed its output");
			if (r < 0) {
				if (errno == EAGAIN || errno == EINTR)
					continue;
				fuzz_fail("reading from the server: %s", strerror(errno));
			}
			strbuf_append(&pending, chunk, (size_t)r);
			size_t start = 0;
			for (;;) {
				char *nl = memchr(pending.data + start, '\n', pending.len - start);
				if (nl == NULL)
					break;
				size_t len = (size_t)(nl - (pending.data + start));
				if (check_line(pending.data + start, len, sentinel))
					answered = true;
				start += len + 1;
			}
			memmove(pending.data, pending.data + start, pending.len - start);
			pending.len -= start;
		}
	}
	strbuf_free(&in);
	return 0;
}
