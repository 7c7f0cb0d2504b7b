/* The backend's word that a lease changed, and lost guests (lease/watch.h). */
#include "lease/watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease/lease_state.h"
#include "lease/renewal.h"
#include "loader/loader.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"

/* host->lease_changed: the guest holding lease `vm` gets a lookup. */
static void on_lease_changed(void *ctx, const char *vm)
{
	session_manager *m = ctx;
	guest *found = NULL;
	session_lock(m);
	for (guest *g = m->guests; g && found == NULL; g = g->next) {
		const char *held = jsonx_get_str(g->lease_document, "vm");
		if (g->phase != PHASE_CLOSED && g->phase != PHASE_UNAVAILABLE && held &&
		    strcmp(held, vm) == 0)
			found = g;
	}
	session_unlock(m);
	if (found) {
		log_info("the backend says the lease of %s (%s) changed; looking it up", found->name, vm);
		lease_renewal_queue_lookup(m, found);
	}
}

void lease_watch_start(session_manager *m)
{
	loader_set_lease_changed(on_lease_changed, m);
}

void lease_watch_stop(void)
{
	loader_set_lease_changed(NULL, NULL);
}

static bool is_lost(const char *state)
{
	return state && strcmp(state, "lost") == 0;
}

void lease_watch_store_observed(session_manager *m, guest *g, json_object *doc)
{
	session_lock(m);
	if (g->phase == PHASE_CLOSED) {
		session_unlock(m);
		json_object_put(doc);
		return;
	}
	bool was_lost = is_lost(g->lease->guest_state);
	lease_renewal_store_confirmed(g, doc, clock_now_ms());
	char *reason = NULL;
	json_object *details = NULL;
	if (is_lost(g->lease->guest_state) && !was_lost) {
		const char *why = jsonx_get_str(g->lease_document, "lostReason");
		reason = strdup(why ? why : "the backend reports the guest lost");
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb,
		              "Lost: %s. The relay never re-creates a lost guest (a new one would be another "
		              "machine); its evidence so far is kept. Release it, and acquire a new guest to "
		              "go on",
		              reason ? reason : "the backend reports the guest lost");
		free(g->last_error);
		g->last_error = strbuf_detach(&sb, NULL);
		details = json_object_new_object();
		jsonx_add_str(details, "vm", jsonx_get_str(g->lease_document, "vm"));
		jsonx_add_str(details, "reason", reason);
		/* Nothing is left to keep alive: a renewal would only fail. */
		if (g->lease->renewal == RENEWAL_RENEWING || g->lease->renewal == RENEWAL_FAILING)
			g->lease->renewal = RENEWAL_STOPPED;
		pthread_cond_broadcast(&m->changed);
	}
	guest_save(g);
	session_unlock(m);
	if (details == NULL)
		return;
	guest_event(m, g, "guest-lost", reason, details);
	log_warning("guest %s is lost: %s; it is not re-created, release it", g->name,
	            reason ? reason : "(no reason)");
	free(reason);
}
