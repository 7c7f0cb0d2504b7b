/*
 * relay_search (tools.md §3.1, machine-service.md §8): find an application
 * by name in the images' installed-software catalog. The relay does the
 * matching; the backend only lists. Touches no guest, needs no lease.
 *
 *   1. the needle: `name` trimmed and lower-cased (Unicode simple case
 *      mapping through the C.UTF-8 locale; ASCII when it is missing);
 *   2. the catalog from the machine plugin, validated as a whole
 *      (catalog-invalid on any broken rule or contradicting facts);
 *   3. `os` drops the other system's installations first; entries with one
 *      id merge across images; aliases count only from images in play;
 *   4. rank 0 exact, 1 prefix, 2 substring; grouped by canonical name;
 *      ordered by rank, lower-cased name (code points), name, id;
 *   5. installations added one at a time within 100 installations and
 *      50,000 bytes / 1,900 lines of two-space-indented JSON;
 *   6. every search leaves a record under search-diagnostics/.
 */
#include <dirent.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>
#include <wctype.h>

#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define CATALOG_MAX_IMAGES        64
#define CATALOG_MAX_INSTALLATIONS 20000
#define CATALOG_MAX_BYTES         ((size_t)4 << 20)
#define CATALOG_ID_MAX            128
#define CATALOG_TEXT_MAX          256
#define CATALOG_MAX_ALIASES       16
#define RESULT_MAX_INSTALLATIONS  100
#define RESULT_MAX_BYTES          50000
#define RESULT_MAX_LINES          1900
#define DIAG_MAX_RECORDS          256
#define DIAG_MAX_AGE_MS           (30LL * 24 * 3600 * 1000)
#define DIAG_MAX_BYTES            16384

/* ---- lower-casing ------------------------------------------------------------ */

static size_t utf8_decode(const unsigned char *s, size_t len, uint32_t *cp)
{
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	size_t n = (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 1;
	if (n > len || n == 1) {
		*cp = s[0];
		return 1;
	}
	uint32_t v = s[0] & (0x7f >> n);
	for (size_t i = 1; i < n; i++)
		v = (v << 6) | (s[i] & 0x3f);
	*cp = v;
	return n;
}

static void utf8_encode(strbuf *sb, uint32_t cp)
{
	char b[4];
	if (cp < 0x80) {
		b[0] = (char)cp;
		strbuf_append(sb, b, 1);
	} else if (cp < 0x800) {
		b[0] = (char)(0xc0 | (cp >> 6));
		b[1] = (char)(0x80 | (cp & 0x3f));
		strbuf_append(sb, b, 2);
	} else if (cp < 0x10000) {
		b[0] = (char)(0xe0 | (cp >> 12));
		b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (char)(0x80 | (cp & 0x3f));
		strbuf_append(sb, b, 3);
	} else {
		b[0] = (char)(0xf0 | (cp >> 18));
		b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (char)(0x80 | (cp & 0x3f));
		strbuf_append(sb, b, 4);
	}
}

/* The C.UTF-8 locale for towlower_l; created once (a newlocale object is
 * read-only after creation, so sharing it between threads is safe). */
static pthread_once_t utf8_locale_once = PTHREAD_ONCE_INIT;
static locale_t utf8_locale = (locale_t)0;

static void utf8_locale_init(void)
{
	utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

/* Simple case mapping of UTF-8 text (malloc'd). */
static char *lower_utf8(const char *text)
{
	pthread_once(&utf8_locale_once, utf8_locale_init);
	strbuf sb = STRBUF_INIT;
	const unsigned char *s = (const unsigned char *)text;
	size_t len = strlen(text);
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		i += utf8_decode(s + i, len - i, &cp);
		if (cp < 0x80)
			cp = (uint32_t)((cp >= 'A' && cp <= 'Z') ? cp + 32 : cp);
		else if (utf8_locale != (locale_t)0)
			cp = (uint32_t)towlower_l((wint_t)cp, utf8_locale);
		utf8_encode(&sb, cp);
	}
	return strbuf_detach(&sb, NULL);
}

static char *trimmed(const char *text)
{
	const char *start = text;
	while (*start == ' ' || *start == '\t' || *start == '\n' || *start == '\r' || *start == '\f' ||
	       *start == '\v')
		start++;
	size_t len = strlen(start);
	while (len > 0 && strchr(" \t\n\r\f\v", start[len - 1]))
		len--;
	char *out = malloc(len + 1);
	if (out) {
		memcpy(out, start, len);
		out[len] = '\0';
	}
	return out;
}

/* ---- the catalog ------------------------------------------------------------------ */

typedef struct installation {
	const char *image; /* borrowed from the catalog */
	const char *os;
	const char *architecture;
	const char *version; /* NULL for null */
	const char *id;
	json_object *aliases; /* borrowed array */
} installation;

typedef struct application {
	const char *id;
	const char *name;
	char *lower_name;
	installation *inst;
	size_t n_inst, cap_inst;
	int rank; /* -1: no match */
} application;

typedef struct catalog_view {
	application *apps;
	size_t n_apps, cap_apps;
	size_t n_images;
	size_t n_installations;
} catalog_view;

static void view_free(catalog_view *v)
{
	for (size_t i = 0; i < v->n_apps; i++) {
		free(v->apps[i].lower_name);
		free(v->apps[i].inst);
	}
	free(v->apps);
	memset(v, 0, sizeof *v);
}

static bool matches_image_key(const char *key)
{
	size_t n = strlen(key);
	if (n == 0 || n > 128)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = key[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (i == 0 ? !alnum : !(alnum || c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static bool text_within(json_object *v, size_t max_cp, bool allow_empty)
{
	if (!json_object_is_type(v, json_type_string))
		return false;
	size_t len = (size_t)json_object_get_string_len(v);
	if (len == 0)
		return allow_empty;
	return utf8_length(json_object_get_string(v), len) <= max_cp;
}

static bool str_eq_nullable(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static bool aliases_equal(json_object *a, json_object *b)
{
	size_t n = json_object_array_length(a);
	if (n != json_object_array_length(b))
		return false;
	for (size_t i = 0; i < n; i++)
		if (strcmp(json_object_get_string(json_object_array_get_idx(a, i)),
		           json_object_get_string(json_object_array_get_idx(b, i))) != 0)
			return false;
	return true;
}

static application *find_app(catalog_view *v, const char *id)
{
	for (size_t i = 0; i < v->n_apps; i++)
		if (strcmp(v->apps[i].id, id) == 0)
			return &v->apps[i];
	return NULL;
}

/* tools.md §3.1 step 3. Builds the merged view; NULL on success or the
 * broken rule (written into why). */
static const char *validate_catalog(json_object *catalog, catalog_view *v, char *why, size_t len)
{
	memset(v, 0, sizeof *v);
	int64_t version = 0;
	if (!json_object_is_type(catalog, json_type_object) ||
	    !jsonx_get_int(catalog, "schemaVersion", &version) || version != 1)
		return snprintf(why, len, "the catalog's schemaVersion is not 1"), why;
	json_object *images = jsonx_get_array(catalog, "images");
	if (images == NULL)
		return snprintf(why, len, "the catalog has no images array"), why;
	size_t n_images = json_object_array_length(images);
	if (n_images > CATALOG_MAX_IMAGES)
		return snprintf(why, len, "the catalog lists %zu images; at most %d are allowed", n_images,
		                CATALOG_MAX_IMAGES),
		       why;
	char *text = jsonx_to_string(catalog, 0);
	size_t bytes = text ? strlen(text) : 0;
	free(text);
	if (bytes > CATALOG_MAX_BYTES)
		return snprintf(why, len, "the catalog is %zu bytes serialised; at most 4 MiB are allowed",
		                bytes),
		       why;
	v->n_images = n_images;
	for (size_t i = 0; i < n_images; i++) {
		json_object *img = json_object_array_get_idx(images, i);
		const char *key = jsonx_get_str(img, "image");
		const char *os = jsonx_get_str(img, "os");
		const char *arch = jsonx_get_str(img, "architecture");
		json_object *apps = jsonx_get_array(img, "applications");
		if (key == NULL || !matches_image_key(key))
			return snprintf(why, len, "image %zu has no valid image key", i), why;
		if (os == NULL || (strcmp(os, "linux") != 0 && strcmp(os, "macos") != 0))
			return snprintf(why, len, "image %s has os other than linux or macos", key), why;
		if (arch == NULL || (strcmp(arch, "arm64") != 0 && strcmp(arch, "x86_64") != 0))
			return snprintf(why, len, "image %s has architecture other than arm64 or x86_64",
			                key),
			       why;
		if (apps == NULL)
			return snprintf(why, len, "image %s has no applications array", key), why;
		/* The same image key twice must state the same facts. */
		for (size_t j = 0; j < i; j++) {
			json_object *other = json_object_array_get_idx(images, j);
			if (strcmp(jsonx_get_str(other, "image"), key) == 0 &&
			    (strcmp(jsonx_get_str(other, "os"), os) != 0 ||
			     strcmp(jsonx_get_str(other, "architecture"), arch) != 0))
				return snprintf(why, len, "image %s is listed twice with contradicting facts",
				                key),
				       why;
		}
		size_t n_apps = json_object_array_length(apps);
		for (size_t a = 0; a < n_apps; a++) {
			json_object *app = json_object_array_get_idx(apps, a);
			json_object *id_v = NULL, *name_v = NULL, *aliases = NULL, *version_v = NULL;
			bool has_version = json_object_object_get_ex(app, "version", &version_v);
			json_object_object_get_ex(app, "id", &id_v);
			json_object_object_get_ex(app, "name", &name_v);
			json_object_object_get_ex(app, "aliases", &aliases);
			if (!json_object_is_type(app, json_type_object) ||
			    !text_within(id_v, CATALOG_ID_MAX, false))
				return snprintf(why, len,
				                "an application of image %s has no id of 1 to %d characters",
				                key, CATALOG_ID_MAX),
				       why;
			const char *id = json_object_get_string(id_v);
			if (!text_within(name_v, CATALOG_TEXT_MAX, false))
				return snprintf(
				           why, len,
				           "application %.128s of image %s has no name of 1 to %d characters",
				           id, key, CATALOG_TEXT_MAX),
				       why;
			if (!json_object_is_type(aliases, json_type_array) ||
			    json_object_array_length(aliases) > CATALOG_MAX_ALIASES)
				return snprintf(
				           why, len,
				           "application %.128s of image %s needs aliases: at most %d strings",
				           id, key, CATALOG_MAX_ALIASES),
				       why;
			for (size_t k = 0; k < json_object_array_length(aliases); k++)
				if (!text_within(json_object_array_get_idx(aliases, k), CATALOG_TEXT_MAX,
				                 false))
					return snprintf(why, len,
					                "an alias of application %.128s is not a string of 1 "
					                "to %d "
					                "characters",
					                id, CATALOG_TEXT_MAX),
					       why;
			if (!has_version ||
			    (version_v != NULL && !text_within(version_v, CATALOG_TEXT_MAX, true)))
				return snprintf(
				           why, len,
				           "application %.128s of image %s needs a version string or null",
				           id, key),
				       why;
			const char *name = json_object_get_string(name_v);
			const char *app_version = version_v ? json_object_get_string(version_v) : NULL;
			application *merged = find_app(v, id);
			if (merged && strcmp(merged->name, name) != 0)
				return snprintf(why, len,
				                "application %.128s is named both \"%.100s\" and \"%.100s\"",
				                id, merged->name, name),
				       why;
			bool duplicate = false;
			for (size_t k = 0; merged && k < merged->n_inst; k++) {
				installation *in = &merged->inst[k];
				if (strcmp(in->image, key) != 0)
					continue;
				if (!str_eq_nullable(in->version, app_version) ||
				    !aliases_equal(in->aliases, aliases))
					return snprintf(why, len,
					                "application %.128s is listed twice in image %s with "
					                "contradicting facts",
					                id, key),
					       why;
				duplicate = true;
			}
			if (duplicate)
				continue;
			if (++v->n_installations > CATALOG_MAX_INSTALLATIONS)
				return snprintf(why, len, "the catalog lists more than %d installations",
				                CATALOG_MAX_INSTALLATIONS),
				       why;
			if (merged == NULL) {
				if (v->n_apps == v->cap_apps) {
					size_t cap = v->cap_apps ? v->cap_apps * 2 : 64;
					application *grown = realloc(v->apps, cap * sizeof *grown);
					if (grown == NULL)
						return snprintf(why, len,
						                "out of memory reading the catalog"),
						       why;
					v->apps = grown;
					v->cap_apps = cap;
				}
				merged = &v->apps[v->n_apps++];
				memset(merged, 0, sizeof *merged);
				merged->id = id;
				merged->name = name;
				merged->lower_name = lower_utf8(name);
			}
			if (merged->n_inst == merged->cap_inst) {
				size_t cap = merged->cap_inst ? merged->cap_inst * 2 : 4;
				installation *grown = realloc(merged->inst, cap * sizeof *grown);
				if (grown == NULL)
					return snprintf(why, len, "out of memory reading the catalog"), why;
				merged->inst = grown;
				merged->cap_inst = cap;
			}
			merged->inst[merged->n_inst++] =
			    (installation){key, os, arch, app_version, id, aliases};
		}
	}
	return NULL;
}

/* ---- matching, ordering, bounds ---------------------------------------------------------- */

static int rank_of(const char *candidate_lower, const char *needle)
{
	if (strcmp(candidate_lower, needle) == 0)
		return 0;
	if (strncmp(candidate_lower, needle, strlen(needle)) == 0)
		return 1;
	if (strstr(candidate_lower, needle))
		return 2;
	return -1;
}

static int better(int a, int b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return a < b ? a : b;
}

/* A group of applications sharing one canonical name. */
typedef struct group {
	application **apps;
	size_t n;
	int rank;
	const char *name;
	const char *lower_name;
	const char *first_id;
} group;

static int compare_groups(const void *pa, const void *pb)
{
	const group *a = pa, *b = pb;
	if (a->rank != b->rank)
		return a->rank - b->rank;
	int c = strcmp(a->lower_name, b->lower_name);
	if (c)
		return c;
	c = strcmp(a->name, b->name);
	if (c)
		return c;
	return strcmp(a->first_id, b->first_id);
}

static int compare_installations(const void *pa, const void *pb)
{
	const installation *a = pa, *b = pb;
	int c = strcmp(a->image, b->image);
	return c ? c : strcmp(a->id, b->id);
}

/* True when the pretty JSON of `result` is within the text bounds. */
static bool within_bounds(json_object *result)
{
	char *text = jsonx_to_string(result, JSONX_PRETTY);
	if (text == NULL)
		return false;
	size_t lines = 1;
	for (const char *c = text; *c; c++)
		lines += *c == '\n';
	bool ok = strlen(text) <= RESULT_MAX_BYTES && lines <= RESULT_MAX_LINES;
	free(text);
	return ok;
}

static json_object *build_result(catalog_view *v, const char *needle, const char *os, size_t *n_apps_out,
                                 size_t *n_inst_out, bool *truncated_out)
{
	/* Rank each application over its name and the aliases of images in play. */
	for (size_t i = 0; i < v->n_apps; i++) {
		application *app = &v->apps[i];
		size_t keep = 0;
		for (size_t k = 0; k < app->n_inst; k++)
			if (os == NULL || strcmp(app->inst[k].os, os) == 0)
				app->inst[keep++] = app->inst[k];
		app->n_inst = keep;
		app->rank = -1;
		if (keep == 0)
			continue;
		app->rank = rank_of(app->lower_name, needle);
		for (size_t k = 0; k < keep; k++) {
			json_object *aliases = app->inst[k].aliases;
			for (size_t a = 0; a < json_object_array_length(aliases); a++) {
				char *lower =
				    lower_utf8(json_object_get_string(json_object_array_get_idx(aliases, a)));
				if (lower)
					app->rank = better(app->rank, rank_of(lower, needle));
				free(lower);
			}
		}
		qsort(app->inst, app->n_inst, sizeof *app->inst, compare_installations);
	}
	/* Group matches by canonical name. */
	group *groups = calloc(v->n_apps ? v->n_apps : 1, sizeof *groups);
	size_t n_groups = 0;
	for (size_t i = 0; groups && i < v->n_apps; i++) {
		application *app = &v->apps[i];
		if (app->rank < 0)
			continue;
		group *gr = NULL;
		for (size_t j = 0; j < n_groups && !gr; j++)
			if (strcmp(groups[j].name, app->name) == 0)
				gr = &groups[j];
		if (gr == NULL) {
			gr = &groups[n_groups++];
			gr->apps = calloc(v->n_apps, sizeof *gr->apps);
			gr->rank = app->rank;
			gr->name = app->name;
			gr->lower_name = app->lower_name;
			gr->first_id = app->id;
		}
		if (gr->apps)
			gr->apps[gr->n++] = app;
		gr->rank = app->rank < gr->rank ? app->rank : gr->rank;
		if (strcmp(app->id, gr->first_id) < 0)
			gr->first_id = app->id;
	}
	if (groups)
		qsort(groups, n_groups, sizeof *groups, compare_groups);

	json_object *result = json_object_new_object();
	json_object *list = json_object_new_array();
	jsonx_add(result, "applications", list);
	jsonx_add_bool(result, "truncated", true); /* measured as the longer form */
	size_t count = 0;
	bool truncated = false;
	for (size_t i = 0; i < n_groups && !truncated; i++) {
		group *gr = &groups[i];
		size_t total = 0;
		for (size_t j = 0; j < gr->n; j++)
			total += gr->apps[j]->n_inst;
		installation *all = calloc(total ? total : 1, sizeof *all);
		size_t n_all = 0;
		for (size_t j = 0; all && j < gr->n; j++)
			for (size_t k = 0; k < gr->apps[j]->n_inst; k++)
				all[n_all++] = gr->apps[j]->inst[k];
		qsort(all, n_all, sizeof *all, compare_installations);
		json_object *entry = json_object_new_object();
		jsonx_add_str(entry, "name", gr->name);
		json_object *insts = json_object_new_array();
		jsonx_add(entry, "installations", insts);
		json_object_array_add(list, entry);
		for (size_t k = 0; k < n_all; k++) {
			json_object *inst = json_object_new_object();
			jsonx_add_str(inst, "image", all[k].image);
			jsonx_add_str(inst, "version", all[k].version);
			jsonx_add_str(inst, "os", all[k].os);
			jsonx_add_str(inst, "architecture", all[k].architecture);
			json_object_array_add(insts, inst);
			if (count + 1 > RESULT_MAX_INSTALLATIONS || !within_bounds(result)) {
				json_object_array_del_idx(insts, json_object_array_length(insts) - 1, 1);
				truncated = true;
				break;
			}
			count++;
		}
		if (json_object_array_length(insts) == 0)
			json_object_array_del_idx(list, json_object_array_length(list) - 1, 1);
		free(all);
	}
	for (size_t i = 0; i < n_groups; i++)
		free(groups[i].apps);
	free(groups);
	jsonx_add_bool(result, "truncated", truncated);
	*n_apps_out = json_object_array_length(list);
	*n_inst_out = count;
	*truncated_out = truncated;
	return result;
}

/* ---- search diagnostics (lifecycle.md §9) ---------------------------------------------------- */

static int compare_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Keeps at most 256 records and none older than 30 days. */
static void prune_diagnostics(const char *dir, int64_t now_ms)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name);
		if (len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **grown = realloc(names, cap * sizeof *grown);
			if (grown == NULL)
				break;
			names = grown;
		}
		names[n] = strdup(de->d_name);
		if (names[n])
			n++;
	}
	closedir(d);
	if (names)
		qsort(names, n, sizeof *names, compare_names);
	for (size_t i = 0; i < n; i++) {
		long long stamp = strtoll(names[i], NULL, 10);
		bool too_many = n - i > DIAG_MAX_RECORDS;
		bool too_old = stamp > 0 && now_ms - stamp > DIAG_MAX_AGE_MS;
		if (too_many || too_old) {
			char *path = fs_path_join(dir, names[i]);
			if (path)
				unlink(path);
			free(path);
		}
		free(names[i]);
	}
	free(names);
}

static void record_search(manager *m, const char *needle, const char *os, json_object *result,
                          const char *failure, const char *code, const catalog_view *v)
{
	int64_t now = clock_now_ms();
	char *dir = fs_path_join(m->settings->session_dir, "search-diagnostics");
	relay_error err;
	if (dir == NULL || fs_mkdir_p(dir, 0700, &err) != RELAY_OK) {
		log_warning("cannot keep a search record under %s", dir ? dir : "the session folder");
		free(dir);
		return;
	}
	json_object *rec = json_object_new_object();
	jsonx_add_int(rec, "schemaVersion", 1);
	char at[25];
	time_format_iso_millis(now, at);
	jsonx_add_str(rec, "at", at);
	json_object *query = json_object_new_object();
	jsonx_add_str(query, "name", needle);
	jsonx_add_str(query, "os", os);
	jsonx_add(rec, "query", query);
	if (failure) {
		jsonx_add_str(rec, "outcome", "failed");
		jsonx_add_str(rec, "failure", "application discovery failed");
		jsonx_add_str(rec, "code", code);
		char *cut = strndup(failure, 1024);
		jsonx_add_str(rec, "reason", cut);
		free(cut);
	} else {
		jsonx_add_str(rec, "outcome", "ok");
		json_object *counts = json_object_new_object();
		json_object *apps = jsonx_get_array(result, "applications");
		size_t inst = 0;
		for (size_t i = 0; apps && i < json_object_array_length(apps); i++)
			inst += json_object_array_length(
			    jsonx_get_array(json_object_array_get_idx(apps, i), "installations"));
		bool truncated = false;
		jsonx_get_bool(result, "truncated", &truncated);
		jsonx_add_int(counts, "applications", apps ? (int64_t)json_object_array_length(apps) : 0);
		jsonx_add_int(counts, "installations", (int64_t)inst);
		jsonx_add_bool(counts, "truncated", truncated);
		jsonx_add_int(counts, "catalogImages", v ? (int64_t)v->n_images : 0);
		jsonx_add_int(counts, "catalogInstallations", v ? (int64_t)v->n_installations : 0);
		jsonx_add(rec, "counts", counts);
		char *text = jsonx_to_string(result, JSONX_PRETTY);
		char hex[65] = "";
		if (text)
			sha256_buffer_hex(text, strlen(text), hex);
		jsonx_add_str(rec, "resultSha256", hex);
		jsonx_add_int(rec, "resultBytes", text ? (int64_t)strlen(text) : 0);
		free(text);
	}
	char *check = jsonx_to_string(rec, JSONX_PRETTY);
	if (check && strlen(check) > DIAG_MAX_BYTES) {
		/* Never reached with the bounds above; kept as a guard. */
		jsonx_add_str(query, "name", "(too long to record)");
	}
	free(check);
	char uuid[37], name[96];
	random_uuid(uuid);
	snprintf(name, sizeof name, "%013lld-%s.json", (long long)now, uuid);
	char *path = fs_path_join(dir, name);
	if (path == NULL || fs_write_json_durable(path, rec, &err) != RELAY_OK)
		log_warning("cannot write the search record %s", path ? path : name);
	free(path);
	json_object_put(rec);
	prune_diagnostics(dir, now);
	free(dir);
}

/* ---- the tool ------------------------------------------------------------------------------ */

tool_result *tool_search(manager *m, guest *g, json_object *args, relay_call *call)
{
	(void)g;
	const char *name = jsonx_get_str(args, "name");
	const char *os = jsonx_get_str(args, "os");
	char *shown = trimmed(name ? name : "");
	char *needle = shown ? lower_utf8(shown) : NULL;
	tool_result *r = NULL;
	json_object *catalog = NULL;
	catalog_view view;
	memset(&view, 0, sizeof view);
	if (needle == NULL || needle[0] == '\0') {
		r = tool_result_error(NULL, "invalid-input",
		                      "Invalid relay_search input: /name search name must not be blank");
		goto done;
	}
	manager_wait_startup(m);
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	if (machine == NULL || machine->machine.catalog == NULL) {
		const char *why = machine == NULL ? (m->backends->load_errors[SLOT_MACHINE]
		                                         ? m->backends->load_errors[SLOT_MACHINE]
		                                         : "no machine plugin is loaded")
		                                  : "the machine backend offers no application catalog";
		r = tool_result_error(NULL, "backend-unavailable", "catalog unavailable: %s", why);
		record_search(m, needle, os, NULL, why, "backend-unavailable", NULL);
		goto done;
	}
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = machine->machine.catalog(machine->state, call, 0, &text, &err);
	if (st != RELAY_OK) {
		free(text);
		const char *why = err.message[0] ? err.message : relay_status_str(st);
		r = tool_result_error(
		    NULL, "backend-unavailable", "%s%s",
		    strncmp(why, "catalog unavailable", 19) == 0 ? "" : "catalog unavailable: ", why);
		record_search(m, needle, os, NULL, why, "backend-unavailable", NULL);
		goto done;
	}
	char reason[128] = "";
	catalog = text ? jsonx_parse_str(text, reason, sizeof reason) : NULL;
	free(text);
	char why[512];
	const char *problem = catalog
	                          ? validate_catalog(catalog, &view, why, sizeof why)
	                          : (snprintf(why, sizeof why, "the catalog is not JSON (%s)", reason), why);
	if (problem) {
		r = tool_result_error(NULL, "catalog-invalid", "The application catalog is invalid: %s",
		                      problem);
		record_search(m, needle, os, NULL, problem, "catalog-invalid", NULL);
		goto done;
	}
	size_t n_apps = 0, n_inst = 0;
	bool truncated = false;
	json_object *result = build_result(&view, needle, os, &n_apps, &n_inst, &truncated);
	record_search(m, needle, os, result, NULL, NULL, &view);
	if (n_apps == 0 && !truncated) {
		r = tool_result_ok(result, "No installed application matches \"%s\"", shown);
	} else {
		r = tool_result_ok(
		    result, "Found %zu application(s) with %zu installation(s) matching \"%s\"%s%s%s", n_apps,
		    n_inst, shown, os ? " on " : "", os ? os : "", truncated ? "; more were left out" : "");
	}
done:
	view_free(&view);
	json_object_put(catalog);
	free(needle);
	free(shown);
	return r;
}
