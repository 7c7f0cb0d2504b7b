/*
 * contract/contract.h — the fourteen relay_* tools: their definitions
 * (embedded from tools.json, shipped byte for byte in tools/list), the
 * server instructions (instructions.txt), and input validation (schema, then
 * the tool's semantic rules of spec/tools.md §3).
 */
#ifndef RELAY_CONTRACT_CONTRACT_H
#define RELAY_CONTRACT_CONTRACT_H

#include <json-c/json.h>
#include <stddef.h>

/* In tools/list order (spec/tools.md §1). */
typedef enum relay_tool {
	TOOL_SEARCH = 0,
	TOOL_PROBE,
	TOOL_ACQUISITION_CAPABILITIES,
	TOOL_ACQUIRE,
	TOOL_STAGE,
	TOOL_SCRIPT,
	TOOL_IMAGE,
	TOOL_EXTRACT,
	TOOL_FINISH,
	TOOL_RELEASE,
	TOOL_CONSOLE_RESOLVE,
	TOOL_CONSOLE_OPEN,
	TOOL_CONSOLE_CANCEL,
	TOOL_STATUS,
	TOOL_COUNT
} relay_tool;

/* Prepares the compact definitions (tools/list, --schema). Call once before
 * threads start; returns 0, or -1 with a reason in errbuf. The schemas are
 * parsed and their patterns compiled on the first validation. */
int contract_init(char *errbuf, size_t errlen);

/* Parses the definitions and compiles their patterns now (once, thread-safe;
 * contract_validate does it itself). 0, or -1 with the reason in errbuf. */
int contract_load_schemas(char *errbuf, size_t errlen);

/* "relay_search", ...; static. */
const char *contract_tool_name(relay_tool tool);
/* The tool with that exact name, or -1. */
int contract_tool_lookup(const char *name);
/* True for tools whose input has a required `guest` (spec/tools.md §1). */
int contract_tool_is_per_guest(relay_tool tool);

/* The compact JSON array of the fourteen definitions, identical on every
 * call (tools/list and --schema); borrowed, *len_out its length. */
const char *contract_tools_json(size_t *len_out);
/* The server instructions (spec/tools.md §4); borrowed. */
const char *contract_instructions(void);

/* Validates `args` (an object; borrowed) against the tool's schema and then
 * its semantic rules. Returns NULL when valid, else a malloc'd message
 * "Invalid <tool> input: <JSON pointer> <what is wrong>" (free()). */
char *contract_validate(relay_tool tool, const json_object *args);

#endif
