/*
 * test_standin_console.c — machine-service-standin: simulated consoles
 * (machine-service.md §9): the ready console of a `vnc: true` lease, the
 * report, resolve / open / cancel with every identity rule, idempotence,
 * the 64-attempt limit, revocation by release and expiry, and the lost
 * console after a restart.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "standin_client.h"

static standin_proc proc;
static char *vm;
static char lease_id[64];
static char console_id[64];

static int setup(void **state)
{
	(void)state;
	memset(&proc, 0, sizeof proc);
	const char *args[] = {"--vnc", "linux,macos", NULL};
	if (!standin_start(&proc, args))
		return -1;
	standin_reply r;
	vm = standin_acquire(&proc,
	                     "{\"purpose\":\"relay-con-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\","
	                     "\"ttl_hours\":0.25,\"vnc\":true}",
	                     &r);
	if (vm == NULL)
		return -1;
	snprintf(lease_id, sizeof lease_id, "%s", jsonx_get_str(r.json, "lease_id"));
	snprintf(console_id, sizeof console_id, "%s",
	         jsonx_get_str(jsonx_get_obj(r.json, "console"), "console_id"));
	standin_reply_free(&r);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	standin_cleanup(&proc);
	free(vm);
	vm = NULL;
	return 0;
}

static long console_call(const char *op, const char *body, standin_reply *r)
{
	return standin_postf(&proc, r, body, "/machines/%s/console/%s", vm, op);
}

static long attempt_call(const char *op, const char *attempt, standin_reply *r)
{
	char body[512];
	snprintf(body, sizeof body, "{\"lease_id\":\"%s\",\"console_id\":\"%s\",\"attempt_id\":\"%s\"}",
	         lease_id, console_id, attempt);
	return console_call(op, body, r);
}

static void test_acquired_console_report(void **state)
{
	(void)state;
	standin_reply r;
	char body[256];
	snprintf(body, sizeof body, "{\"lease_id\":\"%s\"}", lease_id);
	assert_int_equal(console_call("resolve", body, &r), 200);
	json_object *c = r.json;
	int64_t version = 0;
	assert_true(jsonx_get_int(c, "schemaVersion", &version));
	assert_int_equal(version, 1);
	assert_string_equal(jsonx_get_str(c, "vm"), vm);
	assert_string_equal(jsonx_get_str(c, "lease_id"), lease_id);
	assert_string_equal(jsonx_get_str(c, "console_id"), console_id);
	assert_int_equal(strlen(console_id), 32);
	assert_string_equal(jsonx_get_str(c, "status"), "ready");
	assert_string_equal(jsonx_get_str(c, "backend"), "x11vnc-inetd");
	assert_string_equal(jsonx_get_str(c, "viewer_location"), "service-host");
	assert_string_equal(jsonx_get_str(c, "session_binding"), "existing-x11-session");
	assert_string_equal(jsonx_get_str(c, "authentication_mechanism"), "private-stdin");
	assert_string_equal(jsonx_get_str(c, "readiness_scope"), "guest-console-preflight");
	assert_string_equal(jsonx_get_str(c, "pixels"), "unverified");
	bool view_only = false;
	assert_true(jsonx_get_bool(c, "server_enforced_view_only", &view_only));
	assert_true(view_only);
	json_object *v = (json_object *)1;
	assert_true(json_object_object_get_ex(c, "environment_fingerprint", &v));
	assert_null(v);
	double observed = 0, access = 0;
	assert_true(jsonx_get_double(c, "observed_at", &observed));
	assert_true(jsonx_get_double(c, "access_expires_at", &access));
	assert_true(access > observed);
	assert_false(jsonx_has(c, "attempt"));
	standin_reply_free(&r);

	/* A macOS console. */
	char *mac = standin_acquire(
	    &proc, "{\"purpose\":\"relay-con-00000002\",\"image\":\"macos26\",\"env\":\"none\",\"vnc\":true}",
	    &r);
	assert_non_null(mac);
	json_object *mc = jsonx_get_obj(r.json, "console");
	assert_string_equal(jsonx_get_str(mc, "backend"), "apple-screen-sharing");
	assert_string_equal(jsonx_get_str(mc, "authentication_mechanism"), "human-guest-account-prompt");
	assert_string_equal(jsonx_get_str(mc, "session_binding"), "viewer-selection-unverified");
	assert_true(jsonx_get_bool(mc, "server_enforced_view_only", &view_only));
	assert_false(view_only);
	standin_reply_free(&r);
	free(mac);
}

static void test_request_identity_rules(void **state)
{
	(void)state;
	standin_reply r;
	char body[512];
	const char *bad_bodies[] = {"{}", "{\"lease_id\":7}", "{\"lease_id\":\"has space\"}",
	                            "{\"lease_id\":\"-lead\"}"};
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(console_call("resolve", bad_bodies[i], &r), 409);
		assert_string_equal(standin_error_text(&r), "Invalid console request identity or fields");
		standin_reply_free(&r);
	}
	/* Exactly the required keys. */
	snprintf(body, sizeof body, "{\"lease_id\":\"%s\",\"extra\":\"x\"}", lease_id);
	assert_int_equal(console_call("resolve", body, &r), 409);
	assert_string_equal(standin_error_text(&r), "Invalid console request identity or fields");
	standin_reply_free(&r);
	snprintf(body, sizeof body, "{\"lease_id\":\"%s\",\"console_id\":\"%s\"}", lease_id, console_id);
	assert_int_equal(console_call("open", body, &r), 409);
	assert_string_equal(standin_error_text(&r), "Invalid console request identity or fields");
	standin_reply_free(&r);

	assert_int_equal(console_call("resolve", "{\"lease_id\":\"0123456789abcdef0123456789abcdef\"}", &r),
	                 409);
	assert_string_equal(standin_error_text(&r), "Console lease identity mismatch");
	standin_reply_free(&r);
	snprintf(body, sizeof body,
	         "{\"lease_id\":\"%s\",\"console_id\":\"other\",\"attempt_id\":\"open-1\"}", lease_id);
	assert_int_equal(console_call("open", body, &r), 409);
	assert_string_equal(standin_error_text(&r), "Console identity mismatch");
	standin_reply_free(&r);
	assert_int_equal(console_call("cancel", body, &r), 409);
	assert_string_equal(standin_error_text(&r), "Console identity mismatch");
	standin_reply_free(&r);

	/* A lease without a console. */
	char *plain = standin_acquire(
	    &proc, "{\"purpose\":\"relay-con-00000003\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	assert_non_null(plain);
	snprintf(body, sizeof body, "{\"lease_id\":\"%s\"}", jsonx_get_str(r.json, "lease_id"));
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/console/resolve", plain), 409);
	assert_string_equal(standin_error_text(&r),
	                    "Console unavailable after restart or for this lease; no automatic recovery");
	standin_reply_free(&r);
	free(plain);
}

static void test_open_cancel_and_idempotence(void **state)
{
	(void)state;
	standin_reply r;
	assert_int_equal(attempt_call("open", "open-1", &r), 200);
	json_object *a = jsonx_get_obj(r.json, "attempt");
	assert_string_equal(jsonx_get_str(a, "attempt_id"), "open-1");
	assert_string_equal(jsonx_get_str(a, "status"), "launched");
	bool connected = true;
	assert_true(jsonx_get_bool(a, "transport_connected", &connected));
	assert_false(connected);
	assert_string_equal(jsonx_get_str(a, "viewer_cleanup"), "not-started");
	assert_string_equal(jsonx_get_str(a, "authentication"), "unverified");
	standin_reply_free(&r);

	/* The same attempt id answers its report and launches nothing new. */
	assert_int_equal(attempt_call("open", "open-1", &r), 200);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(r.json, "attempt"), "status"), "launched");
	standin_reply_free(&r);
	/* Another attempt while one is active. */
	assert_int_equal(attempt_call("open", "open-2", &r), 409);
	assert_string_equal(standin_error_text(&r), "Another console attempt is active; cancel it first");
	standin_reply_free(&r);
	/* resolve shows the latest attempt. */
	char body[256];
	snprintf(body, sizeof body, "{\"lease_id\":\"%s\"}", lease_id);
	assert_int_equal(console_call("resolve", body, &r), 200);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(r.json, "attempt"), "attempt_id"), "open-1");
	standin_reply_free(&r);

	assert_int_equal(attempt_call("cancel", "open-1", &r), 200);
	a = jsonx_get_obj(r.json, "attempt");
	assert_string_equal(jsonx_get_str(a, "status"), "cancelled");
	assert_string_equal(jsonx_get_str(a, "reason"), "cancelled");
	standin_reply_free(&r);
	/* Cancel never releases the machine. */
	char path[256];
	snprintf(path, sizeof path, "/machines/%s", vm);
	assert_int_equal(standin_get(&proc, path, &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "state"), "running");
	assert_string_equal(
	    jsonx_get_str(jsonx_get_obj(jsonx_get_obj(r.json, "console"), "attempt"), "status"), "cancelled");
	standin_reply_free(&r);
	/* Reopening a cancelled attempt id answers cancelled. */
	assert_int_equal(attempt_call("open", "open-1", &r), 200);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(r.json, "attempt"), "status"), "cancelled");
	standin_reply_free(&r);

	/* An attempt cancelled before it was opened is terminal. */
	assert_int_equal(attempt_call("cancel", "never-opened", &r), 200);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(r.json, "attempt"), "status"), "cancelled");
	standin_reply_free(&r);
	assert_int_equal(attempt_call("open", "never-opened", &r), 200);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(r.json, "attempt"), "status"), "cancelled");
	standin_reply_free(&r);

	assert_int_equal(attempt_call("open", "open-2", &r), 200);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(r.json, "attempt"), "status"), "launched");
	standin_reply_free(&r);
}

static void test_attempt_limit(void **state)
{
	(void)state;
	standin_reply r;
	char id[32];
	for (int i = 0; i < 64; i++) {
		snprintf(id, sizeof id, "attempt-%d", i);
		assert_int_equal(attempt_call("open", id, &r), 200);
		standin_reply_free(&r);
		assert_int_equal(attempt_call("cancel", id, &r), 200);
		standin_reply_free(&r);
	}
	assert_int_equal(attempt_call("open", "attempt-64", &r), 409);
	assert_string_equal(standin_error_text(&r), "Console attempt limit reached");
	standin_reply_free(&r);
	/* Known ids still answer. */
	assert_int_equal(attempt_call("open", "attempt-3", &r), 200);
	standin_reply_free(&r);
}

static void test_expiry_and_release_revoke(void **state)
{
	(void)state;
	standin_reply r;
	assert_int_equal(attempt_call("open", "open-1", &r), 200);
	standin_reply_free(&r);
	/* The lease's TTL runs out: the console is no longer usable. */
	assert_int_equal(standin_post(&proc, "/_standin/clock", "{\"advanceSeconds\": 1000}", &r), 200);
	standin_reply_free(&r);
	char body[256];
	snprintf(body, sizeof body, "{\"lease_id\":\"%s\"}", lease_id);
	assert_int_equal(console_call("resolve", body, &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "status"), "revoked");
	assert_string_equal(jsonx_get_str(r.json, "reason"), "expired");
	json_object *a = jsonx_get_obj(r.json, "attempt");
	assert_string_equal(jsonx_get_str(a, "status"), "closed");
	assert_string_equal(jsonx_get_str(a, "reason"), "expired");
	standin_reply_free(&r);
	assert_int_equal(attempt_call("open", "open-2", &r), 409);
	assert_string_equal(standin_error_text(&r), "Guest console is not ready");
	standin_reply_free(&r);
	/* Cancel works on revoked consoles. */
	assert_int_equal(attempt_call("cancel", "open-2", &r), 200);
	standin_reply_free(&r);

	/* A second lease: release revokes its console with `released`. The
	 * teardown fault keeps the record so the revocation can be seen. */
	char *other = standin_acquire(
	    &proc,
	    "{\"purpose\":\"relay-con-00000009\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"vnc\":true}",
	    &r);
	assert_non_null(other);
	char other_lease[64];
	snprintf(other_lease, sizeof other_lease, "%s", jsonx_get_str(r.json, "lease_id"));
	standin_reply_free(&r);
	assert_int_equal(standin_post(&proc, "/_standin/faults", "{\"route\":\"teardown\"}", &r), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/release", other), 409);
	standin_reply_free(&r);
	snprintf(body, sizeof body, "{\"lease_id\":\"%s\"}", other_lease);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/console/resolve", other), 200);
	assert_string_equal(jsonx_get_str(r.json, "status"), "revoked");
	assert_string_equal(jsonx_get_str(r.json, "reason"), "released");
	standin_reply_free(&r);
	free(other);
}

static void test_console_lost_after_restart(void **state)
{
	(void)state;
	standin_reply r;
	assert_int_equal(attempt_call("open", "open-1", &r), 200);
	standin_reply_free(&r);
	standin_stop(&proc);
	const char *args[] = {"--vnc", "linux,macos", NULL};
	assert_true(standin_start(&proc, args));
	char path[256];
	snprintf(path, sizeof path, "/machines/%s", vm);
	assert_int_equal(standin_get(&proc, path, &r), 200);
	json_object *c = jsonx_get_obj(r.json, "console");
	assert_string_equal(jsonx_get_str(c, "status"), "revoked");
	assert_string_equal(jsonx_get_str(c, "reason"), "controller-unavailable-after-restart");
	assert_string_equal(jsonx_get_str(c, "authentication"), "unverified");
	assert_string_equal(jsonx_get_str(c, "viewer_connected"), "unverified");
	assert_string_equal(jsonx_get_str(c, "human_confirmation"), "unverified");
	assert_string_equal(jsonx_get_str(c, "pixels"), "unverified");
	standin_reply_free(&r);
	char body[256];
	snprintf(body, sizeof body, "{\"lease_id\":\"%s\"}", lease_id);
	assert_int_equal(console_call("resolve", body, &r), 409);
	assert_string_equal(standin_error_text(&r),
	                    "Console unavailable after restart or for this lease; no automatic recovery");
	standin_reply_free(&r);
	assert_int_equal(attempt_call("open", "open-2", &r), 409);
	standin_reply_free(&r);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_acquired_console_report, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_request_identity_rules, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_open_cancel_and_idempotence, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_attempt_limit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_expiry_and_release_revoke, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_console_lost_after_restart, setup, teardown),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return failed;
}
