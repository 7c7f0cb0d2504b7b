/*
 * The ownership record (spec/lifecycle.md §9, session/guest.h): everything a
 * restart needs survives a round trip through lease.json; a guest being
 * reconciled keeps its phase on disk; only the owner writes the record; a
 * record of another format is refused rather than guessed at.
 */
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

#include "delivery/delivery_state.h"
#include "lease/lease_state.h"
#include "runs/run_state.h"
#include "session/guest.h"
#include "tools/dispatch.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

static guest *sample_guest(void)
{
	guest *g = guest_new(tools_guest_rooms());
	g->name = strdup("login-test-2");
	g->task = strdup("login-test");
	g->image = strdup("ubuntu2404");
	g->purpose = strdup("relay-login-test-3f9a1c2e");
	g->binding = jsonx_parse_str("{\"machine\":\"machine-fake\",\"endpoint\":null,\"store\":\"/"
	                             "s\",\"environmentFingerprint\":null}",
	                             NULL, 0);
	g->evidence_path = strdup("/p/relay-evidence/relay-login-test-3f9a1c2e");
	g->guest_root = strdup("/var/tmp/2026-09-24-10-11-12-Z-mcp-relay-relay-login-test-3f9a1c2e");
	g->acquired_at_ms = 1790000000000;
	g->lease->deadline_ms = 1790000000000 + 4 * 3600000LL;
	g->lease->ttl_hours = 4;
	g->network = strdup("nat");
	g->lease->env_pack = strdup("none");
	json_object_put(g->delivery->extractions);
	g->delivery->extractions =
	    jsonx_parse_str("[{\"name\":\"screens\",\"path\":\"out/screens\"}]", NULL, 0);
	g->lease_document = jsonx_parse_str(
	    "{\"vm\":\"fake-1\",\"purpose\":\"relay-login-test-3f9a1c2e\",\"lease_id\":\"abc\","
	    "\"expiresAtMs\":1790000900000,\"fake\":{\"home\":\"/h\"}}",
	    NULL, 0);
	g->lease->registry_row =
	    jsonx_parse_str("{\"machine\":\"m\",\"os\":\"o\",\"taskName\":\"t\",\"agent\":\"a\","
	                    "\"project\":\"p\",\"startDate\":\"s\"}",
	                    NULL, 0);
	g->phase = PHASE_STAGED;
	g->lease->renewal = RENEWAL_PAUSED;
	g->lease->expires_at_ms = 1790014400000;
	g->lease->last_renewed_at_ms = 1790000060000;
	g->lease->guest_state = strdup("running");
	g->staged = true;
	g->run->platform = strdup("linux-x86_64");
	g->run->snapshots = 1;
	g->recording_session_id = strdup("rec-1");
	g->run->run_seq = 7;
	json_object_put(g->run->used_step_ids);
	g->run->used_step_ids = jsonx_parse_str("[\"step-1\",\"step-2\"]", NULL, 0);
	return g;
}

static void test_round_trip_keeps_what_a_restart_needs(void **state)
{
	(void)state;
	guest *g = sample_guest();
	json_object *record = guest_record_json(g);
	char why[256];
	guest *back = guest_from_record(tools_guest_rooms(), record, why, sizeof why);
	assert_non_null(back);
	assert_string_equal(back->name, "login-test-2");
	assert_string_equal(back->purpose, g->purpose);
	assert_string_equal(back->guest_root, g->guest_root);
	assert_int_equal(back->lease->deadline_ms, g->lease->deadline_ms);
	assert_int_equal(back->phase, PHASE_STAGED);
	assert_int_equal(back->lease->renewal, RENEWAL_PAUSED);
	assert_int_equal(back->lease->expires_at_ms, g->lease->expires_at_ms);
	assert_int_equal(back->lease->last_renewed_at_ms, g->lease->last_renewed_at_ms);
	assert_true(back->staged);
	assert_string_equal(back->run->platform, "linux-x86_64");
	assert_int_equal(back->run->snapshots, 1);
	assert_string_equal(back->recording_session_id, "rec-1");
	assert_int_equal(back->run->run_seq, 7);
	assert_int_equal(json_object_array_length(back->run->used_step_ids), 2);
	assert_string_equal(jsonx_get_str(back->lease_document, "vm"), "fake-1");
	assert_string_equal(jsonx_get_str(jsonx_get_obj(back->lease_document, "fake"), "home"), "/h");
	assert_string_equal(jsonx_get_str(back->lease->registry_row, "taskName"), "t");
	assert_string_equal(jsonx_get_str(back->binding, "store"), "/s");
	assert_null(back->closed);
	/* The written record carries the documented fields. */
	static const char *const fields[] = {"schemaVersion",
	                                     "guest",
	                                     "task",
	                                     "image",
	                                     "purpose",
	                                     "binding",
	                                     "evidencePath",
	                                     "guestRoot",
	                                     "acquiredAt",
	                                     "deadline",
	                                     "ttlHours",
	                                     "network",
	                                     "env",
	                                     "vnc",
	                                     "extractions",
	                                     "fullWorkspace",
	                                     "lease",
	                                     "registryRow",
	                                     "phase",
	                                     "acquisitionInFlight",
	                                     "waitedForCapacityMs",
	                                     "renewal",
	                                     "guestState",
	                                     "lastError",
	                                     "staged",
	                                     "platform",
	                                     "nodePath",
	                                     "cuaDriver",
	                                     "snapshots",
	                                     "recordingSessionId",
	                                     "runSeq",
	                                     "pendingReset",
	                                     "previousEvidence",
	                                     "console",
	                                     "consoleAttempt",
	                                     "consoleAttemptIds",
	                                     "delivered",
	                                     "released",
	                                     "closed"};
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
		if (!jsonx_has(record, fields[i]))
			fail_msg("the record lacks %s", fields[i]);
	json_object_put(record);
	guest_free(back);
	guest_free(g);
}

static void test_reconciling_keeps_the_phase_on_disk(void **state)
{
	(void)state;
	guest *g = sample_guest();
	g->lease->restored_phase = g->phase;
	g->lease->restored_renewal = g->lease->renewal;
	g->phase = PHASE_RECONCILING;
	g->lease->renewal = RENEWAL_NONE;
	json_object *record = guest_record_json(g);
	assert_string_equal(jsonx_get_str(record, "phase"), "staged");
	assert_string_equal(jsonx_get_str(jsonx_get_obj(record, "renewal"), "state"), "paused");
	/* Status shows it as reconciling meanwhile. */
	json_object *entry = guest_status_json(g);
	assert_string_equal(jsonx_get_str(entry, "phase"), "reconciling");
	json_object_put(entry);
	json_object_put(record);
	guest_free(g);
}

static void test_only_the_owner_writes_the_record(void **state)
{
	(void)state;
	char root[] = "/tmp/lifecycle-record-XXXXXX";
	assert_non_null(mkdtemp(root));
	guest *g = sample_guest();
	g->dir = strdup(root);
	char path[128];
	snprintf(path, sizeof path, "%s/lease.json", root);
	/* No owner lock held: nothing is written. */
	assert_int_equal(guest_save(g), -1);
	assert_int_equal(access(path, F_OK), -1);
	g->owner_lock_fd = open(root, O_RDONLY);
	assert_true(g->owner_lock_fd >= 0);
	assert_int_equal(guest_save(g), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* A read-only record (another format, another owner) is never rewritten. */
	g->record_readonly = true;
	free(g->task);
	g->task = strdup("changed");
	assert_int_equal(guest_save(g), -1);
	json_object *on_disk = NULL;
	relay_error err;
	assert_int_equal(fs_read_json(path, 1 << 20, &on_disk, &err), RELAY_OK);
	assert_string_equal(jsonx_get_str(on_disk, "task"), "login-test");
	/* Reloading replaces the facts but keeps the folder. */
	assert_int_equal(guest_reload(g, on_disk, err.message, sizeof err.message), 0);
	assert_string_equal(g->task, "login-test");
	assert_string_equal(g->dir, root);
	json_object_put(on_disk);
	close(g->owner_lock_fd);
	g->owner_lock_fd = -1;
	guest_free(g);
	fs_remove_tree(root, &err);
}

static void test_records_of_other_formats_are_refused(void **state)
{
	(void)state;
	char why[256];
	static const char *const records[] = {
	    "{\"schemaVersion\":2,\"guest\":\"a-1\",\"purpose\":\"p\",\"phase\":\"ready\"}",
	    "{\"guest\":\"a-1\",\"purpose\":\"p\",\"phase\":\"ready\"}",
	    "{\"schemaVersion\":1,\"guest\":\"a-1\",\"purpose\":\"p\",\"phase\":\"dancing\"}",
	    "{\"schemaVersion\":1,\"purpose\":\"p\",\"phase\":\"ready\"}",
	    "[]",
	};
	for (size_t i = 0; i < sizeof records / sizeof records[0]; i++) {
		json_object *r = jsonx_parse_str(records[i], NULL, 0);
		why[0] = '\0';
		guest *g = guest_from_record(tools_guest_rooms(), r, why, sizeof why);
		if (g != NULL)
			fail_msg("record %zu was accepted", i);
		assert_true(why[0] != '\0');
		json_object_put(r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip_keeps_what_a_restart_needs),
	    cmocka_unit_test(test_reconciling_keeps_the_phase_on_disk),
	    cmocka_unit_test(test_only_the_owner_writes_the_record),
	    cmocka_unit_test(test_records_of_other_formats_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
