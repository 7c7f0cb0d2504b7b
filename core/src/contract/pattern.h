/*
 * contract/pattern.h — the regular expressions of the tool schemas, with
 * ECMAScript meaning (JSON Schema's `pattern` is an ECMA-262 expression).
 *
 * Only the subset the contract uses is accepted, and anything else is
 * refused when the pattern is compiled (so a new pattern cannot silently
 * mean something else here): the anchors ^ and $ (at the start and end
 * only), literal characters (escaped where ECMAScript needs it), the classes
 * [...] and [^...] with ranges, the escapes \s \S \d \D \w \W, and the
 * quantifiers ? * + {m} {m,} {m,n}. Matching works on the code points of
 * valid UTF-8; \s is ECMAScript's white space (Unicode spaces and U+FEFF
 * included), which POSIX regcomp does not know.
 */
#ifndef RELAY_CONTRACT_PATTERN_H
#define RELAY_CONTRACT_PATTERN_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pattern pattern;

/* Compiles `source`. NULL with a reason in errbuf when it is outside the
 * supported subset or out of memory. */
pattern *pattern_compile(const char *source, char *errbuf, size_t errlen);

/* True when `text` (valid UTF-8, len bytes, may hold NUL) matches: anywhere
 * unless the pattern is anchored, as in ECMAScript RegExp.test(). */
bool pattern_test(const pattern *p, const char *text, size_t len);

void pattern_free(pattern *p);

/* ECMAScript white space and line terminators (what \s matches). */
bool pattern_is_space(unsigned long code_point);

#endif
