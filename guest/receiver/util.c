/*
 * receiver/util.c — see util.h.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "relay_support/utf8.h"

void text_format(char *dst, size_t dst_len, const char *fmt, ...)
{
	va_list ap;
	if (!dst || !dst_len)
		return;
	va_start(ap, fmt);
	vsnprintf(dst, dst_len, fmt, ap);
	va_end(ap);
}

void err_set(rerr *err, const char *fmt, ...)
{
	va_list ap;
	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
}

void err_prefix(rerr *err, const char *fmt, ...)
{
	char prefix[512];
	char old[sizeof(err->msg)];
	va_list ap;
	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	text_format(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
}

static void out_of_memory(void)
{
	static const char frame[] = "{\"error\":\"out of memory\"}\n";
	static const char note[] = "receiver: out of memory\n";
	ssize_t ignored = write(STDERR_FILENO, note, sizeof(note) - 1);
	ignored = write(STDOUT_FILENO, frame, sizeof(frame) - 1);
	(void)ignored;
	_exit(EXIT_INTERNAL);
}

void *xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);
	if (!p)
		out_of_memory();
	return p;
}

void *xcalloc(size_t count, size_t size)
{
	void *p = calloc(count ? count : 1, size ? size : 1);
	if (!p)
		out_of_memory();
	return p;
}

void *xrealloc(void *ptr, size_t size)
{
	void *p = realloc(ptr, size ? size : 1);
	if (!p)
		out_of_memory();
	return p;
}

char *xstrdup(const char *text)
{
	return xstrndup(text, strlen(text));
}

char *xstrndup(const char *text, size_t len)
{
	char *p = xmalloc(len + 1);
	memcpy(p, text, len);
	p[len] = '\0';
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	buf b;
	va_list ap;
	buf_init(&b);
	va_start(ap, fmt);
	{
		va_list ap2;
		int n;
		va_copy(ap2, ap);
		n = vsnprintf(NULL, 0, fmt, ap2);
		va_end(ap2);
		if (n < 0)
			out_of_memory();
		b.data = xrealloc(b.data, (size_t)n + 1);
		b.cap = (size_t)n + 1;
		vsnprintf(b.data, (size_t)n + 1, fmt, ap);
		b.len = (size_t)n;
	}
	va_end(ap);
	return b.data;
}

void buf_init(buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void buf_free(buf *b)
{
	free(b->data);
	buf_init(b);
}

static void buf_reserve(buf *b, size_t extra)
{
	size_t need = b->len + extra + 1;
	size_t cap;
	if (need <= b->cap)
		return;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

void buf_append(buf *b, const void *data, size_t len)
{
	buf_reserve(b, len);
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
}

void buf_puts(buf *b, const char *text)
{
	buf_append(b, text, strlen(text));
}

void buf_putc(buf *b, char c)
{
	buf_append(b, &c, 1);
}

void buf_printf(buf *b, const char *fmt, ...)
{
	va_list ap, ap2;
	int n;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n > 0) {
		buf_reserve(b, (size_t)n);
		vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
		b->len += (size_t)n;
	}
	va_end(ap);
}

char *buf_steal(buf *b)
{
	char *p;
	if (!b->data)
		buf_reserve(b, 0);
	p = b->data;
	buf_init(b);
	return p;
}

int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void timestamp_from_ms(int64_t epoch_ms, char out[32])
{
	time_t secs = (time_t)(epoch_ms / 1000);
	int ms = (int)(epoch_ms % 1000);
	struct tm tm;
	if (ms < 0) {
		ms += 1000;
		secs -= 1;
	}
	gmtime_r(&secs, &tm);
	text_format(out, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
	            tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

void timestamp_now(char out[32])
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	timestamp_from_ms((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, out);
}

void sleep_ms(int64_t ms)
{
	struct timespec ts, rem;
	if (ms <= 0)
		return;
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)(ms % 1000) * 1000000L;
	while (nanosleep(&ts, &rem) != 0 && errno == EINTR)
		ts = rem;
}

static int random_bytes(unsigned char *out, size_t n, rerr *err)
{
	size_t got = 0;
#if defined(__linux__) && defined(SYS_getrandom)
	while (got < n) {
		long r = syscall(SYS_getrandom, out + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)r;
	}
	if (got == n)
		return 0;
#endif
	{
		int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			err_set(err, "cannot read randomness from /dev/urandom: %s", strerror(errno));
			return -1;
		}
		while (got < n) {
			ssize_t r = read(fd, out + got, n - got);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				close(fd);
				err_set(err, "cannot read randomness from /dev/urandom");
				return -1;
			}
			got += (size_t)r;
		}
		close(fd);
	}
	return 0;
}

int random_hex(char *out, size_t nbytes, rerr *err)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char raw[64];
	size_t i;
	if (nbytes > sizeof(raw)) {
		err_set(err, "random_hex: %zu bytes requested, at most %zu", nbytes, sizeof(raw));
		return -1;
	}
	if (random_bytes(raw, nbytes, err) != 0)
		return -1;
	for (i = 0; i < nbytes; i++) {
		out[2 * i] = digits[raw[i] >> 4];
		out[2 * i + 1] = digits[raw[i] & 15];
	}
	out[2 * nbytes] = '\0';
	return 0;
}

void utf8_sanitize(buf *out, const char *text, size_t len, int drop_incomplete_tail)
{
	if (len > ((size_t)-1 - out->len - 2) / 3)
		out_of_memory();
	buf_reserve(out, 3 * len); /* + the NUL: RS_UTF8_REPAIR_MAX_BYTES(len) */
	out->len += rs_utf8_repair_into(out->data + out->len, text, len,
	                                drop_incomplete_tail ? RS_UTF8_DROP_INCOMPLETE_TAIL : 0);
}

static int id_pattern(const char *text, size_t max_len)
{
	size_t i, len = strlen(text);
	if (len == 0 || len > max_len)
		return 0;
	for (i = 0; i < len; i++) {
		char c = text[i];
		int alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (i == 0 && !alnum)
			return 0;
		if (!alnum && c != '_' && c != '.' && c != '-')
			return 0;
	}
	return 1;
}

int id_valid(const char *text)
{
	return text && id_pattern(text, 120);
}

int execution_id_valid(const char *text)
{
	return text && id_pattern(text, 160);
}
