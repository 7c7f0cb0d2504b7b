/* machine.c — the machine ops' front (relay_kit/machine.h). */
#include "relay_kit/machine.h"

#include <errno.h>
#include <stdbool.h>

#include "relay_kit/error.h"
#include "relay_kit/text.h"

static const rk_machine *front(relay_plugin_state *state)
{
	return (const rk_machine *)state; /* the state's first member */
}

/* RELAY_OK with *out set, unless flags has an unknown bit (refused, naming op). */
static relay_status enter(relay_plugin_state *state, const char *op, unsigned flags, char **out,
                          relay_error *err)
{
	if (out)
		*out = NULL;
	if (flags)
		return rk_err(front(state)->host, err, RELAY_E_UNSUPPORTED_FLAGS, 0, 0,
		              "unknown %s flags 0x%x", op, flags);
	return RELAY_OK;
}

/* The backend's answer as the host's text in *out (obj is consumed). */
static relay_status answer(relay_plugin_state *state, json_object *obj, char **out, relay_error *err)
{
	const relay_host *host = front(state)->host;
	*out = obj ? rk_json_text(host, obj) : NULL;
	json_object_put(obj);
	return *out ? RELAY_OK : rk_err(host, err, RELAY_E_NO_MEMORY, ENOMEM, 0, "out of memory");
}

/* enter, then *doc the lease document (NULL when it is not a JSON object). */
static relay_status enter_doc(relay_plugin_state *state, const char *op, unsigned flags, char **out,
                              const char *lease_json, json_object **doc, relay_error *err)
{
	*doc = NULL;
	relay_status s = enter(state, op, flags, out, err);
	if (s == RELAY_OK)
		*doc = rk_json_object(lease_json);
	return s;
}

relay_status rk_machine_acquire(relay_plugin_state *state, const char *spec_json, relay_call *call,
                                unsigned flags, char **lease_json_out, relay_error *err)
{
	json_object *spec, *doc = NULL;
	relay_status s = enter_doc(state, "acquire", flags, lease_json_out, spec_json, &spec, err);
	if (s == RELAY_OK && spec == NULL)
		return rk_err(front(state)->host, err, RELAY_E_INVALID_ARGUMENT, 0, 0,
		              "the acquire spec is not a JSON object");
	if (s == RELAY_OK)
		s = front(state)->backend->acquire(state, spec, call, &doc, err);
	json_object_put(spec);
	return s == RELAY_OK ? answer(state, doc, lease_json_out, err) : s;
}

relay_status rk_machine_renew(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms,
                              relay_call *call, unsigned flags, char **lease_json_out, relay_error *err)
{
	json_object *doc, *fresh = NULL;
	relay_status s = enter_doc(state, "renew", flags, lease_json_out, lease_json, &doc, err);
	if (s == RELAY_OK)
		s = front(state)->backend->renew(state, doc, ttl_ms, call, lease_json_out ? &fresh : NULL,
		                                 err);
	json_object_put(doc);
	return s == RELAY_OK && lease_json_out ? answer(state, fresh, lease_json_out, err) : s;
}

relay_status rk_machine_inspect(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                unsigned flags, char **lease_json_out, relay_error *err)
{
	json_object *doc, *fresh = NULL;
	relay_status s = enter_doc(state, "inspect", flags, lease_json_out, lease_json, &doc, err);
	if (s == RELAY_OK)
		s = front(state)->backend->inspect(state, doc, call, &fresh, err);
	json_object_put(doc);
	if (s == RELAY_OK && lease_json_out)
		return answer(state, fresh, lease_json_out, err);
	json_object_put(fresh); /* not wanted (NULL after a failure) */
	return s;
}

relay_status rk_machine_release(relay_plugin_state *state, const char *lease_json, const char *reason,
                                relay_call *call, unsigned flags, relay_error *err)
{
	json_object *doc;
	relay_status s = enter_doc(state, "release", flags, NULL, lease_json, &doc, err);
	if (s == RELAY_OK)
		s = front(state)->backend->release(state, doc, reason, call, err);
	json_object_put(doc);
	return s;
}

relay_status rk_machine_verify_destroyed(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                         unsigned flags, char **check_name_out, relay_error *err)
{
	const rk_machine *m = front(state);
	json_object *doc;
	relay_status s = enter_doc(state, "verify", flags, check_name_out, lease_json, &doc, err);
	if (s == RELAY_OK)
		s = m->backend->verify_destroyed(state, doc, call, err);
	json_object_put(doc);
	if (s == RELAY_OK && check_name_out)
		*check_name_out = m->host->strdup(m->backend->destroyed_check);
	return s;
}

relay_status rk_machine_images(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                               relay_error *err)
{
	relay_status s = enter(state, "images", flags, out, err);
	return s == RELAY_OK ? answer(state, front(state)->backend->images(state, call), out, err) : s;
}

relay_status rk_machine_health(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                               relay_error *err)
{
	const rk_machine *m = front(state);
	relay_status s = enter(state, "health", flags, out, err);
	if (s != RELAY_OK)
		return s;
	json_object *health = NULL;
	if (out) {
		health = json_object_new_object();
		json_object_object_add(health, "ok", json_object_new_boolean(true));
		json_object_object_add(health, "service", json_object_new_string(m->backend->name));
	}
	s = m->backend->health(state, call, health, err);
	if (s == RELAY_OK && out)
		return answer(state, health, out, err);
	json_object_put(health);
	return s;
}

relay_status rk_machine_catalog(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                                relay_error *err)
{
	json_object *cat = NULL;
	relay_status s = enter(state, "catalog", flags, out, err);
	if (s == RELAY_OK)
		s = front(state)->backend->catalog(state, call, &cat, err);
	return s == RELAY_OK ? answer(state, cat, out, err) : s;
}

relay_status rk_machine_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                        unsigned flags, char **out, relay_error *err)
{
	json_object *found = NULL;
	relay_status s = enter(state, "find", flags, out, err);
	if (s == RELAY_OK && purpose == NULL)
		return rk_err(front(state)->host, err, RELAY_E_INVALID_ARGUMENT, 0, 0,
		              "find_by_purpose needs a purpose");
	if (s == RELAY_OK)
		s = front(state)->backend->find_by_purpose(state, purpose, call, &found, err);
	return s == RELAY_OK ? answer(state, found, out, err) : s;
}

relay_status rk_machine_binding(relay_plugin_state *state, unsigned flags, char **out, relay_error *err)
{
	const rk_machine *m = front(state);
	relay_status s = enter(state, "binding", flags, out, err);
	if (s != RELAY_OK)
		return s;
	json_object *o = json_object_new_object();
	json_object_object_add(o, "machine", json_object_new_string(m->backend->name));
	json_object_object_add(o, "endpoint", m->endpoint ? json_object_new_string(m->endpoint) : NULL);
	json_object_object_add(o, "store", json_object_new_string(m->store));
	json_object_object_add(o, "environmentFingerprint", NULL);
	return answer(state, o, out, err);
}

relay_status rk_machine_doctor(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                               relay_error *err)
{
	relay_status s = enter(state, "doctor", flags, out, err);
	return s == RELAY_OK ? answer(state, front(state)->backend->doctor(state, call), out, err) : s;
}
