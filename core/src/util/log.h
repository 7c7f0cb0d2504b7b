/*
 * util/log.h — diagnostics on standard error, one line each, prefixed
 * "mcp-relay: ". Never standard output (it belongs to the MCP stream).
 * A failed write to stderr is ignored. Thread-safe (one write per line).
 */
#ifndef RELAY_UTIL_LOG_H
#define RELAY_UTIL_LOG_H

#include <stdarg.h>

#include "relay/host.h"

/* Writes "mcp-relay: [<component>: ]<message>\n". `component` may be NULL. */
void log_line(relay_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void log_linev(relay_log_level level, const char *component, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#define log_error(...)   log_line(RELAY_LOG_ERROR, NULL, __VA_ARGS__)
#define log_warning(...) log_line(RELAY_LOG_WARNING, NULL, __VA_ARGS__)
#define log_info(...)    log_line(RELAY_LOG_INFO, NULL, __VA_ARGS__)
#define log_debug(...)   log_line(RELAY_LOG_DEBUG, NULL, __VA_ARGS__)

#endif
