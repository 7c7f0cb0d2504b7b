/*
 * The service's records as the core's lease documents (ms_record.h):
 * their names, the §3.5 checks of an acquire answer, the lease document
 * of a record and the parse of a document the core hands back.
 */
#include "ms_record.h"

#include <stdio.h>
#include <string.h>

#include "ms_util.h"

/* ---- lease documents ---------------------------------------------------------- */

const char *ms_record_name(const ms_state *s, const json_object *record)
{
	const char *name = rsj_get_str(record, s->opt.name_field);
	if (name == NULL)
		name = rsj_get_str(record, strcmp(s->opt.name_field, "vm") == 0 ? "machine" : "vm");
	return name;
}

static const char *record_image(const json_object *record)
{
	const char *image = rsj_get_str(record, "image");
	return image ? image : rsj_get_str(record, "line");
}

static const char *record_kind(const json_object *record)
{
	const char *kind = rsj_get_str(record, "image_kind");
	return kind ? kind : rsj_get_str(record, "line_kind");
}

static bool known_state(const char *state)
{
	return state && (strcmp(state, "pending") == 0 || strcmp(state, "provisioning") == 0 ||
	                 strcmp(state, "running") == 0 || strcmp(state, "releasing") == 0);
}

/* The SSH endpoint of §5 mapped to relay/machine.h's "ssh", or NULL. */
static json_object *ssh_endpoint(const ms_state *s, const json_object *record)
{
	json_object *ssh = rsj_get_obj(record, s->opt.ssh_field);
	if (ssh == NULL)
		return NULL;
	const char *host = rsj_get_str(ssh, "host");
	if (host == NULL)
		host = rsj_get_str(record, "ip");
	const char *user = rsj_get_str(ssh, "user");
	if (user == NULL)
		user = rsj_get_str(record, "ssh_user");
	if (host == NULL || user == NULL)
		return NULL;
	double port = 22;
	rsj_get_double(ssh, "port", &port);
	json_object *out = json_object_new_object();
	json_object_object_add(out, "host", json_object_new_string(host));
	json_object_object_add(out, "port", json_object_new_int((int)port));
	json_object_object_add(out, "user", json_object_new_string(user));
	const char *identity = rsj_get_str(ssh, "identity_file");
	const char *known = rsj_get_str(ssh, "known_hosts_file");
	json_object_object_add(out, "identityFile", identity ? json_object_new_string(identity) : NULL);
	json_object_object_add(out, "knownHostsFile", known ? json_object_new_string(known) : NULL);
	return out;
}

json_object *ms_lease_document(ms_state *s, json_object *record, char *why, size_t why_len)
{
	const char *vm = ms_record_name(s, record);
	const char *purpose = rsj_get_str(record, "purpose");
	const char *image = record_image(record);
	if (!ms_valid_machine_name(vm) || purpose == NULL || purpose[0] == '\0' || image == NULL ||
	    image[0] == '\0') {
		snprintf(why, why_len, "the lease record lacks a valid %s, purpose or image",
		         s->opt.name_field);
		return NULL;
	}
	json_object *doc = json_object_new_object();
	json_object_object_add(doc, "vm", json_object_new_string(vm));
	json_object_object_add(doc, "purpose", json_object_new_string(purpose));
	json_object_object_add(doc, "image", json_object_new_string(image));
	const char *lease_id = rsj_get_str(record, "lease_id");
	json_object_object_add(doc, "lease_id", lease_id ? json_object_new_string(lease_id) : NULL);
	const char *state = rsj_get_str(record, "state");
	json_object_object_add(doc, "state", json_object_new_string(known_state(state) ? state : "unknown"));
	double expires_s = 0;
	if (rsj_get_double(record, "ttl_expires_at", &expires_s))
		json_object_object_add(doc, "expiresAtMs",
		                       json_object_new_int64((int64_t)llround(expires_s * 1000.0)));
	else
		json_object_object_add(doc, "expiresAtMs", NULL);
	json_object *console = rsj_get_obj(record, "console");
	json_object_object_add(doc, "console", console ? json_object_get(console) : NULL);
	json_object_object_add(doc, "display", NULL);
	json_object_object_add(doc, "ssh", ssh_endpoint(s, record));
	const char *kind = record_kind(record);
	json_object_object_add(doc, "imageKind", kind ? json_object_new_string(kind) : NULL);
	json_object_object_add(doc, "record", json_object_get(record));
	return doc;
}

relay_status ms_lease_ref_parse(ms_state *s, const char *lease_json, ms_lease_ref *ref, relay_error *err)
{
	memset(ref, 0, sizeof *ref);
	if (lease_json == NULL)
		return s->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s: no lease document was given",
		                          MS_PLUGIN_NAME);
	ref->doc = ms_json_parse(lease_json, strlen(lease_json), NULL, 0);
	const char *vm = rsj_get_str(ref->doc, "vm");
	const char *purpose = rsj_get_str(ref->doc, "purpose");
	const char *lease_id = rsj_get_str(ref->doc, "lease_id");
	if (!ms_valid_machine_name(vm) || strlen(vm) >= sizeof ref->vm) {
		ms_lease_ref_free(ref);
		return s->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                          "%s: the lease document has no valid machine name (\"vm\")",
		                          MS_PLUGIN_NAME);
	}
	snprintf(ref->vm, sizeof ref->vm, "%s", vm);
	snprintf(ref->purpose, sizeof ref->purpose, "%s", purpose ? purpose : "");
	snprintf(ref->lease_id, sizeof ref->lease_id, "%s", lease_id ? lease_id : "");
	return RELAY_OK;
}

void ms_lease_ref_free(ms_lease_ref *ref)
{
	json_object_put(ref->doc);
	ref->doc = NULL;
}

/* §3.5: the checks of an acquire answer. NULL when sound, else the rule. */
const char *ms_record_problem(const ms_state *s, const json_object *r)
{
	const char *vm = ms_record_name(s, r);
	if (vm == NULL || vm[0] == '\0')
		return "vm is not a non-empty string";
	const char *purpose = rsj_get_str(r, "purpose");
	if (purpose == NULL || purpose[0] == '\0')
		return "purpose is not a non-empty string";
	const char *image = record_image(r);
	if (image == NULL || image[0] == '\0')
		return "image is not a non-empty string";
	const char *kind = record_kind(r);
	if (kind == NULL || (strcmp(kind, "macos") != 0 && strcmp(kind, "linux") != 0))
		return "image_kind is not macos or linux";
	if (!known_state(rsj_get_str(r, "state")))
		return "state is not pending, provisioning, running or releasing";
	double d;
	if (!rsj_get_double(r, "created_at", &d) || !rsj_get_double(r, "ttl_expires_at", &d))
		return "created_at or ttl_expires_at is not a finite number";
	static const char *const nullable_numbers[] = {"cpu", "memory_mb", "disk_gb", "grace_until"};
	for (size_t i = 0; i < 4; i++) {
		json_object *v = NULL;
		if (json_object_object_get_ex(r, nullable_numbers[i], &v) && v != NULL &&
		    !rsj_get_double(r, nullable_numbers[i], &d))
			return "cpu, memory_mb, disk_gb or grace_until is neither null nor a number";
	}
	static const char *const nullable_strings[] = {"env", "ip"};
	for (size_t i = 0; i < 2; i++) {
		json_object *v = NULL;
		if (json_object_object_get_ex(r, nullable_strings[i], &v) && v != NULL &&
		    !json_object_is_type(v, json_type_string))
			return "env or ip is neither null nor a string";
	}
	bool warned;
	json_object *w = NULL;
	if (json_object_object_get_ex(r, "warned", &w) && !rsj_get_bool(r, "warned", &warned))
		return "warned is not a boolean";
	return NULL;
}
