/*
 * util/timefmt.c: the relay's three time formats (spec/guest.md §0) byte for
 * byte, before 1970 as after, and time_parse_iso() reading back both ISO
 * forms.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/timefmt.h"

/* 2026-09-24T14:11:12.345Z */
#define SAMPLE_MS INT64_C(1790259072345)

static void test_formats(void **state)
{
	(void)state;
	char iso_s[21], iso_ms[25], stamp[22];
	memset(iso_s, 'x', sizeof iso_s);
	memset(iso_ms, 'x', sizeof iso_ms);
	memset(stamp, 'x', sizeof stamp);
	time_format_iso_seconds(SAMPLE_MS, iso_s);
	time_format_iso_millis(SAMPLE_MS, iso_ms);
	time_format_stamp(SAMPLE_MS, stamp);
	assert_string_equal(iso_s, "2026-09-24T14:11:12Z");
	assert_string_equal(iso_ms, "2026-09-24T14:11:12.345Z");
	assert_string_equal(stamp, "2026-09-24-14-11-12-Z");
}

static void test_before_1970_and_whole_seconds(void **state)
{
	(void)state;
	char iso_ms[25];
	time_format_iso_millis(-1, iso_ms);
	assert_string_equal(iso_ms, "1969-12-31T23:59:59.999Z");
	time_format_iso_millis(0, iso_ms);
	assert_string_equal(iso_ms, "1970-01-01T00:00:00.000Z");
	char iso_s[21];
	time_format_iso_seconds(999, iso_s);
	assert_string_equal(iso_s, "1970-01-01T00:00:00Z");
}

static void test_parse_round_trip(void **state)
{
	(void)state;
	int64_t ms = 0;
	assert_true(time_parse_iso("2026-09-24T14:11:12.345Z", &ms));
	assert_int_equal(ms, SAMPLE_MS);
	assert_true(time_parse_iso("2026-09-24T14:11:12Z", &ms));
	assert_int_equal(ms, SAMPLE_MS - 345);
	assert_false(time_parse_iso("2026-09-24-14-11-12-Z", &ms));
	assert_false(time_parse_iso("2026-09-24T14:11:12.345", &ms));
	assert_false(time_parse_iso(NULL, &ms));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_formats),
	    cmocka_unit_test(test_before_1970_and_whole_seconds),
	    cmocka_unit_test(test_parse_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
