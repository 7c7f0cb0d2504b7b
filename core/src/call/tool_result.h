/*
 * call/tool_result.h — what a tool produces, before the MCP layer renders it
 * into a CallToolResult (spec/tools.md §2.3, §5).
 */
#ifndef RELAY_CALL_TOOL_RESULT_H
#define RELAY_CALL_TOOL_RESULT_H

#include <json-c/json.h>
#include <stdbool.h>

typedef struct tool_result {
	json_object *structured; /* owned; always an object */
	char *headline;          /* owned; the first line of the text block (the second after `lead`) */
	/* owned, optional: one plain sentence (at most TOOL_RESULT_LEAD_MAX_CHARS
	 * characters, one line) before the headline (spec/tools.md §2.3: relay_script
	 * and relay_image); never cut by the text bounds. */
	char *lead;
	bool is_error;
	char *image_base64; /* owned, optional: the one image block */
	char *image_mime;   /* owned, with image_base64 */
	/* When set, the pretty JSON in the text leaves this top-level key out
	 * (relay_script and relay_image put imageDelivery in the headline). */
	const char *text_omits_key;
} tool_result;

/* A successful result. Takes ownership of `structured` (must be an object).
 * The headline is formatted. Returns NULL on allocation failure. */
tool_result *tool_result_ok(json_object *structured, const char *headline_fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* An error result: `structured` (owned, may be NULL for an empty object)
 * receives "error": {"code", "message"}; the headline is the message with
 * line breaks replaced by spaces. */
tool_result *tool_result_error(json_object *structured, const char *code, const char *message_fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define TOOL_RESULT_LEAD_MAX_CHARS 200

/* Sets the lead sentence (formatted; line breaks become spaces, cut to
 * TOOL_RESULT_LEAD_MAX_CHARS characters at a UTF-8 boundary). */
void tool_result_set_lead(tool_result *result, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Replaces the headline (formatted). */
void tool_result_set_headline(tool_result *result, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void tool_result_free(tool_result *result);

#endif
