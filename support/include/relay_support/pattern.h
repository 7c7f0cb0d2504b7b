/*
 * relay_support/pattern.h — whether a string matches a POSIX extended
 * regular expression, for the settings, profiles and plugin options that
 * spell their rules as patterns. Host programs only: the guest programs are
 * not built with it (RELAY_SUPPORT_SOURCES), so regcomp stays out of the
 * static receivers.
 */
#ifndef RELAY_SUPPORT_PATTERN_H
#define RELAY_SUPPORT_PATTERN_H

#include <stdbool.h>

/* True when `text` matches the extended regular expression `pattern`
 * (anchor it with ^ and $ to match the whole text); false when it does not
 * or the pattern does not compile. */
bool rs_matches(const char *text, const char *pattern);

#endif
