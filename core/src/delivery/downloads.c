/*
 * Background step downloads (downloads.h; spec/evidence.md §5, spec/lifecycle.md §7).
 *
 * Each guest has one queue with one worker thread, started with the first
 * job. The worker takes the oldest job (or the one relay_image moved to the
 * front), runs it with an internal call limited to 90 s of real time (the
 * session's call watcher cancels it at the deadline), and publishes the
 * counters into guest->delivery->counters.
 *
 * Locking: q->lock guards the queue; the manager's lock is taken inside it
 * (never the other way round) to publish counters. No lock is held across
 * guest I/O.
 */
#include "delivery/downloads.h"
#include "delivery/download_job.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "call/call.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

typedef enum dl_state { DL_OPEN = 0, DL_CLOSING, DL_CLOSED } dl_state;

static const char *const state_names[] = {"open", "closing", "closed"};

struct downloads_queue {
	session_manager *m;
	guest *g;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	dl_job *head, *tail; /* not yet started, oldest first (a relay_image pick goes first) */
	size_t queued;
	dl_job *running;
	relay_call *running_call; /* the internal call of the running job */
	bool aborting;            /* the running job was aborted (shutdown or a cancelled close) */
	bool paused;
	dl_state state;
	bool stopping; /* the worker exits */
	bool thread_started;
	pthread_t thread;
	int64_t downloaded, failed, cancelled, coalesced;
};

/* True on the download worker threads: their transport use is not an
 * operation that lifts a pause. Thread-local, so no lock. */
static __thread bool in_download_worker;

/* ---- jobs and counters -------------------------------------------------------------- */

static void job_unref(dl_job *job)
{
	if (job && --job->refs == 0) {
		free(job->execution_id);
		free(job->evidence);
		json_object_put(job->receipt);
		free(job);
	}
}

/* Publishes the counters into guest->delivery->counters. Under q->lock. */
static void publish(downloads_queue *q)
{
	json_object *d = json_object_new_object();
	jsonx_add_int(d, "queued", (int64_t)q->queued);
	jsonx_add_int(d, "inFlight", q->running ? 1 : 0);
	jsonx_add_int(d, "downloaded", q->downloaded);
	jsonx_add_int(d, "failed", q->failed);
	jsonx_add_int(d, "cancelled", q->cancelled);
	jsonx_add_int(d, "coalesced", q->coalesced);
	jsonx_add_bool(d, "paused", q->paused);
	jsonx_add_str(d, "state", state_names[q->state]);
	slice_lock(q->g->delivery);
	json_object_put(q->g->delivery->counters);
	q->g->delivery->counters = d;
	slice_unlock(q->g->delivery);
	pthread_cond_broadcast(&q->changed);
}

static void count_end(downloads_queue *q, const char *status)
{
	if (strcmp(status, "downloaded") == 0)
		q->downloaded++;
	else if (strcmp(status, "coalesced") == 0)
		q->coalesced++;
	else if (strcmp(status, "cancelled") == 0)
		q->cancelled++;
	else
		q->failed++;
}

static void *worker_main(void *arg);

/* A private copy of a JSON value (json_object_deep_copy with a fallback
 * through text for old json-c versions). */
static json_object *json_object_deep_copy_any(const json_object *value)
{
	char *text = jsonx_to_string(value, 0);
	json_object *copy = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	return copy;
}

/* The guest's queue, created on first use (counters continue those of the
 * record). The session's lock for the phase, the slice's for the rest. */
static downloads_queue *queue_of(session_manager *m, guest *g)
{
	session_lock(m);
	slice_lock(g->delivery);
	downloads_queue *q = g->delivery->queue;
	if (q == NULL) {
		q = calloc(1, sizeof *q);
		if (q) {
			q->m = m;
			q->g = g;
			pthread_mutex_init(&q->lock, NULL);
			pthread_cond_init(&q->changed, NULL);
			jsonx_get_int(g->delivery->counters, "downloaded", &q->downloaded);
			jsonx_get_int(g->delivery->counters, "failed", &q->failed);
			jsonx_get_int(g->delivery->counters, "cancelled", &q->cancelled);
			jsonx_get_int(g->delivery->counters, "coalesced", &q->coalesced);
			const char *state = jsonx_get_str(g->delivery->counters, "state");
			q->state = state && strcmp(state, "closed") == 0 && g->phase == PHASE_CLOSED
			               ? DL_CLOSED
			               : DL_OPEN;
			g->delivery->queue = q;
		}
	}
	slice_unlock(g->delivery);
	session_unlock(m);
	return q;
}

/* The guest's queue if it has one (NULL otherwise), under the slice's lock. */
static downloads_queue *queue_if_any(guest *g)
{
	slice_lock(g->delivery);
	downloads_queue *q = g->delivery->queue;
	slice_unlock(g->delivery);
	return q;
}

/* Starts the worker when it is not running. Under q->lock. */
static void ensure_worker(downloads_queue *q)
{
	if (q->thread_started || q->stopping)
		return;
	if (pthread_create(&q->thread, NULL, worker_main, q) == 0)
		q->thread_started = true;
	else
		log_error("guest %s: cannot start the step download worker", q->g->name);
}

/* Whether the running job was aborted (shutdown or a cancelled close),
 * read under q->lock for download_job_run(). */
static bool queue_aborting(void *ctx)
{
	downloads_queue *q = ctx;
	pthread_mutex_lock(&q->lock);
	bool aborted = q->aborting;
	pthread_mutex_unlock(&q->lock);
	return aborted;
}

static void *worker_main(void *arg)
{
	downloads_queue *q = arg;
	in_download_worker = true;
	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (!q->stopping && (q->head == NULL || q->paused || q->state != DL_OPEN))
			pthread_cond_wait(&q->changed, &q->lock);
		if (q->stopping)
			break;
		dl_job *job = q->head;
		q->head = job->next;
		if (q->head == NULL)
			q->tail = NULL;
		job->next = NULL;
		q->queued--;
		q->running = job;
		q->aborting = false;
		relay_call *call = session_internal_call(q->m, DOWNLOADS_DEADLINE_MS);
		q->running_call = call;
		publish(q);
		pthread_mutex_unlock(&q->lock);

		bool transient = false;
		/* One commit point per step download (docs/runs.md, "Durability"):
		 * its pulled records, host/steps/<id> and its download record are
		 * made durable together with one syncfs when it ends; until then a
		 * loss of power only costs a download the restarted relay does again
		 * (its record is not durable either). */
		bool group = fs_sync_group_begin();
		const char *status = download_job_run(q->m, q->g, job, call, queue_aborting, q, &transient);
		relay_error serr;
		if (fs_sync_group_end(group, &serr) != RELAY_OK)
			log_error("guest %s: the step download of %s was not made durable: %s", q->g->name,
			          job->execution_id, serr.message);

		pthread_mutex_lock(&q->lock);
		q->running_call = NULL;
		session_internal_call_done(q->m, call);
		q->running = NULL;
		job->ended = true;
		job->end_status = status;
		count_end(q, status);
		if (transient && strcmp(status, "failed") == 0) {
			q->paused = true;
			log_info("guest %s: step downloads paused after a transient failure until the next "
			         "operation reaches the guest",
			         q->g->name);
		}
		job_unref(job);
		publish(q);
	}
	q->thread_started = false;
	pthread_cond_broadcast(&q->changed);
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* ---- the API ----------------------------------------------------------------------- */

void downloads_enqueue_step(session_manager *m, guest *g, const char *execution_id,
                            const gio_receipt *receipt, const char *receipt_sha256, int64_t receipt_bytes)
{
	downloads_queue *q = queue_of(m, g);
	session_lock(m);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	if (q == NULL || evidence == NULL || execution_id == NULL) {
		free(evidence);
		log_error("guest %s: cannot queue the step download of %s", g->name,
		          execution_id ? execution_id : "(none)");
		return;
	}
	dl_job *job = calloc(1, sizeof *job);
	if (job == NULL || (job->execution_id = strdup(execution_id)) == NULL) {
		free(job);
		free(evidence);
		log_error("guest %s: out of memory queueing the step download of %s", g->name, execution_id);
		return;
	}
	job->evidence = evidence;
	job->receipt = receipt && receipt->json ? json_object_deep_copy_any(receipt->json) : NULL;
	if (receipt_sha256 && sha256_hex_valid(receipt_sha256)) {
		snprintf(job->receipt_sha256, sizeof job->receipt_sha256, "%s", receipt_sha256);
		job->receipt_bytes = receipt_bytes;
	} else {
		job->receipt_bytes = -1;
	}
	job->queued_at_ms = clock_now_ms();
	job->refs = 1;
	pthread_mutex_lock(&q->lock);
	/* Hold back while the queue is past its bound and not paused. */
	while (q->state == DL_OPEN && !q->paused && !q->stopping && q->queued >= DOWNLOADS_QUEUE_BOUND) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&q->changed, &q->lock, &ts);
	}
	if (q->state != DL_OPEN || q->stopping) {
		pthread_mutex_unlock(&q->lock);
		log_info("guest %s: the step download queue is %s; %s comes home with the lifecycle "
		         "operation",
		         g->name, state_names[q->state], execution_id);
		job_unref(job);
		return;
	}
	pthread_mutex_unlock(&q->lock);
	/* The record says queued before the job can start. */
	json_object *record = download_record_new(job);
	download_record_save(job, record);
	json_object_put(record);
	pthread_mutex_lock(&q->lock);
	if (q->tail)
		q->tail->next = job;
	else
		q->head = job;
	q->tail = job;
	q->queued++;
	ensure_worker(q);
	publish(q);
	pthread_mutex_unlock(&q->lock);
}

void downloads_guest_reached(session_manager *m, guest *g)
{
	if (in_download_worker)
		return;
	(void)m;
	downloads_queue *q = queue_if_any(g);
	if (q == NULL)
		return;
	pthread_mutex_lock(&q->lock);
	if (q->paused) {
		q->paused = false;
		publish(q);
	}
	pthread_mutex_unlock(&q->lock);
}

/* Marks every job not yet started `coalesced` by `by`. Under q->lock (the
 * records are written with it held: they are small, and nothing else may
 * start meanwhile). */
static void coalesce_queued(downloads_queue *q, const char *by)
{
	while (q->head) {
		dl_job *job = q->head;
		q->head = job->next;
		job->next = NULL;
		q->queued--;
		json_object *record = download_record_load(job);
		download_record_set(record, "status", "coalesced");
		download_record_set(record, "coalescedBy", by);
		char at[25];
		time_format_iso_millis(clock_now_ms(), at);
		download_record_set(record, "endedAt", at);
		download_record_save(job, record);
		json_object_put(record);
		job->ended = true;
		job->end_status = "coalesced";
		q->coalesced++;
		job_unref(job);
	}
	q->tail = NULL;
}

void downloads_close(session_manager *m, guest *g, const char *by, relay_call *call)
{
	downloads_queue *q = queue_of(m, g);
	if (q == NULL)
		return;
	pthread_mutex_lock(&q->lock);
	q->state = DL_CLOSING;
	q->paused = false;
	publish(q);
	while (q->running) {
		if (relay_call_is_cancelled(call) && q->running_call && !q->aborting) {
			q->aborting = true;
			relay_call_cancel(q->running_call);
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&q->changed, &q->lock, &ts);
	}
	coalesce_queued(q, by ? by : "finish");
	publish(q);
	pthread_mutex_unlock(&q->lock);
}

void downloads_close_for_reset(session_manager *m, guest *g)
{
	downloads_close(m, g, "reset", NULL);
}

void downloads_reopen(session_manager *m, guest *g)
{
	downloads_queue *q = queue_of(m, g);
	if (q == NULL)
		return;
	pthread_mutex_lock(&q->lock);
	session_lock(m);
	bool closed = g->phase == PHASE_CLOSED;
	session_unlock(m);
	if (!closed) {
		q->state = DL_OPEN;
		q->stopping = false;
		if (q->head)
			ensure_worker(q);
		publish(q);
	}
	pthread_mutex_unlock(&q->lock);
}

void downloads_shutdown(session_manager *m, guest *g)
{
	(void)m;
	downloads_queue *q = queue_if_any(g);
	if (q == NULL)
		return;
	pthread_mutex_lock(&q->lock);
	q->stopping = true;
	q->state = DL_CLOSED;
	if (q->running_call && !q->aborting) {
		q->aborting = true;
		relay_call_cancel(q->running_call);
	}
	pthread_cond_broadcast(&q->changed);
	bool join = q->thread_started;
	pthread_t thread = q->thread;
	pthread_mutex_unlock(&q->lock);
	if (join && !pthread_equal(thread, pthread_self()))
		pthread_join(thread, NULL);
	pthread_mutex_lock(&q->lock);
	q->thread_started = false;
	publish(q);
	pthread_mutex_unlock(&q->lock);
}

int downloads_resume(session_manager *m, guest *g)
{
	session_lock(m);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	if (evidence == NULL)
		return 0;
	strbuf dir = STRBUF_INIT;
	strbuf_printf(&dir, "%s/host/evidence-downloads", evidence);
	DIR *d = opendir(strbuf_str(&dir));
	int n = 0;
	downloads_queue *q = d ? queue_of(m, g) : NULL;
	struct dirent *e;
	while (q && (e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);
		if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0 || e->d_name[0] == '.')
			continue;
		strbuf path = STRBUF_INIT;
		strbuf_printf(&path, "%s/%s", strbuf_str(&dir), e->d_name);
		json_object *r = NULL;
		relay_error err;
		if (fs_read_json(strbuf_str(&path), 1u << 20, &r, &err) == RELAY_OK &&
		    strcmp(jsonx_get_str(r, "status") ? jsonx_get_str(r, "status") : "", "queued") == 0 &&
		    jsonx_get_str(r, "executionId")) {
			dl_job *job = calloc(1, sizeof *job);
			if (job) {
				job->execution_id = strdup(jsonx_get_str(r, "executionId"));
				job->evidence = strdup(evidence);
				int64_t at = 0;
				const char *queued = jsonx_get_str(r, "queuedAt");
				job->queued_at_ms =
				    queued && time_parse_iso(queued, &at) ? at : clock_now_ms();
				job->refs = 1;
				pthread_mutex_lock(&q->lock);
				if (q->state == DL_OPEN && !q->stopping && job->execution_id &&
				    job->evidence) {
					if (q->tail)
						q->tail->next = job;
					else
						q->head = job;
					q->tail = job;
					q->queued++;
					n++;
					ensure_worker(q);
					publish(q);
					job = NULL;
				}
				pthread_mutex_unlock(&q->lock);
				job_unref(job);
			}
		}
		json_object_put(r);
		strbuf_free(&path);
	}
	if (d)
		closedir(d);
	strbuf_free(&dir);
	free(evidence);
	return n;
}

static dl_job *find_job(downloads_queue *q, const char *execution_id, dl_job **prev_out)
{
	dl_job *prev = NULL;
	for (dl_job *j = q->head; j; prev = j, j = j->next) {
		if (strcmp(j->execution_id, execution_id) == 0) {
			if (prev_out)
				*prev_out = prev;
			return j;
		}
	}
	return NULL;
}

downloads_wait_result downloads_expedite(session_manager *m, guest *g, const char *execution_id,
                                         int64_t deadline_mono_ms, relay_call *call)
{
	(void)m;
	downloads_queue *q = queue_if_any(g);
	if (q == NULL || execution_id == NULL)
		return DOWNLOADS_WAIT_NONE;
	pthread_mutex_lock(&q->lock);
	dl_job *prev = NULL;
	dl_job *job = find_job(q, execution_id, &prev);
	if (job && prev) {
		/* To the front. */
		prev->next = job->next;
		if (q->tail == job)
			q->tail = prev;
		job->next = q->head;
		q->head = job;
	}
	if (job == NULL && q->running && strcmp(q->running->execution_id, execution_id) == 0)
		job = q->running;
	if (job == NULL) {
		pthread_mutex_unlock(&q->lock);
		return DOWNLOADS_WAIT_NONE;
	}
	job->refs++;
	if (q->paused) {
		q->paused = false; /* relay_image reaches the guest */
	}
	publish(q);
	downloads_wait_result result = DOWNLOADS_WAIT_DEADLINE;
	while (!job->ended) {
		if (relay_call_is_cancelled(call)) {
			result = DOWNLOADS_WAIT_CANCELLED;
			break;
		}
		int64_t left = deadline_mono_ms - clock_monotonic_ms();
		if (left <= 0) {
			result = DOWNLOADS_WAIT_DEADLINE;
			break;
		}
		if (left > 100)
			left = 100;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)left * 1000000L;
		while (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&q->changed, &q->lock, &ts);
	}
	if (job->ended)
		result = strcmp(job->end_status, "downloaded") == 0 ? DOWNLOADS_WAIT_DOWNLOADED
		                                                    : DOWNLOADS_WAIT_FAILED;
	job_unref(job);
	pthread_mutex_unlock(&q->lock);
	return result;
}

bool downloads_pending(session_manager *m, guest *g, const char *execution_id)
{
	(void)m;
	downloads_queue *q = queue_if_any(g);
	if (q == NULL || execution_id == NULL)
		return false;
	pthread_mutex_lock(&q->lock);
	bool pending = find_job(q, execution_id, NULL) != NULL ||
	               (q->running && strcmp(q->running->execution_id, execution_id) == 0);
	pthread_mutex_unlock(&q->lock);
	return pending;
}

void downloads_free(guest *g)
{
	downloads_queue *q = g->delivery->queue;
	if (q == NULL)
		return;
	pthread_mutex_lock(&q->lock);
	q->stopping = true;
	if (q->running_call && !q->aborting) {
		q->aborting = true;
		relay_call_cancel(q->running_call);
	}
	pthread_cond_broadcast(&q->changed);
	bool join = q->thread_started;
	pthread_t thread = q->thread;
	pthread_mutex_unlock(&q->lock);
	if (join)
		pthread_join(thread, NULL);
	while (q->head) {
		dl_job *job = q->head;
		q->head = job->next;
		job_unref(job);
	}
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->changed);
	free(q);
	g->delivery->queue = NULL;
}

/* ---- the recording hooks of lifecycle.h ------------------------------------------------ */

/* The end of the session in pause mode: the step download in flight is
 * aborted and writes nothing more; queued steps keep their `queued`
 * records for the next process (lifecycle.h). */
void recording_detach(session_manager *m, guest *g)
{
	downloads_shutdown(m, g);
}

/* At restart, for a staged guest not delivered: the steps whose records
 * still say `queued` are queued again. Nothing is replayed; the recording
 * itself needs nothing more on the host (lifecycle.h). */
int recording_reattach(session_manager *m, guest *g, char *errbuf, size_t errlen)
{
	(void)errbuf;
	(void)errlen;
	int n = downloads_resume(m, g);
	if (n > 0)
		log_info("guest %s: %d step download(s) queued again after the restart", g->name, n);
	return 0;
}
