/*
 * mcp/render.h — turning a tool_result into a CallToolResult (spec/tools.md
 * §2.3, §5): the text block (headline, pretty JSON, the 2000-line and
 * 51,200-byte bound, the spill file), structuredContent (whole, reduced, or
 * minimal), the image block, isError, and the modern-era fields.
 */
#ifndef RELAY_MCP_RENDER_H
#define RELAY_MCP_RENDER_H

#include <stdbool.h>
#include <stddef.h>

#include "call/tool_result.h"
#include "util/strbuf.h"

#define RENDER_TEXT_MAX_LINES 2000
#define RENDER_TEXT_MAX_BYTES 51200

/* Where spill files go when $TMPDIR/mcp-relay-results cannot be used
 * (the session's results/ folder); set once at startup. */
void render_set_fallback_spill_dir(const char *dir);

/* Appends the result object (JSON, compact) to sb. `modern` adds
 * resultType and _meta (spec/mcp.md §3.6). */
void render_tool_result(strbuf *sb, const tool_result *result, bool modern);

/* The folder spill files go to: "<tmp>/mcp-relay-results", where <tmp> is
 * $TMPDIR when it is an absolute path to a directory, else /tmp. Written
 * into buf; returns buf. */
const char *render_spill_base(char *buf, size_t len);

/* How many bytes of a pretty-JSON body the text block keeps: its first 2000
 * lines, then at most 51,200 bytes, cut at a UTF-8 boundary. */
size_t render_text_bound(const char *body, size_t len);

/* Appends the modern-era fields ("resultType" and "_meta") with a leading
 * comma, for other results. */
void render_modern_fields(strbuf *sb);

#endif
