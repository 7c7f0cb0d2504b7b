/*
 * test_capture_x11_plan — plugins/capture-x11 through the real loader: the
 * inventory rule (the lease's display, else dpkg:xvfb or
 * dpkg:xserver-xorg-core in the catalog, else off), the planned argv,
 * check and timeout, the stage entry for the guest's platform (and its
 * absence before staging or when no build exists), and input refusals.
 * Needs no guest and no root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "loader/loader.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

static char g_libexec[512];

static loaded_plugin *load_capture(plugin_registry *reg, const char *libexec)
{
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/lib/mcp-relay/plugins", getenv("RELAY_BUILD_DIR"));
	setenv("MCP_RELAY_PLUGIN_PATH", dir, 1);
	relay_error err;
	char *path = loader_find_plugin("capture-x11", &err);
	if (path == NULL)
		fail_msg("%s", err.message);
	char cfg[1024];
	if (libexec)
		snprintf(cfg, sizeof cfg, "{\"stateDir\":\"/tmp\",\"libexecDir\":\"%s\"}", libexec);
	else
		snprintf(cfg, sizeof cfg, "{\"stateDir\":\"/tmp\"}");
	loaded_plugin *p = NULL;
	if (loader_load(reg, path, RELAY_KIND_CAPTURE, cfg, &p, &err) != RELAY_OK)
		fail_msg("%s", err.message);
	free(path);
	return p;
}

static json_object *plan(loaded_plugin *p, const char *context)
{
	char *out = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (p->capture.plan(p->state, context, 0, &out, &err) != RELAY_OK)
		fail_msg("plan: %s", err.message);
	json_object *o = jsonx_parse_str(out, NULL, 0);
	free(out);
	assert_non_null(o);
	return o;
}

static bool enabled_of(json_object *plan_obj)
{
	bool b = false;
	assert_true(jsonx_get_bool(plan_obj, "enabled", &b));
	return b;
}

static int setup(void **state)
{
	(void)state;
	/* A libexec folder with a stand-in build for linux-x86_64 only. */
	snprintf(g_libexec, sizeof g_libexec, "/tmp/capture-x11-test-XXXXXX");
	assert_non_null(mkdtemp(g_libexec));
	char path[700];
	snprintf(path, sizeof path, "%s/linux-x86_64", g_libexec);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/linux-x86_64/relay-x11shot", g_libexec);
	relay_error err;
	assert_int_equal(fs_write_durable(path, "#!/bin/true\n", 12, 0700, &err), RELAY_OK);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	relay_error err;
	fs_remove_tree(g_libexec, &err);
	return 0;
}

static void test_display_from_lease(void **state)
{
	(void)state;
	plugin_registry reg = {0};
	loaded_plugin *p = load_capture(&reg, g_libexec);
	json_object *o =
	    plan(p, "{\"lease\":{\"display\":\":0\"},\"applications\":[],\"platform\":\"linux-x86_64\","
	            "\"guestRoot\":\"/var/tmp/R\",\"cuaDriver\":null}");
	assert_true(enabled_of(o));
	assert_string_equal(jsonx_get_str(o, "because"), "the lease has the X display :0");
	json_object *capture = jsonx_get_obj(o, "capture");
	assert_string_equal(jsonx_get_str(capture, "plugin"), "capture-x11");
	assert_string_equal(jsonx_get_str(capture, "check"), "png-file");
	int64_t t = 0;
	assert_true(jsonx_get_int(capture, "timeoutMs", &t) && t == 60000);
	json_object *argv = jsonx_get_array(capture, "argv");
	const char *want[] = {"/var/tmp/R/bin/relay-x11shot", "--display", ":0", "--out", "@OUT@"};
	assert_int_equal(json_object_array_length(argv), 5);
	for (size_t i = 0; i < 5; i++)
		assert_string_equal(json_object_get_string(json_object_array_get_idx(argv, i)), want[i]);
	json_object *stage = jsonx_get_array(o, "stage");
	assert_int_equal(json_object_array_length(stage), 1);
	char local[700];
	snprintf(local, sizeof local, "%s/linux-x86_64/relay-x11shot", g_libexec);
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(stage, 0), "local"), local);
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(stage, 0), "remote"),
	                    "bin/relay-x11shot");
	assert_true(jsonx_has(o, "cuaDriver") && jsonx_get_str(o, "cuaDriver") == NULL);
	json_object_put(o);
	loader_shutdown(&reg);
}

static void test_display_from_catalog(void **state)
{
	(void)state;
	plugin_registry reg = {0};
	loaded_plugin *p = load_capture(&reg, g_libexec);
	/* dpkg:xvfb; before staging (platform null) nothing is staged yet */
	json_object *o = plan(
	    p, "{\"lease\":{\"display\":null},\"applications\":[{\"id\":\"dpkg:bash\",\"name\":\"bash\"},"
	       "{\"id\":\"dpkg:xvfb\",\"name\":\"xvfb\",\"version\":\"2:21\"}],\"platform\":null,"
	       "\"guestRoot\":\"/var/tmp/R/\"}");
	assert_true(enabled_of(o));
	assert_string_equal(jsonx_get_str(o, "because"), "the image lists dpkg:xvfb");
	json_object *argv = jsonx_get_array(jsonx_get_obj(o, "capture"), "argv");
	assert_string_equal(json_object_get_string(json_object_array_get_idx(argv, 0)),
	                    "/var/tmp/R/bin/relay-x11shot");
	assert_string_equal(json_object_get_string(json_object_array_get_idx(argv, 2)), ":0");
	assert_int_equal(json_object_array_length(jsonx_get_array(o, "stage")), 0);
	json_object_put(o);
	/* dpkg:xserver-xorg-core with an architecture suffix */
	o = plan(
	    p, "{\"lease\":{},\"applications\":[{\"id\":\"dpkg:xserver-xorg-core:arm64\"}],\"platform\":null,"
	       "\"guestRoot\":\"/r\"}");
	assert_true(enabled_of(o));
	assert_string_equal(jsonx_get_str(o, "because"), "the image lists dpkg:xserver-xorg-core");
	json_object_put(o);
	/* the lease says the guest has no display ("display": false): the image's
	 * package list is not taken for one (issue 22 defect 7) */
	o = plan(p, "{\"lease\":{\"display\":false},\"applications\":[{\"id\":\"dpkg:xvfb\"}],"
	            "\"platform\":null,\"guestRoot\":\"/r\"}");
	assert_false(enabled_of(o));
	assert_non_null(strstr(jsonx_get_str(o, "because"), "the lease says the guest has no X display"));
	json_object_put(o);
	/* a name that only starts like it does not count */
	o = plan(p, "{\"lease\":{},\"applications\":[{\"id\":\"dpkg:xvfb-run-helper\"}],\"platform\":null,"
	            "\"guestRoot\":\"/r\"}");
	assert_false(enabled_of(o));
	json_object_put(o);
	loader_shutdown(&reg);
}

static void test_off_and_missing_build(void **state)
{
	(void)state;
	plugin_registry reg = {0};
	loaded_plugin *p = load_capture(&reg, g_libexec);
	json_object *o =
	    plan(p, "{\"lease\":{},\"applications\":[],\"platform\":\"linux-x86_64\",\"guestRoot\":\"/r\"}");
	assert_false(enabled_of(o));
	assert_true(jsonx_has(o, "capture") && jsonx_get_obj(o, "capture") == NULL);
	assert_int_equal(json_object_array_length(jsonx_get_array(o, "stage")), 0);
	assert_non_null(strstr(jsonx_get_str(o, "because"), "dpkg:xvfb"));
	json_object_put(o);
	/* a display, but no build for the guest's platform */
	o = plan(p, "{\"lease\":{\"display\":\":3\"},\"applications\":[],\"platform\":\"linux-riscv64\","
	            "\"guestRoot\":\"/r\"}");
	assert_false(enabled_of(o));
	assert_non_null(strstr(jsonx_get_str(o, "because"), "no relay-x11shot build for linux-riscv64"));
	assert_true(jsonx_get_obj(o, "capture") == NULL);
	json_object_put(o);
	loader_shutdown(&reg);
	/* no libexecDir at all */
	plugin_registry reg2 = {0};
	p = load_capture(&reg2, NULL);
	o = plan(p, "{\"lease\":{\"display\":\":3\"},\"applications\":[],\"platform\":\"linux-x86_64\","
	            "\"guestRoot\":\"/r\"}");
	assert_false(enabled_of(o));
	assert_non_null(strstr(jsonx_get_str(o, "because"), "libexecDir"));
	json_object_put(o);
	loader_shutdown(&reg2);
}

static void test_refusals(void **state)
{
	(void)state;
	plugin_registry reg = {0};
	loaded_plugin *p = load_capture(&reg, g_libexec);
	char *out = NULL;
	relay_error err;
	assert_int_equal(p->capture.plan(p->state, "not json", 0, &out, &err), RELAY_E_INVALID_ARGUMENT);
	assert_null(out);
	assert_int_equal(p->capture.plan(p->state, "{\"lease\":{\"display\":\":0\"}}", 0, &out, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "guestRoot"));
	assert_int_equal(
	    p->capture.plan(p->state, "{\"lease\":{},\"guestRoot\":\"relative\"}", 0, &out, &err),
	    RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(p->capture.plan(p->state, "{}", 0x2, &out, &err), RELAY_E_UNSUPPORTED_FLAGS);
	/* a display value that could break the argv is not used */
	json_object *o =
	    plan(p, "{\"lease\":{\"display\":\":0 --out /etc/x\"},\"applications\":[],\"platform\":null,"
	            "\"guestRoot\":\"/r\"}");
	assert_false(enabled_of(o));
	json_object_put(o);
	loader_shutdown(&reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_display_from_lease),
	    cmocka_unit_test(test_display_from_catalog),
	    cmocka_unit_test(test_off_and_missing_build),
	    cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
