/* lease_doc.c — the lease document's common members (relay_kit/lease_doc.h). */
#include "relay_kit/lease_doc.h"

#include <string.h>

#include "relay_support/json_get.h"

json_object *rk_json_copy(json_object *obj, const char *key)
{
	json_object *v = NULL, *out = NULL;
	if (obj == NULL || !json_object_object_get_ex(obj, key, &v) || v == NULL)
		return NULL;
	if (json_object_deep_copy(v, &out, NULL) != 0)
		return NULL;
	return out;
}

json_object *rk_lease_document(json_object *record, const char *state)
{
	static const char *const before_state[] = {"vm", "purpose", "image", "lease_id"};
	static const char *const after_state[] = {"expiresAtMs", "console", "display"};
	json_object *doc = json_object_new_object();
	for (size_t i = 0; i < sizeof before_state / sizeof before_state[0]; i++)
		json_object_object_add(doc, before_state[i], rk_json_copy(record, before_state[i]));
	json_object_object_add(doc, "state", json_object_new_string(state ? state : "unknown"));
	for (size_t i = 0; i < sizeof after_state / sizeof after_state[0]; i++)
		json_object_object_add(doc, after_state[i], rk_json_copy(record, after_state[i]));
	json_object_object_add(doc, "ssh", NULL);
	json_object *copy = NULL;
	json_object_deep_copy(record, &copy, NULL);
	if (copy)
		json_object_object_del(copy, "consolePrivate");
	json_object_object_add(doc, "record", copy);
	return doc;
}

relay_status rk_lease_check_renewable(const relay_host *host, json_object *record, relay_error *err)
{
	const char *state = rsj_get_str(record, "state");
	if (state != NULL && strcmp(state, "running") == 0)
		return RELAY_OK;
	return host->error_set(err, RELAY_E_REFUSED, 0, "%s is %s; renewal cannot cancel committed teardown",
	                       rsj_get_str(record, "vm") ? rsj_get_str(record, "vm") : "the lease",
	                       state ? state : "in an unknown state");
}

void rk_lease_renew_record(json_object *record, int64_t now_ms, uint64_t ttl_ms)
{
	int64_t expires =
	    now_ms + (int64_t)(ttl_ms > (uint64_t)INT64_MAX / 4 ? (uint64_t)INT64_MAX / 4 : ttl_ms);
	int64_t deadline = rsj_int_or(record, "deadlineMs", 0);
	if (deadline > 0 && expires > deadline)
		expires = deadline;
	json_object_object_add(record, "expiresAtMs", json_object_new_int64(expires));
	json_object_object_add(record, "renewedAtMs", json_object_new_int64(now_ms));
}
