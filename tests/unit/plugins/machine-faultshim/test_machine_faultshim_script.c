/* The fault shim's script (tests/plugins/machine-faultshim/fs_script.c):
 * every member of a rule, every refusal with its exact message, the
 * limits, the order rules apply in, the control file read again when it
 * changes, and the operation log's lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fs.h"

static int64_t fake_now_ms = 1000;

static relay_status t_error_set(relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static relay_status t_error_set(relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
{
	if (err) {
		err->code = code;
		err->sys_errno = sys_errno;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof err->message, fmt, ap);
		va_end(ap);
	}
	return code;
}

static void t_log(relay_log_level level, const char *plugin, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void t_log(relay_log_level level, const char *plugin, const char *fmt, ...)
{
	(void)level;
	(void)plugin;
	(void)fmt;
}

static int64_t t_now_ms(void)
{
	return fake_now_ms;
}

static int t_cancelled(const relay_call *call)
{
	return call != NULL; /* a non-NULL call stands for one already cancelled */
}

static relay_host test_host;

static void host_init(void)
{
	memset(&test_host, 0, sizeof test_host);
	test_host.abi_version = RELAY_ABI_VERSION;
	test_host.struct_size = sizeof test_host;
	test_host.error_set = t_error_set;
	test_host.log = t_log;
	test_host.now_ms = t_now_ms;
	test_host.call_cancelled = t_cancelled;
	test_host.alloc = malloc;
	test_host.free = free;
	test_host.strdup = strdup;
}

static void state_init(fs_state *st)
{
	host_init();
	memset(st, 0, sizeof *st);
	st->host = &test_host;
	pthread_mutex_init(&st->lock, NULL);
}

static void state_fini(fs_state *st)
{
	json_object_put(st->doc);
	pthread_mutex_destroy(&st->lock);
}

/* Parses `text` (a JSON array) into a fresh state; the status, with the
 * message in err. */
static relay_status parse(fs_state *st, const char *text, relay_error *err)
{
	state_init(st);
	memset(err, 0, sizeof *err);
	json_object *faults = json_tokener_parse(text);
	relay_status s = fs_parse_faults(st, faults, err);
	json_object_put(faults);
	return s;
}

static void refused(const char *text, relay_status code, const char *message)
{
	fs_state st;
	relay_error err;
	assert_int_equal(parse(&st, text, &err), code);
	assert_int_equal(err.code, code);
	assert_string_equal(err.message, message);
	state_fini(&st);
}

static void test_every_member_of_a_rule(void **unused)
{
	(void)unused;
	fs_state st;
	relay_error err;
	assert_int_equal(parse(&st,
	                       "[{\"op\":\"release\",\"match\":\"-retry-\",\"nth\":2,\"times\":3,"
	                       "\"fault\":\"delay\",\"code\":\"at capacity\",\"reason\":\"full\","
	                       "\"delayMs\":250}]",
	                       &err),
	                 RELAY_OK);
	assert_int_equal(st.rule_count, 1);
	const fs_rule *r = &st.rules[0];
	assert_string_equal(r->op, "release");
	assert_string_equal(r->match, "-retry-");
	assert_int_equal(r->nth, 2);
	assert_int_equal(r->times, 3);
	assert_int_equal(r->fault, FS_DELAY);
	assert_int_equal(r->code, RELAY_E_CAPACITY);
	assert_string_equal(r->reason, "full");
	assert_int_equal(r->delay_ms, 250);
	state_fini(&st);
}

static void test_defaults(void **unused)
{
	(void)unused;
	fs_state st;
	relay_error err;
	assert_int_equal(parse(&st,
	                       "[{\"op\":\"acquire\",\"fault\":\"fail\"},{\"op\":\"exec\",\"fault\":"
	                       "\"drop\",\"nth\":1},{\"op\":\"stream_open\",\"fault\":\"fail\"},"
	                       "{\"op\":\"stream_write\",\"fault\":\"fail\"},{\"op\":\"stream_read\","
	                       "\"fault\":\"fail\",\"times\":-1}]",
	                       &err),
	                 RELAY_OK);
	assert_int_equal(st.rule_count, 5);
	/* without nth: no end; with nth: once */
	assert_int_equal(st.rules[0].times, -1);
	assert_int_equal(st.rules[0].nth, 0);
	assert_string_equal(st.rules[0].match, "");
	assert_string_equal(st.rules[0].reason, "");
	assert_int_equal(st.rules[0].delay_ms, 0);
	assert_int_equal(st.rules[1].times, 1);
	/* the codes of relay/transport.h for the stream, else unavailable */
	assert_int_equal(st.rules[0].code, RELAY_E_UNAVAILABLE);
	assert_int_equal(st.rules[2].code, RELAY_E_TRANSIENT);
	assert_int_equal(st.rules[3].code, RELAY_E_INDETERMINATE);
	assert_int_equal(st.rules[4].code, RELAY_E_INDETERMINATE);
	assert_int_equal(st.rules[4].times, -1);
	state_fini(&st);
}

static void test_every_fault_name(void **unused)
{
	(void)unused;
	static const struct {
		const char *text;
		fs_fault fault;
	} cases[] = {
	    {"[{\"op\":\"push\",\"fault\":\"fail\"}]", FS_FAIL},
	    {"[{\"op\":\"push\",\"fault\":\"drop\"}]", FS_DROP},
	    {"[{\"op\":\"push\",\"fault\":\"delay\"}]", FS_DELAY},
	    {"[{\"op\":\"push\",\"fault\":\"hang\"}]", FS_HANG},
	    {"[{\"op\":\"pull\",\"fault\":\"corrupt\"}]", FS_CORRUPT},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		fs_state st;
		relay_error err;
		assert_int_equal(parse(&st, cases[i].text, &err), RELAY_OK);
		assert_int_equal(st.rules[0].fault, cases[i].fault);
		state_fini(&st);
	}
}

static void test_every_operation_is_known(void **unused)
{
	(void)unused;
	static const char *const ops[] = {"acquire",
	                                  "renew",
	                                  "inspect",
	                                  "release",
	                                  "verify_destroyed",
	                                  "images",
	                                  "health",
	                                  "catalog",
	                                  "find_by_purpose",
	                                  "doctor",
	                                  "console_capabilities",
	                                  "console_resolve",
	                                  "console_open",
	                                  "console_cancel",
	                                  "open",
	                                  "exec",
	                                  "push",
	                                  "pull",
	                                  "stream_open",
	                                  "stream_write",
	                                  "stream_read"};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		assert_true(fs_op_known(ops[i]));
	assert_false(fs_op_known("binding")); /* answered from the script's "binding", never failed */
	assert_false(fs_op_known("stream_close"));
	assert_false(fs_op_known(NULL));
}

static void test_refusals(void **unused)
{
	(void)unused;
	refused("{\"op\":\"acquire\"}", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: \"faults\" must be an array");
	refused("[{\"fault\":\"fail\"}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: a fault needs an \"op\" and a \"fault\"");
	refused("[{\"op\":\"acquire\"}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: a fault needs an \"op\" and a \"fault\"");
	refused("[\"acquire\"]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: a fault needs an \"op\" and a \"fault\"");
	refused("[{\"op\":7,\"fault\":\"fail\"}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: a fault needs an \"op\" and a \"fault\"");
	refused("[{\"op\":\"aquire\",\"fault\":\"fail\"}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: unknown op aquire; name an operation the shim forwards, such as "
	        "\"acquire\", \"exec\" or \"stream_write\"");
	refused("[{\"op\":\"acquire\",\"fault\":\"explode\"}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: unknown fault explode; accepted: fail, drop, delay, hang, corrupt "
	        "(pull only)");
	refused("[{\"op\":\"push\",\"fault\":\"corrupt\"}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: unknown fault corrupt; accepted: fail, drop, delay, hang, corrupt "
	        "(pull only)");
	refused("[{\"op\":\"acquire\",\"fault\":\"fail\",\"code\":\"broken\"}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: unknown code broken; give a name relay_status_str answers, such as "
	        "\"unavailable\"");
	refused("[{\"op\":\"acquire\",\"fault\":\"fail\",\"code\":\"ok\"}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: unknown code ok; give a name relay_status_str answers, such as "
	        "\"unavailable\"");
	refused("[{\"op\":\"acquire\",\"fault\":\"fail\",\"nth\":-1}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: \"nth\" must be an integer from 0 to 1000000");
	refused("[{\"op\":\"acquire\",\"fault\":\"fail\",\"nth\":\"2\"}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: \"nth\" must be an integer from 0 to 1000000");
	refused("[{\"op\":\"acquire\",\"fault\":\"fail\",\"times\":-2}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: \"times\" must be an integer from -1 to 1000000");
	refused("[{\"op\":\"acquire\",\"fault\":\"fail\",\"times\":1.5}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: \"times\" must be an integer from -1 to 1000000");
	refused("[{\"op\":\"acquire\",\"fault\":\"delay\",\"delayMs\":86400001}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: \"delayMs\" must be an integer from 0 to 86400000");
	refused("[{\"op\":\"acquire\",\"fault\":\"delay\",\"delayMs\":-5}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: \"delayMs\" must be an integer from 0 to 86400000");
}

static void test_limits(void **unused)
{
	(void)unused;
	/* the largest values are taken */
	fs_state st;
	relay_error err;
	assert_int_equal(parse(&st,
	                       "[{\"op\":\"acquire\",\"fault\":\"delay\",\"nth\":1000000,\"times\":1000000,"
	                       "\"delayMs\":86400000}]",
	                       &err),
	                 RELAY_OK);
	assert_int_equal(st.rules[0].nth, 1000000);
	assert_int_equal(st.rules[0].times, 1000000);
	assert_int_equal(st.rules[0].delay_ms, 86400000);
	state_fini(&st);
	refused("[{\"op\":\"acquire\",\"fault\":\"fail\",\"nth\":1000001}]", RELAY_E_INVALID_ARGUMENT,
	        "machine-faultshim: \"nth\" must be an integer from 0 to 1000000");

	/* FS_MAX_RULES rules, and no more */
	char text[8192] = "[";
	for (int i = 0; i <= FS_MAX_RULES; i++)
		strcat(text,
		       i ? ",{\"op\":\"exec\",\"fault\":\"fail\"}" : "{\"op\":\"exec\",\"fault\":\"fail\"}");
	strcat(text, "]");
	refused(text, RELAY_E_TOO_LARGE, "machine-faultshim: at most 32 faults");
	text[strlen(text) - 1 - strlen(",{\"op\":\"exec\",\"fault\":\"fail\"}")] = '\0';
	strcat(text, "]");
	assert_int_equal(parse(&st, text, &err), RELAY_OK);
	assert_int_equal(st.rule_count, FS_MAX_RULES);
	state_fini(&st);

	/* match and reason: 255 and 511 bytes are kept whole, one more is refused */
	char rule[2048], longest[600];
	memset(longest, 'm', 255);
	longest[255] = '\0';
	snprintf(rule, sizeof rule, "[{\"op\":\"exec\",\"fault\":\"fail\",\"match\":\"%s\"}]", longest);
	assert_int_equal(parse(&st, rule, &err), RELAY_OK);
	assert_int_equal(strlen(st.rules[0].match), 255);
	state_fini(&st);
	snprintf(rule, sizeof rule, "[{\"op\":\"exec\",\"fault\":\"fail\",\"match\":\"%sm\"}]", longest);
	refused(rule, RELAY_E_TOO_LARGE, "machine-faultshim: a fault's \"match\" is longer than 255 bytes");
	memset(longest, 'r', 511);
	longest[511] = '\0';
	snprintf(rule, sizeof rule, "[{\"op\":\"exec\",\"fault\":\"fail\",\"reason\":\"%s\"}]", longest);
	assert_int_equal(parse(&st, rule, &err), RELAY_OK);
	assert_int_equal(strlen(st.rules[0].reason), 511);
	state_fini(&st);
	snprintf(rule, sizeof rule, "[{\"op\":\"exec\",\"fault\":\"fail\",\"reason\":\"%sr\"}]", longest);
	refused(rule, RELAY_E_TOO_LARGE, "machine-faultshim: a fault's \"reason\" is longer than 511 bytes");
}

static void test_no_faults(void **unused)
{
	(void)unused;
	fs_state st;
	state_init(&st);
	relay_error err;
	assert_int_equal(fs_parse_faults(&st, NULL, &err), RELAY_OK);
	assert_int_equal(st.rule_count, 0);
	fs_rule copy;
	assert_null(fs_match(&st, "acquire", "x", &copy));
	state_fini(&st);
}

/* nth, times and match over a sequence of calls; the first rule that
 * applies wins, and every matching rule counts the call. */
static void test_matching_order(void **unused)
{
	(void)unused;
	fs_state st;
	relay_error err;
	assert_int_equal(
	    parse(&st,
	          "[{\"op\":\"acquire\",\"fault\":\"fail\",\"code\":\"at capacity\",\"times\":2},"
	          "{\"op\":\"acquire\",\"match\":\"-retry-\",\"fault\":\"drop\",\"nth\":4},"
	          "{\"op\":\"stream_write\",\"fault\":\"fail\",\"nth\":2}]",
	          &err),
	    RELAY_OK);
	fs_rule copy;
	const fs_rule *r = fs_match(&st, "acquire", "a-retry-1", &copy);
	assert_non_null(r);
	assert_int_equal(r->fault, FS_FAIL);
	assert_non_null(fs_match(&st, "acquire", "other", &copy)); /* times 2: no match needed */
	/* nth counts the calls its match takes: the second and third -retry- call... */
	assert_null(fs_match(&st, "acquire", "a-retry-2", &copy));
	assert_null(fs_match(&st, "acquire", "a-retry-3", &copy));
	r = fs_match(&st, "acquire", "a-retry-4", &copy); /* ...and the fourth applies */
	assert_non_null(r);
	assert_int_equal(r->fault, FS_DROP);
	assert_null(fs_match(&st, "acquire", "a-retry-5", &copy)); /* nth alone: once */
	assert_null(fs_match(&st, "acquire", NULL, &copy));        /* a match needs an argument */
	assert_null(fs_match(&st, "release", "a-retry-5", &copy));
	/* a stream broken after one request */
	assert_null(fs_match(&st, "stream_write", "request 1", &copy));
	r = fs_match(&st, "stream_write", "request 2", &copy);
	assert_non_null(r);
	assert_int_equal(r->code, RELAY_E_INDETERMINATE);
	assert_null(fs_match(&st, "stream_write", "request 3", &copy));
	state_fini(&st);
}

static void test_before_and_after(void **unused)
{
	(void)unused;
	fs_state st;
	relay_error err;
	assert_int_equal(parse(&st,
	                       "[{\"op\":\"acquire\",\"fault\":\"fail\",\"reason\":\"no room\",\"code\":"
	                       "\"at capacity\"},{\"op\":\"renew\",\"fault\":\"fail\"},{\"op\":\"inspect\","
	                       "\"fault\":\"drop\"},{\"op\":\"push\",\"fault\":\"delay\",\"delayMs\":60000}]",
	                       &err),
	                 RELAY_OK);
	fs_rule copy;
	assert_int_equal(fs_before(&st, fs_match(&st, "acquire", "s", &copy), "acquire", NULL, &err),
	                 RELAY_E_CAPACITY);
	assert_string_equal(err.message, "no room");
	assert_int_equal(fs_before(&st, fs_match(&st, "renew", "l", &copy), "renew", NULL, &err),
	                 RELAY_E_UNAVAILABLE);
	assert_string_equal(err.message, "machine-faultshim: renew failed by the fault script (unavailable)");
	/* a drop forwards, then loses the answer */
	const fs_rule *r = fs_match(&st, "inspect", "l", &copy);
	assert_int_equal(fs_before(&st, r, "inspect", NULL, &err), RELAY_OK);
	char *out = strdup("{\"vm\":\"x\"}");
	assert_int_equal(fs_after(&st, r, "inspect", RELAY_OK, &out, NULL, &err), RELAY_E_INDETERMINATE);
	assert_null(out);
	assert_string_equal(
	    err.message,
	    "machine-faultshim: the answer of inspect was lost after it succeeded (fault script)");
	/* a delay watches its call: one cancelled (t_cancelled) ends it at once */
	int cancelled_call;
	assert_int_equal(
	    fs_before(&st, fs_match(&st, "push", "/p", &copy), "push", (relay_call *)&cancelled_call, &err),
	    RELAY_E_CANCELLED);
	assert_string_equal(err.message, "machine-faultshim: push was cancelled during its scripted delay");
	assert_int_equal(fs_before(&st, NULL, "push", NULL, &err), RELAY_OK);
	state_fini(&st);
}

static void test_lease_extra_merged(void **unused)
{
	(void)unused;
	fs_state st;
	state_init(&st);
	st.doc = json_tokener_parse("{\"leaseExtra\":{\"display\":\":5\"},\"binding\":{\"machine\":\"m\"}}");
	relay_error err;
	char *out = strdup("{\"vm\":\"x\"}");
	assert_int_equal(fs_after(&st, NULL, "acquire", RELAY_OK, &out, NULL, &err), RELAY_OK);
	assert_string_equal(out, "{\"vm\":\"x\",\"display\":\":5\"}");
	free(out);
	json_object *binding = fs_script_obj(&st, "binding");
	assert_string_equal(fs_json_str(binding, "machine"), "m");
	json_object_put(binding);
	assert_null(fs_script_obj(&st, "missing"));
	state_fini(&st);
}

static void write_file(const char *path, const char *text)
{
	char tmp[1024 + sizeof ".tmp"]; /* the callers' paths are at most 1023 bytes */
	int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
	assert_true(n > 0 && (size_t)n < sizeof tmp);
	FILE *f = fopen(tmp, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(rename(tmp, path), 0);
}

/* The control file replaces the rules when it changes (counters anew);
 * one that is no script keeps the rules there were. */
static void test_control_file(void **unused)
{
	(void)unused;
	char dir[] = "/tmp/relay-faultshim-XXXXXX";
	assert_non_null(mkdtemp(dir));
	fs_state st;
	state_init(&st);
	snprintf(st.control, sizeof st.control, "%s/control.json", dir);
	snprintf(st.log, sizeof st.log, "%s/ops.jsonl", dir);
	write_file(st.control, "{\"faults\":[{\"op\":\"exec\",\"fault\":\"fail\",\"nth\":1}]}");
	fs_rule copy;
	assert_non_null(fs_match(&st, "exec", "a", &copy));
	assert_null(fs_match(&st, "exec", "b", &copy));
	write_file(st.control, "{\"faults\":[{\"op\":\"exec\",\"fault\":\"drop\",\"nth\":1}]}");
	const fs_rule *r = fs_match(&st, "exec", "c", &copy);
	assert_non_null(r);
	assert_int_equal(r->fault, FS_DROP);
	write_file(st.control, "{\"faults\":[{\"op\":\"exec\",\"fault\":\"nonsense\"}], \"x\": 1}");
	assert_null(fs_match(&st, "exec", "d", &copy)); /* the drop's rules, used up */
	assert_int_equal(st.rule_count, 1);
	assert_int_equal(st.rules[0].fault, FS_DROP);
	/* the log: a line when a call begins and one when it ends */
	fake_now_ms = 4242;
	fs_log(&st, "renew", "lease-1", 30000, r, false, RELAY_OK);
	fs_log(&st, "renew", "lease-1", 30000, r, true, RELAY_E_INDETERMINATE);
	FILE *f = fopen(st.log, "r");
	assert_non_null(f);
	char line[1024], want[1024];
	assert_non_null(fgets(line, sizeof line, f));
	snprintf(want, sizeof want,
	         "{\"op\":\"renew\",\"arg\":\"lease-1\",\"pid\":%d,\"timeMs\":4242,\"ttlMs\":30000,\"fault\":"
	         "\"drop\"}\n",
	         (int)getpid());
	assert_string_equal(line, want);
	assert_non_null(fgets(line, sizeof line, f));
	snprintf(want, sizeof want,
	         "{\"op\":\"renew:end\",\"arg\":\"lease-1\",\"pid\":%d,\"timeMs\":4242,\"ttlMs\":30000,"
	         "\"fault\":\"drop\",\"result\":\"outcome indeterminate\"}\n",
	         (int)getpid());
	assert_string_equal(line, want);
	assert_null(fgets(line, sizeof line, f));
	fclose(f);
	unlink(st.log);
	unlink(st.control);
	rmdir(dir);
	state_fini(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_member_of_a_rule),
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_every_fault_name),
	    cmocka_unit_test(test_every_operation_is_known),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_no_faults),
	    cmocka_unit_test(test_matching_order),
	    cmocka_unit_test(test_before_and_after),
	    cmocka_unit_test(test_lease_extra_merged),
	    cmocka_unit_test(test_control_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
