/*
 * The MCP methods (spec/mcp.md §3-§6): both protocol eras, initialize,
 * server/discover, tools/list, ping, tools/call with its call sink,
 * notifications/cancelled and subscriptions/listen.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/contract.h"
#include "mcp/render.h"
#include "mcp/server_internal.h"
#include "mcp/wire.h"
#include "util/jsonx.h"
#include "util/log.h"

/* ---- protocol helpers ------------------------------------------------------- */

static const char *const legacy_versions[] = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"};

static bool is_legacy_version(const char *v)
{
	for (size_t i = 0; i < sizeof legacy_versions / sizeof legacy_versions[0]; i++)
		if (strcmp(v, legacy_versions[i]) == 0)
			return true;
	return false;
}

bool id_in_flight_locked(mcp_server *srv, const char *id_key)
{
	for (mcp_request *r = srv->inflight; r; r = r->next)
		if (strcmp(r->id_key, id_key) == 0)
			return true;
	for (subscription *s = srv->subscriptions; s; s = s->next)
		if (strcmp(s->id_key, id_key) == 0)
			return true;
	return tasks_id_waiting_locked(srv, id_key);
}

typedef enum era_outcome { ERA_OK, ERA_UNSUPPORTED, ERA_BAD_META } era_outcome;

/* Decides the rules for a request other than initialize (spec/mcp.md §3.4). On
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
	/* A client that declares the 2025-11-25 tasks capability gets the
	 * server's (mcp.md, Tasks); the others see nothing of tasks. */
	bool tasks = jsonx_get_obj(jsonx_get_obj(params, "capabilities"), "tasks") != NULL;
	pthread_mutex_lock(&srv->lock);
	snprintf(srv->negotiated, sizeof srv->negotiated, "%s", answer);
	srv->legacy_tasks = tasks;
	pthread_mutex_unlock(&srv->lock);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(
	    &sb,
	    "{\"protocolVersion\":\"%s\",\"capabilities\":{\"tools\":{}%s},\"serverInfo\":{\"name\":"
	    "\"relay\",\"version\":\"" RELAY_VERSION "\"},\"instructions\":",
	    answer,
	    tasks ? ",\"tasks\":{\"list\":{},\"cancel\":{},\"requests\":{\"tools\":{\"call\":{}}}}" : "");
	const char *instructions = contract_instructions();
	jsonx_write_string(&sb, instructions, strlen(instructions));
	strbuf_putc(&sb, '}');
	send_result_buffer(srv, b, id_text, &sb);
}

static void handle_discover(mcp_server *srv, batch *b, const char *id_text, json_object *params)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{\"supportedVersions\":" SUPPORTED_VERSIONS_JSON ",\"capabilities\":{\"tools\":{}");
	/* The extension is declared to the clients that declare it. */
	if (tasks_declared(params))
		strbuf_puts(&sb, ",\"extensions\":{\"" TASKS_EXTENSION "\":{}}");
	strbuf_puts(&sb, "},\"instructions\":");
	const char *instructions = contract_instructions();
	jsonx_write_string(&sb, instructions, strlen(instructions));
	strbuf_puts(&sb, ",\"ttlMs\":3600000,\"cacheScope\":\"public\"," MODERN_FIELDS "}");
	send_result_buffer(srv, b, id_text, &sb);
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
	pthread_mutex_lock(&srv->lock);
	bool tasks = srv->legacy_tasks && !modern;
	pthread_mutex_unlock(&srv->lock);
	const char *tools = tasks ? tasks_tools_json(&len) : contract_tools_json(&len);
	if (tools == NULL) {
		send_internal_error(srv, b, id_text);
		return;
	}
	strbuf sb = STRBUF_INIT;
	strbuf_reserve(&sb, len + 256);
	strbuf_puts(&sb, "{\"tools\":");
	strbuf_append(&sb, tools, len);
	if (modern)
		strbuf_puts(&sb, ",\"ttlMs\":3600000,\"cacheScope\":\"public\"," MODERN_FIELDS);
	strbuf_putc(&sb, '}');
	send_result_buffer(srv, b, id_text, &sb);
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

bool ensure_backend(mcp_server *srv)
{
	if (srv->settings_problem != NULL)
		return false;
	if (srv->backend != NULL || srv->start_backend == NULL)
		return srv->backend != NULL || srv->start_backend == NULL;
	if (srv->backend_failed)
		return false;
	char errbuf[1024] = "";
	void *backend = srv->start_backend(srv->start_arg, errbuf, sizeof errbuf);
	if (backend == NULL) {
		log_error("%s", errbuf[0] ? errbuf : "the relay's manager could not be started");
		srv->backend_failed = true;
		return false;
	}
	pthread_mutex_lock(&srv->lock);
	srv->backend = backend;
	pthread_mutex_unlock(&srv->lock);
	return true;
}

/* ---- a tools/call in flight: the sink of its relay_call ---------------------- */

static void request_free(mcp_request *req)
{
	free(req->id_text);
	free(req->id_key);
	free(req->token_text);
	free(req);
}

bool send_progress(mcp_server *srv, const char *token_text, double progress, double total,
                   const char *message)
{
	if (token_text == NULL || atomic_load(&srv->out_failed))
		return false;
	strbuf sb = STRBUF_INIT;
	strbuf_puts(
	    &sb, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":");
	strbuf_puts(&sb, token_text);
	strbuf_puts(&sb, ",\"progress\":");
	jsonx_write_number(&sb, progress);
	if (total >= 0) {
		strbuf_puts(&sb, ",\"total\":");
		jsonx_write_number(&sb, total);
	}
	if (message) {
		strbuf_puts(&sb, ",\"message\":");
		jsonx_write_string(&sb, message, strlen(message));
	}
	strbuf_puts(&sb, "}}");
	bool sent = strbuf_ok(&sb);
	if (sent)
		/* Written now, under the call's lock, so it always precedes the
		 * call's response. */
		send_message(srv, sb.data, sb.len, false);
	strbuf_free(&sb);
	return sent;
}

static bool request_progress(void *arg, double progress, double total, const char *message)
{
	mcp_request *req = arg;
	return send_progress(req->srv, req->token_text, progress, total, message);
}

/* Removes the request from the in-flight table if it is still there (a
 * notifications/cancelled may have taken it out already). */
static void request_detach(void *arg)
{
	mcp_request *req = arg;
	mcp_server *srv = req->srv;
	pthread_mutex_lock(&srv->lock);
	for (mcp_request **p = &srv->inflight; *p; p = &(*p)->next) {
		if (*p == req) {
			*p = req->next;
			break;
		}
	}
	pthread_mutex_unlock(&srv->lock);
}

static void request_answer(void *arg, const tool_result *result)
{
	mcp_request *req = arg;
	strbuf body = STRBUF_INIT;
	if (result == NULL) {
		send_internal_error(req->srv, req->batch, req->id_text);
	} else {
		render_tool_result(&body, result, req->modern);
		if (strbuf_ok(&body))
			send_result(req->srv, req->batch, req->id_text, body.data, body.len);
		else
			send_internal_error(req->srv, req->batch, req->id_text);
	}
	strbuf_free(&body);
}

static void request_finished(void *arg)
{
	mcp_request *req = arg;
	/* Detached: nothing else reaches the request now. */
	batch *b = req->batch;
	mcp_server *srv = req->srv;
	request_free(req);
	if (b)
		batch_release(srv, b);
}

static const relay_call_sink request_sink = {
    .progress = request_progress,
    .detach = request_detach,
    .answer = request_answer,
    .finished = request_finished,
};

/* A new request of `srv` with its call; NULL when out of memory. */
static mcp_request *request_new(mcp_server *srv, const char *id_text, const char *id_key, json_object *params,
                                bool modern)
{
	mcp_request *req = calloc(1, sizeof *req);
	if (req == NULL || (req->id_text = strdup(id_text)) == NULL || (req->id_key = strdup(id_key)) == NULL)
		goto fail;
	req->srv = srv;
	req->modern = modern;
	json_object *meta = jsonx_get_obj(params, "_meta");
	json_object *token = NULL;
	if (meta && json_object_object_get_ex(meta, "progressToken", &token) && wire_is_id(token)) {
		req->token_text = wire_id_text(token);
		if (req->token_text == NULL)
			goto fail;
	}
	req->call = relay_call_new(&request_sink, req, req->token_text != NULL);
	if (req->call == NULL)
		goto fail;
	return req;
fail:
	if (req)
		request_free(req);
	return NULL;
}

/* The call of a tools/call answered when it completes, registered in
 * flight; NULL when it was answered already (an error). */
static relay_call *plain_call(mcp_server *srv, batch *b, const char *id_text, const char *id_key,
                              json_object *params, bool modern)
{
	mcp_request *req = request_new(srv, id_text, id_key, params, modern);
	if (req == NULL) {
		send_internal_error(srv, b, id_text);
		return NULL;
	}
	relay_call *call = req->call;
	pthread_mutex_lock(&srv->lock);
	if (id_in_flight_locked(srv, id_key)) {
		pthread_mutex_unlock(&srv->lock);
		relay_call_cancel(call); /* never in flight: completing it writes nothing */
		relay_call_complete(call, NULL);
		send_error(srv, b, id_text, -32600, "Duplicate request id", NULL);
		return NULL;
	}
	req->next = srv->inflight;
	srv->inflight = req;
	if (b) {
		batch_hold(b);
		req->batch = b;
	}
	pthread_mutex_unlock(&srv->lock);
	return call;
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

	/* A task answers the request at once; its call goes on the same way. */
	relay_call *call = NULL;
	task_start as_task = tasks_maybe_start(srv, b, id_text, id_key, params, modern, name, &call);
	if (as_task == TASK_ANSWERED)
		return;
	if (as_task == TASK_NOT && (call = plain_call(srv, b, id_text, id_key, params, modern)) == NULL)
		return;

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
	if (!ensure_backend(srv)) {
		json_object_put(arguments);
		relay_call_complete(
		    call, tool_result_error(NULL, "internal",
		                            "The relay could not start its manager (see its stderr); "
		                            "restart the server"));
		return;
	}
	srv->handler->dispatch(srv->backend, (relay_tool)tool, arguments, call);
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
	for (mcp_request **p = &srv->inflight; *p; p = &(*p)->next) {
		mcp_request *req = *p;
		if (strcmp(req->id_key, key) != 0)
			continue;
		/* No answer will be written: the id is free again, and a batch
		 * holding it stops waiting for it. The tools layer still owns the
		 * call and completes it; that then writes nothing. The call cannot
		 * complete meanwhile: its detach waits for srv->lock. */
		*p = req->next;
		if (relay_call_cancel_unanswered(req->call)) {
			b = req->batch;
			req->batch = NULL;
		}
		break;
	}
	for (subscription **p = &srv->subscriptions; *p; p = &(*p)->next) {
		subscription *s = *p;
		if (strcmp(s->id_key, key) != 0)
			continue;
		/* A cancelled subscription is dropped silently (spec/mcp.md §5). */
		*p = s->next;
		tasks_unwatch(srv, s->id_key);
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

static void handle_listen(mcp_server *srv, batch *b, const char *id_text, const char *id_key,
                          json_object *params, bool modern)
{
	if (!modern) {
		send_error(srv, b, id_text, -32601, "Method not found", NULL);
		return;
	}
	json_object *task_ids = NULL;
	json_object *filter = jsonx_get_obj(params, "notifications");
	if (filter && json_object_object_get_ex(filter, "taskIds", &task_ids)) {
		if (!tasks_declared(params)) {
			send_error(srv, b, id_text, -32021, "Missing required client capability",
			           "{\"requiredCapabilities\":{\"extensions\":{\"" TASKS_EXTENSION
			           "\":{}}}}");
			return;
		}
		if (!json_object_is_type(task_ids, json_type_array)) {
			send_error_reason(srv, b, id_text, -32602, "Invalid params",
			                  "notifications.taskIds must be an array of task ids (strings)");
			return;
		}
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
	            "{\"notifications\":{");
	if (task_ids) {
		strbuf_puts(&sb, "\"taskIds\":");
		tasks_watch(srv, id_text, id_key, task_ids, &sb);
	}
	strbuf_puts(&sb, "},\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":");
	strbuf_puts(&sb, id_text);
	strbuf_puts(&sb, "}}}");
	if (strbuf_ok(&sb))
		send_message(srv, sb.data, sb.len, on_reader_thread(srv));
	strbuf_free(&sb);
}

/* Answers every open subscription with its closing result (session end). */
void close_subscriptions(mcp_server *srv)
{
	pthread_mutex_lock(&srv->lock);
	subscription *list = srv->subscriptions;
	srv->subscriptions = NULL;
	pthread_mutex_unlock(&srv->lock);
	while (list) {
		subscription *s = list;
		list = s->next;
		tasks_unwatch(srv, s->id_key);
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

void handle_request(mcp_server *srv, batch *b, const char *method, json_object *id, json_object *params)
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
	if (tasks_handle_request(srv, b, method, id_text, id_key, params, modern))
		goto cleanup;
	if (strcmp(method, "tools/call") == 0)
		handle_tools_call(srv, b, id_text, id_key, params, modern);
	else if (strcmp(method, "tools/list") == 0)
		handle_tools_list(srv, b, id_text, params, modern);
	else if (strcmp(method, "ping") == 0)
		handle_ping(srv, b, id_text, modern);
	else if (strcmp(method, "server/discover") == 0)
		handle_discover(srv, b, id_text, params);
	else if (strcmp(method, "subscriptions/listen") == 0)
		handle_listen(srv, b, id_text, id_key, params, modern);
	else
		send_error(srv, b, id_text, -32601, "Method not found", NULL);
cleanup:
	free(requested);
	free(id_text);
	free(id_key);
}

void handle_notification(mcp_server *srv, const char *method, json_object *params)
{
	if (strcmp(method, "notifications/cancelled") == 0)
		handle_cancelled(srv, params);
	/* notifications/initialized and every other notification: no effect,
	 * and (unlike ignored responses) not logged. */
}
