/*
 * Background step downloads (downloads.h; evidence.md §5, lifecycle.md §7).
 *
 * Each guest has one queue with one worker thread, started with the first
 * job. The worker takes the oldest job (or the one relay_image moved to the
 * front), runs it with an internal call limited to 90 s of real time (the
 * session's call watcher cancels it at the deadline), and publishes the
 * counters into guest->downloads.
 *
 * Locking: q->lock guards the queue; the manager's lock is taken inside it
 * (never the other way round) to publish counters. No lock is held across
 * guest I/O.
 */
#include "delivery/downloads.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "evidence/download.h"
#include "delivery/evidence_pull.h"
#include "delivery/image_delivery.h"
#include "mcp/call.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define RECEIPT_MAX_BYTES (4u << 20) /* metadata pulled for an image (images.md §4) */

typedef enum dl_state { DL_OPEN = 0, DL_CLOSING, DL_CLOSED } dl_state;

static const char *const state_names[] = {"open", "closing", "closed"};

typedef struct dl_job {
	char *execution_id;
	char *evidence;          /* the recording's folder when the job was queued */
	json_object *receipt;    /* deep copy of the receipt pulled after the run, or NULL */
	char receipt_sha256[65]; /* its pinned bytes ("" when unknown) */
	int64_t receipt_bytes;   /* -1 when unknown */
	int64_t queued_at_ms;
	int refs;               /* the queue's reference plus waiters' */
	bool ended;             /* its end status is final */
	const char *end_status; /* static: downloaded | failed | cancelled | coalesced */
	struct dl_job *next;
} dl_job;

struct downloads_queue {
	manager *m;
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

/* Publishes the counters into guest->downloads. Under q->lock. */
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
	manager_lock(q->m);
	json_object_put(q->g->downloads);
	q->g->downloads = d;
	manager_unlock(q->m);
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
 * record). */
static downloads_queue *queue_of(manager *m, guest *g)
{
	manager_lock(m);
	downloads_queue *q = g->dl;
	if (q == NULL) {
		q = calloc(1, sizeof *q);
		if (q) {
			q->m = m;
			q->g = g;
			pthread_mutex_init(&q->lock, NULL);
			pthread_cond_init(&q->changed, NULL);
			jsonx_get_int(g->downloads, "downloaded", &q->downloaded);
			jsonx_get_int(g->downloads, "failed", &q->failed);
			jsonx_get_int(g->downloads, "cancelled", &q->cancelled);
			jsonx_get_int(g->downloads, "coalesced", &q->coalesced);
			const char *state = jsonx_get_str(g->downloads, "state");
			q->state = state && strcmp(state, "closed") == 0 && g->phase == PHASE_CLOSED
			               ? DL_CLOSED
			               : DL_OPEN;
			g->dl = q;
		}
	}
	manager_unlock(m);
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

/* ---- the job record (evidence.md §5.5) ------------------------------------------------ */

static void iso(int64_t ms, char out[25])
{
	time_format_iso_millis(ms, out);
}

static json_object *new_record(const dl_job *job)
{
	char at[25];
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "executionId", job->execution_id);
	jsonx_add_str(r, "status", "queued");
	jsonx_add(r, "files", json_object_new_array());
	jsonx_add_null(r, "image");
	jsonx_add(r, "attempts", json_object_new_array());
	iso(job->queued_at_ms, at);
	jsonx_add_str(r, "queuedAt", at);
	jsonx_add_null(r, "startedAt");
	jsonx_add_null(r, "endedAt");
	jsonx_add_null(r, "coalescedBy");
	return r;
}

/* The record on disk, or a fresh one. */
static json_object *load_record(const dl_job *job)
{
	strbuf path = STRBUF_INIT;
	strbuf_printf(&path, "%s/host/evidence-downloads/%s.json", job->evidence, job->execution_id);
	json_object *r = NULL;
	relay_error err;
	if (fs_read_json(strbuf_str(&path), 1u << 20, &r, &err) != RELAY_OK ||
	    !json_object_is_type(r, json_type_object)) {
		json_object_put(r);
		r = new_record(job);
	}
	strbuf_free(&path);
	return r;
}

/* Writes the record with its keys in the order of evidence.md §5.5. */
static void save_record(const dl_job *job, json_object *record)
{
	static const char *const keys[] = {"executionId", "status",    "files",   "image",      "attempts",
	                                   "queuedAt",    "startedAt", "endedAt", "coalescedBy"};
	json_object *ordered = json_object_new_object();
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		json_object *v = NULL;
		json_object_object_get_ex(record, keys[i], &v);
		jsonx_add(ordered, keys[i], v ? json_object_get(v) : NULL);
	}
	relay_error err;
	memset(&err, 0, sizeof err);
	if (evidence_write_download_record(job->evidence, ordered, &err) != RELAY_OK)
		log_warning("cannot write the download record of %s: %s", job->execution_id, err.message);
	json_object_put(ordered);
}

static void set_str(json_object *obj, const char *key, const char *value)
{
	json_object_object_del(obj, key);
	jsonx_add_str(obj, key, value);
}

/* ---- one download --------------------------------------------------------------------- */

typedef struct attempt_out {
	json_object *files; /* [{path, sha256, bytes}] relative to R */
	json_object *image; /* {imageId, phase} or NULL */
} attempt_out;

/* Reads host/receiver-receipts/<id>.json: the receipt, its SHA-256 and
 * size. *receipt_out NULL when the host has none. */
static relay_status host_receipt(const dl_job *job, json_object **receipt_out, char sha[65], int64_t *bytes,
                                 relay_error *err)
{
	*receipt_out = NULL;
	*bytes = -1;
	strbuf path = STRBUF_INIT;
	strbuf_printf(&path, "%s/host/receiver-receipts/%s.json", job->evidence, job->execution_id);
	char *text = NULL;
	size_t len = 0;
	relay_status st = fs_read_file(strbuf_str(&path), RECEIPT_MAX_BYTES, &text, &len, err);
	if (st == RELAY_E_NOT_FOUND) {
		st = RELAY_OK;
		goto cleanup;
	}
	if (st != RELAY_OK)
		goto cleanup;
	json_object *receipt = jsonx_parse(text, len, NULL, NULL, 0);
	if (!json_object_is_type(receipt, json_type_object)) {
		json_object_put(receipt);
		st =
		    relay_error_set(err, RELAY_E_PROTOCOL, 0,
		                    "host/receiver-receipts/%s.json is not a JSON object", job->execution_id);
		goto cleanup;
	}
	sha256_buffer_hex(text, len, sha);
	*bytes = (int64_t)len;
	*receipt_out = receipt;
cleanup:
	free(text);
	strbuf_free(&path);
	return st;
}

/* Provided by the image delivery module (image_delivery.h); weak so that
 * downloads work (without publication) in a build that lacks it. */
relay_status image_delivery_publish_step(manager *m, guest *g, const char *recording,
                                         const json_object *receipt, json_object **published_out,
                                         relay_error *err) __attribute__((weak));

/* Publishes the step's display originals (evidence.md §5.2, images.md §5)
 * and names the record's image: the after-image when there is one. */
static relay_status publish_images(manager *m, guest *g, const dl_job *job, const json_object *receipt,
                                   attempt_out *out, relay_error *err)
{
	json_object *snaps = jsonx_get_array(jsonx_get_obj(receipt, "imageEvidence"), "snapshots");
	if (snaps == NULL || json_object_array_length(snaps) == 0)
		return RELAY_OK;
	if (image_delivery_publish_step == NULL) {
		log_warning("guest %s: this build cannot publish the display originals of %s", g->name,
		            job->execution_id);
		return RELAY_OK;
	}
	json_object *published = NULL;
	relay_status st = image_delivery_publish_step(m, g, job->evidence, receipt, &published, err);
	size_t n = published ? json_object_array_length(published) : 0;
	for (size_t i = 0; st == RELAY_OK && i < n; i++) {
		json_object *p = json_object_array_get_idx(published, i);
		const char *phase = jsonx_get_str(p, "phase");
		if (out->image == NULL || (phase && strcmp(phase, "after") == 0)) {
			json_object_put(out->image);
			out->image = json_object_new_object();
			jsonx_add_str(out->image, "imageId", jsonx_get_str(p, "imageId"));
			jsonx_add_str(out->image, "phase", phase);
		}
	}
	json_object_put(published);
	return st;
}

/* Expected entries of `b` whose path is not in `a` (for the second archive
 * of a step whose receipt arrived with the first). */
static json_object *expected_minus(const json_object *b, const json_object *a)
{
	json_object *out = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length((json_object *)b); i++) {
		json_object *e = json_object_array_get_idx((json_object *)b, i);
		const char *p = jsonx_get_str(e, "path");
		bool seen = false;
		for (size_t j = 0; !seen && j < json_object_array_length((json_object *)a); j++)
			seen = strcmp(jsonx_get_str(json_object_array_get_idx((json_object *)a, j), "path"),
			              p) == 0;
		if (!seen)
			json_object_array_add(out, json_object_get(e));
	}
	return out;
}

static relay_status attempt_once(manager *m, guest *g, const dl_job *job, relay_call *call, attempt_out *out,
                                 relay_error *err)
{
	guest_io io;
	json_object *receipt = NULL, *expected = NULL, *facts = NULL, *more = NULL, *more_facts = NULL;
	json_object *staged_receipt = NULL;
	char *facts_text = NULL;
	strbuf staging = STRBUF_INIT;
	char sha[65] = "";
	int64_t bytes = -1;
	bool staging_made = false;
	relay_status st = gio_begin(&io, m, g, call, err);
	if (st != RELAY_OK)
		return st;
	io.receiver_ready = true; /* staged: the receiver runs, its transients can be removed */
	if (job->receipt) {
		receipt = json_object_get(job->receipt);
		snprintf(sha, sizeof sha, "%s", job->receipt_sha256);
		bytes = job->receipt_bytes;
	} else {
		st = host_receipt(job, &receipt, sha, &bytes, err);
		if (st != RELAY_OK)
			goto cleanup;
	}
	expected =
	    evidence_step_expected(job->execution_id, receipt, receipt && sha[0] ? sha : NULL, bytes, err);
	if (expected == NULL) {
		st = err->code;
		goto cleanup;
	}
	/* A fresh staging folder on the evidence volume, outside the package
	 * (evidence.md §5.4 item 1). */
	char rnd[17];
	random_hex(rnd, 16);
	strbuf_printf(&staging, "%s.finalization-attempts/step-%s", job->evidence, rnd);
	st = fs_mkdir_p(strbuf_str(&staging), 0700, err);
	if (st != RELAY_OK)
		goto cleanup;
	staging_made = true;
	st = epull_archive(&io, io.root, expected, receipt == NULL, strbuf_str(&staging), &facts, err);
	if (st != RELAY_OK)
		goto cleanup;
	if (receipt == NULL) {
		/* No host receipt: if the guest's came home, its snapshots too. */
		strbuf rp = STRBUF_INIT;
		strbuf_printf(&rp, "%s/state/receiver/receipts/%s.json", strbuf_str(&staging),
		              job->execution_id);
		char *text = NULL;
		size_t len = 0;
		relay_error rerr;
		if (fs_read_file(strbuf_str(&rp), RECEIPT_MAX_BYTES, &text, &len, &rerr) == RELAY_OK) {
			staged_receipt = jsonx_parse(text, len, NULL, NULL, 0);
			char rsha[65];
			sha256_buffer_hex(text, len, rsha);
			json_object *full = json_object_is_type(staged_receipt, json_type_object)
			                        ? evidence_step_expected(job->execution_id, staged_receipt,
			                                                 rsha, (int64_t)len, err)
			                        : NULL;
			if (full == NULL)
				st = relay_error_set(err, RELAY_E_PROTOCOL, 0,
				                     "the guest's receipt of %s is malformed",
				                     job->execution_id);
			else
				more = expected_minus(full, expected);
			json_object_put(full);
			free(text);
		}
		strbuf_free(&rp);
		if (st == RELAY_OK && more && json_object_array_length(more) > 0) {
			st = epull_archive(&io, io.root, more, false, strbuf_str(&staging), &more_facts, err);
			for (size_t i = 0; st == RELAY_OK && i < json_object_array_length(more_facts); i++)
				json_object_array_add(
				    facts, json_object_get(json_object_array_get_idx(more_facts, i)));
		}
		if (st != RELAY_OK)
			goto cleanup;
	}
	facts_text = jsonx_to_string(facts, 0);
	if (facts_text == NULL) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	st = evidence_step_place(job->evidence, job->execution_id, strbuf_str(&staging), facts_text, err);
	if (st != RELAY_OK)
		goto cleanup;
	json_object_put(out->files);
	out->files = json_object_get(facts);
	const json_object *r = receipt ? receipt : staged_receipt;
	if (r)
		st = publish_images(m, g, job, r, out, err);
cleanup:
	if (staging_made) {
		relay_error ignored;
		fs_remove_tree(strbuf_str(&staging), &ignored);
		/* The sibling folder goes too when nothing else is in it. */
		char *attempts = fs_dirname(strbuf_str(&staging));
		if (attempts)
			rmdir(attempts);
		free(attempts);
	}
	strbuf_free(&staging);
	free(facts_text);
	json_object_put(receipt);
	json_object_put(staged_receipt);
	json_object_put(expected);
	json_object_put(facts);
	json_object_put(more);
	json_object_put(more_facts);
	/* Transfer facts (host/transfers/), unless the job was aborted: an
	 * aborted job writes nothing more. */
	if (!relay_call_is_cancelled(call))
		gio_write_transfers(&io, "step-download");
	gio_end(&io);
	return st;
}

/* Sleeps up to `ms` of real time; false when the call was cancelled. */
static bool pause_ms(relay_call *call, int64_t ms)
{
	int64_t end = clock_monotonic_ms() + ms;
	while (clock_monotonic_ms() < end) {
		if (relay_call_is_cancelled(call))
			return false;
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return !relay_call_is_cancelled(call);
}

/* Runs one job with its attempts. Returns the end status; *transient says
 * whether its last failure was transient. */
static const char *run_job(downloads_queue *q, dl_job *job, relay_call *call, bool *transient)
{
	manager *m = q->m;
	guest *g = q->g;
	*transient = false;
	json_object *record = load_record(job);
	json_object *attempts = json_object_new_array();
	int64_t started = clock_now_ms();
	char at[25];
	iso(started, at);
	set_str(record, "startedAt", at);
	const char *status = "failed";
	attempt_out out = {NULL, NULL};
	for (int attempt = 1; attempt <= DOWNLOADS_ATTEMPTS; attempt++) {
		if (attempt > 1 &&
		    !pause_ms(call, attempt == 2 ? DOWNLOADS_RETRY_1_MS : DOWNLOADS_RETRY_2_MS))
			break;
		relay_error err;
		memset(&err, 0, sizeof err);
		int64_t a_start = clock_now_ms();
		relay_status st = attempt_once(m, g, job, call, &out, &err);
		json_object *a = json_object_new_object();
		iso(a_start, at);
		jsonx_add_str(a, "startedAt", at);
		iso(clock_now_ms(), at);
		jsonx_add_str(a, "endedAt", at);
		if (st == RELAY_OK) {
			jsonx_add_null(a, "error");
			json_object_array_add(attempts, a);
			status = "downloaded";
			*transient = false;
			break;
		}
		if (relay_call_is_cancelled(call) && st != RELAY_E_CANCELLED)
			st = RELAY_E_CANCELLED;
		jsonx_add_str(a, "error", err.message[0] ? err.message : relay_status_str(st));
		json_object_array_add(attempts, a);
		log_info("guest %s: step download %s attempt %d failed: %s", g->name, job->execution_id,
		         attempt, err.message);
		*transient = epull_transient(st, err.message);
		if (!*transient)
			break;
	}
	if (strcmp(status, "downloaded") != 0 && relay_call_is_cancelled(call)) {
		pthread_mutex_lock(&q->lock);
		bool aborted = q->aborting;
		pthread_mutex_unlock(&q->lock);
		status = aborted ? "cancelled" : "failed";
		if (!aborted) {
			json_object *a = json_object_new_object();
			jsonx_add_null(a, "startedAt");
			iso(clock_now_ms(), at);
			jsonx_add_str(a, "endedAt", at);
			jsonx_add_str(a, "error", "the 90 s deadline of the step download passed");
			json_object_array_add(attempts, a);
		}
		*transient = false;
	}
	set_str(record, "status", status);
	json_object_object_del(record, "attempts");
	jsonx_add(record, "attempts", attempts);
	if (out.files) {
		json_object_object_del(record, "files");
		jsonx_add(record, "files", out.files);
	}
	json_object_object_del(record, "image");
	jsonx_add(record, "image", out.image);
	iso(clock_now_ms(), at);
	set_str(record, "endedAt", at);
	/* An aborted job writes nothing more: its record keeps saying queued,
	 * so a later session can bring the step home. */
	if (strcmp(status, "cancelled") != 0)
		save_record(job, record);
	json_object_put(record);
	return status;
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
		relay_call *call = manager_internal_call(q->m, DOWNLOADS_DEADLINE_MS);
		q->running_call = call;
		publish(q);
		pthread_mutex_unlock(&q->lock);

		bool transient = false;
		const char *status = run_job(q, job, call, &transient);

		pthread_mutex_lock(&q->lock);
		q->running_call = NULL;
		manager_internal_call_done(q->m, call);
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

void downloads_enqueue_step(manager *m, guest *g, const char *execution_id, const json_object *receipt,
                            const char *receipt_sha256, int64_t receipt_bytes)
{
	downloads_queue *q = queue_of(m, g);
	manager_lock(m);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	manager_unlock(m);
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
	job->receipt = receipt ? json_object_deep_copy_any(receipt) : NULL;
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
	json_object *record = new_record(job);
	save_record(job, record);
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

void downloads_guest_reached(manager *m, guest *g)
{
	if (in_download_worker)
		return;
	manager_lock(m);
	downloads_queue *q = g->dl;
	manager_unlock(m);
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
		json_object *record = load_record(job);
		set_str(record, "status", "coalesced");
		set_str(record, "coalescedBy", by);
		char at[25];
		iso(clock_now_ms(), at);
		set_str(record, "endedAt", at);
		save_record(job, record);
		json_object_put(record);
		job->ended = true;
		job->end_status = "coalesced";
		q->coalesced++;
		job_unref(job);
	}
	q->tail = NULL;
}

void downloads_close(manager *m, guest *g, const char *by, relay_call *call)
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

void downloads_close_for_reset(manager *m, guest *g)
{
	downloads_close(m, g, "reset", NULL);
}

void downloads_reopen(manager *m, guest *g)
{
	downloads_queue *q = queue_of(m, g);
	if (q == NULL)
		return;
	pthread_mutex_lock(&q->lock);
	manager_lock(m);
	bool closed = g->phase == PHASE_CLOSED;
	manager_unlock(m);
	if (!closed) {
		q->state = DL_OPEN;
		q->stopping = false;
		if (q->head)
			ensure_worker(q);
		publish(q);
	}
	pthread_mutex_unlock(&q->lock);
}

void downloads_shutdown(manager *m, guest *g)
{
	manager_lock(m);
	downloads_queue *q = g->dl;
	manager_unlock(m);
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

int downloads_resume(manager *m, guest *g)
{
	manager_lock(m);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	manager_unlock(m);
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

downloads_wait_result downloads_expedite(manager *m, guest *g, const char *execution_id,
                                         int64_t deadline_mono_ms, relay_call *call)
{
	manager_lock(m);
	downloads_queue *q = g->dl;
	manager_unlock(m);
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

bool downloads_pending(manager *m, guest *g, const char *execution_id)
{
	manager_lock(m);
	downloads_queue *q = g->dl;
	manager_unlock(m);
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
	downloads_queue *q = g->dl;
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
	g->dl = NULL;
}

/* ---- the recording hooks of lifecycle.h ------------------------------------------------ */

/* The end of the session in pause mode: the step download in flight is
 * aborted and writes nothing more; queued steps keep their `queued`
 * records for the next process (lifecycle.h). */
void recording_detach(manager *m, guest *g)
{
	downloads_shutdown(m, g);
}

/* At restart, for a staged guest not delivered: the steps whose records
 * still say `queued` are queued again. Nothing is replayed; the recording
 * itself needs nothing more on the host (lifecycle.h). */
int recording_reattach(manager *m, guest *g, char *errbuf, size_t errlen)
{
	(void)errbuf;
	(void)errlen;
	int n = downloads_resume(m, g);
	if (n > 0)
		log_info("guest %s: %d step download(s) queued again after the restart", g->name, n);
	return 0;
}
