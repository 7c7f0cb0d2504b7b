/* plugin-test check 46: a machine's typed console (relay/machine.h
 * relay_machine_console_ops, ABI 1.7), as the console plugin reaches it
 * through the machine link (loader_machine_link: the plugin's own table,
 * or the loader's adapter of a 1.0-1.6 string slot). */
#include <stdio.h>
#include <string.h>

#include "cli/plugin_test.h"
#include "util/jsonx.h"

/* One answer by the rules: RELAY_OK with a JSON object, or a failure with
 * its error record filled and nothing in the out-parameter. NULL when it
 * keeps them, else what it broke (static). */
static const char *answer_problem(relay_status st, const relay_error *err, char *out)
{
	if (st != RELAY_OK)
		return err->code != st || err->message[0] == '\0' ? "failed without filling its error record"
		       : out != NULL ? "failed but left a value in its out-parameter"
		                     : NULL;
	json_object *o = out ? jsonx_parse_str(out, NULL, 0) : NULL;
	bool object = json_object_is_type(o, json_type_object);
	json_object_put(o);
	return object ? NULL : "answered RELAY_OK without a JSON object";
}

void pt_check_machine_console(pt_run *run)
{
	relay_machine_link link;
	loader_machine_link(run->plugin, &link);
	if (link.console == NULL) {
		pt_skip(run, 46, "the machine has no console (neither console_ops nor the 1.0-1.6 slot)");
		return;
	}
	const relay_machine_console_ops *c = link.console;
	const char *lease = run->lease_json ? run->lease_json : "{\"vm\":\"relay-plugin-test-none\"}";
	struct {
		const char *op;
		relay_status st;
		relay_error err;
		char *out;
	} calls[3];
	memset(calls, 0, sizeof calls);
	calls[0].op = "capabilities";
	calls[0].st = c->capabilities(link.console_state, NULL, 0, &calls[0].out, &calls[0].err);
	calls[1].op = "resolve";
	calls[1].st = c->resolve(link.console_state, lease, NULL, 0, &calls[1].out, &calls[1].err);
	/* An attempt id outside [A-Za-z0-9][A-Za-z0-9_.-]{0,119} is never opened. */
	calls[2].op = "open with the attempt id \"bad id!\"";
	calls[2].st = c->open(link.console_state, lease, "relay-plugin-test", "bad id!", NULL, 0,
	                      &calls[2].out, &calls[2].err);
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
		const char *problem = answer_problem(calls[i].st, &calls[i].err, calls[i].out);
		if (i == 2 && calls[i].st == RELAY_OK)
			problem = "answered RELAY_OK: refuse an invalid attempt id before launching anything";
		if (problem)
			pt_fail(run, 46, "the machine console's %s %s (%s) (relay/machine.h console_ops)",
			        calls[i].op, problem, pt_status(calls[i].st));
		pt_host()->free(calls[i].out);
	}
	/* R1 for the typed slots counts in checks 3-5 like every operation's. */
	char *out = NULL;
	relay_error err;
	const unsigned f = PT_UNKNOWN_FLAG;
	memset(&err, 0, sizeof err);
	pt_refusal(run, "machine", "console capabilities",
	           c->capabilities(link.console_state, NULL, f, &out, &err), &err, &out);
	memset(&err, 0, sizeof err);
	pt_refusal(run, "machine", "console resolve",
	           c->resolve(link.console_state, lease, NULL, f, &out, &err), &err, &out);
	memset(&err, 0, sizeof err);
	pt_refusal(run, "machine", "console open",
	           c->open(link.console_state, lease, "relay-plugin-test", "a1", NULL, f, &out, &err), &err,
	           &out);
	memset(&err, 0, sizeof err);
	pt_refusal(run, "machine", "console cancel",
	           c->cancel(link.console_state, lease, "relay-plugin-test", "a1", NULL, f, &out, &err), &err,
	           &out);
	pt_ran(run, 46);
}
