/*
 * The machine-service plugin's read-only views: the image inventory with
 * capacity (GET /images, §3.3) and the application catalog (GET
 * /applications, §8.1). Both are passed to the core as the service wrote
 * them; the core validates the catalog before use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_http.h"
#include "ms_plugin.h"
#include "ms_util.h"

relay_status ms_images(relay_plugin_state *state, relay_call *call, unsigned flags, char **images_json_out,
                       relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	*images_json_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(host, "images", flags, err);
	ms_reply reply;
	relay_status status = ms_get(s, "/images", MS_LOOKUP_TIMEOUT_MS, call, &reply, err);
	if (status != RELAY_OK)
		return status;
	json_object *out = NULL;
	if (ms_reply_env_refusal(&reply)) {
		status = ms_env_refused(s, MS_LOOKUP_TIMEOUT_MS, call, err);
		goto cleanup;
	}
	if (reply.status != 200) {
		status = host->error_set(err, reply.status < 500 ? RELAY_E_REFUSED : RELAY_E_UNAVAILABLE, 0,
		                         "GET /images answered HTTP %ld: %s", reply.status,
		                         reply.text ? reply.text : "");
		goto cleanup;
	}
	json_object *images = rsj_get_obj(reply.json, "images");
	if (images == NULL) {
		status = host->error_set(
		    err, RELAY_E_PROTOCOL, 0,
		    "GET /images answered without an \"images\" object; that is not machine-service");
		goto cleanup;
	}
	out = json_object_new_object();
	json_object_object_add(out, "images", json_object_get(images));
	json_object *capacity = rsj_get_obj(reply.json, "capacity");
	json_object_object_add(out, "capacity", capacity ? json_object_get(capacity) : NULL);
	*images_json_out = ms_json_owned(host, out);
	if (*images_json_out == NULL)
		status = host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
cleanup:
	json_object_put(out);
	ms_reply_free(&reply);
	return status;
}

relay_status ms_catalog(relay_plugin_state *state, relay_call *call, unsigned flags, char **catalog_json_out,
                        relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	*catalog_json_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(host, "catalog", flags, err);
	ms_reply reply;
	relay_status status = ms_get(s, "/applications", MS_DEFAULT_TIMEOUT_MS, call, &reply, err);
	if (status != RELAY_OK)
		return status;
	if (ms_reply_env_refusal(&reply)) {
		status = ms_env_refused(s, MS_LOOKUP_TIMEOUT_MS, call, err);
	} else if (reply.status != 200) {
		/* 503 (catalog unavailable) and 409 (associations failed) both mean
		 * "catalog unavailable" (§8.1). */
		status = host->error_set(err, RELAY_E_UNAVAILABLE, 0, "catalog unavailable (HTTP %ld): %s",
		                         reply.status, reply.text ? reply.text : "");
	} else if (!json_object_is_type(reply.json, json_type_object)) {
		status = host->error_set(err, RELAY_E_PROTOCOL, 0,
		                         "GET /applications did not answer a JSON object");
	} else {
		*catalog_json_out = ms_json_owned(host, reply.json);
		if (*catalog_json_out == NULL)
			status = host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	}
	ms_reply_free(&reply);
	return status;
}
