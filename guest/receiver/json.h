/*
 * receiver/json.h — a small strict JSON reader and writer.
 *
 * The reader accepts exactly RFC 8259 JSON: one value, white space around it,
 * valid UTF-8 only (no lone surrogates in \u escapes), no duplicate keys,
 * nesting at most 64 deep. Objects keep their key order. The writer emits
 * what JSON.stringify would (raw UTF-8, "/" unescaped), compact or with
 * two-space indentation. It never writes what the reader refuses: bytes of
 * a string that are not valid UTF-8 (a capture program's stderr, a file
 * name) are written as U+FFFD, one per invalid byte.
 */
#ifndef RECEIVER_JSON_H
#define RECEIVER_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef enum jv_type { JV_NULL, JV_BOOL, JV_NUMBER, JV_STRING, JV_ARRAY, JV_OBJECT } jv_type;

typedef struct jv jv;
struct jv {
	jv_type type;
	int boolean;
	char *number_text;  /* the number as written (JV_NUMBER) */
	int number_is_int;  /* an integer that fits int64 */
	int64_t number_int; /* its value */
	char *str;          /* JV_STRING: bytes, NUL-terminated (may hold NULs) */
	size_t str_len;
	size_t count; /* JV_ARRAY / JV_OBJECT */
	size_t cap;
	jv **items;
	char **keys; /* JV_OBJECT only */
};

/* Parses text[0..len). NULL with the reason in err on failure. */
jv *jv_parse(const char *text, size_t len, rerr *err);
void jv_free(jv *value);
jv *jv_copy(const jv *value);

jv *jv_null(void);
jv *jv_bool(int value);
jv *jv_int(int64_t value);
jv *jv_str(const char *text); /* NULL gives JSON null */
jv *jv_strn(const char *text, size_t len);
jv *jv_array(void);
jv *jv_object(void);
/* Takes ownership of value; replaces an existing key in place. */
void jv_set(jv *object, const char *key, jv *value);
void jv_set_str(jv *object, const char *key, const char *text);
void jv_set_int(jv *object, const char *key, int64_t value);
void jv_set_bool(jv *object, const char *key, int value);
void jv_set_null(jv *object, const char *key);
void jv_push(jv *array, jv *value);

/* Borrowed member, or NULL. */
jv *jv_get(const jv *object, const char *key);
/* The member's string when it is a string without NUL bytes, else NULL. */
const char *jv_get_str(const jv *object, const char *key);
/* 1 and *out when the member is an integer number. */
int jv_get_int(const jv *object, const char *key, int64_t *out);
int jv_is(const jv *value, jv_type type);

#define JV_PRETTY 1

void jv_write(buf *out, const jv *value, int flags);
/* Appends a JSON string literal of text[0..len). */
void jv_write_string(buf *out, const char *text, size_t len);
/* A malloc'd serialization (compact unless JV_PRETTY). */
char *jv_to_text(const jv *value, int flags);

#endif
