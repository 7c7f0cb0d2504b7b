/*
 * json_escape.c — relay_support/json_escape.h.
 */
#include "relay_support/json_escape.h"

#include <stddef.h>

const char *rs_json_escape(unsigned char c, char buf[7])
{
	static const char hex[] = "0123456789abcdef";
	switch (c) {
	case '"': return "\\\"";
	case '\\': return "\\\\";
	case '\b': return "\\b";
	case '\f': return "\\f";
	case '\n': return "\\n";
	case '\r': return "\\r";
	case '\t': return "\\t";
	default: break;
	}
	if (c >= 0x20)
		return NULL;
	buf[0] = '\\';
	buf[1] = 'u';
	buf[2] = '0';
	buf[3] = '0';
	buf[4] = hex[c >> 4];
	buf[5] = hex[c & 0xf];
	buf[6] = '\0';
	return buf;
}
