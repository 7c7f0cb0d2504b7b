/*
 * The private support library (support/): tree removal that never follows a
 * link and stops at RS_TREE_MAX_DEPTH, mkdir_p, which, and UTF-8 validation
 * and repair (each invalid byte becomes U+FFFD), on a real temporary folder.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "relay_support/tree.h"
#include "relay_support/ustar.h"
#include "relay_support/utf8.h"
#include "relay_support/which.h"

static char *path_of(const char *dir, const char *rel)
{
	size_t n = strlen(dir) + strlen(rel) + 2;
	char *out = malloc(n);
	assert_non_null(out);
	snprintf(out, n, "%s/%s", dir, rel);
	return out;
}

static void touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
}

static void remove_tree_keeps_link_targets(void **state)
{
	(void)state;
	char top[] = "/tmp/rs-tree-XXXXXX";
	assert_non_null(mkdtemp(top));
	char *victim = path_of(top, "victim");
	char *victim_file = path_of(top, "victim/keep");
	char *tree = path_of(top, "tree/a/b");
	char *link = path_of(top, "tree/a/link");
	char *file = path_of(top, "tree/a/b/f");
	char *root = path_of(top, "tree");
	assert_int_equal(mkdir(victim, 0700), 0);
	touch(victim_file);
	assert_int_equal(rs_mkdir_p(tree, 0700, 0, NULL), 0);
	touch(file);
	assert_int_equal(symlink(victim, link), 0);

	rs_error err;
	assert_int_equal(rs_remove_tree(root, &err), 0);
	struct stat st;
	assert_int_equal(lstat(root, &st), -1);
	assert_int_equal(lstat(victim_file, &st), 0);    /* the link's target is untouched */
	assert_int_equal(rs_remove_tree(root, &err), 0); /* missing is fine */

	assert_int_equal(rs_remove_tree(top, &err), 0);
	free(victim);
	free(victim_file);
	free(tree);
	free(link);
	free(file);
	free(root);
}

static void remove_tree_is_bounded(void **state)
{
	(void)state;
	char top[] = "/tmp/rs-deep-XXXXXX";
	assert_non_null(mkdtemp(top));
	int fd = open(top, O_RDONLY | O_DIRECTORY);
	assert_true(fd >= 0);
	for (int i = 0; i <= RS_TREE_MAX_DEPTH; i++) {
		assert_int_equal(mkdirat(fd, "d", 0700), 0);
		int next = openat(fd, "d", O_RDONLY | O_DIRECTORY);
		assert_true(next >= 0);
		close(fd);
		fd = next;
	}
	close(fd);
	rs_error err;
	assert_int_equal(rs_remove_tree(top, &err), -1);
	assert_int_equal(err.errnum, ELOOP);
	assert_non_null(strstr(err.message, "deeper than"));
	/* Clean up the last levels by hand, then the rest fits the bound. */
	char *deep = malloc(strlen(top) + 2 * (RS_TREE_MAX_DEPTH + 1) + 1);
	assert_non_null(deep);
	strcpy(deep, top);
	for (int i = 0; i < 4; i++)
		strcat(deep, "/d");
	assert_int_equal(rs_remove_tree(deep, &err), 0);
	assert_int_equal(rs_remove_tree(top, &err), 0);
	free(deep);
}

/* A folder its owner may not read (overlayfs leaves work/work as d---------)
 * is opened up and removed. As root (which reads it anyway) the removal runs
 * as nobody, who owns the tree. */
static void remove_tree_opens_unreadable_folders(void **state)
{
	(void)state;
	char top[] = "/tmp/rs-closed-XXXXXX";
	assert_non_null(mkdtemp(top));
	char *root = path_of(top, "tree");
	char *closed = path_of(top, "tree/work");
	char *file = path_of(top, "tree/work/f");
	assert_int_equal(rs_mkdir_p(closed, 0700, 0, NULL), 0);
	touch(file);
	const uid_t nobody = 65534;
	if (geteuid() == 0) {
		const char *const owned[] = {top, root, closed, file};
		for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
			assert_int_equal(chown(owned[i], nobody, nobody), 0);
	}
	assert_int_equal(chmod(closed, 0), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (geteuid() == 0 && (setgid(nobody) != 0 || setuid(nobody) != 0))
			_exit(2);
		struct stat st;
		_exit(rs_remove_tree(root, NULL) == 0 && lstat(root, &st) != 0 ? 0 : 1);
	}
	int wstatus = 0;
	assert_int_equal(waitpid(pid, &wstatus, 0), pid);
	assert_true(WIFEXITED(wstatus));
	assert_int_equal(WEXITSTATUS(wstatus), 0);
	chmod(closed, 0700); /* when it failed, so that the rest can go */
	assert_int_equal(rs_remove_tree(top, NULL), 0);
	free(root);
	free(closed);
	free(file);
}

static void mkdir_p_refuses_files_and_links(void **state)
{
	(void)state;
	char top[] = "/tmp/rs-mkdir-XXXXXX";
	assert_non_null(mkdtemp(top));
	char *file = path_of(top, "file");
	char *under_file = path_of(top, "file/x");
	char *real = path_of(top, "real");
	char *link = path_of(top, "link");
	touch(file);
	rs_error err;
	assert_int_equal(rs_mkdir_p(under_file, 0700, 0, &err), -1);
	assert_int_equal(err.errnum, ENOTDIR);
	assert_int_equal(rs_mkdir_p(file, 0700, 0, &err), -1);
	assert_non_null(strstr(err.message, "not a folder"));
	assert_int_equal(rs_mkdir_p(real, 0700, 0, NULL), 0);
	assert_int_equal(symlink(real, link), 0);
	assert_int_equal(rs_mkdir_p(link, 0700, 0, NULL), 0);
	assert_int_equal(rs_mkdir_p(link, 0700, RS_MKDIR_NO_LINK_LEAF, &err), -1);
	assert_non_null(strstr(err.message, "symbolic link"));
	assert_int_equal(rs_mkdir_p("", 0700, 0, &err), -1);
	assert_int_equal(err.errnum, EINVAL);
	assert_int_equal(rs_mkdir_p(real, 0700, 0x80, &err), -1);
	assert_int_equal(rs_remove_tree(top, NULL), 0);
	free(file);
	free(under_file);
	free(real);
	free(link);
}

static void which_finds_executables_only(void **state)
{
	(void)state;
	char top[] = "/tmp/rs-which-XXXXXX";
	assert_non_null(mkdtemp(top));
	char *tool = path_of(top, "tool");
	char *plain = path_of(top, "plain");
	touch(tool);
	touch(plain);
	assert_int_equal(chmod(tool, 0700), 0);
	char search[256];
	snprintf(search, sizeof search, "relative:%s:/nonexistent", top);
	char *found = rs_which("tool", search);
	assert_non_null(found);
	assert_string_equal(found, tool);
	free(found);
	errno = 0;
	assert_null(rs_which("plain", search));
	assert_int_equal(errno, ENOENT);
	assert_null(rs_which("", search));
	assert_int_equal(errno, EINVAL);
	found = rs_which("sh", "/bin:/usr/bin");
	assert_non_null(found);
	assert_true(found[0] == '/');
	free(found);
	found = rs_which(tool, "/nonexistent");
	assert_non_null(found);
	free(found);
	assert_int_equal(rs_remove_tree(top, NULL), 0);
	free(tool);
	free(plain);
}

static void utf8_validates_and_repairs(void **state)
{
	(void)state;
	assert_true(rs_utf8_valid("h\xC3\xA9llo \xF0\x9F\x98\x80", 11));
	assert_false(rs_utf8_valid("\xC0\xAF", 2));         /* overlong */
	assert_false(rs_utf8_valid("\xED\xA0\x80", 3));     /* surrogate */
	assert_false(rs_utf8_valid("\xF4\x90\x80\x80", 4)); /* above U+10FFFF */
	assert_int_equal(rs_utf8_sequence("\xE2\x82", 2), -1);

	size_t len = 0;
	char *fixed = rs_utf8_repair("a\xFF"
	                             "b\xE2\x82",
	                             5, 0, &len);
	assert_non_null(fixed);
	assert_string_equal(fixed, "a\xEF\xBF\xBD"
	                           "b\xEF\xBF\xBD\xEF\xBF\xBD");
	assert_int_equal(len, strlen(fixed));
	free(fixed);
	fixed = rs_utf8_repair("a\xFF"
	                       "b\xE2\x82",
	                       5, RS_UTF8_DROP_INCOMPLETE_TAIL, &len);
	assert_string_equal(fixed, "a\xEF\xBF\xBD"
	                           "b");
	free(fixed);
	assert_null(rs_utf8_repair("a", 1, 0x40, NULL));

	const char *text = "ab\xC3\xA9"
	                   "c"; /* a b é c */
	assert_int_equal(rs_utf8_cut(text, 5, 3), 2);
	assert_int_equal(rs_utf8_cut(text, 5, 4), 4);
	assert_int_equal(rs_utf8_cut_forward(text, 5, 3), 4);
	assert_int_equal(rs_utf8_length(text, 5), 4);
	assert_int_equal(rs_utf8_length("\xFF\xFF", 2), 2);
	assert_int_equal(rs_utf8_prefix_bytes(text, 5, 3), 4);
}

static void ustar_fields_are_strict(void **state)
{
	(void)state;
	uint64_t v = 0;
	assert_int_equal(rs_tar_octal((const unsigned char *)"  0644\0 ", 8, &v), 0);
	assert_int_equal(v, 0644);
	assert_int_equal(rs_tar_octal((const unsigned char *)"        ", 8, &v), -1); /* no digit */
	assert_int_equal(rs_tar_octal((const unsigned char *)"0649    ", 8, &v), -1);
	assert_int_equal(rs_tar_octal((const unsigned char *)"\x80\0\0\0\0\0\0\x01", 8, &v), -1);

	unsigned char h[RS_TAR_BLOCK];
	memset(h, 0, sizeof h);
	assert_true(rs_tar_zero(h, sizeof h));
	memcpy(h, "file", 4);
	memcpy(h + 257,
	       "ustar\0"
	       "00",
	       8);
	unsigned sum = 0;
	for (size_t i = 0; i < sizeof h; i++)
		sum += (i >= 148 && i < 156) ? ' ' : h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	assert_true(rs_tar_checksum_ok(h));
	assert_true(rs_tar_is_ustar(h));
	h[0] = 'F';
	assert_false(rs_tar_checksum_ok(h));

	const char *path = NULL, *key = NULL;
	size_t path_len = 0, key_len = 0;
	const char pax[] = "12 path=a/b\n12 path=c/d\n";
	assert_int_equal(rs_tar_pax_path(pax, strlen(pax), &path, &path_len, &key, &key_len), RS_TAR_PAX_OK);
	assert_int_equal(path_len, 3);
	assert_memory_equal(path, "c/d", 3); /* the last record wins */
	const char other[] = "15 linkpath=/x\n";
	assert_int_equal(rs_tar_pax_path(other, strlen(other), &path, &path_len, &key, &key_len),
	                 RS_TAR_PAX_KEY);
	assert_int_equal(key_len, 8);
	const char bad[] = "99 path=x\n";
	assert_int_equal(rs_tar_pax_path(bad, strlen(bad), &path, &path_len, &key, &key_len),
	                 RS_TAR_PAX_MALFORMED);
	const char nul[] = "10 path=\0\n";
	assert_int_equal(rs_tar_pax_path(nul, sizeof nul - 1, &path, &path_len, &key, &key_len),
	                 RS_TAR_PAX_NUL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(remove_tree_keeps_link_targets),
	    cmocka_unit_test(remove_tree_is_bounded),
	    cmocka_unit_test(remove_tree_opens_unreadable_folders),
	    cmocka_unit_test(mkdir_p_refuses_files_and_links),
	    cmocka_unit_test(which_finds_executables_only),
	    cmocka_unit_test(utf8_validates_and_repairs),
	    cmocka_unit_test(ustar_fields_are_strict),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
