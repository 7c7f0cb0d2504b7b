/* dir.c — a folder's entries, sorted (relay_kit/dir.h). */
#include "relay_kit/dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void rk_dir_names_free(char **names, size_t count)
{
	for (size_t i = 0; names && i < count; i++)
		free(names[i]);
	free(names);
}

char **rk_dir_names_sorted(int dir_fd, size_t *count_out)
{
	*count_out = 0;
	int fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		errno = e;
		return NULL;
	}
	rewinddir(d);
	size_t count = 0, cap = 16;
	char **names = malloc(cap * sizeof *names);
	struct dirent *de = NULL;
	while (names && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (count == cap) {
			char **grown = realloc(names, 2 * cap * sizeof *grown);
			if (grown == NULL)
				break;
			names = grown;
			cap *= 2;
		}
		if ((names[count] = strdup(de->d_name)) == NULL)
			break;
		count++;
	}
	if (names == NULL || de != NULL) { /* out of memory before the end */
		rk_dir_names_free(names, count);
		closedir(d);
		errno = ENOMEM;
		return NULL;
	}
	closedir(d);
	qsort(names, count, sizeof *names, name_cmp);
	*count_out = count;
	return names;
}
