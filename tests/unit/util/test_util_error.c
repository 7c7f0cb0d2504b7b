/*
 * relay_error_set (core/src/util/error.c, behind host->error_set): the
 * message holds RELAY_ERROR_MESSAGE_BYTES (4,096) bytes, so a backend's
 * reason reaches the agent cut to 4,096 bytes (spec spec/tools.md §2.4), and a
 * cut never leaves half a UTF-8 character behind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/error.h"

/* `ascii_len` bytes of 'a' followed by `tail` (a UTF-8 string). */
static char *text_of(size_t ascii_len, const char *tail)
{
	size_t tail_len = strlen(tail);
	char *text = malloc(ascii_len + tail_len + 1);
	assert_non_null(text);
	memset(text, 'a', ascii_len);
	memcpy(text + ascii_len, tail, tail_len + 1);
	return text;
}

static void check(size_t ascii_len, const char *tail, size_t expect_len)
{
	char *text = text_of(ascii_len, tail);
	relay_error err;
	memset(&err, 0x55, sizeof err);
	assert_int_equal(relay_error_set(&err, RELAY_E_REFUSED, 0, "%s", text), RELAY_E_REFUSED);
	assert_int_equal(err.code, RELAY_E_REFUSED);
	assert_int_equal(strlen(err.message), expect_len);
	assert_memory_equal(err.message, text, expect_len);
	free(text);
}

static void test_message_holds_4095_bytes(void **state)
{
	(void)state;
	assert_int_equal(sizeof((relay_error *)0)->message, 4096);
	check(3000, "", 3000); /* well within: whole */
	check(4095, "", 4095); /* exactly full */
	check(6000, "", 4095); /* cut */
}

static void test_cut_keeps_whole_characters(void **state)
{
	(void)state;
	check(4093, "\xc3\xa9", 4095);           /* é ends exactly at the last byte: kept */
	check(4094, "\xc3\xa9", 4094);           /* é would straddle the end: dropped */
	check(4093, "\xe2\x82\xac", 4093);       /* € needs 3, 2 fit: dropped */
	check(4092, "\xe2\x82\xac", 4095);       /* € fits exactly */
	check(4094, "\xf0\x9f\x98\x80", 4094);   /* a 4-byte emoji, 1 byte fits: dropped */
	check(4092, "\xf0\x9f\x98\x80", 4092);   /* 3 of 4 fit: dropped */
	check(4091, "\xf0\x9f\x98\x80zz", 4095); /* fits exactly, the rest is cut after it */
}

static void test_null_format_empties_the_message(void **state)
{
	(void)state;
	relay_error err;
	memset(&err, 'x', sizeof err);
	relay_error_set(&err, RELAY_E_IO, 5, NULL);
	assert_int_equal(err.sys_errno, 5);
	assert_string_equal(err.message, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_message_holds_4095_bytes),
	    cmocka_unit_test(test_cut_keeps_whole_characters),
	    cmocka_unit_test(test_null_format_empties_the_message),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
