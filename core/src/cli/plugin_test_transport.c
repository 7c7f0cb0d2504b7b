/* plugin-test checks 20-27: open, the guest root and exec
 * (relay/transport.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plugin_test.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/timefmt.h"

#define PT_EXEC_TIMEOUT_MS 60000
#define PT_GUARD           0xA5

static void exec_free(relay_exec_result *res)
{
	pt_host()->free(res->out);
	pt_host()->free(res->err);
	res->out = res->err = NULL;
}

/* exec of argv {"/bin/sh", "-c", script} with the request's other fields. */
static relay_status sh_with(pt_run *run, const char *script, const relay_exec_request *base, unsigned flags,
                            relay_exec_result *res, relay_error *err)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	relay_exec_request req = *base;
	req.struct_size = sizeof req;
	req.argv = argv;
	if (req.timeout_ms == 0)
		req.timeout_ms = PT_EXEC_TIMEOUT_MS;
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	memset(err, 0, sizeof *err);
	return run->plugin->transport.exec(run->plugin->state, run->conn, &req, NULL, flags, res, err);
}

relay_status pt_sh(pt_run *run, const char *script, uint64_t timeout_ms, relay_exec_result *res,
                   relay_error *err)
{
	relay_exec_request req = {.timeout_ms = timeout_ms};
	return sh_with(run, script, &req, 0, res, err);
}

bool pt_transport_open(pt_run *run)
{
	if (run->lease_json == NULL) {
		pt_skip(run, 20,
		        "no lease to open: give --lease FILE (a lease document), or test a plugin that is "
		        "also a machine");
		return false;
	}
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st =
	    run->plugin->transport.open(run->plugin->state, run->lease_json, NULL, 0, &run->conn, &err);
	if (st != RELAY_OK || run->conn == NULL) {
		pt_fail(run, 20, "open of the lease answered %s: %s", pt_status(st), err.message);
		run->conn = NULL;
		return false;
	}
	/* The guest root as the core names and makes it (relay/transport.h). */
	json_object *lease = jsonx_parse_str(run->lease_json, NULL, 0);
	const char *purpose = jsonx_get_str(lease, "purpose");
	char stamp[22];
	time_format_stamp(clock_now_ms(), stamp);
	snprintf(run->guest_root, sizeof run->guest_root, "/var/tmp/%s-mcp-relay-%s", stamp,
	         purpose ? purpose : "relay-plugin-test");
	json_object_put(lease);
	char script[700];
	snprintf(script, sizeof script, "/bin/mkdir -p -m 0700 '%s'", run->guest_root);
	relay_exec_result res;
	st = pt_sh(run, script, 0, &res, &err);
	if (st != RELAY_OK || res.exit_code != 0) {
		pt_fail(run, 20,
		        "the guest root %s could not be made with /bin/mkdir -p -m 0700 (%s, exit %d)",
		        run->guest_root, st == RELAY_OK ? "ran" : pt_status(st), res.exit_code);
		run->guest_root[0] = '\0';
	} else {
		pt_ran(run, 20);
	}
	exec_free(&res);
	return run->guest_root[0] != '\0';
}

void pt_transport_close(pt_run *run)
{
	if (run->conn == NULL)
		return;
	if (run->guest_root[0]) {
		char script[700];
		relay_exec_result res;
		relay_error err;
		snprintf(script, sizeof script, "/bin/rm -rf '%s'", run->guest_root);
		pt_sh(run, script, 0, &res, &err);
		exec_free(&res);
	}
	run->plugin->transport.close(run->plugin->state, run->conn, 0);
	run->conn = NULL;
}

static bool output_is(const char *buf, size_t len, const char *want)
{
	return buf != NULL && len == strlen(want) && memcmp(buf, want, len) == 0;
}

/* Checks 21 and 22. */
static void exec_streams_and_env(pt_run *run)
{
	relay_exec_result res;
	relay_error err;
	relay_status st = pt_sh(run, "printf out; printf err >&2; exit 3", 0, &res, &err);
	/* A transport stating RELAY_TRANSPORT_MERGED_OUTPUT joins the streams. */
	bool merged = (run->plugin->transport.traits & RELAY_TRANSPORT_MERGED_OUTPUT) != 0;
	bool streams =
	    merged
	        ? (output_is(res.out, res.out_len, "outerr") || output_is(res.out, res.out_len, "errout")) &&
	              res.err_len == 0
	        : output_is(res.out, res.out_len, "out") && output_is(res.err, res.err_len, "err");
	if (st != RELAY_OK)
		pt_fail(run, 21, "exec answered %s: %s", pt_status(st), err.message);
	else if (res.exit_code != 3 || !streams)
		pt_fail(
		    run, 21,
		    "exec of printf out; printf err >&2; exit 3 gave exit %d, %zu bytes of stdout and %zu of "
		    "stderr: expected exit 3, \"out\" and \"err\" (joined in stdout with "
		    "RELAY_TRANSPORT_MERGED_OUTPUT)",
		    res.exit_code, res.out_len, res.err_len);
	else
		pt_ran(run, 21);
	exec_free(&res);

	const char *envp[] = {"RELAY_PT_ADDED=yes", NULL};
	relay_exec_request req = {.envp = envp};
	st = sh_with(run, "printf '%s|%s' \"$RELAY_PT_ADDED\" \"${HOME:+set}\"", &req, 0, &res, &err);
	if (st != RELAY_OK)
		pt_fail(run, 22, "exec with envp answered %s: %s", pt_status(st), err.message);
	else if (!output_is(res.out, res.out_len, "yes|set"))
		pt_fail(
		    run, 22,
		    "exec with envp {RELAY_PT_ADDED=yes} did not run with that entry added to the guest "
		    "environment (PATH kept): envp is added to it, never replaces it (relay/transport.h)");
	else
		pt_ran(run, 22);
	exec_free(&res);
}

/* Checks 23, 24 and 25. */
static void exec_caps_and_timeout(pt_run *run)
{
	relay_exec_result res;
	relay_error err;
	relay_exec_request req = {.max_output_bytes = 4096};
	relay_status st = sh_with(run, "head -c 200000 /dev/zero | tr '\\000' a", &req, 0, &res, &err);
	if (st != RELAY_OK)
		pt_fail(run, 23, "exec of 200000 bytes of output answered %s: %s", pt_status(st),
		        err.message);
	else if (res.out_len > 4096 || !res.output_truncated)
		pt_fail(run, 23,
		        "exec of 200000 bytes of output under max_output_bytes 4096 returned %zu bytes with "
		        "output_truncated %d: keep at most the cap and set output_truncated",
		        res.out_len, res.output_truncated);
	else
		pt_ran(run, 23);
	exec_free(&res);

	st = sh_with(
	    run, "head -c 3000 /dev/zero | tr '\\000' a; head -c 3000 /dev/zero | tr '\\000' b >&2; sleep 1",
	    &req, 0, &res, &err);
	if (st != RELAY_OK)
		pt_fail(run, 24, "exec of 3000 + 3000 bytes of output answered %s: %s", pt_status(st),
		        err.message);
	else if (res.out_len + res.err_len > 4096 || !res.output_truncated)
		pt_fail(
		    run, 24,
		    "exec of 3000 bytes on stdout and 3000 on stderr under max_output_bytes 4096 kept %zu + "
		    "%zu "
		    "bytes with output_truncated %d: the cap is on both streams together (relay/transport.h)",
		    res.out_len, res.err_len, res.output_truncated);
	else
		pt_ran(run, 24);
	exec_free(&res);

	relay_exec_request slow = {.timeout_ms = 1500};
	st = sh_with(run, "sleep 30", &slow, 0, &res, &err);
	if (st != RELAY_OK)
		pt_fail(
		    run, 25,
		    "exec of sleep 30 under timeout_ms 1500 answered %s: %s; answer RELAY_OK with timed_out",
		    pt_status(st), err.message);
	else if (!res.timed_out || res.exit_code == 0)
		pt_fail(run, 25, "exec of sleep 30 under timeout_ms 1500 returned timed_out %d, exit %d",
		        res.timed_out, res.exit_code);
	else
		pt_ran(run, 25);
	exec_free(&res);

	relay_exec_request in_root = {.cwd = run->guest_root};
	st = sh_with(run, "pwd", &in_root, 0, &res, &err);
	char want[600];
	snprintf(want, sizeof want, "%s\n", run->guest_root);
	if (st != RELAY_OK || !output_is(res.out, res.out_len, want))
		pt_fail(run, 26, "exec of pwd with cwd %s (%s) did not print that folder", run->guest_root,
		        pt_status(st));
	else
		pt_ran(run, 26);
	exec_free(&res);
}

static bool guard_intact(const unsigned char *p, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (p[i] != PT_GUARD)
			return false;
	return true;
}

/* One exec whose result struct says `size`; false when the plugin wrote
 * any byte of `buf` from `size` (or sizeof the result) on. */
static bool result_size_kept(pt_run *run, uint32_t size, const char **why)
{
	union {
		relay_exec_result res;
		unsigned char bytes[sizeof(relay_exec_result) + 64];
	} buf;
	memset(&buf, PT_GUARD, sizeof buf);
	buf.res.struct_size = size;
	const char *argv[] = {"/bin/sh", "-c", "printf sized", NULL};
	relay_exec_request req = {.struct_size = sizeof req, .argv = argv, .timeout_ms = PT_EXEC_TIMEOUT_MS};
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st =
	    run->plugin->transport.exec(run->plugin->state, run->conn, &req, NULL, 0, &buf.res, &err);
	size_t from = size < sizeof buf.res ? size : sizeof buf.res;
	bool kept = guard_intact(buf.bytes, from, sizeof buf);
	if (st == RELAY_OK && RELAY_SIZED_HAS(&buf.res, out))
		pt_host()->free(buf.res.out);
	if (st == RELAY_OK && RELAY_SIZED_HAS(&buf.res, err))
		pt_host()->free(buf.res.err);
	if (st != RELAY_OK)
		*why = pt_status(st);
	return kept && st == RELAY_OK;
}

/* Check 27: results and requests of other sizes. */
static void exec_struct_sizes(pt_run *run)
{
	const char *why = "it wrote past the size";
	uint32_t small = (uint32_t)offsetof(relay_exec_result, err);
	if (!result_size_kept(run, small, &why))
		pt_fail(run, 27,
		        "exec with a relay_exec_result of struct_size %u failed (%s) or wrote past those "
		        "bytes: clear "
		        "and write only within the caller's size (relay/plugin.h R5)",
		        small, why);
	uint32_t large = (uint32_t)sizeof(relay_exec_result) + 64;
	if (!result_size_kept(run, large, &why))
		pt_fail(run, 27,
		        "exec with a relay_exec_result of struct_size %u failed (%s) or wrote past this "
		        "ABI's %zu "
		        "bytes: a newer caller's fields are not the plugin's to touch (relay/plugin.h R5)",
		        large, why, sizeof(relay_exec_result));
	/* A 1.0 caller: the 1.1 fields past its size are garbage. */
	union {
		relay_exec_request req;
		unsigned char bytes[sizeof(relay_exec_request) + 64];
	} rq;
	memset(&rq, PT_GUARD, sizeof rq);
	const char *argv[] = {"/bin/sh", "-c", "printf v10", NULL};
	rq.req.struct_size = (uint32_t)RELAY_EXEC_REQUEST_V1_0_SIZE;
	rq.req.argv = argv;
	rq.req.cwd = NULL;
	rq.req.envp = NULL;
	rq.req.timeout_ms = PT_EXEC_TIMEOUT_MS;
	rq.req.max_output_bytes = 0;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1)
			rq.req.struct_size = (uint32_t)sizeof rq; /* a newer caller's longer request */
		relay_exec_result res = {.struct_size = sizeof res};
		relay_error err;
		memset(&err, 0, sizeof err);
		relay_status st =
		    run->plugin->transport.exec(run->plugin->state, run->conn, &rq.req, NULL, 0, &res, &err);
		if (st != RELAY_OK || !output_is(res.out, res.out_len, "v10"))
			pt_fail(run, 27,
			        "exec of a relay_exec_request of struct_size %u answered %s or the wrong "
			        "output: read "
			        "requests with RELAY_COPY_IN (relay/plugin.h R4)",
			        rq.req.struct_size, pt_status(st));
		exec_free(&res);
	}
	pt_ran(run, 27);
}

void pt_transport_exec(pt_run *run)
{
	relay_exec_result res;
	relay_error err;
	relay_exec_request plain = {0};
	relay_status st = sh_with(run, "true", &plain, PT_UNKNOWN_FLAG, &res, &err);
	bool left = st != RELAY_OK && (res.out != NULL || res.err != NULL);
	exec_free(&res);
	pt_refusal(run, "transport", "exec", st, &err, NULL);
	if (left)
		pt_fail(run, 5,
		        "transport exec failed but left output in its result: leave out and err NULL after a "
		        "failure (relay/plugin.h R3)");
	exec_streams_and_env(run);
	exec_caps_and_timeout(run);
	exec_struct_sizes(run);
}
