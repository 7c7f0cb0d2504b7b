/*
 * The relay_status object (spec/lifecycle.md §7, spec/tools.md §3.14), from memory:
 * the session's guests, closed guests, backends, settings and identity.
 */
#include "profile/environment.h"
#include "session/manager_internal.h"
#include "util/jsonx.h"

json_object *session_status_json(session_manager *m)
{
	const relay_settings *s = m->settings;
	json_object *status = json_object_new_object();
	json_object *guests = json_object_new_array();
	json_object *closed = json_object_new_array();
	bool active = false;
	for (guest *g = m->guests; g; g = g->next) {
		if (g->phase == PHASE_CLOSED) {
			json_object *c = json_object_new_object();
			jsonx_add_str(c, "guest", g->name);
			jsonx_add_str(c, "reason", jsonx_get_str(g->closed, "reason"));
			jsonx_add_str(c, "at", jsonx_get_str(g->closed, "at"));
			jsonx_add_str(c, "evidencePath", jsonx_get_str(g->closed, "evidencePath"));
			json_object_array_add(closed, c);
			continue;
		}
		/* A guest being renewed says so in its entry (lease/lease_state.c). */
		json_object *entry = guest_status_json(g);
		bool renewing = false;
		if (jsonx_get_bool(entry, "active", &renewing) && renewing)
			active = true;
		json_object_array_add(guests, entry);
	}
	jsonx_add_bool(status, "active", active);
	jsonx_add_str(status, "sessionId", s->session_id);
	jsonx_add_int(status, "maxGuests", s->max_guests);
	jsonx_add(status, "guests", guests);
	jsonx_add(status, "closedGuests", closed);
	jsonx_add_str(status, "project", s->project);
	json_object *backend = json_object_new_object();
	for (int i = 0; i < SLOT_COUNT; i++)
		jsonx_add_str(backend, backends_slot_name((backend_slot)i),
		              backends_display_name(m->backends, (backend_slot)i));
	jsonx_add(status, "backend", backend);
	bool has_service = backends_uses_service(m->backends, SLOT_MACHINE);
	jsonx_add_str(status, "service", has_service ? s->service_url : NULL);
	if (s->environment) {
		json_object *env = json_object_new_object();
		jsonx_add_str(env, "id", environment_id(s->environment));
		jsonx_add_str(env, "fingerprint", environment_fingerprint(s->environment));
		jsonx_add_str(env, "file", environment_file(s->environment));
		jsonx_add(status, "environment", env);
	} else {
		jsonx_add_null(status, "environment");
	}
	jsonx_add_str(status, "onExit", settings_on_exit_name(s->on_exit));
	jsonx_add_str(status, "guestNetwork", settings_guest_network_name(s->guest_network));
	jsonx_add_int(status, "capacityWaitSeconds", s->capacity_wait_s);
	jsonx_add_str(status, "stateDirectory", s->session_dir);
	json_object *identity = json_object_new_object();
	jsonx_add_str(identity, "source", settings_session_source_name(s->session_source));
	jsonx_add_str(identity, "note", s->session_note);
	jsonx_add(status, "sessionIdentity", identity);
	return status;
}
