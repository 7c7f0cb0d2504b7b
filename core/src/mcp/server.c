/*
 * The stdio MCP server (mcp.md): framing, JSON-RPC classification, both
 * protocol eras, tools/list and tools/call, progress, cancellation, batches,
 * subscriptions/listen and the end of the session.
 *
 * Threads: the reader (the caller of mcp_serve) reads and dispatches
 * continuously and is the only thread that starts the end of the session;
 * tool work runs on the manager's threads, which complete calls through
 * relay_call_complete(). Every message goes through one output buffer under
 * one lock, so messages never interleave; the reader defers flushing while
 * it still has input to handle, so pipelined requests are answered with few
 * writes.
 *
 * Lock order: srv->lock, then call->lock, then batch->lock / srv->out_lock.
 * Nothing takes srv->lock while holding a call's lock.
 */
#include "mcp/server.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "contract/contract.h"
#include "mcp/call.h"
#include "mcp/render.h"
#include "mcp/wire.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"

#define PROTOCOL_MODERN          "2026-07-28"
#define PROTOCOL_NEWEST_LEGACY   "2025-11-25"
#define SUPPORTED_VERSIONS_JSON  "[\"2026-07-28\",\"2025-11-25\",\"2025-06-18\",\"2025-03-26\",\"2024-11-05\"]"
#define META_VERSION_KEY         "io.modelcontextprotocol/protocolVersion"
#define READ_CHUNK_BYTES         65536
#define KEEP_INPUT_BUFFER_BYTES  (1u << 20)
#define FLUSH_THRESHOLD_BYTES    (16u << 10)
#define PROGRESS_MIN_INTERVAL_MS 1000
#define PARENT_CHECK_INTERVAL_MS 1000
#define MANAGER_START_DELAY_MS   200

/* Bytes on the signal self-pipe besides signal numbers. */
#define WAKE_END_DONE      'e'
#define WAKE_OUTPUT_FAILED 'o'

typedef struct batch batch;
typedef struct subscription subscription;

typedef struct mcp_server {
	int in_fd;
	int out_fd;
	manager *mgr;

	/* The output stream: messages are appended under out_lock and written
	 * by whoever flushes. out_failed is set once a write fails; nothing is
	 * written after that. */
	pthread_mutex_t out_lock;
	strbuf out;
	atomic_bool out_failed;

	/* Protocol and session state under `lock`. */
	pthread_mutex_t lock;
	char negotiated[16];
	relay_call *inflight;        /* tools/call requests not yet answered */
	subscription *subscriptions; /* open subscriptions/listen requests */
	bool ending;                 /* the session end has begun */
	bool ending_done;            /* manager_end_session returned */
	int exit_status;

	pthread_t reader;
	pid_t initial_ppid;
	/* A manager started on demand (mcp_server_config.start_manager); only
	 * the reader thread starts it. */
	manager *(*start_manager)(void *arg, char *errbuf, size_t errlen);
	void *start_arg;
	bool manager_failed;
	const char *settings_problem; /* mcp_server_config.settings_problem */
	int wake_pipe[2];             /* end of the session done, output failed */
	struct mcp_server *next_retired;
} mcp_server;

struct relay_call {
	mcp_server *srv;  /* NULL for an internal call */
	char *id_text;    /* the id's JSON text, echoed exactly */
	char *id_key;     /* the id as compared (wire_id_key) */
	char *token_text; /* progressToken's JSON text, or NULL */
	bool modern;
	atomic_bool cancelled;
	relay_call *next; /* srv->inflight, under srv->lock */

	pthread_mutex_t lock; /* the fields below */
	batch *batch;         /* the batch awaiting this answer, or NULL */
	bool done;            /* completed: no progress after this */
	bool sent_progress;
	double last_progress;
	int64_t last_progress_ms;
	double total; /* the total sent so far, < 0 when none was */
};

struct subscription {
	char *id_text;
	char *id_key;
	subscription *next;
};

/* A batch collects the answers of its requests and writes them as one
 * array once the last is ready (mcp.md §2.2). */
struct batch {
	pthread_mutex_t lock;
	strbuf answers;
	size_t answer_count;
	size_t pending; /* requests not yet answered, plus one while dispatching */
};

/* Servers whose mcp_serve returned. Tool calls may still complete on the
 * manager's threads after that (until the process exits), so a server is
 * never freed; this list keeps it reachable. Guarded by retired_lock. */
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static mcp_server *retired_servers;

/* The self-pipe of the signal handler. Process-wide because signal handlers
 * are; set up once by mcp_serve before any handler is installed. */
static int signal_pipe[2] = {-1, -1};

/* ---- output -------------------------------------------------------------- */

/* Wakes the reader of `srv` (its own pipe, so that servers never take each
 * other's wake-ups). */
static void wake_reader(mcp_server *srv, char why)
{
	if (srv->wake_pipe[1] >= 0) {
		ssize_t ignored = write(srv->wake_pipe[1], &why, 1);
		(void)ignored;
	}
}

/* Writes the buffered output; call with out_lock held. */
static void flush_locked(mcp_server *srv)
{
	size_t off = 0;
	while (!atomic_load(&srv->out_failed) && off < srv->out.len) {
		ssize_t n = write(srv->out_fd, srv->out.data + off, srv->out.len - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				struct pollfd p = {srv->out_fd, POLLOUT, 0};
				poll(&p, 1, 1000);
				continue;
			}
			atomic_store(&srv->out_failed, true);
			/* The reader starts the end of the session (stdout-failed). */
			wake_reader(srv, WAKE_OUTPUT_FAILED);
			break;
		}
		off += (size_t)n;
	}
	strbuf_reset(&srv->out);
	if (srv->out.capacity > KEEP_INPUT_BUFFER_BYTES) {
		strbuf_free(&srv->out);
		strbuf_init(&srv->out);
	}
}

/* Queues one complete message (without its newline). With `defer`, the
 * reader flushes later; otherwise it is written now. */
static void send_message(mcp_server *srv, const char *msg, size_t len, bool defer)
{
	/* Every byte that leaves is UTF-8 (tools.md §5.3): a guest's or a file
	 * name's bytes may have reached a result, a headline or an error. In
	 * JSON text they can only sit inside strings (the syntax is ASCII), so
	 * replacing each invalid sequence with U+FFFD keeps the message valid
	 * JSON. The evidence keeps the original bytes; only the stream is
	 * repaired. */
	char *repaired = NULL;
	if (!utf8_valid(msg, len)) {
		size_t repaired_len = 0;
		repaired = utf8_sanitize(msg, len, &repaired_len);
		if (repaired == NULL) {
			log_error("out of memory repairing a message that is not UTF-8; it is not sent");
			return;
		}
		msg = repaired;
		len = repaired_len;
	}
	pthread_mutex_lock(&srv->out_lock);
	if (!atomic_load(&srv->out_failed)) {
		strbuf_append(&srv->out, msg, len);
		strbuf_putc(&srv->out, '\n');
		if (!strbuf_ok(&srv->out)) {
			/* No memory to queue it: write what is queued, then this one
			 * directly, so the stream stays whole. */
			srv->out.failed = false;
			flush_locked(srv);
			struct iovec_like {
				const char *p;
				size_t n;
			} parts[2] = {{msg, len}, {"\n", 1}};
			for (int i = 0; i < 2 && !atomic_load(&srv->out_failed); i++) {
				size_t off = 0;
				while (off < parts[i].n) {
					ssize_t n = write(srv->out_fd, parts[i].p + off, parts[i].n - off);
					if (n < 0 && errno == EINTR)
						continue;
					if (n <= 0) {
						atomic_store(&srv->out_failed, true);
						wake_reader(srv, WAKE_OUTPUT_FAILED);
						break;
					}
					off += (size_t)n;
				}
			}
		} else if (!defer || srv->out.len > FLUSH_THRESHOLD_BYTES) {
			flush_locked(srv);
		}
	}
	pthread_mutex_unlock(&srv->out_lock);
	free(repaired);
}

static void flush_output(mcp_server *srv)
{
	pthread_mutex_lock(&srv->out_lock);
	flush_locked(srv);
	pthread_mutex_unlock(&srv->out_lock);
}

static bool on_reader_thread(const mcp_server *srv)
{
	return pthread_equal(pthread_self(), srv->reader);
}

static void batch_add(batch *b, const char *msg, size_t len);

/* The last resort when an answer could not be formed: a fixed -32603 error
 * built without allocating. */
static void send_internal_error(mcp_server *srv, batch *b, const char *id_text)
{
	char msg[512];
	int n = snprintf(
	    msg, sizeof msg,
	    "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32603,\"message\":\"Internal error\"}}",
	    id_text && strlen(id_text) < 400 ? id_text : "null");
	if (n <= 0 || (size_t)n >= sizeof msg)
		return;
	log_error("out of memory forming a response; answered -32603");
	if (b)
		batch_add(b, msg, (size_t)n);
	else
		send_message(srv, msg, (size_t)n, on_reader_thread(srv));
}

/* Where an answer goes: its batch, or the stream. `msg` is a complete
 * JSON-RPC response. */
static void deliver(mcp_server *srv, batch *b, const char *id_text, strbuf *msg)
{
	if (!strbuf_ok(msg)) {
		send_internal_error(srv, b, id_text);
		return;
	}
	if (b)
		batch_add(b, msg->data, msg->len);
	else
		send_message(srv, msg->data, msg->len, on_reader_thread(srv));
}

static void begin_response(strbuf *sb, const char *id_text)
{
	strbuf_puts(sb, "{\"jsonrpc\":\"2.0\",\"id\":");
	strbuf_puts(sb, id_text ? id_text : "null");
}

static void send_error(mcp_server *srv, batch *b, const char *id_text, int code, const char *message,
                       const char *data_json)
{
	strbuf sb = STRBUF_INIT;
	begin_response(&sb, id_text);
	strbuf_printf(&sb, ",\"error\":{\"code\":%d,\"message\":", code);
	jsonx_write_string(&sb, message, strlen(message));
	if (data_json) {
		strbuf_puts(&sb, ",\"data\":");
		strbuf_puts(&sb, data_json);
	}
	strbuf_puts(&sb, "}}");
	deliver(srv, b, id_text, &sb);
	strbuf_free(&sb);
}

/* An error whose data is {"reason": <text>}. */
static void send_error_reason(mcp_server *srv, batch *b, const char *id_text, int code, const char *message,
                              const char *reason)
{
	strbuf data = STRBUF_INIT;
	strbuf_puts(&data, "{\"reason\":");
	jsonx_write_string(&data, reason, strlen(reason));
	strbuf_putc(&data, '}');
	send_error(srv, b, id_text, code, message, strbuf_ok(&data) ? strbuf_str(&data) : NULL);
	strbuf_free(&data);
}

/* `result_json` is a complete JSON object. */
static void send_result(mcp_server *srv, batch *b, const char *id_text, const char *result_json, size_t len)
{
	strbuf sb = STRBUF_INIT;
	strbuf_reserve(&sb, len + 48);
	begin_response(&sb, id_text);
	strbuf_puts(&sb, ",\"result\":");
	strbuf_append(&sb, result_json, len);
	strbuf_putc(&sb, '}');
	deliver(srv, b, id_text, &sb);
	strbuf_free(&sb);
}

/* ---- batches -------------------------------------------------------------- */

static batch *batch_new(void)
{
	batch *b = calloc(1, sizeof *b);
	if (b == NULL)
		return NULL;
	pthread_mutex_init(&b->lock, NULL);
	strbuf_init(&b->answers);
	b->pending = 1;
	return b;
}

static void batch_add(batch *b, const char *msg, size_t len)
{
	pthread_mutex_lock(&b->lock);
	if (b->answer_count++)
		strbuf_putc(&b->answers, ',');
	strbuf_append(&b->answers, msg, len);
	pthread_mutex_unlock(&b->lock);
}

static void batch_hold(batch *b)
{
	pthread_mutex_lock(&b->lock);
	b->pending++;
	pthread_mutex_unlock(&b->lock);
}

/* Drops one pending unit; the last one writes the array (or nothing when no
 * element of the batch was answered). */
static void batch_release(mcp_server *srv, batch *b)
{
	pthread_mutex_lock(&b->lock);
	bool last = --b->pending == 0;
	pthread_mutex_unlock(&b->lock);
	if (!last)
		return;
	if (b->answer_count > 0) {
		strbuf sb = STRBUF_INIT;
		strbuf_reserve(&sb, b->answers.len + 2);
		strbuf_putc(&sb, '[');
		strbuf_append(&sb, strbuf_str(&b->answers), b->answers.len);
		strbuf_putc(&sb, ']');
		if (strbuf_ok(&sb) && strbuf_ok(&b->answers))
			send_message(srv, sb.data, sb.len, on_reader_thread(srv));
		else
			send_internal_error(srv, NULL, NULL);
		strbuf_free(&sb);
	}
	strbuf_free(&b->answers);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

/* ---- calls ---------------------------------------------------------------- */

bool relay_call_is_cancelled(const relay_call *call)
{
	return call != NULL && atomic_load(&call->cancelled);
}

void relay_call_cancel(relay_call *call)
{
	if (call)
		atomic_store(&call->cancelled, true);
}

double relay_call_last_progress(const relay_call *call)
{
	if (call == NULL)
		return 0;
	pthread_mutex_lock((pthread_mutex_t *)&call->lock);
	double last = call->last_progress;
	pthread_mutex_unlock((pthread_mutex_t *)&call->lock);
	return last;
}

void relay_call_progress(relay_call *call, double progress, double total, const char *message, bool force)
{
	if (call == NULL || call->srv == NULL || call->token_text == NULL || atomic_load(&call->cancelled) ||
	    !isfinite(progress))
		return;
	mcp_server *srv = call->srv;
	pthread_mutex_lock(&call->lock);
	/* Relay time (util/clock.h), so that tests can move it. */
	int64_t now = clock_now_ms();
	if (call->done || atomic_load(&srv->out_failed) || atomic_load(&call->cancelled))
		goto out;
	if (call->sent_progress) {
		/* At most one a second, except the first and last of a phase. */
		if (!force && now - call->last_progress_ms < PROGRESS_MIN_INTERVAL_MS)
			goto out;
		/* progress increases strictly with every notification. */
		if (progress <= call->last_progress) {
			if (!force)
				goto out;
			progress = call->last_progress + 1;
		}
	}
	/* total: sent only when known, and then never changed. */
	if (call->total < 0 && total >= 0 && isfinite(total))
		call->total = total;
	strbuf sb = STRBUF_INIT;
	strbuf_puts(
	    &sb, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":");
	strbuf_puts(&sb, call->token_text);
	strbuf_puts(&sb, ",\"progress\":");
	jsonx_write_number(&sb, progress);
	if (call->total >= 0 && progress <= call->total) {
		strbuf_puts(&sb, ",\"total\":");
		jsonx_write_number(&sb, call->total);
	}
	if (message) {
		strbuf_puts(&sb, ",\"message\":");
		jsonx_write_string(&sb, message, strlen(message));
	}
	strbuf_puts(&sb, "}}");
	if (strbuf_ok(&sb)) {
		/* Written now, under the call's lock, so it always precedes the
		 * call's response (relay_call_complete takes the same lock). */
		send_message(srv, sb.data, sb.len, false);
		call->last_progress = progress;
		call->last_progress_ms = now;
		call->sent_progress = true;
	}
	strbuf_free(&sb);
out:
	pthread_mutex_unlock(&call->lock);
}

static relay_call *call_alloc(void)
{
	relay_call *call = calloc(1, sizeof *call);
	if (call == NULL)
		return NULL;
	pthread_mutex_init(&call->lock, NULL);
	atomic_init(&call->cancelled, false);
	call->total = -1;
	return call;
}

static void call_free(relay_call *call)
{
	pthread_mutex_destroy(&call->lock);
	free(call->id_text);
	free(call->id_key);
	free(call->token_text);
	free(call);
}

relay_call *relay_call_new_internal(void)
{
	return call_alloc();
}

/* Removes the call from the in-flight table if it is still there. */
static void unlink_inflight(mcp_server *srv, relay_call *call)
{
	pthread_mutex_lock(&srv->lock);
	for (relay_call **p = &srv->inflight; *p; p = &(*p)->next) {
		if (*p == call) {
			*p = call->next;
			break;
		}
	}
	pthread_mutex_unlock(&srv->lock);
}

void relay_call_complete(relay_call *call, tool_result *result)
{
	if (call == NULL) {
		tool_result_free(result);
		return;
	}
	mcp_server *srv = call->srv;
	if (srv == NULL) {
		/* An internal call (relay_call_new_internal): nothing is written. */
		tool_result_free(result);
		call_free(call);
		return;
	}
	unlink_inflight(srv, call);
	pthread_mutex_lock(&call->lock);
	call->done = true;
	batch *b = call->batch;
	call->batch = NULL;
	bool cancelled = atomic_load(&call->cancelled);
	if (!cancelled) {
		/* Rendered and queued under the call's lock: no progress
		 * notification of this call can follow its response. */
		strbuf body = STRBUF_INIT;
		if (result == NULL) {
			send_internal_error(srv, b, call->id_text);
		} else {
			render_tool_result(&body, result, call->modern);
			if (strbuf_ok(&body))
				send_result(srv, b, call->id_text, body.data, body.len);
			else
				send_internal_error(srv, b, call->id_text);
		}
		strbuf_free(&body);
	}
	pthread_mutex_unlock(&call->lock);
	tool_result_free(result);
	call_free(call);
	if (b)
		batch_release(srv, b);
}

/* ---- protocol helpers ------------------------------------------------------- */

static const char *const legacy_versions[] = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"};

static bool is_legacy_version(const char *v)
{
	for (size_t i = 0; i < sizeof legacy_versions / sizeof legacy_versions[0]; i++)
		if (strcmp(v, legacy_versions[i]) == 0)
			return true;
	return false;
}

/* Is an id (by key) in flight: a tools/call not yet answered, or an open
 * subscription? Under srv->lock. */
static bool id_in_flight_locked(mcp_server *srv, const char *id_key)
{
	for (relay_call *c = srv->inflight; c; c = c->next)
		if (strcmp(c->id_key, id_key) == 0)
			return true;
	for (subscription *s = srv->subscriptions; s; s = s->next)
		if (strcmp(s->id_key, id_key) == 0)
			return true;
	return false;
}

typedef enum era_outcome { ERA_OK, ERA_UNSUPPORTED, ERA_BAD_META } era_outcome;

/* Decides the rules for a request other than initialize (mcp.md §3.4). On
 * ERA_UNSUPPORTED, *requested_out is the version's JSON text (malloc'd). */
static era_outcome request_era(json_object *params, bool *modern_out, char **requested_out)
{
	*modern_out = false;
	*requested_out = NULL;
	json_object *meta = NULL;
	if (params == NULL || !json_object_object_get_ex(params, "_meta", &meta))
		return ERA_OK;
	if (!json_object_is_type(meta, json_type_object))
		return ERA_BAD_META;
	json_object *version = NULL;
	if (!json_object_object_get_ex(meta, META_VERSION_KEY, &version))
		return ERA_OK;
	if (json_object_is_type(version, json_type_string)) {
		const char *v = json_object_get_string(version);
		if (strcmp(v, PROTOCOL_MODERN) == 0) {
			*modern_out = true;
			return ERA_OK;
		}
		if (is_legacy_version(v))
			return ERA_OK;
	}
	*requested_out = wire_is_id(version) ? wire_id_text(version) : jsonx_to_string(version, 0);
	return ERA_UNSUPPORTED;
}

static void send_unsupported_version(mcp_server *srv, batch *b, const char *id_text, const char *requested)
{
	strbuf data = STRBUF_INIT;
	strbuf_puts(&data, "{\"supported\":" SUPPORTED_VERSIONS_JSON ",\"requested\":");
	strbuf_puts(&data, requested ? requested : "null");
	strbuf_putc(&data, '}');
	if (strbuf_ok(&data))
		send_error(srv, b, id_text, -32022, "Unsupported protocol version", strbuf_str(&data));
	else
		send_internal_error(srv, b, id_text);
	strbuf_free(&data);
}

/* The modern-era fields of a result, without a leading comma. */
#define MODERN_FIELDS                                                                                        \
	"\"resultType\":\"complete\",\"_meta\":{\"io.modelcontextprotocol/serverInfo\":{\"name\":\"relay\"," \
	"\"version\":\"" RELAY_VERSION "\"}}"

/* ---- methods ------------------------------------------------------------------ */

static void handle_initialize(mcp_server *srv, batch *b, const char *id_text, json_object *params)
{
	const char *requested = jsonx_get_str(params, "protocolVersion");
	if (requested == NULL) {
		send_error_reason(srv, b, id_text, -32602, "Invalid params",
		                  "initialize needs a string protocolVersion");
		return;
	}
	const char *answer = is_legacy_version(requested) ? requested : PROTOCOL_NEWEST_LEGACY;
	pthread_mutex_lock(&srv->lock);
	snprintf(srv->negotiated, sizeof srv->negotiated, "%s", answer);
	pthread_mutex_unlock(&srv->lock);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(
	    &sb,
	    "{\"protocolVersion\":\"%s\",\"capabilities\":{\"tools\":{}},\"serverInfo\":{\"name\":\"relay\","
	    "\"version\":\"" RELAY_VERSION "\"},\"instructions\":",
	    answer);
	const char *instructions = contract_instructions();
	jsonx_write_string(&sb, instructions, strlen(instructions));
	strbuf_putc(&sb, '}');
	if (strbuf_ok(&sb))
		send_result(srv, b, id_text, sb.data, sb.len);
	else
		send_internal_error(srv, b, id_text);
	strbuf_free(&sb);
}

static void handle_discover(mcp_server *srv, batch *b, const char *id_text)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{\"supportedVersions\":" SUPPORTED_VERSIONS_JSON ",\"capabilities\":{\"tools\":{}},"
	                 "\"instructions\":");
	const char *instructions = contract_instructions();
	jsonx_write_string(&sb, instructions, strlen(instructions));
	strbuf_puts(&sb, ",\"ttlMs\":3600000,\"cacheScope\":\"public\"," MODERN_FIELDS "}");
	if (strbuf_ok(&sb))
		send_result(srv, b, id_text, sb.data, sb.len);
	else
		send_internal_error(srv, b, id_text);
	strbuf_free(&sb);
}

static void handle_tools_list(mcp_server *srv, batch *b, const char *id_text, json_object *params,
                              bool modern)
{
	if (params && json_object_object_get_ex(params, "cursor", NULL)) {
		send_error_reason(srv, b, id_text, -32602, "Invalid cursor",
		                  "tools/list answers in one page and never issues a cursor");
		return;
	}
	size_t len = 0;
	const char *tools = contract_tools_json(&len);
	strbuf sb = STRBUF_INIT;
	strbuf_reserve(&sb, len + 256);
	strbuf_puts(&sb, "{\"tools\":");
	strbuf_append(&sb, tools, len);
	if (modern)
		strbuf_puts(&sb, ",\"ttlMs\":3600000,\"cacheScope\":\"public\"," MODERN_FIELDS);
	strbuf_putc(&sb, '}');
	if (strbuf_ok(&sb))
		send_result(srv, b, id_text, sb.data, sb.len);
	else
		send_internal_error(srv, b, id_text);
	strbuf_free(&sb);
}

static void handle_ping(mcp_server *srv, batch *b, const char *id_text, bool modern)
{
	static const char legacy[] = "{}";
	static const char modern_result[] = "{" MODERN_FIELDS "}";
	if (modern)
		send_result(srv, b, id_text, modern_result, sizeof modern_result - 1);
	else
		send_result(srv, b, id_text, legacy, sizeof legacy - 1);
}

/* Starts the manager when it is started on demand and not yet running.
 * Reader thread only. False when there is no manager (it failed). */
static bool ensure_manager(mcp_server *srv)
{
	if (srv->settings_problem != NULL)
		return false;
	if (srv->mgr != NULL || srv->start_manager == NULL)
		return srv->mgr != NULL || srv->start_manager == NULL;
	if (srv->manager_failed)
		return false;
	char errbuf[1024] = "";
	manager *mgr = srv->start_manager(srv->start_arg, errbuf, sizeof errbuf);
	if (mgr == NULL) {
		log_error("%s", errbuf[0] ? errbuf : "the relay's manager could not be started");
		srv->manager_failed = true;
		return false;
	}
	pthread_mutex_lock(&srv->lock);
	srv->mgr = mgr;
	pthread_mutex_unlock(&srv->lock);
	return true;
}

static void handle_tools_call(mcp_server *srv, batch *b, const char *id_text, const char *id_key,
                              json_object *params, bool modern)
{
	json_object *name_obj = NULL, *args = NULL;
	if (params == NULL || !json_object_object_get_ex(params, "name", &name_obj) ||
	    !json_object_is_type(name_obj, json_type_string)) {
		send_error_reason(srv, b, id_text, -32602, "Invalid params",
		                  "tools/call needs a string name");
		return;
	}
	bool has_args = json_object_object_get_ex(params, "arguments", &args);
	if (has_args && !json_object_is_type(args, json_type_object)) {
		send_error_reason(srv, b, id_text, -32602, "Invalid params",
		                  "tools/call arguments must be an object");
		return;
	}
	const char *name = json_object_get_string(name_obj);

	relay_call *call = call_alloc();
	if (call == NULL || (call->id_text = strdup(id_text)) == NULL ||
	    (call->id_key = strdup(id_key)) == NULL) {
		if (call)
			call_free(call);
		send_internal_error(srv, b, id_text);
		return;
	}
	call->srv = srv;
	call->modern = modern;
	json_object *meta = jsonx_get_obj(params, "_meta");
	json_object *token = NULL;
	if (meta && json_object_object_get_ex(meta, "progressToken", &token) && wire_is_id(token)) {
		call->token_text = wire_id_text(token);
		if (call->token_text == NULL) {
			call_free(call);
			send_internal_error(srv, b, id_text);
			return;
		}
	}

	pthread_mutex_lock(&srv->lock);
	if (id_in_flight_locked(srv, id_key)) {
		pthread_mutex_unlock(&srv->lock);
		call_free(call);
		send_error(srv, b, id_text, -32600, "Duplicate request id", NULL);
		return;
	}
	call->next = srv->inflight;
	srv->inflight = call;
	pthread_mutex_unlock(&srv->lock);
	if (b) {
		batch_hold(b);
		call->batch = b;
	}

	/* A name with U+0000 names no tool (strcmp would stop at it). */
	if (memchr(name, '\0', (size_t)json_object_get_string_len(name_obj)) != NULL) {
		relay_call_complete(call,
		                    tool_result_error(NULL, "unknown-tool",
		                                      "Unknown tool: the name holds U+0000 (a NUL byte); "
		                                      "tool names are plain text such as relay_status"));
		return;
	}
	int tool = contract_tool_lookup(name);
	if (tool < 0) {
		relay_call_complete(call, tool_result_error(NULL, "unknown-tool", "Unknown tool: %s", name));
		return;
	}
	json_object *arguments = has_args ? json_object_get(args) : json_object_new_object();
	if (arguments == NULL) {
		relay_call_complete(call, NULL);
		return;
	}
	char *problem = contract_validate((relay_tool)tool, arguments);
	if (problem) {
		tool_result *r = tool_result_error(NULL, "invalid-input", "%s", problem);
		free(problem);
		json_object_put(arguments);
		relay_call_complete(call, r);
		return;
	}
	if (srv->settings_problem != NULL) {
		json_object_put(arguments);
		relay_call_complete(call,
		                    tool_result_error(NULL, "invalid-setting", "%s", srv->settings_problem));
		return;
	}
	if (!ensure_manager(srv)) {
		json_object_put(arguments);
		relay_call_complete(
		    call, tool_result_error(NULL, "internal",
		                            "The relay could not start its manager (see its stderr); "
		                            "restart the server"));
		return;
	}
	manager_dispatch(srv->mgr, (relay_tool)tool, arguments, call);
}

static void handle_cancelled(mcp_server *srv, json_object *params)
{
	json_object *request_id = NULL;
	if (params == NULL || !json_object_object_get_ex(params, "requestId", &request_id) ||
	    !wire_is_id(request_id))
		return;
	char *key = wire_id_key(request_id);
	if (key == NULL)
		return;
	batch *b = NULL;
	pthread_mutex_lock(&srv->lock);
	for (relay_call **p = &srv->inflight; *p; p = &(*p)->next) {
		relay_call *c = *p;
		if (strcmp(c->id_key, key) != 0)
			continue;
		/* No answer will be written: the id is free again, and a batch
		 * holding it stops waiting for it. The manager still owns the call
		 * and completes it; relay_call_complete then writes nothing. */
		*p = c->next;
		pthread_mutex_lock(&c->lock);
		if (!c->done) {
			atomic_store(&c->cancelled, true);
			b = c->batch;
			c->batch = NULL;
		}
		pthread_mutex_unlock(&c->lock);
		break;
	}
	for (subscription **p = &srv->subscriptions; *p; p = &(*p)->next) {
		subscription *s = *p;
		if (strcmp(s->id_key, key) != 0)
			continue;
		/* A cancelled subscription is dropped silently (mcp.md §5). */
		*p = s->next;
		free(s->id_text);
		free(s->id_key);
		free(s);
		break;
	}
	pthread_mutex_unlock(&srv->lock);
	free(key);
	if (b)
		batch_release(srv, b);
}

static void handle_listen(mcp_server *srv, batch *b, const char *id_text, const char *id_key, bool modern)
{
	if (!modern) {
		send_error(srv, b, id_text, -32601, "Method not found", NULL);
		return;
	}
	subscription *s = calloc(1, sizeof *s);
	if (s == NULL || (s->id_text = strdup(id_text)) == NULL || (s->id_key = strdup(id_key)) == NULL) {
		if (s) {
			free(s->id_text);
			free(s);
		}
		send_internal_error(srv, b, id_text);
		return;
	}
	pthread_mutex_lock(&srv->lock);
	if (id_in_flight_locked(srv, id_key)) {
		pthread_mutex_unlock(&srv->lock);
		free(s->id_text);
		free(s->id_key);
		free(s);
		send_error(srv, b, id_text, -32600, "Duplicate request id", NULL);
		return;
	}
	s->next = srv->subscriptions;
	srv->subscriptions = s;
	pthread_mutex_unlock(&srv->lock);
	/* The acknowledgement is a notification: it goes out on the stream at
	 * once, even when the request came in a batch. The subscription's own
	 * answer comes at the end of the session. */
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb,
	            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":"
	            "{\"notifications\":{},\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":");
	strbuf_puts(&sb, id_text);
	strbuf_puts(&sb, "}}}");
	if (strbuf_ok(&sb))
		send_message(srv, sb.data, sb.len, on_reader_thread(srv));
	strbuf_free(&sb);
}

/* Answers every open subscription with its closing result (session end). */
static void close_subscriptions(mcp_server *srv)
{
	pthread_mutex_lock(&srv->lock);
	subscription *list = srv->subscriptions;
	srv->subscriptions = NULL;
	pthread_mutex_unlock(&srv->lock);
	while (list) {
		subscription *s = list;
		list = s->next;
		strbuf sb = STRBUF_INIT;
		strbuf_puts(
		    &sb,
		    "{\"resultType\":\"complete\",\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":");
		strbuf_puts(&sb, s->id_text);
		strbuf_puts(
		    &sb,
		    ",\"io.modelcontextprotocol/serverInfo\":{\"name\":\"relay\",\"version\":\"" RELAY_VERSION
		    "\"}}}");
		if (strbuf_ok(&sb))
			send_result(srv, NULL, s->id_text, sb.data, sb.len);
		strbuf_free(&sb);
		free(s->id_text);
		free(s->id_key);
		free(s);
	}
}

/* ---- classification ---------------------------------------------------------- */

static void handle_request(mcp_server *srv, batch *b, const char *method, json_object *id,
                           json_object *params)
{
	char *id_text = wire_id_text(id);
	char *id_key = wire_id_key(id);
	char *requested = NULL;
	if (id_text == NULL || id_key == NULL) {
		send_internal_error(srv, b, id_text);
		goto cleanup;
	}
	if (strcmp(method, "tools/call") != 0 && strcmp(method, "subscriptions/listen") != 0) {
		/* tools/call and subscriptions/listen check while registering. */
		pthread_mutex_lock(&srv->lock);
		bool duplicate = id_in_flight_locked(srv, id_key);
		pthread_mutex_unlock(&srv->lock);
		if (duplicate) {
			send_error(srv, b, id_text, -32600, "Duplicate request id", NULL);
			goto cleanup;
		}
	}
	if (strcmp(method, "initialize") == 0) {
		handle_initialize(srv, b, id_text, params);
		goto cleanup;
	}
	bool modern = false;
	era_outcome era = request_era(params, &modern, &requested);
	if (era == ERA_BAD_META) {
		send_error_reason(srv, b, id_text, -32602, "Invalid params", "_meta must be an object");
		goto cleanup;
	}
	if (era == ERA_UNSUPPORTED) {
		send_unsupported_version(srv, b, id_text, requested);
		goto cleanup;
	}
	if (strcmp(method, "tools/call") == 0)
		handle_tools_call(srv, b, id_text, id_key, params, modern);
	else if (strcmp(method, "tools/list") == 0)
		handle_tools_list(srv, b, id_text, params, modern);
	else if (strcmp(method, "ping") == 0)
		handle_ping(srv, b, id_text, modern);
	else if (strcmp(method, "server/discover") == 0)
		handle_discover(srv, b, id_text);
	else if (strcmp(method, "subscriptions/listen") == 0)
		handle_listen(srv, b, id_text, id_key, modern);
	else
		send_error(srv, b, id_text, -32601, "Method not found", NULL);
cleanup:
	free(requested);
	free(id_text);
	free(id_key);
}

static void handle_notification(mcp_server *srv, const char *method, json_object *params)
{
	if (strcmp(method, "notifications/cancelled") == 0)
		handle_cancelled(srv, params);
	/* notifications/initialized and every other notification: no effect,
	 * and (unlike ignored responses) not logged. */
}

/* One JSON-RPC message, possibly an element of a batch (mcp.md §2.1). */
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
	int status = manager_end_session(srv->mgr, job->reason);
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
	if (!ensure_manager(srv)) {
		/* No manager: nothing was started, nothing to pause or release. */
		pthread_mutex_lock(&srv->lock);
		srv->exit_status = srv->settings_problem ? 2 : srv->manager_failed ? 1 : 0;
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
	int status = manager_end_session(srv->mgr, reason);
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
			 * period (lifecycle.md §11.1). */
			if (ending && srv->mgr != NULL && (signo == SIGTERM || signo == SIGINT))
				manager_hurry_end(srv->mgr);
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

int mcp_serve(const mcp_server_config *config)
{
	mcp_server *srv = calloc(1, sizeof *srv);
	if (srv == NULL)
		return 1;
	srv->in_fd = config->in_fd;
	srv->out_fd = config->out_fd;
	srv->mgr = config->mgr;
	srv->start_manager = config->mgr == NULL ? config->start_manager : NULL;
	srv->start_arg = config->start_arg;
	srv->settings_problem = config->settings_problem;
	pthread_mutex_init(&srv->out_lock, NULL);
	pthread_mutex_init(&srv->lock, NULL);
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
		return 1;
	}

	strbuf in = STRBUF_INIT;
	size_t scan_from = 0;    /* bytes of `in` already searched for a newline */
	bool discarding = false; /* dropping the rest of a line too large for memory */
	bool reading = true;
	int64_t next_parent_check_ms = clock_monotonic_ms() + PARENT_CHECK_INTERVAL_MS;
	int64_t manager_start_ms = clock_monotonic_ms() + MANAGER_START_DELAY_MS;
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
		if (srv->mgr == NULL && srv->start_manager != NULL && !srv->manager_failed) {
			int64_t left = manager_start_ms - clock_monotonic_ms();
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
		if (srv->mgr == NULL && srv->start_manager != NULL && !srv->manager_failed &&
		    now >= manager_start_ms && !ensure_manager(srv) && !ending)
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
		manager_start_ms = now;
	}
	strbuf_free(&in);
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
