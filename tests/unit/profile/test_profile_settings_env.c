/*
 * Settings (spec/lifecycle.md §14): every MCP_RELAY_* variable with valid and
 * invalid values through settings_load(), with the exact "<NAME> <problem>"
 * message; then the binary itself ($RELAY_BUILD_DIR/mcp-relay) for each
 * refusal: "mcp-relay: <NAME> <problem>" on stderr, exit status 2, nothing
 * on stdout, and stdin never read (it stays open).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "profile/settings.h"
#include "util/fsutil.h"
#include "util/sha256.h"
#include "util/strbuf.h"

typedef struct fixture {
	char root[64];
	char state[96];
	char project[96];
	char file[96]; /* a regular file */
} fixture;

static fixture *fx;

/* Removes every variable the relay reads, then points state and project at
 * the fixture. */
static void clean_env(void)
{
	static const char *const names[] = {
	    "MCP_RELAY_PROJECT",
	    "MCP_RELAY_SESSION",
	    "MCP_RELAY_BACKEND",
	    "MCP_RELAY_URL",
	    "MCP_RELAY_MACHINE_SERVICE_OPTIONS",
	    "MCP_RELAY_LOCAL_OPTIONS",
	    "MCP_RELAY_TRANSFER_SSH_OPTIONS",
	    "MCP_RELAY_GUEST_NETWORK",
	    "MCP_RELAY_ON_EXIT",
	    "MCP_RELAY_RECORD",
	    "MCP_RELAY_RECORD_FPS",
	    "MCP_RELAY_CONSOLE_CONTROL",
	    "MCP_RELAY_CAPACITY_WAIT",
	    "MCP_RELAY_MAX_GUESTS",
	    "MCP_RELAY_STATE_DIR",
	    "MCP_RELAY_REGISTRY",
	    "MCP_RELAY_SHUTDOWN_GRACE_MS",
	    "MCP_RELAY_PYTHON",
	    "VM_ENVIRONMENT_FILE",
	    "MCP_VM_RELAY_ON_EXIT",
	    "CLAUDE_PROJECT_DIR",
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		unsetenv(names[i]);
	setenv("MCP_RELAY_STATE_DIR", fx->state, 1);
	setenv("MCP_RELAY_PROJECT", fx->project, 1);
}

static int setup(void **state)
{
	(void)state;
	fx = calloc(1, sizeof *fx);
	snprintf(fx->root, sizeof fx->root, "/tmp/settings-env-XXXXXX");
	if (mkdtemp(fx->root) == NULL)
		return -1;
	snprintf(fx->state, sizeof fx->state, "%s/state", fx->root);
	snprintf(fx->project, sizeof fx->project, "%s/project", fx->root);
	snprintf(fx->file, sizeof fx->file, "%s/file.so", fx->root);
	mkdir(fx->project, 0700);
	FILE *f = fopen(fx->file, "w");
	fputs("not a plugin\n", f);
	fclose(f);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	relay_error err;
	fs_remove_tree(fx->root, &err);
	free(fx);
	return 0;
}

/* Loads with NAME=value (value NULL: unset). want NULL: accepted. */
static void expect_load(const char *name, const char *value, const char *want)
{
	clean_env();
	if (value)
		setenv(name, value, 1);
	else
		unsetenv(name);
	relay_settings s;
	char err[1024] = "";
	int rc = settings_load(&s, err, sizeof err);
	if (want == NULL) {
		if (rc != 0)
			fail_msg("%s=%s refused: %s", name, value ? value : "(unset)", err);
		settings_free(&s);
		return;
	}
	if (rc == 0) {
		settings_free(&s);
		fail_msg("%s=%s accepted; want \"%s\"", name, value ? value : "(unset)", want);
	}
	if (strcmp(err, want) != 0)
		fail_msg("%s=%s:\n got \"%s\"\nwant \"%s\"", name, value ? value : "(unset)", err, want);
}

static relay_settings load_ok(void)
{
	relay_settings s;
	char err[1024];
	if (settings_load(&s, err, sizeof err) != 0)
		fail_msg("refused: %s", err);
	return s;
}

static void test_defaults(void **state)
{
	(void)state;
	clean_env();
	relay_settings s = load_ok();
	char real[4096];
	assert_non_null(realpath(fx->project, real));
	assert_string_equal(s.project, real);
	/* The project's own identity (spec/lifecycle.md §2): "project-" and the
	 * first 32 hex digits of SHA-256 of its real path. */
	assert_true(s.session_id_stable);
	assert_int_equal(s.session_source, SESSION_FROM_PROJECT);
	char digest[SHA256_HEX_LEN + 1], want_id[64];
	sha256_buffer_hex(real, strlen(real), digest);
	snprintf(want_id, sizeof want_id, "project-%.32s", digest);
	assert_string_equal(s.session_id, want_id);
	assert_null(s.session_note);
	assert_int_equal(strlen(s.session_key), 32);
	assert_string_equal(s.backend, "local");
	assert_string_equal(s.service_url, "http://localhost:6240");
	assert_null(s.machine_service_options);
	assert_int_equal(s.guest_network, GUEST_NETWORK_NAT);
	assert_int_equal(s.on_exit, ON_EXIT_PAUSE);
	assert_int_equal(s.capacity_wait_s, 1800);
	assert_int_equal(s.max_guests, 4);
	assert_int_equal(s.shutdown_grace_ms, 120000);
	assert_null(s.registry_path);
	assert_null(s.environment);
	struct stat st;
	assert_int_equal(stat(fx->state, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_true(strncmp(s.session_dir, s.state_root, strlen(s.state_root)) == 0);
	settings_free(&s);
}

static void test_project(void **state)
{
	(void)state;
	char want[512];
	expect_load("MCP_RELAY_PROJECT", "/nonexistent/x",
	            "MCP_RELAY_PROJECT must name an existing folder: /nonexistent/x");
	snprintf(want, sizeof want, "MCP_RELAY_PROJECT must name an existing folder: %s", fx->file);
	expect_load("MCP_RELAY_PROJECT", fx->file, want);
	/* Unset, empty and ${...} mean the working folder. */
	char cwd[4096];
	assert_non_null(getcwd(cwd, sizeof cwd));
	assert_int_equal(chdir(fx->project), 0);
	const char *as_cwd[] = {NULL, "", "${CLAUDE_PROJECT_DIR}", "x${Y}z"};
	for (size_t i = 0; i < 4; i++) {
		clean_env();
		if (as_cwd[i])
			setenv("MCP_RELAY_PROJECT", as_cwd[i], 1);
		else
			unsetenv("MCP_RELAY_PROJECT");
		relay_settings s = load_ok();
		char real[4096];
		assert_non_null(realpath(fx->project, real));
		assert_string_equal(s.project, real);
		settings_free(&s);
	}
	/* Unset or a placeholder: CLAUDE_PROJECT_DIR (Claude Code sets it for
	 * its servers) before the working folder; MCP_RELAY_PROJECT wins. */
	assert_int_equal(chdir(fx->root), 0);
	const char *as_claude[] = {NULL, "${CLAUDE_PROJECT_DIR}"};
	for (size_t i = 0; i < 2; i++) {
		clean_env();
		if (as_claude[i])
			setenv("MCP_RELAY_PROJECT", as_claude[i], 1);
		else
			unsetenv("MCP_RELAY_PROJECT");
		setenv("CLAUDE_PROJECT_DIR", fx->project, 1);
		relay_settings s = load_ok();
		char real[4096];
		assert_non_null(realpath(fx->project, real));
		assert_string_equal(s.project, real);
		settings_free(&s);
	}
	clean_env();
	setenv("CLAUDE_PROJECT_DIR", fx->state, 1);
	relay_settings given = load_ok();
	assert_non_null(strstr(given.project, "/project"));
	settings_free(&given);
	assert_int_equal(chdir(fx->project), 0);
	/* Relative: against the working folder. */
	mkdir("sub", 0700);
	clean_env();
	setenv("MCP_RELAY_PROJECT", "sub", 1);
	relay_settings s = load_ok();
	assert_non_null(strstr(s.project, "/project/sub"));
	settings_free(&s);
	assert_int_equal(chdir(cwd), 0);
}

static void test_session(void **state)
{
	(void)state;
	const char *msg =
	    "MCP_RELAY_SESSION must be 1 to 128 characters of A-Z, a-z, 0-9 and ._:@- starting with a "
	    "letter or digit";
	expect_load("MCP_RELAY_SESSION", "", msg);
	expect_load("MCP_RELAY_SESSION", "-x", msg);
	expect_load("MCP_RELAY_SESSION", ".x", msg);
	expect_load("MCP_RELAY_SESSION", "a b", msg);
	expect_load("MCP_RELAY_SESSION", "a/b", msg);
	expect_load("MCP_RELAY_SESSION", "caf\xc3\xa9", msg);
	char long_id[200];
	memset(long_id, 'a', 129);
	long_id[129] = '\0';
	expect_load("MCP_RELAY_SESSION", long_id, msg);
	long_id[128] = '\0';
	expect_load("MCP_RELAY_SESSION", long_id, NULL);
	expect_load("MCP_RELAY_SESSION", "ci.run-7:agent@host_2", NULL);
	clean_env();
	setenv("MCP_RELAY_SESSION", "abc", 1);
	relay_settings s = load_ok();
	assert_true(s.session_id_stable);
	/* The session key: the first 32 hex digits of SHA-256("abc"). */
	assert_string_equal(s.session_key, "ba7816bf8f01cfea414140de5dae2223");
	settings_free(&s);
}

static void test_backend(void **state)
{
	(void)state;
	char want[512];
	expect_load("MCP_RELAY_BACKEND", "local", NULL);
	expect_load("MCP_RELAY_BACKEND", "machine-service", NULL);
	expect_load("MCP_RELAY_BACKEND", fx->file, NULL);
	expect_load("MCP_RELAY_BACKEND", "libvirt",
	            "MCP_RELAY_BACKEND must be local, machine-service, docker, or an absolute path to a "
	            "plugin .so (got libvirt)");
	expect_load("MCP_RELAY_BACKEND", "",
	            "MCP_RELAY_BACKEND must be local, machine-service, docker, or an absolute path to a "
	            "plugin .so (got )");
	expect_load("MCP_RELAY_BACKEND", "plugins/x.so",
	            "MCP_RELAY_BACKEND must be local, machine-service, docker, or an absolute path to a "
	            "plugin .so (got plugins/x.so)");
	expect_load("MCP_RELAY_BACKEND", "/nonexistent.so",
	            "MCP_RELAY_BACKEND names /nonexistent.so, which is not a regular file");
	snprintf(want, sizeof want, "MCP_RELAY_BACKEND names %s, which is not a regular file", fx->root);
	expect_load("MCP_RELAY_BACKEND", fx->root, want);
}

static void test_url(void **state)
{
	(void)state;
	const char *ok[] = {"http://localhost:6240", "http://localhost:6240/",   "http://localhost",
	                    "http://127.0.0.1:80",   "http://127.255.255.254:1", "http://[::1]:6240",
	                    "HTTP://LOCALHOST:6240"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		expect_load("MCP_RELAY_URL", ok[i], NULL);
	expect_load("MCP_RELAY_URL", "https://localhost:6240",
	            "MCP_RELAY_URL must be an http:// origin (got https://localhost:6240)");
	expect_load("MCP_RELAY_URL", "", "MCP_RELAY_URL must be an http:// origin (got )");
	expect_load("MCP_RELAY_URL", "http://example.com",
	            "MCP_RELAY_URL must name a loopback host (localhost, 127.x.x.x or [::1]) (got "
	            "http://example.com)");
	expect_load("MCP_RELAY_URL", "http://127.0.0.256",
	            "MCP_RELAY_URL must name a loopback host (localhost, 127.x.x.x or [::1]) (got "
	            "http://127.0.0.256)");
	expect_load(
	    "MCP_RELAY_URL", "http://128.0.0.1",
	    "MCP_RELAY_URL must name a loopback host (localhost, 127.x.x.x or [::1]) (got http://128.0.0.1)");
	expect_load(
	    "MCP_RELAY_URL", "http://127.1",
	    "MCP_RELAY_URL must name a loopback host (localhost, 127.x.x.x or [::1]) (got http://127.1)");
	expect_load("MCP_RELAY_URL", "http://localhost:6240/api",
	            "MCP_RELAY_URL must not have a path (got http://localhost:6240/api)");
	expect_load(
	    "MCP_RELAY_URL", "http://a@localhost",
	    "MCP_RELAY_URL must not carry user information, a query or a fragment (got http://a@localhost)");
	expect_load(
	    "MCP_RELAY_URL", "http://localhost/#x",
	    "MCP_RELAY_URL must not carry user information, a query or a fragment (got http://localhost/#x)");
	expect_load("MCP_RELAY_URL", "http://localhost:0",
	            "MCP_RELAY_URL has an invalid port (got http://localhost:0)");
	expect_load("MCP_RELAY_URL", "http://localhost:65536",
	            "MCP_RELAY_URL has an invalid port (got http://localhost:65536)");
	expect_load("MCP_RELAY_URL",
	            "http://localhost:", "MCP_RELAY_URL has an invalid port (got http://localhost:)");
	expect_load("MCP_RELAY_URL", "http://[::1",
	            "MCP_RELAY_URL has an unterminated IPv6 address (got http://[::1)");
	expect_load("MCP_RELAY_URL", "http://", "MCP_RELAY_URL has no host (got http://)");
	/* Canonical form: no trailing slash, scheme and host in lower case. */
	clean_env();
	setenv("MCP_RELAY_URL", "HTTP://LocalHost:6240/", 1);
	relay_settings s = load_ok();
	assert_string_equal(s.service_url, "http://localhost:6240");
	settings_free(&s);
}

static void test_local_options(void **state)
{
	(void)state;
	const char *name = "MCP_RELAY_LOCAL_OPTIONS";
	expect_load(name, "{}", NULL);
	expect_load(name, "{\"baseTree\":\"/srv/trees/bookworm\"}", NULL);
	expect_load(name, "{\"unclosed\":",
	            "MCP_RELAY_LOCAL_OPTIONS must be a JSON object of machine-local options "
	            "(docs/machine-local.md) (not JSON: unexpected end of data)");
	expect_load(name, "\"text\"",
	            "MCP_RELAY_LOCAL_OPTIONS must be a JSON object of machine-local options "
	            "(docs/machine-local.md) (it is a JSON string)");
}

static void test_transfer_ssh_options(void **state)
{
	(void)state;
	const char *name = "MCP_RELAY_TRANSFER_SSH_OPTIONS";
	expect_load(name, "{\"spareSessions\":0,\"connectTimeoutSeconds\":5}", NULL);
	expect_load(name, "[1]",
	            "MCP_RELAY_TRANSFER_SSH_OPTIONS must be a JSON object of transfer-ssh options "
	            "(docs/transfer-ssh.md) (it is a JSON array)");
	/* Reaches the plugin's configuration as given. */
	clean_env();
	setenv(name, "{\"spareSessions\":2}", 1);
	relay_settings s = load_ok();
	assert_non_null(s.transfer_ssh_options);
	assert_int_equal(json_object_get_int(json_object_object_get(s.transfer_ssh_options, "spareSessions")),
	                 2);
	settings_free(&s);
}

static void test_service_options(void **state)
{
	(void)state;
	const char *name = "MCP_RELAY_MACHINE_SERVICE_OPTIONS";
	expect_load(name, "{}", NULL);
	expect_load(
	    name,
	    "{\"routePrefix\":\"/v2\",\"listKey\":\"machines\",\"nameField\":\"vm\",\"serviceName\":\"svc\","
	    "\"acquirePath\":\"/acquire\",\"fingerprintHeader\":\"X-Env\",\"maxExecTimeoutS\":30,"
	    "\"destructionCheck\":\"service\",\"sshField\":\"ssh\"}",
	    NULL);
	expect_load(name, "nope",
	            "MCP_RELAY_MACHINE_SERVICE_OPTIONS must be a JSON object (not JSON: null expected)");
	expect_load(name, "[]",
	            "MCP_RELAY_MACHINE_SERVICE_OPTIONS must be a JSON object (it is a JSON array)");
	expect_load(name, "{\"x\":1}",
	            "MCP_RELAY_MACHINE_SERVICE_OPTIONS has the unknown key x; accepted keys are routePrefix, "
	            "listKey, "
	            "nameField, serviceName, acquirePath, fingerprintHeader, maxExecTimeoutS, "
	            "destructionCheck and sshField");
	expect_load(name, "{\"listKey\":\"\"}",
	            "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad listKey: it must be a non-empty string");
	expect_load(
	    name, "{\"routePrefix\":\"v2\"}",
	    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad routePrefix: it must be a path starting with /");
	expect_load(
	    name, "{\"fingerprintHeader\":\"X Env\"}",
	    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad fingerprintHeader: it must be an HTTP header name");
	expect_load(
	    name, "{\"nameField\":\"host\"}",
	    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad nameField: accepted values are vm and machine");
	expect_load(name, "{\"maxExecTimeoutS\":0}",
	            "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad maxExecTimeoutS: it must be a positive "
	            "integer of seconds");
	expect_load(name, "{\"maxExecTimeoutS\":\"30\"}",
	            "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad maxExecTimeoutS: it must be a positive "
	            "integer of seconds");
	expect_load(name, "{\"destructionCheck\":\"none\"}",
	            "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad destructionCheck: accepted values are tart "
	            "and service");
}

static void test_enumerations(void **state)
{
	(void)state;
	expect_load("MCP_RELAY_GUEST_NETWORK", "nat", NULL);
	expect_load("MCP_RELAY_GUEST_NETWORK", "internet", NULL);
	expect_load("MCP_RELAY_GUEST_NETWORK", "NAT",
	            "MCP_RELAY_GUEST_NETWORK must be nat, internet or allow (got NAT)");
	expect_load("MCP_RELAY_GUEST_NETWORK", "",
	            "MCP_RELAY_GUEST_NETWORK must be nat, internet or allow (got )");
	expect_load("MCP_RELAY_ON_EXIT", "pause", NULL);
	expect_load("MCP_RELAY_ON_EXIT", "release", NULL);
	expect_load("MCP_RELAY_ON_EXIT", "bogus", "MCP_RELAY_ON_EXIT must be pause or release (got bogus)");
	expect_load("MCP_RELAY_ON_EXIT", "", "MCP_RELAY_ON_EXIT must be pause or release (got )");
	expect_load("MCP_RELAY_RECORD", "off", NULL);
	expect_load("MCP_RELAY_RECORD", "video", NULL);
	expect_load("MCP_RELAY_RECORD", "audio", "MCP_RELAY_RECORD must be off or video (got audio)");
	expect_load("MCP_RELAY_CONSOLE_CONTROL", "allow", NULL);
	expect_load("MCP_RELAY_CONSOLE_CONTROL", "yes",
	            "MCP_RELAY_CONSOLE_CONTROL must be allow or deny (got yes)");
	clean_env();
	setenv("MCP_RELAY_RECORD", "video", 1);
	setenv("MCP_RELAY_RECORD_FPS", "31", 1);
	{
		relay_settings bad;
		char err[256] = "";
		assert_int_equal(settings_load(&bad, err, sizeof err), -1);
		assert_string_equal(
		    err, "MCP_RELAY_RECORD_FPS must be whole frames per second from 1 to 30 (got 31)");
	}
	setenv("MCP_RELAY_RECORD_FPS", "4", 1);
	{
		relay_settings rec = load_ok();
		assert_int_equal(rec.record_video_fps, 4);
		settings_free(&rec);
	}
	unsetenv("MCP_RELAY_RECORD");
	unsetenv("MCP_RELAY_RECORD_FPS");
	clean_env();
	setenv("MCP_RELAY_ON_EXIT", "release", 1);
	setenv("MCP_RELAY_GUEST_NETWORK", "internet", 1);
	relay_settings s = load_ok();
	assert_int_equal(s.on_exit, ON_EXIT_RELEASE);
	assert_int_equal(s.guest_network, GUEST_NETWORK_INTERNET);
	assert_string_equal(settings_on_exit_name(s.on_exit), "release");
	assert_string_equal(settings_guest_network_name(s.guest_network), "internet");
	settings_free(&s);
}

static void numbers(const char *name, const char *what, const char *min, const char *max, const char *over)
{
	char want[256];
	expect_load(name, min, NULL);
	expect_load(name, max, NULL);
	const char *bad[] = {
	    over, "-1", "+1", " 1", "1 ", "1e3", "1.0", "0x10", "", "one", "99999999999999999999999"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(want, sizeof want, "%s must be %s (got %s)", name, what, bad[i]);
		expect_load(name, bad[i], want);
	}
}

static void test_numbers(void **state)
{
	(void)state;
	numbers("MCP_RELAY_CAPACITY_WAIT", "whole seconds from 0 to 86400", "0", "86400", "86401");
	numbers("MCP_RELAY_MAX_GUESTS", "a whole number from 1 to 64", "1", "64", "65");
	numbers("MCP_RELAY_SHUTDOWN_GRACE_MS", "whole milliseconds from 0 to 3600000", "0", "3600000",
	        "3600001");
	expect_load("MCP_RELAY_MAX_GUESTS", "0",
	            "MCP_RELAY_MAX_GUESTS must be a whole number from 1 to 64 (got 0)");
	/* Leading zeros are digits. */
	clean_env();
	setenv("MCP_RELAY_MAX_GUESTS", "000000000000000000000007", 1);
	setenv("MCP_RELAY_CAPACITY_WAIT", "0060", 1);
	setenv("MCP_RELAY_SHUTDOWN_GRACE_MS", "250", 1);
	relay_settings s = load_ok();
	assert_int_equal(s.max_guests, 7);
	assert_int_equal(s.capacity_wait_s, 60);
	assert_int_equal(s.shutdown_grace_ms, 250);
	settings_free(&s);
}

static void test_state_dir(void **state)
{
	(void)state;
	char path[512], want[1024];
	expect_load("MCP_RELAY_STATE_DIR", "relative",
	            "MCP_RELAY_STATE_DIR must be an absolute path: relative");
	snprintf(path, sizeof path, "%s/open", fx->root);
	mkdir(path, 0700);
	chmod(path, 0770);
	snprintf(want, sizeof want,
	         "MCP_RELAY_STATE_DIR must not be writable by group or others (chmod 700 %s)", path);
	expect_load("MCP_RELAY_STATE_DIR", path, want);
	snprintf(path, sizeof path, "%s/file.so/below", fx->root);
	clean_env();
	setenv("MCP_RELAY_STATE_DIR", path, 1);
	relay_settings s;
	char err[1024];
	assert_int_equal(settings_load(&s, err, sizeof err), -1);
	assert_true(strncmp(err, "MCP_RELAY_STATE_DIR cannot be created: ", 39) == 0);
	/* Created 0700 with its parents. */
	snprintf(path, sizeof path, "%s/deep/er/state", fx->root);
	expect_load("MCP_RELAY_STATE_DIR", path, NULL);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	/* Unset: XDG_STATE_HOME (absolute only), then HOME. */
	clean_env();
	unsetenv("MCP_RELAY_STATE_DIR");
	char xdg[256], home[256], saved_home[4096] = "";
	const char *h = getenv("HOME");
	if (h)
		snprintf(saved_home, sizeof saved_home, "%s", h);
	snprintf(xdg, sizeof xdg, "%s/xdg", fx->root);
	snprintf(home, sizeof home, "%s/home", fx->root);
	setenv("XDG_STATE_HOME", xdg, 1);
	setenv("HOME", home, 1);
	s = load_ok();
	snprintf(path, sizeof path, "%s/mcp-relay", xdg);
	assert_string_equal(s.state_root, path);
	settings_free(&s);
	setenv("XDG_STATE_HOME", "relative/xdg", 1);
	s = load_ok();
	snprintf(path, sizeof path, "%s/.local/state/mcp-relay", home);
	assert_string_equal(s.state_root, path);
	settings_free(&s);
	unsetenv("XDG_STATE_HOME");
	unsetenv("HOME");
	expect_load(
	    "MCP_RELAY_STATE_DIR", NULL,
	    "MCP_RELAY_STATE_DIR is unset and neither XDG_STATE_HOME nor HOME is an absolute path; set "
	    "MCP_RELAY_STATE_DIR");
	if (*saved_home)
		setenv("HOME", saved_home, 1);
}

static void test_registry(void **state)
{
	(void)state;
	expect_load("MCP_RELAY_REGISTRY", "registry.md",
	            "MCP_RELAY_REGISTRY must be an absolute path (got registry.md)");
	expect_load("MCP_RELAY_REGISTRY", "/nonexistent/registry.md",
	            "MCP_RELAY_REGISTRY must name an existing regular file (got /nonexistent/registry.md)");
	/* A regular file without a VM table is refused too (spec/lifecycle.md §10). */
	clean_env();
	setenv("MCP_RELAY_REGISTRY", fx->file, 1);
	relay_settings s;
	char err[1024];
	assert_int_equal(settings_load(&s, err, sizeof err), -1);
	assert_true(strncmp(err, "MCP_RELAY_REGISTRY ", 19) == 0);
}

static void test_python_and_environment(void **state)
{
	(void)state;
	expect_load("MCP_RELAY_PYTHON", "/no/such/python", NULL);
	expect_load("MCP_RELAY_PYTHON", "", NULL);
	/* The profile's own messages belong to profile/environment.c: only their
	 * start is checked here. */
	relay_settings s;
	char err[1024];
	const char *blank[] = {"", "  "};
	for (size_t i = 0; i < 2; i++) {
		clean_env();
		setenv("VM_ENVIRONMENT_FILE", blank[i], 1);
		assert_int_equal(settings_load(&s, err, sizeof err), -1);
		assert_true(strncmp(err, "VM_ENVIRONMENT_FILE must not be blank", 37) == 0);
	}
	clean_env();
	setenv("VM_ENVIRONMENT_FILE", "/nonexistent/profile.json", 1);
	assert_int_equal(settings_load(&s, err, sizeof err), -1);
	assert_true(strncmp(err, "VM_ENVIRONMENT_FILE names /nonexistent/profile.json", 51) == 0);
	/* A version-1 profile names the fix. */
	char path[256];
	snprintf(path, sizeof path, "%s/v1.json", fx->root);
	FILE *f = fopen(path, "w");
	fputs("{\"schemaVersion\": 1, \"vmctlPath\": \"/usr/bin/vmctl\"}\n", f);
	fclose(f);
	clean_env();
	setenv("VM_ENVIRONMENT_FILE", path, 1);
	assert_int_equal(settings_load(&s, err, sizeof err), -1);
	assert_non_null(strstr(err, "schemaVersion"));
	assert_true(strncmp(err, "VM_ENVIRONMENT_FILE ", 20) == 0);
}

static void test_loopback_origin(void **state)
{
	(void)state;
	char canonical[64];
	const char *why = NULL;
	assert_true(
	    settings_valid_loopback_origin("http://127.0.0.1:6240/", canonical, sizeof canonical, &why));
	assert_string_equal(canonical, "http://127.0.0.1:6240");
	assert_null(why);
	assert_false(settings_valid_loopback_origin("http://10.0.0.1", NULL, 0, &why));
	assert_non_null(why);
	assert_false(settings_valid_loopback_origin("http://127.0.0.01.2", NULL, 0, &why));
	assert_false(settings_valid_loopback_origin("http://127.0.0.1.", NULL, 0, &why));
	assert_true(settings_valid_loopback_origin("http://127.0.0.1", NULL, 0, NULL));
}

/* ---- the binary ------------------------------------------------------------ */

typedef struct run_result {
	int status;
	strbuf out;
	strbuf err;
} run_result;

/* Runs mcp-relay with the current environment, stdin an open pipe that is
 * never written or closed before the process exits. */
static bool run_binary(run_result *r)
{
	const char *build = getenv("RELAY_BUILD_DIR");
	if (build == NULL)
		return false;
	char binary[4096];
	snprintf(binary, sizeof binary, "%s/mcp-relay", build);
	if (access(binary, X_OK) != 0)
		return false;
	int in[2], out[2], err[2];
	assert_int_equal(pipe(in), 0);
	assert_int_equal(pipe(out), 0);
	assert_int_equal(pipe(err), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		dup2(err[1], 2);
		for (int fd = 3; fd < 64; fd++)
			close(fd);
		execl(binary, binary, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	close(err[1]);
	/* No request: the server (which answers MCP even with an invalid
	 * setting, spec/lifecycle.md §14) ends at the end of its input. */
	close(in[1]);
	strbuf_init(&r->out);
	strbuf_init(&r->err);
	struct pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
	int open_fds = 2;
	while (open_fds > 0) {
		if (poll(p, 2, 30000) <= 0)
			break;
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			char buf[4096];
			ssize_t n = read(p[i].fd, buf, sizeof buf);
			if (n <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
				open_fds--;
			} else {
				strbuf_append(i == 0 ? &r->out : &r->err, buf, (size_t)n);
			}
		}
	}
	int wstatus = 0;
	waitpid(pid, &wstatus, 0);
	r->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
	return true;
}

static void test_binary_stops(void **state)
{
	(void)state;
	static const char *const cases[][2] = {
	    {"MCP_RELAY_ON_EXIT", "bogus"},
	    {"MCP_RELAY_GUEST_NETWORK", "wan"},
	    {"MCP_RELAY_CAPACITY_WAIT", "1e3"},
	    {"MCP_RELAY_MAX_GUESTS", "65"},
	    {"MCP_RELAY_SHUTDOWN_GRACE_MS", "-1"},
	    {"MCP_RELAY_SESSION", "bad session"},
	    {"MCP_RELAY_BACKEND", "nope"},
	    {"MCP_RELAY_URL", "http://example.com"},
	    {"MCP_RELAY_MACHINE_SERVICE_OPTIONS", "{\"x\":1}"},
	    {"MCP_RELAY_STATE_DIR", "relative"},
	    {"MCP_RELAY_PROJECT", "/nonexistent/project"},
	    {"MCP_RELAY_REGISTRY", "relative.md"},
	    {"VM_ENVIRONMENT_FILE", ""},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		/* The message settings_load gives... */
		clean_env();
		setenv(cases[i][0], cases[i][1], 1);
		relay_settings s;
		char message[1024];
		assert_int_equal(settings_load(&s, message, sizeof message), -1);
		/* ...is exactly the first line the binary prints, with the fix;
		 * it exits with 2 at the end of its input, having written nothing
		 * to stdout (no request came). */
		run_result r;
		if (!run_binary(&r))
			skip(); /* RELAY_BUILD_DIR/mcp-relay is not built */
		char want[1600];
		snprintf(want, sizeof want, "mcp-relay: %s; fix: %s\n", message,
		         settings_problem_fix(message));
		if (r.status != 2 || r.out.len != 0 || strncmp(strbuf_str(&r.err), want, strlen(want)) != 0)
			fail_msg("%s=%s: status %d, stdout \"%s\", stderr \"%s\" (want \"%s\")", cases[i][0],
			         cases[i][1], r.status, strbuf_str(&r.out), strbuf_str(&r.err), want);
		strbuf_free(&r.out);
		strbuf_free(&r.err);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_project),
	    cmocka_unit_test(test_session),
	    cmocka_unit_test(test_backend),
	    cmocka_unit_test(test_url),
	    cmocka_unit_test(test_service_options),
	    cmocka_unit_test(test_local_options),
	    cmocka_unit_test(test_transfer_ssh_options),
	    cmocka_unit_test(test_enumerations),
	    cmocka_unit_test(test_numbers),
	    cmocka_unit_test(test_state_dir),
	    cmocka_unit_test(test_registry),
	    cmocka_unit_test(test_python_and_environment),
	    cmocka_unit_test(test_loopback_origin),
	    cmocka_unit_test(test_binary_stops),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
