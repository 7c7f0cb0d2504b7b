/*
 * Image identities (spec/images.md §2.2): the canonical JSON byte for byte, the
 * binding, and imageId. The expected hashes were computed independently
 * (Python: json.dumps(v, sort_keys=True, separators=(",", ":"),
 * ensure_ascii=False) and hashlib.sha256), and every expected canonical
 * text is spelled out here so a reader can check it by eye.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "images/image_catalog.h"
#include "util/jsonx.h"
#include "util/sha256.h"

static json_object *parse(const char *text)
{
	char why[128];
	json_object *obj = jsonx_parse_str(text, why, sizeof why);
	if (obj == NULL)
		fail_msg("fixture does not parse: %s", why);
	return obj;
}

static char *canon(const char *json_text)
{
	json_object *v = parse(json_text);
	char *out = NULL;
	relay_error err = {0};
	assert_int_equal(image_catalog_canonical_json(v, &out, &err), RELAY_OK);
	json_object_put(v);
	return out;
}

static void test_canonical_sorts_keys_and_drops_whitespace(void **state)
{
	(void)state;
	char *t = canon("{ \"b\" : [ 3, {\"z\": true, \"a\": null} ], \"a\": \"x\", \"B\": -12 }");
	assert_string_equal(t, "{\"B\":-12,\"a\":\"x\",\"b\":[3,{\"a\":null,\"z\":true}]}");
	free(t);
	t = canon("[]");
	assert_string_equal(t, "[]");
	free(t);
	t = canon("{}");
	assert_string_equal(t, "{}");
	free(t);
	/* arrays keep their order */
	t = canon("[\"b\", \"a\", 2, 1]");
	assert_string_equal(t, "[\"b\",\"a\",2,1]");
	free(t);
}

static void test_canonical_escapes(void **state)
{
	(void)state;
	/* '"', '\\', \b \f \n \r \t as short escapes; other controls as \u00xx in
	 * lowercase; DEL, '/' and non-ASCII raw. */
	char *t =
	    canon("\"q\\\" s\\\\ \\b\\f\\n\\r\\t \\u0001\\u001f \\u007f / \\u00e9 \\u20ac \\ud83d\\ude00\"");
	assert_string_equal(t, "\"q\\\" s\\\\ \\b\\f\\n\\r\\t \\u0001\\u001f \x7f / \xc3\xa9 \xe2\x82\xac "
	                       "\xf0\x9f\x98\x80\"");
	free(t);
}

static void test_canonical_orders_keys_by_utf16(void **state)
{
	(void)state;
	/* U+FF61 (UTF-8 EF BD A1) sorts after U+1F600 in UTF-16 (D83D DE00),
	 * although its UTF-8 bytes sort first. */
	char *t = canon("{\"\\uff61\": 1, \"\\ud83d\\ude00\": 2, \"z\": 3}");
	assert_string_equal(t, "{\"z\":3,\"\xf0\x9f\x98\x80\":2,\"\xef\xbd\xa1\":1}");
	free(t);
}

static void test_canonical_refuses_floats(void **state)
{
	(void)state;
	json_object *v = parse("{\"bytes\": 1.5}");
	char *out = NULL;
	relay_error err = {0};
	assert_int_equal(image_catalog_canonical_json(v, &out, &err), RELAY_E_INVALID_ARGUMENT);
	assert_null(out);
	assert_non_null(strstr(err.message, "floating-point"));
	json_object_put(v);
}

static void test_canonical_integers(void **state)
{
	(void)state;
	char *t = canon("[0, -1, 9007199254740993, 799120]");
	assert_string_equal(t, "[0,-1,9007199254740993,799120]");
	free(t);
}

#define OWNER     "session-1"
#define ENCLOSURE "relay-login-test-3f9a1c2e"
#define BACKEND                                                                                              \
	"{\"machine\": \"machine-service\", \"endpoint\": \"http://localhost:6240\", \"store\": "            \
	"\"/Users/ada/.tart\", "                                                                             \
	"\"environmentFingerprint\": null}"
#define BINDING_TEXT                                                                                         \
	"[\"session-1\",\"relay-login-test-3f9a1c2e\",{\"endpoint\":\"http://"                               \
	"localhost:6240\",\"environmentFingerprint\":"                                                       \
	"null,\"machine\":\"machine-service\",\"store\":\"/Users/ada/.tart\"}]"
#define BINDING_HEX "6552543c405d98baddf5eac61367190d1a3568da2998e1c8eb08dfe653c64136"

#define RUN    "run-5d1f0c9a8e7b4c3d2a1f0e9d8c7b6a59"
#define SEVENS "7777777777777777777777777777777777777777777777777777777777777777"
#define DESCRIPTOR                                                                                           \
	"{\"imageId\": \"image-0000\", \"source\": \"display\", \"enclosure\": \"" ENCLOSURE "\", "          \
	"\"sessionId\": \"rec-5b1e0c9a2f44d781\", \"executionId\": \"" RUN "\", \"actionId\": \"action-" RUN \
	"\", "                                                                                               \
	"\"stepId\": \"shell-3\", \"phase\": \"after\", \"capturedAt\": \"2026-09-24T10:12:03.860Z\", "      \
	"\"sha256\": \"" SEVENS "\", \"bytes\": 799120, \"mimeType\": \"image/png\", "                       \
	"\"originalPath\": \"/p/host/images/x/original.png\"}"
#define IDENTITY_TEXT                                                                                        \
	"[\"" BINDING_HEX "\",{\"actionId\":\"action-" RUN "\",\"bytes\":799120,\"capturedAt\":"             \
	"\"2026-09-24T10:12:03.860Z\",\"enclosure\":\"" ENCLOSURE "\",\"executionId\":\"" RUN                \
	"\",\"mimeType\":"                                                                                   \
	"\"image/png\",\"phase\":\"after\",\"sessionId\":\"rec-5b1e0c9a2f44d781\",\"sha256\":\"" SEVENS      \
	"\","                                                                                                \
	"\"source\":\"display\",\"stepId\":\"shell-3\"},\"" RUN "-after.png\"]"
#define IMAGE_ID "image-3529ac44b0b81f9d0072ab7314fe23699ae07374ff573e823890f2209ed8ef5c"

static void test_binding(void **state)
{
	(void)state;
	json_object *backend = parse(BACKEND);
	char hex[65];
	relay_error err = {0};
	assert_int_equal(image_catalog_binding(OWNER, ENCLOSURE, backend, hex, &err), RELAY_OK);
	char text_hex[65];
	sha256_buffer_hex(BINDING_TEXT, strlen(BINDING_TEXT), text_hex);
	assert_string_equal(text_hex, BINDING_HEX);
	assert_string_equal(hex, BINDING_HEX);
	/* Every part binds: another owner, enclosure or backend is another binding. */
	char other[65];
	assert_int_equal(image_catalog_binding("session-2", ENCLOSURE, backend, other, &err), RELAY_OK);
	assert_string_not_equal(other, hex);
	assert_int_equal(image_catalog_binding(OWNER, "relay-login-test-00000000", backend, other, &err),
	                 RELAY_OK);
	assert_string_not_equal(other, hex);
	json_object_object_add(backend, "store", json_object_new_string("/elsewhere"));
	assert_int_equal(image_catalog_binding(OWNER, ENCLOSURE, backend, other, &err), RELAY_OK);
	assert_string_not_equal(other, hex);
	json_object_put(backend);
}

static void test_image_id(void **state)
{
	(void)state;
	json_object *d = parse(DESCRIPTOR);
	char id[IMAGE_CATALOG_ID_LEN + 1];
	relay_error err = {0};
	assert_int_equal(image_catalog_image_id(BINDING_HEX, d, RUN "-after.png", id, &err), RELAY_OK);
	char text_hex[65];
	sha256_buffer_hex(IDENTITY_TEXT, strlen(IDENTITY_TEXT), text_hex);
	assert_string_equal(id + 6, text_hex);
	assert_string_equal(id, IMAGE_ID);
	assert_true(image_catalog_id_valid(id));

	/* Delivery facts are not identity: originalPath, retrievedAt and the
	 * imageId itself change nothing. */
	json_object_object_add(d, "originalPath", json_object_new_string("/other/place"));
	json_object_object_add(d, "retrievedAt", json_object_new_string("2030-01-01T00:00:00.000Z"));
	json_object_object_add(d, "imageId", json_object_new_string(IMAGE_ID));
	char again[IMAGE_CATALOG_ID_LEN + 1];
	assert_int_equal(image_catalog_image_id(BINDING_HEX, d, RUN "-after.png", again, &err), RELAY_OK);
	assert_string_equal(again, IMAGE_ID);

	/* A changed file is a new image; so is another file name, or none. */
	json_object_object_add(d, "bytes", json_object_new_int64(799121));
	assert_int_equal(image_catalog_image_id(BINDING_HEX, d, RUN "-after.png", again, &err), RELAY_OK);
	assert_string_not_equal(again, IMAGE_ID);
	json_object_object_add(d, "bytes", json_object_new_int64(799120));
	assert_int_equal(image_catalog_image_id(BINDING_HEX, d, RUN "-before.png", again, &err), RELAY_OK);
	assert_string_not_equal(again, IMAGE_ID);
	assert_int_equal(image_catalog_image_id(BINDING_HEX, d, NULL, again, &err), RELAY_OK);
	assert_string_not_equal(again, IMAGE_ID);
	json_object_put(d);
}

static void test_id_valid(void **state)
{
	(void)state;
	assert_true(image_catalog_id_valid(IMAGE_ID));
	assert_false(
	    image_catalog_id_valid("image-3529AC44b0b81f9d0072ab7314fe23699ae07374ff573e823890f2209ed8ef5c"));
	assert_false(image_catalog_id_valid("image-3529ac"));
	assert_false(
	    image_catalog_id_valid("img-3529ac44b0b81f9d0072ab7314fe23699ae07374ff573e823890f2209ed8ef5c0"));
	assert_false(image_catalog_id_valid(NULL));
	assert_string_equal(image_catalog_ext("image/png"), "png");
	assert_string_equal(image_catalog_ext("image/jpeg"), "jpg");
	assert_string_equal(image_catalog_ext("image/webp"), "webp");
	assert_null(image_catalog_ext("image/gif"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_canonical_sorts_keys_and_drops_whitespace),
	    cmocka_unit_test(test_canonical_escapes),
	    cmocka_unit_test(test_canonical_orders_keys_by_utf16),
	    cmocka_unit_test(test_canonical_refuses_floats),
	    cmocka_unit_test(test_canonical_integers),
	    cmocka_unit_test(test_binding),
	    cmocka_unit_test(test_image_id),
	    cmocka_unit_test(test_id_valid),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
