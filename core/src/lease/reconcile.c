/*
 * Restart and reconciliation (spec/lifecycle.md §8): every guest under guests/
 * is listed, and each one that is not closed is taken back by a job queued
 * first on its own queue, one step per function. Nothing is replayed and
 * nothing is acquired again. The older single-guest state is migrated
 * first (reconcile_legacy.c).
 */
#include "lease/reconcile.h"
#include "lease/reconcile_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delivery/downloads.h"
#include "lease/egress.h"
#include "lease/lifecycle.h"
#include "lease/renewal.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define DEFAULT_SERVICE_ORIGIN "http://localhost:6240"

bool lease_reconcile_valid_guest_name(const char *name)
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

/* ---- counters ------------------------------------------------------------------------ */

bool lease_reconcile_counter_past(session_manager *m, const char *task, const char *name)
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

/* ---- scanning --------------------------------------------------------------------------- */

static void reconcile_work(session_manager *m, guest *g, relay_call *call, void *ctx);

/* A guest whose record cannot be used, listed so that it counts and is
 * refused by name. */
static guest *unreadable_guest(session_manager *m, const char *name, const char *path, const char *why)
{
	guest *g = guest_new(m->hooks->rooms);
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
	g->lease->restored_phase = PHASE_UNAVAILABLE;
	return g;
}

static int by_acquisition(const void *a, const void *b)
{
	const guest *ga = *(guest *const *)a, *gb = *(guest *const *)b;
	if (ga->acquired_at_ms != gb->acquired_at_ms)
		return ga->acquired_at_ms < gb->acquired_at_ms ? -1 : 1;
	return strcmp(ga->name, gb->name);
}

void lease_reconcile_scan(session_manager *m)
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
		if (!lease_reconcile_valid_guest_name(name))
			continue;
		session_lock(m);
		bool known = session_find_guest(m, name) != NULL;
		session_unlock(m);
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
		relay_status st = fs_read_json(path, RECONCILE_RECORD_MAX_BYTES, &record, &err);
		if (st == RELAY_E_NOT_FOUND) {
			/* A folder whose record was never written: the name was
			 * reserved and nothing else happened. */
			free(gdir);
			free(path);
			continue;
		}
		if (st != RELAY_OK) {
			g = unreadable_guest(m, name, path, err.message);
		} else {
			g = guest_from_record(m->hooks->rooms, record, why, sizeof why);
			if (g && strcmp(g->name, name) != 0) {
				snprintf(why, sizeof why,
				         "it names guest %.64s but lies in the folder of %.64s", g->name,
				         name);
				guest_free(g);
				g = NULL;
			}
			if (g == NULL)
				g = unreadable_guest(m, name, path, why);
		}
		json_object_put(record);
		free(path);
		if (g == NULL) {
			free(gdir);
			continue;
		}
		g->dir = gdir;
		if (g->phase != PHASE_CLOSED && !g->record_readonly) {
			g->lease->restored_phase = g->phase;
			g->lease->restored_renewal = g->lease->renewal;
			g->lease->renewal = RENEWAL_NONE;
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
	session_lock(m);
	bool counters_moved = false;
	for (size_t i = 0; i < count; i++) {
		guest *g = found[i];
		g->next = NULL;
		guest **tail = &m->guests;
		while (*tail)
			tail = &(*tail)->next;
		*tail = g;
		counters_moved |= lease_reconcile_counter_past(m, g->task, g->name);
	}
	if (counters_moved && m->session_lock_fd >= 0)
		session_save(m);
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	for (size_t i = 0; i < count; i++)
		if (found[i]->phase == PHASE_RECONCILING)
			session_queue_internal(m, found[i], reconcile_work, NULL, NULL, 0);
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
static void make_unavailable(session_manager *m, guest *g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void make_unavailable(session_manager *m, guest *g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	session_lock(m);
	free(g->last_error);
	g->last_error = strbuf_detach(&sb, NULL);
	g->phase = PHASE_UNAVAILABLE;
	g->lease->renewal = RENEWAL_NONE;
	g->record_readonly = true;
	if (g->owner_lock_fd >= 0) {
		close(g->owner_lock_fd);
		g->owner_lock_fd = -1;
	}
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	log_error("guest %s is unavailable: %s", g->name, g->last_error);
}

/* A record written without a binding is adopted only by the default
 * deployment: a machine slot working through the machine service
 * (backends_uses_service) at http://localhost:6240, Tart home ~/.tart, no
 * environment. */
static bool default_deployment(session_manager *m, const json_object *current)
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
static bool adopt_by_purpose(session_manager *m, guest *g, loaded_plugin *machine, relay_call *call,
                             char *why, size_t why_len)
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
		session_lock(m);
		json_object_put(g->lease_document);
		g->lease_document = json_object_get(json_object_array_get_idx(found, 0));
		g->lease->acquisition_in_flight = false;
		int64_t expires = 0;
		if (jsonx_get_int(g->lease_document, "expiresAtMs", &expires))
			g->lease->expires_at_ms = expires;
		guest_save(g);
		session_unlock(m);
	}
	json_object_put(found);
	return adopted;
}

/* Steps 0-2: the session lock, the guest's owner lock, and its record read
 * again now that it is ours. True when the guest is ours and open (phase
 * reconciling, restored_* set); otherwise it was made unavailable or found
 * closed. */
static bool take_ownership(session_manager *m, guest *g)
{
	char why[RELAY_ERROR_MESSAGE_BYTES + 512];
	session_lock(m);
	bool session_held = m->session_lock_fd >= 0;
	long holder = m->session_lock_holder_pid;
	bool readonly = g->record_readonly;
	session_unlock(m);
	if (!session_held) {
		make_unavailable(m, g, "another mcp-relay process, pid %ld, holds session %s", holder,
		                 m->settings->session_id);
		return false;
	}
	if (readonly) {
		make_unavailable(m, g, "%s",
		                 g->last_error ? g->last_error : "its ownership record cannot be used");
		return false;
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
		return false;
	}
	if (fd < 0) {
		make_unavailable(m, g, "its owner lock in %s cannot be opened", g->dir);
		return false;
	}

	/* 2. The record, read again now that it is ours. */
	char *path = fs_path_join(g->dir, "lease.json");
	json_object *record = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st =
	    path ? fs_read_json(path, RECONCILE_RECORD_MAX_BYTES, &record, &err) : RELAY_E_NO_MEMORY;
	session_lock(m);
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
			g->lease->restored_phase = g->phase;
			g->lease->restored_renewal = g->lease->renewal;
			g->lease->renewal = RENEWAL_NONE;
			g->phase = PHASE_RECONCILING;
		}
	}
	guest_phase now_phase = g->phase;
	session_unlock(m);
	json_object_put(record);
	if (reloaded != 0) {
		close(fd);
		make_unavailable(
		    m, g,
		    "the ownership record %s cannot be used by this relay (%s); it is left untouched; an "
		    "operator must inspect it, or the relay that wrote it must finish or release the guest",
		    path ? path : g->dir, why);
		free(path);
		return false;
	}
	free(path);
	return now_phase != PHASE_CLOSED;
}

/* Step 3: the binding, before any backend operation. True when the record
 * belongs to the current machine environment (a record without one is
 * bound to it now); otherwise the guest was made unavailable. */
static bool check_binding(session_manager *m, guest *g)
{
	json_object *current = lease_binding_json(m);
	session_lock(m);
	bool bound = g->binding ? lease_binding_equal(g->binding, current) : default_deployment(m, current);
	if (bound && g->binding == NULL) {
		g->binding = json_object_get(current);
		guest_save(g);
	}
	session_unlock(m);
	json_object_put(current);
	if (!bound)
		make_unavailable(m, g,
		                 "environment-mismatch: this guest belongs to a different or unknown machine "
		                 "environment; select its original environment before operating on it");
	return bound;
}

/* What the record said before the guest was taken back. */
typedef struct restored_facts {
	guest_phase phase;
	lease_renewal_state renewal;
	bool in_flight;  /* an acquisition in flight: its lease request may have been sent */
	bool never_sent; /* an acquisition whose lease request was never sent */
} restored_facts;

static restored_facts read_restored(session_manager *m, guest *g)
{
	session_lock(m);
	restored_facts r = {g->lease->restored_phase, g->lease->restored_renewal,
	                    g->lease->acquisition_in_flight && g->lease_document == NULL,
	                    !g->lease->acquisition_in_flight && g->lease_document == NULL};
	session_unlock(m);
	return r;
}

/* Without a machine backend the guest keeps the phase it had and says why. */
static void no_machine(session_manager *m, guest *g, const restored_facts *r)
{
	session_lock(m);
	g->phase = r->phase == PHASE_RECONCILING ? PHASE_READY : r->phase;
	g->lease->renewal = r->renewal;
	free(g->last_error);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "the machine backend is not available at restart: %s",
	              m->backends->load_errors[SLOT_MACHINE] ? m->backends->load_errors[SLOT_MACHINE]
	                                                     : "no machine plugin is configured");
	g->last_error = strbuf_detach(&sb, NULL);
	guest_save(g);
	session_unlock(m);
}

/* Step 4: an acquisition in flight when the earlier process ended. True
 * when that settled the guest (closed, or kept as uncertain); false to go
 * on (nothing in flight, or its lease adopted by purpose). */
static bool settle_acquisition(session_manager *m, guest *g, loaded_plugin *machine, relay_call *call,
                               const restored_facts *r)
{
	char why[RELAY_ERROR_MESSAGE_BYTES + 512];
	if (r->never_sent) {
		/* The lease request was never sent: nothing can exist. */
		lease_registry_remove(m, g);
		guest_close(m, g, "not-acquired");
		log_info("guest %s was never acquired (the earlier process ended before its lease request); "
		         "closed",
		         g->name);
		return true;
	}
	if (!r->in_flight || adopt_by_purpose(m, g, machine, call, why, sizeof why))
		return false;
	session_lock(m);
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
	session_unlock(m);
	log_info("guest %s: %s", g->name, g->last_error);
	return true;
}

/* Step 5, a lease the backend knows: adopted when it names this guest's
 * purpose, lease and console. False when it names another (the guest is
 * then made unavailable). */
static bool adopt_found(session_manager *m, guest *g, json_object *found)
{
	session_lock(m);
	const char *record_id = jsonx_get_str(g->lease_document, "lease_id");
	const char *record_console = console_id(g->lease_document);
	const char *found_purpose = jsonx_get_str(found, "purpose");
	bool same =
	    found_purpose && strcmp(found_purpose, g->purpose) == 0 &&
	    (record_id == NULL || (jsonx_get_str(found, "lease_id") &&
	                           strcmp(record_id, jsonx_get_str(found, "lease_id")) == 0)) &&
	    (record_console == NULL || (console_id(found) && strcmp(record_console, console_id(found)) == 0));
	if (same) {
		json_object_put(g->lease_document);
		g->lease_document = json_object_get(found);
		int64_t expires = 0;
		if (jsonx_get_int(found, "expiresAtMs", &expires) && expires > 0)
			g->lease->expires_at_ms = expires;
		const char *state = jsonx_get_str(found, "state");
		lease_set_guest_state(g, state);
		if (state && strcmp(state, "failed") == 0) {
			free(g->last_error);
			g->last_error = strdup("the backend reports the guest failed");
		}
	}
	session_unlock(m);
	if (!same)
		make_unavailable(m, g,
		                 "lease ownership identity mismatch: the backend's lease for %s names "
		                 "another purpose, lease or console",
		                 g->purpose);
	return same;
}

/* Step 6: gone at the backend; closed only when destruction is verified
 * independently. True when it was closed. */
static bool settle_absent(session_manager *m, guest *g, loaded_plugin *machine, relay_call *call,
                          const char *lease, guest_phase restored_phase)
{
	char *check = NULL;
	relay_error verr;
	memset(&verr, 0, sizeof verr);
	relay_status verified =
	    machine->machine.verify_destroyed(machine->state, lease, call, 0, &check, &verr);
	free(check);
	if (verified != RELAY_OK) {
		guest_set_last_error(
		    m, g,
		    "the backend no longer knows the lease of %s, but its destruction could not be "
		    "verified (%s); ownership is kept: call relay_release",
		    g->name, verr.message[0] ? verr.message : relay_status_str(verified));
		return false;
	}
	session_lock(m);
	bool finished = restored_phase == PHASE_FINISHING && g->delivered;
	session_unlock(m);
	if (finished) {
		/* A finish that delivered and destroyed, killed before its
		 * bookkeeping: it finished. */
		lease_registry_remove(m, g);
		lease_write_record(m, g, "finished", false);
		guest_close(m, g, "finished");
		log_info("guest %s had finished before the restart; closed", g->name);
	} else {
		lease_close_absent(m, g, "backend lease absent and destruction verified");
	}
	return true;
}

/* Steps 5-6: the lease looked up. True when that ended the work (the guest
 * closed or made unavailable); false to go on (found, kept with an error,
 * or the lookup failed and renewal tries again). */
static bool look_up_lease(session_manager *m, guest *g, loaded_plugin *machine, relay_call *call,
                          guest_phase restored_phase)
{
	char *lease = guest_lease_text(m, g);
	char *found_text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = machine->machine.inspect(machine->state, lease, call, 0, &found_text, &err);
	json_object *found = st == RELAY_OK && found_text ? jsonx_parse_str(found_text, NULL, 0) : NULL;
	free(found_text);
	bool ended = false;
	if (st == RELAY_OK && found) {
		ended = !adopt_found(m, g, found);
	} else if (st == RELAY_E_NOT_FOUND) {
		ended = settle_absent(m, g, machine, call, lease, restored_phase);
	} else {
		session_lock(m);
		lease_set_guest_state(g, NULL);
		free(g->last_error);
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "the lease lookup at restart failed: %s; renewal goes on and tries again",
		              err.message[0] ? err.message : relay_status_str(st));
		g->last_error = strbuf_detach(&sb, NULL);
		session_unlock(m);
	}
	json_object_put(found);
	free(lease);
	return ended;
}

/* Steps 7-8: the phase it had (an acquisition found by its purpose is
 * ready), the recording reattached without replaying anything, renewal
 * resumed at once in the usual window. */
static void resume_guest(session_manager *m, guest *g, const restored_facts *r)
{
	session_lock(m);
	guest_phase phase = r->phase;
	if (phase == PHASE_ACQUIRING || phase == PHASE_WAITING_FOR_CAPACITY ||
	    phase == PHASE_ACQUISITION_UNCERTAIN || phase == PHASE_RECONCILING ||
	    phase == PHASE_UNAVAILABLE || phase == PHASE_CLOSED)
		phase = PHASE_READY;
	g->phase = phase;
	g->lease->renewal = r->renewal;
	bool reattach = g->staged && !g->delivered;
	guest_save(g);
	session_unlock(m);

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
	bool resume =
	    phase != PHASE_RELEASING && (r->in_flight || r->renewal == RENEWAL_RENEWING ||
	                                 r->renewal == RENEWAL_FAILING || r->renewal == RENEWAL_PAUSED);
	if (resume) {
		lease_renewal_start(m, g, true);
	} else {
		session_lock(m);
		guest_save(g);
		session_unlock(m);
	}
	session_lock(m);
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	log_info("took back guest %s (%s, renewal %s)", g->name, guest_phase_name(phase),
	         resume ? "resumed" : lease_renewal_state_name(r->renewal));
}

/* A reservation the earlier process left before the acquisition got its
 * purpose (acquire.c step 7): no lease request was ever sent, so nothing
 * can exist at the backend and the binding was never fixed. Closed; true
 * when it was. */
static bool settle_reservation(session_manager *m, guest *g)
{
	session_lock(m);
	bool reserved_only = g->purpose == NULL;
	session_unlock(m);
	if (!reserved_only)
		return false;
	guest_close(m, g, "not-acquired");
	log_info("guest %s was only reserved (the earlier process ended before its acquisition had a "
	         "purpose); closed",
	         g->name);
	return true;
}

static void reconcile_work(session_manager *m, guest *g, relay_call *call, void *ctx)
{
	(void)ctx;
	session_wait_startup(m);
	if (!take_ownership(m, g) || settle_reservation(m, g) || !check_binding(m, g))
		return;
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	restored_facts r = read_restored(m, g);
	if (machine == NULL) {
		no_machine(m, g, &r);
		return;
	}
	if (settle_acquisition(m, g, machine, call, &r) || look_up_lease(m, g, machine, call, r.phase))
		return;
	lease_egress_start(m, g, machine); /* the guest's way out came back with the relay */
	resume_guest(m, g, &r);
}
