/*
 * pattern.c — relay_support/pattern.h over POSIX <regex.h>.
 */
#include "relay_support/pattern.h"

#include <regex.h>
#include <stddef.h>

bool rs_matches(const char *text, const char *pattern)
{
	regex_t re;
	if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
		return false;
	bool ok = regexec(&re, text, 0, NULL, 0) == 0;
	regfree(&re);
	return ok;
}
