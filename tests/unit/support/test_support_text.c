/*
 * The support library's text rules shared by the core, the receiver and
 * machine-service: a byte's escape inside a JSON string
 * (relay_support/json_escape.h, RFC 8259 §7) and the POSIX extended
 * regular-expression match (relay_support/pattern.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "relay_support/json_escape.h"
#include "relay_support/pattern.h"

static void json_escape_of_every_byte(void **state)
{
	(void)state;
	char buf[7];
	assert_string_equal(rs_json_escape('"', buf), "\\\"");
	assert_string_equal(rs_json_escape('\\', buf), "\\\\");
	assert_string_equal(rs_json_escape('\b', buf), "\\b");
	assert_string_equal(rs_json_escape('\f', buf), "\\f");
	assert_string_equal(rs_json_escape('\n', buf), "\\n");
	assert_string_equal(rs_json_escape('\r', buf), "\\r");
	assert_string_equal(rs_json_escape('\t', buf), "\\t");
	assert_string_equal(rs_json_escape(0x00, buf), "\\u0000");
	assert_string_equal(rs_json_escape(0x1f, buf), "\\u001f");
	assert_string_equal(rs_json_escape(0x0b, buf), "\\u000b");
	for (unsigned c = 0x20; c < 0x100; c++) {
		if (c == '"' || c == '\\')
			continue;
		assert_null(
		    rs_json_escape((unsigned char)c, buf)); /* 0x7f and UTF-8 bytes stand as they are */
	}
}

static void pattern_matches_extended_expressions(void **state)
{
	(void)state;
	assert_true(rs_matches("guest-1", "^[a-z0-9][a-z0-9-]{0,62}$"));
	assert_false(rs_matches("-guest", "^[a-z0-9][a-z0-9-]{0,62}$"));
	assert_true(rs_matches("/a/b", "^/[A-Za-z0-9._/-]*$"));
	assert_false(rs_matches("a b", "^[A-Za-z0-9-]+$"));
	assert_true(rs_matches("xabcx", "abc")); /* unanchored: anywhere */
	assert_false(rs_matches("abc", "("));    /* a pattern that does not compile matches nothing */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(json_escape_of_every_byte),
	    cmocka_unit_test(pattern_matches_extended_expressions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
