/*
 * machine_ops.c — machine-local's machine ops (relay/machine.h): acquire,
 * renew, inspect, release, verify_destroyed, images, health, catalog,
 * find_by_purpose, binding and doctor, each checking its flags and
 * input before it calls the file that does the work; the typed console
 * (console_ops) is console.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "local.h"
#include "relay_kit/lease_doc.h"

static relay_status text_out(local_state *st, json_object *obj, char **out, relay_error *err)
{
	*out = lu_json_out(st, obj);
	json_object_put(obj);
	return *out ? RELAY_OK : lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

static relay_status m_acquire(relay_plugin_state *state, const char *spec_json, relay_call *call,
                              unsigned flags, char **lease_json_out, relay_error *err)
{
	local_state *st = state;
	*lease_json_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown acquire flags 0x%x", flags);
	json_object *spec = spec_json ? json_tokener_parse(spec_json) : NULL;
	if (spec == NULL || !json_object_is_type(spec, json_type_object)) {
		if (spec)
			json_object_put(spec);
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the acquire spec is not a JSON object");
	}
	json_object *record = NULL;
	relay_status s = sandbox_acquire(st, spec, call, &record, err);
	json_object_put(spec);
	if (s != RELAY_OK)
		return s;
	json_object *doc = lease_document(st, record);
	json_object_put(record);
	return text_out(st, doc, lease_json_out, err);
}

static const char *doc_vm(json_object *doc)
{
	return lu_get_string(doc, "vm");
}

static relay_status m_renew(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms,
                            relay_call *call, unsigned flags, char **lease_json_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (lease_json_out)
		*lease_json_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown renew flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	const char *vm = doc_vm(doc);
	relay_status s = RELAY_OK;
	json_object *rec = NULL;
	int lock = -1;
	if (vm == NULL || ttl_ms == 0) {
		s = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		           "renew needs a lease document and a positive ttl");
		goto done;
	}
	lock = lease_lock(st, vm, true);
	int e = 0;
	rec = lock >= 0 ? lease_read(st, vm, &e) : NULL;
	if (rec == NULL) {
		s = lu_err(st, err, RELAY_E_NOT_FOUND, e, "machine-local no longer holds lease %s", vm);
		goto done;
	}
	s = rk_lease_check_renewable(st->host, rec, err);
	if (s != RELAY_OK)
		goto done;
	int pidfd = sandbox_init_pidfd(rec);
	if (pidfd < 0) {
		s = lu_err(st, err, RELAY_E_REFUSED, 0,
		           "%s is not running (its guest init is gone); release it and acquire a new lease",
		           vm);
		goto done;
	}
	close(pidfd);
	int64_t now = st->host->now_ms();
	rk_lease_renew_record(rec, now, ttl_ms);
	lease_set_owner(st, rec); /* a restarted relay takes the lease back here */
	e = lease_write(st, rec, true);
	if (e == 0)
		e = lease_write_expires(st, rec);
	if (e != 0) {
		s = lu_err(st, err, RELAY_E_IO, e, "cannot write the renewed lease %s", vm);
		goto done;
	}
	if (lease_json_out)
		s = text_out(st, lease_document(st, rec), lease_json_out, err);
done:
	if (lock >= 0)
		lease_unlock(lock);
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}

static relay_status m_inspect(relay_plugin_state *state, const char *lease_json, relay_call *call,
                              unsigned flags, char **lease_json_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (lease_json_out)
		*lease_json_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown inspect flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	const char *vm = doc_vm(doc);
	relay_status s = RELAY_OK;
	int e = 0;
	json_object *rec = vm ? lease_read(st, vm, &e) : NULL;
	if (vm == NULL)
		s = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "inspect needs a lease document");
	else if (rec == NULL)
		s = lu_err(st, err, RELAY_E_NOT_FOUND, e, "machine-local no longer holds lease %s", vm);
	else if (lease_json_out)
		s = text_out(st, lease_document(st, rec), lease_json_out, err);
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}

static relay_status m_release(relay_plugin_state *state, const char *lease_json, const char *reason,
                              relay_call *call, unsigned flags, relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown release flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	const char *vm = doc_vm(doc);
	relay_status s = RELAY_OK;
	json_object *rec = NULL;
	int lock = -1;
	if (vm == NULL || !lu_valid_token(vm, 200)) {
		s = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "release needs a lease document");
		goto done;
	}
	lock = lease_lock(st, vm, true);
	rec = lock >= 0 ? lease_read(st, vm, NULL) : NULL;
	if (rec == NULL) {
		/* Not in the store (or its folder is gone). Make sure nothing the
		 * document describes survives, then say we no longer know it. */
		json_object *described = lu_get_object(doc, "record");
		char detail[256];
		if (described && sandbox_verify_gone(st, described, detail, sizeof detail) != RELAY_OK) {
			s = sandbox_destroy(st, described, reason ? reason : "released", err);
			goto done;
		}
		s = lu_err(st, err, RELAY_E_NOT_FOUND, ENOENT, "machine-local no longer holds lease %s", vm);
		goto done;
	}
	s = sandbox_destroy(st, rec, reason ? reason : "released", err);
done:
	if (lock >= 0) {
		lease_unlock(lock);
	}
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}

static relay_status m_verify_destroyed(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                       unsigned flags, char **check_name_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (check_name_out)
		*check_name_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown verify flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	json_object *rec = lu_get_object(doc, "record");
	relay_status s;
	char detail[512];
	if (rec == NULL || lu_get_string(rec, "vm") == NULL)
		s = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		           "verify needs a machine-local lease document");
	else if ((s = sandbox_verify_gone(st, rec, detail, sizeof detail)) != RELAY_OK)
		s = lu_err(st, err, RELAY_E_UNVERIFIED, 0, "%s: %s", lu_get_string(rec, "vm"), detail);
	if (s == RELAY_OK && check_name_out)
		*check_name_out = st->host->strdup("namespace");
	if (doc)
		json_object_put(doc);
	return s;
}

static relay_status m_images(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                             relay_error *err)
{
	(void)call;
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown images flags 0x%x", flags);
	return text_out(st, inventory_images(st), out, err);
}

static relay_status m_health(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                             relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (out)
		*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown health flags 0x%x", flags);
	if (access(st->leases_dir, W_OK) != 0)
		return lu_err(st, err, RELAY_E_UNAVAILABLE, errno, "the lease store %s is not writable",
		              st->leases_dir);
	if (out == NULL)
		return RELAY_OK;
	json_object *o = json_object_new_object();
	json_object_object_add(o, "ok", json_object_new_boolean(true));
	json_object_object_add(o, "service", json_object_new_string(LOCAL_PLUGIN_NAME));
	json_object_object_add(o, "rootless", json_object_new_boolean(st->rootless));
	json_object_object_add(o, "store", json_object_new_string(st->state_dir));
	return text_out(st, o, out, err);
}

static relay_status m_catalog(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	(void)call;
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown catalog flags 0x%x", flags);
	json_object *cat = NULL;
	relay_status s = inventory_catalog(st, &cat, err);
	if (s != RELAY_OK)
		return s;
	return text_out(st, cat, out, err);
}

static relay_status m_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                      unsigned flags, char **out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown find flags 0x%x", flags);
	if (purpose == NULL)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "find_by_purpose needs a purpose");
	json_object *all = lease_list(st);
	json_object *found = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(all); i++) {
		json_object *rec = json_object_array_get_idx(all, i);
		const char *p = lu_get_string(rec, "purpose");
		if (p && strcmp(p, purpose) == 0)
			json_object_array_add(found, lease_document(st, rec));
	}
	json_object_put(all);
	return text_out(st, found, out, err);
}

static relay_status m_binding(relay_plugin_state *state, unsigned flags, char **out, relay_error *err)
{
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown binding flags 0x%x", flags);
	json_object *o = json_object_new_object();
	json_object_object_add(o, "machine", json_object_new_string(LOCAL_PLUGIN_NAME));
	json_object_object_add(o, "endpoint", NULL);
	json_object_object_add(o, "store", json_object_new_string(st->state_dir));
	json_object_object_add(o, "environmentFingerprint", NULL);
	return text_out(st, o, out, err);
}

static relay_status m_doctor(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                             relay_error *err)
{
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown doctor flags 0x%x", flags);
	return text_out(st, inventory_doctor(st, call), out, err);
}

const relay_machine_ops local_machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    .acquire = m_acquire,
    .renew = m_renew,
    .inspect = m_inspect,
    .release = m_release,
    .verify_destroyed = m_verify_destroyed,
    .images = m_images,
    .health = m_health,
    .catalog = m_catalog,
    .find_by_purpose = m_find_by_purpose,
    .binding = m_binding,
    .doctor = m_doctor,
    .egress_listeners = local_egress_listeners,
    .console_ops = &local_console_ops,
};
