#include "session/guest.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session/slice.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/record.h"

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

/* The rooms' slices and their operations, in the table's order (guest.h). */
#define SLICES 5
static void slices_of(const guest *g, const guest_slice_ops *ops[SLICES], void *data[SLICES])
{
	ops[0] = g->rooms->lease;
	ops[1] = g->rooms->run;
	ops[2] = g->rooms->console;
	ops[3] = g->rooms->delivery;
	ops[4] = g->rooms->link;
	data[0] = g->lease;
	data[1] = g->run;
	data[2] = g->console;
	data[3] = g->delivery;
	data[4] = g->link;
}

void *guest_slice_new(const guest_slice_ops *ops)
{
	void *slice = slice_alloc(ops->size);
	if (slice && ops->reset)
		ops->reset(slice);
	return slice;
}

void guest_slice_free(const guest_slice_ops *ops, void *slice)
{
	if (slice == NULL)
		return;
	if (ops->release)
		ops->release(slice);
	record_clear(slice, ops->record, ops->record_count);
	slice_free(slice);
}

/* Creates the rooms' empty slices; false when out of memory. */
static bool create_slices(guest *g)
{
	const guest_rooms *r = g->rooms;
	return (g->lease = guest_slice_new(r->lease)) != NULL && (g->run = guest_slice_new(r->run)) != NULL &&
	       (g->console = guest_slice_new(r->console)) != NULL &&
	       (g->delivery = guest_slice_new(r->delivery)) != NULL &&
	       (g->link = guest_slice_new(r->link)) != NULL;
}

static void destroy_slices(guest *g)
{
	const guest_slice_ops *ops[SLICES];
	void *data[SLICES];
	slices_of(g, ops, data);
	for (size_t i = 0; i < SLICES; i++)
		guest_slice_free(ops[i], data[i]);
	g->lease = NULL;
	g->run = NULL;
	g->console = NULL;
	g->delivery = NULL;
	g->link = NULL;
}

/* Which of a slice's operations a walk does. */
typedef enum slice_op { OP_RESERVE, OP_TO_RECORD, OP_FROM_RECORD, OP_TO_STATUS, OP_CLOSE } slice_op;

/* One operation on one slice, under its lock (the session's is held). */
static void slice_do(guest *g, const guest_slice_ops *ops, void *slice, slice_op op, json_object *obj)
{
	switch (op) {
	case OP_RESERVE:
		if (ops->reserve)
			ops->reserve(g, obj);
		break;
	case OP_TO_RECORD:
		record_write(slice, ops->record, ops->record_count, obj);
		if (ops->to_record)
			ops->to_record(g, obj);
		break;
	case OP_FROM_RECORD:
		record_clear(slice, ops->record, ops->record_count);
		if (ops->reset)
			ops->reset(slice);
		record_read(slice, ops->record, ops->record_count, obj);
		if (ops->from_record)
			ops->from_record(g, obj);
		break;
	case OP_TO_STATUS:
		record_write(slice, ops->status, ops->status_count, obj);
		if (ops->to_status)
			ops->to_status(g, obj);
		break;
	case OP_CLOSE:
		if (ops->close)
			ops->close(g);
		break;
	}
}

/* Does one operation on every slice, each under its slice's lock
 * (slice.h). `obj` is relay_acquire's arguments, the record or the status
 * entry. */
static void walk_slices(guest *g, slice_op op, json_object *obj)
{
	const guest_slice_ops *ops[SLICES];
	void *data[SLICES];
	slices_of(g, ops, data);
	for (size_t i = 0; i < SLICES; i++) {
		slice_lock(data[i]);
		slice_do(g, ops[i], data[i], op, obj);
		slice_unlock(data[i]);
	}
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
	walk_slices(g, OP_RESERVE, (json_object *)args);
}

void guest_slices_close(guest *g)
{
	walk_slices(g, OP_CLOSE, NULL);
}

/* The guest's own facts in the ownership record (spec/lifecycle.md §9), in
 * the record's order: those before the phase, then those after it; and in
 * the status entry (spec/lifecycle.md §7): the names, then (after the
 * phase, binding and the lease's ids) the rest. */
#define F(key, kind, field) RECORD_FIELD(guest, key, kind, field)
/* clang-format off */
static const record_field record_head[] = {
    F("guest", RECORD_STR, name), F("task", RECORD_STR, task), F("image", RECORD_STR, image),
    F("purpose", RECORD_STR, purpose), F("binding", RECORD_JSON, binding),
    F("evidencePath", RECORD_STR, evidence_path), F("guestRoot", RECORD_STR, guest_root),
    F("acquiredAt", RECORD_TIME, acquired_at_ms), F("acquiredAtMs", RECORD_INT64, acquired_at_ms),
    F("network", RECORD_STR, network), F("lease", RECORD_JSON, lease_document)};
static const record_field record_tail[] = {
    F("lastError", RECORD_STR, last_error), F("staged", RECORD_BOOL, staged),
    F("recordingSessionId", RECORD_STR, recording_session_id),
    F("previousEvidence", RECORD_JSON, previous_evidence), F("delivered", RECORD_BOOL, delivered),
    F("released", RECORD_BOOL, released), F("closed", RECORD_JSON, closed)};
static const record_field status_rest[] = {
    F("acquiredAt", RECORD_TIME, acquired_at_ms), F("network", RECORD_STR, network),
    F("staged", RECORD_BOOL, staged), F("recordingSessionId", RECORD_STR, recording_session_id),
    F("lastError", RECORD_STR, last_error), F("delivered", RECORD_BOOL, delivered),
    F("evidencePath", RECORD_STR, evidence_path), F("previousEvidence", RECORD_JSON, previous_evidence),
    F("guestRoot", RECORD_STR, guest_root)};
/* clang-format on */
#undef F

/* Frees every fact of a guest (not its queue or runtime fields) and resets
 * them to their empty values. */
static void free_facts(guest *g)
{
	record_clear(g, RECORD_FIELDS(record_head));
	record_clear(g, RECORD_FIELDS(record_tail));
	free(g->dir);
	g->dir = NULL;
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

json_object *guest_record_json(const guest *g)
{
	json_object *r = json_object_new_object();
	jsonx_add_int(r, "schemaVersion", RECORD_SCHEMA_VERSION);
	record_write(g, RECORD_FIELDS(record_head), r);
	jsonx_add_str(r, "phase", guest_phase_name(g->phase));
	record_write(g, RECORD_FIELDS(record_tail), r);
	walk_slices((guest *)g, OP_TO_RECORD, r);
	return r;
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

/* Fills the facts of `g` (empty) from a usable record. */
static void fill_from_record(guest *g, const json_object *r)
{
	g->previous_evidence = json_object_new_array();
	record_read(g, RECORD_FIELDS(record_head), r);
	g->phase = (guest_phase)guest_phase_from_name(jsonx_get_str(r, "phase"));
	record_read(g, RECORD_FIELDS(record_tail), r);
	walk_slices(g, OP_FROM_RECORD, (json_object *)r);
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
	record_write(g, record_head, 4, s); /* guest, task, image, purpose */
	jsonx_add_str(s, "phase", guest_phase_name(g->phase));
	jsonx_add(s, "binding", g->binding ? json_object_get(g->binding) : NULL);
	jsonx_add_str(s, "vm", jsonx_get_str(g->lease_document, "vm"));
	jsonx_add_str(s, "lease_id", jsonx_get_str(g->lease_document, "lease_id"));
	record_write(g, RECORD_FIELDS(status_rest), s);
	walk_slices((guest *)g, OP_TO_STATUS, s);
	return s;
}
