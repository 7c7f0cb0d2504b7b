/*
 * transfer-ssh push() and pull() against a real sshd (transfer_ssh_fixture.h):
 * single files and a tree of many files with SHA-256 facts checked against
 * the host's own hashes, replacement and merging, and every refusal: host
 * links, guest links (also one pointing out of the guest root), a path that
 * is itself a link, FIFOs, missing paths and existing destinations.
 */
#include <json-c/json.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "transfer_ssh_fixture.h"
#include "util/sha256.h"

typedef struct transfer_suite {
	ssh_fixture fx;
	ssh_plugin_handle plugin;
	relay_transport_conn *conn;
	const char *skip_reason;
	char local[64]; /* host-side scratch folder */
} transfer_suite;

static transfer_suite suite;

static int group_setup(void **state)
{
	(void)state;
	suite.skip_reason = ssh_fixture_missing();
	if (suite.skip_reason)
		return 0;
	if (ssh_fixture_start(&suite.fx, NULL) != 0 ||
	    ssh_plugin_load(&suite.plugin, "transfer-ssh", RELAY_KIND_TRANSPORT) != 0)
		return -1;
	strcpy(suite.local, "/tmp/relay-ssh-local-XXXXXX");
	if (mkdtemp(suite.local) == NULL)
		return -1;
	relay_error err = {0};
	if (suite.plugin.plugin->transport.open(suite.plugin.plugin->state, suite.fx.lease, NULL, 0,
	                                        &suite.conn, &err) != RELAY_OK) {
		fprintf(stderr, "open failed: %s\n", err.message);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (suite.skip_reason)
		return 0;
	if (suite.conn)
		suite.plugin.plugin->transport.close(suite.plugin.plugin->state, suite.conn, 0);
	ssh_plugin_unload(&suite.plugin);
	ssh_fixture_stop(&suite.fx);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", suite.local);
	fixture_run(cmd);
	return 0;
}

#define SKIP_WITHOUT_SSHD() SSH_SKIP_IF(suite.skip_reason)

static relay_status push(const char *local, const char *remote, unsigned flags, char **facts,
                         relay_error *err)
{
	memset(err, 0, sizeof *err);
	return suite.plugin.plugin->transport.push(suite.plugin.plugin->state, suite.conn, local, remote,
	                                           NULL, flags, facts, err);
}

static relay_status pull(const char *remote, const char *local, unsigned flags, char **facts,
                         relay_error *err)
{
	memset(err, 0, sizeof *err);
	return suite.plugin.plugin->transport.pull(suite.plugin.plugin->state, suite.conn, remote, local,
	                                           NULL, flags, facts, err);
}

/* Asserts a status, printing the error message when it differs. */
#define assert_status(expr, expected)                                                                        \
	do {                                                                                                 \
		relay_status got_ = (expr);                                                                  \
		if (got_ != (expected))                                                                      \
			fprintf(stderr, "got %s: %s\n", relay_status_str(got_), err.message);                \
		assert_int_equal(got_, (expected));                                                          \
	} while (0)

static void path_join(char *out, size_t out_len, const char *a, const char *b)
{
	snprintf(out, out_len, "%s/%s", a, b);
}

/* Checks a facts array against the host files under `base` ("" paths name
 * `base` itself); returns the number of entries. */
static int check_facts(const char *facts_json, const char *base)
{
	json_object *arr = json_tokener_parse(facts_json);
	assert_non_null(arr);
	assert_true(json_object_is_type(arr, json_type_array));
	int n = (int)json_object_array_length(arr);
	const char *prev = NULL;
	for (int i = 0; i < n; i++) {
		json_object *o = json_object_array_get_idx(arr, (size_t)i), *v;
		assert_true(json_object_object_get_ex(o, "path", &v));
		const char *path = json_object_get_string(v);
		if (prev)
			assert_true(strcmp(prev, path) < 0);
		prev = path;
		char full[1024], hex[65];
		if (path[0])
			path_join(full, sizeof full, base, path);
		else
			snprintf(full, sizeof full, "%s", base);
		uint64_t bytes = 0;
		relay_error err;
		assert_int_equal(sha256_file_hex(full, hex, &bytes, &err), RELAY_OK);
		assert_true(json_object_object_get_ex(o, "sha256", &v));
		assert_string_equal(json_object_get_string(v), hex);
		assert_true(json_object_object_get_ex(o, "bytes", &v));
		assert_int_equal(json_object_get_int64(v), (int64_t)bytes);
	}
	json_object_put(arr);
	return n;
}

static void test_file_push_and_pull(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char src[256], dst[256], back[256];
	path_join(src, sizeof src, suite.local, "source.bin");
	path_join(dst, sizeof dst, suite.fx.guest_root, "a/b c/file.bin");
	path_join(back, sizeof back, suite.local, "back.bin");
	assert_int_equal(fixture_random_file(src, 300001, 1, 0644), 0);

	char *facts = NULL;
	relay_error err;
	assert_status(push(src, dst, 0, &facts, &err), RELAY_OK);
	assert_non_null(facts);
	assert_int_equal(check_facts(facts, src), 1);
	assert_non_null(strstr(facts, "\"path\":\"\""));
	free(facts);
	assert_true(fixture_same_file(src, dst));
	struct stat st;
	assert_int_equal(stat(dst, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	char parent[256];
	path_join(parent, sizeof parent, suite.fx.guest_root, "a/b c");
	assert_int_equal(stat(parent, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(fixture_count_prefix(parent, ".relay-push-"), 0);

	/* A second push replaces the file. */
	assert_int_equal(fixture_random_file(src, 1234, 2, 0700), 0);
	assert_status(push(src, dst, 0, NULL, &err), RELAY_OK);
	assert_true(fixture_same_file(src, dst));
	assert_int_equal(stat(dst, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);

	assert_status(pull(dst, back, 0, &facts, &err), RELAY_OK);
	assert_true(fixture_same_file(src, back));
	assert_int_equal(check_facts(facts, back), 1);
	assert_int_equal(stat(back, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	free(facts);

	/* Pulls never replace anything. */
	assert_status(pull(dst, back, 0, NULL, &err), RELAY_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "already exists"));
}

/* A tree of `count` files in nested folders, with awkward names. */
static void make_tree(const char *root, int count)
{
	char path[512];
	mkdir(root, 0755);
	for (int d = 0; d < 10; d++) {
		snprintf(path, sizeof path, "%s/dir %02d", root, d);
		mkdir(path, 0755);
		snprintf(path, sizeof path, "%s/dir %02d/sub'%d", root, d, d);
		mkdir(path, 0755);
	}
	snprintf(path, sizeof path, "%s/empty folder", root);
	mkdir(path, 0755);
	for (int i = 0; i < count; i++) {
		int d = i % 10;
		char name[64];
		switch (i % 5) {
		case 0: snprintf(name, sizeof name, "plain-%d.txt", i); break;
		case 1: snprintf(name, sizeof name, "with space %d", i); break;
		case 2: snprintf(name, sizeof name, "quote'%d\"", i); break;
		case 3: snprintf(name, sizeof name, "unicode-é-%d", i); break;
		default: snprintf(name, sizeof name, "$dollar-%d", i); break;
		}
		if (i % 3 == 0)
			snprintf(path, sizeof path, "%s/dir %02d/sub'%d/%s", root, d, d, name);
		else if (i % 3 == 1)
			snprintf(path, sizeof path, "%s/dir %02d/%s", root, d, name);
		else
			snprintf(path, sizeof path, "%s/%s", root, name);
		size_t size = i == 7 ? 0 : i == 8 ? (2u << 20) + 3 : (size_t)(i * 37 % 5000);
		assert_int_equal(fixture_random_file(path, size, (unsigned)i + 100, i % 4 == 0 ? 0755 : 0644),
		                 0);
	}
}

static void test_tree_push_and_pull(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char src[256], dst[256], back[256];
	path_join(src, sizeof src, suite.local, "tree");
	path_join(dst, sizeof dst, suite.fx.guest_root, "workspace");
	path_join(back, sizeof back, suite.local, "tree-back");
	make_tree(src, 400);

	char *facts = NULL;
	relay_error err;
	assert_status(push(src, dst, RELAY_XFER_TREE, &facts, &err), RELAY_OK);
	assert_int_equal(check_facts(facts, src), 400);
	char *push_facts = facts;
	assert_true(fixture_same_tree(src, dst));
	char empty[300];
	path_join(empty, sizeof empty, dst, "empty folder");
	struct stat st;
	assert_int_equal(stat(empty, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(fixture_count_prefix(suite.fx.guest_root, ".relay-push-"), 0);

	assert_status(pull(dst, back, RELAY_XFER_TREE, &facts, &err), RELAY_OK);
	assert_true(fixture_same_tree(src, back));
	assert_int_equal(check_facts(facts, back), 400);
	assert_string_equal(facts, push_facts);
	assert_int_equal(stat(back, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	free(facts);
	free(push_facts);
}

static void test_tree_push_merges(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char src[256], dst[256], path[512];
	path_join(src, sizeof src, suite.local, "merge-src");
	path_join(dst, sizeof dst, suite.fx.guest_root, "merge-dst");
	mkdir(src, 0755);
	mkdir(dst, 0700);
	snprintf(path, sizeof path, "%s/keep.txt", dst);
	fixture_write(path, "kept\n");
	snprintf(path, sizeof path, "%s/replace.txt", dst);
	fixture_write(path, "old\n");
	snprintf(path, sizeof path, "%s/sub", dst);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/sub/old.txt", dst);
	fixture_write(path, "old sub\n");
	snprintf(path, sizeof path, "%s/replace.txt", src);
	fixture_write(path, "new\n");
	snprintf(path, sizeof path, "%s/sub", src);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/sub/new.txt", src);
	fixture_write(path, "new sub\n");
	/* More new entries than one batch of the guest's mv (256), names that
	 * start with dots, and a file that replaces a link in the guest (the
	 * link goes; nothing is written through it). */
	for (int i = 0; i < 300; i++) {
		snprintf(path, sizeof path, "%s/n%03d.txt", src, i);
		fixture_write(path, "n\n");
	}
	snprintf(path, sizeof path, "%s/.hidden", src);
	fixture_write(path, "hidden\n");
	snprintf(path, sizeof path, "%s/..twodots", src);
	fixture_write(path, "two dots\n");
	snprintf(path, sizeof path, "%s/decoy.txt", suite.local);
	fixture_write(path, "decoy\n");
	char link[512];
	snprintf(link, sizeof link, "%s/linked.txt", dst);
	assert_int_equal(symlink(path, link), 0);
	snprintf(path, sizeof path, "%s/linked.txt", src);
	fixture_write(path, "not through the link\n");

	char *facts = NULL, a[512], b[512];
	relay_error err;
	assert_status(push(src, dst, RELAY_XFER_TREE, &facts, &err), RELAY_OK);
	assert_int_equal(check_facts(facts, src), 2 + 300 + 3);
	free(facts);
	struct stat st;
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	snprintf(a, sizeof a, "%s/linked.txt", src);
	assert_true(fixture_same_file(a, link));
	snprintf(a, sizeof a, "%s/decoy.txt", suite.local);
	snprintf(b, sizeof b, "%s/decoy-copy.txt", suite.local);
	fixture_write(b, "decoy\n");
	assert_true(fixture_same_file(a, b));
	for (int i = 0; i < 300; i += 37) {
		snprintf(b, sizeof b, "%s/n%03d.txt", dst, i);
		assert_true(fixture_exists(b));
	}
	static const char *const present[] = {"n299.txt", ".hidden",     "..twodots",
	                                      "keep.txt", "sub/old.txt", "sub/new.txt"};
	for (size_t i = 0; i < sizeof present / sizeof present[0]; i++) {
		snprintf(b, sizeof b, "%s/%s", dst, present[i]);
		assert_true(fixture_exists(b));
	}
	snprintf(a, sizeof a, "%s/replace.txt", src);
	snprintf(b, sizeof b, "%s/replace.txt", dst);
	assert_true(fixture_same_file(a, b));
	assert_int_equal(fixture_count_prefix(suite.fx.guest_root, ".relay-push-"), 0);
}

static void test_push_refuses_host_links(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char src[256], dst[256], path[512];
	path_join(src, sizeof src, suite.local, "linked-src");
	path_join(dst, sizeof dst, suite.fx.guest_root, "linked-dst");
	mkdir(src, 0755);
	snprintf(path, sizeof path, "%s/ok.txt", src);
	fixture_write(path, "ok\n");
	snprintf(path, sizeof path, "%s/link", src);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	relay_error err;
	assert_status(push(src, dst, RELAY_XFER_TREE, NULL, &err), RELAY_E_UNSAFE_PATH);
	assert_non_null(strstr(err.message, "symbolic link"));
	assert_false(fixture_exists(dst));
	assert_status(push(path, dst, 0, NULL, &err), RELAY_E_UNSAFE_PATH);
	assert_false(fixture_exists(dst));
}

static void test_pull_refuses_links_and_fifos(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char tree[256], path[512], local[256];
	relay_error err;
	char *facts = NULL;
	path_join(local, sizeof local, suite.local, "refused");

	/* A link inside the tree pointing out of the guest root. */
	path_join(tree, sizeof tree, suite.fx.guest_root, "with-link");
	mkdir(tree, 0700);
	snprintf(path, sizeof path, "%s/fine.txt", tree);
	fixture_write(path, "fine\n");
	snprintf(path, sizeof path, "%s/escape", tree);
	assert_int_equal(symlink("/etc", path), 0);
	assert_status(pull(tree, local, RELAY_XFER_TREE, &facts, &err), RELAY_E_UNSAFE_PATH);
	assert_null(facts);
	assert_non_null(strstr(err.message, "escape"));
	assert_false(fixture_exists(local));

	/* The pulled path itself is a link (to a folder outside the root). */
	path_join(path, sizeof path, suite.fx.guest_root, "root-link");
	assert_int_equal(symlink("/etc", path), 0);
	assert_status(pull(path, local, RELAY_XFER_TREE, NULL, &err), RELAY_E_UNSAFE_PATH);
	assert_false(fixture_exists(local));
	path_join(path, sizeof path, suite.fx.guest_root, "file-link");
	assert_int_equal(symlink("/etc/hostname", path), 0);
	assert_status(pull(path, local, 0, NULL, &err), RELAY_E_UNSAFE_PATH);
	assert_false(fixture_exists(local));

	/* A FIFO in a tree, and a FIFO pulled as a file. */
	path_join(tree, sizeof tree, suite.fx.guest_root, "with-fifo");
	mkdir(tree, 0700);
	snprintf(path, sizeof path, "%s/pipe", tree);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_status(pull(tree, local, RELAY_XFER_TREE, NULL, &err), RELAY_E_UNSAFE_PATH);
	assert_false(fixture_exists(local));
	assert_status(pull(path, local, 0, NULL, &err), RELAY_E_UNSAFE_PATH);
	assert_false(fixture_exists(local));
	assert_int_equal(fixture_count_prefix(suite.local, ".refused"), 0);

	/* Nothing there. */
	path_join(path, sizeof path, suite.fx.guest_root, "no-such-thing");
	assert_status(pull(path, local, 0, NULL, &err), RELAY_E_NOT_FOUND);
	assert_false(fixture_exists(local));
}

static void test_bad_paths(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	relay_error err;
	char src[256];
	path_join(src, sizeof src, suite.local, "small.txt");
	fixture_write(src, "small\n");
	assert_status(push(src, "relative/path", 0, NULL, &err), RELAY_E_INVALID_ARGUMENT);
	assert_status(push(src, "/var/tmp/../etc/x", 0, NULL, &err), RELAY_E_INVALID_ARGUMENT);
	assert_status(push(src, "/", 0, NULL, &err), RELAY_E_INVALID_ARGUMENT);
	assert_status(push(src, "/var/tmp/x", 0x40, NULL, &err), RELAY_E_UNSUPPORTED_FLAGS);
	/* A folder where a file should go is refused, and left alone. */
	char dir[256];
	path_join(dir, sizeof dir, suite.fx.guest_root, "is-a-folder");
	mkdir(dir, 0700);
	assert_status(push(src, dir, 0, NULL, &err), RELAY_E_UNSAFE_PATH);
	struct stat st;
	assert_int_equal(stat(dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_file_push_and_pull),
	    cmocka_unit_test(test_tree_push_and_pull),
	    cmocka_unit_test(test_tree_push_merges),
	    cmocka_unit_test(test_push_refuses_host_links),
	    cmocka_unit_test(test_pull_refuses_links_and_fifos),
	    cmocka_unit_test(test_bad_paths),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
