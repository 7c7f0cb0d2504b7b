/*
 * The lease room's decisions without a session (spec/lifecycle.md §6, §8;
 * docs/egress.md): the length of each renewal and of the final one, a
 * whole lease's renewals in relay time (never past the deadline, never a
 * gap before it while renewal runs, stopped for good below the backend
 * minimum), the binding comparison a restart checks before any backend
 * operation, the guest names a restart takes back, and the egress
 * refusal of a machine plugin without egress_listeners.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lease/egress.h"
#include "lease/lifecycle.h"
#include "lease/reconcile_internal.h"
#include "lease/renewal.h"
#include "loader/loader.h"
#include "util/jsonx.h"

#define HOUR_MS (3600LL * 1000)

static void test_renewal_lengths(void **state)
{
	(void)state;
	const int64_t now = 1790000000000;
	/* Far from the deadline: one window. */
	assert_int_equal(renewal_ttl_ms(now + 4 * HOUR_MS, now), LIFECYCLE_RENEWAL_WINDOW_MS);
	assert_int_equal(renewal_ttl_ms(now + LIFECYCLE_RENEWAL_WINDOW_MS + 1, now),
	                 LIFECYCLE_RENEWAL_WINDOW_MS);
	/* Closer than a window: exactly up to the deadline, never past it. */
	assert_int_equal(renewal_ttl_ms(now + 10 * 60000, now), 10 * 60000);
	assert_int_equal(renewal_ttl_ms(now + LIFECYCLE_BACKEND_MIN_RENEWAL_MS, now),
	                 LIFECYCLE_BACKEND_MIN_RENEWAL_MS);
	/* Below the backend's minimum, or past the deadline: renewal stops. */
	assert_int_equal(renewal_ttl_ms(now + LIFECYCLE_BACKEND_MIN_RENEWAL_MS - 1, now), 0);
	assert_int_equal(renewal_ttl_ms(now, now), 0);
	assert_int_equal(renewal_ttl_ms(now - 1000, now), 0);
	/* The final renewal of a pause carries the lease to its deadline. */
	assert_int_equal(renewal_final_ttl_ms(now + 4 * HOUR_MS, now), 4 * HOUR_MS);
	assert_int_equal(renewal_final_ttl_ms(now + LIFECYCLE_BACKEND_MIN_RENEWAL_MS, now),
	                 LIFECYCLE_BACKEND_MIN_RENEWAL_MS);
	assert_int_equal(renewal_final_ttl_ms(now + LIFECYCLE_BACKEND_MIN_RENEWAL_MS - 1, now), 0);
	assert_int_equal(renewal_final_ttl_ms(now - 1, now), 0);
}

/* Beats every LIFECYCLE_BEAT_INTERVAL_MS over a lease of `ttl_ms` from its
 * acquisition: each renewal ends at or before the deadline; while renewal
 * runs the lease never lapses before the next beat (or the deadline);
 * once it stops it stays stopped, and it stops only when less than the
 * backend minimum is left. Returns how many renewals were sent. */
static int walk_lease(int64_t ttl_ms)
{
	const int64_t acquired = 1790000000000;
	const int64_t deadline = acquired + ttl_ms;
	int64_t expiry = deadline < acquired + LIFECYCLE_RENEWAL_WINDOW_MS
	                     ? deadline
	                     : acquired + LIFECYCLE_RENEWAL_WINDOW_MS;
	bool stopped = false;
	int renewals = 0;
	for (int64_t now = acquired + LIFECYCLE_BEAT_INTERVAL_MS; now < deadline;
	     now += LIFECYCLE_BEAT_INTERVAL_MS) {
		int64_t ttl = renewal_ttl_ms(deadline, now);
		if (stopped) {
			assert_int_equal(ttl, 0);
			continue;
		}
		if (ttl == 0) {
			assert_true(deadline - now < LIFECYCLE_BACKEND_MIN_RENEWAL_MS);
			stopped = true;
			continue;
		}
		renewals++;
		expiry = now + ttl;
		assert_true(expiry <= deadline);
		int64_t next = now + LIFECYCLE_BEAT_INTERVAL_MS;
		assert_true(expiry >= (next < deadline ? next : deadline));
	}
	/* The last renewal sent carries the lease to within the minimum of its
	 * deadline: what is left after it is the backend's to end. */
	assert_true(deadline - expiry < LIFECYCLE_BACKEND_MIN_RENEWAL_MS || expiry == deadline);
	return renewals;
}

static void test_a_whole_lease_in_relay_time(void **state)
{
	(void)state;
	/* ttlHours 0.1 (the contract's least): the acquisition covers it all,
	 * and no beat has the minimum left. */
	assert_int_equal(walk_lease(HOUR_MS / 10), 0);
	/* One hour: a beat a minute until fewer than 6 minutes are left. */
	assert_int_equal(walk_lease(HOUR_MS), 54);
	assert_int_equal(walk_lease(5 * HOUR_MS / 2), 144);
}

static void test_binding_equality(void **state)
{
	(void)state;
	json_object *a = jsonx_parse_str("{\"machine\":\"m\",\"endpoint\":null,\"store\":\"/s\"}", NULL, 0);
	json_object *b = jsonx_parse_str(
	    "{\"machine\":\"m\",\"store\":\"/s\",\"environmentFingerprint\":null,\"extra\":1}", NULL, 0);
	json_object *c =
	    jsonx_parse_str("{\"machine\":\"m\",\"endpoint\":\"http://x\",\"store\":\"/s\"}", NULL, 0);
	json_object *d = jsonx_parse_str(
	    "{\"machine\":\"m\",\"endpoint\":null,\"store\":\"/s\",\"environmentFingerprint\":\"f1\"}", NULL,
	    0);
	json_object *e =
	    jsonx_parse_str("{\"machine\":\"other\",\"endpoint\":null,\"store\":\"/s\"}", NULL, 0);
	json_object *not_object = json_object_new_string("m");
	/* null and absent are the same; other keys do not count. */
	assert_true(lease_binding_equal(a, b));
	assert_true(lease_binding_equal(b, a));
	/* Each of the four keys counts. */
	assert_false(lease_binding_equal(a, c));
	assert_false(lease_binding_equal(a, d));
	assert_false(lease_binding_equal(a, e));
	assert_false(lease_binding_equal(a, not_object));
	assert_false(lease_binding_equal(NULL, NULL));
	json_object_put(a);
	json_object_put(b);
	json_object_put(c);
	json_object_put(d);
	json_object_put(e);
	json_object_put(not_object);
}

static void test_plugin_answers_parsed_and_freed(void **state)
{
	(void)state;
	json_object *obj = lease_parse_taken(strdup("{\"vm\":\"v-1\"}"));
	assert_non_null(obj);
	assert_string_equal(jsonx_get_str(obj, "vm"), "v-1");
	json_object_put(obj);
	/* Not JSON, or nothing: NULL (the text is freed either way; the
	 * sanitizer build finds a leak). */
	assert_null(lease_parse_taken(strdup("{\"vm\":")));
	assert_null(lease_parse_taken(NULL));
}

static void test_guest_names_a_restart_takes_back(void **state)
{
	(void)state;
	assert_true(lease_reconcile_valid_guest_name("login-test-1"));
	assert_true(lease_reconcile_valid_guest_name("a"));
	assert_true(lease_reconcile_valid_guest_name("0-"));
	char longest[50];
	memset(longest, 'a', 48);
	longest[48] = '\0';
	assert_true(lease_reconcile_valid_guest_name(longest));
	longest[48] = 'a';
	longest[49] = '\0';
	assert_false(lease_reconcile_valid_guest_name(longest));
	assert_false(lease_reconcile_valid_guest_name(""));
	assert_false(lease_reconcile_valid_guest_name("-a"));
	assert_false(lease_reconcile_valid_guest_name("Login-1"));
	assert_false(lease_reconcile_valid_guest_name("a_1"));
	assert_false(lease_reconcile_valid_guest_name("../a"));
	assert_false(lease_reconcile_valid_guest_name("a.1"));
}

static void test_egress_needs_egress_listeners(void **state)
{
	(void)state;
	assert_true(lease_egress_wanted("allow"));
	assert_true(lease_egress_wanted("internet"));
	assert_false(lease_egress_wanted("nat"));
	assert_false(lease_egress_wanted("none"));
	assert_false(lease_egress_wanted(NULL));

	loaded_plugin plugin;
	memset(&plugin, 0, sizeof plugin);
	plugin.descriptor.name = "machine-old";
	char msg[512] = "";
	/* nat and none need no proxy: any plugin will do. */
	assert_int_equal(lease_egress_check(&plugin, "nat", msg, sizeof msg), 0);
	assert_int_equal(lease_egress_check(&plugin, "none", msg, sizeof msg), 0);
	assert_string_equal(msg, "");
	assert_int_equal(lease_egress_check(&plugin, "internet", msg, sizeof msg), -1);
	assert_string_equal(msg,
	                    "the machine plugin machine-old cannot give a guest network internet (it has "
	                    "no egress_listeners, ABI 1.3): use MCP_RELAY_GUEST_NETWORK=nat or a backend "
	                    "that serves the relay's egress proxy (docs/egress.md)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_renewal_lengths),
	    cmocka_unit_test(test_a_whole_lease_in_relay_time),
	    cmocka_unit_test(test_binding_equality),
	    cmocka_unit_test(test_plugin_answers_parsed_and_freed),
	    cmocka_unit_test(test_guest_names_a_restart_takes_back),
	    cmocka_unit_test(test_egress_needs_egress_listeners),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
