/*
 * The session and the lease rooms without the MCP layer: a real manager
 * (session/) created over real settings and folders with the relay's hook
 * table (lease/, delivery/) but no dispatcher, its reservation refusals
 * (guest limit, a session held by another holder of session.lock), taking
 * back the records an earlier process left on disk (lease/reconcile.c), and
 * the status object. The lease room's decisions on their own are
 * tests/unit/lease/.
 *
 * The machine slot names a file that is not a plugin, so the backend is
 * unavailable the same way on every machine: reconciliation then decides
 * from the records, the locks and the bindings alone.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lease/lease_state.h"
#include "lease/lifecycle.h"
#include "session/guest.h"
#include "session/manager_internal.h"
#include "tools/dispatch.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

/* ---- a manager without tools/ ------------------------------------------------------ */

static void no_dispatch(session_manager *m, relay_tool tool, json_object *args, relay_call *call)
{
	(void)m;
	(void)tool;
	(void)args;
	(void)call;
	fail_msg("the session dispatched a tool call nobody made");
}

/* The relay's own hook table (lease/ and delivery/ below tools/), with a
 * dispatcher that must never be reached: nothing here goes through a tool. */
static const session_hooks *lease_hooks(void)
{
	static session_hooks hooks; /* written before any manager exists, then only read */
	hooks = *tools_session_hooks();
	hooks.dispatch = no_dispatch;
	return &hooks;
}

typedef struct fixture {
	char root[256];
	char state[300];
	char session_dir[400];
	char not_a_plugin[300];
} fixture;

/* A fresh project, state folder and HOME under /tmp; the session identity
 * `session`; at most `max_guests` guests. */
static void fixture_init(fixture *f, const char *session, int max_guests)
{
	snprintf(f->root, sizeof f->root, "/tmp/relay-unit-session-XXXXXX");
	assert_non_null(mkdtemp(f->root));
	char project[300];
	snprintf(project, sizeof project, "%s/project", f->root);
	assert_int_equal(mkdir(project, 0700), 0);
	snprintf(f->state, sizeof f->state, "%s/state", f->root);
	snprintf(f->not_a_plugin, sizeof f->not_a_plugin, "%s/not-a-plugin.so", f->root);
	FILE *file = fopen(f->not_a_plugin, "w");
	assert_non_null(file);
	fputs("not a shared object\n", file);
	fclose(file);
	char max[16];
	snprintf(max, sizeof max, "%d", max_guests);
	setenv("HOME", f->root, 1);
	setenv("MCP_RELAY_PROJECT", project, 1);
	setenv("MCP_RELAY_STATE_DIR", f->state, 1);
	setenv("MCP_RELAY_SESSION", session, 1);
	setenv("MCP_RELAY_BACKEND", f->not_a_plugin, 1);
	setenv("MCP_RELAY_MAX_GUESTS", max, 1);
	unsetenv("MCP_RELAY_REGISTRY");
	unsetenv("VM_ENVIRONMENT_FILE");
	unsetenv("XDG_STATE_HOME");
	/* The session folder those settings choose (its name is a key of the
	 * identity, spec/lifecycle.md §2). */
	relay_settings settings;
	char errbuf[1024] = "";
	assert_int_equal(settings_load(&settings, errbuf, sizeof errbuf), 0);
	snprintf(f->session_dir, sizeof f->session_dir, "%s", settings.session_dir);
	settings_free(&settings);
}

/* Removes the fixture's folders. The managers' threads outlive their test
 * (start() below) and may still write a record into the state folder while
 * it goes, so the removal is tried again for a while; what is left after
 * that is reported, not failed: the cleanup is not what a test checks. */
static void fixture_done(fixture *f)
{
	relay_error err;
	for (int attempt = 0; attempt < 40; attempt++) {
		if (fs_remove_tree(f->root, &err) == RELAY_OK)
			return;
		struct timespec pause = {0, 50 * 1000 * 1000};
		nanosleep(&pause, NULL);
	}
	print_message("fixture: %s could not be removed: %s\n", f->root, err.message);
}

/* Kept for the life of the test process: the manager borrows them, and its
 * threads outlive the test (a manager is not destroyed while they run). */
static session_manager *start(void)
{
	relay_settings *settings = calloc(1, sizeof *settings);
	relay_backends *backends = calloc(1, sizeof *backends);
	assert_non_null(settings);
	assert_non_null(backends);
	char errbuf[1024] = "";
	assert_int_equal(settings_load(settings, errbuf, sizeof errbuf), 0);
	backends_select(backends, settings);
	session_manager *m = session_create(settings, backends, lease_hooks(), errbuf, sizeof errbuf);
	assert_non_null(m);
	return m;
}

/* Waits until no guest is being taken back (at most 60 s). */
static void wait_reconciled(session_manager *m)
{
	int64_t give_up = clock_monotonic_ms() + 60000;
	for (;;) {
		session_lock(m);
		bool pending = false;
		for (guest *g = m->guests; g; g = g->next)
			pending |= g->phase == PHASE_RECONCILING;
		session_unlock(m);
		if (!pending && !session_busy(m))
			return;
		assert_true(clock_monotonic_ms() < give_up);
		struct timespec pause = {0, 20 * 1000000L};
		nanosleep(&pause, NULL);
	}
}

static json_object *acquire_args(const char *task)
{
	json_object *args = json_object_new_object();
	jsonx_add_str(args, "task", task);
	jsonx_add_str(args, "image", "ubuntu2404");
	return args;
}

/* ---- reservation --------------------------------------------------------------------- */

static void test_reserve_names_and_limit(void **state)
{
	(void)state;
	fixture f;
	fixture_init(&f, "unit-reserve", 2);
	session_manager *m = start();
	json_object *args = acquire_args("login");
	relay_outcome o = OUTCOME_INIT;

	session_lock(m);
	guest *first = session_reserve_guest(m, args, &o);
	guest *second = session_reserve_guest(m, args, &o);
	assert_false(outcome_failed(&o));
	guest *third = session_reserve_guest(m, args, &o);
	session_unlock(m);

	assert_non_null(first);
	assert_non_null(second);
	assert_string_equal(first->name, "login-1");
	assert_string_equal(second->name, "login-2");
	assert_int_equal(first->phase, PHASE_ACQUIRING);
	assert_true(first->owner_lock_fd >= 0);
	/* The third is refused by the limit, naming what is held. */
	assert_null(third);
	assert_true(outcome_failed(&o));
	assert_string_equal(o.code, "guest-limit");
	assert_non_null(strstr(o.message, "login-1, login-2"));
	assert_non_null(strstr(o.message, "MCP_RELAY_MAX_GUESTS"));
	outcome_free(&o);

	/* The record of a reserved guest is on disk, and the counter too. */
	char path[600];
	snprintf(path, sizeof path, "%s/guests/login-2/lease.json", f.session_dir);
	json_object *record = NULL;
	relay_error err;
	assert_int_equal(fs_read_json(path, 1 << 20, &record, &err), RELAY_OK);
	assert_string_equal(jsonx_get_str(record, "phase"), "acquiring");
	json_object_put(record);
	snprintf(path, sizeof path, "%s/session.json", f.session_dir);
	json_object *session = NULL;
	assert_int_equal(fs_read_json(path, 1 << 20, &session, &err), RELAY_OK);
	int64_t next = 0;
	assert_true(jsonx_get_int(jsonx_get_obj(session, "counters"), "login", &next));
	assert_int_equal(next, 3); /* a refusal takes no number */
	json_object_put(session);

	/* A closed guest frees its place; its name is not handed out again. */
	guest_close(m, first, "not-acquired");
	session_lock(m);
	guest *fourth = session_reserve_guest(m, args, &o);
	session_unlock(m);
	assert_non_null(fourth);
	assert_string_equal(fourth->name, "login-3");
	assert_false(outcome_failed(&o));

	/* The status object lists the closed guest apart; this machine slot
	 * does not work through the machine service. */
	session_lock(m);
	json_object *status = session_status_json(m);
	session_unlock(m);
	assert_int_equal(json_object_array_length(jsonx_get_array(status, "guests")), 2);
	json_object *closed = json_object_array_get_idx(jsonx_get_array(status, "closedGuests"), 0);
	assert_string_equal(jsonx_get_str(closed, "guest"), "login-1");
	assert_string_equal(jsonx_get_str(closed, "reason"), "not-acquired");
	assert_null(jsonx_get_str(status, "service"));
	json_object_put(status);
	json_object_put(args);
	fixture_done(&f);
}

static void test_reserve_refused_while_the_session_is_held(void **state)
{
	(void)state;
	fixture f;
	fixture_init(&f, "unit-held", 4);
	session_manager *holder = start();
	assert_true(holder->session_lock_fd >= 0);
	/* A second session object on the same identity: session.lock is held
	 * (flock is per open file, so even by this process). */
	session_manager *second = start();
	assert_true(second->session_locked_elsewhere);
	json_object *args = acquire_args("login");
	relay_outcome o = OUTCOME_INIT;
	session_lock(second);
	guest *g = session_reserve_guest(second, args, &o);
	session_unlock(second);
	assert_null(g);
	assert_string_equal(o.code, "session-locked");
	char pid[32];
	snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
	assert_non_null(strstr(o.message, pid));
	assert_non_null(strstr(o.message, "unit-held"));
	outcome_free(&o);
	/* The holder still reserves. */
	session_lock(holder);
	g = session_reserve_guest(holder, args, &o);
	session_unlock(holder);
	assert_non_null(g);
	assert_false(outcome_failed(&o));
	/* The waiting one gives up when its session ends. */
	session_end(second, "test");
	json_object_put(args);
	fixture_done(&f);
}

static void test_incomplete_hooks_refused(void **state)
{
	(void)state;
	fixture f;
	fixture_init(&f, "unit-hooks", 1);
	relay_settings settings;
	relay_backends backends;
	char errbuf[512] = "";
	assert_int_equal(settings_load(&settings, errbuf, sizeof errbuf), 0);
	backends_select(&backends, &settings);
	session_hooks partial = *tools_session_hooks();
	partial.end_guests = NULL;
	assert_null(session_create(&settings, &backends, &partial, errbuf, sizeof errbuf));
	assert_non_null(strstr(errbuf, "session_hooks"));
	session_hooks old = *tools_session_hooks();
	old.size = sizeof old - 1;
	assert_null(session_create(&settings, &backends, &old, errbuf, sizeof errbuf));
	assert_null(session_create(&settings, &backends, NULL, errbuf, sizeof errbuf));
	backends_free(&backends);
	settings_free(&settings);
	fixture_done(&f);
}

/* ---- taking back the records of an earlier process ---------------------------------------- */

/* Writes guests/<name>/lease.json as an earlier process would have. */
static void write_record(const fixture *f, const char *name, const char *task, guest_phase phase,
                         const char *machine)
{
	guest *g = guest_new(tools_guest_rooms());
	g->name = strdup(name);
	g->task = strdup(task);
	g->image = strdup("ubuntu2404");
	char purpose[96];
	snprintf(purpose, sizeof purpose, "relay-%s-0000abcd", name);
	g->purpose = strdup(purpose);
	json_object *binding = json_object_new_object();
	jsonx_add_str(binding, "machine", machine);
	jsonx_add_null(binding, "endpoint");
	jsonx_add_null(binding, "store");
	jsonx_add_null(binding, "environmentFingerprint");
	g->binding = binding;
	char path[700];
	snprintf(path, sizeof path, "%s/project/relay-evidence/%s", f->root, purpose);
	g->evidence_path = strdup(path);
	g->guest_root = strdup("/var/tmp/x-mcp-relay-x");
	g->acquired_at_ms = 1790000000000;
	g->lease->deadline_ms = 1790000000000 + 4 * 3600000LL;
	g->lease->ttl_hours = 4;
	g->network = strdup("nat");
	g->lease->env_pack = strdup("none");
	char lease[256];
	snprintf(lease, sizeof lease, "{\"vm\":\"vm-%s\",\"purpose\":\"%s\",\"lease_id\":\"l-%s\"}", name,
	         purpose, name);
	g->lease_document = jsonx_parse_str(lease, NULL, 0);
	g->phase = phase;
	g->lease->renewal = phase == PHASE_CLOSED ? RENEWAL_NONE : RENEWAL_PAUSED;
	if (phase == PHASE_CLOSED) {
		g->closed = json_object_new_object();
		jsonx_add_str(g->closed, "at", "2026-09-24T10:00:00Z");
		jsonx_add_str(g->closed, "reason", "released");
		jsonx_add_str(g->closed, "evidencePath", g->evidence_path);
	}
	snprintf(path, sizeof path, "%s/guests/%s", f->session_dir, name);
	relay_error err;
	assert_int_equal(fs_mkdir_p(path, 0700, &err), RELAY_OK);
	snprintf(path, sizeof path, "%s/guests/%s/lease.json", f->session_dir, name);
	json_object *record = guest_record_json(g);
	assert_int_equal(fs_write_json_durable(path, record, &err), RELAY_OK);
	json_object_put(record);
	guest_free(g);
}

static guest *find(session_manager *m, const char *name)
{
	session_lock(m);
	guest *g = session_find_guest(m, name);
	session_unlock(m);
	assert_non_null(g);
	return g;
}

static void test_reconcile_records_on_disk(void **state)
{
	(void)state;
	fixture f;
	fixture_init(&f, "unit-restart", 8);
	/* The binding this relay's machine slot gives new leases. */
	const char *here = f.not_a_plugin;
	write_record(&f, "web-1", "web", PHASE_READY, here);
	write_record(&f, "web-2", "web", PHASE_STAGED, "machine-elsewhere");
	write_record(&f, "web-3", "web", PHASE_CLOSED, here);
	write_record(&f, "web-5", "web", PHASE_READY, here);
	write_record(&f, "api-1", "api", PHASE_READY, here);
	/* An unreadable record. */
	char path[600];
	snprintf(path, sizeof path, "%s/guests/api-1/lease.json", f.session_dir);
	FILE *file = fopen(path, "w");
	assert_non_null(file);
	fputs("{ not json", file);
	fclose(file);
	/* web-5 is owned by another live process. */
	int ready[2];
	assert_int_equal(pipe(ready), 0);
	pid_t owner = fork();
	assert_true(owner >= 0);
	if (owner == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
		snprintf(path, sizeof path, "%s/guests/web-5/owner.lock", f.session_dir);
		int fd = open(path, O_RDWR | O_CREAT, 0600);
		if (fd < 0 || flock(fd, LOCK_EX) != 0)
			_exit(1);
		char pid[32];
		int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
		if (pwrite(fd, pid, (size_t)len, 0) != len)
			_exit(1);
		if (write(ready[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	char byte;
	assert_int_equal(read(ready[0], &byte, 1), 1);

	session_manager *m = start();
	wait_reconciled(m);

	/* Bound to this relay's machine slot: taken back in the phase it had;
	 * without a machine backend it says so and changes nothing else. */
	guest *web1 = find(m, "web-1");
	assert_int_equal(web1->phase, PHASE_READY);
	assert_false(web1->record_readonly);
	assert_true(web1->owner_lock_fd >= 0);
	assert_non_null(web1->last_error);
	assert_non_null(strstr(web1->last_error, "machine backend is not available at restart"));
	/* Another machine environment: never touched. */
	guest *web2 = find(m, "web-2");
	assert_int_equal(web2->phase, PHASE_UNAVAILABLE);
	assert_non_null(strstr(web2->last_error, "environment-mismatch"));
	/* Closed records are listed as closed. */
	assert_int_equal(find(m, "web-3")->phase, PHASE_CLOSED);
	/* Another owner's guest keeps its record. */
	guest *web5 = find(m, "web-5");
	assert_int_equal(web5->phase, PHASE_UNAVAILABLE);
	char owned[64];
	snprintf(owned, sizeof owned, "owned by another process (pid %ld)", (long)owner);
	assert_non_null(strstr(web5->last_error, owned));
	/* An unreadable record is refused, not guessed at. */
	guest *api1 = find(m, "api-1");
	assert_int_equal(api1->phase, PHASE_UNAVAILABLE);
	assert_true(api1->record_readonly);
	assert_non_null(strstr(api1->last_error, "cannot be used by this relay"));

	/* Restored names are never handed out again, an unreadable record's
	 * included (its record stays as it was). */
	json_object *args = acquire_args("web");
	relay_outcome o = OUTCOME_INIT;
	session_lock(m);
	guest *next = session_reserve_guest(m, args, &o);
	session_unlock(m);
	assert_non_null(next);
	assert_string_equal(next->name, "web-6");
	json_object_put(args);
	args = acquire_args("api");
	session_lock(m);
	next = session_reserve_guest(m, args, &o);
	session_unlock(m);
	assert_non_null(next);
	assert_string_equal(next->name, "api-2");
	json_object_put(args);
	char text[64] = "";
	snprintf(path, sizeof path, "%s/guests/api-1/lease.json", f.session_dir);
	file = fopen(path, "r");
	assert_non_null(file);
	assert_non_null(fgets(text, sizeof text, file));
	fclose(file);
	assert_string_equal(text, "{ not json");

	kill(owner, SIGTERM);
	waitpid(owner, NULL, 0);
	close(ready[0]);
	close(ready[1]);
	fixture_done(&f);
}

/* ---- the decisions of lease/ ----------------------------------------------------------------- */

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_incomplete_hooks_refused),
	    cmocka_unit_test(test_reserve_names_and_limit),
	    cmocka_unit_test(test_reserve_refused_while_the_session_is_held),
	    cmocka_unit_test(test_reconcile_records_on_disk),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
