/*
 * The receiver's JSON (guest/receiver/json.c): the reader parses the
 * request files the host pushes and every record the receiver reads back
 * (journal, receipts, state); the writer writes them.
 *
 * Invariants: what the reader accepts, the writer writes back as text the
 * reader accepts and that serialises identically again (compact and
 * pretty); and the writer never writes a record the reader cannot read:
 * the input's bytes as a string value and as an object key (a hostile
 * capture program's stderr, a file name) are read back as valid UTF-8.
 */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "relay_support/utf8.h"

#include "fuzz.h"

static jv *parse_or_fail(const char *text, const char *what)
{
	rerr err;
	memset(&err, 0, sizeof err);
	jv *v = jv_parse(text, strlen(text), &err);
	if (v == NULL)
		fuzz_fail("the receiver cannot read back %s it wrote: %.200s", what, text);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	rerr err;
	memset(&err, 0, sizeof err);
	jv *value = jv_parse((const char *)data, size, &err);
	if (value != NULL) {
		for (int flags = 0; flags <= JV_PRETTY; flags += JV_PRETTY) {
			char *text = jv_to_text(value, flags);
			jv *again = parse_or_fail(text, "a value");
			char *text2 = jv_to_text(again, flags);
			if (strcmp(text, text2) != 0)
				fuzz_fail("a value does not serialise stably: %.200s", text);
			free(text2);
			jv_free(again);
			free(text);
		}
		jv_free(value);
	}

	/* Arbitrary bytes as a record's string and key. */
	jv *record = jv_object();
	jv_set(record, "stderr", jv_strn((const char *)data, size));
	char *key = malloc(size + 1);
	if (key == NULL)
		fuzz_fail("no memory");
	memcpy(key, data, size);
	key[size] = '\0';
	if (key[0] != '\0' && strcmp(key, "stderr") != 0)
		jv_set(record, key, jv_int(1));
	free(key);
	char *text = jv_to_text(record, 0);
	jv *back = parse_or_fail(text, "a record");
	jv *s = jv_get(back, "stderr");
	if (!jv_is(s, JV_STRING) || !rs_utf8_valid(s->str, s->str_len))
		fuzz_fail("a record's string did not come back as valid UTF-8");
	if (rs_utf8_valid((const char *)data, size) &&
	    (s->str_len != size || memcmp(s->str, data, size) != 0))
		fuzz_fail("a valid UTF-8 string did not come back unchanged");
	jv_free(back);
	free(text);
	jv_free(record);
	return 0;
}
