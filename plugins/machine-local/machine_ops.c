/*
 * machine_ops.c — machine-local's backend of the kit's machine ops front
 * (relay_kit/machine.h: the front checks flags, parses the document and
 * hands the answer back as text): acquire, renew, inspect, release and
 * verify_destroyed on the lease store, health, find_by_purpose and binding;
 * images, catalog and doctor are inventory.c's, the typed console
 * (console_ops) console.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "local.h"
#include "relay_kit/lease_doc.h"

static relay_status b_acquire(relay_plugin_state *state, json_object *spec, relay_call *call,
                              json_object **doc_out, relay_error *err)
{
	local_state *st = state;
	json_object *record = NULL;
	relay_status s = sandbox_acquire(st, spec, call, &record, err);
	if (s != RELAY_OK)
		return s;
	*doc_out = lease_document(st, record);
	json_object_put(record);
	return *doc_out ? RELAY_OK : lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

static const char *doc_vm(json_object *doc)
{
	return lu_get_string(doc, "vm");
}

/* The record of lease vm under its lock (*lock -1 when it cannot be taken),
 * or NULL (*e the reason, when e is not NULL). */
static json_object *lock_record(local_state *st, const char *vm, int *lock, int *e)
{
	*lock = lease_lock(st, vm, true);
	return *lock >= 0 ? lease_read(st, vm, e) : NULL;
}

/* The end of an operation on a locked record: the lock and the record let go; s. */
static relay_status let_go(int lock, json_object *rec, relay_status s)
{
	if (lock >= 0)
		lease_unlock(lock);
	json_object_put(rec);
	return s;
}

static relay_status b_renew(relay_plugin_state *state, json_object *doc, uint64_t ttl_ms, relay_call *call,
                            json_object **doc_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	const char *vm = doc_vm(doc);
	if (vm == NULL || ttl_ms == 0)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "renew needs a lease document and a positive ttl");
	int lock, e = 0;
	json_object *rec = lock_record(st, vm, &lock, &e);
	relay_status s = RELAY_OK;
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
	if (doc_out)
		*doc_out = lease_document(st, rec);
done:
	return let_go(lock, rec, s);
}

static relay_status b_inspect(relay_plugin_state *state, json_object *doc, relay_call *call,
                              json_object **doc_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	const char *vm = doc_vm(doc);
	int e = 0;
	json_object *rec = vm ? lease_read(st, vm, &e) : NULL;
	if (vm == NULL)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "inspect needs a lease document");
	if (rec == NULL)
		return lu_err(st, err, RELAY_E_NOT_FOUND, e, "machine-local no longer holds lease %s", vm);
	*doc_out = lease_document(st, rec);
	json_object_put(rec);
	return RELAY_OK;
}

static relay_status b_release(relay_plugin_state *state, json_object *doc, const char *reason,
                              relay_call *call, relay_error *err)
{
	(void)call;
	local_state *st = state;
	const char *vm = doc_vm(doc);
	if (vm == NULL || !lu_valid_token(vm, 200))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "release needs a lease document");
	int lock;
	json_object *rec = lock_record(st, vm, &lock, NULL);
	relay_status s = RELAY_OK;
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
	return let_go(lock, rec, s);
}

static relay_status b_verify_destroyed(relay_plugin_state *state, json_object *doc, relay_call *call,
                                       relay_error *err)
{
	(void)call;
	local_state *st = state;
	json_object *rec = lu_get_object(doc, "record");
	char detail[512];
	if (rec == NULL || lu_get_string(rec, "vm") == NULL)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "verify needs a machine-local lease document");
	if (sandbox_verify_gone(st, rec, detail, sizeof detail) != RELAY_OK)
		return lu_err(st, err, RELAY_E_UNVERIFIED, 0, "%s: %s", lu_get_string(rec, "vm"), detail);
	return RELAY_OK;
}

static relay_status b_health(relay_plugin_state *state, relay_call *call, json_object *answer,
                             relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (access(st->kit.leases_dir, W_OK) != 0)
		return lu_err(st, err, RELAY_E_UNAVAILABLE, errno, "the lease store %s is not writable",
		              st->kit.leases_dir);
	if (answer) {
		json_object_object_add(answer, "rootless", json_object_new_boolean(st->rootless));
		json_object_object_add(answer, "store", json_object_new_string(st->kit.state_dir));
	}
	return RELAY_OK;
}

static relay_status b_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                      json_object **out, relay_error *err)
{
	(void)call;
	(void)err;
	local_state *st = state;
	json_object *all = lease_list(st);
	json_object *found = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(all); i++) {
		json_object *rec = json_object_array_get_idx(all, i);
		const char *p = lu_get_string(rec, "purpose");
		if (p && strcmp(p, purpose) == 0)
			json_object_array_add(found, lease_document(st, rec));
	}
	json_object_put(all);
	*out = found;
	return RELAY_OK;
}

const rk_machine_backend local_machine_backend = {
    .name = LOCAL_PLUGIN_NAME,
    .destroyed_check = "namespace",
    .acquire = b_acquire,
    .renew = b_renew,
    .inspect = b_inspect,
    .release = b_release,
    .verify_destroyed = b_verify_destroyed,
    .images = inventory_images,
    .health = b_health,
    .catalog = inventory_catalog,
    .find_by_purpose = b_find_by_purpose,
    .doctor = inventory_doctor,
};

const relay_machine_ops local_machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    RK_MACHINE_FRONT,
    .egress_listeners = local_egress_listeners,
    .console_ops = &local_console_ops,
};
