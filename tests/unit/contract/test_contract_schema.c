/*
 * Input validation (spec/tools.md §2.2): every schema keyword the contract uses,
 * with the exact "<JSON pointer> <what is wrong>" message of each rule, the
 * ECMAScript patterns (contract/pattern.h), and whole-tool messages through
 * contract_validate ("Invalid <tool> input: ...").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "contract/contract.h"
#include "contract/pattern.h"
#include "contract/schema.h"
#include "util/jsonx.h"

static json_object *json(const char *text)
{
	char why[128];
	json_object *v = jsonx_parse_str(text, why, sizeof why);
	if (v == NULL && strcmp(text, "null") != 0)
		fail_msg("bad test JSON %s: %s", text, why);
	return v;
}

/* Every schema compiled here stays alive (reachable from this list) for the
 * life of the test: compiled patterns are keyed by the schema node, so a
 * freed node's address must never come back as another schema. */
static json_object *kept_schemas[256];
static size_t kept_count;

/* Validates `value` against `schema` (both JSON text). want NULL: valid. */
static void expect(const char *schema_text, const char *value_text, const char *want)
{
	json_object *schema = json(schema_text);
	assert_true(kept_count < sizeof kept_schemas / sizeof kept_schemas[0]);
	kept_schemas[kept_count++] = schema;
	char err[256];
	assert_int_equal(schema_compile(schema, err, sizeof err), 0);
	json_object *value = json(value_text);
	char *problem = schema_validate(schema, value, "relay_test");
	if (want == NULL && problem != NULL)
		fail_msg("%s against %s: unexpected \"%s\"", value_text, schema_text, problem);
	if (want != NULL && (problem == NULL || strcmp(problem, want) != 0))
		fail_msg("%s against %s: got \"%s\", want \"%s\"", value_text, schema_text,
		         problem ? problem : "(valid)", want);
	free(problem);
	json_object_put(value);
	/* The schema stays referenced: compiled patterns are keyed by node. */
}

static void test_types(void **state)
{
	(void)state;
	expect("{\"type\":\"object\"}", "[]", "/ must be an object");
	expect("{\"type\":\"array\"}", "{}", "/ must be an array");
	expect("{\"type\":\"string\"}", "1", "/ must be a string");
	expect("{\"type\":\"boolean\"}", "\"true\"", "/ must be a boolean");
	expect("{\"type\":\"number\"}", "\"1\"", "/ must be a number");
	expect("{\"type\":\"number\"}", "1.5", NULL);
	expect("{\"type\":\"integer\"}", "1.5", "/ must be an integer");
	expect("{\"type\":\"integer\"}", "2.0", NULL); /* JSON Schema: 2.0 is an integer */
	expect("{\"type\":\"integer\"}", "3", NULL);
	expect("{\"type\":\"string\"}", "null", "/ must be a string");
}

static void test_objects(void **state)
{
	(void)state;
	const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b~/c\":{\"type\":"
	                "\"integer\"}},\"required\":[\"a\"],\"additionalProperties\":false}";
	expect(s, "{\"a\":\"x\"}", NULL);
	expect(s, "{}", "/a is required");
	expect(s, "{\"a\":\"x\",\"z\":1}", "/z is not a field of relay_test");
	/* Unknown fields are reported before missing ones. */
	expect(s, "{\"z\":1}", "/z is not a field of relay_test");
	expect(s, "{\"a\":1}", "/a must be a string");
	/* JSON Pointer escaping (RFC 6901). */
	expect(s, "{\"a\":\"x\",\"b~/c\":\"no\"}", "/b~0~1c must be an integer");
	/* Open objects accept other fields. */
	expect("{\"type\":\"object\",\"properties\":{}}", "{\"q\":1}", NULL);
	/* Nested pointers. */
	expect(
	    "{\"type\":\"object\",\"properties\":{\"o\":{\"type\":\"object\",\"properties\":{\"p\":{\"type\":"
	    "\"boolean\"}},\"additionalProperties\":false}}}",
	    "{\"o\":{\"p\":1}}", "/o/p must be a boolean");
}

static void test_strings(void **state)
{
	(void)state;
	expect("{\"type\":\"string\",\"minLength\":2}", "\"a\"", "/ must be at least 2 characters long");
	expect("{\"type\":\"string\",\"minLength\":1}", "\"\"", "/ must be at least 1 character long");
	expect("{\"type\":\"string\",\"maxLength\":3}", "\"abcd\"", "/ must be at most 3 characters long");
	/* Lengths count code points, not bytes. */
	expect("{\"type\":\"string\",\"maxLength\":3}", "\"\xc3\xa9\xc3\xa9\xf0\x9f\x98\x80\"", NULL);
	expect("{\"type\":\"string\",\"minLength\":2}", "\"\xf0\x9f\x98\x80\"",
	       "/ must be at least 2 characters long");
	expect("{\"type\":\"string\",\"enum\":[\"linux\",\"macos\"]}", "\"windows\"",
	       "/ must be one of linux, macos");
	expect("{\"type\":\"string\",\"enum\":[\"linux\",\"macos\"]}", "\"macos\"", NULL);
	expect("{\"type\":\"string\",\"const\":\"display\"}", "\"other\"", "/ must be \"display\"");
	expect("{\"type\":\"boolean\",\"const\":true}", "false", "/ must be true");
	expect("{\"type\":\"string\",\"pattern\":\"^[a-z0-9][a-z0-9-]{0,47}$\"}", "\"Login\"",
	       "/ must match ^[a-z0-9][a-z0-9-]{0,47}$");
}

static void test_numbers(void **state)
{
	(void)state;
	expect("{\"type\":\"integer\",\"minimum\":1,\"maximum\":3600000}", "0", "/ must be at least 1");
	expect("{\"type\":\"integer\",\"minimum\":1,\"maximum\":3600000}", "3600001",
	       "/ must be at most 3600000");
	expect("{\"type\":\"integer\",\"minimum\":1,\"maximum\":3600000}", "3600000", NULL);
	expect("{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2}", "0.25", "/ must be at least 0.5");
	expect("{\"type\":\"integer\",\"minimum\":0}", "-1", "/ must be at least 0");
	expect("{\"type\":\"integer\",\"maximum\":5}", "1e400", "/ must be an integer");
}

static void test_arrays(void **state)
{
	(void)state;
	expect("{\"type\":\"array\",\"minItems\":1}", "[]", "/ must have at least 1 item");
	expect("{\"type\":\"array\",\"maxItems\":2}", "[1,2,3]", "/ must have at most 2 items");
	expect("{\"type\":\"array\",\"uniqueItems\":true}", "[1,2,1]",
	       "/2 repeats item 0; items must be unique");
	expect("{\"type\":\"array\",\"uniqueItems\":true}", "[{\"a\":1},{\"a\":1.0}]",
	       "/1 repeats item 0; items must be unique");
	expect("{\"type\":\"array\",\"uniqueItems\":true}", "[\"a\",\"b\"]", NULL);
	expect("{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", "[\"a\",2]", "/1 must be a string");
	expect(
	    "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
	    "\"properties\":{\"n\":{\"type\":\"string\"}},\"required\":[\"n\"]}}}}",
	    "{\"x\":[{\"n\":\"a\"},{}]}", "/x/1/n is required");
}

static void test_any_of(void **state)
{
	(void)state;
	const char *s =
	    "{\"type\":\"object\",\"anyOf\":["
	    "{\"type\":\"object\",\"properties\":{\"source\":{\"type\":\"string\",\"const\":\"display\"},"
	    "\"phase\":{\"type\":\"string\",\"enum\":[\"before\",\"after\"]}},\"required\":[\"source\","
	    "\"phase\"],\"additionalProperties\":false},"
	    "{\"type\":\"object\",\"properties\":{\"source\":{\"type\":\"string\",\"const\":\"reference\"},"
	    "\"id\":{\"type\":\"string\"}},\"required\":[\"source\",\"id\"],\"additionalProperties\":false}]"
	    "}";
	expect(s, "{\"source\":\"display\",\"phase\":\"after\"}", NULL);
	expect(s, "{\"source\":\"reference\",\"id\":\"x\"}", NULL);
	/* The branch named by `source` reports its own problem. */
	expect(s, "{\"source\":\"display\",\"phase\":\"during\"}", "/phase must be one of before, after");
	expect(s, "{\"source\":\"reference\"}", "/id is required");
	expect(s, "{\"source\":\"display\",\"phase\":\"after\",\"id\":\"x\"}",
	       "/id is not a field of relay_test");
	/* An unknown source names the forms. */
	expect(s, "{\"source\":\"camera\"}", "/source must be one of display, reference");
	expect(s, "{}", "/source must be one of display, reference");
	expect(s, "[]", "/ must be an object");
}

static bool matches(const char *source, const char *text)
{
	char err[128];
	pattern *p = pattern_compile(source, err, sizeof err);
	if (p == NULL)
		fail_msg("%s does not compile: %s", source, err);
	bool ok = pattern_test(p, text, strlen(text));
	pattern_free(p);
	return ok;
}

static void test_patterns(void **state)
{
	(void)state;
	const char *guest = "^[a-z0-9][a-z0-9-]{0,47}$";
	assert_true(matches(guest, "login-test-1"));
	assert_true(matches(guest, "a"));
	assert_false(matches(guest, ""));
	assert_false(matches(guest, "-a"));
	assert_false(matches(guest, "Login"));
	assert_false(matches(guest, "a_b"));
	assert_false(matches(guest, "a\n"));
	assert_false(matches(guest, "a\xc3\xa9"));
	char max[64];
	memset(max, 'a', 48);
	max[48] = '\0';
	assert_true(matches(guest, max));
	max[48] = 'a';
	max[49] = '\0';
	assert_false(matches(guest, max));
	assert_true(matches("^image-[a-f0-9]{64}$",
	                    "image-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
	assert_false(matches("^image-[a-f0-9]{64}$", "image-0123"));
	assert_true(matches("^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", "ubuntu24.04_x-1"));
	/* \S: anywhere, with ECMAScript's white space. */
	assert_true(matches("\\S", "  x  "));
	assert_false(matches("\\S", ""));
	assert_false(matches("\\S", " \t\r\n\v\f"));
	assert_false(matches("\\S", "\xc2\xa0\xe2\x80\x83\xe3\x80\x80\xef\xbb\xbf\xe2\x80\xa8"));
	assert_true(matches("\\S", "\xc2\xa0\xc3\xa9"));
	char with_nul[] = {' ', '\0', ' '};
	char err[128];
	pattern *p = pattern_compile("\\S", err, sizeof err);
	assert_true(pattern_test(p, with_nul, 3)); /* U+0000 is not white space */
	pattern_free(p);
	/* Other supported forms. */
	assert_true(matches("^a+b?c*$", "aaac"));
	assert_false(matches("^a+b?c*$", "bc"));
	assert_true(matches("^\\d{2,}$", "123"));
	assert_false(matches("^\\d{2,}$", "1"));
	assert_true(matches("^[^/]+$", "a\xc3\xa9"));
	assert_false(matches("^[^/]+$", "a/b"));
	assert_true(matches("^\\w\\.\\-$", "_.-"));
	assert_true(matches("x$", "abx"));
	assert_false(matches("x$", "xab"));
	assert_true(matches("^.$", "\xf0\x9f\x98\x80"));
	/* Outside the subset: refused when compiled. */
	const char *refused[] = {"(a)", "a|b", "a{2", "a{3,2}", "[a",    "a**",
	                         "a+?", "\\b", "\\1", "^a^",    "[z-a]", "\xc3\xa9"};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		pattern *q = pattern_compile(refused[i], err, sizeof err);
		if (q != NULL)
			fail_msg("%s should be refused", refused[i]);
	}
	assert_true(pattern_is_space(0xfeff));
	assert_false(pattern_is_space('x'));
}

/* contract_validate: whole messages. want NULL: valid. */
static void expect_tool(relay_tool tool, const char *args_text, const char *want_prefix)
{
	json_object *args = json(args_text);
	char *problem = contract_validate(tool, args);
	if (want_prefix == NULL && problem != NULL)
		fail_msg("%s %s: unexpected \"%s\"", contract_tool_name(tool), args_text, problem);
	if (want_prefix != NULL &&
	    (problem == NULL || strncmp(problem, want_prefix, strlen(want_prefix)) != 0))
		fail_msg("%s %s: got \"%s\", want \"%s...\"", contract_tool_name(tool), args_text,
		         problem ? problem : "(valid)", want_prefix);
	free(problem);
	json_object_put(args);
}

static void test_tool_messages(void **state)
{
	(void)state;
	expect_tool(TOOL_ACQUIRE, "{}", "Invalid relay_acquire input: /task is required");
	expect_tool(TOOL_ACQUIRE, "{\"task\":\"Login\",\"image\":\"u\",\"extractions\":[]}",
	            "Invalid relay_acquire input: /task must match ^[a-z0-9][a-z0-9-]{0,35}$");
	expect_tool(TOOL_ACQUIRE, "{\"task\":\"login\",\"image\":\"ubuntu2404\",\"extractions\":[]}", NULL);
	expect_tool(TOOL_STAGE, "{\"guest\":\"a-1\",\"browserExecutable\":\"x\"}",
	            "Invalid relay_stage input: /browserExecutable is not a field of relay_stage");
	expect_tool(TOOL_STAGE, "{\"guest\":\"a-1\"}", NULL);
	expect_tool(TOOL_STATUS, "{}", NULL);
	expect_tool(TOOL_STATUS, "{\"verbose\":true}",
	            "Invalid relay_status input: /verbose is not a field of");
	expect_tool(TOOL_SEARCH, "{\"name\":\" \"}", "Invalid relay_search input: /name must match \\S");
	expect_tool(TOOL_SEARCH, "{\"name\":\"chrome\",\"os\":\"windows\"}",
	            "Invalid relay_search input: /os must be one of linux, macos");
	expect_tool(
	    TOOL_SCRIPT,
	    "{\"guest\":\"a-1\",\"language\":\"shell\",\"inline\":true,\"code\":\"x\",\"timeoutMs\":0}",
	    "Invalid relay_script input: /timeoutMs must be at least 1");
	expect_tool(TOOL_IMAGE, "{\"guest\":\"a-1\",\"target\":{\"source\":\"camera\"}}",
	            "Invalid relay_image input: /target/source must be one of");
	expect_tool(TOOL_CONSOLE_OPEN,
	            "{\"guest\":\"a-1\",\"console_id\":\"c\",\"attempt_id\":\"a\",\"userRequested\":\"yes\","
	            "\"reason\":\"r\","
	            "\"expected\":\"e\"}",
	            "Invalid relay_console_open input: /userRequested must be true: opening requires an "
	            "explicit user "
	            "request");
	for (int t = 0; t < TOOL_COUNT; t++)
		if (contract_tool_is_per_guest((relay_tool)t))
			expect_tool((relay_tool)t, "{\"guest\":\"Not_A_Name\"}", "Invalid relay_");
}

static int setup(void **state)
{
	(void)state;
	char err[256];
	return contract_init(err, sizeof err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_types),    cmocka_unit_test(test_objects),
	    cmocka_unit_test(test_strings),  cmocka_unit_test(test_numbers),
	    cmocka_unit_test(test_arrays),   cmocka_unit_test(test_any_of),
	    cmocka_unit_test(test_patterns), cmocka_unit_test(test_tool_messages),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
