/*
 * relay_kit/console.h — the console passthrough of a machine plugin
 * (relay/machine.h `console`, spec/machine-service.md §9), written once for
 * every backend that serves x11vnc on a guest's display (machine-local,
 * machine-docker): the attempt ledger in the lease record, the report, the
 * capabilities, the spec's refusal sentences, and the viewer on this host
 * (MCP_RELAY_VNC_VIEWER: a program, "browser" for the live view, or unset).
 *
 * A plugin's typed console (relay_machine_console_ops, ABI 1.7) is
 * RK_CONSOLE_DEFINE_OPS(table, route) of relay_kit/console_ops.h, its
 * route making the call's rk_console and calling rk_console_ledger.
 *
 * The ledger lives in the record as
 *   "console":        the last report (the lease document's "console"),
 *   "consolePrivate": {"attempts": {<attempt id>: {...}}, "order": [ids],
 *                      "current": <id>},
 * and an attempt holds its status, reason, viewer_cleanup,
 * transport_connected, endpoint, viewerPid/viewerStart, passwordFile and
 * liveView ({origin, ..., events: the take-over log, never reported}).
 * No password is ever part of a report. Never claimed: a viewer connected,
 * pixels, authentication, a person's confirmation ("unverified").
 *
 * What differs per backend (how the record is locked, read and written,
 * whether the guest runs, how x11vnc starts and stops in the guest, how a
 * socket or a process gets into its network namespace) is the backend's:
 * rk_console_backend, a static const table, with the call's state in
 * rk_console.
 */
#ifndef RELAY_KIT_CONSOLE_H
#define RELAY_KIT_CONSOLE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "relay/host.h"
#include "relay_kit/console_ops.h"

#define RK_CONSOLE_VNC_PORT     5900
#define RK_CONSOLE_MAX_ATTEMPTS 64

/* A backend's callbacks: a static const table (NULL valid_name: any name). */
typedef struct rk_console_backend {
	const char *source; /* the plugin's name: the report's "source", the log's plugin */
	/* Whether `vm` may name a lease at all; NULL: any non-NULL name. */
	bool (*valid_name)(const char *vm);
	/* The record of `vm`, read under its lock (owned by the caller), and
	 * the lock in *lock_out (>= 0 when taken, whether or not the record
	 * was read); NULL with *errno_out when it is not held. */
	json_object *(*lock_read)(void *ctx, const char *vm, int *lock_out, int *errno_out);
	void (*unlock)(void *ctx, int lock);
	/* Writes the record durably: 0, or -1 with errno. */
	int (*write)(void *ctx, json_object *record);
	/* Whether the guest runs, before an operation (op: "resolve", "open"
	 * or "cancel"): 1 runs, with *init_pid_out the host pid of its init
	 * (whose network namespace x11vnc listens in), 0 does not, -1 refused
	 * (err set). */
	int (*guest_state)(void *ctx, json_object *record, const char *op, relay_call *call,
	                   pid_t *init_pid_out, relay_error *err);
	/* Starts x11vnc and the viewer for a new attempt (status "preparing")
	 * of the guest whose init is init_pid; sets the attempt's status and
	 * reason either way. */
	relay_status (*open)(void *ctx, json_object *record, const char *attempt_id, json_object *attempt,
	                     pid_t init_pid, relay_call *call, relay_error *err);
	/* Stops the attempt's viewer and, when the guest runs, its x11vnc;
	 * sets viewer_cleanup. */
	void (*stop)(void *ctx, json_object *record, json_object *attempt, bool guest_runs);
	/* The answer to "capabilities" (owned by the caller). */
	json_object *(*capabilities)(void *ctx, relay_call *call);
} rk_console_backend;

/* One call's console: the backend, the host, and the backend's state for
 * this call (passed to every callback). */
typedef struct rk_console {
	const rk_console_backend *ops;
	const relay_host *host;
	void *ctx;
} rk_console;

/* ---- the ledger and the report (console.c) ------------------------------------------ */

/* Answers request `q` of the typed console (relay_kit/console_ops.h) over
 * the ledger: capabilities from the backend; resolve, open and cancel on
 * the record of the lease document's vm, under its lock, with the spec's
 * refusals. The answer (the report) in *out (host->strdup). A plugin's
 * rk_console_route_fn makes its rk_console and calls this. */
relay_status rk_console_ledger(const rk_console *c, const rk_console_request *q, relay_call *call, char **out,
                               relay_error *err);
/* Gives a record acquired with a console its console id and first report
 * (ready) and an empty ledger. */
void rk_console_prepare(const rk_console *c, json_object *record);
/* Stops every attempt still active (the guest is being released):
 * closed, reason released. */
void rk_console_stop_all(const rk_console *c, json_object *record);
/* The report of spec/machine-service.md §9.2 for attempt_id (NULL: the
 * current one); guest_runs false reports "revoked"/"released". */
json_object *rk_console_report(const rk_console *c, json_object *record, const char *attempt_id,
                               bool guest_runs);
/* The capabilities answer: one x11vnc backend for linux, available when
 * linux_reason is NULL, and none for macos (macos_reason). */
json_object *rk_console_capabilities(const char *service, const char *linux_reason, const char *macos_reason);
/* Sets an attempt's status and reason (NULL: null). */
void rk_console_set(json_object *attempt, const char *status, const char *reason);

/* ---- the viewer on this host (console_viewer.c) -------------------------------------- */

/* Makes a socket (connect_fn NULL) or starts argv/envp (its pid) inside the
 * guest's network namespace; -1 with *err_no on failure. */
typedef int (*rk_console_in_netns_fn)(void *ctx, const char *const *argv, const char *const *envp,
                                      int *err_no);

/* MCP_RELAY_CONSOLE_CONTROL=allow with the browser live view: x11vnc takes
 * input (-nolookup instead of -viewonly) and the bridge passes it on after
 * the person takes control. */
bool rk_console_control(void);
/* Connects to 127.0.0.1:5900 in the guest's namespace until an RFB banner
 * is read or timeout_ms pass; the banner without its newline in banner. */
bool rk_console_rfb_banner(rk_console_in_netns_fn in_netns, void *ctx, char banner[16], int timeout_ms,
                           int *err_no);
/* Records where x11vnc listens (the attempt's "endpoint"). */
void rk_console_endpoint(json_object *attempt, pid_t netns_pid, const char *banner);

typedef struct rk_console_viewer {
	const char *vm;
	const char *whose;         /* "guest's" or "container's", for the log */
	pid_t netns_pid;           /* whose /proc/<pid>/ns/net the viewer joins */
	const char *password;      /* x11vnc's one-time password */
	const char *password_file; /* where a viewer program finds it (0600) */
	const char *events_path;   /* the live view's take-over log */
	const char *libexec_dir;   /* the plugin's libexecDir (relay-vncweb) */
	int log_fd;                /* the viewer's standard error, or -1 */
	rk_console_in_netns_fn in_netns;
	void *in_netns_ctx;
} rk_console_viewer;

/* Starts what MCP_RELAY_VNC_VIEWER asks for once x11vnc answers: nothing
 * (status dispatching, reason worker-unavailable, logged), the browser
 * live view (relay_support/liveview.h), or a viewer program started as
 * `<viewer> 127.0.0.1::5900` with VNC_PASSWORD and
 * MCP_RELAY_VNC_PASSWORD_FILE. Sets the attempt's status (launched, or
 * failed with worker-launch-failed); on failure the caller stops x11vnc. */
relay_status rk_console_viewer_start(const rk_console *c, json_object *attempt, const rk_console_viewer *v,
                                     relay_error *err);
/* Stops the attempt's viewer (its process group) and removes its password
 * file: true when it is gone (or never ran). */
bool rk_console_viewer_stop(json_object *attempt);

#endif
