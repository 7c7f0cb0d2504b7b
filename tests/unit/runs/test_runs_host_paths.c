/*
 * The project-folder rules for host paths (spec/lifecycle.md §12,
 * core/src/runs/host_paths.c) and relay_script's step derivation
 * (spec/guest.md §14, core/src/runs/run_request.c), on real folders under
 * /tmp: a project folder reached through a symbolic link, links at and below
 * it, special files, ".." segments, and files replaced after they were
 * checked.
 */
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

#include "runs/host_paths.h"
#include "runs/run_request.h"
#include "util/fsutil.h"
#include "util/sha256.h"

typedef struct fx {
	char base[64];     /* /tmp/relay-hp-XXXXXX */
	char project[128]; /* <base>/project (P′) */
	char given[128];   /* <base>/alias: a link to the project (P) */
} fx;

static void put_bytes(const fx *f, const char *rel, const void *data, size_t len)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", f->project, rel);
	char *dir = fs_dirname(path);
	assert_int_equal(fs_mkdir_p(dir, 0700, NULL), RELAY_OK);
	free(dir);
	FILE *fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(data, 1, len, fp), len);
	fclose(fp);
}

static void put(const fx *f, const char *rel, const char *text)
{
	put_bytes(f, rel, text, strlen(text));
}

static void fx_make(fx *f)
{
	strcpy(f->base, "/tmp/relay-hp-XXXXXX");
	assert_non_null(mkdtemp(f->base));
	char real[64];
	assert_non_null(realpath(f->base, real));
	strcpy(f->base, real);
	snprintf(f->project, sizeof f->project, "%s/project", f->base);
	snprintf(f->given, sizeof f->given, "%s/alias", f->base);
	assert_int_equal(mkdir(f->project, 0700), 0);
	assert_int_equal(symlink(f->project, f->given), 0);
	put(f, "ws/b.txt", "bravo");
	put(f, "ws/a.txt", "alpha");
	put(f, "ws/a/z.txt", "zulu");
	put(f, "ws/a.d/y.txt", "yankee");
	put(f, "script.sh", "echo hi\n");
	put(f, "outside-target.txt", "x");
}

static void fx_free(fx *f)
{
	fs_remove_tree(f->base, NULL);
}

static int resolve(const fx *f, const char *given, host_path_kind kind, host_path *out, char *why)
{
	return host_path_resolve(f->project, f->given, given, kind, out, why, 512);
}

static void test_resolution(void **state)
{
	(void)state;
	fx f;
	fx_make(&f);
	char why[512];
	host_path p;
	/* Relative, with "." and repeated slashes normalised. */
	assert_int_equal(resolve(&f, ".//ws/./b.txt", HOST_PATH_FILE, &p, why), 0);
	assert_string_equal(p.rel, "ws/b.txt");
	char want[512];
	snprintf(want, sizeof want, "%s/ws/b.txt", f.project);
	assert_string_equal(p.path, want);
	assert_int_equal(p.bytes, 5);
	host_path_free(&p);
	/* Absolute through P (a link above the project is fine) and through P′. */
	snprintf(want, sizeof want, "%s/script.sh", f.given);
	assert_int_equal(resolve(&f, want, HOST_PATH_FILE, &p, why), 0);
	assert_string_equal(p.rel, "script.sh");
	host_path_free(&p);
	snprintf(want, sizeof want, "%s/ws", f.project);
	assert_int_equal(resolve(&f, want, HOST_PATH_DIR, &p, why), 0);
	host_path_free(&p);
	/* The project folder itself is a folder inside the project. */
	assert_int_equal(resolve(&f, ".", HOST_PATH_DIR, &p, why), 0);
	assert_string_equal(p.rel, "");
	host_path_free(&p);
	/* Refusals, each naming its rule. */
	assert_int_equal(resolve(&f, "ws/../script.sh", HOST_PATH_FILE, &p, why), -1);
	assert_non_null(strstr(why, ".. segment"));
	snprintf(want, sizeof want, "%s/project-other/x", f.base);
	assert_int_equal(resolve(&f, want, HOST_PATH_FILE, &p, why), -1);
	assert_non_null(strstr(why, "must be inside the project folder"));
	assert_int_equal(resolve(&f, "", HOST_PATH_FILE, &p, why), -1);
	assert_int_equal(resolve(&f, "ws", HOST_PATH_FILE, &p, why), -1);
	assert_non_null(strstr(why, "not a regular file"));
	assert_int_equal(resolve(&f, "script.sh", HOST_PATH_DIR, &p, why), -1);
	assert_non_null(strstr(why, "not a folder"));
	assert_int_equal(resolve(&f, "nothing/here", HOST_PATH_FILE, &p, why), -1);
	assert_non_null(strstr(why, "does not exist"));
	/* A link at or below the project folder, at any depth. */
	char link[512], target[512];
	snprintf(link, sizeof link, "%s/linked", f.project);
	snprintf(target, sizeof target, "%s/ws", f.project);
	assert_int_equal(symlink(target, link), 0);
	assert_int_equal(resolve(&f, "linked/b.txt", HOST_PATH_FILE, &p, why), -1);
	assert_non_null(strstr(why, "passes through a symlink"));
	assert_int_equal(resolve(&f, "linked", HOST_PATH_DIR, &p, why), -1);
	snprintf(link, sizeof link, "%s/ws/a/link.txt", f.project);
	snprintf(target, sizeof target, "%s/outside-target.txt", f.project);
	assert_int_equal(symlink(target, link), 0);
	assert_int_equal(resolve(&f, "ws/a/link.txt", HOST_PATH_FILE, &p, why), -1);
	assert_non_null(strstr(why, "symlink"));
	/* A path longer than 4,096 bytes. */
	char *huge = malloc(5000);
	memset(huge, 'a', 4999);
	huge[4999] = '\0';
	assert_int_equal(resolve(&f, huge, HOST_PATH_FILE, &p, why), -1);
	free(huge);
	fx_free(&f);
}

static void test_tree_walk_and_hash(void **state)
{
	(void)state;
	fx f;
	fx_make(&f);
	char why[512];
	host_path dir;
	assert_int_equal(resolve(&f, "ws", HOST_PATH_DIR, &dir, why), 0);
	host_tree tree;
	assert_int_equal(host_tree_walk(f.project, &dir, "the workspace", &tree, why, sizeof why), 0);
	/* Sorted by the whole path in byte order ('.' < '/'). */
	assert_int_equal(tree.count, 4);
	assert_string_equal(tree.files[0].rel, "a.d/y.txt");
	assert_string_equal(tree.files[1].rel, "a.txt");
	assert_string_equal(tree.files[2].rel, "a/z.txt");
	assert_string_equal(tree.files[3].rel, "b.txt");
	assert_int_equal(tree.total_bytes, 4 + 5 + 5 + 6);
	bool changed = true;
	assert_int_equal(host_tree_hash(f.project, &dir, &tree, &changed, why, sizeof why), 0);
	char hex[65];
	sha256_buffer_hex("alpha", 5, hex);
	assert_string_equal(tree.files[1].sha256, hex);
	/* A file replaced after the walk is a change. */
	char path[512], moved[512];
	snprintf(path, sizeof path, "%s/ws/b.txt", f.project);
	snprintf(moved, sizeof moved, "%s/ws/b.old", f.project);
	assert_int_equal(rename(path, moved), 0);
	put(&f, "ws/b.txt", "bravo");
	assert_int_equal(host_tree_hash(f.project, &dir, &tree, &changed, why, sizeof why), -1);
	assert_true(changed);
	host_tree_free(&tree);
	/* A link or a special file anywhere in the tree refuses it. */
	unlink(moved);
	char fifo[512];
	snprintf(fifo, sizeof fifo, "%s/ws/a/pipe", f.project);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(host_tree_walk(f.project, &dir, "the workspace", &tree, why, sizeof why), -1);
	assert_non_null(strstr(why, "special file"));
	unlink(fifo);
	char link[512];
	snprintf(link, sizeof link, "%s/ws/a.d/link", f.project);
	assert_int_equal(symlink("/etc/passwd", link), 0);
	assert_int_equal(host_tree_walk(f.project, &dir, "the workspace", &tree, why, sizeof why), -1);
	assert_non_null(strstr(why, "symbolic link"));
	host_path_free(&dir);
	fx_free(&f);
}

/* A tree big enough to be hashed by several threads: every hash equals
 * the one of its bytes, and with two files changed the failure reported is
 * the lower one in the tree's order, whichever thread met which first. */
#define PARALLEL_FILES      64
#define PARALLEL_FILE_BYTES (256u << 10)

static void fill_pattern(unsigned char *buf, size_t len, unsigned seed)
{
	uint32_t x = 2166136261u ^ seed;
	for (size_t i = 0; i < len; i++) {
		x = x * 16777619u + 0x9e3779b9u;
		buf[i] = (unsigned char)(x >> 24);
	}
}

static void test_tree_hash_parallel(void **state)
{
	(void)state;
	fx f;
	fx_make(&f);
	unsigned char *buf = malloc(PARALLEL_FILE_BYTES);
	assert_non_null(buf);
	char rel[64], expected[PARALLEL_FILES][65];
	for (unsigned i = 0; i < PARALLEL_FILES; i++) {
		snprintf(rel, sizeof rel, "big/d%u/f%02u.bin", i % 4, i);
		fill_pattern(buf, PARALLEL_FILE_BYTES, i);
		put_bytes(&f, rel, buf, PARALLEL_FILE_BYTES);
	}
	char why[512];
	host_path dir;
	assert_int_equal(resolve(&f, "big", HOST_PATH_DIR, &dir, why), 0);
	host_tree tree;
	assert_int_equal(host_tree_walk(f.project, &dir, "the workspace", &tree, why, sizeof why), 0);
	assert_int_equal(tree.count, PARALLEL_FILES);
	for (size_t k = 0; k < tree.count; k++) {
		unsigned i = (unsigned)atoi(strrchr(tree.files[k].rel, 'f') + 1);
		fill_pattern(buf, PARALLEL_FILE_BYTES, i);
		sha256_buffer_hex(buf, PARALLEL_FILE_BYTES, expected[k]);
	}
	bool changed = true;
	assert_int_equal(host_tree_hash(f.project, &dir, &tree, &changed, why, sizeof why), 0);
	assert_false(changed);
	for (size_t k = 0; k < tree.count; k++)
		assert_string_equal(tree.files[k].sha256, expected[k]);

	/* Two files of the tree change: one replaced (late in the order), one
	 * cut short (earlier). The earlier one is reported, every time. */
	const char *late = tree.files[50].rel, *early = tree.files[9].rel;
	char path[512], moved[512];
	snprintf(path, sizeof path, "%s/big/%s", f.project, late);
	snprintf(moved, sizeof moved, "%s/big/%s.old", f.project, late);
	assert_int_equal(rename(path, moved), 0);
	snprintf(rel, sizeof rel, "big/%s", late);
	put_bytes(&f, rel, buf, PARALLEL_FILE_BYTES);
	snprintf(path, sizeof path, "%s/big/%s", f.project, early);
	assert_int_equal(truncate(path, 1000), 0);
	for (int round = 0; round < 5; round++) {
		changed = false;
		assert_int_equal(host_tree_hash(f.project, &dir, &tree, &changed, why, sizeof why), -1);
		assert_true(changed);
		assert_non_null(strstr(why, early));
		assert_non_null(strstr(why, "changed size"));
	}
	/* With only the replaced file left, that one is named. */
	assert_int_equal(truncate(path, PARALLEL_FILE_BYTES), 0);
	changed = false;
	assert_int_equal(host_tree_hash(f.project, &dir, &tree, &changed, why, sizeof why), -1);
	assert_true(changed);
	assert_non_null(strstr(why, late));
	assert_non_null(strstr(why, "replaced after it was checked"));
	unlink(moved);
	host_tree_free(&tree);
	host_path_free(&dir);
	free(buf);
	fx_free(&f);
}

static void test_reopen_checks_identity(void **state)
{
	(void)state;
	fx f;
	fx_make(&f);
	char why[512];
	host_path p;
	assert_int_equal(resolve(&f, "script.sh", HOST_PATH_FILE, &p, why), 0);
	char *data = NULL;
	size_t len = 0;
	bool too_large = false;
	assert_int_equal(host_path_read(f.project, &p, 1 << 20, &data, &len, &too_large, why, sizeof why), 0);
	assert_string_equal(data, "echo hi\n");
	free(data);
	assert_int_equal(host_path_read(f.project, &p, 4, &data, &len, &too_large, why, sizeof why), -1);
	assert_true(too_large);
	/* Replaced by another file of the same name: refused. (The old file is
	 * kept under another name so that its inode cannot be reused.) */
	char path[512], kept[512];
	snprintf(path, sizeof path, "%s/script.sh", f.project);
	snprintf(kept, sizeof kept, "%s/script.sh.old", f.project);
	assert_int_equal(rename(path, kept), 0);
	put(&f, "script.sh", "echo evil\n");
	assert_int_equal(host_path_open(f.project, &p, why, sizeof why), -1);
	assert_non_null(strstr(why, "replaced"));
	/* Replaced by a link to the original content: refused too. */
	unlink(path);
	char target[512];
	snprintf(target, sizeof target, "%s/outside-target.txt", f.project);
	assert_int_equal(symlink(target, path), 0);
	assert_int_equal(host_path_open(f.project, &p, why, sizeof why), -1);
	host_path_free(&p);
	fx_free(&f);
}

static char *title_of(const char *language, bool is_inline, const char *code, const char *local)
{
	run_call c;
	memset(&c, 0, sizeof c);
	snprintf(c.language, sizeof c.language, "%s", language);
	c.is_inline = is_inline;
	c.script = (char *)code;
	c.script_len = code ? strlen(code) : 0;
	c.local_path = (char *)local;
	return run_derive_title(&c);
}

static void test_step_derivation(void **state)
{
	(void)state;
	char *t =
	    title_of("shell", true, "#!/bin/sh\n\n  \t\n   xdg-open https://example.com  \r\necho 2\n", NULL);
	assert_string_equal(t, "shell xdg-open https://example.com");
	free(t);
	t = title_of("shell", true, "#!/bin/sh\n# a comment counts\n", NULL);
	assert_string_equal(t, "shell # a comment counts");
	free(t);
	t = title_of("shell", true, "\n\n", NULL);
	assert_string_equal(t, "shell");
	free(t);
	t = title_of("python", true, "print(1)", NULL);
	assert_string_equal(t, "code (python)");
	free(t);
	t = title_of("typescript", false, "x", "tests/e2e/login.ts");
	assert_string_equal(t, "script login.ts");
	free(t);
	/* 500 characters, cut at a character boundary (é is two bytes). */
	char *code = malloc(2000);
	strcpy(code, "echo ");
	for (int i = 0; i < 600; i++)
		strcat(code, "\xc3\xa9");
	t = title_of("shell", true, code, NULL);
	assert_int_equal(strlen(t), strlen("shell echo ") + 2 * (500 - 11));
	free(t);
	run_call c;
	memset(&c, 0, sizeof c);
	char *because = run_derive_because(&c, "shell ls");
	assert_string_equal(because, "Relay shell ls (no reason given)");
	free(because);
	c.reason = "Open the page";
	because = run_derive_because(&c, "shell ls");
	assert_string_equal(because, "Open the page");
	free(because);
	free(code);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_resolution),         cmocka_unit_test(test_tree_walk_and_hash),
	    cmocka_unit_test(test_tree_hash_parallel), cmocka_unit_test(test_reopen_checks_identity),
	    cmocka_unit_test(test_step_derivation),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
