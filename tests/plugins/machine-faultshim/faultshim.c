/*
 * machine-faultshim — a machine + transport plugin that wraps another one
 * and injects faults by a script (SQLite's test_vfs.c over a real VFS is
 * the model). Every operation is forwarded to the real plugin unchanged;
 * a rule of the script that matches a call changes what the caller sees:
 *
 *   "fail"   the call is not forwarded; it answers `code` (a definite
 *            failure such as RELAY_E_UNAVAILABLE, or RELAY_E_INDETERMINATE
 *            for "the request may not have arrived");
 *   "drop"   the call is forwarded and, when it succeeded, its answer is
 *            lost: out-parameters are freed and it answers
 *            RELAY_E_INDETERMINATE (the backend acted, the caller cannot
 *            know it);
 *   "delay"  the call is forwarded after `delayMs` milliseconds.
 *
 * Options (init configuration "options", or the environment for the
 * relay's MCP_RELAY_BACKEND use):
 *   {"plugin": "<path of the real plugin .so>"      MCP_RELAY_FAULTSHIM_PLUGIN
 *    "options": {...the real plugin's options},
 *    "faults": [{"op": "acquire"|"release"|..., "match": "<substring of the
 *                call's first text argument: spec, lease or purpose>",
 *                "nth": <1-based among matching calls; 0 or absent: every>,
 *                "fault": "fail"|"drop"|"delay",
 *                "code": "<status name of relay_status_str, e.g.
 *                         \"unavailable\">", "delayMs": <ms>}, ...]}
 *                                                   MCP_RELAY_FAULTSHIM_FAULTS
 * The real plugin gets the same configuration with its own "options". An
 * optional operation it lacks answers RELAY_E_UNSUPPORTED (the shim's table
 * is fixed before init), except health, which then answers RELAY_OK with
 * no document (nothing to check, as the NULL slot means); a real plugin without a transport answers
 * RELAY_E_UNSUPPORTED at open. `mcp-relay plugin-test` checks 66 and 67 use
 * purposes with "-retry-" and "-indeterminate-" for their faults
 * (docs/development.md, "The conformance runner").
 */
#include <dlfcn.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "relay/machine.h"
#include "relay/plugin.h"
#include "relay/transport.h"

#define FS_NAME      "machine-faultshim"
#define FS_MAX_RULES 32

typedef enum fs_fault { FS_FAIL, FS_DROP, FS_DELAY } fs_fault;

typedef struct fs_rule {
	char op[32];
	char match[256]; /* "" matches every call */
	unsigned nth;    /* 0 = every matching call */
	unsigned seen;   /* matching calls so far; under fs_state.lock */
	fs_fault fault;
	relay_status code;
	unsigned delay_ms;
} fs_rule;

typedef struct fs_state {
	const relay_host *host;
	const relay_plugin_descriptor *inner;
	relay_machine_ops machine;     /* the real plugin's, copied by its size */
	relay_transport_ops transport; /* zero when it has none */
	relay_plugin_state *inner_state;
	pthread_mutex_t lock; /* the rules' counters: operations run on many threads */
	fs_rule rules[FS_MAX_RULES];
	size_t rule_count;
} fs_state;

/* ---- the script ----------------------------------------------------------- */

static const char *json_str(json_object *obj, const char *key)
{
	json_object *v = NULL;
	return json_object_object_get_ex(obj, key, &v) && json_object_is_type(v, json_type_string)
	           ? json_object_get_string(v)
	           : NULL;
}

static relay_status status_named(const char *name, relay_status *out)
{
	for (int s = 1; s < RELAY_STATUS_COUNT_; s++)
		if (name && strcmp(name, relay_status_str((relay_status)s)) == 0) {
			*out = (relay_status)s;
			return RELAY_OK;
		}
	return RELAY_E_INVALID_ARGUMENT;
}

static relay_status parse_rule(fs_state *st, json_object *r, relay_error *err)
{
	if (st->rule_count == FS_MAX_RULES)
		return st->host->error_set(err, RELAY_E_TOO_LARGE, 0, "%s: at most %d faults", FS_NAME,
		                           FS_MAX_RULES);
	fs_rule *rule = &st->rules[st->rule_count];
	memset(rule, 0, sizeof *rule);
	const char *op = json_str(r, "op"), *fault = json_str(r, "fault"), *match = json_str(r, "match");
	json_object *v = NULL;
	if (op == NULL || fault == NULL || strlen(op) >= sizeof rule->op)
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "%s: a fault needs an \"op\" and a \"fault\"", FS_NAME);
	snprintf(rule->op, sizeof rule->op, "%s", op);
	snprintf(rule->match, sizeof rule->match, "%s", match ? match : "");
	if (json_object_object_get_ex(r, "nth", &v))
		rule->nth = (unsigned)json_object_get_int(v);
	if (json_object_object_get_ex(r, "delayMs", &v))
		rule->delay_ms = (unsigned)json_object_get_int(v);
	rule->code = RELAY_E_UNAVAILABLE;
	if (strcmp(fault, "fail") == 0)
		rule->fault = FS_FAIL;
	else if (strcmp(fault, "drop") == 0)
		rule->fault = FS_DROP;
	else if (strcmp(fault, "delay") == 0)
		rule->fault = FS_DELAY;
	else
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "%s: unknown fault %s; accepted: fail, drop, delay", FS_NAME,
		                           fault);
	const char *code = json_str(r, "code");
	if (code && status_named(code, &rule->code) != RELAY_OK)
		return st->host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "%s: unknown code %s; give a name relay_status_str answers, such as "
		    "\"unavailable\"",
		    FS_NAME, code);
	st->rule_count++;
	return RELAY_OK;
}

static relay_status parse_faults(fs_state *st, json_object *faults, relay_error *err)
{
	if (faults == NULL)
		return RELAY_OK;
	if (!json_object_is_type(faults, json_type_array))
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "%s: \"faults\" must be an array", FS_NAME);
	for (size_t i = 0; i < json_object_array_length(faults); i++) {
		relay_status s = parse_rule(st, json_object_array_get_idx(faults, i), err);
		if (s != RELAY_OK)
			return s;
	}
	return RELAY_OK;
}

/* The rule that applies to this call of `op` with text argument `arg`
 * (may be NULL), counting it; NULL for none. */
static const fs_rule *fs_match(fs_state *st, const char *op, const char *arg)
{
	const fs_rule *hit = NULL;
	pthread_mutex_lock(&st->lock);
	for (size_t i = 0; i < st->rule_count; i++) {
		fs_rule *r = &st->rules[i];
		if (strcmp(r->op, op) != 0 || (r->match[0] && (arg == NULL || strstr(arg, r->match) == NULL)))
			continue;
		r->seen++;
		if (hit == NULL && (r->nth == 0 || r->seen == r->nth))
			hit = r;
	}
	pthread_mutex_unlock(&st->lock);
	return hit;
}

static void sleep_ms(unsigned ms)
{
	struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&left, &left) != 0 && errno == EINTR) {
	}
}

/* Before forwarding: RELAY_OK to forward, else the injected failure. */
static relay_status fs_before(fs_state *st, const fs_rule *r, const char *op, relay_error *err)
{
	if (r == NULL)
		return RELAY_OK;
	if (r->fault == FS_DELAY)
		sleep_ms(r->delay_ms);
	if (r->fault != FS_FAIL)
		return RELAY_OK;
	st->host->log(RELAY_LOG_WARNING, FS_NAME, "fault script: %s fails with %s", op,
	              relay_status_str(r->code));
	return st->host->error_set(err, r->code, 0, "%s: %s failed by the fault script (%s)", FS_NAME, op,
	                           relay_status_str(r->code));
}

/* After forwarding: a "drop" turns a success into RELAY_E_INDETERMINATE
 * and frees what the call answered. */
static relay_status fs_after(fs_state *st, const fs_rule *r, const char *op, relay_status status, char **out,
                             relay_error *err)
{
	if (r == NULL || r->fault != FS_DROP || status != RELAY_OK)
		return status;
	if (out) {
		st->host->free(*out);
		*out = NULL;
	}
	st->host->log(RELAY_LOG_WARNING, FS_NAME, "fault script: the answer of %s is dropped", op);
	return st->host->error_set(err, RELAY_E_INDETERMINATE, 0,
	                           "%s: the answer of %s was lost after it succeeded (fault script)", FS_NAME,
	                           op);
}

static relay_status fs_missing(fs_state *st, const char *op, unsigned flags, relay_error *err)
{
	if (flags != 0)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown %s flags 0x%x",
		                           FS_NAME, op, flags);
	return st->host->error_set(err, RELAY_E_UNSUPPORTED, 0, "%s: the wrapped plugin has no %s", FS_NAME,
	                           op);
}

/* One forwarded operation with an out-parameter: `call_expr` calls the
 * real plugin and assigns `status`. */
#define FS_FORWARD(st, opname, arg, out, err, present, call_expr)                                            \
	do {                                                                                                 \
		if (out)                                                                                     \
			*(out) = NULL;                                                                       \
		if (!(present))                                                                              \
			return fs_missing((st), (opname), flags, (err));                                     \
		const fs_rule *rule_ = fs_match((st), (opname), (arg));                                      \
		relay_status status = fs_before((st), rule_, (opname), (err));                               \
		if (status != RELAY_OK)                                                                      \
			return status;                                                                       \
		status = (call_expr);                                                                        \
		return fs_after((st), rule_, (opname), status, (out), (err));                                \
	} while (0)

/* ---- machine -------------------------------------------------------------- */

static relay_status fs_acquire(relay_plugin_state *s, const char *spec, relay_call *call, unsigned flags,
                               char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "acquire", spec, out, err, 1,
	           st->machine.acquire(st->inner_state, spec, call, flags, out, err));
}

static relay_status fs_renew(relay_plugin_state *s, const char *lease, uint64_t ttl_ms, relay_call *call,
                             unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "renew", lease, out, err, 1,
	           st->machine.renew(st->inner_state, lease, ttl_ms, call, flags, out, err));
}

static relay_status fs_inspect(relay_plugin_state *s, const char *lease, relay_call *call, unsigned flags,
                               char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "inspect", lease, out, err, 1,
	           st->machine.inspect(st->inner_state, lease, call, flags, out, err));
}

static relay_status fs_release(relay_plugin_state *s, const char *lease, const char *reason, relay_call *call,
                               unsigned flags, relay_error *err)
{
	fs_state *st = s;
	char **none = NULL;
	FS_FORWARD(st, "release", lease, none, err, 1,
	           st->machine.release(st->inner_state, lease, reason, call, flags, err));
}

static relay_status fs_verify_destroyed(relay_plugin_state *s, const char *lease, relay_call *call,
                                        unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "verify_destroyed", lease, out, err, 1,
	           st->machine.verify_destroyed(st->inner_state, lease, call, flags, out, err));
}

static relay_status fs_images(relay_plugin_state *s, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "images", NULL, out, err, 1,
	           st->machine.images(st->inner_state, call, flags, out, err));
}

/* Without the real plugin's health there is no identity to check: the
 * answer a NULL slot stands for (the core then skips the check). */
static relay_status fs_health(relay_plugin_state *s, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	fs_state *st = s;
	if (st->machine.health == NULL && flags == 0) {
		if (out)
			*out = NULL;
		return RELAY_OK;
	}
	FS_FORWARD(st, "health", NULL, out, err, st->machine.health != NULL,
	           st->machine.health(st->inner_state, call, flags, out, err));
}

static relay_status fs_catalog(relay_plugin_state *s, relay_call *call, unsigned flags, char **out,
                               relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "catalog", NULL, out, err, st->machine.catalog != NULL,
	           st->machine.catalog(st->inner_state, call, flags, out, err));
}

static relay_status fs_find_by_purpose(relay_plugin_state *s, const char *purpose, relay_call *call,
                                       unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "find_by_purpose", purpose, out, err, st->machine.find_by_purpose != NULL,
	           st->machine.find_by_purpose(st->inner_state, purpose, call, flags, out, err));
}

static relay_status fs_doctor(relay_plugin_state *s, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "doctor", NULL, out, err, st->machine.doctor != NULL,
	           st->machine.doctor(st->inner_state, call, flags, out, err));
}

/* The wrapped plugin's typed console (ABI 1.7), forwarded like the rest
 * (op names "console_capabilities", "console_resolve", ...). */
static relay_status fs_console_capabilities(relay_plugin_state *s, relay_call *call, unsigned flags,
                                            char **out, relay_error *err)
{
	fs_state *st = s;
	const relay_machine_console_ops *c = st->machine.console_ops;
	FS_FORWARD(st, "console_capabilities", NULL, out, err, c != NULL,
	           c->capabilities(st->inner_state, call, flags, out, err));
}

static relay_status fs_console_resolve(relay_plugin_state *s, const char *lease, relay_call *call,
                                       unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	const relay_machine_console_ops *c = st->machine.console_ops;
	FS_FORWARD(st, "console_resolve", lease, out, err, c != NULL,
	           c->resolve(st->inner_state, lease, call, flags, out, err));
}

/* open and cancel, forwarded as "console_open" and "console_cancel". */
static relay_status fs_console_attempt(relay_plugin_state *s, bool open, const char *lease,
                                       const char *console_id, const char *attempt_id, relay_call *call,
                                       unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	const relay_machine_console_ops *c = st->machine.console_ops;
	FS_FORWARD(st, open ? "console_open" : "console_cancel", lease, out, err, c != NULL,
	           (open ? c->open : c->cancel)(st->inner_state, lease, console_id, attempt_id, call, flags,
	                                        out, err));
}

static relay_status fs_console_open(relay_plugin_state *s, const char *lease, const char *console_id,
                                    const char *attempt_id, relay_call *call, unsigned flags, char **out,
                                    relay_error *err)
{
	return fs_console_attempt(s, true, lease, console_id, attempt_id, call, flags, out, err);
}

static relay_status fs_console_cancel(relay_plugin_state *s, const char *lease, const char *console_id,
                                      const char *attempt_id, relay_call *call, unsigned flags, char **out,
                                      relay_error *err)
{
	return fs_console_attempt(s, false, lease, console_id, attempt_id, call, flags, out, err);
}

static const relay_machine_console_ops fs_console_ops = {
    .struct_size = sizeof(relay_machine_console_ops),
    .capabilities = fs_console_capabilities,
    .resolve = fs_console_resolve,
    .open = fs_console_open,
    .cancel = fs_console_cancel,
};

/* The real plugin's binding, or the record the core would make for it. */
static relay_status fs_binding(relay_plugin_state *s, unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	*out = NULL;
	if (st->machine.binding)
		return st->machine.binding(st->inner_state, flags, out, err);
	if (flags != 0)
		return fs_missing(st, "binding", flags, err);
	char text[512];
	snprintf(text, sizeof text,
	         "{\"machine\":\"%s\",\"endpoint\":null,\"store\":null,\"environmentFingerprint\":null}",
	         st->inner->name);
	*out = st->host->strdup(text);
	return *out ? RELAY_OK
	            : st->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "%s: out of memory", FS_NAME);
}

static const relay_machine_ops fs_machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    .acquire = fs_acquire,
    .renew = fs_renew,
    .inspect = fs_inspect,
    .release = fs_release,
    .verify_destroyed = fs_verify_destroyed,
    .images = fs_images,
    .health = fs_health,
    .catalog = fs_catalog,
    .find_by_purpose = fs_find_by_purpose,
    .binding = fs_binding,
    .doctor = fs_doctor,
    .console_ops = &fs_console_ops,
    /* egress_listeners: NULL, so the relay refuses "allow" and "internet"
     * guests of a wrapped plugin at acquire. */
};

/* ---- transport ------------------------------------------------------------ */

static relay_status fs_open(relay_plugin_state *s, const char *lease, relay_call *call, unsigned flags,
                            relay_transport_conn **conn_out, relay_error *err)
{
	fs_state *st = s;
	*conn_out = NULL;
	if (st->transport.open == NULL)
		return fs_missing(st, "open", flags, err);
	const fs_rule *rule = fs_match(st, "open", lease);
	relay_status status = fs_before(st, rule, "open", err);
	if (status != RELAY_OK)
		return status;
	status = st->transport.open(st->inner_state, lease, call, flags, conn_out, err);
	if (rule && rule->fault == FS_DROP && status == RELAY_OK) {
		st->transport.close(st->inner_state, *conn_out, 0);
		*conn_out = NULL;
		status = fs_after(st, rule, "open", status, NULL, err);
	}
	return status;
}

static void fs_close(relay_plugin_state *s, relay_transport_conn *conn, unsigned flags)
{
	fs_state *st = s;
	if (st->transport.close)
		st->transport.close(st->inner_state, conn, flags);
}

static relay_status fs_exec(relay_plugin_state *s, relay_transport_conn *conn, const relay_exec_request *req,
                            relay_call *call, unsigned flags, relay_exec_result *res, relay_error *err)
{
	fs_state *st = s;
	const char *arg =
	    req && req->argv ? req->argv[req->argv[0] && req->argv[1] && req->argv[2] ? 2 : 0] : NULL;
	const fs_rule *rule = fs_match(st, "exec", arg);
	relay_status status = fs_before(st, rule, "exec", err);
	if (status != RELAY_OK)
		return status;
	status = st->transport.exec(st->inner_state, conn, req, call, flags, res, err);
	if (rule && rule->fault == FS_DROP && status == RELAY_OK) {
		st->host->free(res->out);
		st->host->free(res->err);
		res->out = res->err = NULL;
		status = fs_after(st, rule, "exec", status, NULL, err);
	}
	return status;
}

static relay_status fs_push(relay_plugin_state *s, relay_transport_conn *conn, const char *local,
                            const char *remote, relay_call *call, unsigned flags, char **out,
                            relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "push", remote, out, err, 1,
	           st->transport.push(st->inner_state, conn, local, remote, call, flags, out, err));
}

static relay_status fs_pull(relay_plugin_state *s, relay_transport_conn *conn, const char *remote,
                            const char *local, relay_call *call, unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "pull", remote, out, err, 1,
	           st->transport.pull(st->inner_state, conn, remote, local, call, flags, out, err));
}

static const relay_transport_ops fs_transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    /* The wrapped transport's traits cannot be known before init: the core
     * serialises operations and verifies transfers through the receiver. */
    .traits = 0,
    .open = fs_open,
    .close = fs_close,
    .exec = fs_exec,
    .push = fs_push,
    .pull = fs_pull,
};

/* ---- init and fini --------------------------------------------------------- */

/* dlopen()s the real plugin (never closed, as the loader does) and checks
 * what the shim relies on. */
static relay_status load_inner(fs_state *st, const char *path, relay_error *err)
{
	void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (handle == NULL)
		return st->host->error_set(err, RELAY_E_NOT_FOUND, 0, "%s: cannot load %s: %s", FS_NAME, path,
		                           dlerror());
	relay_plugin_entry_fn entry = (relay_plugin_entry_fn)dlsym(handle, RELAY_PLUGIN_ENTRY_SYMBOL);
	const relay_plugin_descriptor *d = entry ? entry(st->host->abi_version) : NULL;
	if (d == NULL || !(d->kinds & RELAY_KIND_MACHINE) || d->machine == NULL ||
	    d->machine_ops_size < RELAY_MACHINE_OPS_MIN_SIZE)
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "%s: %s is not a machine plugin of ABI major %u", FS_NAME, path,
		                           RELAY_ABI_VERSION_MAJOR);
	st->inner = d;
	relay_sized_copy(&st->machine, sizeof st->machine, d->machine, d->machine_ops_size);
	if ((d->kinds & RELAY_KIND_TRANSPORT) && d->transport != NULL &&
	    d->transport_ops_size >= RELAY_TRANSPORT_OPS_MIN_SIZE)
		relay_sized_copy(&st->transport, sizeof st->transport, d->transport, d->transport_ops_size);
	return RELAY_OK;
}

/* The configuration for the real plugin: ours with its own "options". */
static char *inner_config(fs_state *st, json_object *config, json_object *options)
{
	json_object *copy = NULL;
	json_object_deep_copy(config, &copy, NULL);
	json_object *inner_options = NULL;
	if (json_object_object_get_ex(options, "options", &inner_options))
		json_object_object_add(copy, "options", json_object_get(inner_options));
	else
		json_object_object_add(copy, "options", json_object_new_object());
	char *text = st->host->strdup(json_object_to_json_string_ext(copy, JSON_C_TO_STRING_PLAIN));
	json_object_put(copy);
	return text;
}

static relay_status fs_setup(fs_state *st, const char *config_json, relay_error *err)
{
	json_object *config = json_tokener_parse(config_json), *options = NULL, *faults = NULL;
	json_object_object_get_ex(config, "options", &options);
	const char *path = json_str(options, "plugin");
	if (path == NULL)
		path = getenv("MCP_RELAY_FAULTSHIM_PLUGIN");
	json_object *env_faults = NULL;
	if (!json_object_object_get_ex(options, "faults", &faults) && getenv("MCP_RELAY_FAULTSHIM_FAULTS"))
		faults = env_faults = json_tokener_parse(getenv("MCP_RELAY_FAULTSHIM_FAULTS"));
	relay_status status = RELAY_OK;
	char *inner = NULL;
	if (config == NULL || path == NULL)
		status = st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                             "%s: name the plugin to wrap with options.plugin or "
		                             "MCP_RELAY_FAULTSHIM_PLUGIN",
		                             FS_NAME);
	if (status == RELAY_OK)
		status = parse_faults(st, faults, err);
	if (status == RELAY_OK)
		status = load_inner(st, path, err);
	if (status == RELAY_OK && (inner = inner_config(st, config, options)) == NULL)
		status = st->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "%s: out of memory", FS_NAME);
	if (status == RELAY_OK)
		status = st->inner->init(st->host, inner, 0, &st->inner_state, err);
	st->host->free(inner);
	json_object_put(env_faults);
	json_object_put(config);
	return status;
}

static relay_status fs_init(const relay_host *host, const char *config_json, unsigned flags,
                            relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown init flags 0x%x",
		                       FS_NAME, flags);
	fs_state *st = host->alloc(sizeof *st);
	if (st == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "%s: out of memory", FS_NAME);
	memset(st, 0, sizeof *st);
	st->host = host;
	pthread_mutex_init(&st->lock, NULL);
	relay_status status = fs_setup(st, config_json, err);
	if (status != RELAY_OK) {
		pthread_mutex_destroy(&st->lock);
		host->free(st);
		return status;
	}
	*state_out = st;
	return RELAY_OK;
}

static void fs_fini(relay_plugin_state *state)
{
	fs_state *st = state;
	if (st == NULL)
		return;
	if (st->inner->fini)
		st->inner->fini(st->inner_state);
	pthread_mutex_destroy(&st->lock);
	st->host->free(st);
}

static const relay_plugin_descriptor fs_descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = FS_NAME,
    .version = "0.1.0",
    .description = "test shim: wraps a machine plugin and injects faults by a script",
    .kinds = RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT,
    .init = fs_init,
    .fini = fs_fini,
    .machine = &fs_machine_ops,
    .machine_ops_size = sizeof(relay_machine_ops),
    .transport = &fs_transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(fs_descriptor)
