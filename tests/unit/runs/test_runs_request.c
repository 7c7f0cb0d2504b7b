/*
 * relay_script's host side without the MCP layer or a guest (runs/): step
 * derivation (spec/guest.md §10, §14), the receiver request and the standard
 * input of a run in one round trip (spec/guest.md §6.1, §16.2, the keys of
 * guest/receiver_protocol.h), receipt validation (§15 step 5) and the
 * failure of an execution (spec/images.md §8.2).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../../guest/receiver_protocol.h"
#include "runs/run_internal.h"
#include "runs/run_request.h"
#include "util/jsonx.h"
#include "util/sha256.h"

static run_call inline_call(const char *language, const char *script)
{
	run_call c;
	memset(&c, 0, sizeof c);
	snprintf(c.language, sizeof c.language, "%s", language);
	c.ext = strcmp(language, "shell") == 0 ? "sh" : "py";
	c.is_inline = true;
	c.script = strdup(script);
	c.script_len = strlen(script);
	c.timeout_ms = RUN_DEFAULT_TIMEOUT_MS;
	return c;
}

static void titles_are_derived(void **state)
{
	(void)state;
	run_call c = inline_call("shell", "#!/bin/sh\n\n   xdg-open https://example.com  \nsleep 1\n");
	char *t = run_derive_title(&c);
	assert_string_equal(t, "shell xdg-open https://example.com");
	char *b = run_derive_because(&c, t);
	assert_string_equal(b, "Relay shell xdg-open https://example.com (no reason given)");
	free(b);
	c.reason = strdup("Open the sign-in page");
	b = run_derive_because(&c, t);
	assert_string_equal(b, "Open the sign-in page");
	free(b);
	free(t);
	run_call_free(&c);

	c = inline_call("python", "print(1)\n");
	t = run_derive_title(&c);
	assert_string_equal(t, "code (python)");
	free(t);
	run_call_free(&c);

	c = inline_call("shell", "true");
	c.is_inline = false;
	c.local_path = strdup("scripts/login.sh");
	t = run_derive_title(&c);
	assert_string_equal(t, "script login.sh");
	free(t);
	run_call_free(&c);

	/* A title is cut to RUN_TITLE_MAX_CHARS characters, never inside one. */
	char *long_script = malloc(3 * RUN_TITLE_MAX_CHARS + 1);
	for (size_t i = 0; i < RUN_TITLE_MAX_CHARS; i++)
		memcpy(long_script + 3 * i, "\xe2\x82\xac", 3); /* U+20AC */
	long_script[3 * RUN_TITLE_MAX_CHARS] = '\0';
	c = inline_call("shell", long_script);
	t = run_derive_title(&c);
	assert_int_equal(strlen(t), 6 + 3 * (RUN_TITLE_MAX_CHARS - 6));
	free(t);
	free(long_script);
	run_call_free(&c);
}

static void snapshot_blocks(void **state)
{
	(void)state;
	run_call c = inline_call("shell", "true");
	int64_t after = -1;
	const char *phase = "x";
	json_object *s = run_snapshot_block(&c, &after, &phase);
	assert_int_equal(after, RUN_DEFAULT_AFTER_MS);
	assert_null(phase);
	json_object *g = NULL;
	assert_true(json_object_object_get_ex(s, "group", &g));
	assert_null(g);
	json_object_put(s);
	c.snapshots = jsonx_parse_str(
	    "{\"afterIntervalMs\":900,\"group\":{\"groupId\":\"g1\",\"phase\":\"member\"}}", NULL, 0);
	s = run_snapshot_block(&c, &after, &phase);
	assert_int_equal(after, 0);
	assert_string_equal(phase, "member");
	json_object *v = NULL;
	assert_true(json_object_object_get_ex(s, "afterIntervalMs", &v));
	assert_null(v);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(s, "group"), "groupId"), "g1");
	json_object_put(s);
	json_object_put(c.snapshots);
	c.snapshots =
	    jsonx_parse_str("{\"afterIntervalMs\":900,\"group\":{\"groupId\":\"g1\",\"phase\":\"last\","
	                    "\"afterIntervalMs\":1200}}",
	                    NULL, 0);
	s = run_snapshot_block(&c, &after, &phase);
	assert_int_equal(after, 1200);
	json_object_put(s);
	run_call_free(&c);
}

static void the_request_has_every_key_of_the_protocol(void **state)
{
	(void)state;
	run_call c = inline_call("shell", "echo hi\n");
	json_object *step =
	    jsonx_parse_str("{\"id\":\"shell-1\",\"title\":\"shell echo hi\",\"expected\":\"Exits "
	                    "with status 0\",\"inputMode\":\"ordinary\"}",
	                    NULL, 0);
	json_object *snaps = jsonx_parse_str("{\"afterIntervalMs\":500,\"group\":null}", NULL, 0);
	run_request_in in = {"run-1", "att-1", "rec-1", "g1", "because", &c,   "/R/streamed/run-1.sh",
	                     "0123",  NULL,    "/R",    step, snaps,     NULL, NULL};
	json_object *r = run_request_build(&in);
	static const char *const keys[] = {
	    RECEIVER_REQ_PROTOCOL,      RECEIVER_REQ_EXECUTION_ID, RECEIVER_REQ_SESSION_ID,
	    RECEIVER_REQ_ATTEMPT_ID,    RECEIVER_REQ_GUEST,        RECEIVER_REQ_BECAUSE,
	    RECEIVER_REQ_EVIDENCE_MODE, RECEIVER_REQ_LANGUAGE,     RECEIVER_REQ_SCRIPT,
	    RECEIVER_REQ_RUNTIME,       RECEIVER_REQ_CWD,          RECEIVER_REQ_TIMEOUT_MS,
	    RECEIVER_REQ_STEP,          RECEIVER_REQ_SNAPSHOTS,    RECEIVER_REQ_CAPTURE};
	/* Every field is required (optional values null), nothing else. */
	assert_int_equal(json_object_object_length(r), (int)(sizeof keys / sizeof keys[0]));
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		assert_true(json_object_object_get_ex(r, keys[i], NULL));
	int64_t protocol = 0;
	assert_true(jsonx_get_int(r, RECEIVER_REQ_PROTOCOL, &protocol));
	assert_int_equal(protocol, RECEIVER_PROTOCOL_VERSION);
	assert_string_equal(jsonx_get_str(r, RECEIVER_REQ_CWD), "/R/workspace");
	assert_string_equal(jsonx_get_str(r, RECEIVER_REQ_EVIDENCE_MODE), RECEIVER_EVIDENCE_RECORDED);
	json_object *script = jsonx_get_obj(r, RECEIVER_REQ_SCRIPT);
	assert_string_equal(jsonx_get_str(script, RECEIVER_SCRIPT_ORIGIN), "inline");
	int64_t bytes = 0;
	assert_true(jsonx_get_int(script, RECEIVER_SCRIPT_BYTES, &bytes));
	assert_int_equal(bytes, 8);
	json_object *ln = (json_object *)1;
	assert_true(json_object_object_get_ex(script, RECEIVER_SCRIPT_LOCAL_NAME, &ln));
	assert_null(ln);
	json_object_put(r);
	json_object_put(step);
	json_object_put(snaps);
	run_call_free(&c);
}

static void stdin_parts_carry_both_files(void **state)
{
	(void)state;
	const char request[] = "{\"protocol\":1}";
	const char script[] = "echo hi\n";
	char rs[65], ss[65];
	sha256_buffer_hex(request, strlen(request), rs);
	sha256_buffer_hex(script, strlen(script), ss);
	size_t len = 0;
	char *text = run_stdin_parts_text("requests/run-1.json", request, strlen(request), rs,
	                                  "streamed/run-1.sh", script, strlen(script), ss, &len);
	assert_non_null(text);
	char *nl = memchr(text, '\n', len);
	assert_non_null(nl);
	assert_true((size_t)(nl - text + 1) <= RECEIVER_STDIN_HEADER_MAX_BYTES);
	json_object *h = jsonx_parse(text, (size_t)(nl - text), NULL, NULL, 0);
	json_object *parts = jsonx_get_array(h, RECEIVER_FRAME_PARTS);
	assert_int_equal(json_object_array_length(parts), 2);
	json_object *p0 = json_object_array_get_idx(parts, 0), *p1 = json_object_array_get_idx(parts, 1);
	assert_string_equal(jsonx_get_str(p0, RECEIVER_PART_KEY_NAME), RECEIVER_PART_REQUEST);
	assert_string_equal(jsonx_get_str(p1, RECEIVER_PART_KEY_NAME), RECEIVER_PART_SCRIPT);
	assert_string_equal(jsonx_get_str(p1, RECEIVER_PART_KEY_PATH), "streamed/run-1.sh");
	assert_string_equal(jsonx_get_str(p0, RECEIVER_PART_KEY_SHA256), rs);
	/* Then exactly the two parts' bytes, in that order. */
	size_t body = len - (size_t)(nl - text + 1);
	assert_int_equal(body, strlen(request) + strlen(script));
	assert_memory_equal(nl + 1, request, strlen(request));
	assert_memory_equal(nl + 1 + strlen(request), script, strlen(script));
	json_object_put(h);
	free(text);
}

static const char *problem_of(const char *receipt_json, const char *request_sha)
{
	static char buf[200];
	json_object *r = jsonx_parse_str(receipt_json, NULL, 0);
	const char *p = run_receipt_problem(r, "run-1", request_sha);
	snprintf(buf, sizeof buf, "%s", p ? p : "");
	json_object_put(r);
	return buf;
}

static void receipts_are_validated(void **state)
{
	(void)state;
	assert_string_equal(
	    problem_of("{\"executionId\":\"run-1\",\"requestSha256\":\"ab\",\"outcome\":{\"kind\":"
	               "\"completed\",\"exitStatus\":{\"code\":0,\"signal\":null}}}",
	               "ab"),
	    "");
	assert_non_null(strstr(problem_of("[]", NULL), "not a JSON object"));
	assert_non_null(
	    strstr(problem_of("{\"executionId\":\"run-2\",\"outcome\":{\"kind\":\"completed\"}}", NULL),
	           "executionId"));
	assert_non_null(
	    strstr(problem_of("{\"executionId\":\"run-1\",\"requestSha256\":\"cd\",\"outcome\":{\"kind\":"
	                      "\"completed\",\"exitStatus\":{}}}",
	                      "ab"),
	           "requestSha256"));
	assert_non_null(
	    strstr(problem_of("{\"executionId\":\"run-1\",\"outcome\":{\"kind\":\"completed\"}}", NULL),
	           "exitStatus"));
	assert_non_null(
	    strstr(problem_of("{\"executionId\":\"run-1\",\"outcome\":{\"kind\":\"refused\"}}", NULL),
	           "diagnostic"));
	assert_non_null(strstr(
	    problem_of("{\"executionId\":\"run-1\",\"outcome\":{\"kind\":\"maybe\"}}", NULL), "none of"));
	assert_non_null(strstr(problem_of("{\"executionId\":\"run-1\",\"outcome\":{\"kind\":\"uncertain\","
	                                  "\"diagnostic\":\"x\"},\"imageEvidence\":{}}",
	                                  NULL),
	                       "snapshots"));
}

static void failed_executions(void **state)
{
	(void)state;
	json_object *ok =
	    jsonx_parse_str("{\"kind\":\"completed\",\"exitStatus\":{\"code\":0,\"signal\":null}}", NULL, 0);
	json_object *code3 =
	    jsonx_parse_str("{\"kind\":\"completed\",\"exitStatus\":{\"code\":3,\"signal\":null}}", NULL, 0);
	json_object *sig = jsonx_parse_str(
	    "{\"kind\":\"completed\",\"exitStatus\":{\"code\":null,\"signal\":\"SIGKILL\"}}", NULL, 0);
	json_object *refused =
	    jsonx_parse_str("{\"kind\":\"refused\",\"diagnostic\":\"bad request\"}", NULL, 0);
	json_object *unc = run_outcome_uncertain("lost %d", 7);
	assert_false(run_execution_failed(ok));
	assert_true(run_execution_failed(code3));
	assert_true(run_execution_failed(sig));
	assert_true(run_execution_failed(refused));
	assert_true(run_execution_failed(unc));
	assert_string_equal(run_error_code_for(code3), "execution-failed");
	assert_string_equal(run_error_code_for(refused), "execution-refused");
	assert_string_equal(run_error_code_for(unc), "execution-uncertain");
	char *msg = run_failure_message(code3, "run-1");
	assert_string_equal(msg, "Run run-1 exited with status 3; the guest is kept.");
	free(msg);
	msg = run_failure_message(sig, "run-1");
	assert_string_equal(msg, "Run run-1 ended by signal SIGKILL; the guest is kept.");
	free(msg);
	msg = run_failure_message(unc, "run-1");
	assert_non_null(strstr(msg, "lost 7"));
	assert_non_null(strstr(msg, "never replayed"));
	free(msg);
	char buf[32];
	assert_string_equal(run_signal_name(9, buf), "SIGKILL");
	json_object_put(ok);
	json_object_put(code3);
	json_object_put(sig);
	json_object_put(refused);
	json_object_put(unc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(titles_are_derived),
	    cmocka_unit_test(snapshot_blocks),
	    cmocka_unit_test(the_request_has_every_key_of_the_protocol),
	    cmocka_unit_test(stdin_parts_carry_both_files),
	    cmocka_unit_test(receipts_are_validated),
	    cmocka_unit_test(failed_executions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
