/* The tools' semantic input rules (spec/tools.md §3), checked after the schema. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/schema.h"
#include "util/jsonx.h"

#define INLINE_CODE_MAX_BYTES       1048576
#define DIAGNOSTIC_SCRIPT_MAX_BYTES 98304

/* A relative guest path: not absolute, no NUL, no backslash, no empty, "."
 * or ".." segment. Returns the broken rule or NULL. */
static const char *relative_path_problem(const char *path, size_t len)
{
	if (len == 0)
		return "must not be empty";
	if (memchr(path, '\0', len))
		return "must not contain a NUL byte";
	if (path[0] == '/')
		return "must be relative (no leading slash)";
	if (memchr(path, '\\', len))
		return "must not contain a backslash";
	const char *segment = path;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && path[i] != '/')
			continue;
		size_t seg_len = (size_t)(path + i - segment);
		if (seg_len == 0)
			return "must not contain an empty segment";
		if (seg_len == 1 && segment[0] == '.')
			return "must not contain a . segment";
		if (seg_len == 2 && segment[0] == '.' && segment[1] == '.')
			return "must not contain a .. segment";
		segment = path + i + 1;
	}
	return NULL;
}

static char *check_probe(const json_object *args)
{
	const char *scope = jsonx_get_str(args, "scope");
	bool has_guest = jsonx_has(args, "guest");
	if (scope && strcmp(scope, "guest") == 0 && !has_guest)
		return schema_problem("/guest", "is required with scope guest");
	if (has_guest && (scope == NULL || strcmp(scope, "host") == 0))
		return schema_problem("/guest", "is only allowed with scope guest");
	return NULL;
}

static char *check_acquire(const json_object *args)
{
	json_object *extractions = jsonx_get_array(args, "extractions");
	size_t n = extractions ? json_object_array_length(extractions) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *item = json_object_array_get_idx(extractions, i);
		json_object *path_obj = NULL;
		json_object_object_get_ex(item, "path", &path_obj);
		const char *path = json_object_get_string(path_obj);
		const char *why = relative_path_problem(path, (size_t)json_object_get_string_len(path_obj));
		char pointer[64];
		if (why) {
			snprintf(pointer, sizeof pointer, "/extractions/%zu/path", i);
			return schema_problem(pointer, "%s: it must stay strictly inside the workspace", why);
		}
		const char *name = jsonx_get_str(item, "name");
		snprintf(pointer, sizeof pointer, "/extractions/%zu/name", i);
		if (strcmp(name, "full-workspace") == 0)
			return schema_problem(pointer, "full-workspace is reserved; use fullWorkspace: true");
		for (size_t j = 0; j < i; j++)
			if (strcmp(name, jsonx_get_str(json_object_array_get_idx(extractions, j), "name")) ==
			    0)
				return schema_problem(
				    pointer, "repeats the name %s; output names must be unique", name);
	}
	return NULL;
}

static char *check_stage(const json_object *args)
{
	json_object *files = jsonx_get_array(args, "files");
	size_t n = files ? json_object_array_length(files) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *path_obj = NULL;
		json_object_object_get_ex(json_object_array_get_idx(files, i), "path", &path_obj);
		const char *why = relative_path_problem(json_object_get_string(path_obj),
		                                        (size_t)json_object_get_string_len(path_obj));
		if (why) {
			char pointer[64];
			snprintf(pointer, sizeof pointer, "/files/%zu/path", i);
			return schema_problem(pointer, "%s: it is relative to the guest's support/ folder",
			                      why);
		}
	}
	return NULL;
}

static char *check_script(const json_object *args)
{
	bool is_inline = false, diagnostic = false;
	jsonx_get_bool(args, "inline", &is_inline);
	jsonx_get_bool(args, "diagnostic", &diagnostic);
	bool has_code = jsonx_has(args, "code"), has_path = jsonx_has(args, "localPath");
	if (is_inline && !has_code)
		return schema_problem("/code", "is required with inline: true");
	if (is_inline && has_path)
		return schema_problem("/localPath",
		                      "is not allowed with inline: true; send the script text in code");
	if (!is_inline && !has_path)
		return schema_problem("/localPath", "is required with inline: false");
	if (!is_inline && has_code)
		return schema_problem("/code",
		                      "is not allowed with inline: false; send the file path in localPath");
	json_object *code = NULL;
	if (has_code && json_object_object_get_ex(args, "code", &code)) {
		size_t bytes = (size_t)json_object_get_string_len(code);
		if (bytes > INLINE_CODE_MAX_BYTES)
			return schema_problem("/code", "is %zu bytes of UTF-8; at most %d bytes are accepted",
			                      bytes, INLINE_CODE_MAX_BYTES);
		if (diagnostic && bytes > DIAGNOSTIC_SCRIPT_MAX_BYTES)
			return schema_problem(
			    "/code",
			    "is %zu bytes; a diagnostic script travels as one argument and may have at "
			    "most %d bytes",
			    bytes, DIAGNOSTIC_SCRIPT_MAX_BYTES);
	}
	if (diagnostic) {
		const char *language = jsonx_get_str(args, "language");
		if (strcmp(language, "shell") != 0)
			return schema_problem("/diagnostic", "is only allowed with language shell");
		if (jsonx_has(args, "snapshots"))
			return schema_problem(
			    "/snapshots", "is not allowed with diagnostic: true; a diagnostic run takes no "
			                  "snapshots and joins no group");
	}
	return NULL;
}

char *semantic_validate(relay_tool tool, const json_object *args)
{
	switch (tool) {
	case TOOL_PROBE: return check_probe(args);
	case TOOL_ACQUIRE: return check_acquire(args);
	case TOOL_STAGE: return check_stage(args);
	case TOOL_SCRIPT: return check_script(args);
	/* relay_image has no semantic rules: a path that escapes its
	 * declaration is the delivery status unsafe-path (spec/tools.md §3.7,
	 * spec/images.md §1.2, §3), answered by image_delivery.c. */
	default: return NULL;
	}
}
