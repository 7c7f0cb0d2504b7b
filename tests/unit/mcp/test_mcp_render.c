/*
 * Rendering tool results (spec/tools.md §2.3, §5): the text block (headline plus
 * two-space pretty JSON), the 2000-line and 51,200-byte bound at a UTF-8
 * boundary, the spill file (0700 folder, 0600 file, the complete JSON, the
 * fallback folder), the structuredContent reductions, the image block,
 * isError and the modern-era fields.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "call/tool_result.h"
#include "mcp/render.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

typedef struct fixture {
	char root[64];
	char tmp[96];
	char fallback[96];
} fixture;

static int setup(void **state)
{
	fixture *fx = calloc(1, sizeof *fx);
	snprintf(fx->root, sizeof fx->root, "/tmp/mcp-render-XXXXXX");
	if (mkdtemp(fx->root) == NULL)
		return -1;
	snprintf(fx->tmp, sizeof fx->tmp, "%s/tmp", fx->root);
	snprintf(fx->fallback, sizeof fx->fallback, "%s/results", fx->root);
	mkdir(fx->tmp, 0700);
	setenv("TMPDIR", fx->tmp, 1);
	render_set_fallback_spill_dir(fx->fallback);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	fixture *fx = *state;
	relay_error err;
	fs_remove_tree(fx->root, &err);
	render_set_fallback_spill_dir(NULL);
	free(fx);
	return 0;
}

/* Renders and parses the result object. */
static json_object *render(const tool_result *r, bool modern, strbuf *raw_out)
{
	strbuf sb = STRBUF_INIT;
	render_tool_result(&sb, r, modern);
	assert_true(strbuf_ok(&sb));
	assert_null(memchr(sb.data, '\n', sb.len)); /* one line */
	json_object *obj = jsonx_parse(sb.data, sb.len, NULL, NULL, 0);
	assert_non_null(obj);
	if (raw_out)
		*raw_out = sb;
	else
		strbuf_free(&sb);
	return obj;
}

static const char *text_of(json_object *result)
{
	json_object *content = jsonx_get_array(result, "content");
	return jsonx_get_str(json_object_array_get_idx(content, 0), "text");
}

static void test_envelope(void **state)
{
	(void)state;
	json_object *s = json_object_new_object();
	jsonx_add_str(s, "guest", "a-1");
	jsonx_add_int(s, "n", 3);
	json_object *nested = json_object_new_object();
	jsonx_add(nested, "list", json_object_new_array());
	jsonx_add_str(nested, "t\xc3\xa9xt", "\xe2\x82\xac");
	jsonx_add(s, "nested", nested);
	tool_result *r = tool_result_ok(s, "Did %s", "things");
	strbuf raw;
	json_object *out = render(r, false, &raw);
	/* Key order: content, structuredContent, isError; no modern fields. */
	assert_true(strncmp(raw.data,
	                    "{\"content\":[{\"type\":\"text\",\"text\":\"Did things\\n{\\n  \\\"guest\\\"",
	                    60) == 0);
	assert_string_equal(text_of(out),
	                    "Did things\n{\n  \"guest\": \"a-1\",\n  \"n\": 3,\n  \"nested\": {\n    "
	                    "\"list\": [],\n    \"t\xc3\xa9xt\": \"\xe2\x82\xac\"\n  }\n}");
	assert_non_null(strstr(raw.data, "\"structuredContent\":{\"guest\":\"a-1\",\"n\":3,"));
	bool is_error = true;
	assert_true(jsonx_get_bool(out, "isError", &is_error));
	assert_false(is_error);
	assert_false(jsonx_has(out, "resultType"));
	assert_false(jsonx_has(out, "_meta"));
	assert_int_equal(json_object_array_length(jsonx_get_array(out, "content")), 1);
	strbuf_free(&raw);
	json_object_put(out);

	out = render(r, true, NULL);
	assert_string_equal(jsonx_get_str(out, "resultType"), "complete");
	json_object *info = jsonx_get_obj(jsonx_get_obj(out, "_meta"), "io.modelcontextprotocol/serverInfo");
	assert_string_equal(jsonx_get_str(info, "name"), "relay");
	json_object_put(out);
	tool_result_free(r);
}

static void test_error_result_and_headline(void **state)
{
	(void)state;
	tool_result *r = tool_result_error(NULL, "guest-limit", "Too many\nguests\r\nheld");
	json_object *out = render(r, false, NULL);
	assert_string_equal(text_of(out),
	                    "Too many guests  held\n{\n  \"error\": {\n    \"code\": \"guest-limit\",\n"
	                    "    \"message\": \"Too many\\nguests\\r\\nheld\"\n  }\n}");
	bool is_error = false;
	assert_true(jsonx_get_bool(out, "isError", &is_error));
	assert_true(is_error);
	json_object_put(out);
	/* A headline with a line break set directly is folded too. */
	tool_result_set_headline(r, "two\nlines");
	out = render(r, false, NULL);
	assert_true(strncmp(text_of(out), "two lines\n{", 11) == 0);
	json_object_put(out);
	tool_result_free(r);

	/* isError without an error object: the renderer adds one (spec/tools.md §2.3). */
	r = tool_result_ok(NULL, "odd");
	r->is_error = true;
	out = render(r, false, NULL);
	json_object *error = jsonx_get_obj(jsonx_get_obj(out, "structuredContent"), "error");
	assert_string_equal(jsonx_get_str(error, "code"), "internal");
	json_object_put(out);
	tool_result_free(r);
}

static void test_image_block_and_omitted_key(void **state)
{
	(void)state;
	json_object *s = json_object_new_object();
	jsonx_add_str(s, "guest", "a-1");
	json_object *delivery = json_object_new_object();
	jsonx_add_str(delivery, "status", "failed");
	jsonx_add(s, "imageDelivery", delivery);
	tool_result *r = tool_result_error(s, "delivery-failed", "image failed");
	r->image_base64 = strdup("iVBORw0KGgo=");
	r->image_mime = strdup("image/png");
	r->text_omits_key = "imageDelivery";
	json_object *out = render(r, false, NULL);
	json_object *content = jsonx_get_array(out, "content");
	assert_int_equal(json_object_array_length(content), 2);
	json_object *image = json_object_array_get_idx(content, 1);
	assert_string_equal(jsonx_get_str(image, "type"), "image");
	assert_string_equal(jsonx_get_str(image, "data"), "iVBORw0KGgo=");
	assert_string_equal(jsonx_get_str(image, "mimeType"), "image/png");
	assert_null(strstr(text_of(out), "imageDelivery"));
	assert_non_null(jsonx_get_obj(jsonx_get_obj(out, "structuredContent"), "imageDelivery"));
	bool is_error = false;
	jsonx_get_bool(out, "isError", &is_error);
	assert_true(is_error); /* the image stays although isError is true */
	json_object_put(out);
	tool_result_free(r);
}

static void test_text_bound(void **state)
{
	(void)state;
	/* Lines: the first 2000 are kept, without the 2000th line break. */
	strbuf sb = STRBUF_INIT;
	for (int i = 0; i < 2500; i++)
		strbuf_printf(&sb, "line %d\n", i);
	size_t keep = render_text_bound(sb.data, sb.len);
	assert_int_equal(memchr(sb.data + keep, '\n', 1) != NULL, 1);
	size_t lines = 1;
	for (size_t i = 0; i < keep; i++)
		lines += sb.data[i] == '\n';
	assert_int_equal(lines, 2000);
	strbuf_free(&sb);
	/* Exactly 2000 lines: nothing cut. */
	for (int i = 0; i < 1999; i++)
		strbuf_puts(&sb, "x\n");
	strbuf_puts(&sb, "x");
	assert_int_equal(render_text_bound(sb.data, sb.len), sb.len);
	strbuf_free(&sb);
	/* Bytes: at most 51,200, at a UTF-8 boundary. */
	for (int i = 0; i < 30000; i++)
		strbuf_puts(&sb, "\xe2\x82\xac"); /* 3 bytes each */
	keep = render_text_bound(sb.data, sb.len);
	assert_true(keep <= RENDER_TEXT_MAX_BYTES);
	assert_true(keep > RENDER_TEXT_MAX_BYTES - 3);
	assert_int_equal(keep % 3, 0);
	assert_true(utf8_valid(sb.data, keep));
	strbuf_free(&sb);
	strbuf_append(&sb, "", 0);
	assert_int_equal(render_text_bound(sb.data, 0), 0);
	strbuf_free(&sb);
}

/* The path after "[Truncated. Full result: " (malloc'd), or NULL. */
static char *marker_path(const char *text)
{
	const char *m = strstr(text, "\n[Truncated. Full result: ");
	if (m == NULL)
		return NULL;
	m += strlen("\n[Truncated. Full result: ");
	const char *end = strchr(m, ']');
	assert_non_null(end);
	assert_string_equal(end, "]");
	return strndup(m, (size_t)(end - m));
}

static void check_spill(const char *path, const json_object *structured)
{
	struct stat st;
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	char *dir = fs_dirname(path);
	assert_int_equal(lstat(dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	free(dir);
	json_object *spilled = NULL;
	relay_error err;
	assert_int_equal(fs_read_json(path, 64u << 20, &spilled, &err), RELAY_OK);
	char *a = jsonx_to_string(spilled, 0), *b = jsonx_to_string(structured, 0);
	assert_string_equal(a, b);
	free(a);
	free(b);
	json_object_put(spilled);
}

static void test_long_text_spills(void **state)
{
	fixture *fx = *state;
	/* A 64,000-character output: over 50 KiB. */
	json_object *s = json_object_new_object();
	char *output = malloc(64001);
	memset(output, 'o', 64000);
	output[64000] = '\0';
	jsonx_add_str(s, "output", output);
	jsonx_add_str(s, "guest", "a-1");
	tool_result *r = tool_result_ok(s, "ran");
	json_object *out = render(r, false, NULL);
	const char *text = text_of(out);
	char *path = marker_path(text);
	assert_non_null(path);
	char want_dir[160];
	snprintf(want_dir, sizeof want_dir, "%s/mcp-relay-results/", fx->tmp);
	assert_true(strncmp(path, want_dir, strlen(want_dir)) == 0);
	assert_true(strlen(path) == strlen(want_dir) + 36 + 5);
	/* The bound excludes the headline and the marker. */
	const char *body = strchr(text, '\n') + 1;
	size_t body_len = (size_t)(strstr(text, "\n[Truncated.") - body);
	assert_true(body_len <= RENDER_TEXT_MAX_BYTES);
	assert_true(body_len > RENDER_TEXT_MAX_BYTES - 8);
	check_spill(path, r->structured);
	/* structuredContent: reduced, strings cut to 4096 bytes with an ellipsis. */
	json_object *sc = jsonx_get_obj(out, "structuredContent");
	bool truncated = false;
	assert_true(jsonx_get_bool(sc, "resultTruncated", &truncated) && truncated);
	assert_string_equal(jsonx_get_str(sc, "fullResult"), path);
	const char *cut = jsonx_get_str(sc, "output");
	assert_int_equal(strlen(cut), 4096);
	assert_string_equal(cut + 4093, "\xe2\x80\xa6");
	assert_string_equal(jsonx_get_str(sc, "guest"), "a-1");
	/* The two keys come first. */
	json_object_object_foreach(sc, key, value)
	{
		(void)value;
		assert_string_equal(key, "resultTruncated");
		break;
	}
	free(path);
	free(output);
	json_object_put(out);
	tool_result_free(r);
}

static void test_many_lines_spill(void **state)
{
	(void)state;
	/* 1,000 files listed: over 2000 lines of pretty JSON, under 50 KiB. */
	json_object *s = json_object_new_object();
	json_object *files = json_object_new_array();
	for (int i = 0; i < 1000; i++) {
		json_object *f = json_object_new_object();
		char name[16];
		snprintf(name, sizeof name, "f%d", i);
		jsonx_add_str(f, "n", name);
		json_object_array_add(files, f);
	}
	jsonx_add(s, "files", files);
	tool_result *r = tool_result_ok(s, "extracted");
	json_object *out = render(r, false, NULL);
	const char *text = text_of(out);
	char *path = marker_path(text);
	assert_non_null(path);
	size_t lines = 0;
	const char *body = strchr(text, '\n') + 1;
	const char *marker = strstr(text, "\n[Truncated.");
	for (const char *c = body; c < marker; c++)
		lines += *c == '\n';
	assert_int_equal(lines + 1, 2000);
	check_spill(path, r->structured);
	/* The compact JSON is under 51,200 bytes: structuredContent is whole. */
	json_object *sc = jsonx_get_obj(out, "structuredContent");
	assert_false(jsonx_has(sc, "resultTruncated"));
	assert_int_equal(json_object_array_length(jsonx_get_array(sc, "files")), 1000);
	free(path);
	json_object_put(out);
	tool_result_free(r);
}

static void test_reduction_levels(void **state)
{
	(void)state;
	/* Arrays keep 50 items. */
	json_object *s = json_object_new_object();
	json_object *items = json_object_new_array();
	for (int i = 0; i < 3000; i++)
		json_object_array_add(items, json_object_new_string("0123456789abcdef0123456789"));
	jsonx_add(s, "items", items);
	jsonx_add_str(s, "outcome", "ok");
	tool_result *r = tool_result_ok(s, "many");
	json_object *out = render(r, false, NULL);
	json_object *sc = jsonx_get_obj(out, "structuredContent");
	assert_int_equal(json_object_array_length(jsonx_get_array(sc, "items")), 50);
	json_object_put(out);
	tool_result_free(r);

	/* Still too big after reduction: only top-level scalars plus guest,
	 * error, outcome and imageDelivery. */
	s = json_object_new_object();
	jsonx_add_str(s, "guest", "a-1");
	jsonx_add_int(s, "count", 7);
	json_object *wide = json_object_new_object();
	for (int i = 0; i < 40; i++) {
		char key[16];
		snprintf(key, sizeof key, "k%d", i);
		char *big = malloc(5000);
		memset(big, 'b', 4999);
		big[4999] = '\0';
		jsonx_add_str(wide, key, big);
		free(big);
	}
	jsonx_add(s, "wide", wide);
	json_object *delivery = json_object_new_object();
	jsonx_add_str(delivery, "status", "delivered");
	jsonx_add(s, "imageDelivery", delivery);
	r = tool_result_ok(s, "wide");
	strbuf raw;
	out = render(r, false, &raw);
	sc = jsonx_get_obj(out, "structuredContent");
	assert_false(jsonx_has(sc, "wide"));
	assert_string_equal(jsonx_get_str(sc, "guest"), "a-1");
	assert_non_null(jsonx_get_obj(sc, "imageDelivery"));
	assert_true(jsonx_has(sc, "count"));
	assert_true(jsonx_has(sc, "fullResult"));
	char *compact = jsonx_to_string(sc, 0);
	assert_true(strlen(compact) <= RENDER_TEXT_MAX_BYTES);
	free(compact);
	strbuf_free(&raw);
	json_object_put(out);
	tool_result_free(r);
}

static void test_small_results_do_not_spill(void **state)
{
	fixture *fx = *state;
	char dir[160];
	snprintf(dir, sizeof dir, "%s/mcp-relay-results", fx->tmp);
	relay_error err;
	fs_remove_tree(dir, &err);
	tool_result *r = tool_result_ok(NULL, "small");
	json_object *out = render(r, false, NULL);
	assert_null(strstr(text_of(out), "Truncated"));
	struct stat st;
	assert_int_equal(stat(dir, &st), -1); /* nothing created */
	json_object_put(out);
	tool_result_free(r);
}

static tool_result *big_result(void)
{
	json_object *s = json_object_new_object();
	char *big = malloc(60001);
	memset(big, 'z', 60000);
	big[60000] = '\0';
	jsonx_add_str(s, "output", big);
	free(big);
	return tool_result_ok(s, "big");
}

static void test_spill_folder_rules(void **state)
{
	fixture *fx = *state;
	char dir[160];
	snprintf(dir, sizeof dir, "%s/mcp-relay-results", fx->tmp);
	relay_error err;

	/* An existing folder open to others is closed to 0700. */
	fs_remove_tree(dir, &err);
	assert_int_equal(mkdir(dir, 0777), 0);
	chmod(dir, 0777);
	tool_result *r = big_result();
	json_object *out = render(r, false, NULL);
	char *path = marker_path(text_of(out));
	assert_true(strncmp(path, dir, strlen(dir)) == 0);
	check_spill(path, r->structured);
	free(path);
	json_object_put(out);

	/* A symbolic link in its place: the session's results/ folder is used. */
	fs_remove_tree(dir, &err);
	char target[160];
	snprintf(target, sizeof target, "%s/elsewhere", fx->root);
	mkdir(target, 0700);
	assert_int_equal(symlink(target, dir), 0);
	out = render(r, false, NULL);
	path = marker_path(text_of(out));
	assert_true(strncmp(path, fx->fallback, strlen(fx->fallback)) == 0);
	check_spill(path, r->structured);
	free(path);
	json_object_put(out);
	fs_remove_tree(dir, &err);

	/* A file in its place: the fallback too. */
	FILE *f = fopen(dir, "w");
	fclose(f);
	out = render(r, false, NULL);
	path = marker_path(text_of(out));
	assert_true(strncmp(path, fx->fallback, strlen(fx->fallback)) == 0);
	free(path);
	json_object_put(out);
	unlink(dir);

	/* TMPDIR that is relative or missing: /tmp. */
	char base[4200];
	setenv("TMPDIR", "relative/dir", 1);
	assert_string_equal(render_spill_base(base, sizeof base), "/tmp/mcp-relay-results");
	setenv("TMPDIR", "/nonexistent-tmpdir", 1);
	assert_string_equal(render_spill_base(base, sizeof base), "/tmp/mcp-relay-results");
	unsetenv("TMPDIR");
	assert_string_equal(render_spill_base(base, sizeof base), "/tmp/mcp-relay-results");
	char slashed[200];
	snprintf(slashed, sizeof slashed, "%s//", fx->tmp);
	setenv("TMPDIR", slashed, 1);
	assert_string_equal(render_spill_base(base, sizeof base), dir);
	setenv("TMPDIR", fx->tmp, 1);
	tool_result_free(r);
}

static char *render_text(const tool_result *r, bool modern)
{
	strbuf sb = STRBUF_INIT;
	render_tool_result(&sb, r, modern);
	assert_true(strbuf_ok(&sb));
	return strbuf_detach(&sb, NULL);
}

static void test_cache_is_transparent(void **state)
{
	(void)state;
	json_object *s = json_object_new_object();
	jsonx_add_str(s, "k", "v");
	tool_result *r = tool_result_ok(s, "same");
	char *first = render_text(r, false);
	char *second = render_text(r, false); /* from the cache */
	assert_string_equal(first, second);
	char *modern = render_text(r, true);
	assert_true(strncmp(modern, first, strlen(first) - 1) == 0);
	assert_non_null(strstr(modern, "\"resultType\":\"complete\""));
	/* Anything that changes the rendering misses the cache. */
	tool_result_set_headline(r, "other");
	char *third = render_text(r, false);
	assert_non_null(strstr(third, "\"text\":\"other\\n"));
	jsonx_add_int(r->structured, "n", 1);
	char *fourth = render_text(r, false);
	assert_non_null(strstr(fourth, "\"n\":1"));
	r->text_omits_key = "n";
	char *fifth = render_text(r, false);
	assert_null(strstr(fifth, "\\\"n\\\": 1"));
	assert_non_null(strstr(fifth, "\"structuredContent\":{\"k\":\"v\",\"n\":1}"));
	free(first);
	free(second);
	free(modern);
	free(third);
	free(fourth);
	free(fifth);
	tool_result_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_envelope),
	    cmocka_unit_test(test_error_result_and_headline),
	    cmocka_unit_test(test_image_block_and_omitted_key),
	    cmocka_unit_test(test_text_bound),
	    cmocka_unit_test(test_long_text_spills),
	    cmocka_unit_test(test_many_lines_spill),
	    cmocka_unit_test(test_reduction_levels),
	    cmocka_unit_test(test_small_results_do_not_spill),
	    cmocka_unit_test(test_spill_folder_rules),
	    cmocka_unit_test(test_cache_is_transparent),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
