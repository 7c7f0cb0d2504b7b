/* The guest receiver builds (spec/guest.md §2); see receiver_builds.h. */
#include "runs/receiver_builds.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader/loader.h"
#include "util/strbuf.h"

const char *receiver_platform_key(const char *uname_sm)
{
	static const struct {
		const char *uname;
		const char *key;
	} map[] = {{"Linux x86_64", "linux-x86_64"},
	           {"Linux aarch64", "linux-aarch64"},
	           {"Linux arm64", "linux-aarch64"},
	           {"Darwin arm64", "darwin-arm64"},
	           {"Darwin x86_64", "darwin-x86_64"}};
	if (uname_sm == NULL)
		return NULL;
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
		if (strcmp(uname_sm, map[i].uname) == 0)
			return map[i].key;
	return NULL;
}

char *receiver_build_path(const char *platform)
{
	if (platform == NULL || strchr(platform, '/') != NULL)
		return NULL;
	char *dir = loader_receivers_dir();
	if (dir == NULL)
		return NULL;
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s/receiver", dir, platform);
	free(dir);
	char *path = strbuf_detach(&sb, NULL);
	struct stat st;
	if (path == NULL || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
		free(path);
		return NULL;
	}
	return path;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char *receiver_builds_installed(void)
{
	char *dir = loader_receivers_dir();
	DIR *d = dir ? opendir(dir) : NULL;
	char *names[64];
	size_t n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL && n < 64) {
		if (e->d_name[0] == '.')
			continue;
		char *path = receiver_build_path(e->d_name);
		if (path) {
			names[n++] = strdup(e->d_name);
			free(path);
		}
	}
	if (d)
		closedir(d);
	free(dir);
	qsort(names, n, sizeof names[0], name_cmp);
	strbuf sb = STRBUF_INIT;
	for (size_t i = 0; i < n; i++) {
		if (i)
			strbuf_puts(&sb, ", ");
		strbuf_puts(&sb, names[i] ? names[i] : "?");
		free(names[i]);
	}
	if (n == 0)
		strbuf_puts(&sb, "none");
	return strbuf_detach(&sb, NULL);
}

char *receiver_unsupported_message(const char *uname_sm)
{
	char *installed = receiver_builds_installed();
	const char *key = receiver_platform_key(uname_sm);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(
	    &sb,
	    "No guest receiver for '%s'. Receivers installed for: %s.\nBuild one with: cmake --build "
	    "<build-dir> --target receiver-%s",
	    uname_sm ? uname_sm : "an unknown platform", installed ? installed : "none",
	    key ? key : "<platform>");
	free(installed);
	return strbuf_detach(&sb, NULL);
}
