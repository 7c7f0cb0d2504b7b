/*
 * delivery/download_job.h — one step download of the queue (downloads.h;
 * spec/evidence.md §5.2-§5.5): its record under host/evidence-downloads/, and
 * its run: up to three attempts, each bringing the step's evidence home as
 * one archive, placing it under host/steps/<executionId>/ and publishing
 * its display originals (image_publish.h).
 *
 * The queue (downloads.c) owns the jobs, their order and their threads;
 * this file knows nothing of it.
 */
#ifndef RELAY_DELIVERY_DOWNLOAD_JOB_H
#define RELAY_DELIVERY_DOWNLOAD_JOB_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "session/manager_internal.h"

#define DOWNLOADS_ATTEMPTS   3
#define DOWNLOADS_RETRY_1_MS 1000 /* before the second attempt */
#define DOWNLOADS_RETRY_2_MS 3000 /* before the third */

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

/* A fresh record {executionId, status: "queued", ...} (spec/evidence.md §5.5). */
json_object *download_record_new(const dl_job *job);

/* The job's record on disk, or a fresh one. */
json_object *download_record_load(const dl_job *job);

/* Writes the record with its keys in the order of spec/evidence.md §5.5 (a
 * failure is logged). */
void download_record_save(const dl_job *job, json_object *record);

/* Replaces a string member of a record. */
void download_record_set(json_object *record, const char *key, const char *value);

/*
 * Runs one job with its attempts (waiting 1 s, then 3 s, between them)
 * under `call` (the 90 s internal call of the worker) and writes its
 * record. Returns the end status (static: "downloaded", "failed" or
 * "cancelled"); *transient says whether its last failure was transient.
 * `was_aborted(aborted_ctx)` tells, once the call is cancelled, whether the
 * queue aborted the job (then it ends `cancelled` and writes nothing more)
 * or its deadline passed. Called without any lock.
 */
const char *download_job_run(session_manager *m, guest *g, const dl_job *job, relay_call *call,
                             bool (*was_aborted)(void *ctx), void *aborted_ctx, bool *transient);

#endif
