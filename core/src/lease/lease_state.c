/*
 * The lease room's slice of a guest (lease_state.h): its life, its part of
 * the ownership record and of the status entry.
 */
#include "lease/lease_state.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "session/slice.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/record.h"

#define RENEWAL_WINDOW_MINUTES 15

static const char *const renewal_names[] = {"none", "renewing", "failing", "stopped", "paused"};

const char *lease_renewal_state_name(lease_renewal_state state)
{
	return (unsigned)state < sizeof renewal_names / sizeof renewal_names[0] ? renewal_names[state]
	                                                                        : "none";
}

static lease_renewal_state renewal_from_name(const char *name)
{
	for (size_t i = 0; name && i < sizeof renewal_names / sizeof renewal_names[0]; i++)
		if (strcmp(name, renewal_names[i]) == 0)
			return (lease_renewal_state)i;
	return RENEWAL_NONE;
}

/* The slice's facts in the ownership record (spec/lifecycle.md §9); the
 * renewal's go into an object of their own. */
#define F(key, kind, field) RECORD_FIELD(lease_state, key, kind, field)
/* clang-format off */
static const record_field record_fields[] = {
    F("deadline", RECORD_TIME, deadline_ms), F("deadlineMs", RECORD_INT64, deadline_ms),
    F("ttlHours", RECORD_DOUBLE, ttl_hours), F("env", RECORD_STR, env_pack),
    F("registryRow", RECORD_JSON, registry_row), F("acquisitionInFlight", RECORD_BOOL, acquisition_in_flight),
    F("waitedForCapacityMs", RECORD_INT64, waited_for_capacity_ms), F("guestState", RECORD_STR, guest_state)};
static const record_field renewal_fields[] = {
    F("expiresAt", RECORD_TIME, expires_at_ms), F("expiresAtMs", RECORD_INT64, expires_at_ms),
    F("lastRenewedAt", RECORD_TIME, last_renewed_at_ms), F("lastRenewedAtMs", RECORD_INT64, last_renewed_at_ms)};
/* clang-format on */
#undef F

static void slice_release(void *slice)
{
	lease_state *l = slice;
	free(l->capacity_reason);
	l->capacity_reason = NULL;
}

static void slice_reset(void *slice)
{
	lease_state *l = slice;
	slice_release(l);
	l->ttl_hours = 4;
}

static void slice_reserve(guest *g, const json_object *args)
{
	lease_state *l = g->lease;
	l->ttl_hours = 4;
	jsonx_get_double(args, "ttlHours", &l->ttl_hours);
	const char *env = jsonx_get_str(args, "env");
	free(l->env_pack);
	l->env_pack = strdup(env ? env : "none");
}

static void slice_to_record(const guest *g, json_object *r)
{
	const lease_state *l = g->lease;
	bool reconciling = g->phase == PHASE_RECONCILING;
	/* While reconciling, the record keeps the phase it was found in. */
	if (reconciling)
		jsonx_add_str(r, "phase", guest_phase_name(l->restored_phase));
	json_object *renewal = json_object_new_object();
	jsonx_add_str(renewal, "state",
	              lease_renewal_state_name(reconciling ? l->restored_renewal : l->renewal));
	record_write(l, RECORD_FIELDS(renewal_fields), renewal);
	jsonx_add(r, "renewal", renewal);
}

static void slice_from_record(guest *g, const json_object *r)
{
	lease_state *l = g->lease;
	json_object *renewal = jsonx_get_obj(r, "renewal");
	l->renewal = renewal_from_name(jsonx_get_str(renewal, "state"));
	record_clear(l, RECORD_FIELDS(renewal_fields));
	record_read(l, RECORD_FIELDS(renewal_fields), renewal);
}

static void slice_to_status(const guest *g, json_object *s)
{
	const lease_state *l = g->lease;
	jsonx_add_bool(s, "active", l->renewal == RENEWAL_RENEWING || l->renewal == RENEWAL_FAILING);
	jsonx_add_str(s, "guestState", l->guest_state ? l->guest_state : "unknown");
	json_object *renewal = json_object_new_object();
	jsonx_add_str(renewal, "state", lease_renewal_state_name(l->renewal));
	record_add_time(renewal, "deadline", l->deadline_ms);
	record_add_time(renewal, "expiresAt", l->expires_at_ms);
	record_add_time(renewal, "lastRenewedAt", l->last_renewed_at_ms);
	jsonx_add_int(renewal, "windowMinutes", RENEWAL_WINDOW_MINUTES);
	jsonx_add(s, "renewal", renewal);
	jsonx_add_double(s, "ttlHours", l->ttl_hours);
	record_add_time(s, "waitingSince", l->waiting_since_ms);
	/* While waiting, the time waited so far (spec/lifecycle.md §7). */
	int64_t waited = l->waited_for_capacity_ms;
	if (g->phase == PHASE_WAITING_FOR_CAPACITY && l->waiting_since_ms > 0 &&
	    clock_now_ms() - l->waiting_since_ms > waited)
		waited = clock_now_ms() - l->waiting_since_ms;
	jsonx_add_int(s, "waitedForCapacityMs", waited);
	jsonx_add_str(s, "capacityReason", l->capacity_reason);
}

static void slice_close(guest *g)
{
	g->lease->renewal = RENEWAL_NONE;
}

const guest_slice_ops lease_slice_ops = {
    .size = sizeof(lease_state),
    GUEST_SLICE_RECORD(record_fields),
    .reset = slice_reset,
    .release = slice_release,
    .reserve = slice_reserve,
    .to_record = slice_to_record,
    .from_record = slice_from_record,
    .to_status = slice_to_status,
    .close = slice_close,
};

bool lease_is_live(session_manager *m, guest *g)
{
	session_lock(m);
	const lease_state *l = g->lease;
	const char *state = l->guest_state ? l->guest_state : jsonx_get_str(g->lease_document, "state");
	int64_t now = clock_now_ms();
	bool live = state && strcmp(state, "running") == 0 && l->deadline_ms > now &&
	            (l->expires_at_ms == 0 || l->expires_at_ms > now) && g->phase != PHASE_RELEASING &&
	            g->phase != PHASE_FINISHING;
	session_unlock(m);
	return live;
}

char *lease_guest_state_copy(session_manager *m, guest *g)
{
	(void)m;
	slice_lock(g->lease);
	const char *state = g->lease->guest_state;
	char *copy = strdup(state ? state : "unknown");
	slice_unlock(g->lease);
	return copy;
}

void lease_set_guest_state(guest *g, const char *state)
{
	char *copy = strdup(state ? state : "unknown");
	slice_lock(g->lease);
	free(g->lease->guest_state);
	g->lease->guest_state = copy;
	slice_unlock(g->lease);
}
