/*
 * mcp/server_internal.h — what the server's files share: the server, its
 * requests, batches and subscriptions, and the output functions. Not for
 * use outside core/src/mcp/.
 *
 * Lock order: srv->lock, then a call's lock (call/call.c), then
 * batch->lock / srv->out_lock. Nothing takes srv->lock while holding a
 * call's lock.
 */
#ifndef RELAY_MCP_SERVER_INTERNAL_H
#define RELAY_MCP_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "call/call.h"
#include "mcp/server.h"
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
#define BACKEND_START_DELAY_MS   200

/* Bytes on the signal self-pipe besides signal numbers. */
#define WAKE_END_DONE      'e'
#define WAKE_OUTPUT_FAILED 'o'

#define TASKS_EXTENSION         "io.modelcontextprotocol/tasks"
#define CLIENT_CAPABILITIES_KEY "io.modelcontextprotocol/clientCapabilities"

/* The modern-era fields of a result, without a leading comma. */
#define MODERN_META                                                                                          \
	"\"_meta\":{\"io.modelcontextprotocol/serverInfo\":{\"name\":\"relay\",\"version\":\"" RELAY_VERSION \
	"\"}}"
#define MODERN_FIELDS "\"resultType\":\"complete\"," MODERN_META

typedef struct batch batch;
typedef struct subscription subscription;
typedef struct mcp_request mcp_request;
typedef struct mcp_task mcp_task;
typedef struct task_watch task_watch;

typedef struct mcp_server {
	int in_fd;
	int out_fd;

	/* The output stream: messages are appended under out_lock and written
	 * by whoever flushes. out_failed is set once a write fails; nothing is
	 * written after that. */
	pthread_mutex_t out_lock;
	strbuf out;
	atomic_bool out_failed;

	/* Protocol and session state under `lock`. */
	pthread_mutex_t lock;
	char negotiated[16];
	mcp_request *inflight;       /* tools/call requests not yet answered */
	subscription *subscriptions; /* open subscriptions/listen requests */
	mcp_task *tasks;             /* every task of the process (mcp/tasks.c); fields under task_lock */
	bool legacy_tasks;           /* initialize declared capabilities.tasks (2025-11-25 tasks) */
	bool ending;                 /* the session end has begun */
	bool ending_done;            /* the handler's end_session returned */
	int exit_status;

	/* A leaf lock (taken under srv->lock or a call's lock, never before
	 * them): the state of every task and the task watches. */
	pthread_mutex_t task_lock;
	task_watch *watches; /* subscriptions/listen task filters, under task_lock */

	pthread_t reader;
	pid_t initial_ppid;
	/* What answers tools/call (mcp_server_config): `backend` is NULL until
	 * started on demand; only the reader thread starts it. */
	const mcp_handler *handler;
	void *backend;
	void *(*start_backend)(void *arg, char *errbuf, size_t errlen);
	void *start_arg;
	bool backend_failed;
	const char *settings_problem; /* mcp_server_config.settings_problem */
	int wake_pipe[2];             /* end of the session done, output failed */
	struct mcp_server *next_retired;
} mcp_server;

/* One tools/call request in flight: the sink side of its relay_call
 * (call/call.h). */
struct mcp_request {
	mcp_server *srv;
	relay_call *call;
	char *id_text;    /* the id's JSON text, echoed exactly */
	char *id_key;     /* the id as compared (wire_id_key) */
	char *token_text; /* progressToken's JSON text, or NULL */
	bool modern;
	batch *batch;      /* the batch awaiting this answer, or NULL; under srv->lock */
	mcp_request *next; /* srv->inflight, under srv->lock */
};

struct subscription {
	char *id_text;
	char *id_key;
	subscription *next;
};

/* A batch collects the answers of its requests and writes them as one
 * array once the last is ready (spec/mcp.md §2.2). */
struct batch {
	pthread_mutex_t lock;
	strbuf answers;
	size_t answer_count;
	size_t pending; /* requests not yet answered, plus one while dispatching */
};

/* ---- output (mcp/output.c) ---- */

/* Wakes the reader of `srv` with `why` (WAKE_*). */
void wake_reader(mcp_server *srv, char why);
/* Queues one complete message (without its newline), repaired to UTF-8.
 * With `defer`, the reader flushes later; otherwise it is written now. */
void send_message(mcp_server *srv, const char *msg, size_t len, bool defer);
void flush_output(mcp_server *srv);
bool on_reader_thread(const mcp_server *srv);
/* Answers, into the batch `b` when not NULL, else onto the stream. */
void send_internal_error(mcp_server *srv, batch *b, const char *id_text);
void send_error(mcp_server *srv, batch *b, const char *id_text, int code, const char *message,
                const char *data_json);
/* An error whose data is {"reason": <text>}. */
void send_error_reason(mcp_server *srv, batch *b, const char *id_text, int code, const char *message,
                       const char *reason);
/* `result_json` is a complete JSON object. */
void send_result(mcp_server *srv, batch *b, const char *id_text, const char *result_json, size_t len);
/* Sends the result built in `sb`, or an internal error when building it ran
 * out of memory; frees `sb` either way. */
void send_result_buffer(mcp_server *srv, batch *b, const char *id_text, strbuf *sb);

batch *batch_new(void);
void batch_add(batch *b, const char *msg, size_t len);
void batch_hold(batch *b);
/* Drops one pending unit; the last one writes the array (or nothing when no
 * element of the batch was answered). */
void batch_release(mcp_server *srv, batch *b);

/* ---- requests (mcp/methods.c) ---- */

/* Is an id (by key) in flight: a tools/call not yet answered, an open
 * subscription, a tasks/result waiting? Under srv->lock. */
bool id_in_flight_locked(mcp_server *srv, const char *id_key);
/* Writes notifications/progress for `token_text` now; false when nothing
 * could be written. */
bool send_progress(mcp_server *srv, const char *token_text, double progress, double total,
                   const char *message);

/* Answers one request by method (initialize, tools/call, ...). */
void handle_request(mcp_server *srv, batch *b, const char *method, json_object *id, json_object *params);
/* notifications/cancelled and the other notifications. */
void handle_notification(mcp_server *srv, const char *method, json_object *params);
/* Starts the backend when it is started on demand and not yet running.
 * Reader thread only. False when there is no backend (it failed). */
bool ensure_backend(mcp_server *srv);
/* Answers every open subscription with its closing result (session end). */
void close_subscriptions(mcp_server *srv);

/* ---- tasks (mcp/tasks.c): 2025-11-25 tasks and io.modelcontextprotocol/tasks ---- */

typedef enum task_start {
	TASK_NOT,      /* a plain call */
	TASK_STARTED,  /* the CreateTaskResult is sent; *call_out runs the task */
	TASK_ANSWERED, /* an error was sent */
} task_start;

/* Does the request's _meta declare the io.modelcontextprotocol/tasks
 * extension in its client capabilities? */
bool tasks_declared(json_object *params);
/* A tools/call of tool `name`: answered with a task when the client supports
 * tasks and the tool is one that may take long (mcp.md, Tasks). */
task_start tasks_maybe_start(mcp_server *srv, batch *b, const char *id_text, const char *id_key,
                             json_object *params, bool modern, const char *name, relay_call **call_out);
/* tasks/get, tasks/result, tasks/list, tasks/cancel, tasks/update: false
 * when `method` is none of them. */
bool tasks_handle_request(mcp_server *srv, batch *b, const char *method, const char *id_text,
                          const char *id_key, json_object *params, bool modern);
/* tools/list for a legacy client that declared tasks: the tools with
 * execution.taskSupport (made once). NULL when out of memory. */
const char *tasks_tools_json(size_t *len_out);
/* Is a tasks/result of `id_key` waiting? Under srv->lock. */
bool tasks_id_waiting_locked(mcp_server *srv, const char *id_key);
/* subscriptions/listen with notifications.taskIds: watches the known
 * modern tasks among `task_ids` for the subscription `sub_id_text`; writes
 * the accepted ids as a JSON array to `accepted`. */
void tasks_watch(mcp_server *srv, const char *sub_id_text, const char *sub_id_key, json_object *task_ids,
                 strbuf *accepted);
/* The subscription `sub_id_key` ended: its watches go. */
void tasks_unwatch(mcp_server *srv, const char *sub_id_key);
/* Session end: every tasks/result still waiting is answered with an error. */
void tasks_close(mcp_server *srv);

#endif
