/* machine-docker without an engine: the real plugin through the real loader
 * (its options refused by name, its flag and input checks, an endpoint
 * with nothing behind it), and its static guest program run on this host
 * (exec gives the command a process group of its own and records it; kill
 * ends that whole group and confirms it). The engine paths are the
 * integration tests' (tests/integration/test_docker_*.py). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "loader/loader.h"
#include "util/jsonx.h"

static char g_dir[4096];

static int setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof g_dir, "/tmp/md-unit-XXXXXX");
	assert_non_null(mkdtemp(g_dir));
	char plugins[4096];
	snprintf(plugins, sizeof plugins, "%s/lib/mcp-relay/plugins", getenv("RELAY_BUILD_DIR"));
	setenv("MCP_RELAY_PLUGIN_PATH", plugins, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Loads machine-docker with `options`; returns the status, fills err. */
static relay_status load(plugin_registry *reg, const char *options, loaded_plugin **out, relay_error *err)
{
	relay_error e;
	char *path = loader_find_plugin("machine-docker", &e);
	assert_non_null(path);
	char cfg[8192];
	snprintf(cfg, sizeof cfg, "{\"stateDir\":\"%s/state\",\"guestNetwork\":\"nat\",\"options\":%s}",
	         g_dir, options);
	char sd[4200];
	snprintf(sd, sizeof sd, "%s/state", g_dir);
	mkdir(sd, 0700);
	memset(reg, 0, sizeof *reg);
	memset(err, 0, sizeof *err);
	relay_status s = loader_load(reg, path, RELAY_KIND_MACHINE, cfg, out, err);
	free(path);
	return s;
}

static void expect_refused(const char *options, const char *message)
{
	plugin_registry reg;
	loaded_plugin *p = NULL;
	relay_error err;
	assert_int_not_equal(load(&reg, options, &p, &err), RELAY_OK);
	if (strstr(err.message, message) == NULL)
		fail_msg("options %s: wanted \"%s\" in \"%s\"", options, message, err.message);
	loader_shutdown(&reg);
}

static void test_options_refused_by_name(void **state)
{
	(void)state;
	expect_refused("{\"colour\":1}", "unknown machine-docker option colour");
	expect_refused("{\"endpoint\":\"tcp://10.0.0.1:2375\"}", "needs TLS client certificates");
	expect_refused("{\"endpoint\":\"unix://relative.sock\"}", "must be unix:///absolute/path");
	expect_refused("{\"endpoint\":\"ssh://-oProxyCommand=x@h\"}", "must look like ssh://user@host");
	expect_refused("{\"endpoint\":\"ssh://u@h\"}",
	               "needs options.ssh.identityFile and options.ssh.knownHostsFile");
	expect_refused("{\"ssh\":{\"identityFile\":\"/k\"}}", "options.ssh is only for an ssh:// endpoint");
	expect_refused("{\"images\":{\"-x\":\"a\"}}", "-x is not a valid image key");
	expect_refused("{\"images\":{\"k\":\"a b\"}}", "options.images.k must be an image reference");
	expect_refused("{\"maxGuests\":300}", "options.maxGuests must be a whole number from 1 to 256");
	expect_refused("{\"guestUser\":{\"uid\":0}}", "options.guestUser must be");
	expect_refused("{\"limits\":{\"disk\":1}}", "options.limits.disk is unknown");
	expect_refused("{\"screen\":\"10x10x24\"}", "options.screen must look like 1280x800x24");
	expect_refused("{\"swarm\":\"yes\"}", "options.swarm must be true");
	expect_refused("{\"endpoint\":\"tcp://10.0.0.1\"}", "must look like tcp://host:port");
	expect_refused("{\"endpoint\":\"tcp://10.0.0.1:2376\",\"tls\":{\"caFile\":\"/nonexistent/ca.pem\"}}",
	               "needs TLS client certificates");
	expect_refused("{\"endpoint\":\"tcp://10.0.0.1:2376\",\"tls\":{\"caFile\":\"/nonexistent/ca.pem\","
	               "\"certFile\":\"/nonexistent/cert.pem\",\"keyFile\":\"/nonexistent/key.pem\"}}",
	               "options.tls: /nonexistent/ca.pem cannot be read");
	expect_refused("{\"tls\":{\"caFile\":\"/ca.pem\"}}", "options.tls is only for a tcp:// endpoint");
	expect_refused("{\"endpoint\":\"tcp://h:1\",\"tls\":{\"pin\":\"/x\"}}", "options.tls.pin is unknown");
}

static void test_no_engine_and_input_checks(void **state)
{
	(void)state;
	char opts[4400];
	snprintf(opts, sizeof opts,
	         "{\"endpoint\":\"unix://%s/absent.sock\",\"images\":{\"deb\":\"debian:12\"}}", g_dir);
	plugin_registry reg;
	loaded_plugin *p = NULL;
	relay_error err;
	assert_int_equal(load(&reg, opts, &p, &err), RELAY_OK);
	assert_true(p->descriptor.kinds & RELAY_KIND_TRANSPORT);
	assert_true(p->transport.traits & RELAY_TRANSPORT_STDIO_BYTES);

	/* The typed console answers capabilities without an engine: a unix://
	 * endpoint is on this host, so linux is offered to root (who can enter a
	 * container's network namespace); macos never. No string slot. */
	char *out = NULL;
	assert_null(p->machine.console);
	const relay_machine_console_ops *console = p->machine.console_ops;
	assert_non_null(console);
	assert_int_equal(console->capabilities(p->state, NULL, 0, &out, &err), RELAY_OK);
	assert_non_null(strstr(out, "not-offered-by-machine-docker"));
	if (geteuid() == 0)
		assert_non_null(strstr(out, "\"available\":true,\"status\":\"configured\""));
	free(out);
	out = NULL;
	assert_int_equal(console->open(p->state, "{}", "c", "a1", NULL, 0, &out, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message, "console open needs a lease document naming its vm");
	assert_null(out);
	assert_int_equal(console->resolve(p->state, "{}", NULL, 0x4, &out, &err), RELAY_E_UNSUPPORTED_FLAGS);
	assert_null(out);

	/* Nothing at the endpoint: unavailable, naming it and how to start one. */
	assert_int_equal(p->machine.health(p->state, NULL, 0, &out, &err), RELAY_E_UNAVAILABLE);
	assert_non_null(strstr(err.message, "absent.sock"));
	assert_non_null(strstr(err.message, "podman system service"));
	assert_int_equal(p->machine.acquire(p->state,
	                                    "{\"guest\":\"g-1\",\"task\":\"g\",\"purpose\":\"relay-g-0000\","
	                                    "\"image\":\"deb\",\"ttlMs\":60000}",
	                                    NULL, 0, &out, &err),
	                 RELAY_E_UNAVAILABLE);
	/* A definite failure leaves no intent behind. */
	char rec[4400];
	snprintf(rec, sizeof rec, "%s/state/leases/relay-g-0000.json", g_dir);
	assert_int_equal(access(rec, F_OK), -1);

	/* Refusals before anything is asked of the engine. */
	assert_int_equal(
	    p->machine.acquire(p->state, "{\"guest\":\"g-1\",\"purpose\":\"relay-g-1\",\"image\":\"nope\"}",
	                       NULL, 0, &out, &err),
	    RELAY_E_IMAGE_UNAVAILABLE);
	assert_non_null(strstr(err.message, "configured: deb"));
	/* internet (and allow): NetworkMode none with the relay's egress proxy;
	 * an engine on this host and a root relay pass the checks and reach
	 * the engine (here: none). */
	assert_int_equal(p->machine.acquire(p->state,
	                                    "{\"guest\":\"g-1\",\"purpose\":\"relay-g-2\",\"image\":\"deb\","
	                                    "\"network\":\"internet\"}",
	                                    NULL, 0, &out, &err),
	                 geteuid() == 0 ? RELAY_E_UNAVAILABLE : RELAY_E_REFUSED);
	if (geteuid() != 0)
		assert_non_null(strstr(err.message, "a relay that is not root cannot make the egress proxy"));
	assert_int_equal(p->machine.acquire(p->state, "{}", NULL, 1, &out, &err), RELAY_E_UNSUPPORTED_FLAGS);
	assert_int_equal(p->machine.acquire(p->state, "[1]", NULL, 0, &out, &err), RELAY_E_INVALID_ARGUMENT);

	/* The transport reaches only machine-docker leases, and checks its flags. */
	relay_transport_conn *conn = NULL;
	assert_int_equal(p->transport.open(p->state, "{\"vm\":\"x\"}", NULL, 0, &conn, &err),
	                 RELAY_E_UNSUPPORTED);
	assert_int_equal(
	    p->transport.open(p->state,
	                      "{\"vm\":\"x\",\"docker\":{\"container\":\"x\",\"user\":\"61000:61000\"}}",
	                      NULL, 0, &conn, &err),
	    RELAY_OK);
	const char *argv[] = {"true", NULL};
	relay_exec_request req = {.struct_size = sizeof req, .argv = argv, .timeout_ms = 1000};
	relay_exec_result res = {.struct_size = sizeof res};
	assert_int_equal(p->transport.exec(p->state, conn, &req, NULL, 0x80, &res, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
	assert_int_equal(p->transport.exec(p->state, conn, &req, NULL,
	                                   RELAY_EXEC_STDIO_BYTES | RELAY_EXEC_MERGE_OUTPUT, &res, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	/* An exec that cannot reach the engine never started: safe to retry. */
	assert_int_equal(p->transport.exec(p->state, conn, &req, NULL, 0, &res, &err), RELAY_E_TRANSIENT);
	assert_int_equal(
	    p->transport.push(p->state, conn, "/etc/hostname", "/var/tmp/../x", NULL, 0, NULL, &err),
	    RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(p->transport.pull(p->state, conn, "/x", "/etc/hostname", NULL, 0, NULL, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	p->transport.close(p->state, conn, 0);

	/* doctor still answers, with the endpoint's fix. */
	assert_int_equal(p->machine.doctor(p->state, NULL, 0, &out, &err), RELAY_OK);
	assert_non_null(strstr(out, "\"check\":\"endpoint\""));
	assert_non_null(strstr(out, "\"ok\":false"));
	free(out);
	loader_shutdown(&reg);
}

/* ---- the guest program ------------------------------------------------------- */

static const char *guest_program(void)
{
	static char path[4096];
	snprintf(path, sizeof path, "%s/plugins/machine-docker/machine-docker-guest",
	         getenv("RELAY_BUILD_DIR"));
	return path;
}

static pid_t read_pid(const char *file)
{
	for (int i = 0; i < 500; i++) {
		FILE *f = fopen(file, "r");
		int pid = 0;
		if (f) {
			int n = fscanf(f, "%d", &pid);
			fclose(f);
			if (n == 1 && pid > 1)
				return (pid_t)pid;
		}
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void test_guest_program_groups_and_kills(void **state)
{
	(void)state;
	char pidfile[4200];
	snprintf(pidfile, sizeof pidfile, "%s/exec.pid", g_dir);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		execl(guest_program(), guest_program(), "exec", pidfile, "/bin/sh", "-c",
		      "sleep 300 & sh -c 'sleep 301' & sleep 302", (char *)NULL);
		_exit(126);
	}
	pid_t pgid = read_pid(pidfile);
	assert_true(pgid > 1);
	/* Its own session and group, apart from ours. */
	assert_int_equal(getpgid(pgid), pgid);
	assert_int_equal(getsid(pgid), pgid);
	assert_int_not_equal(getpgid(pgid), getpgrp());
	struct timespec ts = {0, 200000000};
	nanosleep(&ts, NULL); /* the background sleeps start */
	pid_t killer = fork();
	if (killer == 0) {
		execl(guest_program(), guest_program(), "kill", pidfile, (char *)NULL);
		_exit(126);
	}
	int ks = 0, es = 0;
	assert_int_equal(waitpid(killer, &ks, 0), killer);
	assert_true(WIFEXITED(ks) && WEXITSTATUS(ks) == 0); /* the group is gone */
	assert_int_equal(kill(-pgid, 0), -1);
	assert_int_equal(errno, ESRCH);
	assert_int_equal(waitpid(child, &es, 0), child);
	assert_true(WIFEXITED(es) && WEXITSTATUS(es) == 128 + SIGKILL);
	assert_int_equal(access(pidfile, F_OK), -1); /* removed when the command ended */

	/* Exit statuses pass through; a missing command is 127. */
	pid_t c2 = fork();
	if (c2 == 0) {
		execl(guest_program(), guest_program(), "exec", pidfile, "/bin/sh", "-c", "exit 7",
		      (char *)NULL);
		_exit(126);
	}
	assert_int_equal(waitpid(c2, &es, 0), c2);
	assert_true(WIFEXITED(es) && WEXITSTATUS(es) == 7);
	pid_t c3 = fork();
	if (c3 == 0) {
		execl(guest_program(), guest_program(), "exec", pidfile, "/nonexistent/program",
		      (char *)NULL);
		_exit(126);
	}
	assert_int_equal(waitpid(c3, &es, 0), c3);
	assert_true(WIFEXITED(es) && WEXITSTATUS(es) == 127);
}

/* Runs the guest program with `argv` (after its path) and returns its exit status, or -1. */
static int guest_status(const char *const *argv, int timeout_ms)
{
	pid_t c = fork();
	if (c == 0) {
		const char *full[8] = {guest_program()};
		for (int i = 0; argv[i] && i < 6; i++)
			full[i + 1] = argv[i];
		execv(guest_program(), (char *const *)full);
		_exit(126);
	}
	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		int es = 0;
		if (waitpid(c, &es, WNOHANG) == c)
			return WIFEXITED(es) ? WEXITSTATUS(es) : -1;
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	kill(c, SIGKILL);
	waitpid(c, NULL, 0);
	return -1;
}

static void test_guest_program_wait_and_backstop_arguments(void **state)
{
	(void)state;
	char path[4200];
	snprintf(path, sizeof path, "%s/socket-to-be", g_dir);
	/* wait: 1 when the path does not come in time, 0 when it is there. */
	const char *absent[] = {"wait", path, "100", NULL};
	assert_int_equal(guest_status(absent, 5000), 1);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	const char *present[] = {"wait", path, "100", NULL};
	assert_int_equal(guest_status(present, 5000), 0);
	/* init: with no /.mcp-relay/expires (none on this host), the expiry of
	 * its arguments; one long past stops it within its one-second look. */
	if (access("/.mcp-relay/expires", F_OK) == 0)
		skip();
	const char *expired[] = {"init", "1000", "0", "0", NULL};
	assert_int_equal(guest_status(expired, 5000), 0);
	/* One far ahead keeps it running (killed here after 1.5 s). */
	const char *ahead[] = {"init", "99999999999999", "0", "0", NULL};
	assert_int_equal(guest_status(ahead, 1500), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_options_refused_by_name),
	    cmocka_unit_test(test_no_engine_and_input_checks),
	    cmocka_unit_test(test_guest_program_groups_and_kills),
	    cmocka_unit_test(test_guest_program_wait_and_backstop_arguments),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
