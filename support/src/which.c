#if !defined(_XOPEN_SOURCE) && !defined(_GNU_SOURCE)
#define _XOPEN_SOURCE 700 /* realpath */
#endif
#include "relay_support/which.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

static int executable_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static char *copy_of(const char *text)
{
	size_t len = strlen(text);
	char *out = malloc(len + 1);
	if (out == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	memcpy(out, text, len + 1);
	return out;
}

char *rs_which(const char *program, const char *search_path)
{
	const char *p;
	size_t program_len;
	if (program == NULL || program[0] == '\0') {
		errno = EINVAL;
		return NULL;
	}
	if (strchr(program, '/') != NULL) {
		if (!executable_file(program)) {
			errno = ENOENT;
			return NULL;
		}
		return realpath(program, NULL);
	}
	p = search_path ? search_path : getenv("PATH");
	if (p == NULL)
		p = RS_WHICH_DEFAULT_PATH;
	program_len = strlen(program);
	while (*p) {
		size_t n = strcspn(p, ":");
		char candidate[PATH_MAX];
		if (n > 0 && p[0] == '/' && n + program_len + 2 <= sizeof candidate) {
			memcpy(candidate, p, n);
			candidate[n] = '/';
			memcpy(candidate + n + 1, program, program_len + 1);
			if (executable_file(candidate))
				return copy_of(candidate);
		}
		p += n;
		if (*p == ':')
			p++;
	}
	errno = ENOENT;
	return NULL;
}
