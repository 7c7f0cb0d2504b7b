#include "mcp/render.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"

#define REDUCED_STRING_MAX_BYTES 4096
#define REDUCED_ARRAY_MAX_ITEMS 50

/* Set once at startup before threads run; read-only afterwards. */
static char *fallback_spill_dir;

void render_set_fallback_spill_dir(const char *dir)
{
	free(fallback_spill_dir);
	fallback_spill_dir = dir ? strdup(dir) : NULL;
}

void render_modern_fields(strbuf *sb)
{
	strbuf_puts(sb, ",\"resultType\":\"complete\",\"_meta\":{\"io.modelcontextprotocol/serverInfo\":"
			"{\"name\":\"relay\",\"version\":\"" RELAY_VERSION "\"}}");
}

/* A folder we may write spill files into: a real directory owned by us. */
static bool usable_spill_dir(const char *dir)
{
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return false;
	struct stat st;
	return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

/* Writes the complete structuredContent to a new spill file; returns its
 * path (malloc'd) or NULL. */
static char *write_spill(const json_object *structured)
{
	char dir[4096];
	const char *tmp = getenv("TMPDIR");
	if (tmp == NULL || tmp[0] != '/' || !fs_is_dir(tmp))
		tmp = "/tmp";
	snprintf(dir, sizeof dir, "%s/mcp-relay-results", tmp);
	if (!usable_spill_dir(dir)) {
		if (fallback_spill_dir == NULL || !usable_spill_dir(fallback_spill_dir)) {
			log_error("no usable folder for a spill file (%s, %s)", dir,
				  fallback_spill_dir ? fallback_spill_dir : "no session folder");
			return NULL;
		}
		snprintf(dir, sizeof dir, "%s", fallback_spill_dir);
	}
	char uuid[37];
	random_uuid(uuid);
	char *path = malloc(strlen(dir) + 48);
	if (path == NULL)
		return NULL;
	sprintf(path, "%s/%s.json", dir, uuid);
	strbuf sb = STRBUF_INIT;
	jsonx_write(&sb, structured, JSONX_PRETTY);
	strbuf_putc(&sb, '\n');
	relay_error err;
	if (!strbuf_ok(&sb) || fs_write_exclusive(path, sb.data, sb.len, 0600, &err) != RELAY_OK) {
		log_error("cannot write the spill file %s", path);
		free(path);
		path = NULL;
	}
	strbuf_free(&sb);
	return path;
}

/* A copy with long strings cut and long arrays shortened (tools.md §5.2). */
static json_object *reduce(const json_object *value)
{
	switch (json_object_get_type(value)) {
	case json_type_string: {
		const char *s = json_object_get_string((json_object *)value);
		size_t len = (size_t)json_object_get_string_len(value);
		if (len <= REDUCED_STRING_MAX_BYTES)
			return json_object_get((json_object *)value);
		size_t keep = utf8_cut(s, len, REDUCED_STRING_MAX_BYTES - 3);
		strbuf sb = STRBUF_INIT;
		strbuf_append(&sb, s, keep);
		strbuf_puts(&sb, "\xe2\x80\xa6");
		json_object *cut = json_object_new_string_len(strbuf_str(&sb), (int)sb.len);
		strbuf_free(&sb);
		return cut;
	}
	case json_type_array: {
		json_object *out = json_object_new_array();
		size_t n = json_object_array_length(value);
		for (size_t i = 0; i < n && i < REDUCED_ARRAY_MAX_ITEMS; i++)
			json_object_array_add(out, reduce(json_object_array_get_idx(value, i)));
		return out;
	}
	case json_type_object: {
		json_object *out = json_object_new_object();
		json_object_object_foreach((json_object *)value, key, child)
			json_object_object_add(out, key, reduce(child));
		return out;
	}
	default: return json_object_get((json_object *)value);
	}
}

static json_object *with_truncation_keys(const char *spill_path)
{
	json_object *out = json_object_new_object();
	jsonx_add_bool(out, "resultTruncated", true);
	jsonx_add_str(out, "fullResult", spill_path);
	return out;
}

static json_object *reduced_structured(const json_object *structured, const char *spill_path, bool minimal)
{
	json_object *out = with_truncation_keys(spill_path);
	json_object_object_foreach((json_object *)structured, key, child)
	{
		if (minimal) {
			enum json_type t = json_object_get_type(child);
			bool scalar = t == json_type_null || t == json_type_boolean || t == json_type_int ||
				      t == json_type_double || t == json_type_string;
			bool kept = strcmp(key, "guest") == 0 || strcmp(key, "error") == 0 ||
				    strcmp(key, "outcome") == 0 || strcmp(key, "imageDelivery") == 0;
			if (!scalar && !kept)
				continue;
		}
		json_object_object_add(out, key, reduce(child));
	}
	return out;
}

/* Appends the pretty JSON of structured without `omit` (a top-level key). */
static void write_text_body(strbuf *sb, const json_object *structured, const char *omit)
{
	if (omit == NULL || !json_object_object_get_ex(structured, omit, NULL)) {
		jsonx_write(sb, structured, JSONX_PRETTY);
		return;
	}
	json_object *copy = json_object_new_object();
	json_object_object_foreach((json_object *)structured, key, child)
		if (strcmp(key, omit) != 0)
			json_object_object_add(copy, key, json_object_get(child));
	jsonx_write(sb, copy, JSONX_PRETTY);
	json_object_put(copy);
}

void render_tool_result(strbuf *sb, const tool_result *result, bool modern)
{
	char *spill_path = NULL;
	bool spill_tried = false;

	/* The text block: headline, then the bounded pretty JSON. */
	strbuf body = STRBUF_INIT;
	write_text_body(&body, result->structured, result->text_omits_key);
	size_t keep = body.len, lines = 1;
	for (size_t i = 0; i < body.len; i++) {
		if (body.data[i] == '\n' && ++lines > RENDER_TEXT_MAX_LINES) {
			keep = i;
			break;
		}
	}
	if (keep > RENDER_TEXT_MAX_BYTES)
		keep = RENDER_TEXT_MAX_BYTES;
	keep = utf8_cut(strbuf_str(&body), body.len, keep);
	bool text_cut = keep < body.len;

	strbuf text = STRBUF_INIT;
	strbuf_puts(&text, result->headline ? result->headline : "");
	strbuf_putc(&text, '\n');
	strbuf_append(&text, strbuf_str(&body), keep);
	if (text_cut) {
		spill_path = write_spill(result->structured);
		spill_tried = true;
		strbuf_printf(&text, "\n[Truncated. Full result: %s]", spill_path ? spill_path : "(spill failed)");
	}
	strbuf_free(&body);

	strbuf_puts(sb, "{\"content\":[{\"type\":\"text\",\"text\":");
	jsonx_write_string(sb, strbuf_str(&text), text.len);
	strbuf_free(&text);
	strbuf_putc(sb, '}');
	if (result->image_base64) {
		strbuf_puts(sb, ",{\"type\":\"image\",\"data\":\"");
		strbuf_puts(sb, result->image_base64);
		strbuf_puts(sb, "\",\"mimeType\":");
		const char *mime = result->image_mime ? result->image_mime : "image/png";
		jsonx_write_string(sb, mime, strlen(mime));
		strbuf_putc(sb, '}');
	}
	strbuf_puts(sb, "],\"structuredContent\":");

	/* structuredContent: whole when it fits, else reduced, else minimal. */
	strbuf compact = STRBUF_INIT;
	jsonx_write(&compact, result->structured, 0);
	if (compact.len <= RENDER_TEXT_MAX_BYTES) {
		strbuf_append(sb, strbuf_str(&compact), compact.len);
	} else {
		if (!spill_tried)
			spill_path = write_spill(result->structured);
		const char *shown = spill_path ? spill_path : "(spill failed)";
		json_object *reduced = reduced_structured(result->structured, shown, false);
		strbuf_reset(&compact);
		jsonx_write(&compact, reduced, 0);
		json_object_put(reduced);
		if (compact.len > RENDER_TEXT_MAX_BYTES) {
			reduced = reduced_structured(result->structured, shown, true);
			strbuf_reset(&compact);
			jsonx_write(&compact, reduced, 0);
			json_object_put(reduced);
		}
		strbuf_append(sb, strbuf_str(&compact), compact.len);
	}
	strbuf_free(&compact);
	strbuf_puts(sb, result->is_error ? ",\"isError\":true" : ",\"isError\":false");
	if (modern)
		render_modern_fields(sb);
	strbuf_putc(sb, '}');
	free(spill_path);
}
