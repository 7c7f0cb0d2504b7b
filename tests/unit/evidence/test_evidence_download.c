/*
 * The guest-free half of a background step download (spec/evidence.md §5.2-§5.6):
 * a recorded run's file set derived from its receipt, archived from a guest
 * root with our writer, extracted against the expected list into a staging
 * folder, placed under host/steps/<executionId>/, recorded, and then used as
 * a host candidate for the final state pull. The fixture's package folder
 * plays the guest root R (its state/ is R/state).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../common/evidence_fixture.h"
#include "evidence/archive.h"
#include "evidence/download.h"

#define RUN1 "run-5d1f0c9a8e7b4c3d2a1f0e9d8c7b6a59"

/* A "guest" package holding RUN1 and an empty host package; the run's
 * receipt and its expected file set. */
static json_object *step_fixture(fx_pkg *guest, fx_pkg *host, json_object **receipt_out)
{
	fx_init(guest);
	fx_run r = {RUN1, "shell-1", "shell echo hi", 0, false, true, true, NULL, NULL, 0, 0};
	fx_add_run(guest, &r);
	fx_finish(guest);
	fx_init(host);
	char path[1024];
	snprintf(path, sizeof path, "%s/state/receiver/receipts/%s.json", guest->dir, RUN1);
	*receipt_out = NULL;
	assert_int_equal(fs_read_json(path, 1 << 20, receipt_out, NULL), RELAY_OK);
	relay_error err = {0};
	json_object *expected = evidence_step_expected(RUN1, *receipt_out, NULL, -1, &err);
	assert_non_null(expected);
	return expected;
}

static void test_step_download_end_to_end(void **state)
{
	(void)state;
	fx_pkg guest, host;
	json_object *receipt = NULL;
	json_object *expected = step_fixture(&guest, &host, &receipt);
	char path[1024];
	relay_error err = {0};
	assert_int_equal(json_object_array_length(expected), 6);
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(expected, 3), "path"),
	                    "state/records/action/action-" RUN1 ".json");
	json_object *snap = json_object_array_get_idx(expected, 5);
	assert_string_equal(jsonx_get_str(snap, "path"), "state/snapshots/" FX_SESSION "/" RUN1 "-after.png");
	assert_true(sha256_hex_valid(jsonx_get_str(snap, "sha256")));

	/* Without a receipt: the first four, for present mode. */
	json_object *bare = evidence_step_expected(RUN1, NULL, NULL, -1, &err);
	assert_int_equal(json_object_array_length(bare), 4);
	json_object_put(bare);

	/* Archive on the "guest", extract on the host against the expected list. */
	char **paths = evidence_step_paths(expected);
	char arc[600], staging[600];
	snprintf(arc, sizeof arc, "%s/.archive-test.tar", guest.root);
	snprintf(staging, sizeof staging, "%s/staging", host.root);
	fs_mkdir_p(staging, 0700, NULL);
	assert_int_equal(evidence_archive_write(arc, guest.dir, (const char *const *)paths, 0, NULL, &err),
	                 RELAY_OK);
	char *exp_text = jsonx_to_string(expected, 0);
	char *facts = NULL;
	assert_int_equal(evidence_archive_extract(arc, staging, exp_text, 0, &facts, &err), RELAY_OK);

	/* Place it under host/steps/<id>/, twice (the second is a no-op). */
	assert_int_equal(evidence_step_place(host.dir, RUN1, staging, facts, &err), RELAY_OK);
	snprintf(path, sizeof path, "%s/host/steps/%s/state/snapshots/%s/%s-before.png", host.dir, RUN1,
	         FX_SESSION, RUN1);
	assert_true(fs_exists_nofollow(path));
	/* A step placed for the first time takes the staging folder whole. */
	assert_false(fs_exists_nofollow(staging));
	/* Placed again (a download done twice): file by file, the same bytes
	 * kept and the staged copies dropped. */
	fs_mkdir_p(staging, 0700, NULL);
	free(facts);
	facts = NULL;
	assert_int_equal(evidence_archive_extract(arc, staging, exp_text, 0, &facts, &err), RELAY_OK);
	assert_int_equal(evidence_step_place(host.dir, RUN1, staging, facts, &err), RELAY_OK);
	assert_true(fs_exists_nofollow(staging));
	assert_true(fs_exists_nofollow(path));
	snprintf(path, sizeof path, "%s/state/snapshots/%s/%s-before.png", staging, FX_SESSION, RUN1);
	assert_false(fs_exists_nofollow(path));
	/* A staging folder holding anything besides the checked files is never
	 * renamed whole: only they move, the stray file stays behind. */
	fx_pkg other;
	fx_init(&other);
	char stray[700];
	snprintf(stray, sizeof stray, "%s/staging", other.root);
	fs_mkdir_p(stray, 0700, NULL);
	char *other_facts = NULL;
	assert_int_equal(evidence_archive_extract(arc, stray, exp_text, 0, &other_facts, &err), RELAY_OK);
	snprintf(path, sizeof path, "%s/stray.txt", stray);
	assert_int_equal(fs_write_durable(path, "x", 1, 0600, &err), RELAY_OK);
	assert_int_equal(evidence_step_place(other.dir, RUN1, stray, other_facts, &err), RELAY_OK);
	assert_true(fs_exists_nofollow(path));
	snprintf(path, sizeof path, "%s/host/steps/%s/stray.txt", other.dir, RUN1);
	assert_false(fs_exists_nofollow(path));
	snprintf(path, sizeof path, "%s/host/steps/%s/state/records/execution/%s.json", other.dir, RUN1,
	         RUN1);
	assert_true(fs_exists_nofollow(path));
	free(other_facts);
	fx_free(&other);
	json_object *rec = json_object_new_object();
	jsonx_add_str(rec, "executionId", RUN1);
	jsonx_add_str(rec, "status", "downloaded");
	assert_int_equal(evidence_write_download_record(host.dir, rec, &err), RELAY_OK);
	snprintf(path, sizeof path, "%s/host/evidence-downloads/%s.json", host.dir, RUN1);
	assert_true(fs_exists_nofollow(path));
	json_object_put(rec);

	/* The final pull reuses the step's copy as a host candidate. */
	char incoming[600];
	snprintf(incoming, sizeof incoming, "%s/incoming", host.root);
	fs_mkdir_p(incoming, 0700, NULL);
	int64_t bytes = 0;
	jsonx_get_int(snap, "bytes", &bytes);
	bool used = false;
	assert_int_equal(evidence_copy_candidate(host.dir, jsonx_get_str(snap, "path"), (uint64_t)bytes,
	                                         jsonx_get_str(snap, "sha256"), incoming, &used, &err),
	                 RELAY_OK);
	assert_true(used);
	snprintf(path, sizeof path, "%s/%s", incoming, jsonx_get_str(snap, "path"));
	assert_true(fs_exists_nofollow(path));
	/* A candidate whose bytes differ from the scan is never used. */
	used = true;
	assert_int_equal(
	    evidence_copy_candidate(host.dir, "state/records/execution/" RUN1 ".json", 5,
	                            "0000000000000000000000000000000000000000000000000000000000000000",
	                            incoming, &used, &err),
	    RELAY_OK);
	assert_false(used);
	snprintf(path, sizeof path, "%s/state/records/execution/%s.json", incoming, RUN1);
	assert_false(fs_exists_nofollow(path));

	free(exp_text);
	free(facts);
	evidence_free_paths(paths);
	json_object_put(expected);
	json_object_put(receipt);
	fx_free(&guest);
	fx_free(&host);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_step_download_end_to_end),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
