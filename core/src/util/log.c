#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void log_linev(relay_log_level level, const char *component, const char *fmt, va_list ap)
{
	if (level == RELAY_LOG_DEBUG && getenv("MCP_RELAY_DEBUG") == NULL)
		return;
	char line[2048];
	int used =
	    snprintf(line, sizeof line, "mcp-relay: %s%s", component ? component : "", component ? ": " : "");
	if (used < 0)
		return;
	if ((size_t)used < sizeof line) {
		int more = vsnprintf(line + used, sizeof line - (size_t)used, fmt, ap);
		if (more > 0)
			used += more;
	}
	if ((size_t)used >= sizeof line - 1)
		used = (int)sizeof line - 2;
	/* One line: fold any embedded line breaks into spaces. */
	for (int i = 0; i < used; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	line[used++] = '\n';
	ssize_t ignored = write(STDERR_FILENO, line, (size_t)used);
	(void)ignored;
}

void log_line(relay_log_level level, const char *component, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_linev(level, component, fmt, ap);
	va_end(ap);
}
