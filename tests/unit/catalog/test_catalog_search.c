/*
 * The catalog room without a session (catalog/catalog.h, catalog/search.h;
 * spec/tools.md §3.1): a machine plugin's catalog validated as a whole, each
 * broken rule refused with its own sentence; entries with one id merged
 * across images; the needle trimmed and lower-cased (Unicode simple case
 * mapping); rank exact < prefix < substring over names and the aliases of
 * the images in play; `os` dropping the other system's installations
 * first; groups by canonical name in their order; installations bounded at
 * 100 with `truncated`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "catalog/catalog.h"
#include "catalog/search.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* A catalog of schemaVersion 1 with the given images array text. */
static json_object *catalog_of(const char *images)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "{\"schemaVersion\":1,\"images\":%s}", images);
	json_object *catalog = jsonx_parse_str(strbuf_str(&sb), NULL, 0);
	strbuf_free(&sb);
	assert_non_null(catalog);
	return catalog;
}

/* The rule catalog_validate names for `text` (a whole catalog), or NULL. */
static void assert_refused(const char *text, const char *expected)
{
	json_object *catalog = jsonx_parse_str(text, NULL, 0);
	assert_non_null(catalog);
	catalog_view view;
	char why[512] = "";
	const char *problem = catalog_validate(catalog, &view, why, sizeof why);
	assert_non_null(problem);
	assert_string_equal(problem, expected);
	catalog_view_free(&view);
	json_object_put(catalog);
}

static void test_broken_catalogs_are_refused_by_rule(void **state)
{
	(void)state;
	assert_refused("{\"schemaVersion\":2,\"images\":[]}", "the catalog's schemaVersion is not 1");
	assert_refused("{\"schemaVersion\":1}", "the catalog has no images array");
	assert_refused("{\"schemaVersion\":1,\"images\":[{\"image\":\"-x\",\"os\":\"linux\","
	               "\"architecture\":\"x86_64\",\"applications\":[]}]}",
	               "image 0 has no valid image key");
	assert_refused("{\"schemaVersion\":1,\"images\":[{\"image\":\"a\",\"os\":\"windows\","
	               "\"architecture\":\"x86_64\",\"applications\":[]}]}",
	               "image a has os other than linux or macos");
	assert_refused("{\"schemaVersion\":1,\"images\":[{\"image\":\"a\",\"os\":\"linux\","
	               "\"architecture\":\"riscv64\",\"applications\":[]}]}",
	               "image a has architecture other than arm64 or x86_64");
	assert_refused("{\"schemaVersion\":1,\"images\":[{\"image\":\"a\",\"os\":\"linux\","
	               "\"architecture\":\"x86_64\"}]}",
	               "image a has no applications array");
	assert_refused("{\"schemaVersion\":1,\"images\":["
	               "{\"image\":\"a\",\"os\":\"linux\",\"architecture\":\"x86_64\",\"applications\":[]},"
	               "{\"image\":\"a\",\"os\":\"macos\",\"architecture\":\"x86_64\",\"applications\":[]}]}",
	               "image a is listed twice with contradicting facts");
	assert_refused("{\"schemaVersion\":1,\"images\":[{\"image\":\"a\",\"os\":\"linux\","
	               "\"architecture\":\"x86_64\",\"applications\":[{\"id\":\"\",\"name\":\"N\","
	               "\"aliases\":[],\"version\":null}]}]}",
	               "an application of image a has no id of 1 to 128 characters");
	assert_refused("{\"schemaVersion\":1,\"images\":[{\"image\":\"a\",\"os\":\"linux\","
	               "\"architecture\":\"x86_64\",\"applications\":[{\"id\":\"dpkg:x\",\"name\":\"N\","
	               "\"aliases\":[]}]}]}",
	               "application dpkg:x of image a needs a version string or null");
	/* One id, two names: contradicting facts across images. */
	assert_refused("{\"schemaVersion\":1,\"images\":["
	               "{\"image\":\"a\",\"os\":\"linux\",\"architecture\":\"x86_64\",\"applications\":["
	               "{\"id\":\"dpkg:x\",\"name\":\"X\",\"aliases\":[],\"version\":null}]},"
	               "{\"image\":\"b\",\"os\":\"linux\",\"architecture\":\"x86_64\",\"applications\":["
	               "{\"id\":\"dpkg:x\",\"name\":\"Y\",\"aliases\":[],\"version\":null}]}]}",
	               "application dpkg:x is named both \"X\" and \"Y\"");
	/* One id twice in one image with another version. */
	assert_refused("{\"schemaVersion\":1,\"images\":[{\"image\":\"a\",\"os\":\"linux\","
	               "\"architecture\":\"x86_64\",\"applications\":["
	               "{\"id\":\"dpkg:x\",\"name\":\"X\",\"aliases\":[],\"version\":\"1\"},"
	               "{\"id\":\"dpkg:x\",\"name\":\"X\",\"aliases\":[],\"version\":\"2\"}]}]}",
	               "application dpkg:x is listed twice in image a with contradicting facts");
}

/* Validates `catalog` (must be valid) and matches `name` (as the search
 * trims and lower-cases it) with `os`. A new reference. */
static json_object *match(json_object *catalog, const char *name, const char *os, size_t *apps, size_t *insts,
                          bool *truncated)
{
	catalog_view view;
	char why[512] = "";
	const char *problem = catalog_validate(catalog, &view, why, sizeof why);
	if (problem)
		fail_msg("catalog refused: %s", problem);
	char *trimmed = catalog_trimmed(name);
	char *needle = catalog_lower_utf8(trimmed);
	json_object *result = catalog_match(&view, needle, os, apps, insts, truncated);
	free(trimmed);
	free(needle);
	catalog_view_free(&view);
	return result;
}

/* The result's application names and their installations' images, as one
 * line: "Name[img,img] Name[img]". malloc'd. */
static char *summary(json_object *result)
{
	strbuf sb = STRBUF_INIT;
	json_object *list = jsonx_get_array(result, "applications");
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *app = json_object_array_get_idx(list, i);
		strbuf_printf(&sb, "%s%s[", i ? " " : "", jsonx_get_str(app, "name"));
		json_object *insts = jsonx_get_array(app, "installations");
		for (size_t k = 0; k < json_object_array_length(insts); k++)
			strbuf_printf(&sb, "%s%s", k ? "," : "",
			              jsonx_get_str(json_object_array_get_idx(insts, k), "image"));
		strbuf_printf(&sb, "]");
	}
	return strbuf_detach(&sb, NULL);
}

static const char *const images_text =
    "[{\"image\":\"deb12\",\"os\":\"linux\",\"architecture\":\"x86_64\",\"applications\":["
    "{\"id\":\"dpkg:firefox-esr\",\"name\":\"Firefox\",\"aliases\":[\"browser\"],\"version\":\"115\"},"
    "{\"id\":\"dpkg:fire\",\"name\":\"Fire\",\"aliases\":[],\"version\":null},"
    "{\"id\":\"dpkg:campfire\",\"name\":\"Campfire\",\"aliases\":[],\"version\":\"1\"},"
    "{\"id\":\"dpkg:firefox-esr\",\"name\":\"Firefox\",\"aliases\":[\"browser\"],\"version\":\"115\"}]},"
    "{\"image\":\"bookworm-gui\",\"os\":\"linux\",\"architecture\":\"arm64\",\"applications\":["
    "{\"id\":\"dpkg:firefox-esr\",\"name\":\"Firefox\",\"aliases\":[],\"version\":\"115\"}]},"
    "{\"image\":\"sonoma\",\"os\":\"macos\",\"architecture\":\"arm64\",\"applications\":["
    "{\"id\":\"bundle:org.mozilla.firefox\",\"name\":\"Firefox\",\"aliases\":[],\"version\":\"128\"},"
    "{\"id\":\"bundle:com.apple.Safari\",\"name\":\"Safari\",\"aliases\":[\"browser\"],"
    "\"version\":\"17\"},"
    "{\"id\":\"bundle:eu.exelban.Stats\",\"name\":\"ÄRGER\",\"aliases\":[],\"version\":null}]}]";

static void test_rank_groups_and_order(void **state)
{
	(void)state;
	json_object *catalog = catalog_of(images_text);
	size_t apps = 0, insts = 0;
	bool truncated = true;
	/* "  FIRE " is trimmed and lower-cased: Fire exact, Firefox prefix
	 * (one group over two ids and three images, sorted by image; the
	 * repeated identical entry of deb12 adds nothing), Campfire substring. */
	json_object *result = match(catalog, "  FIRE ", NULL, &apps, &insts, &truncated);
	char *text = summary(result);
	assert_string_equal(text, "Fire[deb12] Firefox[bookworm-gui,deb12,sonoma] Campfire[deb12]");
	assert_int_equal(apps, 3);
	assert_int_equal(insts, 5);
	assert_false(truncated);
	bool t = true;
	assert_true(jsonx_get_bool(result, "truncated", &t));
	assert_false(t);
	free(text);
	json_object_put(result);

	/* Unicode simple case mapping: "ärger" finds "ÄRGER". */
	result = match(catalog, "ärger", NULL, &apps, &insts, &truncated);
	text = summary(result);
	assert_string_equal(text, "ÄRGER[sonoma]");
	free(text);
	json_object_put(result);

	/* Nothing matches: an empty list, not an error. */
	result = match(catalog, "thunderbird", NULL, &apps, &insts, &truncated);
	text = summary(result);
	assert_string_equal(text, "");
	assert_int_equal(apps, 0);
	assert_int_equal(insts, 0);
	free(text);
	json_object_put(result);
	json_object_put(catalog);
}

static void test_os_first_and_aliases_of_images_in_play(void **state)
{
	(void)state;
	json_object *catalog = catalog_of(images_text);
	size_t apps = 0, insts = 0;
	bool truncated = false;
	/* "browser" is an alias of Firefox in deb12 and of Safari in sonoma;
	 * bookworm-gui's Firefox lists none, but has deb12's id, so it is the
	 * same application. */
	json_object *result = match(catalog, "browser", NULL, &apps, &insts, &truncated);
	char *text = summary(result);
	assert_string_equal(text, "Firefox[bookworm-gui,deb12] Safari[sonoma]");
	free(text);
	json_object_put(result);
	/* With os linux, sonoma's installations are dropped first: Safari is
	 * gone, and Firefox keeps only its Linux images. */
	result = match(catalog, "browser", "linux", &apps, &insts, &truncated);
	text = summary(result);
	assert_string_equal(text, "Firefox[bookworm-gui,deb12]");
	free(text);
	json_object_put(result);
	/* With os macos, the macOS Firefox (its own id) has no "browser"
	 * alias, and deb12's alias is not in play: only Safari. */
	result = match(catalog, "browser", "macos", &apps, &insts, &truncated);
	text = summary(result);
	assert_string_equal(text, "Safari[sonoma]");
	free(text);
	json_object_put(result);
	json_object_put(catalog);
}

static void test_installations_bounded_at_100(void **state)
{
	(void)state;
	/* 60 images (the catalog allows 64) of two ids named "Tool": one
	 * group of 120 installations, cut to the first 100 in image order. */
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "[");
	for (int i = 0; i < 60; i++)
		strbuf_printf(&sb,
		              "%s{\"image\":\"img-%03d\",\"os\":\"linux\",\"architecture\":\"x86_64\","
		              "\"applications\":[{\"id\":\"dpkg:tool-a\",\"name\":\"Tool\",\"aliases\":[],"
		              "\"version\":\"1\"},{\"id\":\"dpkg:tool-b\",\"name\":\"Tool\",\"aliases\":[],"
		              "\"version\":\"2\"}]}",
		              i ? "," : "", i);
	strbuf_printf(&sb, "]");
	json_object *catalog = catalog_of(strbuf_str(&sb));
	strbuf_free(&sb);
	size_t apps = 0, insts = 0;
	bool truncated = false;
	json_object *result = match(catalog, "tool", NULL, &apps, &insts, &truncated);
	assert_int_equal(apps, 1);
	assert_int_equal(insts, 100);
	assert_true(truncated);
	json_object *first = json_object_array_get_idx(jsonx_get_array(result, "applications"), 0);
	json_object *list = jsonx_get_array(first, "installations");
	assert_int_equal(json_object_array_length(list), 100);
	json_object *last = json_object_array_get_idx(list, 99);
	assert_string_equal(jsonx_get_str(last, "image"), "img-049");
	assert_string_equal(jsonx_get_str(last, "version"), "2");
	bool t = false;
	assert_true(jsonx_get_bool(result, "truncated", &t));
	assert_true(t);
	json_object_put(result);
	json_object_put(catalog);
}

static void test_trim_and_lower(void **state)
{
	(void)state;
	char *t = catalog_trimmed("\t\n  Über Tool \r\v\f");
	assert_string_equal(t, "Über Tool");
	char *l = catalog_lower_utf8(t);
	assert_string_equal(l, "über tool");
	free(t);
	free(l);
	t = catalog_trimmed(" \t ");
	assert_string_equal(t, "");
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_broken_catalogs_are_refused_by_rule),
	    cmocka_unit_test(test_rank_groups_and_order),
	    cmocka_unit_test(test_os_first_and_aliases_of_images_in_play),
	    cmocka_unit_test(test_installations_bounded_at_100),
	    cmocka_unit_test(test_trim_and_lower),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
