/*
 * test_machine_local_uids — one guest uid per guest (docs/machine-local.md,
 * Bounds; root, real guests):
 *   - at start, a claim whose lease folder is gone is given back, and a
 *     claim whose lease folder exists is kept;
 *   - guests get distinct uids of the range (the lowest free first), the
 *     guest user runs as it, and the lease's bounds name it;
 *   - with every uid in use, acquire is RELAY_E_CAPACITY naming
 *     options.guestUser.count; a release gives its uid back, and the next
 *     guest gets it.
 * The range (62000..62002) is one no other test uses, so guests of other
 * tests running at the same time do not take its uids.
 */
#include "machine_local_fixture.h"

#define OPTIONS "{\"display\":\"off\",\"guestUser\":{\"name\":\"relay\",\"uid\":62000,\"count\":3}}"

static void claim(const char *state_dir, unsigned uid, const char *vm)
{
	char dir[512], link[600];
	snprintf(dir, sizeof dir, "%s/uids", state_dir);
	assert_true(mkdir(dir, 0700) == 0 || errno == EEXIST);
	snprintf(link, sizeof link, "%s/%u", dir, uid);
	assert_int_equal(symlink(vm, link), 0);
}

static bool claimed(const char *state_dir, unsigned uid, char *vm, size_t size)
{
	char link[600];
	snprintf(link, sizeof link, "%s/uids/%u", state_dir, uid);
	ssize_t n = readlink(link, vm, size - 1);
	vm[n > 0 ? n : 0] = '\0';
	return n > 0;
}

static int64_t lease_uid(const char *lease)
{
	json_object *doc = ml_parse(lease);
	json_object *local = jsonx_get_obj(doc, "local");
	int64_t uid = -1, bound_uid = -2;
	jsonx_get_int(jsonx_get_obj(local, "guestUser"), "uid", &uid);
	jsonx_get_int(jsonx_get_obj(local, "bounds"), "guestUid", &bound_uid);
	json_object_put(doc);
	assert_int_equal(uid, bound_uid);
	return uid;
}

static void test_claims_reconciled_distinct_and_given_back(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	char dir[256] = "/var/tmp/ml-uids-XXXXXX", path[512], vm[256];
	assert_non_null(mkdtemp(dir));
	claim(dir, 62000, "local-gone-aaaaaa");
	claim(dir, 62001, "local-kept-bbbbbb");
	snprintf(path, sizeof path, "%s/leases", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof path, "%s/leases/local-kept-bbbbbb", dir);
	assert_int_equal(mkdir(path, 0700), 0);

	ml_env e;
	ml_load_in(&e, OPTIONS, dir);
	assert_false(claimed(dir, 62000, vm, sizeof vm)); /* its lease folder is gone */
	assert_true(claimed(dir, 62001, vm, sizeof vm));
	assert_string_equal(vm, "local-kept-bbbbbb");

	char *a = ml_acquire(&e, "uid-a", NULL);
	char *b = ml_acquire(&e, "uid-b", NULL);
	assert_int_equal(lease_uid(a), 62000);
	assert_int_equal(lease_uid(b), 62002);
	char va[128];
	ml_local_str(a, "leaseDir", path, sizeof path);
	snprintf(va, sizeof va, "%s", strrchr(path, '/') + 1);
	assert_true(claimed(dir, 62000, vm, sizeof vm));
	assert_string_equal(vm, va);
	relay_transport_conn *c = ml_open(&e, a);
	char *out = NULL;
	assert_int_equal(ml_sh(&e, c, "id -u; id -g; ulimit -p", &out), 0);
	assert_string_equal(out, "62000\n62000\n4096\n");
	free(out);
	e.p->transport.close(e.p->state, c, 0);

	relay_error err;
	relay_status s;
	assert_null(ml_acquire_ex(&e, "uid-c", "local", NULL, &s, &err));
	assert_int_equal(s, RELAY_E_CAPACITY);
	assert_non_null(strstr(err.message, "options.guestUser.count"));

	ml_release(&e, a);
	assert_false(claimed(dir, 62000, vm, sizeof vm));
	char *c2 = ml_acquire(&e, "uid-c", NULL);
	assert_int_equal(lease_uid(c2), 62000);
	ml_release(&e, b);
	ml_release(&e, c2);
	assert_false(claimed(dir, 62002, vm, sizeof vm));
	free(a);
	free(b);
	free(c2);
	ml_unload(&e, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_claims_reconciled_distinct_and_given_back, ml_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
