/*
 * relay_kit/buf.h — the plugins' growable, always NUL-terminated byte
 * buffer (the core's util/strbuf is not exported to plugins).
 *
 * Allocation failure is sticky: once an append fails, `failed` is set, later
 * appends do nothing, and the owner checks it once at the end.
 */
#ifndef RELAY_KIT_BUF_H
#define RELAY_KIT_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rk_buf {
	char *data;      /* NUL-terminated after any append; owned (malloc) */
	size_t len;      /* bytes used, without the NUL */
	size_t capacity; /* bytes allocated */
	bool failed;     /* an allocation failed */
} rk_buf;

#define RK_BUF_INIT                                                                                          \
	{                                                                                                    \
		NULL, 0, 0, false                                                                            \
	}

void rk_buf_free(rk_buf *b);
void rk_buf_append(rk_buf *b, const void *data, size_t len);
void rk_buf_puts(rk_buf *b, const char *text);
void rk_buf_printf(rk_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends `text` as one POSIX shell word in single quotes: ' becomes '\''. */
void rk_buf_quote(rk_buf *b, const char *text);
/* Drops the first `n` bytes. */
void rk_buf_drop_front(rk_buf *b, size_t n);
/* The contents ("" when empty); borrowed. */
const char *rk_buf_str(const rk_buf *b);

#endif
