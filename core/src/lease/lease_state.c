/*
 * The lease room's slice of a guest (lease_state.h): its life, its part of
 * the ownership record and of the status entry.
 */
#include "lease/lease_state.h"

#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/jsonx.h"
#include "util/timefmt.h"

#define RENEWAL_WINDOW_MINUTES 15

static const char *const renewal_names[] = {"none", "renewing", "failing", "stopped", "paused"};

const char *renewal_state_name(renewal_state state)
{
	return (unsigned)state < sizeof renewal_names / sizeof renewal_names[0] ? renewal_names[state]
	                                                                        : "none";
}

static renewal_state renewal_from_name(const char *name)
{
	for (size_t i = 0; name && i < sizeof renewal_names / sizeof renewal_names[0]; i++)
		if (strcmp(name, renewal_names[i]) == 0)
			return (renewal_state)i;
	return RENEWAL_NONE;
}

static void *slice_create(void)
{
	lease_state *l = calloc(1, sizeof *l);
	if (l)
		l->renewal = RENEWAL_NONE;
	return l;
}

/* Frees the recorded facts and resets them to NULL. */
static void free_recorded(lease_state *l)
{
	free(l->env_pack);
	free(l->capacity_reason);
	free(l->guest_state);
	json_object_put(l->registry_row);
	l->env_pack = l->capacity_reason = l->guest_state = NULL;
	l->registry_row = NULL;
}

static void slice_destroy(void *slice)
{
	lease_state *l = slice;
	if (l == NULL)
		return;
	free_recorded(l);
	free(l);
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

static void slice_to_record(const guest *g, json_object *r)
{
	const lease_state *l = g->lease;
	bool reconciling = g->phase == PHASE_RECONCILING;
	/* While reconciling, the record keeps the phase it was found in. */
	if (reconciling)
		jsonx_add_str(r, "phase", guest_phase_name(l->restored_phase));
	add_time(r, "deadline", l->deadline_ms);
	jsonx_add_int(r, "deadlineMs", l->deadline_ms);
	jsonx_add_double(r, "ttlHours", l->ttl_hours);
	jsonx_add_str(r, "env", l->env_pack);
	jsonx_add(r, "registryRow", l->registry_row ? json_object_get(l->registry_row) : NULL);
	jsonx_add_bool(r, "acquisitionInFlight", l->acquisition_in_flight);
	jsonx_add_int(r, "waitedForCapacityMs", l->waited_for_capacity_ms);
	json_object *renewal = json_object_new_object();
	jsonx_add_str(renewal, "state", renewal_state_name(reconciling ? l->restored_renewal : l->renewal));
	add_time(renewal, "expiresAt", l->expires_at_ms);
	jsonx_add_int(renewal, "expiresAtMs", l->expires_at_ms);
	add_time(renewal, "lastRenewedAt", l->last_renewed_at_ms);
	jsonx_add_int(renewal, "lastRenewedAtMs", l->last_renewed_at_ms);
	jsonx_add(r, "renewal", renewal);
	jsonx_add_str(r, "guestState", l->guest_state);
}

static char *dup_str(const json_object *obj, const char *key)
{
	const char *s = jsonx_get_str(obj, key);
	return s ? strdup(s) : NULL;
}

static void slice_from_record(guest *g, const json_object *r)
{
	lease_state *l = g->lease;
	free_recorded(l);
	l->deadline_ms = 0;
	jsonx_get_int(r, "deadlineMs", &l->deadline_ms);
	l->ttl_hours = 4;
	jsonx_get_double(r, "ttlHours", &l->ttl_hours);
	l->env_pack = dup_str(r, "env");
	json_object *row = NULL;
	if (json_object_object_get_ex(r, "registryRow", &row) && row)
		l->registry_row = json_object_get(row);
	l->acquisition_in_flight = false;
	jsonx_get_bool(r, "acquisitionInFlight", &l->acquisition_in_flight);
	l->waited_for_capacity_ms = 0;
	jsonx_get_int(r, "waitedForCapacityMs", &l->waited_for_capacity_ms);
	json_object *renewal = jsonx_get_obj(r, "renewal");
	l->renewal = renewal_from_name(jsonx_get_str(renewal, "state"));
	l->expires_at_ms = 0;
	jsonx_get_int(renewal, "expiresAtMs", &l->expires_at_ms);
	l->last_renewed_at_ms = 0;
	jsonx_get_int(renewal, "lastRenewedAtMs", &l->last_renewed_at_ms);
	l->guest_state = dup_str(r, "guestState");
}

static void slice_to_status(const guest *g, json_object *s)
{
	const lease_state *l = g->lease;
	jsonx_add_bool(s, "active", l->renewal == RENEWAL_RENEWING || l->renewal == RENEWAL_FAILING);
	jsonx_add_str(s, "guestState", l->guest_state ? l->guest_state : "unknown");
	json_object *renewal = json_object_new_object();
	jsonx_add_str(renewal, "state", renewal_state_name(l->renewal));
	add_time(renewal, "deadline", l->deadline_ms);
	add_time(renewal, "expiresAt", l->expires_at_ms);
	add_time(renewal, "lastRenewedAt", l->last_renewed_at_ms);
	jsonx_add_int(renewal, "windowMinutes", RENEWAL_WINDOW_MINUTES);
	jsonx_add(s, "renewal", renewal);
	jsonx_add_double(s, "ttlHours", l->ttl_hours);
	add_time(s, "waitingSince", l->waiting_since_ms);
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
    .create = slice_create,
    .destroy = slice_destroy,
    .reserve = slice_reserve,
    .to_record = slice_to_record,
    .from_record = slice_from_record,
    .to_status = slice_to_status,
    .close = slice_close,
};

bool lease_is_live(manager *m, guest *g)
{
	manager_lock(m);
	const lease_state *l = g->lease;
	const char *state = l->guest_state ? l->guest_state : jsonx_get_str(g->lease_document, "state");
	int64_t now = clock_now_ms();
	bool live = state && strcmp(state, "running") == 0 && l->deadline_ms > now &&
	            (l->expires_at_ms == 0 || l->expires_at_ms > now) && g->phase != PHASE_RELEASING &&
	            g->phase != PHASE_FINISHING;
	manager_unlock(m);
	return live;
}

char *lease_guest_state_copy(manager *m, guest *g)
{
	manager_lock(m);
	const char *state = g->lease->guest_state;
	char *copy = strdup(state ? state : "unknown");
	manager_unlock(m);
	return copy;
}
