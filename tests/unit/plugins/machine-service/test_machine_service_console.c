/*
 * The console passthrough of the machine-service plugin against the
 * stand-in started with --vnc linux: acquisition capabilities (and their
 * 404 and schema refusals), a vnc acquisition with its ready console, and
 * resolve / open / cancel with exactly the required body keys; failures
 * report the HTTP status and never the body.
 */
#include "machine_service_fixture.h"

static ms_fixture fx;

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof fx);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ms_teardown(&fx);
	return 0;
}

static void start_vnc(void)
{
	ms_require_builds();
	const char *args[] = {"--vnc", "linux", NULL};
	ms_start_standin(&fx, args);
	ms_load(&fx, "{\"destructionCheck\":\"service\"}");
}

/* One call of the typed console (relay/machine.h console_ops): op
 * "capabilities", "resolve", "open" or "cancel". */
static relay_status console_op(const char *lease, const char *op, const char *console_id,
                               const char *attempt_id, char **out, relay_error *err)
{
	memset(err, 0, sizeof *err);
	*out = NULL;
	const relay_machine_console_ops *c = fx.plugin->machine.console_ops;
	relay_plugin_state *st = fx.plugin->state;
	if (strcmp(op, "capabilities") == 0)
		return c->capabilities(st, NULL, 0, out, err);
	if (strcmp(op, "resolve") == 0)
		return c->resolve(st, lease, NULL, 0, out, err);
	if (strcmp(op, "open") == 0)
		return c->open(st, lease, console_id, attempt_id, NULL, 0, out, err);
	return c->cancel(st, lease, console_id, attempt_id, NULL, 0, out, err);
}

static void test_capabilities(void **state)
{
	(void)state;
	start_vnc();
	char *out = NULL;
	relay_error err;
	assert_int_equal(console_op(NULL, "capabilities", NULL, NULL, &out, &err), RELAY_OK);
	json_object *caps = ms_parse(out);
	json_object *backends =
	    jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(caps, "options"), "vnc"), "backends");
	bool linux_ok = false, macos_ok = true;
	assert_true(jsonx_get_bool(jsonx_get_obj(backends, "linux"), "available", &linux_ok) && linux_ok);
	assert_true(jsonx_get_bool(jsonx_get_obj(backends, "macos"), "available", &macos_ok) && !macos_ok);
	json_object_put(caps);
	free(out);
	/* An older service without the route. */
	ms_fault(
	    &fx,
	    "{\"route\":\"acquisition-capabilities\",\"status\":404,\"times\":1,\"error\":\"not found\"}");
	assert_int_equal(console_op(NULL, "capabilities", NULL, NULL, &out, &err), RELAY_E_UNSUPPORTED);
	assert_string_equal(err.message,
	                    "backend lacks acquisition capabilities; upgrade the machine service for VNC");
	/* A report that breaks the schema. */
	ms_fault(&fx, "{\"route\":\"acquisition-capabilities\",\"status\":200,\"times\":1,\"error\":\"x\"}");
	assert_int_equal(console_op(NULL, "capabilities", NULL, NULL, &out, &err), RELAY_E_PROTOCOL);
	assert_string_equal(err.message, "unsupported or malformed acquisition-capabilities schema");
	/* Unknown flags; no string slot. */
	assert_null(fx.plugin->machine.console);
	assert_int_equal(
	    fx.plugin->machine.console_ops->capabilities(fx.plugin->state, NULL, 0x10, &out, &err),
	    RELAY_E_UNSUPPORTED_FLAGS);
	assert_null(out);
}

static void test_vnc_acquisition_and_console_routes(void **state)
{
	(void)state;
	start_vnc();
	char *lease = NULL;
	relay_error err;
	/* macOS has no VNC backend here: refused before any clone. */
	assert_int_equal(ms_acquire_lease(&fx, "relay-v-00000009", "macos26", true, &lease, &err),
	                 RELAY_E_REFUSED);
	assert_non_null(strstr(err.message, "VNC unavailable"));
	assert_int_equal(ms_acquire_lease(&fx, "relay-v-00000001", "ubuntu2404", true, &lease, &err),
	                 RELAY_OK);
	json_object *doc = ms_parse(lease);
	json_object *console = jsonx_get_obj(doc, "console");
	assert_string_equal(jsonx_get_str(console, "status"), "ready");
	const char *console_id = jsonx_get_str(console, "console_id");
	const char *lease_id = jsonx_get_str(doc, "lease_id");
	const char *vm = jsonx_get_str(doc, "vm");
	assert_non_null(console_id);
	json_object *reqs = ms_requests(&fx, "POST", "/acquire");
	json_object *body = ms_parse(jsonx_get_str(json_object_array_get_idx(reqs, 1), "body"));
	bool vnc = false;
	assert_true(jsonx_get_bool(body, "vnc", &vnc) && vnc);
	json_object_put(body);
	json_object_put(reqs);

	char request[64], path[512];
	char *out = NULL;
	/* resolve: exactly {lease_id}, taken from the lease. */
	assert_int_equal(console_op(lease, "resolve", NULL, NULL, &out, &err), RELAY_OK);
	json_object *report = ms_parse(out);
	assert_string_equal(jsonx_get_str(report, "status"), "ready");
	assert_string_equal(jsonx_get_str(report, "console_id"), console_id);
	json_object_put(report);
	free(out);
	snprintf(path, sizeof path, "/machines/%s/console/resolve", vm);
	reqs = ms_requests(&fx, "POST", path);
	body = ms_parse(jsonx_get_str(json_object_array_get_idx(reqs, 0), "body"));
	assert_int_equal(json_object_object_length(body), 1);
	assert_string_equal(jsonx_get_str(body, "lease_id"), lease_id);
	json_object_put(body);
	json_object_put(reqs);

	/* open: exactly three keys; the attempt launches. */
	assert_int_equal(console_op(lease, "open", console_id, "open-1", &out, &err), RELAY_OK);
	report = ms_parse(out);
	json_object *attempt = jsonx_get_obj(report, "attempt");
	assert_string_equal(jsonx_get_str(attempt, "attempt_id"), "open-1");
	assert_string_equal(jsonx_get_str(attempt, "status"), "launched");
	json_object_put(report);
	free(out);
	snprintf(path, sizeof path, "/machines/%s/console/open", vm);
	reqs = ms_requests(&fx, "POST", path);
	body = ms_parse(jsonx_get_str(json_object_array_get_idx(reqs, 0), "body"));
	assert_int_equal(json_object_object_length(body), 3);
	json_object_put(body);
	json_object_put(reqs);

	/* A refusal names the status only, never the body. */
	snprintf(request, sizeof request, "open-2"); /* the attempt */
	assert_int_equal(console_op(lease, "open", console_id, request, &out, &err), RELAY_E_REFUSED);
	assert_string_equal(
	    err.message,
	    "Console API unavailable or request outcome unknown (HTTP 409); resolve before another open");

	/* cancel. */
	snprintf(request, sizeof request, "open-1"); /* the attempt */
	assert_int_equal(console_op(lease, "cancel", console_id, request, &out, &err), RELAY_OK);
	report = ms_parse(out);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(report, "attempt"), "status"), "cancelled");
	json_object_put(report);
	free(out);

	/* An open whose answer never arrives is indeterminate. */
	ms_fault(&fx, "{\"route\":\"console\",\"dropConnection\":true,\"times\":1}");
	snprintf(request, sizeof request, "open-3"); /* the attempt */
	assert_int_equal(console_op(lease, "open", console_id, request, &out, &err), RELAY_E_INDETERMINATE);
	assert_non_null(strstr(err.message, "(HTTP 0)"));
	ms_fault(&fx, "{\"route\":\"console\",\"status\":500,\"times\":1,\"error\":\"secret-detail\"}");
	assert_int_equal(console_op(lease, "cancel", console_id, request, &out, &err), RELAY_E_INDETERMINATE);
	assert_null(strstr(err.message, "secret-detail"));
	/* A resolve that fails is unavailable, not indeterminate. */
	ms_fault(&fx, "{\"route\":\"console\",\"status\":500,\"times\":1}");
	assert_int_equal(console_op(lease, "resolve", NULL, NULL, &out, &err), RELAY_E_UNAVAILABLE);
	/* Identities that break the pattern never reach the service. */
	assert_int_equal(console_op(lease, "open", "a b", "y", &out, &err), RELAY_E_INVALID_ARGUMENT);
	json_object_put(doc);
	free(lease);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_capabilities, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_vnc_acquisition_and_console_routes, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
