#include "util/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void strbuf_init(strbuf *sb)
{
	sb->data = NULL;
	sb->len = 0;
	sb->capacity = 0;
	sb->failed = false;
}

void strbuf_free(strbuf *sb)
{
	free(sb->data);
	strbuf_init(sb);
}

bool strbuf_reserve(strbuf *sb, size_t extra)
{
	if (sb->failed)
		return false;
	if (extra > (size_t)-1 / 2 - sb->len) {
		sb->failed = true;
		return false;
	}
	size_t need = sb->len + extra + 1;
	if (need <= sb->capacity)
		return true;
	size_t capacity = sb->capacity ? sb->capacity : 64;
	while (capacity < need)
		capacity *= 2;
	char *grown = realloc(sb->data, capacity);
	if (grown == NULL) {
		sb->failed = true;
		return false;
	}
	sb->data = grown;
	sb->capacity = capacity;
	return true;
}

void strbuf_append(strbuf *sb, const void *data, size_t len)
{
	if (!strbuf_reserve(sb, len))
		return;
	if (len)
		memcpy(sb->data + sb->len, data, len);
	sb->len += len;
	sb->data[sb->len] = '\0';
}

void strbuf_puts(strbuf *sb, const char *text)
{
	strbuf_append(sb, text, strlen(text));
}

void strbuf_putc(strbuf *sb, char c)
{
	strbuf_append(sb, &c, 1);
}

void strbuf_vprintf(strbuf *sb, const char *fmt, va_list ap)
{
	va_list copy;
	va_copy(copy, ap);
	int need = vsnprintf(NULL, 0, fmt, copy);
	va_end(copy);
	if (need < 0) {
		sb->failed = true;
		return;
	}
	if (!strbuf_reserve(sb, (size_t)need))
		return;
	vsnprintf(sb->data + sb->len, (size_t)need + 1, fmt, ap);
	sb->len += (size_t)need;
}

void strbuf_printf(strbuf *sb, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf_vprintf(sb, fmt, ap);
	va_end(ap);
}

char *strbuf_vformat(const char *fmt, va_list ap)
{
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	return strbuf_detach(&sb, NULL);
}

char *strbuf_format(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *text = strbuf_vformat(fmt, ap);
	va_end(ap);
	return text;
}

void strbuf_reset(strbuf *sb)
{
	sb->len = 0;
	if (sb->data)
		sb->data[0] = '\0';
}

char *strbuf_detach(strbuf *sb, size_t *len_out)
{
	if (sb->failed) {
		strbuf_free(sb);
		return NULL;
	}
	if (sb->data == NULL && !strbuf_reserve(sb, 0))
		return NULL;
	if (sb->len == 0)
		sb->data[0] = '\0';
	char *out = sb->data;
	if (len_out)
		*len_out = sb->len;
	strbuf_init(sb);
	return out;
}

const char *strbuf_str(const strbuf *sb)
{
	return sb->data ? sb->data : "";
}
