/*
 * The selected environment profile (profile/environment.c, spec/machine-service.md
 * §7) and the machine-service plugin under it, against a stand-in started
 * with the same profile: version-1 and vmctlPath refusals with the fix,
 * every validation rule, canonical values, the fingerprint the service
 * computes independently, the identity check, the fingerprint header (and
 * its configurable name), the exported bundle, and a lease bound to another
 * environment.
 */
#include "machine_service_fixture.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include "profile/environment.h"
#include "util/sha256.h"

static ms_fixture fx;
static char root[200];
static char saved_home[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof fx);
	snprintf(root, sizeof root, "/tmp/ms-env-XXXXXX");
	if (mkdtemp(root) == NULL)
		return -1;
	/* The default roots (~/.tart, ~/.local/state/...) are under a HOME of
	 * the test's own. */
	const char *home = getenv("HOME");
	snprintf(saved_home, sizeof saved_home, "%s", home ? home : "");
	char h[PATH_MAX + 8];
	snprintf(h, sizeof h, "%s/home", root);
	mkdir(h, 0700);
	setenv("HOME", h, 1);
	unsetenv("XDG_STATE_HOME");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ms_teardown(&fx);
	relay_error err;
	fs_remove_tree(root, &err);
	if (saved_home[0])
		setenv("HOME", saved_home, 1);
	return 0;
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
	socklen_t len = sizeof addr;
	getsockname(fd, (struct sockaddr *)&addr, &len);
	close(fd);
	return ntohs(addr.sin_port);
}

/* Lays out a valid environment under root/<name>/ and returns the path of
 * its profile; `extra` (may be NULL) is spliced in before the closing brace
 * and `override` replaces the whole text when given. */
static char *make_profile(const char *name, int port, const char *extra)
{
	char base[512], path[PATH_MAX + 64];
	snprintf(base, sizeof base, "%s/%s", root, name);
	mkdir(base, 0700);
	snprintf(path, sizeof path, "%s/repo", base);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/repo/images", base);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/bin", base);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/bin/tart", base);
	ms_write_script(path, "echo '[]'");
	snprintf(path, sizeof path, "%s/bin/machctl", base);
	ms_write_script(path, "exit 0");
	strbuf text = STRBUF_INIT;
	strbuf_printf(
	    &text,
	    "{\"schemaVersion\": 2, \"id\": \"%s\", \"vmServiceUrl\": \"http://127.0.0.1:%d/\",\n"
	    " \"imageRepository\": \"%s/repo\", \"tartHome\": \"%s/env/tart/\", \"serviceStateDir\": "
	    "\"%s/env/service\",\n"
	    " \"imageStateDir\": \"%s/env/images\", \"relayStateDir\": \"%s/env/relay\",\n"
	    " \"machctlPath\": \"%s/bin/machctl\", \"tartPath\": \"%s/bin/tart\"%s%s}\n",
	    name, port, base, base, base, base, base, base, base, extra ? ", " : "", extra ? extra : "");
	snprintf(path, sizeof path, "%s/profile.json", base);
	FILE *fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(strbuf_str(&text), fp);
	fclose(fp);
	strbuf_free(&text);
	return strdup(path);
}

static char *write_text(const char *name, const char *text)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s", root, name);
	FILE *fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
	return strdup(path);
}

static relay_status load(const char *path, relay_environment **env, relay_error *err)
{
	memset(err, 0, sizeof *err);
	*env = NULL;
	return environment_load(path, env, err);
}

static void edit(const char *name, const char *from, const char *to);

/* ---- loading -------------------------------------------------------------------------- */

static void test_version_1_and_vmctl_path_are_refused_with_the_fix(void **state)
{
	(void)state;
	relay_environment *env;
	relay_error err;
	char *v1 =
	    write_text("v1.json", "{\"schemaVersion\": 1, \"id\": \"x\", \"vmctlPath\": \"/bin/true\"}");
	char real[PATH_MAX];
	assert_non_null(realpath(v1, real));
	assert_int_equal(load(v1, &env, &err), RELAY_E_INVALID_ARGUMENT);
	char expected[PATH_MAX + 256];
	snprintf(expected, sizeof expected,
	         "Environment profile %s is schemaVersion 1; machine-service needs schemaVersion 2. Fix: set "
	         "\"schemaVersion\": 2 and rename \"vmctlPath\" to \"machctlPath\".",
	         real);
	assert_string_equal(err.message, expected);
	char *vmctl =
	    write_text("vmctl.json", "{\"schemaVersion\": 2, \"vmctlPath\": \"/bin/true\", \"bogus\": 1}");
	assert_non_null(realpath(vmctl, real));
	assert_int_equal(load(vmctl, &env, &err), RELAY_E_INVALID_ARGUMENT);
	snprintf(expected, sizeof expected,
	         "Environment profile %s has \"vmctlPath\", which machine-service renamed. Fix: rename "
	         "\"vmctlPath\" to "
	         "\"machctlPath\" and set \"schemaVersion\": 2.",
	         real);
	assert_string_equal(err.message, expected);
	free(v1);
	free(vmctl);
	assert_int_equal(load("  ", &env, &err), RELAY_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "must not be blank"));
	assert_int_not_equal(load("/nonexistent/profile.json", &env, &err), RELAY_OK);
}

static void test_a_valid_profile_is_canonical(void **state)
{
	(void)state;
	/* A symbolic link among the ancestors of a folder that does not exist. */
	char *path = make_profile("good", 6249, NULL);
	relay_environment *env;
	relay_error err;
	assert_int_equal(load(path, &env, &err), RELAY_OK);
	char base[PATH_MAX];
	snprintf(base, sizeof base, "%s/good", root);
	char real_base[PATH_MAX];
	assert_non_null(realpath(base, real_base));
	assert_string_equal(environment_id(env), "good");
	assert_string_equal(environment_service_url(env), "http://127.0.0.1:6249");
	char want[PATH_MAX + 32];
	snprintf(want, sizeof want, "%s/env/tart", real_base); /* trailing slash dropped */
	assert_string_equal(environment_value(env, "tartHome"), want);
	/* The fingerprint: SHA-256 of the compact, key-sorted canonical profile. */
	strbuf sb = STRBUF_INIT;
	strbuf_printf(
	    &sb,
	    "{\"id\":\"good\",\"imageRepository\":\"%s/repo\",\"imageStateDir\":\"%s/env/images\","
	    "\"machctlPath\":\"%s/bin/machctl\",\"relayStateDir\":\"%s/env/relay\",\"schemaVersion\":2,"
	    "\"serviceStateDir\":\"%s/env/service\",\"tartHome\":\"%s/env/tart\",\"tartPath\":\"%s/bin/"
	    "tart\","
	    "\"vmServiceUrl\":\"http://127.0.0.1:6249\"}",
	    real_base, real_base, real_base, real_base, real_base, real_base, real_base);
	char hex[65];
	sha256_buffer_hex(strbuf_str(&sb), sb.len, hex);
	strbuf_free(&sb);
	assert_string_equal(environment_fingerprint(env), hex);
	/* The identity and the exported bundle. */
	json_object *id = environment_identity(env);
	assert_int_equal(json_object_object_length(id), 8);
	assert_string_equal(jsonx_get_str(id, "fingerprint"), hex);
	json_object_put(id);
	json_object *bundle = environment_bundle(env);
	assert_string_equal(jsonx_get_str(bundle, "VM_ENVIRONMENT_FINGERPRINT"), hex);
	assert_string_equal(jsonx_get_str(bundle, "VM_RELAY_URL"), "http://127.0.0.1:6249");
	assert_string_equal(jsonx_get_str(bundle, "MACHINE_SERVICE_HOST"), "127.0.0.1");
	assert_string_equal(jsonx_get_str(bundle, "MACHINE_SERVICE_PORT"), "6249");
	snprintf(want, sizeof want, "%s/bin/machctl", real_base);
	assert_string_equal(jsonx_get_str(bundle, "MACHCTL"), want);
	snprintf(want, sizeof want, "%s/env/relay", real_base);
	assert_string_equal(jsonx_get_str(bundle, "VM_RELAY_STATE_DIR"), want);
	assert_int_equal(json_object_object_length(bundle), 12);
	json_object_put(bundle);
	environment_free(env);
	free(path);

	/* relayPlugins is accepted and left out of the fingerprint. */
	path = make_profile("good", 6249,
	                    "\"relayPlugins\": {\"machine\": \"machine-service\", \"console\": "
	                    "\"/opt/x/console-vnc.so\"}");
	assert_int_equal(load(path, &env, &err), RELAY_OK);
	assert_string_equal(environment_fingerprint(env), hex);
	assert_string_equal(environment_plugin_for(env, "console"), "/opt/x/console-vnc.so");
	assert_null(environment_plugin_for(env, "capture"));
	environment_free(env);
	free(path);

	/* [::1] loses its brackets in the bundle. */
	free(make_profile("v6", 6249, NULL));
	edit("v6", "http://127.0.0.1:6249/", "http://[::1]:6249");
	char v6[PATH_MAX + 64];
	snprintf(v6, sizeof v6, "%s/v6/profile.json", root);
	assert_int_equal(load(v6, &env, &err), RELAY_OK);
	assert_string_equal(environment_service_url(env), "http://[::1]:6249");
	bundle = environment_bundle(env);
	assert_string_equal(jsonx_get_str(bundle, "MACHINE_SERVICE_HOST"), "::1");
	json_object_put(bundle);
	environment_free(env);
}

static void expect_refusal(const char *name, int port, const char *extra, const char *fragment)
{
	char *path = make_profile(name, port, extra);
	relay_environment *env;
	relay_error err;
	relay_status st = load(path, &env, &err);
	if (st == RELAY_OK || strstr(err.message, fragment) == NULL) {
		fprintf(stderr, "profile %s: expected a refusal with \"%s\", got %s: %s\n", name, fragment,
		        relay_status_str(st), err.message);
		fail();
	}
	environment_free(env);
	free(path);
}

static void edit(const char *name, const char *from, const char *to)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s/profile.json", root, name);
	char *data = NULL;
	size_t len = 0;
	relay_error err;
	assert_int_equal(fs_read_file(path, 1 << 20, &data, &len, &err), RELAY_OK);
	char *at = strstr(data, from);
	assert_non_null(at);
	strbuf sb = STRBUF_INIT;
	strbuf_append(&sb, data, (size_t)(at - data));
	strbuf_puts(&sb, to);
	strbuf_puts(&sb, at + strlen(from));
	FILE *fp = fopen(path, "w");
	fputs(strbuf_str(&sb), fp);
	fclose(fp);
	strbuf_free(&sb);
	free(data);
}

static void expect_edited_refusal(const char *name, const char *from, const char *to, const char *fragment)
{
	free(make_profile(name, 6249, NULL));
	edit(name, from, to);
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s/profile.json", root, name);
	relay_environment *env;
	relay_error err;
	relay_status st = load(path, &env, &err);
	if (st == RELAY_OK || strstr(err.message, fragment) == NULL) {
		fprintf(stderr, "profile %s (%s -> %s): expected \"%s\", got %s: %s\n", name, from, to,
		        fragment, relay_status_str(st), err.message);
		fail();
	}
	environment_free(env);
}

static void test_every_rule_is_enforced(void **state)
{
	(void)state;
	expect_refusal("dup", 6249, "\"id\": \"dup\"", "exactly the supported schema fields");
	expect_refusal("unknown", 6249, "\"extra\": true", "exactly the supported schema fields");
	expect_refusal("badplugins", 6249, "\"relayPlugins\": {\"printer\": \"x\"}", "relayPlugins");
	expect_edited_refusal("missing", ", \"tartPath\"", ", \"tartPathX\"",
	                      "exactly the supported schema fields");
	expect_edited_refusal("ver3", "\"schemaVersion\": 2", "\"schemaVersion\": 3",
	                      "\"schemaVersion\" must be the integer 2");
	expect_edited_refusal("id", "\"id\": \"id\"", "\"id\": \"Not_Valid\"", "\"id\" must match");
	expect_edited_refusal("noport", "127.0.0.1:6249/", "127.0.0.1", "\"vmServiceUrl\"");
	expect_edited_refusal("badhost", "127.0.0.1", "10.0.0.1", "\"vmServiceUrl\"");
	expect_edited_refusal("octet", "127.0.0.1", "127.0.0.256", "\"vmServiceUrl\"");
	expect_edited_refusal("https", "http://", "https://", "\"vmServiceUrl\"");
	expect_edited_refusal("path", "6249/", "6249/x", "\"vmServiceUrl\"");
	expect_edited_refusal("relative", "\"imageStateDir\": \"", "\"imageStateDir\": \"rel", "absolute");
	expect_edited_refusal("overlap", "/env/images", "/env/service/images", "disjoint");
	expect_edited_refusal("inrepo", "/env/relay", "/repo/relay", "overlaps imageRepository");
	expect_edited_refusal("norepo", "/repo\"", "/nowhere\"", "must exist and contain images/");
	expect_edited_refusal("noexec", "/bin/machctl", "/bin/nothing", "executable regular file");
	/* A default root: $HOME/.local/state/mcp-relay. */
	char home_state[PATH_MAX + 64];
	snprintf(home_state, sizeof home_state, "%s/.local/state/mcp-relay\"", getenv("HOME"));
	char from_relay[64] = "/env/relay\"";
	free(make_profile("defaults", 6249, NULL));
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/defaults/profile.json", root);
	char *data = NULL;
	size_t len = 0;
	relay_error err;
	assert_int_equal(fs_read_file(path, 1 << 20, &data, &len, &err), RELAY_OK);
	char *at = strstr(data, "\"relayStateDir\": \"");
	char *end = strstr(at + 18, from_relay);
	strbuf sb = STRBUF_INIT;
	strbuf_append(&sb, data, (size_t)(at - data) + 18);
	strbuf_puts(&sb, home_state);
	strbuf_puts(&sb, end + strlen(from_relay));
	FILE *fp = fopen(path, "w");
	fputs(strbuf_str(&sb), fp);
	fclose(fp);
	strbuf_free(&sb);
	free(data);
	relay_environment *env;
	assert_int_equal(load(path, &env, &err), RELAY_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "overlaps the default root"));
	/* A dangling symbolic link among the ancestors. */
	free(make_profile("dangling", 6249, NULL));
	char link_path[PATH_MAX + 64];
	snprintf(link_path, sizeof link_path, "%s/dangling/env", root);
	mkdir(link_path, 0700);
	snprintf(link_path, sizeof link_path, "%s/dangling/env/service", root);
	assert_int_equal(symlink("/nonexistent/target", link_path), 0);
	snprintf(path, sizeof path, "%s/dangling/profile.json", root);
	assert_int_equal(load(path, &env, &err), RELAY_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "dangling symbolic link"));
	/* Not UTF-8, not an object, too large. */
	char *bad = write_text("latin1.json", "{\"id\": \"\xe9\"}");
	assert_int_equal(load(bad, &env, &err), RELAY_E_INVALID_ARGUMENT);
	free(bad);
	bad = write_text("array.json", "[1, 2]");
	assert_int_equal(load(bad, &env, &err), RELAY_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "one JSON object"));
	free(bad);
	char *big = malloc(70000);
	memset(big, ' ', 69998);
	big[0] = '{';
	big[69998] = '}';
	big[69999] = '\0';
	bad = write_text("big.json", big);
	free(big);
	assert_int_equal(load(bad, &env, &err), RELAY_E_INVALID_ARGUMENT);
	free(bad);
}

static void test_duplicate_keys_are_found_after_unescaping(void **state)
{
	(void)state;
	assert_true(environment_json_has_duplicate_keys("{\"a\":1,\"a\":2}", 13));
	const char *escaped = "{\"id\":1,\"\\u0069d\":2}";
	assert_true(environment_json_has_duplicate_keys(escaped, strlen(escaped)));
	const char *nested = "{\"p\":{\"x\":1,\"x\":2}}";
	assert_true(environment_json_has_duplicate_keys(nested, strlen(nested)));
	const char *fine = "{\"a\":{\"a\":1},\"b\":[{\"a\":1},{\"a\":2}],\"c\":\"{\\\"a\\\"\"}";
	assert_false(environment_json_has_duplicate_keys(fine, strlen(fine)));
}

/* ---- the plugin under a selected environment ------------------------------------------------------- */

static char *identity_text(const char *profile_path)
{
	relay_environment *env;
	relay_error err;
	assert_int_equal(load(profile_path, &env, &err), RELAY_OK);
	json_object *id = environment_identity(env);
	char *text = jsonx_to_string(id, 0);
	json_object_put(id);
	environment_free(env);
	return text;
}

static char *bundle_text(const char *profile_path)
{
	relay_environment *env;
	relay_error err;
	assert_int_equal(load(profile_path, &env, &err), RELAY_OK);
	json_object *b = environment_bundle(env);
	char *text = jsonx_to_string(b, 0);
	json_object_put(b);
	environment_free(env);
	return text;
}

static void start_selected(const char *profile, const char *const *more)
{
	const char *args[16] = {"--profile", profile};
	size_t n = 2;
	for (size_t i = 0; more && more[i] && n < 15; i++)
		args[n++] = more[i];
	args[n] = NULL;
	ms_start_standin(&fx, args);
}

static void test_selected_environment_matches_the_service(void **state)
{
	(void)state;
	ms_require_builds();
	int port = free_port();
	char *profile = make_profile("sel", port, NULL);
	start_selected(profile, NULL);
	char *identity = identity_text(profile);
	char *bundle = bundle_text(profile);
	relay_error err;
	assert_int_equal(
	    ms_load_with(&fx, fx.standin.url, "{\"destructionCheck\":\"service\"}", identity, bundle, &err),
	    RELAY_OK);
	char *health = NULL;
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, &health, &err), RELAY_OK);
	free(health);
	json_object *id = ms_parse(identity);
	const char *fp = jsonx_get_str(id, "fingerprint");
	/* Every request carries the header; records carry the fingerprint. */
	char *lease = NULL;
	assert_int_equal(ms_acquire_lease(&fx, "relay-e-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	json_object *doc = ms_parse(lease);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(doc, "record"), "environment_fingerprint"), fp);
	json_object *reqs = ms_requests(&fx, NULL, NULL);
	assert_true(json_object_array_length(reqs) >= 2);
	for (size_t i = 0; i < json_object_array_length(reqs); i++) {
		json_object *headers = jsonx_get_obj(json_object_array_get_idx(reqs, i), "headers");
		assert_string_equal(jsonx_get_str(headers, "x-vm-environment-fingerprint"), fp);
	}
	json_object_put(reqs);
	/* The binding names the environment and its Tart store. */
	char *binding = NULL;
	assert_int_equal(fx.plugin->machine.binding(fx.plugin->state, 0, &binding, &err), RELAY_OK);
	json_object *b = ms_parse(binding);
	assert_string_equal(jsonx_get_str(b, "environmentFingerprint"), fp);
	assert_string_equal(jsonx_get_str(b, "store"), jsonx_get_str(id, "tartHome"));
	json_object_put(b);
	free(binding);
	/* The tart check runs the profile's tartPath (which lists nothing). */
	loader_shutdown(&fx.registry);
	memset(&fx.registry, 0, sizeof fx.registry);
	assert_int_equal(ms_load_with(&fx, fx.standin.url, NULL, identity, bundle, &err), RELAY_OK);
	char *check = NULL;
	assert_int_equal(fx.plugin->machine.verify_destroyed(fx.plugin->state, lease, NULL, 0, &check, &err),
	                 RELAY_OK);
	assert_string_equal(check, "tart");
	free(check);
	json_object_put(doc);
	json_object_put(id);
	free(lease);
	free(identity);
	free(bundle);
	free(profile);
}

static void test_another_environment_is_refused(void **state)
{
	(void)state;
	ms_require_builds();
	int port = free_port();
	char *served = make_profile("served", port, NULL);
	char *other = make_profile("other", port, NULL);
	start_selected(served, NULL);
	char *served_id = identity_text(served);
	char *other_id = identity_text(other);
	json_object *sid = ms_parse(served_id);
	relay_error err;
	/* Another selected environment. */
	assert_int_equal(ms_load_with(&fx, fx.standin.url, NULL, other_id, NULL, &err), RELAY_OK);
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, NULL, &err),
	                 RELAY_E_UNAVAILABLE);
	char expected[512];
	snprintf(expected, sizeof expected,
	         "The service at %s serves another environment (served, fingerprint %.8s); select that "
	         "environment or "
	         "point the relay at the right service.",
	         fx.standin.url, jsonx_get_str(sid, "fingerprint"));
	assert_string_equal(err.message, expected);
	char *lease = NULL;
	assert_int_equal(ms_acquire_lease(&fx, "relay-o-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "serves another environment"));
	/* No environment selected against a selected service. */
	loader_shutdown(&fx.registry);
	memset(&fx.registry, 0, sizeof fx.registry);
	assert_int_equal(ms_load_with(&fx, fx.standin.url, NULL, NULL, NULL, &err), RELAY_OK);
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, NULL, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "but this relay has none selected"));
	json_object_put(sid);
	free(served_id);
	free(other_id);
	free(served);
	free(other);
}

static void test_selected_relay_against_an_unselected_service(void **state)
{
	(void)state;
	ms_require_builds();
	ms_start_standin(&fx, NULL);
	int port = 0;
	sscanf(fx.standin.url, "http://127.0.0.1:%d", &port);
	char *profile = make_profile("lonely", port, NULL);
	char *identity = identity_text(profile);
	relay_error err;
	assert_int_equal(ms_load_with(&fx, fx.standin.url, NULL, identity, NULL, &err), RELAY_OK);
	assert_int_equal(fx.plugin->machine.health(fx.plugin->state, NULL, 0, NULL, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "serves another environment (no environment, fingerprint none)"));
	free(identity);
	free(profile);
}

static void test_fingerprint_header_name_is_configurable(void **state)
{
	(void)state;
	ms_require_builds();
	int port = free_port();
	char *profile = make_profile("hdr", port, NULL);
	const char *more[] = {"--fingerprint-header", "X-Machine-Environment-Fingerprint", NULL};
	start_selected(profile, more);
	char *identity = identity_text(profile);
	relay_error err;
	/* The default header name: the service does not see a fingerprint. */
	assert_int_equal(ms_load_with(&fx, fx.standin.url, NULL, identity, NULL, &err), RELAY_OK);
	char *lease = NULL;
	assert_int_equal(ms_acquire_lease(&fx, "relay-f-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "fingerprintHeader"));
	loader_shutdown(&fx.registry);
	memset(&fx.registry, 0, sizeof fx.registry);
	assert_int_equal(ms_load_with(&fx, fx.standin.url,
	                              "{\"fingerprintHeader\":\"X-Machine-Environment-Fingerprint\"}",
	                              identity, NULL, &err),
	                 RELAY_OK);
	assert_int_equal(ms_acquire_lease(&fx, "relay-f-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	free(lease);
	free(identity);
	free(profile);
}

static void test_a_lease_of_another_environment(void **state)
{
	(void)state;
	ms_require_builds();
	int port = free_port();
	char *first = make_profile("first", port, NULL);
	char *second = make_profile("second", port, NULL);
	start_selected(first, NULL);
	char *first_id = identity_text(first);
	char *second_id = identity_text(second);
	relay_error err;
	assert_int_equal(ms_load_with(&fx, fx.standin.url, NULL, first_id, NULL, &err), RELAY_OK);
	char *lease = NULL;
	assert_int_equal(ms_acquire_lease(&fx, "relay-l-00000001", "ubuntu2404", false, &lease, &err),
	                 RELAY_OK);
	/* The service restarts under the second environment, keeping its records. */
	loader_shutdown(&fx.registry);
	memset(&fx.registry, 0, sizeof fx.registry);
	standin_stop(&fx.standin);
	start_selected(second, NULL);
	assert_int_equal(ms_load_with(&fx, fx.standin.url, NULL, second_id, NULL, &err), RELAY_OK);
	char *renewed = NULL;
	assert_int_equal(fx.plugin->machine.renew(fx.plugin->state, lease, 900000, NULL, 0, &renewed, &err),
	                 RELAY_E_ENVIRONMENT_MISMATCH);
	assert_non_null(strstr(err.message, "lease environment fingerprint mismatch"));
	assert_int_equal(fx.plugin->machine.inspect(fx.plugin->state, lease, NULL, 0, &renewed, &err),
	                 RELAY_E_ENVIRONMENT_MISMATCH);
	free(lease);
	free(first_id);
	free(second_id);
	free(first);
	free(second);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_version_1_and_vmctl_path_are_refused_with_the_fix, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_a_valid_profile_is_canonical, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_every_rule_is_enforced, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_duplicate_keys_are_found_after_unescaping, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_selected_environment_matches_the_service, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_another_environment_is_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_selected_relay_against_an_unselected_service, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_fingerprint_header_name_is_configurable, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_lease_of_another_environment, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
