/*
 * relay_support/utf8.h — UTF-8 validation, repair and cutting (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF).
 *
 * Repair replaces each byte that does not start a valid sequence with
 * U+FFFD (EF BF BD) and goes on with the next byte.
 */
#ifndef RELAY_SUPPORT_UTF8_H
#define RELAY_SUPPORT_UTF8_H

#include <stddef.h>

/* The replacement character U+FFFD, UTF-8 encoded, and its length. */
#define RS_UTF8_REPLACEMENT     "\xEF\xBF\xBD"
#define RS_UTF8_REPLACEMENT_LEN 3

/* Length (1-4) of the valid sequence at text[0..len), 0 when it is invalid,
 * -1 when it is a valid start cut short by the end of the text. len > 0. */
int rs_utf8_sequence(const char *text, size_t len);

/* 1 when text[0..len) is valid UTF-8, else 0. */
int rs_utf8_valid(const char *text, size_t len);

/* rs_utf8_repair flags. */
enum {
	/* A valid start of a sequence cut short by the end of the text is dropped
	 * instead of being replaced (the rest may come in the next chunk). */
	RS_UTF8_DROP_INCOMPLETE_TAIL = 1u << 0,
};

/* Bytes rs_utf8_repair writes at most for len input bytes (3 * len + 1). */
#define RS_UTF8_REPAIR_MAX_BYTES(len) (3 * (len) + 1)

/* Writes text[0..len) repaired into out (room for RS_UTF8_REPAIR_MAX_BYTES
 * (len)), NUL-terminates it and returns its length. */
size_t rs_utf8_repair_into(char *out, const char *text, size_t len, unsigned flags);

/* The same into a malloc'd buffer (the caller frees), its length in
 * *len_out (may be NULL). NULL with errno ENOMEM (or EINVAL for unknown
 * flags or a length whose repair would not fit in size_t). */
char *rs_utf8_repair(const char *text, size_t len, unsigned flags, size_t *len_out);

/* Largest n <= max_bytes (and <= len) that does not cut a sequence. */
size_t rs_utf8_cut(const char *text, size_t len, size_t max_bytes);

/* Smallest n >= start (and <= len) that is not inside a sequence. */
size_t rs_utf8_cut_forward(const char *text, size_t len, size_t start);

/* Number of characters (an invalid byte counts as one). */
size_t rs_utf8_length(const char *text, size_t len);

/* Bytes of the first max_chars characters (an invalid byte counts as one). */
size_t rs_utf8_prefix_bytes(const char *text, size_t len, size_t max_chars);

#endif
