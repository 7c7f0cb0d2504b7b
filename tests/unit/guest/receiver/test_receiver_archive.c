/*
 * test_receiver_archive.c — the evidence archive format between the guest
 * receiver and libarchive (spec/evidence.md §5.3, §5.4): archives the receiver
 * writes read back with libarchive member by member against their index;
 * archives libarchive writes (ustar and pax) unpacked by the receiver; and
 * every untrusted-archive refusal, leaving nothing behind.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>

#include "receiver_harness.h"

/* ---- reading the receiver's archive with libarchive --------------------- */

static void test_receiver_archive_reads_in_libarchive(void **state)
{
	rh_out o;
	char *root, *p, *out, *base;
	char longdir[121];
	char *long_rel;
	struct archive *a;
	struct archive_entry *entry;
	json_object *index = NULL;
	size_t i = 0;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(0);
	base = rh_printf("%s/support", root);
	memset(longdir, 'd', 120);
	longdir[120] = '\0';
	p = rh_printf("%s/%s", base, longdir);
	mkdir(p, 0700);
	free(p);
	long_rel = rh_printf("%s/%s", longdir, "a-file-with-a-long-name-too.png");
	p = rh_printf("%s/%s", base, long_rel);
	rh_write(p, "\x89PNG\r\n\x1a\nlong", 0600);
	free(p);
	p = rh_printf("%s/short.json", base);
	rh_write(p, "{\"a\":1}\n", 0600);
	free(p);
	p = rh_printf("%s/empty", base);
	rh_write(p, "", 0600);
	free(p);
	out = rh_printf("%s/.archive-lib.tar", root);
	rh_run(&o, "archive", "--root", root, "--base", base, "--out", out, "--", "short.json", long_rel,
	       "empty", NULL);
	assert_int_equal(o.status, 0);
	assert_int_equal(rh_int(o.frame, "entries"), 3);
	rh_out_free(&o);

	a = archive_read_new();
	archive_read_support_format_tar(a);
	assert_int_equal(archive_read_open_filename(a, out, 10240), ARCHIVE_OK);
	for (;;) {
		int r = archive_read_next_header(a, &entry);
		char *data;
		int64_t size;
		char hex[SHA256_HEX_LEN + 1];
		if (r == ARCHIVE_EOF)
			break;
		assert_int_equal(r, ARCHIVE_OK);
		assert_int_equal(archive_entry_filetype(entry), AE_IFREG);
		assert_int_equal(archive_entry_perm(entry), 0600);
		assert_int_equal(archive_entry_uid(entry), 0);
		assert_int_equal(archive_entry_gid(entry), 0);
		assert_true(archive_entry_uname(entry) == NULL || !*archive_entry_uname(entry));
		assert_true(archive_entry_gname(entry) == NULL || !*archive_entry_gname(entry));
		size = archive_entry_size(entry);
		data = malloc((size_t)size + 1);
		assert_int_equal(archive_read_data(a, data, (size_t)size), size);
		data[size] = '\0';
		if (i == 0) {
			assert_string_equal(archive_entry_pathname(entry), ".relay-index.json");
			index = jsonx_parse(data, (size_t)size, NULL, NULL, 0);
			assert_non_null(index);
			assert_int_equal(json_object_array_length(index), 3);
		} else {
			json_object *fact = json_object_array_get_idx(index, i - 1);
			assert_string_equal(archive_entry_pathname(entry), rh_str(fact, "path"));
			assert_int_equal(size, rh_int(fact, "bytes"));
			sha256_buffer_hex(data, (size_t)size, hex);
			assert_string_equal(hex, rh_str(fact, "sha256"));
		}
		free(data);
		i++;
	}
	assert_int_equal(i, 4);
	assert_string_equal(rh_str(json_object_array_get_idx(index, 1), "path"), long_rel);
	archive_read_free(a);
	json_object_put(index);
	rh_rm_rf(root);
	free(root);
	free(base);
	free(out);
	free(long_rel);
}

/* ---- archives written with libarchive ----------------------------------- */

typedef struct member {
	const char *name;
	const char *data;      /* regular file content */
	int type;              /* AE_IFREG default */
	const char *link;      /* for symlinks and hard links */
	const char *index_sha; /* overrides the index's SHA-256 */
} member;

static void write_lib_archive(const char *path, int pax, const member *members, size_t count, int index_first)
{
	struct archive *a = archive_write_new();
	struct archive_entry *e;
	json_object *index = json_object_new_array();
	const char *index_text;
	size_t i;
	if (pax)
		archive_write_set_format_pax_restricted(a);
	else
		archive_write_set_format_ustar(a);
	assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
	for (i = 0; i < count; i++) {
		json_object *fact = json_object_new_object();
		const char *data = members[i].data ? members[i].data : "";
		char hex[SHA256_HEX_LEN + 1];
		sha256_buffer_hex(data, strlen(data), hex);
		json_object_object_add(fact, "path", json_object_new_string(members[i].name));
		json_object_object_add(fact, "bytes", json_object_new_int64((int64_t)strlen(data)));
		json_object_object_add(
		    fact, "sha256",
		    json_object_new_string(members[i].index_sha ? members[i].index_sha : hex));
		json_object_array_add(index, fact);
	}
	index_text = json_object_to_json_string_ext(index, JSON_C_TO_STRING_PLAIN);
	for (i = 0; i <= count; i++) {
		const char *name, *data;
		int type = AE_IFREG;
		if ((i == 0) == (index_first != 0) && i == 0) {
			name = ".relay-index.json";
			data = index_text;
		} else if (i == 0) {
			continue;
		} else {
			name = members[i - 1].name;
			data = members[i - 1].data ? members[i - 1].data : "";
			if (members[i - 1].type)
				type = members[i - 1].type;
		}
		e = archive_entry_new();
		archive_entry_set_pathname(e, name);
		archive_entry_set_filetype(e, (unsigned)type);
		archive_entry_set_perm(e, 0600);
		archive_entry_set_mtime(e, 1700000000, 0);
		if (type == AE_IFLNK) {
			archive_entry_set_symlink(e, members[i - 1].link);
			archive_entry_set_size(e, 0);
		} else if (type == AE_IFCHR) {
			archive_entry_set_rdev(e, makedev(1, 3));
			archive_entry_set_size(e, 0);
		} else if (i > 0 && members[i - 1].link) {
			archive_entry_set_hardlink(e, members[i - 1].link);
			archive_entry_set_size(e, 0);
		} else {
			archive_entry_set_size(e, (int64_t)strlen(data));
		}
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		if (archive_entry_size(e) > 0)
			assert_int_equal(archive_write_data(a, data, strlen(data)), (ssize_t)strlen(data));
		archive_entry_free(e);
	}
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	json_object_put(index);
}

static int dir_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int n = 0;
	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static void test_unpack_libarchive_ustar_and_pax(void **state)
{
	rh_out o;
	char *root, *tar, *dest, *p;
	char longname[300];
	int pax;
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(0);
	memset(longname, 0, sizeof(longname));
	memset(longname, 'n', 110);
	strcat(longname, "/");
	memset(longname + strlen(longname), 'f', 130);
	for (pax = 0; pax <= 1; pax++) {
		member m[3] = {{"a.txt", "alpha\n", 0, NULL, NULL},
		               {"dir/b.txt", "beta\n", 0, NULL, NULL},
		               {longname, "long one\n", 0, NULL, NULL}};
		size_t count = pax ? 3 : 2;
		tar = rh_printf("%s/.push-lib%d.tar", root, pax);
		dest = rh_printf("%s/workspace/pax%d", root, pax);
		write_lib_archive(tar, pax, m, count, 1);
		rh_run(&o, "unpack", "--root", root, "--base", dest, tar, NULL);
		if (o.status != 0)
			fprintf(stderr, "unpack (%s): %s\n", pax ? "pax" : "ustar", o.out);
		assert_int_equal(o.status, 0);
		assert_int_equal(rh_int(o.frame, "unpacked"), (int64_t)count);
		rh_out_free(&o);
		p = rh_printf("%s/dir/b.txt", dest);
		{
			char *text = rh_read(p, NULL);
			assert_non_null(text);
			assert_string_equal(text, "beta\n");
			free(text);
		}
		free(p);
		if (pax) {
			p = rh_printf("%s/%s", dest, longname);
			assert_true(rh_exists(p));
			free(p);
		}
		free(tar);
		free(dest);
	}
	rh_rm_rf(root);
	free(root);
}

/* Unpacks an archive that must be refused; checks that nothing was made. */
static void expect_refused(const char *root, const char *tar, const char *what, const char *reason)
{
	rh_out o;
	char *dest = rh_printf("%s/workspace/dest", root);
	char *ws = rh_printf("%s/workspace", root);
	int before = dir_entries(ws);
	rh_run(&o, "unpack", "--root", root, "--base", dest, tar, NULL);
	if (o.status == 0)
		fprintf(stderr, "%s was accepted: %s\n", what, o.out);
	assert_int_not_equal(o.status, 0);
	assert_non_null(rh_str(o.frame, "error"));
	if (!strstr(rh_str(o.frame, "error"), reason))
		fprintf(stderr, "%s: refused for another reason: %s\n", what, rh_str(o.frame, "error"));
	assert_non_null(strstr(rh_str(o.frame, "error"), reason));
	rh_out_free(&o);
	/* The destination holds nothing (not even the staging folder), and the
	 * folder around it gained nothing but the destination itself. */
	assert_true(dir_entries(dest) <= 0);
	assert_true(dir_entries(ws) <= before + 1);
	rmdir(dest);
	free(dest);
	free(ws);
}

static void test_unpack_refusals(void **state)
{
	char *root, *tar, *outside, *escape;
	char evil[128];
	(void)state;
	RH_REQUIRE_BINARY();
	root = rh_root(0);
	tar = rh_printf("%s/.push-evil.tar", root);
	snprintf(evil, sizeof(evil), "/var/tmp/relay-receiver-evil-%d", (int)getpid());
	escape = rh_printf("%s/workspace/escape.txt", root);

	{
		member m[] = {{"ok.txt", "fine", 0, NULL, NULL}, {evil, "absolute", 0, NULL, NULL}};
		write_lib_archive(tar, 0, m, 2, 1);
		expect_refused(root, tar, "an absolute path", "absolute path");
		assert_false(rh_exists(evil));
	}
	{
		member m[] = {{"ok.txt", "fine", 0, NULL, NULL}, {"../escape.txt", "dotdot", 0, NULL, NULL}};
		write_lib_archive(tar, 0, m, 2, 1);
		expect_refused(root, tar, "a .. path", "unsafe path '../escape.txt'");
		assert_false(rh_exists(escape));
	}
	{
		member m[] = {{"ok.txt", "fine", 0, NULL, NULL},
		              {"link", NULL, AE_IFLNK, "/etc/passwd", NULL}};
		write_lib_archive(tar, 0, m, 2, 1);
		expect_refused(root, tar, "a symbolic link", "symbolic link entry");
	}
	{
		member m[] = {{"ok.txt", "fine", 0, NULL, NULL}, {"hard", NULL, AE_IFREG, "ok.txt", NULL}};
		write_lib_archive(tar, 0, m, 2, 1);
		expect_refused(root, tar, "a hard link", "hard link entry");
	}
	{
		member m[] = {{"ok.txt", "fine", 0, NULL, NULL}, {"null", NULL, AE_IFCHR, NULL, NULL}};
		write_lib_archive(tar, 0, m, 2, 1);
		expect_refused(root, tar, "a device", "character device entry");
	}
	{
		member m[] = {{"ok.txt", "fine", 0, NULL, NULL},
		              {"bad.txt", "content", 0, NULL,
		               "0000000000000000000000000000000000000000000000000000000000000000"}};
		write_lib_archive(tar, 0, m, 2, 1);
		expect_refused(root, tar, "a hash that differs from the index", "differs from the index");
	}
	{
		member m[] = {{"ok.txt", "fine", 0, NULL, NULL}};
		write_lib_archive(tar, 0, m, 1, 0);
		expect_refused(root, tar, "an archive without its index first",
		               "first member is not .relay-index.json");
	}
	{
		/* Truncated in the middle of a member's data. */
		char big[4096];
		member m[] = {{"ok.txt", "fine", 0, NULL, NULL}, {"big.bin", big, 0, NULL, NULL}};
		memset(big, 'x', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		write_lib_archive(tar, 0, m, 2, 1);
		assert_int_equal(truncate(tar, 512 * 6), 0);
		expect_refused(root, tar, "a truncated archive", "truncated archive");
	}
	{
		/* Trailing bytes after the end blocks. */
		member m[] = {{"ok.txt", "fine", 0, NULL, NULL}};
		int fd;
		write_lib_archive(tar, 0, m, 1, 1);
		fd = open(tar, O_WRONLY | O_APPEND);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, "smuggled", 8), 8);
		close(fd);
		expect_refused(root, tar, "trailing data", "trailing data");
	}
	outside = rh_printf("%s/workspace/dest/ok.txt", root);
	assert_false(rh_exists(outside));
	rh_rm_rf(root);
	free(root);
	free(tar);
	free(outside);
	free(escape);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_receiver_archive_reads_in_libarchive),
	    cmocka_unit_test(test_unpack_libarchive_ustar_and_pax),
	    cmocka_unit_test(test_unpack_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
