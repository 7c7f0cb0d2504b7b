/*
 * relay_support/utf8_locale.h — a UTF-8 character set for the calling
 * thread only, around the calls of a library that converts names through
 * the current locale (libarchive: a pax header's UTF-8 path is converted to
 * the locale's character set, and in the "C" locale of a process that never
 * called setlocale a name such as "café.txt" fails with "Pathname can't be
 * converted from UTF-8 to current locale", whatever LANG says).
 *
 * uselocale(3) changes the thread's locale, never the process's: other
 * threads and the relay's own output are untouched.
 *
 *     rs_utf8_locale_scope scope;
 *     rs_utf8_locale_enter(&scope);    // names are UTF-8 from here on this thread
 *     ... archive_read_next_header ...
 *     rs_utf8_locale_leave(&scope);    // the thread's locale as it was
 */
#ifndef RELAY_SUPPORT_UTF8_LOCALE_H
#define RELAY_SUPPORT_UTF8_LOCALE_H

/* Opaque to the caller (locale_t values). */
typedef struct rs_utf8_locale_scope {
	void *previous; /* the thread's locale before enter; NULL when nothing was changed */
	void *utf8;     /* the locale made by enter; NULL when none */
} rs_utf8_locale_scope;

/* Makes the calling thread's character set UTF-8 (C.UTF-8, else
 * en_US.UTF-8). 0, or -1 when this system has no UTF-8 locale (the
 * thread's locale is then unchanged; leave is still safe). */
int rs_utf8_locale_enter(rs_utf8_locale_scope *scope);

/* Restores the thread's locale of the matching enter and frees the one it
 * made. Safe after a failed enter, and on a zeroed scope. */
void rs_utf8_locale_leave(rs_utf8_locale_scope *scope);

#endif
