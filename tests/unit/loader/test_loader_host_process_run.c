/*
 * host->process_run by the rules relay/host.h states (loader/host.c,
 * util/process.c): without flags envp replaces the environment and each
 * stream has its own cap (the behaviour callers had before ABI 1.2); with
 * RELAY_PROCESS_ENV_ADD and RELAY_PROCESS_SHARED_CAP (RELAY_PROCESS_EXEC_RULES)
 * the rules of the transport's exec(): envp added to the environment, one
 * cap on both streams. The request is read and the result written by their
 * struct sizes; relay_error_put and the sized-copy macros of relay/plugin.h
 * do what they say.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loader/loader.h"

static relay_status run_sh(const char *script, const char *const *envp, size_t cap, unsigned flags,
                           relay_process_result *res)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	relay_process_request req = {.struct_size = sizeof req,
	                             .argv = argv,
	                             .envp = envp,
	                             .stdin_fd = -1,
	                             .stdout_fd = -1,
	                             .timeout_ms = 30000,
	                             .max_output_bytes = cap};
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	relay_error err;
	memset(&err, 0, sizeof err);
	return loader_host_table()->process_run(&req, NULL, flags, res, &err);
}

static void release(relay_process_result *res)
{
	loader_host_table()->free(res->out);
	loader_host_table()->free(res->err);
}

static void test_env_replaces_by_default_and_adds_with_env_add(void **unused)
{
	(void)unused;
	setenv("RELAY_TEST_INHERITED", "kept", 1);
	setenv("RELAY_TEST_OVERRIDDEN", "old", 1);
	const char *envp[] = {"RELAY_TEST_ADDED=yes", "RELAY_TEST_OVERRIDDEN=new", NULL};
	const char *script =
	    "printf '%s|%s|%s' \"$RELAY_TEST_ADDED\" \"$RELAY_TEST_INHERITED\" \"$RELAY_TEST_OVERRIDDEN\"";
	relay_process_result res;
	assert_int_equal(run_sh(script, envp, 0, 0, &res), RELAY_OK);
	assert_string_equal(res.out, "yes||new"); /* the whole environment */
	release(&res);
	assert_int_equal(run_sh(script, envp, 0, RELAY_PROCESS_ENV_ADD, &res), RELAY_OK);
	assert_string_equal(res.out, "yes|kept|new"); /* added to it, same key replaced */
	release(&res);
	assert_int_equal(run_sh(script, NULL, 0, RELAY_PROCESS_ENV_ADD, &res), RELAY_OK);
	assert_string_equal(res.out, "|kept|old"); /* NULL: inherited unchanged */
	release(&res);
}

static void test_cap_per_stream_by_default_and_shared_with_shared_cap(void **unused)
{
	(void)unused;
	const char *script =
	    "head -c 3000 /dev/zero | tr '\\000' a; head -c 3000 /dev/zero | tr '\\000' b >&2";
	relay_process_result res;
	assert_int_equal(run_sh(script, NULL, 4096, 0, &res), RELAY_OK);
	assert_int_equal(res.out_len, 3000);
	assert_int_equal(res.err_len, 3000);
	assert_int_equal(res.output_truncated, 0);
	release(&res);
	assert_int_equal(run_sh(script, NULL, 4096, RELAY_PROCESS_SHARED_CAP, &res), RELAY_OK);
	assert_true(res.out_len + res.err_len <= 4096);
	assert_int_equal(res.out_len, 3000);
	assert_int_equal(res.output_truncated, 1);
	release(&res);
	/* KEEP_TAIL: the oldest stdout bytes go first, then stderr's. */
	assert_int_equal(run_sh(script, NULL, 4096, RELAY_PROCESS_SHARED_CAP | RELAY_PROCESS_KEEP_TAIL, &res),
	                 RELAY_OK);
	assert_int_equal(res.out_len + res.err_len, 4096);
	assert_int_equal(res.err_len, 3000);
	assert_int_equal(res.output_truncated, 1);
	assert_int_equal(res.exit_code, 0);
	release(&res);
	/* The exec rules are both. */
	assert_int_equal(RELAY_PROCESS_EXEC_RULES, RELAY_PROCESS_ENV_ADD | RELAY_PROCESS_SHARED_CAP);
}

static void test_unknown_flags_refused(void **unused)
{
	(void)unused;
	relay_process_result res;
	assert_int_equal(run_sh("true", NULL, 0, 0x40000000u, &res), RELAY_E_UNSUPPORTED_FLAGS);
	assert_null(res.out);
	assert_null(res.err);
}

/* A caller with a smaller result (a plugin of an older minor) gets nothing
 * written past its size; a smaller request reads as zero past its size. */
static void test_struct_sizes(void **unused)
{
	(void)unused;
	union {
		relay_process_result res;
		unsigned char bytes[sizeof(relay_process_result) + 32];
	} buf;
	memset(&buf, 0xA5, sizeof buf);
	buf.res.struct_size = (uint32_t)offsetof(relay_process_result, err);
	const char *argv[] = {"/bin/sh", "-c", "printf out; printf err >&2", NULL};
	union {
		relay_process_request req;
		unsigned char bytes[sizeof(relay_process_request)];
	} rq;
	memset(&rq, 0xA5, sizeof rq);
	rq.req.struct_size = (uint32_t)offsetof(relay_process_request, timeout_ms);
	rq.req.argv = argv;
	rq.req.envp = NULL;
	rq.req.cwd = NULL;
	rq.req.stdin_data = NULL;
	rq.req.stdin_len = 0;
	rq.req.stdin_fd = -1;
	rq.req.stdout_fd = -1;
	relay_error err;
	memset(&err, 0, sizeof err);
	/* timeout_ms and max_output_bytes lie past the request's size: 0 (no
	 * limit, 65536), not the 0xA5 bytes behind them. */
	assert_int_equal(loader_host_table()->process_run(&rq.req, NULL, 0, &buf.res, &err), RELAY_OK);
	assert_int_equal(buf.res.struct_size, offsetof(relay_process_result, err));
	assert_int_equal(buf.res.out_len, 3);
	assert_memory_equal(buf.res.out, "out", 3);
	for (size_t i = offsetof(relay_process_result, err); i < sizeof buf; i++)
		assert_int_equal(buf.bytes[i], 0xA5);
	loader_host_table()->free(buf.res.out);
}

typedef struct grown {
	uint32_t struct_size;
	int a;
	char *p;
	int b; /* a field a smaller caller lacks */
} grown;

static void test_sized_copy_macros_and_error_put(void **unused)
{
	(void)unused;
	grown big = {sizeof big, 1, NULL, 2}, local;
	big.struct_size = (uint32_t)offsetof(grown, b); /* an older writer */
	RELAY_COPY_IN(local, &big);
	assert_int_equal(local.a, 1);
	assert_int_equal(local.b, 0);
	assert_true(RELAY_SIZED_HAS(&big, p));
	assert_false(RELAY_SIZED_HAS(&big, b));
	union {
		grown g;
		unsigned char bytes[sizeof(grown)];
	} out;
	memset(&out, 0xA5, sizeof out);
	out.g.struct_size = (uint32_t)offsetof(grown, b);
	RELAY_RESULT_RESET(&out.g);
	assert_int_equal(out.g.a, 0);
	assert_int_equal(out.bytes[offsetof(grown, b)], 0xA5);
	grown full = {sizeof full, 7, NULL, 9};
	RELAY_COPY_OUT(&out.g, &full);
	assert_int_equal(out.g.struct_size, offsetof(grown, b));
	assert_int_equal(out.g.a, 7);
	assert_int_equal(out.bytes[offsetof(grown, b)], 0xA5);

	relay_error err;
	assert_int_equal(relay_error_put(&err, RELAY_E_IO, 5, "short"), RELAY_E_IO);
	assert_int_equal(err.code, RELAY_E_IO);
	assert_int_equal(err.sys_errno, 5);
	assert_string_equal(err.message, "short");
	char *long_text = malloc(RELAY_ERROR_MESSAGE_BYTES + 8);
	assert_non_null(long_text);
	memset(long_text, 'a', RELAY_ERROR_MESSAGE_BYTES - 2);
	strcpy(long_text + RELAY_ERROR_MESSAGE_BYTES - 2, "\xc3\xa9\xc3\xa9"); /* é é across the cut */
	relay_error_put(&err, RELAY_E_IO, 0, long_text);
	assert_int_equal(strlen(err.message), RELAY_ERROR_MESSAGE_BYTES - 2); /* no half é */
	free(long_text);
	assert_int_equal(relay_error_put(NULL, RELAY_E_INTERNAL, 0, "x"), RELAY_E_INTERNAL);
	relay_error_put(&err, RELAY_E_IO, 0, NULL);
	assert_string_equal(err.message, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_env_replaces_by_default_and_adds_with_env_add),
	    cmocka_unit_test(test_cap_per_stream_by_default_and_shared_with_shared_cap),
	    cmocka_unit_test(test_unknown_flags_refused),
	    cmocka_unit_test(test_struct_sizes),
	    cmocka_unit_test(test_sized_copy_macros_and_error_put),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
