/*
 * console-vnc — the console plugin (relay/console.h). It reaches the
 * machine backend through the machine's typed console (the link's
 * `console`, ABI 1.7; the core adapts an older machine's string slot)
 * (machine-service: HTTP; machine-local: x11vnc on the guest's display) and
 * normalises what comes back (spec/machine-service.md §3.2, §9, spec/tools.md
 * §3.3, §3.11-§3.13):
 *   - reports need schemaVersion 1, else "unsupported or malformed console
 *     report schema" (RELAY_E_PROTOCOL);
 *   - every token field must match ^[a-zA-Z0-9_.-]{1,120}$, else it reads
 *     "unknown" (a reason becomes null);
 *   - server_enforced_view_only and transport_connected are booleans or
 *     "unknown";
 *   - only the allow-listed fields are kept (plus machine-local's
 *     non-secret "endpoint" and "viewer_launched" facts, and the
 *     capabilities' "options.placement", which the core normalises).
 * It never adds a claim the backend did not make: pixels, authentication,
 * viewer connection and human confirmation are passed as reported.
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "relay/console.h"
#include "relay/host.h"
#include "relay/machine.h"
#include "relay/plugin.h"
#include "relay_support/json_get.h"

#define PLUGIN_NAME "console-vnc"

typedef struct vnc_state {
	const relay_host *host;
} vnc_state;

static bool token_ok(const char *s)
{
	if (s == NULL)
		return false;
	size_t n = strlen(s);
	if (n < 1 || n > 120)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!(isalnum(c) || c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

static json_object *get(json_object *o, const char *key)
{
	json_object *v = NULL;
	if (o == NULL || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

/* A token field: the value when it is a valid token, else "unknown". */
static void put_token(json_object *out, json_object *in, const char *key)
{
	const char *v = rsj_get_str(in, key);
	json_object_object_add(out, key, json_object_new_string(token_ok(v) ? v : "unknown"));
}

/* A reason: a valid token or null. */
static void put_reason(json_object *out, json_object *in, const char *key)
{
	const char *v = rsj_get_str(in, key);
	json_object_object_add(out, key, token_ok(v) ? json_object_new_string(v) : NULL);
}

/* A boolean or "unknown". */
static void put_bool_or_unknown(json_object *out, json_object *in, const char *key)
{
	json_object *v = get(in, key);
	if (v && json_object_is_type(v, json_type_boolean))
		json_object_object_add(out, key, json_object_new_boolean(json_object_get_boolean(v)));
	else
		json_object_object_add(out, key, json_object_new_string("unknown"));
}

/* An identity (vm, lease_id, console_id...) passes as text or null. */
static void put_identity(json_object *out, json_object *in, const char *key)
{
	const char *v = rsj_get_str(in, key);
	json_object_object_add(out, key, v && strlen(v) <= 256 ? json_object_new_string(v) : NULL);
}

static void put_number(json_object *out, json_object *in, const char *key)
{
	json_object *v = get(in, key);
	if (v && (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
		json_object_object_add(out, key, json_object_new_double(json_object_get_double(v)));
	else
		json_object_object_add(out, key, NULL);
}

static json_object *normalise_backend(json_object *in)
{
	json_object *o = json_object_new_object();
	json_object *avail = get(in, "available");
	bool available =
	    avail && json_object_is_type(avail, json_type_boolean) && json_object_get_boolean(avail);
	json_object_object_add(o, "available", json_object_new_boolean(available));
	static const char *const tokens[] = {"status",         "backend",           "viewer_location",
	                                     "authentication", "guest_readiness",   "session_binding",
	                                     "pixels",         "human_confirmation"};
	for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
		put_token(o, in, tokens[i]);
	put_bool_or_unknown(o, in, "server_enforced_view_only");
	return o;
}

static relay_status normalise_capabilities(vnc_state *st, const char *text, char **out, relay_error *err)
{
	json_object *in = text ? json_tokener_parse(text) : NULL;
	json_object *vnc = get(get(in, "options"), "vnc");
	json_object *def = get(vnc, "default");
	json_object *backends = get(vnc, "backends");
	json_object *sv = get(in, "schemaVersion");
	bool ok = in && sv && json_object_is_type(sv, json_type_int) && json_object_get_int(sv) == 1 && def &&
	          json_object_is_type(def, json_type_boolean) && !json_object_get_boolean(def) && backends;
	static const char *const oses[] = {"linux", "macos"};
	for (size_t i = 0; ok && i < 2; i++) {
		json_object *a = get(get(backends, oses[i]), "available");
		ok = a && json_object_is_type(a, json_type_boolean);
	}
	if (!ok) {
		if (in)
			json_object_put(in);
		return st->host->error_set(err, RELAY_E_PROTOCOL, 0,
		                           "unsupported or malformed acquisition-capabilities schema");
	}
	json_object *nb = json_object_new_object();
	for (size_t i = 0; i < 2; i++)
		json_object_object_add(nb, oses[i], normalise_backend(get(backends, oses[i])));
	json_object *nvnc = json_object_new_object();
	json_object_object_add(nvnc, "default", json_object_new_boolean(false));
	json_object_object_add(nvnc, "backends", nb);
	json_object *options = json_object_new_object();
	json_object_object_add(options, "vnc", nvnc);
	/* Where the backend places guests (machine-docker on a Swarm): passed on
	 * as it came; the core keeps only its allow-listed fields, normalised
	 * (core/src/console/console_report.c). */
	json_object *placement = get(get(in, "options"), "placement");
	if (placement && json_object_is_type(placement, json_type_object))
		json_object_object_add(options, "placement", json_object_get(placement));
	json_object *res = json_object_new_object();
	json_object_object_add(res, "schemaVersion", json_object_new_int(1));
	json_object_object_add(res, "options", options);
	const char *t =
	    json_object_to_json_string_ext(res, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	*out = t ? st->host->strdup(t) : NULL;
	json_object_put(res);
	json_object_put(in);
	return *out ? RELAY_OK : st->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

static json_object *normalise_attempt(json_object *in)
{
	if (in == NULL || !json_object_is_type(in, json_type_object))
		return NULL;
	json_object *o = json_object_new_object();
	put_identity(o, in, "attempt_id");
	put_token(o, in, "status");
	put_reason(o, in, "reason");
	put_bool_or_unknown(o, in, "transport_connected");
	put_token(o, in, "viewer_cleanup");
	put_token(o, in, "authentication");
	put_token(o, in, "viewer_connected");
	put_token(o, in, "human_confirmation");
	return o;
}

static relay_status normalise_report(vnc_state *st, const char *text, char **out, relay_error *err)
{
	json_object *in = text ? json_tokener_parse(text) : NULL;
	json_object *sv = get(in, "schemaVersion");
	if (in == NULL || !sv || !json_object_is_type(sv, json_type_int) || json_object_get_int(sv) != 1) {
		if (in)
			json_object_put(in);
		return st->host->error_set(err, RELAY_E_PROTOCOL, 0,
		                           "unsupported or malformed console report schema");
	}
	json_object *o = json_object_new_object();
	json_object_object_add(o, "schemaVersion", json_object_new_int(1));
	put_identity(o, in, "vm");
	put_identity(o, in, "lease_id");
	put_identity(o, in, "console_id");
	put_identity(o, in, "environment_fingerprint");
	static const char *const tokens[] = {"status",
	                                     "backend",
	                                     "viewer_location",
	                                     "authentication",
	                                     "authentication_mechanism",
	                                     "viewer_connected",
	                                     "human_confirmation",
	                                     "pixels",
	                                     "session_binding",
	                                     "readiness_scope",
	                                     "source"};
	for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
		put_token(o, in, tokens[i]);
	put_reason(o, in, "reason");
	put_bool_or_unknown(o, in, "server_enforced_view_only");
	put_number(o, in, "observed_at");
	put_number(o, in, "access_expires_at");
	json_object_object_add(o, "attempt", normalise_attempt(get(in, "attempt")));
	/* machine-local's non-secret facts for a person launching a viewer. */
	json_object *endpoint = get(in, "endpoint");
	if (endpoint && json_object_is_type(endpoint, json_type_object)) {
		json_object *ep = json_object_new_object();
		put_identity(ep, endpoint, "address");
		json_object *port = get(endpoint, "port");
		json_object_object_add(ep, "port",
		                       port && json_object_is_type(port, json_type_int)
		                           ? json_object_new_int(json_object_get_int(port))
		                           : NULL);
		put_identity(ep, endpoint, "networkNamespace");
		json_object_object_add(o, "endpoint", ep);
	}
	/* the browser live view (MCP_RELAY_VNC_VIEWER=browser): its origin and
	 * whether a browser was started, never its one-time URL */
	json_object *live = get(in, "live_view");
	if (live && json_object_is_type(live, json_type_object)) {
		json_object *lv = json_object_new_object();
		put_identity(lv, live, "origin");
		put_identity(lv, live, "launcher");
		put_identity(lv, live, "browser_reason");
		put_identity(lv, live, "control");
		put_identity(lv, live, "token");
		json_object *takes = get(live, "take_overs");
		json_object *tl = json_object_new_array();
		size_t nt = takes && json_object_is_type(takes, json_type_array)
		                ? json_object_array_length(takes)
		                : 0;
		for (size_t i = 0; i < nt && i < 64; i++) {
			json_object *t = json_object_array_get_idx(takes, i), *one = json_object_new_object();
			put_identity(one, t, "start");
			put_identity(one, t, "end");
			json_object_array_add(tl, one);
		}
		json_object_object_add(lv, "take_overs", tl);
		json_object *opened = get(live, "browser_opened");
		json_object_object_add(lv, "browser_opened",
		                       json_object_new_boolean(opened && json_object_get_boolean(opened)));
		json_object_object_add(o, "live_view", lv);
	}
	json_object *launched = get(in, "viewer_launched");
	if (launched && json_object_is_type(launched, json_type_boolean))
		json_object_object_add(o, "viewer_launched",
		                       json_object_new_boolean(json_object_get_boolean(launched)));
	const char *t =
	    json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	*out = t ? st->host->strdup(t) : NULL;
	json_object_put(o);
	json_object_put(in);
	return *out ? RELAY_OK : st->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

static relay_status check_link(vnc_state *st, const relay_machine_link *machine, relay_error *err)
{
	if (machine == NULL || machine->ops == NULL)
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "console-vnc needs the machine plugin");
	if (!RELAY_SIZED_HAS(machine, console_state) || machine->console == NULL)
		return st->host->error_set(
		    err, RELAY_E_UNSUPPORTED, 0,
		    "backend lacks acquisition capabilities; upgrade the machine service for VNC "
		    "(machine plugin %s has no console)",
		    machine->name ? machine->name : "?");
	return RELAY_OK;
}

/* The machine console's slots console-vnc calls with a lease. */
typedef enum vnc_op { VNC_RESOLVE, VNC_OPEN, VNC_CANCEL } vnc_op;

/* Calls the machine's typed console for the lease (resolve: no ids), and
 * normalises the answer as a report. */
static relay_status call_console(vnc_state *st, const relay_machine_link *machine, const char *lease_json,
                                 vnc_op kind, const char *console_id, const char *attempt_id,
                                 relay_call *call, char **report_out, relay_error *err)
{
	*report_out = NULL;
	relay_status s = check_link(st, machine, err);
	if (s != RELAY_OK)
		return s;
	json_object *lease = lease_json ? json_tokener_parse(lease_json) : NULL;
	bool has_lease_id = rsj_get_str(lease, "lease_id") != NULL;
	json_object_put(lease);
	if (!has_lease_id)
		return st->host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "this guest was acquired without a console; console sharing is never added to an "
		    "existing lease (its lease has no lease_id)");
	const relay_machine_console_ops *c = machine->console;
	char *raw = NULL;
	if (kind == VNC_RESOLVE)
		s = c->resolve(machine->console_state, lease_json, call, 0, &raw, err);
	else if (kind == VNC_OPEN)
		s = c->open(machine->console_state, lease_json, console_id, attempt_id, call, 0, &raw, err);
	else
		s = c->cancel(machine->console_state, lease_json, console_id, attempt_id, call, 0, &raw, err);
	if (s != RELAY_OK) {
		st->host->free(raw);
		return s;
	}
	s = normalise_report(st, raw, report_out, err);
	st->host->free(raw);
	return s;
}

static relay_status vnc_capabilities(relay_plugin_state *state, const relay_machine_link *machine,
                                     relay_call *call, unsigned flags, char **out, relay_error *err)
{
	vnc_state *st = state;
	*out = NULL;
	if (flags != 0)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0,
		                           "unknown capabilities flags 0x%x", flags);
	relay_status s = check_link(st, machine, err);
	if (s != RELAY_OK)
		return s;
	char *raw = NULL;
	s = machine->console->capabilities(machine->console_state, call, 0, &raw, err);
	if (s != RELAY_OK) {
		st->host->free(raw);
		return s;
	}
	s = normalise_capabilities(st, raw, out, err);
	st->host->free(raw);
	return s;
}

static relay_status vnc_resolve(relay_plugin_state *state, const relay_machine_link *machine,
                                const char *lease_json, relay_call *call, unsigned flags, char **out,
                                relay_error *err)
{
	vnc_state *st = state;
	*out = NULL;
	if (flags != 0)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown resolve flags 0x%x",
		                           flags);
	return call_console(st, machine, lease_json, VNC_RESOLVE, NULL, NULL, call, out, err);
}

static relay_status check_ids(vnc_state *st, const char *console_id, const char *attempt_id, relay_error *err)
{
	if (!token_ok(console_id) || !token_ok(attempt_id) || !isalnum((unsigned char)console_id[0]) ||
	    !isalnum((unsigned char)attempt_id[0]))
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "Invalid console request identity or fields");
	return RELAY_OK;
}

static relay_status vnc_open(relay_plugin_state *state, const relay_machine_link *machine,
                             const char *lease_json, const char *console_id, const char *attempt_id,
                             relay_call *call, unsigned flags, char **out, relay_error *err)
{
	vnc_state *st = state;
	*out = NULL;
	if (flags != 0)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown open flags 0x%x",
		                           flags);
	relay_status s = check_ids(st, console_id, attempt_id, err);
	if (s != RELAY_OK)
		return s;
	return call_console(st, machine, lease_json, VNC_OPEN, console_id, attempt_id, call, out, err);
}

static relay_status vnc_cancel(relay_plugin_state *state, const relay_machine_link *machine,
                               const char *lease_json, const char *console_id, const char *attempt_id,
                               relay_call *call, unsigned flags, char **out, relay_error *err)
{
	vnc_state *st = state;
	*out = NULL;
	if (flags != 0)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown cancel flags 0x%x",
		                           flags);
	relay_status s = check_ids(st, console_id, attempt_id, err);
	if (s != RELAY_OK)
		return s;
	return call_console(st, machine, lease_json, VNC_CANCEL, console_id, attempt_id, call, out, err);
}

static relay_status vnc_init(const relay_host *host, const char *config_json, unsigned flags,
                             relay_plugin_state **state_out, relay_error *err)
{
	(void)config_json;
	*state_out = NULL;
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown init flags 0x%x", flags);
	vnc_state *st = calloc(1, sizeof *st);
	if (st == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	st->host = host;
	*state_out = st;
	return RELAY_OK;
}

static void vnc_fini(relay_plugin_state *state)
{
	free(state);
}

static const relay_console_ops console_ops = {
    .struct_size = sizeof(relay_console_ops),
    .capabilities = vnc_capabilities,
    .resolve = vnc_resolve,
    .open = vnc_open,
    .cancel = vnc_cancel,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = PLUGIN_NAME,
    .version = "0.1.0",
    .description = "VNC console viewing through the machine backend",
    .kinds = RELAY_KIND_CONSOLE,
    .capabilities = 0,
    .init = vnc_init,
    .fini = vnc_fini,
    .console = &console_ops,
    .console_ops_size = sizeof(relay_console_ops),
};

/* Refuses a host older than 1.7: its machine link has no typed console. */
RELAY_PLUGIN_DEFINE_ENTRY_SINCE(descriptor, 7)
