/*
 * test_receiver_capture.c — snapshots and text groups through the real
 * static receiver (spec/guest.md §10, §11): fake capture commands (shell scripts
 * that write a PNG to @OUT@, or fail) give before and after snapshots, a
 * failed before-snapshot refuses the run, a failed after-snapshot makes it
 * uncertain, the group rules hold, and capture-test waits and gives up.
 */
#include <dirent.h>

#include "receiver_harness.h"

typedef struct fixture {
	char *root;
	char *bin;
	char *good;      /* writes a PNG, prints {"screenshot_file_path"} */
	char *cua;       /* the same, driven like cua-driver */
	char *bad;       /* exits 3 */
	char *flag;      /* when this file exists, `good` fails */
	char *good_json; /* capture objects */
	char *cua_json;
	char *bad_json;
} fixture;

static void fixture_make(fixture *f)
{
	char *text;
	memset(f, 0, sizeof(*f));
	f->root = rh_root(1);
	f->bin = rh_bin_dir(f->root);
	f->good = rh_printf("%s/fake-capture", f->bin);
	f->cua = rh_printf("%s/fake-cua-driver", f->bin);
	f->bad = rh_printf("%s/broken-capture", f->bin);
	f->flag = rh_printf("%s/fail-now", f->bin);
	text = rh_printf("#!/bin/sh\n"
	                 "[ -e '%s' ] && { echo 'display went away' >&2; exit 4; }\n"
	                 "printf '\\211PNG\\r\\n\\032\\nfake-image-%%s' \"$(date +%%N)\" > \"$1\"\n"
	                 "printf '{\"screenshot_file_path\":\"%%s\",\"width\":1,\"height\":1}\\n' \"$1\"\n",
	                 f->flag);
	rh_write(f->good, text, 0700);
	free(text);
	rh_write(f->cua,
	         "#!/bin/sh\n"
	         "[ \"$1 $2 $3\" = 'call get_desktop_state --json' ] || exit 9\n"
	         "out=$(printf '%s' \"$4\" | sed 's/.*\"screenshot_out_file\":\"\\([^\"]*\\)\".*/\\1/')\n"
	         "printf '\\211PNG\\r\\n\\032\\ncua' > \"$out\"\n"
	         "printf '{\"screenshot_file_path\":\"%s\",\"ok\":true}\\n' \"$out\"\n",
	         0700);
	rh_write(f->bad, "#!/bin/sh\necho 'cannot open display' >&2\nexit 3\n", 0700);
	f->good_json =
	    rh_printf("{\"plugin\":\"capture-x11\",\"argv\":[\"%s\",\"@OUT@\"],\"check\":\"png-file\","
	              "\"timeoutMs\":10000}",
	              f->good);
	f->cua_json = rh_printf("{\"plugin\":\"capture-cua\",\"argv\":[\"%s\",\"call\",\"get_desktop_state\","
	                        "\"--json\",\"{\\\"screenshot_out_file\\\":\\\"@OUT@\\\"}\"],"
	                        "\"check\":\"cua-driver-json\",\"timeoutMs\":10000}",
	                        f->cua);
	f->bad_json =
	    rh_printf("{\"plugin\":\"capture-x11\",\"argv\":[\"%s\",\"@OUT@\"],\"check\":\"png-file\","
	              "\"timeoutMs\":10000}",
	              f->bad);
}

static void fixture_free(fixture *f)
{
	rh_rm_rf(f->bin);
	rh_rm_rf(f->root);
	free(f->root);
	free(f->bin);
	free(f->good);
	free(f->cua);
	free(f->bad);
	free(f->flag);
	free(f->good_json);
	free(f->cua_json);
	free(f->bad_json);
}

static int count_partials(const char *root)
{
	char *dir = rh_printf("%s/state/snapshots/%s", root, RH_SESSION);
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;
	free(dir);
	if (!d)
		return 0;
	while ((de = readdir(d)) != NULL)
		if (!strncmp(de->d_name, ".partial-", 9))
			n++;
	closedir(d);
	return n;
}

static int count_probes(const char *root)
{
	DIR *d = opendir(root);
	struct dirent *de;
	int n = 0;
	if (!d)
		return 0;
	while ((de = readdir(d)) != NULL)
		if (!strncmp(de->d_name, ".capture-probe-", 15))
			n++;
	closedir(d);
	return n;
}

static void check_snapshot(const char *root, json_object *desc, const char *id, const char *phase)
{
	char *name = rh_printf("%s-%s.png", id, phase);
	char *path = rh_printf("%s/state/snapshots/%s/%s", root, RH_SESSION, name);
	size_t len = 0;
	char *data = rh_read(path, &len);
	char hex[SHA256_HEX_LEN + 1];
	assert_non_null(data);
	sha256_buffer_hex(data, len, hex);
	assert_string_equal(rh_str(desc, "phase"), phase);
	assert_string_equal(rh_str(desc, "fileName"), name);
	assert_string_equal(rh_str(desc, "sha256"), hex);
	assert_int_equal(rh_int(desc, "bytes"), (int64_t)len);
	assert_string_equal(rh_str(desc, "mimeType"), "image/png");
	assert_string_equal(rh_str(desc, "sessionId"), RH_SESSION);
	assert_string_equal(rh_str(desc, "executionId"), id);
	free(data);
	free(name);
	free(path);
}

static void test_standalone_snapshots(void **state)
{
	fixture f;
	rh_out o;
	rh_req rq = {0};
	char *req;
	json_object *receipt, *snaps;
	int variant;
	(void)state;
	RH_REQUIRE_BINARY();
	fixture_make(&f);
	for (variant = 0; variant < 2; variant++) {
		const char *id = variant ? "run-cua" : "run-x11";
		rq.code = "echo \"driver=${RELAY_CUA_DRIVER:-none}\"\n";
		rq.capture = variant ? f.cua_json : f.good_json;
		rq.after_ms = 10;
		req = rh_request(f.root, id, &rq);
		receipt = rh_run_request(&o, f.root, req, NULL);
		if (strcmp(rh_str(receipt, "outcome.kind"), "completed") != 0)
			fprintf(stderr, "%s\n", json_object_to_json_string(receipt));
		assert_string_equal(rh_str(receipt, "outcome.kind"), "completed");
		assert_string_equal(rh_str(receipt, "imageEvidence.status"), "available");
		snaps = rh_get(receipt, "imageEvidence.snapshots");
		assert_int_equal(json_object_array_length(snaps), 2);
		check_snapshot(f.root, json_object_array_get_idx(snaps, 0), id, "before");
		check_snapshot(f.root, json_object_array_get_idx(snaps, 1), id, "after");
		assert_int_equal(rh_int(json_object_array_get_idx(snaps, 1), "declaredAfterIntervalMs"), 10);
		assert_null(rh_get(json_object_array_get_idx(snaps, 0), "declaredAfterIntervalMs"));
		if (variant) {
			char *expect = rh_printf("driver=%s\n", f.cua);
			assert_string_equal(rh_str(receipt, "stdout"), expect);
			free(expect);
		} else {
			assert_string_equal(rh_str(receipt, "stdout"), "driver=none\n");
		}
		assert_int_equal(rh_journal_count(f.root, "snapshot-captured", id), 2);
		{
			char *p = rh_printf("%s/state/records/action/action-%s.json", f.root, id);
			json_object *action = rh_read_json(p);
			assert_int_equal(json_object_array_length(rh_get(action, "snapshots")), 2);
			assert_string_equal(rh_str(action, "state"), "recorded");
			json_object_put(action);
			free(p);
		}
		json_object_put(receipt);
		rh_out_free(&o);
		free(req);
	}
	assert_int_equal(count_partials(f.root), 0);
	fixture_free(&f);
}

static void test_failed_snapshots(void **state)
{
	fixture f;
	rh_out o;
	rh_req rq = {0};
	char *req, *side;
	json_object *receipt;
	(void)state;
	RH_REQUIRE_BINARY();
	fixture_make(&f);
	side = rh_printf("%s/workspace/ran", f.root);

	/* A failed before-snapshot refuses the run: the script never starts. */
	rq.code = "touch \"$RELAY_WORKSPACE/ran\"\n";
	rq.capture = f.bad_json;
	req = rh_request(f.root, "run-nobefore", &rq);
	receipt = rh_run_request(&o, f.root, req, NULL);
	assert_string_equal(rh_str(receipt, "outcome.kind"), "refused");
	assert_non_null(strstr(rh_str(receipt, "outcome.diagnostic"),
	                       "before-snapshot failed: capture exited with code 3"));
	assert_string_equal(rh_str(receipt, "imageEvidence.status"), "capture-failed");
	assert_int_equal(json_object_array_length(rh_get(receipt, "imageEvidence.snapshots")), 0);
	assert_false(rh_exists(side));
	assert_int_equal(rh_journal_count(f.root, "evidence-failure", "run-nobefore"), 1);
	assert_int_equal(count_partials(f.root), 0);
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	/* A failed after-snapshot (the script breaks the display) is uncertain. */
	{
		char *code = rh_printf("touch \"$RELAY_WORKSPACE/ran\"\ntouch '%s'\nexit 0\n", f.flag);
		rq.code = code;
		rq.capture = f.good_json;
		req = rh_request(f.root, "run-noafter", &rq);
		receipt = rh_run_request(&o, f.root, req, NULL);
		free(code);
	}
	assert_string_equal(rh_str(receipt, "outcome.kind"), "uncertain");
	assert_non_null(strstr(rh_str(receipt, "outcome.diagnostic"), "after-snapshot failed"));
	assert_int_equal(rh_int(receipt, "outcome.exitStatus.code"), 0);
	assert_string_equal(rh_str(receipt, "imageEvidence.status"), "capture-failed");
	assert_int_equal(json_object_array_length(rh_get(receipt, "imageEvidence.snapshots")), 1);
	assert_true(rh_exists(side));
	assert_int_equal(count_partials(f.root), 0);
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);
	unlink(f.flag);

	/* Two @OUT@ is not a capture command. */
	{
		char *two = rh_printf("{\"plugin\":\"capture-x11\",\"argv\":[\"%s\",\"@OUT@\",\"@OUT@\"],"
		                      "\"check\":\"png-file\",\"timeoutMs\":10000}",
		                      f.good);
		rq.code = "true\n";
		rq.capture = two;
		req = rh_request(f.root, "run-badcap", &rq);
		receipt = rh_run_request(&o, f.root, req, NULL);
		assert_string_equal(rh_str(receipt, "outcome.diagnostic"), "invalid capture command");
		json_object_put(receipt);
		rh_out_free(&o);
		free(req);
		free(two);
	}
	free(side);
	fixture_free(&f);
}

static json_object *run_group(fixture *f, rh_out *o, const char *id, const char *group, const char *phase,
                              int64_t after_ms)
{
	rh_req rq = {0};
	char *req;
	json_object *receipt;
	rq.code = "echo step\n";
	rq.capture = f->good_json;
	rq.group_id = group;
	rq.phase = phase;
	rq.after_ms = after_ms;
	req = rh_request(f->root, id, &rq);
	receipt = rh_run_request(o, f->root, req, NULL);
	free(req);
	assert_non_null(receipt);
	return receipt;
}

static void expect_refused(fixture *f, const char *id, const char *group, const char *phase, int64_t after_ms,
                           const char *diagnostic)
{
	rh_out o;
	json_object *receipt = run_group(f, &o, id, group, phase, after_ms);
	assert_string_equal(rh_str(receipt, "outcome.kind"), "refused");
	assert_string_equal(rh_str(receipt, "outcome.diagnostic"), diagnostic);
	json_object_put(receipt);
	rh_out_free(&o);
}

static void test_groups(void **state)
{
	fixture f;
	rh_out o;
	json_object *receipt, *groups;
	char *groups_path;
	(void)state;
	RH_REQUIRE_BINARY();
	fixture_make(&f);
	groups_path = rh_printf("%s/state/receiver/groups.json", f.root);

	expect_refused(&f, "g-0", "g1", "member", -1, "no open group g1");
	expect_refused(&f, "g-0b", "g1", "first", 500, "invalid snapshot plan");
	expect_refused(&f, "g-0c", "g1", "last", 0, "no open group g1");

	receipt = run_group(&f, &o, "g-1", "g1", "first", -1);
	assert_string_equal(rh_str(receipt, "outcome.kind"), "completed");
	assert_string_equal(rh_str(receipt, "imageEvidence.status"), "available");
	assert_int_equal(json_object_array_length(rh_get(receipt, "imageEvidence.snapshots")), 1);
	assert_string_equal(
	    rh_str(json_object_array_get_idx(rh_get(receipt, "imageEvidence.snapshots"), 0), "phase"),
	    "before");
	assert_string_equal(
	    rh_str(json_object_array_get_idx(rh_get(receipt, "imageEvidence.snapshots"), 0), "groupId"),
	    "g1");
	json_object_put(receipt);
	rh_out_free(&o);
	groups = rh_read_json(groups_path);
	assert_string_equal(rh_str(groups, "active.groupId"), "g1");
	assert_string_equal(rh_str(groups, "active.openedBy"), "g-1");
	json_object_put(groups);

	/* While g1 is open: no unrelated input. */
	expect_refused(&f, "g-2", NULL, NULL, 0,
	               "coalescing group is open; unrelated input is forbidden until its last member");
	expect_refused(&f, "g-3", "g2", "first", -1,
	               "coalescing group is open; unrelated input is forbidden until its last member");
	expect_refused(&f, "g-3b", "g1", "last", -1, "after interval required");

	receipt = run_group(&f, &o, "g-4", "g1", "member", -1);
	assert_string_equal(rh_str(receipt, "outcome.kind"), "completed");
	assert_string_equal(rh_str(receipt, "imageEvidence.status"), "not-requested");
	assert_int_equal(json_object_array_length(rh_get(receipt, "imageEvidence.snapshots")), 0);
	json_object_put(receipt);
	rh_out_free(&o);
	assert_int_equal(rh_journal_count(f.root, "capture-status", "g-4"), 1);
	assert_int_equal(count_probes(f.root), 0);

	receipt = run_group(&f, &o, "g-5", "g1", "last", 0);
	assert_string_equal(rh_str(receipt, "outcome.kind"), "completed");
	assert_int_equal(json_object_array_length(rh_get(receipt, "imageEvidence.snapshots")), 1);
	assert_string_equal(
	    rh_str(json_object_array_get_idx(rh_get(receipt, "imageEvidence.snapshots"), 0), "phase"),
	    "after");
	json_object_put(receipt);
	rh_out_free(&o);
	groups = rh_read_json(groups_path);
	assert_true(json_object_is_type(rh_get(groups, "active"), json_type_null));
	assert_int_equal(json_object_array_length(rh_get(groups, "used")), 1);
	json_object_put(groups);

	/* Closed: standalone runs again; g1 can never be reused. */
	receipt = run_group(&f, &o, "g-6", NULL, NULL, 0);
	assert_string_equal(rh_str(receipt, "outcome.kind"), "completed");
	json_object_put(receipt);
	rh_out_free(&o);
	expect_refused(&f, "g-7", "g1", "first", -1, "group IDs cannot be reused");

	/* A member whose capture gate probe fails is refused. */
	receipt = run_group(&f, &o, "g-8", "g3", "first", -1);
	assert_string_equal(rh_str(receipt, "outcome.kind"), "completed");
	json_object_put(receipt);
	rh_out_free(&o);
	rh_write(f.flag, "", 0600);
	receipt = run_group(&f, &o, "g-9", "g3", "member", -1);
	assert_string_equal(rh_str(receipt, "outcome.kind"), "refused");
	assert_non_null(strstr(rh_str(receipt, "outcome.diagnostic"), "capture gate probe failed"));
	json_object_put(receipt);
	rh_out_free(&o);
	assert_int_equal(count_probes(f.root), 0);
	free(groups_path);
	fixture_free(&f);
}

static void test_capture_test(void **state)
{
	fixture f;
	rh_out o;
	char *flaky, *counter, *json, *text;
	(void)state;
	RH_REQUIRE_BINARY();
	fixture_make(&f);
	/* Fails twice, then works: the wait keeps trying. */
	counter = rh_printf("%s/tries", f.bin);
	flaky = rh_printf("%s/flaky-capture", f.bin);
	text = rh_printf(
	    "#!/bin/sh\necho x >> '%s'\n[ $(wc -l < '%s') -ge 3 ] || { echo 'not yet' >&2; exit 1; }\n"
	    "exec '%s' \"$1\"\n",
	    counter, counter, f.good);
	rh_write(flaky, text, 0700);
	free(text);
	json = rh_printf("{\"plugin\":\"capture-x11\",\"argv\":[\"%s\",\"@OUT@\"],\"check\":\"png-file\","
	                 "\"timeoutMs\":10000}",
	                 flaky);
	rh_run(&o, "capture-test", "--root", f.root, "--capture", json, "--wait-ms", "20000", "--every-ms",
	       "50", NULL);
	assert_int_equal(o.status, 0);
	assert_true(rh_bool(o.frame, "ok"));
	assert_true(rh_int(o.frame, "afterMs") >= 0);
	rh_out_free(&o);
	{
		char *lines = rh_read(counter, NULL);
		assert_string_equal(lines, "x\nx\nx\n");
		free(lines);
	}
	assert_int_equal(count_probes(f.root), 0);

	/* Never works: gives up with the last diagnostic. */
	rh_run(&o, "capture-test", "--root", f.root, "--capture", f.bad_json, "--wait-ms", "400",
	       "--every-ms", "100", NULL);
	assert_int_equal(o.status, 0);
	assert_false(rh_bool(o.frame, "ok"));
	assert_true(rh_int(o.frame, "tries") >= 2);
	assert_non_null(strstr(rh_str(o.frame, "diagnostic"), "cannot open display"));
	rh_out_free(&o);
	assert_int_equal(count_probes(f.root), 0);

	rh_run(&o, "capture-test", "--root", f.root, "--capture", "{\"argv\":[]}", NULL);
	assert_int_equal(o.status, 2);
	rh_out_free(&o);
	free(counter);
	free(flaky);
	free(json);
	fixture_free(&f);
}

/* A capture program whose stderr is not UTF-8 (issue 17, defect 2): the
 * receiver never writes a receipt or journal line it could not read back,
 * so the run is refused (spec/guest.md §7.3 step 12), not made uncertain by an
 * unreadable receipt, and the journal stays readable for delivery. */
static void test_capture_stderr_not_utf8(void **state)
{
	fixture f;
	rh_out o;
	rh_req rq = {0};
	char *req, *hostile, *hostile_json;
	json_object *receipt;
	(void)state;
	RH_REQUIRE_BINARY();
	fixture_make(&f);
	hostile = rh_printf("%s/hostile-capture", f.bin);
	rh_write(hostile, "#!/bin/sh\nprintf 'cannot open \\377\\376\\375 display\\n' >&2\nexit 3\n", 0700);
	hostile_json =
	    rh_printf("{\"plugin\":\"capture-x11\",\"argv\":[\"%s\",\"@OUT@\"],\"check\":\"png-file\","
	              "\"timeoutMs\":10000}",
	              hostile);
	rq.code = "true\n";
	rq.capture = hostile_json;
	req = rh_request(f.root, "run-rawerr", &rq);
	receipt = rh_run_request(&o, f.root, req, NULL); /* asserts the receipt parses as UTF-8 JSON */
	assert_string_equal(rh_str(receipt, "outcome.kind"), "refused");
	assert_non_null(strstr(rh_str(receipt, "outcome.diagnostic"), "before-snapshot failed"));
	assert_int_equal(rh_journal_count(f.root, "evidence-failure", "run-rawerr"),
	                 1); /* every line parses */
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);
	free(hostile_json);
	free(hostile);
	fixture_free(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_standalone_snapshots),
	    cmocka_unit_test(test_failed_snapshots),
	    cmocka_unit_test(test_groups),
	    cmocka_unit_test(test_capture_test),
	    cmocka_unit_test(test_capture_stderr_not_utf8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
