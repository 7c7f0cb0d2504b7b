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
	int len = vsnprintf(err->message, sizeof err->message, fmt, ap);
	if (len >= (int)sizeof err->message) {
		/* Cut: drop a UTF-8 sequence the cut left incomplete. */
		size_t end = sizeof err->message - 1;
		size_t lead = end;
		while (lead > 0 && ((unsigned char)err->message[lead - 1] & 0xC0) == 0x80)
			lead--;
		if (lead > 0) {
			unsigned char c = (unsigned char)err->message[lead - 1];
			size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
			if (end - (lead - 1) < want)
				err->message[lead - 1] = '\0';
		}
	}
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
