/*
 * test_standin_routes.c — machine-service-standin: startup and ready line,
 * transport rules (raw paths, queries, methods, Content-Length, invalid
 * JSON, content type, pretty JSON), the read-only routes, the profile
 * identity and the fingerprint header rules (machine-service.md §1, §2,
 * §3.1-§3.4, §7, §8, §12).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "standin_client.h"
#include "util/sha256.h"

static void test_ready_line_on_stdout_and_health(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	assert_int_equal(strncmp(p.url, "http://127.0.0.1:", 17), 0);
	standin_reply r;
	assert_int_equal(standin_get(&p, "/health", &r), 200);
	assert_string_equal(r.content_type, "application/json");
	/* Pretty JSON, two-space indentation, final newline. */
	assert_string_equal(r.raw, "{\n  \"ok\": true,\n  \"service\": \"machine-service\"\n}\n");
	standin_reply_free(&r);
	standin_cleanup(&p);
}

static void test_ready_fd_and_service_name(void **state)
{
	(void)state;
	standin_proc p = {0};
	const char *args[] = {"--service-name", "vm-service", NULL};
	assert_true(standin_start_ex(&p, args, 7, NULL));
	standin_reply r;
	assert_int_equal(standin_get(&p, "/health", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "service"), "vm-service");
	assert_false(jsonx_has(r.json, "environment"));
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/acquisition-capabilities", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "service"), "vm-service");
	standin_reply_free(&r);
	standin_cleanup(&p);
}

static void test_unknown_routes_queries_and_methods(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	standin_reply r;
	assert_int_equal(standin_get(&p, "/health?x=1", &r), 404);
	assert_string_equal(standin_error_text(&r), "not found");
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/machines/ghost?x=1", &r), 404);
	assert_string_equal(standin_error_text(&r), "unknown VM");
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/machines/ghost", &r), 404);
	assert_string_equal(standin_error_text(&r), "unknown VM");
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/nothing", &r), 404);
	assert_string_equal(standin_error_text(&r), "not found");
	standin_reply_free(&r);
	assert_int_equal(standin_request(&p, "DELETE", "/health", NULL, NULL, &r), 404);
	assert_string_equal(standin_error_text(&r), "not found");
	standin_reply_free(&r);
	assert_int_equal(standin_request(&p, "PUT", "/acquire", NULL, NULL, &r), 404);
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/health", "{}", &r), 404);
	standin_reply_free(&r);
	/* A POST with a query is not executed. */
	assert_int_equal(standin_post(&p, "/acquire?x=1", "{\"purpose\":\"relay-q-00000000\"}", &r), 404);
	assert_string_equal(standin_error_text(&r), "not found");
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/machines", &r), 200);
	assert_int_equal(json_object_object_length(jsonx_get_obj(r.json, "machines")), 0);
	standin_reply_free(&r);
	/* Per-machine routes: unknown actions 404, unknown VM 409. */
	assert_int_equal(standin_post(&p, "/machines/ghost/frobnicate", "{}", &r), 404);
	assert_string_equal(standin_error_text(&r), "not found");
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/machines/ghost/console/other", "{}", &r), 404);
	assert_string_equal(standin_error_text(&r), "not found");
	standin_reply_free(&r);
	assert_int_equal(standin_post(&p, "/machines/ghost/console", "{}", &r), 409);
	assert_string_equal(standin_error_text(&r), "not found");
	standin_reply_free(&r);
	const char *actions[] = {"heartbeat", "exec", "push", "pull", "release", "console/resolve"};
	for (size_t i = 0; i < 6; i++) {
		assert_int_equal(standin_postf(&p, &r, "{}", "/machines/ghost/%s", actions[i]), 409);
		assert_string_equal(standin_error_text(&r), "unknown VM: ghost");
		standin_reply_free(&r);
	}
	/* The old /vms routes are not served by default. */
	assert_int_equal(standin_get(&p, "/vms", &r), 404);
	standin_reply_free(&r);
	standin_cleanup(&p);
}

static void test_bodies_invalid_json_and_missing_content_length(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	standin_reply r;
	assert_int_equal(standin_post(&p, "/acquire", "{not json", &r), 409);
	assert_int_equal(strncmp(standin_error_text(&r), "invalid JSON body: ", 19), 0);
	standin_reply_free(&r);
	/* Zero-length body means {}: purpose is then missing. */
	assert_int_equal(standin_post(&p, "/acquire", NULL, &r), 409);
	assert_string_equal(standin_error_text(&r), "'purpose' (string) is required");
	standin_reply_free(&r);
	/* No Content-Length at all: the body is not read, {} applies. */
	static const char raw[] = "POST /acquire HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	long status = 0;
	char *answer = standin_raw(&p, raw, sizeof raw - 1, &status);
	assert_non_null(answer);
	assert_int_equal(status, 409);
	assert_non_null(strstr(answer, "Content-Type: application/json\r\n"));
	assert_non_null(strstr(answer, "'purpose' (string) is required"));
	free(answer);
	/* A body with Content-Length is read strictly by it. */
	static const char raw2[] = "POST /gc HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
	answer = standin_raw(&p, raw2, sizeof raw2 - 1, &status);
	assert_int_equal(status, 200);
	assert_non_null(strstr(answer, "\"gc\": \"done\""));
	free(answer);
	standin_cleanup(&p);
}

static void test_index_capabilities_and_acquisition_capabilities(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	standin_reply r;
	assert_int_equal(standin_get(&p, "/", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "service"), "machine-service");
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/capabilities", &r), 200);
	bool available = true;
	assert_true(jsonx_get_bool(jsonx_get_obj(r.json, "control_only"), "available", &available));
	assert_false(available);
	standin_reply_free(&r);

	assert_int_equal(standin_get(&p, "/acquisition-capabilities", &r), 200);
	int64_t version = 0;
	assert_true(jsonx_get_int(r.json, "schemaVersion", &version));
	assert_int_equal(version, 1);
	json_object *vnc = jsonx_get_obj(jsonx_get_obj(r.json, "options"), "vnc");
	bool dflt = true;
	assert_true(jsonx_get_bool(vnc, "default", &dflt));
	assert_false(dflt);
	json_object *linux_b = jsonx_get_obj(jsonx_get_obj(vnc, "backends"), "linux");
	assert_true(jsonx_get_bool(linux_b, "available", &available));
	assert_false(available);
	assert_string_equal(jsonx_get_str(linux_b, "status"), "unavailable");
	assert_string_equal(jsonx_get_str(linux_b, "reason"), "console configuration or viewer missing");
	json_object *imgs = jsonx_get_array(jsonx_get_obj(r.json, "image_configuration"), "images");
	assert_int_equal(json_object_array_length(imgs), 2);
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(imgs, 0), "image"), "macos26");
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(imgs, 0), "os"), "macos");
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(imgs, 1), "image"), "ubuntu2404");
	standin_reply_free(&r);
	standin_cleanup(&p);

	const char *args[] = {"--vnc", "linux", NULL};
	assert_true(standin_start(&p, args));
	assert_int_equal(standin_get(&p, "/acquisition-capabilities", &r), 200);
	json_object *backends =
	    jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(r.json, "options"), "vnc"), "backends");
	assert_true(jsonx_get_bool(jsonx_get_obj(backends, "linux"), "available", &available));
	assert_true(available);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(backends, "linux"), "status"), "configured");
	json_object *reason = NULL;
	assert_true(json_object_object_get_ex(jsonx_get_obj(backends, "linux"), "reason", &reason));
	assert_null(reason);
	assert_true(jsonx_get_bool(jsonx_get_obj(backends, "macos"), "available", &available));
	assert_false(available);
	standin_reply_free(&r);
	standin_cleanup(&p);
}

static void test_images_and_capacity(void **state)
{
	(void)state;
	standin_proc p = {0};
	const char *args[] = {"--macos-limit", "2", NULL};
	assert_true(standin_start(&p, args));
	standin_reply r;
	assert_int_equal(standin_get(&p, "/images", &r), 200);
	json_object *mac = jsonx_get_obj(jsonx_get_obj(r.json, "images"), "macos26");
	json_object *ubu = jsonx_get_obj(jsonx_get_obj(r.json, "images"), "ubuntu2404");
	assert_non_null(mac);
	assert_non_null(ubu);
	assert_string_equal(jsonx_get_str(mac, "clone_prefix"), "pilot-mac-");
	assert_string_equal(jsonx_get_str(ubu, "base_vm"), "pilot-ubuntu-base");
	bool b = false;
	assert_true(jsonx_get_bool(mac, "base_available", &b));
	assert_true(b);
	int64_t v = -1;
	assert_true(jsonx_get_int(jsonx_get_obj(mac, "concurrency"), "limit", &v));
	assert_int_equal(v, 2);
	json_object *limit = (json_object *)1;
	assert_true(json_object_object_get_ex(jsonx_get_obj(ubu, "concurrency"), "limit", &limit));
	assert_null(limit);
	standin_reply_free(&r);

	char *vm = standin_acquire(&p, "{\"purpose\":\"relay-cap-00000001\",\"env\":\"none\"}", &r);
	assert_non_null(vm);
	assert_int_equal(strncmp(vm, "pilot-mac-relay-cap-00000001-", 29), 0);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/images", &r), 200);
	mac = jsonx_get_obj(jsonx_get_obj(r.json, "images"), "macos26");
	assert_true(jsonx_get_int(jsonx_get_obj(mac, "concurrency"), "running", &v));
	assert_int_equal(v, 1);
	assert_true(jsonx_get_bool(jsonx_get_obj(mac, "concurrency"), "acquirable", &b));
	assert_true(b);
	json_object *purposes = jsonx_get_array(mac, "active_purposes");
	assert_int_equal(json_object_array_length(purposes), 1);
	assert_string_equal(json_object_get_string(json_object_array_get_idx(purposes, 0)),
	                    "relay-cap-00000001");
	json_object *cap = jsonx_get_obj(r.json, "capacity");
	assert_true(jsonx_get_int(cap, "macos_running", &v));
	assert_int_equal(v, 1);
	assert_true(jsonx_get_int(cap, "macos_limit", &v));
	assert_int_equal(v, 2);
	assert_true(jsonx_get_int(cap, "host_macos_guests", &v));
	assert_int_equal(v, 1);
	assert_true(jsonx_get_int(cap, "foreign_macos_guests", &v));
	assert_int_equal(v, 0);
	standin_reply_free(&r);

	char *vm2 = standin_acquire(&p, "{\"purpose\":\"relay-cap-00000002\",\"env\":\"none\"}", &r);
	assert_non_null(vm2);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/images", &r), 200);
	mac = jsonx_get_obj(jsonx_get_obj(r.json, "images"), "macos26");
	assert_true(jsonx_get_bool(jsonx_get_obj(mac, "concurrency"), "acquirable", &b));
	assert_false(b);
	standin_reply_free(&r);
	free(vm);
	free(vm2);
	standin_cleanup(&p);
}

static void test_applications_catalog_and_failure(void **state)
{
	(void)state;
	standin_proc p = {0};
	standin_make_root(&p);
	char catalog[PATH_MAX + 32];
	snprintf(catalog, sizeof catalog, "%s/catalog.json", p.root);
	relay_error err;
	char *text = NULL;
	size_t len = 0;
	assert_int_equal(fs_read_file(standin_fixture_path("catalog.json"), 1 << 20, &text, &len, &err),
	                 RELAY_OK);
	assert_int_equal(fs_write_durable(catalog, text, len, 0600, &err), RELAY_OK);
	free(text);
	const char *args[] = {"--catalog", catalog, NULL};
	assert_true(standin_start(&p, args));
	standin_reply r;
	assert_int_equal(standin_get(&p, "/applications", &r), 200);
	int64_t v = 0;
	assert_true(jsonx_get_int(r.json, "schemaVersion", &v));
	assert_int_equal(v, 1);
	json_object *images = jsonx_get_array(r.json, "images");
	assert_int_equal(json_object_array_length(images), 2);
	json_object *ubu = json_object_array_get_idx(images, 0);
	assert_string_equal(jsonx_get_str(ubu, "image"), "ubuntu2404");
	assert_string_equal(jsonx_get_str(ubu, "os"), "linux");
	assert_string_equal(jsonx_get_str(ubu, "architecture"), "arm64");
	bool cua = false, xvfb = false, chromium = false;
	json_object *apps = jsonx_get_array(ubu, "applications");
	for (size_t i = 0; i < json_object_array_length(apps); i++) {
		const char *id = jsonx_get_str(json_object_array_get_idx(apps, i), "id");
		cua |= strcmp(id, "dpkg:cua-driver") == 0;
		xvfb |= strcmp(id, "dpkg:xvfb") == 0;
		chromium |= strcmp(id, "chromium") == 0;
	}
	assert_true(cua && xvfb && chromium);
	json_object *mac = json_object_array_get_idx(images, 1);
	assert_string_equal(jsonx_get_str(mac, "image"), "macos26");
	apps = jsonx_get_array(mac, "applications");
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(apps, 0), "id"),
	                    "bundle:com.apple.Safari");
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(apps, 1), "id"),
	                    "bundle:com.trycua.driver");
	standin_reply_free(&r);

	/* A catalog that cannot be loaded: 503 catalog unavailable. */
	assert_int_equal(fs_write_durable(catalog, "{broken", 7, 0600, &err), RELAY_OK);
	assert_int_equal(standin_get(&p, "/applications", &r), 503);
	assert_int_equal(strncmp(standin_error_text(&r), "catalog unavailable: ", 21), 0);
	standin_reply_free(&r);
	unlink(catalog);
	assert_int_equal(standin_get(&p, "/applications", &r), 503);
	standin_reply_free(&r);
	standin_cleanup(&p);
}

static void test_machines_list_and_snapshot(void **state)
{
	(void)state;
	standin_proc p = {0};
	assert_true(standin_start(&p, NULL));
	standin_reply r;
	char *vm = standin_acquire(&p,
	                           "{\"purpose\":\"relay-list-0000000a\",\"image\":\"ubuntu2404\",\"env\":"
	                           "\"none\",\"ttl_hours\":0.25}",
	                           &r);
	assert_non_null(vm);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/machines", &r), 200);
	json_object *machines = jsonx_get_obj(r.json, "machines");
	json_object *snap = jsonx_get_obj(machines, vm);
	assert_non_null(snap);
	double remaining = 0;
	assert_true(jsonx_get_double(snap, "ttl_hours_remaining", &remaining));
	assert_true(remaining > 0.2 && remaining <= 0.25);
	bool running = false;
	assert_true(jsonx_get_bool(snap, "actually_running", &running));
	assert_true(running);
	assert_false(jsonx_has(snap, "grace_hours_remaining"));
	json_object *limits = jsonx_get_obj(r.json, "limits");
	double grace = 0;
	assert_true(jsonx_get_double(limits, "grace_hours", &grace));
	assert_true(grace == 6.0);
	int64_t port = 0;
	assert_true(jsonx_get_int(r.json, "port", &port));
	char expected_url[64];
	snprintf(expected_url, sizeof expected_url, "http://127.0.0.1:%lld", (long long)port);
	assert_string_equal(expected_url, p.url);
	assert_non_null(jsonx_get_str(r.json, "pilot_repo"));
	standin_reply_free(&r);

	char path[512];
	snprintf(path, sizeof path, "/machines/%s", vm);
	assert_int_equal(standin_get(&p, path, &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "vm"), vm);
	assert_string_equal(jsonx_get_str(r.json, "state"), "running");
	standin_reply_free(&r);
	free(vm);
	standin_cleanup(&p);

	/* The old spelling: /vms routes and a "vms" list key. */
	const char *args[] = {"--routes", "both", "--list-key", "vms", NULL};
	assert_true(standin_start(&p, args));
	vm = standin_acquire(
	    &p, "{\"purpose\":\"relay-list-0000000b\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	assert_non_null(vm);
	standin_reply_free(&r);
	assert_int_equal(standin_get(&p, "/vms", &r), 200);
	assert_non_null(jsonx_get_obj(jsonx_get_obj(r.json, "vms"), vm));
	assert_false(jsonx_has(r.json, "machines"));
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&p, &r, "{}", "/vms/%s/heartbeat", vm), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&p, &r, "{}", "/machines/%s/heartbeat", vm), 200);
	standin_reply_free(&r);
	free(vm);
	standin_cleanup(&p);
}

/* Writes a schema-2 profile under root; returns its path (static). */
static const char *write_profile(const char *root, int version, bool vmctl)
{
	static char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/profile.json", root);
	static char text[65536];
	snprintf(
	    text, sizeof text,
	    "{\"schemaVersion\": %d, \"id\": \"isolated-test\", \"vmServiceUrl\": \"http://127.0.0.1:6249/\","
	    " \"imageRepository\": \"%s/repo\", \"tartHome\": \"%s/env/tart\","
	    " \"serviceStateDir\": \"%s/env/service\", \"imageStateDir\": \"%s/env/images\","
	    " \"relayStateDir\": \"%s/env/relay\", \"%s\": \"%s/bin/machctl\", \"tartPath\": "
	    "\"%s/bin/tart\"}",
	    version, root, root, root, root, root, vmctl ? "vmctlPath" : "machctlPath", root, root);
	relay_error err;
	assert_int_equal(fs_write_durable(path, text, strlen(text), 0600, &err), RELAY_OK);
	return path;
}

static void test_profile_identity_and_fingerprint_rules(void **state)
{
	(void)state;
	standin_proc p = {0};
	standin_make_root(&p);
	const char *profile = write_profile(p.root, 2, false);
	const char *args[] = {"--profile", profile, "--port", "0", NULL};
	assert_true(standin_start(&p, args));

	/* The fingerprint: SHA-256 of the canonical profile, compact, keys sorted. */
	static char canonical[65536];
	snprintf(
	    canonical, sizeof canonical,
	    "{\"id\":\"isolated-test\",\"imageRepository\":\"%s/repo\",\"imageStateDir\":\"%s/env/images\","
	    "\"machctlPath\":\"%s/bin/machctl\",\"relayStateDir\":\"%s/env/relay\",\"schemaVersion\":2,"
	    "\"serviceStateDir\":\"%s/env/service\",\"tartHome\":\"%s/env/tart\",\"tartPath\":\"%s/bin/"
	    "tart\","
	    "\"vmServiceUrl\":\"http://127.0.0.1:6249\"}",
	    p.root, p.root, p.root, p.root, p.root, p.root, p.root);
	char fp[SHA256_HEX_LEN + 1];
	sha256_buffer_hex(canonical, strlen(canonical), fp);

	standin_reply r;
	assert_int_equal(standin_get(&p, "/health", &r), 200);
	json_object *env = jsonx_get_obj(r.json, "environment");
	assert_non_null(env);
	assert_int_equal(json_object_object_length(env), 8);
	assert_string_equal(jsonx_get_str(env, "id"), "isolated-test");
	assert_string_equal(jsonx_get_str(env, "fingerprint"), fp);
	assert_string_equal(jsonx_get_str(env, "vmServiceUrl"), "http://127.0.0.1:6249");
	char expect[PATH_MAX + 32];
	snprintf(expect, sizeof expect, "%s/env/relay", p.root);
	assert_string_equal(jsonx_get_str(env, "relayStateDir"), expect);
	standin_reply_free(&r);

	char good[128], bad[128];
	snprintf(good, sizeof good, "X-VM-Environment-Fingerprint: %s", fp);
	snprintf(bad, sizeof bad, "X-VM-Environment-Fingerprint: %064d", 0);
	const char *good_h[] = {good, NULL};
	const char *bad_h[] = {bad, NULL};
	/* GET with the right header or none: fine; a wrong one: refused. */
	assert_int_equal(standin_request(&p, "GET", "/images", NULL, good_h, &r), 200);
	standin_reply_free(&r);
	assert_int_equal(standin_request(&p, "GET", "/images", NULL, bad_h, &r), 409);
	assert_string_equal(standin_error_text(&r), "environment fingerprint mismatch; refusing request");
	standin_reply_free(&r);
	/* POST without the header: refused. */
	assert_int_equal(standin_post(&p, "/acquire", "{\"purpose\":\"relay-fp-00000001\"}", &r), 409);
	assert_string_equal(standin_error_text(&r), "environment fingerprint mismatch; refusing request");
	standin_reply_free(&r);
	assert_int_equal(
	    standin_request(&p, "POST", "/acquire",
	                    "{\"purpose\":\"relay-fp-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}",
	                    good_h, &r),
	    200);
	assert_string_equal(jsonx_get_str(r.json, "environment_fingerprint"), fp);
	standin_reply_free(&r);
	standin_cleanup(&p);

	/* An unselected service refuses any request that carries the header. */
	assert_true(standin_start(&p, NULL));
	assert_int_equal(standin_request(&p, "GET", "/health", NULL, good_h, &r), 409);
	assert_string_equal(standin_error_text(&r), "environment fingerprint mismatch; refusing request");
	standin_reply_free(&r);
	standin_cleanup(&p);
}

static void test_profile_refusals(void **state)
{
	(void)state;
	standin_proc p = {0};
	standin_make_root(&p);
	char log[PATH_MAX + 32];
	snprintf(log, sizeof log, "%s/stderr.txt", p.root);
	relay_error err;
	char *text = NULL;
	size_t len = 0;

	const char *profile = write_profile(p.root, 1, true);
	const char *args[] = {"--profile", profile, "--port", "0", NULL};
	assert_false(standin_start_ex(&p, args, -1, log));
	assert_int_equal(p.exit_status, 2);
	assert_int_equal(fs_read_file(log, 1 << 20, &text, &len, &err), RELAY_OK);
	assert_non_null(strstr(text, "is schemaVersion 1; machine-service needs schemaVersion 2. Fix: set "
	                             "\"schemaVersion\": 2 and rename \"vmctlPath\" to \"machctlPath\"."));
	free(text);

	profile = write_profile(p.root, 2, true);
	assert_false(standin_start_ex(&p, args, -1, log));
	assert_int_equal(fs_read_file(log, 1 << 20, &text, &len, &err), RELAY_OK);
	assert_non_null(strstr(text,
	                       "has \"vmctlPath\", which machine-service renamed. Fix: rename \"vmctlPath\" "
	                       "to \"machctlPath\" and set \"schemaVersion\": 2."));
	free(text);
	standin_cleanup(&p);
}

static void test_record_of_another_environment_is_refused(void **state)
{
	(void)state;
	standin_proc p = {0};
	standin_make_root(&p);
	const char *profile = write_profile(p.root, 2, false);
	const char *args[] = {"--profile", profile, "--port", "0", NULL};
	assert_true(standin_start(&p, args));
	standin_reply r;
	assert_int_equal(standin_get(&p, "/health", &r), 200);
	char header[128];
	snprintf(header, sizeof header, "X-VM-Environment-Fingerprint: %s",
	         jsonx_get_str(jsonx_get_obj(r.json, "environment"), "fingerprint"));
	standin_reply_free(&r);
	const char *h[] = {header, NULL};
	assert_int_equal(
	    standin_request(&p, "POST", "/acquire",
	                    "{\"purpose\":\"relay-env-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}",
	                    h, &r),
	    200);
	char *vm = strdup(jsonx_get_str(r.json, "vm"));
	standin_reply_free(&r);
	standin_stop(&p);

	/* The same state folder, now serving another environment. */
	char other[PATH_MAX + 32];
	snprintf(other, sizeof other, "%s/other.json", p.root);
	char *text = NULL;
	size_t len = 0;
	relay_error err;
	assert_int_equal(fs_read_file(profile, 1 << 20, &text, &len, &err), RELAY_OK);
	char *id = strstr(text, "isolated-test");
	assert_non_null(id);
	memcpy(id, "isolated-tesu", 13);
	assert_int_equal(fs_write_durable(other, text, len, 0600, &err), RELAY_OK);
	free(text);
	const char *args2[] = {"--profile", other, "--port", "0", NULL};
	assert_true(standin_start(&p, args2));
	assert_int_equal(standin_get(&p, "/health", &r), 200);
	snprintf(header, sizeof header, "X-VM-Environment-Fingerprint: %s",
	         jsonx_get_str(jsonx_get_obj(r.json, "environment"), "fingerprint"));
	standin_reply_free(&r);
	char path[512];
	snprintf(path, sizeof path, "/machines/%s/heartbeat", vm);
	assert_int_equal(standin_request(&p, "POST", path, "{}", h, &r), 409);
	assert_string_equal(standin_error_text(&r),
	                    "lease environment fingerprint mismatch; refusing operation");
	standin_reply_free(&r);
	snprintf(path, sizeof path, "/machines/%s/exec", vm);
	assert_int_equal(standin_request(&p, "POST", path, "{\"argv\":[\"true\"]}", h, &r), 409);
	assert_string_equal(standin_error_text(&r),
	                    "lease environment fingerprint mismatch; refusing operation");
	standin_reply_free(&r);
	free(vm);
	standin_cleanup(&p);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ready_line_on_stdout_and_health),
	    cmocka_unit_test(test_ready_fd_and_service_name),
	    cmocka_unit_test(test_unknown_routes_queries_and_methods),
	    cmocka_unit_test(test_bodies_invalid_json_and_missing_content_length),
	    cmocka_unit_test(test_index_capabilities_and_acquisition_capabilities),
	    cmocka_unit_test(test_images_and_capacity),
	    cmocka_unit_test(test_applications_catalog_and_failure),
	    cmocka_unit_test(test_machines_list_and_snapshot),
	    cmocka_unit_test(test_profile_identity_and_fingerprint_rules),
	    cmocka_unit_test(test_profile_refusals),
	    cmocka_unit_test(test_record_of_another_environment_is_refused),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return failed;
}
