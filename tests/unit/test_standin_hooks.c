/*
 * test_standin_hooks.c — machine-service-standin: the test hooks of
 * machine-service.md §12.3 (faults: status, delay, dropped connection,
 * after-phase; the request log; the service clock), the reaper of §3.11
 * (TTL, grace, ttl-expired on POST /gc and on its interval, a heartbeat
 * reviving a lease in grace, vm-not-running), the undelivered acquire, and
 * restarts from DIR/state.json.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "standin_client.h"

static bool has_event(const standin_proc *p, const char *vm, const char *event, const char *reason)
{
	standin_reply r;
	bool found = false;
	if (standin_get(p, "/_standin/events", &r) == 200) {
		json_object *events = jsonx_get_array(r.json, "events");
		for (size_t i = 0; i < json_object_array_length(events); i++) {
			json_object *e = json_object_array_get_idx(events, i);
			found |= strcmp(jsonx_get_str(e, "vm"), vm) == 0 &&
			         strcmp(jsonx_get_str(e, "event"), event) == 0 &&
			         strcmp(jsonx_get_str(e, "reason"), reason) == 0;
		}
	}
	standin_reply_free(&r);
	return found;
}

static long snapshot(const standin_proc *p, const char *vm, standin_reply *r)
{
	char path[512];
	snprintf(path, sizeof path, "/machines/%s", vm);
	return standin_get(p, path, r);
}

static void test_faults_status_delay_and_drop(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	standin_reply r;
	assert_int_equal(
	    standin_post(&p, "/_standin/faults",
	                 "{\"route\":\"health\",\"status\":503,\"error\":\"overloaded\",\"times\":2}", &r),
	    200);
	assert_int_equal(json_object_array_length(jsonx_get_array(r.json, "faults")), 1);
	standin_reply_free(&r);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(standin_get(&p, "/health", &r), 503);
		assert_string_equal(standin_error_text(&r), "overloaded");
		standin_reply_free(&r);
	}
	assert_int_equal(standin_get(&p, "/health", &r), 200);
	standin_reply_free(&r);

	/* A delay longer than the client waits: the client times out. */
	assert_int_equal(standin_post(&p, "/_standin/faults", "{\"route\":\"images\",\"delayMs\":3000}", &r),
	                 200);
	standin_reply_free(&r);
	assert_int_equal(standin_request_ex(&p, "GET", "/images", NULL, NULL, 500, &r), 0);
	assert_int_equal(r.curl_code, CURLE_OPERATION_TIMEDOUT);
	standin_reply_free(&r);
	/* The delay alone answers normally. */
	assert_int_equal(standin_post(&p, "/_standin/faults", "{\"route\":\"images\",\"delayMs\":200}", &r),
	                 200);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/images", &r), 200);
	standin_reply_free(&r);

	/* A dropped connection: no answer at all, and nothing was done. */
	assert_int_equal(
	    standin_post(&p, "/_standin/faults", "{\"route\":\"acquire\",\"dropConnection\":true}", &r), 200);
	standin_reply_free(&r);
	assert_int_equal(
	    standin_post(&p, "/acquire",
	                 "{\"purpose\":\"relay-f-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r),
	    0);
	assert_int_equal(r.curl_code, CURLE_GOT_NOTHING);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/machines", &r), 200);
	assert_int_equal(json_object_object_length(jsonx_get_obj(r.json, "machines")), 0);
	standin_reply_free(&r);

	/* After-phase: the operation happens, then the answer is lost
	 * (indeterminate), so the lease exists for reconciliation. */
	assert_int_equal(standin_post(&p, "/_standin/faults",
	                              "{\"route\":\"acquire\",\"dropConnection\":true,\"phase\":\"after\"}",
	                              &r),
	                 200);
	standin_reply_free(&r);
	assert_int_equal(
	    standin_post(&p, "/acquire",
	                 "{\"purpose\":\"relay-f-00000002\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r),
	    0);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/machines", &r), 200);
	json_object *machines = jsonx_get_obj(r.json, "machines");
	assert_int_equal(json_object_object_length(machines), 1);
	json_object_object_foreach(machines, name, rec)
	{
		(void)name;
		assert_string_equal(jsonx_get_str(rec, "purpose"), "relay-f-00000002");
	}
	standin_reply_free(&r);

	/* A 503 on exec for one request. */
	char *vm = standin_acquire(
	    &p, "{\"purpose\":\"relay-f-00000003\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	assert_non_null(vm);
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/_standin/faults", "{\"route\":\"exec\",\"status\":503}", &r),
	                 200);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&p, &r, "{\"argv\":[\"true\"]}", "/machines/%s/exec", vm), 503);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&p, &r, "{\"argv\":[\"true\"]}", "/machines/%s/exec", vm), 200);
	standin_reply_free(&r);
	/* Bad fault definitions are refused. */
	assert_int_equal(standin_post(&p, "/_standin/faults", "{\"route\":\"nowhere\"}", &r), 400);
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/_standin/faults", "{\"route\":\"exec\",\"times\":0}", &r), 400);
	standin_reply_free(&r);
	free(vm);
	standin_cleanup(&p);
}

static void test_undelivered_acquire_is_released(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	standin_reply r;
	/* The answer comes late; the client has gone by then. */
	assert_int_equal(standin_post(&p, "/_standin/faults",
	                              "{\"route\":\"acquire\",\"phase\":\"after\",\"delayMs\":1500}", &r),
	                 200);
	standin_reply_free(&r);
	assert_int_equal(
	    standin_request_ex(&p, "POST", "/acquire",
	                       "{\"purpose\":\"relay-u-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}",
	                       NULL, 300, &r),
	    0);
	standin_reply_free(&r);
	/* Wait for the service to finish with it (condition, not timing). */
	bool released = false;
	for (int i = 0; i < 200 && !released; i++) {
		standin_sleep_ms(50);
		assert_int_equal(standin_get(&p, "/_standin/events", &r), 200);
		json_object *events = jsonx_get_array(r.json, "events");
		for (size_t j = 0; j < json_object_array_length(events); j++)
			released |= strcmp(jsonx_get_str(json_object_array_get_idx(events, j), "reason"),
			                   "acquire-response-undelivered") == 0;
		standin_reply_free(&r);
	}
	assert_true(released);
	assert_int_equal(standin_get(&p, "/machines", &r), 200);
	assert_int_equal(json_object_object_length(jsonx_get_obj(r.json, "machines")), 0);
	standin_reply_free(&r);
	standin_cleanup(&p);
}

static void test_request_log(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	standin_reply r;
	const char *headers[] = {"X-Trace: abc", NULL};
	assert_int_equal(standin_request(&p, "GET", "/health", NULL, headers, &r), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/acquire", "{\"purpose\":\"Bad\"}", &r), 409);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/_standin/requests", &r), 200);
	json_object *requests = jsonx_get_array(r.json, "requests");
	assert_int_equal(json_object_array_length(requests), 2); /* hooks are not logged */
	json_object *first = json_object_array_get_idx(requests, 0);
	assert_string_equal(jsonx_get_str(first, "method"), "GET");
	assert_string_equal(jsonx_get_str(first, "path"), "/health");
	assert_string_equal(jsonx_get_str(jsonx_get_obj(first, "headers"), "x-trace"), "abc");
	double t = 0;
	assert_true(jsonx_get_double(first, "time", &t));
	json_object *second = json_object_array_get_idx(requests, 1);
	assert_string_equal(jsonx_get_str(second, "method"), "POST");
	assert_string_equal(jsonx_get_str(second, "path"), "/acquire");
	assert_string_equal(jsonx_get_str(second, "body"), "{\"purpose\":\"Bad\"}");
	assert_string_equal(jsonx_get_str(jsonx_get_obj(second, "headers"), "content-length"), "17");
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/_standin/requests", "{\"clear\":true}", &r), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/_standin/requests", &r), 200);
	assert_int_equal(json_object_array_length(jsonx_get_array(r.json, "requests")), 0);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/_standin/nothing", &r), 404);
	standin_reply_free(&r);
	standin_cleanup(&p);
}

static void test_clock_grace_and_ttl_expired(void **state)
{
	(void)state;
	standin_proc p = {0};
	const char *args[] = {"--grace-hours", "0.5", NULL};
	assert_true(standin_start(&p, args));
	standin_reply r;
	char *vm = standin_acquire(&p,
	                           "{\"purpose\":\"relay-ttl-00000001\",\"image\":\"ubuntu2404\",\"env\":"
	                           "\"none\",\"ttl_hours\":0.1}",
	                           &r);
	assert_non_null(vm);
	standin_reply_free(&r);
	char *keep = standin_acquire(&p,
	                             "{\"purpose\":\"relay-ttl-00000002\",\"image\":\"ubuntu2404\",\"env\":"
	                             "\"none\",\"ttl_hours\":0.1}",
	                             &r);
	assert_non_null(keep);
	standin_reply_free(&r);

	/* Before expiry a pass changes nothing. */
	assert_int_equal(standin_post(&p, "/gc", NULL, &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "gc"), "done");
	standin_reply_free(&r);
	assert_int_equal(snapshot(&p, vm, &r), 200);
	json_object *grace = (json_object *)1;
	assert_true(json_object_object_get_ex(r.json, "grace_until", &grace));
	assert_null(grace);
	standin_reply_free(&r);

	/* Past the TTL: grace starts, warned is set, the TTL reads negative. */
	assert_int_equal(standin_post(&p, "/_standin/clock", "{\"advanceSeconds\": 400}", &r), 200);
	double offset = 0;
	assert_true(jsonx_get_double(r.json, "offsetSeconds", &offset));
	assert_true(offset == 400.0);
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/gc", NULL, &r), 200);
	standin_reply_free(&r);
	assert_int_equal(snapshot(&p, vm, &r), 200);
	bool warned = false;
	assert_true(jsonx_get_bool(r.json, "warned", &warned));
	assert_true(warned);
	double remaining = 0, grace_left = 0;
	assert_true(jsonx_get_double(r.json, "ttl_hours_remaining", &remaining));
	assert_true(remaining < 0);
	assert_true(jsonx_get_double(r.json, "grace_hours_remaining", &grace_left));
	assert_true(grace_left > 0.45 && grace_left <= 0.5);
	standin_reply_free(&r);

	/* A heartbeat in grace revives `keep`. */
	assert_int_equal(standin_postf(&p, &r, "{\"ttl_hours\":1}", "/machines/%s/heartbeat", keep), 200);
	grace = (json_object *)1;
	assert_true(json_object_object_get_ex(r.json, "grace_until", &grace));
	assert_null(grace);
	assert_true(jsonx_get_bool(r.json, "warned", &warned));
	assert_false(warned);
	standin_reply_free(&r);

	/* Past grace: released with ttl-expired. */
	assert_int_equal(standin_post(&p, "/_standin/clock", "{\"advanceSeconds\": 1900}", &r), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/gc", NULL, &r), 200);
	standin_reply_free(&r);
	assert_int_equal(snapshot(&p, vm, &r), 404);
	standin_reply_free(&r);
	assert_true(has_event(&p, vm, "released", "ttl-expired"));
	assert_int_equal(snapshot(&p, keep, &r), 200);
	standin_reply_free(&r);
	char *dir = standin_lease_path(&p, vm, "");
	struct stat st;
	assert_int_equal(stat(dir, &st), -1);
	free(dir);
	free(vm);
	free(keep);
	standin_cleanup(&p);
}

static void test_reaper_runs_on_its_interval(void **state)
{
	(void)state;
	standin_proc p = {0};
	const char *args[] = {"--grace-hours", "0", "--gc-interval-s", "0.2", NULL};
	assert_true(standin_start(&p, args));
	standin_reply r;
	char *vm = standin_acquire(&p,
	                           "{\"purpose\":\"relay-int-00000001\",\"image\":\"ubuntu2404\",\"env\":"
	                           "\"none\",\"ttl_hours\":0.1}",
	                           &r);
	assert_non_null(vm);
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/_standin/clock", "{\"advanceSeconds\": 3600}", &r), 200);
	standin_reply_free(&r);
	/* No /gc: wait for the reaper's own passes (condition, bounded). */
	long status = 200;
	for (int i = 0; i < 300 && status == 200; i++) {
		standin_sleep_ms(50);
		status = snapshot(&p, vm, &r);
		standin_reply_free(&r);
	}
	assert_int_equal(status, 404);
	assert_true(has_event(&p, vm, "released", "ttl-expired"));
	free(vm);
	standin_cleanup(&p);
}

static void test_machine_not_running_is_released(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	standin_reply r;
	char *vm = standin_acquire(
	    &p, "{\"purpose\":\"relay-nr-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	assert_non_null(vm);
	standin_reply_free(&r);
	char body[256];
	snprintf(body, sizeof body, "{\"vm\":\"%s\"}", vm);
	assert_int_equal(standin_post(&p, "/_standin/stop", body, &r), 200);
	standin_reply_free(&r);
	/* Two consecutive passes. */
	assert_int_equal(standin_post(&p, "/gc", NULL, &r), 200);
	standin_reply_free(&r);
	assert_int_equal(snapshot(&p, vm, &r), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/gc", NULL, &r), 200);
	standin_reply_free(&r);
	assert_int_equal(snapshot(&p, vm, &r), 404);
	standin_reply_free(&r);
	assert_true(has_event(&p, vm, "released", "vm-not-running"));
	free(vm);
	standin_cleanup(&p);
}

static void test_restart_from_state_json(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	standin_reply r;
	char *vm = standin_acquire(
	    &p,
	    "{\"purpose\":\"relay-rs-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"ttl_hours\":2}",
	    &r);
	assert_non_null(vm);
	char lease_id[64];
	snprintf(lease_id, sizeof lease_id, "%s", jsonx_get_str(r.json, "lease_id"));
	standin_reply_free(&r);
	assert_int_equal(
	    standin_postf(&p, &r, "{\"argv\":[\"sh\",\"-c\",\"echo kept > note\"]}", "/machines/%s/exec", vm),
	    200);
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/_standin/clock", "{\"advanceSeconds\": 60}", &r), 200);
	standin_reply_free(&r);
	standin_stop(&p);

	/* Add an acquisition that was interrupted (pending) to the state. */
	char state_path[PATH_MAX + 32];
	snprintf(state_path, sizeof state_path, "%s/state.json", p.root);
	json_object *saved = NULL;
	relay_error err;
	assert_int_equal(fs_read_json(state_path, 1 << 24, &saved, &err), RELAY_OK);
	double offset = 0;
	assert_true(jsonx_get_double(saved, "clock_offset_s", &offset));
	assert_true(offset == 60.0);
	json_object *leases = jsonx_get_array(saved, "leases");
	assert_int_equal(json_object_array_length(leases), 1);
	json_object *copy = NULL;
	assert_int_equal(json_object_deep_copy(json_object_array_get_idx(leases, 0), &copy, NULL), 0);
	json_object *rec = jsonx_get_obj(copy, "record");
	jsonx_add_str(rec, "vm", "pilot-relay-rs-00000002-abcdef");
	jsonx_add_str(rec, "purpose", "relay-rs-00000002");
	jsonx_add_str(rec, "state", "pending");
	json_object_array_add(leases, copy);
	assert_int_equal(fs_write_json_durable(state_path, saved, &err), RELAY_OK);
	json_object_put(saved);

	assert_true(standin_start(&p, NULL));
	assert_int_equal(snapshot(&p, vm, &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "lease_id"), lease_id);
	assert_string_equal(jsonx_get_str(r.json, "state"), "running");
	standin_reply_free(&r);
	assert_int_equal(snapshot(&p, "pilot-relay-rs-00000002-abcdef", &r), 404);
	standin_reply_free(&r);
	assert_true(
	    has_event(&p, "pilot-relay-rs-00000002-abcdef", "released", "acquire-interrupted-by-restart"));
	/* The lease folder survived; operations go on. */
	assert_int_equal(standin_postf(&p, &r, "{\"argv\":[\"cat\",\"note\"]}", "/machines/%s/exec", vm),
	                 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "kept\n");
	standin_reply_free(&r);
	/* The same purpose is still held. */
	assert_int_equal(
	    standin_post(&p, "/acquire",
	                 "{\"purpose\":\"relay-rs-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r),
	    409);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&p, &r, "{}", "/machines/%s/release", vm), 200);
	standin_reply_free(&r);
	free(vm);
	standin_cleanup(&p);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_faults_status_delay_and_drop),
	    cmocka_unit_test(test_undelivered_acquire_is_released),
	    cmocka_unit_test(test_request_log),
	    cmocka_unit_test(test_clock_grace_and_ttl_expired),
	    cmocka_unit_test(test_reaper_runs_on_its_interval),
	    cmocka_unit_test(test_machine_not_running_is_released),
	    cmocka_unit_test(test_restart_from_state_json),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return failed;
}
