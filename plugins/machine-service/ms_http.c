/* Requests to machine-service and its identity check (ms_http.h). */
#include "ms_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_util.h"

static const char *const identity_keys[] = {"id",       "fingerprint",     "vmServiceUrl",  "imageRepository",
                                            "tartHome", "serviceStateDir", "imageStateDir", "relayStateDir"};
#define IDENTITY_KEY_COUNT (sizeof identity_keys / sizeof identity_keys[0])

void ms_reply_free(ms_reply *reply)
{
	json_object_put(reply->json);
	free(reply->text);
	memset(reply, 0, sizeof *reply);
}

static void percent_encode(ms_buf *b, const char *text)
{
	static const char hex[] = "0123456789ABCDEF";
	for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
		bool plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		             (*c >= '0' && *c <= '9') || *c == '-' || *c == '.' || *c == '_' || *c == '~';
		if (plain) {
			ms_buf_append(b, (const char *)c, 1);
		} else {
			char esc[3] = {'%', hex[*c >> 4], hex[*c & 15]};
			ms_buf_append(b, esc, 3);
		}
	}
}

char *ms_machine_path(const ms_state *s, const char *vm, const char *action)
{
	if (!ms_valid_machine_name(vm))
		return NULL;
	ms_buf b = MS_BUF_INIT;
	ms_buf_puts(&b, s->opt.route_prefix);
	ms_buf_puts(&b, "/");
	percent_encode(&b, vm);
	if (action) {
		ms_buf_puts(&b, "/");
		ms_buf_puts(&b, action);
	}
	if (b.failed) {
		ms_buf_free(&b);
		return NULL;
	}
	return b.data;
}

/* The service's refusal text: the "error" member, else the body itself. */
static char *error_text(json_object *json, const char *body)
{
	const char *e = rsj_get_str(json, "error");
	return ms_cut_utf8(e ? e : (body ? body : ""), MS_MAX_ERROR_BYTES);
}

relay_status ms_http(ms_state *s, const char *method, const char *path, const json_object *body,
                     uint32_t timeout_ms, relay_call *call, ms_reply *reply, relay_error *err)
{
	const relay_host *host = s->host;
	memset(reply, 0, sizeof *reply);
	char url[2048];
	if (snprintf(url, sizeof url, "%s%s", s->origin, path) >= (int)sizeof url)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "the request path %s is too long",
		                       path);
	const char *headers[4];
	size_t nh = 0;
	headers[nh++] = "Accept: application/json";
	if (body)
		headers[nh++] = "Content-Type: application/json";
	if (s->fingerprint[0])
		headers[nh++] = s->fingerprint_line;
	headers[nh] = NULL;
	char *payload = body ? ms_json_text(body) : NULL;
	if (body && payload == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory building %s %s", method,
		                       path);
	relay_http_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.method = method;
	req.url = url;
	req.headers = headers;
	req.body = payload;
	req.body_len = payload ? strlen(payload) : 0;
	req.timeout_ms = timeout_ms;
	req.connect_timeout_ms = timeout_ms < 10000 ? timeout_ms : 10000;
	req.max_body_bytes = MS_MAX_BODY_BYTES;
	req.max_error_bytes = MS_MAX_ERROR_BYTES;
	relay_http_response resp;
	memset(&resp, 0, sizeof resp);
	resp.struct_size = sizeof resp;
	relay_status status = host->http_request(&req, call, 0, &resp, err);
	free(payload);
	if (status != RELAY_OK) {
		host->free(resp.body);
		return status;
	}
	reply->status = resp.status;
	reply->json = ms_json_parse(resp.body, resp.body_len, NULL, 0);
	if (resp.status < 200 || resp.status >= 300)
		reply->text = error_text(reply->json, resp.body);
	host->free(resp.body);
	return RELAY_OK;
}

bool ms_never_sent(relay_status status, const relay_error *cause)
{
	if (status != RELAY_E_TRANSIENT || cause == NULL)
		return false;
	return strstr(cause->message, "connect to server") != NULL ||
	       strstr(cause->message, "Couldn't connect") != NULL ||
	       strstr(cause->message, "Could not connect") != NULL ||
	       strstr(cause->message, "resolve host") != NULL;
}

bool ms_reply_env_refusal(const ms_reply *reply)
{
	return reply->status >= 400 && reply->status < 500 && reply->text &&
	       strstr(reply->text, "environment fingerprint mismatch; refusing request") != NULL;
}

bool ms_reply_lease_env_refusal(const ms_reply *reply)
{
	return reply->status >= 400 && reply->status < 500 && reply->text &&
	       strstr(reply->text, "lease environment fingerprint mismatch") != NULL;
}

relay_status ms_unavailable(ms_state *s, relay_status status, const relay_error *cause, const char *what,
                            relay_error *err)
{
	const relay_host *host = s->host;
	if (status == RELAY_E_CANCELLED)
		return host->error_set(err, RELAY_E_CANCELLED, 0, "%s was cancelled", what);
	if (status == RELAY_E_PROTOCOL)
		return host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "The service at %s answered %s with a redirect; redirects are refused. Point "
		    "MCP_RELAY_URL (or the profile's vmServiceUrl) at machine-service itself.",
		    s->origin, what);
	if (status == RELAY_E_TOO_LARGE)
		return host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "The service at %s answered %s with more than 4 MiB; that is not machine-service",
		    s->origin, what);
	return host->error_set(
	    err, RELAY_E_UNAVAILABLE, 0,
	    "machine-service at %s cannot be reached (%s: %s); start it, or point MCP_RELAY_URL "
	    "(or the profile's vmServiceUrl) at it",
	    s->origin, what, cause && cause->message[0] ? cause->message : relay_status_str(status));
}

/* "<id>, fingerprint <first 8 hex>" of an identity object, or "none". */
static void describe_identity(const json_object *env, char *out, size_t len)
{
	const char *id = rsj_get_str(env, "id");
	const char *fp = rsj_get_str(env, "fingerprint");
	if (env == NULL) {
		snprintf(out, len, "no environment, fingerprint none");
		return;
	}
	snprintf(out, len, "%s, fingerprint %.8s", id ? id : "unknown", fp ? fp : "unknown");
}

static bool identity_equal(const json_object *ours, const json_object *theirs)
{
	if (!json_object_is_type(theirs, json_type_object) ||
	    json_object_object_length((json_object *)theirs) != (int)IDENTITY_KEY_COUNT)
		return false;
	for (size_t i = 0; i < IDENTITY_KEY_COUNT; i++) {
		const char *a = rsj_get_str(ours, identity_keys[i]);
		const char *b = rsj_get_str(theirs, identity_keys[i]);
		if (a == NULL || b == NULL || strcmp(a, b) != 0)
			return false;
	}
	return true;
}

static relay_status another_environment(ms_state *s, const json_object *theirs, relay_error *err)
{
	char who[160];
	describe_identity(theirs, who, sizeof who);
	if (s->identity == NULL)
		return s->host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "The service at %s serves another environment (%s), but this relay has none "
		    "selected; set VM_ENVIRONMENT_FILE to that environment's profile or point the "
		    "relay at the right service.",
		    s->origin, who);
	if (theirs == NULL)
		return s->host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "The service at %s serves another environment (%s); start it with the "
		    "environment %s or point the relay at the right service.",
		    s->origin, who, rsj_get_str(s->identity, "id"));
	return s->host->error_set(
	    err, RELAY_E_UNAVAILABLE, 0,
	    "The service at %s serves another environment (%s); select that environment or "
	    "point the relay at the right service.",
	    s->origin, who);
}

relay_status ms_get(ms_state *s, const char *path, uint32_t timeout_ms, relay_call *call, ms_reply *reply,
                    relay_error *err)
{
	relay_error cause;
	memset(&cause, 0, sizeof cause);
	relay_status status = ms_http(s, "GET", path, NULL, timeout_ms, call, reply, &cause);
	if (status == RELAY_OK)
		return RELAY_OK;
	char what[320];
	snprintf(what, sizeof what, "GET %s", path);
	return ms_unavailable(s, status, &cause, what, err);
}

relay_status ms_check_health(ms_state *s, uint32_t timeout_ms, relay_call *call, json_object **health_out,
                             relay_error *err)
{
	const relay_host *host = s->host;
	if (health_out)
		*health_out = NULL;
	ms_reply reply;
	relay_status status = ms_get(s, "/health", timeout_ms, call, &reply, err);
	if (status != RELAY_OK)
		return status;
	if (ms_reply_env_refusal(&reply)) {
		ms_reply_free(&reply);
		return ms_env_refused(s, timeout_ms, call, err);
	}
	if (reply.status != 200) {
		status = host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "The service at %s answered GET /health with HTTP %ld (%s); it is not a working "
		    "%s. Check that MCP_RELAY_URL names machine-service.",
		    s->origin, reply.status, reply.text ? reply.text : "", s->opt.service_name);
		goto cleanup;
	}
	if (!json_object_is_type(reply.json, json_type_object)) {
		status = host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "The service at %s did not answer GET /health with a JSON object; it is not "
		    "%s. Check that MCP_RELAY_URL names machine-service.",
		    s->origin, s->opt.service_name);
		goto cleanup;
	}
	const char *service = rsj_get_str(reply.json, "service");
	if (service == NULL || strcmp(service, s->opt.service_name) != 0) {
		status = host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "The service at %s answers \"%s\", not %s. This relay needs %s; release every "
		    "lease, then upgrade the service.",
		    s->origin, service ? service : "(no service name)", s->opt.service_name,
		    s->opt.service_name);
		goto cleanup;
	}
	bool ok = false;
	if (!rsj_get_bool(reply.json, "ok", &ok) || !ok) {
		status = host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "The service at %s answers GET /health without \"ok\": true; it is not ready. "
		    "Check its log, then try again.",
		    s->origin);
		goto cleanup;
	}
	json_object *env = rsj_get_obj(reply.json, "environment");
	bool env_given = env != NULL;
	if (!env_given) {
		json_object *raw = NULL;
		env_given = json_object_object_get_ex(reply.json, "environment", &raw) && raw != NULL;
	}
	if (s->identity ? !identity_equal(s->identity, env) : env_given) {
		status = another_environment(s, env, err);
		goto cleanup;
	}
	if (health_out)
		*health_out = json_object_get(reply.json);
cleanup:
	ms_reply_free(&reply);
	return status;
}

relay_status ms_env_refused(ms_state *s, uint32_t timeout_ms, relay_call *call, relay_error *err)
{
	/* Learn the service's identity without our header (GET /health is
	 * answered to a request without the header even when it runs selected),
	 * so the refusal can name it. */
	relay_error cause;
	memset(&cause, 0, sizeof cause);
	const relay_host *host = s->host;
	char url[2048];
	snprintf(url, sizeof url, "%s/health", s->origin);
	const char *headers[] = {"Accept: application/json", NULL};
	relay_http_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.method = "GET";
	req.url = url;
	req.headers = headers;
	req.timeout_ms = timeout_ms;
	req.max_body_bytes = MS_MAX_BODY_BYTES;
	req.max_error_bytes = MS_MAX_ERROR_BYTES;
	relay_http_response resp;
	memset(&resp, 0, sizeof resp);
	resp.struct_size = sizeof resp;
	json_object *health = NULL;
	if (host->http_request(&req, call, 0, &resp, &cause) == RELAY_OK && resp.status == 200)
		health = ms_json_parse(resp.body, resp.body_len, NULL, 0);
	host->free(resp.body);
	json_object *theirs = rsj_get_obj(health, "environment");
	relay_status status;
	if (s->identity && theirs && identity_equal(s->identity, theirs))
		status = host->error_set(
		    err, RELAY_E_UNAVAILABLE, 0,
		    "The service at %s refused this relay's environment fingerprint although it serves "
		    "the same environment; it expects the fingerprint under another header name (set "
		    "fingerprintHeader in MCP_RELAY_MACHINE_SERVICE_OPTIONS; sent as %s)",
		    s->origin, s->opt.fingerprint_header);
	else
		status = another_environment(s, theirs, err);
	json_object_put(health);
	return status;
}
