/*
 * The migration of the older relay's single-guest state (spec/lifecycle.md §8
 * step 2): <session>/lease.json ("enclosure") becomes the record of
 * guests/<task>-<n>/ in schemaVersion 1, and the old file is renamed aside.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lease/reconcile.h"
#include "lease/reconcile_internal.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

/* "...Z" or Unix seconds / milliseconds, as the older relay wrote times. */
static int64_t legacy_time_ms(json_object *value)
{
	if (value == NULL)
		return 0;
	if (json_object_is_type(value, json_type_string)) {
		int64_t ms = 0;
		return time_parse_iso(json_object_get_string(value), &ms) ? ms : 0;
	}
	if (json_object_is_type(value, json_type_int) || json_object_is_type(value, json_type_double)) {
		double v = json_object_get_double(value);
		return v < 1e11 ? (int64_t)(v * 1000.0) : (int64_t)v;
	}
	return 0;
}

static json_object *get_ref(json_object *obj, const char *key)
{
	json_object *value = NULL;
	if (!json_object_object_get_ex(obj, key, &value) || value == NULL)
		return NULL;
	return json_object_get(value);
}

/* The older relay's lease record (machine-service's) as a lease document
 * (relay/machine.h). */
static json_object *legacy_lease(json_object *old_lease, const char *image)
{
	if (!json_object_is_type(old_lease, json_type_object) || jsonx_get_str(old_lease, "vm") == NULL)
		return NULL;
	json_object *lease = json_object_new_object();
	jsonx_add_str(lease, "vm", jsonx_get_str(old_lease, "vm"));
	jsonx_add_str(lease, "purpose", jsonx_get_str(old_lease, "purpose"));
	const char *lease_image = jsonx_get_str(old_lease, "image");
	jsonx_add_str(lease, "image", lease_image ? lease_image : image);
	jsonx_add_str(lease, "lease_id", jsonx_get_str(old_lease, "lease_id"));
	const char *state = jsonx_get_str(old_lease, "state");
	jsonx_add_str(lease, "state", state ? state : "unknown");
	json_object *expires = NULL;
	json_object_object_get_ex(old_lease, "ttl_expires_at", &expires);
	int64_t expires_ms = legacy_time_ms(expires);
	if (expires_ms > 0)
		jsonx_add_int(lease, "expiresAtMs", expires_ms);
	else
		jsonx_add_null(lease, "expiresAtMs");
	jsonx_add(lease, "console", get_ref(old_lease, "console"));
	jsonx_add_null(lease, "display");
	jsonx_add_null(lease, "ssh");
	jsonx_add(lease, "record", json_object_get(old_lease));
	return lease;
}

/* The older relay's record ("enclosure") converted to an ownership record
 * of schemaVersion 1 named `name`. */
static json_object *legacy_convert(json_object *old, const char *name, int64_t now_ms)
{
	const char *task = jsonx_get_str(old, "task");
	const char *image = jsonx_get_str(old, "image");
	json_object *r = json_object_new_object();
	jsonx_add_int(r, "schemaVersion", 1);
	jsonx_add_str(r, "guest", name);
	jsonx_add_str(r, "task", task);
	jsonx_add_str(r, "image", image);
	jsonx_add_str(r, "purpose", jsonx_get_str(old, "purpose"));
	json_object *backend = jsonx_get_obj(old, "backend");
	if (backend) {
		json_object *binding = json_object_new_object();
		const char *machine = jsonx_get_str(backend, "machine");
		jsonx_add_str(binding, "machine", machine ? machine : "machine-service");
		jsonx_add_str(binding, "endpoint", jsonx_get_str(backend, "endpoint"));
		jsonx_add_str(binding, "store", jsonx_get_str(backend, "tartHome"));
		jsonx_add_str(binding, "environmentFingerprint",
		              jsonx_get_str(backend, "environmentFingerprint"));
		jsonx_add(r, "binding", binding);
	} else {
		jsonx_add_null(r, "binding");
	}
	jsonx_add_str(r, "project", jsonx_get_str(old, "project"));
	jsonx_add_str(r, "evidencePath", jsonx_get_str(old, "hostRoot"));
	jsonx_add_str(r, "guestRoot", jsonx_get_str(old, "guestRoot"));
	json_object *started = NULL;
	json_object_object_get_ex(old, "startedAt", &started);
	int64_t acquired = legacy_time_ms(started);
	double ttl_hours = 4;
	jsonx_get_double(old, "ttlHours", &ttl_hours);
	int64_t deadline = acquired + (int64_t)(ttl_hours * 3600000.0);
	char when[21];
	time_format_iso_seconds(acquired, when);
	jsonx_add_str(r, "acquiredAt", when);
	jsonx_add_int(r, "acquiredAtMs", acquired);
	time_format_iso_seconds(deadline, when);
	jsonx_add_str(r, "deadline", when);
	jsonx_add_int(r, "deadlineMs", deadline);
	jsonx_add_double(r, "ttlHours", ttl_hours);
	jsonx_add_str(r, "network", "nat");
	const char *env = jsonx_get_str(old, "env");
	jsonx_add_str(r, "env", env ? env : "none");
	json_object *console = jsonx_get_obj(old, "consoleObservation");
	jsonx_add_bool(r, "vnc", console != NULL);
	json_object *extractions = get_ref(old, "extractions");
	jsonx_add(r, "extractions", extractions ? extractions : json_object_new_array());
	bool full = false;
	jsonx_get_bool(old, "fullWorkspace", &full);
	jsonx_add_bool(r, "fullWorkspace", full);
	json_object *lease = legacy_lease(jsonx_get_obj(old, "lease"), image);
	bool released = false, in_flight = false, staged = false;
	jsonx_get_bool(old, "released", &released);
	jsonx_get_bool(old, "acquisitionInFlight", &in_flight);
	jsonx_get_bool(old, "staged", &staged);
	int64_t expires = 0;
	if (lease)
		jsonx_get_int(lease, "expiresAtMs", &expires);
	json_object *old_expires = NULL;
	if (json_object_object_get_ex(old, "expiresAt", &old_expires) && legacy_time_ms(old_expires) > 0)
		expires = legacy_time_ms(old_expires);
	jsonx_add(r, "lease", lease);
	jsonx_add(r, "registryRow", get_ref(old, "row"));
	const char *phase = released ? "closed" : lease ? (staged ? "staged" : "ready") : "acquiring";
	jsonx_add_str(r, "phase", phase);
	jsonx_add_bool(r, "acquisitionInFlight", lease == NULL && in_flight);
	jsonx_add_int(r, "waitedForCapacityMs", 0);
	json_object *renewal = json_object_new_object();
	jsonx_add_str(renewal, "state", lease && !released ? "paused" : "none");
	jsonx_add_int(renewal, "expiresAtMs", expires);
	jsonx_add_int(renewal, "lastRenewedAtMs", 0);
	jsonx_add(r, "renewal", renewal);
	jsonx_add_str(r, "guestState", jsonx_get_str(old, "guestState"));
	const char *last_error = jsonx_get_str(old, "lastError");
	jsonx_add_str(r, "lastError", last_error ? last_error : jsonx_get_str(old, "failed"));
	jsonx_add_bool(r, "staged", staged);
	jsonx_add_null(r, "platform");
	jsonx_add_str(r, "nodePath", jsonx_get_str(old, "node"));
	jsonx_add_str(r, "cuaDriver", jsonx_get_str(old, "cuaDriver"));
	jsonx_add_null(r, "snapshots");
	jsonx_add_str(r, "recordingSessionId", jsonx_get_str(old, "sessionId"));
	int64_t run_seq = 0;
	jsonx_get_int(old, "runSeq", &run_seq);
	jsonx_add_int(r, "runSeq", run_seq);
	jsonx_add(r, "pendingReset", get_ref(old, "pendingReset"));
	json_object *previous = get_ref(old, "previousEvidence");
	jsonx_add(r, "previousEvidence", previous ? previous : json_object_new_array());
	jsonx_add(r, "console", console ? json_object_get(console) : NULL);
	jsonx_add(r, "consoleAttempt", get_ref(old, "consoleAttempt"));
	json_object *ids = get_ref(old, "consoleAttemptIds");
	jsonx_add(r, "consoleAttemptIds", ids ? ids : json_object_new_array());
	jsonx_add_bool(r, "delivered",
	               jsonx_has(old, "delivered") && jsonx_get_obj(old, "delivered") != NULL);
	jsonx_add_bool(r, "released", released);
	if (released) {
		json_object *closed = json_object_new_object();
		time_format_iso_seconds(now_ms, when);
		jsonx_add_str(closed, "at", when);
		jsonx_add_str(closed, "reason", "released");
		jsonx_add_str(closed, "evidencePath", jsonx_get_str(old, "hostRoot"));
		jsonx_add(r, "closed", closed);
	} else {
		jsonx_add_null(r, "closed");
	}
	return r;
}

void lease_reconcile_migrate_legacy(session_manager *m)
{
	const char *session_dir = m->settings->session_dir;
	char *old_path = fs_path_join(session_dir, "lease.json");
	char *old_lock_path = fs_path_join(session_dir, "owner.lock");
	json_object *old = NULL, *converted = NULL;
	char *guest_dir = NULL, *record_path = NULL, *lock_path = NULL;
	int old_lock = -1;
	relay_error err;
	if (old_path == NULL || old_lock_path == NULL ||
	    fs_read_json(old_path, RECONCILE_RECORD_MAX_BYTES, &old, &err) != RELAY_OK || old == NULL)
		goto cleanup; /* absent, empty (null) or unreadable: nothing to migrate */
	if (!json_object_is_type(old, json_type_object) || json_object_object_length(old) == 0)
		goto cleanup;
	const char *task = jsonx_get_str(old, "task");
	if (task == NULL || strlen(task) > 36 || !lease_reconcile_valid_guest_name(task) ||
	    jsonx_get_str(old, "purpose") == NULL) {
		log_error("the single-guest record %s has no usable task or purpose; it is left untouched",
		          old_path);
		goto cleanup;
	}
	long holder = 0;
	old_lock = lock_file_take(old_lock_path, &holder);
	if (old_lock < 0) {
		log_error(
		    "the single-guest record %s is owned by another process (pid %ld); it is left untouched",
		    old_path, holder);
		goto cleanup;
	}
	/* <task>-1, or the next free number. */
	char name[64];
	for (int n = 1;; n++) {
		snprintf(name, sizeof name, "%s-%d", task, n);
		free(guest_dir);
		char rel[96];
		snprintf(rel, sizeof rel, "guests/%s", name);
		guest_dir = fs_path_join(session_dir, rel);
		session_lock(m);
		bool known = session_find_guest(m, name) != NULL;
		session_unlock(m);
		if (guest_dir == NULL || (!known && !fs_exists_nofollow(guest_dir)))
			break;
	}
	if (guest_dir == NULL || fs_mkdir_p(guest_dir, 0700, &err) != RELAY_OK) {
		log_error("cannot create the folder of the migrated guest %s", name);
		goto cleanup;
	}
	lock_path = fs_path_join(guest_dir, "owner.lock");
	record_path = fs_path_join(guest_dir, "lease.json");
	int guest_lock = lock_path ? lock_file_take(lock_path, NULL) : -2;
	if (guest_lock < 0 || record_path == NULL) {
		log_error("cannot take the owner lock of the migrated guest %s", name);
		if (guest_lock >= 0)
			close(guest_lock);
		goto cleanup;
	}
	converted = legacy_convert(old, name, clock_now_ms());
	relay_status written = fs_write_json_durable(record_path, converted, &err);
	/* The reconcile job takes this lock again on its own descriptor. */
	close(guest_lock);
	if (written != RELAY_OK) {
		log_error("cannot write the migrated record %s: %s", record_path, err.message);
		goto cleanup;
	}
	char stamp[22];
	time_format_stamp(clock_now_ms(), stamp);
	strbuf migrated = STRBUF_INIT;
	strbuf_printf(&migrated, "%s.migrated-%s", old_path, stamp);
	if (rename(old_path, strbuf_str(&migrated)) != 0)
		log_error("cannot rename %s to %s: %s", old_path, strbuf_str(&migrated), strerror(errno));
	strbuf_free(&migrated);
	session_lock(m);
	lease_reconcile_counter_past(m, task, name);
	session_save(m);
	session_unlock(m);
	log_info("migrated the single-guest state of task %s into guest %s", task, name);
cleanup:
	if (old_lock >= 0)
		close(old_lock);
	json_object_put(old);
	json_object_put(converted);
	free(old_path);
	free(old_lock_path);
	free(guest_dir);
	free(record_path);
	free(lock_path);
}
