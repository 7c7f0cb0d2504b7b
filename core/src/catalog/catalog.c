/*
 * The application catalog of relay_search (spec/tools.md §3.1 steps 1-3): the
 * needle's lower-casing, and the catalog the machine plugin lists,
 * validated as a whole and merged into one view.
 */
#include "catalog/catalog.h"

#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <wctype.h>

#include "util/array.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

#define CATALOG_MAX_IMAGES        64
#define CATALOG_MAX_INSTALLATIONS 20000
#define CATALOG_MAX_BYTES         ((size_t)4 << 20)
#define CATALOG_ID_MAX            128
#define CATALOG_TEXT_MAX          256
#define CATALOG_MAX_ALIASES       16

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
char *catalog_lower_utf8(const char *text)
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

char *catalog_trimmed(const char *text)
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

void catalog_view_free(catalog_view *v)
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

/* One application entry of image `key` (os, arch): validated, and merged
 * into the view as an installation (a repeated identical entry adds
 * nothing). NULL, or the broken rule (written into why). */
static const char *add_application(catalog_view *v, json_object *app, const char *key, const char *os,
                                   const char *arch, char *why, size_t len)
{
	json_object *id_v = NULL, *name_v = NULL, *aliases = NULL, *version_v = NULL;
	bool has_version = json_object_object_get_ex(app, "version", &version_v);
	json_object_object_get_ex(app, "id", &id_v);
	json_object_object_get_ex(app, "name", &name_v);
	json_object_object_get_ex(app, "aliases", &aliases);
	if (!json_object_is_type(app, json_type_object) || !text_within(id_v, CATALOG_ID_MAX, false))
		return snprintf(why, len, "an application of image %s has no id of 1 to %d characters", key,
		                CATALOG_ID_MAX),
		       why;
	const char *id = json_object_get_string(id_v);
	if (!text_within(name_v, CATALOG_TEXT_MAX, false))
		return snprintf(why, len, "application %.128s of image %s has no name of 1 to %d characters",
		                id, key, CATALOG_TEXT_MAX),
		       why;
	if (!json_object_is_type(aliases, json_type_array) ||
	    json_object_array_length(aliases) > CATALOG_MAX_ALIASES)
		return snprintf(why, len, "application %.128s of image %s needs aliases: at most %d strings",
		                id, key, CATALOG_MAX_ALIASES),
		       why;
	for (size_t k = 0; k < json_object_array_length(aliases); k++)
		if (!text_within(json_object_array_get_idx(aliases, k), CATALOG_TEXT_MAX, false))
			return snprintf(why, len,
			                "an alias of application %.128s is not a string of 1 "
			                "to %d "
			                "characters",
			                id, CATALOG_TEXT_MAX),
			       why;
	if (!has_version || (version_v != NULL && !text_within(version_v, CATALOG_TEXT_MAX, true)))
		return snprintf(why, len, "application %.128s of image %s needs a version string or null", id,
		                key),
		       why;
	const char *name = json_object_get_string(name_v);
	const char *app_version = version_v ? json_object_get_string(version_v) : NULL;
	application *merged = find_app(v, id);
	if (merged && strcmp(merged->name, name) != 0)
		return snprintf(why, len, "application %.128s is named both \"%.100s\" and \"%.100s\"", id,
		                merged->name, name),
		       why;
	bool duplicate = false;
	for (size_t k = 0; merged && k < merged->n_inst; k++) {
		installation *in = &merged->inst[k];
		if (strcmp(in->image, key) != 0)
			continue;
		if (!str_eq_nullable(in->version, app_version) || !aliases_equal(in->aliases, aliases))
			return snprintf(why, len,
			                "application %.128s is listed twice in image %s with "
			                "contradicting facts",
			                id, key),
			       why;
		duplicate = true;
	}
	if (duplicate)
		return NULL;
	if (++v->n_installations > CATALOG_MAX_INSTALLATIONS)
		return snprintf(why, len, "the catalog lists more than %d installations",
		                CATALOG_MAX_INSTALLATIONS),
		       why;
	if (merged == NULL) {
		application *grown = array_grow(v->apps, &v->cap_apps, v->n_apps, sizeof *grown, 64);
		if (grown == NULL)
			return snprintf(why, len, "out of memory reading the catalog"), why;
		v->apps = grown;
		merged = &v->apps[v->n_apps++];
		memset(merged, 0, sizeof *merged);
		merged->id = id;
		merged->name = name;
		merged->lower_name = catalog_lower_utf8(name);
	}
	installation *grown = array_grow(merged->inst, &merged->cap_inst, merged->n_inst, sizeof *grown, 4);
	if (grown == NULL)
		return snprintf(why, len, "out of memory reading the catalog"), why;
	merged->inst = grown;
	merged->inst[merged->n_inst++] = (installation){key, os, arch, app_version, id, aliases};
	return NULL;
}

/* spec/tools.md §3.1 step 3. Builds the merged view; NULL on success or the
 * broken rule (written into why). */
const char *catalog_validate(json_object *catalog, catalog_view *v, char *why, size_t len)
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
			const char *problem =
			    add_application(v, json_object_array_get_idx(apps, a), key, os, arch, why, len);
			if (problem)
				return problem;
		}
	}
	return NULL;
}
