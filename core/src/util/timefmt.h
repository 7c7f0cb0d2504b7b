/*
 * util/timefmt.h — the relay's time formats (spec/tools.md conventions,
 * spec/guest.md §0). All UTC.
 */
#ifndef RELAY_UTIL_TIMEFMT_H
#define RELAY_UTIL_TIMEFMT_H

#include <stdbool.h>
#include <stdint.h>

/* "2026-09-24T14:11:12Z" (whole seconds). */
void time_format_iso_seconds(int64_t unix_ms, char out[21]);
/* "2026-09-24T14:11:12.345Z" (milliseconds). */
void time_format_iso_millis(int64_t unix_ms, char out[25]);
/* "2026-09-24-14-11-12-Z" (the guest-root and registry stamp). */
void time_format_stamp(int64_t unix_ms, char out[22]);
/* Parses either ISO form above (a "Z" suffix required); false if malformed
 * or NULL. */
bool time_parse_iso(const char *text, int64_t *unix_ms_out);

#endif
