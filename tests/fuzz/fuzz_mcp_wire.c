/*
 * The MCP layer's JSON parser (mcp/wire.c) on any bytes of a line.
 * Invariants: a value it accepts serialises to valid UTF-8 that it accepts
 * again; an id's text (wire_id_text) parses back to an id with the same
 * text and the same key (ids are echoed exactly, spec/mcp.md §2.1).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "fuzz.h"
#include "mcp/wire.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

static void check_id(json_object *id)
{
	char *text = wire_id_text(id);
	char *key = wire_id_key(id);
	if (text == NULL || key == NULL)
		fuzz_fail("wire_id_text or wire_id_key returned NULL");
	if (!utf8_valid(text, strlen(text)))
		fuzz_fail("an id's text is not valid UTF-8: %s", text);
	json_object *again = NULL;
	bool is_null = false;
	if (wire_parse(text, strlen(text), &again, &is_null, NULL, 0) != WIRE_OK || !wire_is_id(again))
		fuzz_fail("an id's text does not parse back as an id: %s", text);
	char *text2 = wire_id_text(again);
	char *key2 = wire_id_key(again);
	if (text2 == NULL || key2 == NULL || strcmp(text, text2) != 0 || strcmp(key, key2) != 0)
		fuzz_fail("an id does not round-trip: %s became %s", text, text2 ? text2 : "(null)");
	free(text2);
	free(key2);
	json_object_put(again);
	free(text);
	free(key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_object *value = NULL;
	bool is_null = false;
	char why[160];
	wire_status st = wire_parse((const char *)data, size, &value, &is_null, why, sizeof why);
	if (st != WIRE_OK) {
		if (value != NULL)
			fuzz_fail("a failed parse left a value");
		if (why[0] == '\0')
			fuzz_fail("a failed parse gave no reason");
		return 0;
	}
	strbuf sb = STRBUF_INIT;
	jsonx_write(&sb, value, 0);
	if (!strbuf_ok(&sb))
		fuzz_fail("no memory serialising %zu bytes", size);
	if (!utf8_valid(sb.data, sb.len))
		fuzz_fail("an accepted value serialises to invalid UTF-8");
	json_object *again = NULL;
	bool again_null = false;
	if (wire_parse(sb.data, sb.len, &again, &again_null, why, sizeof why) != WIRE_OK)
		fuzz_fail("the serialisation of an accepted value is refused: %s", why);
	/* (A number past the double range serialises as null: not checked.) */
	json_object_put(again);
	strbuf_free(&sb);

	if (wire_is_id(value))
		check_id(value);
	json_object *id = NULL;
	if (json_object_is_type(value, json_type_object) && json_object_object_get_ex(value, "id", &id) &&
	    wire_is_id(id))
		check_id(id);
	json_object_put(value);
	return 0;
}
