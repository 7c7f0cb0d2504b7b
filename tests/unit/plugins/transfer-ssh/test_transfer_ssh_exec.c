/*
 * transfer-ssh exec() against a real sshd on 127.0.0.1 (see
 * transfer_ssh_fixture.h), through the real loader: exit codes, argv
 * quoting, environment, working folder, timeouts that kill a whole process
 * tree with confirmation, output caps (killing and tail-keeping), merged
 * output order, stdin from /dev/null and concurrent execs on one
 * connection.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "transfer_ssh_fixture.h"

typedef struct exec_suite {
	ssh_fixture fx;
	ssh_plugin_handle plugin;
	relay_transport_conn *conn;
	const char *skip_reason;
} exec_suite;

static exec_suite suite;

static int group_setup(void **state)
{
	(void)state;
	suite.skip_reason = ssh_fixture_missing();
	if (suite.skip_reason)
		return 0;
	if (ssh_fixture_start(&suite.fx, NULL) != 0 ||
	    ssh_plugin_load(&suite.plugin, "transfer-ssh", RELAY_KIND_TRANSPORT) != 0)
		return -1;
	relay_error err = {0};
	relay_status st = suite.plugin.plugin->transport.open(suite.plugin.plugin->state, suite.fx.lease,
	                                                      NULL, 0, &suite.conn, &err);
	if (st != RELAY_OK) {
		fprintf(stderr, "open failed: %s (%s)\n", err.message, relay_status_str(st));
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (suite.skip_reason)
		return 0;
	if (suite.conn)
		suite.plugin.plugin->transport.close(suite.plugin.plugin->state, suite.conn, 0);
	ssh_plugin_unload(&suite.plugin);
	ssh_fixture_stop(&suite.fx);
	return 0;
}

#define SKIP_WITHOUT_SSHD() SSH_SKIP_IF(suite.skip_reason)

static relay_status run(const char *const *argv, const char *cwd, const char *const *envp,
                        uint64_t timeout_ms, size_t max_output, unsigned flags, relay_exec_result *res,
                        relay_error *err)
{
	relay_exec_request req = {
	    .struct_size = sizeof req,
	    .argv = argv,
	    .cwd = cwd,
	    .envp = envp,
	    .timeout_ms = timeout_ms,
	    .max_output_bytes = max_output,
	};
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	memset(err, 0, sizeof *err);
	return suite.plugin.plugin->transport.exec(suite.plugin.plugin->state, suite.conn, &req, NULL, flags,
	                                           res, err);
}

static void release(relay_exec_result *res)
{
	free(res->out);
	free(res->err);
	res->out = res->err = NULL;
}

/* Processes on this machine (the guest is localhost) whose argv is
 * exactly {"sleep", marker}. */
static int count_sleepers(const char *marker)
{
	int count = 0;
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		int pid = atoi(de->d_name);
		if (pid <= 0)
			continue;
		char path[64], buf[256];
		snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
		int fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		char expect[64];
		int elen = snprintf(expect, sizeof expect, "sleep%c%s", '\0', marker);
		if (n == elen + 1 && memcmp(buf, expect, (size_t)elen) == 0) {
			/* Zombies have an empty cmdline, so this is a live one. */
			count++;
		}
	}
	if (d)
		closedir(d);
	return count;
}

static void test_exit_codes(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	const char *const seven[] = {"sh", "-c", "exit 7", NULL};
	assert_int_equal(run(seven, NULL, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 7);
	assert_int_equal(res.timed_out, 0);
	/* A normal end is not swept nor looked at (spec/guest.md §16.1): not confirmed. */
	assert_int_equal(res.termination_confirmed, 0);
	release(&res);

	const char *const ok[] = {"true", NULL};
	assert_int_equal(run(ok, NULL, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(res.out_len, 0);
	release(&res);

	const char *const missing[] = {"relay-no-such-program-here", "x", NULL};
	assert_int_equal(run(missing, NULL, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 127);
	release(&res);
}

static void test_argv_quoting(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	const char *const argv[] = {"printf", "[%s]\\n", "a b",   "it's", "$HOME",
	                            "x\ny",   "*",       "\"q\"", "",     NULL};
	assert_int_equal(run(argv, NULL, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "[a b]\n[it's]\n[$HOME]\n[x\ny]\n[*]\n[\"q\"]\n[]\n");
	release(&res);
}

static void test_environment(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	const char *const argv[] = {"sh", "-c", "printf '%s|%s|%s' \"$RELAY_T1\" \"$RELAY_T2\" \"$RELAY_T3\"",
	                            NULL};
	const char *const envp[] = {"RELAY_T1=hello world", "RELAY_T2=it's $x", "RELAY_T3=", NULL};
	assert_int_equal(run(argv, NULL, envp, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "hello world|it's $x|");
	release(&res);

	const char *const bad_env[] = {"NOT VALID=1", NULL};
	assert_int_equal(run(argv, NULL, bad_env, 20000, 0, 0, &res, &err), RELAY_E_INVALID_ARGUMENT);
}

static void test_working_folder(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	char cwd[128];
	snprintf(cwd, sizeof cwd, "%s/work dir", suite.fx.guest_root);
	mkdir(cwd, 0700);
	const char *const argv[] = {"pwd", NULL};
	assert_int_equal(run(argv, cwd, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	char expect[160];
	snprintf(expect, sizeof expect, "%s\n", cwd);
	assert_string_equal(res.out, expect);
	release(&res);

	char missing[160];
	snprintf(missing, sizeof missing, "%s/no-such-folder", suite.fx.guest_root);
	assert_int_equal(run(argv, missing, NULL, 20000, 0, 0, &res, &err), RELAY_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "no-such-folder"));
	release(&res);
}

static void test_timeout_kills_tree(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	/* Children, a grandchild whose parent already left, and a TERM-proof one. */
	const char *const argv[] = {
	    "sh", "-c",
	    "sleep 29713 & sleep 29713 & (sleep 29713 &) ; sh -c 'trap \"\" TERM HUP; sleep 29713' & "
	    "echo started; wait",
	    NULL};
	assert_int_equal(count_sleepers("29713"), 0);
	assert_int_equal(run(argv, NULL, NULL, 1500, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.timed_out, 1);
	assert_int_equal(res.exit_code, -1);
	assert_int_equal(res.signal, SIGKILL);
	assert_int_equal(res.termination_confirmed, 1);
	assert_string_equal(res.out, "started\n");
	assert_int_equal(count_sleepers("29713"), 0);
	release(&res);
}

/* What a command leaves running when it exits on its own keeps running
 * (spec/guest.md §16.1 item 7), and the exec does not wait for it. */
static void test_normal_exit_leaves_background_running(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	assert_int_equal(system("pkill -f 'sleep 2971[45]'; true"), 0); /* an earlier failed run's */
	const char *const quiet[] = {"sh", "-c", "sleep 29714 >/dev/null 2>&1 & echo bye", NULL};
	assert_int_equal(run(quiet, NULL, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(res.termination_confirmed, 0);
	assert_string_equal(res.out, "bye\n");
	assert_int_equal(count_sleepers("29714"), 1);
	release(&res);
	/* One that keeps the output open is not waited for either. */
	const char *const holding[] = {"sh", "-c", "sleep 29715 & echo bye", NULL};
	assert_int_equal(run(holding, NULL, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "bye\n");
	assert_int_equal(count_sleepers("29715"), 1);
	release(&res);
	const char *const kill_them[] = {"sh", "-c", "pkill -f 'sleep 2971[45]'; true", NULL};
	assert_int_equal(run(kill_them, NULL, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	release(&res);
}

/* ABI 1.1 RELAY_EXEC_STDIO_BYTES over ssh: bytes on standard input (NULs,
 * a megabyte, more than a pipe holds), standard output back byte for byte. */
static void test_stdio_bytes(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	size_t big = (1u << 20) + 17;
	char *data = malloc(big);
	for (size_t i = 0; i < big; i++)
		data[i] = (char)(i * 13);
	const char *const cat[] = {"sh", "-c", "cat; echo to-stderr >&2", NULL};
	relay_exec_request req = {.struct_size = sizeof req,
	                          .argv = cat,
	                          .timeout_ms = 60000,
	                          .stdin_data = data,
	                          .stdin_len = big};
	relay_exec_result res = {.struct_size = sizeof res};
	relay_error err;
	assert_int_equal(suite.plugin.plugin->transport.exec(suite.plugin.plugin->state, suite.conn, &req,
	                                                     NULL, RELAY_EXEC_STDIO_BYTES, &res, &err),
	                 RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(res.out_len, big);
	assert_memory_equal(res.out, data, big);
	assert_string_equal(res.err, "to-stderr\n");
	release(&res);
	/* No bytes: the command reads end of file at once. */
	req.stdin_data = NULL;
	req.stdin_len = 0;
	const char *const wc[] = {"wc", "-c", NULL};
	req.argv = wc;
	memset(&res, 0, sizeof res);
	res.struct_size = sizeof res;
	assert_int_equal(suite.plugin.plugin->transport.exec(suite.plugin.plugin->state, suite.conn, &req,
	                                                     NULL, RELAY_EXEC_STDIO_BYTES, &res, &err),
	                 RELAY_OK);
	assert_int_equal(atoi(res.out), 0);
	release(&res);
	free(data);
}

static void test_output_cap_kills(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	const char *const argv[] = {"yes", "relay-overflow", NULL};
	assert_int_equal(run(argv, NULL, NULL, 60000, 1000, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.output_truncated, 1);
	assert_int_equal(res.out_len, 1000);
	assert_int_equal(res.timed_out, 0);
	assert_int_equal(res.signal, SIGKILL);
	assert_int_equal(res.termination_confirmed, 1);
	assert_memory_equal(res.out, "relay-overflow\nrelay-overflow\n", 30);
	release(&res);
}

static void test_output_cap_counts_both_streams(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	/* 600 bytes to each stream: 1200 together pass a 1000-byte cap. */
	const char *const argv[] = {
	    "sh", "-c",
	    "head -c 600 /dev/zero | tr '\\0' o; head -c 600 /dev/zero | tr '\\0' e >&2; sleep 30", NULL};
	assert_int_equal(run(argv, NULL, NULL, 60000, 1000, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.output_truncated, 1);
	assert_int_equal(res.out_len + res.err_len, 1000);
	assert_int_equal(res.timed_out, 0);
	assert_int_equal(res.termination_confirmed, 1);
	release(&res);
}

static void test_output_tail(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	const char *const argv[] = {"sh", "-c", "seq 1 50000; echo END", NULL};
	assert_int_equal(
	    run(argv, NULL, NULL, 60000, 100, RELAY_EXEC_KEEP_TAIL | RELAY_EXEC_MERGE_OUTPUT, &res, &err),
	    RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(res.output_truncated, 1);
	assert_int_equal(res.out_len, 100);
	assert_null(res.err);
	const char *tail = "49998\n49999\n50000\nEND\n";
	assert_string_equal(res.out + res.out_len - strlen(tail), tail);
	release(&res);
}

static void test_merged_order(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	const char *const argv[] = {
	    "sh", "-c", "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; sleep 0.3; echo four >&2",
	    NULL};
	assert_int_equal(run(argv, NULL, NULL, 20000, 0, RELAY_EXEC_MERGE_OUTPUT, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "one\ntwo\nthree\nfour\n");
	assert_null(res.err);
	release(&res);

	assert_int_equal(run(argv, NULL, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_string_equal(res.out, "one\nthree\n");
	assert_string_equal(res.err, "two\nfour\n");
	release(&res);
}

static void test_stdin_is_dev_null(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	const char *const argv[] = {"sh", "-c", "cat; readlink /proc/self/fd/0", NULL};
	assert_int_equal(run(argv, NULL, NULL, 20000, 0, 0, &res, &err), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "/dev/null\n");
	release(&res);
}

typedef struct worker {
	int index;
	relay_status status;
	char out[64];
	int exit_code;
} worker;

static void *concurrent_worker(void *arg)
{
	worker *w = arg;
	char script[64];
	snprintf(script, sizeof script, "sleep 1; echo worker-%d", w->index);
	const char *const argv[] = {"sh", "-c", script, NULL};
	relay_exec_result res;
	relay_error err;
	w->status = run(argv, NULL, NULL, 60000, 0, 0, &res, &err);
	if (w->status == RELAY_OK) {
		snprintf(w->out, sizeof w->out, "%s", res.out);
		w->exit_code = res.exit_code;
	}
	release(&res);
	return NULL;
}

static void test_concurrent_execs(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	assert_true(suite.plugin.plugin->transport.traits & RELAY_TRANSPORT_CONCURRENT);
	enum { N = 6 };
	pthread_t threads[N];
	worker workers[N];
	for (int i = 0; i < N; i++) {
		workers[i] = (worker){.index = i, .status = RELAY_E_INTERNAL};
		assert_int_equal(pthread_create(&threads[i], NULL, concurrent_worker, &workers[i]), 0);
	}
	for (int i = 0; i < N; i++)
		pthread_join(threads[i], NULL);
	for (int i = 0; i < N; i++) {
		char expect[32];
		snprintf(expect, sizeof expect, "worker-%d\n", i);
		assert_int_equal(workers[i].status, RELAY_OK);
		assert_int_equal(workers[i].exit_code, 0);
		assert_string_equal(workers[i].out, expect);
	}
}

static void test_refuses_bad_requests(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_exec_result res;
	relay_error err;
	const char *const argv[] = {"true", NULL};
	assert_int_equal(run(argv, NULL, NULL, 0, 0, 0, &res, &err), RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(run(argv, "relative", NULL, 1000, 0, 0, &res, &err), RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(run(argv, NULL, NULL, 1000, 0, 0x80, &res, &err), RELAY_E_UNSUPPORTED_FLAGS);
	const char *const eq[] = {"A=B", NULL};
	assert_int_equal(run(eq, NULL, NULL, 1000, 0, 0, &res, &err), RELAY_E_INVALID_ARGUMENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exit_codes),
	    cmocka_unit_test(test_argv_quoting),
	    cmocka_unit_test(test_environment),
	    cmocka_unit_test(test_working_folder),
	    cmocka_unit_test(test_timeout_kills_tree),
	    cmocka_unit_test(test_normal_exit_leaves_background_running),
	    cmocka_unit_test(test_stdio_bytes),
	    cmocka_unit_test(test_output_cap_kills),
	    cmocka_unit_test(test_output_cap_counts_both_streams),
	    cmocka_unit_test(test_output_tail),
	    cmocka_unit_test(test_merged_order),
	    cmocka_unit_test(test_stdin_is_dev_null),
	    cmocka_unit_test(test_concurrent_execs),
	    cmocka_unit_test(test_refuses_bad_requests),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
