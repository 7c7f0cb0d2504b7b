/*
 * mcp/server.h — the MCP server on stdio (mcp.md): reads newline-delimited
 * JSON-RPC from in_fd, dispatches, writes to out_fd, ends the session.
 */
#ifndef RELAY_MCP_SERVER_H
#define RELAY_MCP_SERVER_H

#include "manager/manager.h"

typedef struct mcp_server_config {
	int in_fd;
	int out_fd;
	manager *mgr; /* borrowed */
} mcp_server_config;

/* Serves until the session ends (mcp.md §13); returns the exit status.
 * Installs handlers for SIGTERM, SIGINT, SIGHUP and ignores SIGPIPE. */
int mcp_serve(const mcp_server_config *config);

#endif
