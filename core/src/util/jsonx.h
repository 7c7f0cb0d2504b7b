/*
 * util/jsonx.h — JSON helpers over json-c: strict parsing with UTF-8
 * validation, and a serializer that writes what the contract asks for
 * (compact, or pretty with two-space indentation like JSON.stringify(v, null,
 * 2); raw UTF-8; shortest round-trip numbers; "/" not escaped).
 *
 * json-c objects are reference counted: jsonx_add_* take ownership of the
 * value they are given (as json_object_object_add does).
 */
#ifndef RELAY_UTIL_JSONX_H
#define RELAY_UTIL_JSONX_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/strbuf.h"

/* Parses exactly one JSON value from text[0..len) (surrounding white space
 * allowed). Rejects invalid UTF-8 and trailing garbage. Returns a new
 * reference, or NULL with a one-line reason in errbuf (may be NULL).
 * A JSON `null` parses to NULL too: check *is_null_out when it matters. */
json_object *jsonx_parse(const char *text, size_t len, bool *is_null_out, char *errbuf, size_t errlen);
/* Parses a NUL-terminated text; NULL on error (reason in errbuf). */
json_object *jsonx_parse_str(const char *text, char *errbuf, size_t errlen);

#define JSONX_PRETTY 0x1u /* two-space indentation, "key": value */

/* Appends the serialization of `obj` (NULL writes null) to `sb`. */
void jsonx_write(strbuf *sb, const json_object *obj, unsigned flags);
/* Returns a malloc'd serialization (free()), or NULL on allocation failure. */
char *jsonx_to_string(const json_object *obj, unsigned flags);
/* Appends a JSON string literal of text[0..len) (escaping per JSON.stringify). */
void jsonx_write_string(strbuf *sb, const char *text, size_t len);
/* The same without the quotes: text[0..len) escaped as the inside of a JSON
 * string, for a string written in pieces. */
void jsonx_write_escaped(strbuf *sb, const char *text, size_t len);
/* Appends a number as JSON.stringify writes it: integers plainly, others in
 * the shortest form that reads back the same; NaN and infinities as null. */
void jsonx_write_number(strbuf *sb, double value);

/* Typed getters: NULL / false when the key is absent or of another type. */
const char *jsonx_get_str(const json_object *obj, const char *key);
bool jsonx_get_int(const json_object *obj, const char *key, int64_t *out);
bool jsonx_get_double(const json_object *obj, const char *key, double *out);
bool jsonx_get_bool(const json_object *obj, const char *key, bool *out);
json_object *jsonx_get_obj(const json_object *obj, const char *key);   /* borrowed */
json_object *jsonx_get_array(const json_object *obj, const char *key); /* borrowed */
bool jsonx_has(const json_object *obj, const char *key);

/* Builders; `value` NULL writes JSON null. Return false on allocation failure. */
bool jsonx_add_str(json_object *obj, const char *key, const char *value);
bool jsonx_add_strn(json_object *obj, const char *key, const char *value, size_t len);
bool jsonx_add_int(json_object *obj, const char *key, int64_t value);
bool jsonx_add_double(json_object *obj, const char *key, double value);
bool jsonx_add_bool(json_object *obj, const char *key, bool value);
bool jsonx_add_null(json_object *obj, const char *key);
/* Adds `value` (ownership taken; NULL adds null). */
bool jsonx_add(json_object *obj, const char *key, json_object *value);

/* UTF-8 helpers. */
bool utf8_valid(const char *text, size_t len);
/* Returns a malloc'd copy with every invalid sequence replaced by U+FFFD;
 * *len_out receives its length. NULL on allocation failure. */
char *utf8_sanitize(const char *text, size_t len, size_t *len_out);
/* The largest n <= max_bytes such that text[0..n) ends on a character
 * boundary (text is assumed valid UTF-8). */
size_t utf8_cut(const char *text, size_t len, size_t max_bytes);
/* The smallest n >= start such that text[n..len) starts on a character
 * boundary (for keeping a tail). */
size_t utf8_cut_forward(const char *text, size_t len, size_t start);
/* Number of code points in valid UTF-8 text. */
size_t utf8_length(const char *text, size_t len);

#endif
