#include "util/error.h"

#include <stdio.h>
#include <string.h>

relay_status relay_error_setv(relay_error *err, relay_status code, int sys_errno, const char *fmt, va_list ap)
{
	if (err == NULL)
		return code;
	err->code = code;
	err->sys_errno = sys_errno;
	if (fmt == NULL) {
		err->message[0] = '\0';
		return code;
	}
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	return code;
}

relay_status relay_error_set(relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	relay_error_setv(err, code, sys_errno, fmt, ap);
	va_end(ap);
	return code;
}

void relay_error_clear(relay_error *err)
{
	if (err == NULL)
		return;
	memset(err, 0, sizeof *err);
}
