/*
 * Lease operations of the machine-service plugin (ms_plugin.h): acquire,
 * heartbeat, inspect, release, the destruction check and find-by-purpose.
 *
 * Failure meanings (spec/machine-service.md §1): a 4xx is a definite
 * refusal; a 5xx, a timeout, a reset or closed connection, or no answer is
 * indeterminate. Acquire is never retried here: an indeterminate answer is
 * reported as RELAY_E_INDETERMINATE and the core reconciles by purpose.
 */
#include "ms_record.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_http.h"
#include "ms_util.h"

/* Owned lease document text of a record, or an indeterminate failure. */
static relay_status document_out(ms_state *s, json_object *record, const char *what, char **out,
                                 relay_error *err)
{
	char why[160];
	json_object *doc = ms_lease_document(s, record, why, sizeof why);
	if (doc == NULL)
		return s->host->error_set(err, RELAY_E_PROTOCOL, 0,
		                          "%s answered a malformed lease record: %s", what, why);
	if (out) {
		*out = ms_json_owned(s->host, doc);
		if (*out == NULL) {
			json_object_put(doc);
			return s->host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		}
	}
	json_object_put(doc);
	return RELAY_OK;
}

/* A 4xx or 5xx of an operation on an existing lease, with the usual
 * meanings: unknown VM, another environment, definite or indeterminate. */
static relay_status lease_failure(ms_state *s, ms_reply *reply, const char *what, const char *vm,
                                  relay_error *err)
{
	const relay_host *host = s->host;
	if (ms_reply_env_refusal(reply))
		return ms_env_refused(s, MS_LOOKUP_TIMEOUT_MS, NULL, err);
	if (ms_reply_lease_env_refusal(reply))
		return host->error_set(
		    err, RELAY_E_ENVIRONMENT_MISMATCH, 0,
		    "%s belongs to a different machine environment (%s); select its original "
		    "environment before operating on it",
		    vm, reply->text);
	if (reply->status == 404 ||
	    (reply->status == 409 && reply->text && strncmp(reply->text, "unknown VM", 10) == 0))
		return host->error_set(err, RELAY_E_NOT_FOUND, 0, "machine-service no longer knows %s (%s)",
		                       vm, reply->text ? reply->text : "unknown VM");
	if (reply->status >= 400 && reply->status < 500)
		return host->error_set(
		    err, RELAY_E_REFUSED, 0, "%s",
		    reply->text && reply->text[0] ? reply->text : "refused (the service gave no reason)");
	return host->error_set(err, RELAY_E_INDETERMINATE, 0,
	                       "%s answered HTTP %ld (%s); the outcome is unknown", what, reply->status,
	                       reply->text ? reply->text : "");
}

/* ---- acquire ------------------------------------------------------------------- */

#define ACQUIRE_KNOWN_FLAGS 0u

/* The boot-refusal rule of §3.5: after "refused to start (boot process
 * exited", the next try for that purpose waits until GET /images shows the
 * image acquirable and host_macos_guests (when present) below 2. Returns
 * RELAY_OK when a request may be sent. */
static relay_status boot_refusal_gate(ms_state *s, const char *purpose, const char *image, relay_call *call,
                                      relay_error *err)
{
	pthread_mutex_lock(&s->lock);
	ms_boot_refusal *found = NULL;
	for (ms_boot_refusal *b = s->boot_refusals; b; b = b->next)
		if (strcmp(b->purpose, purpose) == 0)
			found = b;
	char *reason = found ? strdup(found->reason) : NULL;
	pthread_mutex_unlock(&s->lock);
	if (found == NULL)
		return RELAY_OK;
	ms_reply reply;
	relay_error cause;
	memset(&cause, 0, sizeof cause);
	bool clear = false;
	if (ms_http(s, "GET", "/images", NULL, MS_LOOKUP_TIMEOUT_MS, call, &reply, &cause) == RELAY_OK) {
		json_object *entry = rsj_get_obj(rsj_get_obj(reply.json, "images"), image);
		json_object *concurrency = rsj_get_obj(entry, "concurrency");
		json_object *capacity = rsj_get_obj(reply.json, "capacity");
		bool acquirable = false;
		double guests = 0;
		rsj_get_bool(concurrency, "acquirable", &acquirable);
		clear = reply.status == 200 && acquirable &&
		        (!rsj_get_double(capacity, "host_macos_guests", &guests) || guests < 2);
		ms_reply_free(&reply);
	}
	relay_status status = RELAY_OK;
	if (clear) {
		pthread_mutex_lock(&s->lock);
		for (ms_boot_refusal **p = &s->boot_refusals; *p; p = &(*p)->next) {
			if (strcmp((*p)->purpose, purpose) == 0) {
				ms_boot_refusal *gone = *p;
				*p = gone->next;
				ms_boot_refusal_free(gone);
				break;
			}
		}
		pthread_mutex_unlock(&s->lock);
	} else {
		status =
		    s->host->error_set(err, RELAY_E_CAPACITY, 0,
		                       "%s (waiting until GET /images shows %s acquirable with fewer than 2 "
		                       "host-wide macOS guests)",
		                       reason ? reason : "the guest refused to start", image);
	}
	free(reason);
	return status;
}

static void remember_boot_refusal(ms_state *s, const char *purpose, const char *image, const char *reason)
{
	ms_boot_refusal *b = calloc(1, sizeof *b);
	if (b == NULL)
		return;
	b->purpose = strdup(purpose);
	b->image = strdup(image);
	b->reason = ms_cut_utf8(reason, 200);
	if (b->purpose == NULL || b->image == NULL || b->reason == NULL) {
		ms_boot_refusal_free(b);
		return;
	}
	pthread_mutex_lock(&s->lock);
	b->next = s->boot_refusals;
	s->boot_refusals = b;
	pthread_mutex_unlock(&s->lock);
}

static relay_status acquire_refusal(ms_state *s, ms_reply *reply, const char *purpose, const char *image,
                                    relay_error *err)
{
	const relay_host *host = s->host;
	/* An empty error text (a body that is blank or starts with a NUL) must
	 * still leave a message. */
	const char *text =
	    reply->text && reply->text[0] ? reply->text : "refused (the service gave no reason)";
	if (ms_reply_env_refusal(reply))
		return ms_env_refused(s, MS_LOOKUP_TIMEOUT_MS, NULL, err);
	if (strstr(text, "limit reached"))
		return host->error_set(err, RELAY_E_CAPACITY, 0, "%s", text);
	if (strstr(text, "refused to start (boot process exited")) {
		remember_boot_refusal(s, purpose, image, text);
		return host->error_set(err, RELAY_E_CAPACITY, 0, "%s", text);
	}
	if (strstr(text, "unknown image") || strstr(text, "base_available") ||
	    strstr(text, "Image unavailable"))
		return host->error_set(err, RELAY_E_IMAGE_UNAVAILABLE, 0, "%s", text);
	return host->error_set(err, RELAY_E_REFUSED, 0, "%s", text);
}

relay_status ms_acquire(relay_plugin_state *state, const char *spec_json, relay_call *call, unsigned flags,
                        char **lease_json_out, relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	relay_status status = RELAY_OK;
	json_object *body = NULL;
	ms_reply reply;
	memset(&reply, 0, sizeof reply);
	*lease_json_out = NULL;
	if (flags & ~ACQUIRE_KNOWN_FLAGS)
		return ms_unknown_flags(host, "acquire", flags, err);
	json_object *spec = ms_json_parse(spec_json, strlen(spec_json), NULL, 0);
	const char *purpose = rsj_get_str(spec, "purpose");
	const char *image = rsj_get_str(spec, "image");
	const char *env = rsj_get_str(spec, "env");
	const char *network = rsj_get_str(spec, "network");
	double ttl_ms = 0;
	bool vnc = false;
	rsj_get_bool(spec, "vnc", &vnc);
	if (purpose == NULL || image == NULL || network == NULL || !rsj_get_double(spec, "ttlMs", &ttl_ms) ||
	    ttl_ms <= 0) {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "%s: the acquisition needs purpose, image, network and ttlMs",
		                         MS_PLUGIN_NAME);
		goto cleanup;
	}
	status = boot_refusal_gate(s, purpose, image, call, err);
	if (status != RELAY_OK)
		goto cleanup;

	/* §3.5 "What the plugin sends": 15-minute windows, the network always. */
	double ttl_hours = ttl_ms / 3600000.0;
	if (ttl_hours > 0.25)
		ttl_hours = 0.25;
	ttl_hours = floor(ttl_hours * 1e6) / 1e6;
	if (ttl_hours < 0.1)
		ttl_hours = 0.1;
	body = json_object_new_object();
	json_object_object_add(body, "purpose", json_object_new_string(purpose));
	json_object_object_add(body, "image", json_object_new_string(image));
	json_object_object_add(body, "env", json_object_new_string(env && env[0] ? env : "none"));
	json_object_object_add(body, "ttl_hours", ms_json_number(ttl_hours));
	json_object_object_add(body, "wait", json_object_new_boolean(1));
	json_object_object_add(body, "network", json_object_new_string(network));
	if (vnc)
		json_object_object_add(body, "vnc", json_object_new_boolean(1));

	relay_error cause;
	memset(&cause, 0, sizeof cause);
	char what[192];
	snprintf(what, sizeof what, "POST %s", s->opt.acquire_path);
	status = ms_http(s, "POST", s->opt.acquire_path, body, MS_ACQUIRE_TIMEOUT_MS, call, &reply, &cause);
	if (status != RELAY_OK) {
		if (ms_never_sent(status, &cause) || status == RELAY_E_PROTOCOL) {
			status = ms_unavailable(s, status, &cause, what, err);
		} else if (status == RELAY_E_CANCELLED) {
			status = host->error_set(
			    err, RELAY_E_CANCELLED, 0,
			    "Acquisition cancelled after the request for purpose '%s' was sent; "
			    "its outcome is unknown: reconcile GET %s before retrying",
			    purpose, s->opt.route_prefix);
		} else {
			status = host->error_set(
			    err, RELAY_E_INDETERMINATE, 0,
			    "Acquisition outcome unknown for purpose '%s'; reconcile GET %s before "
			    "retrying (%s)",
			    purpose, s->opt.route_prefix, cause.message);
		}
		goto cleanup;
	}
	if (reply.status >= 400 && reply.status < 500) {
		status = acquire_refusal(s, &reply, purpose, image, err);
		goto cleanup;
	}
	if (reply.status != 200) {
		status = host->error_set(
		    err, RELAY_E_INDETERMINATE, 0,
		    "Acquisition outcome unknown for purpose '%s'; reconcile GET %s before retrying "
		    "(HTTP %ld: %s)",
		    purpose, s->opt.route_prefix, reply.status, reply.text ? reply.text : "");
		goto cleanup;
	}
	const char *problem = json_object_is_type(reply.json, json_type_object)
	                          ? ms_record_problem(s, reply.json)
	                          : "the answer is not a JSON object";
	const char *got_purpose = rsj_get_str(reply.json, "purpose");
	if (problem == NULL && strcmp(got_purpose, purpose) != 0)
		problem = "the record names another purpose";
	if (problem) {
		status = host->error_set(
		    err, RELAY_E_INDETERMINATE, 0,
		    "Acquisition outcome unknown for purpose '%s': the service answered a malformed "
		    "lease record (%s); reconcile GET %s before retrying",
		    purpose, problem, s->opt.route_prefix);
		goto cleanup;
	}
	status = document_out(s, reply.json, what, lease_json_out, err);
	if (status == RELAY_E_PROTOCOL)
		status = RELAY_E_INDETERMINATE;
cleanup:
	ms_reply_free(&reply);
	json_object_put(body);
	json_object_put(spec);
	return status;
}

/* ---- heartbeat, inspect --------------------------------------------------------- */

/* The start of renew and release: the lease document's reference, then the
 * service's identity (§3.1); on a failure `ref` holds nothing to free. */
static relay_status lease_begin(ms_state *s, const char *lease_json, relay_call *call, ms_lease_ref *ref,
                                relay_error *err)
{
	relay_status status = ms_lease_ref_parse(s, lease_json, ref, err);
	if (status != RELAY_OK)
		return status;
	status = ms_check_health(s, MS_LOOKUP_TIMEOUT_MS, call, NULL, err);
	if (status != RELAY_OK)
		ms_lease_ref_free(ref);
	return status;
}

/* POST <routePrefix>/<vm>/<action> with `body`: ms_http's answer, the
 * transport failure told in `cause`. `vm` is valid (ms_lease_ref_parse). */
static relay_status post_action(ms_state *s, const char *vm, const char *action, const json_object *body,
                                uint32_t timeout_ms, relay_call *call, ms_reply *reply, relay_error *cause)
{
	memset(cause, 0, sizeof *cause);
	char *path = ms_machine_path(s, vm, action);
	relay_status status = ms_http(s, "POST", path, body, timeout_ms, call, reply, cause);
	free(path);
	return status;
}

relay_status ms_renew(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms, relay_call *call,
                      unsigned flags, char **lease_json_out, relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	if (lease_json_out)
		*lease_json_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(host, "renew", flags, err);
	/* The service refuses below 0.1 h (§3.6). */
	if (ttl_ms < 360000)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "%s: a renewal of %llu ms is below the service's minimum of 0.1 h",
		                       MS_PLUGIN_NAME, (unsigned long long)ttl_ms);
	ms_lease_ref ref;
	relay_status status = lease_begin(s, lease_json, call, &ref, err);
	if (status != RELAY_OK)
		return status;
	ms_reply reply;
	memset(&reply, 0, sizeof reply);
	double hours = floor((double)ttl_ms / 3.6) / 1000000.0; /* ms to hours, rounded down to 1e-6 h */
	if (hours > 720)
		hours = 720;
	json_object *body = json_object_new_object();
	json_object_object_add(body, "ttl_hours", ms_json_number(hours));
	relay_error cause;
	status = post_action(s, ref.vm, "heartbeat", body, MS_LOOKUP_TIMEOUT_MS, call, &reply, &cause);
	if (status != RELAY_OK) {
		status = host->error_set(err, status == RELAY_E_CANCELLED ? status : RELAY_E_INDETERMINATE, 0,
		                         "the heartbeat of %s got no answer: %s", ref.vm, cause.message);
		goto cleanup;
	}
	if (reply.status != 200) {
		status = lease_failure(s, &reply, "the heartbeat", ref.vm, err);
		goto cleanup;
	}
	status = document_out(s, reply.json, "the heartbeat", lease_json_out, err);
cleanup:
	json_object_put(body);
	ms_reply_free(&reply);
	ms_lease_ref_free(&ref);
	return status;
}

/* GET /machines/<vm>: RELAY_OK with the record (new reference), or
 * RELAY_E_NOT_FOUND on 404, or another failure. */
static relay_status get_record(ms_state *s, const char *vm, uint32_t timeout_ms, relay_call *call,
                               json_object **record_out, relay_error *err)
{
	*record_out = NULL;
	char *path = ms_machine_path(s, vm, NULL);
	if (path == NULL)
		return s->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                          "%s: %s is not a valid machine name", MS_PLUGIN_NAME, vm);
	ms_reply reply;
	relay_status status = ms_get(s, path, timeout_ms, call, &reply, err);
	char what[320];
	snprintf(what, sizeof what, "GET %s", path);
	free(path);
	if (status != RELAY_OK)
		return status;
	if (reply.status == 200 && json_object_is_type(reply.json, json_type_object)) {
		*record_out = json_object_get(reply.json);
	} else if (reply.status == 200) {
		status =
		    s->host->error_set(err, RELAY_E_PROTOCOL, 0, "%s did not answer a JSON object", what);
	} else {
		status = lease_failure(s, &reply, what, vm, err);
	}
	ms_reply_free(&reply);
	return status;
}

relay_status ms_inspect(relay_plugin_state *state, const char *lease_json, relay_call *call, unsigned flags,
                        char **lease_json_out, relay_error *err)
{
	ms_state *s = state;
	if (lease_json_out)
		*lease_json_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(s->host, "inspect", flags, err);
	ms_lease_ref ref;
	relay_status status = ms_lease_ref_parse(s, lease_json, &ref, err);
	if (status != RELAY_OK)
		return status;
	json_object *record = NULL;
	status = ms_check_health(s, MS_LOOKUP_TIMEOUT_MS, call, NULL, err);
	if (status == RELAY_OK)
		status = get_record(s, ref.vm, MS_LOOKUP_TIMEOUT_MS, call, &record, err);
	if (status == RELAY_OK) {
		const char *fp = rsj_get_str(record, "environment_fingerprint");
		if (s->fingerprint[0] && fp && strcmp(fp, s->fingerprint) != 0)
			status = s->host->error_set(
			    err, RELAY_E_ENVIRONMENT_MISMATCH, 0,
			    "%s was leased in another machine environment (fingerprint %.8s); "
			    "select its original environment before operating on it",
			    ref.vm, fp);
		else
			status = document_out(s, record, "GET the lease", lease_json_out, err);
	}
	json_object_put(record);
	ms_lease_ref_free(&ref);
	return status;
}

/* ---- listing -------------------------------------------------------------------- */

relay_status ms_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                unsigned flags, char **leases_json_out, relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	*leases_json_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(host, "find", flags, err);
	relay_status status = ms_check_health(s, MS_LOOKUP_TIMEOUT_MS, call, NULL, err);
	if (status != RELAY_OK)
		return status;
	ms_reply reply;
	status = ms_get(s, s->opt.route_prefix, MS_LOOKUP_TIMEOUT_MS, call, &reply, err);
	if (status != RELAY_OK)
		return status;
	char what[192];
	snprintf(what, sizeof what, "GET %s", s->opt.route_prefix);
	json_object *found = NULL;
	if (reply.status != 200) {
		status = ms_reply_env_refusal(&reply)
		             ? ms_env_refused(s, MS_LOOKUP_TIMEOUT_MS, call, err)
		             : host->error_set(err, RELAY_E_UNAVAILABLE, 0, "%s answered HTTP %ld (%s)", what,
		                               reply.status, reply.text ? reply.text : "");
		goto cleanup;
	}
	json_object *map = rsj_get_obj(reply.json, s->opt.list_key);
	if (map == NULL)
		map = rsj_get_obj(reply.json, "vms");
	if (map == NULL)
		map = rsj_get_obj(reply.json, "machines");
	if (map == NULL) {
		status = host->error_set(err, RELAY_E_PROTOCOL, 0,
		                         "%s answered without a \"%s\" map of leases", what, s->opt.list_key);
		goto cleanup;
	}
	found = json_object_new_array();
	json_object_object_foreach(map, key, record)
	{
		(void)key;
		const char *p = rsj_get_str(record, "purpose");
		if (p == NULL || strcmp(p, purpose) != 0)
			continue;
		char why[160];
		json_object *doc = ms_lease_document(s, record, why, sizeof why);
		if (doc)
			json_object_array_add(found, doc);
		else
			host->log(RELAY_LOG_WARNING, MS_PLUGIN_NAME,
			          "a lease record of purpose %s is malformed: %s", purpose, why);
	}
	*leases_json_out = ms_json_owned(host, found);
	if (*leases_json_out == NULL)
		status = host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
cleanup:
	json_object_put(found);
	ms_reply_free(&reply);
	return status;
}

/* ---- release and the destruction check ---------------------------------------------- */

relay_status ms_release(relay_plugin_state *state, const char *lease_json, const char *reason,
                        relay_call *call, unsigned flags, relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	if (flags != 0)
		return ms_unknown_flags(host, "release", flags, err);
	ms_lease_ref ref;
	relay_status status = lease_begin(s, lease_json, call, &ref, err);
	if (status != RELAY_OK)
		return status;
	ms_reply reply;
	memset(&reply, 0, sizeof reply);
	json_object *body = json_object_new_object();
	json_object_object_add(body, "reason",
	                       json_object_new_string(reason && reason[0] ? reason : "released"));
	relay_error cause;
	status = post_action(s, ref.vm, "release", body, MS_RELEASE_TIMEOUT_MS, call, &reply, &cause);
	if (status != RELAY_OK) {
		if (ms_never_sent(status, &cause) || status == RELAY_E_PROTOCOL)
			status = ms_unavailable(s, status, &cause, "the release", err);
		else
			status =
			    host->error_set(err, status == RELAY_E_CANCELLED ? status : RELAY_E_INDETERMINATE,
			                    0, "the release of %s got no answer (%s); its outcome is unknown",
			                    ref.vm, cause.message);
		goto cleanup;
	}
	if (reply.status != 200) {
		status = lease_failure(s, &reply, "the release", ref.vm, err);
		goto cleanup;
	}
	bool released = false;
	const char *vm = rsj_get_str(reply.json, "vm");
	if (!rsj_get_bool(reply.json, "released", &released) || !released || (vm && strcmp(vm, ref.vm) != 0))
		status = host->error_set(err, RELAY_E_UNVERIFIED, 0,
		                         "machine-service did not confirm destruction of %s", ref.vm);
cleanup:
	json_object_put(body);
	ms_reply_free(&reply);
	ms_lease_ref_free(&ref);
	return status;
}

/* The Tart check of §3.10. */
static relay_status tart_check(ms_state *s, const char *vm, relay_call *call, relay_error *err)
{
	const relay_host *host = s->host;
	if (s->tart_path == NULL)
		return host->error_set(
		    err, RELAY_E_UNVERIFIED, 0,
		    "Cannot verify VM destruction: no Tart binary was found (set the profile's "
		    "tartPath, TART, or destructionCheck \"service\")");
	char home_line[4200];
	snprintf(home_line, sizeof home_line, "TART_HOME=%s", s->tart_home ? s->tart_home : "");
	size_t nb = 0;
	while (s->bundle && s->bundle[nb])
		nb++;
	const char **overrides = calloc(nb + 2, sizeof *overrides);
	if (overrides == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	for (size_t i = 0; i < nb; i++)
		overrides[i] = s->bundle[i];
	overrides[nb] = home_line;
	const char *argv[] = {s->tart_path, "list", "--format", "json", NULL};
	relay_process_result res;
	relay_error cause;
	relay_status status =
	    ms_run(host, argv, overrides, MS_TART_TIMEOUT_MS, MS_MAX_BODY_BYTES, call, &res, &cause);
	free(overrides);
	json_object *list = NULL;
	if (status != RELAY_OK) {
		status = host->error_set(err, status == RELAY_E_CANCELLED ? status : RELAY_E_UNVERIFIED, 0,
		                         "Cannot verify VM destruction: %s list could not run (%s)",
		                         s->tart_path, cause.message);
		goto cleanup;
	}
	if (res.timed_out || res.exit_code != 0 || res.output_truncated) {
		char *tail = ms_cut_utf8(res.err ? res.err : "", 120);
		status = host->error_set(err, RELAY_E_UNVERIFIED, 0,
		                         "Cannot verify VM destruction: tart list %s (%s)",
		                         res.timed_out          ? "timed out after 15 s"
		                         : res.output_truncated ? "printed more than 4 MiB"
		                                                : "exited with a failure",
		                         tail ? tail : "");
		free(tail);
		goto cleanup;
	}
	list = ms_json_parse(res.out, res.out_len, NULL, 0);
	bool shape = json_object_is_type(list, json_type_array);
	bool listed = false;
	for (size_t i = 0; shape && i < json_object_array_length(list); i++) {
		json_object *entry = json_object_array_get_idx(list, i);
		const char *name =
		    json_object_is_type(entry, json_type_object) ? rsj_get_str(entry, "Name") : NULL;
		if (name == NULL)
			shape = false;
		else if (strcmp(name, vm) == 0)
			listed = true;
	}
	if (!shape)
		status = host->error_set(
		    err, RELAY_E_UNVERIFIED, 0,
		    "Cannot verify VM destruction: tart list did not print a JSON array of objects "
		    "with a string Name");
	else if (listed)
		status = host->error_set(
		    err, RELAY_E_UNVERIFIED, 0,
		    "machine-service relinquished %s, but Tart still lists it. Destruction is "
		    "unverified; ownership retained.",
		    vm);
cleanup:
	json_object_put(list);
	host->free(res.out);
	host->free(res.err);
	return status;
}

relay_status ms_verify_destroyed(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                 unsigned flags, char **check_name_out, relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	if (check_name_out)
		*check_name_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(host, "verify", flags, err);
	ms_lease_ref ref;
	relay_status status = ms_lease_ref_parse(s, lease_json, &ref, err);
	if (status != RELAY_OK)
		return status;
	bool tart = s->opt.destruction_check == MS_CHECK_TART;
	if (check_name_out)
		*check_name_out = host->strdup(tart ? "tart" : "service");
	if (tart) {
		status = tart_check(s, ref.vm, call, err);
	} else {
		/* The service check: the release answer plus a 404 from GET
		 * /machines/<vm>, asked of the right service only. */
		json_object *record = NULL;
		relay_error cause;
		memset(&cause, 0, sizeof cause);
		status = ms_check_health(s, MS_GONE_TIMEOUT_MS, call, NULL, &cause);
		if (status == RELAY_OK)
			status = get_record(s, ref.vm, MS_GONE_TIMEOUT_MS, call, &record, &cause);
		if (status == RELAY_E_NOT_FOUND) {
			status = RELAY_OK;
		} else if (status == RELAY_OK) {
			const char *st = rsj_get_str(record, "state");
			status = host->error_set(
			    err, RELAY_E_UNVERIFIED, 0,
			    "machine-service still lists %s (state %s). Destruction is unverified; "
			    "ownership retained.",
			    ref.vm, st ? st : "unknown");
		} else {
			status =
			    host->error_set(err, status == RELAY_E_CANCELLED ? status : RELAY_E_UNVERIFIED, 0,
			                    "Cannot verify VM destruction of %s: %s", ref.vm, cause.message);
		}
		json_object_put(record);
	}
	ms_lease_ref_free(&ref);
	return status;
}
