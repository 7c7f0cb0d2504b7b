/*
 * relay_support/liveview.h — the live view of a guest's x11vnc in a browser
 * (MCP_RELAY_VNC_VIEWER=browser), shared by the machine plugins that serve
 * consoles (machine-local, machine-docker): starts relay-vncweb (the bridge,
 * plugins/console-vnc/vncweb/vncweb.h) and opens its one-time URL with the
 * user's browser ($BROWSER, else xdg-open).
 */
#ifndef RELAY_SUPPORT_LIVEVIEW_H
#define RELAY_SUPPORT_LIVEVIEW_H

#include <stddef.h>
#include <sys/types.h>

#include "relay_support/rs_error.h"

#define RS_LIVEVIEW_URL_BYTES 160

typedef struct rs_liveview_request {
	const char *libexec_dir; /* the plugin's libexecDir (<...>/mcp-relay/receivers) */
	const char *netns_path;  /* /proc/<pid>/ns/net of the guest, or NULL for this namespace */
	int vnc_port;            /* x11vnc's port there */
	const char *password;    /* x11vnc's one-time password (letters and digits) */
	int control;             /* 1: MCP_RELAY_CONSOLE_CONTROL=allow (take-over offered) */
	const char *events_path; /* where the bridge appends take-over events, or NULL */
	int log_fd;              /* the bridge's and the browser's standard error, or -1 */
} rs_liveview_request;

typedef struct rs_liveview {
	pid_t bridge_pid;                /* its own process group */
	char url[RS_LIVEVIEW_URL_BYTES]; /* http://127.0.0.1:<port>/#token=<64 hex>: secret */
	char origin[48];                 /* http://127.0.0.1:<port>: not secret */
	pid_t browser_pid;               /* 0 when no browser was started */
	char launcher[64];               /* "$BROWSER", "xdg-open" or "" */
	char browser_reason[160];        /* why none was started, when browser_pid is 0 */
} rs_liveview;

/* 1 when `viewer` (MCP_RELAY_VNC_VIEWER) asks for the browser live view. */
int rs_liveview_wanted(const char *viewer);

/* Where relay-vncweb is, or why the live view cannot start (no bridge
 * build, no noVNC): 0 with path filled, else -1 and err says how to fix. */
int rs_liveview_check(const char *libexec_dir, char *path, size_t size, rs_error *err);

/* Starts the bridge and waits (at most 10 s) for its URL, then opens the
 * URL in the browser. -1 when the bridge did not start (nothing runs then);
 * a browser that cannot be started is not a failure (browser_reason). */
int rs_liveview_start(const rs_liveview_request *req, rs_liveview *out, rs_error *err);

/* The take-overs the bridge recorded in `events_path`, as a JSON array
 * [{"start": "<ISO time>", "end": "<ISO time>"|null}, ...] (an end of null:
 * control still held, or the bridge stopped while it was). malloc'd, NULL
 * when out of memory; "[]" when the file is missing. */
char *rs_liveview_take_overs(const char *events_path);

#endif
