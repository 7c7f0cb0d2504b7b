/*
 * test_machine_local_reap — leases outlive their relay, and no longer than
 * that (root, real guests):
 *   - a relay killed with SIGKILL leaves its guest running (pause mode);
 *     a relay started later finds it, and reaps it once its TTL and grace
 *     have run out (the relay clock is moved forward for that);
 *   - a guest whose TTL has not run out is left alone by the restarted
 *     relay, which can renew, use and release it;
 *   - the reaper thread of a running relay destroys an expired guest;
 *   - with no relay at all, the guest init stops the guest itself once the
 *     lease's time, grace and backstop have passed.
 * A "relay" here is a child process that loads the plugin through the real
 * loader, acquires, reports the lease on a pipe and waits to be killed.
 */
#include <poll.h>
#include <signal.h>

#include "machine_local_fixture.h"
#include "util/clock.h"

/* Relay children still running when a test fails (test thread only). */
static pid_t g_children[8];

static int reap_teardown(void **state)
{
	for (size_t i = 0; i < sizeof g_children / sizeof g_children[0]; i++)
		if (g_children[i] > 0) {
			kill(g_children[i], SIGKILL);
			waitpid(g_children[i], NULL, 0);
			g_children[i] = 0;
		}
	clock_set_offset_ms(0);
	return ml_teardown(state);
}

/* Forks a relay that acquires `guest` with `ttl_ms` and the plugin options,
 * then waits. Returns its pid; *lease_out gets the lease (free). */
static pid_t relay_child(const char *state_dir, const char *options, const char *guest, int64_t ttl_ms,
                         char **lease_out)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		ml_env e;
		ml_load_in(&e, options, state_dir);
		char extra[64];
		snprintf(extra, sizeof extra, "\"ttlMs\":%lld", (long long)ttl_ms);
		relay_error err;
		relay_status s;
		char *lease = ml_acquire_ex(&e, guest, "local", extra, &s, &err);
		const char *text = lease ? lease : "";
		size_t len = strlen(text);
		if (write(p[1], text, len) != (ssize_t)len)
			_exit(3);
		close(p[1]);
		for (;;)
			pause();
	}
	close(p[1]);
	size_t cap = 1 << 16, len = 0;
	char *buf = calloc(1, cap);
	ssize_t n;
	while ((n = read(p[0], buf + len, cap - len - 1)) > 0)
		len += (size_t)n;
	close(p[0]);
	buf[len] = '\0';
	if (len == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		fail_msg("the relay child could not acquire %s", guest);
	}
	*lease_out = buf;
	for (size_t i = 0; i < sizeof g_children / sizeof g_children[0]; i++)
		if (g_children[i] == 0) {
			g_children[i] = pid;
			break;
		}
	return pid;
}

static void kill_relay(pid_t pid)
{
	for (size_t i = 0; i < sizeof g_children / sizeof g_children[0]; i++)
		if (g_children[i] == pid)
			g_children[i] = 0;
	assert_int_equal(kill(pid, SIGKILL), 0);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static void assert_guest_gone(ml_env *e, const char *lease)
{
	pid_t init = (pid_t)ml_local_int(lease, "initPid");
	char dir[512];
	ml_local_str(lease, "leaseDir", dir, sizeof dir);
	assert_false(ml_pid_alive(init));
	assert_false(fs_exists_nofollow(dir));
	assert_false(ml_mountinfo_mentions(dir));
	relay_error err;
	char *check = NULL;
	if (e->p->machine.verify_destroyed(e->p->state, lease, NULL, 0, &check, &err) != RELAY_OK)
		fail_msg("not destroyed: %s", err.message);
	free(check);
}

static void test_sigkilled_relay_restart_reaps_expired(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	char dir[] = "/var/tmp/ml-reap-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char *lease = NULL;
	pid_t relay = relay_child(dir, "{\"graceMs\":0}", "reap-1", 60000, &lease);
	pid_t init = (pid_t)ml_local_int(lease, "initPid");
	assert_true(ml_pid_alive(init));
	kill_relay(relay);
	/* The guest does not die with its relay. */
	usleep(300000);
	assert_true(ml_pid_alive(init));

	/* A relay started after the lease's TTL (and zero grace) ran out. */
	clock_set_offset_ms(10 * 60 * 1000);
	ml_env e;
	ml_load_in(&e, "{\"graceMs\":0}", dir);
	assert_guest_gone(&e, lease);
	clock_set_offset_ms(0);
	free(lease);
	ml_unload(&e, true);
}

static void test_restart_keeps_unexpired_guest(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	char dir[] = "/var/tmp/ml-reap-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char *lease = NULL;
	pid_t relay = relay_child(dir, NULL, "keep-1", 10 * 60 * 1000, &lease);
	pid_t init = (pid_t)ml_local_int(lease, "initPid");
	kill_relay(relay);

	ml_env e;
	ml_load_in(&e, NULL, dir);
	assert_true(ml_pid_alive(init));
	relay_error err;
	char *found = NULL;
	json_object *doc = ml_parse(lease);
	assert_int_equal(
	    e.p->machine.find_by_purpose(e.p->state, jsonx_get_str(doc, "purpose"), NULL, 0, &found, &err),
	    RELAY_OK);
	json_object *arr = ml_parse(found);
	assert_int_equal(json_object_array_length(arr), 1);
	json_object_put(arr);
	free(found);
	json_object_put(doc);
	/* The new relay takes it over: renew, use, release. */
	char *renewed = NULL;
	assert_int_equal(e.p->machine.renew(e.p->state, lease, 900000, NULL, 0, &renewed, &err), RELAY_OK);
	json_object *rdoc = ml_parse(renewed);
	int64_t owner = 0;
	jsonx_get_int(jsonx_get_obj(jsonx_get_obj(rdoc, "record"), "owner"), "pid", &owner);
	assert_int_equal(owner, getpid());
	json_object_put(rdoc);
	free(renewed);
	relay_transport_conn *c = ml_open(&e, lease);
	char *out = NULL;
	assert_int_equal(ml_sh(&e, c, "hostname", &out), 0);
	assert_string_equal(out, "keep-1\n");
	free(out);
	e.p->transport.close(e.p->state, c, 0);
	ml_release(&e, lease);
	assert_guest_gone(&e, lease);
	free(lease);
	ml_unload(&e, true);
}

static void test_reaper_thread_destroys_expired(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	ml_env e;
	ml_load(&e, "{\"graceMs\":0,\"reaperIntervalMs\":200}");
	char *expiring = ml_acquire(&e, "exp-1", NULL);
	char *kept = ml_acquire(&e, "exp-2", NULL);
	/* exp-2 is renewed far ahead first; then the relay clock passes exp-1's TTL. */
	relay_error err;
	char *renewed = NULL;
	assert_int_equal(e.p->machine.renew(e.p->state, kept, 3 * 3600 * 1000, NULL, 0, &renewed, &err),
	                 RELAY_OK);
	free(renewed);
	clock_set_offset_ms(3600 * 1000);
	pid_t init = (pid_t)ml_local_int(expiring, "initPid");
	for (int i = 0; i < 300 && ml_pid_alive(init); i++)
		usleep(100000);
	char dir[512];
	ml_local_str(expiring, "leaseDir", dir, sizeof dir);
	for (int i = 0; i < 100 && fs_exists_nofollow(dir); i++)
		usleep(100000);
	assert_guest_gone(&e, expiring);
	assert_true(ml_pid_alive((pid_t)ml_local_int(kept, "initPid")));
	clock_set_offset_ms(0);
	ml_release(&e, kept);
	free(expiring);
	free(kept);
	ml_unload(&e, true);
}

static void test_guest_stops_itself_without_relay(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	char dir[] = "/var/tmp/ml-reap-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char *lease = NULL;
	pid_t relay = relay_child(dir, "{\"graceMs\":0,\"backstopMs\":0,\"reaperIntervalMs\":600000}",
	                          "self-1", 1500, &lease);
	pid_t init = (pid_t)ml_local_int(lease, "initPid");
	int64_t helper = 0;
	json_object *doc = ml_parse(lease);
	jsonx_get_int(jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(doc, "local"), "pids"), "helper"), "pid",
	              &helper);
	json_object_put(doc);
	kill_relay(relay);
	/* The init checks its lease every second: TTL 1.5 s, no grace, no backstop. */
	for (int i = 0; i < 150 && ml_pid_alive(init); i++)
		usleep(100000);
	assert_false(ml_pid_alive(init));
	/* slirp4netns leaves with it (its exit descriptor was held by the init). */
	if (helper > 0) {
		for (int i = 0; i < 50 && ml_pid_alive((pid_t)helper); i++)
			usleep(100000);
		assert_false(ml_pid_alive((pid_t)helper));
	}
	/* What is left on disk is removed by the next relay. */
	ml_env e;
	ml_load_in(&e, NULL, dir);
	assert_guest_gone(&e, lease);
	free(lease);
	ml_unload(&e, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_sigkilled_relay_restart_reaps_expired, reap_teardown),
	    cmocka_unit_test_teardown(test_restart_keeps_unexpired_guest, reap_teardown),
	    cmocka_unit_test_teardown(test_reaper_thread_destroys_expired, reap_teardown),
	    cmocka_unit_test_teardown(test_guest_stops_itself_without_relay, reap_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
