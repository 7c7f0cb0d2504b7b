/*
 * guestio/receiver_api.h without a guest: each typed function against a
 * transport of this file that records the command line it was asked to run
 * and answers with a scripted frame and exit status. The command lines
 * (spec/guest.md §5.2) are exact, `prepare` goes in batches of 512, and a
 * frame without the facts its command answers is refused (RELAY_E_PROTOCOL,
 * EBADMSG) instead of being trusted; the receiver lock and a missing file
 * are told apart; outcomes are read into their struct.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "guestio/receiver_api.h"
#include "loader/loader.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

/* What the scripted transport answers, and what it was asked (one line per
 * exec: the argv joined by spaces). */
static const char *answer_out;
static int answer_exit;
static strbuf asked;
static int execs;

static relay_status scripted_exec(relay_plugin_state *state, relay_transport_conn *conn,
                                  const relay_exec_request *req, relay_call *call, unsigned flags,
                                  relay_exec_result *res, relay_error *err)
{
	(void)state;
	(void)conn;
	(void)call;
	(void)flags;
	(void)err;
	for (size_t i = 0; req->argv[i]; i++)
		strbuf_printf(&asked, "%s%s", i ? " " : "", req->argv[i]);
	strbuf_printf(&asked, "\n");
	execs++;
	res->out = strdup(answer_out ? answer_out : "");
	res->out_len = strlen(res->out);
	res->exit_code = answer_exit;
	return RELAY_OK;
}

typedef struct fixture {
	loaded_plugin plugin;
	guest_io io;
} fixture;

static void fixture_init(fixture *f)
{
	memset(f, 0, sizeof *f);
	f->plugin.descriptor.name = "scripted-transport";
	f->plugin.transport.exec = scripted_exec;
	f->io.plugin = &f->plugin;
	f->io.root = "/var/tmp/R";
	f->io.receiver = "/var/tmp/R/receiver";
	strbuf_init(&asked);
	execs = 0;
	answer_out = NULL;
	answer_exit = 0;
}

static void fixture_done(void)
{
	strbuf_free(&asked);
}

static void test_prepare_in_batches(void **state)
{
	(void)state;
	fixture f;
	fixture_init(&f);
	answer_out = "{\"prepared\":1}\n";
	enum { N = 1030 };
	char names[N][12];
	const char *dirs[N];
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "d%d", i);
		dirs[i] = names[i];
	}
	relay_error err;
	assert_int_equal(gio_rcv_prepare(&f.io, dirs, N, &err), RELAY_OK);
	assert_int_equal(execs, 3);
	/* The third batch holds the last six. */
	const char *third = strstr(strbuf_str(&asked), "d1024");
	assert_non_null(third);
	assert_non_null(
	    strstr(strbuf_str(&asked),
	           "/var/tmp/R/receiver prepare --root /var/tmp/R d1024 d1025 d1026 d1027 d1028 d1029\n"));
	assert_true(strncmp(strbuf_str(&asked), "/var/tmp/R/receiver prepare --root /var/tmp/R d0 d1 ", 52) ==
	            0);
	fixture_done();
}

static void test_init_and_reset(void **state)
{
	(void)state;
	fixture f;
	fixture_init(&f);
	relay_error err;
	answer_out = "{\"created\":true}\n";
	assert_int_equal(gio_rcv_init(&f.io, "rec-1", &err), RELAY_OK);
	assert_string_equal(strbuf_str(&asked),
	                    "/var/tmp/R/receiver init --root /var/tmp/R --session rec-1\n");

	/* The receiver lock refuses a reset: told apart from another failure. */
	answer_out = "{\"error\":\"the receiver lock exists\",\"code\":\"receiver-locked\"}\n";
	answer_exit = 3;
	bool locked = false;
	assert_int_equal(gio_rcv_reset(&f.io, "reset-7", &locked, &err), RELAY_E_REFUSED);
	assert_true(locked);
	assert_non_null(
	    strstr(strbuf_str(&asked), "/var/tmp/R/receiver reset --root /var/tmp/R --id reset-7\n"));
	answer_out = "{\"error\":\"state/ belongs to another session\"}\n";
	assert_int_equal(gio_rcv_reset(&f.io, "reset-7", &locked, &err), RELAY_E_REFUSED);
	assert_false(locked);
	assert_non_null(
	    strstr(err.message, "receiver reset failed (exit 3): state/ belongs to another session"));
	fixture_done();
}

static void test_hash_and_scan_frames_checked(void **state)
{
	(void)state;
	fixture f;
	fixture_init(&f);
	relay_error err;
	gio_file_frame got;
	answer_out = "{\"path\":\"/var/tmp/R/state/x.json\",\"sha256\":\"" SHA_A "\",\"bytes\":12}\n";
	assert_int_equal(gio_rcv_hash(&f.io, "/var/tmp/R/state/x.json", &got, &err), RELAY_OK);
	assert_string_equal(got.sha256, SHA_A);
	assert_int_equal(got.bytes, 12);
	gio_file_frame_free(&got);
	/* exit 3: the receiver looked and found no file. */
	answer_out = "{\"error\":\"no such file\"}\n";
	answer_exit = 3;
	assert_int_equal(gio_rcv_hash(&f.io, "/var/tmp/R/state/y.json", &got, &err), RELAY_E_REFUSED);
	assert_null(got.path);

	/* scan, each mode on its command line. */
	answer_exit = 0;
	answer_out = "{\"path\":\"/var/tmp/R/.inventory-1.json\",\"sha256\":\"" SHA_A "\",\"bytes\":2}\n";
	strbuf_free(&asked);
	strbuf_init(&asked);
	assert_int_equal(gio_rcv_scan(&f.io, "/var/tmp/R", "workspace", GIO_SCAN_ALL, 1000, &got, &err),
	                 RELAY_OK);
	assert_string_equal(got.path, "/var/tmp/R/.inventory-1.json");
	gio_file_frame_free(&got);
	assert_int_equal(gio_rcv_scan(&f.io, "/var/tmp/R", "support", GIO_SCAN_PRESENT, 1000, &got, &err),
	                 RELAY_OK);
	gio_file_frame_free(&got);
	assert_int_equal(
	    gio_rcv_scan(&f.io, "/var/tmp/R/workspace", "a.png", GIO_SCAN_IMAGE, 1000, &got, &err), RELAY_OK);
	gio_file_frame_free(&got);
	assert_string_equal(strbuf_str(&asked),
	                    "/var/tmp/R/receiver scan --root /var/tmp/R --base /var/tmp/R workspace\n"
	                    "/var/tmp/R/receiver scan --root /var/tmp/R --base /var/tmp/R --present support\n"
	                    "/var/tmp/R/receiver scan --root /var/tmp/R --base /var/tmp/R/workspace --image "
	                    "a.png\n");
	/* A frame without its facts (no sha256, a bad one, negative bytes). */
	static const char *const malformed[] = {
	    "{\"path\":\"/var/tmp/R/.inventory-1.json\",\"bytes\":2}\n",
	    "{\"path\":\"/var/tmp/R/.inventory-1.json\",\"sha256\":\"xyz\",\"bytes\":2}\n",
	    "{\"path\":\"/var/tmp/R/.inventory-1.json\",\"sha256\":\"" SHA_A "\",\"bytes\":-1}\n",
	    "{\"sha256\":\"" SHA_A "\",\"bytes\":2}\n",
	};
	for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
		answer_out = malformed[i];
		assert_int_equal(
		    gio_rcv_scan(&f.io, "/var/tmp/R", "workspace", GIO_SCAN_ALL, 1000, &got, &err),
		    RELAY_E_PROTOCOL);
		assert_int_equal(err.sys_errno, EBADMSG);
		assert_null(got.path);
	}
	fixture_done();
}

static void test_archive_must_name_its_out(void **state)
{
	(void)state;
	fixture f;
	fixture_init(&f);
	relay_error err;
	gio_file_frame got;
	const char *paths[] = {"a.txt", "b/c.txt"};
	answer_out = "{\"path\":\"/var/tmp/R/.archive-1.tar\",\"sha256\":\"" SHA_A "\",\"bytes\":10240}\n";
	assert_int_equal(gio_rcv_archive(&f.io, "/var/tmp/R/workspace", true, "/var/tmp/R/.archive-1.tar",
	                                 paths, 2, 1000, &got, &err),
	                 RELAY_OK);
	assert_int_equal(got.bytes, 10240);
	gio_file_frame_free(&got);
	assert_string_equal(strbuf_str(&asked),
	                    "/var/tmp/R/receiver archive --root /var/tmp/R --base "
	                    "/var/tmp/R/workspace --present --out /var/tmp/R/.archive-1.tar -- "
	                    "a.txt b/c.txt\n");
	/* Another archive than the one asked for is not taken. */
	answer_out = "{\"path\":\"/var/tmp/R/.archive-2.tar\",\"sha256\":\"" SHA_A "\",\"bytes\":10240}\n";
	assert_int_equal(gio_rcv_archive(&f.io, "/var/tmp/R/workspace", false, "/var/tmp/R/.archive-1.tar",
	                                 paths, 2, 1000, &got, &err),
	                 RELAY_E_PROTOCOL);
	assert_int_equal(err.sys_errno, EBADMSG);
	assert_null(got.path);
	fixture_done();
}

static void test_unpack_and_remove(void **state)
{
	(void)state;
	fixture f;
	fixture_init(&f);
	relay_error err;
	int64_t unpacked = 0;
	answer_out = "{\"unpacked\":3}\n";
	assert_int_equal(
	    gio_rcv_unpack(&f.io, "/var/tmp/R/support", "/var/tmp/R/.push-1.tar", 1000, &unpacked, &err),
	    RELAY_OK);
	assert_int_equal(unpacked, 3);
	const char *names[] = {".push-1.tar", ".inventory-2.json"};
	answer_out = "{\"removed\":2}\n";
	assert_int_equal(gio_rcv_remove(&f.io, names, 2, &err), RELAY_OK);
	assert_string_equal(strbuf_str(&asked),
	                    "/var/tmp/R/receiver unpack --root /var/tmp/R --base /var/tmp/R/support "
	                    "/var/tmp/R/.push-1.tar\n"
	                    "/var/tmp/R/receiver remove --root /var/tmp/R .push-1.tar .inventory-2.json\n");
	fixture_done();
}

static void test_outcomes_and_receipt_paths(void **state)
{
	(void)state;
	gio_outcome o;
	json_object *v =
	    jsonx_parse_str("{\"kind\":\"completed\",\"exitStatus\":{\"code\":3,\"signal\":null}}", NULL, 0);
	gio_outcome_read(v, &o);
	assert_int_equal(o.kind, GIO_OUTCOME_COMPLETED);
	assert_true(o.has_code);
	assert_int_equal(o.code, 3);
	assert_null(o.signal_name);
	json_object_put(v);
	v = jsonx_parse_str("{\"kind\":\"completed\",\"exitStatus\":{\"code\":null,\"signal\":\"SIGKILL\"}}",
	                    NULL, 0);
	gio_outcome_read(v, &o);
	assert_false(o.has_code);
	assert_string_equal(o.signal_name, "SIGKILL");
	json_object_put(v);
	v = jsonx_parse_str("{\"kind\":\"refused\",\"diagnostic\":\"lock held\"}", NULL, 0);
	gio_outcome_read(v, &o);
	assert_int_equal(o.kind, GIO_OUTCOME_REFUSED);
	assert_string_equal(o.diagnostic, "lock held");
	json_object_put(v);
	v = jsonx_parse_str("{\"kind\":\"lost\"}", NULL, 0);
	gio_outcome_read(v, &o);
	assert_int_equal(o.kind, GIO_OUTCOME_UNKNOWN);
	json_object_put(v);
	gio_outcome_read(NULL, &o);
	assert_int_equal(o.kind, GIO_OUTCOME_UNKNOWN);
	/* A receipt read once: what delivery/ and tools/ look at. */
	v = jsonx_parse_str(
	    "{\"executionId\":\"exec-1\",\"sessionId\":\"rec-1\",\"requestSha256\":\"" SHA_A
	    "\",\"outcome\":{\"kind\":\"uncertain\",\"diagnostic\":\"lost\"},"
	    "\"imageEvidence\":{\"status\":\"available\",\"snapshots\":[{\"phase\":\"after\"}]}}",
	    NULL, 0);
	gio_receipt rc;
	gio_receipt_read(v, &rc);
	assert_string_equal(rc.execution_id, "exec-1");
	assert_string_equal(rc.session_id, "rec-1");
	assert_string_equal(rc.request_sha256, SHA_A);
	assert_int_equal(rc.outcome.kind, GIO_OUTCOME_UNCERTAIN);
	assert_string_equal(rc.outcome.diagnostic, "lost");
	assert_non_null(rc.image_evidence);
	assert_int_equal(json_object_array_length(rc.snapshots), 1);
	json_object_put(v);
	gio_receipt_read(NULL, &rc);
	assert_null(rc.execution_id);
	assert_null(rc.snapshots);
	char *rel = gio_receipt_rel("exec-1");
	assert_string_equal(rel, "state/receiver/receipts/exec-1.json");
	free(rel);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_prepare_in_batches),
	    cmocka_unit_test(test_init_and_reset),
	    cmocka_unit_test(test_hash_and_scan_frames_checked),
	    cmocka_unit_test(test_archive_must_name_its_out),
	    cmocka_unit_test(test_unpack_and_remove),
	    cmocka_unit_test(test_outcomes_and_receipt_paths),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
