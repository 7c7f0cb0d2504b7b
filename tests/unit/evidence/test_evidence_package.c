/*
 * Evidence packages (spec/evidence.md §3, §4, §6, §7, §9, §11, §12): delivery of a
 * realistic recording built on disk, verification failures that name the
 * file, the review's verdicts for the cases the spec distinguishes, the
 * review command's exit codes, the state merge and the space precheck.
 */
#include <errno.h>
#include <fcntl.h>
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
#include "cli/cli.h"
#include "evidence/package.h"
#include "evidence/review.h"

#define RUN1 "run-5d1f0c9a8e7b4c3d2a1f0e9d8c7b6a59"
#define RUN2 "run-0a1b2c3d4e5f60718293a4b5c6d7e8f9"
#define RUN3 "run-11112222333344445555666677778888"
#define DIAG "diagnostic-8c2f4e1a0b9d7c6e5f4a3b2c1d0e9f8a"

static fx_run run_ok(const char *id, const char *step)
{
	fx_run r = {id, step, "shell /usr/bin/xdg-open https://example.com", 0, false, true, true, NULL, NULL,
	            0,  0};
	return r;
}

static json_object *review_of(const char *dir, bool verify)
{
	evidence_review_options o = {.verify = verify};
	json_object *review = NULL;
	relay_error err = {0};
	assert_int_equal(evidence_review_derive(dir, &o, &review, &err), RELAY_OK);
	return review;
}

static bool has_string(json_object *arr, const char *s)
{
	for (size_t i = 0; arr && i < json_object_array_length(arr); i++)
		if (strcmp(json_object_get_string(json_object_array_get_idx(arr, i)), s) == 0)
			return true;
	return false;
}

static bool any_reason(json_object *review, const char *cls, const char *text)
{
	json_object *arr = jsonx_get_array(jsonx_get_obj(review, "reasons"), cls);
	for (size_t i = 0; arr && i < json_object_array_length(arr); i++)
		if (strcmp(jsonx_get_str(json_object_array_get_idx(arr, i), "text"), text) == 0)
			return true;
	return false;
}

static json_object *step_by_id(json_object *review, const char *id)
{
	json_object *steps = jsonx_get_array(review, "steps");
	for (size_t i = 0; i < json_object_array_length(steps); i++) {
		json_object *s = json_object_array_get_idx(steps, i);
		if (strcmp(jsonx_get_str(s, "id"), id) == 0)
			return s;
	}
	return NULL;
}

static void deliver_ok(fx_pkg *p, evidence_delivery_result *res)
{
	evidence_delivery_options o = {.project_dir = p->root};
	o.identity.guest = "login-test-1";
	o.identity.image = "debian-12-desktop";
	o.identity.acquired_at = "2026-09-24T10:11:10.000Z";
	relay_error err = {0};
	relay_status st = evidence_package_deliver(p->dir, &o, res, &err);
	if (st != RELAY_OK)
		fail_msg("delivery failed: %s", err.message);
	assert_true(res->delivered);
	assert_true(res->verified);
}

/* A realistic package: two runs, a diagnostic, an extraction, a step
 * download still staged under host/steps/. */
static void build_full(fx_pkg *p)
{
	fx_init(p);
	fx_run a = run_ok(RUN1, "shell-1");
	fx_add_run(p, &a);
	fx_add_diagnostic(p, DIAG, 0);
	fx_run b = run_ok(RUN2, "shell-2");
	b.title = "shell ./sign-in.sh";
	fx_add_run(p, &b);
	fx_add_extraction(p);
	fx_finish(p);
	/* A step download that brought a started marker home and one file the
	 * final pull did not (it must be merged into state/). */
	char rel[512];
	snprintf(rel, sizeof rel, "host/steps/%s/state/receiver/started/%s.json", RUN1, RUN1);
	char buf[256];
	snprintf(buf, sizeof buf, "{\"executionId\":\"%s\",\"requestSha256\":\"a41f\"}\n", RUN1);
	fx_write(p, rel, buf, strlen(buf));
	char marker[1024];
	snprintf(marker, sizeof marker, "%s/state/receiver/started/%s.json", p->dir, RUN1);
	unlink(marker);
}

static void test_deliver_and_verify(void **state)
{
	(void)state;
	fx_pkg p;
	build_full(&p);
	evidence_delivery_result res;
	deliver_ok(&p, &res);
	assert_false(res.reverified_only);
	assert_string_equal(res.completeness, "complete");
	assert_string_equal(res.execution, "passed");

	char path[1024];
	struct stat st;
	snprintf(path, sizeof path, "%s/host/steps", p.dir);
	assert_false(fs_exists_nofollow(path));
	snprintf(path, sizeof path, "%s/state/receiver/started/%s.json", p.dir, RUN1);
	assert_true(fs_exists_nofollow(path));
	const char *derived[] = {"OPENING.txt", "index.html", "manifest.json"};
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s/%s", p.dir, derived[i]);
		assert_int_equal(lstat(path, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
	}
	/* The manifest's shape (§3). */
	json_object *m = NULL;
	snprintf(path, sizeof path, "%s/manifest.json", p.dir);
	assert_int_equal(fs_read_json(path, 1 << 24, &m, NULL), RELAY_OK);
	int64_t v = 0;
	assert_true(jsonx_get_int(m, "manifestVersion", &v));
	assert_int_equal(v, 1);
	assert_string_equal(jsonx_get_str(m, "packageId"), "pkg-" FX_PURPOSE);
	assert_string_equal(jsonx_get_str(m, "taskId"), FX_PURPOSE);
	assert_string_equal(jsonx_get_str(m, "sessionId"), FX_SESSION);
	assert_string_equal(jsonx_get_str(m, "guest"), "login-test-1");
	assert_string_equal(jsonx_get_str(m, "hashAlgorithm"), "sha256");
	json_object *records = jsonx_get_array(m, "records");
	json_object *snaps = jsonx_get_array(m, "snapshots");
	json_object *atts = jsonx_get_array(m, "attachments");
	assert_int_equal(json_object_array_length(snaps), 4);
	assert_int_equal(json_object_array_length(atts), 1);
	assert_int_equal(json_object_array_length(jsonx_get_array(m, "media")), 0);
	const char *prev = "";
	bool opening = false, index = false, self = false;
	for (size_t i = 0; i < json_object_array_length(records); i++) {
		const char *rp = jsonx_get_str(json_object_array_get_idx(records, i), "path");
		assert_true(strcmp(prev, rp) < 0); /* byte order */
		prev = rp;
		opening |= strcmp(rp, "OPENING.txt") == 0;
		index |= strcmp(rp, "index.html") == 0;
		self |= strcmp(rp, "manifest.json") == 0;
	}
	assert_true(opening && index && !self);
	json_object *s0 = json_object_array_get_idx(snaps, 0);
	assert_string_equal(jsonx_get_str(s0, "provenance"), "dispatch-captured");
	assert_string_equal(jsonx_get_str(s0, "actionId"), "action-" RUN2);
	assert_string_equal(jsonx_get_str(s0, "role"), "after");
	assert_true(jsonx_get_int(s0, "declaredAfterIntervalMs", &v));
	assert_int_equal(v, 500);
	json_object *a0 = json_object_array_get_idx(atts, 0);
	assert_string_equal(jsonx_get_str(a0, "declaredType"), "declared-extraction");
	assert_string_equal(jsonx_get_str(a0, "name"), "screens");
	json_object_put(m);

	/* OPENING.txt (§4). */
	char *text = NULL;
	size_t len = 0;
	snprintf(path, sizeof path, "%s/OPENING.txt", p.dir);
	assert_int_equal(fs_read_file(path, 1 << 20, &text, &len, NULL), RELAY_OK);
	assert_non_null(
	    strstr(text, "Task       " FX_PURPOSE "   (guest login-test-1, image debian-12-desktop)"));
	assert_non_null(
	    strstr(text, "At delivery the verdicts were: snapshots complete, execution\npassed, 3 steps, "
	                 "0 findings."));
	free(text);

	/* Independent full verification, and a second delivery only re-verifies. */
	relay_error err = {0};
	assert_int_equal(evidence_package_verify(p.dir, p.root, NULL, &err), RELAY_OK);
	evidence_delivery_result again;
	deliver_ok(&p, &again);
	assert_true(again.reverified_only);
	evidence_delivery_result_free(&again);

	/* The review of the delivered package: steps in order, with the
	 * diagnostic between the two runs. */
	json_object *review = res.review;
	json_object *steps = jsonx_get_array(review, "steps");
	assert_int_equal(json_object_array_length(steps), 3);
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(steps, 0), "id"), "shell-1");
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(steps, 1), "id"), DIAG);
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(steps, 2), "id"), "shell-2");
	json_object *s1 = step_by_id(review, "shell-1");
	assert_string_equal(jsonx_get_str(jsonx_get_obj(s1, "snapshots"), "before"),
	                    "state/snapshots/" FX_SESSION "/" RUN1 "-before.png");
	assert_string_equal(jsonx_get_str(jsonx_get_obj(s1, "snapshots"), "after"),
	                    "state/snapshots/" FX_SESSION "/" RUN1 "-after.png");
	assert_string_equal(jsonx_get_str(s1, "state"), "recorded");
	assert_string_equal(jsonx_get_str(s1, "expected"), "Exits with status 0");
	assert_int_equal(json_object_array_length(jsonx_get_array(review, "outputs")), 1);
	evidence_delivery_result_free(&res);
	fx_free(&p);
}

static void expect_verify_fails(fx_pkg *p, const char *needle)
{
	fw_strlist errors = {0};
	relay_error err = {0};
	assert_int_equal(evidence_package_verify(p->dir, p->root, &errors, &err), RELAY_E_INTEGRITY);
	bool found = false;
	for (size_t i = 0; i < errors.count; i++) {
		assert_non_null(strstr(errors.items[i], "package verification failed: "));
		if (strstr(errors.items[i], needle))
			found = true;
	}
	if (!found)
		fail_msg("no verification error names %s (first: %s)", needle,
		         errors.count ? errors.items[0] : "none");
	fw_strlist_free(&errors);
}

static void test_verification_failures(void **state)
{
	(void)state;
	fx_pkg p;
	build_full(&p);
	evidence_delivery_result res;
	deliver_ok(&p, &res);
	evidence_delivery_result_free(&res);
	char path[1024];

	/* An edited file after delivery. */
	snprintf(path, sizeof path, "%s/host/scripts/%s.sh", p.dir, RUN1);
	assert_int_equal(fs_write_durable(path, "echo tampered\n", 14, 0600, NULL), RELAY_OK);
	expect_verify_fails(&p, "host/scripts/" RUN1 ".sh: size differs");
	assert_int_equal(fs_write_durable(path, "echo HELLO\n", 11, 0600, NULL), RELAY_OK); /* same size */
	expect_verify_fails(&p, "host/scripts/" RUN1 ".sh: SHA-256 differs");
	assert_int_equal(fs_write_durable(path, "echo hello\n", 11, 0600, NULL), RELAY_OK);
	assert_int_equal(evidence_package_verify(p.dir, p.root, NULL, NULL), RELAY_OK);

	/* An unmanifested file. */
	snprintf(path, sizeof path, "%s/host/notes.txt", p.dir);
	assert_int_equal(fs_write_durable(path, "x", 1, 0600, NULL), RELAY_OK);
	expect_verify_fails(&p, "host/notes.txt: not listed in the manifest");
	unlink(path);

	/* A symbolic link inside. */
	snprintf(path, sizeof path, "%s/host/link", p.dir);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	expect_verify_fails(&p, "host/link: a symbolic link");
	unlink(path);

	/* A hard link. */
	char src[1024];
	snprintf(src, sizeof src, "%s/OPENING.txt", p.dir);
	snprintf(path, sizeof path, "%s/../hardlink", p.dir);
	assert_int_equal(link(src, path), 0);
	expect_verify_fails(&p, "OPENING.txt: a hard link");
	unlink(path);

	/* A deleted file. */
	snprintf(path, sizeof path,
	         "%s/extractions/screens/6f0c1e9a-3b2d-4c5e-8f7a-1b2c3d4e5f60/login/step-1.png", p.dir);
	char *saved = NULL;
	size_t saved_len = 0;
	assert_int_equal(fs_read_file(path, 1 << 24, &saved, &saved_len, NULL), RELAY_OK);
	unlink(path);
	expect_verify_fails(&p, "step-1.png: listed in the manifest but missing");
	assert_int_equal(fs_write_durable(path, saved, saved_len, 0600, NULL), RELAY_OK);
	free(saved);
	assert_int_equal(evidence_package_verify(p.dir, p.root, NULL, NULL), RELAY_OK);

	/* The review command: 0 verified, 1 failed verification, 2 unreadable. */
	int saved_out = dup(STDOUT_FILENO);
	char out_path[600];
	snprintf(out_path, sizeof out_path, "%s/review-out.json", p.root);
	int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	dup2(fd, STDOUT_FILENO);
	char *argv_ok[] = {"review", p.dir, NULL};
	int rc_ok = review_main(2, argv_ok);
	snprintf(path, sizeof path, "%s/host/notes.txt", p.dir);
	fs_write_durable(path, "x", 1, 0600, NULL);
	int rc_bad = review_main(2, argv_ok);
	char missing[600];
	snprintf(missing, sizeof missing, "%s/no-such-package", p.root);
	char *argv_missing[] = {"review", missing, NULL};
	int rc_missing = review_main(2, argv_missing);
	char *argv_usage[] = {"review", NULL};
	int rc_usage = review_main(1, argv_usage);
	fflush(stdout);
	dup2(saved_out, STDOUT_FILENO);
	close(saved_out);
	close(fd);
	assert_int_equal(rc_ok, 0);
	assert_int_equal(rc_bad, 1);
	assert_int_equal(rc_missing, 2);
	assert_int_equal(rc_usage, 2);
	char *printed = NULL;
	size_t plen = 0;
	assert_int_equal(fs_read_file(out_path, 1 << 24, &printed, &plen, NULL), RELAY_OK);
	assert_non_null(strstr(printed, "\"reviewVersion\": 1"));
	assert_non_null(strstr(printed, "host/notes.txt: not listed in the manifest"));
	free(printed);
	fx_free(&p);
}

static void test_delivery_failure_removes_only_derived(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run a = run_ok(RUN1, "shell-1");
	fx_add_run(&p, &a);
	fx_finish(&p);
	/* A snapshot file the journal never mentions: a hard error. */
	char rel[512], path[1024];
	snprintf(rel, sizeof rel, "state/snapshots/%s/run-ffff-before.png", FX_SESSION);
	fx_write(&p, rel, "not-a-capture", 13);
	evidence_delivery_options o = {.project_dir = p.root};
	evidence_delivery_result res;
	relay_error err = {0};
	assert_int_equal(evidence_package_deliver(p.dir, &o, &res, &err), RELAY_E_INTEGRITY);
	assert_non_null(strstr(err.message, "package verification failed: "));
	assert_non_null(strstr(err.message, "run-ffff-before.png"));
	assert_false(res.delivered);
	const char *derived[] = {"OPENING.txt", "index.html", "manifest.json"};
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s/%s", p.dir, derived[i]);
		assert_false(fs_exists_nofollow(path));
	}
	snprintf(path, sizeof path, "%s/%s", p.dir, rel);
	assert_true(fs_exists_nofollow(path)); /* evidence is never removed */
	evidence_delivery_result_free(&res);
	/* A manifest of another identity is sealed. */
	unlink(path);
	assert_int_equal(evidence_package_deliver(p.dir, &o, &res, &err), RELAY_OK);
	evidence_delivery_result_free(&res);
	o.identity.package_id = "pkg-something-else";
	assert_int_equal(evidence_package_deliver(p.dir, &o, &res, &err), RELAY_E_REFUSED);
	assert_non_null(strstr(err.message, "sealed"));
	snprintf(path, sizeof path, "%s/manifest.json", p.dir);
	assert_true(fs_exists_nofollow(path));
	evidence_delivery_result_free(&res);
	fx_free(&p);
}

/* ---- review verdicts ---------------------------------------------------------- */

static void test_review_all_passed(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run a = run_ok(RUN1, "shell-1");
	fx_add_run(&p, &a);
	fx_finish(&p);
	json_object *r = review_of(p.dir, false);
	assert_true(evidence_review_verified(r));
	assert_string_equal(jsonx_get_str(r, "completeness"), "complete");
	assert_string_equal(jsonx_get_str(r, "execution"), "passed");
	assert_int_equal(json_object_array_length(jsonx_get_array(r, "findings")), 0);
	json_object *s = step_by_id(r, "shell-1");
	assert_string_equal(jsonx_get_str(s, "execution"), "completed");
	json_object *d = jsonx_get_obj(jsonx_get_obj(r, "details"), "shell-1");
	assert_string_equal(jsonx_get_str(d, "executionId"), RUN1);
	int64_t code = -1;
	assert_true(jsonx_get_int(jsonx_get_obj(d, "output"), "exit", &code));
	assert_int_equal(code, 0);
	json_object_put(r);
	fx_free(&p);
}

static void test_review_nonzero_failed(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run a = run_ok(RUN1, "shell-1");
	fx_add_run(&p, &a);
	fx_run b = run_ok(RUN2, "shell-2");
	b.exit_code = 3;
	fx_add_run(&p, &b);
	fx_finish(&p);
	json_object *r = review_of(p.dir, false);
	assert_true(evidence_review_verified(r));
	assert_string_equal(jsonx_get_str(r, "completeness"), "complete");
	assert_string_equal(jsonx_get_str(r, "execution"), "failed");
	assert_string_equal(jsonx_get_str(step_by_id(r, "shell-2"), "execution"), "failed");
	assert_string_equal(jsonx_get_str(step_by_id(r, "shell-1"), "execution"), "completed");
	assert_true(has_string(jsonx_get_array(r, "findings"),
	                       "retained execution receipt reports refusal or failure"));
	assert_true(any_reason(r, "execution", "Step shell-2 ended with exit status 3."));
	json_object_put(r);
	fx_free(&p);
}

static void test_review_uncertain(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run a = run_ok(RUN1, "shell-1");
	a.uncertain = true;
	fx_add_run(&p, &a);
	fx_finish(&p);
	json_object *r = review_of(p.dir, false);
	assert_string_equal(jsonx_get_str(r, "execution"), "uncertain");
	assert_string_equal(jsonx_get_str(r, "completeness"), "complete");
	assert_string_equal(jsonx_get_str(step_by_id(r, "shell-1"), "execution"), "uncertain");
	assert_true(
	    has_string(jsonx_get_array(r, "findings"), "retained execution receipt reports uncertainty"));
	assert_true(
	    any_reason(r, "execution",
	               "The relay cannot tell whether step shell-1 ran or how it ended: the script timed out "
	               "after 120000 ms."));
	json_object_put(r);
	fx_free(&p);
}

static void test_review_missing_after(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run a = run_ok(RUN1, "shell-1");
	a.after = false;
	fx_add_run(&p, &a);
	fx_finish(&p);
	json_object *r = review_of(p.dir, false);
	assert_true(evidence_review_verified(r)); /* a finding, not corruption */
	assert_string_equal(jsonx_get_str(r, "completeness"), "incomplete");
	assert_true(has_string(jsonx_get_array(r, "findings"),
	                       "action action-" RUN1 " lacks its declared causal pair"));
	assert_true(any_reason(r, "snapshots", "Step shell-1 has no after screenshot."));
	json_object *snaps = jsonx_get_obj(step_by_id(r, "shell-1"), "snapshots");
	assert_non_null(jsonx_get_str(snaps, "before"));
	assert_null(jsonx_get_str(snaps, "after"));
	assert_string_equal(jsonx_get_str(step_by_id(r, "shell-1"), "execution"), "uncertain");
	json_object_put(r);
	fx_free(&p);
}

static void test_review_diagnostic_step(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run a = run_ok(RUN1, "shell-1");
	fx_add_run(&p, &a);
	fx_add_diagnostic(&p, DIAG, 0);
	fx_finish(&p);
	json_object *r = review_of(p.dir, false);
	assert_string_equal(jsonx_get_str(r, "execution"), "passed");
	json_object *s = step_by_id(r, DIAG);
	assert_non_null(s);
	assert_string_equal(jsonx_get_str(s, "title"), "shell uname -a");
	assert_string_equal(jsonx_get_str(s, "inputMode"), "diagnostic");
	assert_string_equal(jsonx_get_str(s, "execution"), "completed");
	assert_string_equal(jsonx_get_str(s, "observed"),
	                    "No screenshot evidence. This diagnostic shell script ran without the receiver.");
	assert_null(jsonx_get_obj(s, "snapshots"));
	json_object_put(r);
	/* A failing diagnostic makes the execution failed. */
	fx_add_diagnostic(&p, "diagnostic-00000000000000000000000000000001", 2);
	r = review_of(p.dir, false);
	assert_string_equal(jsonx_get_str(r, "execution"), "failed");
	assert_true(any_reason(r, "execution",
	                       "Step diagnostic-00000000000000000000000000000001 ended with exit status 2."));
	json_object_put(r);
	fx_free(&p);
}

static void test_review_group(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run f = run_ok(RUN1, "shell-1");
	f.group_id = "typing-1";
	f.group_phase = "first";
	fx_run m = run_ok(RUN2, "shell-2");
	m.group_id = "typing-1";
	m.group_phase = "member";
	fx_run l = run_ok(RUN3, "shell-3");
	l.group_id = "typing-1";
	l.group_phase = "last";
	fx_add_run(&p, &f);
	fx_add_run(&p, &m);
	fx_add_run(&p, &l);
	fx_finish(&p);
	json_object *r = review_of(p.dir, false);
	assert_true(evidence_review_verified(r));
	assert_string_equal(jsonx_get_str(r, "completeness"), "complete");
	assert_string_equal(jsonx_get_str(r, "execution"), "passed");
	/* The member shows the group's shared pair. */
	json_object *snaps = jsonx_get_obj(step_by_id(r, "shell-2"), "snapshots");
	assert_string_equal(jsonx_get_str(snaps, "before"),
	                    "state/snapshots/" FX_SESSION "/" RUN1 "-before.png");
	assert_string_equal(jsonx_get_str(snaps, "after"),
	                    "state/snapshots/" FX_SESSION "/" RUN3 "-after.png");
	assert_string_equal(jsonx_get_str(snaps, "groupId"), "typing-1");
	json_object_put(r);
	fx_free(&p);

	/* A group that never closed: incomplete, with the group finding. */
	fx_init(&p);
	fx_add_run(&p, &f);
	fx_add_run(&p, &m);
	fx_finish(&p);
	r = review_of(p.dir, false);
	assert_true(evidence_review_verified(r));
	assert_string_equal(jsonx_get_str(r, "completeness"), "incomplete");
	assert_true(has_string(
	    jsonx_get_array(r, "findings"),
	    "coalescing group typing-1 lacks a complete consecutive first/member/last causal pair"));
	assert_true(any_reason(r, "snapshots",
	                       "Group typing-1 does not have both its first screenshot and its last."));
	json_object_put(r);
	fx_free(&p);
}

static void test_review_hard_errors(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run a = run_ok(RUN1, "shell-1");
	fx_add_run(&p, &a);
	/* A line of another recording session. */
	strbuf_puts(&p.journal, "{\"seq\":99,\"at\":\"2026-09-24T11:00:00.000Z\",\"type\":\"annotation\","
	                        "\"sessionId\":\"rec-0000000000000000\",\"name\":\"routing-decision\"}\n");
	fx_finish(&p);
	json_object *r = review_of(p.dir, false);
	assert_false(evidence_review_verified(r));
	json_object *errs = jsonx_get_array(jsonx_get_obj(r, "verification"), "errors");
	assert_non_null(
	    strstr(json_object_get_string(json_object_array_get_idx(errs, 0)), "another recording session"));
	json_object_put(r);
	fx_free(&p);
}

/* ---- merge and space ------------------------------------------------------------ */

static void test_state_merge(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run a = run_ok(RUN1, "shell-1");
	fx_add_run(&p, &a);
	fx_finish(&p);
	char incoming[600], attempts[600], path[1200];
	snprintf(incoming, sizeof incoming, "%s/incoming-state", p.root);
	snprintf(attempts, sizeof attempts, "%s.finalization-attempts", p.dir);
	/* The incoming pull lacks RUN1's before snapshot and brings a new file. */
	snprintf(path, sizeof path, "%s/journal", incoming);
	fs_mkdir_p(path, 0700, NULL);
	snprintf(path, sizeof path, "%s/journal/events.jsonl", incoming);
	fs_write_durable(path, p.journal.data, p.journal.len, 0600, NULL);
	snprintf(path, sizeof path, "%s/snapshots/%s", incoming, FX_SESSION);
	fs_mkdir_p(path, 0700, NULL);
	char old_after[1200];
	snprintf(old_after, sizeof old_after, "%s/state/snapshots/%s/%s-after.png", p.dir, FX_SESSION, RUN1);
	snprintf(path, sizeof path, "%s/snapshots/%s/%s-after.png", incoming, FX_SESSION, RUN1);
	assert_int_equal(fs_copy_file(old_after, path, 0600, NULL), RELAY_OK);
	snprintf(path, sizeof path, "%s/session.json", incoming);
	fs_write_durable(path, "{\"sessionId\":\"" FX_SESSION "\"}\n", 35, 0600, NULL);

	/* A conflicting snapshot stops the merge before anything is touched. */
	char conflict[1200];
	snprintf(conflict, sizeof conflict, "%s/snapshots/%s/%s-before.png", incoming, FX_SESSION, RUN1);
	fs_write_durable(conflict, "other bytes", 11, 0600, NULL);
	relay_error err = {0};
	assert_int_equal(evidence_state_merge(p.dir, incoming, attempts, &err), RELAY_E_INTEGRITY);
	assert_non_null(strstr(err.message, RUN1 "-before.png"));
	assert_true(fs_is_dir(incoming));
	unlink(conflict);

	assert_int_equal(evidence_state_merge(p.dir, incoming, attempts, &err), RELAY_OK);
	assert_false(fs_exists_nofollow(incoming));
	snprintf(path, sizeof path, "%s/state/snapshots/%s/%s-before.png", p.dir, FX_SESSION, RUN1);
	assert_true(fs_exists_nofollow(path)); /* restored from the set-aside copy */
	snprintf(path, sizeof path, "%s/previous/attempt-0001/state/journal/events.jsonl", attempts);
	assert_true(fs_exists_nofollow(path));
	snprintf(path, sizeof path, "%s/state/records", p.dir);
	assert_false(fs_exists_nofollow(path)); /* the incoming tree replaced state/ */
	/* Overlapping roots are refused. */
	snprintf(path, sizeof path, "%s/state/journal", p.dir);
	assert_int_equal(evidence_state_merge(p.dir, path, attempts, &err), RELAY_E_UNSAFE_PATH);
	fx_free(&p);
}

static void test_space_check(void **state)
{
	(void)state;
	evidence_space s;
	relay_error err = {0};
	assert_int_equal(evidence_space_check("/tmp", 1, "finish", "the guest is kept", &s, &err), RELAY_OK);
	assert_int_equal(s.short_bytes, 0);
	assert_true(s.free_bytes > 0);
	uint64_t huge = UINT64_MAX / 2;
	assert_int_equal(evidence_space_check("/tmp", huge, "finish", "the guest is kept", &s, &err),
	                 RELAY_E_NO_SPACE);
	char want[200];
	snprintf(want, sizeof want, "finish needs %llu bytes; %llu free; %llu short; the guest is kept",
	         (unsigned long long)huge, (unsigned long long)s.free_bytes,
	         (unsigned long long)(huge - s.free_bytes));
	assert_string_equal(err.message, want);
}

static void test_sibling_records(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	evidence_lifecycle_record rec = {FX_PURPOSE, "vm-1", true, "released", false, true, 1790000000000};
	relay_error err = {0};
	assert_int_equal(evidence_write_lifecycle(p.dir, &rec, &err), RELAY_OK);
	assert_int_equal(
	    evidence_write_delivery_error(p.dir, "package verification failed: x", 1790000000000, &err),
	    RELAY_OK);
	char path[700];
	json_object *o = NULL;
	snprintf(path, sizeof path, "%s.lifecycle.json", p.dir);
	assert_int_equal(fs_read_json(path, 1 << 20, &o, NULL), RELAY_OK);
	assert_string_equal(jsonx_get_str(o, "reason"), "released");
	assert_string_equal(jsonx_get_str(o, "finishedAt"), "2026-09-21T14:13:20.000Z");
	json_object_put(o);
	snprintf(path, sizeof path, "%s.delivery-error.json", p.dir);
	assert_int_equal(fs_read_json(path, 1 << 20, &o, NULL), RELAY_OK);
	assert_string_equal(jsonx_get_str(o, "error"), "package verification failed: x");
	json_object_put(o);
	fx_free(&p);
}

/* A guest's bytes that are not UTF-8 in the journal and in a receipt (a
 * capture program's stderr, written raw by an earlier receiver) no longer
 * make the package undeliverable (issue 17, defect 2): it is delivered and
 * verifies, and the files keep their original bytes. */
static void test_guest_bytes_not_utf8_still_delivered(void **state)
{
	(void)state;
	fx_pkg p;
	fx_init(&p);
	fx_run a = run_ok(RUN1, "shell-1");
	fx_add_run(&p, &a);
	/* The session-start line gains a field with raw bytes. */
	const char *needle = "\"platform\":\"linux-x86_64\"}";
	char *at = strstr(p.journal.data, needle);
	assert_non_null(at);
	strbuf journal = STRBUF_INIT;
	strbuf_append(&journal, p.journal.data, (size_t)(at - p.journal.data));
	strbuf_puts(&journal, "\"platform\":\"linux-x86_64\",\"stderrTail\":\"\xff\xfe\xfd\"}");
	strbuf_puts(&journal, at + strlen(needle));
	strbuf_free(&p.journal);
	p.journal = journal;
	fx_finish(&p);
	char rel[512], path[1024];
	snprintf(rel, sizeof rel, "state/receiver/receipts/%s.json", RUN1);
	snprintf(path, sizeof path, "%s/%s", p.dir, rel);
	char *receipt = NULL;
	size_t receipt_len = 0;
	assert_int_equal(fs_read_file(path, 1 << 20, &receipt, &receipt_len, NULL), RELAY_OK);
	assert_true(receipt_len > 1 && receipt[0] == '{');
	strbuf raw = STRBUF_INIT;
	strbuf_puts(&raw, "{\"stderr\":\"name-\xff\xfe.txt\",");
	strbuf_append(&raw, receipt + 1, receipt_len - 1);
	unlink(path);
	fx_write(&p, rel, raw.data, raw.len);

	evidence_delivery_result res;
	deliver_ok(&p, &res);
	evidence_delivery_result_free(&res);
	assert_int_equal(evidence_package_verify(p.dir, p.root, NULL, NULL), RELAY_OK);
	char *kept = NULL;
	size_t kept_len = 0;
	assert_int_equal(fs_read_file(path, 1 << 20, &kept, &kept_len, NULL), RELAY_OK);
	assert_int_equal(kept_len, raw.len);
	assert_memory_equal(kept, raw.data, raw.len);
	free(kept);
	free(receipt);
	strbuf_free(&raw);
	fx_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_deliver_and_verify),
	    cmocka_unit_test(test_verification_failures),
	    cmocka_unit_test(test_delivery_failure_removes_only_derived),
	    cmocka_unit_test(test_review_all_passed),
	    cmocka_unit_test(test_review_nonzero_failed),
	    cmocka_unit_test(test_review_uncertain),
	    cmocka_unit_test(test_review_missing_after),
	    cmocka_unit_test(test_review_diagnostic_step),
	    cmocka_unit_test(test_review_group),
	    cmocka_unit_test(test_review_hard_errors),
	    cmocka_unit_test(test_state_merge),
	    cmocka_unit_test(test_space_check),
	    cmocka_unit_test(test_sibling_records),
	    cmocka_unit_test(test_guest_bytes_not_utf8_still_delivered),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
