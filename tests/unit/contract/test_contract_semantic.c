/*
 * The tools' semantic input rules (spec/tools.md §3.2, §3.4, §3.5, §3.6,
 * §3.12), checked after the schema: every rule refuses with its own message,
 * and the valid forms pass.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "contract/contract.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

static void expect(relay_tool tool, const char *args_text, const char *want)
{
	json_object *args = jsonx_parse_str(args_text, NULL, 0);
	if (args == NULL)
		fail_msg("bad test JSON %s", args_text);
	char *problem = contract_validate(tool, args);
	char full[512] = "";
	if (want)
		snprintf(full, sizeof full, "Invalid %s input: %s", contract_tool_name(tool), want);
	if (want == NULL && problem != NULL)
		fail_msg("%s: unexpected \"%s\"", args_text, problem);
	if (want != NULL && (problem == NULL || strcmp(problem, full) != 0))
		fail_msg("%s:\n got \"%s\"\nwant \"%s\"", args_text, problem ? problem : "(valid)", full);
	free(problem);
	json_object_put(args);
}

static void test_probe(void **state)
{
	(void)state;
	expect(TOOL_PROBE, "{}", NULL);
	expect(TOOL_PROBE, "{\"scope\":\"host\"}", NULL);
	expect(TOOL_PROBE, "{\"scope\":\"guest\",\"guest\":\"a-1\"}", NULL);
	expect(TOOL_PROBE, "{\"scope\":\"guest\"}", "/guest is required with scope guest");
	expect(TOOL_PROBE, "{\"guest\":\"a-1\"}", "/guest is only allowed with scope guest");
	expect(TOOL_PROBE, "{\"scope\":\"host\",\"guest\":\"a-1\"}",
	       "/guest is only allowed with scope guest");
}

static void acquire_path(const char *path_json, const char *why)
{
	char args[256], want[256];
	snprintf(args, sizeof args,
	         "{\"task\":\"t\",\"image\":\"i\",\"extractions\":[{\"name\":\"out\",\"path\":%s}]}",
	         path_json);
	if (why)
		snprintf(want, sizeof want,
		         "/extractions/0/path %s: it must stay strictly inside the workspace", why);
	expect(TOOL_ACQUIRE, args, why ? want : NULL);
}

static void test_acquire(void **state)
{
	(void)state;
	acquire_path("\"out/screens\"", NULL);
	acquire_path("\"file.txt\"", NULL);
	acquire_path("\"a/.b/c..d\"", NULL);
	acquire_path("\"/etc\"", "must be relative (no leading slash)");
	acquire_path("\"a\\\\b\"", "must not contain a backslash");
	acquire_path("\"a//b\"", "must not contain an empty segment");
	acquire_path("\"a/\"", "must not contain an empty segment");
	acquire_path("\".\"", "must not contain a . segment");
	acquire_path("\"a/./b\"", "must not contain a . segment");
	acquire_path("\"..\"", "must not contain a .. segment");
	acquire_path("\"a/../../b\"", "must not contain a .. segment");
	/* A NUL is refused by the schema layer for every text field (below). */
	expect(TOOL_ACQUIRE,
	       "{\"task\":\"t\",\"image\":\"i\",\"extractions\":[{\"name\":\"out\",\"path\":\"a\\u0000b\"}]}",
	       "/extractions/0/path contains U+0000 (a NUL byte), which no text field accepts; remove it");
	expect(
	    TOOL_ACQUIRE,
	    "{\"task\":\"t\",\"image\":\"i\",\"extractions\":[{\"name\":\"full-workspace\",\"path\":\"x\"}]}",
	    "/extractions/0/name full-workspace is reserved; use fullWorkspace: true");
	expect(TOOL_ACQUIRE,
	       "{\"task\":\"t\",\"image\":\"i\",\"extractions\":[{\"name\":\"a\",\"path\":\"x\"},{\"name\":"
	       "\"b\",\"path\":"
	       "\"y\"},{\"name\":\"a\",\"path\":\"z\"}]}",
	       "/extractions/2/name repeats the name a; output names must be unique");
	expect(TOOL_ACQUIRE, "{\"task\":\"t\",\"image\":\"i\",\"extractions\":[],\"fullWorkspace\":true}",
	       NULL);
}

static void test_stage(void **state)
{
	(void)state;
	expect(TOOL_STAGE, "{\"guest\":\"a-1\",\"files\":[{\"local\":\"x\",\"path\":\"cfg/users.csv\"}]}",
	       NULL);
	expect(TOOL_STAGE,
	       "{\"guest\":\"a-1\",\"files\":[{\"local\":\"x\",\"path\":\"ok\"},{\"local\":\"y\",\"path\":\"."
	       "./up\"}]}",
	       "/files/1/path must not contain a .. segment: it is relative to the guest's support/ folder");
	expect(TOOL_STAGE, "{\"guest\":\"a-1\",\"files\":[{\"local\":\"x\",\"path\":\"/abs\"}]}",
	       "/files/0/path must be relative (no leading slash): it is relative to the guest's support/ "
	       "folder");
}

static char *script_args(const char *extra)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "{\"guest\":\"a-1\",\"language\":\"shell\"%s%s}", *extra ? "," : "", extra);
	return strbuf_detach(&sb, NULL);
}

static void expect_script(const char *extra, const char *want)
{
	char *args = script_args(extra);
	expect(TOOL_SCRIPT, args, want);
	free(args);
}

static void test_script(void **state)
{
	(void)state;
	expect_script("\"inline\":true,\"code\":\"echo hi\"", NULL);
	expect_script("\"inline\":false,\"localPath\":\"scripts/a.sh\"", NULL);
	expect_script("\"inline\":true", "/code is required with inline: true");
	expect_script("\"inline\":true,\"code\":\"x\",\"localPath\":\"a.sh\"",
	              "/localPath is not allowed with inline: true; send the script text in code");
	expect_script("\"inline\":false", "/localPath is required with inline: false");
	expect_script("\"inline\":false,\"localPath\":\"a.sh\",\"code\":\"x\"",
	              "/code is not allowed with inline: false; send the file path in localPath");
	expect_script("\"inline\":true,\"code\":\"x\",\"diagnostic\":true", NULL);
	expect_script("\"inline\":true,\"code\":\"x\",\"diagnostic\":true,\"snapshots\":{}",
	              "/snapshots is not allowed with diagnostic: true; a diagnostic run takes no snapshots "
	              "and joins no "
	              "group");
	expect(
	    TOOL_SCRIPT,
	    "{\"guest\":\"a-1\",\"language\":\"python\",\"inline\":true,\"code\":\"x\",\"diagnostic\":true}",
	    "/diagnostic is only allowed with language shell");
	expect(
	    TOOL_SCRIPT,
	    "{\"guest\":\"a-1\",\"language\":\"python\",\"inline\":true,\"code\":\"x\",\"diagnostic\":false}",
	    NULL);

	/* code: 1,048,576 bytes of UTF-8 at most (the schema counts characters). */
	size_t chars = 400000; /* 3 bytes each: 1,200,000 bytes */
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "\"inline\":true,\"code\":\"");
	for (size_t i = 0; i < chars; i++)
		strbuf_puts(&sb, "\xe2\x82\xac");
	strbuf_putc(&sb, '"');
	expect_script(strbuf_str(&sb), "/code is 1200000 bytes of UTF-8; at most 1048576 bytes are accepted");
	strbuf_free(&sb);

	/* A diagnostic script: 98,304 bytes at most. */
	strbuf_puts(&sb, "\"inline\":true,\"diagnostic\":true,\"code\":\"");
	for (size_t i = 0; i < 98305; i++)
		strbuf_putc(&sb, 'x');
	strbuf_putc(&sb, '"');
	expect_script(strbuf_str(&sb),
	              "/code is 98305 bytes; a diagnostic script travels as one argument and may have "
	              "at most 98304 bytes");
	strbuf_free(&sb);
	strbuf_puts(&sb, "\"inline\":true,\"diagnostic\":true,\"code\":\"");
	for (size_t i = 0; i < 98304; i++)
		strbuf_putc(&sb, 'x');
	strbuf_putc(&sb, '"');
	expect_script(strbuf_str(&sb), NULL);
	strbuf_free(&sb);
}

static void test_image(void **state)
{
	(void)state;
	expect(TOOL_IMAGE,
	       "{\"guest\":\"a-1\",\"target\":{\"source\":\"application\",\"name\":\"screens\",\"path\":\"a/"
	       "b.png\"}}",
	       NULL);
	expect(TOOL_IMAGE, "{\"guest\":\"a-1\",\"target\":{\"source\":\"application\",\"name\":\"screens\"}}",
	       NULL);
	/* No semantic rule: a path that escapes its declaration is the delivery
	 * status unsafe-path (spec/images.md §1.2), not invalid-input. */
	expect(TOOL_IMAGE,
	       "{\"guest\":\"a-1\",\"target\":{\"source\":\"application\",\"name\":\"screens\",\"path\":\"../"
	       "x.png\"}}",
	       NULL);
}

static void test_console_open(void **state)
{
	(void)state;
	const char *base = "\"guest\":\"a-1\",\"console_id\":\"c-1\",\"attempt_id\":\"a-1\",\"reason\":\"r\","
	                   "\"expected\":\"e\"";
	char args[512];
	snprintf(args, sizeof args, "{%s,\"userRequested\":true}", base);
	expect(TOOL_CONSOLE_OPEN, args, NULL);
	const char *bad[] = {"false", "1", "\"true\"", "null"};
	for (size_t i = 0; i < 4; i++) {
		snprintf(args, sizeof args, "{%s,\"userRequested\":%s}", base, bad[i]);
		expect(TOOL_CONSOLE_OPEN, args,
		       "/userRequested must be true: opening requires an explicit user request");
	}
}

static int setup(void **state)
{
	(void)state;
	char err[256];
	return contract_init(err, sizeof err);
}

/* spec/lifecycle.md §12 rule 1: every text field with a NUL is refused, naming
 * the field, instead of being cut at it (issue 17, defect 4). */
static void test_nul_in_any_text_field(void **state)
{
	(void)state;
	const char *nul = "contains U+0000 (a NUL byte), which no text field accepts; remove it";
	struct {
		relay_tool tool;
		const char *args;
		const char *pointer;
	} cases[] = {
	    {TOOL_STAGE, "{\"guest\":\"a-1\",\"workspace\":\"ws\\u0000/../../outside\"}", "/workspace"},
	    {TOOL_STAGE, "{\"guest\":\"a-1\",\"files\":[{\"local\":\"x\\u0000y\",\"path\":\"a\"}]}",
	     "/files/0/local"},
	    {TOOL_STAGE, "{\"guest\":\"a-1\",\"nodePath\":\"n\\u0000\"}", "/nodePath"},
	    {TOOL_SCRIPT,
	     "{\"guest\":\"a-1\",\"language\":\"shell\",\"inline\":false,\"localPath\":\"a.sh\\u0000.txt\"}",
	     "/localPath"},
	    {TOOL_SCRIPT,
	     "{\"guest\":\"a-1\",\"language\":\"shell\",\"inline\":true,\"code\":\"x\",\"reason\":"
	     "\"r\\u0000cut\"}",
	     "/reason"},
	    {TOOL_SCRIPT,
	     "{\"guest\":\"a-1\",\"language\":\"shell\",\"inline\":true,\"code\":\"x\",\"step\":{\"id\":\"s-"
	     "1\","
	     "\"title\":\"t\\u0000cut\"}}",
	     "/step/title"},
	    {TOOL_IMAGE,
	     "{\"guest\":\"a-1\",\"target\":{\"source\":\"application\",\"name\":\"out\\u0000junk\"}}",
	     "/target/name"},
	    {TOOL_SEARCH, "{\"name\":\"\\u0000\"}", "/name"},
	    {TOOL_CONSOLE_OPEN,
	     "{\"guest\":\"a-1\",\"console_id\":\"c-1\",\"attempt_id\":\"a-1\",\"reason\":\"r\",\"expected\":"
	     "\"e\\u0000\",\"userRequested\":true}",
	     "/expected"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char want[512];
		snprintf(want, sizeof want, "%s %s", cases[i].pointer, nul);
		expect(cases[i].tool, cases[i].args, want);
	}
	/* Script code is refused whole, never run cut (printf A\0; printf B). */
	expect(
	    TOOL_SCRIPT,
	    "{\"guest\":\"a-1\",\"language\":\"shell\",\"inline\":true,\"diagnostic\":true,"
	    "\"code\":\"printf A\\u0000; printf B\"}",
	    "/code contains U+0000 (a NUL byte), which no script can hold, so the script is refused whole; "
	    "remove it");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_probe),
	    cmocka_unit_test(test_acquire),
	    cmocka_unit_test(test_stage),
	    cmocka_unit_test(test_script),
	    cmocka_unit_test(test_image),
	    cmocka_unit_test(test_console_open),
	    cmocka_unit_test(test_nul_in_any_text_field),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
