/* console.c — the console attempt ledger and its report (relay_kit/console.h). */
#include "relay_kit/console.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "relay_kit/random.h"
#include "relay_support/json_get.h"
#include "relay_support/liveview.h"

/* ---- small pieces ------------------------------------------------------------------ */

static void put_text(json_object *o, const char *key, const char *value)
{
	json_object_object_add(o, key, value ? json_object_new_string(value) : NULL);
}

void rk_console_set(json_object *attempt, const char *status, const char *reason)
{
	put_text(attempt, "status", status);
	put_text(attempt, "reason", reason);
}

static json_object *private_of(json_object *record)
{
	json_object *p = rsj_get_obj(record, "consolePrivate");
	if (p == NULL) {
		p = json_object_new_object();
		json_object_object_add(p, "attempts", json_object_new_object());
		json_object_object_add(p, "order", json_object_new_array());
		json_object_object_add(record, "consolePrivate", p);
	}
	return p;
}

static bool terminal_status(const char *s)
{
	return s && (strcmp(s, "cancelled") == 0 || strcmp(s, "closed") == 0 || strcmp(s, "failed") == 0 ||
	             strcmp(s, "expired") == 0);
}

/* 1 to 120 characters of A-Z a-z 0-9 . _ - */
static bool valid_attempt_id(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n < 1 || n > 120)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

static json_object *backend_entry(bool available, const char *reason)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "available", json_object_new_boolean(available));
	put_text(o, "status", available ? "configured" : "unavailable");
	put_text(o, "reason", reason);
	static const char *const fields[][2] = {{"backend", "x11vnc"},
	                                        {"viewer_location", "service-host"},
	                                        {"authentication", "password"},
	                                        {"guest_readiness", "unverified"},
	                                        {"session_binding", "existing-x11-session"},
	                                        {"server_enforced_view_only", NULL},
	                                        {"pixels", "unverified"},
	                                        {"human_confirmation", "unverified"}};
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		json_object *v = !available     ? json_object_new_string("unknown")
		                 : fields[i][1] ? json_object_new_string(fields[i][1])
		                                : json_object_new_boolean(true);
		json_object_object_add(o, fields[i][0], v);
	}
	return o;
}

json_object *rk_console_capabilities(const char *service, const char *linux_reason, const char *macos_reason)
{
	json_object *backends = json_object_new_object();
	json_object_object_add(backends, "linux", backend_entry(linux_reason == NULL, linux_reason));
	json_object_object_add(backends, "macos", backend_entry(false, macos_reason));
	json_object *vnc = json_object_new_object();
	json_object_object_add(vnc, "default", json_object_new_boolean(false));
	json_object_object_add(vnc, "backends", backends);
	json_object *options = json_object_new_object();
	json_object_object_add(options, "vnc", vnc);
	json_object *out = json_object_new_object();
	json_object_object_add(out, "schemaVersion", json_object_new_int(1));
	put_text(out, "service", service);
	json_object_object_add(out, "options", options);
	return out;
}

/* ---- the report ------------------------------------------------------------------------ */

static json_object *public_attempt(json_object *a, const char *id)
{
	if (a == NULL)
		return NULL;
	json_object *o = json_object_new_object();
	put_text(o, "attempt_id", id);
	const char *status = rsj_get_str(a, "status");
	put_text(o, "status", status ? status : "failed");
	put_text(o, "reason", rsj_get_str(a, "reason"));
	json_object *tc = NULL;
	if (json_object_object_get_ex(a, "transport_connected", &tc) && tc)
		json_object_object_add(o, "transport_connected", json_object_get(tc));
	else
		json_object_object_add(o, "transport_connected", json_object_new_boolean(false));
	const char *cleanup = rsj_get_str(a, "viewer_cleanup");
	put_text(o, "viewer_cleanup", cleanup ? cleanup : "not-started");
	put_text(o, "authentication", "required");
	put_text(o, "viewer_connected", "unverified");
	put_text(o, "human_confirmation", "unverified");
	return o;
}

static json_object *copy_of(json_object *o)
{
	json_object *copy = NULL;
	json_object_deep_copy(o, &copy, NULL);
	return copy;
}

/* The attempt's endpoint, whether a viewer was launched, and its live view
 * with the take-overs the bridge recorded (its events file stays private). */
static void report_viewer(json_object *r, json_object *a)
{
	if (a == NULL)
		return;
	json_object *endpoint = rsj_get_obj(a, "endpoint");
	if (endpoint)
		json_object_object_add(r, "endpoint", copy_of(endpoint));
	int64_t viewer_pid = 0;
	rsj_get_int(a, "viewerPid", &viewer_pid);
	json_object_object_add(r, "viewer_launched", json_object_new_boolean(viewer_pid > 0));
	json_object *live = rsj_get_obj(a, "liveView");
	if (live == NULL)
		return;
	json_object *copy = copy_of(live);
	char *text = rs_liveview_take_overs(rsj_get_str(live, "events"));
	json_object *list = text ? json_tokener_parse(text) : NULL;
	free(text);
	json_object_object_add(copy, "take_overs", list ? list : json_object_new_array());
	json_object_object_del(copy, "events");
	json_object_object_add(r, "live_view", copy);
}

json_object *rk_console_report(const rk_console *c, json_object *record, const char *attempt_id,
                               bool guest_runs)
{
	json_object *console = rsj_get_obj(record, "console");
	json_object *priv = private_of(record);
	if (attempt_id == NULL)
		attempt_id = rsj_get_str(priv, "current");
	json_object *a = attempt_id ? rsj_get_obj(rsj_get_obj(priv, "attempts"), attempt_id) : NULL;
	int64_t now = c->host->now_ms();
	int64_t expires = 0;
	rsj_get_int(record, "expiresAtMs", &expires);
	const char *status = "ready", *reason = NULL;
	if (!guest_runs) {
		status = "revoked";
		reason = "released";
	} else if (expires && now > expires) {
		status = "revoked";
		reason = "expired";
	}
	json_object *r = json_object_new_object();
	json_object_object_add(r, "schemaVersion", json_object_new_int(1));
	put_text(r, "vm", rsj_get_str(record, "vm"));
	put_text(r, "lease_id", rsj_get_str(record, "lease_id"));
	put_text(r, "environment_fingerprint", NULL);
	put_text(r, "console_id", rsj_get_str(console, "console_id"));
	put_text(r, "status", status);
	put_text(r, "reason", reason);
	put_text(r, "backend", "x11vnc");
	put_text(r, "viewer_location", "service-host");
	put_text(r, "source", c->ops->source);
	json_object_object_add(r, "observed_at", json_object_new_double((double)now / 1000.0));
	json_object_object_add(r, "access_expires_at",
	                       expires ? json_object_new_double((double)expires / 1000.0) : NULL);
	put_text(r, "viewer_connected", "unverified");
	put_text(r, "human_confirmation", "unverified");
	put_text(r, "session_binding", "existing-x11-session");
	put_text(r, "readiness_scope", "guest-preflight");
	json_object_object_add(r, "server_enforced_view_only", json_object_new_boolean(true));
	put_text(r, "authentication_mechanism", "one-time-password");
	put_text(r, "authentication", "unverified");
	put_text(r, "pixels", "unverified");
	json_object_object_add(r, "attempt", public_attempt(a, attempt_id));
	report_viewer(r, a);
	return r;
}

void rk_console_prepare(const rk_console *c, json_object *record)
{
	char cid[33];
	rk_random_hex(c->host, cid, 32);
	json_object *console = json_object_new_object();
	put_text(console, "console_id", cid);
	json_object_object_add(record, "console", console);
	private_of(record);
	/* The stored console is the full report, as the lease document's
	 * "console" must be (relay/machine.h). */
	json_object_object_add(record, "console", rk_console_report(c, record, NULL, true));
}

void rk_console_stop_all(const rk_console *c, json_object *record)
{
	json_object *attempts = rsj_get_obj(rsj_get_obj(record, "consolePrivate"), "attempts");
	if (attempts == NULL)
		return;
	json_object_object_foreach(attempts, id, a)
	{
		(void)id;
		if (!terminal_status(rsj_get_str(a, "status"))) {
			c->ops->stop(c->ctx, record, a, false); /* x11vnc goes with the guest */
			rk_console_set(a, "closed", "released");
		}
	}
}

/* ---- the operations -------------------------------------------------------------------- */

/* The record's identity checks of a request (the spec's sentences). */
static relay_status check_request(const rk_console *c, json_object *record, const rk_console_request *q,
                                  const char *lease_id, relay_error *err)
{
	const relay_host *h = c->host;
	const char *held = rsj_get_str(record, "lease_id");
	if (lease_id == NULL || held == NULL || strcmp(lease_id, held) != 0)
		return h->error_set(err, RELAY_E_REFUSED, 0, "Console lease identity mismatch");
	json_object *console = rsj_get_obj(record, "console");
	if (console == NULL)
		return h->error_set(err, RELAY_E_NOT_FOUND, 0,
		                    "this guest was acquired without a console; console sharing is never "
		                    "added to an existing lease");
	if (q->kind == RK_CONSOLE_RESOLVE)
		return RELAY_OK;
	const char *own = rsj_get_str(console, "console_id");
	if (q->console_id == NULL || own == NULL || strcmp(q->console_id, own) != 0)
		return h->error_set(err, RELAY_E_REFUSED, 0, "Console identity mismatch");
	if (!valid_attempt_id(q->attempt_id))
		return h->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                    "Invalid console request identity or fields");
	return RELAY_OK;
}

/* Opens attempt `attempt_id` (new) when the console is ready. */
static relay_status op_open(const rk_console *c, json_object *record, const char *attempt_id, pid_t init_pid,
                            relay_call *call, relay_error *err)
{
	const relay_host *h = c->host;
	json_object *priv = private_of(record);
	json_object *attempts = rsj_get_obj(priv, "attempts");
	json_object *order = NULL;
	json_object_object_get_ex(priv, "order", &order);
	bool runs = init_pid > 0;
	json_object *cur = rk_console_report(c, record, NULL, runs);
	bool ready = strcmp(rsj_get_str(cur, "status"), "ready") == 0;
	json_object_put(cur);
	if (!ready)
		return h->error_set(err, RELAY_E_REFUSED, 0, "Console access revoked or lease is releasing");
	json_object_object_foreach(attempts, aid, a)
	{
		(void)aid;
		if (!terminal_status(rsj_get_str(a, "status")))
			return h->error_set(err, RELAY_E_REFUSED, 0,
			                    "Another console attempt is active; cancel it first");
	}
	if (json_object_array_length(order) >= RK_CONSOLE_MAX_ATTEMPTS)
		return h->error_set(err, RELAY_E_REFUSED, 0, "Console attempt limit reached");
	json_object *attempt = json_object_new_object();
	rk_console_set(attempt, "preparing", NULL);
	json_object_object_add(attempts, attempt_id, attempt);
	json_object_array_add(order, json_object_new_string(attempt_id));
	put_text(priv, "current", attempt_id);
	relay_status s = c->ops->open(c->ctx, record, attempt_id, attempt, init_pid, call, err);
	json_object_object_add(record, "console", rk_console_report(c, record, NULL, runs));
	if (c->ops->write(c->ctx, record) != 0 && s == RELAY_OK)
		s = h->error_set(err, RELAY_E_INDETERMINATE, errno,
		                 "the console attempt could not be recorded");
	return s;
}

static relay_status op_cancel(const rk_console *c, json_object *record, const char *attempt_id, bool runs,
                              relay_error *err)
{
	json_object *priv = private_of(record);
	json_object *attempts = rsj_get_obj(priv, "attempts");
	json_object *existing = rsj_get_obj(attempts, attempt_id);
	if (existing == NULL) {
		/* An attempt never opened is recorded as a terminal cancel. */
		json_object *attempt = json_object_new_object();
		rk_console_set(attempt, "cancelled", "cancelled");
		json_object_object_add(attempts, attempt_id, attempt);
		json_object *order = NULL;
		json_object_object_get_ex(priv, "order", &order);
		json_object_array_add(order, json_object_new_string(attempt_id));
	} else if (!terminal_status(rsj_get_str(existing, "status"))) {
		c->ops->stop(c->ctx, record, existing, runs);
		rk_console_set(existing, "cancelled", "cancelled");
	}
	put_text(priv, "current", attempt_id);
	json_object_object_add(record, "console", rk_console_report(c, record, NULL, runs));
	if (c->ops->write(c->ctx, record) != 0)
		return c->host->error_set(err, RELAY_E_INDETERMINATE, errno,
		                          "the console cancel could not be recorded");
	return RELAY_OK;
}

static relay_status answer(const rk_console *c, json_object *out, char **response_out, relay_error *err)
{
	const char *text =
	    json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	*response_out = text ? c->host->strdup(text) : NULL;
	return *response_out ? RELAY_OK : c->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

/* resolve, open, cancel on the record of the lease, under its lock. */
static relay_status on_record(const rk_console *c, const char *vm, const char *lease_id,
                              const rk_console_request *q, relay_call *call, char **response_out,
                              relay_error *err)
{
	int lock = -1, e = 0;
	json_object *record = c->ops->lock_read(c->ctx, vm, &lock, &e), *out = NULL;
	relay_status s = RELAY_OK;
	if (record == NULL) {
		s = c->host->error_set(err, RELAY_E_NOT_FOUND, e,
		                       "Console unavailable after restart or for this lease; no automatic "
		                       "recovery (lease %s is not held)",
		                       vm);
		goto done;
	}
	s = check_request(c, record, q, lease_id, err);
	pid_t init_pid = 0;
	int runs = s == RELAY_OK ? c->ops->guest_state(c->ctx, record, q->name, call, &init_pid, err) : -1;
	if (s == RELAY_OK && runs < 0)
		s = err ? err->code : RELAY_E_REFUSED;
	if (s != RELAY_OK)
		goto done;
	if (runs != 1)
		init_pid = 0;
	if (q->kind == RK_CONSOLE_OPEN &&
	    rsj_get_obj(rsj_get_obj(private_of(record), "attempts"), q->attempt_id) == NULL)
		s = op_open(c, record, q->attempt_id, init_pid, call, err);
	else if (q->kind == RK_CONSOLE_CANCEL)
		s = op_cancel(c, record, q->attempt_id, runs == 1, err);
	if (s != RELAY_OK)
		goto done;
	out = rk_console_report(c, record, q->kind == RK_CONSOLE_RESOLVE ? NULL : q->attempt_id, runs == 1);
	s = answer(c, out, response_out, err);
done:
	json_object_put(out);
	json_object_put(record);
	if (lock >= 0)
		c->ops->unlock(c->ctx, lock);
	return s;
}

relay_status rk_console_ledger(const rk_console *c, const rk_console_request *q, relay_call *call, char **out,
                               relay_error *err)
{
	*out = NULL;
	if (q->kind == RK_CONSOLE_CAPABILITIES) {
		json_object *caps = c->ops->capabilities(c->ctx, call);
		relay_status s = answer(c, caps, out, err);
		json_object_put(caps);
		return s;
	}
	json_object *lease = q->lease_json ? json_tokener_parse(q->lease_json) : NULL;
	const char *vm = rsj_get_str(lease, "vm");
	relay_status s;
	if (vm == NULL || (c->ops->valid_name && !c->ops->valid_name(vm)))
		s = c->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "console %s needs a lease document naming its vm", q->name);
	else
		s = on_record(c, vm, rsj_get_str(lease, "lease_id"), q, call, out, err);
	json_object_put(lease);
	return s;
}
