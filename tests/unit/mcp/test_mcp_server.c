/*
 * The MCP server loop (mcp/server.c) over real pipes, with a stub manager
 * that holds tool calls until the test completes them: progress (token
 * echo, strict increase, rate limit, fixed total, nothing after the answer),
 * cancellation (no answer, the id freed, batches released), batches with
 * calls that finish later, duplicate in-flight ids, internal calls, and the
 * session-end triggers at the protocol level.
 *
 * The stub is the server's handler table (mcp_handler): the server reaches
 * what answers tools/call only through it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cmocka.h>

#include "call/call.h"
#include "call/tool_result.h"
#include "contract/contract.h"
#include "mcp/server.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* ---- the stub manager ------------------------------------------------------ */

#define MAX_HELD 16

/* Shared between the server's threads and the test thread under stub_lock. */
static pthread_mutex_t stub_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stub_cond = PTHREAD_COND_INITIALIZER;
static relay_call *held[MAX_HELD];
static int held_count;
static char end_reason[64];
static int end_status;
static int hurried;
/* Set by read_line whenever bytes arrive from a server. */
static atomic_int bytes_seen;

static void stub_dispatch(void *backend, relay_tool tool, json_object *args, relay_call *call)
{
	(void)backend;
	json_object_put(args);
	if (tool == TOOL_STATUS) { /* answered at once, like the real one */
		relay_call_complete(call, tool_result_ok(NULL, "status"));
		return;
	}
	pthread_mutex_lock(&stub_lock);
	held[held_count++] = call;
	pthread_cond_broadcast(&stub_cond);
	pthread_mutex_unlock(&stub_lock);
}

static int stub_end_session(void *backend, const char *reason)
{
	(void)backend;
	pthread_mutex_lock(&stub_lock);
	snprintf(end_reason, sizeof end_reason, "%s", reason);
	/* What the real one does with calls still waiting: shutting-down. */
	while (held_count > 0) {
		relay_call *call = held[--held_count];
		pthread_mutex_unlock(&stub_lock);
		relay_call_complete(call, tool_result_error(NULL, "shutting-down", "The session is ending"));
		pthread_mutex_lock(&stub_lock);
	}
	int status = end_status;
	pthread_mutex_unlock(&stub_lock);
	return status;
}

static void stub_hurry_end(void *backend)
{
	(void)backend;
	pthread_mutex_lock(&stub_lock);
	hurried++;
	pthread_mutex_unlock(&stub_lock);
}

static const mcp_handler stub_handler = {
    .dispatch = stub_dispatch,
    .end_session = stub_end_session,
    .hurry_end = stub_hurry_end,
};

/* Waits for the n-th held call (0-based) and returns it. */
static relay_call *wait_held(int n)
{
	pthread_mutex_lock(&stub_lock);
	int64_t deadline = clock_monotonic_ms() + 10000;
	while (held_count <= n && clock_monotonic_ms() < deadline) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&stub_cond, &stub_lock, &ts);
	}
	relay_call *call = held_count > n ? held[n] : NULL;
	pthread_mutex_unlock(&stub_lock);
	if (call == NULL)
		fail_msg("no call reached the manager");
	return call;
}

/* Takes a held call out of the stub (the test then completes it). */
static relay_call *take_held(int n)
{
	relay_call *call = wait_held(n);
	pthread_mutex_lock(&stub_lock);
	for (int i = 0; i < held_count; i++) {
		if (held[i] == call) {
			memmove(held + i, held + i + 1, sizeof held[0] * (size_t)(held_count - i - 1));
			held_count--;
			break;
		}
	}
	pthread_mutex_unlock(&stub_lock);
	return call;
}

/* ---- the harness --------------------------------------------------------- */

typedef struct harness {
	int to_server;   /* we write requests here */
	int from_server; /* we read answers here */
	pthread_t thread;
	mcp_server_config config;
	int status;
	strbuf pending; /* bytes read, not yet returned as lines */
} harness;

static void *serve_thread(void *arg)
{
	harness *h = arg;
	h->status = mcp_serve(&h->config);
	close(h->config.out_fd);
	return NULL;
}

static harness *start(void)
{
	harness *h = calloc(1, sizeof *h);
	int in[2], out[2];
	assert_int_equal(pipe2(in, O_CLOEXEC), 0);
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	h->to_server = in[1];
	h->from_server = out[0];
	h->config.in_fd = in[0];
	h->config.out_fd = out[1];
	h->config.handler = &stub_handler;
	pthread_mutex_lock(&stub_lock);
	held_count = 0;
	end_reason[0] = '\0';
	end_status = 0;
	hurried = 0;
	pthread_mutex_unlock(&stub_lock);
	clock_set_offset_ms(0);
	strbuf_init(&h->pending);
	assert_int_equal(pthread_create(&h->thread, NULL, serve_thread, h), 0);
	return h;
}

static void send_text(harness *h, const char *text)
{
	size_t len = strlen(text);
	while (len > 0) {
		ssize_t n = write(h->to_server, text, len);
		assert_true(n > 0);
		text += n;
		len -= (size_t)n;
	}
}

/* The next line from the server (malloc'd), or NULL after timeout_ms. */
static char *read_line(harness *h, int timeout_ms)
{
	int64_t deadline = clock_monotonic_ms() + timeout_ms;
	for (;;) {
		char *nl = h->pending.len ? memchr(h->pending.data, '\n', h->pending.len) : NULL;
		if (nl) {
			size_t len = (size_t)(nl - h->pending.data);
			char *line = strndup(h->pending.data, len);
			memmove(h->pending.data, nl + 1, h->pending.len - len - 1);
			h->pending.len -= len + 1;
			return line;
		}
		int64_t left = deadline - clock_monotonic_ms();
		if (left <= 0)
			return NULL;
		struct pollfd p = {h->from_server, POLLIN, 0};
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		char buf[65536];
		ssize_t n = read(h->from_server, buf, sizeof buf);
		if (n <= 0)
			return NULL;
		atomic_store(&bytes_seen, 1);
		strbuf_append(&h->pending, buf, (size_t)n);
	}
}

static json_object *read_json(harness *h)
{
	char *line = read_line(h, 10000);
	if (line == NULL)
		fail_msg("no answer from the server");
	json_object *obj = jsonx_parse_str(line, NULL, 0);
	if (obj == NULL)
		fail_msg("not JSON: %s", line);
	free(line);
	return obj;
}

static void expect_line(harness *h, const char *want)
{
	char *line = read_line(h, 10000);
	if (line == NULL)
		fail_msg("no answer; expected %s", want);
	if (strcmp(line, want) != 0)
		fail_msg("got %s\nwant %s", line, want);
	free(line);
}

static void expect_silence(harness *h, int ms)
{
	char *line = read_line(h, ms);
	if (line)
		fail_msg("unexpected output: %s", line);
}

static int stop(harness *h)
{
	close(h->to_server);
	pthread_join(h->thread, NULL);
	int status = h->status;
	close(h->from_server);
	strbuf_free(&h->pending);
	free(h);
	return status;
}

static const char *acquire_call(void)
{
	return "\"method\":\"tools/"
	       "call\",\"params\":{\"name\":\"relay_acquire\",\"arguments\":{\"task\":\"t\","
	       "\"image\":\"i\",\"extractions\":[]}";
}

static void send_acquire(harness *h, const char *id, const char *meta)
{
	char buf[512];
	snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%s,%s%s%s}}\n", id, acquire_call(),
	         meta ? "," : "", meta ? meta : "");
	send_text(h, buf);
}

static int setup(void **state)
{
	(void)state;
	char err[256];
	return contract_init(err, sizeof err);
}

/* ---- tests ------------------------------------------------------------------- */

static void test_progress_rules(void **state)
{
	(void)state;
	harness *h = start();
	send_acquire(h, "1", "\"_meta\":{\"progressToken\":\"tok\"}");
	relay_call *call = take_held(0);
	relay_call_progress(call, 1, -1, "lease requested", false);
	expect_line(
	    h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":"
	       "\"tok\",\"progress\":1,\"message\":\"lease requested\"}}");
	/* Within a second and not forced: held back. */
	int64_t t0 = clock_monotonic_ms();
	relay_call_progress(call, 2, -1, "held back", false);
	if (clock_monotonic_ms() - t0 < 900)
		expect_silence(h, 100);
	/* Forced but not increasing: sent with a larger progress; the first
	 * total known is kept. */
	relay_call_progress(call, 1, 6, "phase end", true);
	expect_line(
	    h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":"
	       "\"tok\",\"progress\":2,\"total\":6,\"message\":\"phase end\"}}");
	relay_call_progress(call, 3, 10, NULL, true);
	expect_line(
	    h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":"
	       "\"tok\",\"progress\":3,\"total\":6}}");
	assert_true(relay_call_last_progress(call) == 3);
	/* A second later (relay time), an ordinary one passes again; one that
	 * does not increase is dropped. */
	clock_set_offset_ms(5000);
	relay_call_progress(call, 3, -1, "same", false);
	expect_silence(h, 100);
	relay_call_progress(call, 4.5, -1, "half", false);
	expect_line(
	    h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":"
	       "\"tok\",\"progress\":4.5,\"total\":6,\"message\":\"half\"}}");
	/* Past the total: the total is left out rather than changed. */
	clock_set_offset_ms(10000);
	relay_call_progress(call, 7, -1, NULL, false);
	expect_line(
	    h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":"
	       "\"tok\",\"progress\":7}}");
	relay_call_complete(call, tool_result_ok(NULL, "done"));
	json_object *resp = read_json(h);
	assert_int_equal(json_object_get_int(json_object_object_get(resp, "id")), 1);
	json_object_put(resp);
	assert_int_equal(stop(h), 0);
}

static void test_progress_token_forms(void **state)
{
	(void)state;
	harness *h = start();
	send_acquire(h, "\"a\"", "\"_meta\":{\"progressToken\":1.50}");
	relay_call *call = take_held(0);
	relay_call_progress(call, 1, -1, NULL, false);
	expect_line(
	    h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":"
	       "1.50,\"progress\":1}}");
	relay_call_complete(call, tool_result_ok(NULL, "done"));
	json_object_put(read_json(h));

	/* No token, or a token that is not a string or number: no progress. */
	send_acquire(h, "2", NULL);
	send_acquire(h, "3", "\"_meta\":{\"progressToken\":null}");
	send_acquire(h, "4", "\"_meta\":{\"progressToken\":{}}");
	for (int i = 0; i < 3; i++) {
		relay_call *c = take_held(0);
		relay_call_progress(c, 1, 2, "nothing", true);
		relay_call_complete(c, tool_result_ok(NULL, "done"));
		json_object *resp = read_json(h);
		assert_true(jsonx_has(resp, "result"));
		json_object_put(resp);
	}
	expect_silence(h, 100);
	assert_int_equal(stop(h), 0);
}

static void test_cancel_means_no_answer(void **state)
{
	(void)state;
	harness *h = start();
	send_acquire(h, "5", "\"_meta\":{\"progressToken\":\"p\"}");
	relay_call *call = take_held(0);
	assert_false(relay_call_is_cancelled(call));
	send_text(h,
	          "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":5,"
	          "\"reason\":\"user\"}}\n");
	/* The notification is handled on the reader: a ping after it proves it. */
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":\"after\",\"method\":\"ping\"}\n");
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":\"after\",\"result\":{}}");
	assert_true(relay_call_is_cancelled(call));
	/* The id is free again at once. */
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\n");
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}");
	/* No progress after cancellation, and no response when it completes. */
	relay_call_progress(call, 1, -1, "late", true);
	relay_call_complete(call, tool_result_ok(NULL, "done anyway"));
	expect_silence(h, 200);
	/* Unknown and answered ids are ignored. */
	send_text(
	    h,
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":77}}\n");
	send_text(
	    h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":5}}\n");
	expect_silence(h, 100);
	assert_int_equal(stop(h), 0);
}

static void test_cancel_matches_equal_numbers(void **state)
{
	(void)state;
	harness *h = start();
	send_acquire(h, "7", NULL);
	relay_call *call = take_held(0);
	send_text(
	    h,
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7.0}}\n");
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}\n");
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}");
	assert_true(relay_call_is_cancelled(call));
	relay_call_complete(call, NULL);
	expect_silence(h, 100);
	/* "7" (a string) is another id. */
	send_acquire(h, "8", NULL);
	call = take_held(0);
	send_text(h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
	             "cancelled\",\"params\":{\"requestId\":\"8\"}}\n");
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}\n");
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}");
	assert_false(relay_call_is_cancelled(call));
	relay_call_complete(call, tool_result_ok(NULL, "done"));
	json_object_put(read_json(h));
	assert_int_equal(stop(h), 0);
}

static void test_duplicate_in_flight(void **state)
{
	(void)state;
	harness *h = start();
	send_acquire(h, "9", NULL);
	relay_call *call = take_held(0);
	send_acquire(h, "9", NULL);
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":9,\"error\":{\"code\":-32600,\"message\":\"Duplicate "
	               "request id\"}}");
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":9e0,\"method\":\"ping\"}\n");
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":9e0,\"error\":{\"code\":-32600,\"message\":\"Duplicate "
	               "request id\"}}");
	relay_call_complete(call, tool_result_ok(NULL, "done"));
	json_object *resp = read_json(h);
	assert_true(jsonx_has(resp, "result"));
	json_object_put(resp);
	/* Answered: the id may be used again. */
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}\n");
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}");
	assert_int_equal(stop(h), 0);
}

static void test_batch_waits_for_calls(void **state)
{
	(void)state;
	harness *h = start();
	char buf[1024];
	snprintf(buf, sizeof buf,
	         "[{\"jsonrpc\":\"2.0\",\"id\":10,%s,\"_meta\":{\"progressToken\":\"b\"}}},"
	         "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"ping\"},"
	         "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}]\n",
	         acquire_call());
	send_text(h, buf);
	relay_call *call = take_held(0);
	expect_silence(h, 200);
	/* Progress of a batched call goes out before the batch's array. */
	relay_call_progress(call, 1, -1, NULL, false);
	expect_line(
	    h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":"
	       "\"b\",\"progress\":1}}");
	relay_call_complete(call, tool_result_ok(NULL, "done"));
	json_object *answer = read_json(h);
	assert_true(json_object_is_type(answer, json_type_array));
	assert_int_equal(json_object_array_length(answer), 2);
	json_object_put(answer);
	assert_int_equal(stop(h), 0);
}

static void test_batch_with_cancelled_call(void **state)
{
	(void)state;
	harness *h = start();
	char buf[1024];
	snprintf(
	    buf, sizeof buf,
	    "[{\"jsonrpc\":\"2.0\",\"id\":20,%s}},{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"ping\"}]\n",
	    acquire_call());
	send_text(h, buf);
	relay_call *call = take_held(0);
	expect_silence(h, 100);
	send_text(
	    h,
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":20}}\n");
	/* The batch no longer waits for the cancelled call. */
	expect_line(h, "[{\"jsonrpc\":\"2.0\",\"id\":21,\"result\":{}}]");
	relay_call_complete(call, tool_result_ok(NULL, "done"));
	expect_silence(h, 100);

	/* A batch whose only request is cancelled writes nothing at all. */
	snprintf(buf, sizeof buf, "[{\"jsonrpc\":\"2.0\",\"id\":22,%s}}]\n", acquire_call());
	send_text(h, buf);
	call = take_held(0);
	send_text(
	    h,
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":22}}\n");
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":23,\"method\":\"ping\"}\n");
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":23,\"result\":{}}");
	relay_call_complete(call, tool_result_ok(NULL, "done"));
	expect_silence(h, 200);
	assert_int_equal(stop(h), 0);
}

static void test_internal_call(void **state)
{
	(void)state;
	relay_call *call = relay_call_new_internal();
	assert_non_null(call);
	assert_false(relay_call_is_cancelled(call));
	relay_call_progress(call, 1, 2, "nothing to send", true);
	relay_call_cancel(call);
	assert_true(relay_call_is_cancelled(call));
	relay_call_complete(call, tool_result_ok(NULL, "freed"));
	/* NULL calls are allowed everywhere. */
	assert_false(relay_call_is_cancelled(NULL));
	relay_call_progress(NULL, 1, -1, NULL, true);
	relay_call_complete(NULL, NULL);
}

static void test_end_on_eof_answers_waiting_calls(void **state)
{
	(void)state;
	harness *h = start();
	pthread_mutex_lock(&stub_lock);
	end_status = 1;
	pthread_mutex_unlock(&stub_lock);
	send_acquire(h, "30", NULL);
	wait_held(0);
	close(h->to_server);
	h->to_server = -1;
	json_object *resp = read_json(h);
	json_object *sc = jsonx_get_obj(jsonx_get_obj(resp, "result"), "structuredContent");
	assert_string_equal(jsonx_get_str(jsonx_get_obj(sc, "error"), "code"), "shutting-down");
	json_object_put(resp);
	pthread_join(h->thread, NULL);
	assert_int_equal(h->status, 1); /* the manager's exit status */
	assert_string_equal(end_reason, "stdin-closed");
	close(h->from_server);
	strbuf_free(&h->pending);
	free(h);
}

static void test_end_on_stdout_failure(void **state)
{
	(void)state;
	harness *h = start();
	close(h->from_server);
	h->from_server = -1;
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
	pthread_join(h->thread, NULL);
	assert_string_equal(end_reason, "stdout-failed");
	close(h->to_server);
	strbuf_free(&h->pending);
	free(h);
}

static void test_end_on_signal(void **state)
{
	(void)state;
	harness *h = start();
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
	/* The handlers are installed by mcp_serve; a signal to the process ends
	 * the session like end of file. */
	kill(getpid(), SIGHUP);
	pthread_join(h->thread, NULL);
	assert_string_equal(end_reason, "signal-SIGHUP");
	assert_int_equal(h->status, 0);
	close(h->to_server);
	close(h->from_server);
	strbuf_free(&h->pending);
	free(h);
}

/* ---- the manager started on demand (mcp_server_config.start_backend) ---- */

static int started;
static int unread_when_started = -1;

static int start_out_fd = -1;
static void *dummy_manager = &started;

static void *start_ok(void *arg, char *errbuf, size_t errlen)
{
	(void)arg;
	(void)errbuf;
	(void)errlen;
	started++;
	/* Was the first answer written before this? Either it still sits in the
	 * pipe, or the test thread has read it (then bytes_seen becomes 1 right
	 * after its read returns; the server cannot write while it is here). */
	int unread = 0;
	ioctl(start_out_fd, FIONREAD, &unread);
	for (int i = 0; unread == 0 && i < 40 && !atomic_load(&bytes_seen); i++)
		usleep(5000);
	unread_when_started = unread > 0 || atomic_load(&bytes_seen) ? 1 : 0;
	return dummy_manager;
}

static void *start_fails(void *arg, char *errbuf, size_t errlen)
{
	(void)arg;
	started++;
	snprintf(errbuf, errlen, "cannot create the session folder: test");
	return NULL;
}

static harness *start_deferred(void *(*fn)(void *, char *, size_t))
{
	harness *h = calloc(1, sizeof *h);
	int in[2], out[2];
	assert_int_equal(pipe2(in, O_CLOEXEC), 0);
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	h->to_server = in[1];
	h->from_server = out[0];
	h->config.in_fd = in[0];
	h->config.out_fd = out[1];
	h->config.handler = &stub_handler;
	h->config.start_backend = fn;
	started = 0;
	unread_when_started = -1;
	atomic_store(&bytes_seen, 0);
	start_out_fd = out[0];
	pthread_mutex_lock(&stub_lock);
	held_count = 0;
	end_reason[0] = '\0';
	end_status = 0;
	pthread_mutex_unlock(&stub_lock);
	strbuf_init(&h->pending);
	assert_int_equal(pthread_create(&h->thread, NULL, serve_thread, h), 0);
	return h;
}

static void test_manager_starts_after_first_answer(void **state)
{
	(void)state;
	harness *h = start_deferred(start_ok);
	send_text(h,
	          "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
	          "\"2025-11-25\"}}\n");
	json_object *init = read_json(h);
	assert_true(jsonx_has(init, "result"));
	json_object_put(init);
	/* A tools/call needs the manager: it exists by then, and it was started
	 * only once the initialize answer had been written. */
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/"
	             "call\",\"params\":{\"name\":\"relay_status\"}}\n");
	json_object *status = read_json(h);
	assert_true(jsonx_has(status, "result"));
	json_object_put(status);
	assert_int_equal(started, 1);
	assert_true(unread_when_started > 0);
	assert_int_equal(stop(h), 0);
	assert_string_equal(end_reason, "stdin-closed");
}

static void test_manager_starts_without_requests(void **state)
{
	(void)state;
	harness *h = start_deferred(start_ok);
	/* No request at all: the manager still starts (reconciliation must not
	 * wait for the client), without writing anything. */
	int64_t deadline = clock_monotonic_ms() + 10000;
	while (started == 0 && clock_monotonic_ms() < deadline)
		usleep(10000);
	assert_int_equal(started, 1);
	expect_silence(h, 50);
	assert_int_equal(stop(h), 0);
}

static void test_manager_start_failure_ends_the_session(void **state)
{
	(void)state;
	harness *h = start_deferred(start_fails);
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
	expect_line(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
	pthread_join(h->thread, NULL);
	assert_int_equal(h->status, 1);
	assert_int_equal(started, 1);
	close(h->to_server);
	close(h->from_server);
	strbuf_free(&h->pending);
	free(h);
}

/* ---- defects found with hostile input (issue 17) ---------------------------- */

/* A lone surrogate id is echoed exactly (spec/mcp.md §2.1), not as "\ufffd";
 * and "\ufffd" itself is another id. */
static void test_lone_surrogate_id_echoed(void **state)
{
	(void)state;
	harness *h = start();
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":\"\\ud800\",\"method\":\"ping\"}\n");
	char *line = read_line(h, 10000);
	assert_non_null(line);
	assert_non_null(strstr(line, "\"id\":\"\\ud800\""));
	free(line);
	/* Progress tokens travel the same way; the call's answer keeps its id. */
	send_acquire(h, "\"x\\udc00y\"", "\"_meta\":{\"progressToken\":\"\\ud83d\"}");
	relay_call *call = take_held(0);
	relay_call_progress(call, 1, -1, NULL, true);
	line = read_line(h, 10000);
	assert_non_null(line);
	assert_non_null(strstr(line, "\"progressToken\":\"\\ud83d\""));
	free(line);
	relay_call_complete(call, tool_result_ok(NULL, "done"));
	line = read_line(h, 10000);
	assert_non_null(line);
	assert_non_null(strstr(line, "\"id\":\"x\\udc00y\""));
	free(line);
	assert_int_equal(stop(h), 0);
}

/* Bytes a guest controls that are not UTF-8 leave as U+FFFD, in the text
 * block, the structured result and the headline alike (spec/tools.md §5.3). */
static void test_guest_bytes_leave_as_utf8(void **state)
{
	(void)state;
	harness *h = start();
	send_acquire(h, "1", NULL);
	relay_call *call = take_held(0);
	json_object *structured = json_object_new_object();
	jsonx_add_str(structured, "name", "not-utf8-\xff\xfe");
	relay_call_complete(
	    call, tool_result_error(structured, "receiver-failed", "receiver: 1: \xff\xfe\xfd: not found"));
	char *line = read_line(h, 10000);
	assert_non_null(line);
	assert_true(utf8_valid(line, strlen(line)));
	assert_non_null(strstr(line, "receiver: 1: \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd: not found"));
	assert_non_null(strstr(line, "not-utf8-\xef\xbf\xbd\xef\xbf\xbd"));
	json_object *obj = jsonx_parse_str(line, NULL, 0);
	assert_non_null(obj);
	json_object_put(obj);
	free(line);
	assert_int_equal(stop(h), 0);
}

/* A tool name with U+0000 names no tool (it used to select relay_status). */
static void test_tool_name_with_nul(void **state)
{
	(void)state;
	harness *h = start();
	send_text(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
	             "\"relay_status\\u0000x\",\"arguments\":{}}}\n");
	json_object *resp = read_json(h);
	json_object *result = jsonx_get_obj(resp, "result");
	assert_non_null(result);
	bool is_error = false;
	assert_true(jsonx_get_bool(result, "isError", &is_error) && is_error);
	const char *code =
	    jsonx_get_str(jsonx_get_obj(jsonx_get_obj(result, "structuredContent"), "error"), "code");
	assert_non_null(code);
	assert_string_equal(code, "unknown-tool");
	json_object_put(resp);
	assert_int_equal(stop(h), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_progress_rules),
	    cmocka_unit_test(test_progress_token_forms),
	    cmocka_unit_test(test_cancel_means_no_answer),
	    cmocka_unit_test(test_cancel_matches_equal_numbers),
	    cmocka_unit_test(test_duplicate_in_flight),
	    cmocka_unit_test(test_batch_waits_for_calls),
	    cmocka_unit_test(test_batch_with_cancelled_call),
	    cmocka_unit_test(test_internal_call),
	    cmocka_unit_test(test_end_on_eof_answers_waiting_calls),
	    cmocka_unit_test(test_end_on_stdout_failure),
	    cmocka_unit_test(test_end_on_signal),
	    cmocka_unit_test(test_manager_starts_after_first_answer),
	    cmocka_unit_test(test_manager_starts_without_requests),
	    cmocka_unit_test(test_manager_start_failure_ends_the_session),
	    cmocka_unit_test(test_lone_surrogate_id_echoed),
	    cmocka_unit_test(test_guest_bytes_leave_as_utf8),
	    cmocka_unit_test(test_tool_name_with_nul),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
