/*
 * contract/schema.h — the JSON Schema subset the tool definitions use
 * (type, properties, required, additionalProperties: false, enum, const,
 * pattern, minLength, maxLength, minimum, maximum, minItems, maxItems,
 * uniqueItems, items, anyOf), and the tools' semantic rules.
 *
 * Problems are reported as "<JSON pointer> <what is wrong>", malloc'd.
 */
#ifndef RELAY_CONTRACT_SCHEMA_H
#define RELAY_CONTRACT_SCHEMA_H

#include <json-c/json.h>
#include <stddef.h>

#include "contract/contract.h"

/* Compiles every pattern of `schema` (kept referenced by the caller for the
 * life of the process). 0, or -1 with a reason. Call before threads start. */
int schema_compile(json_object *schema, char *errbuf, size_t errlen);

/* A refusal of the arguments: the JSON pointer of the value ("/" for the
 * whole arguments), a space, then the formatted rule it breaks; malloc'd,
 * NULL when out of memory. */
char *schema_problem(const char *pointer, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* NULL when `value` satisfies `schema`, else the first problem (malloc'd).
 * `tool_name` names the tool in "is not a field of <tool>". */
char *schema_validate(const json_object *schema, const json_object *value, const char *tool_name);

/* NULL when the semantic rules of spec/tools.md §3 for `tool` hold (args already
 * schema-valid), else the first problem (malloc'd). */
char *semantic_validate(relay_tool tool, const json_object *args);

#endif
