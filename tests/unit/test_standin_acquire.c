/*
 * test_standin_acquire.c — machine-service-standin: POST /acquire with
 * every field rule and refusal text of machine-service.md §3.5, the lease
 * record of §4, credential packs under DIR/packs/, the capacity refusals
 * (same purpose, the macOS limit), and heartbeat (§3.6).
 */
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "standin_client.h"

static standin_proc proc;

static int setup(void **state)
{
	(void)state;
	memset(&proc, 0, sizeof proc);
	const char *args[] = {"--macos-limit", "2", NULL};
	return standin_start(&proc, args) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	standin_cleanup(&proc);
	return 0;
}

static void expect_refusal(const char *body, const char *text)
{
	standin_reply r;
	long status = standin_post(&proc, "/acquire", body, &r);
	if (status != 409 || strcmp(standin_error_text(&r), text) != 0)
		fail_msg("acquire %s\n  answered %ld %s\n  expected 409 %s", body, status, r.raw ? r.raw : "",
		         text);
	standin_reply_free(&r);
}

static bool matches(const char *pattern, const char *text)
{
	regex_t re;
	assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
	bool ok = regexec(&re, text, 0, NULL, 0) == 0;
	regfree(&re);
	return ok;
}

static void test_field_refusals(void **state)
{
	(void)state;
	expect_refusal("{\"purpose\":\"relay-a-00000001\",\"zeta\":1,\"alpha\":2}",
	               "unknown acquisition fields: alpha, zeta");
	expect_refusal("{}", "'purpose' (string) is required");
	expect_refusal("{\"purpose\":7}", "'purpose' (string) is required");
	expect_refusal("{\"purpose\":\"Bad_Purpose\"}", "purpose must match [a-z0-9][a-z0-9-]{0,63}");
	expect_refusal("{\"purpose\":\"-lead\"}", "purpose must match [a-z0-9][a-z0-9-]{0,63}");
	expect_refusal("{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"line\":\"ubuntu2404\"}",
	               "ambiguous aliases: image, line");
	expect_refusal("{\"purpose\":\"relay-a-00000001\",\"env\":\"none\",\"pack\":\"none\"}",
	               "ambiguous aliases: env, pack, lane");
	expect_refusal("{\"purpose\":\"relay-a-00000001\",\"image\":\"nope\"}",
	               "unknown image 'nope' (available: macos26, ubuntu2404)");
	expect_refusal("{\"purpose\":\"relay-a-00000001\",\"line\":\"nope\"}",
	               "unknown image 'nope' (available: macos26, ubuntu2404)");
	const char *bad_ttls[] = {"0.05", "721", "null", "true", "{}", "\"abc\"", "\"\""};
	for (size_t i = 0; i < sizeof bad_ttls / sizeof bad_ttls[0]; i++) {
		char body[256];
		snprintf(body, sizeof body,
		         "{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"ttl_"
		         "hours\":%s}",
		         bad_ttls[i]);
		expect_refusal(body, "ttl_hours must be finite and within [0.1, 720]");
	}
	const char *resources[] = {"cpu", "memory_mb", "disk_gb"};
	const char *bad_values[] = {"0", "-1", "1.5", "\"2\"", "true"};
	for (size_t i = 0; i < 3; i++) {
		for (size_t j = 0; j < sizeof bad_values / sizeof bad_values[0]; j++) {
			char body[256], text[128];
			snprintf(body, sizeof body,
			         "{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":"
			         "\"none\",\"%s\":%s}",
			         resources[i], bad_values[j]);
			snprintf(text, sizeof text, "%s must be a positive integer or null", resources[i]);
			expect_refusal(body, text);
		}
	}
	expect_refusal(
	    "{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"wait\":\"yes\"}",
	    "wait must be a boolean");
	expect_refusal(
	    "{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"wait\":null}",
	    "wait must be a boolean");
	expect_refusal("{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\","
	               "\"network\":\"internet\"}",
	               "network must be nat or control-only");
	expect_refusal(
	    "{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"profile\":\"x\"}",
	    "profile is only valid for control-only");
	expect_refusal(
	    "{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\","
	    "\"network\":\"control-only\"}",
	    "control-only unavailable: private helper and host-authoritative runtime/attachment audit "
	    "pending; no NAT fallback");
	expect_refusal("{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"source\":\"work\"}",
	               "work source requires explicit env:none");
	expect_refusal(
	    "{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"vnc\":null}",
	    "vnc must be a boolean");
	expect_refusal(
	    "{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"vnc\":\"yes\"}",
	    "vnc must be a boolean");
	expect_refusal(
	    "{\"purpose\":\"relay-a-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"vnc\":true}",
	    "VNC unavailable: configure the standard viewer and guest sharing prerequisites");

	/* Nothing was leased by any refusal. */
	standin_reply r;
	assert_int_equal(standin_get(&proc, "/machines", &r), 200);
	assert_int_equal(json_object_object_length(jsonx_get_obj(r.json, "machines")), 0);
	standin_reply_free(&r);
}

static void test_credential_packs(void **state)
{
	(void)state;
	char text[PATH_MAX + 128];
	/* The default env is "default", which needs DIR/packs/default. */
	snprintf(text, sizeof text, "credential pack not found: %s/packs/default", proc.root);
	expect_refusal("{\"purpose\":\"relay-p-00000001\",\"image\":\"ubuntu2404\"}", text);
	snprintf(text, sizeof text, "credential pack not found: %s/packs/missing", proc.root);
	expect_refusal("{\"purpose\":\"relay-p-00000001\",\"image\":\"ubuntu2404\",\"lane\":\"missing\"}",
	               text);

	char pack[PATH_MAX + 32];
	snprintf(pack, sizeof pack, "%s/packs/team", proc.root);
	assert_int_equal(mkdir(pack, 0700), 0);
	standin_reply r;
	char *vm = standin_acquire(
	    &proc, "{\"purpose\":\"relay-p-00000001\",\"image\":\"ubuntu2404\",\"env\":\"team\"}", &r);
	assert_non_null(vm);
	assert_string_equal(jsonx_get_str(r.json, "env"), "team");
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, "{\"reason\":\"finished\"}", "/machines/%s/release", vm),
	                 200);
	standin_reply_free(&r);
	free(vm);

	/* "" and "none" mean no pack: env is null. */
	const char *none_bodies[] = {
	    "{\"purpose\":\"relay-p-00000002\",\"image\":\"ubuntu2404\",\"env\":\"\"}",
	    "{\"purpose\":\"relay-p-00000003\",\"image\":\"ubuntu2404\",\"pack\":\"none\"}"};
	for (size_t i = 0; i < 2; i++) {
		vm = standin_acquire(&proc, none_bodies[i], &r);
		assert_non_null(vm);
		json_object *env = (json_object *)1;
		assert_true(json_object_object_get_ex(r.json, "env", &env));
		assert_null(env);
		standin_reply_free(&r);
		assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/release", vm), 200);
		standin_reply_free(&r);
		free(vm);
	}
}

static void test_record_shape(void **state)
{
	(void)state;
	standin_reply r;
	char *vm = standin_acquire(
	    &proc,
	    "{\"purpose\":\"relay-login-test-3f9a1c2e\",\"image\":\"ubuntu2404\",\"env\":\"none\","
	    "\"ttl_hours\":\"0.25\",\"wait\":false,\"network\":\"nat\",\"cpu\":2,\"memory_mb\":null}",
	    &r);
	assert_non_null(vm);
	json_object *rec = r.json;
	assert_true(matches("^pilot-relay-login-test-3f9a1c2e-[0-9a-f]{6}$", vm));
	assert_string_equal(jsonx_get_str(rec, "purpose"), "relay-login-test-3f9a1c2e");
	assert_string_equal(jsonx_get_str(rec, "image"), "ubuntu2404");
	assert_string_equal(jsonx_get_str(rec, "image_kind"), "linux");
	assert_true(matches("^[0-9a-f]{32}$", jsonx_get_str(rec, "lease_id")));
	assert_string_equal(jsonx_get_str(rec, "state"), "running");
	assert_string_equal(jsonx_get_str(rec, "ip"), "127.0.0.1");
	assert_string_equal(jsonx_get_str(rec, "ssh_user"), "admin");
	assert_string_equal(jsonx_get_str(rec, "ssh_auth"), "lease-key");
	assert_string_equal(jsonx_get_str(rec, "ssh_host_trust"), "lease-tofu");
	bool b = false;
	assert_true(jsonx_get_bool(rec, "ssh_verified", &b));
	assert_true(b);
	assert_true(jsonx_get_bool(rec, "warned", &b));
	assert_false(b);
	double created = 0, expires = 0;
	assert_true(jsonx_get_double(rec, "created_at", &created));
	assert_true(jsonx_get_double(rec, "ttl_expires_at", &expires));
	assert_true(expires - created > 899.0 && expires - created < 901.0);
	int64_t cpu = 0;
	assert_true(jsonx_get_int(rec, "cpu", &cpu));
	assert_int_equal(cpu, 2);
	json_object *v = (json_object *)1;
	assert_true(json_object_object_get_ex(rec, "memory_mb", &v));
	assert_null(v);
	v = (json_object *)1;
	assert_true(json_object_object_get_ex(rec, "grace_until", &v));
	assert_null(v);
	/* Not part of the acquire answer. */
	assert_false(jsonx_has(rec, "ttl_hours_remaining"));
	assert_false(jsonx_has(rec, "actually_running"));
	assert_false(jsonx_has(rec, "environment_fingerprint"));
	assert_false(jsonx_has(rec, "console"));
	assert_false(jsonx_has(rec, "ssh"));
	json_object *conf = jsonx_get_obj(rec, "configuration");
	int64_t version = 0;
	assert_true(jsonx_get_int(conf, "schemaVersion", &version));
	assert_int_equal(version, 1);
	json_object *eff = jsonx_get_obj(conf, "effective");
	assert_true(jsonx_get_int(eff, "cpu", &cpu));
	assert_int_equal(cpu, 2);
	int64_t mem = 0;
	assert_true(jsonx_get_int(eff, "memory_mb", &mem));
	assert_int_equal(mem, 16384);
	double initial = 0;
	assert_true(jsonx_get_double(eff, "initial_ttl_hours", &initial));
	assert_true(initial == 0.25);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(eff, "readiness"), "mode"), "bounded");
	assert_string_equal(jsonx_get_str(eff, "network"), "nat");
	assert_string_equal(jsonx_get_str(jsonx_get_obj(conf, "sources"), "cpu"), "request");
	assert_string_equal(jsonx_get_str(jsonx_get_obj(conf, "sources"), "memory_mb"),
	                    "image-configuration");
	standin_reply_free(&r);

	/* The lease folder exists with home and the guest's temporary folders. */
	char *home = standin_lease_path(&proc, vm, "home");
	char *var_tmp = standin_lease_path(&proc, vm, "guest/var-tmp");
	struct stat st;
	assert_int_equal(stat(home, &st), 0);
	assert_int_equal(stat(var_tmp, &st), 0);

	/* Same purpose and image while active: refused with the holder's name. */
	char text[512];
	snprintf(text, sizeof text,
	         "purpose 'relay-login-test-3f9a1c2e' already leased on image ubuntu2404: %s", vm);
	expect_refusal(
	    "{\"purpose\":\"relay-login-test-3f9a1c2e\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", text);

	/* The lease is durable in DIR/state.json. */
	char state_path[PATH_MAX + 32];
	snprintf(state_path, sizeof state_path, "%s/state.json", proc.root);
	json_object *saved = NULL;
	relay_error err;
	assert_int_equal(fs_read_json(state_path, 1 << 24, &saved, &err), RELAY_OK);
	json_object *first = json_object_array_get_idx(jsonx_get_array(saved, "leases"), 0);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(first, "record"), "vm"), vm);
	json_object_put(saved);

	assert_int_equal(standin_postf(&proc, &r, "{\"reason\":\"released\"}", "/machines/%s/release", vm),
	                 200);
	standin_reply_free(&r);
	assert_int_equal(stat(home, &st), -1);
	free(home);
	free(var_tmp);
	free(vm);
}

static void test_macos_limit(void **state)
{
	(void)state;
	standin_reply r;
	char *a = standin_acquire(&proc, "{\"purpose\":\"relay-m-00000001\",\"env\":\"none\"}", &r);
	assert_non_null(a);
	assert_string_equal(jsonx_get_str(r.json, "image"), "macos26");
	assert_string_equal(jsonx_get_str(r.json, "image_kind"), "macos");
	assert_string_equal(jsonx_get_str(r.json, "ssh_user"), "station");
	standin_reply_free(&r);
	char *b = standin_acquire(
	    &proc, "{\"purpose\":\"relay-m-00000002\",\"image\":\"macos26\",\"env\":\"none\"}", &r);
	assert_non_null(b);
	standin_reply_free(&r);
	expect_refusal(
	    "{\"purpose\":\"relay-m-00000003\",\"env\":\"none\"}",
	    "macOS VM limit reached (2 active); release one first; host-wide Virtualization.framework "
	    "guests: 2 (0 not ours)");
	/* Linux images have no limit. */
	char *c = standin_acquire(
	    &proc, "{\"purpose\":\"relay-m-00000003\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	assert_non_null(c);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/release", a), 200);
	standin_reply_free(&r);
	char *d = standin_acquire(&proc, "{\"purpose\":\"relay-m-00000003\",\"env\":\"none\"}", &r);
	assert_non_null(d);
	standin_reply_free(&r);
	const char *names[] = {b, c, d};
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/release", names[i]), 200);
		standin_reply_free(&r);
	}
	free(a);
	free(b);
	free(c);
	free(d);
}

static void test_heartbeat(void **state)
{
	(void)state;
	standin_reply r;
	char *vm = standin_acquire(
	    &proc,
	    "{\"purpose\":\"relay-hb-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\",\"ttl_hours\":0.5}",
	    &r);
	assert_non_null(vm);
	standin_reply_free(&r);

	assert_int_equal(standin_postf(&proc, &r, "{\"ttl_hours\":0.05}", "/machines/%s/heartbeat", vm), 409);
	assert_string_equal(standin_error_text(&r), "ttl_hours must be finite and within [0.1, 720]");
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, "{\"ttl_hours\":null}", "/machines/%s/heartbeat", vm), 409);
	standin_reply_free(&r);

	assert_int_equal(standin_postf(&proc, &r, "{\"ttl_hours\":0.25}", "/machines/%s/heartbeat", vm), 200);
	double remaining = 0, expires = 0, initial = 0;
	assert_true(jsonx_get_double(r.json, "ttl_hours_remaining", &remaining));
	assert_true(remaining > 0.2 && remaining <= 0.25);
	assert_true(jsonx_get_double(r.json, "ttl_expires_at", &expires));
	assert_true(jsonx_get_double(jsonx_get_obj(jsonx_get_obj(r.json, "configuration"), "effective"),
	                             "initial_ttl_hours", &initial));
	assert_true(initial == 0.5); /* never rewritten */
	standin_reply_free(&r);

	/* Without ttl_hours the lease's own initial TTL applies. */
	assert_int_equal(standin_postf(&proc, &r, NULL, "/machines/%s/heartbeat", vm), 200);
	assert_true(jsonx_get_double(r.json, "ttl_hours_remaining", &remaining));
	assert_true(remaining > 0.45 && remaining <= 0.5);
	standin_reply_free(&r);

	/* Tart reports the machine stopped (test hook). */
	char body[256];
	snprintf(body, sizeof body, "{\"vm\":\"%s\"}", vm);
	assert_int_equal(standin_post(&proc, "/_standin/stop", body, &r), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/heartbeat", vm), 409);
	char text[512];
	snprintf(text, sizeof text,
	         "%s is not running on the host (Tart reports it stopped or absent); release it and acquire "
	         "a new lease",
	         vm);
	assert_string_equal(standin_error_text(&r), text);
	standin_reply_free(&r);
	char path[256];
	snprintf(path, sizeof path, "/machines/%s", vm);
	assert_int_equal(standin_get(&proc, path, &r), 200);
	bool running = true;
	assert_true(jsonx_get_bool(r.json, "actually_running", &running));
	assert_false(running);
	standin_reply_free(&r);

	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/release", vm), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/heartbeat", vm), 409);
	snprintf(text, sizeof text, "unknown VM: %s", vm);
	assert_string_equal(standin_error_text(&r), text);
	standin_reply_free(&r);
	free(vm);
}

static void test_releasing_lease_refuses_renewal(void **state)
{
	(void)state;
	standin_reply r;
	char *vm = standin_acquire(
	    &proc, "{\"purpose\":\"relay-rl-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	assert_non_null(vm);
	standin_reply_free(&r);
	/* The next teardown fails: the lease stays releasing and keeps its slot. */
	assert_int_equal(standin_post(&proc, "/_standin/faults", "{\"route\":\"teardown\"}", &r), 200);
	standin_reply_free(&r);
	char text[512];
	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/release", vm), 409);
	snprintf(text, sizeof text, "Teardown incomplete for %s; lease retained for retry", vm);
	assert_string_equal(standin_error_text(&r), text);
	standin_reply_free(&r);
	char path[256];
	snprintf(path, sizeof path, "/machines/%s", vm);
	assert_int_equal(standin_get(&proc, path, &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "state"), "releasing");
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/heartbeat", vm), 409);
	snprintf(text, sizeof text, "%s is releasing; renewal cannot cancel committed teardown", vm);
	assert_string_equal(standin_error_text(&r), text);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, "{\"argv\":[\"true\"]}", "/machines/%s/exec", vm), 409);
	snprintf(text, sizeof text, "%s is not running (state=releasing)", vm);
	assert_string_equal(standin_error_text(&r), text);
	standin_reply_free(&r);
	/* The reaper retries the teardown. */
	assert_int_equal(standin_post(&proc, "/gc", NULL, &r), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&proc, path, &r), 404);
	standin_reply_free(&r);
	free(vm);
}

static void test_ssh_endpoint_option(void **state)
{
	(void)state;
	standin_proc p = {0};
	const char *args[] = {"--ssh-endpoint", "127.0.0.1:2222:tester:/keys/id_ed25519:/keys/known_hosts",
	                      NULL};
	assert_true(standin_start(&p, args));
	standin_reply r;
	char *vm = standin_acquire(
	    &p, "{\"purpose\":\"relay-ssh-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	assert_non_null(vm);
	json_object *ssh = jsonx_get_obj(r.json, "ssh");
	assert_non_null(ssh);
	assert_string_equal(jsonx_get_str(ssh, "host"), "127.0.0.1");
	int64_t port = 0;
	assert_true(jsonx_get_int(ssh, "port", &port));
	assert_int_equal(port, 2222);
	assert_string_equal(jsonx_get_str(ssh, "user"), "tester");
	assert_string_equal(jsonx_get_str(ssh, "identity_file"), "/keys/id_ed25519");
	assert_string_equal(jsonx_get_str(ssh, "known_hosts_file"), "/keys/known_hosts");
	standin_reply_free(&r);
	free(vm);
	standin_cleanup(&p);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_field_refusals, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_credential_packs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_record_shape, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_macos_limit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_heartbeat, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_releasing_lease_refuses_renewal, setup, teardown),
	    cmocka_unit_test(test_ssh_endpoint_option),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return failed;
}
