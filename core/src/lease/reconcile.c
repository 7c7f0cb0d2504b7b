/*
 * Restart and reconciliation (lifecycle.md §8): the older single-guest
 * state is migrated, every guest under guests/ is listed, and each one that
 * is not closed is taken back by a job queued first on its own queue.
 * Nothing is replayed and nothing is acquired again.
 */
#include "lease/reconcile.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delivery/downloads.h"
#include "lease/lifecycle.h"
#include "lease/renewal.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define RECORD_MAX_BYTES       (16u << 20)
#define DEFAULT_SERVICE_ORIGIN "http://localhost:6240"

static bool valid_guest_name(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > 48)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && i > 0);
		if (!ok)
			return false;
	}
	return true;
}

static bool valid_task(const char *task)
{
	return task && strlen(task) <= 36 && valid_guest_name(task);
}

/* ---- counters ------------------------------------------------------------------------ */

/* Keeps a restored name's number from ever being handed out again. Under
 * lock. Returns true when the counter moved. */
static bool counter_past(manager *m, const char *task, const char *name)
{
	if (task == NULL || name == NULL)
		return false;
	size_t tl = strlen(task);
	if (strncmp(name, task, tl) != 0 || name[tl] != '-')
		return false;
	char *end = NULL;
	long long n = strtoll(name + tl + 1, &end, 10);
	if (end == name + tl + 1 || *end != '\0' || n < 1)
		return false;
	int64_t next = 1;
	jsonx_get_int(m->counters, task, &next);
	if (next > n)
		return false;
	jsonx_add_int(m->counters, task, n + 1);
	return true;
}

/* ---- the older single-guest state ------------------------------------------------------- */

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

void reconcile_migrate_legacy(manager *m)
{
	const char *session_dir = m->settings->session_dir;
	char *old_path = fs_path_join(session_dir, "lease.json");
	char *old_lock_path = fs_path_join(session_dir, "owner.lock");
	json_object *old = NULL, *converted = NULL;
	char *guest_dir = NULL, *record_path = NULL, *lock_path = NULL;
	int old_lock = -1;
	relay_error err;
	if (old_path == NULL || old_lock_path == NULL ||
	    fs_read_json(old_path, RECORD_MAX_BYTES, &old, &err) != RELAY_OK || old == NULL)
		goto cleanup; /* absent, empty (null) or unreadable: nothing to migrate */
	if (!json_object_is_type(old, json_type_object) || json_object_object_length(old) == 0)
		goto cleanup;
	const char *task = jsonx_get_str(old, "task");
	if (!valid_task(task) || jsonx_get_str(old, "purpose") == NULL) {
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
		manager_lock(m);
		bool known = manager_find_guest(m, name) != NULL;
		manager_unlock(m);
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
	manager_lock(m);
	counter_past(m, task, name);
	manager_save_session(m);
	manager_unlock(m);
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

/* ---- scanning --------------------------------------------------------------------------- */

static void reconcile_work(manager *m, guest *g, relay_call *call, void *ctx);

/* A guest whose record cannot be used, listed so that it counts and is
 * refused by name. */
static guest *unreadable_guest(const char *name, const char *path, const char *why)
{
	guest *g = guest_new();
	if (g == NULL)
		return NULL;
	g->name = strdup(name);
	g->record_readonly = true;
	strbuf sb = STRBUF_INIT;
	strbuf_printf(
	    &sb,
	    "the ownership record %s cannot be used by this relay (%s); it is left untouched; an operator "
	    "must inspect it, or the relay that wrote it must finish or release the guest",
	    path, why);
	g->last_error = strbuf_detach(&sb, NULL);
	g->phase = PHASE_RECONCILING;
	g->restored_phase = PHASE_UNAVAILABLE;
	return g;
}

static int by_acquisition(const void *a, const void *b)
{
	const guest *ga = *(guest *const *)a, *gb = *(guest *const *)b;
	if (ga->acquired_at_ms != gb->acquired_at_ms)
		return ga->acquired_at_ms < gb->acquired_at_ms ? -1 : 1;
	return strcmp(ga->name, gb->name);
}

void reconcile_scan(manager *m)
{
	char *guests_dir = fs_path_join(m->settings->session_dir, "guests");
	DIR *dir = guests_dir ? opendir(guests_dir) : NULL;
	guest **found = NULL;
	size_t count = 0, capacity = 0;
	if (dir == NULL)
		goto cleanup;
	struct dirent *entry;
	while ((entry = readdir(dir)) != NULL) {
		const char *name = entry->d_name;
		if (!valid_guest_name(name))
			continue;
		manager_lock(m);
		bool known = manager_find_guest(m, name) != NULL;
		manager_unlock(m);
		if (known)
			continue;
		char *gdir = fs_path_join(guests_dir, name);
		char *path = gdir ? fs_path_join(gdir, "lease.json") : NULL;
		if (path == NULL || !fs_is_dir(gdir)) {
			free(gdir);
			free(path);
			continue;
		}
		json_object *record = NULL;
		relay_error err;
		memset(&err, 0, sizeof err);
		char why[RELAY_ERROR_MESSAGE_BYTES + 512] = "";
		guest *g = NULL;
		relay_status st = fs_read_json(path, RECORD_MAX_BYTES, &record, &err);
		if (st == RELAY_E_NOT_FOUND) {
			/* A folder whose record was never written: the name was
			 * reserved and nothing else happened. */
			free(gdir);
			free(path);
			continue;
		}
		if (st != RELAY_OK) {
			g = unreadable_guest(name, path, err.message);
		} else {
			g = guest_from_record(record, why, sizeof why);
			if (g && strcmp(g->name, name) != 0) {
				snprintf(why, sizeof why,
				         "it names guest %.64s but lies in the folder of %.64s", g->name,
				         name);
				guest_free(g);
				g = NULL;
			}
			if (g == NULL)
				g = unreadable_guest(name, path, why);
		}
		json_object_put(record);
		free(path);
		if (g == NULL) {
			free(gdir);
			continue;
		}
		g->dir = gdir;
		if (g->phase != PHASE_CLOSED && !g->record_readonly) {
			g->restored_phase = g->phase;
			g->restored_renewal = g->renewal;
			g->renewal = RENEWAL_NONE;
			g->phase = PHASE_RECONCILING;
		}
		if (count == capacity) {
			size_t grown = capacity ? capacity * 2 : 16;
			guest **more = realloc(found, grown * sizeof *more);
			if (more == NULL) {
				guest_free(g);
				break;
			}
			found = more;
			capacity = grown;
		}
		found[count++] = g;
	}
	if (count > 1)
		qsort(found, count, sizeof *found, by_acquisition);
	manager_lock(m);
	bool counters_moved = false;
	for (size_t i = 0; i < count; i++) {
		guest *g = found[i];
		g->acquisition_order = m->next_order++;
		g->next = NULL;
		guest **tail = &m->guests;
		while (*tail)
			tail = &(*tail)->next;
		*tail = g;
		counters_moved |= counter_past(m, g->task, g->name);
	}
	if (counters_moved && m->session_lock_fd >= 0)
		manager_save_session(m);
	pthread_cond_broadcast(&m->changed);
	manager_unlock(m);
	for (size_t i = 0; i < count; i++)
		if (found[i]->phase == PHASE_RECONCILING)
			manager_queue_internal(m, found[i], reconcile_work, NULL, NULL, 0);
cleanup:
	if (dir)
		closedir(dir);
	free(found);
	free(guests_dir);
}

/* ---- taking one guest back ---------------------------------------------------------------- */

/* The guest cannot be taken back: it stays listed, counts toward the limit,
 * and every call on it is refused with the reason. Its record is never
 * rewritten by this process. */
static void make_unavailable(manager *m, guest *g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void make_unavailable(manager *m, guest *g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	manager_lock(m);
	free(g->last_error);
	g->last_error = strbuf_detach(&sb, NULL);
	g->phase = PHASE_UNAVAILABLE;
	g->renewal = RENEWAL_NONE;
	g->record_readonly = true;
	if (g->owner_lock_fd >= 0) {
		close(g->owner_lock_fd);
		g->owner_lock_fd = -1;
	}
	pthread_cond_broadcast(&m->changed);
	manager_unlock(m);
	log_error("guest %s is unavailable: %s", g->name, g->last_error);
}

/* A record written without a binding is adopted only by the default
 * deployment: a machine slot working through the machine service
 * (backends_uses_service) at http://localhost:6240, Tart home ~/.tart, no
 * environment. */
static bool default_deployment(manager *m, const json_object *current)
{
	const char *home = getenv("HOME");
	if (home == NULL)
		return false;
	char *tart = fs_path_join(home, ".tart");
	const char *endpoint = jsonx_get_str(current, "endpoint");
	const char *store = jsonx_get_str(current, "store");
	bool ok = tart && backends_uses_service(m->backends, SLOT_MACHINE) && endpoint &&
	          strcmp(endpoint, DEFAULT_SERVICE_ORIGIN) == 0 && store && strcmp(store, tart) == 0 &&
	          jsonx_get_str(current, "environmentFingerprint") == NULL;
	free(tart);
	return ok;
}

static const char *console_id(const json_object *lease)
{
	return jsonx_get_str(jsonx_get_obj(lease, "console"), "console_id");
}

/* Finds the lease of an acquisition the earlier process had in flight.
 * Returns true when exactly one was found and adopted. */
static bool adopt_by_purpose(manager *m, guest *g, loaded_plugin *machine, relay_call *call, char *why,
                             size_t why_len)
{
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (machine->machine.find_by_purpose == NULL) {
		snprintf(why, why_len, "the machine plugin cannot look leases up by purpose");
		return false;
	}
	relay_status st = machine->machine.find_by_purpose(machine->state, g->purpose, call, 0, &text, &err);
	json_object *found = st == RELAY_OK && text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	size_t n = json_object_is_type(found, json_type_array) ? json_object_array_length(found) : 0;
	bool adopted = false;
	if (st != RELAY_OK)
		snprintf(why, why_len, "looking the purpose up failed: %s",
		         err.message[0] ? err.message : relay_status_str(st));
	else if (n != 1)
		snprintf(why, why_len, "%zu leases carry the purpose", n);
	else
		adopted = true;
	if (adopted) {
		manager_lock(m);
		json_object_put(g->lease);
		g->lease = json_object_get(json_object_array_get_idx(found, 0));
		g->acquisition_in_flight = false;
		int64_t expires = 0;
		if (jsonx_get_int(g->lease, "expiresAtMs", &expires))
			g->expires_at_ms = expires;
		guest_save(g);
		manager_unlock(m);
	}
	json_object_put(found);
	return adopted;
}

static void reconcile_work(manager *m, guest *g, relay_call *call, void *ctx)
{
	(void)ctx;
	manager_wait_startup(m);
	char why[RELAY_ERROR_MESSAGE_BYTES + 512];
	manager_lock(m);
	bool session_held = m->session_lock_fd >= 0;
	long holder = m->session_lock_holder_pid;
	bool readonly = g->record_readonly;
	manager_unlock(m);
	if (!session_held) {
		make_unavailable(m, g, "another mcp-relay process, pid %ld, holds session %s", holder,
		                 m->settings->session_id);
		return;
	}
	if (readonly) {
		make_unavailable(m, g, "%s",
		                 g->last_error ? g->last_error : "its ownership record cannot be used");
		return;
	}

	/* 1. The owner lock. */
	char *lock_path = fs_path_join(g->dir, "owner.lock");
	long owner = 0;
	int fd = lock_path ? lock_file_take(lock_path, &owner) : -2;
	free(lock_path);
	if (fd == -1) {
		make_unavailable(m, g,
		                 "owned by another process (pid %ld); it keeps its record until that process "
		                 "exits",
		                 owner);
		return;
	}
	if (fd < 0) {
		make_unavailable(m, g, "its owner lock in %s cannot be opened", g->dir);
		return;
	}

	/* 2. The record, read again now that it is ours. */
	char *path = fs_path_join(g->dir, "lease.json");
	json_object *record = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = path ? fs_read_json(path, RECORD_MAX_BYTES, &record, &err) : RELAY_E_NO_MEMORY;
	manager_lock(m);
	int reloaded = st == RELAY_OK ? guest_reload(g, record, why, sizeof why) : -1;
	if (st != RELAY_OK)
		snprintf(why, sizeof why, "%s", err.message);
	if (reloaded == 0) {
		g->owner_lock_fd = fd;
		if (g->phase == PHASE_CLOSED) {
			/* Closed meanwhile by the process that held it. */
			close(g->owner_lock_fd);
			g->owner_lock_fd = -1;
		} else {
			g->restored_phase = g->phase;
			g->restored_renewal = g->renewal;
			g->renewal = RENEWAL_NONE;
			g->phase = PHASE_RECONCILING;
		}
	}
	guest_phase now_phase = g->phase;
	manager_unlock(m);
	json_object_put(record);
	if (reloaded != 0) {
		close(fd);
		make_unavailable(
		    m, g,
		    "the ownership record %s cannot be used by this relay (%s); it is left untouched; an "
		    "operator must inspect it, or the relay that wrote it must finish or release the guest",
		    path ? path : g->dir, why);
		free(path);
		return;
	}
	free(path);
	if (now_phase == PHASE_CLOSED)
		return;

	/* 3. The binding, before any backend operation. */
	json_object *current = lifecycle_binding_json(m);
	manager_lock(m);
	bool bound =
	    g->binding ? lifecycle_binding_equal(g->binding, current) : default_deployment(m, current);
	if (bound && g->binding == NULL) {
		g->binding = json_object_get(current);
		guest_save(g);
	}
	manager_unlock(m);
	json_object_put(current);
	if (!bound) {
		make_unavailable(m, g,
		                 "environment-mismatch: this guest belongs to a different or unknown machine "
		                 "environment; select its original environment before operating on it");
		return;
	}
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	manager_lock(m);
	guest_phase restored = g->restored_phase;
	renewal_state restored_renewal = g->restored_renewal;
	bool in_flight = g->acquisition_in_flight && g->lease == NULL;
	bool never_sent = !g->acquisition_in_flight && g->lease == NULL;
	manager_unlock(m);
	if (machine == NULL) {
		manager_lock(m);
		g->phase = restored == PHASE_RECONCILING ? PHASE_READY : restored;
		g->renewal = restored_renewal;
		free(g->last_error);
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "the machine backend is not available at restart: %s",
		              m->backends->load_errors[SLOT_MACHINE] ? m->backends->load_errors[SLOT_MACHINE]
		                                                     : "no machine plugin is configured");
		g->last_error = strbuf_detach(&sb, NULL);
		guest_save(g);
		manager_unlock(m);
		return;
	}

	/* 4. An acquisition in flight when the earlier process ended. */
	if (never_sent) {
		/* The lease request was never sent: nothing can exist. */
		lifecycle_registry_remove(m, g);
		guest_close(m, g, "not-acquired");
		log_info("guest %s was never acquired (the earlier process ended before its lease request); "
		         "closed",
		         g->name);
		return;
	}
	if (in_flight && !adopt_by_purpose(m, g, machine, call, why, sizeof why)) {
		manager_lock(m);
		g->phase = PHASE_ACQUISITION_UNCERTAIN;
		free(g->last_error);
		strbuf sb = STRBUF_INIT;
		strbuf_printf(
		    &sb,
		    "acquisition outcome unknown for purpose %s (the earlier process ended during the "
		    "acquisition; %s); ownership is kept as %s; reconcile with relay_release; never acquire "
		    "again blindly",
		    g->purpose, why, g->name);
		g->last_error = strbuf_detach(&sb, NULL);
		guest_save(g);
		pthread_cond_broadcast(&m->changed);
		manager_unlock(m);
		log_info("guest %s: %s", g->name, g->last_error);
		return;
	}

	/* 5. Look the lease up. */
	char *lease = guest_lease_text(m, g);
	char *found_text = NULL;
	memset(&err, 0, sizeof err);
	st = machine->machine.inspect(machine->state, lease, call, 0, &found_text, &err);
	json_object *found = st == RELAY_OK && found_text ? jsonx_parse_str(found_text, NULL, 0) : NULL;
	free(found_text);
	if (st == RELAY_OK && found) {
		manager_lock(m);
		const char *record_id = jsonx_get_str(g->lease, "lease_id");
		const char *record_console = console_id(g->lease);
		const char *found_purpose = jsonx_get_str(found, "purpose");
		bool same =
		    found_purpose && strcmp(found_purpose, g->purpose) == 0 &&
		    (record_id == NULL || (jsonx_get_str(found, "lease_id") &&
		                           strcmp(record_id, jsonx_get_str(found, "lease_id")) == 0)) &&
		    (record_console == NULL ||
		     (console_id(found) && strcmp(record_console, console_id(found)) == 0));
		if (same) {
			json_object_put(g->lease);
			g->lease = json_object_get(found);
			int64_t expires = 0;
			if (jsonx_get_int(found, "expiresAtMs", &expires) && expires > 0)
				g->expires_at_ms = expires;
			const char *state = jsonx_get_str(found, "state");
			free(g->guest_state);
			g->guest_state = strdup(state ? state : "unknown");
			if (state && strcmp(state, "failed") == 0) {
				free(g->last_error);
				g->last_error = strdup("the backend reports the guest failed");
			}
		}
		manager_unlock(m);
		json_object_put(found);
		if (!same) {
			free(lease);
			make_unavailable(
			    m, g,
			    "lease ownership identity mismatch: the backend's lease for %s names "
			    "another purpose, lease or console",
			    g->purpose);
			return;
		}
	} else if (st == RELAY_E_NOT_FOUND) {
		/* 6. Gone at the backend: closed only when destruction is
		 * verified independently. */
		json_object_put(found);
		char *check = NULL;
		relay_error verr;
		memset(&verr, 0, sizeof verr);
		relay_status verified =
		    machine->machine.verify_destroyed(machine->state, lease, call, 0, &check, &verr);
		free(check);
		if (verified == RELAY_OK) {
			free(lease);
			manager_lock(m);
			bool finished = restored == PHASE_FINISHING && g->delivered;
			manager_unlock(m);
			if (finished) {
				/* A finish that delivered and destroyed, killed before its
				 * bookkeeping: it finished. */
				lifecycle_registry_remove(m, g);
				lifecycle_write_record(m, g, "finished", false);
				guest_close(m, g, "finished");
				log_info("guest %s had finished before the restart; closed", g->name);
			} else {
				lifecycle_close_absent(m, g, "backend lease absent and destruction verified");
			}
			return;
		}
		guest_set_last_error(
		    m, g,
		    "the backend no longer knows the lease of %s, but its destruction could not be "
		    "verified (%s); ownership is kept: call relay_release",
		    g->name, verr.message[0] ? verr.message : relay_status_str(verified));
	} else {
		json_object_put(found);
		manager_lock(m);
		free(g->guest_state);
		g->guest_state = strdup("unknown");
		free(g->last_error);
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "the lease lookup at restart failed: %s; renewal goes on and tries again",
		              err.message[0] ? err.message : relay_status_str(st));
		g->last_error = strbuf_detach(&sb, NULL);
		manager_unlock(m);
	}
	free(lease);

	/* The phase it had; an acquisition found by its purpose is ready. */
	manager_lock(m);
	guest_phase phase = restored;
	if (phase == PHASE_ACQUIRING || phase == PHASE_WAITING_FOR_CAPACITY ||
	    phase == PHASE_ACQUISITION_UNCERTAIN || phase == PHASE_RECONCILING ||
	    phase == PHASE_UNAVAILABLE || phase == PHASE_CLOSED)
		phase = PHASE_READY;
	g->phase = phase;
	g->renewal = restored_renewal;
	bool reattach = g->staged && !g->delivered;
	guest_save(g);
	manager_unlock(m);

	/* 7. The recording, reattached without replaying anything. */
	if (reattach) {
		char reason[512] = "";
		if (recording_reattach(m, g, reason, sizeof reason) != 0)
			guest_set_last_error(
			    m, g,
			    "recording session restoration failed; diagnostic repair remains "
			    "available: %s",
			    reason);
	}

	/* 8. Renewal resumes at once, in the usual window. */
	bool resume = phase != PHASE_RELEASING &&
	              (in_flight || restored_renewal == RENEWAL_RENEWING ||
	               restored_renewal == RENEWAL_FAILING || restored_renewal == RENEWAL_PAUSED);
	if (resume) {
		renewal_start(m, g, true);
	} else {
		manager_lock(m);
		guest_save(g);
		manager_unlock(m);
	}
	manager_lock(m);
	pthread_cond_broadcast(&m->changed);
	manager_unlock(m);
	log_info("took back guest %s (%s, renewal %s)", g->name, guest_phase_name(phase),
	         resume ? "resumed" : renewal_state_name(restored_renewal));
}
