/*
 * The private image catalog and publication of originals (spec/images.md §2.3,
 * §5): entries appear whole and exactly once, an existing entry is verified
 * and never replaced, a tampered one is refused, concurrent recorders agree
 * on one file; originals are published by hard link from a staging folder
 * that disappears, an existing original is never replaced by other bytes,
 * and delivery receipts land beside them. Real files in a temporary folder.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
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

#include "images/image_catalog.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

typedef struct fixture {
	char root[256];
	char catalog[320];
	char image_dir[400];
} fixture;

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof *f);
	snprintf(f->root, sizeof f->root, "/tmp/relay-imgcat-XXXXXX");
	if (mkdtemp(f->root) == NULL)
		return -1;
	snprintf(f->catalog, sizeof f->catalog, "%s/image-catalog/relay-demo-1234abcd", f->root);
	snprintf(f->image_dir, sizeof f->image_dir, "%s/evidence/host/images/img", f->root);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	fs_remove_tree(f->root, NULL);
	free(f);
	return 0;
}

#define BINDING "6552543c405d98baddf5eac61367190d1a3568da2998e1c8eb08dfe653c64136"

/* A valid entry for a display image with `bytes`. */
static json_object *make_entry(const char *root, int64_t bytes)
{
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "imageId", "");
	jsonx_add_str(d, "source", "display");
	jsonx_add_str(d, "enclosure", "relay-demo-1234abcd");
	jsonx_add_str(d, "sessionId", "rec-0123456789abcdef");
	jsonx_add_str(d, "executionId", "run-00000000000000000000000000000001");
	jsonx_add_str(d, "actionId", "action-run-00000000000000000000000000000001");
	jsonx_add_str(d, "phase", "after");
	jsonx_add_str(d, "capturedAt", "2026-09-24T10:12:03.860Z");
	jsonx_add_str(d, "sha256", "7777777777777777777777777777777777777777777777777777777777777777");
	jsonx_add_int(d, "bytes", bytes);
	jsonx_add_str(d, "mimeType", "image/png");
	char id[IMAGE_CATALOG_ID_LEN + 1];
	relay_error err = {0};
	assert_int_equal(image_catalog_image_id(BINDING, d, "run-1-after.png", id, &err), RELAY_OK);
	jsonx_add_str(d, "imageId", id);
	json_object *e = json_object_new_object();
	jsonx_add_str(e, "binding", BINDING);
	jsonx_add(e, "descriptor", d);
	jsonx_add_str(e, "fileName", "run-1-after.png");
	char buf[512];
	snprintf(buf, sizeof buf, "%s/evidence", root);
	jsonx_add_str(e, "recording", buf);
	jsonx_add_str(e, "remote", "/var/tmp/R/state/snapshots/rec-0123456789abcdef/run-1-after.png");
	jsonx_add_str(e, "approvedRoot", "/var/tmp/R/state/snapshots/rec-0123456789abcdef");
	snprintf(buf, sizeof buf, "%s/evidence/host/images/%s/original.png", root, id);
	jsonx_add_str(e, "local", buf);
	return e;
}

static const char *id_of(json_object *entry)
{
	return jsonx_get_str(jsonx_get_obj(entry, "descriptor"), "imageId");
}

/* The file's text, owned by the caller. Returned through strdup: GCC 12 at
 * -O2 (README command 1 builds RelWithDebInfo) takes fs_read_file's result
 * for a pointer to this function's local `data` once inlined and refuses a
 * caller's write through it (-Wdangling-pointer, an error here). */
static char *read_text(const char *path)
{
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(fs_read_file(path, 1 << 20, &data, &len, NULL), RELAY_OK);
	char *text = strdup(data);
	assert_non_null(text);
	free(data);
	return text;
}

static char *entry_path(fixture *f, const char *id)
{
	char *p = malloc(600);
	snprintf(p, 600, "%s/%s.json", f->catalog, id);
	return p;
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	if (d)
		closedir(d);
	return n;
}

static void test_record_once_then_verify(void **state)
{
	fixture *f = *state;
	json_object *e = make_entry(f->root, 799120);
	json_object *stored = NULL;
	relay_error err = {0};
	assert_int_equal(image_catalog_put(f->catalog, e, &stored, &err), RELAY_OK);
	assert_non_null(stored);
	json_object_put(stored);
	char *path = entry_path(f, id_of(e));
	struct stat sb;
	assert_int_equal(lstat(path, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_int_equal(sb.st_nlink, 1); /* the temporary link is gone */
	assert_int_equal(count_entries(f->catalog), 1);
	char *before = read_text(path);

	/* Recording the same identity again verifies and keeps the file. */
	stored = NULL;
	assert_int_equal(image_catalog_put(f->catalog, e, &stored, &err), RELAY_OK);
	assert_string_equal(id_of(stored), id_of(e));
	json_object_put(stored);
	/* A later derivation with another recording (after a reset) keeps the
	 * first recording: the entry is never replaced. */
	json_object *moved = make_entry(f->root, 799120);
	jsonx_add_str(moved, "recording", "/elsewhere/evidence");
	stored = NULL;
	assert_int_equal(image_catalog_put(f->catalog, moved, &stored, &err), RELAY_OK);
	assert_string_not_equal(jsonx_get_str(stored, "recording"), "/elsewhere/evidence");
	json_object_put(stored);
	json_object_put(moved);
	char *after = read_text(path);
	assert_string_equal(before, after);
	assert_int_equal(count_entries(f->catalog), 1);

	json_object *got = NULL;
	assert_int_equal(image_catalog_get(f->catalog, id_of(e), &got, &err), RELAY_OK);
	assert_string_equal(jsonx_get_str(got, "remote"), jsonx_get_str(e, "remote"));
	json_object_put(got);
	free(before);
	free(after);
	free(path);
	json_object_put(e);
}

static void test_disagreeing_derivation_is_refused(void **state)
{
	fixture *f = *state;
	json_object *e = make_entry(f->root, 1000);
	relay_error err = {0};
	assert_int_equal(image_catalog_put(f->catalog, e, NULL, &err), RELAY_OK);
	char *path = entry_path(f, id_of(e));
	char *before = read_text(path);
	/* Same imageId, but the guest path differs: integrity-failed, and the
	 * recorded entry stays as it was. */
	json_object *other = make_entry(f->root, 1000);
	jsonx_add_str(other, "remote", "/var/tmp/R/state/snapshots/rec-0123456789abcdef/elsewhere.png");
	json_object *stored = NULL;
	assert_int_equal(image_catalog_put(f->catalog, other, &stored, &err), RELAY_E_INTEGRITY);
	assert_null(stored);
	assert_non_null(strstr(err.message, "remote"));
	assert_non_null(strstr(err.message, "never replaced"));
	char *after = read_text(path);
	assert_string_equal(before, after);
	free(before);
	free(after);
	free(path);
	json_object_put(other);
	json_object_put(e);
}

static void test_entry_that_does_not_derive_its_id_is_refused(void **state)
{
	fixture *f = *state;
	json_object *e = make_entry(f->root, 1000);
	/* A descriptor whose bytes were changed after the id was computed. */
	json_object_object_add(jsonx_get_obj(e, "descriptor"), "bytes", json_object_new_int64(1001));
	relay_error err = {0};
	assert_int_equal(image_catalog_put(f->catalog, e, NULL, &err), RELAY_E_INTEGRITY);
	assert_false(fs_is_dir(f->catalog) && count_entries(f->catalog) > 0);
	json_object_put(e);
}

static void test_tampered_entry_is_not_trusted(void **state)
{
	fixture *f = *state;
	json_object *e = make_entry(f->root, 4242);
	relay_error err = {0};
	assert_int_equal(image_catalog_put(f->catalog, e, NULL, &err), RELAY_OK);
	char *path = entry_path(f, id_of(e));
	char *text = read_text(path);
	char *p = strstr(text, "\"bytes\": 4242");
	assert_non_null(p);
	p[12] = '3'; /* bytes 4243 */
	assert_int_equal(fs_write_durable(path, text, strlen(text), 0600, NULL), RELAY_OK);
	json_object *got = NULL;
	assert_int_equal(image_catalog_get(f->catalog, id_of(e), &got, &err), RELAY_E_INTEGRITY);
	assert_null(got);
	/* ... and recording the true identity again refuses to trust it. */
	assert_int_equal(image_catalog_put(f->catalog, e, NULL, &err), RELAY_E_INTEGRITY);
	/* unknown ids are not found */
	assert_int_equal(
	    image_catalog_get(f->catalog,
	                      "image-0000000000000000000000000000000000000000000000000000000000000000", &got,
	                      &err),
	    RELAY_E_NOT_FOUND);
	free(text);
	free(path);
	json_object_put(e);
}

typedef struct racer {
	const char *catalog;
	json_object *entry;
	relay_status result;
} racer;

static void *race(void *arg)
{
	racer *r = arg;
	relay_error err = {0};
	json_object *stored = NULL;
	r->result = image_catalog_put(r->catalog, r->entry, &stored, &err);
	json_object_put(stored);
	return NULL;
}

static void test_concurrent_recorders_agree(void **state)
{
	fixture *f = *state;
	enum { N = 8 };
	pthread_t threads[N];
	racer racers[N];
	for (int i = 0; i < N; i++) {
		racers[i].catalog = f->catalog;
		racers[i].entry = make_entry(f->root, 777);
		racers[i].result = RELAY_E_INTERNAL;
	}
	for (int i = 0; i < N; i++)
		assert_int_equal(pthread_create(&threads[i], NULL, race, &racers[i]), 0);
	for (int i = 0; i < N; i++)
		pthread_join(threads[i], NULL);
	for (int i = 0; i < N; i++) {
		assert_int_equal(racers[i].result, RELAY_OK);
		json_object_put(racers[i].entry);
	}
	assert_int_equal(count_entries(f->catalog), 1);
	/* no temporary file left behind */
	DIR *d = opendir(f->catalog);
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		assert_true(strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		            e->d_name[0] != '.');
	closedir(d);
}

static void stage_bytes(image_catalog_staging *s, const char *bytes)
{
	int fd = open(s->file, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, bytes, strlen(bytes)), (ssize_t)strlen(bytes));
	close(fd);
}

static void test_publication_by_hard_link(void **state)
{
	fixture *f = *state;
	const char *bytes = "not really a png, but bytes are bytes";
	char sha[65];
	sha256_buffer_hex(bytes, strlen(bytes), sha);
	image_catalog_staging s;
	relay_error err = {0};
	assert_int_equal(image_catalog_staging_open(f->image_dir, "png", &s, &err), RELAY_OK);
	assert_true(fs_is_dir(s.dir));
	assert_non_null(strstr(s.dir, "/.relay-image-"));
	char staging_dir[600];
	snprintf(staging_dir, sizeof staging_dir, "%s", s.dir);
	stage_bytes(&s, bytes);
	bool already = true;
	assert_int_equal(image_catalog_staging_publish(&s, sha, strlen(bytes), &already, &err), RELAY_OK);
	assert_false(already);
	char published[600];
	snprintf(published, sizeof published, "%s/original.png", f->image_dir);
	struct stat sb;
	assert_int_equal(lstat(published, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	assert_int_equal(sb.st_nlink, 1); /* the staging folder is gone */
	assert_false(fs_exists_nofollow(staging_dir));
	image_catalog_staging_close(&s);

	bool present = false;
	assert_int_equal(
	    image_catalog_original_check(f->image_dir, "png", sha, strlen(bytes), &present, &err), RELAY_OK);
	assert_true(present);

	/* The same bytes again: accepted, nothing replaced. */
	assert_int_equal(image_catalog_staging_open(f->image_dir, "png", &s, &err), RELAY_OK);
	stage_bytes(&s, bytes);
	assert_int_equal(image_catalog_staging_publish(&s, sha, strlen(bytes), &already, &err), RELAY_OK);
	assert_true(already);
	image_catalog_staging_close(&s);

	/* Other bytes under the same name are never published over it. */
	const char *other = "other bytes entirely, same length?";
	char other_sha[65];
	sha256_buffer_hex(other, strlen(other), other_sha);
	assert_int_equal(image_catalog_staging_open(f->image_dir, "png", &s, &err), RELAY_OK);
	stage_bytes(&s, other);
	assert_int_equal(image_catalog_staging_publish(&s, other_sha, strlen(other), NULL, &err),
	                 RELAY_E_INTEGRITY);
	assert_non_null(strstr(err.message, "never replaced"));
	image_catalog_staging_close(&s);
	char *text = read_text(published);
	assert_string_equal(text, bytes);
	free(text);
	assert_int_equal(
	    image_catalog_original_check(f->image_dir, "png", other_sha, strlen(other), &present, &err),
	    RELAY_E_INTEGRITY);
	/* only original.png is left in the image folder */
	assert_int_equal(count_entries(f->image_dir), 1);
}

static void test_staged_bytes_must_match_identity(void **state)
{
	fixture *f = *state;
	image_catalog_staging s;
	relay_error err = {0};
	assert_int_equal(image_catalog_staging_open(f->image_dir, "webp", &s, &err), RELAY_OK);
	stage_bytes(&s, "truncated");
	assert_int_equal(
	    image_catalog_staging_publish(
	        &s, "7777777777777777777777777777777777777777777777777777777777777777", 9, NULL, &err),
	    RELAY_E_INTEGRITY);
	assert_non_null(strstr(err.message, "discarded"));
	image_catalog_staging_close(&s);
	char published[600];
	snprintf(published, sizeof published, "%s/original.webp", f->image_dir);
	assert_false(fs_exists_nofollow(published));
	assert_int_equal(count_entries(f->image_dir), 0);
	bool present = true;
	assert_int_equal(image_catalog_original_check(f->image_dir, "webp", "00", 9, &present, &err),
	                 RELAY_OK);
	assert_false(present);
}

static void test_delivery_receipts(void **state)
{
	fixture *f = *state;
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "status", "downloaded");
	jsonx_add_str(r, "at", "2026-09-24T10:12:03.860Z");
	char *p1 = NULL, *p2 = NULL;
	relay_error err = {0};
	assert_int_equal(image_catalog_receipt_write(f->image_dir, r, &p1, &err), RELAY_OK);
	assert_int_equal(image_catalog_receipt_write(f->image_dir, r, &p2, &err), RELAY_OK);
	assert_string_not_equal(p1, p2);
	assert_non_null(strstr(p1, "/delivery-"));
	json_object *back = NULL;
	assert_int_equal(fs_read_json(p1, 1 << 20, &back, &err), RELAY_OK);
	assert_string_equal(jsonx_get_str(back, "status"), "downloaded");
	json_object_put(back);
	free(p1);
	free(p2);
	json_object_put(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_record_once_then_verify, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_disagreeing_derivation_is_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_entry_that_does_not_derive_its_id_is_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_tampered_entry_is_not_trusted, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent_recorders_agree, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_publication_by_hard_link, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_staged_bytes_must_match_identity, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_delivery_receipts, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
