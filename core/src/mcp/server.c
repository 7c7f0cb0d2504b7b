/*
 * The stdio MCP server (mcp.md): framing, JSON-RPC classification, the
 * reader loop and the end of the session. The methods are in methods.c,
 * the output and batches in output.c.
 *
 * Threads: the reader (the caller of mcp_serve) reads and dispatches
 * continuously and is the only thread that starts the end of the session;
 * tool work runs on the backend's threads, which complete calls through
 * relay_call_complete() (call/call.h).
 */
#include "mcp/server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp/server_internal.h"
#include "mcp/wire.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/log.h"

/* Servers whose mcp_serve returned. Tool calls may still complete on the
 * backend's threads after that (until the process exits), so a server is
 * never freed; this list keeps it reachable. Guarded by retired_lock. */
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static mcp_server *retired_servers;

/* The self-pipe of the signal handler. Process-wide because signal handlers
 * are; set up once by mcp_serve before any handler is installed. */
static int signal_pipe[2] = {-1, -1};

/* ---- classification ---------------------------------------------------------- */

/* One JSON-RPC message, possibly an element of a batch (spec/mcp.md §2.1). */
static void handle_message(mcp_server *srv, batch *b, json_object *msg)
{
	if (!json_object_is_type(msg, json_type_object)) {
		send_error(srv, b, "null", -32600, "Invalid Request", NULL);
		return;
	}
	json_object *id = NULL, *method_obj = NULL, *params = NULL, *version = NULL;
	bool has_id = json_object_object_get_ex(msg, "id", &id);
	bool has_method = json_object_object_get_ex(msg, "method", &method_obj);
	bool has_params = json_object_object_get_ex(msg, "params", &params);
	bool id_ok = has_id && wire_is_id(id);

	if (!json_object_object_get_ex(msg, "jsonrpc", &version) ||
	    !json_object_is_type(version, json_type_string) ||
	    strcmp(json_object_get_string(version), "2.0") != 0) {
		char *id_text = id_ok ? wire_id_text(id) : NULL;
		send_error_reason(srv, b, id_text ? id_text : "null", -32600, "Invalid Request",
		                  "a JSON-RPC 2.0 message needs \"jsonrpc\": \"2.0\"");
		free(id_text);
		return;
	}
	if (!has_method && has_id &&
	    (json_object_object_get_ex(msg, "result", NULL) ||
	     json_object_object_get_ex(msg, "error", NULL))) {
		log_info("ignored a JSON-RPC response from the client: this server sends no requests");
		return;
	}
	if (!has_method || !json_object_is_type(method_obj, json_type_string)) {
		char *id_text = id_ok ? wire_id_text(id) : NULL;
		send_error_reason(srv, b, id_text ? id_text : "null", -32600, "Invalid Request",
		                  "a request or notification needs a string method");
		free(id_text);
		return;
	}
	const char *method = json_object_get_string(method_obj);
	if (!has_id) {
		handle_notification(
		    srv, method, has_params && json_object_is_type(params, json_type_object) ? params : NULL);
		return;
	}
	if (!id_ok) {
		send_error_reason(srv, b, "null", -32600, "Invalid Request",
		                  "an id must be a string or a number");
		return;
	}
	if (has_params && !json_object_is_type(params, json_type_object)) {
		char *id_text = wire_id_text(id);
		if (id_text)
			send_error_reason(srv, b, id_text, -32602, "Invalid params",
			                  "params must be an object");
		else
			send_internal_error(srv, b, NULL);
		free(id_text);
		return;
	}
	handle_request(srv, b, method, id, has_params ? params : NULL);
}

static void handle_line(mcp_server *srv, const char *line, size_t len)
{
	char why[160];
	bool is_null = false;
	json_object *msg = NULL;
	wire_status st = wire_parse(line, len, &msg, &is_null, why, sizeof why);
	if (st == WIRE_NO_MEMORY) {
		send_error_reason(srv, NULL, "null", -32700, "Message too large",
		                  "the message could not be held in memory");
		return;
	}
	if (st != WIRE_OK) {
		send_error_reason(srv, NULL, "null", -32700, "Parse error", why);
		return;
	}
	if (json_object_is_type(msg, json_type_array)) {
		size_t n = json_object_array_length(msg);
		if (n == 0) {
			send_error_reason(srv, NULL, "null", -32600, "Invalid Request", "an empty batch");
		} else {
			batch *b = batch_new();
			if (b == NULL) {
				send_internal_error(srv, NULL, NULL);
			} else {
				for (size_t i = 0; i < n; i++)
					handle_message(srv, b, json_object_array_get_idx(msg, i));
				batch_release(srv, b);
			}
		}
	} else if (is_null) {
		send_error_reason(srv, NULL, "null", -32600, "Invalid Request",
		                  "a message must be a JSON object or a batch array");
	} else {
		handle_message(srv, NULL, msg);
	}
	json_object_put(msg);
}

/* ---- session end ------------------------------------------------------------ */

typedef struct end_job {
	mcp_server *srv;
	char reason[64];
} end_job;

static void *end_session_thread(void *arg)
{
	end_job *job = arg;
	mcp_server *srv = job->srv;
	int status = srv->handler->end_session(srv->backend, job->reason);
	pthread_mutex_lock(&srv->lock);
	srv->exit_status = status;
	srv->ending_done = true;
	pthread_mutex_unlock(&srv->lock);
	wake_reader(srv, WAKE_END_DONE);
	free(job);
	return NULL;
}

/* Starts the end of the session once; later triggers are ignored. Called on
 * the reader thread only. */
static void begin_end(mcp_server *srv, const char *reason)
{
	pthread_mutex_lock(&srv->lock);
	bool already = srv->ending;
	srv->ending = true;
	pthread_mutex_unlock(&srv->lock);
	if (already)
		return;
	log_info("session ending: %s", reason);
	if (!ensure_backend(srv)) {
		/* No manager: nothing was started, nothing to pause or release. */
		pthread_mutex_lock(&srv->lock);
		srv->exit_status = srv->settings_problem ? 2 : srv->backend_failed ? 1 : 0;
		srv->ending_done = true;
		pthread_mutex_unlock(&srv->lock);
		return;
	}
	end_job *job = calloc(1, sizeof *job);
	pthread_t thread;
	if (job != NULL) {
		job->srv = srv;
		snprintf(job->reason, sizeof job->reason, "%s", reason);
		if (pthread_create(&thread, NULL, end_session_thread, job) == 0) {
			pthread_detach(thread);
			return;
		}
		free(job);
	}
	/* No thread: end the session on the reader (it then reads no more). */
	int status = srv->handler->end_session(srv->backend, reason);
	pthread_mutex_lock(&srv->lock);
	srv->exit_status = status;
	srv->ending_done = true;
	pthread_mutex_unlock(&srv->lock);
}

static void on_signal(int signo)
{
	int saved = errno;
	if (signal_pipe[1] >= 0) {
		char c = (char)signo;
		ssize_t ignored = write(signal_pipe[1], &c, 1);
		(void)ignored;
	}
	errno = saved;
}

static int install_signals(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (signal_pipe[0] < 0 && pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
		log_error("cannot create the signal pipe: %s", strerror(errno));
		return -1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	return 0;
}

static const char *signal_reason(int signo)
{
	switch (signo) {
	case SIGTERM: return "signal-SIGTERM";
	case SIGINT: return "signal-SIGINT";
	case SIGHUP: return "signal-SIGHUP";
	default: return "signal";
	}
}

/* Handles what arrived on the server's wake pipe and the signal pipe. */
static void drain_wakeups(mcp_server *srv)
{
	unsigned char wakes[64];
	ssize_t n;
	while ((n = read(srv->wake_pipe[0], wakes, sizeof wakes)) > 0)
		for (ssize_t i = 0; i < n; i++)
			if (wakes[i] == WAKE_OUTPUT_FAILED)
				begin_end(srv, "stdout-failed");
	while ((n = read(signal_pipe[0], wakes, sizeof wakes)) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			int signo = wakes[i];
			pthread_mutex_lock(&srv->lock);
			bool ending = srv->ending;
			pthread_mutex_unlock(&srv->lock);
			/* A second SIGTERM or SIGINT skips the rest of the grace
			 * period (spec/lifecycle.md §11.1). */
			if (ending && srv->backend != NULL && (signo == SIGTERM || signo == SIGINT))
				srv->handler->hurry_end(srv->backend);
			begin_end(srv, signal_reason(signo));
		}
	}
}

/* ---- the reader ---------------------------------------------------------------- */

/* Handles every complete line in `in` from `*scan_from` on; keeps the
 * incomplete rest at the front of the buffer. */
static void handle_lines(mcp_server *srv, strbuf *in, size_t *scan_from)
{
	size_t start = 0;
	for (;;) {
		char *nl = memchr(in->data + *scan_from, '\n', in->len - *scan_from);
		if (nl == NULL) {
			*scan_from = in->len;
			break;
		}
		size_t end = (size_t)(nl - in->data);
		size_t line_len = end - start;
		if (line_len > 0 && in->data[start + line_len - 1] == '\r')
			line_len--;
		bool blank = true;
		for (size_t i = 0; i < line_len && blank; i++) {
			char c = in->data[start + i];
			blank = c == ' ' || c == '\t' || c == '\r';
		}
		if (!blank)
			handle_line(srv, in->data + start, line_len);
		start = end + 1;
		*scan_from = start;
	}
	if (start > 0) {
		memmove(in->data, in->data + start, in->len - start);
		in->len -= start;
		*scan_from -= start;
		in->data[in->len] = '\0';
	}
	/* Give back the memory of a very long line once it is handled. */
	if (in->capacity > KEEP_INPUT_BUFFER_BYTES && in->len < KEEP_INPUT_BUFFER_BYTES / 2) {
		strbuf smaller = STRBUF_INIT;
		strbuf_reserve(&smaller, in->len > READ_CHUNK_BYTES ? in->len : READ_CHUNK_BYTES);
		strbuf_append(&smaller, in->data, in->len);
		if (strbuf_ok(&smaller)) {
			strbuf_free(in);
			*in = smaller;
		} else {
			strbuf_free(&smaller);
		}
	}
}

/* A server over `config`, with its wake-up pipes and the signal handlers
 * installed; NULL (logged) when that fails. */
static mcp_server *server_new(const mcp_server_config *config)
{
	mcp_server *srv = calloc(1, sizeof *srv);
	if (srv == NULL)
		return NULL;
	srv->in_fd = config->in_fd;
	srv->out_fd = config->out_fd;
	srv->handler = config->handler;
	srv->backend = config->backend;
	srv->start_backend = config->backend == NULL ? config->start_backend : NULL;
	srv->start_arg = config->start_arg;
	srv->settings_problem = config->settings_problem;
	pthread_mutex_init(&srv->out_lock, NULL);
	pthread_mutex_init(&srv->lock, NULL);
	pthread_mutex_init(&srv->task_lock, NULL);
	strbuf_init(&srv->out);
	atomic_init(&srv->out_failed, false);
	snprintf(srv->negotiated, sizeof srv->negotiated, "%s", PROTOCOL_NEWEST_LEGACY);
	srv->initial_ppid = getppid();
	srv->reader = pthread_self();
	srv->wake_pipe[0] = srv->wake_pipe[1] = -1;
	if (install_signals() != 0 || pipe2(srv->wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
		log_error("cannot create the server's wake-up pipes: %s", strerror(errno));
		strbuf_free(&srv->out);
		free(srv);
		return NULL;
	}
	return srv;
}

int mcp_serve(const mcp_server_config *config)
{
	mcp_server *srv = server_new(config);
	if (srv == NULL)
		return 1;

	strbuf in = STRBUF_INIT;
	size_t scan_from = 0;    /* bytes of `in` already searched for a newline */
	bool discarding = false; /* dropping the rest of a line too large for memory */
	bool reading = true;
	int64_t next_parent_check_ms = clock_monotonic_ms() + PARENT_CHECK_INTERVAL_MS;
	int64_t backend_start_ms = clock_monotonic_ms() + BACKEND_START_DELAY_MS;
	for (;;) {
		pthread_mutex_lock(&srv->lock);
		bool done = srv->ending_done;
		bool ending = srv->ending;
		pthread_mutex_unlock(&srv->lock);
		if (done)
			break;

		struct pollfd pfd[3];
		nfds_t nfds = 0;
		pfd[nfds++] = (struct pollfd){signal_pipe[0], POLLIN, 0};
		pfd[nfds++] = (struct pollfd){srv->wake_pipe[0], POLLIN, 0};
		if (reading)
			pfd[nfds++] = (struct pollfd){srv->in_fd, POLLIN, 0};
		int timeout_ms = PARENT_CHECK_INTERVAL_MS;
		if (srv->backend == NULL && srv->start_backend != NULL && !srv->backend_failed) {
			int64_t left = backend_start_ms - clock_monotonic_ms();
			timeout_ms = left <= 0 ? 0 : (int)left;
		}
		int rc = poll(pfd, nfds, timeout_ms);
		if (rc < 0 && errno != EINTR) {
			log_error("poll failed: %s", strerror(errno));
			reading = false;
			begin_end(srv, "stdin-closed");
			continue;
		}
		int64_t now = clock_monotonic_ms();
		if (srv->backend == NULL && srv->start_backend != NULL && !srv->backend_failed &&
		    now >= backend_start_ms && !ensure_backend(srv) && !ending)
			begin_end(srv, "manager-failed");
		if (now >= next_parent_check_ms) {
			next_parent_check_ms = now + PARENT_CHECK_INTERVAL_MS;
			if (!ending && getppid() != srv->initial_ppid)
				begin_end(srv, "parent-exited");
		}
		if (rc <= 0)
			continue;
		if (pfd[0].revents || pfd[1].revents)
			drain_wakeups(srv);
		if (nfds < 3 || pfd[2].revents == 0)
			continue;

		if (discarding || !strbuf_reserve(&in, READ_CHUNK_BYTES)) {
			/* No memory for this line: drop it up to its end, then answer
			 * -32700 "Message too large" and go on with the next. */
			if (!discarding) {
				log_error(
				    "no memory for a request line of more than %zu bytes; discarding it",
				    in.len);
				discarding = true;
			}
			strbuf_free(&in);
			strbuf_init(&in);
			scan_from = 0;
			char sink[65536];
			ssize_t n = read(srv->in_fd, sink, sizeof sink);
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (n <= 0) {
				reading = false;
				send_error_reason(srv, NULL, "null", -32700, "Message too large",
				                  "the message could not be held in memory");
				flush_output(srv);
				begin_end(srv, "stdin-closed");
				continue;
			}
			char *nl = memchr(sink, '\n', (size_t)n);
			if (nl == NULL)
				continue;
			discarding = false;
			send_error_reason(srv, NULL, "null", -32700, "Message too large",
			                  "the message could not be held in memory");
			strbuf_append(&in, nl + 1, (size_t)(sink + n - nl - 1));
			if (!strbuf_ok(&in)) {
				strbuf_free(&in);
				strbuf_init(&in);
				discarding = true;
				continue;
			}
			handle_lines(srv, &in, &scan_from);
			flush_output(srv);
			continue;
		}
		ssize_t n = read(srv->in_fd, in.data + in.len, READ_CHUNK_BYTES);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			n = 0;
		}
		if (n == 0) {
			/* End of file: a last line without its newline is still a
			 * message. */
			reading = false;
			if (in.len > 0) {
				strbuf_putc(&in, '\n');
				if (strbuf_ok(&in))
					handle_lines(srv, &in, &scan_from);
			}
			flush_output(srv);
			begin_end(srv, "stdin-closed");
			continue;
		}
		in.len += (size_t)n;
		in.data[in.len] = '\0';
		handle_lines(srv, &in, &scan_from);
		/* Input drained for now: write what the reader produced. */
		flush_output(srv);
		/* The first answers are out: the manager's startup may begin. */
		backend_start_ms = now;
	}
	strbuf_free(&in);
	tasks_close(srv);
	close_subscriptions(srv);
	flush_output(srv);
	int status = srv->exit_status;
	/* The wake pipe stays open: a late call may still write to it. */
	pthread_mutex_lock(&retired_lock);
	srv->next_retired = retired_servers;
	retired_servers = srv;
	pthread_mutex_unlock(&retired_lock);
	return status;
}
