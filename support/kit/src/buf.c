/* buf.c — the growable buffer (relay_kit/buf.h). */
#include "relay_kit/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rk_buf_free(rk_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->capacity = 0;
	b->failed = false;
}

static bool reserve(rk_buf *b, size_t extra)
{
	if (b->failed)
		return false;
	if (extra > (size_t)-1 / 2 - b->len) {
		b->failed = true;
		return false;
	}
	size_t need = b->len + extra + 1;
	if (need <= b->capacity)
		return true;
	size_t cap = b->capacity ? b->capacity : 256;
	while (cap < need)
		cap *= 2;
	char *grown = realloc(b->data, cap);
	if (grown == NULL) {
		b->failed = true;
		return false;
	}
	b->data = grown;
	b->capacity = cap;
	return true;
}

void rk_buf_append(rk_buf *b, const void *data, size_t len)
{
	if (!reserve(b, len))
		return;
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
}

void rk_buf_puts(rk_buf *b, const char *text)
{
	rk_buf_append(b, text, strlen(text));
}

void rk_buf_printf(rk_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char small[256];
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->failed = true;
		return;
	}
	if ((size_t)n < sizeof small) {
		rk_buf_append(b, small, (size_t)n);
		return;
	}
	if (!reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void rk_buf_quote(rk_buf *b, const char *text)
{
	rk_buf_append(b, "'", 1);
	for (const char *p = text; *p; p++) {
		if (*p == '\'')
			rk_buf_append(b, "'\\''", 4);
		else
			rk_buf_append(b, p, 1);
	}
	rk_buf_append(b, "'", 1);
}

void rk_buf_drop_front(rk_buf *b, size_t n)
{
	if (n >= b->len) {
		b->len = 0;
	} else {
		memmove(b->data, b->data + n, b->len - n);
		b->len -= n;
	}
	if (b->data)
		b->data[b->len] = '\0';
}

const char *rk_buf_str(const rk_buf *b)
{
	return b->data ? b->data : "";
}
