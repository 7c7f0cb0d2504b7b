/*
 * The replay driver: the harness without libFuzzer. Each argument is a file
 * (fed as one input) or a folder (every regular file in it, in name order).
 * Prints one line per input on stderr and "replayed N inputs" at the end;
 * exit 0, or 2 when an argument cannot be read (a broken invariant aborts).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path, size_t *count)
{
	FILE *fp = fopen(path, "rb");
	if (fp == NULL) {
		fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t cap = 4096, len = 0;
	unsigned char *data = malloc(cap);
	int rc = 0;
	for (;;) {
		if (data == NULL) {
			rc = -1;
			break;
		}
		size_t n = fread(data + len, 1, cap - len, fp);
		len += n;
		if (n == 0)
			break;
		if (len == cap) {
			unsigned char *bigger = realloc(data, cap * 2);
			if (bigger == NULL)
				free(data);
			data = bigger;
			cap *= 2;
		}
	}
	if (ferror(fp))
		rc = -1;
	fclose(fp);
	if (rc == 0) {
		fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
		LLVMFuzzerTestOneInput(data, len);
		(*count)++;
	} else {
		fprintf(stderr, "replay: cannot read %s\n", path);
	}
	free(data);
	return rc;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int replay_path(const char *path, size_t *count)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return replay_file(path, count);
	struct dirent **names = NULL;
	int n = scandir(path, &names, NULL, by_name);
	if (n < 0) {
		fprintf(stderr, "replay: cannot list %s: %s\n", path, strerror(errno));
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.') {
			char child[4096];
			snprintf(child, sizeof child, "%s/%s", path, names[i]->d_name);
			struct stat cst;
			if (stat(child, &cst) == 0 && S_ISREG(cst.st_mode) && replay_file(child, count) != 0)
				rc = -1;
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	size_t count = 0;
	int rc = 0;
	for (int i = 1; i < argc; i++)
		if (replay_path(argv[i], &count) != 0)
			rc = 2;
	fprintf(stderr, "replayed %zu inputs\n", count);
	if (count == 0) {
		fprintf(stderr, "replay: no input was given\n");
		rc = 2;
	}
	return rc;
}
