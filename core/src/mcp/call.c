/* Placeholder until the MCP server lands: calls are never cancelled and report nothing. */
#include "mcp/call.h"

bool relay_call_is_cancelled(const relay_call *call)
{
	(void)call;
	return false;
}

void relay_call_progress(relay_call *call, double progress, double total, const char *message, bool force)
{
	(void)call;
	(void)progress;
	(void)total;
	(void)message;
	(void)force;
}
