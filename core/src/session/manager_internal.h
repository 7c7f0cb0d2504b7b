/*
 * session/manager_internal.h — what the session shares with the rooms above
 * it (guestio/, delivery/, lease/, runs/, console/, catalog/, tools/): the
 * manager struct, its lock, guest lookup, the session files, calls being
 * worked on, internal work on a guest's queue, and the reservation of a new
 * guest. Nothing here builds an MCP result: failures are relay_outcome
 * (util/outcome.h).
 */
#ifndef RELAY_SESSION_MANAGER_INTERNAL_H
#define RELAY_SESSION_MANAGER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "profile/backends.h"
#include "profile/settings.h"
#include "registry/registry.h"
#include "session/guest.h"
#include "session/manager.h"
#include "util/outcome.h"

struct session_manager {
	const relay_settings *settings; /* borrowed */
	relay_backends *backends;       /* borrowed */
	const session_hooks *hooks;     /* borrowed: the rooms above (manager.h) */

	/* `lock` guards the guest list, every guest's fields, the counters and
	 * the session flags below. Never held across backend or guest I/O. */
	pthread_mutex_t lock;
	pthread_cond_t changed; /* signalled when guests or detached work change */
	guest *guests;          /* every guest of the session, acquisition order */
	json_object *counters;  /* {"<task>": next n} (session.json) */
	int64_t session_created_at_ms;

	int session_lock_fd; /* flock on session.lock, -1 when not held */
	bool session_locked_elsewhere;
	long session_lock_holder_pid;

	bool ending;          /* the session end has begun: no new work */
	bool hurry;           /* a second signal: skip the grace period */
	int detached_running; /* tools running outside guest queues */
	pthread_t startup_thread;
	bool startup_thread_started;
	bool startup_done; /* backends loaded and the session lock taken or given up */

	/* Lifecycle state (lifecycle.h), under `lock`. */
	registry_target registry;     /* the task registry in use, chosen at creation */
	bool renewal_started;         /* the renewal scheduler thread runs */
	bool renewal_halted;          /* the session is ending: no new beats */
	int beats_running;            /* beat threads in flight */
	struct tracked_call *tracked; /* calls running now: cancelled at the grace deadline */
	bool watcher_started;         /* the call-deadline watcher thread runs */
	char end_reason[64];          /* why the session ended ("stdin-closed", ...) */
};

/* A call being worked on (a tools/call, or an internal call of the session
 * itself), with an optional real-time limit after which the watcher cancels
 * it. */
typedef struct tracked_call {
	relay_call *call;
	int64_t deadline_mono_ms; /* 0: no limit */
	struct tracked_call *next;
} tracked_call;

void session_lock(session_manager *m);
void session_unlock(session_manager *m);

/* The guest with that name (closed ones included), or NULL. Under lock. */
guest *session_find_guest(session_manager *m, const char *name);
/* Guests that are not closed. Under lock. */
int session_open_guest_count(session_manager *m);
/* "a-1, b-1" of the open guests (malloc'd). Under lock. */
char *session_open_guest_names(session_manager *m);
/* JSON array of open guest names. Under lock. */
json_object *session_open_guest_names_json(session_manager *m);

/* Waits until the backends are loaded (startup runs in the background). */
void session_wait_startup(session_manager *m);

/* Writes session.json durably (counters). Under lock. 0 or -1. */
int session_save(session_manager *m);

/* The relay_status object (spec/lifecycle.md §7). Under lock. */
json_object *session_status_json(session_manager *m);

/* Records lastError (under lock) and saves the record. Call without the lock. */
void guest_set_last_error(session_manager *m, guest *g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Persists the guest's record (takes the lock itself). */
void guest_persist(session_manager *m, guest *g);

/* Closes a guest: phase closed with {at, reason, evidencePath}, the owner
 * lock released, the record saved. Call without the lock. */
void guest_close(session_manager *m, guest *g, const char *reason);

/* The lease document of a guest as compact JSON text (malloc'd), or NULL. */
char *guest_lease_text(session_manager *m, guest *g);

/* Takes the flock at `path` (O_RDWR|O_CREAT|O_NOFOLLOW|O_CLOEXEC, 0600,
 * LOCK_EX|LOCK_NB) and writes our pid into it. Returns the fd, or -1 with
 * the holder's pid in *holder_pid_out (0 when unknown) when held elsewhere,
 * or -2 on another error. */
int lock_file_take(const char *path, long *holder_pid_out);

/* Calls being worked on. Track before the work starts and untrack before
 * the call is completed; `timeout_ms` > 0 cancels it after that much real
 * time. Take the lock themselves. */
void session_track_call(session_manager *m, relay_call *call, int64_t timeout_ms);
void session_untrack_call(session_manager *m, relay_call *call);
/* Cancels every tracked call (the grace deadline). Returns how many. */
int session_cancel_tracked(session_manager *m);

/* An internal call (mcp/call.h) tracked with `timeout_ms` (0: none), for
 * work the session starts by itself; end it with session_internal_call_done.
 * NULL when out of memory (work then runs uncancellable with a NULL call). */
relay_call *session_internal_call(session_manager *m, int64_t timeout_ms);
void session_internal_call_done(session_manager *m, relay_call *call);

/* Work the session queues on a guest by itself (reconciliation, a lookup
 * after a failed beat, the release at the end of the session). It runs in
 * order with the guest's calls, with an internal call limited to
 * `timeout_ms` (0: none). `ctx` is handed over: `ctx_free` (may be NULL) is
 * called after the work ran or when it was dropped. Returns false when the
 * queue no longer takes work (ctx freed). */
typedef void (*session_work_fn)(session_manager *m, guest *g, relay_call *call, void *ctx);
bool session_queue_internal(session_manager *m, guest *g, session_work_fn work, void *ctx,
                            void (*ctx_free)(void *), int64_t timeout_ms);

/* True while any tool or internal work runs or waits, on a guest queue or
 * detached. Takes the lock itself. */
bool session_busy(session_manager *m);

/* The guests of the session, in acquisition order (malloc'd; *n_out of
 * them). Guests are never freed before session_destroy(), so the pointers
 * stay valid. Takes the lock itself. */
guest **session_snapshot_guests(session_manager *m, size_t *n_out);

/* Reserves a new guest for relay_acquire under the lock (session/reserve.c):
 * checks the session lock and the limit, takes the next name, creates
 * guests/<name>/ with its owner lock and a record in phase acquiring.
 * Returns the guest, or NULL with the refusal in *refusal (session-locked,
 * guest-limit, internal). `args` are relay_acquire's validated arguments. */
guest *session_reserve_guest(session_manager *m, json_object *args, relay_outcome *refusal);

#endif
