#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "relay_support/rs_error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int rs_error_set(rs_error *err, int errnum, const char *fmt, ...)
{
	if (err != NULL) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof err->message, fmt, ap);
		va_end(ap);
		err->errnum = errnum;
	}
	errno = errnum;
	return -1;
}
