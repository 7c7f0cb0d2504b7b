/*
 * utf8_locale.c — a UTF-8 character set for the calling thread
 * (relay_support/utf8_locale.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "relay_support/utf8_locale.h"

#include <locale.h>
#include <stddef.h>

int rs_utf8_locale_enter(rs_utf8_locale_scope *scope)
{
	static const char *const names[] = {"C.UTF-8", "C.utf8", "en_US.UTF-8"};
	scope->previous = NULL;
	scope->utf8 = NULL;
	locale_t made = (locale_t)0;
	for (size_t i = 0; i < sizeof names / sizeof names[0] && made == (locale_t)0; i++)
		made = newlocale(LC_CTYPE_MASK, names[i], (locale_t)0);
	if (made == (locale_t)0)
		return -1;
	locale_t previous = uselocale(made);
	if (previous == (locale_t)0) {
		freelocale(made);
		return -1;
	}
	scope->previous = previous;
	scope->utf8 = made;
	return 0;
}

void rs_utf8_locale_leave(rs_utf8_locale_scope *scope)
{
	if (scope->previous != NULL)
		uselocale((locale_t)scope->previous);
	if (scope->utf8 != NULL)
		freelocale((locale_t)scope->utf8);
	scope->previous = NULL;
	scope->utf8 = NULL;
}
