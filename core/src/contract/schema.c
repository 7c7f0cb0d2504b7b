#include "contract/schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/pattern.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* Compiled patterns, keyed by the schema node that carries them. Filled by
 * schema_compile() before any thread starts, read-only afterwards. */
#define SCHEMA_MAX_PATTERNS 128
static struct compiled_pattern {
	const json_object *node;
	pattern *compiled;
} compiled_patterns[SCHEMA_MAX_PATTERNS];
static size_t compiled_pattern_count;

static const pattern *pattern_for(const json_object *node)
{
	for (size_t i = 0; i < compiled_pattern_count; i++)
		if (compiled_patterns[i].node == node)
			return compiled_patterns[i].compiled;
	return NULL;
}

int schema_compile(json_object *schema, char *errbuf, size_t errlen)
{
	if (schema == NULL)
		return 0;
	if (json_object_is_type(schema, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(schema); i++)
			if (schema_compile(json_object_array_get_idx(schema, i), errbuf, errlen) != 0)
				return -1;
		return 0;
	}
	if (!json_object_is_type(schema, json_type_object))
		return 0;
	const char *source = jsonx_get_str(schema, "pattern");
	if (source != NULL && pattern_for(schema) == NULL) {
		if (compiled_pattern_count == SCHEMA_MAX_PATTERNS) {
			snprintf(errbuf, errlen, "too many schema patterns");
			return -1;
		}
		struct compiled_pattern *slot = &compiled_patterns[compiled_pattern_count];
		char why[128];
		slot->compiled = pattern_compile(source, why, sizeof why);
		if (slot->compiled == NULL) {
			snprintf(errbuf, errlen, "schema pattern %s is not supported: %s", source, why);
			return -1;
		}
		slot->node = schema;
		compiled_pattern_count++;
	}
	json_object_object_foreach(schema, key, value)
	{
		(void)key;
		if (schema_compile(value, errbuf, errlen) != 0)
			return -1;
	}
	return 0;
}

char *schema_problem(const char *pointer, const char *fmt, ...)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, *pointer ? pointer : "/");
	strbuf_putc(&sb, ' ');
	va_list ap;
	va_start(ap, fmt);
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	return strbuf_detach(&sb, NULL);
}

/* Appends "/<escaped key>" (RFC 6901) to a pointer. A control character
 * of a client's key is shown as \uXXXX, so a refusal stays one line. */
static char *pointer_child(const char *pointer, const char *key)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, pointer);
	strbuf_putc(&sb, '/');
	for (const char *c = key; *c; c++) {
		if (*c == '~')
			strbuf_puts(&sb, "~0");
		else if (*c == '/')
			strbuf_puts(&sb, "~1");
		else if ((unsigned char)*c < 0x20 || *c == 0x7f)
			strbuf_printf(&sb, "\\u%04x", (unsigned)(unsigned char)*c);
		else
			strbuf_putc(&sb, *c);
	}
	return strbuf_detach(&sb, NULL);
}

static char *pointer_index(const char *pointer, size_t index)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%zu", pointer, index);
	return strbuf_detach(&sb, NULL);
}

static const char *type_noun(const char *type)
{
	if (strcmp(type, "object") == 0)
		return "an object";
	if (strcmp(type, "array") == 0)
		return "an array";
	if (strcmp(type, "integer") == 0)
		return "an integer";
	if (strcmp(type, "number") == 0)
		return "a number";
	if (strcmp(type, "boolean") == 0)
		return "a boolean";
	if (strcmp(type, "string") == 0)
		return "a string";
	return type;
}

static bool is_integer_value(const json_object *value)
{
	if (json_object_is_type(value, json_type_int))
		return true;
	if (json_object_is_type(value, json_type_double)) {
		double d = json_object_get_double(value);
		return isfinite(d) && d == floor(d);
	}
	return false;
}

static bool type_matches(const char *type, const json_object *value)
{
	enum json_type t = json_object_get_type(value);
	if (strcmp(type, "object") == 0)
		return t == json_type_object;
	if (strcmp(type, "array") == 0)
		return t == json_type_array;
	if (strcmp(type, "string") == 0)
		return t == json_type_string;
	if (strcmp(type, "boolean") == 0)
		return t == json_type_boolean;
	if (strcmp(type, "number") == 0)
		return t == json_type_int || t == json_type_double;
	if (strcmp(type, "integer") == 0)
		return is_integer_value(value);
	if (strcmp(type, "null") == 0)
		return value == NULL;
	return false;
}

/* Deep equality of two JSON values (for enum, const and uniqueItems). */
static bool json_equal(const json_object *a, const json_object *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	enum json_type ta = json_object_get_type(a), tb = json_object_get_type(b);
	if ((ta == json_type_int || ta == json_type_double) &&
	    (tb == json_type_int || tb == json_type_double))
		return json_object_get_double(a) == json_object_get_double(b);
	if (ta != tb)
		return false;
	switch (ta) {
	case json_type_boolean: return json_object_get_boolean(a) == json_object_get_boolean(b);
	case json_type_string:
		return json_object_get_string_len(a) == json_object_get_string_len(b) &&
		       memcmp(json_object_get_string((json_object *)a),
		              json_object_get_string((json_object *)b),
		              (size_t)json_object_get_string_len(a)) == 0;
	case json_type_array: {
		size_t n = json_object_array_length(a);
		if (n != json_object_array_length(b))
			return false;
		for (size_t i = 0; i < n; i++)
			if (!json_equal(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i)))
				return false;
		return true;
	}
	case json_type_object: {
		if (json_object_object_length(a) != json_object_object_length(b))
			return false;
		json_object_object_foreach((json_object *)a, key, value)
		{
			json_object *other = NULL;
			if (!json_object_object_get_ex(b, key, &other) || !json_equal(value, other))
				return false;
		}
		return true;
	}
	default: return true;
	}
}

static char *enum_text(const json_object *values)
{
	strbuf sb = STRBUF_INIT;
	for (size_t i = 0; i < json_object_array_length(values); i++) {
		if (i)
			strbuf_puts(&sb, ", ");
		json_object *v = json_object_array_get_idx(values, i);
		if (json_object_is_type(v, json_type_string))
			strbuf_puts(&sb, json_object_get_string(v));
		else
			jsonx_write(&sb, v, 0);
	}
	return strbuf_detach(&sb, NULL);
}

static char *validate_node(const json_object *schema, const json_object *value, const char *pointer,
                           const char *tool_name);

static char *validate_any_of(const json_object *schema, const json_object *branches, const json_object *value,
                             const char *pointer, const char *tool_name)
{
	(void)schema;
	size_t n = json_object_array_length(branches);
	/* A branch whose `source` const matches the value's source is the form
	 * the caller meant: report its problem rather than a generic one. */
	const char *source = jsonx_get_str(value, "source");
	strbuf forms = STRBUF_INIT;
	for (size_t i = 0; i < n; i++) {
		json_object *branch = json_object_array_get_idx(branches, i);
		json_object *props = jsonx_get_obj(branch, "properties");
		json_object *source_schema = jsonx_get_obj(props, "source");
		json_object *constant = NULL;
		if (source_schema && json_object_object_get_ex(source_schema, "const", &constant)) {
			if (forms.len)
				strbuf_puts(&forms, ", ");
			strbuf_puts(&forms, json_object_get_string(constant));
			if (source && strcmp(source, json_object_get_string(constant)) == 0) {
				strbuf_free(&forms);
				return validate_node(branch, value, pointer, tool_name);
			}
		}
	}
	for (size_t i = 0; i < n; i++) {
		char *p = validate_node(json_object_array_get_idx(branches, i), value, pointer, tool_name);
		if (p == NULL) {
			strbuf_free(&forms);
			return NULL;
		}
		free(p);
	}
	char *result;
	if (forms.len && json_object_is_type(value, json_type_object)) {
		char *where = pointer_child(pointer, "source");
		result = schema_problem(where, "must be one of %s", strbuf_str(&forms));
		free(where);
	} else {
		result = schema_problem(pointer, "must match one of its allowed forms");
	}
	strbuf_free(&forms);
	return result;
}

static char *validate_node(const json_object *schema, const json_object *value, const char *pointer,
                           const char *tool_name)
{
	const char *type = jsonx_get_str(schema, "type");
	if (type && !type_matches(type, value))
		return schema_problem(pointer, "must be %s", type_noun(type));
	/* spec/lifecycle.md §12 rule 1: a NUL is refused, never cut at (every C
	 * string below would end there). Script code too: a shell or Python
	 * script cannot hold one, so it is refused whole. */
	if (json_object_is_type(value, json_type_string) &&
	    memchr(json_object_get_string((json_object *)value), '\0',
	           (size_t)json_object_get_string_len(value)) != NULL)
		return schema_problem(pointer, "contains U+0000 (a NUL byte), which %s; remove it",
		                      strcmp(pointer, "/code") == 0
		                          ? "no script can hold, so the script is refused whole"
		                          : "no text field accepts");

	json_object *constant = NULL;
	if (json_object_object_get_ex(schema, "const", &constant) && !json_equal(constant, value)) {
		char *text = jsonx_to_string(constant, 0);
		char *p = schema_problem(pointer, "must be %s", text ? text : "the constant");
		free(text);
		return p;
	}
	json_object *choices = jsonx_get_array(schema, "enum");
	if (choices) {
		bool found = false;
		for (size_t i = 0; i < json_object_array_length(choices) && !found; i++)
			found = json_equal(json_object_array_get_idx(choices, i), value);
		if (!found) {
			char *text = enum_text(choices);
			char *p =
			    schema_problem(pointer, "must be one of %s", text ? text : "the listed values");
			free(text);
			return p;
		}
	}

	if (json_object_is_type(value, json_type_string)) {
		const char *s = json_object_get_string((json_object *)value);
		size_t len = (size_t)json_object_get_string_len(value);
		size_t chars = utf8_length(s, len);
		int64_t bound;
		if (jsonx_get_int(schema, "minLength", &bound) && (int64_t)chars < bound)
			return schema_problem(pointer, "must be at least %lld character%s long",
			                      (long long)bound, bound == 1 ? "" : "s");
		if (jsonx_get_int(schema, "maxLength", &bound) && (int64_t)chars > bound)
			return schema_problem(pointer, "must be at most %lld characters long",
			                      (long long)bound);
		const pattern *re = pattern_for(schema);
		if (re && !pattern_test(re, s, len))
			return schema_problem(pointer, "must match %s", jsonx_get_str(schema, "pattern"));
	}
	if (json_object_is_type(value, json_type_int) || json_object_is_type(value, json_type_double)) {
		double d = json_object_get_double(value);
		double bound;
		if (jsonx_get_double(schema, "minimum", &bound) && d < bound) {
			char num[40];
			snprintf(num, sizeof num, "%.15g", bound);
			return schema_problem(pointer, "must be at least %s", num);
		}
		if (jsonx_get_double(schema, "maximum", &bound) && d > bound) {
			char num[40];
			snprintf(num, sizeof num, "%.15g", bound);
			return schema_problem(pointer, "must be at most %s", num);
		}
	}
	if (json_object_is_type(value, json_type_array)) {
		size_t n = json_object_array_length(value);
		int64_t bound;
		if (jsonx_get_int(schema, "minItems", &bound) && (int64_t)n < bound)
			return schema_problem(pointer, "must have at least %lld item%s", (long long)bound,
			                      bound == 1 ? "" : "s");
		if (jsonx_get_int(schema, "maxItems", &bound) && (int64_t)n > bound)
			return schema_problem(pointer, "must have at most %lld items", (long long)bound);
		bool unique = false;
		if (jsonx_get_bool(schema, "uniqueItems", &unique) && unique) {
			for (size_t i = 0; i < n; i++)
				for (size_t j = i + 1; j < n; j++)
					if (json_equal(json_object_array_get_idx(value, i),
					               json_object_array_get_idx(value, j))) {
						char *where = pointer_index(pointer, j);
						char *p = schema_problem(
						    where, "repeats item %zu; items must be unique", i);
						free(where);
						return p;
					}
		}
		json_object *items = jsonx_get_obj(schema, "items");
		for (size_t i = 0; items && i < n; i++) {
			char *where = pointer_index(pointer, i);
			char *p = validate_node(items, json_object_array_get_idx(value, i), where, tool_name);
			free(where);
			if (p)
				return p;
		}
	}
	if (json_object_is_type(value, json_type_object)) {
		json_object *props = jsonx_get_obj(schema, "properties");
		bool additional = true;
		json_object *additional_node = NULL;
		if (json_object_object_get_ex(schema, "additionalProperties", &additional_node) &&
		    json_object_is_type(additional_node, json_type_boolean))
			additional = json_object_get_boolean(additional_node);
		json_object_object_foreach((json_object *)value, key, child)
		{
			(void)child;
			json_object *child_schema = jsonx_get_obj(props, key);
			if (child_schema == NULL) {
				if (additional)
					continue;
				char *where = pointer_child(pointer, key);
				char *p = schema_problem(where, "is not a field of %s", tool_name);
				free(where);
				return p;
			}
		}
		json_object *required = jsonx_get_array(schema, "required");
		for (size_t i = 0; required && i < json_object_array_length(required); i++) {
			const char *name = json_object_get_string(json_object_array_get_idx(required, i));
			if (!json_object_object_get_ex(value, name, NULL)) {
				char *where = pointer_child(pointer, name);
				char *p = schema_problem(where, "is required");
				free(where);
				return p;
			}
		}
		json_object_object_foreach((json_object *)value, key2, child2)
		{
			json_object *child_schema = jsonx_get_obj(props, key2);
			if (child_schema == NULL)
				continue;
			char *where = pointer_child(pointer, key2);
			char *p = validate_node(child_schema, child2, where, tool_name);
			free(where);
			if (p)
				return p;
		}
	}
	json_object *any_of = jsonx_get_array(schema, "anyOf");
	if (any_of)
		return validate_any_of(schema, any_of, value, pointer, tool_name);
	return NULL;
}

char *schema_validate(const json_object *schema, const json_object *value, const char *tool_name)
{
	return validate_node(schema, value, "", tool_name);
}
