#include "relay_support/utf8.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int rs_utf8_sequence(const char *text, size_t len)
{
	const unsigned char *s = (const unsigned char *)text;
	unsigned c = s[0];
	unsigned lo = 0x80, hi = 0xBF;
	int need, i;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		need = 1;
	} else if (c == 0xE0) {
		need = 2;
		lo = 0xA0; /* no overlong three-byte forms */
	} else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
		need = 2;
	} else if (c == 0xED) {
		need = 2;
		hi = 0x9F; /* no surrogates */
	} else if (c == 0xF0) {
		need = 3;
		lo = 0x90; /* no overlong four-byte forms */
	} else if (c >= 0xF1 && c <= 0xF3) {
		need = 3;
	} else if (c == 0xF4) {
		need = 3;
		hi = 0x8F; /* nothing above U+10FFFF */
	} else {
		return 0;
	}
	for (i = 1; i <= need; i++) {
		unsigned b;
		if ((size_t)i >= len)
			return -1;
		b = s[i];
		if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
			return 0;
	}
	return need + 1;
}

int rs_utf8_valid(const char *text, size_t len)
{
	size_t i = 0;
	while (i < len) {
		/* ASCII, the bulk of every message, eight bytes at a time (memcpy:
		 * no alignment assumed). */
		while (len - i >= 8) {
			uint64_t word;
			memcpy(&word, text + i, sizeof word);
			if (word & UINT64_C(0x8080808080808080))
				break;
			i += 8;
		}
		if (i >= len)
			break;
		if ((unsigned char)text[i] < 0x80) {
			i++;
			continue;
		}
		int n = rs_utf8_sequence(text + i, len - i);
		if (n <= 0)
			return 0;
		i += (size_t)n;
	}
	return 1;
}

size_t rs_utf8_repair_into(char *out, const char *text, size_t len, unsigned flags)
{
	size_t i = 0, o = 0, run = 0;
	while (i < len) {
		int n = rs_utf8_sequence(text + i, len - i);
		if (n > 0) {
			i += (size_t)n;
			continue;
		}
		memcpy(out + o, text + run, i - run);
		o += i - run;
		if (n < 0 && (flags & RS_UTF8_DROP_INCOMPLETE_TAIL)) {
			run = i = len;
			break;
		}
		memcpy(out + o, RS_UTF8_REPLACEMENT, RS_UTF8_REPLACEMENT_LEN);
		o += RS_UTF8_REPLACEMENT_LEN;
		run = ++i;
	}
	memcpy(out + o, text + run, len - run);
	o += len - run;
	out[o] = '\0';
	return o;
}

char *rs_utf8_repair(const char *text, size_t len, unsigned flags, size_t *len_out)
{
	char *out;
	size_t n;
	if ((flags & ~(unsigned)RS_UTF8_DROP_INCOMPLETE_TAIL) || len > (SIZE_MAX - 1) / 3) {
		errno = EINVAL;
		return NULL;
	}
	out = malloc(RS_UTF8_REPAIR_MAX_BYTES(len));
	if (out == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	n = rs_utf8_repair_into(out, text, len, flags);
	if (len_out)
		*len_out = n;
	return out;
}

size_t rs_utf8_cut(const char *text, size_t len, size_t max_bytes)
{
	size_t n;
	if (len <= max_bytes)
		return len;
	n = max_bytes;
	while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80)
		n--;
	return n;
}

size_t rs_utf8_cut_forward(const char *text, size_t len, size_t start)
{
	size_t n = start;
	while (n < len && ((unsigned char)text[n] & 0xC0) == 0x80)
		n++;
	return n;
}

size_t rs_utf8_length(const char *text, size_t len)
{
	size_t i = 0, count = 0;
	while (i < len) {
		int n = rs_utf8_sequence(text + i, len - i);
		i += n > 0 ? (size_t)n : 1;
		count++;
	}
	return count;
}

size_t rs_utf8_prefix_bytes(const char *text, size_t len, size_t max_chars)
{
	size_t i = 0, count = 0;
	while (i < len && count < max_chars) {
		int n = rs_utf8_sequence(text + i, len - i);
		i += n > 0 ? (size_t)n : 1;
		count++;
	}
	return i;
}
