/* Helpers every harness links (fuzz.h). */
#include "fuzz.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fuzz_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("fuzz invariant broken: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

/* The process's scratch folder: made once under scratch_once, never
 * changed afterwards. */
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static char scratch_path[4096];

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (type == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0; /* go on: what cannot be removed is left for the next call */
}

void fuzz_remove_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_scratch(void)
{
	if (scratch_path[0])
		fuzz_remove_tree(scratch_path);
}

static void make_scratch(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(scratch_path, sizeof scratch_path, "%s/relay-fuzz-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	if (mkdtemp(scratch_path) == NULL)
		fuzz_fail("cannot create a scratch folder %s: %s", scratch_path, strerror(errno));
	atexit(remove_scratch);
}

const char *fuzz_scratch_dir(void)
{
	pthread_once(&scratch_once, make_scratch);
	return scratch_path;
}

int fuzz_write_file(const char *path, const void *data, size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	const char *p = data;
	size_t off = 0;
	while (off < size) {
		ssize_t n = write(fd, p + off, size - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)n;
	}
	return close(fd);
}

char *fuzz_wrap(const char *prefix, const void *data, size_t size, const char *suffix)
{
	size_t a = strlen(prefix), c = strlen(suffix);
	char *text = malloc(a + size + c + 1);
	if (text == NULL)
		fuzz_fail("no memory for %zu bytes", a + size + c + 1);
	memcpy(text, prefix, a);
	memcpy(text + a, data, size);
	memcpy(text + a + size, suffix, c + 1);
	return text;
}
