/*
 * util/failpoint.h: the failpoints of test builds (docs/reliability.md §2).
 *
 * With RELAY_FAILPOINTS (scripts/test's build): each case runs in a child
 * process (the setting is read once per process) with MCP_RELAY_FAILPOINTS
 * set, and checks what a point does: crash ends the child with exit 86, error
 * fails with RELAY_E_IO and a message naming the point, off and unset do
 * nothing, the receiver's names are left to the receiver, and a typo (an
 * unknown name or action, error at a crash-only point) ends the child with
 * exit 2. The built receiver's `init` does the same with the receiver's names.
 *
 * Without it (every user's build): the points do nothing whatever the
 * environment says, and the built mcp-relay holds no failpoint code (its
 * setting's name is nowhere in the binary).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/failpoint.h"
#include "util/fsutil.h"

/* `receiver init` on a fresh root with the setting `setting`: its exit status,
 * its frame in `frame`. Skips the test when the receiver is not built. */
static int receiver_init(const char *setting, char *frame, size_t frame_size)
{
	const char *build = getenv("RELAY_BUILD_DIR");
	char receiver[4096];
	snprintf(receiver, sizeof receiver, "%s/libexec/mcp-relay/receivers/%s/receiver", build ? build : ".",
	         RELAY_HOST_PLATFORM);
	if (access(receiver, X_OK) != 0)
		skip();
	char root[] = "/tmp/relay-failpoint-XXXXXX";
	assert_non_null(mkdtemp(root));
	int out[2];
	assert_int_equal(pipe(out), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("MCP_RELAY_FAILPOINTS", setting, 1);
		dup2(out[1], 1);
		execl(receiver, "receiver", "init", "--root", root, "--session", "s1", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	size_t used = 0;
	ssize_t n;
	while (used + 1 < frame_size && (n = read(out[0], frame + used, frame_size - 1 - used)) > 0)
		used += (size_t)n;
	frame[used] = '\0';
	close(out[0]);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	relay_error err;
	memset(&err, 0, sizeof err);
	assert_int_equal(fs_remove_tree(root, &err), RELAY_OK);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

#ifdef RELAY_FAILPOINTS

/* Runs the point `name` in a child with the setting `setting`; returns the
 * child's exit status: 0 when the point did nothing, 10 when it failed with
 * the expected error, 11 for any other failure, or what the point exited with. */
static int child_check(const char *setting, const char *name, bool is_error_point)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("MCP_RELAY_FAILPOINTS", setting, 1);
		relay_error err;
		memset(&err, 0, sizeof err);
		relay_status st = relay_failpoint_check(name, is_error_point ? &err : NULL);
		if (st == RELAY_OK)
			_exit(0);
		char want[128];
		snprintf(want, sizeof want, "failpoint %s: injected error", name);
		_exit(st == RELAY_E_IO && strcmp(err.message, want) == 0 ? 10 : 11);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void test_crash_ends_the_process(void **state)
{
	(void)state;
	assert_int_equal(child_check("release.after-destroy=crash", "release.after-destroy", false),
	                 RELAY_FAILPOINT_EXIT_CODE);
	assert_int_equal(child_check("stage.before-push=crash", "stage.before-push", true),
	                 RELAY_FAILPOINT_EXIT_CODE);
}

static void test_error_fails_naming_the_point(void **state)
{
	(void)state;
	assert_int_equal(
	    child_check("finish.after-manifest=crash,stage.before-push=error", "stage.before-push", true),
	    10);
	assert_int_equal(child_check("extract.before-pull=error", "extract.before-pull", true), 10);
}

static void test_other_points_do_nothing(void **state)
{
	(void)state;
	assert_int_equal(child_check("", "stage.before-push", true), 0);
	assert_int_equal(child_check("stage.after-push=crash", "stage.before-push", true), 0);
	assert_int_equal(child_check("stage.before-push=off", "stage.before-push", true), 0);
	assert_int_equal(child_check("receiver.run.after-started=crash", "run.before-dispatch", false), 0);
	assert_int_equal(child_check(",,stage.after-push=crash,", "run.before-dispatch", false), 0);
}

static void test_typos_end_the_process(void **state)
{
	(void)state;
	assert_int_equal(child_check("stage.before-pushh=crash", "stage.before-push", true), 2);
	assert_int_equal(child_check("stage.before-push=explode", "stage.before-push", true), 2);
	assert_int_equal(child_check("stage.before-push", "stage.before-push", true), 2);
	assert_int_equal(child_check("release.after-destroy=error", "release.after-destroy", false), 2);
}

static void test_the_receivers_points(void **state)
{
	(void)state;
	char frame[4096];
	assert_int_equal(receiver_init("", frame, sizeof frame), 0);
	assert_non_null(strstr(frame, "\"created\":true"));
	assert_int_equal(receiver_init("stage.before-push=error", frame, sizeof frame), 0);
	assert_int_equal(receiver_init("receiver.init.before-write=crash", frame, sizeof frame),
	                 RELAY_FAILPOINT_EXIT_CODE);
	assert_string_equal(frame, ""); /* ended before its frame */
	assert_int_equal(receiver_init("receiver.init.before-write=error", frame, sizeof frame), 3);
	assert_non_null(strstr(frame, "failpoint receiver.init.before-write: injected error"));
	assert_int_equal(receiver_init("receiver.init.before-writ=crash", frame, sizeof frame), 2);
	assert_int_equal(receiver_init("receiver.run.after-started=error", frame, sizeof frame), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crash_ends_the_process),
	    cmocka_unit_test(test_the_receivers_points),
	    cmocka_unit_test(test_error_fails_naming_the_point),
	    cmocka_unit_test(test_other_points_do_nothing),
	    cmocka_unit_test(test_typos_end_the_process),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

static void test_points_do_nothing(void **state)
{
	(void)state;
	setenv("MCP_RELAY_FAILPOINTS", "stage.before-push=error,release.after-destroy=crash", 1);
	relay_error err;
	memset(&err, 0, sizeof err);
	RELAY_FAILPOINT("release.after-destroy");
	assert_int_equal(RELAY_FAILPOINT_ERROR("stage.before-push", &err), RELAY_OK);
	assert_string_equal(err.message, "");
}

/* The release binary holds no failpoint: the setting's name is not in it. */
static void test_the_server_holds_no_failpoint(void **state)
{
	(void)state;
	const char *build = getenv("RELAY_BUILD_DIR");
	if (build == NULL)
		skip();
	char path[4096];
	snprintf(path, sizeof path, "%s/mcp-relay", build);
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		skip();
	static const char needle[] = "MCP_RELAY_FAILPOINTS";
	char buf[1 << 16];
	size_t keep = 0, n;
	bool found = false;
	while (!found && (n = fread(buf + keep, 1, sizeof buf - keep, f)) > 0) {
		size_t len = keep + n;
		found = memmem(buf, len, needle, sizeof needle - 1) != NULL;
		keep = sizeof needle - 1 < len ? sizeof needle - 1 : len;
		memmove(buf, buf + len - keep, keep);
	}
	fclose(f);
	assert_false(found);
}

/* The receiver has no points either: a setting that would crash it does nothing. */
static void test_the_receiver_holds_no_failpoint(void **state)
{
	(void)state;
	char frame[4096];
	assert_int_equal(receiver_init("receiver.init.before-write=crash", frame, sizeof frame), 0);
	assert_non_null(strstr(frame, "\"created\":true"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_points_do_nothing),
	    cmocka_unit_test(test_the_receiver_holds_no_failpoint),
	    cmocka_unit_test(test_the_server_holds_no_failpoint),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
