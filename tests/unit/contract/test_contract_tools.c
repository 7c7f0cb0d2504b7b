/*
 * The embedded contract (contract/contract.h): the fourteen definitions in
 * spec/tools.md §1 order with exactly their five keys, byte-identical on every
 * call, the tool lookup, per-guest tools, and the instructions (spec/tools.md §4).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "contract/contract.h"
#include "util/jsonx.h"

static const char *const names[TOOL_COUNT] = {
    "relay_search",         "relay_probe",           "relay_acquisition_capabilities",
    "relay_acquire",        "relay_stage",           "relay_script",
    "relay_image",          "relay_extract",         "relay_finish",
    "relay_release",        "relay_console_resolve", "relay_console_open",
    "relay_console_cancel", "relay_status",
};

static void test_definitions(void **state)
{
	(void)state;
	size_t len = 0, len2 = 0;
	const char *a = contract_tools_json(&len);
	const char *b = contract_tools_json(&len2);
	assert_ptr_equal(a, b);
	assert_int_equal(len, strlen(a));
	assert_null(memchr(a, '\n', len));
	json_object *tools = jsonx_parse(a, len, NULL, NULL, 0);
	assert_non_null(tools);
	/* The compact text (made without parsing, at startup) is exactly the
	 * project's own serialization of the definitions. */
	char *again = jsonx_to_string(tools, 0);
	assert_string_equal(again, a);
	free(again);
	char err[256];
	assert_int_equal(contract_load_schemas(err, sizeof err), 0);
	assert_int_equal(json_object_array_length(tools), TOOL_COUNT);
	for (int i = 0; i < TOOL_COUNT; i++) {
		json_object *t = json_object_array_get_idx(tools, (size_t)i);
		assert_string_equal(jsonx_get_str(t, "name"), names[i]);
		const char *keys[] = {"name", "title", "description", "inputSchema", "annotations"};
		int k = 0;
		json_object_object_foreach(t, key, value)
		{
			(void)value;
			assert_true(k < 5);
			assert_string_equal(key, keys[k++]);
		}
		assert_int_equal(k, 5);
		json_object *ann = jsonx_get_obj(t, "annotations");
		assert_string_equal(jsonx_get_str(ann, "title"), jsonx_get_str(t, "title"));
		json_object *schema = jsonx_get_obj(t, "inputSchema");
		assert_string_equal(jsonx_get_str(schema, "type"), "object");
		bool additional = true;
		assert_true(jsonx_get_bool(schema, "additionalProperties", &additional));
		assert_false(additional);
		json_object *guest = jsonx_get_obj(jsonx_get_obj(schema, "properties"), "guest");
		json_object *required = jsonx_get_array(schema, "required");
		bool guest_required = false;
		for (size_t r = 0; required && r < json_object_array_length(required); r++)
			if (strcmp(json_object_get_string(json_object_array_get_idx(required, r)), "guest") ==
			    0)
				guest_required = true;
		assert_int_equal(guest_required, contract_tool_is_per_guest((relay_tool)i) != 0);
		if (i == TOOL_PROBE)
			assert_non_null(guest);
	}
	json_object_put(tools);
}

static void test_lookup(void **state)
{
	(void)state;
	for (int i = 0; i < TOOL_COUNT; i++) {
		assert_int_equal(contract_tool_lookup(names[i]), i);
		assert_string_equal(contract_tool_name((relay_tool)i), names[i]);
	}
	assert_int_equal(contract_tool_lookup("relay_nope"), -1);
	assert_int_equal(contract_tool_lookup("RELAY_STATUS"), -1);
	assert_int_equal(contract_tool_lookup("relay_status "), -1);
	assert_int_equal(contract_tool_lookup(""), -1);
	assert_int_equal(contract_tool_lookup(NULL), -1);
}

static void test_instructions(void **state)
{
	(void)state;
	const char *text = contract_instructions();
	const char lead[] = "mcp-relay gives you fresh, dedicated machines (guests) and records";
	assert_true(strncmp(text, lead, sizeof lead - 1) == 0);
	for (int i = 0; i < TOOL_COUNT; i++)
		assert_non_null(strstr(text, names[i]));
	/* Paragraphs are separated by two newlines; no line breaks inside one. */
	for (const char *c = strchr(text, '\n'); c; c = strchr(c + 2, '\n')) {
		assert_int_equal(c[1], '\n');
		assert_int_not_equal(c[2], '\n');
	}
	assert_non_null(strstr(text, "2000 lines and 50 KiB"));
	size_t len = strlen(text);
	/* Claude Code keeps 2,048 characters of server instructions (spec/tools.md §4). */
	assert_true(len > 1500 && len <= 2048);
	assert_int_not_equal(text[len - 1], '\n');
}

static int setup(void **state)
{
	(void)state;
	char err[256];
	return contract_init(err, sizeof err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_definitions),
	    cmocka_unit_test(test_lookup),
	    cmocka_unit_test(test_instructions),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
