#include "call/tool_result.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonx.h"
#include "util/strbuf.h"

tool_result *tool_result_ok(json_object *structured, const char *headline_fmt, ...)
{
	tool_result *r = calloc(1, sizeof *r);
	if (r == NULL) {
		json_object_put(structured);
		return NULL;
	}
	r->structured = structured ? structured : json_object_new_object();
	va_list ap;
	va_start(ap, headline_fmt);
	r->headline = strbuf_vformat(headline_fmt, ap);
	va_end(ap);
	return r;
}

static void fold_line_breaks(char *text)
{
	for (char *c = text; c && *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
}

tool_result *tool_result_error(json_object *structured, const char *code, const char *message_fmt, ...)
{
	tool_result *r = calloc(1, sizeof *r);
	if (r == NULL) {
		json_object_put(structured);
		return NULL;
	}
	r->is_error = true;
	r->structured = structured ? structured : json_object_new_object();
	va_list ap;
	va_start(ap, message_fmt);
	char *message = strbuf_vformat(message_fmt, ap);
	va_end(ap);
	json_object *error = json_object_new_object();
	jsonx_add_str(error, "code", code);
	jsonx_add_str(error, "message", message ? message : "");
	jsonx_add(r->structured, "error", error);
	r->headline = message;
	fold_line_breaks(r->headline);
	return r;
}

void tool_result_set_headline(tool_result *result, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *headline = strbuf_vformat(fmt, ap);
	va_end(ap);
	free(result->headline);
	result->headline = headline;
}

void tool_result_set_lead(tool_result *result, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *lead = strbuf_vformat(fmt, ap);
	va_end(ap);
	if (lead) {
		fold_line_breaks(lead);
		size_t len = strlen(lead);
		size_t keep = 0, chars = 0;
		/* Cut at a character boundary after at most 200 characters. */
		while (keep < len && chars < TOOL_RESULT_LEAD_MAX_CHARS) {
			keep += utf8_cut_forward(lead, len, keep + 1) - keep;
			chars++;
		}
		lead[keep] = '\0';
	}
	free(result->lead);
	result->lead = lead;
}

void tool_result_free(tool_result *result)
{
	if (result == NULL)
		return;
	json_object_put(result->structured);
	free(result->lead);
	free(result->headline);
	free(result->image_base64);
	free(result->image_mime);
	free(result);
}
