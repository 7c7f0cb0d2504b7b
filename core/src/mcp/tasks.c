/*
 * MCP Tasks (mcp.md, Tasks) in both generations: the 2025-11-25 tasks
 * utility for legacy-era clients that declared `capabilities.tasks` in
 * initialize, and the io.modelcontextprotocol/tasks extension for
 * 2026-07-28 requests that declare it in their client capabilities.
 *
 * A task is a tools/call answered at once with a task handle; its call
 * (call/call.h) goes to the tools layer exactly as a plain call's does, so
 * per-guest order, progress and cancellation are the same. The task's sink
 * keeps the rendered result instead of writing it: `result` is byte for
 * byte the synchronous answer's result. Tasks live as long as the server
 * process and are never written anywhere: after a restart every id is
 * unknown.
 *
 * Locks: srv->lock guards the task list and each task's `call` pointer
 * (cleared by the sink's detach, which takes srv->lock, so a call reached
 * under srv->lock cannot complete meanwhile); srv->task_lock, a leaf, guards
 * the other fields, the tasks/result waiters and the watches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/contract.h"
#include "mcp/render.h"
#include "mcp/server_internal.h"
#include "mcp/wire.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/randx.h"
#include "util/timefmt.h"

#define TASK_POLL_INTERVAL_MS 2000

typedef enum task_status { TASK_WORKING, TASK_COMPLETED, TASK_FAILED, TASK_CANCELLED } task_status;

static const char *const status_names[] = {"working", "completed", "failed", "cancelled"};

/* A legacy tasks/result waiting for its task to end. */
typedef struct task_waiter {
	char *id_text;
	char *id_key;
	batch *batch; /* held while waiting, or NULL */
	struct task_waiter *next;
} task_waiter;

/* A subscriptions/listen that wants notifications/tasks of one task. */
struct task_watch {
	char *sub_id_text;
	char *sub_id_key;
	char task_id[37];
	task_watch *next;
};

struct mcp_task {
	mcp_server *srv;
	char id[37];
	char tool[40];
	bool modern;          /* an io.modelcontextprotocol/tasks task, else 2025-11-25 */
	char *token_text;     /* 2025-11-25: the request's progressToken, or NULL */
	relay_call *call;     /* under srv->lock; NULL once the call completes */
	task_status status;   /* the rest under srv->task_lock */
	char *status_message; /* owned, may be NULL */
	int64_t created_ms;
	int64_t updated_ms;
	char *result_json;    /* completed: the rendered result */
	task_waiter *waiters; /* 2025-11-25 tasks/result requests */
	mcp_task *next;       /* srv->tasks, under srv->lock */
};

/* The six tools whose duration depends on the backend, the bytes moved or
 * the script: the ones that answer with a task (mcp.md, Tasks). */
static bool tool_may_take_long(const char *name)
{
	static const char *const tools[] = {"relay_acquire", "relay_stage",  "relay_script",
	                                    "relay_extract", "relay_finish", "relay_release"};
	for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++)
		if (strcmp(name, tools[i]) == 0)
			return true;
	return false;
}

bool tasks_declared(json_object *params)
{
	json_object *caps = jsonx_get_obj(jsonx_get_obj(params, "_meta"), CLIENT_CAPABILITIES_KEY);
	json_object *ext = jsonx_get_obj(jsonx_get_obj(caps, "extensions"), TASKS_EXTENSION);
	return ext != NULL;
}

static void set_message(mcp_task *t, const char *message)
{
	char *copy = message ? strdup(message) : NULL;
	if (message == NULL || copy != NULL) {
		free(t->status_message);
		t->status_message = copy;
	}
	t->updated_ms = clock_now_ms();
}

/* The Task's fields, without braces (each generation's names). Under task_lock. */
static void write_task_fields(strbuf *sb, const mcp_task *t)
{
	char created[25], updated[25];
	time_format_iso_millis(t->created_ms, created);
	time_format_iso_millis(t->updated_ms, updated);
	strbuf_printf(sb, "\"taskId\":\"%s\",\"status\":\"%s\"", t->id, status_names[t->status]);
	if (t->status_message) {
		strbuf_puts(sb, ",\"statusMessage\":");
		jsonx_write_string(sb, t->status_message, strlen(t->status_message));
	}
	/* A task lives as long as the server process: no TTL. */
	strbuf_printf(sb, ",\"createdAt\":\"%s\",\"lastUpdatedAt\":\"%s\",\"%s\":null", created, updated,
	              t->modern ? "ttlMs" : "ttl");
	if (t->status == TASK_WORKING)
		strbuf_printf(sb, ",\"%s\":%d", t->modern ? "pollIntervalMs" : "pollInterval",
		              TASK_POLL_INTERVAL_MS);
}

/* A modern DetailedTask's fields: the Task, and the result or error of a
 * finished one. Under task_lock. */
static void write_detailed_fields(strbuf *sb, const mcp_task *t)
{
	write_task_fields(sb, t);
	if (t->status == TASK_COMPLETED && t->result_json) {
		strbuf_puts(sb, ",\"result\":");
		strbuf_puts(sb, t->result_json);
	} else if (t->status == TASK_FAILED) {
		strbuf_puts(sb, ",\"error\":{\"code\":-32603,\"message\":\"Internal error\"}");
	}
}

/* ---- status notifications ----------------------------------------------------- */

/* The status changed (under task_lock): a 2025-11-25 task sends
 * notifications/tasks/status; a modern one sends notifications/tasks to
 * every subscription watching it. */
static void notify_status_locked(mcp_task *t)
{
	mcp_server *srv = t->srv;
	strbuf sb = STRBUF_INIT;
	if (!t->modern) {
		strbuf_puts(&sb,
		            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tasks/status\",\"params\":{");
		write_task_fields(&sb, t);
		strbuf_puts(&sb, "}}");
		if (strbuf_ok(&sb))
			send_message(srv, sb.data, sb.len, on_reader_thread(srv));
		strbuf_free(&sb);
		return;
	}
	for (task_watch *w = srv->watches; w; w = w->next) {
		if (strcmp(w->task_id, t->id) != 0)
			continue;
		strbuf_reset(&sb);
		strbuf_puts(&sb, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tasks\",\"params\":{");
		write_detailed_fields(&sb, t);
		strbuf_puts(&sb, ",\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":");
		strbuf_puts(&sb, w->sub_id_text);
		strbuf_puts(&sb, "}}}");
		if (strbuf_ok(&sb))
			send_message(srv, sb.data, sb.len, on_reader_thread(srv));
	}
	strbuf_free(&sb);
}

/* ---- tasks/result (2025-11-25) ------------------------------------------------- */

/* Answers a tasks/result of the finished task `t` (under task_lock): what
 * the request would have returned, with the related-task _meta the
 * 2025-11-25 utility requires on it. */
static void answer_result_locked(mcp_task *t, batch *b, const char *id_text)
{
	mcp_server *srv = t->srv;
	if (t->status == TASK_COMPLETED && t->result_json) {
		size_t len = strlen(t->result_json);
		strbuf sb = STRBUF_INIT;
		/* A legacy result has no _meta (render.c): add one before its
		 * closing brace. */
		strbuf_append(&sb, t->result_json, len - 1);
		strbuf_printf(
		    &sb, ",\"_meta\":{\"io.modelcontextprotocol/related-task\":{\"taskId\":\"%s\"}}}", t->id);
		send_result_buffer(srv, b, id_text, &sb);
	} else if (t->status == TASK_CANCELLED) {
		char msg[200];
		snprintf(msg, sizeof msg,
		         "Task %s was cancelled: %s has no result, and nothing of it is replayed", t->id,
		         t->tool);
		send_error(srv, b, id_text, -32602, msg, NULL);
	} else {
		send_internal_error(srv, b, id_text);
	}
}

/* The task ended (under task_lock): answers its waiters and notifies. */
static void task_ended_locked(mcp_task *t)
{
	task_waiter *w = t->waiters;
	t->waiters = NULL;
	while (w) {
		task_waiter *next = w->next;
		answer_result_locked(t, w->batch, w->id_text);
		if (w->batch)
			batch_release(t->srv, w->batch);
		free(w->id_text);
		free(w->id_key);
		free(w);
		w = next;
	}
	notify_status_locked(t);
}

/* ---- the call's sink ---------------------------------------------------------- */

static bool task_progress(void *arg, double progress, double total, const char *message)
{
	mcp_task *t = arg;
	char fallback[96];
	if (message == NULL) {
		if (total >= 0)
			snprintf(fallback, sizeof fallback, "%s: %.0f of %.0f", t->tool, progress, total);
		else
			snprintf(fallback, sizeof fallback, "%s: step %.0f", t->tool, progress);
		message = fallback;
	}
	pthread_mutex_lock(&t->srv->task_lock);
	if (t->status == TASK_WORKING)
		set_message(t, message);
	pthread_mutex_unlock(&t->srv->task_lock);
	/* 2025-11-25: the request's progressToken stays valid for the task's
	 * life. The extension sends no progress for tasks. */
	if (!t->modern && t->token_text)
		send_progress(t->srv, t->token_text, progress, total, message);
	return true;
}

static void task_detach(void *arg)
{
	mcp_task *t = arg;
	pthread_mutex_lock(&t->srv->lock);
	t->call = NULL;
	pthread_mutex_unlock(&t->srv->lock);
}

static void task_answer(void *arg, const tool_result *result)
{
	mcp_task *t = arg;
	strbuf body = STRBUF_INIT;
	if (result)
		render_tool_result(&body, result, t->modern);
	pthread_mutex_lock(&t->srv->task_lock);
	if (t->status == TASK_WORKING) {
		if (result && strbuf_ok(&body) && (t->result_json = strdup(strbuf_str(&body))) != NULL) {
			t->status = TASK_COMPLETED;
			/* Its summary: relay_script's lead sentence, else the headline
			 * (relay_script's carries imageDelivery). */
			set_message(t, result->lead ? result->lead : result->headline);
		} else {
			t->status = TASK_FAILED;
			set_message(t,
			            "The result could not be formed (out of memory); see the relay's stderr");
		}
		task_ended_locked(t);
	}
	pthread_mutex_unlock(&t->srv->task_lock);
	strbuf_free(&body);
}

/* After the call: a task still working was cancelled without an answer
 * (the end of the session's grace period). */
static void task_finished(void *arg)
{
	mcp_task *t = arg;
	pthread_mutex_lock(&t->srv->task_lock);
	if (t->status == TASK_WORKING) {
		t->status = TASK_CANCELLED;
		set_message(t, "Cancelled: the session ended before the call finished; nothing is replayed");
		task_ended_locked(t);
	}
	pthread_mutex_unlock(&t->srv->task_lock);
}

static const relay_call_sink task_sink = {
    .progress = task_progress,
    .detach = task_detach,
    .answer = task_answer,
    .finished = task_finished,
};

/* ---- creation ------------------------------------------------------------------ */

/* The CreateTaskResult of a new task (under task_lock). */
static void write_create_result(strbuf *sb, const mcp_task *t)
{
	if (t->modern) {
		strbuf_puts(sb, "{\"resultType\":\"task\",");
		write_task_fields(sb, t);
		strbuf_puts(sb, "," MODERN_META "}");
		return;
	}
	strbuf_puts(sb, "{\"task\":{");
	write_task_fields(sb, t);
	strbuf_puts(sb, "},\"_meta\":{\"io.modelcontextprotocol/model-immediate-response\":");
	char text[200];
	snprintf(text, sizeof text,
	         "%s runs in the background as task %s; its result arrives when the task ends.", t->tool,
	         t->id);
	jsonx_write_string(sb, text, strlen(text));
	strbuf_puts(sb, "}}");
}

/* Does this tools/call become a task? TASK_ANSWERED after an error. */
static task_start wants_task(mcp_server *srv, batch *b, const char *id_text, json_object *params, bool modern,
                             const char *name)
{
	if (modern)
		return tasks_declared(params) && tool_may_take_long(name) ? TASK_STARTED : TASK_NOT;
	json_object *task = NULL;
	pthread_mutex_lock(&srv->lock);
	bool negotiated = srv->legacy_tasks;
	pthread_mutex_unlock(&srv->lock);
	/* Without the capability, task metadata is ignored (2025-11-25). */
	if (!negotiated || !json_object_object_get_ex(params, "task", &task))
		return TASK_NOT;
	if (!json_object_is_type(task, json_type_object)) {
		send_error_reason(
		    srv, b, id_text, -32602, "Invalid params",
		    "tools/call params.task must be an object: {} or {\"ttl\": <milliseconds>}");
		return TASK_ANSWERED;
	}
	if (!tool_may_take_long(name)) {
		char reason[300];
		snprintf(reason, sizeof reason,
		         "%.60s does not run as a task (execution.taskSupport is forbidden in tools/list): "
		         "call it without params.task",
		         name);
		send_error_reason(srv, b, id_text, -32601, "Method not found", reason);
		return TASK_ANSWERED;
	}
	return TASK_STARTED;
}

task_start tasks_maybe_start(mcp_server *srv, batch *b, const char *id_text, const char *id_key,
                             json_object *params, bool modern, const char *name, relay_call **call_out)
{
	*call_out = NULL;
	task_start start = wants_task(srv, b, id_text, params, modern, name);
	if (start != TASK_STARTED)
		return start;
	mcp_task *t = calloc(1, sizeof *t);
	if (t == NULL)
		goto oom;
	t->srv = srv;
	t->modern = modern;
	snprintf(t->tool, sizeof t->tool, "%s", name);
	random_uuid(t->id);
	t->created_ms = t->updated_ms = clock_now_ms();
	json_object *token = NULL;
	if (!modern && json_object_object_get_ex(jsonx_get_obj(params, "_meta"), "progressToken", &token) &&
	    wire_is_id(token) && (t->token_text = wire_id_text(token)) == NULL)
		goto oom;
	char message[120];
	snprintf(message, sizeof message, "%s accepted: it waits for its guest's earlier calls, then runs",
	         t->tool);
	if ((t->status_message = strdup(message)) == NULL)
		goto oom;
	t->call = relay_call_new(&task_sink, t, true);
	if (t->call == NULL)
		goto oom;

	pthread_mutex_lock(&srv->lock);
	if (id_in_flight_locked(srv, id_key)) {
		pthread_mutex_unlock(&srv->lock);
		/* Never listed: nothing reaches it, its sink frees nothing, and
		 * as ended it announces nothing. */
		t->status = TASK_CANCELLED;
		relay_call_cancel(t->call);
		relay_call_complete(t->call, NULL);
		free(t->status_message);
		free(t->token_text);
		free(t);
		send_error(srv, b, id_text, -32600, "Duplicate request id", NULL);
		return TASK_ANSWERED;
	}
	/* Listed before the handle is sent: a tasks/get of it resolves at once. */
	t->next = srv->tasks;
	srv->tasks = t;
	pthread_mutex_unlock(&srv->lock);

	strbuf sb = STRBUF_INIT;
	pthread_mutex_lock(&srv->task_lock);
	write_create_result(&sb, t);
	pthread_mutex_unlock(&srv->task_lock);
	send_result_buffer(srv, b, id_text, &sb);
	*call_out = t->call;
	return TASK_STARTED;
oom:
	if (t) {
		free(t->status_message);
		free(t->token_text);
		free(t);
	}
	send_internal_error(srv, b, id_text);
	return TASK_ANSWERED;
}

/* ---- tasks/get, tasks/result, tasks/list, tasks/cancel, tasks/update ---------- */

/* The task `task_id` of this generation, or NULL after answering -32602.
 * Under srv->lock. */
static mcp_task *find_task_locked(mcp_server *srv, batch *b, const char *id_text, const char *task_id,
                                  bool modern)
{
	for (mcp_task *t = srv->tasks; t; t = t->next) {
		if (strcmp(t->id, task_id) != 0)
			continue;
		if (t->modern == modern)
			return t;
		char msg[300];
		snprintf(
		    msg, sizeof msg,
		    "Failed to retrieve task: task %s was created by a %s request; ask for it the same way",
		    t->id,
		    t->modern ? "2026-07-28 (io.modelcontextprotocol/tasks)" : "2025-11-25 (initialize era)");
		send_error(srv, b, id_text, -32602, msg, NULL);
		return NULL;
	}
	strbuf msg = STRBUF_INIT;
	strbuf_puts(&msg, "Failed to retrieve task: Task not found: ");
	strbuf_append(&msg, task_id, strlen(task_id) > 80 ? 80 : strlen(task_id));
	strbuf_puts(&msg,
	            " is no task of this server process (tasks live as long as the server; after a restart, "
	            "relay_status shows each guest's state)");
	send_error(srv, b, id_text, -32602, strbuf_ok(&msg) ? strbuf_str(&msg) : "Task not found", NULL);
	strbuf_free(&msg);
	return NULL;
}

/* Sends `{<task fields>[,modern fields]}` (under task_lock). */
static void send_task(mcp_server *srv, batch *b, const char *id_text, const mcp_task *t, bool detailed)
{
	strbuf sb = STRBUF_INIT;
	strbuf_putc(&sb, '{');
	if (detailed)
		write_detailed_fields(&sb, t);
	else
		write_task_fields(&sb, t);
	if (t->modern)
		strbuf_puts(&sb, "," MODERN_FIELDS);
	strbuf_putc(&sb, '}');
	send_result_buffer(srv, b, id_text, &sb);
}

static void handle_result_request(mcp_server *srv, batch *b, const char *id_text, const char *id_key,
                                  mcp_task *t)
{
	pthread_mutex_lock(&srv->task_lock);
	if (t->status != TASK_WORKING) {
		answer_result_locked(t, b, id_text);
		pthread_mutex_unlock(&srv->task_lock);
		return;
	}
	task_waiter *w = calloc(1, sizeof *w);
	if (w == NULL || (w->id_text = strdup(id_text)) == NULL || (w->id_key = strdup(id_key)) == NULL) {
		pthread_mutex_unlock(&srv->task_lock);
		if (w)
			free(w->id_text);
		free(w);
		send_internal_error(srv, b, id_text);
		return;
	}
	if (b) {
		batch_hold(b);
		w->batch = b;
	}
	w->next = t->waiters;
	t->waiters = w;
	pthread_mutex_unlock(&srv->task_lock);
}

/* tasks/cancel: the same cancellation as notifications/cancelled. Under srv->lock. */
static void handle_cancel_locked(mcp_server *srv, batch *b, const char *id_text, mcp_task *t)
{
	pthread_mutex_lock(&srv->task_lock);
	task_status status = t->status;
	pthread_mutex_unlock(&srv->task_lock);
	if (status != TASK_WORKING) {
		if (t->modern) { /* the extension acknowledges; the task keeps its end */
			static const char ack[] = "{" MODERN_FIELDS "}";
			send_result(srv, b, id_text, ack, sizeof ack - 1);
			return;
		}
		char msg[200];
		snprintf(msg, sizeof msg, "Cannot cancel task %s: it is already %s (a terminal status)",
		         t->id, status_names[status]);
		send_error(srv, b, id_text, -32602, msg, NULL);
		return;
	}
	/* Under srv->lock the call cannot complete meanwhile (its detach waits). */
	if (t->call)
		relay_call_cancel_unanswered(t->call);
	pthread_mutex_lock(&srv->task_lock);
	if (t->status == TASK_WORKING) {
		t->status = TASK_CANCELLED;
		char msg[160];
		snprintf(msg, sizeof msg,
		         "Cancelled by tasks/cancel: %s stops as after notifications/cancelled; "
		         "nothing is replayed",
		         t->tool);
		set_message(t, msg);
		task_ended_locked(t);
	}
	if (t->modern) {
		static const char ack[] = "{" MODERN_FIELDS "}";
		send_result(srv, b, id_text, ack, sizeof ack - 1);
	} else {
		send_task(srv, b, id_text, t, false);
	}
	pthread_mutex_unlock(&srv->task_lock);
}

static void handle_list_locked(mcp_server *srv, batch *b, const char *id_text, json_object *params)
{
	if (params && json_object_object_get_ex(params, "cursor", NULL)) {
		send_error_reason(srv, b, id_text, -32602, "Invalid cursor",
		                  "tasks/list answers in one page and never issues a cursor");
		return;
	}
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{\"tasks\":[");
	bool first = true;
	pthread_mutex_lock(&srv->task_lock);
	for (mcp_task *t = srv->tasks; t; t = t->next) {
		if (t->modern)
			continue;
		strbuf_puts(&sb, first ? "{" : ",{");
		write_task_fields(&sb, t);
		strbuf_putc(&sb, '}');
		first = false;
	}
	pthread_mutex_unlock(&srv->task_lock);
	strbuf_puts(&sb, "]}");
	send_result_buffer(srv, b, id_text, &sb);
}

/* Which generation serves `method`, or an error already sent: false. */
static bool method_allowed(mcp_server *srv, batch *b, const char *id_text, const char *method,
                           json_object *params, bool modern)
{
	if (modern) {
		if (strcmp(method, "tasks/result") == 0 || strcmp(method, "tasks/list") == 0) {
			send_error_reason(
			    srv, b, id_text, -32601, "Method not found",
			    "io.modelcontextprotocol/tasks has tasks/get, tasks/update and tasks/cancel; a "
			    "finished task's result comes with tasks/get");
			return false;
		}
		if (!tasks_declared(params)) {
			send_error(srv, b, id_text, -32021, "Missing required client capability",
			           "{\"requiredCapabilities\":{\"extensions\":{\"" TASKS_EXTENSION
			           "\":{}}}}");
			return false;
		}
		return true;
	}
	pthread_mutex_lock(&srv->lock);
	bool negotiated = srv->legacy_tasks;
	pthread_mutex_unlock(&srv->lock);
	if (!negotiated) {
		/* A client that did not declare tasks sees what it always saw. */
		send_error(srv, b, id_text, -32601, "Method not found", NULL);
		return false;
	}
	if (strcmp(method, "tasks/update") == 0) {
		send_error_reason(
		    srv, b, id_text, -32601, "Method not found",
		    "tasks/update belongs to the 2026-07-28 io.modelcontextprotocol/tasks extension");
		return false;
	}
	return true;
}

bool tasks_handle_request(mcp_server *srv, batch *b, const char *method, const char *id_text,
                          const char *id_key, json_object *params, bool modern)
{
	static const char *const methods[] = {"tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
	                                      "tasks/update"};
	size_t m = 0;
	while (m < sizeof methods / sizeof methods[0] && strcmp(method, methods[m]) != 0)
		m++;
	if (m == sizeof methods / sizeof methods[0])
		return false;
	if (!method_allowed(srv, b, id_text, method, params, modern))
		return true;
	pthread_mutex_lock(&srv->lock);
	if (strcmp(method, "tasks/list") == 0) {
		handle_list_locked(srv, b, id_text, params);
		pthread_mutex_unlock(&srv->lock);
		return true;
	}
	const char *task_id = jsonx_get_str(params, "taskId");
	json_object *responses = jsonx_get_obj(params, "inputResponses");
	if (task_id == NULL || (strcmp(method, "tasks/update") == 0 && responses == NULL)) {
		pthread_mutex_unlock(&srv->lock);
		char reason[200];
		snprintf(reason, sizeof reason,
		         "%s needs params.taskId, a string (the taskId of the task handle)%s", method,
		         task_id ? " and params.inputResponses, an object" : "");
		send_error_reason(srv, b, id_text, -32602, "Invalid params", reason);
		return true;
	}
	mcp_task *t = find_task_locked(srv, b, id_text, task_id, modern);
	if (t == NULL) {
		pthread_mutex_unlock(&srv->lock);
		return true;
	}
	if (strcmp(method, "tasks/cancel") == 0) {
		handle_cancel_locked(srv, b, id_text, t);
		pthread_mutex_unlock(&srv->lock);
		return true;
	}
	pthread_mutex_unlock(&srv->lock); /* a listed task is never freed */
	if (strcmp(method, "tasks/result") == 0) {
		handle_result_request(srv, b, id_text, id_key, t);
	} else if (strcmp(method, "tasks/update") == 0) {
		/* No task of the relay asks for input: responses to keys it never
		 * issued are ignored, as the extension says. */
		static const char ack[] = "{" MODERN_FIELDS "}";
		send_result(srv, b, id_text, ack, sizeof ack - 1);
	} else {
		pthread_mutex_lock(&srv->task_lock);
		send_task(srv, b, id_text, t, modern);
		pthread_mutex_unlock(&srv->task_lock);
	}
	return true;
}

/* ---- the rest: tools/list, waiting ids, watches, session end ------------------- */

static char *tools_with_tasks;
static size_t tools_with_tasks_len;
static pthread_once_t tools_with_tasks_once = PTHREAD_ONCE_INIT;

/* Made once; then only read (the pthread_once orders it). */
static void make_tools_with_tasks(void)
{
	size_t len = 0;
	const char *plain = contract_tools_json(&len);
	json_object *tools = jsonx_parse_str(plain, NULL, 0);
	size_t n = tools ? json_object_array_length(tools) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *tool = json_object_array_get_idx(tools, i);
		const char *name = jsonx_get_str(tool, "name");
		if (name && tool_may_take_long(name)) {
			json_object *execution = json_object_new_object();
			json_object_object_add(execution, "taskSupport", json_object_new_string("optional"));
			json_object_object_add(tool, "execution", execution);
		}
	}
	tools_with_tasks = tools ? jsonx_to_string(tools, 0) : NULL;
	tools_with_tasks_len = tools_with_tasks ? strlen(tools_with_tasks) : 0;
	json_object_put(tools);
}

const char *tasks_tools_json(size_t *len_out)
{
	pthread_once(&tools_with_tasks_once, make_tools_with_tasks);
	*len_out = tools_with_tasks_len;
	return tools_with_tasks;
}

bool tasks_id_waiting_locked(mcp_server *srv, const char *id_key)
{
	bool found = false;
	pthread_mutex_lock(&srv->task_lock);
	for (mcp_task *t = srv->tasks; t && !found; t = t->next)
		for (task_waiter *w = t->waiters; w && !found; w = w->next)
			found = strcmp(w->id_key, id_key) == 0;
	pthread_mutex_unlock(&srv->task_lock);
	return found;
}

void tasks_watch(mcp_server *srv, const char *sub_id_text, const char *sub_id_key, json_object *task_ids,
                 strbuf *accepted)
{
	strbuf_putc(accepted, '[');
	bool first = true;
	pthread_mutex_lock(&srv->lock);
	pthread_mutex_lock(&srv->task_lock);
	size_t n = json_object_array_length(task_ids);
	for (size_t i = 0; i < n; i++) {
		json_object *id = json_object_array_get_idx(task_ids, i);
		if (!json_object_is_type(id, json_type_string))
			continue;
		const mcp_task *t = srv->tasks;
		while (t && !(t->modern && strcmp(t->id, json_object_get_string(id)) == 0))
			t = t->next;
		task_watch *w = t ? calloc(1, sizeof *w) : NULL;
		if (w == NULL || (w->sub_id_text = strdup(sub_id_text)) == NULL ||
		    (w->sub_id_key = strdup(sub_id_key)) == NULL) {
			if (w)
				free(w->sub_id_text);
			free(w);
			continue; /* unknown (or no memory): not accepted */
		}
		snprintf(w->task_id, sizeof w->task_id, "%s", t->id);
		w->next = srv->watches;
		srv->watches = w;
		strbuf_printf(accepted, "%s\"%s\"", first ? "" : ",", t->id);
		first = false;
	}
	pthread_mutex_unlock(&srv->task_lock);
	pthread_mutex_unlock(&srv->lock);
	strbuf_putc(accepted, ']');
}

void tasks_unwatch(mcp_server *srv, const char *sub_id_key)
{
	pthread_mutex_lock(&srv->task_lock);
	for (task_watch **p = &srv->watches; *p;) {
		task_watch *w = *p;
		if (strcmp(w->sub_id_key, sub_id_key) != 0) {
			p = &w->next;
			continue;
		}
		*p = w->next;
		free(w->sub_id_text);
		free(w->sub_id_key);
		free(w);
	}
	pthread_mutex_unlock(&srv->task_lock);
}

void tasks_close(mcp_server *srv)
{
	pthread_mutex_lock(&srv->lock);
	pthread_mutex_lock(&srv->task_lock);
	for (mcp_task *t = srv->tasks; t; t = t->next) {
		for (task_waiter *w = t->waiters; w;) {
			task_waiter *next = w->next;
			send_error(srv, w->batch, w->id_text, -32603,
			           "The session ended before the task finished; nothing of it is replayed",
			           NULL);
			if (w->batch)
				batch_release(srv, w->batch);
			free(w->id_text);
			free(w->id_key);
			free(w);
			w = next;
		}
		t->waiters = NULL;
	}
	pthread_mutex_unlock(&srv->task_lock);
	pthread_mutex_unlock(&srv->lock);
}
