/* The reference plugin, loaded through the real loader: its plan with and
 * without the software and display it needs, and its flag and input checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loader/loader.h"
#include "util/jsonx.h"

static loaded_plugin *load_reference(plugin_registry *registry)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/lib/mcp-relay/plugins", getenv("RELAY_BUILD_DIR"));
	setenv("MCP_RELAY_PLUGIN_PATH", dir, 1);
	relay_error err;
	char *path = loader_find_plugin("capture-reference", &err);
	assert_non_null(path);
	loaded_plugin *p = NULL;
	assert_int_equal(loader_load(registry, path, RELAY_KIND_CAPTURE, "{}", &p, &err), RELAY_OK);
	free(path);
	return p;
}

static json_object *plan(loaded_plugin *p, const char *context, relay_status expect)
{
	char *out = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	assert_int_equal(p->capture.plan(p->state, context, 0, &out, &err), expect);
	if (expect != RELAY_OK)
		return NULL;
	json_object *obj = jsonx_parse_str(out, NULL, 0);
	free(out);
	assert_non_null(obj);
	return obj;
}

static void test_plan(void **state)
{
	(void)state;
	plugin_registry registry = {0};
	loaded_plugin *p = load_reference(&registry);

	json_object *on = plan(
	    p,
	    "{\"lease\":{\"display\":\":7\"},\"applications\":[{\"id\":\"dpkg:imagemagick\","
	    "\"name\":\"imagemagick\",\"version\":\"8\"}],\"platform\":null,\"guestRoot\":\"/var/tmp/r\","
	    "\"cuaDriver\":null}",
	    RELAY_OK);
	bool enabled = false;
	assert_true(jsonx_get_bool(on, "enabled", &enabled) && enabled);
	json_object *capture = jsonx_get_obj(on, "capture");
	assert_string_equal(jsonx_get_str(capture, "check"), "png-file");
	json_object *argv = jsonx_get_array(capture, "argv");
	int outs = 0;
	for (size_t i = 0; i < json_object_array_length(argv); i++)
		outs += strcmp(json_object_get_string(json_object_array_get_idx(argv, i)), "@OUT@") == 0;
	assert_int_equal(outs, 1);
	assert_non_null(strstr(json_object_get_string(json_object_array_get_idx(argv, 2)), "DISPLAY=:7"));
	json_object_put(on);

	json_object *off = plan(p, "{\"lease\":{\"display\":\":7\"},\"applications\":[]}", RELAY_OK);
	assert_true(jsonx_get_bool(off, "enabled", &enabled) && !enabled);
	assert_true(jsonx_has(off, "capture") && jsonx_get_obj(off, "capture") == NULL);
	assert_string_equal(jsonx_get_str(off, "because"), "the image does not list dpkg:imagemagick");
	json_object_put(off);

	json_object *no_display =
	    plan(p, "{\"lease\":{},\"applications\":[{\"id\":\"dpkg:imagemagick\"}]}", RELAY_OK);
	assert_string_equal(jsonx_get_str(no_display, "because"), "the lease names no X display");
	json_object_put(no_display);

	plan(p, "not json", RELAY_E_INVALID_ARGUMENT);
	char *out = NULL;
	relay_error err;
	assert_int_equal(p->capture.plan(p->state, "{}", 0x80, &out, &err), RELAY_E_UNSUPPORTED_FLAGS);
	assert_null(out);
	loader_shutdown(&registry);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_plan)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
