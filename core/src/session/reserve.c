/*
 * The reservation of a new guest for relay_acquire (manager_internal.h): the
 * session lock and the guest limit, the next name of the task, and the
 * guest's folder, owner lock and first record (phase acquiring).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session/manager_internal.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

guest *session_reserve_guest(session_manager *m, json_object *args, relay_outcome *refusal)
{
	const relay_settings *s = m->settings;
	if (m->session_locked_elsewhere) {
		outcome_fail(refusal, "session-locked",
		             "Another mcp-relay process, pid %ld, holds session %s; no guest can be "
		             "acquired under this session identity until it exits",
		             m->session_lock_holder_pid, s->session_id);
		return NULL;
	}
	int open = session_open_guest_count(m);
	if (open >= s->max_guests) {
		char *names = session_open_guest_names(m);
		outcome_fail(refusal, "guest-limit",
		             "This session already holds %d guest%s (%s), the most "
		             "MCP_RELAY_MAX_GUESTS allows; finish or release one before acquiring another.",
		             open, open == 1 ? "" : "s", names ? names : "");
		free(names);
		return NULL;
	}
	const char *task = jsonx_get_str(args, "task");
	int64_t n = 1;
	jsonx_get_int(m->counters, task, &n);
	char name[64];
	/* A name the table holds is never handed out again, even when its
	 * record was unreadable at restart and so moved no counter: reusing it
	 * would overwrite that record. */
	for (;; n++) {
		snprintf(name, sizeof name, "%s-%lld", task, (long long)n);
		if (session_find_guest(m, name) == NULL)
			break;
	}
	jsonx_add_int(m->counters, task, n + 1);
	if (session_save(m) != 0) {
		outcome_fail(refusal, "internal",
		             "cannot record the guest counter in %s/session.json; nothing was acquired",
		             s->session_dir);
		return NULL;
	}

	guest *g = guest_new(m->hooks->rooms);
	if (g == NULL) {
		outcome_fail(refusal, "internal", "out of memory reserving a guest");
		return NULL;
	}
	g->name = strdup(name);
	g->task = strdup(task);
	g->image = strdup(jsonx_get_str(args, "image"));
	g->network = strdup(settings_guest_network_name(s->guest_network));
	g->phase = PHASE_ACQUIRING;
	guest_slices_reserve(g, args);

	char guests_dir[4096];
	snprintf(guests_dir, sizeof guests_dir, "%s/guests/%s", s->session_dir, name);
	g->dir = strdup(guests_dir);
	relay_error err;
	char lock_path[4200];
	snprintf(lock_path, sizeof lock_path, "%s/owner.lock", guests_dir);
	if (fs_mkdir_p(guests_dir, 0700, &err) != RELAY_OK ||
	    (g->owner_lock_fd = lock_file_take(lock_path, NULL)) < 0) {
		outcome_fail(refusal, "internal", "cannot create the ownership record of %s in %s", name,
		             guests_dir);
		guest_free(g);
		return NULL;
	}
	guest_save(g);
	guest **tail = &m->guests;
	while (*tail)
		tail = &(*tail)->next;
	*tail = g;
	pthread_cond_broadcast(&m->changed);
	return g;
}
