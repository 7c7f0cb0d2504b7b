/*
 * relay_support/rs_error.h — how the private support library reports failure.
 *
 * Every function that can fail returns 0 on success and -1 on failure with
 * errno set; when the caller passes an rs_error, it also receives errno and
 * a message naming the path and the reason ("cannot remove /x/y: Permission
 * denied"), ready for the caller's own error type (relay_error in the core,
 * rerr in the receiver, host->log in a plugin). err may be NULL. After a
 * failure out-parameters are untouched unless the function says otherwise.
 *
 * The library is C99 + POSIX, libc only, built with hidden visibility and
 * position-independent code, so plugins, the static guest programs, the test
 * fakes and the core can all link it without exporting anything.
 */
#ifndef RELAY_SUPPORT_RS_ERROR_H
#define RELAY_SUPPORT_RS_ERROR_H

#include <stddef.h>

/* Size of rs_error.message, NUL included. */
#define RS_ERROR_MESSAGE_BYTES 512

typedef struct rs_error {
	int errnum;                           /* errno of the failure, 0 when none applies */
	char message[RS_ERROR_MESSAGE_BYTES]; /* NUL-terminated, cut to fit */
} rs_error;

/* Fills err (when not NULL) with errnum and the formatted message, sets
 * errno = errnum and returns -1, so a failing function can `return
 * rs_error_set(...)`. */
int rs_error_set(rs_error *err, int errnum, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
