/*
 * transfer-ssh connection handling against a real sshd
 * (transfer_ssh_fixture.h): a lease without "ssh", connection refused
 * (RELAY_E_TRANSIENT), a host key the lease's known_hosts does not list
 * (refused: strict checking), a key the guest does not accept, an exec
 * whose connection is gone before it starts (RELAY_E_TRANSIENT: nothing
 * ran) and one whose connection dies while the command runs
 * (RELAY_E_INDETERMINATE).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "transfer_ssh_fixture.h"

static const char *skip_reason;
static ssh_plugin_handle plugin;
/* The fixture a test started, stopped by the teardown even when the test
 * fails half-way (no sshd or folder is left behind). */
static ssh_fixture fx;
static bool fx_started;

static void start_fixture(void)
{
	int rc = ssh_fixture_start(&fx, NULL);
	fx_started = true;
	assert_int_equal(rc, 0);
}

static int teardown_fixture(void **state)
{
	(void)state;
	if (fx_started)
		ssh_fixture_stop(&fx);
	fx_started = false;
	return 0;
}

static int group_setup(void **state)
{
	(void)state;
	skip_reason = ssh_fixture_missing();
	if (skip_reason)
		return 0;
	return ssh_plugin_load(&plugin, "transfer-ssh", RELAY_KIND_TRANSPORT);
}

static int group_teardown(void **state)
{
	(void)state;
	if (!skip_reason)
		ssh_plugin_unload(&plugin);
	return 0;
}

#define SKIP_WITHOUT_SSHD() SSH_SKIP_IF(skip_reason)

#define assert_status(expr, expected)                                                                        \
	do {                                                                                                 \
		relay_status got_ = (expr);                                                                  \
		if (got_ != (expected))                                                                      \
			fprintf(stderr, "got %s: %s\n", relay_status_str(got_), err.message);                \
		assert_int_equal(got_, (expected));                                                          \
	} while (0)

static relay_status open_lease(const char *lease, relay_transport_conn **conn, relay_error *err)
{
	memset(err, 0, sizeof *err);
	*conn = NULL;
	return plugin.plugin->transport.open(plugin.plugin->state, lease, NULL, 0, conn, err);
}

static void close_conn(relay_transport_conn *conn)
{
	if (conn)
		plugin.plugin->transport.close(plugin.plugin->state, conn, 0);
}

static relay_status run(relay_transport_conn *conn, const char *const *argv, uint64_t timeout_ms,
                        relay_exec_result *res, relay_error *err)
{
	relay_exec_request req = {.struct_size = sizeof req, .argv = argv, .timeout_ms = timeout_ms};
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	memset(err, 0, sizeof *err);
	return plugin.plugin->transport.exec(plugin.plugin->state, conn, &req, NULL, 0, res, err);
}

static void test_lease_without_ssh(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_transport_conn *conn;
	relay_error err;
	assert_status(
	    open_lease("{\"vm\":\"x\",\"purpose\":\"p\",\"image\":\"i\",\"ssh\":null}", &conn, &err),
	    RELAY_E_UNSUPPORTED);
	assert_status(open_lease("not json", &conn, &err), RELAY_E_INVALID_ARGUMENT);
	assert_null(conn);
}

static void test_connection_refused_is_transient(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	start_fixture();
	ssh_fixture_stop_server(&fx); /* nothing listens on its port any more */
	relay_transport_conn *conn;
	relay_error err;
	assert_status(open_lease(fx.lease, &conn, &err), RELAY_E_TRANSIENT);
	assert_non_null(strstr(err.message, "Connection refused"));
	assert_null(conn);
}

static void test_unknown_host_key_is_refused(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	start_fixture();
	/* known_hosts now lists another key for the same address. */
	char cmd[512], other[160], text[700], pub[600];
	snprintf(other, sizeof other, "%s/other_host_key", fx.dir);
	snprintf(cmd, sizeof cmd, "ssh-keygen -q -t ed25519 -N '' -f %s", other);
	assert_int_equal(fixture_run(cmd), 0);
	strcat(other, ".pub");
	assert_int_equal(fixture_pubkey(other, pub, sizeof pub), 0);
	snprintf(text, sizeof text, "[127.0.0.1]:%d %s\n", fx.port, pub);
	fixture_write(fx.known_hosts, text);
	relay_transport_conn *conn;
	relay_error err;
	assert_status(open_lease(fx.lease, &conn, &err), RELAY_E_REFUSED);
	assert_non_null(strstr(err.message, "host key"));
	assert_non_null(strstr(err.message, fx.known_hosts));

	/* An empty known_hosts is just as refused: nothing is learnt. */
	fixture_write(fx.known_hosts, "");
	assert_status(open_lease(fx.lease, &conn, &err), RELAY_E_REFUSED);
	struct stat st;
	assert_int_equal(stat(fx.known_hosts, &st), 0);
	assert_int_equal(st.st_size, 0);
}

static void test_unaccepted_user_key_is_refused(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	start_fixture();
	char path[160];
	snprintf(path, sizeof path, "%s/authorized_keys", fx.dir);
	fixture_write(path, "");
	relay_transport_conn *conn;
	relay_error err;
	assert_status(open_lease(fx.lease, &conn, &err), RELAY_E_REFUSED);
	assert_non_null(strstr(err.message, "refused the key"));
}

static void test_exec_without_connection_is_transient(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	start_fixture();
	relay_transport_conn *conn;
	relay_error err;
	assert_status(open_lease(fx.lease, &conn, &err), RELAY_OK);
	relay_exec_result res;
	const char *const argv[] = {"true", NULL};
	assert_status(run(conn, argv, 20000, &res, &err), RELAY_OK);
	free(res.out);
	free(res.err);

	/* The server and the master's session die: the next exec cannot start. */
	char marker[256];
	snprintf(marker, sizeof marker, "%s/ran", fx.guest_root);
	ssh_fixture_stop_server(&fx);
	const char *const touch[] = {"touch", marker, NULL};
	assert_status(run(conn, touch, 20000, &res, &err), RELAY_E_TRANSIENT);
	assert_false(fixture_exists(marker));
	close_conn(conn);
}

typedef struct exec_thread {
	relay_transport_conn *conn;
	relay_status status;
	relay_error err;
	relay_exec_result res;
} exec_thread;

static void *long_exec(void *arg)
{
	exec_thread *t = arg;
	const char *const argv[] = {"sleep", "29715", NULL};
	t->status = run(t->conn, argv, 120000, &t->res, &t->err);
	return NULL;
}

static int sleeper_running(void)
{
	return fixture_run("grep -qsxa 'sleep.29715.' /proc/[0-9]*/cmdline 2>/dev/null") == 0;
}

static void test_connection_lost_while_running_is_indeterminate(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	start_fixture();
	exec_thread t = {0};
	relay_error err;
	assert_status(open_lease(fx.lease, &t.conn, &err), RELAY_OK);
	pthread_t thread;
	assert_int_equal(pthread_create(&thread, NULL, long_exec, &t), 0);
	for (int i = 0; i < 200 && !sleeper_running(); i++) {
		struct timespec ts = {0, 50 * 1000000};
		nanosleep(&ts, NULL);
	}
	assert_true(sleeper_running());
	ssh_fixture_stop_server(&fx); /* takes every session down with it */
	pthread_join(thread, NULL);
	err = t.err;
	assert_status(t.status, RELAY_E_INDETERMINATE);
	assert_non_null(strstr(t.err.message, "may have run"));
	free(t.res.out);
	free(t.res.err);
	close_conn(t.conn);
}

static void test_long_state_folder(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	/* A state folder far too deep for a 108-byte socket path: the plugin
	 * must put its control sockets somewhere short and still work. */
	char deep[256];
	snprintf(deep, sizeof deep, "%s/%s/%s", plugin.state_dir,
	         "a-rather-long-folder-name-for-the-state-of-this-plugin-instance",
	         "and-another-level-to-pass-the-unix-socket-limit-for-sure");
	assert_true(strlen(deep) > 108);
	char config[512];
	snprintf(config, sizeof config, "{\"stateDir\":\"%s\",\"options\":{}}", deep);
	char *path = loader_find_plugin("transfer-ssh", NULL);
	assert_non_null(path);
	plugin_registry second = {0};
	loaded_plugin *lp = NULL;
	relay_error err = {0};
	assert_status(loader_load(&second, path, RELAY_KIND_TRANSPORT, config, &lp, &err), RELAY_OK);
	free(path);
	start_fixture();
	relay_transport_conn *conn = NULL;
	assert_status(lp->transport.open(lp->state, fx.lease, NULL, 0, &conn, &err), RELAY_OK);
	const char *const argv[] = {"echo", "deep", NULL};
	relay_exec_request req = {.struct_size = sizeof req, .argv = argv, .timeout_ms = 20000};
	relay_exec_result res = {.struct_size = sizeof res};
	assert_status(lp->transport.exec(lp->state, conn, &req, NULL, 0, &res, &err), RELAY_OK);
	assert_string_equal(res.out, "deep\n");
	free(res.out);
	free(res.err);
	lp->transport.close(lp->state, conn, 0);
	loader_shutdown(&second);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_lease_without_ssh, teardown_fixture),
	    cmocka_unit_test_teardown(test_connection_refused_is_transient, teardown_fixture),
	    cmocka_unit_test_teardown(test_unknown_host_key_is_refused, teardown_fixture),
	    cmocka_unit_test_teardown(test_unaccepted_user_key_is_refused, teardown_fixture),
	    cmocka_unit_test_teardown(test_exec_without_connection_is_transient, teardown_fixture),
	    cmocka_unit_test_teardown(test_connection_lost_while_running_is_indeterminate, teardown_fixture),
	    cmocka_unit_test_teardown(test_long_state_folder, teardown_fixture),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
