/*
 * The MCP layer's JSON parser (mcp/wire.h): strict RFC 8259, duplicate
 * member names refused, number tokens kept for exact echo, UTF-8 checked,
 * lone surrogates replaced, nesting bounded, ids compared as a JSON client
 * would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mcp/wire.h"
#include "util/jsonx.h"

static json_object *parse_ok(const char *text)
{
	json_object *out = NULL;
	bool is_null = false;
	char why[160];
	wire_status st = wire_parse(text, strlen(text), &out, &is_null, why, sizeof why);
	if (st != WIRE_OK)
		fail_msg("%s: %s", text, why);
	return out;
}

static void assert_syntax(const char *text, size_t len, const char *why_part)
{
	json_object *out = (json_object *)1;
	char why[160];
	wire_status st = wire_parse(text, len, &out, NULL, why, sizeof why);
	if (st != WIRE_SYNTAX)
		fail_msg("expected a syntax error for %.80s", text);
	assert_null(out);
	if (why_part && strstr(why, why_part) == NULL)
		fail_msg("reason '%s' lacks '%s'", why, why_part);
}

static void test_values(void **state)
{
	(void)state;
	json_object *v = parse_ok(" {\"a\":[1,-2,3.5,true,false,null,\"x\"],\"b\":{}} \r\n");
	assert_true(json_object_is_type(v, json_type_object));
	json_object *a = jsonx_get_array(v, "a");
	assert_int_equal(json_object_array_length(a), 7);
	assert_int_equal(json_object_get_int64(json_object_array_get_idx(a, 1)), -2);
	assert_true(json_object_get_double(json_object_array_get_idx(a, 2)) == 3.5);
	assert_null(json_object_array_get_idx(a, 5));
	json_object_put(v);

	bool is_null = false;
	json_object *out = (json_object *)1;
	assert_int_equal(wire_parse("null", 4, &out, &is_null, NULL, 0), WIRE_OK);
	assert_null(out);
	assert_true(is_null);
}

static void test_syntax_errors(void **state)
{
	(void)state;
	assert_syntax("", 0, "expected");
	assert_syntax("{", 1, "member name");
	assert_syntax("{\"a\":1,}", 8, "member name");
	assert_syntax("[1,]", 4, "unexpected");
	assert_syntax("[1 2]", 5, "expected , or ]");
	assert_syntax("{\"a\" 1}", 7, "expected :");
	assert_syntax("{'a':1}", 7, "member name");
	assert_syntax("01", 2, "after the JSON value");
	assert_syntax("1.", 2, "decimal point");
	assert_syntax("1e", 2, "exponent");
	assert_syntax("-", 1, "invalid number");
	assert_syntax("+1", 2, "unexpected");
	assert_syntax("NaN", 3, "unexpected");
	assert_syntax("tru", 3, "unexpected");
	assert_syntax("\"abc", 4, "unterminated");
	assert_syntax("\"a\tb\"", 5, "control character");
	assert_syntax("\"\\x\"", 4, "invalid escape");
	assert_syntax("\"\\u12G4\"", 8, "\\u escape");
	assert_syntax("{} {}", 5, "after the JSON value");
	assert_syntax("[1] x", 5, "after the JSON value");
}

static void test_duplicate_names(void **state)
{
	(void)state;
	assert_syntax("{\"id\":1,\"id\":2}", 15, "appears twice");
	assert_syntax("{\"a\":{\"b\":1,\"b\":1}}", 19, "\"b\" appears twice");
	/* An escaped spelling of the same name is the same name. */
	assert_syntax("{\"ab\":1,\"a\\u0062\":2}", 20, "appears twice");
	/* The same name in different objects is fine. */
	json_object_put(parse_ok("[{\"a\":1},{\"a\":2}]"));
	/* A name holding U+0000 cannot be held by json-c: refused. */
	assert_syntax("{\"a\\u0000b\":1}", 14, "U+0000");
}

static void test_utf8(void **state)
{
	(void)state;
	assert_syntax("\"\xff\"", 3, "UTF-8");
	assert_syntax("\"\xc0\xaf\"", 4, "UTF-8");         /* overlong */
	assert_syntax("\"\xe0\x80\xaf\"", 5, "UTF-8");     /* overlong */
	assert_syntax("\"\xed\xa0\x80\"", 5, "UTF-8");     /* an encoded surrogate */
	assert_syntax("\"\xf4\x90\x80\x80\"", 6, "UTF-8"); /* past U+10FFFF */
	assert_syntax("\"\xe2\x82\"", 4, "UTF-8");         /* cut short */
	json_object *v = parse_ok("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
	assert_string_equal(json_object_get_string(v), "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
	json_object_put(v);
}

static void test_escapes(void **state)
{
	(void)state;
	json_object *v = parse_ok("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\"");
	const char *want = "a\"b\\c/d\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
	assert_int_equal(json_object_get_string_len(v), (int)strlen(want));
	assert_memory_equal(json_object_get_string(v), want, strlen(want));
	json_object_put(v);
	/* Lone surrogates become U+FFFD. */
	v = parse_ok("\"\\ud800x\\udc00\\ud83d\"");
	assert_string_equal(json_object_get_string(v), "\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbd");
	json_object_put(v);
	/* A high surrogate followed by another escape that is not a low one. */
	v = parse_ok("\"\\ud800\\u0041\"");
	assert_string_equal(json_object_get_string(v), "\xef\xbf\xbd"
	                                               "A");
	json_object_put(v);
	/* U+0000 inside a value is kept. */
	v = parse_ok("\"a\\u0000b\"");
	assert_int_equal(json_object_get_string_len(v), 3);
	json_object_put(v);
}

static void test_depth(void **state)
{
	(void)state;
	char deep[2 * WIRE_MAX_DEPTH + 8];
	memset(deep, '[', WIRE_MAX_DEPTH);
	memset(deep + WIRE_MAX_DEPTH, ']', WIRE_MAX_DEPTH);
	json_object_put(parse_ok((deep[2 * WIRE_MAX_DEPTH] = '\0', deep)));
	char deeper[2 * WIRE_MAX_DEPTH + 8];
	memset(deeper, '[', WIRE_MAX_DEPTH + 1);
	memset(deeper + WIRE_MAX_DEPTH + 1, ']', WIRE_MAX_DEPTH + 1);
	assert_syntax(deeper, 2 * WIRE_MAX_DEPTH + 2, "nesting");
}

static void assert_id_text(const char *token, const char *want)
{
	json_object *v = parse_ok(token);
	assert_true(wire_is_id(v));
	char *text = wire_id_text(v);
	assert_string_equal(text, want);
	free(text);
	json_object_put(v);
}

static void test_id_text_is_exact(void **state)
{
	(void)state;
	assert_id_text("7", "7");
	assert_id_text("-7", "-7");
	assert_id_text("1.50", "1.50");
	assert_id_text("-0", "-0");
	assert_id_text("0.0", "0.0");
	assert_id_text("1e3", "1e3");
	assert_id_text("2E-2", "2E-2");
	assert_id_text("9223372036854775807", "9223372036854775807");
	assert_id_text("-9223372036854775808", "-9223372036854775808");
	assert_id_text("9223372036854775808", "9223372036854775808");
	assert_id_text("123456789012345678901234567890", "123456789012345678901234567890");
	assert_id_text("1e400", "1e400");
	assert_id_text("\"abc\"", "\"abc\"");
	assert_id_text("\"a\\/b\\u00e9\"", "\"a/b\xc3\xa9\"");
	assert_id_text("\"q\\\"\\n\"", "\"q\\\"\\n\"");

	json_object *v = parse_ok("[null,true,{},[]]");
	for (size_t i = 0; i < 4; i++)
		assert_false(wire_is_id(json_object_array_get_idx(v, i)));
	json_object_put(v);
}

static void assert_same_key(const char *a, const char *b, bool same)
{
	json_object *va = parse_ok(a), *vb = parse_ok(b);
	char *ka = wire_id_key(va), *kb = wire_id_key(vb);
	if ((strcmp(ka, kb) == 0) != same)
		fail_msg("%s and %s: keys %s and %s", a, b, ka, kb);
	free(ka);
	free(kb);
	json_object_put(va);
	json_object_put(vb);
}

static void test_id_keys(void **state)
{
	(void)state;
	assert_same_key("7", "7.0", true);
	assert_same_key("7", "7e0", true);
	assert_same_key("7", "70e-1", true);
	assert_same_key("0", "-0", true);
	assert_same_key("7", "\"7\"", false);
	assert_same_key("7", "8", false);
	assert_same_key("1.5", "1.50", true);
	assert_same_key("\"a\"", "\"\\u0061\"", true);
	assert_same_key("\"a\"", "\"b\"", false);
	assert_same_key("9007199254740993", "9007199254740992", false);
}

static void test_long_string(void **state)
{
	(void)state;
	size_t n = 16u << 20;
	char *text = malloc(n + 3);
	assert_non_null(text);
	text[0] = '"';
	memset(text + 1, 'x', n);
	text[n + 1] = '"';
	text[n + 2] = '\0';
	json_object *out = NULL;
	assert_int_equal(wire_parse(text, n + 2, &out, NULL, NULL, 0), WIRE_OK);
	assert_int_equal(json_object_get_string_len(out), (int)n);
	json_object_put(out);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_values),           cmocka_unit_test(test_syntax_errors),
	    cmocka_unit_test(test_duplicate_names),  cmocka_unit_test(test_utf8),
	    cmocka_unit_test(test_escapes),          cmocka_unit_test(test_depth),
	    cmocka_unit_test(test_id_text_is_exact), cmocka_unit_test(test_id_keys),
	    cmocka_unit_test(test_long_string),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
