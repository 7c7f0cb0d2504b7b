/* error.c — a plugin's error (relay_kit/error.h). */
#include "relay_kit/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

relay_status rk_err(const relay_host *host, relay_error *err, relay_status code, int sys_errno,
                    unsigned flags, const char *fmt, ...)
{
	if (err == NULL)
		return code;
	char text[RELAY_ERROR_MESSAGE_BYTES];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	if ((flags & RK_ERR_NAME_ERRNO) && sys_errno > 0) {
		const char *why = strerror(sys_errno);
		size_t len = strlen(text);
		if (strstr(text, why) == NULL && len + strlen(why) + 4 < sizeof text)
			snprintf(text + len, sizeof text - len, " (%s)", why);
	}
	return host->error_set(err, code, sys_errno, "%s", text);
}
