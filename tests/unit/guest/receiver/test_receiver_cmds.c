/*
 * test_receiver_cmds.c — the receiver's bookkeeping subcommands through the
 * real static binary: version, hash, prepare, init, scan, archive, unpack,
 * remove and reset (spec/guest.md §4, §5.2, §5.3).
 */
#include "receiver_harness.h"

static void test_version(void **state)
{
	rh_out o;
	(void)state;
	RH_REQUIRE_BINARY();
	rh_run(&o, "version", NULL);
	assert_int_equal(o.status, 0);
	assert_non_null(o.frame);
	assert_string_equal(rh_str(o.frame, "receiver"), "mcp-relay-receiver");
	assert_string_equal(rh_str(o.frame, "version"), "0.1.0");
	assert_int_equal(rh_int(o.frame, "protocol"), 1);
	assert_string_equal(rh_str(o.frame, "platform"), RELAY_HOST_PLATFORM);
	rh_out_free(&o);

	rh_run(&o, "no-such-command", NULL);
	assert_int_equal(o.status, 2);
	assert_non_null(rh_str(o.frame, "error"));
	rh_out_free(&o);
}

static void test_hash(void **state)
{
	rh_out o;
	char *root, *file, *link;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(0);
	file = rh_printf("%s/support/a.txt", root);
	link = rh_printf("%s/support/link", root);
	rh_write(file, "abc", 0600);
	rh_run(&o, "hash", file, NULL);
	assert_int_equal(o.status, 0);
	assert_string_equal(rh_str(o.frame, "path"), file);
	assert_string_equal(rh_str(o.frame, "sha256"),
	                    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(rh_int(o.frame, "bytes"), 3);
	rh_out_free(&o);

	/* A symbolic link is not hashed. */
	assert_int_equal(symlink(file, link), 0);
	rh_run(&o, "hash", link, NULL);
	assert_int_equal(o.status, 3);
	assert_non_null(rh_str(o.frame, "error"));
	rh_out_free(&o);

	rh_run(&o, "hash", "relative/path", NULL);
	assert_int_equal(o.status, 2);
	rh_out_free(&o);
	rh_rm_rf(root);
	free(root);
	free(file);
	free(link);
}

static void test_prepare(void **state)
{
	rh_out o;
	char *root, *sub, *outside;
	struct stat st;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(0);
	rh_run(&o, "prepare", "--root", root, "support/deep/er", "workspace", NULL);
	assert_int_equal(o.status, 0);
	assert_int_equal(json_object_array_length(rh_get(o.frame, "prepared")), 2);
	assert_string_equal(json_object_get_string(json_object_array_get_idx(rh_get(o.frame, "prepared"), 0)),
	                    "support/deep/er");
	rh_out_free(&o);
	sub = rh_printf("%s/support/deep/er", root);
	assert_int_equal(stat(sub, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);

	/* ".." is refused before anything is made. */
	rh_run(&o, "prepare", "--root", root, "support/../../escape", NULL);
	assert_int_equal(o.status, 2);
	rh_out_free(&o);
	outside = rh_printf("%s/../escape", root);
	assert_false(rh_exists(outside));

	/* A symbolic link on the way is refused. */
	free(sub);
	sub = rh_printf("%s/support/ln", root);
	assert_int_equal(symlink("/tmp", sub), 0);
	rh_run(&o, "prepare", "--root", root, "support/ln/x", NULL);
	assert_int_equal(o.status, 3);
	assert_non_null(strstr(rh_str(o.frame, "error"), "symlink"));
	rh_out_free(&o);
	rh_rm_rf(root);
	free(root);
	free(sub);
	free(outside);
}

static void test_init(void **state)
{
	rh_out o;
	char *root, *path;
	json_object *session, *journal;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(0);
	rh_run(&o, "init", "--root", root, "--session", RH_SESSION, NULL);
	assert_int_equal(o.status, 0);
	assert_string_equal(rh_str(o.frame, "sessionId"), RH_SESSION);
	assert_true(rh_bool(o.frame, "created"));
	rh_out_free(&o);

	path = rh_printf("%s/state/session.json", root);
	session = rh_read_json(path);
	assert_non_null(session);
	assert_string_equal(rh_str(session, "sessionId"), RH_SESSION);
	assert_string_equal(rh_str(session, "platform"), RELAY_HOST_PLATFORM);
	assert_string_equal(rh_str(session, "receiverVersion"), "0.1.0");
	json_object_put(session);
	free(path);
	path = rh_printf("%s/state/snapshots/%s", root, RH_SESSION);
	assert_true(rh_exists(path));
	free(path);

	journal = rh_journal(root);
	assert_int_equal(json_object_array_length(journal), 1);
	assert_string_equal(rh_str(json_object_array_get_idx(journal, 0), "type"), "session-start");
	assert_int_equal(rh_int(json_object_array_get_idx(journal, 0), "seq"), 1);
	json_object_put(journal);

	/* Same session again: nothing created. Another session: refused. */
	rh_run(&o, "init", "--root", root, "--session", RH_SESSION, NULL);
	assert_int_equal(o.status, 0);
	assert_false(rh_bool(o.frame, "created"));
	rh_out_free(&o);
	rh_run(&o, "init", "--root", root, "--session", "rec-ffffffffffffffff", NULL);
	assert_int_equal(o.status, 3);
	assert_non_null(strstr(rh_str(o.frame, "error"), RH_SESSION));
	rh_out_free(&o);
	rh_rm_rf(root);
	free(root);
}

static json_object *inventory_of(const char *frame_path)
{
	json_object *arr = rh_read_json(frame_path);
	assert_non_null(arr);
	assert_true(json_object_is_type(arr, json_type_array));
	return arr;
}

static void test_scan(void **state)
{
	rh_out o;
	char *root, *p;
	json_object *inv;
	char hex[SHA256_HEX_LEN + 1];
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(0);
	p = rh_printf("%s/workspace/b", root);
	mkdir(p, 0700);
	free(p);
	p = rh_printf("%s/workspace/b/z.txt", root);
	rh_write(p, "zzz", 0600);
	free(p);
	p = rh_printf("%s/workspace/a.txt", root);
	rh_write(p, "a", 0600);
	free(p);
	p = rh_printf("%s/workspace/b-c.txt", root);
	rh_write(p, "bc", 0600);
	free(p);
	p = rh_printf("%s/workspace", root);
	rh_run(&o, "scan", "--root", root, "--base", p, ".", NULL);
	free(p);
	assert_int_equal(o.status, 0);
	assert_non_null(strstr(rh_str(o.frame, "path"), "/.inventory-"));
	{
		/* The frame describes the inventory file exactly. */
		size_t len = 0;
		char *text = rh_read(rh_str(o.frame, "path"), &len);
		assert_non_null(text);
		sha256_buffer_hex(text, len, hex);
		assert_string_equal(hex, rh_str(o.frame, "sha256"));
		assert_int_equal((int64_t)len, rh_int(o.frame, "bytes"));
		free(text);
	}
	inv = inventory_of(rh_str(o.frame, "path"));
	assert_int_equal(json_object_array_length(inv), 3);
	/* Byte order: "a.txt" < "b-c.txt" < "b/z.txt". */
	assert_string_equal(rh_str(json_object_array_get_idx(inv, 0), "path"), "a.txt");
	assert_string_equal(rh_str(json_object_array_get_idx(inv, 1), "path"), "b-c.txt");
	assert_string_equal(rh_str(json_object_array_get_idx(inv, 2), "path"), "b/z.txt");
	assert_int_equal(rh_int(json_object_array_get_idx(inv, 2), "bytes"), 3);
	json_object_put(inv);
	rh_out_free(&o);

	/* A single file gives one fact with an empty path. */
	rh_run(&o, "scan", "--root", root, "--base", root, "workspace/a.txt", NULL);
	assert_int_equal(o.status, 0);
	inv = inventory_of(rh_str(o.frame, "path"));
	assert_int_equal(json_object_array_length(inv), 1);
	assert_string_equal(rh_str(json_object_array_get_idx(inv, 0), "path"), "");
	sha256_buffer_hex("a", 1, hex);
	assert_string_equal(rh_str(json_object_array_get_idx(inv, 0), "sha256"), hex);
	json_object_put(inv);
	rh_out_free(&o);

	/* Missing: refused, or skipped with --present. */
	rh_run(&o, "scan", "--root", root, "--base", root, "workspace/nope", NULL);
	assert_int_equal(o.status, 3);
	rh_out_free(&o);
	rh_run(&o, "scan", "--root", root, "--base", root, "--present", "workspace/nope", NULL);
	assert_int_equal(o.status, 0);
	inv = inventory_of(rh_str(o.frame, "path"));
	assert_int_equal(json_object_array_length(inv), 0);
	json_object_put(inv);
	rh_out_free(&o);

	/* --image wants an image. */
	rh_run(&o, "scan", "--root", root, "--base", root, "--image", "workspace/a.txt", NULL);
	assert_int_equal(o.status, 3);
	rh_out_free(&o);
	p = rh_printf("%s/workspace/shot.png", root);
	rh_write(p, "\x89PNG\r\n\x1a\nrest-of-it", 0600);
	free(p);
	rh_run(&o, "scan", "--root", root, "--base", root, "--image", "workspace/shot.png", NULL);
	assert_int_equal(o.status, 0);
	inv = inventory_of(rh_str(o.frame, "path"));
	assert_non_null(rh_get(json_object_array_get_idx(inv, 0), "identity.ino"));
	json_object_put(inv);
	rh_out_free(&o);

	/* Symbolic links and special files are refused anywhere in a tree. */
	p = rh_printf("%s/workspace/b/link", root);
	assert_int_equal(symlink("z.txt", p), 0);
	free(p);
	rh_run(&o, "scan", "--root", root, "--base", root, "workspace", NULL);
	assert_int_equal(o.status, 3);
	assert_non_null(strstr(rh_str(o.frame, "error"), "symlink workspace/b/link"));
	rh_out_free(&o);
	p = rh_printf("%s/workspace/b/link", root);
	unlink(p);
	free(p);
	p = rh_printf("%s/workspace/fifo", root);
	assert_int_equal(mkfifo(p, 0600), 0);
	free(p);
	rh_run(&o, "scan", "--root", root, "--base", root, "workspace", NULL);
	assert_int_equal(o.status, 3);
	assert_non_null(strstr(rh_str(o.frame, "error"), "special file workspace/fifo"));
	rh_out_free(&o);
	rh_rm_rf(root);
	free(root);
}

static void test_archive_unpack_remove(void **state)
{
	rh_out o;
	char *root, *p, *out, *dest, *name;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(0);
	p = rh_printf("%s/support/one.txt", root);
	rh_write(p, "one\n", 0600);
	free(p);
	p = rh_printf("%s/support/sub", root);
	mkdir(p, 0700);
	free(p);
	p = rh_printf("%s/support/sub/two.bin", root);
	rh_write(p, "two-two\n", 0600);
	free(p);
	out = rh_printf("%s/.archive-test1.tar", root);
	p = rh_printf("%s/support", root);
	rh_run(&o, "archive", "--root", root, "--base", p, "--present", "--out", out, "--", "one.txt",
	       "missing.txt", "sub/two.bin", NULL);
	free(p);
	assert_int_equal(o.status, 0);
	assert_string_equal(rh_str(o.frame, "path"), out);
	assert_int_equal(rh_int(o.frame, "entries"), 2);
	{
		size_t len = 0;
		char hex[SHA256_HEX_LEN + 1];
		char *data = rh_read(out, &len);
		struct stat st;
		assert_non_null(data);
		sha256_buffer_hex(data, len, hex);
		assert_string_equal(hex, rh_str(o.frame, "sha256"));
		assert_int_equal((int64_t)len, rh_int(o.frame, "bytes"));
		assert_int_equal(len % 512, 0);
		free(data);
		assert_int_equal(stat(out, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
	}
	rh_out_free(&o);

	/* Without --present a missing path fails and leaves no archive. */
	name = rh_printf("%s/.archive-test2.tar", root);
	p = rh_printf("%s/support", root);
	rh_run(&o, "archive", "--root", root, "--base", p, "--out", name, "--", "one.txt", "missing.txt",
	       NULL);
	free(p);
	assert_int_equal(o.status, 3);
	assert_false(rh_exists(name));
	rh_out_free(&o);
	free(name);

	/* Unpack the archive into another folder: same bytes. */
	dest = rh_printf("%s/workspace/copy", root);
	rh_run(&o, "unpack", "--root", root, "--base", dest, out, NULL);
	assert_int_equal(o.status, 0);
	assert_int_equal(rh_int(o.frame, "unpacked"), 2);
	assert_int_equal(rh_int(o.frame, "bytes"), 12);
	rh_out_free(&o);
	p = rh_printf("%s/sub/two.bin", dest);
	{
		char *text = rh_read(p, NULL);
		assert_string_equal(text, "two-two\n");
		free(text);
	}
	free(p);
	/* Again: identical existing files are kept. */
	rh_run(&o, "unpack", "--root", root, "--base", dest, out, NULL);
	assert_int_equal(o.status, 0);
	rh_out_free(&o);
	/* A different existing file is refused. */
	p = rh_printf("%s/one.txt", dest);
	rh_write(p, "changed\n", 0600);
	free(p);
	rh_run(&o, "unpack", "--root", root, "--base", dest, out, NULL);
	assert_int_equal(o.status, 3);
	rh_out_free(&o);

	/* remove: only transient names. */
	rh_run(&o, "remove", "--root", root, "state", NULL);
	assert_int_equal(o.status, 2);
	rh_out_free(&o);
	rh_run(&o, "remove", "--root", root, ".archive-test1.tar", ".inventory-none.json", NULL);
	assert_int_equal(o.status, 0);
	assert_int_equal(json_object_array_length(rh_get(o.frame, "removed")), 1);
	assert_false(rh_exists(out));
	rh_out_free(&o);
	rh_rm_rf(root);
	free(root);
	free(out);
	free(dest);
}

static void test_reset(void **state)
{
	rh_out o;
	char *root, *p;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(1);
	/* A present lock refuses. */
	p = rh_printf("%s/.receiver-lock", root);
	assert_int_equal(mkdir(p, 0700), 0);
	rh_run(&o, "reset", "--root", root, "--id", "3f1c2b7a-0000-4000-8000-000000000001", NULL);
	assert_int_equal(o.status, 3);
	assert_string_equal(rh_str(o.frame, "code"), "receiver-locked");
	rh_out_free(&o);
	rmdir(p);
	free(p);

	rh_run(&o, "reset", "--root", root, "--id", "3f1c2b7a-0000-4000-8000-000000000001", NULL);
	assert_int_equal(o.status, 0);
	assert_string_equal(rh_str(o.frame, "state"), "reset");
	assert_string_equal(rh_str(o.frame, "archive"), "recordings/3f1c2b7a-0000-4000-8000-000000000001");
	rh_out_free(&o);
	p = rh_printf("%s/recordings/3f1c2b7a-0000-4000-8000-000000000001/session.json", root);
	assert_true(rh_exists(p));
	free(p);
	p = rh_printf("%s/state/session.json", root);
	assert_false(rh_exists(p));
	free(p);
	p = rh_printf("%s/.recording-reset-3f1c2b7a-0000-4000-8000-000000000001.json", root);
	assert_true(rh_exists(p));
	free(p);

	rh_run(&o, "reset", "--root", root, "--id", "3f1c2b7a-0000-4000-8000-000000000001", NULL);
	assert_int_equal(o.status, 0);
	assert_string_equal(rh_str(o.frame, "state"), "already-reset");
	rh_out_free(&o);

	/* The empty state takes a new recording. */
	rh_run(&o, "init", "--root", root, "--session", "rec-1111111111111111", NULL);
	assert_int_equal(o.status, 0);
	assert_true(rh_bool(o.frame, "created"));
	rh_out_free(&o);

	/* A second reset into a non-empty destination is refused. */
	p = rh_printf("%s/recordings/second", root);
	mkdir(p, 0700);
	free(p);
	p = rh_printf("%s/recordings/second/x", root);
	rh_write(p, "x", 0600);
	free(p);
	rh_run(&o, "reset", "--root", root, "--id", "second", NULL);
	assert_int_equal(o.status, 3);
	assert_non_null(strstr(rh_str(o.frame, "error"), "reset destination is not empty"));
	rh_out_free(&o);
	rh_rm_rf(root);
	free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_version), cmocka_unit_test(test_hash),
	    cmocka_unit_test(test_prepare), cmocka_unit_test(test_init),
	    cmocka_unit_test(test_scan),    cmocka_unit_test(test_archive_unpack_remove),
	    cmocka_unit_test(test_reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
