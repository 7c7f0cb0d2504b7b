/*
 * console/console_report.c: the relay's projection of acquisition
 * capabilities and console reports (spec/tools.md §3.3, §3.11; spec/machine-service.md
 * §9.4) — tokens outside ^[a-zA-Z0-9_.-]{1,120}$ become "unknown" (a reason
 * null), booleans that are not booleans become "unknown", Unix seconds
 * become ISO 8601, unknown fields are dropped, schema breaks are refused,
 * and each identity mismatch is named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "console/console_report.h"
#include "util/jsonx.h"

static json_object *parse(const char *text)
{
	json_object *o = jsonx_parse_str(text, NULL, 0);
	assert_non_null(o);
	return o;
}

static void test_capabilities(void **state)
{
	(void)state;
	json_object *raw = parse(
	    "{\"schemaVersion\":1,\"service\":\"machine-service\",\"options\":{\"vnc\":{\"default\":false,"
	    "\"backends\":{\"linux\":{\"available\":true,\"status\":\"configured\",\"backend\":"
	    "\"x11vnc inetd\",\"server_enforced_view_only\":\"yes\",\"pixels\":\"unverified\","
	    "\"secret\":\"pw\"},\"macos\":{\"available\":false}}}}}");
	json_object *caps = console_capabilities_normalise(raw);
	assert_non_null(caps);
	json_object *linux_entry = jsonx_get_obj(
	    jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(caps, "options"), "vnc"), "backends"), "linux");
	bool available = false;
	assert_true(jsonx_get_bool(linux_entry, "available", &available) && available);
	assert_string_equal(jsonx_get_str(linux_entry, "backend"), "unknown"); /* a space is not a token */
	assert_string_equal(jsonx_get_str(linux_entry, "server_enforced_view_only"), "unknown");
	assert_string_equal(jsonx_get_str(linux_entry, "viewer_location"), "unknown"); /* missing */
	assert_false(jsonx_has(linux_entry, "secret"));
	assert_int_equal(json_object_object_length(linux_entry), 10);
	json_object_put(caps);
	json_object_put(raw);

	const char *broken[] = {
	    ("{\"schemaVersion\":2,\"options\":{\"vnc\":{\"default\":false,\"backends\":{\"linux\":{"
	     "\"available\":true},"
	     "\"macos\":{\"available\":false}}}}}"),
	    ("{\"schemaVersion\":1,\"options\":{\"vnc\":{\"default\":true,\"backends\":{\"linux\":{"
	     "\"available\":true},"
	     "\"macos\":{\"available\":false}}}}}"),
	    ("{\"schemaVersion\":1,\"options\":{\"vnc\":{\"default\":false,\"backends\":{\"linux\":{"
	     "\"available\":"
	     "\"yes\"},\"macos\":{\"available\":false}}}}}"),
	    ("{\"schemaVersion\":1,\"options\":{\"vnc\":{\"default\":false,\"backends\":{\"linux\":{"
	     "\"available\":true}}}}}"),
	};
	for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
		raw = parse(broken[i]);
		assert_null(console_capabilities_normalise(raw));
		json_object_put(raw);
	}
	caps = console_capabilities_unconfigured();
	json_object *macos = jsonx_get_obj(
	    jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(caps, "options"), "vnc"), "backends"), "macos");
	assert_string_equal(jsonx_get_str(macos, "status"), "unconfigured");
	assert_string_equal(jsonx_get_str(macos, "pixels"), "unknown");
	json_object_put(caps);
}

/* options.placement (a Swarm's nodes, machine-docker): carried through with
 * its allow-listed fields only, tokens and counts checked; absent when the
 * backend reports none. */
static void test_capabilities_placement(void **state)
{
	(void)state;
	json_object *raw =
	    parse("{\"schemaVersion\":1,\"options\":{\"vnc\":{\"default\":false,\"backends\":{\"linux\":{"
	          "\"available\":false},\"macos\":{\"available\":false}}},\"placement\":{\"scheduler\":"
	          "\"swarm\",\"secret\":\"x\",\"nodes\":[{\"name\":\"n1\",\"id\":\"abc123\",\"role\":"
	          "\"manager\",\"state\":\"ready\",\"availability\":\"active\",\"engine\":\"unix\","
	          "\"engine_source\":\"endpoint\",\"reachable\":true,\"guests\":3,\"memory_bytes\":"
	          "8000000000,\"nano_cpus\":2000000000,\"address\":\"10.0.0.1\"},{\"name\":\"bad name\","
	          "\"state\":\"down\",\"reachable\":\"no\",\"guests\":-1,\"memory_bytes\":\"lots\"}]}}}");
	json_object *caps = console_capabilities_normalise(raw);
	assert_non_null(caps);
	json_object *placement = jsonx_get_obj(jsonx_get_obj(caps, "options"), "placement");
	assert_non_null(placement);
	assert_string_equal(jsonx_get_str(placement, "scheduler"), "swarm");
	assert_false(jsonx_has(placement, "secret"));
	json_object *nodes = jsonx_get_array(placement, "nodes");
	assert_int_equal(json_object_array_length(nodes), 2);
	json_object *n1 = json_object_array_get_idx(nodes, 0), *n2 = json_object_array_get_idx(nodes, 1);
	assert_string_equal(jsonx_get_str(n1, "name"), "n1");
	assert_string_equal(jsonx_get_str(n1, "engine"), "unix");
	assert_string_equal(jsonx_get_str(n1, "engine_source"), "endpoint");
	bool reachable = false;
	assert_true(jsonx_get_bool(n1, "reachable", &reachable) && reachable);
	int64_t guests = 0, memory = 0;
	assert_true(jsonx_get_int(n1, "guests", &guests) && guests == 3);
	assert_true(jsonx_get_int(n1, "memory_bytes", &memory) && memory == 8000000000LL);
	assert_false(jsonx_has(n1, "address")); /* not allow-listed */
	assert_int_equal(json_object_object_length(n1), 11);
	assert_string_equal(jsonx_get_str(n2, "name"), "unknown"); /* a space is not a token */
	assert_string_equal(jsonx_get_str(n2, "role"), "unknown"); /* missing */
	assert_string_equal(jsonx_get_str(n2, "reachable"), "unknown");
	assert_false(jsonx_get_int(n2, "guests", &guests));       /* -1: null */
	assert_false(jsonx_get_int(n2, "memory_bytes", &memory)); /* a string: null */
	assert_true(jsonx_has(n2, "guests"));
	json_object_put(caps);
	json_object_put(raw);

	raw = parse("{\"schemaVersion\":1,\"options\":{\"vnc\":{\"default\":false,\"backends\":{"
	            "\"linux\":{\"available\":false},\"macos\":{\"available\":false}}}}}");
	caps = console_capabilities_normalise(raw);
	assert_false(jsonx_has(jsonx_get_obj(caps, "options"), "placement"));
	json_object_put(caps);
	json_object_put(raw);
}

static const char *REPORT =
    "{\"schemaVersion\":1,\"vm\":\"pilot-relay-x-1-abcdef\",\"lease_id\":\"L1\",\"environment_fingerprint\":"
    "null,"
    "\"console_id\":\"C1\",\"status\":\"ready\",\"reason\":\"bad reason!\",\"backend\":\"x11vnc-inetd\","
    "\"viewer_location\":\"service-host\",\"source\":\"guest-sharing-controller\",\"observed_at\":1790239932."
    "5,"
    "\"access_expires_at\":\"soon\",\"viewer_connected\":\"unverified\",\"human_confirmation\":\"confirmed "
    "by ai\","
    "\"session_binding\":\"existing-x11-session\",\"readiness_scope\":\"guest-console-preflight\","
    "\"server_enforced_view_only\":true,\"authentication_mechanism\":\"private-stdin\",\"authentication\":"
    "\"unverified\",\"pixels\":\"unverified\",\"password\":\"hunter2\",\"port\":5901,"
    "\"attempt\":{\"attempt_id\":\"open-1\",\"status\":\"launched\",\"reason\":null,\"transport_connected\":"
    "\"maybe\","
    "\"viewer_cleanup\":\"not-started\",\"authentication\":\"unverified\",\"viewer_connected\":"
    "\"unverified\","
    "\"human_confirmation\":\"unverified\",\"url\":\"vnc://x\"}}";

static void test_observation(void **state)
{
	(void)state;
	json_object *report = parse(REPORT);
	json_object *obs = console_observation(report);
	assert_non_null(obs);
	assert_string_equal(jsonx_get_str(obs, "observed_at"), "2026-09-24T08:52:12Z");
	assert_true(jsonx_has(obs, "access_expires_at") && jsonx_get_str(obs, "access_expires_at") == NULL);
	assert_true(jsonx_has(obs, "reason") && jsonx_get_str(obs, "reason") == NULL);
	assert_string_equal(jsonx_get_str(obs, "human_confirmation"), "unknown");
	bool view_only = false;
	assert_true(jsonx_get_bool(obs, "server_enforced_view_only", &view_only) && view_only);
	assert_false(jsonx_has(obs, "password"));
	assert_false(jsonx_has(obs, "port"));
	json_object *attempt = jsonx_get_obj(obs, "attempt");
	assert_string_equal(jsonx_get_str(attempt, "transport_connected"), "unknown");
	assert_false(jsonx_has(attempt, "url"));
	assert_int_equal(json_object_object_length(obs), 21);

	char why[512];
	assert_null(
	    console_identity_problem(obs, "pilot-relay-x-1-abcdef", "L1", "C1", NULL, NULL, why, sizeof why));
	assert_non_null(
	    console_identity_problem(obs, "pilot-relay-x-1-abcdef", "L2", "C1", NULL, NULL, why, sizeof why));
	assert_non_null(strstr(why, "Console lease identity mismatch"));
	assert_non_null(console_identity_problem(obs, "other", "L1", "C1", NULL, NULL, why, sizeof why));
	assert_non_null(strstr(why, "Console lease identity mismatch"));
	assert_non_null(
	    console_identity_problem(obs, "pilot-relay-x-1-abcdef", "L1", "C2", NULL, NULL, why, sizeof why));
	assert_non_null(strstr(why, "Console instance identity mismatch"));
	json_object_put(obs);

	/* The fingerprint may be null, the selected one or the lease's; nothing else. */
	jsonx_add_str(report, "environment_fingerprint", "aaaa1111");
	obs = console_observation(report);
	assert_non_null(console_identity_problem(obs, "pilot-relay-x-1-abcdef", "L1", "C1", "bbbb", "cccc",
	                                         why, sizeof why));
	assert_non_null(strstr(why, "Console environment identity mismatch"));
	assert_null(console_identity_problem(obs, "pilot-relay-x-1-abcdef", "L1", "C1", "aaaa1111", NULL, why,
	                                     sizeof why));
	assert_null(console_identity_problem(obs, "pilot-relay-x-1-abcdef", "L1", "C1", NULL, "aaaa1111", why,
	                                     sizeof why));
	json_object_put(obs);

	jsonx_add_int(report, "schemaVersion", 2);
	assert_null(console_observation(report));
	json_object_put(report);

	assert_true(console_attempt_terminal("cancelled"));
	assert_true(console_attempt_terminal("expired"));
	assert_false(console_attempt_terminal("launched"));
	assert_false(console_attempt_terminal("uncertain"));
	assert_false(console_attempt_terminal(NULL));
}

/* The uncertain attempt the relay keeps after a failed open or cancel, and
 * the status result's fields: each in the observation's order, whatever
 * order the plugin wrote them in. */
static void test_uncertain_attempt_and_result_order(void **state)
{
	(void)state;
	json_object *a = console_uncertain_attempt("open-2");
	assert_string_equal(json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN),
	                    "{\"attempt_id\":\"open-2\",\"status\":\"uncertain\",\"reason\":null,"
	                    "\"transport_connected\":\"unknown\",\"viewer_cleanup\":\"unknown\","
	                    "\"authentication\":\"unknown\",\"viewer_connected\":\"unknown\","
	                    "\"human_confirmation\":\"unknown\"}");
	json_object *report = parse(REPORT);
	json_object *obs = console_observation(report);
	json_object *r = console_status_result("g1", obs, a);
	static const char *const keys[] = {"guest",
	                                   "schemaVersion",
	                                   "vm",
	                                   "lease_id",
	                                   "console_id",
	                                   "environment_fingerprint",
	                                   "status",
	                                   "reason",
	                                   "backend",
	                                   "viewer_location",
	                                   "authentication",
	                                   "authentication_mechanism",
	                                   "viewer_connected",
	                                   "human_confirmation",
	                                   "pixels",
	                                   "server_enforced_view_only",
	                                   "session_binding",
	                                   "readiness_scope",
	                                   "observed_at",
	                                   "source",
	                                   "access_expires_at",
	                                   "attempt",
	                                   "screenshotEvidence",
	                                   "leaseReleased"};
	size_t i = 0;
	json_object_object_foreach(r, key, value)
	{
		(void)value;
		assert_true(i < sizeof keys / sizeof keys[0]);
		assert_string_equal(key, keys[i]);
		i++;
	}
	assert_int_equal(i, sizeof keys / sizeof keys[0]);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(r, "attempt"), "status"), "uncertain");
	assert_string_equal(jsonx_get_str(r, "viewer_location"), "service-host");
	json_object_put(r);
	json_object_put(obs);
	json_object_put(report);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_capabilities),
	    cmocka_unit_test(test_capabilities_placement),
	    cmocka_unit_test(test_observation),
	    cmocka_unit_test(test_uncertain_attempt_and_result_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
