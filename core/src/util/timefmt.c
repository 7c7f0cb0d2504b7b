#include "util/timefmt.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static void split(int64_t unix_ms, struct tm *tm, int *millis)
{
	int64_t secs = unix_ms / 1000;
	int64_t ms = unix_ms % 1000;
	if (ms < 0) {
		ms += 1000;
		secs -= 1;
	}
	time_t t = (time_t)secs;
	gmtime_r(&t, tm);
	*millis = (int)ms;
}

/* unix_ms as "YYYY-MM-DD<t>hh<c>mm<c>ss", then ".mmm" when `millis`, then
 * `end`: out_len - 1 characters and the NUL (the year kept to four digits). */
static void format_utc(int64_t unix_ms, char t, char c, bool millis, const char *end, char *out,
                       size_t out_len)
{
	struct tm tm;
	int ms;
	split(unix_ms, &tm, &ms);
	char tmp[64];
	int n = snprintf(tmp, sizeof tmp, "%04d-%02d-%02d%c%02d%c%02d%c%02d", (tm.tm_year + 1900) % 10000,
	                 tm.tm_mon + 1, tm.tm_mday, t, tm.tm_hour, c, tm.tm_min, c, tm.tm_sec);
	if (millis)
		n += snprintf(tmp + n, sizeof tmp - (size_t)n, ".%03d", ms);
	snprintf(tmp + n, sizeof tmp - (size_t)n, "%s", end);
	memcpy(out, tmp, out_len - 1);
	out[out_len - 1] = 0;
}

void time_format_iso_seconds(int64_t unix_ms, char out[21])
{
	format_utc(unix_ms, 'T', ':', false, "Z", out, 21);
}

void time_format_iso_millis(int64_t unix_ms, char out[25])
{
	format_utc(unix_ms, 'T', ':', true, "Z", out, 25);
}

void time_format_stamp(int64_t unix_ms, char out[22])
{
	format_utc(unix_ms, '-', '-', false, "-Z", out, 22);
}

bool time_parse_iso(const char *text, int64_t *unix_ms_out)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	int ms = 0;
	if (text == NULL) /* a missing member of a guest's record */
		return false;
	size_t len = strlen(text);
	int consumed = 0;
	if (len == 20) {
		if (sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
		           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6 ||
		    consumed != 20)
			return false;
	} else if (len == 24) {
		if (sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
		           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms, &consumed) != 7 ||
		    consumed != 24)
			return false;
	} else {
		return false;
	}
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	time_t t = timegm(&tm);
	*unix_ms_out = (int64_t)t * 1000 + ms;
	return true;
}
