/*
 * ms_http.h — requests to machine-service (spec/machine-service.md §1) and
 * the identity check of GET /health (§3.1).
 *
 * Every request goes through host->http_request: redirects refused, the
 * body sent with Content-Length, 2xx bodies capped at 4 MiB and error bodies
 * at 4096 bytes, and the environment fingerprint header on every request
 * when a profile is selected.
 */
#ifndef MS_HTTP_H
#define MS_HTTP_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "ms_plugin.h"

/* One answer of the service. */
typedef struct ms_reply {
	long status;       /* HTTP status */
	json_object *json; /* the body as JSON, or NULL when it is not JSON */
	char *text;        /* non-2xx: the service's "error" text (or the raw body), at most 4096 bytes */
} ms_reply;

/*
 * Sends one request (`body` NULL: a GET without body; otherwise a POST with
 * the compact JSON of `body`). RELAY_OK when an HTTP answer arrived,
 * whatever its status: read `reply` (free with ms_reply_free). Otherwise
 * the transport failed and `err` says how: RELAY_E_TIMEOUT,
 * RELAY_E_TRANSIENT (no connection, reset, closed), RELAY_E_CANCELLED,
 * RELAY_E_TOO_LARGE (a 2xx body over 4 MiB), RELAY_E_PROTOCOL (a redirect).
 */
relay_status ms_http(ms_state *s, const char *method, const char *path, const json_object *body,
                     uint32_t timeout_ms, relay_call *call, ms_reply *reply, relay_error *err);
void ms_reply_free(ms_reply *reply);
/* A GET of `path` by ms_http whose transport failure is already told as
 * ms_unavailable of "GET <path>": RELAY_OK means `reply` holds an answer. */
relay_status ms_get(ms_state *s, const char *path, uint32_t timeout_ms, relay_call *call, ms_reply *reply,
                    relay_error *err);

/* "<routePrefix>/<vm>[/<action>]" with the name percent-encoded; malloc'd,
 * or NULL when the name breaks ^[a-zA-Z0-9][a-zA-Z0-9._-]*$. */
char *ms_machine_path(const ms_state *s, const char *vm, const char *action);

/* True when a failed transport status means the request never reached the
 * service (the connection could not be made), so nothing happened. */
bool ms_never_sent(relay_status status, const relay_error *cause);

/* The answer says the service refused this relay's environment (the 409
 * "environment fingerprint mismatch; refusing request"). */
bool ms_reply_env_refusal(const ms_reply *reply);
/* The answer says a lease belongs to another environment (the 409 "lease
 * environment fingerprint mismatch; refusing operation"). */
bool ms_reply_lease_env_refusal(const ms_reply *reply);

/* Fills `err` for a transport failure of `what` ("GET /health") as
 * RELAY_E_UNAVAILABLE (service unreachable or redirecting) and returns it. */
relay_status ms_unavailable(ms_state *s, relay_status status, const relay_error *cause, const char *what,
                            relay_error *err);

/*
 * The identity check of §3.1: GET /health within `timeout_ms` must answer
 * ok: true, service == serviceName, and the selected environment's identity
 * (or none when no environment is selected). RELAY_OK with *health_out (a
 * new reference, may be NULL to skip); otherwise RELAY_E_UNAVAILABLE with
 * the exact refusal, or RELAY_E_CANCELLED.
 */
relay_status ms_check_health(ms_state *s, uint32_t timeout_ms, relay_call *call, json_object **health_out,
                             relay_error *err);

/* The message for a service that refuses this relay's environment. */
relay_status ms_env_refused(ms_state *s, uint32_t timeout_ms, relay_call *call, relay_error *err);

#endif
