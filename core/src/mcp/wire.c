/*
 * The MCP layer's JSON parser (see wire.h for why it exists). Recursive
 * descent over bytes, building json-c values; the depth is bounded, so the
 * recursion is too.
 */
#include "mcp/wire.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonx.h"
#include "util/strbuf.h"

typedef struct parser {
	const unsigned char *start;
	const unsigned char *p;
	const unsigned char *end;
	int depth;
	wire_status status;
	char *why;
	size_t why_len;
	strbuf scratch; /* decoded strings with escapes, and keys */
	bool lone;      /* the last string scanned held a lone surrogate escape */
} parser;

static void fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(parser *ps, const char *fmt, ...)
{
	if (ps->status != WIRE_OK)
		return;
	ps->status = WIRE_SYNTAX;
	if (ps->why == NULL || ps->why_len == 0)
		return;
	int used = snprintf(ps->why, ps->why_len, "at byte %zu: ", (size_t)(ps->p - ps->start));
	if (used < 0 || (size_t)used >= ps->why_len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ps->why + used, ps->why_len - (size_t)used, fmt, ap);
	va_end(ap);
}

static void no_memory(parser *ps)
{
	if (ps->status != WIRE_OK)
		return;
	ps->status = WIRE_NO_MEMORY;
	if (ps->why && ps->why_len)
		snprintf(ps->why, ps->why_len, "out of memory at byte %zu", (size_t)(ps->p - ps->start));
}

static void skip_space(parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

/* Length of the valid UTF-8 sequence (2 to 4 bytes) starting at s, or 0. */
static size_t utf8_multibyte(const unsigned char *s, const unsigned char *end)
{
	unsigned char c = s[0];
	size_t need;
	if (c >= 0xc2 && c <= 0xdf)
		need = 2;
	else if (c >= 0xe0 && c <= 0xef)
		need = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		need = 4;
	else
		return 0;
	if ((size_t)(end - s) < need)
		return 0;
	for (size_t k = 1; k < need; k++)
		if ((s[k] & 0xc0) != 0x80)
			return 0;
	/* Overlong forms, surrogates and code points past U+10FFFF. */
	if (c == 0xe0 && s[1] < 0xa0)
		return 0;
	if (c == 0xed && s[1] >= 0xa0)
		return 0;
	if (c == 0xf0 && s[1] < 0x90)
		return 0;
	if (c == 0xf4 && s[1] >= 0x90)
		return 0;
	return need;
}

static int hex_value(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Reads 4 hex digits at ps->p (after "\u"). -1 when malformed. */
static long read_hex4(parser *ps)
{
	if (ps->end - ps->p < 4)
		return -1;
	long value = 0;
	for (int i = 0; i < 4; i++) {
		int h = hex_value(ps->p[i]);
		if (h < 0)
			return -1;
		value = value * 16 + h;
	}
	ps->p += 4;
	return value;
}

static void put_utf8(strbuf *sb, unsigned long cp)
{
	char out[4];
	size_t n;
	if (cp < 0x80) {
		out[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		out[0] = (char)(0xf0 | (cp >> 18));
		out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	strbuf_append(sb, out, n);
}

/* Scans a string whose opening quote is at ps->p. On success *text_out and
 * *len_out give its contents: a pointer into the input when it has no
 * escapes, else into ps->scratch (which is reset first). */
static bool scan_string(parser *ps, const char **text_out, size_t *len_out)
{
	ps->p++; /* the opening quote */
	const unsigned char *run = ps->p;
	bool escaped = false;
	ps->lone = false;
	strbuf *sb = &ps->scratch;
	for (;;) {
		/* The common case: a run of plain ASCII. */
		while (ps->p < ps->end && *ps->p >= 0x20 && *ps->p < 0x80 && *ps->p != '"' && *ps->p != '\\')
			ps->p++;
		if (ps->p >= ps->end) {
			fail(ps, "unterminated string");
			return false;
		}
		unsigned char c = *ps->p;
		if (c == '"') {
			if (!escaped) {
				*text_out = (const char *)run;
				*len_out = (size_t)(ps->p - run);
			} else {
				strbuf_append(sb, run, (size_t)(ps->p - run));
				if (!strbuf_ok(sb)) {
					no_memory(ps);
					return false;
				}
				*text_out = strbuf_str(sb);
				*len_out = sb->len;
			}
			ps->p++;
			return true;
		}
		if (c < 0x20) {
			fail(ps, "control character in a string (it must be escaped)");
			return false;
		}
		if (c >= 0x80) {
			size_t n = utf8_multibyte(ps->p, ps->end);
			if (n == 0) {
				fail(ps, "invalid UTF-8");
				return false;
			}
			ps->p += n;
			continue;
		}
		/* A backslash: switch to the decoding buffer. */
		if (!escaped) {
			escaped = true;
			strbuf_reset(sb);
		}
		strbuf_append(sb, run, (size_t)(ps->p - run));
		ps->p++;
		if (ps->p >= ps->end) {
			fail(ps, "unterminated string");
			return false;
		}
		c = *ps->p++;
		switch (c) {
		case '"': strbuf_putc(sb, '"'); break;
		case '\\': strbuf_putc(sb, '\\'); break;
		case '/': strbuf_putc(sb, '/'); break;
		case 'b': strbuf_putc(sb, '\b'); break;
		case 'f': strbuf_putc(sb, '\f'); break;
		case 'n': strbuf_putc(sb, '\n'); break;
		case 'r': strbuf_putc(sb, '\r'); break;
		case 't': strbuf_putc(sb, '\t'); break;
		case 'u': {
			long cp = read_hex4(ps);
			if (cp < 0) {
				fail(ps, "malformed \\u escape");
				return false;
			}
			if (cp >= 0xd800 && cp <= 0xdbff && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
			    ps->p[1] == 'u') {
				const unsigned char *save = ps->p;
				ps->p += 2;
				long low = read_hex4(ps);
				if (low >= 0xdc00 && low <= 0xdfff)
					cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
				else
					ps->p = save; /* not a pair: the high half stands alone */
			}
			if (cp >= 0xd800 && cp <= 0xdfff) {
				cp = 0xfffd; /* a lone surrogate is not a character */
				ps->lone = true;
			}
			put_utf8(sb, (unsigned long)cp);
			break;
		}
		default: fail(ps, "invalid escape \\%c", c >= 0x20 && c < 0x7f ? c : '?'); return false;
		}
		run = ps->p;
	}
}

static json_object *parse_value(parser *ps);

static json_object *parse_number(parser *ps)
{
	const unsigned char *tok = ps->p;
	bool negative = false, integral = true;
	if (*ps->p == '-') {
		negative = true;
		ps->p++;
	}
	if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
		fail(ps, "invalid number");
		return NULL;
	}
	if (*ps->p == '0') {
		ps->p++;
	} else {
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	}
	if (ps->p < ps->end && *ps->p == '.') {
		integral = false;
		ps->p++;
		if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
			fail(ps, "invalid number: digits must follow the decimal point");
			return NULL;
		}
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	}
	if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
		integral = false;
		ps->p++;
		if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
			ps->p++;
		if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
			fail(ps, "invalid number: digits must follow the exponent");
			return NULL;
		}
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	}
	size_t len = (size_t)(ps->p - tok);
	if (integral) {
		/* int64 when it fits and reads back identically ("-0" does not). */
		const unsigned char *d = tok + (negative ? 1 : 0);
		uint64_t magnitude = 0;
		bool fits = !(negative && len == 2 && d[0] == '0');
		for (; fits && d < ps->p; d++) {
			unsigned digit = (unsigned)(*d - '0');
			if (magnitude > (UINT64_MAX - digit) / 10)
				fits = false;
			else
				magnitude = magnitude * 10 + digit;
		}
		if (fits &&
		    (negative ? magnitude <= (uint64_t)INT64_MAX + 1 : magnitude <= (uint64_t)INT64_MAX)) {
			int64_t value = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
			json_object *obj = json_object_new_int64(value);
			if (obj == NULL)
				no_memory(ps);
			return obj;
		}
	}
	/* Everything else is a double that keeps its exact token. */
	char small[64];
	char *text = len < sizeof small ? small : malloc(len + 1);
	if (text == NULL) {
		no_memory(ps);
		return NULL;
	}
	memcpy(text, tok, len);
	text[len] = '\0';
	double value = strtod(text, NULL);
	json_object *obj = json_object_new_double_s(value, text);
	if (text != small)
		free(text);
	if (obj == NULL)
		no_memory(ps);
	return obj;
}

static void free_token(json_object *obj, void *userdata)
{
	(void)obj;
	free(userdata);
}

static json_object *parse_string_value(parser *ps)
{
	const unsigned char *token = ps->p;
	const char *text;
	size_t len;
	if (!scan_string(ps, &text, &len))
		return NULL;
	if (len > (size_t)INT32_MAX) {
		no_memory(ps);
		return NULL;
	}
	json_object *obj = json_object_new_string_len(text, (int)len);
	if (obj == NULL) {
		no_memory(ps);
		return NULL;
	}
	if (ps->lone) {
		/* The value holds U+FFFD; the token as written is kept beside it,
		 * so an id or progress token is echoed exactly (wire_id_text). */
		size_t token_len = (size_t)(ps->p - token);
		char *copy = malloc(token_len + 1);
		if (copy == NULL) {
			json_object_put(obj);
			no_memory(ps);
			return NULL;
		}
		memcpy(copy, token, token_len);
		copy[token_len] = '\0';
		json_object_set_userdata(obj, copy, free_token);
	}
	return obj;
}

/* The token of a string that held a lone surrogate, as written (quotes
 * included), or NULL. */
static const char *lone_token(const json_object *value)
{
	return json_object_get_userdata((json_object *)value);
}

static json_object *parse_array(parser *ps)
{
	ps->p++; /* [ */
	json_object *array = json_object_new_array();
	if (array == NULL) {
		no_memory(ps);
		return NULL;
	}
	skip_space(ps);
	if (ps->p < ps->end && *ps->p == ']') {
		ps->p++;
		return array;
	}
	for (;;) {
		skip_space(ps);
		json_object *item = parse_value(ps);
		if (ps->status != WIRE_OK)
			goto failed;
		if (json_object_array_add(array, item) != 0) {
			json_object_put(item);
			no_memory(ps);
			goto failed;
		}
		skip_space(ps);
		if (ps->p >= ps->end) {
			fail(ps, "unterminated array");
			goto failed;
		}
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		if (*ps->p == ']') {
			ps->p++;
			return array;
		}
		fail(ps, "expected , or ] in an array");
		goto failed;
	}
failed:
	json_object_put(array);
	return NULL;
}

static json_object *parse_object(parser *ps)
{
	ps->p++; /* { */
	json_object *object = json_object_new_object();
	char key_small[128];
	char *key = NULL;
	if (object == NULL) {
		no_memory(ps);
		return NULL;
	}
	skip_space(ps);
	if (ps->p < ps->end && *ps->p == '}') {
		ps->p++;
		return object;
	}
	for (;;) {
		skip_space(ps);
		if (ps->p >= ps->end || *ps->p != '"') {
			fail(ps, "expected a member name in double quotes");
			goto failed;
		}
		const unsigned char *name_at = ps->p;
		const char *name;
		size_t name_len;
		if (!scan_string(ps, &name, &name_len))
			goto failed;
		if (memchr(name, '\0', name_len) != NULL) {
			ps->p = name_at;
			fail(ps, "a member name contains U+0000");
			goto failed;
		}
		key = name_len < sizeof key_small ? key_small : malloc(name_len + 1);
		if (key == NULL) {
			no_memory(ps);
			goto failed;
		}
		memcpy(key, name, name_len);
		key[name_len] = '\0';
		if (json_object_object_get_ex(object, key, NULL)) {
			ps->p = name_at;
			fail(ps, "the member name \"%.64s\" appears twice in one object", key);
			goto failed;
		}
		skip_space(ps);
		if (ps->p >= ps->end || *ps->p != ':') {
			fail(ps, "expected : after a member name");
			goto failed;
		}
		ps->p++;
		skip_space(ps);
		json_object *value = parse_value(ps);
		if (ps->status != WIRE_OK)
			goto failed;
		if (json_object_object_add_ex(object, key, value, JSON_C_OBJECT_ADD_KEY_IS_NEW) != 0) {
			json_object_put(value);
			no_memory(ps);
			goto failed;
		}
		if (key != key_small)
			free(key);
		key = NULL;
		skip_space(ps);
		if (ps->p >= ps->end) {
			fail(ps, "unterminated object");
			goto failed;
		}
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		if (*ps->p == '}') {
			ps->p++;
			return object;
		}
		fail(ps, "expected , or } in an object");
		goto failed;
	}
failed:
	if (key != key_small)
		free(key);
	json_object_put(object);
	return NULL;
}

static bool literal(parser *ps, const char *word, size_t len)
{
	if ((size_t)(ps->end - ps->p) < len || memcmp(ps->p, word, len) != 0)
		return false;
	ps->p += len;
	return true;
}

static json_object *parse_value(parser *ps)
{
	if (ps->p >= ps->end) {
		fail(ps, "a value was expected");
		return NULL;
	}
	json_object *obj = NULL;
	switch (*ps->p) {
	case '{':
	case '[':
		if (++ps->depth > WIRE_MAX_DEPTH) {
			fail(ps, "nesting deeper than %d levels", WIRE_MAX_DEPTH);
			return NULL;
		}
		obj = *ps->p == '{' ? parse_object(ps) : parse_array(ps);
		ps->depth--;
		return obj;
	case '"': return parse_string_value(ps);
	case 't':
		if (literal(ps, "true", 4)) {
			if ((obj = json_object_new_boolean(1)) == NULL)
				no_memory(ps);
			return obj;
		}
		break;
	case 'f':
		if (literal(ps, "false", 5)) {
			if ((obj = json_object_new_boolean(0)) == NULL)
				no_memory(ps);
			return obj;
		}
		break;
	case 'n':
		if (literal(ps, "null", 4))
			return NULL;
		break;
	default:
		if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
			return parse_number(ps);
		break;
	}
	fail(ps, "unexpected character");
	return NULL;
}

wire_status wire_parse(const char *text, size_t len, json_object **out, bool *is_null_out, char *why,
                       size_t why_len)
{
	parser ps = {.start = (const unsigned char *)text,
	             .p = (const unsigned char *)text,
	             .end = (const unsigned char *)text + len,
	             .why = why,
	             .why_len = why_len};
	strbuf_init(&ps.scratch);
	*out = NULL;
	if (is_null_out)
		*is_null_out = false;
	if (why && why_len)
		why[0] = '\0';
	skip_space(&ps);
	json_object *value = parse_value(&ps);
	if (ps.status == WIRE_OK) {
		skip_space(&ps);
		if (ps.p != ps.end)
			fail(&ps, "unexpected data after the JSON value");
	}
	strbuf_free(&ps.scratch);
	if (ps.status != WIRE_OK) {
		json_object_put(value);
		return ps.status;
	}
	*out = value;
	if (value == NULL && is_null_out)
		*is_null_out = true;
	return WIRE_OK;
}

bool wire_is_id(const json_object *value)
{
	enum json_type t = json_object_get_type(value);
	return value != NULL && (t == json_type_string || t == json_type_int || t == json_type_double);
}

char *wire_id_text(const json_object *value)
{
	switch (json_object_get_type(value)) {
	case json_type_string: {
		if (lone_token(value) != NULL)
			return strdup(lone_token(value));
		strbuf sb = STRBUF_INIT;
		jsonx_write_string(&sb, json_object_get_string((json_object *)value),
		                   (size_t)json_object_get_string_len(value));
		return strbuf_detach(&sb, NULL);
	}
	case json_type_int: {
		char buf[32];
		snprintf(buf, sizeof buf, "%lld", (long long)json_object_get_int64(value));
		return strdup(buf);
	}
	case json_type_double:
		/* wire_parse made it with json_object_new_double_s: its serialiser
		 * writes the token exactly as it was read. */
		return strdup(json_object_to_json_string_ext((json_object *)value, JSON_C_TO_STRING_PLAIN));
	default: return strdup("null");
	}
}

char *wire_id_key(const json_object *value)
{
	strbuf sb = STRBUF_INIT;
	switch (json_object_get_type(value)) {
	case json_type_string:
		if (lone_token(value) != NULL) {
			/* Not "s:": "\ud800" and "\ufffd" are different ids. (Two
			 * spellings of one lone surrogate, "\ud800" and "\uD800",
			 * count as two ids here.) */
			strbuf_puts(&sb, "t:");
			strbuf_puts(&sb, lone_token(value));
			break;
		}
		strbuf_puts(&sb, "s:");
		strbuf_append(&sb, json_object_get_string((json_object *)value),
		              (size_t)json_object_get_string_len(value));
		break;
	case json_type_int: strbuf_printf(&sb, "n:%lld", (long long)json_object_get_int64(value)); break;
	case json_type_double: {
		double d = json_object_get_double(value);
		if (d == 0)
			strbuf_puts(&sb, "n:0");
		else if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18)
			strbuf_printf(&sb, "n:%lld", (long long)d);
		else
			strbuf_printf(&sb, "n:%.17g", d);
		break;
	}
	default: strbuf_puts(&sb, "null"); break;
	}
	return strbuf_detach(&sb, NULL);
}
