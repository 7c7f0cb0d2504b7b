/*
 * A struct's fields as JSON, by table (record.h).
 */
#include "util/record.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonx.h"
#include "util/timefmt.h"

#define FIELD(base, f, type)  ((type *)(void *)((char *)(base) + (f)->offset))
#define CFIELD(base, f, type) ((const type *)(const void *)((const char *)(base) + (f)->offset))

void record_add_time(json_object *obj, const char *key, int64_t unix_ms)
{
	if (unix_ms <= 0) {
		jsonx_add_null(obj, key);
		return;
	}
	char text[21];
	time_format_iso_seconds(unix_ms, text);
	jsonx_add_str(obj, key, text);
}

void record_write(const void *base, const record_field *fields, size_t n, json_object *out)
{
	for (size_t i = 0; i < n; i++) {
		const record_field *f = &fields[i];
		switch (f->kind) {
		case RECORD_STR: jsonx_add_str(out, f->key, *CFIELD(base, f, char *)); break;
		case RECORD_JSON: {
			json_object *value = (json_object *)*CFIELD(base, f, json_object *);
			jsonx_add(out, f->key, value ? json_object_get(value) : NULL);
			break;
		}
		case RECORD_BOOL: jsonx_add_bool(out, f->key, *CFIELD(base, f, bool)); break;
		case RECORD_INT64: jsonx_add_int(out, f->key, *CFIELD(base, f, int64_t)); break;
		case RECORD_DOUBLE: jsonx_add_double(out, f->key, *CFIELD(base, f, double)); break;
		case RECORD_TIME: record_add_time(out, f->key, *CFIELD(base, f, int64_t)); break;
		}
	}
}

void record_read(void *base, const record_field *fields, size_t n, const json_object *in)
{
	for (size_t i = 0; i < n; i++) {
		const record_field *f = &fields[i];
		json_object *value = NULL;
		if (f->kind == RECORD_TIME || !json_object_object_get_ex(in, f->key, &value) || value == NULL)
			continue;
		switch (f->kind) {
		case RECORD_STR:
			if (json_object_is_type(value, json_type_string)) {
				char **s = FIELD(base, f, char *);
				free(*s);
				*s = strdup(json_object_get_string(value));
			}
			break;
		case RECORD_JSON: {
			json_object **o = FIELD(base, f, json_object *);
			json_object_put(*o);
			*o = json_object_get(value);
			break;
		}
		case RECORD_BOOL: jsonx_get_bool(in, f->key, FIELD(base, f, bool)); break;
		case RECORD_INT64: jsonx_get_int(in, f->key, FIELD(base, f, int64_t)); break;
		case RECORD_DOUBLE: jsonx_get_double(in, f->key, FIELD(base, f, double)); break;
		case RECORD_TIME: break;
		}
	}
}

void record_clear(void *base, const record_field *fields, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const record_field *f = &fields[i];
		switch (f->kind) {
		case RECORD_STR:
			free(*FIELD(base, f, char *));
			*FIELD(base, f, char *) = NULL;
			break;
		case RECORD_JSON:
			json_object_put(*FIELD(base, f, json_object *));
			*FIELD(base, f, json_object *) = NULL;
			break;
		case RECORD_BOOL: *FIELD(base, f, bool) = false; break;
		case RECORD_INT64:
		case RECORD_TIME: *FIELD(base, f, int64_t) = 0; break;
		case RECORD_DOUBLE: *FIELD(base, f, double) = 0; break;
		}
	}
}
