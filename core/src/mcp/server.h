/*
 * mcp/server.h — the MCP server on stdio (mcp.md): reads newline-delimited
 * JSON-RPC from in_fd, answers the protocol itself, hands every validated
 * tools/call to a handler, writes to out_fd, ends the session.
 *
 * The server knows nothing of guests: what answers tools/call is a handler
 * table and its backend, given by the creator (cli/main.c wires the
 * session's).
 */
#ifndef RELAY_MCP_SERVER_H
#define RELAY_MCP_SERVER_H

#include <json-c/json.h>

#include "call/call.h"
#include "contract/contract.h"

typedef struct mcp_handler {
	/* Takes a validated tools/call: owns `args` (a reference) and must
	 * complete `call` (relay_call_complete) exactly once, on any thread.
	 * Called on the reader thread in arrival order; must not block on tool
	 * work. */
	void (*dispatch)(void *backend, relay_tool tool, json_object *args, relay_call *call);
	/* Ends the session (spec/lifecycle.md §11) with `reason` ("stdin-closed",
	 * "signal-SIGTERM", ...); blocks until done; returns the exit status. */
	int (*end_session)(void *backend, const char *reason);
	/* A second SIGTERM/SIGINT during the end: skip the rest of the grace
	 * period. */
	void (*hurry_end)(void *backend);
} mcp_handler;

typedef struct mcp_server_config {
	int in_fd;
	int out_fd;
	const mcp_handler *handler; /* borrowed; NULL only with settings_problem */
	void *backend;              /* borrowed; NULL with start_backend to start it later */
	/* Optional: creates the backend when it is first needed, so that its
	 * startup work (the session folder, plugin loading, reconciliation)
	 * never competes with the first answers: after the first answers are
	 * written, at the first tools/call, at the end of the session, or 200 ms
	 * after startup, whichever comes first. Returns NULL with a reason in
	 * errbuf on failure (the session then ends with status 1). */
	void *(*start_backend)(void *arg, char *errbuf, size_t errlen);
	void *start_arg;
	/* Optional: when not NULL the settings are invalid and there is no
	 * backend (backend and start_backend NULL): initialize, tools/list and
	 * the other methods are answered as usual, every tools/call is an
	 * isError result with this text (borrowed for the server's life), and
	 * the session ends with status 2 (spec/lifecycle.md §14). */
	const char *settings_problem;
} mcp_server_config;

/* Serves until the session ends (spec/mcp.md §13); returns the exit status.
 * Installs handlers for SIGTERM, SIGINT, SIGHUP and ignores SIGPIPE. */
int mcp_serve(const mcp_server_config *config);

#endif
