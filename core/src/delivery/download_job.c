/*
 * One step download: its record and its attempts (download_job.h;
 * spec/evidence.md §5.2-§5.5).
 */
#include "delivery/download_job.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "call/call.h"
#include "delivery/evidence_pull.h"
#include "delivery/image_publish.h"
#include "evidence/download.h"
#include "guestio/receiver_api.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define RECEIPT_MAX_BYTES (4u << 20) /* metadata pulled for an image (spec/images.md §4) */

json_object *download_record_new(const dl_job *job)
{
	char at[25];
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "executionId", job->execution_id);
	jsonx_add_str(r, "status", "queued");
	jsonx_add(r, "files", json_object_new_array());
	jsonx_add_null(r, "image");
	jsonx_add(r, "attempts", json_object_new_array());
	time_format_iso_millis(job->queued_at_ms, at);
	jsonx_add_str(r, "queuedAt", at);
	jsonx_add_null(r, "startedAt");
	jsonx_add_null(r, "endedAt");
	jsonx_add_null(r, "coalescedBy");
	return r;
}

/* The record on disk, or a fresh one. */
json_object *download_record_load(const dl_job *job)
{
	strbuf path = STRBUF_INIT;
	strbuf_printf(&path, "%s/host/evidence-downloads/%s.json", job->evidence, job->execution_id);
	json_object *r = NULL;
	relay_error err;
	if (fs_read_json(strbuf_str(&path), 1u << 20, &r, &err) != RELAY_OK ||
	    !json_object_is_type(r, json_type_object)) {
		json_object_put(r);
		r = download_record_new(job);
	}
	strbuf_free(&path);
	return r;
}

/* Writes the record with its keys in the order of spec/evidence.md §5.5. */
void download_record_save(const dl_job *job, json_object *record)
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

void download_record_set(json_object *obj, const char *key, const char *value)
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

/* Publishes the step's display originals (spec/evidence.md §5.2, spec/images.md §5)
 * and names the record's image: the after-image when there is one. */
static relay_status publish_images(session_manager *m, guest *g, const dl_job *job,
                                   const json_object *receipt, attempt_out *out, relay_error *err)
{
	gio_receipt rc;
	gio_receipt_read(receipt, &rc);
	json_object *snaps = rc.snapshots;
	if (snaps == NULL || json_object_array_length(snaps) == 0)
		return RELAY_OK;
	json_object *published = NULL;
	relay_status st = image_delivery_publish_step(m, g, job->evidence, &rc, &published, err);
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

static relay_status attempt_once(session_manager *m, guest *g, const dl_job *job, relay_call *call,
                                 attempt_out *out, relay_error *err)
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
	 * (spec/evidence.md §5.4 item 1). */
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
const char *download_job_run(session_manager *m, guest *g, const dl_job *job, relay_call *call,
                             bool (*was_aborted)(void *ctx), void *aborted_ctx, bool *transient)
{
	*transient = false;
	json_object *record = download_record_load(job);
	json_object *attempts = json_object_new_array();
	int64_t started = clock_now_ms();
	char at[25];
	time_format_iso_millis(started, at);
	download_record_set(record, "startedAt", at);
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
		time_format_iso_millis(a_start, at);
		jsonx_add_str(a, "startedAt", at);
		time_format_iso_millis(clock_now_ms(), at);
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
		bool aborted = was_aborted(aborted_ctx);
		status = aborted ? "cancelled" : "failed";
		if (!aborted) {
			json_object *a = json_object_new_object();
			jsonx_add_null(a, "startedAt");
			time_format_iso_millis(clock_now_ms(), at);
			jsonx_add_str(a, "endedAt", at);
			jsonx_add_str(a, "error", "the 90 s deadline of the step download passed");
			json_object_array_add(attempts, a);
		}
		*transient = false;
	}
	download_record_set(record, "status", status);
	json_object_object_del(record, "attempts");
	jsonx_add(record, "attempts", attempts);
	if (out.files) {
		json_object_object_del(record, "files");
		jsonx_add(record, "files", out.files);
	}
	json_object_object_del(record, "image");
	jsonx_add(record, "image", out.image);
	time_format_iso_millis(clock_now_ms(), at);
	download_record_set(record, "endedAt", at);
	/* An aborted job writes nothing more: its record keeps saying queued,
	 * so a later session can bring the step home. */
	if (strcmp(status, "cancelled") != 0)
		download_record_save(job, record);
	json_object_put(record);
	return status;
}
