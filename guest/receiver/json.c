/*
 * receiver/json.c — see json.h.
 */
#include "json.h"
#include "relay_support/json_escape.h"
#include "relay_support/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct parser {
	const char *p;
	const char *end;
	const char *start;
	rerr *err;
	int failed;
} parser;

static void fail(parser *ps, const char *what)
{
	if (!ps->failed)
		err_set(ps->err, "invalid JSON at byte %ld: %s", (long)(ps->p - ps->start), what);
	ps->failed = 1;
}

static void skip_ws(parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static jv *jv_new(jv_type type)
{
	jv *v = xcalloc(1, sizeof(*v));
	v->type = type;
	return v;
}

static void put_utf8(buf *b, unsigned cp)
{
	char out[4];
	if (cp < 0x80) {
		out[0] = (char)cp;
		buf_append(b, out, 1);
	} else if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		buf_append(b, out, 2);
	} else if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		buf_append(b, out, 3);
	} else {
		out[0] = (char)(0xF0 | (cp >> 18));
		out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[3] = (char)(0x80 | (cp & 0x3F));
		buf_append(b, out, 4);
	}
}

static int hex4(parser *ps, unsigned *out)
{
	unsigned v = 0;
	int i;
	if (ps->end - ps->p < 4) {
		fail(ps, "truncated \\u escape");
		return -1;
	}
	for (i = 0; i < 4; i++) {
		char c = ps->p[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else {
			fail(ps, "bad hex digit in \\u escape");
			return -1;
		}
	}
	ps->p += 4;
	*out = v;
	return 0;
}

/* Parses a string literal at ps->p (which is '"') into b. */
static int parse_string_into(parser *ps, buf *b)
{
	ps->p++;
	for (;;) {
		const char *run = ps->p;
		while (ps->p < ps->end && *ps->p != '"' && *ps->p != '\\' && (unsigned char)*ps->p >= 0x20)
			ps->p++;
		if (ps->p > run) {
			if (!rs_utf8_valid(run, (size_t)(ps->p - run))) {
				fail(ps, "invalid UTF-8 in string");
				return -1;
			}
			buf_append(b, run, (size_t)(ps->p - run));
		}
		if (ps->p >= ps->end) {
			fail(ps, "unterminated string");
			return -1;
		}
		if (*ps->p == '"') {
			ps->p++;
			if (!b->data)
				buf_append(b, "", 0);
			return 0;
		}
		if ((unsigned char)*ps->p < 0x20) {
			fail(ps, "control character in string");
			return -1;
		}
		ps->p++; /* backslash */
		if (ps->p >= ps->end) {
			fail(ps, "unterminated escape");
			return -1;
		}
		switch (*ps->p++) {
		case '"': buf_putc(b, '"'); break;
		case '\\': buf_putc(b, '\\'); break;
		case '/': buf_putc(b, '/'); break;
		case 'b': buf_putc(b, '\b'); break;
		case 'f': buf_putc(b, '\f'); break;
		case 'n': buf_putc(b, '\n'); break;
		case 'r': buf_putc(b, '\r'); break;
		case 't': buf_putc(b, '\t'); break;
		case 'u': {
			unsigned cp, lo;
			if (hex4(ps, &cp) != 0)
				return -1;
			if (cp >= 0xDC00 && cp <= 0xDFFF) {
				fail(ps, "lone low surrogate");
				return -1;
			}
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
					fail(ps, "lone high surrogate");
					return -1;
				}
				ps->p += 2;
				if (hex4(ps, &lo) != 0)
					return -1;
				if (lo < 0xDC00 || lo > 0xDFFF) {
					fail(ps, "bad surrogate pair");
					return -1;
				}
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			}
			put_utf8(b, cp);
			break;
		}
		default: fail(ps, "bad escape"); return -1;
		}
	}
}

static jv *parse_value(parser *ps, int depth);

static jv *parse_number(parser *ps)
{
	const char *s = ps->p;
	jv *v;
	int is_int = 1;
	if (ps->p < ps->end && *ps->p == '-')
		ps->p++;
	if (ps->p >= ps->end) {
		fail(ps, "truncated number");
		return NULL;
	}
	if (*ps->p == '0') {
		ps->p++;
	} else if (*ps->p >= '1' && *ps->p <= '9') {
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	} else {
		fail(ps, "bad number");
		return NULL;
	}
	if (ps->p < ps->end && *ps->p == '.') {
		is_int = 0;
		ps->p++;
		if (ps->p >= ps->end || !(*ps->p >= '0' && *ps->p <= '9')) {
			fail(ps, "bad fraction");
			return NULL;
		}
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	}
	if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
		is_int = 0;
		ps->p++;
		if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
			ps->p++;
		if (ps->p >= ps->end || !(*ps->p >= '0' && *ps->p <= '9')) {
			fail(ps, "bad exponent");
			return NULL;
		}
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	}
	v = jv_new(JV_NUMBER);
	v->number_text = xstrndup(s, (size_t)(ps->p - s));
	if (is_int) {
		char *endp;
		long long n;
		errno = 0;
		n = strtoll(v->number_text, &endp, 10);
		if (errno == 0 && *endp == '\0') {
			v->number_is_int = 1;
			v->number_int = (int64_t)n;
		}
	}
	return v;
}

static int literal(parser *ps, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) {
		fail(ps, "unexpected token");
		return -1;
	}
	ps->p += n;
	return 0;
}

static jv *parse_array(parser *ps, int depth)
{
	jv *arr = jv_array();
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']') {
		ps->p++;
		return arr;
	}
	for (;;) {
		jv *item;
		skip_ws(ps);
		item = parse_value(ps, depth + 1);
		if (!item)
			goto fail;
		jv_push(arr, item);
		skip_ws(ps);
		if (ps->p < ps->end && *ps->p == ',') {
			ps->p++;
			continue;
		}
		if (ps->p < ps->end && *ps->p == ']') {
			ps->p++;
			return arr;
		}
		fail(ps, "expected , or ]");
		goto fail;
	}
fail:
	jv_free(arr);
	return NULL;
}

static jv *parse_object(parser *ps, int depth)
{
	jv *obj = jv_object();
	buf key;
	buf_init(&key);
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}') {
		ps->p++;
		return obj;
	}
	for (;;) {
		jv *item;
		skip_ws(ps);
		if (ps->p >= ps->end || *ps->p != '"') {
			fail(ps, "expected a string key");
			goto fail;
		}
		key.len = 0;
		if (parse_string_into(ps, &key) != 0)
			goto fail;
		if (memchr(key.data, '\0', key.len)) {
			fail(ps, "NUL in object key");
			goto fail;
		}
		if (jv_get(obj, key.data)) {
			fail(ps, "duplicate object key");
			goto fail;
		}
		skip_ws(ps);
		if (ps->p >= ps->end || *ps->p != ':') {
			fail(ps, "expected :");
			goto fail;
		}
		ps->p++;
		skip_ws(ps);
		item = parse_value(ps, depth + 1);
		if (!item)
			goto fail;
		jv_set(obj, key.data, item);
		skip_ws(ps);
		if (ps->p < ps->end && *ps->p == ',') {
			ps->p++;
			continue;
		}
		if (ps->p < ps->end && *ps->p == '}') {
			ps->p++;
			buf_free(&key);
			return obj;
		}
		fail(ps, "expected , or }");
		goto fail;
	}
fail:
	buf_free(&key);
	jv_free(obj);
	return NULL;
}

static jv *parse_value(parser *ps, int depth)
{
	if (depth > JSON_MAX_DEPTH) {
		fail(ps, "nesting too deep");
		return NULL;
	}
	if (ps->p >= ps->end) {
		fail(ps, "unexpected end");
		return NULL;
	}
	switch (*ps->p) {
	case '{': return parse_object(ps, depth);
	case '[': return parse_array(ps, depth);
	case '"': {
		buf s;
		jv *v;
		buf_init(&s);
		if (parse_string_into(ps, &s) != 0) {
			buf_free(&s);
			return NULL;
		}
		v = jv_new(JV_STRING);
		v->str_len = s.len;
		v->str = buf_steal(&s);
		return v;
	}
	case 't':
		if (literal(ps, "true") != 0)
			return NULL;
		return jv_bool(1);
	case 'f':
		if (literal(ps, "false") != 0)
			return NULL;
		return jv_bool(0);
	case 'n':
		if (literal(ps, "null") != 0)
			return NULL;
		return jv_null();
	default:
		if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
			return parse_number(ps);
		fail(ps, "unexpected character");
		return NULL;
	}
}

jv *jv_parse(const char *text, size_t len, rerr *err)
{
	parser ps;
	jv *v;
	ps.p = text;
	ps.start = text;
	ps.end = text + len;
	ps.err = err;
	ps.failed = 0;
	skip_ws(&ps);
	v = parse_value(&ps, 0);
	if (!v)
		return NULL;
	skip_ws(&ps);
	if (ps.p != ps.end) {
		fail(&ps, "trailing characters after the value");
		jv_free(v);
		return NULL;
	}
	return v;
}

void jv_free(jv *value)
{
	size_t i;
	if (!value)
		return;
	for (i = 0; i < value->count; i++) {
		jv_free(value->items[i]);
		if (value->keys)
			free(value->keys[i]);
	}
	free(value->items);
	free(value->keys);
	free(value->str);
	free(value->number_text);
	free(value);
}

jv *jv_copy(const jv *value)
{
	jv *v;
	size_t i;
	if (!value)
		return jv_null();
	v = jv_new(value->type);
	v->boolean = value->boolean;
	v->number_is_int = value->number_is_int;
	v->number_int = value->number_int;
	if (value->number_text)
		v->number_text = xstrdup(value->number_text);
	if (value->str) {
		v->str = xstrndup(value->str, value->str_len);
		v->str_len = value->str_len;
	}
	for (i = 0; i < value->count; i++) {
		if (value->type == JV_OBJECT)
			jv_set(v, value->keys[i], jv_copy(value->items[i]));
		else
			jv_push(v, jv_copy(value->items[i]));
	}
	return v;
}

jv *jv_null(void)
{
	return jv_new(JV_NULL);
}

jv *jv_bool(int value)
{
	jv *v = jv_new(JV_BOOL);
	v->boolean = value ? 1 : 0;
	return v;
}

jv *jv_int(int64_t value)
{
	jv *v = jv_new(JV_NUMBER);
	v->number_text = xasprintf("%lld", (long long)value);
	v->number_is_int = 1;
	v->number_int = value;
	return v;
}

jv *jv_str(const char *text)
{
	if (!text)
		return jv_null();
	return jv_strn(text, strlen(text));
}

jv *jv_strn(const char *text, size_t len)
{
	jv *v = jv_new(JV_STRING);
	v->str = xstrndup(text, len);
	v->str_len = len;
	return v;
}

jv *jv_array(void)
{
	return jv_new(JV_ARRAY);
}

jv *jv_object(void)
{
	return jv_new(JV_OBJECT);
}

static void grow(jv *container)
{
	if (container->count < container->cap)
		return;
	container->cap = container->cap ? container->cap * 2 : 8;
	container->items = xrealloc(container->items, container->cap * sizeof(*container->items));
	if (container->type == JV_OBJECT)
		container->keys = xrealloc(container->keys, container->cap * sizeof(*container->keys));
}

void jv_set(jv *object, const char *key, jv *value)
{
	size_t i;
	for (i = 0; i < object->count; i++) {
		if (strcmp(object->keys[i], key) == 0) {
			jv_free(object->items[i]);
			object->items[i] = value;
			return;
		}
	}
	grow(object);
	object->keys[object->count] = xstrdup(key);
	object->items[object->count] = value;
	object->count++;
}

void jv_set_str(jv *object, const char *key, const char *text)
{
	jv_set(object, key, jv_str(text));
}

void jv_set_int(jv *object, const char *key, int64_t value)
{
	jv_set(object, key, jv_int(value));
}

void jv_set_bool(jv *object, const char *key, int value)
{
	jv_set(object, key, jv_bool(value));
}

void jv_set_null(jv *object, const char *key)
{
	jv_set(object, key, jv_null());
}

void jv_push(jv *array, jv *value)
{
	grow(array);
	array->items[array->count++] = value;
}

jv *jv_get(const jv *object, const char *key)
{
	size_t i;
	if (!object || object->type != JV_OBJECT)
		return NULL;
	for (i = 0; i < object->count; i++)
		if (strcmp(object->keys[i], key) == 0)
			return object->items[i];
	return NULL;
}

const char *jv_get_str(const jv *object, const char *key)
{
	jv *v = jv_get(object, key);
	if (!v || v->type != JV_STRING || memchr(v->str, '\0', v->str_len))
		return NULL;
	return v->str;
}

int jv_get_int(const jv *object, const char *key, int64_t *out)
{
	jv *v = jv_get(object, key);
	if (!v || v->type != JV_NUMBER || !v->number_is_int)
		return 0;
	*out = v->number_int;
	return 1;
}

int jv_is(const jv *value, jv_type type)
{
	return value && value->type == type;
}

void jv_write_string(buf *out, const char *text, size_t len)
{
	size_t i, run = 0;
	if (!rs_utf8_valid(text, len)) {
		/* Never write what jv_parse would refuse (a capture program's
		 * stderr, a file name): invalid sequences become U+FFFD. */
		buf clean;
		buf_init(&clean);
		utf8_sanitize(&clean, text, len, 0);
		jv_write_string(out, clean.data ? clean.data : "", clean.len);
		buf_free(&clean);
		return;
	}
	buf_putc(out, '"');
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];
		char u[7];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue; /* the common byte, without a call */
		const char *esc = rs_json_escape(c, u);
		if (i > run)
			buf_append(out, text + run, i - run);
		run = i + 1;
		buf_puts(out, esc);
	}
	if (len > run)
		buf_append(out, text + run, len - run);
	buf_putc(out, '"');
}

static void indent(buf *out, int level)
{
	int i;
	buf_putc(out, '\n');
	for (i = 0; i < level; i++)
		buf_puts(out, "  ");
}

static void write_value(buf *out, const jv *v, int pretty, int level)
{
	size_t i;
	switch (v ? v->type : JV_NULL) {
	case JV_NULL: buf_puts(out, "null"); break;
	case JV_BOOL: buf_puts(out, v->boolean ? "true" : "false"); break;
	case JV_NUMBER: buf_puts(out, v->number_text); break;
	case JV_STRING: jv_write_string(out, v->str, v->str_len); break;
	case JV_ARRAY:
		buf_putc(out, '[');
		for (i = 0; i < v->count; i++) {
			if (i)
				buf_putc(out, ',');
			if (pretty)
				indent(out, level + 1);
			write_value(out, v->items[i], pretty, level + 1);
		}
		if (pretty && v->count)
			indent(out, level);
		buf_putc(out, ']');
		break;
	case JV_OBJECT:
		buf_putc(out, '{');
		for (i = 0; i < v->count; i++) {
			if (i)
				buf_putc(out, ',');
			if (pretty)
				indent(out, level + 1);
			jv_write_string(out, v->keys[i], strlen(v->keys[i]));
			buf_puts(out, pretty ? ": " : ":");
			write_value(out, v->items[i], pretty, level + 1);
		}
		if (pretty && v->count)
			indent(out, level);
		buf_putc(out, '}');
		break;
	}
}

void jv_write(buf *out, const jv *value, int flags)
{
	write_value(out, value, (flags & JV_PRETTY) != 0, 0);
}

char *jv_to_text(const jv *value, int flags)
{
	buf b;
	buf_init(&b);
	jv_write(&b, value, flags);
	return buf_steal(&b);
}
