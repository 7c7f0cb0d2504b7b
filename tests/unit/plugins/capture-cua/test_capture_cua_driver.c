/*
 * The cua-driver stand-in (tests/fixtures/cua-driver/cua-driver) against a
 * real Xvfb display: capture-cua's planned argv (with the stand-in as the
 * corrected cuaDriver path and @OUT@ replaced, as the receiver does) must
 * pass the "cua-driver-json" check of spec/guest.md §11.1 and leave a real PNG
 * of the display's size; any other command line must fail without writing.
 * Skips when Xvfb or ImageMagick is missing.
 */
#include <fcntl.h>
#include <json-c/json.h>
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

#include "loader/loader.h"

#define SCREEN_W 640
#define SCREEN_H 480

static plugin_registry registry;
static loaded_plugin *plugin;
static char state_dir[64];
static char work_dir[64];
static char display[32];
static char driver[1024];
static pid_t xvfb_pid = -1;
static const char *skip_reason;

static int have(const char *tool)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
	return system(cmd) == 0;
}

/* Starts Xvfb on a display it picks itself (-displayfd). */
static int start_xvfb(void)
{
	int fds[2];
	if (pipe(fds) != 0)
		return -1;
	xvfb_pid = fork();
	if (xvfb_pid == 0) {
		close(fds[0]);
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		char fd_text[16], screen[32];
		snprintf(fd_text, sizeof fd_text, "%d", fds[1]);
		snprintf(screen, sizeof screen, "%dx%dx24", SCREEN_W, SCREEN_H);
		execlp("Xvfb", "Xvfb", "-displayfd", fd_text, "-screen", "0", screen, "-nolisten", "tcp",
		       (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	char buf[16] = {0};
	size_t got = 0;
	struct pollfd pfd = {fds[0], POLLIN, 0};
	while (got < sizeof buf - 1 && poll(&pfd, 1, 10000) > 0) {
		ssize_t n = read(fds[0], buf + got, sizeof buf - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		if (memchr(buf, '\n', got))
			break;
	}
	close(fds[0]);
	int number = atoi(buf);
	if (got == 0 || (number == 0 && buf[0] != '0')) {
		fprintf(stderr, "Xvfb did not report a display\n");
		return -1;
	}
	snprintf(display, sizeof display, ":%d", number);
	return 0;
}

static int group_setup(void **state)
{
	(void)state;
	if (!have("Xvfb")) {
		skip_reason = "Xvfb is missing (apt-get install xvfb)";
		return 0;
	}
	if (!have("import") && !(have("xwd") && have("convert"))) {
		skip_reason = "ImageMagick is missing (apt-get install imagemagick x11-apps)";
		return 0;
	}
	const char *build = getenv("RELAY_BUILD_DIR"), *source = getenv("RELAY_SOURCE_DIR");
	if (build == NULL || source == NULL) {
		fprintf(stderr, "RELAY_BUILD_DIR and RELAY_SOURCE_DIR must be set (run under ctest)\n");
		return -1;
	}
	snprintf(driver, sizeof driver, "%s/tests/fixtures/cua-driver/cua-driver", source);
	if (access(driver, X_OK) != 0) {
		fprintf(stderr, "the stand-in %s is not executable\n", driver);
		return -1;
	}
	char dir[512], config[512];
	snprintf(dir, sizeof dir, "%s/lib/mcp-relay/plugins", build);
	setenv("MCP_RELAY_PLUGIN_PATH", dir, 1);
	strcpy(state_dir, "/tmp/relay-cua-state-XXXXXX");
	strcpy(work_dir, "/tmp/relay-cua-shots-XXXXXX");
	if (mkdtemp(state_dir) == NULL || mkdtemp(work_dir) == NULL)
		return -1;
	relay_error err = {0};
	char *path = loader_find_plugin("capture-cua", &err);
	if (path == NULL)
		return -1;
	snprintf(config, sizeof config, "{\"stateDir\":\"%s\",\"options\":{}}", state_dir);
	relay_status st = loader_load(&registry, path, RELAY_KIND_CAPTURE, config, &plugin, &err);
	free(path);
	if (st != RELAY_OK) {
		fprintf(stderr, "%s\n", err.message);
		return -1;
	}
	return start_xvfb();
}

static int group_teardown(void **state)
{
	(void)state;
	if (skip_reason)
		return 0;
	if (xvfb_pid > 0) {
		kill(xvfb_pid, SIGTERM);
		waitpid(xvfb_pid, NULL, 0);
	}
	loader_shutdown(&registry);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", state_dir, work_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", work_dir);
	return 0;
}

#define SKIP_WITHOUT_X()                                                                                     \
	do {                                                                                                 \
		if (skip_reason) {                                                                           \
			fprintf(stderr, "skipped: %s\n", skip_reason);                                       \
			skip();                                                                              \
		}                                                                                            \
	} while (0)

/* Runs argv with DISPLAY set (or unset), capturing stdout. Returns the
 * exit status, -1 when it did not exit normally. */
static int run(char *const argv[], const char *disp, char *out, size_t out_len)
{
	int fds[2];
	if (pipe(fds) != 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], 1);
		if (disp)
			setenv("DISPLAY", disp, 1);
		else
			unsetenv("DISPLAY");
		execv(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	size_t got = 0;
	ssize_t n;
	while ((n = read(fds[0], out + got, out_len - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(fds[0]);
	int status;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The plan's argv for a dpkg:cua-driver image, the stand-in as cuaDriver. */
static json_object *planned_argv(void)
{
	char context[1400];
	snprintf(context, sizeof context,
	         "{\"lease\":{},\"applications\":[{\"id\":\"dpkg:cua-driver\",\"name\":\"cua-driver\","
	         "\"version\":\"0\"}],"
	         "\"platform\":\"linux-x86_64\",\"guestRoot\":\"%s\",\"cuaDriver\":\"%s\"}",
	         work_dir, driver);
	char *text = NULL;
	relay_error err = {0};
	assert_int_equal(plugin->capture.plan(plugin->state, context, 0, &text, &err), RELAY_OK);
	json_object *plan = json_tokener_parse(text);
	free(text);
	json_object *capture = NULL, *argv = NULL;
	assert_true(json_object_object_get_ex(plan, "capture", &capture));
	assert_true(json_object_object_get_ex(capture, "argv", &argv));
	json_object_get(argv);
	json_object_put(plan);
	return argv;
}

static void test_planned_command_takes_a_png_of_the_display(void **state)
{
	(void)state;
	SKIP_WITHOUT_X();
	char out_path[128];
	snprintf(out_path, sizeof out_path, "%s/.partial-run-1-before.png", work_dir);
	json_object *plan_argv = planned_argv();
	assert_int_equal(json_object_array_length(plan_argv), 5);
	char *argv[6] = {0};
	for (size_t i = 0; i < 5; i++) {
		const char *arg = json_object_get_string(json_object_array_get_idx(plan_argv, i));
		const char *at = strstr(arg, "@OUT@");
		char buf[512];
		if (at)
			snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - arg), arg, out_path, at + 5);
		else
			snprintf(buf, sizeof buf, "%s", arg);
		argv[i] = strdup(buf);
	}
	json_object_put(plan_argv);
	assert_string_equal(argv[0], driver);

	char out[4096];
	int code = run(argv, display, out, sizeof out);
	assert_int_equal(code, 0);
	/* The cua-driver-json check: stdout names exactly the output path... */
	json_object *answer = json_tokener_parse(out);
	assert_non_null(answer);
	assert_true(json_object_is_type(answer, json_type_object));
	json_object *shot = NULL;
	assert_true(json_object_object_get_ex(answer, "screenshot_file_path", &shot));
	assert_string_equal(json_object_get_string(shot), out_path);
	json_object_put(answer);
	/* ...which is a regular PNG file of 1 byte to 64 MiB, of the display. */
	struct stat st;
	assert_int_equal(lstat(out_path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_true(st.st_size >= 1 && st.st_size <= (64 << 20));
	unsigned char head[24];
	FILE *f = fopen(out_path, "rb");
	assert_non_null(f);
	assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
	fclose(f);
	static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	assert_memory_equal(head, signature, 8);
	assert_memory_equal(head + 12, "IHDR", 4);
	assert_int_equal(be32(head + 16), SCREEN_W);
	assert_int_equal(be32(head + 20), SCREEN_H);
	for (size_t i = 0; i < 5; i++)
		free(argv[i]);
}

static void test_other_command_lines_fail(void **state)
{
	(void)state;
	SKIP_WITHOUT_X();
	char out_path[128], json[256], out[4096];
	snprintf(out_path, sizeof out_path, "%s/refused.png", work_dir);
	snprintf(json, sizeof json, "{\"screenshot_out_file\":\"%s\"}", out_path);
	char spaced[256];
	snprintf(spaced, sizeof spaced, "{\"screenshot_out_file\": \"%s\"}", out_path);
	char *no_json[] = {driver, "call", "get_desktop_state", json, NULL};
	char *other_tool[] = {driver, "call", "list_windows", "--json", json, NULL};
	char *extra[] = {driver, "call", "get_desktop_state", "--json", json, "--more", NULL};
	char *reformatted[] = {driver, "call", "get_desktop_state", "--json", spaced, NULL};
	char *relative[] = {
	    driver, "call", "get_desktop_state", "--json", "{\"screenshot_out_file\":\"shot.png\"}", NULL};
	char *serve[] = {driver, "serve", "--no-overlay", NULL};
	char **lines[] = {no_json, other_tool, extra, reformatted, relative, serve};
	for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
		assert_int_equal(run(lines[i], display, out, sizeof out), 2);
		assert_string_equal(out, "");
		assert_int_equal(access(out_path, F_OK), -1);
	}
	/* The right command line without a display fails too. */
	char *good[] = {driver, "call", "get_desktop_state", "--json", json, NULL};
	assert_int_equal(run(good, NULL, out, sizeof out), 3);
	assert_int_equal(access(out_path, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_planned_command_takes_a_png_of_the_display),
	    cmocka_unit_test(test_other_command_lines_fail),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
