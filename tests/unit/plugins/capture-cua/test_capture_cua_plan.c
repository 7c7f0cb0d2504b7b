/*
 * capture-cua plan() through the real loader: snapshots on for catalogs
 * listing dpkg:cua-driver or bundle:com.trycua.driver and off otherwise,
 * the five-entry argv with one @OUT@, the default driver path for darwin
 * and other platforms (and, before staging, from the catalog id), the
 * corrected path, RELAY_CUA_DRIVER, and refused input.
 */
#include <json-c/json.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "loader/loader.h"

#define MAC_DRIVER "/Applications/CuaDriver.app/Contents/MacOS/cua-driver"

static plugin_registry registry;
static loaded_plugin *plugin;
static char state_dir[64];

static int group_setup(void **state)
{
	(void)state;
	const char *build = getenv("RELAY_BUILD_DIR");
	if (build == NULL) {
		fprintf(stderr, "RELAY_BUILD_DIR is not set (run under ctest)\n");
		return -1;
	}
	char dir[512], config[512];
	snprintf(dir, sizeof dir, "%s/lib/mcp-relay/plugins", build);
	setenv("MCP_RELAY_PLUGIN_PATH", dir, 1);
	strcpy(state_dir, "/tmp/relay-cua-state-XXXXXX");
	if (mkdtemp(state_dir) == NULL)
		return -1;
	relay_error err = {0};
	char *path = loader_find_plugin("capture-cua", &err);
	if (path == NULL) {
		fprintf(stderr, "%s\n", err.message);
		return -1;
	}
	snprintf(config, sizeof config,
	         "{\"stateDir\":\"%s\",\"libexecDir\":\"%s/libexec/mcp-relay\",\"options\":{}}", state_dir,
	         build);
	relay_status st = loader_load(&registry, path, RELAY_KIND_CAPTURE, config, &plugin, &err);
	free(path);
	if (st != RELAY_OK) {
		fprintf(stderr, "%s\n", err.message);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	loader_shutdown(&registry);
	rmdir(state_dir);
	return 0;
}

/* Runs plan() and parses the result (caller puts it). */
static json_object *plan(const char *context)
{
	char *text = NULL;
	relay_error err = {0};
	relay_status st = plugin->capture.plan(plugin->state, context, 0, &text, &err);
	if (st != RELAY_OK)
		fprintf(stderr, "plan failed: %s\n", err.message);
	assert_int_equal(st, RELAY_OK);
	assert_non_null(text);
	json_object *obj = json_tokener_parse(text);
	free(text);
	assert_non_null(obj);
	return obj;
}

static json_object *member(json_object *o, const char *key)
{
	json_object *v = NULL;
	assert_true(json_object_object_get_ex(o, key, &v));
	return v;
}

static void assert_enabled_with(json_object *p, const char *driver, const char *because)
{
	assert_true(json_object_get_boolean(member(p, "enabled")));
	assert_string_equal(json_object_get_string(member(p, "because")), because);
	assert_string_equal(json_object_get_string(member(p, "cuaDriver")), driver);
	json_object *capture = member(p, "capture");
	assert_string_equal(json_object_get_string(member(capture, "plugin")), "capture-cua");
	assert_string_equal(json_object_get_string(member(capture, "check")), "cua-driver-json");
	assert_int_equal(json_object_get_int(member(capture, "timeoutMs")), 60000);
	json_object *argv = member(capture, "argv");
	assert_int_equal(json_object_array_length(argv), 5);
	const char *expect[] = {driver, "call", "get_desktop_state", "--json",
	                        "{\"screenshot_out_file\":\"@OUT@\"}"};
	int outs = 0;
	for (size_t i = 0; i < 5; i++) {
		const char *arg = json_object_get_string(json_object_array_get_idx(argv, i));
		assert_string_equal(arg, expect[i]);
		for (const char *q = strstr(arg, "@OUT@"); q; q = strstr(q + 1, "@OUT@"))
			outs++;
	}
	assert_int_equal(outs, 1);
	assert_int_equal(json_object_array_length(member(p, "stage")), 0);
	assert_string_equal(json_object_get_string(member(member(p, "env"), "RELAY_CUA_DRIVER")), driver);
}

static void test_linux_catalog_with_driver(void **state)
{
	(void)state;
	json_object *p =
	    plan("{\"lease\":{},\"applications\":[{\"id\":\"dpkg:xvfb\",\"name\":\"xvfb\",\"version\":\"2\"},"
	         "{\"id\":\"dpkg:cua-driver\",\"name\":\"cua-driver\",\"version\":\"0.4.1\"}],"
	         "\"platform\":\"linux-x86_64\",\"guestRoot\":\"/var/tmp/r\",\"cuaDriver\":null}");
	assert_enabled_with(p, "cua-driver", "the image lists dpkg:cua-driver");
	json_object_put(p);
}

static void test_macos_catalog_with_driver(void **state)
{
	(void)state;
	json_object *p =
	    plan("{\"lease\":{},\"applications\":[{\"id\":\"bundle:com.apple.Safari\",\"name\":\"Safari\","
	         "\"version\":null},{\"id\":\"bundle:com.trycua.driver\",\"name\":\"CuaDriver\","
	         "\"version\":null}],\"platform\":\"darwin-arm64\",\"guestRoot\":\"/var/tmp/r\","
	         "\"cuaDriver\":null}");
	assert_enabled_with(p, MAC_DRIVER, "the image lists bundle:com.trycua.driver");
	json_object_put(p);
}

static void test_platform_decides_default_path(void **state)
{
	(void)state;
	/* The platform wins over the kind of catalog id... */
	json_object *p =
	    plan("{\"applications\":[{\"id\":\"dpkg:cua-driver\"}],\"platform\":\"darwin-x86_64\","
	         "\"cuaDriver\":null}");
	assert_enabled_with(p, MAC_DRIVER, "the image lists dpkg:cua-driver");
	json_object_put(p);
	p = plan("{\"applications\":[{\"id\":\"bundle:com.trycua.driver\"}],\"platform\":\"linux-aarch64\","
	         "\"cuaDriver\":null}");
	assert_enabled_with(p, "cua-driver", "the image lists bundle:com.trycua.driver");
	json_object_put(p);
	/* ...and before staging (no platform) the id tells macOS from Linux. */
	p = plan("{\"applications\":[{\"id\":\"bundle:com.trycua.driver\"}],\"platform\":null,\"cuaDriver\":"
	         "null}");
	assert_enabled_with(p, MAC_DRIVER, "the image lists bundle:com.trycua.driver");
	json_object_put(p);
	p = plan("{\"applications\":[{\"id\":\"dpkg:cua-driver\"}],\"platform\":null,\"cuaDriver\":null}");
	assert_enabled_with(p, "cua-driver", "the image lists dpkg:cua-driver");
	json_object_put(p);
}

static void test_corrected_path(void **state)
{
	(void)state;
	json_object *p =
	    plan("{\"applications\":[{\"id\":\"bundle:com.trycua.driver\"}],\"platform\":\"darwin-arm64\","
	         "\"cuaDriver\":\"/usr/local/bin/cua-driver\"}");
	assert_enabled_with(p, "/usr/local/bin/cua-driver", "the image lists bundle:com.trycua.driver");
	json_object_put(p);
}

static void assert_disabled(json_object *p)
{
	assert_false(json_object_get_boolean(member(p, "enabled")));
	assert_string_equal(json_object_get_string(member(p, "because")),
	                    "the image lists neither bundle:com.trycua.driver nor dpkg:cua-driver");
	assert_true(json_object_is_type(member(p, "capture"), json_type_null));
	assert_true(json_object_is_type(member(p, "cuaDriver"), json_type_null));
	assert_int_equal(json_object_array_length(member(p, "stage")), 0);
	assert_int_equal(json_object_object_length(member(p, "env")), 0);
}

static void test_catalog_without_driver(void **state)
{
	(void)state;
	json_object *p = plan("{\"applications\":[{\"id\":\"dpkg:xvfb\"},{\"id\":\"chromium\"},"
	                      "{\"id\":\"dpkg:cua-driver-docs\"},{\"name\":\"cua-driver\"}],"
	                      "\"platform\":\"linux-x86_64\",\"cuaDriver\":\"/opt/cua-driver\"}");
	assert_disabled(p);
	json_object_put(p);
	p = plan("{\"applications\":[],\"platform\":null,\"cuaDriver\":null}");
	assert_disabled(p);
	json_object_put(p);
	p = plan("{\"lease\":{}}");
	assert_disabled(p);
	json_object_put(p);
}

static void test_refused_input(void **state)
{
	(void)state;
	char *text = NULL;
	relay_error err = {0};
	assert_int_equal(plugin->capture.plan(plugin->state, "[1,2]", 0, &text, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_null(text);
	assert_int_equal(plugin->capture.plan(plugin->state, "{\"applications\":{}}", 0, &text, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(
	    plugin->capture.plan(plugin->state,
	                         "{\"applications\":[{\"id\":\"dpkg:cua-driver\"}],\"cuaDriver\":\"\"}", 0,
	                         &text, &err),
	    RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(plugin->capture.plan(plugin->state, "{}", 0x10, &text, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
	assert_null(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_linux_catalog_with_driver),
	    cmocka_unit_test(test_macos_catalog_with_driver),
	    cmocka_unit_test(test_platform_decides_default_path),
	    cmocka_unit_test(test_corrected_path),
	    cmocka_unit_test(test_catalog_without_driver),
	    cmocka_unit_test(test_refused_input),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
