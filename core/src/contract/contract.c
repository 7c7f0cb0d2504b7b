#include "contract/contract.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/schema.h"
#include "util/jsonx.h"

extern const char embed_tools_json[];
extern const unsigned long embed_tools_json_len;
extern const char embed_instructions_txt[];
extern const unsigned long embed_instructions_txt_len;

static const char *const tool_names[TOOL_COUNT] = {
    "relay_search",         "relay_probe",           "relay_acquisition_capabilities",
    "relay_acquire",        "relay_stage",           "relay_script",
    "relay_image",          "relay_extract",         "relay_finish",
    "relay_release",        "relay_console_resolve", "relay_console_open",
    "relay_console_cancel", "relay_status",
};

/* The compact definitions: written once by contract_init() before any
 * thread starts, then only read. */
static char *tools_json_compact;
static size_t tools_json_compact_len;

/* The parsed definitions and their schemas: built once, on the first
 * validation (pthread_once), then only read. Parsing and compiling the
 * patterns are kept out of startup: initialize and tools/list need only the
 * compact text. */
static pthread_once_t parse_once = PTHREAD_ONCE_INIT;
static json_object *tool_definitions;
static json_object *tool_schemas[TOOL_COUNT];
static char parse_error[256];

static void parse_definitions(void)
{
	char reason[128];
	json_object *defs = jsonx_parse(embed_tools_json, embed_tools_json_len, NULL, reason, sizeof reason);
	if (defs == NULL || !json_object_is_type(defs, json_type_array) ||
	    json_object_array_length(defs) != TOOL_COUNT) {
		snprintf(parse_error, sizeof parse_error, "embedded tool definitions are malformed: %s",
		         defs ? "not an array of 14" : reason);
		json_object_put(defs);
		return;
	}
	for (int i = 0; i < TOOL_COUNT; i++) {
		json_object *def = json_object_array_get_idx(defs, (size_t)i);
		const char *name = jsonx_get_str(def, "name");
		json_object *schema = jsonx_get_obj(def, "inputSchema");
		if (name == NULL || strcmp(name, tool_names[i]) != 0 || schema == NULL) {
			snprintf(parse_error, sizeof parse_error, "embedded tool definition %d is not %s", i,
			         tool_names[i]);
			json_object_put(defs);
			return;
		}
		if (schema_compile(schema, parse_error, sizeof parse_error) != 0) {
			json_object_put(defs);
			return;
		}
		tool_schemas[i] = schema;
	}
	tool_definitions = defs;
}

int contract_load_schemas(char *errbuf, size_t errlen)
{
	pthread_once(&parse_once, parse_definitions);
	if (tool_definitions != NULL)
		return 0;
	snprintf(errbuf, errlen, "%s",
	         parse_error[0] ? parse_error : "embedded tool definitions are unusable");
	return -1;
}

/* JSON text with the white space between tokens removed; strings are kept
 * exactly as written. malloc'd; NULL on allocation failure. */
static char *minify(const char *text, size_t len, size_t *len_out)
{
	char *out = malloc(len + 1);
	if (out == NULL)
		return NULL;
	size_t n = 0;
	bool in_string = false;
	for (size_t i = 0; i < len; i++) {
		char c = text[i];
		if (in_string) {
			out[n++] = c;
			if (c == '\\' && i + 1 < len)
				out[n++] = text[++i];
			else if (c == '"')
				in_string = false;
		} else if (c == '"') {
			in_string = true;
			out[n++] = c;
		} else if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
			out[n++] = c;
		}
	}
	out[n] = '\0';
	*len_out = n;
	return out;
}

int contract_init(char *errbuf, size_t errlen)
{
	if (tools_json_compact != NULL)
		return 0;
	tools_json_compact = minify(embed_tools_json, embed_tools_json_len, &tools_json_compact_len);
	if (tools_json_compact == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		return -1;
	}
	return 0;
}

const char *contract_tool_name(relay_tool tool)
{
	return (unsigned)tool < TOOL_COUNT ? tool_names[tool] : "unknown";
}

int contract_tool_lookup(const char *name)
{
	if (name == NULL || strncmp(name, "relay_", 6) != 0)
		return -1;
	for (int i = 0; i < TOOL_COUNT; i++)
		if (strcmp(name, tool_names[i]) == 0)
			return i;
	return -1;
}

int contract_tool_is_per_guest(relay_tool tool)
{
	switch (tool) {
	case TOOL_SEARCH:
	case TOOL_PROBE:
	case TOOL_ACQUISITION_CAPABILITIES:
	case TOOL_ACQUIRE:
	case TOOL_STATUS:
	case TOOL_COUNT: return 0;
	default: return 1;
	}
}

const char *contract_tools_json(size_t *len_out)
{
	if (len_out)
		*len_out = tools_json_compact_len;
	return tools_json_compact;
}

const char *contract_instructions(void)
{
	return embed_instructions_txt;
}

char *contract_validate(relay_tool tool, const json_object *args)
{
	if ((unsigned)tool >= TOOL_COUNT)
		return strdup("Invalid input: unknown tool");
	char why[256];
	if (contract_load_schemas(why, sizeof why) != 0) {
		size_t len = strlen(why) + 64;
		char *message = malloc(len);
		if (message)
			snprintf(message, len, "Invalid %s input: cannot be checked: %s", tool_names[tool],
			         why);
		return message;
	}
	char *problem = NULL;
	json_object *user_requested = NULL;
	if (tool == TOOL_CONSOLE_OPEN && json_object_object_get_ex(args, "userRequested", &user_requested) &&
	    !(json_object_is_type(user_requested, json_type_boolean) &&
	      json_object_get_boolean(user_requested)))
		problem = strdup("/userRequested must be true: opening requires an explicit user request");
	if (problem == NULL)
		problem = schema_validate(tool_schemas[tool], args, tool_names[tool]);
	if (problem == NULL)
		problem = semantic_validate(tool, args);
	if (problem == NULL)
		return NULL;
	size_t len = strlen(problem) + strlen(tool_names[tool]) + 32;
	char *message = malloc(len);
	if (message)
		snprintf(message, len, "Invalid %s input: %s", tool_names[tool], problem);
	free(problem);
	return message;
}
