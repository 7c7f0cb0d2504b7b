/*
 * test_receiver_run.c — `receiver run` through the real static binary
 * (spec/guest.md §7, §12): the four languages and their runtime resolution, exit
 * statuses, timeouts that kill the whole process tree, the shared 64 KiB
 * output budget, the replay rule, the started-marker rule, a damaged
 * journal, the receiver lock and its reclaim rules, validation refusals and
 * cancellation.
 */
#include "receiver_harness.h"

#include <sys/resource.h>

#define DIAG_UNCONFIRMED "receiver lock ownership or active operation is unconfirmed; input is not replayed"

static const char *outcome_kind(json_object *receipt)
{
	return rh_str(receipt, "outcome.kind");
}

static void test_shell_and_environment(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *expect;
	json_object *receipt;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	rq.code =
	    "echo \"root=$RELAY_RUNTIME_ROOT\"\necho \"ws=$RELAY_WORKSPACE\"\necho \"sup=$RELAY_SUPPORT\"\n"
	    "echo \"id=$RELAY_EXECUTION_ID step=$RELAY_STEP_ID\"\npwd\nread x || echo stdin-empty\n";
	req = rh_request(root, "run-env", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_int_equal(o.status, 0);
	assert_false(rh_bool(o.frame, "duplicate"));
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_int_equal(rh_int(receipt, "outcome.exitStatus.code"), 0);
	expect =
	    rh_printf("root=%s\nws=%s/workspace\nsup=%s/support\nid=run-env step=step-run-env\n%s/workspace\n"
	              "stdin-empty\n",
	              root, root, root, root);
	assert_string_equal(rh_str(receipt, "stdout"), expect);
	assert_string_equal(rh_str(receipt, "argv.0") ? rh_str(receipt, "argv.0") : "/bin/sh", "/bin/sh");
	assert_true(rh_bool(receipt, "terminationConfirmed"));
	assert_string_equal(rh_str(receipt, "imageEvidence.status"), "not-requested");
	/* Every step's file landed, and the journal closes the execution once. */
	{
		char *p = rh_printf("%s/state/records/execution/run-env.json", root);
		json_object *rec = rh_read_json(p);
		assert_string_equal(rh_str(rec, "state"), "completed");
		assert_true(strncmp(rh_str(rec, "scriptId"), "script-", 7) == 0);
		assert_int_equal(strlen(rh_str(rec, "scriptId")), 31);
		json_object_put(rec);
		free(p);
		p = rh_printf("%s/state/records/action/action-run-env.json", root);
		rec = rh_read_json(p);
		assert_string_equal(rh_str(rec, "state"), "recorded");
		assert_string_equal(rh_str(rec, "snapshotRole"), "single");
		json_object_put(rec);
		free(p);
		p = rh_printf("%s/state/receiver/started/run-env.json", root);
		assert_true(rh_exists(p));
		free(p);
		p = rh_printf("%s/.receiver-lock", root);
		assert_false(rh_exists(p));
		free(p);
	}
	assert_int_equal(rh_journal_count(root, "execution-completion", "run-env"), 1);
	assert_int_equal(rh_journal_count(root, "execution-start", "run-env"), 1);
	json_object_put(receipt);
	rh_out_free(&o);
	rh_rm_rf(root);
	free(root);
	free(req);
	free(expect);
}

/* The script inherits standard input, output and error only: descriptors
 * the receiver's own caller left open (a low one and the highest the limit
 * allows, up to 3,000) are closed before the script starts. */
static void test_script_inherits_no_other_descriptors(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req;
	json_object *receipt;
	int devnull, high_fd = 3000;
	struct rlimit nofile;
	(void)state;
	RH_REQUIRE_BINARY();
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
	    nofile.rlim_cur <= (rlim_t)high_fd)
		high_fd = (int)nofile.rlim_cur - 1;
	assert_true(high_fd > 50);
	root = rh_root(1);
	rq.code = "exec ls -1 /proc/self/fd\n";
	req = rh_request(root, "run-fds", &rq);
	devnull = open("/dev/null", O_RDONLY);
	assert_true(devnull >= 0);
	assert_int_equal(dup2(devnull, 50), 50);
	assert_int_equal(dup2(devnull, high_fd), high_fd);
	receipt = rh_run_request(&o, root, req, NULL);
	close(50);
	close(high_fd);
	close(devnull);
	assert_string_equal(outcome_kind(receipt), "completed");
	/* 3 is the listing's own open folder. */
	assert_string_equal(rh_str(receipt, "stdout"), "0\n1\n2\n3\n");
	json_object_put(receipt);
	rh_out_free(&o);
	rh_rm_rf(root);
	free(root);
	free(req);
}

static void test_nonzero_exit_is_completed(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req;
	json_object *receipt, *journal;
	size_t i;
	int seen = 0;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	rq.code = "echo failing >&2\nexit 7\n";
	req = rh_request(root, "run-fail", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_int_equal(o.status, 0);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_int_equal(rh_int(receipt, "outcome.exitStatus.code"), 7);
	assert_null(rh_str(receipt, "outcome.exitStatus.signal"));
	assert_string_equal(rh_str(receipt, "stderr"), "failing\n");
	journal = rh_journal(root);
	for (i = 0; i < json_object_array_length(journal); i++) {
		json_object *ev = json_object_array_get_idx(journal, i);
		assert_int_equal(rh_int(ev, "seq"), (int64_t)i + 1);
		if (!strcmp(rh_str(ev, "type"), "action-completion")) {
			assert_string_equal(rh_str(ev, "toolOutcome.kind"), "failure");
			assert_string_equal(rh_str(ev, "state"), "recorded");
			seen = 1;
		}
	}
	assert_true(seen);
	json_object_put(journal);
	json_object_put(receipt);
	rh_out_free(&o);
	rh_rm_rf(root);
	free(root);
	free(req);
}

static char *run_text(const char *cmd)
{
	FILE *f = popen(cmd, "r");
	char line[256] = "";
	if (!f)
		return NULL;
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	pclose(f);
	line[strcspn(line, "\n")] = '\0';
	return line[0] ? strdup(line) : NULL;
}

static void test_javascript_and_python(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *node, *python;
	json_object *receipt;
	(void)state;
	RH_REQUIRE_BINARY();
	node = run_text("command -v node");
	python = run_text("command -v python3");
	if (!node || !python) {
		fprintf(stderr, "skipped: node or python3 is not on PATH\n");
		free(node);
		free(python);
		skip();
	}
	root = rh_root(1);
	rq.language = "javascript";
	rq.code = "console.log('js', 6 * 7); process.exit(3);\n";
	req = rh_request(root, "run-js", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_int_equal(rh_int(receipt, "outcome.exitStatus.code"), 3);
	assert_string_equal(rh_str(receipt, "stdout"), "js 42\n");
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	/* runtime.nodePath names the Node.js to use; a wrong one is refused. */
	rq.node_path = "/nonexistent/node";
	req = rh_request(root, "run-js-bad-node", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "refused");
	assert_string_equal(rh_str(receipt, "outcome.diagnostic"),
	                    "no javascript runtime in the guest: tried /nonexistent/node");
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	memset(&rq, 0, sizeof(rq));
	rq.language = "python";
	rq.code = "import sys\nprint('py', sum([1, 2, 3]))\nsys.stderr.write('e\\n')\n";
	req = rh_request(root, "run-py", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_int_equal(rh_int(receipt, "outcome.exitStatus.code"), 0);
	assert_string_equal(rh_str(receipt, "stdout"), "py 6\n");
	assert_string_equal(rh_str(receipt, "stderr"), "e\n");
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	/* No python3 on PATH: refused with the names tried, nothing started. */
	req = rh_request(root, "run-py-missing", &rq);
	receipt = rh_run_request(&o, root, req, "/nonexistent-bin");
	assert_string_equal(outcome_kind(receipt), "refused");
	assert_string_equal(rh_str(receipt, "outcome.diagnostic"),
	                    "no python runtime in the guest: tried python3");
	assert_int_equal(json_object_array_length(rh_get(receipt, "argv")), 0);
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);
	rh_rm_rf(root);
	free(root);
	free(node);
	free(python);
}

static void test_typescript(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *bin, *tsx, *path, *version, *node, *expect;
	json_object *receipt;
	int major = 0, minor = 0;
	(void)state;
	RH_REQUIRE_BINARY();
	node = run_text("command -v node");
	version = run_text("node --version");
	if (!node || !version || sscanf(version, "v%d.%d", &major, &minor) != 2) {
		fprintf(stderr, "skipped: node is not on PATH\n");
		free(node);
		free(version);
		skip();
	}
	root = rh_root(1);
	bin = rh_bin_dir(root);
	rq.language = "typescript";
	rq.code = "const answer: number = 42;\nconsole.log(answer);\n";

	/* Without tsx, Node.js below 22.6 is refused with the exact text. */
	{
		char *tsx_found = run_text("command -v tsx");
		if (tsx_found || major > 22 || (major == 22 && minor >= 6)) {
			fprintf(stderr, "note: tsx on PATH or Node.js %s strips types; refusal not checked\n",
			        version);
		} else {
			char *dir = rh_printf("%s/nodeonly", bin);
			char *link = rh_printf("%s/node", dir);
			mkdir(dir, 0700);
			assert_int_equal(symlink(node, link), 0);
			path = rh_printf("%s:/bin", dir);
			req = rh_request(root, "run-ts-refused", &rq);
			receipt = rh_run_request(&o, root, req, path);
			assert_string_equal(outcome_kind(receipt), "refused");
			expect = rh_printf(
			    "no typescript runtime in the guest: tsx not found and Node.js %s lacks "
			    "type stripping (22.6 or later)",
			    version);
			assert_string_equal(rh_str(receipt, "outcome.diagnostic"), expect);
			assert_int_equal(rh_journal_count(root, "action-refusal", "run-ts-refused"), 1);
			assert_int_equal(rh_journal_count(root, "execution-start", "run-ts-refused"), 0);
			json_object_put(receipt);
			rh_out_free(&o);
			free(req);
			free(expect);
			free(path);
			free(dir);
			free(link);
		}
		free(tsx_found);
	}

	/* Neither tsx nor node. */
	req = rh_request(root, "run-ts-none", &rq);
	receipt = rh_run_request(&o, root, req, "/nonexistent-bin");
	assert_string_equal(outcome_kind(receipt), "refused");
	assert_string_equal(rh_str(receipt, "outcome.diagnostic"),
	                    "no typescript runtime in the guest: tried tsx, node");
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	/* A tsx on PATH runs the script. */
	tsx = rh_printf("%s/tsx", bin);
	rh_write(tsx, "#!/bin/sh\necho \"fake-tsx $(basename \"$1\")\"\n", 0700);
	path = rh_printf("%s:/usr/bin:/bin", bin);
	req = rh_request(root, "run-ts", &rq);
	receipt = rh_run_request(&o, root, req, path);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_string_equal(rh_str(receipt, "stdout"), "fake-tsx run-ts.ts\n");
	{
		json_object *argv = rh_get(receipt, "argv");
		assert_int_equal(json_object_array_length(argv), 2);
		assert_string_equal(json_object_get_string(json_object_array_get_idx(argv, 0)), tsx);
	}
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);
	free(path);
	rh_rm_rf(bin);
	rh_rm_rf(root);
	free(root);
	free(bin);
	free(tsx);
	free(node);
	free(version);
}

static void test_timeout_kills_the_tree(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req;
	json_object *receipt;
	pid_t same_group, own_session, orphan;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	/* A grandchild in the group, one in its own session, and an orphan whose
	 * parent exits at once (reparented to the subreaper receiver). */
	rq.code = "sleep 300 &\necho $! > same.pid\n"
	          "setsid sleep 301 &\necho $! > own.pid\n"
	          "sh -c 'setsid sleep 302 & echo $! > orphan.pid' \n"
	          "echo started\nsleep 300\n";
	rq.timeout_ms = 700;
	req = rh_request(root, "run-timeout", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_int_equal(o.status, 0);
	assert_string_equal(outcome_kind(receipt), "uncertain");
	assert_true(rh_bool(receipt, "timedOut"));
	assert_true(rh_bool(receipt, "terminationConfirmed"));
	assert_string_equal(rh_str(receipt, "outcome.exitStatus.signal"), "SIGKILL");
	assert_non_null(strstr(rh_str(receipt, "outcome.diagnostic"), "timed out after 700 ms"));
	assert_string_equal(rh_str(receipt, "stdout"), "started\n");
	same_group = rh_read_pid(root, "same.pid");
	own_session = rh_read_pid(root, "own.pid");
	orphan = rh_read_pid(root, "orphan.pid");
	assert_true(same_group > 0 && own_session > 0 && orphan > 0);
	assert_true(rh_process_gone(same_group));
	assert_true(rh_process_gone(own_session));
	assert_true(rh_process_gone(orphan));
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	rh_rm_rf(root);
	free(root);
}

/* A member of the run's process group that the receiver may not kill (a
 * setuid-root program that made itself root, while the receiver runs as
 * nobody): termination cannot be confirmed, so the outcome is uncertain,
 * the journal says which group, the lock keeps it, and the next run runs
 * nothing (spec/guest.md §12.4). */
static void test_unkillable_member_is_not_confirmed(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *py, *cmd, *ready;
	json_object *receipt;
	pid_t survivor;
	(void)state;
	RH_REQUIRE_BINARY();
	if (geteuid() != 0) {
		fprintf(stderr, "skipped: needs root (a setuid-root helper and a run as nobody)\n");
		skip();
	}
	root = rh_root(1);
	cmd = rh_printf("chown -R 65534:65534 '%s'", root);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	/* Python copied and made setuid root; it makes all its uids 0, so
	 * nobody's SIGKILL gets EPERM. It stays in the script's group. */
	py = rh_printf("%s/py-suid", root);
	cmd = rh_printf("cp /usr/bin/python3 '%s' && chown root:root '%s' && chmod 4755 '%s'", py, py, py);
	if (system(cmd) != 0) {
		free(cmd);
		fprintf(stderr, "skipped: cannot make a setuid copy of /usr/bin/python3\n");
		rh_rm_rf(root);
		skip();
	}
	free(cmd);
	/* A filesystem mounted nosuid (or a kernel that ignores the bit) gives
	 * no root helper: say so rather than fail. */
	cmd = rh_printf("test \"$(setpriv --reuid=65534 --regid=65534 --clear-groups '%s' -I -c "
	                "'import os; print(os.geteuid())' 2>/dev/null)\" = 0",
	                py);
	if (system(cmd) != 0) {
		free(cmd);
		fprintf(stderr,
		        "skipped: a setuid-root copy of python3 under %s does not run as root for "
		        "nobody (nosuid mount or no setpriv)\n",
		        root);
		rh_rm_rf(root);
		skip();
	}
	free(cmd);
	ready = rh_printf("%s/workspace/ready", root);
	rq.code = rh_printf("'%s' -I -c 'import os,time; os.setuid(0); open(\"ready\",\"w\").close(); "
	                    "time.sleep(120)' &\n"
	                    "echo $! > suid.pid\n"
	                    "n=0; while [ ! -e ready ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done\n"
	                    "echo started\nsleep 120\n",
	                    py);
	/* It must end by the timeout: a script that exits on its own leaves
	 * what it started running (spec/guest.md §16.1), so only a kill is tried. */
	rq.timeout_ms = 5000;
	req = rh_request(root, "run-unkillable", &rq);
	cmd = rh_printf("chown -R 65534:65534 '%s/requests' '%s/streamed'", root, root);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	receipt = rh_run_request_as(&o, root, req, NULL, 65534);
	survivor = rh_read_pid(root, "suid.pid");
	assert_true(survivor > 0);
	assert_true(rh_exists(ready));
	assert_non_null(receipt);
	assert_string_equal(outcome_kind(receipt), "uncertain");
	assert_false(rh_bool(receipt, "terminationConfirmed"));
	assert_non_null(strstr(rh_str(receipt, "outcome.diagnostic"), "not confirmed"));
	assert_string_equal(rh_str(receipt, "stdout"), "started\n");
	assert_int_equal(rh_journal_count(root, "resource-stop", "run-unkillable"), 1);
	assert_false(rh_process_gone(survivor));
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	/* The lock still holds the unconfirmed group: the next run is not
	 * started beside it; it is answered uncertain and runs nothing. */
	free((char *)rq.code);
	rq.code = "echo must-not-run > ran.txt\n";
	req = rh_request(root, "run-after", &rq);
	cmd = rh_printf("chown -R 65534:65534 '%s/requests' '%s/streamed'", root, root);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	rh_exec_as(&o, NULL, (const char *const[]){"run", "--root", root, req, NULL}, 65534);
	assert_non_null(o.frame);
	assert_null(rh_get(o.frame, "receipt.path"));
	assert_string_equal(rh_str(o.frame, "outcome.kind"), "uncertain");
	assert_non_null(strstr(rh_str(o.frame, "outcome.diagnostic"), "unconfirmed; input is not replayed"));
	cmd = rh_printf("%s/workspace/ran.txt", root);
	assert_false(rh_exists(cmd));
	free(cmd);
	rh_out_free(&o);
	free(req);

	kill(survivor, SIGKILL);
	for (int i = 0; i < 100 && !rh_process_gone(survivor); i++)
		usleep(20 * 1000);
	free(ready);
	free(py);
	rh_rm_rf(root);
	free(root);
}

static void test_output_budget(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req;
	json_object *receipt;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	/* 40,000 bytes on each stream: together over the shared 65,536. */
	rq.code =
	    "head -c 40000 /dev/zero | tr '\\0' a\nhead -c 40000 /dev/zero | tr '\\0' b >&2\nsleep 30\n";
	req = rh_request(root, "run-flood", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "uncertain");
	assert_true(rh_bool(receipt, "outputTruncated"));
	assert_false(rh_bool(receipt, "timedOut"));
	assert_int_equal(strlen(rh_str(receipt, "stdout")) + strlen(rh_str(receipt, "stderr")), 65536);
	assert_non_null(strstr(rh_str(receipt, "outcome.diagnostic"), "output exceeded 65536 bytes"));
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	/* Exactly the budget is fine; invalid UTF-8 becomes U+FFFD. */
	rq.code = "printf 'ok \\377\\n'\n";
	req = rh_request(root, "run-utf8", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_false(rh_bool(receipt, "outputTruncated"));
	assert_string_equal(rh_str(receipt, "stdout"), "ok \xEF\xBF\xBD\n");
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);
	rq.code = "head -c 65536 /dev/zero | tr '\\0' c\n";
	req = rh_request(root, "run-exact", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_false(rh_bool(receipt, "outputTruncated"));
	assert_int_equal(strlen(rh_str(receipt, "stdout")), 65536);
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);
	rh_rm_rf(root);
	free(root);
}

static int count_lines(const char *path)
{
	char *text = rh_read(path, NULL);
	int n = 0;
	char *p;
	if (!text)
		return 0;
	for (p = text; *p; p++)
		if (*p == '\n')
			n++;
	free(text);
	return n;
}

static void test_replay_rule(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *counter, *sha1;
	json_object *receipt;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	counter = rh_printf("%s/workspace/count", root);
	rq.code = "echo ran >> \"$RELAY_WORKSPACE/count\"\n";
	req = rh_request(root, "run-once", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_string_equal(outcome_kind(receipt), "completed");
	assert_false(rh_bool(o.frame, "duplicate"));
	sha1 = strdup(rh_str(o.frame, "receipt.sha256"));
	json_object_put(receipt);
	rh_out_free(&o);
	assert_int_equal(count_lines(counter), 1);

	/* The same id again: nothing runs, the stored receipt answers. */
	receipt = rh_run_request(&o, root, req, NULL);
	assert_true(rh_bool(o.frame, "duplicate"));
	assert_true(rh_bool(o.frame, "requestMatches"));
	assert_string_equal(rh_str(o.frame, "receipt.sha256"), sha1);
	json_object_put(receipt);
	rh_out_free(&o);
	assert_int_equal(count_lines(counter), 1);

	/* Another request under the same id: still the first receipt. */
	free(req);
	rq.code = "echo ran >> \"$RELAY_WORKSPACE/count\"\necho twice >> \"$RELAY_WORKSPACE/count\"\n";
	req = rh_request(root, "run-once", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_true(rh_bool(o.frame, "duplicate"));
	assert_false(rh_bool(o.frame, "requestMatches"));
	assert_string_equal(rh_str(o.frame, "receipt.sha256"), sha1);
	json_object_put(receipt);
	rh_out_free(&o);
	assert_int_equal(count_lines(counter), 1);
	assert_int_equal(rh_journal_count(root, "execution-completion", "run-once"), 1);

	/* A receipt whose execution-completion line was lost gets it back once. */
	{
		char *jpath = rh_printf("%s/state/journal/events.jsonl", root);
		size_t len = 0;
		char *text = rh_read(jpath, &len);
		char *last = text + len - 1;
		while (last > text && last[-1] != '\n')
			last--;
		assert_non_null(strstr(last, "execution-completion"));
		assert_int_equal(truncate(jpath, (off_t)(last - text)), 0);
		free(text);
		free(jpath);
	}
	assert_int_equal(rh_journal_count(root, "execution-completion", "run-once"), 0);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_true(rh_bool(o.frame, "duplicate"));
	json_object_put(receipt);
	rh_out_free(&o);
	assert_int_equal(rh_journal_count(root, "execution-completion", "run-once"), 1);
	receipt = rh_run_request(&o, root, req, NULL);
	json_object_put(receipt);
	rh_out_free(&o);
	assert_int_equal(rh_journal_count(root, "execution-completion", "run-once"), 1);
	assert_int_equal(count_lines(counter), 1);
	rh_rm_rf(root);
	free(root);
	free(req);
	free(counter);
	free(sha1);
}

static void test_started_marker_without_receipt(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *marker, *counter;
	json_object *receipt;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	counter = rh_printf("%s/workspace/count", root);
	rq.code = "echo ran >> \"$RELAY_WORKSPACE/count\"\n";
	req = rh_request(root, "run-lost", &rq);
	marker = rh_printf("%s/state/receiver/started/run-lost.json", root);
	rh_write(marker,
	         "{\"executionId\":\"run-lost\",\"requestSha256\":"
	         "\"1111111111111111111111111111111111111111111111111111111111111111\",\"startedAt\":"
	         "\"2026-01-01T00:00:00.000Z\"}\n",
	         0600);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_int_equal(o.status, 0);
	assert_false(rh_bool(o.frame, "duplicate"));
	assert_string_equal(outcome_kind(receipt), "uncertain");
	assert_string_equal(rh_str(receipt, "outcome.diagnostic"),
	                    "execution was already started; it will not be replayed");
	assert_string_equal(rh_str(receipt, "requestSha256"),
	                    "1111111111111111111111111111111111111111111111111111111111111111");
	json_object_put(receipt);
	rh_out_free(&o);
	assert_false(rh_exists(counter));
	assert_int_equal(rh_journal_count(root, "execution-completion", "run-lost"), 1);

	/* Settled for good: the next answer is the stored receipt. */
	receipt = rh_run_request(&o, root, req, NULL);
	assert_true(rh_bool(o.frame, "duplicate"));
	assert_false(rh_bool(o.frame, "requestMatches"));
	json_object_put(receipt);
	rh_out_free(&o);
	assert_false(rh_exists(counter));
	rh_rm_rf(root);
	free(root);
	free(req);
	free(marker);
	free(counter);
}

static void test_damaged_journal(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *jpath, *marker;
	int fd;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	jpath = rh_printf("%s/state/journal/events.jsonl", root);
	fd = open(jpath, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "{\"seq\":2,\"at\":\"x\"", 17), 17);
	close(fd);
	rq.code = "echo never\n";
	req = rh_request(root, "run-damaged", &rq);
	assert_null(rh_run_request(&o, root, req, NULL));
	assert_int_equal(o.status, 0);
	assert_true(json_object_is_type(rh_get(o.frame, "receipt"), json_type_null));
	assert_string_equal(rh_str(o.frame, "outcome.kind"), "uncertain");
	assert_string_equal(
	    rh_str(o.frame, "outcome.diagnostic"),
	    "damaged journal; execution requires recording recovery (relay_stage resetRecording: true)");
	rh_out_free(&o);
	marker = rh_printf("%s/state/receiver/started/run-damaged.json", root);
	assert_false(rh_exists(marker));

	/* A terminated last line of another recording is damaged too. */
	rh_write(jpath,
	         "{\"seq\":1,\"at\":\"2026-01-01T00:00:00.000Z\",\"type\":\"session-start\",\"sessionId\":"
	         "\"rec-other\"}\n",
	         0600);
	assert_null(rh_run_request(&o, root, req, NULL));
	assert_non_null(strstr(rh_str(o.frame, "outcome.diagnostic"), "damaged journal"));
	rh_out_free(&o);
	assert_false(rh_exists(marker));
	rh_rm_rf(root);
	free(root);
	free(req);
	free(jpath);
	free(marker);
}

/* ---- the lock ------------------------------------------------------------ */

static unsigned long long start_ticks_of(pid_t pid)
{
	char path[64], text[1024];
	FILE *f;
	char *p;
	int i;
	unsigned long long ticks = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(text, sizeof(text), f));
	fclose(f);
	p = strrchr(text, ')') + 2;
	for (i = 3; i < 22; i++)
		p = strchr(p, ' ') + 1;
	sscanf(p, "%llu", &ticks);
	return ticks;
}

static char *boot_id(void)
{
	char *text = rh_read("/proc/sys/kernel/random/boot_id", NULL);
	assert_non_null(text);
	text[strcspn(text, "\n")] = '\0';
	return text;
}

static void write_owner(const char *root, pid_t pid, long long ticks, const char *exec_id, pid_t group,
                        int settled)
{
	char *dir = rh_printf("%s/.receiver-lock", root);
	char *path = rh_printf("%s/owner.json", dir);
	char *boot = boot_id();
	char *groups = group ? rh_printf("[%d]", (int)group) : strdup("[]");
	char *text =
	    rh_printf("{\"pid\":%d,\"startTime\":\"2026-01-01T00:00:00.000Z\",\"startTicks\":%lld,"
	              "\"bootId\":\"%s\",\"executionId\":\"%s\",\"active\":true,\"operationPids\":%s,"
	              "\"pendingSpawn\":false,\"settled\":%s}",
	              (int)pid, ticks, boot, exec_id, groups, settled ? "true" : "false");
	mkdir(dir, 0700);
	rh_write(path, text, 0600);
	free(dir);
	free(path);
	free(boot);
	free(groups);
	free(text);
}

static pid_t dead_pid(void)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	return pid;
}

static pid_t live_group(void)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setsid();
		for (;;)
			pause();
	}
	return pid;
}

static void test_lock_rules(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *lock, *owner;
	json_object *receipt;
	pid_t group;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	lock = rh_printf("%s/.receiver-lock", root);
	owner = rh_printf("%s/owner.json", lock);
	rq.code = "echo ran\n";

	/* A dead owner whose operation group still lives: unconfirmed, kept. */
	group = live_group();
	write_owner(root, dead_pid(), 1, "run-earlier", group, 0);
	req = rh_request(root, "run-a", &rq);
	assert_null(rh_run_request(&o, root, req, NULL));
	assert_int_equal(o.status, 0);
	assert_string_equal(rh_str(o.frame, "outcome.kind"), "uncertain");
	assert_string_equal(rh_str(o.frame, "outcome.diagnostic"), DIAG_UNCONFIRMED);
	rh_out_free(&o);
	assert_true(rh_exists(owner));

	/* Once that group is gone, the lock is reclaimed and the run proceeds. */
	kill(-group, SIGKILL);
	waitpid(group, NULL, 0);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_non_null(receipt);
	assert_string_equal(outcome_kind(receipt), "completed");
	json_object_put(receipt);
	rh_out_free(&o);
	assert_false(rh_exists(lock));
	free(req);

	/* A live owner (this test, with its real start time) is never reclaimed. */
	write_owner(root, getpid(), (long long)start_ticks_of(getpid()), "run-other", 0, 0);
	req = rh_request(root, "run-b", &rq);
	assert_null(rh_run_request(&o, root, req, NULL));
	assert_string_equal(rh_str(o.frame, "outcome.diagnostic"), DIAG_UNCONFIRMED);
	rh_out_free(&o);
	assert_true(rh_exists(owner));
	/* ... and for its own execution id it is "in progress". */
	write_owner(root, getpid(), (long long)start_ticks_of(getpid()), "run-b", 0, 0);
	assert_null(rh_run_request(&o, root, req, NULL));
	assert_string_equal(rh_str(o.frame, "outcome.diagnostic"),
	                    "execution is in progress; it will not be replayed");
	rh_out_free(&o);

	/* The same pid with another start time is a reused pid: reclaimed. */
	write_owner(root, getpid(), (long long)start_ticks_of(getpid()) + 12345, "run-other", 0, 0);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_non_null(receipt);
	assert_string_equal(outcome_kind(receipt), "completed");
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	/* A settled lock of a live owner with no surviving group: reclaimed. */
	write_owner(root, getpid(), (long long)start_ticks_of(getpid()), "run-other", dead_pid(), 1);
	req = rh_request(root, "run-c", &rq);
	receipt = rh_run_request(&o, root, req, NULL);
	assert_non_null(receipt);
	json_object_put(receipt);
	rh_out_free(&o);
	free(req);

	/* A lock without owner.json cannot be confirmed: kept. */
	mkdir(lock, 0700);
	req = rh_request(root, "run-d", &rq);
	assert_null(rh_run_request(&o, root, req, NULL));
	assert_string_equal(rh_str(o.frame, "outcome.diagnostic"), DIAG_UNCONFIRMED);
	rh_out_free(&o);
	assert_true(rh_exists(lock));
	rmdir(lock);
	free(req);
	rh_rm_rf(root);
	free(root);
	free(lock);
	free(owner);
}

static void test_validation_refusals(void **state)
{
	static const struct {
		const char *id;
		const char *field;
		const char *session;
		const char *because;
		int64_t timeout_ms;
		const char *expect;
	} cases[] = {
	    {"run-v1", "\"extra\":1", NULL, NULL, 0, "unsupported request: extra"},
	    {"run-v2", NULL, "rec-ffffffffffffffff", NULL, 0,
	     "request identity does not match this recording"},
	    {"run-v3", NULL, NULL, "   ", 0, "Run execution intent is required"},
	    {"run-v4", NULL, NULL, NULL, 3600001, "timeoutMs must be an integer from 1 to 3600000"},
	};
	rh_out o;
	char *root, *req;
	json_object *receipt;
	size_t i;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rh_req rq = {0};
		rq.code = "echo never > \"$RELAY_WORKSPACE/never\"\n";
		rq.extra_field = cases[i].field;
		rq.session = cases[i].session;
		rq.because = cases[i].because;
		rq.timeout_ms = cases[i].timeout_ms;
		req = rh_request(root, cases[i].id, &rq);
		receipt = rh_run_request(&o, root, req, NULL);
		assert_int_equal(o.status, 0);
		assert_string_equal(outcome_kind(receipt), "refused");
		assert_string_equal(rh_str(receipt, "outcome.diagnostic"), cases[i].expect);
		assert_true(rh_bool(receipt, "terminationConfirmed"));
		assert_int_equal(rh_journal_count(root, "action-refusal", cases[i].id), 1);
		json_object_put(receipt);
		rh_out_free(&o);
		free(req);
	}
	/* A script changed after the request was written. */
	{
		rh_req rq = {0};
		char *script = rh_printf("%s/streamed/run-v5.sh", root);
		rq.code = "echo never > \"$RELAY_WORKSPACE/never\"\n";
		req = rh_request(root, "run-v5", &rq);
		rh_write(script, "echo tampered > \"$RELAY_WORKSPACE/never\"\n", 0600);
		receipt = rh_run_request(&o, root, req, NULL);
		assert_string_equal(outcome_kind(receipt), "refused");
		assert_string_equal(rh_str(receipt, "outcome.diagnostic"), "script hash mismatch");
		json_object_put(receipt);
		rh_out_free(&o);
		free(req);
		free(script);
	}
	{
		char *never = rh_printf("%s/workspace/never", root);
		assert_false(rh_exists(never));
		free(never);
	}
	/* An unreadable request: exit 2, executionId "unknown", refused. */
	{
		char *bad = rh_printf("%s/requests/bad.json", root);
		rh_write(bad, "{not json", 0600);
		rh_run(&o, "run", "--root", root, bad, NULL);
		assert_int_equal(o.status, 2);
		assert_string_equal(rh_str(o.frame, "executionId"), "unknown");
		assert_string_equal(rh_str(o.frame, "outcome.kind"), "refused");
		rh_out_free(&o);
		free(bad);
	}
	rh_rm_rf(root);
	free(root);
}

static void test_cancel(void **state)
{
	rh_out o;
	rh_req rq = {0};
	char *root, *req, *owner_path, *receipt_path;
	json_object *receipt = NULL;
	pid_t pid;
	int status, tries;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	rq.code = "echo waiting\nsleep 60\n";
	rq.timeout_ms = 60000;
	req = rh_request(root, "run-cancel", &rq);
	owner_path = rh_printf("%s/.receiver-lock/owner.json", root);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 1);
		dup2(devnull, 2);
		execl(rh_binary(), rh_binary(), "run", "--root", root, req, (char *)NULL);
		_exit(127);
	}
	/* Wait until the script's group is recorded in the lock. */
	for (tries = 0; tries < 500; tries++) {
		json_object *owner = rh_read_json(owner_path);
		json_object *groups = owner ? rh_get(owner, "operationPids") : NULL;
		int ready = groups && json_object_array_length(groups) == 1 && rh_str(owner, "phase") &&
		            !strcmp(rh_str(owner, "phase"), "script");
		if (owner)
			json_object_put(owner);
		if (ready)
			break;
		usleep(20000);
	}
	assert_true(tries < 500);
	rh_run(&o, "cancel", "--root", root, "--execution", "run-other", NULL);
	assert_int_equal(o.status, 0);
	assert_false(rh_bool(o.frame, "signalled"));
	rh_out_free(&o);
	rh_run(&o, "cancel", "--root", root, "--execution", "run-cancel", NULL);
	assert_int_equal(o.status, 0);
	assert_string_equal(rh_str(o.frame, "executionId"), "run-cancel");
	assert_true(rh_bool(o.frame, "signalled"));
	rh_out_free(&o);
	waitpid(pid, &status, 0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	receipt_path = rh_printf("%s/state/receiver/receipts/run-cancel.json", root);
	receipt = rh_read_json(receipt_path);
	assert_non_null(receipt);
	assert_string_equal(outcome_kind(receipt), "uncertain");
	assert_string_equal(rh_str(receipt, "outcome.diagnostic"), "cancelled by the host");
	assert_string_equal(rh_str(receipt, "stdout"), "waiting\n");
	json_object_put(receipt);
	{
		char *lock = rh_printf("%s/.receiver-lock", root);
		assert_false(rh_exists(lock));
		free(lock);
	}
	rh_rm_rf(root);
	free(root);
	free(req);
	free(owner_path);
	free(receipt_path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_shell_and_environment),
	    cmocka_unit_test(test_script_inherits_no_other_descriptors),
	    cmocka_unit_test(test_nonzero_exit_is_completed),
	    cmocka_unit_test(test_javascript_and_python),
	    cmocka_unit_test(test_typescript),
	    cmocka_unit_test(test_timeout_kills_the_tree),
	    cmocka_unit_test(test_output_budget),
	    cmocka_unit_test(test_replay_rule),
	    cmocka_unit_test(test_started_marker_without_receipt),
	    cmocka_unit_test(test_damaged_journal),
	    cmocka_unit_test(test_lock_rules),
	    cmocka_unit_test(test_validation_refusals),
	    cmocka_unit_test(test_cancel),
	    cmocka_unit_test(test_unkillable_member_is_not_confirmed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
