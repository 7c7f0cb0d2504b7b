/*
 * guestio/ without the MCP layer or a guest: the receiver's frames and run
 * answers (guestio/frame.c, spec/guest.md §5.3, §5.4, §16.2), the transport's
 * push facts against what the core sent (gio_facts_compare), and a push
 * through a transport that lies about what arrived (gio_push_checked_facts
 * with a transport of this file: a path it did not write, a size, a
 * SHA-256), which must be transfer-failed, never trusted.
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

#include "../../../guest/receiver_protocol.h"
#include "guestio/frame.h"
#include "guestio/guest_io.h"
#include "loader/loader.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

static const char SHA_A[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
static const char SHA_B[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/* ---- frames -------------------------------------------------------------------------- */

static void frame_is_the_last_object_line(void **state)
{
	(void)state;
	const char out[] = "{\"early\":1}\nnoise {not json\n[1,2]\n  {\"executionId\":\"run-1\"}  \n\n";
	json_object *f = gio_parse_frame(out, sizeof out - 1);
	assert_non_null(f);
	assert_string_equal(jsonx_get_str(f, RECEIVER_FRAME_EXECUTION_ID), "run-1");
	json_object_put(f);
	assert_null(gio_parse_frame("no frame at all\n", 16));
	assert_null(gio_parse_frame(NULL, 0));
	assert_null(gio_parse_frame("[1]\n\"s\"\n", 8));
}

static void exit_statuses_follow_the_protocol(void **state)
{
	(void)state;
	assert_int_equal(gio_frame_exit_status(RECEIVER_EXIT_DONE), RELAY_OK);
	assert_int_equal(gio_frame_exit_status(RECEIVER_EXIT_USAGE), RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(gio_frame_exit_status(RECEIVER_EXIT_INTERNAL), RELAY_E_REFUSED);
	assert_int_equal(gio_frame_exit_status(1), RELAY_E_PROTOCOL);
	assert_int_equal(gio_frame_exit_status(-1), RELAY_E_PROTOCOL);
}

/* A run answer: the frame line naming a receipt part, then its bytes. */
static char *answer_text(const char *receipt, const char *claimed_sha, int64_t claimed_bytes, size_t *len)
{
	char sha[SHA256_HEX_LEN + 1];
	sha256_buffer_hex(receipt, strlen(receipt), sha);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb,
	              "{\"executionId\":\"run-1\",\"receipt\":{\"path\":\"%s/run-1.json\",\"sha256\":\"%s\","
	              "\"bytes\":%zu},\"parts\":[{\"name\":\"%s\",\"bytes\":%lld,\"sha256\":\"%s\"}]}\n%s",
	              RECEIVER_RECEIPTS_DIR, sha, strlen(receipt), RECEIVER_PART_RECEIPT,
	              (long long)claimed_bytes, claimed_sha ? claimed_sha : sha, receipt);
	*len = sb.len;
	return strbuf_detach(&sb, NULL);
}

static void run_answer_parts_are_taken_whole(void **state)
{
	(void)state;
	const char receipt[] = "{\"executionId\":\"run-1\"}";
	size_t len = 0;
	char *text = answer_text(receipt, NULL, (int64_t)strlen(receipt), &len);
	gio_run_answer a;
	gio_run_answer_parse(text, len, &a);
	assert_non_null(a.frame);
	assert_int_equal(a.receipt_len, strlen(receipt));
	assert_memory_equal(a.receipt, receipt, a.receipt_len);
	assert_string_equal(a.dropped, "");
	/* The frame's receipt fact is this run's. */
	const char *sha = NULL;
	int64_t bytes = 0;
	assert_true(
	    gio_frame_receipt_fact(jsonx_get_obj(a.frame, RECEIVER_FRAME_RECEIPT), "run-1", &sha, &bytes));
	assert_int_equal(bytes, (int64_t)strlen(receipt));
	assert_false(
	    gio_frame_receipt_fact(jsonx_get_obj(a.frame, RECEIVER_FRAME_RECEIPT), "run-2", &sha, &bytes));
	json_object_put(a.frame);
	free(text);

	/* A part longer than what followed is not whole. */
	text = answer_text(receipt, NULL, (int64_t)strlen(receipt) + 10, &len);
	gio_run_answer_parse(text, len, &a);
	assert_null(a.receipt);
	assert_non_null(strstr(a.dropped, "not whole"));
	json_object_put(a.frame);
	free(text);

	/* A part whose bytes do not hash to its sha256 is dropped. */
	text = answer_text(receipt, SHA_A, (int64_t)strlen(receipt), &len);
	gio_run_answer_parse(text, len, &a);
	assert_null(a.receipt);
	assert_non_null(strstr(a.dropped, "does not match"));
	json_object_put(a.frame);
	free(text);

	/* No newline: no frame. */
	gio_run_answer_parse("{\"a\":1}", 7, &a);
	assert_null(a.frame);
}

static void refused_stdin_is_told_apart(void **state)
{
	(void)state;
	const char refused[] =
	    "{\"executionId\":\"unknown\",\"receipt\":null,\"outcome\":{\"kind\":\"refused\","
	    "\"diagnostic\":\"short stream\"}}\n";
	assert_true(gio_run_answer_refused(refused, sizeof refused - 1));
	const char uncertain[] =
	    "{\"executionId\":\"run-1\",\"receipt\":null,\"outcome\":{\"kind\":\"uncertain\","
	    "\"diagnostic\":\"lock\"}}\n";
	assert_false(gio_run_answer_refused(uncertain, sizeof uncertain - 1));
	assert_false(gio_run_answer_refused("garbage\n", 8));
}

static void receipt_fact_bounds(void **state)
{
	(void)state;
	const char *sha = NULL;
	int64_t bytes = 0;
	json_object *f = jsonx_parse_str("{\"path\":\"state/receiver/receipts/run-1.json\",\"sha256\":\"zz\","
	                                 "\"bytes\":10}",
	                                 NULL, 0);
	assert_false(gio_frame_receipt_fact(f, "run-1", &sha, &bytes));
	json_object_put(f);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "{\"path\":\"%s/run-1.json\",\"sha256\":\"%s\",\"bytes\":%llu}",
	              RECEIVER_RECEIPTS_DIR, SHA_A, (unsigned long long)RECEIVER_RECEIPT_MAX_BYTES + 1);
	f = jsonx_parse_str(strbuf_str(&sb), NULL, 0);
	assert_false(gio_frame_receipt_fact(f, "run-1", &sha, &bytes));
	json_object_put(f);
	strbuf_free(&sb);
	assert_false(gio_frame_receipt_fact(NULL, "run-1", &sha, &bytes));
	assert_int_equal(bytes, -1);
}

/* ---- facts ------------------------------------------------------------------------- */

static json_object *facts2(const char *p1, uint64_t b1, const char *s1, const char *p2, uint64_t b2,
                           const char *s2)
{
	json_object *a = json_object_new_array();
	json_object_array_add(a, gio_fact_new(p1, b1, s1));
	if (p2)
		json_object_array_add(a, gio_fact_new(p2, b2, s2));
	return a;
}

static void facts_compare_names_the_difference(void **state)
{
	(void)state;
	relay_error err;
	json_object *sent = facts2("a.txt", 3, SHA_A, "d/b.txt", 4, SHA_B);
	json_object *same = facts2("d/b.txt", 4, SHA_B, "a.txt", 3, SHA_A); /* any order */
	assert_int_equal(gio_facts_compare(same, sent, "the workspace", &err), RELAY_OK);
	json_object *moved = facts2("a.txt", 3, SHA_A, "workspace/d/b.txt", 4, SHA_B); /* a path bug */
	assert_int_equal(gio_facts_compare(moved, sent, "the workspace", &err), RELAY_E_PROTOCOL);
	assert_string_equal(
	    err.message, "the transport reports no \"d/b.txt\" for the workspace, which the core sent (2 "
	                 "sent, 2 reported; next reported: \"workspace/d/b.txt\"); the copy is not trusted");
	assert_string_equal(gio_tool_code(RELAY_E_PROTOCOL), "transfer-failed");
	json_object *size = facts2("a.txt", 4, SHA_A, "d/b.txt", 4, SHA_B);
	assert_int_equal(gio_facts_compare(size, sent, "the workspace", &err), RELAY_E_PROTOCOL);
	assert_non_null(strstr(err.message, "its size"));
	json_object *hash = facts2("a.txt", 3, SHA_A, "d/b.txt", 4, SHA_A);
	assert_int_equal(gio_facts_compare(hash, sent, "the workspace", &err), RELAY_E_PROTOCOL);
	assert_non_null(strstr(err.message, "SHA-256"));
	json_object *fewer = facts2("a.txt", 3, SHA_A, NULL, 0, NULL);
	assert_int_equal(gio_facts_compare(fewer, sent, "the workspace", &err), RELAY_E_PROTOCOL);
	assert_string_equal(err.message,
	                    "the transport reports no \"d/b.txt\" for the workspace, which the core sent (2 "
	                    "sent, 1 reported); the copy is not trusted");
	/* A file reported that was not sent, before and after the last sent one. */
	json_object *extra = facts2("a.txt", 3, SHA_A, "c.txt", 1, SHA_B);
	assert_int_equal(gio_facts_compare(extra, sent, "the workspace", &err), RELAY_E_PROTOCOL);
	assert_string_equal(
	    err.message, "the transport reports \"c.txt\" for the workspace, a file the core did not send (2 "
	                 "sent, 2 reported; next sent: \"d/b.txt\"); the copy is not trusted");
	json_object *more = facts2("a.txt", 3, SHA_A, NULL, 0, NULL);
	json_object_array_add(more, gio_fact_new("b.txt", 1, SHA_B));
	json_object *one = facts2("a.txt", 3, SHA_A, NULL, 0, NULL);
	assert_int_equal(gio_facts_compare(more, one, "the workspace", &err), RELAY_E_PROTOCOL);
	assert_string_equal(
	    err.message, "the transport reports \"b.txt\" for the workspace, a file the core did not send (1 "
	                 "sent, 2 reported); the copy is not trusted");
	json_object_put(extra);
	json_object_put(more);
	json_object_put(one);
	json_object *obj = json_object_new_object();
	assert_int_equal(gio_facts_compare(obj, sent, "the workspace", &err), RELAY_E_PROTOCOL);
	json_object *none = json_object_new_array();
	json_object *none2 = json_object_new_array();
	assert_int_equal(gio_facts_compare(none, none2, "nothing", &err), RELAY_OK);
	json_object_put(sent);
	json_object_put(same);
	json_object_put(moved);
	json_object_put(size);
	json_object_put(hash);
	json_object_put(fewer);
	json_object_put(obj);
	json_object_put(none);
	json_object_put(none2);
}

/* ---- a transport that lies --------------------------------------------------------- */

/* What the lying transport answers for a push (facts JSON, strdup'd), and
 * what it was asked. */
static const char *lie_facts;
static char pushed_remote[256];

static relay_status lying_push(relay_plugin_state *st, relay_transport_conn *conn, const char *local_path,
                               const char *remote_path, relay_call *call, unsigned flags,
                               char **facts_json_out, relay_error *err)
{
	(void)st;
	(void)conn;
	(void)local_path;
	(void)call;
	(void)flags;
	(void)err;
	snprintf(pushed_remote, sizeof pushed_remote, "%s", remote_path);
	if (facts_json_out)
		*facts_json_out = lie_facts ? strdup(lie_facts) : NULL;
	return RELAY_OK;
}

static void lying_transport_is_not_trusted(void **state)
{
	(void)state;
	loaded_plugin plugin;
	memset(&plugin, 0, sizeof plugin);
	plugin.descriptor.name = "lying-transport";
	plugin.transport.push = lying_push;
	plugin.transport.traits = RELAY_TRANSPORT_GUEST_FACTS;
	guest_io io;
	memset(&io, 0, sizeof io);
	io.plugin = &plugin;
	io.traits = plugin.transport.traits;
	io.transfers = json_object_new_array();
	pthread_mutex_init(&io.transfers_lock, NULL);
	char sha[SHA256_HEX_LEN + 1];
	sha256_buffer_hex("hello\n", 6, sha);
	relay_error err;
	bool checked = false;
	char honest[256];

	/* Honest facts: the push goes through, checked. */
	snprintf(honest, sizeof honest, "[{\"path\":\"\",\"bytes\":6,\"sha256\":\"%s\"}]", sha);
	lie_facts = honest;
	assert_int_equal(gio_push_checked_facts(&io, "/nonexistent/local", "/R/scripts/x.sh", sha, 6,
	                                        "the script", &checked, &err),
	                 RELAY_OK);
	assert_true(checked);
	assert_string_equal(pushed_remote, "/R/scripts/x.sh");

	/* A path it did not write: transfer-failed. */
	char lie[256];
	snprintf(lie, sizeof lie, "[{\"path\":\"scripts/x.sh\",\"bytes\":6,\"sha256\":\"%s\"}]", sha);
	lie_facts = lie;
	relay_status st = gio_push_checked_facts(&io, "/nonexistent/local", "/R/scripts/x.sh", sha, 6,
	                                         "the script", &checked, &err);
	assert_int_equal(st, RELAY_E_PROTOCOL);
	assert_string_equal(gio_tool_code(st), "transfer-failed");
	assert_non_null(strstr(err.message, "the script"));

	/* Wrong size, wrong hash: the same. */
	snprintf(lie, sizeof lie, "[{\"path\":\"\",\"bytes\":7,\"sha256\":\"%s\"}]", sha);
	assert_int_equal(
	    gio_push_checked_facts(&io, "/nonexistent/local", "/R/x", sha, 6, "the request", &checked, &err),
	    RELAY_E_PROTOCOL);
	snprintf(lie, sizeof lie, "[{\"path\":\"\",\"bytes\":6,\"sha256\":\"%s\"}]", SHA_A);
	assert_int_equal(
	    gio_push_checked_facts(&io, "/nonexistent/local", "/R/x", sha, 6, "the request", &checked, &err),
	    RELAY_E_PROTOCOL);

	/* No facts at all: not checked here (the caller scans). */
	lie_facts = NULL;
	assert_int_equal(
	    gio_push_checked_facts(&io, "/nonexistent/local", "/R/x", sha, 6, "the request", &checked, &err),
	    RELAY_OK);
	assert_false(checked);
	json_object_put(io.transfers);
	pthread_mutex_destroy(&io.transfers_lock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(frame_is_the_last_object_line),
	    cmocka_unit_test(exit_statuses_follow_the_protocol),
	    cmocka_unit_test(run_answer_parts_are_taken_whole),
	    cmocka_unit_test(refused_stdin_is_told_apart),
	    cmocka_unit_test(receipt_fact_bounds),
	    cmocka_unit_test(facts_compare_names_the_difference),
	    cmocka_unit_test(lying_transport_is_not_trusted),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
