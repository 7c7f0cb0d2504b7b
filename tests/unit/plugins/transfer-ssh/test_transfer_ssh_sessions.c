/*
 * transfer-ssh's warm spare sessions (plugins/transfer-ssh/ssh_session.h)
 * against a real sshd on 127.0.0.1 (transfer_ssh_fixture.h), through the
 * real loader: the plugin keeps `spareSessions` sessions started, an exec
 * takes the oldest and a replacement is started; `spareSessions: 0` keeps
 * none; a spare that died while waiting is dropped and the exec still
 * runs, exactly once; a guest whose sshd refuses more sessions
 * (MaxSessions) turns the spares off without failing an operation; an
 * option out of range is refused at load with its name and range.
 *
 * The spares are the plugin's `ssh` children that are still running: the
 * master forks itself into the background (`ssh -M -N -f`), so it is not a
 * child of this process, and every operation's own ssh has been reaped
 * when the operation returns.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "transfer_ssh_fixture.h"

#define MAX_CHILDREN 32

static ssh_fixture fx;
static const char *skip_reason;

#define SKIP_WITHOUT_SSHD() SSH_SKIP_IF(skip_reason)

static int group_setup(void **state)
{
	(void)state;
	skip_reason = ssh_fixture_missing();
	if (skip_reason)
		return 0;
	return ssh_fixture_start(&fx, NULL);
}

static int group_teardown(void **state)
{
	(void)state;
	if (!skip_reason)
		ssh_fixture_stop(&fx);
	return 0;
}

/* The pids of this process's live children called "ssh", sorted; their
 * count. */
static int ssh_children(pid_t out[MAX_CHILDREN])
{
	int n = 0;
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL && n < MAX_CHILDREN) {
		pid_t pid = (pid_t)atoi(de->d_name);
		if (pid <= 0)
			continue;
		char path[64], stat[512];
		snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		size_t len = fread(stat, 1, sizeof stat - 1, f);
		fclose(f);
		stat[len] = '\0';
		char *close_paren = strrchr(stat, ')');
		char state_char;
		int ppid;
		if (strncmp(strchr(stat, '(') ? strchr(stat, '(') : "", "(ssh)", 5) != 0 ||
		    close_paren == NULL || sscanf(close_paren + 1, " %c %d", &state_char, &ppid) != 2)
			continue;
		if (ppid == (int)getpid() && state_char != 'Z')
			out[n++] = pid;
	}
	if (d)
		closedir(d);
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
			pid_t t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

/* Waits (up to 10 s) until exactly `want` ssh children run; their count. */
static int wait_ssh_children(int want, pid_t out[MAX_CHILDREN])
{
	int n = 0;
	for (int i = 0; i < 200; i++) {
		n = ssh_children(out);
		if (n == want)
			break;
		usleep(50 * 1000);
	}
	return n;
}

typedef struct opened {
	ssh_plugin_handle plugin;
	relay_transport_conn *conn;
} opened;

static void open_with(opened *o, const ssh_fixture *server, const char *options_json)
{
	memset(o, 0, sizeof *o);
	assert_int_equal(
	    ssh_plugin_load_options(&o->plugin, "transfer-ssh", RELAY_KIND_TRANSPORT, options_json), 0);
	relay_error err = {0};
	relay_status st =
	    o->plugin.plugin->transport.open(o->plugin.plugin->state, server->lease, NULL, 0, &o->conn, &err);
	if (st != RELAY_OK)
		fail_msg("open failed: %s (%s)", err.message, relay_status_str(st));
}

static void close_opened(opened *o)
{
	if (o->conn)
		o->plugin.plugin->transport.close(o->plugin.plugin->state, o->conn, 0);
	ssh_plugin_unload(&o->plugin);
}

/* Runs `/bin/sh -c script` and checks it exits 0 printing `expect_out`. */
static void exec_expect(opened *o, const char *script, const char *expect_out)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	relay_exec_request req = {
	    .struct_size = sizeof req, .argv = argv, .timeout_ms = 30000, .max_output_bytes = 65536};
	relay_exec_result res = {.struct_size = sizeof res};
	relay_error err = {0};
	relay_status st =
	    o->plugin.plugin->transport.exec(o->plugin.plugin->state, o->conn, &req, NULL, 0, &res, &err);
	if (st != RELAY_OK)
		fail_msg("exec of %s failed: %s (%s)", script, err.message, relay_status_str(st));
	assert_int_equal(res.exit_code, 0);
	assert_int_equal(res.termination_confirmed, 0); /* a normal end is not swept (spec/guest.md §16.1) */
	assert_non_null(res.out);
	assert_string_equal(res.out, expect_out);
	free(res.out);
	free(res.err);
}

static bool contains_pid(const pid_t *pids, int n, pid_t pid)
{
	for (int i = 0; i < n; i++)
		if (pids[i] == pid)
			return true;
	return false;
}

static void test_spares_are_kept_taken_and_replaced(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	opened o;
	open_with(&o, &fx, "{\"spareSessions\":2}");
	pid_t before[MAX_CHILDREN], after[MAX_CHILDREN];
	assert_int_equal(wait_ssh_children(2, before), 2);
	for (int round = 0; round < 3; round++) {
		exec_expect(&o, "echo one; echo two", "one\ntwo\n");
		assert_int_equal(wait_ssh_children(2, after), 2);
		/* The exec took a waiting session: one of the two is gone and a
		 * new one waits in its place. */
		int kept = contains_pid(after, 2, before[0]) + contains_pid(after, 2, before[1]);
		assert_int_equal(kept, 1);
		memcpy(before, after, sizeof before);
	}
	close_opened(&o);
	assert_int_equal(wait_ssh_children(0, after), 0);
}

static void test_zero_spares_keeps_none(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	opened o;
	open_with(&o, &fx, "{\"spareSessions\":0}");
	exec_expect(&o, "printf cold", "cold");
	usleep(300 * 1000);
	pid_t pids[MAX_CHILDREN];
	assert_int_equal(ssh_children(pids), 0);
	close_opened(&o);
}

/* Each exec appends one line to a file: an exec handed to a dead spare
 * and then run again in a fresh session would append two. */
static void test_dead_spares_are_dropped_and_the_exec_runs_once(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	opened o;
	open_with(&o, &fx, "{\"spareSessions\":3}");
	pid_t pids[MAX_CHILDREN];
	assert_int_equal(wait_ssh_children(3, pids), 3);
	for (int i = 0; i < 3; i++)
		kill(pids[i], SIGKILL);
	usleep(100 * 1000);
	char script[256], expect[64];
	snprintf(script, sizeof script, "echo ran >> '%s/once' && wc -l < '%s/once'", fx.guest_root,
	         fx.guest_root);
	exec_expect(&o, script, "1\n");
	/* Killed spares were dropped, fresh ones started: three wait again. */
	pid_t now[MAX_CHILDREN];
	assert_int_equal(wait_ssh_children(3, now), 3);
	for (int i = 0; i < 3; i++)
		assert_false(contains_pid(pids, 3, now[i]));
	snprintf(expect, sizeof expect, "2\n");
	exec_expect(&o, script, expect);
	close_opened(&o);
}

/* sshd allows two sessions on the master's connection; four spares are
 * asked for. The refused ones turn the spares off and every operation
 * still runs (in a fresh session once the spares are gone). */
static void test_refused_sessions_turn_spares_off(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	ssh_fixture narrow;
	assert_int_equal(ssh_fixture_start(&narrow, "MaxSessions 2\n"), 0);
	opened o;
	open_with(&o, &narrow, "{\"spareSessions\":4}");
	usleep(500 * 1000); /* let sshd refuse the spares beyond two */
	for (int i = 0; i < 4; i++)
		exec_expect(&o, "echo still-runs", "still-runs\n");
	pid_t pids[MAX_CHILDREN];
	assert_int_equal(wait_ssh_children(0, pids), 0);
	/* Push and pull too run in fresh sessions now. */
	char local[256], back[256];
	snprintf(local, sizeof local, "%s/narrow-src", fx.dir);
	snprintf(back, sizeof back, "%s/narrow-back", fx.dir);
	assert_int_equal(fixture_random_file(local, 4096, 7, 0644), 0);
	char guest[256];
	snprintf(guest, sizeof guest, "%s/narrow-file", narrow.guest_root);
	relay_error err = {0};
	char *facts = NULL;
	relay_status st = o.plugin.plugin->transport.push(o.plugin.plugin->state, o.conn, local, guest, NULL,
	                                                  0, &facts, &err);
	free(facts);
	facts = NULL;
	if (st != RELAY_OK)
		fail_msg("push failed: %s (%s)", err.message, relay_status_str(st));
	st = o.plugin.plugin->transport.pull(o.plugin.plugin->state, o.conn, guest, back, NULL, 0, &facts,
	                                     &err);
	free(facts);
	if (st != RELAY_OK)
		fail_msg("pull failed: %s (%s)", err.message, relay_status_str(st));
	assert_int_equal(fixture_same_file(local, back), 1);
	close_opened(&o);
	ssh_fixture_stop(&narrow);
}

/* Bad options fail init naming the option, what it accepts and the
 * variable a deployment sets them in. */
static void test_bad_options_are_refused(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	static const struct {
		const char *options, *message;
	} bad[] = {
	    {"{\"spareSessions\":9}", "options.spareSessions must be a whole number from 0 to 8"},
	    {"{\"spareSessions\":-1}", "options.spareSessions must be a whole number from 0 to 8"},
	    {"{\"spareSessions\":\"4\"}", "options.spareSessions must be a whole number from 0 to 8"},
	    {"{\"connectTimeoutSeconds\":0}",
	     "options.connectTimeoutSeconds must be a whole number from 1 to 600"},
	    {"{\"spareSesions\":2}", "unknown transfer-ssh option spareSesions; accepted: ssh, "
	                             "connectTimeoutSeconds, controlPersistSeconds, spareSessions"},
	    {"{\"ssh\":42}", "options.ssh must be the ssh program, a non-empty string"},
	    {"{\"ssh\":\"\"}", "options.ssh must be the ssh program, a non-empty string"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ssh_plugin_handle h;
		assert_int_equal(
		    ssh_plugin_load_options(&h, "transfer-ssh", RELAY_KIND_TRANSPORT, bad[i].options), -1);
		if (strstr(h.load_error, bad[i].message) == NULL ||
		    strstr(h.load_error, "fix it in MCP_RELAY_TRANSFER_SSH_OPTIONS") == NULL)
			fail_msg("load error for %s does not say \"%s\" and where to fix it: %s",
			         bad[i].options, bad[i].message, h.load_error);
		ssh_plugin_unload(&h);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_spares_are_kept_taken_and_replaced),
	    cmocka_unit_test(test_zero_spares_keeps_none),
	    cmocka_unit_test(test_dead_spares_are_dropped_and_the_exec_runs_once),
	    cmocka_unit_test(test_refused_sessions_turn_spares_off),
	    cmocka_unit_test(test_bad_options_are_refused),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
