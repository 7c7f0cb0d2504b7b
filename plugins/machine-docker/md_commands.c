/*
 * md_commands.c — the commands each dpkg package of an image installs, as
 * the aliases of its catalog entry, so that relay_search finds `xclock`
 * (package x11-apps) by the command a user knows. Read once per image id at
 * the probe: one archive GET of /var/lib/dpkg/info, whose <package>.list
 * files name every path a package installed; the names under the command
 * folders (/usr/bin, /bin, /usr/sbin, /sbin, /usr/games) become aliases, at
 * most the catalog's 16 per application.
 */
#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "md.h"
#include "relay_support/utf8_locale.h"

#define MAX_ALIASES      16           /* core/src/catalog/catalog.c CATALOG_MAX_ALIASES */
#define MAX_LIST_BYTES   (4u << 20)   /* one package's file list */
#define MAX_INFO_BYTES   (512u << 20) /* the whole folder's archive */
#define COMMAND_NAME_MAX 128

/* The package a <package>[:<arch>].list entry names, or false. */
static bool list_package(const char *entry, char *pkg, size_t size)
{
	const char *base = strrchr(entry, '/');
	base = base ? base + 1 : entry;
	size_t n = strlen(base);
	if (n <= 5 || strcmp(base + n - 5, ".list") != 0 || n - 5 >= size)
		return false;
	memcpy(pkg, base, n - 5);
	pkg[n - 5] = '\0';
	char *colon = strchr(pkg, ':');
	if (colon)
		*colon = '\0';
	return pkg[0] != '\0';
}

/* The command a listed path installs, or NULL (borrowed from `line`). */
static const char *command_of(char *line)
{
	static const char *const dirs[] = {"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/", "/usr/games/"};
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		size_t dl = strlen(dirs[i]);
		if (strncmp(line, dirs[i], dl) != 0)
			continue;
		const char *name = line + dl;
		size_t n = strlen(name);
		if (n == 0 || n > COMMAND_NAME_MAX || strchr(name, '/') != NULL)
			return NULL;
		return name;
	}
	return NULL;
}

static bool has_alias(json_object *aliases, const char *name)
{
	for (size_t i = 0; i < json_object_array_length(aliases); i++)
		if (strcmp(json_object_get_string(json_object_array_get_idx(aliases, i)), name) == 0)
			return true;
	return false;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds the commands of one package's list `text` to its application: the
 * first 16 in name order (the catalog contract's limit: spec/machine-service.md
 * "at most 16 aliases", sorted and deduplicated), the package's own name
 * left out. */
static void add_commands(json_object *app, char *text)
{
	json_object *aliases = NULL;
	if (!json_object_object_get_ex(app, "aliases", &aliases) ||
	    !json_object_is_type(aliases, json_type_array))
		return;
	const char *name = md_str(app, "name");
	const char **cmds = NULL;
	size_t n = 0, cap = 0;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *cmd = command_of(line);
		if (cmd == NULL || (name && strcmp(cmd, name) == 0))
			continue;
		if (n == cap) {
			size_t grown = cap ? cap * 2 : 32;
			const char **more = realloc(cmds, grown * sizeof *more);
			if (more == NULL)
				break;
			cmds = more;
			cap = grown;
		}
		cmds[n++] = cmd;
	}
	if (n > 1)
		qsort(cmds, n, sizeof *cmds, by_name);
	for (size_t i = 0; i < n && json_object_array_length(aliases) < MAX_ALIASES; i++)
		if (!has_alias(aliases, cmds[i]))
			json_object_array_add(aliases, json_object_new_string(cmds[i]));
	free(cmds);
}

/* The application of `pkg` in `apps` (borrowed), or NULL. */
static json_object *app_of(json_object *apps, const char *pkg)
{
	for (size_t i = 0; i < json_object_array_length(apps); i++) {
		json_object *a = json_object_array_get_idx(apps, i);
		const char *n = md_str(a, "name");
		const char *id = md_str(a, "id");
		if (n && id && strncmp(id, "dpkg:", 5) == 0 && strcmp(n, pkg) == 0)
			return a;
	}
	return NULL;
}

static void read_lists(struct archive *a, json_object *apps)
{
	struct archive_entry *e;
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		char pkg[256];
		const char *entry = archive_entry_pathname(e);
		if (entry == NULL || archive_entry_filetype(e) != AE_IFREG ||
		    !list_package(entry, pkg, sizeof pkg) || archive_entry_size(e) <= 0 ||
		    archive_entry_size(e) > (la_int64_t)MAX_LIST_BYTES)
			continue;
		json_object *app = app_of(apps, pkg);
		if (app == NULL)
			continue;
		size_t n = (size_t)archive_entry_size(e);
		char *text = malloc(n + 1);
		if (text == NULL)
			return;
		if (archive_read_data(a, text, n) == (la_ssize_t)n) {
			text[n] = '\0';
			add_commands(app, text);
		}
		free(text);
	}
}

void md_add_package_commands(md_state *st, const char *container, json_object *apps, relay_call *call)
{
	if (json_object_array_length(apps) == 0)
		return;
	char path[1024] = MD_API_PREFIX "/containers/";
	md_url_encode(path, sizeof path, container);
	strncat(path, "/archive?path=", sizeof path - strlen(path) - 1);
	md_url_encode(path, sizeof path, "/var/lib/dpkg/info");
	int fd = md_tmp_file(st);
	if (fd < 0)
		return;
	md_reply r;
	relay_error e;
	if (md_api(st, "GET", path, NULL, -1, fd, 120000, call, &r, &e) != RELAY_OK) {
		close(fd);
		return;
	}
	if (r.status == 200 && lseek(fd, 0, SEEK_END) <= (off_t)MAX_INFO_BYTES) {
		lseek(fd, 0, SEEK_SET);
		rs_utf8_locale_scope utf8;
		rs_utf8_locale_enter(&utf8);
		struct archive *a = archive_read_new();
		archive_read_support_format_tar(a);
		if (archive_read_open_fd(a, fd, 1 << 16) == ARCHIVE_OK)
			read_lists(a, apps);
		archive_read_free(a);
		rs_utf8_locale_leave(&utf8);
	}
	md_reply_free(&r);
	close(fd);
}
