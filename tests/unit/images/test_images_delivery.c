/*
 * Image delivery without the MCP layer (images/image_*.h): the checks of
 * a receipt's imageEvidence and snapshot plan, display identities recorded
 * once in the catalog, the reference selector's refusals (unknown, foreign
 * binding, a recording the guest does not own, a closed guest), a
 * reference to an earlier recording resolved and delivered from the host
 * copy (published, presented with a real PNG, its delivery receipt
 * written), and the imageDelivery object. Real files in a temporary folder;
 * no guest is reached (the paths that would reach one are not taken).
 */
#include <dirent.h>
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

#include "../common/evidence_fixture.h"
#include "images/image_catalog.h"
#include "images/image_context.h"
#include "images/image_identity.h"
#include "images/image_result.h"
#include "images/image_selectors.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

#define SID     "rec-0123456789abcdef"
#define OLD_SID "rec-fedcba9876543210"
#define EID     "run-00000000000000000000000000000001"
#define PURPOSE "relay-demo-1234abcd"

typedef struct fixture {
	char root[256];
	char evidence[320];     /* the current recording */
	char old_evidence[320]; /* an earlier one */
	char session_dir[320];
	char catalog[400];
	image_delivery_result out;
	dctx c;
} fixture;

/* A delivery context as dctx_init() fills it from a guest, by hand. */
static void context_for(fixture *f, dctx *c, const char *owner, const char *evidence)
{
	memset(c, 0, sizeof *c);
	c->out = &f->out;
	c->deadline_mono_ms = clock_monotonic_ms() + IMAGE_DELIVERY_DEADLINE_MS;
	c->attempts_left = IMAGE_DELIVERY_ATTEMPTS;
	c->owner = strdup(owner);
	c->session_dir = strdup(f->session_dir);
	c->name = strdup("demo");
	c->purpose = strdup(PURPOSE);
	c->guest_root = strdup("/var/tmp/20260924-mcp-relay-" PURPOSE);
	c->evidence = strdup(evidence);
	c->recording_session_id = strdup(SID);
	c->backend = jsonx_parse_str("{\"machine\":\"machine-fake\",\"endpoint\":null,\"store\":null,"
	                             "\"environmentFingerprint\":null}",
	                             NULL, 0);
	char prev[600];
	snprintf(prev, sizeof prev, "[{\"path\":\"%s\",\"sessionId\":\"%s\"}]", f->old_evidence, OLD_SID);
	c->previous = jsonx_parse_str(prev, NULL, 0);
	c->extractions = json_object_new_array();
	c->staged = true;
	c->catalog_dir = strdup(f->catalog);
	relay_error err = {0};
	assert_int_equal(image_catalog_binding(c->owner, c->purpose, c->backend, c->binding_hex, &err),
	                 RELAY_OK);
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof *f);
	snprintf(f->root, sizeof f->root, "/tmp/relay-delivery-images-XXXXXX");
	if (mkdtemp(f->root) == NULL)
		return -1;
	snprintf(f->evidence, sizeof f->evidence, "%s/relay-evidence/%s", f->root, PURPOSE);
	snprintf(f->old_evidence, sizeof f->old_evidence, "%s/relay-evidence/%s-1", f->root, PURPOSE);
	snprintf(f->session_dir, sizeof f->session_dir, "%s/session", f->root);
	snprintf(f->catalog, sizeof f->catalog, "%s/image-catalog/%s", f->session_dir, PURPOSE);
	fs_mkdir_p(f->catalog, 0700, NULL);
	context_for(f, &f->c, "project-0123", f->evidence);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	dctx_free(&f->c);
	image_delivery_result_clear(&f->out);
	fs_remove_tree(f->root, NULL);
	free(f);
	return 0;
}

/* A receipt's snapshot descriptor (spec/guest.md §7.7). */
static json_object *snapshot(const char *sid, const char *phase, const char *sha256, int64_t bytes)
{
	json_object *s = json_object_new_object();
	jsonx_add_str(s, "sessionId", sid);
	jsonx_add_str(s, "executionId", EID);
	jsonx_add_str(s, "actionId", "action-" EID);
	jsonx_add_str(s, "stepId", "shell-1");
	jsonx_add_str(s, "phase", phase);
	jsonx_add_str(s, "capturedAt", "2026-09-24T10:12:03.860Z");
	jsonx_add_str(s, "sha256", sha256);
	jsonx_add_int(s, "bytes", bytes);
	jsonx_add_str(s, "mimeType", "image/png");
	jsonx_add_str(s, "fileName", strcmp(phase, "after") == 0 ? "run-1-after.png" : "run-1-before.png");
	return s;
}

#define SHA7 "7777777777777777777777777777777777777777777777777777777777777777"

static void test_receipt_checks(void **state)
{
	(void)state;
	char why[200];
	json_object *good = snapshot(SID, "after", SHA7, 1234);
	assert_true(idl_snapshot_valid(good, why, sizeof why));
	json_object *bad = snapshot(SID, "middle", SHA7, 1234);
	assert_false(idl_snapshot_valid(bad, why, sizeof why));
	assert_non_null(strstr(why, "phase"));
	json_object_put(bad);
	bad = snapshot(SID, "after", SHA7, 0);
	assert_false(idl_snapshot_valid(bad, why, sizeof why));
	assert_non_null(strstr(why, "bytes"));
	json_object_put(bad);
	bad = snapshot(SID, "after", SHA7, 10);
	json_object_object_del(bad, "fileName");
	jsonx_add_str(bad, "fileName", "../escape.png");
	assert_false(idl_snapshot_valid(bad, why, sizeof why));
	assert_non_null(strstr(why, "fileName"));
	json_object_put(bad);

	/* imageEvidence: at most two snapshots, each phase once, of this run. */
	json_object *ev = json_object_new_object();
	jsonx_add_str(ev, "status", "available");
	json_object *snaps = json_object_new_array();
	json_object_array_add(snaps, snapshot(SID, "before", SHA7, 10));
	json_object_array_add(snaps, json_object_get(good));
	jsonx_add(ev, "snapshots", snaps);
	assert_true(idl_image_evidence_valid(ev, SID, EID, why, sizeof why));
	assert_ptr_equal(idl_snapshot_for_phase(ev, "after"), good);
	assert_false(idl_image_evidence_valid(ev, OLD_SID, EID, why, sizeof why));
	assert_non_null(strstr(why, "another execution or recording"));
	json_object_array_add(snaps, snapshot(SID, "after", SHA7, 11));
	assert_false(idl_image_evidence_valid(ev, SID, EID, why, sizeof why));
	assert_non_null(strstr(why, "at most two"));
	json_object_array_del_idx(snaps, 0, 1);
	assert_false(idl_image_evidence_valid(ev, SID, EID, why, sizeof why));
	assert_non_null(strstr(why, "twice"));
	json_object_put(ev);
	json_object_put(good);
}

static void test_snapshot_plan(void **state)
{
	fixture *f = *state;
	assert_true(idl_plan_captures(&f->c, NULL, "after"));
	assert_null(f->out.status);
	json_object *first = jsonx_parse_str("{\"snapshots\":{\"group\":{\"phase\":\"first\"}}}", NULL, 0);
	assert_true(idl_plan_captures(&f->c, first, "before"));
	assert_false(idl_plan_captures(&f->c, first, "after"));
	assert_string_equal(f->out.status, IMAGE_STATUS_NOT_REQUESTED);
	assert_string_equal(f->out.diagnostic, IMAGE_DIAG_PLAN);
	json_object_put(first);
	image_delivery_result_clear(&f->out);
	json_object *off = jsonx_parse_str("{\"capture\":null}", NULL, 0);
	assert_false(idl_plan_captures(&f->c, off, "after"));
	assert_string_equal(f->out.diagnostic, IMAGE_DIAG_SNAPSHOTS_OFF);
	json_object_put(off);
}

static void test_display_identity_recorded_once(void **state)
{
	fixture *f = *state;
	json_object *snap = snapshot(SID, "after", SHA7, 1234);
	json_object *entry = NULL;
	relay_error err = {0};
	json_object *image = idl_display_identity(&f->c, f->evidence, snap, true, &entry, &err);
	assert_non_null(image);
	const char *id = jsonx_get_str(image, "imageId");
	assert_true(image_catalog_id_valid(id));
	char want[600];
	snprintf(want, sizeof want, "%s/host/images/%s/original.png", f->evidence, id);
	assert_string_equal(jsonx_get_str(image, "originalPath"), want);
	assert_string_equal(jsonx_get_str(image, "source"), "display");
	assert_string_equal(jsonx_get_str(image, "enclosure"), PURPOSE);
	snprintf(want, sizeof want, "%s/%s.json", f->catalog, id);
	assert_true(fs_exists_nofollow(want));
	assert_string_equal(jsonx_get_str(entry, "remote"), "/var/tmp/20260924-mcp-relay-" PURPOSE
	                                                    "/state/snapshots/" SID "/run-1-after.png");

	/* The same snapshot again: the same identity, the entry verified. */
	json_object *again = idl_display_identity(&f->c, f->evidence, snap, true, NULL, &err);
	assert_non_null(again);
	assert_string_equal(jsonx_get_str(again, "imageId"), id);
	/* Other bytes: another image. */
	json_object *other = snapshot(SID, "after", SHA7, 1235);
	json_object *third = idl_display_identity(&f->c, f->evidence, other, false, NULL, &err);
	assert_non_null(third);
	assert_string_not_equal(jsonx_get_str(third, "imageId"), id);
	/* A malformed descriptor is a protocol error, nothing recorded. */
	json_object_object_del(other, "phase");
	assert_null(idl_display_identity(&f->c, f->evidence, other, true, NULL, &err));
	assert_int_equal(err.code, RELAY_E_PROTOCOL);
	json_object_put(third);
	json_object_put(other);
	json_object_put(again);
	json_object_put(image);
	json_object_put(entry);
	json_object_put(snap);
}

static json_object *reference(const char *id)
{
	json_object *t = json_object_new_object();
	jsonx_add_str(t, "source", "reference");
	jsonx_add_str(t, "imageId", id);
	return t;
}

static void test_reference_refusals(void **state)
{
	fixture *f = *state;
	relay_error err = {0};
	/* Unknown in every catalog of the session. */
	json_object *t = reference("image-0000000000000000000000000000000000000000000000000000000000000000");
	idl_resolve_reference(&f->c, t);
	assert_string_equal(f->out.status, IMAGE_STATUS_IMAGE_MISSING);
	json_object_put(t);
	image_delivery_result_clear(&f->out);

	/* Issued for another session's binding. */
	dctx foreign;
	context_for(f, &foreign, "project-9999", f->evidence);
	json_object *snap = snapshot(SID, "after", SHA7, 1234);
	json_object *image = idl_display_identity(&foreign, f->evidence, snap, true, NULL, &err);
	assert_non_null(image);
	t = reference(jsonx_get_str(image, "imageId"));
	idl_resolve_reference(&f->c, t);
	assert_string_equal(f->out.status, IMAGE_STATUS_UNAUTHORIZED_REFERENCE);
	assert_non_null(strstr(f->out.diagnostic, "another session, guest or backend"));
	json_object_put(t);
	json_object_put(image);
	dctx_free(&foreign);
	image_delivery_result_clear(&f->out);

	/* Recorded for a recording this guest does not own. */
	char elsewhere[400];
	snprintf(elsewhere, sizeof elsewhere, "%s/somewhere-else", f->root);
	json_object *snap2 = snapshot(SID, "before", SHA7, 99);
	image = idl_display_identity(&f->c, elsewhere, snap2, true, NULL, &err);
	assert_non_null(image);
	t = reference(jsonx_get_str(image, "imageId"));
	idl_resolve_reference(&f->c, t);
	assert_string_equal(f->out.status, IMAGE_STATUS_UNAUTHORIZED_REFERENCE);
	assert_non_null(strstr(f->out.diagnostic, "does not own"));
	json_object_put(t);
	json_object_put(image);
	image_delivery_result_clear(&f->out);

	/* A closed guest: the image is named, its original read with host tools. */
	image = idl_display_identity(&f->c, f->evidence, snap, true, NULL, &err);
	t = reference(jsonx_get_str(image, "imageId"));
	f->c.closed = true;
	idl_resolve_reference(&f->c, t);
	assert_string_equal(f->out.status, IMAGE_STATUS_STALE_REFERENCE);
	assert_string_equal(f->out.diagnostic, IMAGE_DIAG_CLOSED);
	assert_string_equal(jsonx_get_str(f->out.image, "imageId"), jsonx_get_str(image, "imageId"));
	json_object_put(t);
	json_object_put(image);
	json_object_put(snap);
	json_object_put(snap2);
}

/* Counts the delivery receipts in an image folder. */
static int receipts_in(const char *dir)
{
	int n = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		n += strncmp(e->d_name, "delivery-", 9) == 0;
	if (d)
		closedir(d);
	return n;
}

static void test_reference_to_an_earlier_recording_is_delivered_from_the_host(void **state)
{
	fixture *f = *state;
	relay_error err = {0};
	fx_mem png = fx_png(0x3366cc);
	char hex[SHA256_HEX_LEN + 1];
	sha256_buffer_hex(png.data, png.len, hex);
	/* The earlier recording holds the snapshot where the state pull put it. */
	char path[700];
	snprintf(path, sizeof path, "%s/state/snapshots/%s", f->old_evidence, OLD_SID);
	assert_int_equal(fs_mkdir_p(path, 0700, &err), RELAY_OK);
	snprintf(path, sizeof path, "%s/state/snapshots/%s/run-1-after.png", f->old_evidence, OLD_SID);
	assert_int_equal(fs_write_exclusive(path, png.data, png.len, 0600, &err), RELAY_OK);
	json_object *snap = snapshot(OLD_SID, "after", hex, (int64_t)png.len);
	json_object *image = idl_display_identity(&f->c, f->old_evidence, snap, true, NULL, &err);
	assert_non_null(image);
	const char *id = jsonx_get_str(image, "imageId");

	json_object *t = reference(id);
	idl_resolve_reference(&f->c, t);
	assert_string_equal(f->out.status, IMAGE_STATUS_ATTACHED);
	assert_null(f->out.diagnostic);
	assert_non_null(f->out.preview_base64);
	assert_string_equal(f->out.preview_mime, "image/png");
	assert_non_null(f->out.presentation);
	assert_string_equal(jsonx_get_str(f->out.image, "originalPath"),
	                    jsonx_get_str(image, "originalPath"));
	/* Published beside the earlier recording, with its receipt. */
	char sum[SHA256_HEX_LEN + 1];
	uint64_t bytes = 0;
	assert_int_equal(sha256_file_hex(jsonx_get_str(image, "originalPath"), sum, &bytes, &err), RELAY_OK);
	assert_string_equal(sum, hex);
	char *dir = fs_dirname(jsonx_get_str(image, "originalPath"));
	assert_int_equal(receipts_in(dir), 1);

	/* The answer's object, and the preview handed to a result. */
	json_object *d = image_delivery_json(&f->out);
	assert_string_equal(jsonx_get_str(d, "status"), "attached");
	char *phrase = image_delivery_phrase(d, "saved image");
	assert_int_equal(strncmp(phrase, "saved image attached (image-", 28), 0);
	char *b64 = NULL, *mime = NULL;
	assert_true(image_delivery_take_preview(&f->out, &b64, &mime));
	assert_non_null(b64);
	assert_string_equal(mime, "image/png");
	assert_null(f->out.preview_base64);
	free(b64);
	free(mime);
	free(phrase);
	json_object_put(d);
	free(dir);
	json_object_put(t);
	json_object_put(image);
	json_object_put(snap);
	free(png.data);
}

static void test_delivery_object(void **state)
{
	(void)state;
	image_delivery_result r;
	memset(&r, 0, sizeof r);
	/* Ended without a status: the fixed unexpected transfer failure. */
	json_object *d = image_delivery_json(&r);
	assert_string_equal(jsonx_get_str(d, "status"), IMAGE_STATUS_TRANSFER_FAILED);
	assert_string_equal(jsonx_get_str(d, "diagnostic"), IMAGE_DIAG_UNEXPECTED);
	char *headline = image_delivery_headline(d, true);
	assert_non_null(strstr(headline, "\"executionFailed\":true"));
	assert_int_equal(strncmp(headline, "{\"imageDelivery\":{\"status\":\"transfer-failed\"", 44), 0);
	free(headline);
	json_object_put(d);
	assert_true(image_delivery_status_is_error(NULL));
	assert_true(image_delivery_status_is_error(IMAGE_STATUS_STALE_REFERENCE));
	assert_false(image_delivery_status_is_error(IMAGE_STATUS_PENDING));
	assert_false(image_delivery_status_is_error(IMAGE_STATUS_NOT_REQUESTED));
	/* No preview: nothing handed over, nothing changed. */
	char *b64 = NULL, *mime = NULL;
	assert_true(image_delivery_take_preview(&r, &b64, &mime));
	assert_null(b64);
	assert_null(mime);
	json_object *nr = jsonx_parse_str("{\"status\":\"not-requested\"}", NULL, 0);
	char *phrase = image_delivery_phrase(nr, "after-image");
	assert_string_equal(phrase, "no after-image (not requested)");
	free(phrase);
	json_object_put(nr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_receipt_checks),
	    cmocka_unit_test_setup_teardown(test_snapshot_plan, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_display_identity_recorded_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reference_refusals, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reference_to_an_earlier_recording_is_delivered_from_the_host,
	                                    setup, teardown),
	    cmocka_unit_test(test_delivery_object),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
