/*
 * mcp/server.h — the MCP server on stdio (mcp.md): reads newline-delimited
 * JSON-RPC from in_fd, dispatches, writes to out_fd, ends the session.
 */
#ifndef RELAY_MCP_SERVER_H
#define RELAY_MCP_SERVER_H

#include "session/manager.h"

typedef struct mcp_server_config {
	int in_fd;
	int out_fd;
	manager *mgr; /* borrowed; NULL with start_manager to start it later */
	/* Optional: creates the manager when it is first needed, so that its
	 * startup work (the session folder, plugin loading, reconciliation)
	 * never competes with the first answers: after the first answers are
	 * written, at the first tools/call, at the end of the session, or 200 ms
	 * after startup, whichever comes first. Returns NULL with a reason in
	 * errbuf on failure (the session then ends with status 1). */
	manager *(*start_manager)(void *arg, char *errbuf, size_t errlen);
	void *start_arg;
	/* Optional: when not NULL the settings are invalid and there is no
	 * manager (mgr and start_manager NULL): initialize, tools/list and the
	 * other methods are answered as usual, every tools/call is an isError
	 * result with this text (borrowed for the server's life), and the
	 * session ends with status 2 (lifecycle.md §14). */
	const char *settings_problem;
} mcp_server_config;

/* Serves until the session ends (mcp.md §13); returns the exit status.
 * Installs handlers for SIGTERM, SIGINT, SIGHUP and ignores SIGPIPE. */
int mcp_serve(const mcp_server_config *config);

#endif
