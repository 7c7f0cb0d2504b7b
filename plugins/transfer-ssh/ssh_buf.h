/*
 * ssh_buf.h — a growable, always NUL-terminated byte buffer for the
 * transfer-ssh plugin (the core's util/strbuf is not exported to plugins).
 *
 * Allocation failure is sticky: once an append fails, `failed` is set, later
 * appends do nothing, and the owner checks it once at the end.
 */
#ifndef TRANSFER_SSH_BUF_H
#define TRANSFER_SSH_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ssh_buf {
	char *data;      /* NUL-terminated after any append; owned (malloc) */
	size_t len;      /* bytes used, without the NUL */
	size_t capacity; /* bytes allocated */
	bool failed;     /* an allocation failed */
} ssh_buf;

#define SSH_BUF_INIT                                                                                         \
	{                                                                                                    \
		NULL, 0, 0, false                                                                            \
	}

void ssh_buf_free(ssh_buf *b);
void ssh_buf_append(ssh_buf *b, const void *data, size_t len);
void ssh_buf_puts(ssh_buf *b, const char *text);
void ssh_buf_printf(ssh_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends `text` as one POSIX shell word in single quotes: ' becomes '\''. */
void ssh_buf_quote(ssh_buf *b, const char *text);
/* Drops the first `n` bytes. */
void ssh_buf_drop_front(ssh_buf *b, size_t n);
/* The contents ("" when empty); borrowed. */
const char *ssh_buf_str(const ssh_buf *b);

#endif
