/*
 * The step-download queue's decisions and the packaging of a real folder,
 * without the MCP layer (delivery/downloads.h, download_job.h,
 * packaging.h): a job record in the key order of spec/evidence.md §5.5; a
 * closing queue takes no job and writes no record, queues no record at a
 * resume, reopens, and publishes its counters into the guest; the
 * recording of a guest delivered as a package (manifest, OPENING.txt with
 * the guest's identity), re-verified on a second delivery, and a package
 * whose file changed afterwards refused. A minimal session (the manager's
 * lock and settings, one guest) stands in for the session room; no guest
 * is reached and no worker starts.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../common/evidence_fixture.h"
#include "delivery/download_job.h"
#include "delivery/downloads.h"
#include "delivery/packaging.h"
#include "profile/settings.h"
#include "session/manager_internal.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

#define RUN1 "run-5d1f0c9a8e7b4c3d2a1f0e9d8c7b6a59"

typedef struct fixture {
	fx_pkg pkg;
	relay_settings settings;
	struct session_manager m;
	guest g;
} fixture;

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof *f);
	fx_init(&f->pkg);
	fx_run r = {
	    RUN1, "shell-1", "shell /usr/bin/xdg-open https://example.com", 0, false, true, true, NULL, NULL,
	    0,    0};
	fx_add_run(&f->pkg, &r);
	fx_finish(&f->pkg);
	f->settings.project = f->pkg.root;
	f->m.settings = &f->settings;
	pthread_mutex_init(&f->m.lock, NULL);
	f->g.name = strdup("login-test-1");
	f->g.image = strdup("debian-12-desktop");
	f->g.purpose = strdup(FX_PURPOSE);
	f->g.evidence_path = strdup(f->pkg.dir);
	f->g.acquired_at_ms = 1790000000000;
	f->g.phase = PHASE_STAGED;
	f->g.delivery =
	    guest_slice_new(&delivery_slice_ops); /* the delivery room's slice, without a session */
	f->m.guests = &f->g;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	downloads_free(&f->g);
	guest_slice_free(&delivery_slice_ops, f->g.delivery);
	free(f->g.name);
	free(f->g.image);
	free(f->g.purpose);
	free(f->g.evidence_path);
	pthread_mutex_destroy(&f->m.lock);
	fx_free(&f->pkg);
	free(f);
	return 0;
}

static json_object *record_of(fixture *f, const char *execution_id)
{
	char path[700];
	snprintf(path, sizeof path, "%s/host/evidence-downloads/%s.json", f->pkg.dir, execution_id);
	json_object *r = NULL;
	relay_error err = {0};
	if (fs_read_json(path, 1 << 20, &r, &err) != RELAY_OK)
		return NULL;
	return r;
}

static void test_job_record_keeps_its_key_order(void **state)
{
	fixture *f = *state;
	dl_job job;
	memset(&job, 0, sizeof job);
	job.execution_id = RUN1;
	job.evidence = f->pkg.dir;
	job.queued_at_ms = 1790000000000;
	json_object *r = download_record_new(&job);
	assert_string_equal(jsonx_get_str(r, "status"), "queued");
	assert_string_equal(jsonx_get_str(r, "queuedAt"), "2026-09-21T14:13:20.000Z");
	/* Keys added out of order are written in the order of §5.5. */
	download_record_set(r, "status", "coalesced");
	download_record_set(r, "coalescedBy", "finish");
	download_record_save(&job, r);
	json_object_put(r);
	json_object *back = download_record_load(&job);
	const char *want[] = {"executionId", "status",    "files",   "image",      "attempts",
	                      "queuedAt",    "startedAt", "endedAt", "coalescedBy"};
	size_t i = 0;
	json_object_object_foreach(back, key, value)
	{
		(void)value;
		assert_true(i < sizeof want / sizeof want[0]);
		assert_string_equal(key, want[i++]);
	}
	assert_int_equal(i, sizeof want / sizeof want[0]);
	assert_string_equal(jsonx_get_str(back, "coalescedBy"), "finish");
	json_object_put(back);
}

static void test_closing_queue_takes_no_job(void **state)
{
	fixture *f = *state;
	assert_false(downloads_pending(&f->m, &f->g, RUN1));
	assert_int_equal(downloads_expedite(&f->m, &f->g, RUN1, 0, NULL), DOWNLOADS_WAIT_NONE);

	/* finish takes the queue over: nothing runs, nothing was queued. */
	downloads_close(&f->m, &f->g, "finish", NULL);
	assert_string_equal(jsonx_get_str(f->g.delivery->counters, "state"), "closing");
	int64_t queued = -1;
	assert_true(jsonx_get_int(f->g.delivery->counters, "queued", &queued));
	assert_int_equal(queued, 0);

	/* A run that ends now: its step comes home with the lifecycle operation. */
	downloads_enqueue_step(&f->m, &f->g, RUN1, NULL, NULL, -1);
	assert_false(downloads_pending(&f->m, &f->g, RUN1));
	assert_null(record_of(f, RUN1));

	/* A queued record is not queued again while the queue is closing. */
	dl_job job;
	memset(&job, 0, sizeof job);
	job.execution_id = RUN1;
	job.evidence = f->pkg.dir;
	json_object *r = download_record_new(&job);
	download_record_save(&job, r);
	json_object_put(r);
	assert_int_equal(downloads_resume(&f->m, &f->g), 0);
	assert_false(downloads_pending(&f->m, &f->g, RUN1));

	/* After the reset it opens again; a closed guest's queue does not. */
	downloads_reopen(&f->m, &f->g);
	assert_string_equal(jsonx_get_str(f->g.delivery->counters, "state"), "open");
	downloads_shutdown(&f->m, &f->g);
	assert_string_equal(jsonx_get_str(f->g.delivery->counters, "state"), "closed");
	f->g.phase = PHASE_CLOSED;
	downloads_reopen(&f->m, &f->g);
	assert_string_equal(jsonx_get_str(f->g.delivery->counters, "state"), "closed");
}

static void test_packaging_a_recording(void **state)
{
	fixture *f = *state;
	evidence_delivery_result res;
	relay_error err = {0};
	relay_status st = packaging_deliver(&f->m, &f->g, &res, &err);
	if (st != RELAY_OK)
		fail_msg("packaging failed: %s", err.message);
	assert_true(res.delivered);
	assert_true(res.verified);
	assert_false(res.reverified_only);
	assert_string_equal(res.completeness, "complete");
	evidence_delivery_result_free(&res);
	char path[700];
	snprintf(path, sizeof path, "%s/manifest.json", f->pkg.dir);
	json_object *manifest = NULL;
	assert_int_equal(fs_read_json(path, 1 << 24, &manifest, &err), RELAY_OK);
	assert_string_equal(jsonx_get_str(manifest, "taskId"), FX_PURPOSE);
	assert_string_equal(jsonx_get_str(manifest, "guest"), "login-test-1");
	json_object_put(manifest);
	snprintf(path, sizeof path, "%s/OPENING.txt", f->pkg.dir);
	char *opening = NULL;
	size_t len = 0;
	assert_int_equal(fs_read_file(path, 1 << 20, &opening, &len, &err), RELAY_OK);
	assert_non_null(strstr(opening, "login-test-1"));
	assert_non_null(strstr(opening, "debian-12-desktop"));
	free(opening);

	/* Delivered again (a retry): re-verified, not rewritten. */
	assert_int_equal(packaging_deliver(&f->m, &f->g, &res, &err), RELAY_OK);
	assert_true(res.verified);
	assert_true(res.reverified_only);
	evidence_delivery_result_free(&res);

	/* A file changed after sealing: the package no longer verifies. */
	snprintf(path, sizeof path, "%s/state/session.json", f->pkg.dir);
	FILE *fp = fopen(path, "a");
	assert_non_null(fp);
	fputs(" ", fp);
	fclose(fp);
	st = packaging_deliver(&f->m, &f->g, &res, &err);
	assert_false(st == RELAY_OK && res.verified);
	evidence_delivery_result_free(&res);

	/* No evidence folder: a clear refusal. */
	free(f->g.evidence_path);
	f->g.evidence_path = NULL;
	assert_int_equal(packaging_deliver(&f->m, &f->g, &res, &err), RELAY_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "has no evidence folder"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_job_record_keeps_its_key_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_closing_queue_takes_no_job, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_packaging_a_recording, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
