/*
 * The stdio MCP server (mcp.md): framing, JSON-RPC classification, both
 * protocol eras, tools/list and tools/call, progress, cancellation,
 * subscriptions/listen and the end of the session.
 *
 * Threads: the reader (the caller of mcp_serve) reads and dispatches
 * continuously; tool work runs on the manager's threads, which complete
 * calls through relay_call_complete(). Every message goes through one output
 * buffer under one lock, so messages never interleave; the reader defers
 * flushing while more input is already buffered, so pipelined requests are
 * answered with few writes.
 */
#include "mcp/server.h"

#include <errno.h>
#include <fcntl.h>
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
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"

#define PROTOCOL_MODERN "2026-07-28"
#define PROTOCOL_NEWEST_LEGACY "2025-11-25"
#define SUPPORTED_VERSIONS_JSON "[\"2026-07-28\",\"2025-11-25\",\"2025-06-18\",\"2025-03-26\",\"2024-11-05\"]"
#define META_VERSION_KEY "io.modelcontextprotocol/protocolVersion"
#define READ_CHUNK_BYTES 65536
#define PROGRESS_MIN_INTERVAL_MS 1000

typedef struct batch batch;
typedef struct subscription subscription;

typedef struct mcp_server {
	int in_fd;
	int out_fd;
	manager *mgr;

	/* The output stream: messages are appended under out_lock and written by
	 * whoever flushes. out_failed is set once a write fails; nothing is
	 * written after that. */
	pthread_mutex_t out_lock;
	strbuf out;
	bool out_failed;

	/* Protocol and session state under `lock`. */
	pthread_mutex_t lock;
	char negotiated[16];
	relay_call *inflight;
	subscription *subscriptions;
	bool ending;        /* the session end has begun */
	bool ending_done;   /* manager_end_session returned */
	int exit_status;
	int signals_seen;

	pid_t initial_ppid;
} mcp_server;

struct relay_call {
	mcp_server *srv;
	batch *batch;
	char *id_text;    /* the id's JSON token, echoed exactly */
	char *token_text; /* progressToken's JSON token, or NULL */
	bool modern;
	relay_tool tool;
	atomic_bool cancelled;
	pthread_mutex_t lock;
	double last_progress;
	int64_t last_progress_ms;
	bool sent_progress;
	bool done;
	relay_call *next;
};

struct subscription {
	char *id_text;
	subscription *next;
};

/* A batch collects the answers of its requests and writes them as one
 * array once the last one is ready (mcp.md §2.2). */
struct batch {
	pthread_mutex_t lock;
	strbuf answers;
	size_t answer_count;
	size_t pending; /* requests not yet answered, plus one while dispatching */
	bool cancelled_any;
};

/* The self-pipe of the signal handler. Process-wide because signal handlers
 * are; written only by the handler, read only by the reader thread. */
static int signal_pipe[2] = {-1, -1};

/* ---- output -------------------------------------------------------------- */

static void on_output_failure(mcp_server *srv);

/* Writes the buffered output; call with out_lock held. */
static void flush_locked(mcp_server *srv)
{
	size_t off = 0;
	while (!srv->out_failed && off < srv->out.len) {
		ssize_t n = write(srv->out_fd, srv->out.data + off, srv->out.len - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				struct pollfd p = {srv->out_fd, POLLOUT, 0};
				poll(&p, 1, 1000);
				continue;
			}
			srv->out_failed = true;
			break;
		}
		off += (size_t)n;
	}
	strbuf_reset(&srv->out);
}

/* Queues one complete message (without its newline). With `defer`, the
 * reader flushes later; otherwise it is written now. */
static void send_message(mcp_server *srv, const char *msg, size_t len, bool defer)
{
	bool failed;
	pthread_mutex_lock(&srv->out_lock);
	if (!srv->out_failed) {
		strbuf_append(&srv->out, msg, len);
		strbuf_putc(&srv->out, '\n');
		if (!defer || srv->out.len > (1u << 20))
			flush_locked(srv);
	}
	failed = srv->out_failed;
	pthread_mutex_unlock(&srv->out_lock);
	if (failed)
		on_output_failure(srv);
}

static void flush_output(mcp_server *srv)
{
	bool failed;
	pthread_mutex_lock(&srv->out_lock);
	flush_locked(srv);
	failed = srv->out_failed;
	pthread_mutex_unlock(&srv->out_lock);
	if (failed)
		on_output_failure(srv);
}

/* Where an answer goes: a batch, or the stream. Called with the complete
 * JSON-RPC response. */
static void batch_add(mcp_server *srv, batch *b, const char *msg, size_t len, bool defer);

static void deliver(mcp_server *srv, batch *b, strbuf *msg, bool defer)
{
	if (!strbuf_ok(msg)) {
		log_error("out of memory forming a response");
		return;
	}
	if (b)
		batch_add(srv, b, msg->data, msg->len, defer);
	else
		send_message(srv, msg->data, msg->len, defer);
}

static void begin_response(strbuf *sb, const char *id_text)
{
	strbuf_puts(sb, "{\"jsonrpc\":\"2.0\",\"id\":");
	strbuf_puts(sb, id_text ? id_text : "null");
}

static void send_error(mcp_server *srv, batch *b, const char *id_text, int code, const char *message,
		       const char *data_json, bool defer)
{
	strbuf sb = STRBUF_INIT;
	begin_response(&sb, id_text);
	strbuf_printf(&sb, ",\"error\":{\"code\":%d,\"message\":", code);
	jsonx_write_string(&sb, message, strlen(message));
	if (data_json)
		strbuf_printf(&sb, ",\"data\":%s", data_json);
	strbuf_puts(&sb, "}}");
	deliver(srv, b, &sb, defer);
	strbuf_free(&sb);
}

/* `result_json` is a complete JSON object. */
static void send_result(mcp_server *srv, batch *b, const char *id_text, const char *result_json, size_t len,
			bool defer)
{
	strbuf sb = STRBUF_INIT;
	begin_response(&sb, id_text);
	strbuf_puts(&sb, ",\"result\":");
	strbuf_append(&sb, result_json, len);
	strbuf_putc(&sb, '}');
	deliver(srv, b, &sb, defer);
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

/* Drops one pending unit; the last one writes the array. */
static void batch_release(mcp_server *srv, batch *b, bool defer)
{
	pthread_mutex_lock(&b->lock);
	bool last = --b->pending == 0;
	pthread_mutex_unlock(&b->lock);
	if (!last)
		return;
	if (b->answer_count > 0) {
		strbuf sb = STRBUF_INIT;
		strbuf_putc(&sb, '[');
		strbuf_append(&sb, strbuf_str(&b->answers), b->answers.len);
		strbuf_putc(&sb, ']');
		if (strbuf_ok(&sb))
			send_message(srv, sb.data, sb.len, defer);
		strbuf_free(&sb);
	}
	strbuf_free(&b->answers);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

static void batch_add(mcp_server *srv, batch *b, const char *msg, size_t len, bool defer)
{
	(void)srv;
	(void)defer;
	pthread_mutex_lock(&b->lock);
	if (b->answer_count++)
		strbuf_putc(&b->answers, ',');
	strbuf_append(&b->answers, msg, len);
	pthread_mutex_unlock(&b->lock);
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
	return call ? call->last_progress : 0;
}

void relay_call_progress(relay_call *call, double progress, double total, const char *message, bool force)
{
	if (call == NULL || call->token_text == NULL || atomic_load(&call->cancelled))
		return;
	pthread_mutex_lock(&call->lock);
	int64_t now = clock_monotonic_ms();
	if (call->done || call->srv->out_failed ||
	    (call->sent_progress && !force && now - call->last_progress_ms < PROGRESS_MIN_INTERVAL_MS)) {
		pthread_mutex_unlock(&call->lock);
		return;
	}
	if (call->sent_progress && progress <= call->last_progress)
		progress = call->last_progress + 1;
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":");
	strbuf_puts(&sb, call->token_text);
	json_object *num = json_object_new_double(progress);
	strbuf_puts(&sb, ",\"progress\":");
	jsonx_write(&sb, num, 0);
	json_object_put(num);
	if (total >= 0) {
		num = json_object_new_double(total);
		strbuf_puts(&sb, ",\"total\":");
		jsonx_write(&sb, num, 0);
		json_object_put(num);
	}
	if (message) {
		strbuf_puts(&sb, ",\"message\":");
		jsonx_write_string(&sb, message, strlen(message));
	}
	strbuf_puts(&sb, "}}");
	if (strbuf_ok(&sb))
		send_message(call->srv, sb.data, sb.len, false);
	strbuf_free(&sb);
	call->last_progress = progress;
	call->last_progress_ms = now;
	call->sent_progress = true;
	pthread_mutex_unlock(&call->lock);
}

static void call_free(relay_call *call)
{
	pthread_mutex_destroy(&call->lock);
	free(call->id_text);
	free(call->token_text);
	free(call);
}

relay_call *relay_call_new_internal(void)
{
	relay_call *call = calloc(1, sizeof *call);
	if (call == NULL)
		return NULL;
	pthread_mutex_init(&call->lock, NULL);
	atomic_init(&call->cancelled, false);
	return call;
}

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

static bool on_reader_thread(void);

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
	pthread_mutex_unlock(&call->lock);
	bool defer = on_reader_thread();
	batch *b = call->batch;
	if (!atomic_load(&call->cancelled)) {
		strbuf body = STRBUF_INIT;
		if (result == NULL) {
			send_error(srv, b, call->id_text, -32603, "Internal error", NULL, defer);
		} else {
			render_tool_result(&body, result, call->modern);
			if (strbuf_ok(&body))
				send_result(srv, b, call->id_text, body.data, body.len, defer);
			else
				send_error(srv, b, call->id_text, -32603, "Internal error", NULL, defer);
		}
		strbuf_free(&body);
	}
	tool_result_free(result);
	call_free(call);
	if (b)
		batch_release(srv, b, defer);
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

/* The JSON token of an id: strings re-escaped, numbers exactly as sent. */
static char *id_token(json_object *id)
{
	if (json_object_is_type(id, json_type_string)) {
		strbuf sb = STRBUF_INIT;
		jsonx_write_string(&sb, json_object_get_string(id), (size_t)json_object_get_string_len(id));
		return strbuf_detach(&sb, NULL);
	}
	return strdup(json_object_to_json_string_ext(id, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
}

static bool id_is_valid(json_object *id)
{
	enum json_type t = json_object_get_type(id);
	return t == json_type_string || t == json_type_int || t == json_type_double;
}

typedef enum era_outcome { ERA_OK, ERA_UNSUPPORTED, ERA_BAD_META } era_outcome;

/* Decides the rules for a request (mcp.md §3.4). */
static era_outcome request_era(mcp_server *srv, json_object *params, bool *modern_out, char **requested_out)
{
	*modern_out = false;
	json_object *meta = NULL;
	if (params && json_object_object_get_ex(params, "_meta", &meta)) {
		if (!json_object_is_type(meta, json_type_object))
			return ERA_BAD_META;
		json_object *version = NULL;
		if (json_object_object_get_ex(meta, META_VERSION_KEY, &version)) {
			if (json_object_is_type(version, json_type_string)) {
				const char *v = json_object_get_string(version);
				if (strcmp(v, PROTOCOL_MODERN) == 0) {
					*modern_out = true;
					return ERA_OK;
				}
				if (is_legacy_version(v))
					return ERA_OK;
			}
			*requested_out = json_object_is_type(version, json_type_string)
						 ? id_token(version)
						 : strdup(json_object_to_json_string_ext(version, JSON_C_TO_STRING_PLAIN));
			return ERA_UNSUPPORTED;
		}
	}
	(void)srv;
	return ERA_OK;
}

static void send_unsupported_version(mcp_server *srv, batch *b, const char *id_text, const char *requested)
{
	strbuf data = STRBUF_INIT;
	strbuf_puts(&data, "{\"supported\":" SUPPORTED_VERSIONS_JSON ",\"requested\":");
	strbuf_puts(&data, requested ? requested : "null");
	strbuf_putc(&data, '}');
	send_error(srv, b, id_text, -32022, "Unsupported protocol version", strbuf_str(&data), true);
	strbuf_free(&data);
}

/* ---- methods ------------------------------------------------------------------ */

static void handle_initialize(mcp_server *srv, batch *b, const char *id_text, json_object *params)
{
	const char *requested = jsonx_get_str(params, "protocolVersion");
	if (requested == NULL) {
		send_error(srv, b, id_text, -32602, "Invalid params: initialize needs a string protocolVersion", NULL,
			   true);
		return;
	}
	const char *answer = is_legacy_version(requested) ? requested : PROTOCOL_NEWEST_LEGACY;
	pthread_mutex_lock(&srv->lock);
	snprintf(srv->negotiated, sizeof srv->negotiated, "%s", answer);
	pthread_mutex_unlock(&srv->lock);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb,
		      "{\"protocolVersion\":\"%s\",\"capabilities\":{\"tools\":{}},\"serverInfo\":{\"name\":\"relay\","
		      "\"version\":\"" RELAY_VERSION "\"},\"instructions\":",
		      answer);
	const char *instructions = contract_instructions();
	jsonx_write_string(&sb, instructions, strlen(instructions));
	strbuf_putc(&sb, '}');
	send_result(srv, b, id_text, strbuf_str(&sb), sb.len, true);
	strbuf_free(&sb);
}

static void handle_discover(mcp_server *srv, batch *b, const char *id_text)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{\"supportedVersions\":" SUPPORTED_VERSIONS_JSON ",\"capabilities\":{\"tools\":{}},"
			 "\"instructions\":");
	const char *instructions = contract_instructions();
	jsonx_write_string(&sb, instructions, strlen(instructions));
	strbuf_puts(&sb, ",\"ttlMs\":3600000,\"cacheScope\":\"public\"");
	render_modern_fields(&sb);
	strbuf_putc(&sb, '}');
	send_result(srv, b, id_text, strbuf_str(&sb), sb.len, true);
	strbuf_free(&sb);
}

static void handle_tools_list(mcp_server *srv, batch *b, const char *id_text, json_object *params, bool modern)
{
	if (params && json_object_object_get_ex(params, "cursor", NULL)) {
		send_error(srv, b, id_text, -32602, "Invalid cursor", NULL, true);
		return;
	}
	size_t len = 0;
	const char *tools = contract_tools_json(&len);
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{\"tools\":");
	strbuf_append(&sb, tools, len);
	if (modern) {
		strbuf_puts(&sb, ",\"ttlMs\":3600000,\"cacheScope\":\"public\"");
		render_modern_fields(&sb);
	}
	strbuf_putc(&sb, '}');
	send_result(srv, b, id_text, strbuf_str(&sb), sb.len, true);
	strbuf_free(&sb);
}

static void handle_ping(mcp_server *srv, batch *b, const char *id_text, bool modern)
{
	if (!modern) {
		send_result(srv, b, id_text, "{}", 2, true);
		return;
	}
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{");
	render_modern_fields(&sb);
	/* render_modern_fields starts with a comma; drop it. */
	memmove(sb.data + 1, sb.data + 2, sb.len - 1);
	sb.len--;
	strbuf_putc(&sb, '}');
	send_result(srv, b, id_text, strbuf_str(&sb), sb.len, true);
	strbuf_free(&sb);
}

static bool id_in_flight(mcp_server *srv, const char *id_text)
{
	for (relay_call *c = srv->inflight; c; c = c->next)
		if (strcmp(c->id_text, id_text) == 0)
			return true;
	for (subscription *s = srv->subscriptions; s; s = s->next)
		if (strcmp(s->id_text, id_text) == 0)
			return true;
	return false;
}

static void handle_tools_call(mcp_server *srv, batch *b, const char *id_text, json_object *params, bool modern)
{
	json_object *name_obj = NULL, *args = NULL;
	if (params == NULL || !json_object_object_get_ex(params, "name", &name_obj) ||
	    !json_object_is_type(name_obj, json_type_string)) {
		send_error(srv, b, id_text, -32602, "Invalid params: tools/call needs a string name", NULL, true);
		return;
	}
	bool has_args = json_object_object_get_ex(params, "arguments", &args);
	if (has_args && !json_object_is_type(args, json_type_object)) {
		send_error(srv, b, id_text, -32602, "Invalid params: arguments must be an object", NULL, true);
		return;
	}
	const char *name = json_object_get_string(name_obj);

	relay_call *call = calloc(1, sizeof *call);
	if (call == NULL || (call->id_text = strdup(id_text)) == NULL) {
		free(call);
		send_error(srv, b, id_text, -32603, "Internal error", NULL, true);
		return;
	}
	call->srv = srv;
	call->modern = modern;
	pthread_mutex_init(&call->lock, NULL);
	json_object *meta = jsonx_get_obj(params, "_meta");
	json_object *token = NULL;
	if (meta && json_object_object_get_ex(meta, "progressToken", &token) && id_is_valid(token))
		call->token_text = id_token(token);

	pthread_mutex_lock(&srv->lock);
	if (id_in_flight(srv, id_text)) {
		pthread_mutex_unlock(&srv->lock);
		call_free(call);
		send_error(srv, b, id_text, -32600, "Duplicate request id", NULL, true);
		return;
	}
	call->next = srv->inflight;
	srv->inflight = call;
	pthread_mutex_unlock(&srv->lock);
	if (b) {
		pthread_mutex_lock(&b->lock);
		b->pending++;
		pthread_mutex_unlock(&b->lock);
		call->batch = b;
	}

	int tool = contract_tool_lookup(name);
	if (tool < 0) {
		relay_call_complete(call, tool_result_error(NULL, "unknown-tool", "Unknown tool: %s", name));
		return;
	}
	call->tool = (relay_tool)tool;
	json_object *arguments = has_args ? json_object_get(args) : json_object_new_object();
	char *problem = contract_validate(call->tool, arguments);
	if (problem) {
		tool_result *r = tool_result_error(NULL, "invalid-input", "%s", problem);
		free(problem);
		json_object_put(arguments);
		relay_call_complete(call, r);
		return;
	}
	manager_dispatch(srv->mgr, call->tool, arguments, call);
}

static void handle_cancelled(mcp_server *srv, json_object *params)
{
	json_object *request_id = NULL;
	if (params == NULL || !json_object_object_get_ex(params, "requestId", &request_id) || !id_is_valid(request_id))
		return;
	char *id_text = id_token(request_id);
	if (id_text == NULL)
		return;
	pthread_mutex_lock(&srv->lock);
	for (relay_call *c = srv->inflight; c; c = c->next)
		if (strcmp(c->id_text, id_text) == 0)
			atomic_store(&c->cancelled, true);
	for (subscription **p = &srv->subscriptions; *p;) {
		if (strcmp((*p)->id_text, id_text) == 0) {
			subscription *gone = *p;
			*p = gone->next;
			free(gone->id_text);
			free(gone);
		} else {
			p = &(*p)->next;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	free(id_text);
}

static void handle_listen(mcp_server *srv, batch *b, const char *id_text, bool modern)
{
	if (!modern) {
		send_error(srv, b, id_text, -32601, "Method not found", NULL, true);
		return;
	}
	subscription *s = calloc(1, sizeof *s);
	if (s == NULL || (s->id_text = strdup(id_text)) == NULL) {
		free(s);
		send_error(srv, b, id_text, -32603, "Internal error", NULL, true);
		return;
	}
	pthread_mutex_lock(&srv->lock);
	if (id_in_flight(srv, id_text)) {
		pthread_mutex_unlock(&srv->lock);
		free(s->id_text);
		free(s);
		send_error(srv, b, id_text, -32600, "Duplicate request id", NULL, true);
		return;
	}
	s->next = srv->subscriptions;
	srv->subscriptions = s;
	pthread_mutex_unlock(&srv->lock);
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":"
			 "{\"notifications\":{},\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":");
	strbuf_puts(&sb, id_text);
	strbuf_puts(&sb, "}}}");
	send_message(srv, sb.data, sb.len, true);
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
		strbuf_puts(&sb, "{\"resultType\":\"complete\",\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":");
		strbuf_puts(&sb, s->id_text);
		strbuf_puts(&sb, ",\"io.modelcontextprotocol/serverInfo\":{\"name\":\"relay\",\"version\":\"" RELAY_VERSION
				 "\"}}}");
		send_result(srv, NULL, s->id_text, sb.data, sb.len, false);
		strbuf_free(&sb);
		free(s->id_text);
		free(s);
	}
}

/* ---- classification ---------------------------------------------------------- */

static void handle_request(mcp_server *srv, batch *b, const char *method, const char *id_text,
			   json_object *params)
{
	if (strcmp(method, "initialize") == 0) {
		handle_initialize(srv, b, id_text, params);
		return;
	}
	bool modern = false;
	char *requested = NULL;
	era_outcome era = request_era(srv, params, &modern, &requested);
	if (era == ERA_BAD_META) {
		send_error(srv, b, id_text, -32602, "Invalid params: _meta must be an object", NULL, true);
		return;
	}
	if (era == ERA_UNSUPPORTED) {
		send_unsupported_version(srv, b, id_text, requested);
		free(requested);
		return;
	}
	if (strcmp(method, "server/discover") == 0)
		handle_discover(srv, b, id_text);
	else if (strcmp(method, "ping") == 0)
		handle_ping(srv, b, id_text, modern);
	else if (strcmp(method, "tools/list") == 0)
		handle_tools_list(srv, b, id_text, params, modern);
	else if (strcmp(method, "tools/call") == 0)
		handle_tools_call(srv, b, id_text, params, modern);
	else if (strcmp(method, "subscriptions/listen") == 0)
		handle_listen(srv, b, id_text, modern);
	else
		send_error(srv, b, id_text, -32601, "Method not found", NULL, true);
}

static void handle_notification(mcp_server *srv, const char *method, json_object *params)
{
	if (strcmp(method, "notifications/cancelled") == 0)
		handle_cancelled(srv, params);
	/* notifications/initialized and every other notification: no effect. */
}

/* One JSON-RPC message (an object), possibly inside a batch. */
static void handle_message(mcp_server *srv, batch *b, json_object *msg)
{
	if (!json_object_is_type(msg, json_type_object)) {
		send_error(srv, b, "null", -32600, "Invalid Request", NULL, true);
		return;
	}
	json_object *id = NULL, *method_obj = NULL, *params = NULL, *version = NULL;
	bool has_id = json_object_object_get_ex(msg, "id", &id);
	bool has_method = json_object_object_get_ex(msg, "method", &method_obj);
	bool has_params = json_object_object_get_ex(msg, "params", &params);
	char *id_text = has_id && id_is_valid(id) ? id_token(id) : NULL;

	if (!json_object_object_get_ex(msg, "jsonrpc", &version) || !json_object_is_type(version, json_type_string) ||
	    strcmp(json_object_get_string(version), "2.0") != 0) {
		send_error(srv, b, id_text ? id_text : "null", -32600, "Invalid Request", NULL, true);
		goto cleanup;
	}
	if (!has_method && has_id &&
	    (json_object_object_get_ex(msg, "result", NULL) || json_object_object_get_ex(msg, "error", NULL))) {
		log_info("ignored a JSON-RPC response from the client: this server sends no requests");
		goto cleanup;
	}
	if (!has_method || !json_object_is_type(method_obj, json_type_string)) {
		send_error(srv, b, id_text ? id_text : "null", -32600, "Invalid Request", NULL, true);
		goto cleanup;
	}
	const char *method = json_object_get_string(method_obj);
	if (!has_id) {
		handle_notification(srv, method, has_params && json_object_is_type(params, json_type_object) ? params : NULL);
		goto cleanup;
	}
	if (id_text == NULL) {
		send_error(srv, b, "null", -32600, "Invalid Request", NULL, true);
		goto cleanup;
	}
	if (has_params && !json_object_is_type(params, json_type_object)) {
		send_error(srv, b, id_text, -32602, "Invalid params", NULL, true);
		goto cleanup;
	}
	handle_request(srv, b, method, id_text, has_params ? params : NULL);
cleanup:
	free(id_text);
}

static void handle_line(mcp_server *srv, const char *line, size_t len)
{
	char reason[128];
	bool is_null = false;
	json_object *msg = jsonx_parse(line, len, &is_null, reason, sizeof reason);
	if (msg == NULL) {
		if (is_null)
			send_error(srv, NULL, "null", -32600, "Invalid Request", NULL, true);
		else
			send_error(srv, NULL, "null", -32700, "Parse error", NULL, true);
		return;
	}
	if (json_object_is_type(msg, json_type_array)) {
		size_t n = json_object_array_length(msg);
		if (n == 0) {
			send_error(srv, NULL, "null", -32600, "Invalid Request", NULL, true);
		} else {
			batch *b = batch_new();
			if (b == NULL) {
				send_error(srv, NULL, "null", -32603, "Internal error", NULL, true);
			} else {
				for (size_t i = 0; i < n; i++)
					handle_message(srv, b, json_object_array_get_idx(msg, i));
				batch_release(srv, b, true);
			}
		}
	} else {
		handle_message(srv, NULL, msg);
	}
	json_object_put(msg);
}

/* ---- session end ------------------------------------------------------------ */

static mcp_server *the_server; /* for on_output_failure; set once in mcp_serve */
static pthread_t reader_thread;

static bool on_reader_thread(void)
{
	return pthread_equal(pthread_self(), reader_thread);
}

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
	/* Wake the reader. */
	if (signal_pipe[1] >= 0) {
		char c = 'e';
		ssize_t ignored = write(signal_pipe[1], &c, 1);
		(void)ignored;
	}
	free(job);
	return NULL;
}

/* Starts the end of the session once (later triggers are ignored). */
static void begin_end(mcp_server *srv, const char *reason)
{
	pthread_mutex_lock(&srv->lock);
	if (srv->ending) {
		pthread_mutex_unlock(&srv->lock);
		return;
	}
	srv->ending = true;
	pthread_mutex_unlock(&srv->lock);
	log_info("session ending: %s", reason);
	end_job *job = calloc(1, sizeof *job);
	pthread_t thread;
	if (job == NULL) {
		srv->exit_status = manager_end_session(srv->mgr, reason);
		srv->ending_done = true;
		return;
	}
	job->srv = srv;
	snprintf(job->reason, sizeof job->reason, "%s", reason);
	if (pthread_create(&thread, NULL, end_session_thread, job) != 0) {
		free(job);
		srv->exit_status = manager_end_session(srv->mgr, reason);
		srv->ending_done = true;
		return;
	}
	pthread_detach(thread);
}

static void on_output_failure(mcp_server *srv)
{
	begin_end(srv, "stdout-failed");
}

static void on_signal(int signo)
{
	int saved = errno;
	unsigned char c = (unsigned char)signo;
	if (signal_pipe[1] >= 0) {
		ssize_t ignored = write(signal_pipe[1], &c, 1);
		(void)ignored;
	}
	errno = saved;
}

static void install_signals(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
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

/* ---- the reader ---------------------------------------------------------------- */

int mcp_serve(const mcp_server_config *config)
{
	mcp_server *srv = calloc(1, sizeof *srv);
	if (srv == NULL)
		return 1;
	srv->in_fd = config->in_fd;
	srv->out_fd = config->out_fd;
	srv->mgr = config->mgr;
	pthread_mutex_init(&srv->out_lock, NULL);
	pthread_mutex_init(&srv->lock, NULL);
	strbuf_init(&srv->out);
	snprintf(srv->negotiated, sizeof srv->negotiated, "%s", PROTOCOL_NEWEST_LEGACY);
	srv->initial_ppid = getppid();
	the_server = srv;
	reader_thread = pthread_self();
	install_signals();

	strbuf in = STRBUF_INIT;
	size_t scan_from = 0;     /* bytes of `in` already searched for a newline */
	bool discarding = false;  /* dropping the rest of a line too large for memory */
	bool reading = true;
	for (;;) {
		pthread_mutex_lock(&srv->lock);
		bool done = srv->ending_done;
		bool ending = srv->ending;
		pthread_mutex_unlock(&srv->lock);
		if (done)
			break;

		struct pollfd pfd[2];
		nfds_t nfds = 0;
		pfd[nfds++] = (struct pollfd){signal_pipe[0], POLLIN, 0};
		if (reading)
			pfd[nfds++] = (struct pollfd){srv->in_fd, POLLIN, 0};
		int rc = poll(pfd, nfds, 1000);
		if (rc < 0 && errno != EINTR)
			break;
		if (!ending && getppid() != srv->initial_ppid)
			begin_end(srv, "parent-exited");
		if (rc <= 0)
			continue;
		if (pfd[0].revents) {
			unsigned char signals[16];
			ssize_t n = read(signal_pipe[0], signals, sizeof signals);
			for (ssize_t i = 0; i < n; i++) {
				if (signals[i] == 'e')
					continue;
				if (srv->ending && (signals[i] == SIGTERM || signals[i] == SIGINT))
					manager_hurry_end(srv->mgr);
				begin_end(srv, signal_reason(signals[i]));
			}
		}
		if (nfds < 2 || pfd[1].revents == 0)
			continue;

		if (!strbuf_reserve(&in, READ_CHUNK_BYTES)) {
			/* No memory for this line: drop it and what follows up to its end. */
			discarding = true;
			strbuf_free(&in);
			strbuf_init(&in);
			scan_from = 0;
			char sink[4096];
			ssize_t n = read(srv->in_fd, sink, sizeof sink);
			if (n <= 0) {
				reading = false;
				begin_end(srv, "stdin-closed");
				continue;
			}
			char *nl = memchr(sink, '\n', (size_t)n);
			if (nl) {
				discarding = false;
				send_error(srv, NULL, "null", -32700, "Message too large", NULL, false);
				strbuf_append(&in, nl + 1, (size_t)(sink + n - nl - 1));
			}
			continue;
		}
		ssize_t n = read(srv->in_fd, in.data + in.len, READ_CHUNK_BYTES);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			n = 0;
		}
		if (n == 0) {
			reading = false;
			flush_output(srv);
			begin_end(srv, "stdin-closed");
			continue;
		}
		in.len += (size_t)n;
		in.data[in.len] = '\0';
		if (discarding) {
			char *nl = memchr(in.data, '\n', in.len);
			if (nl == NULL) {
				strbuf_reset(&in);
				continue;
			}
			discarding = false;
			send_error(srv, NULL, "null", -32700, "Message too large", NULL, true);
			size_t rest = in.len - (size_t)(nl + 1 - in.data);
			memmove(in.data, nl + 1, rest);
			in.len = rest;
			scan_from = 0;
		}
		size_t start = 0;
		for (;;) {
			char *nl = memchr(in.data + scan_from, '\n', in.len - scan_from);
			if (nl == NULL) {
				scan_from = in.len;
				break;
			}
			size_t end = (size_t)(nl - in.data);
			size_t line_len = end - start;
			if (line_len > 0 && in.data[start + line_len - 1] == '\r')
				line_len--;
			bool blank = true;
			for (size_t i = 0; i < line_len && blank; i++) {
				char c = in.data[start + i];
				blank = c == ' ' || c == '\t' || c == '\r';
			}
			if (!blank)
				handle_line(srv, in.data + start, line_len);
			start = end + 1;
			scan_from = start;
		}
		if (start > 0) {
			memmove(in.data, in.data + start, in.len - start);
			in.len -= start;
			scan_from -= start;
			in.data[in.len] = '\0';
		}
		/* Input drained for now: write what the reader produced. */
		flush_output(srv);
	}
	strbuf_free(&in);
	close_subscriptions(srv);
	flush_output(srv);
	int status = srv->exit_status;
	return status;
}
