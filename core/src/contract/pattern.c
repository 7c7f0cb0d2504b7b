/*
 * A small backtracking matcher for the schema patterns (see pattern.h).
 * A compiled pattern is a sequence of items, each a set of code points with
 * a repetition range; the sets are ASCII bitmaps plus flags for the classes
 * that reach beyond ASCII.
 */
#include "contract/pattern.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATTERN_MAX_ITEMS 64
#define REPEAT_UNBOUNDED  UINT_MAX

/* Non-ASCII members of a set. */
#define WIDE_NONE     0u
#define WIDE_SPACE    1u /* the non-ASCII ECMAScript spaces */
#define WIDE_NONSPACE 2u /* every non-ASCII code point that is not a space */

typedef struct item {
	uint64_t ascii[2]; /* bit c: code point c (< 128) is in the set */
	unsigned wide;     /* WIDE_* bits */
	bool negated;      /* the set is everything not described above */
	unsigned min;
	unsigned max;
} item;

struct pattern {
	bool anchored_start;
	bool anchored_end;
	size_t count;
	item items[PATTERN_MAX_ITEMS];
};

bool pattern_is_space(unsigned long cp)
{
	return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0xa0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
	       cp == 0x205f || cp == 0x3000 || cp == 0xfeff;
}

static void set_add(item *it, unsigned c)
{
	it->ascii[c >> 6] |= (uint64_t)1 << (c & 63);
}

static void set_add_range(item *it, unsigned lo, unsigned hi)
{
	for (unsigned c = lo; c <= hi; c++)
		set_add(it, c);
}

static void set_add_space(item *it)
{
	set_add_range(it, 0x09, 0x0d);
	set_add(it, ' ');
	it->wide |= WIDE_SPACE;
}

static void set_add_nonspace(item *it)
{
	for (unsigned c = 0; c < 128; c++)
		if (!pattern_is_space(c))
			set_add(it, c);
	it->wide |= WIDE_NONSPACE;
}

static void set_add_word(item *it)
{
	set_add_range(it, 'a', 'z');
	set_add_range(it, 'A', 'Z');
	set_add_range(it, '0', '9');
	set_add(it, '_');
}

static void set_add_nonword(item *it)
{
	item word = {0};
	set_add_word(&word);
	for (unsigned c = 0; c < 128; c++)
		if (!(word.ascii[c >> 6] & ((uint64_t)1 << (c & 63))))
			set_add(it, c);
	it->wide |= WIDE_SPACE | WIDE_NONSPACE;
}

static void set_add_nondigit(item *it)
{
	for (unsigned c = 0; c < 128; c++)
		if (c < '0' || c > '9')
			set_add(it, c);
	it->wide |= WIDE_SPACE | WIDE_NONSPACE;
}

static bool item_has(const item *it, unsigned long cp)
{
	bool in;
	if (cp < 128)
		in = (it->ascii[cp >> 6] >> (cp & 63)) & 1;
	else
		in = (it->wide & (pattern_is_space(cp) ? WIDE_SPACE : WIDE_NONSPACE)) != 0;
	return in != it->negated;
}

/* An escape after a backslash, inside or outside a class. Returns false
 * when unsupported. */
static bool add_escape(item *it, char c, unsigned *literal_out)
{
	*literal_out = UINT_MAX;
	switch (c) {
	case 's': set_add_space(it); return true;
	case 'S': set_add_nonspace(it); return true;
	case 'd': set_add_range(it, '0', '9'); return true;
	case 'D': set_add_nondigit(it); return true;
	case 'w': set_add_word(it); return true;
	case 'W': set_add_nonword(it); return true;
	default:
		/* Escaped punctuation stands for itself; letters and digits would
		 * be other escapes (\b, \n, \1 ...), which are not supported. */
		if ((unsigned char)c < 128 && c > ' ' && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') &&
		    !(c >= '0' && c <= '9')) {
			set_add(it, (unsigned char)c);
			*literal_out = (unsigned char)c;
			return true;
		}
		return false;
	}
}

static bool parse_class(const char **src, item *it, char *errbuf, size_t errlen)
{
	const char *s = *src + 1; /* after [ */
	if (*s == '^') {
		it->negated = true;
		s++;
	}
	bool first = true;
	while (*s && (*s != ']' || first)) {
		first = false;
		unsigned lo;
		if (*s == '\\') {
			if (!add_escape(it, s[1], &lo)) {
				snprintf(errbuf, errlen, "unsupported escape \\%c in a class", s[1]);
				return false;
			}
			s += 2;
		} else {
			if ((unsigned char)*s >= 128) {
				snprintf(errbuf, errlen, "non-ASCII characters in a class are not supported");
				return false;
			}
			lo = (unsigned char)*s++;
			set_add(it, lo);
		}
		if (lo != UINT_MAX && s[0] == '-' && s[1] && s[1] != ']') {
			unsigned hi;
			if (s[1] == '\\') {
				item scratch = {0};
				if (!add_escape(&scratch, s[2], &hi) || hi == UINT_MAX) {
					snprintf(errbuf, errlen, "a class range must end in a character");
					return false;
				}
				s += 3;
			} else {
				if ((unsigned char)s[1] >= 128) {
					snprintf(errbuf, errlen,
					         "non-ASCII characters in a class are not supported");
					return false;
				}
				hi = (unsigned char)s[1];
				s += 2;
			}
			if (hi < lo) {
				snprintf(errbuf, errlen, "class range out of order");
				return false;
			}
			set_add_range(it, lo, hi);
		}
	}
	if (*s != ']') {
		snprintf(errbuf, errlen, "unterminated class");
		return false;
	}
	*src = s + 1;
	return true;
}

static bool parse_count(const char **src, unsigned *out)
{
	const char *s = *src;
	if (*s < '0' || *s > '9')
		return false;
	unsigned long value = 0;
	while (*s >= '0' && *s <= '9') {
		value = value * 10 + (unsigned long)(*s - '0');
		if (value > 100000)
			return false;
		s++;
	}
	*out = (unsigned)value;
	*src = s;
	return true;
}

pattern *pattern_compile(const char *source, char *errbuf, size_t errlen)
{
	pattern *p = calloc(1, sizeof *p);
	if (p == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	const char *s = source;
	if (*s == '^') {
		p->anchored_start = true;
		s++;
	}
	while (*s) {
		if (s[0] == '$' && s[1] == '\0') {
			p->anchored_end = true;
			break;
		}
		if (p->count == PATTERN_MAX_ITEMS) {
			snprintf(errbuf, errlen, "pattern too long");
			goto fail;
		}
		item *it = &p->items[p->count++];
		it->min = it->max = 1;
		unsigned ignored;
		switch (*s) {
		case '[':
			if (!parse_class(&s, it, errbuf, errlen))
				goto fail;
			break;
		case '\\':
			if (!add_escape(it, s[1], &ignored)) {
				snprintf(errbuf, errlen, "unsupported escape \\%c", s[1] ? s[1] : '?');
				goto fail;
			}
			s += 2;
			break;
		case '.':
			/* Any code point except line terminators. */
			it->negated = true;
			set_add(it, '\n');
			set_add(it, '\r');
			s++;
			break;
		case '(':
		case ')':
		case '|':
		case '^':
		case '$':
		case '?':
		case '*':
		case '+':
		case '{':
		case '}':
		case ']': snprintf(errbuf, errlen, "unsupported pattern syntax at '%c'", *s); goto fail;
		default:
			if ((unsigned char)*s >= 128) {
				snprintf(errbuf, errlen, "non-ASCII literal characters are not supported");
				goto fail;
			}
			set_add(it, (unsigned char)*s);
			s++;
			break;
		}
		/* A quantifier. */
		if (*s == '?') {
			it->min = 0;
			it->max = 1;
			s++;
		} else if (*s == '*') {
			it->min = 0;
			it->max = REPEAT_UNBOUNDED;
			s++;
		} else if (*s == '+') {
			it->min = 1;
			it->max = REPEAT_UNBOUNDED;
			s++;
		} else if (*s == '{') {
			s++;
			if (!parse_count(&s, &it->min)) {
				snprintf(errbuf, errlen, "malformed {m,n} quantifier");
				goto fail;
			}
			it->max = it->min;
			if (*s == ',') {
				s++;
				if (*s == '}')
					it->max = REPEAT_UNBOUNDED;
				else if (!parse_count(&s, &it->max) || it->max < it->min) {
					snprintf(errbuf, errlen, "malformed {m,n} quantifier");
					goto fail;
				}
			}
			if (*s != '}') {
				snprintf(errbuf, errlen, "malformed {m,n} quantifier");
				goto fail;
			}
			s++;
		}
		if (*s == '?' || *s == '*' || *s == '+' || *s == '{') {
			snprintf(errbuf, errlen, "lazy or stacked quantifiers are not supported");
			goto fail;
		}
	}
	return p;
fail:
	free(p);
	return NULL;
}

/* The code point at text[*i] (valid UTF-8 assumed; a stray byte counts as
 * itself); advances *i. */
static unsigned long next_code_point(const unsigned char *t, size_t len, size_t *i)
{
	unsigned char c = t[*i];
	size_t need = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
	if (*i + need > len)
		need = 1;
	unsigned long cp = need == 1 ? c : need == 2 ? (c & 0x1fu) : need == 3 ? (c & 0x0fu) : (c & 0x07u);
	for (size_t k = 1; k < need; k++)
		cp = (cp << 6) | (t[*i + k] & 0x3fu);
	*i += need;
	return cp;
}

/* Does the pattern from item k match text[pos..] (to the end when anchored
 * at the end)? Greedy with backtracking; positions per repetition are kept
 * on the stack only for the item being tried. */
static bool match_from(const pattern *p, size_t k, const unsigned char *t, size_t len, size_t pos)
{
	if (k == p->count)
		return !p->anchored_end || pos == len;
	const item *it = &p->items[k];
	/* Positions after 0, 1, 2 ... repetitions (bounded by the text). */
	size_t small[160];
	size_t *after = small;
	size_t cap = sizeof small / sizeof small[0];
	size_t n = 0;
	after[n++] = pos;
	size_t i = pos;
	while (n - 1 < it->max && i < len) {
		size_t next = i;
		unsigned long cp = next_code_point(t, len, &next);
		if (!item_has(it, cp))
			break;
		if (n == cap) {
			size_t *grown = malloc(sizeof *grown * cap * 2);
			if (grown == NULL)
				break;
			memcpy(grown, after, sizeof *after * n);
			if (after != small)
				free(after);
			after = grown;
			cap *= 2;
		}
		after[n++] = next;
		i = next;
	}
	bool matched = false;
	for (size_t reps = n - 1 + 1; reps-- > 0 && !matched;) {
		if (reps < it->min)
			break;
		matched = match_from(p, k + 1, t, len, after[reps]);
	}
	if (after != small)
		free(after);
	return matched;
}

bool pattern_test(const pattern *p, const char *text, size_t len)
{
	const unsigned char *t = (const unsigned char *)text;
	if (p->anchored_start)
		return match_from(p, 0, t, len, 0);
	for (size_t pos = 0;;) {
		if (match_from(p, 0, t, len, pos))
			return true;
		if (pos >= len)
			return false;
		next_code_point(t, len, &pos);
	}
}

void pattern_free(pattern *p)
{
	free(p);
}
