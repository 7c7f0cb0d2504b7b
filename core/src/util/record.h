/*
 * util/record.h — a struct's fields as JSON, by table: one table of
 * {key, kind, offset} serves writing the fields into an object (the
 * ownership record, a status entry), reading them back, and freeing them.
 * session/guest.c and every room's slice of a guest (session/slice.h) use
 * it, so the record's shape is written once per field, not once per use.
 */
#ifndef RELAY_UTIL_RECORD_H
#define RELAY_UTIL_RECORD_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

typedef enum record_kind {
	RECORD_STR = 0, /* char *: a string, null when NULL */
	RECORD_JSON,    /* json_object *: a reference, null when NULL */
	RECORD_BOOL,    /* bool */
	RECORD_INT64,   /* int64_t */
	RECORD_DOUBLE,  /* double */
	RECORD_TIME,    /* int64_t unix ms written as ISO-8601 seconds (null when <= 0); never read */
} record_kind;

typedef struct record_field {
	const char *key;
	record_kind kind;
	size_t offset; /* offsetof the field in its struct */
} record_field;

/* A table's entry for `field` of `type`, and a table with its length as
 * two arguments. */
#define RECORD_FIELD(type, key, kind, field)                                                                 \
	{                                                                                                    \
		(key), (kind), offsetof(type, field)                                                         \
	}
#define RECORD_FIELDS(table) (table), (sizeof(table) / sizeof((table)[0]))

/* Adds the fields of `base` to `out` in the table's order. */
void record_write(const void *base, const record_field *fields, size_t n, json_object *out);
/* Reads the fields of `base` from `in`: a field whose key holds a value of
 * its kind (a string; any non-null JSON; a boolean; an integer; a number)
 * takes it (the old string or reference freed); any other keeps its value,
 * so clear and set the defaults first. RECORD_TIME fields are skipped. */
void record_read(void *base, const record_field *fields, size_t n, const json_object *in);
/* Frees the strings and JSON of `base` and zeroes every field. */
void record_clear(void *base, const record_field *fields, size_t n);

/* `unix_ms` as ISO-8601 seconds under `key`, or null when <= 0. */
void record_add_time(json_object *obj, const char *key, int64_t unix_ms);

#endif
