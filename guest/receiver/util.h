/*
 * receiver/util.h — small helpers of the guest receiver: error text, a
 * growable byte buffer, checked allocation, clocks, timestamps, random hex
 * and UTF-8 handling. C99 + POSIX, libc only.
 */
#ifndef RECEIVER_UTIL_H
#define RECEIVER_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "../receiver_protocol.h"

#define RECEIVER_NAME RECEIVER_PROGRAM_NAME
/* The build passes the project's version (guest/receiver.cmake), so the
 * receiver and the relay that stages it cannot drift apart. */
#ifndef RECEIVER_VERSION
#define RECEIVER_VERSION "0.1.0"
#endif
#define RECEIVER_PROTOCOL RECEIVER_PROTOCOL_VERSION
#ifndef RECEIVER_PLATFORM
#define RECEIVER_PLATFORM "linux-unknown"
#endif

/* Exit statuses (spec/guest.md §5.3). */
#define EXIT_DONE     RECEIVER_EXIT_DONE
#define EXIT_USAGE    RECEIVER_EXIT_USAGE
#define EXIT_INTERNAL RECEIVER_EXIT_INTERNAL

/* One failure description, filled by the function that failed. */
typedef struct rerr {
	char msg[1024];
} rerr;

/* snprintf that returns nothing: the text is cut to dst_len - 1 bytes. */
void text_format(char *dst, size_t dst_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void err_set(rerr *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with "<prefix>: ". */
void err_prefix(rerr *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocation that never returns NULL: on exhaustion the process prints an
 * {"error"} frame and exits EXIT_INTERNAL. */
void *xmalloc(size_t size);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *text);
char *xstrndup(const char *text, size_t len);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Growable byte buffer, always NUL-terminated after data[len]. */
typedef struct buf {
	char *data;
	size_t len;
	size_t cap;
} buf;

void buf_init(buf *b);
void buf_free(buf *b);
void buf_append(buf *b, const void *data, size_t len);
void buf_puts(buf *b, const char *text);
void buf_putc(buf *b, char c);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the data over to the caller (free()); the buffer becomes empty. */
char *buf_steal(buf *b);

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t mono_ms(void);
/* Current UTC time as YYYY-MM-DDTHH:MM:SS.mmmZ (25 bytes with NUL). */
void timestamp_now(char out[32]);
/* A given epoch time in milliseconds in the same format. */
void timestamp_from_ms(int64_t epoch_ms, char out[32]);
/* Sleeps for ms milliseconds (restarting after signals). */
void sleep_ms(int64_t ms);

/* Fills out with 2*nbytes lowercase hex digits of randomness (+ NUL). */
int random_hex(char *out, size_t nbytes, rerr *err);

/* UTF-8 (validity, cutting, counting): relay_support/utf8.h. */
/* Appends text to out with invalid sequences replaced by U+FFFD; an
 * incomplete but valid-looking sequence at the very end is dropped when
 * drop_incomplete_tail is set (output cut in the middle of a character). */
void utf8_sanitize(buf *out, const char *text, size_t len, int drop_incomplete_tail);

/* Pattern checks of spec/guest.md §0. */
int id_valid(const char *text);           /* ^[A-Za-z0-9][A-Za-z0-9_.-]{0,119}$ */
int execution_id_valid(const char *text); /* ^[A-Za-z0-9][A-Za-z0-9_.-]{0,159}$ */

#endif
