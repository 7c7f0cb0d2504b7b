/*
 * The machine-service plugin through the real loader against the real
 * stand-in: the identity check, acquire (request body, refusals, capacity,
 * the boot-refusal rule, indeterminate outcomes reconciled by purpose),
 * heartbeat, inspect, release and the destruction checks, images, catalog,
 * the old /vms routes, and the options.
 */
#include "machine_service_fixture.h"

#include <pthread.h>
#include <sys/socket.h>

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

static void start_default(void)
{
	ms_require_builds();
	ms_start_standin(&fx, NULL);
	ms_load(&fx, "{\"destructionCheck\":\"service\"}");
}

/* ---- identity ---------------------------------------------------------------------- */

static void test_health_accepts_machine_service(void **state)
{
	(void)state;
	start_default();
	char *health = NULL;
	relay_error err;
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, &health, &err), RELAY_OK);
	json_object *h = ms_parse(health);
	assert_string_equal(jsonx_get_str(h, "service"), "machine-service");
	json_object_put(h);
	free(health);
	/* No fingerprint header without a selected environment. */
	json_object *reqs = ms_requests(&fx, "GET", "/health");
	assert_true(json_object_array_length(reqs) >= 1);
	json_object *headers = jsonx_get_obj(json_object_array_get_idx(reqs, 0), "headers");
	assert_false(jsonx_has(headers, "x-vm-environment-fingerprint"));
	json_object_put(reqs);
}

static void test_health_refuses_vm_service(void **state)
{
	(void)state;
	ms_require_builds();
	const char *args[] = {"--service-name", "vm-service", NULL};
	ms_start_standin(&fx, args);
	ms_load(&fx, NULL);
	relay_error err;
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, NULL, &err),
	                 RELAY_E_UNAVAILABLE);
	char expected[512];
	snprintf(expected, sizeof expected,
	         "The service at %s answers \"vm-service\", not machine-service. This relay needs "
	         "machine-service; "
	         "release every lease, then upgrade the service.",
	         fx.standin.url);
	assert_string_equal(err.message, expected);
	/* A lease operation refuses before sending anything. */
	char *lease = NULL;
	assert_int_equal(
	    fx.plugin->machine.renew(fx.plugin->state,
	                             "{\"vm\":\"pilot-x-1\",\"purpose\":\"relay-x-1\",\"lease_id\":null}",
	                             900000, NULL, 0, &lease, &err),
	    RELAY_E_UNAVAILABLE);
	assert_int_equal(ms_count_requests(&fx, "POST", "/machines/pilot-x-1/heartbeat"), 0);
}

static void test_health_with_service_name_option(void **state)
{
	(void)state;
	ms_require_builds();
	const char *args[] = {"--service-name", "machine-service-standin", NULL};
	ms_start_standin(&fx, args);
	ms_load(&fx, "{\"serviceName\":\"machine-service-standin\"}");
	relay_error err;
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, NULL, &err), RELAY_OK);
}

static void test_health_unreachable(void **state)
{
	(void)state;
	ms_require_builds();
	http_global_init();
	/* A port nothing listens on: bind, note it, close. */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
	socklen_t len = sizeof addr;
	getsockname(fd, (struct sockaddr *)&addr, &len);
	close(fd);
	char url[64];
	snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(addr.sin_port));
	relay_error err;
	assert_int_equal(ms_load_with(&fx, url, NULL, NULL, NULL, &err), RELAY_OK);
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, NULL, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "cannot be reached"));
	assert_non_null(strstr(err.message, url));
	/* Nothing was sent, so an acquisition is a definite failure. */
	char *lease = NULL;
	assert_int_equal(ms_acquire_lease(&fx, "relay-t-0000aaaa", "ubuntu2404", false, &lease, &err),
	                 RELAY_E_UNAVAILABLE);
}

/* A one-shot HTTP server answering every connection with a redirect. */
static int redirect_fd = -1;
static void *redirect_main(void *arg)
{
	(void)arg;
	for (int i = 0; i < 4; i++) {
		int c = accept(redirect_fd, NULL, NULL);
		if (c < 0)
			break;
		char buf[4096];
		ssize_t ignored = read(c, buf, sizeof buf);
		(void)ignored;
		const char *answer = "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/health\r\n"
		                     "Content-Length: 0\r\nConnection: close\r\n\r\n";
		ignored = write(c, answer, strlen(answer));
		close(c);
	}
	return NULL;
}

static void test_redirects_are_refused(void **state)
{
	(void)state;
	ms_require_builds();
	http_global_init();
	redirect_fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(redirect_fd, (struct sockaddr *)&addr, sizeof addr), 0);
	socklen_t len = sizeof addr;
	getsockname(redirect_fd, (struct sockaddr *)&addr, &len);
	listen(redirect_fd, 4);
	pthread_t t;
	pthread_create(&t, NULL, redirect_main, NULL);
	char url[64];
	snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(addr.sin_port));
	relay_error err;
	assert_int_equal(ms_load_with(&fx, url, NULL, NULL, NULL, &err), RELAY_OK);
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, NULL, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "redirect"));
	char *lease = NULL;
	assert_int_equal(ms_acquire_lease(&fx, "relay-t-0000bbbb", "ubuntu2404", false, &lease, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "redirect"));
	shutdown(redirect_fd, SHUT_RDWR);
	close(redirect_fd);
	pthread_join(t, NULL);
}

static void test_bad_origins_refuse_the_plugin(void **state)
{
	(void)state;
	ms_require_builds();
	const char *bad[] = {"http://example.com:6240",       "https://localhost:6240",
	                     "http://user:pw@localhost:6240", "http://localhost:6240/path",
	                     "http://localhost:6240?x=1",     "http://localhost:6240#f",
	                     "http://127.0.0.999:6240",       "http://localhost:99999"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		relay_error err;
		plugin_registry reg = {0};
		fx.registry = reg;
		assert_int_not_equal(ms_load_with(&fx, bad[i], NULL, NULL, NULL, &err), RELAY_OK);
		assert_non_null(strstr(err.message, "not an http origin"));
		loader_shutdown(&fx.registry);
	}
	relay_error err;
	assert_int_equal(ms_load_with(&fx, "http://[::1]:6240/", NULL, NULL, NULL, &err), RELAY_OK);
	char *binding = NULL;
	assert_int_equal(fx.plugin->machine.binding(fx.plugin->state, 0, &binding, &err), RELAY_OK);
	json_object *b = ms_parse(binding);
	assert_string_equal(jsonx_get_str(b, "endpoint"), "http://[::1]:6240");
	assert_string_equal(jsonx_get_str(b, "machine"), "machine-service");
	assert_null(jsonx_get_str(b, "environmentFingerprint"));
	json_object_put(b);
	free(binding);
}

static void test_unknown_options_refuse_the_plugin(void **state)
{
	(void)state;
	ms_require_builds();
	relay_error err;
	assert_int_equal(
	    ms_load_with(&fx, "http://localhost:6240", "{\"routeprefix\":\"/vms\"}", NULL, NULL, &err),
	    RELAY_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "unknown option routeprefix"));
	loader_shutdown(&fx.registry);
	memset(&fx.registry, 0, sizeof fx.registry);
	assert_int_equal(
	    ms_load_with(&fx, "http://localhost:6240", "{\"destructionCheck\":\"magic\"}", NULL, NULL, &err),
	    RELAY_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "destructionCheck"));
}

/* ---- acquire ---------------------------------------------------------------------------- */

static void test_acquire_sends_the_documented_body(void **state)
{
	(void)state;
	start_default();
	char *lease = NULL;
	relay_error err;
	assert_int_equal(ms_acquire_lease(&fx, "relay-demo-3f9a1c2e", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	json_object *doc = ms_parse(lease);
	assert_string_equal(jsonx_get_str(doc, "purpose"), "relay-demo-3f9a1c2e");
	assert_string_equal(jsonx_get_str(doc, "image"), "ubuntu2404");
	assert_string_equal(jsonx_get_str(doc, "state"), "running");
	assert_string_equal(jsonx_get_str(doc, "imageKind"), "linux");
	assert_non_null(jsonx_get_str(doc, "lease_id"));
	assert_int_equal(strlen(jsonx_get_str(doc, "lease_id")), 32);
	const char *vm = jsonx_get_str(doc, "vm");
	assert_non_null(strstr(vm, "relay-demo-3f9a1c2e-"));
	int64_t expires = 0;
	assert_true(jsonx_get_int(doc, "expiresAtMs", &expires) && expires > 0);
	assert_null(jsonx_get_obj(doc, "ssh"));
	assert_null(jsonx_get_obj(doc, "console"));
	assert_string_equal(jsonx_get_str(jsonx_get_obj(doc, "record"), "vm"), vm);

	json_object *reqs = ms_requests(&fx, "POST", "/acquire");
	assert_int_equal(json_object_array_length(reqs), 1);
	json_object *req = json_object_array_get_idx(reqs, 0);
	json_object *headers = jsonx_get_obj(req, "headers");
	assert_non_null(jsonx_get_str(headers, "content-length"));
	json_object *body = ms_parse(jsonx_get_str(req, "body"));
	assert_string_equal(jsonx_get_str(body, "purpose"), "relay-demo-3f9a1c2e");
	assert_string_equal(jsonx_get_str(body, "image"), "ubuntu2404");
	assert_string_equal(jsonx_get_str(body, "env"), "none");
	assert_string_equal(jsonx_get_str(body, "network"), "nat");
	double ttl = 0;
	assert_true(jsonx_get_double(body, "ttl_hours", &ttl));
	assert_true(ttl == 0.25);
	bool wait = false;
	assert_true(jsonx_get_bool(body, "wait", &wait) && wait);
	assert_false(jsonx_has(body, "vnc"));
	assert_int_equal(json_object_object_length(body), 6);
	json_object_put(body);
	json_object_put(reqs);
	json_object_put(doc);
	free(lease);
}

static void test_acquire_refusals(void **state)
{
	(void)state;
	start_default();
	char *lease = NULL;
	relay_error err;
	/* An unknown image is image-unavailable with the service's text. */
	assert_int_equal(ms_acquire_lease(&fx, "relay-a-00000001", "nope", false, &lease, &err),
	                 RELAY_E_IMAGE_UNAVAILABLE);
	assert_non_null(strstr(err.message, "unknown image 'nope' (available: "));
	/* internet is refused by this service; never a silent nat. */
	char *spec = ms_spec("relay-a-00000002", "ubuntu2404", "internet", false);
	assert_int_equal(fx.plugin->machine.acquire(fx.plugin->state, spec, NULL, 0, &lease, &err),
	                 RELAY_E_REFUSED);
	assert_string_equal(err.message, "network must be nat or control-only");
	free(spec);
	json_object *reqs = ms_requests(&fx, "POST", "/acquire");
	json_object *body = ms_parse(jsonx_get_str(json_object_array_get_idx(reqs, 1), "body"));
	assert_string_equal(jsonx_get_str(body, "network"), "internet");
	json_object_put(body);
	json_object_put(reqs);
	/* The same purpose twice on one image. */
	assert_int_equal(ms_acquire_lease(&fx, "relay-a-00000003", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	free(lease);
	assert_int_equal(ms_acquire_lease(&fx, "relay-a-00000003", "ubuntu2404", false, &lease, &err),
	                 RELAY_E_REFUSED);
	assert_non_null(strstr(err.message, "purpose 'relay-a-00000003' already leased on image ubuntu2404"));
	/* A credential pack that does not exist. */
	spec = ms_spec("relay-a-00000004", "ubuntu2404", "nat", false);
	char *with_pack = strdup(spec);
	char *pos = strstr(with_pack, "\"env\":\"none\"");
	memcpy(pos, "\"env\":\"zz\"  ", 12);
	assert_int_equal(fx.plugin->machine.acquire(fx.plugin->state, with_pack, NULL, 0, &lease, &err),
	                 RELAY_E_REFUSED);
	assert_non_null(strstr(err.message, "credential pack not found"));
	free(with_pack);
	free(spec);
	/* A spec without a purpose never reaches the service. */
	size_t before = ms_count_requests(&fx, "POST", "/acquire");
	assert_int_equal(
	    fx.plugin->machine.acquire(fx.plugin->state, "{\"image\":\"ubuntu2404\"}", NULL, 0, &lease, &err),
	    RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(ms_count_requests(&fx, "POST", "/acquire"), before);
	/* Unknown flags. */
	assert_int_equal(fx.plugin->machine.acquire(fx.plugin->state, "{}", NULL, 0x40, &lease, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
}

static void test_macos_limit_is_capacity(void **state)
{
	(void)state;
	ms_require_builds();
	const char *args[] = {"--macos-limit", "1", NULL};
	ms_start_standin(&fx, args);
	ms_load(&fx, "{\"destructionCheck\":\"service\"}");
	char *first = NULL, *second = NULL;
	relay_error err;
	assert_int_equal(ms_acquire_lease(&fx, "relay-m-00000001", "macos26", false, &first, &err), RELAY_OK);
	assert_int_equal(ms_acquire_lease(&fx, "relay-m-00000002", "macos26", false, &second, &err),
	                 RELAY_E_CAPACITY);
	assert_non_null(strstr(err.message, "macOS VM limit reached (1 active); release one first"));
	/* The images inventory says the same. */
	char *images = NULL;
	assert_int_equal(fx.plugin->machine.images(fx.plugin->state, NULL, 0, &images, &err), RELAY_OK);
	json_object *inv = ms_parse(images);
	bool acquirable = true;
	jsonx_get_bool(jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(inv, "images"), "macos26"), "concurrency"),
	               "acquirable", &acquirable);
	assert_false(acquirable);
	assert_non_null(jsonx_get_obj(inv, "capacity"));
	json_object_put(inv);
	free(images);
	/* Once the first is released the same purpose is granted. */
	assert_int_equal(fx.plugin->machine.release(fx.plugin->state, first, "released", NULL, 0, &err),
	                 RELAY_OK);
	assert_int_equal(ms_acquire_lease(&fx, "relay-m-00000002", "macos26", false, &second, &err),
	                 RELAY_OK);
	free(first);
	free(second);
}

static void test_boot_refusal_waits_for_acquirable_images(void **state)
{
	(void)state;
	ms_require_builds();
	const char *args[] = {"--macos-limit", "1", NULL};
	ms_start_standin(&fx, args);
	ms_load(&fx, "{\"destructionCheck\":\"service\"}");
	relay_error err;
	char *blocker = NULL, *lease = NULL;
	assert_int_equal(ms_acquire_lease(&fx, "relay-b-00000001", "macos26", false, &blocker, &err),
	                 RELAY_OK);
	ms_fault(
	    &fx,
	    "{\"route\":\"acquire\",\"status\":409,\"times\":1,\"error\":\"pilot-mac-relay-b-00000002-abcdef "
	    "refused to start (boot process exited rc=1 within 10s) \\u2014 for macOS images the host-wide "
	    "2-VM limit may be consumed by another Virtualization.framework user\"}");
	assert_int_equal(ms_acquire_lease(&fx, "relay-b-00000002", "macos26", false, &lease, &err),
	                 RELAY_E_CAPACITY);
	assert_non_null(strstr(err.message, "refused to start (boot process exited"));
	size_t sent = ms_count_requests(&fx, "POST", "/acquire");
	/* While the image is not acquirable no clone is asked for. */
	assert_int_equal(ms_acquire_lease(&fx, "relay-b-00000002", "macos26", false, &lease, &err),
	                 RELAY_E_CAPACITY);
	assert_non_null(strstr(err.message, "waiting until GET /images shows macos26 acquirable"));
	assert_int_equal(ms_count_requests(&fx, "POST", "/acquire"), sent);
	/* Once it is, the request goes out again. */
	assert_int_equal(fx.plugin->machine.release(fx.plugin->state, blocker, "released", NULL, 0, &err),
	                 RELAY_OK);
	assert_int_equal(ms_acquire_lease(&fx, "relay-b-00000002", "macos26", false, &lease, &err), RELAY_OK);
	assert_int_equal(ms_count_requests(&fx, "POST", "/acquire"), sent + 1);
	free(blocker);
	free(lease);
}

static size_t count_found(const char *purpose)
{
	char *found = NULL;
	relay_error err;
	assert_int_equal(fx.plugin->machine.find_by_purpose(fx.plugin->state, purpose, NULL, 0, &found, &err),
	                 RELAY_OK);
	json_object *list = ms_parse(found);
	size_t n = json_object_array_length(list);
	json_object_put(list);
	free(found);
	return n;
}

static void test_500_is_indeterminate_and_reconciled(void **state)
{
	(void)state;
	start_default();
	ms_fault(&fx, "{\"route\":\"acquire\",\"status\":500,\"times\":1,\"error\":\"boom\"}");
	char *lease = NULL;
	relay_error err;
	assert_int_equal(ms_acquire_lease(&fx, "relay-c-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_E_INDETERMINATE);
	assert_non_null(strstr(err.message,
	                       "Acquisition outcome unknown for purpose 'relay-c-00000001'; reconcile GET "
	                       "/machines before retrying"));
	assert_null(lease);
	/* The fault answered before anything was leased: reconciliation finds none. */
	assert_int_equal(count_found("relay-c-00000001"), 0);
	/* A 500 after the lease was made: reconciliation finds exactly it. */
	ms_fault(&fx, "{\"route\":\"acquire\",\"status\":500,\"times\":1,\"phase\":\"after\"}");
	assert_int_equal(ms_acquire_lease(&fx, "relay-c-00000002", "ubuntu2404", false, &lease, &err),
	                 RELAY_E_INDETERMINATE);
	assert_int_equal(count_found("relay-c-00000002"), 1);
}

static void test_dropped_connection_mid_acquire_is_reconciled_by_purpose(void **state)
{
	(void)state;
	start_default();
	ms_fault(&fx, "{\"route\":\"acquire\",\"dropConnection\":true,\"times\":1,\"phase\":\"after\"}");
	char *lease = NULL;
	relay_error err;
	assert_int_equal(ms_acquire_lease(&fx, "relay-d-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_E_INDETERMINATE);
	assert_non_null(strstr(err.message, "Acquisition outcome unknown for purpose 'relay-d-00000001'"));
	/* Exactly one POST /acquire: the plugin never retries blindly. */
	assert_int_equal(ms_count_requests(&fx, "POST", "/acquire"), 1);
	char *found = NULL;
	assert_int_equal(
	    fx.plugin->machine.find_by_purpose(fx.plugin->state, "relay-d-00000001", NULL, 0, &found, &err),
	    RELAY_OK);
	json_object *list = ms_parse(found);
	assert_int_equal(json_object_array_length(list), 1);
	json_object *doc = json_object_array_get_idx(list, 0);
	assert_string_equal(jsonx_get_str(doc, "purpose"), "relay-d-00000001");
	assert_string_equal(jsonx_get_str(doc, "state"), "running");
	assert_non_null(jsonx_get_str(doc, "lease_id"));
	json_object_put(list);
	free(found);
	/* Listing never matches another purpose. */
	assert_int_equal(count_found("relay-d-00000009"), 0);
}

static void test_slow_answers_still_succeed(void **state)
{
	(void)state;
	start_default();
	ms_fault(&fx, "{\"route\":\"health\",\"delayMs\":1500,\"times\":1}");
	ms_fault(&fx, "{\"route\":\"acquire\",\"delayMs\":1500,\"times\":1}");
	char *lease = NULL;
	relay_error err;
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, NULL, &err), RELAY_OK);
	assert_int_equal(ms_acquire_lease(&fx, "relay-s-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	free(lease);
}

static void test_heartbeat_past_its_limit_is_indeterminate(void **state)
{
	(void)state;
	start_default();
	char *lease = NULL, *renewed = NULL;
	relay_error err;
	assert_int_equal(ms_acquire_lease(&fx, "relay-h-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	/* The heartbeat's limit is 10 s; the service answers after 11 s. */
	ms_fault(&fx, "{\"route\":\"heartbeat\",\"delayMs\":11000,\"times\":1}");
	assert_int_equal(fx.plugin->machine.renew(fx.plugin->state, lease, 900000, NULL, 0, &renewed, &err),
	                 RELAY_E_INDETERMINATE);
	assert_null(renewed);
	assert_non_null(strstr(err.message, "got no answer"));
	free(lease);
}

static void test_heartbeat_inspect_release_and_verification(void **state)
{
	(void)state;
	start_default();
	char *lease = NULL, *renewed = NULL, *snapshot = NULL, *check = NULL;
	relay_error err;
	assert_int_equal(ms_acquire_lease(&fx, "relay-r-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	json_object *doc = ms_parse(lease);
	char vm[256];
	snprintf(vm, sizeof vm, "%s", jsonx_get_str(doc, "vm"));
	json_object_put(doc);

	/* Heartbeat: the window in hours, the record back with its expiry. */
	assert_int_equal(fx.plugin->machine.renew(fx.plugin->state, lease, 600000, NULL, 0, &renewed, &err),
	                 RELAY_OK);
	json_object *r = ms_parse(renewed);
	assert_string_equal(jsonx_get_str(r, "vm"), vm);
	assert_true(jsonx_has(jsonx_get_obj(r, "record"), "ttl_hours_remaining"));
	json_object_put(r);
	free(renewed);
	char path[512];
	snprintf(path, sizeof path, "/machines/%s/heartbeat", vm);
	json_object *beats = ms_requests(&fx, "POST", path);
	assert_int_equal(json_object_array_length(beats), 1);
	json_object *body = ms_parse(jsonx_get_str(json_object_array_get_idx(beats, 0), "body"));
	double hours = 0;
	assert_true(jsonx_get_double(body, "ttl_hours", &hours));
	assert_true(hours > 0.1666 && hours < 0.1667);
	json_object_put(body);
	json_object_put(beats);
	/* Below the service's 0.1 h minimum nothing is sent. */
	assert_int_equal(fx.plugin->machine.renew(fx.plugin->state, lease, 300000, NULL, 0, &renewed, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(ms_count_requests(&fx, "POST", path), 1);

	/* Inspect. */
	assert_int_equal(fx.plugin->machine.inspect(fx.plugin->state, lease, NULL, 0, &snapshot, &err),
	                 RELAY_OK);
	json_object *snap = ms_parse(snapshot);
	assert_true(jsonx_has(jsonx_get_obj(snap, "record"), "actually_running"));
	json_object_put(snap);
	free(snapshot);

	/* Destruction cannot be verified while the service still lists it. */
	assert_int_equal(fx.plugin->machine.verify_destroyed(fx.plugin->state, lease, NULL, 0, &check, &err),
	                 RELAY_E_UNVERIFIED);
	assert_non_null(strstr(err.message, "still lists"));
	free(check);
	check = NULL;

	/* A 200 without released: true is not a destruction. */
	ms_fault(&fx, "{\"route\":\"release\",\"status\":200,\"times\":1,\"error\":\"not really\"}");
	assert_int_equal(fx.plugin->machine.release(fx.plugin->state, lease, "released", NULL, 0, &err),
	                 RELAY_E_UNVERIFIED);
	assert_non_null(strstr(err.message, "machine-service did not confirm destruction"));

	/* Release, with the reason sent. */
	assert_int_equal(fx.plugin->machine.release(fx.plugin->state, lease, "finished", NULL, 0, &err),
	                 RELAY_OK);
	snprintf(path, sizeof path, "/machines/%s/release", vm);
	json_object *rel = ms_requests(&fx, "POST", path);
	body = ms_parse(
	    jsonx_get_str(json_object_array_get_idx(rel, json_object_array_length(rel) - 1), "body"));
	assert_string_equal(jsonx_get_str(body, "reason"), "finished");
	json_object_put(body);
	json_object_put(rel);
	assert_int_equal(fx.plugin->machine.verify_destroyed(fx.plugin->state, lease, NULL, 0, &check, &err),
	                 RELAY_OK);
	assert_string_equal(check, "service");
	free(check);
	/* A second release: the service no longer knows it. */
	assert_int_equal(fx.plugin->machine.release(fx.plugin->state, lease, "released", NULL, 0, &err),
	                 RELAY_E_NOT_FOUND);
	assert_int_equal(fx.plugin->machine.inspect(fx.plugin->state, lease, NULL, 0, &snapshot, &err),
	                 RELAY_E_NOT_FOUND);
	/* A 500 on release is indeterminate, never a success. */
	char *other = NULL;
	assert_int_equal(ms_acquire_lease(&fx, "relay-r-00000002", "ubuntu2404", false, &other, &err),
	                 RELAY_OK);
	ms_fault(&fx, "{\"route\":\"release\",\"status\":500,\"times\":1}");
	assert_int_equal(fx.plugin->machine.release(fx.plugin->state, other, "released", NULL, 0, &err),
	                 RELAY_E_INDETERMINATE);
	assert_int_equal(fx.plugin->machine.release(fx.plugin->state, other, "released", NULL, 0, &err),
	                 RELAY_OK);
	free(other);
	free(lease);
}

static void test_tart_destruction_check(void **state)
{
	(void)state;
	ms_require_builds();
	ms_start_standin(&fx, NULL);
	char dir[] = "/tmp/ms-tart-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char tart[600], mode[600];
	snprintf(tart, sizeof tart, "%s/tart", dir);
	snprintf(mode, sizeof mode, "%s/mode", dir);
	char body[2048];
	snprintf(
	    body, sizeof body,
	    "[ \"$1 $2 $3\" = \"list --format json\" ] || exit 9\n"
	    "[ -n \"$TART_HOME\" ] || exit 8\n"
	    "case $(cat %s) in\n"
	    "listed) echo '[{\"Name\":\"pilot-relay-x-1\",\"State\":\"running\"},{\"Name\":\"other\"}]';;\n"
	    "gone) echo '[{\"Name\":\"other\"}]';;\n"
	    "bad) echo '{\"Name\":\"x\"}';;\n"
	    "fail) echo 'tart: store locked' >&2; exit 1;;\n"
	    "esac",
	    mode);
	ms_write_script(tart, body);
	setenv("TART", tart, 1);
	setenv("TART_HOME", dir, 1);
	ms_load(&fx, NULL); /* no destructionCheck: tart is the default when a Tart binary is found */
	unsetenv("TART");
	const char *lease = "{\"vm\":\"pilot-relay-x-1\",\"purpose\":\"relay-x-1\",\"lease_id\":null}";
	struct {
		const char *mode;
		relay_status want;
		const char *text;
	} cases[] = {
	    {"listed", RELAY_E_UNVERIFIED,
	     "machine-service relinquished pilot-relay-x-1, but Tart still lists it. Destruction is "
	     "unverified; "
	     "ownership retained."},
	    {"gone", RELAY_OK, NULL},
	    {"bad", RELAY_E_UNVERIFIED, "did not print a JSON array"},
	    {"fail", RELAY_E_UNVERIFIED, "Cannot verify VM destruction"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		FILE *fp = fopen(mode, "w");
		fprintf(fp, "%s\n", cases[i].mode);
		fclose(fp);
		char *check = NULL;
		relay_error err;
		memset(&err, 0, sizeof err);
		assert_int_equal(
		    fx.plugin->machine.verify_destroyed(fx.plugin->state, lease, NULL, 0, &check, &err),
		    cases[i].want);
		assert_string_equal(check, "tart");
		if (cases[i].text)
			assert_non_null(strstr(err.message, cases[i].text));
		free(check);
	}
	/* The binding names the Tart store. */
	char *binding = NULL;
	relay_error err;
	assert_int_equal(fx.plugin->machine.binding(fx.plugin->state, 0, &binding, &err), RELAY_OK);
	json_object *b = ms_parse(binding);
	assert_string_equal(jsonx_get_str(b, "store"), dir);
	json_object_put(b);
	free(binding);
	unsetenv("TART_HOME");
	fs_remove_tree(dir, &err);
}

/* ---- images, catalog, routes ------------------------------------------------------------------ */

static void test_images_and_catalog(void **state)
{
	(void)state;
	start_default();
	char *images = NULL, *catalog = NULL;
	relay_error err;
	assert_int_equal(fx.plugin->machine.images(fx.plugin->state, NULL, 0, &images, &err), RELAY_OK);
	json_object *inv = ms_parse(images);
	bool base = false;
	assert_true(jsonx_get_bool(jsonx_get_obj(jsonx_get_obj(inv, "images"), "ubuntu2404"),
	                           "base_available", &base) &&
	            base);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(jsonx_get_obj(inv, "images"), "macos26"), "kind"),
	                    "macos");
	json_object_put(inv);
	free(images);
	assert_int_equal(fx.plugin->machine.catalog(fx.plugin->state, NULL, 0, &catalog, &err), RELAY_OK);
	json_object *cat = ms_parse(catalog);
	int64_t version = 0;
	assert_true(jsonx_get_int(cat, "schemaVersion", &version) && version == 1);
	assert_int_equal(json_object_array_length(jsonx_get_array(cat, "images")), 2);
	json_object_put(cat);
	free(catalog);
	catalog = NULL;
	/* 503 and 409 both mean the catalog is unavailable. */
	ms_fault(
	    &fx,
	    "{\"route\":\"applications\",\"status\":503,\"times\":1,\"error\":\"catalog unavailable: x\"}");
	assert_int_equal(fx.plugin->machine.catalog(fx.plugin->state, NULL, 0, &catalog, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "catalog unavailable"));
	ms_fault(
	    &fx,
	    "{\"route\":\"applications\",\"status\":409,\"times\":1,\"error\":\"application associations "
	    "unavailable; daemon restart required\"}");
	assert_int_equal(fx.plugin->machine.catalog(fx.plugin->state, NULL, 0, &catalog, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "application associations unavailable"));
}

static void test_old_vms_routes(void **state)
{
	(void)state;
	ms_require_builds();
	const char *args[] = {"--routes", "vms", "--list-key", "vms", NULL};
	ms_start_standin(&fx, args);
	ms_load(&fx, "{\"routePrefix\":\"/vms\",\"listKey\":\"vms\",\"destructionCheck\":\"service\"}");
	char *lease = NULL, *snapshot = NULL, *check = NULL;
	relay_error err;
	assert_int_equal(ms_acquire_lease(&fx, "relay-v-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	assert_int_equal(count_found("relay-v-00000001"), 1);
	assert_int_equal(fx.plugin->machine.inspect(fx.plugin->state, lease, NULL, 0, &snapshot, &err),
	                 RELAY_OK);
	free(snapshot);
	assert_int_equal(fx.plugin->machine.release(fx.plugin->state, lease, "released", NULL, 0, &err),
	                 RELAY_OK);
	assert_int_equal(fx.plugin->machine.verify_destroyed(fx.plugin->state, lease, NULL, 0, &check, &err),
	                 RELAY_OK);
	free(check);
	assert_true(ms_count_requests(&fx, "GET", "/vms") >= 1);
	assert_int_equal(ms_count_requests(&fx, "GET", "/machines"), 0);
	free(lease);
}

/* §5: a record with an SSH endpoint becomes the lease document's "ssh". */
static void test_ssh_endpoint_is_mapped(void **state)
{
	(void)state;
	ms_require_builds();
	const char *args[] = {"--ssh-endpoint", "127.0.0.1:2222:admin:/keys/identity:/keys/known_hosts",
	                      NULL};
	ms_start_standin(&fx, args);
	ms_load(&fx, "{\"destructionCheck\":\"service\"}");
	char *lease = NULL;
	relay_error err;
	assert_int_equal(ms_acquire_lease(&fx, "relay-k-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	json_object *doc = ms_parse(lease);
	json_object *ssh = jsonx_get_obj(doc, "ssh");
	assert_non_null(ssh);
	assert_string_equal(jsonx_get_str(ssh, "host"), "127.0.0.1");
	int64_t port = 0;
	assert_true(jsonx_get_int(ssh, "port", &port) && port == 2222);
	assert_string_equal(jsonx_get_str(ssh, "user"), "admin");
	assert_string_equal(jsonx_get_str(ssh, "identityFile"), "/keys/identity");
	assert_string_equal(jsonx_get_str(ssh, "knownHostsFile"), "/keys/known_hosts");
	json_object_put(doc);
	free(lease);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_health_accepts_machine_service, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_health_refuses_vm_service, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_health_with_service_name_option, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_health_unreachable, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_redirects_are_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_origins_refuse_the_plugin, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unknown_options_refuse_the_plugin, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_acquire_sends_the_documented_body, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_acquire_refusals, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_macos_limit_is_capacity, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_boot_refusal_waits_for_acquirable_images, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_500_is_indeterminate_and_reconciled, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dropped_connection_mid_acquire_is_reconciled_by_purpose,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_slow_answers_still_succeed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_heartbeat_past_its_limit_is_indeterminate, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_heartbeat_inspect_release_and_verification, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tart_destruction_check, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_images_and_catalog, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_old_vms_routes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ssh_endpoint_is_mapped, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
