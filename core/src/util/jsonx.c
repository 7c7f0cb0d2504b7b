#include "util/jsonx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_support/json_get.h"
#include "relay_support/utf8.h"

json_object *jsonx_parse(const char *text, size_t len, bool *is_null_out, char *errbuf, size_t errlen)
{
	if (is_null_out)
		*is_null_out = false;
	if (errbuf && errlen)
		errbuf[0] = '\0';
	if (len > (size_t)INT32_MAX) {
		if (errbuf)
			snprintf(errbuf, errlen, "JSON text too large");
		return NULL;
	}
	json_tokener *tok = json_tokener_new_ex(JSON_TOKENER_DEFAULT_DEPTH);
	if (tok == NULL) {
		if (errbuf)
			snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	json_object *obj = json_tokener_parse_ex(tok, text, (int)len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t used = json_tokener_get_parse_end(tok);
	if (jerr == json_tokener_continue) {
		/* Complete values such as numbers need a terminator. */
		obj = json_tokener_parse_ex(tok, "", 1);
		jerr = json_tokener_get_error(tok);
		used = len;
	}
	if (jerr != json_tokener_success) {
		if (errbuf)
			snprintf(errbuf, errlen, "%s", json_tokener_error_desc(jerr));
		json_object_put(obj);
		json_tokener_free(tok);
		return NULL;
	}
	for (size_t i = used; i < len; i++) {
		char c = text[i];
		if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
			if (errbuf)
				snprintf(errbuf, errlen, "unexpected data after the JSON value");
			json_object_put(obj);
			json_tokener_free(tok);
			return NULL;
		}
	}
	json_tokener_free(tok);
	if (obj == NULL && is_null_out)
		*is_null_out = true;
	return obj;
}

json_object *jsonx_parse_str(const char *text, char *errbuf, size_t errlen)
{
	return jsonx_parse(text, strlen(text), NULL, errbuf, errlen);
}

void jsonx_write_escaped(strbuf *sb, const char *text, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	/* Room for the text and a few escapes; more is grown as needed. */
	if (!strbuf_reserve(sb, len + len / 8 + 16))
		return;
	size_t run = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		strbuf_append(sb, text + run, i - run);
		run = i + 1;
		switch (c) {
		case '"': strbuf_append(sb, "\\\"", 2); break;
		case '\\': strbuf_append(sb, "\\\\", 2); break;
		case '\n': strbuf_append(sb, "\\n", 2); break;
		case '\r': strbuf_append(sb, "\\r", 2); break;
		case '\t': strbuf_append(sb, "\\t", 2); break;
		case '\b': strbuf_append(sb, "\\b", 2); break;
		case '\f': strbuf_append(sb, "\\f", 2); break;
		default: {
			char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			strbuf_append(sb, esc, 6);
		}
		}
	}
	strbuf_append(sb, text + run, len - run);
}

void jsonx_write_string(strbuf *sb, const char *text, size_t len)
{
	strbuf_putc(sb, '"');
	jsonx_write_escaped(sb, text, len);
	strbuf_putc(sb, '"');
}

void jsonx_write_number(strbuf *sb, double value)
{
	if (!isfinite(value)) {
		strbuf_puts(sb, "null");
		return;
	}
	if (value == floor(value) && fabs(value) < 9007199254740992.0) {
		strbuf_printf(sb, "%.0f", value);
		return;
	}
	char buf[40];
	for (int precision = 15; precision <= 17; precision++) {
		snprintf(buf, sizeof buf, "%.*g", precision, value);
		if (strtod(buf, NULL) == value)
			break;
	}
	strbuf_puts(sb, buf);
}

static void write_indent(strbuf *sb, int depth)
{
	strbuf_putc(sb, '\n');
	for (int i = 0; i < depth; i++)
		strbuf_append(sb, "  ", 2);
}

static void write_value(strbuf *sb, const json_object *obj, unsigned flags, int depth)
{
	bool pretty = flags & JSONX_PRETTY;
	switch (json_object_get_type(obj)) {
	case json_type_null: strbuf_append(sb, "null", 4); break;
	case json_type_boolean:
		if (json_object_get_boolean(obj))
			strbuf_append(sb, "true", 4);
		else
			strbuf_append(sb, "false", 5);
		break;
	case json_type_int: {
		char buf[32];
		int n;
		if (json_object_get_int64(obj) == INT64_MAX &&
		    json_object_get_uint64(obj) > (uint64_t)INT64_MAX)
			n = snprintf(buf, sizeof buf, "%llu",
			             (unsigned long long)json_object_get_uint64(obj));
		else
			n = snprintf(buf, sizeof buf, "%lld", (long long)json_object_get_int64(obj));
		strbuf_append(sb, buf, (size_t)n);
		break;
	}
	case json_type_double: jsonx_write_number(sb, json_object_get_double(obj)); break;
	case json_type_string:
		jsonx_write_string(sb, json_object_get_string((json_object *)obj),
		                   (size_t)json_object_get_string_len(obj));
		break;
	case json_type_array: {
		size_t n = json_object_array_length(obj);
		if (n == 0) {
			strbuf_append(sb, "[]", 2);
			break;
		}
		strbuf_putc(sb, '[');
		for (size_t i = 0; i < n; i++) {
			if (i)
				strbuf_putc(sb, ',');
			if (pretty)
				write_indent(sb, depth + 1);
			write_value(sb, json_object_array_get_idx(obj, i), flags, depth + 1);
		}
		if (pretty)
			write_indent(sb, depth);
		strbuf_putc(sb, ']');
		break;
	}
	case json_type_object: {
		if (json_object_object_length(obj) == 0) {
			strbuf_append(sb, "{}", 2);
			break;
		}
		strbuf_putc(sb, '{');
		bool first = true;
		json_object_object_foreach((json_object *)obj, key, value)
		{
			if (!first)
				strbuf_putc(sb, ',');
			first = false;
			if (pretty)
				write_indent(sb, depth + 1);
			jsonx_write_string(sb, key, strlen(key));
			if (pretty)
				strbuf_append(sb, ": ", 2);
			else
				strbuf_putc(sb, ':');
			write_value(sb, value, flags, depth + 1);
		}
		if (pretty)
			write_indent(sb, depth);
		strbuf_putc(sb, '}');
		break;
	}
	}
}

void jsonx_write(strbuf *sb, const json_object *obj, unsigned flags)
{
	write_value(sb, obj, flags, 0);
}

char *jsonx_to_string(const json_object *obj, unsigned flags)
{
	strbuf sb = STRBUF_INIT;
	jsonx_write(&sb, obj, flags);
	return strbuf_detach(&sb, NULL);
}

/* The getters are the shared family of relay_support/json_get.h, so the
 * core and the plugins read JSON members by the same rules. */
const char *jsonx_get_str(const json_object *obj, const char *key)
{
	return rsj_get_str(obj, key);
}

bool jsonx_get_int(const json_object *obj, const char *key, int64_t *out)
{
	return rsj_get_int(obj, key, out);
}

bool jsonx_get_double(const json_object *obj, const char *key, double *out)
{
	return rsj_get_double(obj, key, out);
}

bool jsonx_get_bool(const json_object *obj, const char *key, bool *out)
{
	return rsj_get_bool(obj, key, out);
}

json_object *jsonx_get_obj(const json_object *obj, const char *key)
{
	return rsj_get_obj(obj, key);
}

json_object *jsonx_get_array(const json_object *obj, const char *key)
{
	return rsj_get_array(obj, key);
}

bool jsonx_has(const json_object *obj, const char *key)
{
	return obj != NULL && json_object_is_type(obj, json_type_object) &&
	       json_object_object_get_ex(obj, key, NULL);
}

bool jsonx_add(json_object *obj, const char *key, json_object *value)
{
	return json_object_object_add(obj, key, value) == 0;
}

bool jsonx_add_str(json_object *obj, const char *key, const char *value)
{
	if (value == NULL)
		return jsonx_add(obj, key, NULL);
	json_object *s = json_object_new_string(value);
	return s != NULL && jsonx_add(obj, key, s);
}

bool jsonx_add_strn(json_object *obj, const char *key, const char *value, size_t len)
{
	json_object *s = json_object_new_string_len(value, (int)len);
	return s != NULL && jsonx_add(obj, key, s);
}

bool jsonx_add_int(json_object *obj, const char *key, int64_t value)
{
	json_object *v = json_object_new_int64(value);
	return v != NULL && jsonx_add(obj, key, v);
}

bool jsonx_add_double(json_object *obj, const char *key, double value)
{
	json_object *v = json_object_new_double(value);
	return v != NULL && jsonx_add(obj, key, v);
}

bool jsonx_add_bool(json_object *obj, const char *key, bool value)
{
	json_object *v = json_object_new_boolean(value);
	return v != NULL && jsonx_add(obj, key, v);
}

bool jsonx_add_null(json_object *obj, const char *key)
{
	return jsonx_add(obj, key, NULL);
}

bool utf8_valid(const char *text, size_t len)
{
	return rs_utf8_valid(text, len) != 0;
}

char *utf8_sanitize(const char *text, size_t len, size_t *len_out)
{
	return rs_utf8_repair(text, len, 0, len_out);
}

size_t utf8_cut(const char *text, size_t len, size_t max_bytes)
{
	return rs_utf8_cut(text, len, max_bytes);
}

size_t utf8_cut_forward(const char *text, size_t len, size_t start)
{
	return rs_utf8_cut_forward(text, len, start);
}

size_t utf8_length(const char *text, size_t len)
{
	return rs_utf8_length(text, len);
}
