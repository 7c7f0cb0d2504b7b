/*
 * Evidence archives (spec/evidence.md §5.3-§5.4): our writer's format, a round
 * trip, and hostile archives built here with libarchive, each of which must
 * be refused whole, leave nothing behind and write nothing outside the
 * destination. Every hostile case runs twice: with the raw header pre-scan,
 * and with only the libarchive-level checks (the pre-scan skipped), where
 * that layer is meant to catch it too.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
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

#include "evidence/archive.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

typedef struct fixture {
	char root[256];     /* mkdtemp root */
	char parent[300];   /* root/parent: holds dest and sentinel */
	char dest[320];     /* root/parent/dest */
	char sentinel[320]; /* root/parent/sentinel */
	char arc[300];      /* root/a.tar */
} fixture;

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	fixture *fx = calloc(1, sizeof *fx);
	snprintf(fx->root, sizeof fx->root, "/tmp/evidence-archive-XXXXXX");
	if (mkdtemp(fx->root) == NULL)
		return -1;
	snprintf(fx->parent, sizeof fx->parent, "%s/parent", fx->root);
	snprintf(fx->dest, sizeof fx->dest, "%s/dest", fx->parent);
	snprintf(fx->sentinel, sizeof fx->sentinel, "%s/sentinel", fx->parent);
	snprintf(fx->arc, sizeof fx->arc, "%s/a.tar", fx->root);
	mkdir(fx->parent, 0700);
	mkdir(fx->dest, 0700);
	write_text(fx->sentinel, "sentinel\n");
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	fixture *fx = *state;
	fs_remove_tree(fx->root, NULL);
	free(fx);
	return 0;
}

/* ---- building archives by hand ------------------------------------------- */

typedef struct member {
	const char *name;
	int type;         /* AE_IFREG, AE_IFLNK, AE_IFCHR, AE_IFIFO, AE_IFDIR; 0 = AE_IFREG */
	const char *data; /* contents (regular files) */
	int64_t declared; /* header size; -1 = strlen(data) */
	const char *link; /* symlink target or hard link source */
	bool hardlink;
} member;

static void sha_hex(const char *data, char out[65])
{
	sha256_buffer_hex(data, strlen(data), out);
}

/* Index JSON for the regular members (their real data). */
static char *index_for(const member *m, size_t n)
{
	json_object *arr = json_object_new_array();
	for (size_t i = 0; i < n; i++) {
		json_object *o = json_object_new_object();
		char hex[65];
		sha_hex(m[i].data ? m[i].data : "", hex);
		jsonx_add_str(o, "path", m[i].name);
		jsonx_add_int(o, "bytes", (int64_t)strlen(m[i].data ? m[i].data : ""));
		jsonx_add_str(o, "sha256", hex);
		json_object_array_add(arr, o);
	}
	char *text = jsonx_to_string(arr, 0);
	json_object_put(arr);
	return text;
}

static void add_member(struct archive *a, const char *name, int type, const char *data, int64_t declared,
                       const char *link, bool hardlink)
{
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, type ? (unsigned)type : AE_IFREG);
	archive_entry_set_perm(e, 0600);
	archive_entry_set_mtime(e, 1700000000, 0);
	size_t len = data ? strlen(data) : 0;
	if (hardlink) {
		archive_entry_set_hardlink(e, link);
		archive_entry_set_size(e, 0);
	} else if (type == AE_IFLNK) {
		archive_entry_set_symlink(e, link);
		archive_entry_set_size(e, 0);
	} else if (type == AE_IFCHR) {
		archive_entry_set_rdevmajor(e, 1);
		archive_entry_set_rdevminor(e, 3);
		archive_entry_set_size(e, 0);
	} else if (type == AE_IFREG || type == 0) {
		archive_entry_set_size(e, declared >= 0 ? declared : (int64_t)len);
	} else {
		archive_entry_set_size(e, 0);
	}
	assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
	if ((type == 0 || type == AE_IFREG) && !hardlink && len > 0) {
		/* Write the real data; a larger declared size gets zero padding
		 * from libarchive, a smaller one is cut by it. */
		archive_write_data(a, data, len);
	}
	archive_entry_free(e);
}

/* Writes an archive: `index` as the first member (NULL = none), then members. */
static void build_archive(const char *path, const char *index, const member *m, size_t n)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_in_last_block(a, 1);
	assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
	if (index)
		add_member(a, ".relay-index.json", AE_IFREG, index, -1, NULL, false);
	for (size_t i = 0; i < n; i++)
		add_member(a, m[i].name, m[i].type, m[i].data, m[i].declared, m[i].link, m[i].hardlink);
	archive_write_close(a);
	archive_write_free(a);
}

/* ---- checks --------------------------------------------------------------- */

static size_t count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

/* Nothing in dest, only dest and sentinel in parent, sentinel intact, and
 * nothing escaped to the usual traversal targets. */
static void assert_untouched(const fixture *fx)
{
	assert_int_equal(count_entries(fx->dest), 0);
	assert_int_equal(count_entries(fx->parent), 2);
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(fs_read_file(fx->sentinel, 1024, &data, &len, NULL), RELAY_OK);
	assert_string_equal(data, "sentinel\n");
	free(data);
	struct stat st;
	assert_int_not_equal(lstat("/tmp/evidence-escaped", &st), 0);
	char esc[400];
	snprintf(esc, sizeof esc, "%s/escaped", fx->root);
	assert_int_not_equal(lstat(esc, &st), 0);
}

static void expect_refused(fixture *fx, const char *expected, unsigned flags, bool both_layers,
                           const char *why)
{
	for (int layer = 0; layer < (both_layers ? 2 : 1); layer++) {
		evidence_extract_options opts = {0, EVIDENCE_SNAPSHOT_MAX_BYTES, NULL, layer == 1};
		relay_error err = {0};
		char *facts = NULL;
		relay_status st =
		    evidence_archive_extract_ex(fx->arc, fx->dest, expected, flags, &opts, &facts, &err);
		if (st == RELAY_OK)
			fail_msg("%s was accepted (layer %d)", why, layer);
		assert_null(facts);
		assert_true(strlen(err.message) > 0);
		print_message("%s (layer %d): %s\n", why, layer, err.message);
		assert_untouched(fx);
	}
	unlink(fx->arc);
}

/* ---- hostile archives ----------------------------------------------------- */

static void test_refuses_absolute_path(void **state)
{
	fixture *fx = *state;
	member m[] = {{"/tmp/evidence-escaped", 0, "boom", -1, NULL, false}};
	char *idx = index_for(m, 1);
	build_archive(fx->arc, idx, m, 1);
	expect_refused(fx, NULL, 0, true, "absolute path");
	free(idx);
	/* The index lists a harmless name; the member itself is absolute. */
	member benign[] = {{"tmp/evidence-escaped", 0, "boom", -1, NULL, false}};
	idx = index_for(benign, 1);
	build_archive(fx->arc, idx, m, 1);
	expect_refused(fx, NULL, 0, true, "absolute member name");
	free(idx);
}

static void test_refuses_dotdot(void **state)
{
	fixture *fx = *state;
	member m[] = {{"ok.txt", 0, "fine", -1, NULL, false}, {"../../escaped", 0, "boom", -1, NULL, false}};
	char *idx = index_for(m, 2);
	build_archive(fx->arc, idx, m, 2);
	expect_refused(fx, NULL, 0, true, "..");
	free(idx);
	member benign[] = {{"ok.txt", 0, "fine", -1, NULL, false}, {"escaped", 0, "boom", -1, NULL, false}};
	idx = index_for(benign, 2);
	build_archive(fx->arc, idx, m, 2);
	expect_refused(fx, NULL, 0, true, ".. member name");
	free(idx);
}

static void test_refuses_symlink(void **state)
{
	fixture *fx = *state;
	char target[400];
	snprintf(target, sizeof target, "%s", fx->root);
	/* A link to the root, then a file through it. */
	member m[] = {{"link", AE_IFLNK, NULL, -1, target, false},
	              {"link/escaped", 0, "boom", -1, NULL, false}};
	char *idx = index_for(m, 2);
	build_archive(fx->arc, idx, m, 2);
	expect_refused(fx, NULL, 0, true, "symlink");
	free(idx);
}

static void test_refuses_hardlink(void **state)
{
	fixture *fx = *state;
	member m[] = {{"a.txt", 0, "data", -1, NULL, false}, {"b.txt", 0, NULL, -1, "a.txt", true}};
	char *idx = index_for(m, 2);
	build_archive(fx->arc, idx, m, 2);
	expect_refused(fx, NULL, 0, true, "hard link");
	free(idx);
}

static void test_refuses_device(void **state)
{
	fixture *fx = *state;
	member m[] = {{"null", AE_IFCHR, NULL, -1, NULL, false}};
	char *idx = index_for(m, 1);
	build_archive(fx->arc, idx, m, 1);
	expect_refused(fx, NULL, 0, true, "device");
	free(idx);
}

static void test_refuses_fifo(void **state)
{
	fixture *fx = *state;
	member m[] = {{"pipe", AE_IFIFO, NULL, -1, NULL, false}};
	char *idx = index_for(m, 1);
	build_archive(fx->arc, idx, m, 1);
	expect_refused(fx, NULL, 0, true, "FIFO");
	free(idx);
}

static void test_refuses_duplicate(void **state)
{
	fixture *fx = *state;
	member one[] = {{"a.txt", 0, "data", -1, NULL, false}};
	member m[] = {{"a.txt", 0, "data", -1, NULL, false}, {"a.txt", 0, "data", -1, NULL, false}};
	char *idx = index_for(one, 1);
	build_archive(fx->arc, idx, m, 2);
	expect_refused(fx, NULL, 0, true, "duplicate member");
	/* And an index that lists a path twice. */
	char *idx2 = index_for(m, 2);
	build_archive(fx->arc, idx2, m, 2);
	expect_refused(fx, NULL, 0, true, "duplicate index entry");
	free(idx);
	free(idx2);
}

static void test_refuses_oversize(void **state)
{
	fixture *fx = *state;
	/* Header declares 4096 bytes, the index 4. */
	member idxm[] = {{"a.txt", 0, "data", -1, NULL, false}};
	member m[] = {{"a.txt", 0, "data", 4096, NULL, false}};
	char *idx = index_for(idxm, 1);
	build_archive(fx->arc, idx, m, 1);
	expect_refused(fx, NULL, 0, true, "entry over its declared size");
	/* A snapshot over the cap (a small cap for the test). */
	member snap[] = {{"state/snapshots/rec-1/run-1-before.png", 0, "0123456789", -1, NULL, false}};
	char *idx2 = index_for(snap, 1);
	build_archive(fx->arc, idx2, snap, 1);
	evidence_extract_options opts = {0, 5, NULL, false};
	relay_error err = {0};
	assert_int_equal(evidence_archive_extract_ex(fx->arc, fx->dest, NULL, 0, &opts, NULL, &err),
	                 RELAY_E_TOO_LARGE);
	assert_untouched(fx);
	unlink(fx->arc);
	free(idx);
	free(idx2);
}

static void test_refuses_hash_mismatch_index(void **state)
{
	fixture *fx = *state;
	member claimed[] = {{"ok.txt", 0, "fine", -1, NULL, false}, {"b.txt", 0, "good", -1, NULL, false}};
	member real[] = {{"ok.txt", 0, "fine", -1, NULL, false}, {"b.txt", 0, "evil", -1, NULL, false}};
	char *idx = index_for(claimed, 2);
	build_archive(fx->arc, idx, real, 2);
	expect_refused(fx, NULL, 0, true, "SHA-256 differing from the index");
	free(idx);
}

static void test_refuses_hash_mismatch_expected(void **state)
{
	fixture *fx = *state;
	member m[] = {{"state/receiver/receipts/run-1.json", 0, "{\"a\":1}", -1, NULL, false}};
	char *idx = index_for(m, 1);
	build_archive(fx->arc, idx, m, 1);
	member other[] = {{"state/receiver/receipts/run-1.json", 0, "{\"a\":2}", -1, NULL, false}};
	char *expected = index_for(other, 1);
	expect_refused(fx, expected, 0, true, "SHA-256 differing from the expected list");
	/* Not requested at all. */
	build_archive(fx->arc, idx, m, 1);
	expect_refused(fx, "[{\"path\":\"state/other.json\"}]", RELAY_ARCHIVE_PRESENT, true,
	               "unrequested entry");
	/* Requested but missing (not present mode). */
	build_archive(fx->arc, idx, m, 1);
	expect_refused(
	    fx, "[{\"path\":\"state/receiver/receipts/run-1.json\"},{\"path\":\"state/records/x.json\"}]", 0,
	    true, "missing requested entry");
	free(idx);
	free(expected);
}

static void test_refuses_truncated(void **state)
{
	fixture *fx = *state;
	char big[8192];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	member m[] = {{"a.txt", 0, "data", -1, NULL, false}, {"big.bin", 0, big, -1, NULL, false}};
	char *idx = index_for(m, 2);
	build_archive(fx->arc, idx, m, 2);
	struct stat st;
	assert_int_equal(stat(fx->arc, &st), 0);
	assert_int_equal(truncate(fx->arc, st.st_size - 4096), 0);
	expect_refused(fx, NULL, 0, true, "truncated archive");
	/* Cut off before the last member even starts (the index promises it). */
	build_archive(fx->arc, idx, m, 1);
	expect_refused(fx, NULL, 0, true, "archive ending before an indexed member");
	free(idx);
}

static void test_refuses_smuggling(void **state)
{
	fixture *fx = *state;
	member m[] = {{"a.txt", 0, "data", -1, NULL, false}};
	char *idx = index_for(m, 1);
	/* No index first. */
	build_archive(fx->arc, NULL, m, 1);
	expect_refused(fx, NULL, 0, true, "missing index");
	/* Trailing bytes after the end marker (the pre-scan's job). */
	build_archive(fx->arc, idx, m, 1);
	FILE *f = fopen(fx->arc, "a");
	fputs("smuggled bytes", f);
	fclose(f);
	expect_refused(fx, NULL, 0, false, "trailing data");
	/* A pax header setting more than path. */
	struct archive *a = archive_write_new();
	archive_write_set_format_pax(a);
	archive_write_open_filename(a, fx->arc);
	add_member(a, ".relay-index.json", AE_IFREG, idx, -1, NULL, false);
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, "a.txt");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0600);
	archive_entry_set_size(e, 4);
	archive_entry_set_mtime(e, 1700000000, 123456789); /* sub-second: a pax mtime record */
	archive_entry_set_uname(e, "attacker");
	archive_write_header(a, e);
	archive_write_data(a, "data", 4);
	archive_entry_free(e);
	archive_write_close(a);
	archive_write_free(a);
	expect_refused(fx, NULL, 0, false, "pax header with more than path");
	/* A gzip-compressed archive. */
	a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_add_filter_gzip(a);
	archive_write_open_filename(a, fx->arc);
	add_member(a, ".relay-index.json", AE_IFREG, idx, -1, NULL, false);
	add_member(a, "a.txt", AE_IFREG, "data", -1, NULL, false);
	archive_write_close(a);
	archive_write_free(a);
	expect_refused(fx, NULL, 0, true, "compressed archive");
	free(idx);
}

static void test_refuses_link_in_destination(void **state)
{
	fixture *fx = *state;
	/* A symbolic link already inside the destination must not be followed. */
	char link[400];
	snprintf(link, sizeof link, "%s/state", fx->dest);
	assert_int_equal(symlink(fx->root, link), 0);
	member m[] = {{"state/escaped", 0, "boom", -1, NULL, false}};
	char *idx = index_for(m, 1);
	build_archive(fx->arc, idx, m, 1);
	relay_error err = {0};
	assert_int_equal(evidence_archive_extract(fx->arc, fx->dest, NULL, 0, NULL, &err),
	                 RELAY_E_UNSAFE_PATH);
	unlink(link);
	assert_untouched(fx);
	free(idx);
}

/* ---- our own writer -------------------------------------------------------- */

static void test_write_and_extract_round_trip(void **state)
{
	fixture *fx = *state;
	char base[400], p[800];
	snprintf(base, sizeof base, "%s/base", fx->root);
	const char *long_dir =
	    "state/snapshots/rec-5b1e0c9a2f44d781/a-very-long-folder-name-that-makes-the-path-"
	    "longer-than-one-hundred-bytes-for-pax";
	snprintf(p, sizeof p, "%s/%s", base, long_dir);
	assert_int_equal(fs_mkdir_p(p, 0700, NULL), RELAY_OK);
	snprintf(p, sizeof p, "%s/%s/run-5d1f0c9a8e7b4c3d2a1f0e9d8c7b6a59-before.png", base, long_dir);
	write_text(p, "png-bytes-before");
	snprintf(p, sizeof p, "%s/state/receiver", base);
	fs_mkdir_p(p, 0700, NULL);
	snprintf(p, sizeof p, "%s/state/receiver/groups.json", base);
	write_text(p, "{\"active\":null,\"used\":[]}\n");
	char long_rel[400];
	snprintf(long_rel, sizeof long_rel, "%s/run-5d1f0c9a8e7b4c3d2a1f0e9d8c7b6a59-before.png", long_dir);
	const char *paths[] = {"state/receiver/groups.json", long_rel, "state/missing.json", NULL};

	relay_error err = {0};
	char *index = NULL;
	/* Missing without PRESENT fails and leaves no archive. */
	assert_int_equal(evidence_archive_write(fx->arc, base, paths, 0, &index, &err), RELAY_E_NOT_FOUND);
	assert_false(fs_exists_nofollow(fx->arc));
	assert_int_equal(evidence_archive_write(fx->arc, base, paths, RELAY_ARCHIVE_PRESENT, &index, &err),
	                 RELAY_OK);
	assert_non_null(index);
	json_object *idx = jsonx_parse_str(index, NULL, 0);
	assert_int_equal(json_object_array_length(idx), 2);

	/* The format: ends right after the two zero blocks (no 10 KiB padding),
	 * mode 0600, owner 0/0, no names, typeflag '0'. */
	struct stat st;
	assert_int_equal(stat(fx->arc, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_size % 512, 0);
	char *raw = NULL;
	size_t raw_len = 0;
	assert_int_equal(fs_read_file(fx->arc, 1 << 20, &raw, &raw_len, NULL), RELAY_OK);
	const char *zero = calloc(1, 1024);
	assert_memory_equal(raw + raw_len - 1024, zero, 1024);
	assert_true(raw[raw_len - 1025] != 0 || raw_len > 2048);
	assert_memory_equal(raw, ".relay-index.json", 17);
	assert_int_equal(raw[156], '0');
	assert_int_equal(strtol(raw + 100, NULL, 8), 0600);
	assert_int_equal(strtol(raw + 108, NULL, 8), 0); /* uid */
	assert_int_equal(strtol(raw + 116, NULL, 8), 0); /* gid */
	assert_int_equal(raw[265], '\0');                /* uname empty */
	free(raw);
	free((void *)zero);

	/* Extract it with the index as the expected list. */
	char *facts = NULL;
	assert_int_equal(evidence_archive_extract(fx->arc, fx->dest, index, 0, &facts, &err), RELAY_OK);
	json_object *fj = jsonx_parse_str(facts, NULL, 0);
	assert_true(json_object_equal(fj, idx));
	snprintf(p, sizeof p, "%s/%s", fx->dest, long_rel);
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(fs_read_file(p, 1024, &data, &len, NULL), RELAY_OK);
	assert_string_equal(data, "png-bytes-before");
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	snprintf(p, sizeof p, "%s/state", fx->dest);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	/* A second extraction into the same place refuses (O_EXCL) and removes
	 * only what it created (nothing), keeping the first one's files. */
	assert_int_not_equal(evidence_archive_extract(fx->arc, fx->dest, NULL, 0, NULL, &err), RELAY_OK);
	snprintf(p, sizeof p, "%s/state/receiver/groups.json", fx->dest);
	assert_true(fs_exists_nofollow(p));
	free(data);
	free(facts);
	free(index);
	json_object_put(fj);
	json_object_put(idx);
}

static void test_write_refuses_symlink_source(void **state)
{
	fixture *fx = *state;
	char base[400], p[800];
	snprintf(base, sizeof base, "%s/base2", fx->root);
	snprintf(p, sizeof p, "%s/state", base);
	fs_mkdir_p(p, 0700, NULL);
	snprintf(p, sizeof p, "%s/state/link.json", base);
	assert_int_equal(symlink(fx->sentinel, p), 0);
	const char *paths[] = {"state/link.json", NULL};
	relay_error err = {0};
	assert_int_equal(evidence_archive_write(fx->arc, base, paths, 0, NULL, &err), RELAY_E_UNSAFE_PATH);
	assert_false(fs_exists_nofollow(fx->arc));
	const char *bad[] = {"../sentinel", NULL};
	assert_int_equal(evidence_archive_write(fx->arc, base, bad, 0, NULL, &err), RELAY_E_UNSAFE_PATH);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_refuses_absolute_path, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_dotdot, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_symlink, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_hardlink, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_device, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_fifo, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_duplicate, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_oversize, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_hash_mismatch_index, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_hash_mismatch_expected, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_truncated, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_smuggling, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refuses_link_in_destination, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_and_extract_round_trip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_refuses_symlink_source, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
