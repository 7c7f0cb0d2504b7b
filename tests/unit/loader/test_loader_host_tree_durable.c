/*
 * test_loader_host_tree_durable.c — the host table's remove_tree and write_durable
 * (relay/host.h, ABI 1.6): present in the table the core lends, flags
 * refused, a tree removed without following a link out of it, a missing
 * path fine, a file replaced whole and 0600.
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

#include "loader/loader.h"
#include "relay/plugin.h"

static void test_present_since_1_6(void **state)
{
	(void)state;
	const relay_host *host = loader_host_table();
	assert_true(RELAY_ABI_MINOR(host->abi_version) >= 6);
	assert_true(RELAY_SIZED_HAS(host, remove_tree));
	assert_true(RELAY_SIZED_HAS(host, write_durable));
	assert_non_null(host->remove_tree);
	assert_non_null(host->write_durable);
	relay_error err;
	memset(&err, 0, sizeof err);
	assert_int_equal(host->remove_tree("/nonexistent-kit", 1, &err), RELAY_E_UNSUPPORTED_FLAGS);
	assert_string_equal(err.message, "unknown remove_tree flags 0x1");
	assert_int_equal(host->write_durable("/tmp/x", "", 0, 2, &err), RELAY_E_UNSUPPORTED_FLAGS);
	assert_string_equal(err.message, "unknown write_durable flags 0x2");
}

static void test_tree_and_durable_file(void **state)
{
	(void)state;
	const relay_host *host = loader_host_table();
	relay_error err;
	memset(&err, 0, sizeof err);
	char top[] = "/tmp/test-host-tree-XXXXXX", outside[] = "/tmp/test-host-outside-XXXXXX";
	assert_non_null(mkdtemp(top));
	assert_non_null(mkdtemp(outside));
	char path[256], kept[256];
	snprintf(kept, sizeof kept, "%s/kept", outside);
	assert_int_equal(host->write_durable(kept, "old", 3, 0, &err), RELAY_OK);
	assert_int_equal(host->write_durable(kept, "keep me", 7, 0, &err), RELAY_OK);
	struct stat sb;
	assert_int_equal(stat(kept, &sb), 0);
	assert_int_equal(sb.st_size, 7);
	assert_int_equal(sb.st_mode & 0777, 0600);
	snprintf(path, sizeof path, "%s/a", top);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof path, "%s/a/b", top);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof path, "%s/a/b/file", top);
	assert_int_equal(host->write_durable(path, "x", 1, 0, &err), RELAY_OK);
	snprintf(path, sizeof path, "%s/a/link", top);
	assert_int_equal(symlink(outside, path), 0);
	assert_int_equal(host->remove_tree(top, 0, &err), RELAY_OK);
	assert_int_equal(lstat(top, &sb), -1);
	assert_int_equal(stat(kept, &sb), 0); /* the link was removed, not what it points to */
	assert_int_equal(host->remove_tree(top, 0, &err), RELAY_OK); /* gone: fine */
	assert_int_equal(host->remove_tree(outside, 0, &err), RELAY_OK);
	assert_int_equal(lstat(outside, &sb), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_present_since_1_6),
	    cmocka_unit_test(test_tree_and_durable_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
