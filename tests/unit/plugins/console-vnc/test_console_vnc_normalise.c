/*
 * test_console_vnc_normalise — plugins/console-vnc through the real loader,
 * against a machine link whose console (a string slot behind the core's
 * adapter of ABI 1.0-1.6 plugins) answers what the test sets: schemaVersion checks, token normalisation
 * ("unknown" and null reasons), booleans or "unknown", the allow-list, the exact request body the backend
 * receives, errors passed through, a machine plugin without a console, and id checks. (The real typed console
 * of machine-local is tested in test_machine_local_display.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loader/loader.h"
#include "util/jsonx.h"

/* What the fake backend answers, and what it was asked (test thread only). */
static const char *g_answer;
static relay_status g_status;
static char g_op[32], g_body[512];

static relay_status fake_console(relay_plugin_state *state, const char *lease_json, const char *op,
                                 const char *request_json, relay_call *call, unsigned flags, char **out,
                                 relay_error *err)
{
	(void)state;
	(void)lease_json;
	(void)call;
	(void)flags;
	snprintf(g_op, sizeof g_op, "%s", op);
	snprintf(g_body, sizeof g_body, "%s", request_json ? request_json : "");
	if (g_status != RELAY_OK) {
		snprintf(err->message, sizeof err->message, "Guest console is not ready");
		err->code = g_status;
		*out = NULL;
		return g_status;
	}
	*out = strdup(g_answer);
	return RELAY_OK;
}

static relay_machine_ops g_ops;

static loaded_plugin *load_vnc(plugin_registry *reg)
{
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/lib/mcp-relay/plugins", getenv("RELAY_BUILD_DIR"));
	setenv("MCP_RELAY_PLUGIN_PATH", dir, 1);
	relay_error err;
	char *path = loader_find_plugin("console-vnc", &err);
	if (path == NULL)
		fail_msg("%s", err.message);
	loaded_plugin *p = NULL;
	if (loader_load(reg, path, RELAY_KIND_CONSOLE, "{}", &p, &err) != RELAY_OK)
		fail_msg("%s", err.message);
	free(path);
	return p;
}

static const char *LEASE =
    "{\"vm\":\"local-x-1\",\"lease_id\":\"abc123\",\"console\":{\"console_id\":\"c1\"}}";

static void test_capabilities(void **state)
{
	(void)state;
	plugin_registry reg = {0};
	loaded_plugin *p = load_vnc(&reg);
	memset(&g_ops, 0, sizeof g_ops);
	g_ops.struct_size = sizeof g_ops;
	g_ops.console = fake_console;
	/* The string slot reached through the core's adapter, as a 1.0-1.6
	 * machine plugin is (loader/console_adapt.c). */
	console_adapter adapter = {fake_console, NULL};
	relay_machine_link link = {sizeof link, "fake", &g_ops, NULL, &console_adapter_ops, &adapter};
	g_status = RELAY_OK;
	g_answer = "{\"schemaVersion\":1,\"options\":{\"vnc\":{\"default\":false,\"backends\":{"
	           "\"linux\":{\"available\":true,\"status\":\"configured\",\"backend\":\"x11vnc\","
	           "\"pixels\":\"un verified\","
	           "\"server_enforced_view_only\":true,\"secret\":\"hide-me\"},"
	           "\"macos\":{\"available\":false,\"server_enforced_view_only\":\"maybe\"}}}}}";
	char *out = NULL;
	relay_error err;
	assert_int_equal(p->console.capabilities(p->state, &link, NULL, 0, &out, &err), RELAY_OK);
	assert_string_equal(g_op, "capabilities");
	json_object *o = jsonx_parse_str(out, NULL, 0);
	free(out);
	json_object *be = jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(o, "options"), "vnc"), "backends");
	json_object *lx = jsonx_get_obj(be, "linux");
	assert_string_equal(jsonx_get_str(lx, "backend"), "x11vnc");
	assert_string_equal(jsonx_get_str(lx, "pixels"), "unknown"); /* not a token */
	assert_string_equal(jsonx_get_str(lx, "human_confirmation"), "unknown");
	assert_false(jsonx_has(lx, "secret"));
	bool b = false;
	assert_true(jsonx_get_bool(lx, "server_enforced_view_only", &b) && b);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(be, "macos"), "server_enforced_view_only"),
	                    "unknown");
	assert_false(jsonx_has(jsonx_get_obj(o, "options"), "placement")); /* none reported */
	json_object_put(o);

	/* A Swarm's nodes (machine-docker): passed on for the core to normalise. */
	g_answer = "{\"schemaVersion\":1,\"options\":{\"vnc\":{\"default\":false,\"backends\":{"
	           "\"linux\":{\"available\":false},\"macos\":{\"available\":false}}},"
	           "\"placement\":{\"scheduler\":\"swarm\",\"nodes\":[{\"name\":\"n1\",\"guests\":2}]}}}";
	assert_int_equal(p->console.capabilities(p->state, &link, NULL, 0, &out, &err), RELAY_OK);
	o = jsonx_parse_str(out, NULL, 0);
	free(out);
	json_object *placement = jsonx_get_obj(jsonx_get_obj(o, "options"), "placement");
	assert_string_equal(jsonx_get_str(placement, "scheduler"), "swarm");
	assert_int_equal(json_object_array_length(jsonx_get_array(placement, "nodes")), 1);
	json_object_put(o);

	g_answer = "{\"schemaVersion\":1,\"options\":{\"vnc\":{\"default\":true,\"backends\":{"
	           "\"linux\":{\"available\":true},\"macos\":{\"available\":false}}}}}";
	assert_int_equal(p->console.capabilities(p->state, &link, NULL, 0, &out, &err), RELAY_E_PROTOCOL);
	assert_string_equal(err.message, "unsupported or malformed acquisition-capabilities schema");
	g_answer = "{\"schemaVersion\":2}";
	assert_int_equal(p->console.capabilities(p->state, &link, NULL, 0, &out, &err), RELAY_E_PROTOCOL);
	/* A machine plugin without a console. */
	g_ops.console = NULL;
	link.console = NULL;
	assert_int_equal(p->console.capabilities(p->state, &link, NULL, 0, &out, &err), RELAY_E_UNSUPPORTED);
	assert_non_null(strstr(err.message, "lacks acquisition capabilities"));
	assert_int_equal(p->console.capabilities(p->state, &link, NULL, 1, &out, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
	loader_shutdown(&reg);
}

static void test_reports(void **state)
{
	(void)state;
	plugin_registry reg = {0};
	loaded_plugin *p = load_vnc(&reg);
	memset(&g_ops, 0, sizeof g_ops);
	g_ops.struct_size = sizeof g_ops;
	g_ops.console = fake_console;
	/* The string slot reached through the core's adapter, as a 1.0-1.6
	 * machine plugin is (loader/console_adapt.c). */
	console_adapter adapter = {fake_console, NULL};
	relay_machine_link link = {sizeof link, "fake", &g_ops, NULL, &console_adapter_ops, &adapter};
	g_status = RELAY_OK;
	g_answer =
	    "{\"schemaVersion\":1,\"vm\":\"local-x-1\",\"lease_id\":\"abc123\",\"console_id\":\"c1\","
	    "\"environment_fingerprint\":null,\"status\":\"ready\",\"reason\":\"no such reason!\","
	    "\"backend\":\"x11vnc\",\"viewer_location\":\"service-host\",\"observed_at\":1790239932.5,"
	    "\"access_expires_at\":null,\"viewer_connected\":\"unverified\",\"pixels\":\"verified?\","
	    "\"server_enforced_view_only\":true,\"password\":\"hunter2\",\"endpoint\":{\"address\":\"127.0.0."
	    "1\","
	    "\"port\":5900,\"networkNamespace\":\"/proc/1/ns/"
	    "net\",\"password\":\"x\"},\"viewer_launched\":false,"
	    "\"attempt\":{\"attempt_id\":\"a1\",\"status\":\"dispatching\",\"reason\":\"worker-unavailable\","
	    "\"transport_connected\":false,\"viewer_cleanup\":\"not-started\"}}";
	char *out = NULL;
	relay_error err;
	assert_int_equal(p->console.resolve(p->state, &link, LEASE, NULL, 0, &out, &err), RELAY_OK);
	assert_string_equal(g_op, "resolve");
	assert_string_equal(g_body, "{\"lease_id\":\"abc123\"}");
	json_object *o = jsonx_parse_str(out, NULL, 0);
	assert_null(strstr(out, "hunter2"));
	assert_null(strstr(out, "\"password\""));
	free(out);
	assert_string_equal(jsonx_get_str(o, "status"), "ready");
	assert_true(jsonx_has(o, "reason") && jsonx_get_str(o, "reason") == NULL);
	assert_string_equal(jsonx_get_str(o, "pixels"), "unknown");
	assert_string_equal(jsonx_get_str(o, "human_confirmation"), "unknown"); /* absent upstream */
	double at = 0;
	assert_true(jsonx_get_double(o, "observed_at", &at) && at > 1790239932.0);
	json_object *a = jsonx_get_obj(o, "attempt");
	assert_string_equal(jsonx_get_str(a, "status"), "dispatching");
	bool b = true;
	assert_true(jsonx_get_bool(a, "transport_connected", &b) && !b);
	assert_string_equal(jsonx_get_str(a, "authentication"), "unknown");
	int64_t port = 0;
	assert_true(jsonx_get_int(jsonx_get_obj(o, "endpoint"), "port", &port) && port == 5900);
	json_object_put(o);

	assert_int_equal(p->console.open(p->state, &link, LEASE, "c1", "a1", NULL, 0, &out, &err), RELAY_OK);
	assert_string_equal(g_op, "open");
	assert_string_equal(g_body, "{\"lease_id\":\"abc123\",\"console_id\":\"c1\",\"attempt_id\":\"a1\"}");
	free(out);
	assert_int_equal(p->console.cancel(p->state, &link, LEASE, "c1", "a1", NULL, 0, &out, &err),
	                 RELAY_OK);
	assert_string_equal(g_op, "cancel");
	free(out);
	/* ids are checked before the backend is asked */
	g_op[0] = '\0';
	assert_int_equal(p->console.open(p->state, &link, LEASE, "c1", "bad id", NULL, 0, &out, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(p->console.cancel(p->state, &link, LEASE, "-c1", "a1", NULL, 0, &out, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(g_op, "");
	/* a lease without an identity */
	assert_int_equal(p->console.resolve(p->state, &link, "{\"vm\":\"x\"}", NULL, 0, &out, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	/* malformed reports and backend errors */
	g_answer = "{\"schemaVersion\":\"1\"}";
	assert_int_equal(p->console.resolve(p->state, &link, LEASE, NULL, 0, &out, &err), RELAY_E_PROTOCOL);
	assert_string_equal(err.message, "unsupported or malformed console report schema");
	g_answer = "not json";
	assert_int_equal(p->console.resolve(p->state, &link, LEASE, NULL, 0, &out, &err), RELAY_E_PROTOCOL);
	g_status = RELAY_E_REFUSED;
	assert_int_equal(p->console.open(p->state, &link, LEASE, "c1", "a2", NULL, 0, &out, &err),
	                 RELAY_E_REFUSED);
	assert_string_equal(err.message, "Guest console is not ready");
	loader_shutdown(&reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_capabilities),
	    cmocka_unit_test(test_reports),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
