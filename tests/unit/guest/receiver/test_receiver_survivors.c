/*
 * What a step starts outlives the step (spec/guest.md §16.1): a script that exits
 * on its own leaves its background processes running, the receipt, the
 * execution record and the journal name them, their later output goes to
 * the bounded background log without blocking or breaking them, the next
 * run is not held back by them, and a timeout still kills them all.
 */
#include "receiver_harness.h"

static const char *outcome_kind(json_object *receipt)
{
	return rh_str(receipt, "outcome.kind");
}

/* Waits up to limit_ms for path to exist. */
static int wait_for_file(const char *path, int limit_ms)
{
	for (int waited = 0; waited < limit_ms; waited += 20) {
		if (rh_exists(path))
			return 1;
		usleep(20 * 1000);
	}
	return rh_exists(path);
}

static int listed(json_object *left, pid_t pid, const char *command)
{
	json_object *procs = rh_get(left, "processes");
	for (size_t i = 0; procs && i < json_object_array_length(procs); i++) {
		json_object *p = json_object_array_get_idx(procs, i);
		if (rh_int(p, "pid") == pid && strcmp(rh_str(p, "command"), command) == 0)
			return 1;
	}
	return 0;
}

static void test_background_processes_survive_the_step(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *path;
	json_object *receipt, *record;
	pid_t same_group, own_session, orphan;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	/* The three ways a script leaves something behind: in its group, in a
	 * session of its own, and as an orphan whose parent exited at once. */
	rq.code = "sleep 300 &\necho $! > same.pid\n"
	          "setsid sleep 301 &\necho $! > own.pid\n"
	          "sh -c 'setsid sleep 302 & echo $! > orphan.pid'\n"
	          "echo done\nexit 0\n";
	req = rh_request(root, "run-bg", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_int_equal(o.status, 0);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_int_equal(rh_int(receipt, "outcome.exitStatus.code"), 0);
	assert_true(rh_bool(receipt, "terminationConfirmed"));
	assert_string_equal(rh_str(receipt, "stdout"), "done\n");
	same_group = rh_read_pid(root, "same.pid");
	own_session = rh_read_pid(root, "own.pid");
	orphan = rh_read_pid(root, "orphan.pid");
	assert_true(same_group > 0 && own_session > 0 && orphan > 0);
	/* The receiver has exited: they still run. */
	assert_false(rh_process_gone(same_group));
	assert_false(rh_process_gone(own_session));
	assert_false(rh_process_gone(orphan));
	json_object *left = rh_get(receipt, "leftRunning");
	assert_non_null(left);
	assert_int_equal(rh_int(left, "count"), 3);
	assert_true(listed(left, same_group, "sleep"));
	assert_true(listed(left, own_session, "sleep"));
	assert_true(listed(left, orphan, "sleep"));
	path = rh_printf("%s/state/records/execution/run-bg.json", root);
	record = rh_read_json(path);
	assert_int_equal(rh_int(record, "leftRunning.count"), 3);
	json_object_put(record);
	free(path);
	assert_int_equal(rh_journal_count(root, "annotation", "run-bg"), 2); /* routing + background */
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	/* They hold no lock: the next run runs at once and sees them. */
	rq.code = "kill -0 $(cat same.pid) && echo alive\n";
	req = rh_request(root, "run-next", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_string_equal(rh_str(receipt, "stdout"), "alive\n");
	assert_int_equal(rh_int(receipt, "leftRunning.count"), 0);
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);
	kill(same_group, SIGKILL);
	kill(own_session, SIGKILL);
	kill(orphan, SIGKILL);
	rh_rm_rf(root);
	free(root);
}

/* A survivor that writes megabytes to both streams after the step ended is
 * neither blocked nor broken; its output is not the step's; the log stops at
 * 1 MiB and says how much it discarded. */
static void test_survivor_output_goes_to_the_bounded_log(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *log_path, *finished, *log;
	size_t log_len = 0;
	json_object *receipt;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	rq.code = "( trap '' PIPE; sleep 0.6\n"
	          "  head -c 3000000 /dev/zero | tr '\\0' a\n"
	          "  head -c 2000000 /dev/zero | tr '\\0' b >&2\n"
	          "  echo finished > finished ) &\n"
	          "echo step-output\n";
	req = rh_request(root, "run-chatty", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_string_equal(rh_str(receipt, "stdout"), "step-output\n");
	assert_false(rh_bool(receipt, "outputTruncated"));
	assert_true(rh_int(receipt, "leftRunning.count") >= 1);
	finished = rh_printf("%s/workspace/finished", root);
	assert_true(wait_for_file(finished, 20000));
	log_path = rh_printf("%s/state/background/run-chatty.log", root);
	/* The drainer writes its closing note when both pipes have ended. */
	for (int i = 0; i < 200; i++) {
		free(rh_read(log_path, &log_len));
		log = rh_read(log_path, &log_len);
		int done = log && strstr(log, "bytes of later output were discarded") != NULL;
		free(log);
		if (done)
			break;
		usleep(50 * 1000);
	}
	log = rh_read(log_path, &log_len);
	assert_non_null(log);
	assert_true(log_len <= 1024 * 1024);
	assert_true(log_len > 1000 * 1000);
	assert_int_equal(log[0], 'a');
	assert_non_null(strstr(log, "reached its limit of 1 MiB"));
	assert_non_null(strstr(log, "bytes of later output were discarded"));
	{
		struct stat st;
		assert_int_equal(stat(log_path, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
	}
	free(log);
	free(log_path);
	free(finished);
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);
	rh_rm_rf(root);
	free(root);
}

/* A timeout kills what the step started, survivors and all (§16.1 item 6). */
static void test_timeout_still_kills_background_processes(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req;
	json_object *receipt;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	rq.code = "setsid sleep 310 &\necho $! > own.pid\nsleep 300\n";
	rq.timeout_ms = 600;
	req = rh_request(root, "run-timeout-bg", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "uncertain");
	assert_true(rh_bool(receipt, "timedOut"));
	assert_true(rh_bool(receipt, "terminationConfirmed"));
	assert_true(rh_process_gone(rh_read_pid(root, "own.pid")));
	assert_null(rh_get(receipt, "leftRunning.count"));
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);
	rh_rm_rf(root);
	free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_background_processes_survive_the_step),
	    cmocka_unit_test(test_survivor_output_goes_to_the_bounded_log),
	    cmocka_unit_test(test_timeout_still_kills_background_processes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
