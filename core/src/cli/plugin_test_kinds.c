/* plugin-test checks 2-5 (ops table sizes, flag refusal, error records,
 * out-parameters after a failure) and 40, 45 (capture, console). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plugin_test.h"
#include "util/jsonx.h"

void pt_check_tables(pt_run *run)
{
	const loaded_plugin *p = run->plugin;
	const relay_plugin_descriptor *d = &p->descriptor;
	struct {
		uint32_t kind;
		uint32_t own, declared;
	} tables[] = {
	    {RELAY_KIND_MACHINE, p->machine.struct_size, d->machine_ops_size},
	    {RELAY_KIND_TRANSPORT, p->transport.struct_size, d->transport_ops_size},
	    {RELAY_KIND_CAPTURE, p->capture.struct_size, d->capture_ops_size},
	    {RELAY_KIND_CONSOLE, p->console.struct_size, d->console_ops_size},
	};
	for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
		if (!(d->kinds & tables[i].kind) || tables[i].own == tables[i].declared)
			continue;
		const char *kind = loader_kind_name((relay_plugin_kind)tables[i].kind);
		pt_fail(
		    run, 2,
		    "the %s ops table says struct_size %u but the descriptor says %s_ops_size %u: give both "
		    "sizeof(relay_%s_ops) (relay/plugin.h R6)",
		    kind, tables[i].own, kind, tables[i].declared, kind);
	}
	pt_ran(run, 2);
}

void pt_refusal(pt_run *run, const char *kind, const char *op, relay_status status, const relay_error *err,
                char **out)
{
	if (status != RELAY_E_UNSUPPORTED_FLAGS) {
		pt_fail(run, 3,
		        "%s %s answered %s to the unknown flag bit 0x%x: refuse unknown bits with "
		        "RELAY_E_UNSUPPORTED_FLAGS before anything else (relay/plugin.h R1)",
		        kind, op, pt_status(status), PT_UNKNOWN_FLAG);
	} else {
		pt_ran(run, 3);
	}
	if (status != RELAY_OK) {
		if (err->code != status || err->message[0] == '\0')
			pt_fail(run, 4,
			        "%s %s failed with %s but its error record holds code %d and %s message: "
			        "fill err "
			        "with host->error_set (relay/plugin.h R2)",
			        kind, op, pt_status(status), (int)err->code,
			        err->message[0] ? "a" : "an empty");
		else
			pt_ran(run, 4);
		if (out != NULL && *out != NULL)
			pt_fail(
			    run, 5,
			    "%s %s failed but left a value in its out-parameter: leave NULL there after a "
			    "failure (relay/plugin.h R3)",
			    kind, op);
		else
			pt_ran(run, 5);
	}
	if (out != NULL) {
		pt_host()->free(*out);
		*out = NULL;
	}
}

/* One refusal check: `call` is an expression using `st`, `err` and `out`. */
#define PT_REFUSE(run, kind, op, call)                                                                       \
	do {                                                                                                 \
		relay_error err;                                                                             \
		memset(&err, 0, sizeof err);                                                                 \
		char *out = NULL;                                                                            \
		relay_status st = (call);                                                                    \
		pt_refusal((run), (kind), (op), st, &err, &out);                                             \
	} while (0)

static void machine_flags(pt_run *run)
{
	const relay_machine_ops *m = &run->plugin->machine;
	relay_plugin_state *s = run->plugin->state;
	const char *lease = run->lease_json ? run->lease_json : "{}";
	const unsigned f = PT_UNKNOWN_FLAG;
	char *leased = NULL;
	relay_error acquire_err;
	memset(&acquire_err, 0, sizeof acquire_err);
	relay_status acquired = m->acquire(s, "{\"purpose\":\"relay-plugin-test-flags\",\"image\":\"none\"}",
	                                   NULL, f, &leased, &acquire_err);
	if (acquired == RELAY_OK && leased != NULL) { /* it leased despite the flag: give it back */
		relay_error ignored;
		m->release(s, leased, "failed", NULL, 0, &ignored);
	}
	pt_refusal(run, "machine", "acquire", acquired, &acquire_err, &leased);
	PT_REFUSE(run, "machine", "renew", m->renew(s, lease, 60000, NULL, f, &out, &err));
	PT_REFUSE(run, "machine", "inspect", m->inspect(s, lease, NULL, f, &out, &err));
	PT_REFUSE(run, "machine", "verify_destroyed", m->verify_destroyed(s, lease, NULL, f, &out, &err));
	PT_REFUSE(run, "machine", "images", m->images(s, NULL, f, &out, &err));
	if (m->health)
		PT_REFUSE(run, "machine", "health", m->health(s, NULL, f, &out, &err));
	if (m->catalog)
		PT_REFUSE(run, "machine", "catalog", m->catalog(s, NULL, f, &out, &err));
	if (m->find_by_purpose)
		PT_REFUSE(run, "machine", "find_by_purpose",
		          m->find_by_purpose(s, "relay-plugin-test", NULL, f, &out, &err));
	if (m->binding)
		PT_REFUSE(run, "machine", "binding", m->binding(s, f, &out, &err));
	if (m->doctor)
		PT_REFUSE(run, "machine", "doctor", m->doctor(s, NULL, f, &out, &err));
	/* The console's typed slots: check 46 (plugin_test_console.c). */
	/* Last: a release that ignores the flag ends the lease the later checks use. */
	PT_REFUSE(run, "machine", "release", m->release(s, lease, "released", NULL, f, &err));
}

static void transport_open_flags(pt_run *run)
{
	const relay_transport_ops *t = &run->plugin->transport;
	relay_plugin_state *s = run->plugin->state;
	relay_transport_conn *conn = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st =
	    t->open(s, run->lease_json ? run->lease_json : "{}", NULL, PT_UNKNOWN_FLAG, &conn, &err);
	bool left = st != RELAY_OK && conn != NULL;
	if (st == RELAY_OK && conn != NULL)
		t->close(s, conn, 0);
	pt_refusal(run, "transport", "open", st, &err, NULL);
	if (left)
		pt_fail(
		    run, 5,
		    "transport open failed but left a value in its out-parameter: leave NULL there after a "
		    "failure (relay/plugin.h R3)");
}

/* The machine link lent to a console plugin: a machine without a console
 * passthrough. */
static const relay_machine_ops no_console_machine = {.struct_size = sizeof(relay_machine_ops)};

static void console_flags(pt_run *run)
{
	const relay_console_ops *c = &run->plugin->console;
	relay_plugin_state *s = run->plugin->state;
	relay_machine_link link = {sizeof link, "plugin-test", &no_console_machine, NULL, NULL, NULL};
	const unsigned f = PT_UNKNOWN_FLAG;
	PT_REFUSE(run, "console", "capabilities", c->capabilities(s, &link, NULL, f, &out, &err));
	PT_REFUSE(run, "console", "resolve", c->resolve(s, &link, "{}", NULL, f, &out, &err));
	PT_REFUSE(run, "console", "open", c->open(s, &link, "{}", "console", "attempt", NULL, f, &out, &err));
	PT_REFUSE(run, "console", "cancel",
	          c->cancel(s, &link, "{}", "console", "attempt", NULL, f, &out, &err));
}

void pt_check_flags(pt_run *run)
{
	uint32_t kinds = run->plugin->descriptor.kinds;
	if (kinds & RELAY_KIND_MACHINE)
		machine_flags(run);
	if ((kinds & RELAY_KIND_TRANSPORT) && run->kind == RELAY_KIND_TRANSPORT)
		transport_open_flags(run);
	if (kinds & RELAY_KIND_CAPTURE)
		PT_REFUSE(run, "capture", "plan",
		          run->plugin->capture.plan(run->plugin->state, "{}", PT_UNKNOWN_FLAG, &out, &err));
	if (kinds & RELAY_KIND_CONSOLE)
		console_flags(run);
}

/* The rules of a plan (relay/capture.h) that check 40 holds. */
static const char *plan_problem(json_object *plan)
{
	bool enabled = false;
	if (!jsonx_get_bool(plan, "enabled", &enabled))
		return "the plan has no boolean \"enabled\"";
	if (jsonx_get_str(plan, "because") == NULL)
		return "the plan has no string \"because\"";
	json_object *capture = jsonx_get_obj(plan, "capture");
	if (enabled != (capture != NULL))
		return "the plan's \"capture\" is not null exactly when \"enabled\" is false";
	json_object *argv = jsonx_get_array(capture, "argv");
	int outs = 0;
	for (size_t i = 0; argv && i < json_object_array_length(argv); i++) {
		const char *arg = json_object_get_string(json_object_array_get_idx(argv, i));
		outs += arg && strcmp(arg, "@OUT@") == 0;
	}
	if (capture && outs != 1)
		return "the plan's capture argv does not hold exactly one \"@OUT@\"";
	json_object *stage = jsonx_get_array(plan, "stage");
	if (stage == NULL)
		return "the plan has no array \"stage\"";
	for (size_t i = 0; i < json_object_array_length(stage); i++) {
		const char *remote = jsonx_get_str(json_object_array_get_idx(stage, i), "remote");
		if (remote == NULL || remote[0] == '/' || strstr(remote, "..") != NULL)
			return "a plan's \"stage\" entry has no relative \"remote\" without \"..\"";
	}
	return NULL;
}

void pt_check_capture(pt_run *run)
{
	static const char context[] =
	    "{\"lease\":{\"vm\":\"plugin-test\",\"purpose\":\"relay-plugin-test\","
	    "\"image\":\"none\",\"display\":null},\"applications\":[],\"platform\":null,"
	    "\"guestRoot\":\"/var/tmp/plugin-test-mcp-relay-relay-plugin-test\","
	    "\"cuaDriver\":null}";
	relay_error err;
	memset(&err, 0, sizeof err);
	char *text = NULL;
	relay_status st = run->plugin->capture.plan(run->plugin->state, context, 0, &text, &err);
	json_object *plan = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	pt_host()->free(text);
	const char *problem = plan ? plan_problem(plan) : "plan answered RELAY_OK without a JSON object";
	if (st != RELAY_OK)
		pt_fail(run, 40, "plan answered %s: %s", pt_status(st), err.message);
	else if (problem)
		pt_fail(run, 40, "%s (relay/capture.h)", problem);
	else
		pt_ran(run, 40);
	json_object_put(plan);
}

void pt_check_console(pt_run *run)
{
	const relay_console_ops *c = &run->plugin->console;
	relay_machine_link link = {sizeof link, "plugin-test", &no_console_machine, NULL, NULL, NULL};
	relay_error err;
	memset(&err, 0, sizeof err);
	char *text = NULL;
	relay_status st = c->capabilities(run->plugin->state, &link, NULL, 0, &text, &err);
	json_object *caps = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	pt_host()->free(text);
	if (st == RELAY_OK && !json_object_is_type(caps, json_type_object))
		pt_fail(run, 45, "capabilities answered RELAY_OK without a JSON object");
	else if (st != RELAY_OK && (err.code != st || err.message[0] == '\0'))
		pt_fail(run, 45, "capabilities failed with %s without filling its error record",
		        pt_status(st));
	else
		pt_ran(run, 45);
	json_object_put(caps);
}
