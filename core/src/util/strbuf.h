/*
 * util/strbuf.h — a growable, always NUL-terminated byte buffer.
 *
 * Allocation failure is sticky: once an append fails, `failed` is set, later
 * appends do nothing, and the owner checks strbuf_ok() once at the end.
 */
#ifndef RELAY_UTIL_STRBUF_H
#define RELAY_UTIL_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct strbuf {
	char *data;      /* NUL-terminated when len > 0 or after any append; owned */
	size_t len;      /* bytes used, without the NUL */
	size_t capacity; /* bytes allocated */
	bool failed;     /* an allocation failed */
} strbuf;

#define STRBUF_INIT                                                                                          \
	{                                                                                                    \
		NULL, 0, 0, false                                                                            \
	}

void strbuf_init(strbuf *sb);
void strbuf_free(strbuf *sb);
/* Makes room for `extra` more bytes plus the NUL. */
bool strbuf_reserve(strbuf *sb, size_t extra);
void strbuf_append(strbuf *sb, const void *data, size_t len);
void strbuf_puts(strbuf *sb, const char *text);
void strbuf_putc(strbuf *sb, char c);
void strbuf_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_vprintf(strbuf *sb, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* A new string formatted as printf formats it (free()), or NULL when out of
 * memory: what a buffer, one strbuf_vprintf and strbuf_detach give. */
char *strbuf_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *strbuf_vformat(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
/* Empties the buffer, keeping its memory. */
void strbuf_reset(strbuf *sb);
/* Hands the contents to the caller (free()); the buffer becomes empty.
 * Returns "" allocated when empty, NULL when an allocation failed. */
char *strbuf_detach(strbuf *sb, size_t *len_out);
/* The contents ("" when empty); borrowed. */
const char *strbuf_str(const strbuf *sb);
static inline bool strbuf_ok(const strbuf *sb)
{
	return !sb->failed;
}

#endif
