/*
 * The session (manager.h): guest table, session files and lock, calls being
 * worked on, internal work on guest queues, and the start and end of the
 * session. Dispatching tools, taking back guests and ending them belong to
 * the rooms above, reached through m->hooks.
 */
#include "session/manager.h"

#include "egress/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loader/loader.h"
#include "profile/environment.h"
#include "session/manager_internal.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

void session_lock(session_manager *m)
{
	pthread_mutex_lock(&m->lock);
}

void session_unlock(session_manager *m)
{
	pthread_mutex_unlock(&m->lock);
}

guest *session_find_guest(session_manager *m, const char *name)
{
	for (guest *g = m->guests; g; g = g->next)
		if (strcmp(g->name, name) == 0)
			return g;
	return NULL;
}

int session_open_guest_count(session_manager *m)
{
	int n = 0;
	for (guest *g = m->guests; g; g = g->next)
		if (g->phase != PHASE_CLOSED)
			n++;
	return n;
}

char *session_open_guest_names(session_manager *m)
{
	strbuf sb = STRBUF_INIT;
	for (guest *g = m->guests; g; g = g->next) {
		if (g->phase == PHASE_CLOSED)
			continue;
		if (sb.len)
			strbuf_puts(&sb, ", ");
		strbuf_puts(&sb, g->name);
	}
	return strbuf_detach(&sb, NULL);
}

json_object *session_open_guest_names_json(session_manager *m)
{
	json_object *names = json_object_new_array();
	for (guest *g = m->guests; g; g = g->next)
		if (g->phase != PHASE_CLOSED)
			json_object_array_add(names, json_object_new_string(g->name));
	return names;
}

int lock_file_take(const char *path, long *holder_pid_out)
{
	if (holder_pid_out)
		*holder_pid_out = 0;
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -2;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd); /* a lock file must be a regular file (spec/lifecycle.md §9) */
		return -2;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		if (holder_pid_out) {
			char buf[32] = "";
			ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
			if (n > 0) {
				buf[n] = '\0';
				*holder_pid_out = strtol(buf, NULL, 10);
			}
		}
		close(fd);
		return e == EWOULDBLOCK ? -1 : -2;
	}
	char pid[32];
	int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) == 0) {
		ssize_t ignored = pwrite(fd, pid, (size_t)len, 0);
		(void)ignored;
	}
	return fd;
}

int session_save(session_manager *m)
{
	json_object *session = json_object_new_object();
	jsonx_add_int(session, "schemaVersion", 1);
	jsonx_add_str(session, "sessionId", m->settings->session_id);
	char created[21];
	time_format_iso_seconds(m->session_created_at_ms, created);
	jsonx_add_str(session, "createdAt", created);
	jsonx_add(session, "counters", json_object_get(m->counters));
	char *path = fs_path_join(m->settings->session_dir, "session.json");
	relay_error err;
	int rc = 0;
	if (path == NULL || fs_write_json_durable(path, session, &err) != RELAY_OK) {
		log_error("cannot write session.json: %s", path ? err.message : "out of memory");
		rc = -1;
	}
	free(path);
	json_object_put(session);
	return rc;
}

/* Reads counters from an existing session.json (a restart with the same
 * MCP_RELAY_SESSION continues the names). */
static void load_session(session_manager *m)
{
	char *path = fs_path_join(m->settings->session_dir, "session.json");
	json_object *session = NULL;
	relay_error err;
	if (path && fs_read_json(path, 1 << 20, &session, &err) == RELAY_OK && session) {
		json_object *counters = jsonx_get_obj(session, "counters");
		if (counters) {
			json_object_put(m->counters);
			m->counters = json_object_get(counters);
		}
		const char *created = jsonx_get_str(session, "createdAt");
		int64_t ms;
		if (created && time_parse_iso(created, &ms))
			m->session_created_at_ms = ms;
	}
	json_object_put(session);
	free(path);
}

/* Takes session.lock; when another process holds it, startup retries in the
 * background (spec/lifecycle.md §8 step 1). Under the lock or before threads. */
static bool take_session_lock(session_manager *m)
{
	char *path = fs_path_join(m->settings->session_dir, "session.lock");
	long holder = 0;
	int fd = path ? lock_file_take(path, &holder) : -2;
	free(path);
	if (fd >= 0) {
		m->session_lock_fd = fd;
		m->session_locked_elsewhere = false;
		return true;
	}
	m->session_locked_elsewhere = fd == -1;
	m->session_lock_holder_pid = holder;
	return false;
}

/* ---- calls being worked on, and their deadlines ------------------------------- */

void session_track_call(session_manager *m, relay_call *call, int64_t timeout_ms)
{
	if (call == NULL)
		return;
	tracked_call *t = calloc(1, sizeof *t);
	if (t == NULL)
		return; /* untracked: it cannot be cancelled at the grace deadline */
	t->call = call;
	t->deadline_mono_ms = timeout_ms > 0 ? clock_monotonic_ms() + timeout_ms : 0;
	session_lock(m);
	t->next = m->tracked;
	m->tracked = t;
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
}

void session_untrack_call(session_manager *m, relay_call *call)
{
	if (call == NULL)
		return;
	session_lock(m);
	for (tracked_call **p = &m->tracked; *p; p = &(*p)->next) {
		if ((*p)->call == call) {
			tracked_call *t = *p;
			*p = t->next;
			free(t);
			break;
		}
	}
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
}

int session_cancel_tracked(session_manager *m)
{
	int n = 0;
	session_lock(m);
	for (tracked_call *t = m->tracked; t; t = t->next) {
		if (!relay_call_is_cancelled(t->call)) {
			relay_call_cancel(t->call);
			n++;
		}
	}
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	return n;
}

/* Cancels tracked calls whose real-time limit passed. One thread per
 * manager; it lives as long as the process. */
static void *watcher_main(void *arg)
{
	session_manager *m = arg;
	session_lock(m);
	for (;;) {
		int64_t now = clock_monotonic_ms();
		int64_t next = now + 1000;
		for (tracked_call *t = m->tracked; t; t = t->next) {
			if (t->deadline_mono_ms == 0 || relay_call_is_cancelled(t->call))
				continue;
			if (t->deadline_mono_ms <= now)
				relay_call_cancel(t->call);
			else if (t->deadline_mono_ms < next)
				next = t->deadline_mono_ms;
		}
		int64_t wait_ms = next - now;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += wait_ms / 1000;
		ts.tv_nsec += (wait_ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&m->changed, &m->lock, &ts);
	}
	return NULL;
}

relay_call *session_internal_call(session_manager *m, int64_t timeout_ms)
{
	relay_call *call = relay_call_new_internal();
	session_track_call(m, call, timeout_ms);
	return call;
}

void session_internal_call_done(session_manager *m, relay_call *call)
{
	if (call == NULL)
		return;
	session_untrack_call(m, call);
	relay_call_complete(call, NULL);
}

/* ---- internal work on a guest's queue ------------------------------------------- */

typedef struct internal_job {
	guest_job base;
	session_manager *mgr;
	guest *g;
	session_work_fn work;
	void *ctx;
	void (*ctx_free)(void *);
	int64_t timeout_ms;
} internal_job;

static void internal_job_free(internal_job *job)
{
	if (job->ctx_free)
		job->ctx_free(job->ctx);
	free(job);
}

static void internal_job_run(guest_job *base)
{
	internal_job *job = (internal_job *)base;
	relay_call *call = session_internal_call(job->mgr, job->timeout_ms);
	job->work(job->mgr, job->g, call, job->ctx);
	session_internal_call_done(job->mgr, call);
	internal_job_free(job);
}

static void internal_job_drop(guest_job *base, const char *why)
{
	(void)why;
	internal_job_free((internal_job *)base);
}

bool session_queue_internal(session_manager *m, guest *g, session_work_fn work, void *ctx,
                            void (*ctx_free)(void *), int64_t timeout_ms)
{
	internal_job *job = calloc(1, sizeof *job);
	if (job == NULL) {
		if (ctx_free)
			ctx_free(ctx);
		return false;
	}
	*job = (internal_job){.base = {.run = internal_job_run, .drop = internal_job_drop},
	                      .mgr = m,
	                      .g = g,
	                      .work = work,
	                      .ctx = ctx,
	                      .ctx_free = ctx_free,
	                      .timeout_ms = timeout_ms};
	if (!queue_push(&g->queue, &job->base)) {
		internal_job_free(job);
		return false;
	}
	return true;
}

guest **session_snapshot_guests(session_manager *m, size_t *n_out)
{
	session_lock(m);
	size_t n = 0;
	for (guest *g = m->guests; g; g = g->next)
		n++;
	guest **list = calloc(n ? n : 1, sizeof *list);
	size_t i = 0;
	for (guest *g = m->guests; g && list && i < n; g = g->next)
		list[i++] = g;
	session_unlock(m);
	*n_out = list ? i : 0;
	return list;
}

bool session_busy(session_manager *m)
{
	session_lock(m);
	bool busy = m->detached_running > 0;
	for (guest *g = m->guests; g && !busy; g = g->next)
		busy = queue_active(&g->queue);
	session_unlock(m);
	return busy;
}

/* ---- startup ---------------------------------------------------------------------- */

/* True when guests found on disk need the backends for reconciliation. */
static bool guests_on_disk(session_manager *m)
{
	session_lock(m);
	bool any = false;
	for (guest *g = m->guests; g && !any; g = g->next)
		any = g->phase != PHASE_CLOSED;
	session_unlock(m);
	return any;
}

static void *startup_main(void *arg)
{
	session_manager *m = arg;
	/* Plugins load now only when earlier guests must be taken back;
	 * otherwise on the first call that needs a backend. */
	if (guests_on_disk(m))
		backends_ensure_loaded(m->backends, m->settings);
	session_lock(m);
	bool waiting = m->session_locked_elsewhere;
	session_unlock(m);
	if (waiting) {
		/* Normal while an earlier process is in its shutdown grace. */
		int64_t give_up = clock_monotonic_ms() + m->settings->shutdown_grace_ms + 10000;
		bool taken = false;
		while (clock_monotonic_ms() < give_up) {
			session_lock(m);
			bool ending = m->ending;
			taken = !ending && take_session_lock(m);
			session_unlock(m);
			if (taken || ending)
				break;
			sleep(1);
		}
		if (taken) {
			/* The earlier process may have moved the counters or left
			 * guests we have not listed yet. */
			session_lock(m);
			load_session(m);
			session_unlock(m);
			m->hooks->take_back_guests(m, true);
		} else {
			log_error("another mcp-relay process, pid %ld, holds session %s; its guests stay "
			          "unavailable "
			          "here and relay_acquire is refused until it exits",
			          m->session_lock_holder_pid, m->settings->session_id);
		}
	}
	session_lock(m);
	m->startup_done = true;
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	return NULL;
}

void session_wait_startup(session_manager *m)
{
	session_lock(m);
	while (!m->startup_done)
		pthread_cond_wait(&m->changed, &m->lock);
	session_unlock(m);
	backends_ensure_loaded(m->backends, m->settings);
}

/* True when the session.lock of the current identity says its holder's
 * session is ending (mark_session_lock_ending). */
static bool session_lock_ending(session_manager *m)
{
	char *path = fs_path_join(m->settings->session_dir, "session.lock");
	bool ending = false;
	int fd = path ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
	if (fd >= 0) {
		char buf[48] = "";
		ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
		if (n > 0) {
			buf[n] = '\0';
			ending = strstr(buf, "ending") != NULL;
		}
		close(fd);
	}
	free(path);
	return ending;
}

/* The session lock, and the identity it settles (spec/lifecycle.md §2): a
 * project's identity held by another live process is replaced by a fresh
 * one, said on stderr and in relay_status; one whose holder is ending (a
 * restart) is waited for in the background, like a fixed MCP_RELAY_SESSION.
 * A holder gets HOLDER_SETTLE_MS to say it is ending, since a host restarting
 * a server starts the new one as it closes the old. Before threads. */
#define HOLDER_SETTLE_MS 2000
static int settle_session(session_manager *m, relay_settings *settings, char *errbuf, size_t errlen)
{
	if (take_session_lock(m) || !m->session_locked_elsewhere ||
	    settings->session_source != SESSION_FROM_PROJECT)
		return 0;
	int64_t give_up = clock_monotonic_ms() + HOLDER_SETTLE_MS;
	for (;;) {
		if (session_lock_ending(m))
			return 0;
		if (clock_monotonic_ms() >= give_up)
			break;
		struct timespec pause = {0, 100 * 1000000L};
		nanosleep(&pause, NULL);
		if (take_session_lock(m) || !m->session_locked_elsewhere)
			return 0;
	}
	if (settings_use_fresh_identity(settings, m->session_lock_holder_pid) != 0) {
		snprintf(errbuf, errlen, "out of memory choosing a fresh session identity");
		return -1;
	}
	log_warning("%s", settings->session_note);
	relay_error err;
	if (fs_mkdir_p(settings->session_dir, 0700, &err) != RELAY_OK) {
		snprintf(errbuf, errlen, "cannot create the session folder: %s", err.message);
		return -1;
	}
	take_session_lock(m);
	return 0;
}

static bool hooks_complete(const session_hooks *h)
{
	return h && h->size >= sizeof *h && h->dispatch && h->take_back_guests && h->end_guests &&
	       h->guest_reached && h->guest_closing && h->guest_release_rooms && h->guest_ending &&
	       h->rooms && h->rooms->size == sizeof(guest_rooms);
}

session_manager *session_create(relay_settings *settings, const relay_backends *backends,
                                const session_hooks *hooks, char *errbuf, size_t errlen)
{
	if (!hooks_complete(hooks)) {
		snprintf(errbuf, errlen,
		         "the session was created without a complete hook table (session_hooks)");
		return NULL;
	}
	session_manager *m = calloc(1, sizeof *m);
	if (m == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	m->hooks = hooks;
	m->settings = settings;
	m->backends = (relay_backends *)backends;
	m->session_lock_fd = -1;
	m->counters = json_object_new_object();
	m->session_created_at_ms = clock_now_ms();
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->changed, NULL);
	relay_error err;
	if (fs_mkdir_p(settings->session_dir, 0700, &err) != RELAY_OK) {
		snprintf(errbuf, errlen, "cannot create the session folder: %s", err.message);
		json_object_put(m->counters);
		free(m);
		return NULL;
	}
	/* The registry: the environment's managed file, MCP_RELAY_REGISTRY, a
	 * valid ~/AGENTS.md VM table, or the managed one (spec/lifecycle.md §10). */
	registry_resolve(settings->registry_path, settings->environment != NULL, getenv("HOME"),
	                 settings->state_root, &m->registry);
	if (settle_session(m, settings, errbuf, errlen) != 0) {
		registry_target_free(&m->registry);
		json_object_put(m->counters);
		free(m);
		return NULL;
	}
	load_session(m);
	/* Guests found on disk are listed at once (phase reconciling) so that
	 * status shows them and calls on them wait; their reconcile jobs wait
	 * for the session lock. */
	m->hooks->take_back_guests(m, m->session_lock_fd >= 0);
	pthread_t watcher;
	if (pthread_create(&watcher, NULL, watcher_main, m) == 0) {
		pthread_detach(watcher);
		m->watcher_started = true;
	}
	if (pthread_create(&m->startup_thread, NULL, startup_main, m) == 0)
		m->startup_thread_started = true;
	else
		startup_main(m);
	return m;
}

/* ---- dispatch ---------------------------------------------------------------- */

void session_dispatch(session_manager *m, relay_tool tool, json_object *args, relay_call *call)
{
	m->hooks->dispatch(m, tool, args, call);
}

/* ---- answers shared by the tools ------------------------------------------------- */

void guest_set_last_error(session_manager *m, guest *g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	/* Stored as UTF-8 (a guest's bytes may be in it): every relay_status
	 * repeats it (spec/tools.md §5.3). */
	char *text = strbuf_ok(&sb) ? utf8_sanitize(sb.data, sb.len, NULL) : NULL;
	strbuf_free(&sb);
	session_lock(m);
	free(g->last_error);
	g->last_error = text;
	guest_save(g);
	session_unlock(m);
}

void guest_persist(session_manager *m, guest *g)
{
	session_lock(m);
	guest_save(g);
	session_unlock(m);
}

void guest_close(session_manager *m, guest *g, const char *reason)
{
	m->hooks->guest_closing(m, g); /* nothing more is written for a closed guest */
	session_lock(m);
	g->phase = PHASE_CLOSED;
	guest_slices_close(g);
	json_object_put(g->closed);
	g->closed = json_object_new_object();
	char at[21];
	time_format_iso_seconds(clock_now_ms(), at);
	jsonx_add_str(g->closed, "at", at);
	jsonx_add_str(g->closed, "reason", reason);
	jsonx_add_str(g->closed, "evidencePath", g->evidence_path);
	guest_save(g);
	if (g->owner_lock_fd >= 0) {
		close(g->owner_lock_fd);
		g->owner_lock_fd = -1;
	}
	struct egress_proxy *egress = g->egress;
	g->egress = NULL;
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	egress_proxy_stop(egress); /* the guest's 127.0.0.1:3128 and :53 close with it */
}

char *guest_lease_text(session_manager *m, guest *g)
{
	session_lock(m);
	char *text = g->lease_document ? jsonx_to_string(g->lease_document, 0) : NULL;
	session_unlock(m);
	return text;
}

/* ---- the end of the session -------------------------------------------------------- */

/* Appends " ending" to the pid in session.lock, so that a server starting
 * on the same project meanwhile waits for this one instead of taking a
 * fresh identity (spec/lifecycle.md §2, §8 step 1). Under the lock (the startup
 * thread may take session_lock_fd meanwhile). */
static void mark_session_lock_ending(session_manager *m)
{
	if (m->session_lock_fd < 0)
		return;
	char text[48];
	int len = snprintf(text, sizeof text, "%ld ending\n", (long)getpid());
	if (ftruncate(m->session_lock_fd, 0) == 0) {
		ssize_t ignored = pwrite(m->session_lock_fd, text, (size_t)len, 0);
		(void)ignored;
	}
}

int session_end(session_manager *m, const char *reason)
{
	session_lock(m);
	bool already = m->ending;
	m->ending = true;
	if (!already) {
		snprintf(m->end_reason, sizeof m->end_reason, "%s", reason ? reason : "ended");
		mark_session_lock_ending(m);
	}
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
	if (already)
		return 0;
	/* The hook (lease/session_end.c): stop taking work, let running work finish within the
	 * grace period, then pause or release every guest. */
	return m->hooks->end_guests(m, reason);
}

void session_hurry_end(session_manager *m)
{
	session_lock(m);
	m->hurry = true;
	pthread_cond_broadcast(&m->changed);
	session_unlock(m);
}

void session_destroy(session_manager *m)
{
	if (m == NULL)
		return;
	loader_forget_lease_changed(m); /* no host->lease_changed reaches it from here on */
	for (guest *g = m->guests; g;) {
		guest *next = g->next;
		queue_stop(&g->queue, "the relay is exiting");
		m->hooks->guest_release_rooms(g);
		guest_free(g);
		g = next;
	}
	json_object_put(m->counters);
	registry_target_free(&m->registry);
	if (m->session_lock_fd >= 0)
		close(m->session_lock_fd);
	free(m);
}
