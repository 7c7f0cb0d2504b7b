/* Console capabilities and reports as the relay's observations
 * (console/console_report.h). */
#include "console/console_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console/console_state.h"
#include "profile/environment.h"
#include "session/events.h"
#include "util/jsonx.h"
#include "util/timefmt.h"

#define TOKEN_MAX    120
#define IDENTITY_MAX 256

static bool valid_token(const char *text)
{
	size_t n = text ? strlen(text) : 0;
	if (n == 0 || n > TOKEN_MAX)
		return false;
	for (const char *c = text; *c; c++) {
		bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		          *c == '_' || *c == '.' || *c == '-';
		if (!ok)
			return false;
	}
	return true;
}

static void add_token(json_object *out, const json_object *in, const char *key)
{
	const char *v = jsonx_get_str(in, key);
	jsonx_add_str(out, key, valid_token(v) ? v : "unknown");
}

static void add_reason(json_object *out, const json_object *in, const char *key)
{
	const char *v = jsonx_get_str(in, key);
	jsonx_add_str(out, key, valid_token(v) ? v : NULL);
}

static void add_bool_or_unknown(json_object *out, const json_object *in, const char *key)
{
	bool b;
	if (jsonx_get_bool(in, key, &b))
		jsonx_add_bool(out, key, b);
	else
		jsonx_add_str(out, key, "unknown");
}

/* Identities (vm, lease_id, console_id, fingerprint, attempt_id) are kept
 * when they are plain names, else null; the identity checks judge them. */
static void add_identity(json_object *out, const json_object *in, const char *key)
{
	const char *v = jsonx_get_str(in, key);
	bool ok = v && v[0] && strlen(v) <= IDENTITY_MAX;
	for (const char *c = v; ok && *c; c++)
		ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		     *c == '_' || *c == '.' || *c == '-';
	jsonx_add_str(out, key, ok ? v : NULL);
}

/* Unix seconds as ISO 8601 whole seconds; null when absent or not a number. */
static void add_time(json_object *out, const json_object *in, const char *key)
{
	double seconds;
	if (jsonx_get_double(in, key, &seconds) && isfinite(seconds) && seconds >= 0 &&
	    seconds < 32503680000.0) {
		char iso[21];
		time_format_iso_seconds((int64_t)floor(seconds) * 1000, iso);
		jsonx_add_str(out, key, iso);
	} else {
		jsonx_add_null(out, key);
	}
}

/* How one allow-listed field of a report is kept (the add_* above; a count
 * is an integer >= 0, else null). */
typedef enum field_kind {
	FIELD_IDENTITY,
	FIELD_TOKEN,
	FIELD_REASON,
	FIELD_BOOL_OR_UNKNOWN,
	FIELD_TIME,
	FIELD_COUNT
} field_kind;

typedef struct report_field {
	const char *key;
	field_kind kind;
} report_field;

#define FIELDS(table) table, sizeof table / sizeof table[0]

/* Copies the fields of `in` that the table names into `out`, in its order,
 * each normalised by its kind: a report's object is its allow-list, written
 * once as data. */
static void add_fields(json_object *out, const json_object *in, const report_field *fields, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		const char *key = fields[i].key;
		int64_t v = -1;
		switch (fields[i].kind) {
		case FIELD_IDENTITY: add_identity(out, in, key); break;
		case FIELD_TOKEN: add_token(out, in, key); break;
		case FIELD_REASON: add_reason(out, in, key); break;
		case FIELD_BOOL_OR_UNKNOWN: add_bool_or_unknown(out, in, key); break;
		case FIELD_TIME: add_time(out, in, key); break;
		case FIELD_COUNT:
			if (jsonx_get_int(in, key, &v) && v >= 0)
				jsonx_add_int(out, key, v);
			else
				jsonx_add_null(out, key);
			break;
		}
	}
}

/* ---- capabilities -------------------------------------------------------------- */

/* options.vnc.backends.<os> after "available" (relay/console.h). */
static const report_field backend_fields[] = {{"status", FIELD_TOKEN},
                                              {"backend", FIELD_TOKEN},
                                              {"viewer_location", FIELD_TOKEN},
                                              {"authentication", FIELD_TOKEN},
                                              {"guest_readiness", FIELD_TOKEN},
                                              {"session_binding", FIELD_TOKEN},
                                              {"server_enforced_view_only", FIELD_BOOL_OR_UNKNOWN},
                                              {"pixels", FIELD_TOKEN},
                                              {"human_confirmation", FIELD_TOKEN}};

static json_object *backend_entry(const json_object *in)
{
	json_object *out = json_object_new_object();
	bool available = false;
	jsonx_get_bool(in, "available", &available);
	jsonx_add_bool(out, "available", available);
	add_fields(out, in, FIELDS(backend_fields));
	return out;
}

/* options.placement (relay/console.h): where the backend places guests,
 * a Swarm's nodes. Tokens as above, "reachable" a boolean or "unknown",
 * counts integers >= 0 or null; at most PLACEMENT_NODES_MAX nodes. NULL
 * when the backend reports none. */
#define PLACEMENT_NODES_MAX 256
static json_object *placement_entry(const json_object *in)
{
	json_object *nodes = jsonx_get_array(in, "nodes");
	if (nodes == NULL)
		return NULL;
	static const report_field node_fields[] = {
	    {"name", FIELD_TOKEN},          {"id", FIELD_TOKEN},
	    {"role", FIELD_TOKEN},          {"state", FIELD_TOKEN},
	    {"availability", FIELD_TOKEN},  {"engine", FIELD_TOKEN},
	    {"engine_source", FIELD_TOKEN}, {"reachable", FIELD_BOOL_OR_UNKNOWN},
	    {"guests", FIELD_COUNT},        {"memory_bytes", FIELD_COUNT},
	    {"nano_cpus", FIELD_COUNT}};
	json_object *list = json_object_new_array();
	size_t n = json_object_array_length(nodes);
	for (size_t i = 0; i < n && i < PLACEMENT_NODES_MAX; i++) {
		const json_object *node = json_object_array_get_idx(nodes, i);
		json_object *o = json_object_new_object();
		add_fields(o, node, FIELDS(node_fields));
		json_object_array_add(list, o);
	}
	json_object *out = json_object_new_object();
	add_token(out, in, "scheduler");
	jsonx_add(out, "nodes", list);
	jsonx_add_bool(out, "nodes_truncated", n > PLACEMENT_NODES_MAX);
	return out;
}

static json_object *wrap_backends(json_object *linux_entry, json_object *macos_entry)
{
	json_object *backends = json_object_new_object();
	jsonx_add(backends, "linux", linux_entry);
	jsonx_add(backends, "macos", macos_entry);
	json_object *vnc = json_object_new_object();
	jsonx_add_bool(vnc, "default", false);
	jsonx_add(vnc, "backends", backends);
	json_object *options = json_object_new_object();
	jsonx_add(options, "vnc", vnc);
	json_object *caps = json_object_new_object();
	jsonx_add_int(caps, "schemaVersion", 1);
	jsonx_add(caps, "options", options);
	return caps;
}

json_object *console_capabilities_normalise(const json_object *raw)
{
	int64_t version = 0;
	if (!jsonx_get_int(raw, "schemaVersion", &version) || version != 1)
		return NULL;
	json_object *vnc = jsonx_get_obj(jsonx_get_obj(raw, "options"), "vnc");
	bool def = true, available;
	if (!jsonx_get_bool(vnc, "default", &def) || def)
		return NULL;
	json_object *backends = jsonx_get_obj(vnc, "backends");
	json_object *linux_in = jsonx_get_obj(backends, "linux");
	json_object *macos_in = jsonx_get_obj(backends, "macos");
	if (!jsonx_get_bool(linux_in, "available", &available) ||
	    !jsonx_get_bool(macos_in, "available", &available))
		return NULL;
	json_object *caps = wrap_backends(backend_entry(linux_in), backend_entry(macos_in));
	json_object *placement = placement_entry(jsonx_get_obj(jsonx_get_obj(raw, "options"), "placement"));
	if (placement)
		jsonx_add(jsonx_get_obj(caps, "options"), "placement", placement);
	return caps;
}

json_object *console_capabilities_unconfigured(void)
{
	json_object *entries[2];
	for (int i = 0; i < 2; i++) {
		json_object *e = json_object_new_object();
		jsonx_add_bool(e, "available", false);
		for (size_t f = 0; f < sizeof backend_fields / sizeof backend_fields[0]; f++)
			jsonx_add_str(e, backend_fields[f].key,
			              strcmp(backend_fields[f].key, "status") == 0 ? "unconfigured"
			                                                           : "unknown");
		entries[i] = e;
	}
	return wrap_backends(entries[0], entries[1]);
}

/* ---- console reports ----------------------------------------------------------------- */

/* A console report's fields and its attempt's (relay/console.h), in the
 * order the observation shows them. */
static const report_field report_fields[] = {{"vm", FIELD_IDENTITY},
                                             {"lease_id", FIELD_IDENTITY},
                                             {"console_id", FIELD_IDENTITY},
                                             {"environment_fingerprint", FIELD_IDENTITY},
                                             {"status", FIELD_TOKEN},
                                             {"reason", FIELD_REASON},
                                             {"backend", FIELD_TOKEN},
                                             {"viewer_location", FIELD_TOKEN},
                                             {"authentication", FIELD_TOKEN},
                                             {"authentication_mechanism", FIELD_TOKEN},
                                             {"viewer_connected", FIELD_TOKEN},
                                             {"human_confirmation", FIELD_TOKEN},
                                             {"pixels", FIELD_TOKEN},
                                             {"server_enforced_view_only", FIELD_BOOL_OR_UNKNOWN},
                                             {"session_binding", FIELD_TOKEN},
                                             {"readiness_scope", FIELD_TOKEN},
                                             {"observed_at", FIELD_TIME},
                                             {"source", FIELD_TOKEN},
                                             {"access_expires_at", FIELD_TIME}};
static const report_field attempt_fields[] = {
    {"attempt_id", FIELD_IDENTITY},    {"status", FIELD_TOKEN},
    {"reason", FIELD_REASON},          {"transport_connected", FIELD_BOOL_OR_UNKNOWN},
    {"viewer_cleanup", FIELD_TOKEN},   {"authentication", FIELD_TOKEN},
    {"viewer_connected", FIELD_TOKEN}, {"human_confirmation", FIELD_TOKEN}};

static json_object *attempt_observation(const json_object *in)
{
	if (!json_object_is_type(in, json_type_object))
		return NULL;
	json_object *a = json_object_new_object();
	add_fields(a, in, FIELDS(attempt_fields));
	return a;
}

/* MCP_RELAY_VNC_VIEWER=browser: the live view's non-secret facts (its
 * loopback origin, whether and how a browser was opened, the control mode),
 * short strings only; NULL when the report has none. */
static json_object *live_view_observation(const json_object *report)
{
	json_object *live = NULL;
	if (!json_object_object_get_ex(report, "live_view", &live) ||
	    !json_object_is_type(live, json_type_object))
		return NULL;
	json_object *o = json_object_new_object();
	static const char *const texts[] = {"origin", "launcher", "browser_reason", "control", "token"};
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		const char *v = jsonx_get_str(live, texts[i]);
		jsonx_add_str(o, texts[i], v && strlen(v) <= 200 && !strchr(v, '#') ? v : NULL);
	}
	json_object *takes = jsonx_get_array(live, "take_overs");
	json_object *tl = json_object_new_array();
	size_t nt = takes ? json_object_array_length(takes) : 0;
	for (size_t i = 0; i < nt && i < 64; i++) {
		json_object *t = json_object_array_get_idx(takes, i), *one = json_object_new_object();
		const char *start = jsonx_get_str(t, "start"), *end = jsonx_get_str(t, "end");
		jsonx_add_str(one, "start", start && strlen(start) <= 40 ? start : NULL);
		jsonx_add_str(one, "end", end && strlen(end) <= 40 ? end : NULL);
		json_object_array_add(tl, one);
	}
	jsonx_add(o, "take_overs", tl);
	bool opened = false;
	jsonx_get_bool(live, "browser_opened", &opened);
	jsonx_add_bool(o, "browser_opened", opened);
	return o;
}

json_object *console_observation(const json_object *report)
{
	int64_t version = 0;
	if (!jsonx_get_int(report, "schemaVersion", &version) || version != 1)
		return NULL;
	json_object *o = json_object_new_object();
	jsonx_add_int(o, "schemaVersion", 1);
	add_fields(o, report, FIELDS(report_fields));
	json_object *attempt = NULL;
	json_object_object_get_ex(report, "attempt", &attempt);
	jsonx_add(o, "attempt", attempt_observation(attempt));
	json_object *live = live_view_observation(report);
	if (live)
		jsonx_add(o, "live_view", live);
	return o;
}

static bool same(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

const char *console_identity_problem(const json_object *obs, const char *vm, const char *lease_id,
                                     const char *console_id, const char *selected_fp, const char *lease_fp,
                                     char *buf, size_t len)
{
	const char *got_vm = jsonx_get_str(obs, "vm");
	const char *got_lease = jsonx_get_str(obs, "lease_id");
	if (!same(got_vm, vm) || !same(got_lease, lease_id)) {
		snprintf(
		    buf, len,
		    "Console lease identity mismatch: the report names %s (lease %s), the guest holds %s "
		    "(lease %s)",
		    got_vm ? got_vm : "no machine", got_lease ? got_lease : "none", vm ? vm : "none",
		    lease_id ? lease_id : "none");
		return buf;
	}
	const char *fp = jsonx_get_str(obs, "environment_fingerprint");
	if (fp && !same(fp, selected_fp) && !same(fp, lease_fp)) {
		snprintf(
		    buf, len,
		    "Console environment identity mismatch: the report names environment fingerprint %.8s, "
		    "neither the selected environment's nor the lease's",
		    fp);
		return buf;
	}
	const char *got_console = jsonx_get_str(obs, "console_id");
	if (!same(got_console, console_id)) {
		snprintf(
		    buf, len,
		    "Console instance identity mismatch: the report names console %s, the guest acquired %s",
		    got_console ? got_console : "none", console_id ? console_id : "none");
		return buf;
	}
	return NULL;
}

bool console_attempt_terminal(const char *status)
{
	return status && (strcmp(status, "cancelled") == 0 || strcmp(status, "closed") == 0 ||
	                  strcmp(status, "failed") == 0 || strcmp(status, "expired") == 0);
}

/* ---- relay_acquire step 6 ---------------------------------------------------------------- */

static const char *image_os(session_manager *m, const char *image, relay_call *call)
{
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	const char *os = NULL;
	if (machine && machine->machine.images(machine->state, call, 0, &text, &err) == RELAY_OK && text) {
		json_object *inventory = jsonx_parse_str(text, NULL, 0);
		const char *kind =
		    jsonx_get_str(jsonx_get_obj(jsonx_get_obj(inventory, "images"), image), "kind");
		if (kind && strcmp(kind, "linux") == 0)
			os = "linux";
		else if (kind && strcmp(kind, "macos") == 0)
			os = "macos";
		json_object_put(inventory);
	}
	free(text);
	return os;
}

int console_vnc_check(session_manager *m, const char *image, relay_call *call, const char **code_out,
                      char *msg, size_t len)
{
	loaded_plugin *console = m->backends->plugins[SLOT_CONSOLE];
	*code_out = "console-unavailable";
	if (console == NULL) {
		snprintf(
		    msg, len,
		    "VNC backend unavailable for this image OS; ordinary acquisition was not attempted (no "
		    "console plugin is loaded: %s)",
		    m->backends->load_errors[SLOT_CONSOLE] ? m->backends->load_errors[SLOT_CONSOLE]
		                                           : "the console slot is empty");
		return -1;
	}
	const char *os = image_os(m, image, call);
	if (os == NULL) {
		snprintf(
		    msg, len,
		    "VNC backend unavailable for this image OS; ordinary acquisition was not attempted (the "
		    "backend does not say which OS %s runs)",
		    image);
		return -1;
	}
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st =
	    console->console.capabilities(console->state, &m->backends->machine_link, call, 0, &text, &err);
	json_object *raw = st == RELAY_OK && text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	if (st != RELAY_OK) {
		*code_out = st == RELAY_E_UNSUPPORTED ? "console-unavailable" : "backend-unavailable";
		snprintf(
		    msg, len,
		    "VNC backend unavailable for this image OS; ordinary acquisition was not attempted (%s)",
		    err.message[0] ? err.message : relay_status_str(st));
		return -1;
	}
	json_object *caps = console_capabilities_normalise(raw);
	json_object_put(raw);
	if (caps == NULL) {
		*code_out = "backend-unavailable";
		snprintf(msg, len,
		         "unsupported or malformed acquisition-capabilities schema; ordinary acquisition was "
		         "not attempted");
		return -1;
	}
	json_object *entry = jsonx_get_obj(
	    jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(caps, "options"), "vnc"), "backends"), os);
	bool available = false;
	jsonx_get_bool(entry, "available", &available);
	int rc = 0;
	if (!available) {
		snprintf(msg, len,
		         "VNC backend unavailable for this image OS; ordinary acquisition was not attempted "
		         "(%s: %s)",
		         os, jsonx_get_str(entry, "status") ? jsonx_get_str(entry, "status") : "unknown");
		rc = -1;
	}
	json_object_put(caps);
	return rc;
}

/* ---- the resolve steps shared by the console tools ---------------------------------------- */

void console_guest_facts_free(console_guest_facts *f)
{
	free(f->lease_text);
	free(f->vm);
	free(f->lease_id);
	free(f->console_id);
	free(f->lease_fp);
	free(f->attempt_id);
	free(f->attempt_status);
	memset(f, 0, sizeof *f);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* The facts of the guest's lease (`lease_text`, handed over; NULL when it
 * holds none) and console slice. Under the slice's lock. */
static void read_facts(guest *g, char *lease_text, console_guest_facts *f)
{
	memset(f, 0, sizeof *f);
	json_object *lease = lease_text ? jsonx_parse_str(lease_text, NULL, 0) : NULL;
	if (lease == NULL) {
		free(lease_text);
		return;
	}
	f->lease_text = lease_text;
	f->vm = dup_or_null(jsonx_get_str(lease, "vm"));
	f->lease_id = dup_or_null(jsonx_get_str(lease, "lease_id"));
	json_object *lease_console = jsonx_get_obj(lease, "console");
	const char *console_id = jsonx_get_str(lease_console, "console_id");
	if (console_id == NULL)
		console_id = jsonx_get_str(g->console->observation, "console_id");
	f->console_id = dup_or_null(console_id);
	const char *fp = jsonx_get_str(jsonx_get_obj(lease, "record"), "environment_fingerprint");
	if (fp == NULL)
		fp = jsonx_get_str(lease_console, "environment_fingerprint");
	f->lease_fp = dup_or_null(fp);
	f->attempt_id = dup_or_null(jsonx_get_str(g->console->attempt, "attempt_id"));
	f->attempt_status = dup_or_null(jsonx_get_str(g->console->attempt, "status"));
	f->attempts_used =
	    g->console->attempt_ids ? (int)json_object_array_length(g->console->attempt_ids) : 0;
	json_object_put(lease);
}

void console_mark_unknown(session_manager *m, guest *g)
{
	slice_lock(g->console);
	bool known = g->console->observation != NULL;
	if (known)
		jsonx_add_str(g->console->observation, "status", "unknown");
	slice_unlock(g->console);
	if (known)
		guest_persist(m, g);
}

int console_resolve_guest(session_manager *m, guest *g, relay_call *call, json_object **obs_out,
                          console_guest_facts *facts_out, relay_outcome *o)
{
	*obs_out = NULL;
	session_wait_startup(m);
	char *lease_text = guest_lease_text(m, g);
	slice_lock(g->console);
	bool vnc = g->console->vnc;
	read_facts(g, lease_text, facts_out);
	slice_unlock(g->console);
	console_guest_facts *f = facts_out;
	if (!vnc || f->lease_text == NULL || f->lease_id == NULL || f->console_id == NULL) {
		outcome_fail(
		    o, "console-unavailable",
		    "this guest was acquired without a console; console sharing is never added to an "
		    "existing lease");
		goto fail;
	}
	loaded_plugin *console = m->backends->plugins[SLOT_CONSOLE];
	if (console == NULL) {
		outcome_fail(o, "console-unavailable", "no console plugin is loaded (%s)",
		             m->backends->load_errors[SLOT_CONSOLE] ? m->backends->load_errors[SLOT_CONSOLE]
		                                                    : "the console slot is empty");
		goto fail;
	}
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = console->console.resolve(console->state, &m->backends->machine_link, f->lease_text,
	                                           call, 0, &text, &err);
	json_object *report = st == RELAY_OK && text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	if (st != RELAY_OK) {
		console_mark_unknown(m, g);
		outcome_fail(o, st == RELAY_E_UNSUPPORTED ? "console-unavailable" : "backend-unavailable",
		             "%s", err.message[0] ? err.message : relay_status_str(st));
		goto fail;
	}
	json_object *obs = console_observation(report);
	json_object_put(report);
	if (obs == NULL) {
		console_mark_unknown(m, g);
		outcome_fail(o, "backend-unavailable", "unsupported or malformed console report schema");
		goto fail;
	}
	char why[512];
	const char *selected_fp =
	    m->settings->environment ? environment_fingerprint(m->settings->environment) : NULL;
	if (console_identity_problem(obs, f->vm, f->lease_id, f->console_id, selected_fp, f->lease_fp, why,
	                             sizeof why)) {
		json_object_put(obs);
		console_mark_unknown(m, g);
		outcome_fail(o, "console-identity-mismatch", "%s", why);
		goto fail;
	}
	/* Step 5: store it; the current attempt follows the backend when the
	 * report speaks of it. */
	slice_lock(g->console);
	json_object_put(g->console->observation);
	g->console->observation = json_object_get(obs);
	const char *report_attempt = jsonx_get_str(jsonx_get_obj(obs, "attempt"), "attempt_id");
	const char *current = jsonx_get_str(g->console->attempt, "attempt_id");
	if (report_attempt && current && strcmp(report_attempt, current) == 0) {
		const char *status = jsonx_get_str(jsonx_get_obj(obs, "attempt"), "status");
		jsonx_add_str(g->console->attempt, "status", status);
		free(f->attempt_status);
		f->attempt_status = dup_or_null(status);
	}
	slice_unlock(g->console);
	guest_persist(m, g);
	*obs_out = obs;
	return 0;
fail:
	console_guest_facts_free(f);
	return -1;
}

/* The console the call names must be the one `obs` names. */
static int console_named_check(const json_object *obs, const char *console_id, relay_outcome *o)
{
	const char *resolved_console = jsonx_get_str(obs, "console_id");
	if (resolved_console != NULL && strcmp(resolved_console, console_id) == 0)
		return 0;
	return outcome_fail(o, "console-identity-mismatch",
	                    "Console instance identity mismatch: the call names console %s, the guest's "
	                    "console is %s",
	                    console_id, resolved_console ? resolved_console : "unknown");
}

int console_resolve_named(session_manager *m, guest *g, relay_call *call, const char *console_id,
                          json_object **obs_out, console_guest_facts *facts_out, relay_outcome *o)
{
	if (console_resolve_guest(m, g, call, obs_out, facts_out, o) != 0)
		return -1;
	if (console_named_check(*obs_out, console_id, o) == 0)
		return 0;
	json_object_put(*obs_out);
	*obs_out = NULL;
	console_guest_facts_free(facts_out);
	return -1;
}

json_object *console_attempt_request(session_manager *m, guest *g, relay_call *call,
                                     const console_guest_facts *facts, console_operation operation,
                                     const char *console_id, const char *attempt_id, relay_outcome *o)
{
	bool opening = operation == CONSOLE_OPEN;
	loaded_plugin *console = m->backends->plugins[SLOT_CONSOLE];
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = (opening ? console->console.open : console->console.cancel)(
	    console->state, &m->backends->machine_link, facts->lease_text, console_id, attempt_id, call, 0,
	    &text, &err);
	json_object *report = st == RELAY_OK && text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	json_object *obs = st == RELAY_OK ? console_observation(report) : NULL;
	json_object_put(report);
	char why[512] = "";
	const char *selected_fp =
	    m->settings->environment ? environment_fingerprint(m->settings->environment) : NULL;
	const char *reported_attempt = jsonx_get_str(jsonx_get_obj(obs, "attempt"), "attempt_id");
	const char *problem = NULL;
	if (st != RELAY_OK)
		problem = err.message[0] ? err.message : relay_status_str(st);
	else if (obs == NULL)
		problem = "unsupported or malformed console report schema";
	else if (console_identity_problem(obs, facts->vm, facts->lease_id, facts->console_id, selected_fp,
	                                  facts->lease_fp, why, sizeof why))
		problem = why;
	else if (reported_attempt == NULL || strcmp(reported_attempt, attempt_id) != 0)
		problem = "the report does not name this attempt";
	if (problem) {
		json_object *d = json_object_new_object();
		jsonx_add_str(d, "attempt_id", attempt_id);
		jsonx_add_str(d, "error", problem);
		guest_event(m, g, opening ? "console-open-uncertain" : "console-cancel-uncertain", problem,
		            d);
		console_mark_unknown(m, g);
		jsonx_add_str(outcome_facts(o), "attempt_id", attempt_id);
		if (opening)
			outcome_fail(o, "outcome-unknown",
			             "console open outcome unknown; ownership kept; resolve or cancel "
			             "attempt %s; opening is never replayed automatically (%s)",
			             attempt_id, problem);
		else
			outcome_fail(o, "outcome-unknown",
			             "console cancel outcome unknown; ownership kept; resolve attempt %s "
			             "before another open; the guest was not released (%s)",
			             attempt_id, problem);
		json_object_put(obs);
		return NULL;
	}
	const char *attempt_status = jsonx_get_str(jsonx_get_obj(obs, "attempt"), "status");
	slice_lock(g->console);
	json_object_put(g->console->observation);
	g->console->observation = json_object_get(obs);
	jsonx_add_str(g->console->attempt, "status", attempt_status);
	slice_unlock(g->console);
	guest_persist(m, g);
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "attempt_id", attempt_id);
	jsonx_add_str(d, "status", attempt_status);
	guest_event(m, g, opening ? "console-open" : "console-cancel", attempt_status, d);
	return obs;
}

json_object *console_uncertain_attempt(const char *attempt_id)
{
	/* Every field as an attempt that reports nothing has it ("unknown", a
	 * null reason), then its identity and status in their places. */
	json_object *a = json_object_new_object();
	add_fields(a, NULL, FIELDS(attempt_fields));
	jsonx_add_str(a, "attempt_id", attempt_id);
	jsonx_add_str(a, "status", "uncertain");
	return a;
}

json_object *console_status_result(const char *guest_name, const json_object *obs, json_object *attempt)
{
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "guest", guest_name);
	/* The observation's fields as console_observation() ordered them. */
	json_object *version = NULL;
	json_object_object_get_ex(obs, "schemaVersion", &version);
	jsonx_add(r, "schemaVersion", json_object_get(version));
	for (size_t i = 0; i < sizeof report_fields / sizeof report_fields[0]; i++) {
		json_object *v = NULL;
		json_object_object_get_ex(obs, report_fields[i].key, &v);
		jsonx_add(r, report_fields[i].key, json_object_get(v));
	}
	if (attempt) {
		jsonx_add(r, "attempt", attempt);
	} else {
		json_object *v = NULL;
		json_object_object_get_ex(obs, "attempt", &v);
		jsonx_add(r, "attempt", json_object_get(v));
	}
	/* MCP_RELAY_VNC_VIEWER=browser: the live view's origin and whether the
	 * browser was opened (the one-time URL is only on standard error). */
	json_object *live = NULL;
	if (json_object_object_get_ex(obs, "live_view", &live) && json_object_is_type(live, json_type_object))
		jsonx_add(r, "live_view", json_object_get(live));
	jsonx_add_bool(r, "screenshotEvidence", false);
	jsonx_add_bool(r, "leaseReleased", false);
	return r;
}

int console_acquisition_capabilities(session_manager *m, relay_call *call, relay_outcome *o)
{
	session_wait_startup(m);
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	loaded_plugin *console = m->backends->plugins[SLOT_CONSOLE];
	relay_error err;
	memset(&err, 0, sizeof err);
	/* Step 1: a selected environment's identity is checked first. */
	if (m->settings->environment != NULL) {
		if (machine == NULL)
			return outcome_fail(
			    o, "backend-unavailable", "the machine backend is not available: %s",
			    m->backends->load_errors[SLOT_MACHINE] ? m->backends->load_errors[SLOT_MACHINE]
			                                           : "no machine plugin is loaded");
		if (machine->machine.health) {
			char *health = NULL;
			relay_status st = machine->machine.health(machine->state, call, 0, &health, &err);
			free(health);
			if (st != RELAY_OK)
				return outcome_fail(o, "backend-unavailable", "%s",
				                    err.message[0] ? err.message : relay_status_str(st));
		}
	}
	/* Step 3: no console plugin configured. */
	if (console == NULL) {
		outcome_free(o);
		o->facts = console_capabilities_unconfigured();
		return 0;
	}
	/* Step 2: the console plugin reads the backend's options. */
	char *text = NULL;
	memset(&err, 0, sizeof err);
	relay_status st =
	    console->console.capabilities(console->state, &m->backends->machine_link, call, 0, &text, &err);
	if (st != RELAY_OK) {
		free(text);
		if (st == RELAY_E_UNSUPPORTED)
			return outcome_fail(
			    o, "console-unavailable",
			    "backend lacks acquisition capabilities; upgrade the machine service for VNC");
		if (st == RELAY_E_PROTOCOL)
			return outcome_fail(o, "backend-unavailable",
			                    "unsupported or malformed acquisition-capabilities schema");
		return outcome_fail(o, "backend-unavailable", "%s",
		                    err.message[0] ? err.message : relay_status_str(st));
	}
	json_object *raw = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	json_object *caps = console_capabilities_normalise(raw);
	json_object_put(raw);
	if (caps == NULL)
		return outcome_fail(o, "backend-unavailable",
		                    "unsupported or malformed acquisition-capabilities schema");
	outcome_free(o);
	o->facts = caps;
	return 0;
}
