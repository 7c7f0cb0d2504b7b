/*
 * The rooms' slices of a guest have their own locks (session/slice.h,
 * session/guest.h "Locking"): while another thread holds the session's lock
 * (a status call, a save, the renewal scheduler), a room still reads its own
 * slice through its accessors; and the session's walk over the slices takes
 * each slice's lock, so a room holding its slice is waited for.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "console/console_state.h"
#include "delivery/extraction.h"
#include "lease/lease_state.h"
#include "runs/run_state.h"
#include "session/guest.h"
#include "session/manager_internal.h"
#include "session/slice.h"
#include "tools/dispatch.h"
#include "util/jsonx.h"

typedef struct reader {
	struct session_manager *m;
	guest *g;
	char *guest_state;
	bool reset_pending;
	json_object *observation;
	json_object *declarations;
} reader;

/* What the rooms read of their slices, none of them through the session's lock. */
static void *read_slices(void *arg)
{
	reader *r = arg;
	r->guest_state = lease_guest_state_copy(r->m, r->g);
	r->reset_pending = run_reset_pending(r->g);
	r->observation = console_observation_of(r->g);
	r->declarations = extraction_declarations(r->m, r->g, NULL);
	return NULL;
}

/* Joins `thread` within 10 s (a thread blocked on a lock never returns). */
static bool joined(pthread_t thread)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	return pthread_timedjoin_np(thread, NULL, &until) == 0;
}

static void test_rooms_read_their_slices_while_the_session_lock_is_held(void **state)
{
	(void)state;
	struct session_manager m;
	memset(&m, 0, sizeof m);
	pthread_mutex_init(&m.lock, NULL);
	guest *g = guest_new(tools_guest_rooms());
	assert_non_null(g);
	json_object *args =
	    jsonx_parse_str("{\"extractions\":[{\"name\":\"out\",\"path\":\"out\"}],\"vnc\":true}", NULL, 0);
	guest_slices_reserve(g, args);
	json_object_put(args);
	lease_set_guest_state(g, "running");
	json_object *report = jsonx_parse_str("{\"console_id\":\"c-1\"}", NULL, 0);
	console_store_acquired(g, report);
	json_object_put(report);

	reader r = {.m = &m, .g = g};
	pthread_mutex_lock(&m.lock); /* the session's lock, held elsewhere */
	pthread_t thread;
	assert_int_equal(pthread_create(&thread, NULL, read_slices, &r), 0);
	bool done = joined(thread);
	pthread_mutex_unlock(&m.lock);
	if (!done)
		pthread_join(thread, NULL);
	assert_true(done);
	assert_string_equal(r.guest_state, "running");
	assert_false(r.reset_pending);
	assert_non_null(r.observation);
	assert_int_equal(json_object_array_length(r.declarations), 1);

	free(r.guest_state);
	json_object_put(r.observation);
	json_object_put(r.declarations);
	guest_free(g);
	pthread_mutex_destroy(&m.lock);
}

typedef struct status_call {
	guest *g;
	json_object *status;
} status_call;

static void *call_status(void *arg)
{
	status_call *c = arg;
	c->status = guest_status_json(c->g);
	return NULL;
}

static void test_the_session_waits_for_a_room_holding_its_slice(void **state)
{
	(void)state;
	guest *g = guest_new(tools_guest_rooms());
	assert_non_null(g);
	g->name = strdup("login-test-1");
	status_call c = {.g = g};
	slice_lock(g->run); /* the runs room is changing its slice */
	pthread_t thread;
	assert_int_equal(pthread_create(&thread, NULL, call_status, &c), 0);
	/* The status entry cannot be built past the run slice while it is
	 * held: the walk takes the slice's lock. */
	struct timespec brief = {0, 200 * 1000 * 1000};
	nanosleep(&brief, NULL);
	g->run->run_seq = 7;
	slice_unlock(g->run);
	assert_true(joined(thread));
	int64_t runs = 0;
	assert_true(jsonx_get_int(c.status, "runs", &runs));
	assert_int_equal(runs, 7);
	json_object_put(c.status);
	guest_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rooms_read_their_slices_while_the_session_lock_is_held),
	    cmocka_unit_test(test_the_session_waits_for_a_room_holding_its_slice),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
