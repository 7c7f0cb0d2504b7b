/*
 * Tool arguments against the schemas and semantic rules (contract/):
 * the first byte picks one of the fourteen tools, the rest is the
 * arguments' JSON as the MCP layer parses it (mcp/wire.c).
 *
 * Invariants: a refusal is one line of valid UTF-8 starting with
 * "Invalid <tool> input: "; arguments that pass hold no string with a
 * U+0000 except script code (spec/lifecycle.md §12 rule 1: a NUL is refused,
 * never cut).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "contract/contract.h"
#include "mcp/wire.h"
#include "util/jsonx.h"

#include "fuzz.h"

/* Script code is passed whole (it may hold any byte). */
static bool is_code_field(const char *key)
{
	return key && strcmp(key, "code") == 0; /* relay_script.code */
}

static void check_no_nul(const json_object *value, const char *key, int depth)
{
	if (depth > 300)
		return;
	switch (json_object_get_type(value)) {
	case json_type_string: {
		const char *s = json_object_get_string((json_object *)value);
		size_t len = (size_t)json_object_get_string_len(value);
		if (memchr(s, '\0', len) != NULL && !is_code_field(key))
			fuzz_fail("a string with U+0000 passed validation (field %s)", key ? key : "(item)");
		break;
	}
	case json_type_array:
		for (size_t i = 0; i < json_object_array_length(value); i++)
			check_no_nul(json_object_array_get_idx(value, i), key, depth + 1);
		break;
	case json_type_object: {
		json_object_object_foreach((json_object *)value, k, v) check_no_nul(v, k, depth + 1);
		break;
	}
	default: break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	relay_tool tool = (relay_tool)(data[0] % TOOL_COUNT);
	json_object *args = NULL;
	bool is_null = false;
	if (wire_parse((const char *)data + 1, size - 1, &args, &is_null, NULL, 0) != WIRE_OK)
		return 0;
	if (!json_object_is_type(args, json_type_object)) {
		json_object_put(args);
		return 0;
	}
	char *problem = contract_validate(tool, args);
	if (problem) {
		char prefix[64];
		snprintf(prefix, sizeof prefix, "Invalid %s input: ", contract_tool_name(tool));
		if (strncmp(problem, prefix, strlen(prefix)) != 0)
			fuzz_fail("a refusal does not start with \"%s\": %s", prefix, problem);
		if (!utf8_valid(problem, strlen(problem)))
			fuzz_fail("a refusal is not valid UTF-8");
		if (strchr(problem, '\n') != NULL)
			fuzz_fail("a refusal spans lines: %s", problem);
		free(problem);
	} else {
		check_no_nul(args, NULL, 0);
	}
	json_object_put(args);
	return 0;
}
