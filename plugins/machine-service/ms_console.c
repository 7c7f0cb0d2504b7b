/*
 * The typed console of the machine-service plugin (relay/machine.h
 * `console_ops`): GET /acquisition-capabilities (§3.2) and the console routes
 * POST /machines/<vm>/console/{resolve,open,cancel} (§9). Answers are
 * returned as the service wrote them; the console plugin and the core
 * normalise them. Failures name the HTTP status and never the body (§9.1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_kit/console_ops.h"

#include "ms_http.h"
#include "ms_plugin.h"
#include "ms_record.h"
#include "ms_util.h"

static bool valid_identity(const char *text)
{
	if (text == NULL || text[0] == '\0' || strlen(text) > 120)
		return false;
	for (const char *c = text; *c; c++) {
		bool alnum = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
		if (c == text ? !alnum : !(alnum || *c == '_' || *c == '.' || *c == '-'))
			return false;
	}
	return true;
}

/* §3.2: schemaVersion 1, options.vnc.default false, boolean `available`
 * for both backends, and the configured service name when one is given. */
static bool capabilities_sound(const ms_state *s, json_object *caps)
{
	double version = 0;
	if (!rsj_get_double(caps, "schemaVersion", &version) || version != 1)
		return false;
	const char *service = rsj_get_str(caps, "service");
	json_object *raw = NULL;
	if (json_object_object_get_ex(caps, "service", &raw) &&
	    (service == NULL || strcmp(service, s->opt.service_name) != 0))
		return false;
	json_object *vnc = rsj_get_obj(rsj_get_obj(caps, "options"), "vnc");
	bool def = true, linux_ok, macos_ok;
	if (!rsj_get_bool(vnc, "default", &def) || def)
		return false;
	json_object *backends = rsj_get_obj(vnc, "backends");
	return rsj_get_bool(rsj_get_obj(backends, "linux"), "available", &linux_ok) &&
	       rsj_get_bool(rsj_get_obj(backends, "macos"), "available", &macos_ok);
}

static relay_status capabilities(ms_state *s, relay_call *call, char **out, relay_error *err)
{
	const relay_host *host = s->host;
	ms_reply reply;
	relay_status status = ms_get(s, "/acquisition-capabilities", MS_LOOKUP_TIMEOUT_MS, call, &reply, err);
	if (status != RELAY_OK)
		return status;
	if (reply.status == 404) {
		status = host->error_set(
		    err, RELAY_E_UNSUPPORTED, 0,
		    "backend lacks acquisition capabilities; upgrade the machine service for VNC");
	} else if (ms_reply_env_refusal(&reply)) {
		status = ms_env_refused(s, MS_LOOKUP_TIMEOUT_MS, call, err);
	} else if (reply.status != 200) {
		status = host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "GET /acquisition-capabilities answered HTTP %ld; the machine service cannot "
		    "report its acquisition options now",
		    reply.status);
	} else if (!capabilities_sound(s, reply.json)) {
		status = host->error_set(err, RELAY_E_PROTOCOL, 0,
		                         "unsupported or malformed acquisition-capabilities schema");
	} else {
		*out = ms_json_owned(host, reply.json);
		if (*out == NULL)
			status = host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	}
	ms_reply_free(&reply);
	return status;
}

/* The typed console (relay_kit/console_ops.h): capabilities, or the
 * route of resolve, open and cancel for the lease document's lease_id. */
static relay_status route(relay_plugin_state *state, const rk_console_request *q, relay_call *call,
                          char **response_json_out, relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	if (q->kind == RK_CONSOLE_CAPABILITIES)
		return capabilities(s, call, response_json_out, err);
	bool resolve = q->kind == RK_CONSOLE_RESOLVE;
	const char *op = q->name;
	ms_lease_ref ref;
	relay_status status = ms_lease_ref_parse(s, q->lease_json, &ref, err);
	if (status != RELAY_OK)
		return status;
	json_object *body = NULL;
	char *path = NULL;
	ms_reply reply;
	memset(&reply, 0, sizeof reply);
	const char *lease_id = ref.lease_id[0] ? ref.lease_id : NULL;
	const char *console_id = q->console_id;
	const char *attempt_id = q->attempt_id;
	if (!valid_identity(lease_id) ||
	    (!resolve && (!valid_identity(console_id) || !valid_identity(attempt_id)))) {
		status = host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "%s: console %s needs lease_id%s matching [A-Za-z0-9][A-Za-z0-9_.-]{0,119}",
		    MS_PLUGIN_NAME, op, resolve ? "" : ", console_id and attempt_id");
		goto cleanup;
	}
	/* §9.1: the body holds exactly the required keys. */
	body = json_object_new_object();
	json_object_object_add(body, "lease_id", json_object_new_string(lease_id));
	if (!resolve) {
		json_object_object_add(body, "console_id", json_object_new_string(console_id));
		json_object_object_add(body, "attempt_id", json_object_new_string(attempt_id));
	}
	char action[32];
	snprintf(action, sizeof action, "console/%s", op);
	path = ms_machine_path(s, ref.vm, action);
	relay_error cause;
	memset(&cause, 0, sizeof cause);
	uint32_t timeout_ms = resolve ? MS_CONSOLE_RESOLVE_TIMEOUT_MS : MS_CONSOLE_CHANGE_TIMEOUT_MS;
	status = ms_http(s, "POST", path, body, timeout_ms, call, &reply, &cause);
	if (status != RELAY_OK) {
		relay_status kind =
		    resolve || ms_never_sent(status, &cause) ? RELAY_E_UNAVAILABLE : RELAY_E_INDETERMINATE;
		if (status == RELAY_E_CANCELLED)
			kind = RELAY_E_CANCELLED;
		status = host->error_set(
		    err, kind, 0,
		    "Console API unavailable or request outcome unknown (HTTP 0); resolve before "
		    "another open");
		goto cleanup;
	}
	if (reply.status != 200 || !json_object_is_type(reply.json, json_type_object)) {
		relay_status kind = RELAY_E_REFUSED;
		if (ms_reply_env_refusal(&reply))
			kind = RELAY_E_UNAVAILABLE;
		else if (reply.status >= 500 || reply.status == 200)
			kind = resolve ? RELAY_E_UNAVAILABLE : RELAY_E_INDETERMINATE;
		status = host->error_set(
		    err, kind, 0,
		    "Console API unavailable or request outcome unknown (HTTP %ld); resolve before "
		    "another open",
		    reply.status);
		goto cleanup;
	}
	*response_json_out = ms_json_owned(host, reply.json);
	if (*response_json_out == NULL)
		status = host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
cleanup:
	ms_reply_free(&reply);
	free(path);
	json_object_put(body);
	ms_lease_ref_free(&ref);
	return status;
}

RK_CONSOLE_DEFINE_OPS(ms_console_ops, route);
