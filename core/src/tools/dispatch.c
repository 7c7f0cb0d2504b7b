/*
 * tools/dispatch.c — where a validated tools/call goes (spec/tools.md §2.1,
 * §2.5): relay_status answers at once; per-guest tools and relay_acquire
 * run in the guest's queue after the shared refusals; the others run on a
 * detached thread. A call that waited behind another is checked again when
 * its turn comes.
 *
 * Also the session's hook table (session/manager.h): the one place where
 * the session reaches up, into the dispatcher, lease/ and delivery/.
 */
#include "tools/dispatch.h"

#include <stdlib.h>

#include "console/console_end.h"
#include "console/console_state.h"
#include "delivery/delivery_state.h"
#include "delivery/downloads.h"
#include "guestio/link.h"
#include "lease/lease_state.h"
#include "lease/lifecycle.h"
#include "lease/reconcile.h"
#include "runs/run_state.h"
#include "tools/tools.h"
#include "util/jsonx.h"

typedef struct tool_job {
	guest_job base;
	session_manager *mgr;
	relay_tool tool;
	json_object *args;
	relay_call *call;
	guest *g;
	bool detached; /* counted in detached_running */
} tool_job;

static tool_handler handler_for(relay_tool tool)
{
	switch (tool) {
	case TOOL_SEARCH: return tool_search;
	case TOOL_PROBE: return tool_probe;
	case TOOL_ACQUISITION_CAPABILITIES: return tool_acquisition_capabilities;
	case TOOL_ACQUIRE: return tool_acquire;
	case TOOL_STAGE: return tool_stage;
	case TOOL_SCRIPT: return tool_script;
	case TOOL_IMAGE: return tool_image;
	case TOOL_EXTRACT: return tool_extract;
	case TOOL_FINISH: return tool_finish;
	case TOOL_RELEASE: return tool_release;
	case TOOL_CONSOLE_RESOLVE: return tool_console_resolve;
	case TOOL_CONSOLE_OPEN: return tool_console_open;
	case TOOL_CONSOLE_CANCEL: return tool_console_cancel;
	case TOOL_STATUS: return tool_status;
	case TOOL_COUNT: break;
	}
	return NULL;
}

static void job_free(tool_job *job)
{
	json_object_put(job->args);
	free(job);
}

static void job_drop(guest_job *base, const char *why);

static tool_result *refuse_guest_locked(session_manager *m, relay_tool tool, const char *name, guest **g_out);

static void job_run(guest_job *base)
{
	tool_job *job = (tool_job *)base;
	session_manager *m = job->mgr;
	tool_result *result = NULL;
	/* A call that waited behind another on its guest is checked again: the
	 * session may be ending, or the guest closed or found unavailable
	 * meanwhile (spec/tools.md §2.1, spec/lifecycle.md §11.2 step 1). */
	if (job->g && job->tool != TOOL_ACQUIRE) {
		session_lock(m);
		bool ending = m->ending;
		guest *g = NULL;
		if (!ending)
			result = refuse_guest_locked(m, job->tool, job->g->name, &g);
		session_unlock(m);
		if (ending) {
			job_drop(base, m->end_reason[0] ? m->end_reason : "the session is ending");
			return;
		}
	}
	if (result == NULL) {
		session_track_call(m, job->call, 0);
		result = handler_for(job->tool)(m, job->g, job->args, job->call);
		session_untrack_call(m, job->call);
	}
	relay_call_complete(job->call, result);
	if (job->detached) {
		session_lock(m);
		m->detached_running--;
		pthread_cond_broadcast(&m->changed);
		session_unlock(m);
	}
	job_free(job);
}

static void job_drop(guest_job *base, const char *why)
{
	tool_job *job = (tool_job *)base;
	if (relay_call_is_cancelled(job->call)) {
		relay_call_complete(job->call, NULL);
	} else {
		tool_result *r =
		    job->g ? guest_error(job->mgr, job->g, NULL, "shutting-down",
		                         "The session is ending (%s); this call on %s did not start and "
		                         "no new operations are accepted",
		                         why, job->g->name)
		           : tool_result_error(NULL, "shutting-down",
		                               "The session is ending (%s); no new operations are accepted",
		                               why);
		relay_call_complete(job->call, r);
	}
	job_free(job);
}

static bool job_cancelled_before_start(const guest_job *base)
{
	const tool_job *job = (const tool_job *)base;
	return relay_call_is_cancelled(job->call);
}

static tool_job *job_new(session_manager *m, relay_tool tool, json_object *args, relay_call *call, guest *g)
{
	tool_job *job = calloc(1, sizeof *job);
	if (job == NULL)
		return NULL;
	job->base.run = job_run;
	job->base.drop = job_drop;
	job->base.cancelled_before_start = job_cancelled_before_start;
	job->mgr = m;
	job->tool = tool;
	job->args = args;
	job->call = call;
	job->g = g;
	return job;
}

/* The shared refusals of a per-guest tool (spec/tools.md §2.1, §2.7), under lock.
 * Returns NULL when the guest may be operated on. */
static tool_result *refuse_guest_locked(session_manager *m, relay_tool tool, const char *name, guest **g_out)
{
	guest *g = session_find_guest(m, name);
	*g_out = g;
	if (tool == TOOL_RELEASE && session_open_guest_count(m) == 0) {
		json_object *s = json_object_new_object();
		jsonx_add_bool(s, "released", false);
		jsonx_add(s, "guestsHeld", json_object_new_array());
		jsonx_add_str(s, "sessionId", m->settings->session_id);
		return tool_result_error(
		    s, "nothing-held",
		    "This session holds no guest, so nothing was released. The session identity belongs to "
		    "the project folder unless MCP_RELAY_SESSION sets it (a second live process on the same "
		    "project takes a fresh one; relay_status shows sessionIdentity); to release a guest of "
		    "another identity, start the server with that identity, or let the backend's lease "
		    "expiry reclaim it.");
	}
	if (g == NULL) {
		char *held = session_open_guest_names(m);
		tool_result *r = tool_result_error(NULL, "unknown-guest",
		                                   "This session has no guest named %s. Guests held: %s. Use "
		                                   "the name relay_acquire returned.",
		                                   name, held && *held ? held : "none");
		free(held);
		return r;
	}
	if (g->phase == PHASE_CLOSED && tool != TOOL_IMAGE) {
		const char *at = jsonx_get_str(g->closed, "at");
		const char *reason = jsonx_get_str(g->closed, "reason");
		return tool_result_error(
		    NULL, "guest-closed",
		    "Guest %s was closed (%s) at %s; its evidence is at %s. Acquire a new guest "
		    "for more work.",
		    name, reason ? reason : "closed", at ? at : "an earlier time",
		    g->evidence_path ? g->evidence_path : "(none)");
	}
	if (g->phase == PHASE_UNAVAILABLE) {
		return tool_result_error(NULL, "guest-unavailable",
		                         "Guest %s could not be taken over at startup: %s", name,
		                         g->last_error ? g->last_error : "its record is not usable");
	}
	return NULL;
}

static void dispatch(session_manager *m, relay_tool tool, json_object *args, relay_call *call)
{
	if (tool == TOOL_STATUS) {
		tool_result *r = tool_status(m, NULL, args, call);
		json_object_put(args);
		relay_call_complete(call, r);
		return;
	}
	session_lock(m);
	if (m->ending) {
		session_unlock(m);
		json_object_put(args);
		relay_call_complete(
		    call, tool_result_error(NULL, "shutting-down",
		                            "The session is ending; no new operations are accepted"));
		return;
	}
	guest *g = NULL;
	tool_result *refusal = NULL;
	relay_outcome reserve = OUTCOME_INIT;
	const char *name = jsonx_get_str(args, "guest");
	bool queued = contract_tool_is_per_guest(tool) || (tool == TOOL_PROBE && name != NULL);
	if (tool == TOOL_ACQUIRE) {
		g = session_reserve_guest(m, args, &reserve);
		queued = g != NULL;
	} else if (queued) {
		refusal = refuse_guest_locked(m, tool, name, &g);
	}
	if (refusal || outcome_failed(&reserve)) {
		session_unlock(m);
		json_object_put(args);
		/* tools_failure takes no lock without a guest. */
		relay_call_complete(call, refusal ? refusal : tools_failure(m, NULL, &reserve));
		return;
	}
	outcome_free(&reserve);
	if (!queued)
		m->detached_running++;
	session_unlock(m);

	tool_job *job = job_new(m, tool, args, call, g);
	if (job == NULL) {
		json_object_put(args);
		relay_call_complete(call,
		                    tool_result_error(NULL, "internal", "out of memory queueing the call"));
		return;
	}
	if (!queued) {
		job->detached = true;
		run_detached(&job->base);
		return;
	}
	if (!queue_push(&g->queue, &job->base))
		job_drop(&job->base, "the guest's queue is closed");
}

/* ---- the session's hooks ------------------------------------------------------ */

static void take_back_guests(session_manager *m, bool migrate_legacy)
{
	if (migrate_legacy)
		lease_reconcile_migrate_legacy(m);
	lease_reconcile_scan(m);
}

/* The rooms' slices of a guest, in the order the session calls them. */
static const guest_rooms rooms = {
    .size = sizeof(guest_rooms),
    .lease = &lease_slice_ops,
    .run = &run_slice_ops,
    .console = &console_slice_ops,
    .delivery = &delivery_slice_ops,
    .link = &gio_link_ops,
};

const guest_rooms *tools_guest_rooms(void)
{
	return &rooms;
}

static const session_hooks relay_hooks = {
    .size = sizeof(session_hooks),
    .dispatch = dispatch,
    .take_back_guests = take_back_guests,
    .end_guests = lease_end_guests,
    .guest_reached = downloads_guest_reached,
    .guest_closing = downloads_shutdown,
    .guest_release_rooms = downloads_free,
    .guest_ending = console_end_with_guest,
    .rooms = &rooms,
};

const session_hooks *tools_session_hooks(void)
{
	return &relay_hooks;
}
