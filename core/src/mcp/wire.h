/*
 * mcp/wire.h — reading one line of the MCP stream into json-c values
 * (spec/mcp.md §1, §2).
 *
 * The parser is this layer's own, strict RFC 8259 parser, because the
 * protocol asks for things json-c's tokener does not give:
 *   - a member name that appears twice in one object makes the line invalid
 *     (json-c silently keeps the last value, so a host and the relay could
 *     read different arguments from the same text);
 *   - every number keeps its exact token: ids and progress tokens are echoed
 *     as sent (`1.50` stays `1.50`, `-0` stays `-0`, an integer beyond
 *     64 bits is not clamped);
 *   - invalid UTF-8 is refused; an escaped lone surrogate (`\ud800`) becomes
 *     U+FFFD, so every string the relay holds is valid UTF-8, and the string
 *     keeps its token as written, so an id is still echoed exactly
 *     (wire_id_text; spec/mcp.md §2.1);
 *   - running out of memory is told apart from bad syntax, so the server can
 *     answer `Message too large` instead of `Parse error`.
 */
#ifndef RELAY_MCP_WIRE_H
#define RELAY_MCP_WIRE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

/* Nesting deeper than this is refused as a syntax error. */
#define WIRE_MAX_DEPTH 256

typedef enum wire_status {
	WIRE_OK = 0,
	WIRE_SYNTAX,    /* not JSON, not UTF-8, a duplicate member name, too deep */
	WIRE_NO_MEMORY, /* the value could not be built */
} wire_status;

/* Parses exactly one JSON value from text[0..len) (white space around it is
 * allowed). On WIRE_OK, *out holds a new reference (NULL for a JSON null;
 * *is_null_out tells it apart). Otherwise *out is NULL and `why` (may be
 * NULL) receives one line naming the problem and its byte offset. */
wire_status wire_parse(const char *text, size_t len, json_object **out, bool *is_null_out, char *why,
                       size_t why_len);

/* True when `value` may serve as a JSON-RPC id or progress token: a string
 * or a number. */
bool wire_is_id(const json_object *value);

/* The JSON text of an id (a string or number from wire_parse): numbers
 * exactly as their token was written, strings re-escaped, except a string
 * that held a lone surrogate, which is its token as written. malloc'd; NULL
 * on allocation failure. */
char *wire_id_text(const json_object *value);

/* A key under which two ids compare equal when a JSON client would consider
 * them the same value: "s:" + the string, or "n:" + the number in one
 * canonical form (7, 7.0 and 7e0 share a key). malloc'd; NULL on allocation
 * failure. */
char *wire_id_key(const json_object *value);

#endif
