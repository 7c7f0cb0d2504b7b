#include "session/guest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/timefmt.h"

#define RECORD_SCHEMA_VERSION 1

static const char *const phase_names[] = {
    "acquiring", "waiting-for-capacity", "acquisition-uncertain", "ready",  "staged", "finishing",
    "releasing", "reconciling",          "unavailable",           "closed",
};

const char *guest_phase_name(guest_phase phase)
{
	return (unsigned)phase < sizeof phase_names / sizeof phase_names[0] ? phase_names[phase] : "unknown";
}

int guest_phase_from_name(const char *name)
{
	for (size_t i = 0; name && i < sizeof phase_names / sizeof phase_names[0]; i++)
		if (strcmp(name, phase_names[i]) == 0)
			return (int)i;
	return -1;
}

/* The rooms' slice operations, in the table's order (guest.h). */
#define SLICES 5
static void slice_ops(const guest *g, const guest_slice_ops *ops[SLICES])
{
	ops[0] = g->rooms->lease;
	ops[1] = g->rooms->run;
	ops[2] = g->rooms->console;
	ops[3] = g->rooms->delivery;
	ops[4] = g->rooms->link;
}

/* Creates the rooms' empty slices; false when out of memory. */
static bool create_slices(guest *g)
{
	const guest_rooms *r = g->rooms;
	if (r->lease->create && (g->lease = r->lease->create()) == NULL)
		return false;
	if (r->run->create && (g->run = r->run->create()) == NULL)
		return false;
	if (r->console->create && (g->console = r->console->create()) == NULL)
		return false;
	if (r->delivery->create && (g->delivery = r->delivery->create()) == NULL)
		return false;
	if (r->link->create && (g->link = r->link->create()) == NULL)
		return false;
	return true;
}

static void destroy_slices(guest *g)
{
	const guest_rooms *r = g->rooms;
	if (r->lease->destroy)
		r->lease->destroy(g->lease);
	g->lease = NULL;
	if (r->run->destroy)
		r->run->destroy(g->run);
	g->run = NULL;
	if (r->console->destroy)
		r->console->destroy(g->console);
	g->console = NULL;
	if (r->delivery->destroy)
		r->delivery->destroy(g->delivery);
	g->delivery = NULL;
	if (r->link->destroy)
		r->link->destroy(g->link);
	g->link = NULL;
}

guest *guest_new(const guest_rooms *rooms)
{
	guest *g = calloc(1, sizeof *g);
	if (g == NULL)
		return NULL;
	g->rooms = rooms;
	if (!create_slices(g)) {
		destroy_slices(g);
		free(g);
		return NULL;
	}
	g->owner_lock_fd = -1;
	g->previous_evidence = json_object_new_array();
	queue_init(&g->queue);
	return g;
}

void guest_slices_reserve(guest *g, const json_object *args)
{
	const guest_slice_ops *ops[SLICES];
	slice_ops(g, ops);
	for (size_t i = 0; i < SLICES; i++)
		if (ops[i]->reserve)
			ops[i]->reserve(g, args);
}

void guest_slices_close(guest *g)
{
	const guest_slice_ops *ops[SLICES];
	slice_ops(g, ops);
	for (size_t i = 0; i < SLICES; i++)
		if (ops[i]->close)
			ops[i]->close(g);
}

/* Frees every fact of a guest (not its queue or runtime fields) and resets
 * the pointers to NULL. */
static void free_facts(guest *g)
{
	char **strings[] = {
	    &g->name,          &g->task,       &g->image,   &g->purpose,    &g->dir,
	    &g->evidence_path, &g->guest_root, &g->network, &g->last_error, &g->recording_session_id};
	for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
		free(*strings[i]);
		*strings[i] = NULL;
	}
	json_object **objects[] = {&g->binding, &g->lease_document, &g->previous_evidence, &g->closed};
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
	destroy_slices(g);
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
	jsonx_add_str(r, "network", g->network);
	jsonx_add(r, "lease", ref(g->lease_document));
	jsonx_add_str(r, "phase", guest_phase_name(g->phase));
	jsonx_add_str(r, "lastError", g->last_error);
	jsonx_add_bool(r, "staged", g->staged);
	jsonx_add_str(r, "recordingSessionId", g->recording_session_id);
	jsonx_add(r, "previousEvidence", ref(g->previous_evidence));
	jsonx_add_bool(r, "delivered", g->delivered);
	jsonx_add_bool(r, "released", g->released);
	jsonx_add(r, "closed", ref(g->closed));
	const guest_slice_ops *ops[SLICES];
	slice_ops(g, ops);
	for (size_t i = 0; i < SLICES; i++)
		if (ops[i]->to_record)
			ops[i]->to_record(g, r);
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
	int phase = guest_phase_from_name(jsonx_get_str(r, "phase"));
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
	g->previous_evidence = json_object_new_array();
	g->name = strdup(jsonx_get_str(r, "guest"));
	g->task = dup_str(r, "task");
	g->image = dup_str(r, "image");
	g->purpose = dup_str(r, "purpose");
	g->binding = dup_ref(r, "binding");
	g->evidence_path = dup_str(r, "evidencePath");
	g->guest_root = dup_str(r, "guestRoot");
	g->acquired_at_ms = 0;
	jsonx_get_int(r, "acquiredAtMs", &g->acquired_at_ms);
	g->network = dup_str(r, "network");
	g->lease_document = dup_ref(r, "lease");
	g->phase = (guest_phase)guest_phase_from_name(jsonx_get_str(r, "phase"));
	g->last_error = dup_str(r, "lastError");
	g->staged = false;
	jsonx_get_bool(r, "staged", &g->staged);
	g->recording_session_id = dup_str(r, "recordingSessionId");
	json_object *previous = dup_ref(r, "previousEvidence");
	if (previous) {
		json_object_put(g->previous_evidence);
		g->previous_evidence = previous;
	}
	g->delivered = false;
	jsonx_get_bool(r, "delivered", &g->delivered);
	g->released = false;
	jsonx_get_bool(r, "released", &g->released);
	g->closed = dup_ref(r, "closed");
	const guest_slice_ops *ops[SLICES];
	slice_ops(g, ops);
	for (size_t i = 0; i < SLICES; i++)
		if (ops[i]->from_record)
			ops[i]->from_record(g, r);
}

guest *guest_from_record(const guest_rooms *rooms, const json_object *r, char *errbuf, size_t errlen)
{
	if (!record_usable(r, errbuf, errlen))
		return NULL;
	guest *g = guest_new(rooms);
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
	jsonx_add(s, "binding", ref(g->binding));
	const char *vm = g->lease_document ? jsonx_get_str(g->lease_document, "vm") : NULL;
	const char *lease_id = g->lease_document ? jsonx_get_str(g->lease_document, "lease_id") : NULL;
	jsonx_add_str(s, "vm", vm);
	jsonx_add_str(s, "lease_id", lease_id);
	add_time(s, "acquiredAt", g->acquired_at_ms);
	jsonx_add_str(s, "network", g->network);
	jsonx_add_bool(s, "staged", g->staged);
	jsonx_add_str(s, "recordingSessionId", g->recording_session_id);
	jsonx_add_str(s, "lastError", g->last_error);
	jsonx_add_bool(s, "delivered", g->delivered);
	jsonx_add_str(s, "evidencePath", g->evidence_path);
	jsonx_add(s, "previousEvidence", ref(g->previous_evidence));
	jsonx_add_str(s, "guestRoot", g->guest_root);
	const guest_slice_ops *ops[SLICES];
	slice_ops(g, ops);
	for (size_t i = 0; i < SLICES; i++)
		if (ops[i]->to_status)
			ops[i]->to_status(g, s);
	return s;
}
