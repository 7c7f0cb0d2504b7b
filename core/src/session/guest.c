#include "session/guest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/timefmt.h"

#define RECORD_SCHEMA_VERSION  1
#define RENEWAL_WINDOW_MINUTES 15

static const char *const phase_names[] = {
    "acquiring", "waiting-for-capacity", "acquisition-uncertain", "ready",  "staged", "finishing",
    "releasing", "reconciling",          "unavailable",           "closed",
};

static const char *const renewal_names[] = {"none", "renewing", "failing", "stopped", "paused"};

const char *guest_phase_name(guest_phase phase)
{
	return (unsigned)phase < sizeof phase_names / sizeof phase_names[0] ? phase_names[phase] : "unknown";
}

const char *renewal_state_name(renewal_state state)
{
	return (unsigned)state < sizeof renewal_names / sizeof renewal_names[0] ? renewal_names[state]
	                                                                        : "none";
}

static int phase_from_name(const char *name)
{
	for (size_t i = 0; name && i < sizeof phase_names / sizeof phase_names[0]; i++)
		if (strcmp(name, phase_names[i]) == 0)
			return (int)i;
	return -1;
}

static int renewal_from_name(const char *name)
{
	for (size_t i = 0; name && i < sizeof renewal_names / sizeof renewal_names[0]; i++)
		if (strcmp(name, renewal_names[i]) == 0)
			return (int)i;
	return 0;
}

static json_object *new_downloads(void)
{
	json_object *d = json_object_new_object();
	jsonx_add_int(d, "queued", 0);
	jsonx_add_int(d, "inFlight", 0);
	jsonx_add_int(d, "downloaded", 0);
	jsonx_add_int(d, "failed", 0);
	jsonx_add_int(d, "cancelled", 0);
	jsonx_add_int(d, "coalesced", 0);
	jsonx_add_bool(d, "paused", false);
	jsonx_add_str(d, "state", "open");
	return d;
}

guest *guest_new(void)
{
	guest *g = calloc(1, sizeof *g);
	if (g == NULL)
		return NULL;
	g->owner_lock_fd = -1;
	g->snapshots = -1;
	g->renewal = RENEWAL_NONE;
	g->extractions = json_object_new_array();
	g->used_step_ids = json_object_new_array();
	g->previous_evidence = json_object_new_array();
	g->console_attempt_ids = json_object_new_array();
	g->downloads = new_downloads();
	queue_init(&g->queue);
	return g;
}

/* Frees every fact of a guest (not its queue or runtime fields) and resets
 * the pointers to NULL. */
static void free_facts(guest *g)
{
	char **strings[] = {&g->name,        &g->task,
	                    &g->image,       &g->purpose,
	                    &g->dir,         &g->evidence_path,
	                    &g->guest_root,  &g->network,
	                    &g->env_pack,    &g->capacity_reason,
	                    &g->guest_state, &g->last_error,
	                    &g->platform,    &g->node_path,
	                    &g->cua_driver,  &g->recording_session_id};
	for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
		free(*strings[i]);
		*strings[i] = NULL;
	}
	json_object **objects[] = {&g->binding,         &g->extractions,         &g->lease,
	                           &g->registry_row,    &g->capture_plan,        &g->used_step_ids,
	                           &g->pending_reset,   &g->previous_evidence,   &g->console,
	                           &g->console_attempt, &g->console_attempt_ids, &g->closed,
	                           &g->downloads};
	for (size_t i = 0; i < sizeof objects / sizeof objects[0]; i++) {
		json_object_put(*objects[i]);
		*objects[i] = NULL;
	}
}

void guest_free(guest *g)
{
	if (g == NULL)
		return;
	free_facts(g);
	queue_destroy(&g->queue);
	free(g);
}

static void add_time(json_object *obj, const char *key, int64_t unix_ms)
{
	if (unix_ms <= 0) {
		jsonx_add_null(obj, key);
		return;
	}
	char text[21];
	time_format_iso_seconds(unix_ms, text);
	jsonx_add_str(obj, key, text);
}

static json_object *ref(json_object *obj)
{
	return obj ? json_object_get(obj) : NULL;
}

json_object *guest_record_json(const guest *g)
{
	json_object *r = json_object_new_object();
	jsonx_add_int(r, "schemaVersion", RECORD_SCHEMA_VERSION);
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_str(r, "task", g->task);
	jsonx_add_str(r, "image", g->image);
	jsonx_add_str(r, "purpose", g->purpose);
	jsonx_add(r, "binding", ref(g->binding));
	jsonx_add_str(r, "evidencePath", g->evidence_path);
	jsonx_add_str(r, "guestRoot", g->guest_root);
	add_time(r, "acquiredAt", g->acquired_at_ms);
	jsonx_add_int(r, "acquiredAtMs", g->acquired_at_ms);
	add_time(r, "deadline", g->deadline_ms);
	jsonx_add_int(r, "deadlineMs", g->deadline_ms);
	jsonx_add_double(r, "ttlHours", g->ttl_hours);
	jsonx_add_str(r, "network", g->network);
	jsonx_add_str(r, "env", g->env_pack);
	jsonx_add_bool(r, "vnc", g->vnc);
	jsonx_add(r, "extractions", ref(g->extractions));
	jsonx_add_bool(r, "fullWorkspace", g->full_workspace);
	jsonx_add(r, "lease", ref(g->lease));
	jsonx_add(r, "registryRow", ref(g->registry_row));
	/* While reconciling, the record keeps the phase it was found in. */
	jsonx_add_str(r, "phase",
	              guest_phase_name(g->phase == PHASE_RECONCILING ? g->restored_phase : g->phase));
	jsonx_add_bool(r, "acquisitionInFlight", g->acquisition_in_flight);
	jsonx_add_int(r, "waitedForCapacityMs", g->waited_for_capacity_ms);
	json_object *renewal = json_object_new_object();
	jsonx_add_str(renewal, "state",
	              renewal_state_name(g->phase == PHASE_RECONCILING ? g->restored_renewal : g->renewal));
	add_time(renewal, "expiresAt", g->expires_at_ms);
	jsonx_add_int(renewal, "expiresAtMs", g->expires_at_ms);
	add_time(renewal, "lastRenewedAt", g->last_renewed_at_ms);
	jsonx_add_int(renewal, "lastRenewedAtMs", g->last_renewed_at_ms);
	jsonx_add(r, "renewal", renewal);
	jsonx_add_str(r, "guestState", g->guest_state);
	jsonx_add_str(r, "lastError", g->last_error);
	jsonx_add_bool(r, "staged", g->staged);
	jsonx_add_str(r, "platform", g->platform);
	jsonx_add_str(r, "nodePath", g->node_path);
	jsonx_add_str(r, "cuaDriver", g->cua_driver);
	if (g->snapshots < 0)
		jsonx_add_null(r, "snapshots");
	else
		jsonx_add_bool(r, "snapshots", g->snapshots == 1);
	jsonx_add(r, "capturePlan", ref(g->capture_plan));
	jsonx_add_str(r, "recordingSessionId", g->recording_session_id);
	jsonx_add_int(r, "runSeq", g->run_seq);
	jsonx_add(r, "usedStepIds", ref(g->used_step_ids));
	jsonx_add(r, "pendingReset", ref(g->pending_reset));
	jsonx_add(r, "previousEvidence", ref(g->previous_evidence));
	jsonx_add(r, "console", ref(g->console));
	jsonx_add(r, "consoleAttempt", ref(g->console_attempt));
	jsonx_add(r, "consoleAttemptIds", ref(g->console_attempt_ids));
	jsonx_add_bool(r, "delivered", g->delivered);
	jsonx_add_bool(r, "released", g->released);
	jsonx_add(r, "closed", ref(g->closed));
	jsonx_add(r, "downloads", ref(g->downloads));
	return r;
}

static char *dup_str(const json_object *obj, const char *key)
{
	const char *s = jsonx_get_str(obj, key);
	return s ? strdup(s) : NULL;
}

static json_object *dup_ref(const json_object *obj, const char *key)
{
	json_object *value = NULL;
	if (!json_object_object_get_ex(obj, key, &value) || value == NULL)
		return NULL;
	return json_object_get(value);
}

/* Checks that a record is one this relay wrote (schemaVersion 1 with a
 * guest, a purpose and a known phase). */
static bool record_usable(const json_object *r, char *errbuf, size_t errlen)
{
	int64_t version = 0;
	if (!json_object_is_type(r, json_type_object) || !jsonx_get_int(r, "schemaVersion", &version) ||
	    version != RECORD_SCHEMA_VERSION) {
		snprintf(errbuf, errlen, "the ownership record is not schemaVersion %d of this relay",
		         RECORD_SCHEMA_VERSION);
		return false;
	}
	int phase = phase_from_name(jsonx_get_str(r, "phase"));
	if (jsonx_get_str(r, "guest") == NULL || phase < 0) {
		snprintf(errbuf, errlen, "the ownership record lacks guest or a known phase");
		return false;
	}
	/* A purpose is fixed before any lease request (acquire.c step 7): a
	 * record without one is a reservation that never got that far, or an
	 * acquisition refused before it (closed). Anything else needs it. */
	if (jsonx_get_str(r, "purpose") == NULL && phase != PHASE_CLOSED && phase != PHASE_ACQUIRING) {
		snprintf(errbuf, errlen, "the ownership record of a %s guest lacks its purpose",
		         jsonx_get_str(r, "phase"));
		return false;
	}
	return true;
}

/* Fills the facts of `g` (all NULL) from a usable record. */
static void fill_from_record(guest *g, const json_object *r)
{
	g->extractions = json_object_new_array();
	g->used_step_ids = json_object_new_array();
	g->previous_evidence = json_object_new_array();
	g->console_attempt_ids = json_object_new_array();
	g->name = strdup(jsonx_get_str(r, "guest"));
	g->task = dup_str(r, "task");
	g->image = dup_str(r, "image");
	g->purpose = dup_str(r, "purpose");
	g->binding = dup_ref(r, "binding");
	g->evidence_path = dup_str(r, "evidencePath");
	g->guest_root = dup_str(r, "guestRoot");
	g->acquired_at_ms = 0;
	jsonx_get_int(r, "acquiredAtMs", &g->acquired_at_ms);
	g->deadline_ms = 0;
	jsonx_get_int(r, "deadlineMs", &g->deadline_ms);
	g->ttl_hours = 4;
	jsonx_get_double(r, "ttlHours", &g->ttl_hours);
	g->network = dup_str(r, "network");
	g->env_pack = dup_str(r, "env");
	g->vnc = false;
	jsonx_get_bool(r, "vnc", &g->vnc);
	json_object *extractions = dup_ref(r, "extractions");
	if (extractions) {
		json_object_put(g->extractions);
		g->extractions = extractions;
	}
	g->full_workspace = false;
	jsonx_get_bool(r, "fullWorkspace", &g->full_workspace);
	g->lease = dup_ref(r, "lease");
	g->registry_row = dup_ref(r, "registryRow");
	g->phase = (guest_phase)phase_from_name(jsonx_get_str(r, "phase"));
	g->acquisition_in_flight = false;
	jsonx_get_bool(r, "acquisitionInFlight", &g->acquisition_in_flight);
	g->waited_for_capacity_ms = 0;
	jsonx_get_int(r, "waitedForCapacityMs", &g->waited_for_capacity_ms);
	json_object *renewal = jsonx_get_obj(r, "renewal");
	g->renewal = (renewal_state)renewal_from_name(jsonx_get_str(renewal, "state"));
	g->expires_at_ms = 0;
	jsonx_get_int(renewal, "expiresAtMs", &g->expires_at_ms);
	g->last_renewed_at_ms = 0;
	jsonx_get_int(renewal, "lastRenewedAtMs", &g->last_renewed_at_ms);
	g->guest_state = dup_str(r, "guestState");
	g->last_error = dup_str(r, "lastError");
	g->staged = false;
	jsonx_get_bool(r, "staged", &g->staged);
	g->platform = dup_str(r, "platform");
	g->node_path = dup_str(r, "nodePath");
	g->cua_driver = dup_str(r, "cuaDriver");
	bool snapshots = false;
	g->snapshots = -1;
	if (jsonx_get_bool(r, "snapshots", &snapshots))
		g->snapshots = snapshots ? 1 : 0;
	g->capture_plan = dup_ref(r, "capturePlan");
	g->recording_session_id = dup_str(r, "recordingSessionId");
	g->run_seq = 0;
	jsonx_get_int(r, "runSeq", &g->run_seq);
	json_object *ids = dup_ref(r, "usedStepIds");
	if (ids) {
		json_object_put(g->used_step_ids);
		g->used_step_ids = ids;
	}
	g->pending_reset = dup_ref(r, "pendingReset");
	json_object *previous = dup_ref(r, "previousEvidence");
	if (previous) {
		json_object_put(g->previous_evidence);
		g->previous_evidence = previous;
	}
	g->console = dup_ref(r, "console");
	g->console_attempt = dup_ref(r, "consoleAttempt");
	json_object *attempts = dup_ref(r, "consoleAttemptIds");
	if (attempts) {
		json_object_put(g->console_attempt_ids);
		g->console_attempt_ids = attempts;
	}
	g->delivered = false;
	jsonx_get_bool(r, "delivered", &g->delivered);
	g->released = false;
	jsonx_get_bool(r, "released", &g->released);
	g->closed = dup_ref(r, "closed");
	g->downloads = dup_ref(r, "downloads");
	if (g->downloads == NULL)
		g->downloads = new_downloads();
}

guest *guest_from_record(const json_object *r, char *errbuf, size_t errlen)
{
	if (!record_usable(r, errbuf, errlen))
		return NULL;
	guest *g = guest_new();
	if (g == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	free_facts(g);
	fill_from_record(g, r);
	return g;
}

int guest_reload(guest *g, const json_object *r, char *errbuf, size_t errlen)
{
	if (!record_usable(r, errbuf, errlen))
		return -1;
	char *dir = g->dir;
	g->dir = NULL;
	free_facts(g);
	fill_from_record(g, r);
	free(g->dir);
	g->dir = dir;
	return 0;
}

int guest_save(const guest *g)
{
	/* Only the owner writes the record: a guest whose lock is not held (a
	 * closed one, another process's) or whose record this relay must leave
	 * untouched is never rewritten. */
	if (g->dir == NULL || g->record_readonly || g->owner_lock_fd < 0)
		return -1;
	char *path = fs_path_join(g->dir, "lease.json");
	json_object *record = guest_record_json(g);
	relay_error err;
	int rc = 0;
	if (path == NULL || record == NULL || fs_write_json_durable(path, record, &err) != RELAY_OK) {
		log_error("cannot write the ownership record of %s: %s", g->name,
		          path && record ? err.message : "out of memory");
		rc = -1;
	}
	json_object_put(record);
	free(path);
	return rc;
}

json_object *guest_status_json(const guest *g)
{
	json_object *s = json_object_new_object();
	jsonx_add_str(s, "guest", g->name);
	jsonx_add_str(s, "task", g->task);
	jsonx_add_str(s, "image", g->image);
	jsonx_add_str(s, "purpose", g->purpose);
	jsonx_add_str(s, "phase", guest_phase_name(g->phase));
	jsonx_add_bool(s, "active", g->renewal == RENEWAL_RENEWING || g->renewal == RENEWAL_FAILING);
	jsonx_add(s, "binding", ref(g->binding));
	jsonx_add_str(s, "vm", g->lease ? jsonx_get_str(g->lease, "vm") : NULL);
	jsonx_add_str(s, "lease_id", g->lease ? jsonx_get_str(g->lease, "lease_id") : NULL);
	jsonx_add_str(s, "guestState", g->guest_state ? g->guest_state : "unknown");
	json_object *renewal = json_object_new_object();
	jsonx_add_str(renewal, "state", renewal_state_name(g->renewal));
	add_time(renewal, "deadline", g->deadline_ms);
	add_time(renewal, "expiresAt", g->expires_at_ms);
	add_time(renewal, "lastRenewedAt", g->last_renewed_at_ms);
	jsonx_add_int(renewal, "windowMinutes", RENEWAL_WINDOW_MINUTES);
	jsonx_add(s, "renewal", renewal);
	jsonx_add_double(s, "ttlHours", g->ttl_hours);
	add_time(s, "acquiredAt", g->acquired_at_ms);
	jsonx_add_str(s, "network", g->network);
	add_time(s, "waitingSince", g->waiting_since_ms);
	/* While waiting, the time waited so far (spec/lifecycle.md §7). */
	int64_t waited = g->waited_for_capacity_ms;
	if (g->phase == PHASE_WAITING_FOR_CAPACITY && g->waiting_since_ms > 0 &&
	    clock_now_ms() - g->waiting_since_ms > waited)
		waited = clock_now_ms() - g->waiting_since_ms;
	jsonx_add_int(s, "waitedForCapacityMs", waited);
	jsonx_add_str(s, "capacityReason", g->capacity_reason);
	jsonx_add_bool(s, "staged", g->staged);
	jsonx_add_str(s, "platform", g->platform);
	if (g->snapshots < 0)
		jsonx_add_null(s, "snapshots");
	else
		jsonx_add_bool(s, "snapshots", g->snapshots == 1);
	jsonx_add_str(s, "recordingSessionId", g->recording_session_id);
	jsonx_add_bool(s, "recordingResetPending", g->pending_reset != NULL);
	jsonx_add_int(s, "runs", g->run_seq);
	jsonx_add(s, "console", ref(g->console));
	jsonx_add(s, "consoleAttempt", ref(g->console_attempt));
	jsonx_add_str(s, "lastError", g->last_error);
	jsonx_add_bool(s, "delivered", g->delivered);
	jsonx_add_str(s, "evidencePath", g->evidence_path);
	jsonx_add(s, "previousEvidence", ref(g->previous_evidence));
	jsonx_add_str(s, "guestRoot", g->guest_root);
	jsonx_add(s, "declarations", ref(g->extractions));
	jsonx_add_bool(s, "fullWorkspace", g->full_workspace);
	jsonx_add(s, "downloads", ref(g->downloads));
	return s;
}
